//! An Ingress's paths as routes: which paths it has (rules and
//! defaultBackend), how each is matched (Exact, Prefix, or ingress-nginx's
//! case-insensitive `~*` regex location on a host where any Ingress uses
//! `use-regex` or a path-changing `rewrite-target`), its rewrite (`$N` as
//! named groups), and the keys of its Ingress's plan.

use serde_json::Value;

use super::annotations;
use super::backend::Served;
use super::draft::Draft;
use super::headers;
use super::manifests::{text, At, Object};
use super::nginx;
use super::out::{Auth, Rewrite};
use super::plan::Plan;
use super::routes::{PathRule, Route};
use super::units;
use super::{Refusal, Verdict};

/// A rule's host, lowercased. `host: ""` is a rule for any host, as if it
/// were absent (the API's `omitempty`, and how ingress-nginx reads it).
pub fn rule_host(rule: &Value) -> Option<String> {
    let host = text(rule, &["host"]).filter(|h| !h.is_empty())?;
    Some(host.to_ascii_lowercase())
}

/// Every rule path of an Ingress as (host, path, pathType, backend), and
/// its defaultBackend as a catch-all (path "", pathType `routes::DEFAULT_BACKEND`).
pub fn of(ing: &Object) -> Vec<(Option<String>, String, String, &Value)> {
    static NONE: Value = Value::Null;
    let mut out = Vec::new();
    if let Some(Value::Array(rules)) = ing.value.at("/spec/rules") {
        for rule in rules {
            let host = rule_host(rule);
            let Some(Value::Array(items)) = rule.at("/http/paths") else {
                continue;
            };
            for p in items {
                let path = text(p, &["path"]).unwrap_or_else(|| "/".into());
                let kind =
                    text(p, &["pathType"]).unwrap_or_else(|| "ImplementationSpecific".into());
                let backend = p.get("backend").unwrap_or(&NONE);
                out.push((host.clone(), path, kind, backend));
            }
        }
    }
    // An Ingress's defaultBackend serves the unmatched paths of its own
    // hosts; only an Ingress without rules (or a rule without a host)
    // makes it a catch-all.
    if let Some(backend) = ing.value.at("/spec/defaultBackend") {
        let mut hosts: Vec<Option<String>> = Vec::new();
        for (host, ..) in &out {
            if !hosts.contains(host) {
                hosts.push(host.clone());
            }
        }
        if hosts.is_empty() {
            hosts.push(None);
        }
        for host in hosts {
            out.push((
                host,
                String::new(),
                super::routes::DEFAULT_BACKEND.into(),
                backend,
            ));
        }
    }
    out
}

/// The hosts where an Ingress makes ingress-nginx read every path as a
/// regular expression (its `enforceRegexModifier`): all of them with
/// `use-regex`, those of the paths a `rewrite-target` changes.
pub fn regex_triggers(draft: &Draft<'_>, ing: &Object) -> Vec<(Option<String>, &'static str)> {
    let prefix = &draft.options.annotation_prefix;
    let use_regex = annotations::get(ing, prefix, "use-regex").is_some_and(|v| units::go_bool(&v));
    let target = annotations::get(ing, prefix, "rewrite-target").filter(|t| !t.is_empty());
    let mut out = Vec::new();
    if !use_regex && target.is_none() {
        return out;
    }
    for (host, path, path_type, _) in of(ing) {
        let why = match () {
            _ if path_type == super::routes::DEFAULT_BACKEND => continue,
            _ if use_regex => "use-regex",
            _ if target.as_ref().is_some_and(|t| *t != path) => "rewrite-target",
            _ => continue,
        };
        if !out.iter().any(|(h, _)| *h == host) {
            out.push((host, why));
        }
    }
    out
}

