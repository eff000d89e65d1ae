//! An attached route's rules as fairgate routes: one per match and
//! hostname, each with its precedence among every route of the Gateway
//! (`Precedence`), its filters as route keys (`filters`), its backends as
//! pools of endpoints (`backends`). A value fairgate cannot serve leaves
//! the route unserved (`Accepted: False`); a reference that does not
//! resolve answers `500`, as the spec asks, and says so in `ResolvedRefs`.

use super::context::{direct, Action, Context, Entry, Precedence, Translated};
use super::spec::{PathModifier, RouteMatch, RouteSpec, Rule};
use super::{backends, filters};
use crate::import::{Node, Object};
use crate::k8s::Kind;

/// The sorted entries as routes, each hostname's closed by a fence: a
/// request for a hostname some route names, which none of that
/// hostname's routes matched, is answered `404` there, never by a less
/// specific hostname's route (another namespace's catch-all), as a proxy
/// that picks a virtual host by name first answers it.
/// A listener's own hostname is closed too, with or without routes: an
/// Ingress's or a wildcard listener's route never answers it.
/// Host-less and wildcard routes are fallbacks (`fallback: true`): they
/// never answer a host some route names exactly, whatever the order.
pub fn fenced(entries: Vec<Entry>, listener_hosts: &[String]) -> Vec<Node> {
    let mut out = Vec::new();
    let mut fenced = std::collections::BTreeSet::new();
    let mut iter = entries.into_iter().peekable();
    while let Some(e) = iter.next() {
        let host = e.host.clone();
        out.push(fallback(e.route, host.as_deref()));
        let last = iter.peek().is_none_or(|next| next.host != host);
        if let (true, Some(h)) = (last, host) {
            out.push(fence(fenced.len(), &h));
            fenced.insert(h);
        }
    }
    for h in listener_hosts {
        if !h.starts_with('*') && fenced.insert(h.clone()) {
            out.push(fence(fenced.len() - 1, h));
        }
    }
    out
}

/// A route of `host` answering `404` whatever the path.
fn fence(n: usize, host: &str) -> Node {
    let route = Node::map([
        ("name", Node::str(format!("gateway__fence-{n}"))),
        ("match", Node::map([("host", Node::str(host))])),
        ("auth", Node::str("none")),
        ("limits", Node::Seq(Vec::new())),
        ("direct_response", Node::map([("status", Node::Int(404))])),
    ]);
    fallback(route, Some(host))
}

/// `route` marked a fallback when its host is none or a wildcard.
fn fallback(route: Node, host: Option<&str>) -> Node {
    match (route, host.is_none_or(|h| h.starts_with('*'))) {
        (Node::Map(mut fields), true) => {
            fields.insert(2, ("fallback".into(), Node::Bool(true)));
            Node::Map(fields)
        }
        (route, _) => route,
    }
}

/// The most fairgate routes one Gateway API route becomes.
const MAX_ENTRIES: usize = 1024;

/// The fairgate routes of `route` (an HTTPRoute or GRPCRoute) for the
/// hostnames it serves (None: any host).
pub fn translate(
    route: &Object,
    spec: &RouteSpec,
    hosts: &[Option<String>],
    cx: &Context<'_>,
) -> Translated {
    let mut out = Translated::default();
    // The API server's schema allows 16 rules, 64 matches and 16 hostnames;
    // an object it did not check, or their product, is bounded here, so one
    // route cannot make the policy of every other route huge.
    let matches: usize = spec.rules.iter().map(|r| r.matches.len().max(1)).sum();
    if matches.saturating_mul(hosts.len()) > MAX_ENTRIES {
        out.unsupported(format!(
            "{matches} matches on {} hostnames make more than {MAX_ENTRIES} routes",
            hosts.len()
        ));
        return out;
    }
    let prefix = super::route_prefix(route);
    let created = route
        .text(&["metadata", "creationTimestamp"])
        .unwrap_or_default();
    let grpc = route.is(Kind::GRPCRoute);
    let mut counter = 0;
    for (r, rule) in spec.rules.iter().enumerate() {
        let action = action(route, rule, grpc, cx, &mut out);
        let default = [RouteMatch::default()];
        let matches = match rule.matches.is_empty() {
            true => &default[..],
            false => &rule.matches[..],
        };
        for (m, matched) in matches.iter().enumerate() {
            let Some((path, rank, node)) = match_node(matched, grpc, &mut out) else {
                continue;
            };
            for (h, host) in hosts.iter().enumerate() {
                let mut fields =
                    vec![("name".to_string(), Node::str(format!("{prefix}-{counter}")))];
                counter += 1;
                let mut m_fields = node.clone();
                if let Some(host) = host {
                    m_fields.insert(0, ("host".into(), Node::str(host.clone())));
                }
                if let Some(only) = cx.only {
                    m_fields.push(("listener".into(), Node::str(only)));
                }
                fields.push(("match".into(), Node::Map(m_fields)));
                fields.extend(action.for_path(&path));
                out.entries.push(Entry {
                    host: host.clone(),
                    precedence: Precedence {
                        host: host_rank(host.as_deref()),
                        path: rank,
                        method: u8::from(matched.method.is_none()),
                        headers: std::cmp::Reverse(matched.headers.len()),
                        query: std::cmp::Reverse(matched.query_params.len()),
                        created: created.clone(),
                        id: route.id(),
                        order: (r, m, h),
                    },
                    route: Node::Map(fields),
                });
            }
        }
    }
    out
}

