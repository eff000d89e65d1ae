//! A rule's filters as route keys: header edits both ways, redirects,
//! rewrites, a request mirror (resolved with the rule's backends), and `ExtensionRef`s to fairgate's RoutePolicy (whose names
//! must be the base policy file's own). A filter or value fairgate cannot
//! serve makes the route `Accepted: False` (`UnsupportedValue`).

use super::context::{Action, Context, Translated};
use super::spec::{Filter, HeaderModifier};
use crate::import::Node;
use crate::k8s::{Kind, Reason, POLICY_GROUP};

/// Applies one filter; false when it cannot be served (the rule then
/// answers 500).
pub(super) fn filter(f: &Filter, cx: &Context<'_>, act: &mut Action, out: &mut Translated) -> bool {
    let literal = |s: &str| !s.contains(['{', '}']);
    match f.kind.as_str() {
        "RequestHeaderModifier" | "ResponseHeaderModifier" => {
            let (key, m) = match f.kind.as_str() {
                "RequestHeaderModifier" => ("request_headers", f.request_header_modifier.as_ref()),
                _ => ("response_headers", f.response_header_modifier.as_ref()),
            };
            let Some(m) = m else {
                return bad(out, "a header modifier filter without its settings");
            };
            if m.set.iter().chain(&m.add).any(|nv| !literal(&nv.value)) {
                return bad(out, "header values with { or } are not served");
            }
            act.fields.push((key.into(), header_edits(m)));
            true
        }
        "RequestRedirect" => {
            let Some(r) = f.request_redirect.clone() else {
                return bad(out, "RequestRedirect without its settings");
            };
            let code = r.status_code.unwrap_or(302);
            if ![301, 302, 307, 308].contains(&code) {
                return bad(
                    out,
                    &format!("redirect status {code} is not served (301, 302, 307, 308 are)"),
                );
            }
            if r.scheme
                .as_deref()
                .is_some_and(|s| s != "http" && s != "https")
            {
                return bad(out, "a redirect's scheme is http or https");
            }
            let texts = [
                r.hostname.as_deref(),
                r.path.as_ref().and_then(|p| p.replace_full_path.as_deref()),
                r.path
                    .as_ref()
                    .and_then(|p| p.replace_prefix_match.as_deref()),
            ];
            if texts.iter().flatten().any(|t| !literal(t)) {
                return bad(out, "redirect values with { or } are not served");
            }
            act.redirect = Some((r, code));
            true
        }
        "URLRewrite" => {
            let Some(r) = f.url_rewrite.clone() else {
                return bad(out, "URLRewrite without its settings");
            };
            let texts = [
                r.path.as_ref().and_then(|p| p.replace_full_path.as_deref()),
                r.path
                    .as_ref()
                    .and_then(|p| p.replace_prefix_match.as_deref()),
            ];
            if texts
                .iter()
                .flatten()
                .any(|t| !literal(t) || !t.starts_with('/'))
            {
                return bad(out, "rewrite paths start with / and hold no { or }");
            }
            act.rewrite = Some(r);
            true
        }
        "RequestMirror" => mirror(f, act, out),
        "ExtensionRef" => extension(f, cx, act, out),
        other => bad(out, &format!("filter {other} is not served")),
    }
}

/// A `RequestMirror` of every request, one a rule: its backend is
/// resolved with the rule's.
fn mirror(f: &Filter, act: &mut Action, out: &mut Translated) -> bool {
    let Some(m) = f.request_mirror.as_ref() else {
        return bad(out, "RequestMirror without its settings");
    };
    let fraction = |f: &serde_json::Value| {
        let denominator = f.get("denominator").and_then(|d| d.as_u64()).unwrap_or(100);
        f.get("numerator").and_then(|n| n.as_u64()) >= Some(denominator)
    };
    let all = m.percent.is_none_or(|p| p >= 100) && m.fraction.as_ref().is_none_or(fraction);
    if !all {
        return bad(out, "a RequestMirror of a share of requests is not served");
    }
    if act.mirror.is_some() {
        return bad(out, "one RequestMirror a rule is served");
    }
    act.mirror = Some(m.backend_ref.clone());
    true
}

fn bad(out: &mut Translated, why: &str) -> bool {
    out.unsupported(why.to_string());
    false
}

fn header_edits(m: &HeaderModifier) -> Node {
    let pairs = |list: &[super::spec::NameValue]| {
        Node::Map(
            list.iter()
                .map(|nv| (nv.name.clone(), Node::str(nv.value.clone())))
                .collect(),
        )
    };
    let mut fields = Vec::new();
    if !m.remove.is_empty() {
        fields.push(("remove".to_string(), Node::strs(m.remove.clone())));
    }
    if !m.set.is_empty() {
        fields.push(("set".into(), pairs(&m.set)));
    }
    if !m.add.is_empty() {
        fields.push(("add".into(), pairs(&m.add)));
    }
    Node::Map(fields)
}

/// An `ExtensionRef` to a fairgate `RoutePolicy` of the route's
/// namespace: its limits, concurrency policy, auth and exemption.
fn extension(f: &Filter, cx: &Context<'_>, act: &mut Action, out: &mut Translated) -> bool {
    let Some(r) = f.extension_ref.as_ref() else {
        return bad(out, "ExtensionRef without its reference");
    };
    let is_ours = r.group.as_deref() == Some(POLICY_GROUP)
        && r.kind.as_deref() == Some(Kind::RoutePolicy.name());
    if !is_ours {
        out.unresolved(
            Reason::InvalidKind,
            format!(
                "ExtensionRef to {}/{} is not served",
                r.group.clone().unwrap_or_default(),
                r.kind.clone().unwrap_or_default()
            ),
        );
        return false;
    }
    match cx.policies.get(&(cx.namespace.to_string(), r.name.clone())) {
        Some(Node::Map(fields)) => {
            if let Some(why) = foreign_name(fields, cx.base) {
                return bad(
                    out,
                    &format!("{} {}: {why}", Kind::RoutePolicy.name(), r.name),
                );
            }
            let (fair, keys): (Vec<_>, Vec<_>) = fields
                .iter()
                .cloned()
                .partition(|(k, _)| k == super::policy::FAIR_SHARE);
            act.fields
                .retain(|(k, _)| !keys.iter().any(|(f, _)| f == k));
            act.fields.extend(keys);
            if let Some((_, node)) = fair.into_iter().next() {
                act.fair_share = Some((r.name.clone(), node));
            }
            true
        }
        _ => {
            out.unresolved(
                Reason::BackendNotFound,
                format!("{} {} does not exist", Kind::RoutePolicy.name(), r.name),
            );
            false
        }
    }
}

/// A name of a RoutePolicy's keys the base policy file does not define
/// (the Ingresses' pools, limits and methods are other namespaces').
fn foreign_name(fields: &[(String, Node)], base: &super::BaseNames) -> Option<String> {
    let names = |node: &Node| -> Vec<String> {
        match node {
            Node::Str(s) => vec![s.clone()],
            Node::Seq(items) => items
                .iter()
                .filter_map(|n| match n {
                    Node::Str(s) => Some(s.clone()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    };
    for (key, node) in fields {
        let (known, what) = match key.as_str() {
            "limits" => (&base.limits, "limit"),
            "concurrency" => (&base.concurrency, "concurrency policy"),
            "auth" => (&base.methods, "auth method"),
            _ => continue,
        };
        for name in names(node) {
            let builtin = key == "auth" && (name == "none" || name == "required");
            if !builtin && !known.contains(&name) {
                return Some(format!("the base policy has no {what} {name:?}"));
            }
        }
    }
    None
}