/// Says, once per host, that this Ingress's paths there are regular
/// expressions because another Ingress of the host made them so.
pub fn regex_lines(draft: &mut Draft<'_>, ing: &Object) {
    let own: Vec<Option<String>> = regex_triggers(draft, ing)
        .into_iter()
        .map(|(h, _)| h)
        .collect();
    let mut said: Vec<Option<String>> = Vec::new();
    for (host, _, path_type, _) in of(ing) {
        if path_type == super::routes::DEFAULT_BACKEND
            || own.contains(&host)
            || said.contains(&host)
        {
            continue;
        }
        let Some((by, annotation)) = draft.regex_hosts.get(&host).cloned() else {
            continue;
        };
        let why = format!(
            "{}: every path is a path_regex \"(?i)PATH.*\", case-insensitive and matched from the start \
             as a prefix, Exact and Prefix alike, because {by} uses {annotation} there: ingress-nginx makes \
             every path of such a host a ~* location, tried longest path first",
            host.as_deref().map_or("rules without a host".to_string(), |h| format!("host {h}"))
        );
        draft.line(&ing.id(), "paths", Verdict::Mapped(why));
        said.push(host);
    }
}

/// The route of one Ingress path, with the plan's keys.
#[allow(clippy::too_many_arguments)]
pub fn route(
    draft: &mut Draft<'_>,
    ing: &Object,
    plan: &mut Plan,
    name: String,
    host: Option<String>,
    path: String,
    kind: String,
    served: Served,
) -> Option<Route> {
    let id = ing.id();
    let regex = draft.regex_hosts.contains_key(&host);
    let (rule, groups) = match path_rule(draft, &id, plan, &path, &kind, regex) {
        Ok(found) => found,
        Err(why) => {
            // One path, not the Ingress: its item names the path.
            let why = format!("{why}; the path is not imported");
            draft.line(&id, &format!("path {path}"), Verdict::Unsupported(why));
            return None;
        }
    };
    let mut keys = plan.keys.clone();
    let mut rewrite = Rewrite::default();
    // ingress-nginx rewrites only where the target differs from the path.
    if let Some(target) = plan.rewrite_target.as_ref().filter(|t| **t != path) {
        match rewrite_template(target, &groups) {
            Ok(t) => rewrite.path = Some(t),
            Err(why) => {
                let why = format!("path {path}: {why}; the path is not imported");
                let item = format!("{}/rewrite-target", draft.options.annotation_prefix);
                draft.line(&id, &item, Verdict::Unsupported(why));
                return None;
            }
        }
    }
    if let Some(vhost) = &plan.vhost {
        rewrite.host = Some(vhost.clone());
    }
    if rewrite != Rewrite::default() {
        keys.rewrite = Some(rewrite);
    }
    if keys.redirect.is_some() {
        keys.rewrite = None;
        keys.max_body = None;
    } else {
        match served {
            Served::Pool(pool) => keys.upstream = Some(pool),
            Served::Unavailable => keys.direct = Some(503),
        }
    }
    keys.auth.get_or_insert(Auth::Off);
    let tls = host.as_deref().is_some_and(|h| draft.covered(h));
    if let Some(value) = draft.globals.hsts.value().filter(|_| tls) {
        if keys.redirect.is_none() {
            headers::hsts(&mut keys, &value);
        }
    }
    let https =
        plan.force_ssl_redirect || (tls && plan.ssl_redirect.unwrap_or(draft.globals.ssl_redirect));
    if https {
        keys.https_redirect = true;
    }
    let rank = if kind == super::routes::DEFAULT_BACKEND {
        2
    } else {
        1
    };
    Some(Route {
        name,
        ingress: id,
        origin: (host.clone().unwrap_or_default(), path, kind),
        host,
        path: rule,
        headers: None,
        keys,
        rank,
        regex,
    })
}