fn host_rank(host: Option<&str>) -> (u8, std::cmp::Reverse<usize>, String) {
    match host {
        Some(h) if h.starts_with('*') => (1, std::cmp::Reverse(h.len()), h.to_string()),
        Some(h) => (0, std::cmp::Reverse(h.len()), h.to_string()),
        None => (2, std::cmp::Reverse(0), String::new()),
    }
}

/// How a match's path is matched, for rewrites of its prefix.
#[derive(Clone)]
pub enum PathKind {
    Exact(String),
    Prefix(String),
    Regex,
}

type MatchNode = (
    PathKind,
    (u8, std::cmp::Reverse<usize>),
    Vec<(String, Node)>,
);

/// The `match` of one HTTPRoute or GRPCRoute match, its path and rank;
/// None (and the reason in `out`) when a value cannot be served.
fn match_node(m: &RouteMatch, grpc: bool, out: &mut Translated) -> Option<MatchNode> {
    let mut fields = Vec::new();
    let (path, rank) = match grpc {
        true => grpc_path(m, out)?,
        false => http_path(m, out)?,
    };
    match &path {
        PathKind::Exact(p) if !p.contains(['{', '}']) => {
            fields.push(("path".into(), Node::str(p.clone())))
        }
        PathKind::Exact(p) => fields.push(("path_regex".into(), Node::str(regex::escape(p)))),
        PathKind::Prefix(p) if !p.contains(['{', '}']) => {
            fields.push(("path_prefix".into(), Node::str(p.clone())))
        }
        PathKind::Prefix(p) => {
            let whole = format!("{}(/.*)?", regex::escape(p.trim_end_matches('/')));
            fields.push(("path_regex".into(), Node::str(whole)));
        }
        PathKind::Regex => {
            let value = m
                .path
                .as_ref()
                .and_then(|p| p.value.clone())
                .unwrap_or_default();
            let grpc_regex = grpc_method_regex(m);
            fields.push(("path_regex".into(), Node::str(grpc_regex.unwrap_or(value))));
        }
    }
    if let Some(headers) = value_matches(&m.headers, true, out) {
        fields.push(("headers".into(), headers));
    }
    if let Some(query) = value_matches(&m.query_params, false, out) {
        fields.push(("query".into(), query));
    }
    if let (false, Some(method)) = (grpc, m.method.as_ref().and_then(|v| v.as_str())) {
        fields.push(("methods".into(), Node::strs([method])));
    }
    Some((path, rank, fields))
}

fn http_path(
    m: &RouteMatch,
    out: &mut Translated,
) -> Option<(PathKind, (u8, std::cmp::Reverse<usize>))> {
    let kind = m
        .path
        .as_ref()
        .and_then(|p| p.kind.clone())
        .unwrap_or_else(|| "PathPrefix".into());
    let value = m
        .path
        .as_ref()
        .and_then(|p| p.value.clone())
        .unwrap_or_else(|| "/".into());
    // As the CRD's rule: a regular expression need not start with `/`
    // (`(?i)/api`).
    if !value.starts_with('/') && kind != "RegularExpression" {
        out.unsupported(format!("path {value:?} does not start with /"));
        return None;
    }
    let len = std::cmp::Reverse(value.len());
    match kind.as_str() {
        "Exact" => Some((PathKind::Exact(value), (0, len))),
        "PathPrefix" => Some((PathKind::Prefix(value), (2, len))),
        "RegularExpression" => match regex::Regex::new(&value) {
            Ok(_) => Some((PathKind::Regex, (1, len))),
            Err(_) => {
                out.unsupported(format!(
                    "path regular expression {value:?} does not compile"
                ));
                None
            }
        },
        other => {
            out.unsupported(format!("path match type {other:?} is not served"));
            None
        }
    }
}

