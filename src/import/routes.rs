//! The policy's routes: `Route` (an Ingress path's match and keys), the
//! order they are written in (as nginx would try ingress-nginx's
//! locations); `out::route_node` writes one. Types and order only: a route
//! is built from an Ingress path by `paths::route`.

use super::emit::Node;
pub use super::out::PathRule;
use super::out::{route_node as write, HeaderMatch, RouteKeys};

/// The pathType given to an Ingress's defaultBackend (no Ingress may
/// write it: the API server allows only Exact, Prefix and
/// ImplementationSpecific).
pub const DEFAULT_BACKEND: &str = "Default";

/// One route of the policy.
#[derive(Debug, Clone)]
pub struct Route {
    pub name: String,
    pub host: Option<String>,
    pub path: PathRule,
    /// `match.headers`: a canary's header route.
    pub headers: Option<HeaderMatch>,
    /// The route's keys after `name` and `match`.
    pub keys: RouteKeys,
    /// The Ingress it came from, `namespace/name`.
    pub ingress: String,
    /// The Ingress path it came from: host, path and pathType, for canaries.
    pub origin: (String, String, String),
    /// Order among routes of the same host and path length: a main route
    /// after its canary's header route, a default backend last.
    pub rank: u8,
    /// On a host whose every path ingress-nginx made a regular expression.
    pub regex: bool,
}

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
        DEFAULT_BACKEND => 2,
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
    write(
        &r.name,
        r.host.as_deref(),
        &r.path,
        r.headers.as_ref(),
        &r.keys,
    )
}