/// How a path is matched, and its regex groups' names (for `$N`). On a
/// host where ingress-nginx enforces regular expressions, every path is
/// its `~* "^PATH"` location: case-insensitive, from the start, and a
/// prefix whatever its pathType (an Exact one too).
fn path_rule(
    draft: &mut Draft<'_>,
    id: &str,
    plan: &mut Plan,
    path: &str,
    kind: &str,
    regex: bool,
) -> Result<(PathRule, Vec<String>), Refusal> {
    let rule = match kind {
        super::routes::DEFAULT_BACKEND => PathRule::Any,
        _ if regex => {
            let (re, names) = named_groups(path);
            // A top-level `|` would leave the alternatives after the first
            // unanchored in nginx and unbounded here: grouped.
            let re = match top_level_alternation(&re) {
                true => format!("(?:{re})"),
                false => re,
            };
            let re = format!("(?i){re}.*");
            regex::RegexBuilder::new(&format!("^(?:{re})$"))
                .size_limit(1 << 20)
                .build()
                .map_err(|e| {
                    let why = e
                        .to_string()
                        .lines()
                        .last()
                        .unwrap_or("")
                        .trim()
                        .to_string();
                    Refusal::from(format!("not a regular expression fairgate reads ({why})"))
                })?;
            return Ok((PathRule::Regex(re), names));
        }
        "Exact" if !path.contains(['{', '}']) => PathRule::Exact(path.to_string()),
        "Exact" => PathRule::Regex(regex_escape(path)),
        "Prefix" => PathRule::Prefix(path.to_string()),
        _ => {
            if !plan.loose_prefix_reported {
                plan.loose_prefix_reported = true;
                let why = "read as a Prefix path: whole segments match (/foo no longer matches /foobar); use use-regex for more";
                draft.line(
                    id,
                    "pathType ImplementationSpecific",
                    Verdict::Approximated(why.into()),
                );
            }
            PathRule::Prefix(path.to_string())
        }
    };
    Ok((rule, Vec::new()))
}

/// Whether a regular expression has a `|` outside every group and class.
fn top_level_alternation(re: &str) -> bool {
    let (mut depth, mut class, mut escaped) = (0usize, false, false);
    for c in re.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '[' if !class => class = true,
            ']' if class => class = false,
            '(' if !class => depth += 1,
            ')' if !class => depth = depth.saturating_sub(1),
            '|' if !class && depth == 0 => return true,
            _ => {}
        }
    }
    false
}

/// Numbered groups named `gN` (named ones keep their names), so `$N` in a
/// rewrite can name them; the names, in group order.
fn named_groups(re: &str) -> (String, Vec<String>) {
    let chars: Vec<char> = re.chars().collect();
    let (mut out, mut names) = (String::new(), Vec::new());
    let (mut i, mut class) = (0, false);
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' => {
                out.push(c);
                if let Some(n) = chars.get(i + 1) {
                    out.push(*n);
                }
                i += 2;
                continue;
            }
            '[' if !class => class = true,
            ']' if class => class = false,
            '(' if !class => {
                let rest: String = chars[i + 1..].iter().collect();
                let named = rest.strip_prefix("?P<").or_else(|| {
                    rest.strip_prefix("?<")
                        .filter(|r| !r.starts_with(['=', '!']))
                });
                if let Some(name) = named
                    .and_then(|r| r.split_once('>'))
                    .map(|(n, _)| n.to_string())
                {
                    names.push(name);
                } else if !rest.starts_with('?') {
                    let name = format!("g{}", names.len() + 1);
                    out.push_str(&format!("(?<{name}>"));
                    names.push(name);
                    i += 1;
                    continue;
                }
            }
            _ => {}
        }
        out.push(c);
        i += 1;
    }
    (out, names)
}

/// `/$2` with the path's groups as `/{g2}`.
fn rewrite_template(target: &str, groups: &[String]) -> Result<String, Refusal> {
    let mut out = String::new();
    let mut rest = target;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = rest[i + 1..].trim_start_matches('{');
        let digits = after
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(after.len());
        if digits == 0 {
            let end = after
                .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                .unwrap_or(after.len());
            let var = nginx::variables(&format!("${}", &after[..end]));
            out.push_str(&var.map_err(Refusal::of)?);
            rest = &after[end..];
            continue;
        }
        let n: usize = after[..digits].parse().unwrap_or(0);
        let name = groups
            .get(n.wrapping_sub(1))
            .ok_or_else(|| Refusal::from(format!("${n} names no group of the path")))?;
        out.push_str(&format!("{{{name}}}"));
        rest = after[digits..].trim_start_matches('}');
    }
    out.push_str(rest);
    if !out.starts_with('/') {
        return Err("the target does not start with /".into());
    }
    Ok(out)
}