/// A GRPCRoute method match as a path: `/SERVICE/METHOD` exactly, every
/// method of a service by prefix, one method of any service by pattern.
fn grpc_path(
    m: &RouteMatch,
    out: &mut Translated,
) -> Option<(PathKind, (u8, std::cmp::Reverse<usize>))> {
    let method = m.method.as_ref();
    let text = |key: &str| {
        method
            .and_then(|v| v.get(key))
            .and_then(|v| v.as_str())
            .map(String::from)
    };
    let kind = text("type").unwrap_or_else(|| "Exact".into());
    if kind != "Exact" {
        out.unsupported(format!("gRPC method match type {kind:?} is not served"));
        return None;
    }
    let ok = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._".contains(&b))
    };
    let (service, name) = (text("service"), text("method"));
    if service.iter().chain(name.iter()).any(|s| !ok(s)) {
        out.unsupported("gRPC service and method names are letters, digits, . and _".into());
        return None;
    }
    match (service, name) {
        (Some(s), Some(n)) => {
            let p = format!("/{s}/{n}");
            let len = std::cmp::Reverse(p.len());
            Some((PathKind::Exact(p), (0, len)))
        }
        // The spec ranks by the service's characters, then the method's.
        (Some(s), None) => Some((
            PathKind::Prefix(format!("/{s}")),
            (1, std::cmp::Reverse(s.len())),
        )),
        (None, Some(n)) => Some((PathKind::Regex, (2, std::cmp::Reverse(n.len())))),
        (None, None) => Some((PathKind::Prefix("/".into()), (3, std::cmp::Reverse(0)))),
    }
}

fn grpc_method_regex(m: &RouteMatch) -> Option<String> {
    let name = m.method.as_ref()?.get("method")?.as_str()?;
    Some(format!("/[^/]+/{}", regex::escape(name)))
}

/// Header (or query) matches as a `match.headers` (`match.query`)
/// mapping; of names given twice, the first counts (headers compare
/// names without case).
fn value_matches(
    matches: &[super::spec::ValueMatch],
    headers: bool,
    out: &mut Translated,
) -> Option<Node> {
    let mut seen = Vec::new();
    let mut fields = Vec::new();
    for v in matches {
        let key = match headers {
            true => v.name.to_ascii_lowercase(),
            false => v.name.clone(),
        };
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let value = match v.kind.as_deref().unwrap_or("Exact") {
            // The value `true` alone would ask for presence.
            "Exact" if v.value == "true" => Node::map([("regex", Node::str("true"))]),
            "Exact" => Node::str(v.value.clone()),
            "RegularExpression" => Node::map([("regex", Node::str(v.value.clone()))]),
            other => {
                out.unsupported(format!("match type {other:?} is not served"));
                return None;
            }
        };
        fields.push((v.name.clone(), value));
    }
    (!fields.is_empty()).then_some(Node::Map(fields))
}

impl Action {
    /// The route keys for a match of `path` (rewrites and redirects of a
    /// prefix depend on it).
    fn for_path(&self, path: &PathKind) -> Vec<(String, Node)> {
        let mut out = self.fields.clone();
        if let Some((r, code)) = &self.redirect {
            let scheme = r.scheme.as_deref().unwrap_or(self.scheme);
            let port = match (r.port, r.scheme.is_some()) {
                (Some(p), _) => Some(p),
                (None, true) => None,
                (None, false) => Some(self.port),
            };
            let port = port.filter(|p| !matches!((scheme, *p), ("http", 80) | ("https", 443)));
            let name = r.hostname.clone().unwrap_or_else(|| "{hostname}".into());
            let host = match port {
                Some(p) => format!("{name}:{p}"),
                None => name,
            };
            let path = new_path(r.path.as_ref(), path).unwrap_or_else(|| "{path}".into());
            let to = format!("{scheme}://{host}{path}{{query}}");
            out.push((
                "redirect".into(),
                Node::map([("to", Node::str(to)), ("code", Node::Int(u64::from(*code)))]),
            ));
        }
        if let Some(rw) = &self.rewrite {
            let mut fields = Vec::new();
            match new_path(rw.path.as_ref(), path) {
                // The prefix removed: an empty rest is `/`.
                Some(p) if p == "{rest}" => out.push(("strip_prefix".into(), Node::Bool(true))),
                Some(p) => fields.push(("path".to_string(), Node::str(p))),
                None => {}
            }
            if let Some(h) = &rw.hostname {
                fields.push(("host".to_string(), Node::str(h.clone())));
            }
            if !fields.is_empty() {
                out.push(("rewrite".into(), Node::Map(fields)));
            }
        }
        out
    }
}

