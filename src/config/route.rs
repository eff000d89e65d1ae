//! The route types of the policy: what a route matches, what it spends
//! and what it does (redirects, rewrites, header edits, CORS, retries,
//! canaries). Types only, built by `read/routes.rs` and `read/actions.rs`.

use std::num::NonZeroU64;
use std::time::Duration;

use http::header::HeaderName;
use ipnet::IpNet;

use super::place::Place;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathMatch {
    Any,
    Exact(String),
    Prefix(String),
    /// Segments of a pattern such as `/webhooks/{provider}`.
    Pattern(Vec<Segment>),
    /// `path_regex`, anchored at both ends; its named groups are captures.
    Regex(PathRegex),
}

impl PathMatch {
    /// The names of the captures a matching path gives.
    pub fn captures(&self) -> Vec<&str> {
        match self {
            PathMatch::Pattern(segments) => segments
                .iter()
                .filter_map(|s| match s {
                    Segment::Capture(c) => Some(c.as_str()),
                    Segment::Literal(_) => None,
                })
                .collect(),
            PathMatch::Regex(r) => r.0.capture_names().flatten().collect(),
            _ => Vec::new(),
        }
    }
}

/// A compiled `path_regex`; two are equal when their sources are.
#[derive(Debug, Clone)]
pub struct PathRegex(pub regex::Regex);

impl PartialEq for PathRegex {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

impl Eq for PathRegex {}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Literal(String),
    Capture(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostMatch {
    Exact(String),
    /// `*.example.com` matches any name ending in `.example.com`.
    Suffix(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub name: String,
    pub host: Option<HostMatch>,
    pub path: PathMatch,
    /// Upper-case method names; empty means any.
    pub methods: Vec<String>,
    pub upstream: String,
    pub auth: bool,
    /// `auth: NAME`: a method of `auth.methods` instead of a bearer JWT.
    pub method: Option<String>,
    /// `identity:`, over the method's own map.
    pub identity: Option<super::IdentityMap>,
    pub exempt: bool,
    /// Names of the limits to spend; `None` means `default_limits` apply.
    pub limits: Option<Vec<String>>,
    pub concurrency: Option<String>,
    pub cost: NonZeroU64,
    pub max_body: Option<u64>,
    pub strip_prefix: Option<String>,
    pub forward_authorization: bool,
    /// An `auth: none` route keyed only by client-chosen values does not
    /// also spend the per-address default limit.
    pub client_ip_exempt: bool,
    /// A host-less or wildcard route that never answers a host some route
    /// names exactly: every named host is closed, as nginx's server
    /// blocks are (the import and the controller mark theirs).
    pub fallback: bool,
    /// What else the request must carry to match (`match.headers`, `match.query`).
    pub when: Vec<Condition>,
    pub actions: Actions,
    /// Where the route is written (`routes[i]`).
    pub place: Place,
    /// Controller mode: the object the route was made from, filled in
    /// after reading (a file's routes have none). The request metrics'
    /// `namespace`, `ingress` and `service` labels.
    pub origin: Option<std::sync::Arc<RouteOrigin>>,
}

/// The Kubernetes object a route was made from, for its metric labels.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RouteOrigin {
    pub namespace: String,
    /// The Ingress's name (or the Gateway API route's).
    pub object: String,
    /// The Service of the route's pool, when its pool is one's endpoints.
    pub service: String,
}

/// What a route does besides matching, limiting and forwarding.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Actions {
    /// Answered by the gateway with a redirect; no upstream.
    pub redirect: Option<Redirect>,
    /// Answered by the gateway with this status: every request, or a
    /// share of them beside `split`.
    pub direct: Option<DirectResponse>,
    /// Plain-listener requests are sent to HTTPS (308) first.
    pub https_redirect: bool,
    /// A request for `/` is sent here (302) first.
    pub app_root: Option<String>,
    /// The path (and host) the upstream gets instead of the routed ones.
    pub rewrite: Rewrite,
    pub request_headers: HeaderEdits,
    pub response_headers: HeaderEdits,
    pub addresses: AddressRules,
    pub timeouts: Timeouts,
    pub cors: Option<Cors>,
    /// `upstreams: [{name, weight}]`: each request picks a pool by weight
    /// (empty: always `Route::upstream`).
    pub split: Vec<(String, u32)>,
    pub canary: Option<Canary>,
    pub retries: Option<Retries>,
    /// `compression: false`: answers pass as the upstream sent them,
    /// whatever `server.compression` says.
    pub no_compression: bool,
    /// The upstream's `Set-Cookie` domains and paths rewritten
    /// (ingress-nginx `proxy-cookie-domain`, `proxy-cookie-path`).
    pub cookie_rewrite: Option<CookieRewrite>,
    /// Answers of these statuses are replaced by an error pool's page
    /// (ingress-nginx `custom-http-errors` with its default backend).
    pub error_pages: Option<ErrorPages>,
    /// A copy of each request goes to another pool (ingress-nginx
    /// `mirror-target`); its answer is dropped.
    pub mirror: Option<Mirror>,
    /// The upstream's `Location` and `Refresh` URLs starting with `from`
    /// start with `to` instead (nginx `proxy_redirect FROM TO`).
    pub location_rewrite: Option<(String, String)>,
}

/// `error_pages`: for an upstream answer of one of `codes` to a request
/// without a body, the gateway asks `upstream` for the page instead (a
/// `GET` of the same path with `X-Code`, `X-Format`, `X-Original-URI`,
/// `X-Request-ID` and `headers`) and gives the client its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorPages {
    pub codes: Vec<u16>,
    pub upstream: String,
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
}

