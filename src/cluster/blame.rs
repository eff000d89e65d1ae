//! Which Ingress a problem of the merged policy came from. The imported
//! text's lines are numbered after the base file's, so a problem past the
//! base is in it; the route, pool, limit or concurrency policy it sits in
//! is found by the text's layout (`emit` writes every entry at a fixed
//! indent), and traced to the Ingresses whose routes are or use it.

use std::collections::BTreeMap;

use crate::config::Problems;
use crate::import::{self, Object};

/// The Ingresses to withhold, each with the reader's message; empty when
/// a problem is in the base, or cannot be traced (then nothing is built).
pub fn owners(
    padded: &str,
    base_lines: usize,
    problems: &Problems,
    served: &[&Object],
) -> BTreeMap<String, String> {
    let lines: Vec<&str> = padded.lines().collect();
    let routes = route_blocks(&lines);
    let mut out = BTreeMap::new();
    for problem in problems.errors() {
        if problem.line <= base_lines {
            return BTreeMap::new();
        }
        let Some((section, name)) = entry_at(&lines, problem.line - 1) else {
            return BTreeMap::new();
        };
        let why = format!("{}: {}", problem.code, problem.message);
        let blamed: Vec<&Object> = match section.as_str() {
            "routes" => served
                .iter()
                .copied()
                .filter(|o| owns_route(o, &name))
                .collect(),
            _ => routes
                .iter()
                .filter(|(_, text)| mentions(text, &name))
                .flat_map(|(route, _)| served.iter().copied().filter(|o| owns_route(o, route)))
                .collect(),
        };
        if blamed.is_empty() {
            return BTreeMap::new();
        }
        for o in blamed {
            out.entry(o.id()).or_insert_with(|| why.clone());
        }
    }
    out
}

/// The Ingresses whose routes use a pool, limit or concurrency policy the
/// base file already names: theirs would be the base's (an Ingress must
/// never reach a pool the operator kept for itself).
pub fn clashing(padded: &str, names: &[String], served: &[&Object]) -> BTreeMap<String, String> {
    let lines: Vec<&str> = padded.lines().collect();
    let mut out = BTreeMap::new();
    for (route, text) in route_blocks(&lines) {
        for name in names.iter().filter(|n| mentions(&text, n)) {
            for o in served.iter().filter(|o| owns_route(o, &route)) {
                let why = format!("kubernetes.name_taken: {name:?} is a name of the base policy");
                out.entry(o.id()).or_insert(why);
            }
        }
    }
    out
}

fn owns_route(o: &Object, route: &str) -> bool {
    let prefix = match o.kind.as_str() {
        "Ingress" => import::route_prefix(&o.namespace, &o.name),
        _ => super::gateway::route_prefix(o),
    };
    route
        .strip_prefix(&prefix)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
}

fn mentions(text: &str, name: &str) -> bool {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || "_-.".contains(c)))
        .any(|word| word == name)
}

/// The top-level section and entry a line is in: a route's name, or the
/// name of a pool, limit, concurrency policy or auth method (one level
/// deeper, under `auth.methods`).
fn entry_at(lines: &[&str], index: usize) -> Option<(String, String)> {
    let (mut entry, mut method) = (None, None);
    for line in lines[..=index.min(lines.len().checked_sub(1)?)]
        .iter()
        .rev()
    {
        if !line.starts_with(' ') && line.ends_with(':') {
            let section = line.trim_end_matches(':').to_string();
            let entry = if section == "auth" { method } else { entry };
            return entry.map(|e| (section, e));
        }
        if entry.is_none() {
            entry = route_name(line).or_else(|| pool_name(line));
        }
        if method.is_none() {
            method = line.strip_prefix("  ").and_then(pool_name);
        }
    }
    None
}

fn route_name(line: &str) -> Option<String> {
    let rest = line.strip_prefix("  - ")?;
    let rest = rest.trim_start_matches('{').trim_start();
    let value = rest.strip_prefix("name: ")?;
    let value = value.split([',', '}']).next()?.trim().trim_matches('"');
    Some(value.to_string())
}

fn pool_name(line: &str) -> Option<String> {
    let rest = line.strip_prefix("  ")?;
    if rest.starts_with(' ') || rest.starts_with('-') {
        return None;
    }
    let (name, _) = rest.split_once(':')?;
    Some(name.trim_matches('"').to_string())
}

/// Each route's name and its text.
fn route_blocks(lines: &[&str]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut in_routes = false;
    for line in lines {
        if !line.starts_with(' ') && !line.is_empty() {
            in_routes = *line == "routes:";
            continue;
        }
        if !in_routes {
            continue;
        }
        match route_name(line) {
            Some(name) => out.push((name, line.to_string())),
            None => {
                if let Some((_, text)) = out.last_mut() {
                    text.push('\n');
                    text.push_str(line);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_in_an_auth_method_is_traced_to_the_method() {
        let text = "auth:\n  methods:\n    apps_private-auth:\n      basic:\n        htpasswd: \"x\"\n\
                    upstreams: {apps_web-80: {targets: [\"a:1\"]}}\n\
                    routes:\n  - name: apps_private-0\n    match: {host: p.example}\n    auth: apps_private-auth\n";
        let lines: Vec<&str> = text.lines().collect();
        let at = |i| entry_at(&lines, i);
        assert_eq!(at(4), Some(("auth".into(), "apps_private-auth".into())));
        assert_eq!(at(2), Some(("auth".into(), "apps_private-auth".into())));
        assert_eq!(at(1), None);
        assert_eq!(at(9), Some(("routes".into(), "apps_private-0".into())));
        let routes = route_blocks(&lines);
        assert!(mentions(&routes[0].1, "apps_private-auth"));
    }
}