/// The path a redirect or rewrite gives, as a template: the full path, or
/// the matched prefix replaced (`{rest}` is what follows it).
fn new_path(m: Option<&PathModifier>, path: &PathKind) -> Option<String> {
    let m = m?;
    match m.kind.as_str() {
        "ReplaceFullPath" => m.replace_full_path.clone(),
        "ReplacePrefixMatch" => {
            let with = m.replace_prefix_match.clone().unwrap_or_else(|| "/".into());
            match path {
                PathKind::Prefix(p) if p != "/" => {
                    Some(format!("{}{{rest}}", with.trim_end_matches('/')))
                }
                PathKind::Prefix(_) => Some(format!("{}{{path}}", with.trim_end_matches('/'))),
                _ => Some(with),
            }
        }
        _ => None,
    }
}

/// A rule's action: its filters and backends.
fn action(
    route: &Object,
    rule: &Rule,
    grpc: bool,
    cx: &Context<'_>,
    out: &mut Translated,
) -> Action {
    let mut act = Action {
        fields: vec![("auth".into(), Node::str("none"))],
        redirect: None,
        rewrite: None,
        mirror: None,
        scheme: cx.scheme,
        port: cx.port,
        fair_share: None,
    };
    let mut broken = false;
    for f in &rule.filters {
        broken |= !filters::filter(f, cx, &mut act, out);
    }
    if grpc && act.mirror.is_some() {
        // Copies are sent over HTTP/1.1, which a gRPC backend does not take.
        out.unsupported("RequestMirror on a GRPCRoute is not served".into());
        broken = true;
    }
    if let Some(t) = &rule.timeouts {
        let mut fields = Vec::new();
        for (key, value) in [("total", &t.request), ("read", &t.backend_request)] {
            match value.as_deref().map(backends::gateway_duration) {
                Some(Some(ms)) if ms > 0 => {
                    fields.push((key.to_string(), Node::str(format!("{ms}ms"))))
                }
                Some(Some(_)) | None => {}
                Some(None) => {
                    out.unsupported(format!(
                        "timeout {:?} is not a duration",
                        value.as_deref().unwrap_or("")
                    ));
                }
            }
        }
        if !fields.is_empty() {
            act.fields.push(("timeouts".into(), Node::Map(fields)));
        }
    }
    if broken {
        act.fields.push(direct(500, None));
        act.redirect = None;
        return act;
    }
    if act.redirect.is_none() {
        act.fields.extend(backends::backends(
            route,
            &rule.backend_refs,
            grpc,
            &act.fair_share,
            cx,
            out,
        ));
        if let Some(b) = act.mirror.take() {
            act.fields.extend(backends::mirror(route, &b, cx, out));
        }
    }
    act
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields_of(path: serde_json::Value) -> Vec<(String, Node)> {
        let m: RouteMatch = serde_json::from_value(serde_json::json!({ "path": path })).unwrap();
        let (_, _, fields) = match_node(&m, false, &mut Translated::default()).unwrap();
        fields
    }

    /// Braces in a path are text, never the policy's path captures: the
    /// CRDs refuse them today, an older CRD (without the character rule)
    /// lets `/a{b}` through.
    #[test]
    fn braces_in_a_path_are_matched_literally() {
        let exact = fields_of(serde_json::json!({"type": "Exact", "value": "/a{b}"}));
        assert_eq!(exact, vec![("path_regex".into(), Node::str(r"/a\{b\}"))]);
        let prefix = fields_of(serde_json::json!({"type": "PathPrefix", "value": "/p/{id}/"}));
        assert_eq!(
            prefix,
            vec![("path_regex".into(), Node::str(r"/p/\{id\}(/.*)?"))]
        );
        let plain = fields_of(serde_json::json!({"type": "PathPrefix", "value": "/p"}));
        assert_eq!(plain, vec![("path_prefix".into(), Node::str("/p"))]);
    }
}