/// `mirror`: where copies of the route's requests go, fire and forget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mirror {
    /// A pool speaking plain HTTP.
    pub upstream: String,
    /// The copy's Host (default: the request's).
    pub host: Option<String>,
    /// The body is copied too (a body over 1 MiB is not mirrored at all).
    pub body: bool,
}

/// `cookie_rewrite`: each `(from, to)`. A `Domain` equal to `from`
/// (case-insensitive, a leading dot ignored) becomes `to`; a `Path`
/// starting with `from` has that start replaced by `to` (nginx's
/// `proxy_cookie_domain` and `proxy_cookie_path`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CookieRewrite {
    pub domain: Option<(String, String)>,
    pub path: Option<(String, String)>,
}

/// Another target after a failed attempt, before any response byte:
/// never after a request body was streamed, never spending another token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retries {
    /// Attempts in all, the first included (2 to 10).
    pub attempts: u32,
    pub on_connect_failure: bool,
    pub on_reset: bool,
    /// Answers (502, 503, 504) retried before they reach the client.
    pub on_status: Vec<u16>,
    /// Upper-case; default the idempotent ones.
    pub methods: Vec<String>,
}

/// Requests sent to another pool by who makes them: listed tenants or
/// plans, a sticky share of tenants, or a header or cookie saying
/// `always` (or `never`), as ingress-nginx `canary-by-header`/`-cookie`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Canary {
    pub upstream: String,
    pub tenants: Vec<String>,
    pub plans: Vec<String>,
    /// Share of tenants (by a stable hash of the tenant id; of client
    /// addresses without one), 0 to 100.
    pub percent: u8,
    pub header: Option<HeaderName>,
    pub cookie: Option<String>,
}

/// Cross-origin access for browsers (the Fetch standard's CORS protocol).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cors {
    /// `scheme://host[:port]`, lower case; `*` for any (never with credentials).
    pub origins: Vec<String>,
    pub methods: Vec<String>,
    /// Request headers a page may send, lower case.
    pub headers: Vec<String>,
    /// Response headers a page may read, beyond the CORS-safelisted ones.
    pub expose: Vec<String>,
    pub credentials: bool,
    pub max_age: Option<Duration>,
}

/// One more thing a request must carry to match a route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    Header(HeaderName, ValueMatch),
    Query(String, ValueMatch),
    /// `match.listener`: true on the TLS listener, false on a plain one.
    Tls(bool),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueMatch {
    Present,
    Exact(String),
    /// The whole value (anchored), as `{regex: ...}` says.
    Regex(PathRegex),
}

/// Text with `{name}` variables: the route's path captures, `rest` (after
/// a `path_prefix`), `path`, `query`, `host`, `client_ip`, `tenant`,
/// `request_id`, `route`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Template(pub Vec<Piece>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    Var(String),
}

/// `direct_response`: the status the gateway answers itself, for every
/// request (`weight` None) or for `weight` in the split's total.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectResponse {
    pub status: u16,
    pub weight: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    pub to: Template,
    /// 301, 302, 307 or 308.
    pub code: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rewrite {
    pub path: Option<Template>,
    pub host: Option<String>,
}

/// `set` replaces, `add` appends, `remove` drops; in that order: remove, set, add.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeaderEdits {
    pub set: Vec<(HeaderName, Template)>,
    pub add: Vec<(HeaderName, Template)>,
    pub remove: Vec<HeaderName>,
}

impl HeaderEdits {
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.add.is_empty() && self.remove.is_empty()
    }
}

/// Client-address rules (route's or the server's), on the address after
/// `trusted_proxies` and PROXY protocol.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AddressRules {
    /// When not empty, only these addresses are served.
    pub allow: Vec<IpNet>,
    pub deny: Vec<IpNet>,
    /// These addresses never spend tokens.
    pub limit_exempt: Vec<IpNet>,
}

/// Per-route overrides of the pool's timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timeouts {
    pub connect: Option<Duration>,
    pub read: Option<Duration>,
    pub write: Option<Duration>,
    /// From the request's arrival to the response's last byte.
    pub total: Option<Duration>,
}
