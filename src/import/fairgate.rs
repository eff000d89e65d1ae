//! fairgate's own annotations (`fairgate.dev/…`): an Ingress names the
//! base policy's limits, concurrency policy and auth mode (`none`,
//! `required` or a method of the base's `auth.methods`) for its routes,
//! and gives its pools a `fair_share` (SPEC §12).
//! The names are checked where the policy is read, as the file's keys are
//! (a name the base policy lacks withholds the Ingress, not the others);
//! an annotation of ours we do not know withholds it here.

use super::annotations;
use super::emit::Node;
use super::manifests::Object;
use super::out::Auth;
use super::plan::Plan;
use super::{Refusal, Verdict};

/// The prefix of fairgate's own annotations.
pub const PREFIX: &str = "fairgate.dev";

/// Every annotation of ours (without the prefix).
pub const KEYS: &[&str] = &["auth", "concurrency", "fair-share", "limits"];

/// Reads fairgate's annotations into `plan`; one report line each.
pub fn read(ing: &Object, plan: &mut Plan, options: &super::Options) -> Vec<(String, Verdict)> {
    let base_methods = options.base_methods.as_ref();
    let mut lines = Vec::new();
    for (key, value) in annotations::of(ing, PREFIX) {
        let verdict = match key.as_str() {
            "limits" => {
                let names: Vec<String> = value
                    .split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(String::from)
                    .collect();
                // Only the base's: a limit another Ingress made is that
                // namespace's bucket, not one to spend.
                let theirs = names.iter().find(|n| not_base(&options.base_limits, n));
                match theirs {
                    Some(name) => refuse(
                        plan,
                        format!("limits {name:?}: the base policy's limits has no limit of this name"),
                    ),
                    None => {
                        plan.keys.limits.extend(names);
                        Verdict::Mapped("limits: the base policy's limits of these names".into())
                    }
                }
            }
            "concurrency" if not_base(&options.base_concurrency, value.trim()) => refuse(
                plan,
                format!(
                    "concurrency {:?}: the base policy's concurrency has no policy of this name",
                    value.trim()
                ),
            ),
            "concurrency" => {
                plan.keys.concurrency = Some(value.trim().to_string());
                Verdict::Mapped("concurrency: the base policy's policy of this name".into())
            }
            "auth" => match value.trim() {
                "none" => {
                    plan.keys.auth = Some(Auth::Off);
                    Verdict::Mapped("auth: none".into())
                }
                "required" => {
                    plan.keys.auth = Some(Auth::Required);
                    Verdict::Mapped("auth: required (the base policy's auth)".into())
                }
                // A method of the base policy's `auth.methods` (API keys
                // from a mounted Secret, an SSO whose identity map names
                // the tenant); the reader checks that the base has it.
                name if base_methods.is_some_and(|m| !m.contains(name)) => refuse(
                    plan,
                    format!("auth {name:?}: the base policy's auth.methods has no method of this name"),
                ),
                name if method_name_ok(name) => {
                    plan.keys.auth = Some(Auth::Method(name.to_string()));
                    Verdict::Mapped(format!("auth: {name} (the base policy's auth.methods.{name})"))
                }
                other => refuse(
                    plan,
                    format!("auth {other:?}: must be none, required or a name of the base policy's auth.methods"),
                ),
            },
            "fair-share" => match fair_share(&value) {
                Ok(node) => {
                    plan.fair_share = Some(node);
                    Verdict::Mapped("fair_share of its pools, as written".into())
                }
                Err(why) => refuse(plan, format!("fair-share: {why}")),
            },
            other => refuse(
                plan,
                format!("unknown annotation {PREFIX}/{other}: expected one of {KEYS:?}"),
            ),
        };
        lines.push((format!("{PREFIX}/{key}"), verdict));
    }
    lines
}

/// `fairgate.dev/fair-share`: a `fair_share` mapping as the policy writes
/// it (`{max_in_flight: 16, queue: {per_tenant: 8}}`), or a bare limit
/// (`16`, `adaptive`). Taken as a tree (never pasted as text), at most
/// three levels (`{queue: {per_tenant: 8}}` is two) and 32 keys; the
/// policy reader checks its keys and values as a file's.
fn fair_share(value: &str) -> Result<Node, Refusal> {
    let value = value.trim();
    if !value.starts_with('{') {
        return Ok(Node::map([("max_in_flight", scalar(value))]));
    }
    let tree = crate::config::yaml::load(value, |k| format!("{k} is given twice"))
        .map_err(|(_, why)| Refusal::from(why))?;
    let mut keys = 0;
    tree_node(&tree, 0, &mut keys)
}

fn scalar(text: &str) -> Node {
    match text.parse::<u64>() {
        Ok(n) => Node::Int(n),
        Err(_) => Node::str(text),
    }
}

/// `node` at `depth` mappings down (the top one is 1); `keys` counts the
/// keys so far.
fn tree_node(node: &marked_yaml::Node, depth: usize, keys: &mut usize) -> Result<Node, Refusal> {
    match node {
        marked_yaml::Node::Scalar(s) => Ok(scalar(s.as_str())),
        marked_yaml::Node::Mapping(_) if depth >= 3 => Err("more than three levels".into()),
        marked_yaml::Node::Mapping(m) => m
            .iter()
            .map(|(k, v)| {
                *keys += 1;
                if *keys > 32 {
                    return Err("more than 32 keys".into());
                }
                Ok((k.as_str().to_string(), tree_node(v, depth + 1, keys)?))
            })
            .collect::<Result<Vec<_>, Refusal>>()
            .map(Node::Map),
        marked_yaml::Node::Sequence(_) => Err("a list where a mapping or a value belongs".into()),
    }
}

/// Whether the base's names are known (controller mode) and lack `name`.
fn not_base(base: &Option<std::collections::BTreeSet<String>>, name: &str) -> bool {
    base.as_ref().is_some_and(|names| !names.contains(name))
}

fn method_name_ok(name: &str) -> bool {
    crate::config::name_ok(name)
}

fn refuse(plan: &mut Plan, why: String) -> Verdict {
    plan.withheld.get_or_insert_with(|| why.clone());
    Verdict::Unsupported(why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fair_share_values_are_trees_of_bounded_size() {
        let limit = |n: Node| Node::map([("max_in_flight", n)]);
        assert_eq!(fair_share(" 64 "), Ok(limit(Node::Int(64))));
        assert_eq!(fair_share("adaptive"), Ok(limit(Node::str("adaptive"))));
        let queue = Node::map([("per_tenant", Node::Int(8))]);
        let want = Node::map([("max_in_flight", Node::Int(16)), ("queue", queue)]);
        assert_eq!(
            fair_share("{max_in_flight: 16, queue: {per_tenant: 8}}"),
            Ok(want)
        );
        // Three levels of mappings are taken; a fourth is not.
        assert!(fair_share("{a: {b: {c: 1}}}").is_ok());
        let deep = fair_share("{a: {b: {c: {d: 1}}}}");
        assert_eq!(deep, Err("more than three levels".into()));
        let keys: Vec<String> = (0..33).map(|i| format!("k{i}: 1")).collect();
        assert!(fair_share(&format!("{{{}}}", keys[..32].join(", "))).is_ok());
        let many = fair_share(&format!("{{{}}}", keys.join(", ")));
        assert_eq!(many, Err("more than 32 keys".into()));
        assert!(fair_share("{a: [1, 2]}").is_err());
        assert!(fair_share("{a: &x 1, b: *x}").is_err());
    }
}