fn regex_escape(path: &str) -> String {
    path.chars()
        .map(|c| match c {
            '\\' | '.' | '+' | '*' | '?' | '(' | ')' | '|' | '[' | ']' | '{' | '}' | '^' | '$' => {
                format!("\\{c}")
            }
            c => c.to_string(),
        })
        .collect()
}

/// What one Ingress's regular expressions may take compiled, and one
/// namespace's Ingresses together: past it the Ingress is withheld (every
/// build compiles them, every request to their hosts runs them).
pub const REGEX_BYTES_PER_INGRESS: usize = 4 << 20;
pub const REGEX_BYTES_PER_NAMESPACE: usize = 16 << 20;

/// Why the regular expressions of `ing`'s routes (from `first` on) cost
/// too much, counted against its namespace when they do not.
pub fn regex_cost(draft: &mut Draft<'_>, ing: &Object, first: usize) -> Option<String> {
    // Counted until past the bound: the rest need not be compiled.
    let mut bytes = 0;
    let regexes = draft.routes[first..].iter().filter_map(|r| match &r.path {
        PathRule::Regex(re) => Some(re),
        _ => None,
    });
    for re in regexes {
        bytes += compiled_bytes(re);
        if bytes > REGEX_BYTES_PER_INGRESS {
            break;
        }
    }
    let spent = draft.regex_bytes.entry(ing.namespace.clone()).or_default();
    let kib = |n: usize| n >> 10;
    if bytes > REGEX_BYTES_PER_INGRESS {
        return Some(format!(
            "its regular expressions take {} KiB compiled; an Ingress may take {} KiB",
            kib(bytes),
            kib(REGEX_BYTES_PER_INGRESS)
        ));
    }
    if *spent + bytes > REGEX_BYTES_PER_NAMESPACE {
        return Some(format!(
            "namespace {}'s regular expressions would take more than {} KiB compiled",
            ing.namespace,
            kib(REGEX_BYTES_PER_NAMESPACE)
        ));
    }
    *spent += bytes;
    None
}

/// What `pattern` takes compiled as the policy reader compiles it
/// (anchored); what does not compile costs the reader's limit.
fn compiled_bytes(pattern: &str) -> usize {
    let anchored = format!(
        "^(?:{})$",
        pattern.trim_start_matches('^').trim_end_matches('$')
    );
    regex_automata::meta::Regex::new(&anchored).map_or(1 << 20, |re| re.memory_usage())
}

/// The hosts of an Ingress's rules that are DNS names (not wildcards,
/// nor what the API server would refuse).
pub fn rule_hosts(ing: &Object) -> Vec<String> {
    let hosts = of(ing).into_iter().filter_map(|(host, ..)| host);
    hosts
        .filter(|h| super::names::dns1123_subdomain(h))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_groups_get_names_and_rewrites_use_them() {
        let (re, names) = named_groups(r"/api(/|$)(?:v1)(?P<rest>.*)[(]\(x\)");
        assert_eq!(re, r"/api(?<g1>/|$)(?:v1)(?P<rest>.*)[(]\(x\)");
        assert_eq!(names, ["g1", "rest"]);
        assert_eq!(rewrite_template("/$2", &names).as_deref(), Ok("/{rest}"));
        assert_eq!(
            rewrite_template("/x/${1}y", &names).as_deref(),
            Ok("/x/{g1}y")
        );
        assert!(rewrite_template("/$3", &names).is_err());
        assert!(rewrite_template("$1", &names).is_err());
    }

    #[test]
    fn only_a_bar_outside_groups_and_classes_is_an_alternation() {
        assert!(top_level_alternation("/a|/b"));
        for re in [r"/a(/|$)", r"/a[|]", r"/a\|b", "/a"] {
            assert!(!top_level_alternation(re), "{re}");
        }
    }
}
