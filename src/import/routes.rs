//! The policy's routes: `Route` (an Ingress path's match and keys), the
//! order they are written in (as nginx would try ingress-nginx's
//! locations) and their YAML form. Types and writing only: a route is
//! built from an Ingress path by `paths::route`.

use std::collections::BTreeMap;

use super::emit::Node;

/// How a path is matched.
#[derive(Debug, Clone, PartialEq)]
pub enum PathRule {
    Any,
    Exact(String),
    Prefix(String),
    Regex(String),
}

/// One route of the policy.
#[derive(Debug, Clone)]
pub struct Route {
    pub name: String,
    pub host: Option<String>,
    pub path: PathRule,
    /// `match.headers`: a canary's header route.
    pub headers: Option<Node>,
    /// The route's keys after `name` and `match`, in the order written.
    pub keys: BTreeMap<&'static str, Node>,
    /// The Ingress path it came from: host, path and pathType, for canaries.
    pub origin: (String, String, String),
    /// Order among routes of the same host and path length: a main route
    /// after its canary's header route, a default backend last.
    pub rank: u8,
    /// On a host whose every path ingress-nginx made a regular expression.
    pub regex: bool,
}

/// The order keys are written in.
const KEY_ORDER: &[&str] = &[
    "upstream",
    "auth",
    "redirect",
    "https_redirect",
    "app_root",
    "limits",
    "concurrency",
    "limit_exempt_cidrs",
    "allow_cidrs",
    "deny_cidrs",
    "max_body",
    "rewrite",
    "request_headers",
    "response_headers",
    "timeouts",
    "retries",
    "cors",
    "canary",
];

/// The order routes are written in, as nginx picks among ingress-nginx's
/// locations: per host (exact hosts, then wildcards, then none), then by
/// the Ingress path, a default backend last. On a host of plain paths an
/// Exact path wins whatever its length (nginx's `= ` location), then the
/// longest prefix. On a host ingress-nginx made all regular expressions,
/// the first match wins, so the locations' order is its "Path Priority":
/// the longest Ingress path first (ties: the greater path), and Exact
/// before Prefix for one path.
pub fn order(r: &Route) -> impl Ord {
    use std::cmp::Reverse;
    let host_rank = match &r.host {
        Some(h) if !h.starts_with('*') => 0,
        Some(_) => 1,
        None => 2,
    };
    let (_, path, kind) = &r.origin;
    let exact = u8::from(kind != "Exact");
    let class = match kind.as_str() {
        "Default" => 2,
        _ if r.regex => 0,
        _ => exact,
    };
    let tie = if r.regex { path.clone() } else { String::new() };
    (
        (host_rank, r.host.clone().unwrap_or_default(), class),
        (Reverse(path.len()), Reverse(tie), exact, r.rank),
    )
}

pub fn route_node(r: &Route) -> Node {
    let mut matches = Vec::new();
    if let Some(h) = &r.host {
        matches.push(("host", Node::str(h.clone())));
    }
    match &r.path {
        PathRule::Any => {}
        PathRule::Exact(p) => matches.push(("path", Node::str(p.clone()))),
        PathRule::Prefix(p) => matches.push(("path_prefix", Node::str(p.clone()))),
        PathRule::Regex(p) => matches.push(("path_regex", Node::str(p.clone()))),
    }
    if let Some(h) = &r.headers {
        matches.push(("headers", h.clone()));
    }
    let mut entries = vec![
        ("name".to_string(), Node::str(r.name.clone())),
        ("match".into(), Node::map(matches)),
    ];
    for key in KEY_ORDER {
        if let Some(v) = r.keys.get(key) {
            entries.push((key.to_string(), v.clone()));
        }
    }
    Node::Map(entries)
}
