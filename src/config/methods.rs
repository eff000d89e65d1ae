//! The authentication methods a route may name besides bearer JWTs
//! (`auth.methods.<name>`): an external auth service, basic auth from an
//! htpasswd file, API keys from a keys file; and the identity mapping that
//! turns what authenticated a request into tenant, user and plan. Types
//! only, built by `read/methods.rs`.

use std::time::Duration;

use http::header::HeaderName;

use super::place::{Located, PemSource};

/// Headers that frame a message or carry what the gateway itself writes:
/// never copied from an auth service's answer (a `Content-Length: 0` from
/// it would cut the request body); the reader refuses them in
/// `response_headers`, `set_headers` and identity sources, and the
/// importer reports them.
pub const FRAMING_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "te",
    "trailer",
    "upgrade",
    "keep-alive",
    "expect",
    "proxy-connection",
    "x-request-id",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
];

/// `auth.methods.<name>`: one way to authenticate, and who it says the
/// caller is.
#[derive(Debug, Clone, PartialEq)]
pub struct Method {
    pub kind: MethodKind,
    pub identity: IdentityMap,
}

#[derive(Debug, Clone, PartialEq)]
pub enum MethodKind {
    /// Boxed: its settings outweigh the other kinds' several times.
    External(Box<External>),
    Basic(Basic),
    ApiKey(ApiKey),
}

impl MethodKind {
    /// The key it is written under, for messages and metric labels.
    pub fn label(&self) -> &'static str {
        match self {
            MethodKind::External(_) => "external",
            MethodKind::Basic(_) => "basic",
            MethodKind::ApiKey(_) => "api_key",
        }
    }
}

/// A subrequest to an auth service before anything else is spent
/// (oauth2-proxy's `/oauth2/auth`, Authelia, a company SSO service).
#[derive(Debug, Clone, PartialEq)]
pub struct External {
    /// `http://` or `https://`; the subrequest goes here with the
    /// original method and URI in headers, never the body.
    pub url: String,
    /// The subrequest's method (`GET` unless set).
    pub method: http::Method,
    /// Longest wait for the answer; then 503, fail closed.
    pub timeout: Duration,
    /// Client request headers passed to the auth service.
    pub request_headers: Vec<HeaderName>,
    /// Headers of a 2xx answer copied to the upstream request (a client's
    /// copies are replaced on this method's routes).
    pub response_headers: Vec<HeaderName>,
    /// Whether a client's copies of the answer headers are also removed on
    /// every other route (a base policy's SSO); `false` for the methods the
    /// importer makes of an Ingress's annotations, so that one namespace
    /// cannot remove headers from another's traffic.
    pub strip_everywhere: bool,
    /// Headers of a 401/403 answer passed to the client.
    pub challenge_headers: Vec<HeaderName>,
    /// Headers of a 2xx answer passed to the client too (`Set-Cookie`
    /// for a refreshed session).
    pub set_headers: Vec<HeaderName>,
    pub signin: Option<SignIn>,
    pub cache: Option<AnswerCache>,
    pub breaker: Breaker,
    /// PEM roots trusted for an `https://` service besides the system's
    /// (a cluster's private CA, e.g. cert-manager's); loaded by the policy
    /// builder.
    pub ca_file: Option<Located<PemSource>>,
}

/// Where a 401 sends a browser to sign in: `url` (`$host` in it is the
/// request's host, as ingress-nginx's `auth-signin` allows) with the
/// original URL in `param` (`rd`), 302; only for requests to `hosts`, so
/// the gateway never redirects to a host it does not serve.
#[derive(Debug, Clone, PartialEq)]
pub struct SignIn {
    pub url: String,
    pub param: String,
    /// Exact names, or `*.example.com`.
    pub hosts: Vec<String>,
}

impl SignIn {
    /// Whether a request to `host` may be sent to sign in (and back).
    pub fn allows(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        self.hosts.iter().any(|h| match h.strip_prefix("*.") {
            Some(suffix) => host
                .strip_suffix(suffix)
                .is_some_and(|rest| rest.len() > 1 && rest.ends_with('.')),
            None => *h == host,
        })
    }
}

/// 2xx answers remembered by a request value that names the session.
#[derive(Debug, Clone, PartialEq)]
pub struct AnswerCache {
    pub key: CacheKey,
    pub ttl: Duration,
    pub entries: u64,
    pub max_bytes: u64,
    /// Whether an answer holds for one path and query only (`per_uri`), for
    /// services that decide per path; else for the session's requests to
    /// the route and host with the same method, as ingress-nginx's
    /// `auth-cache-key` caches per location.
    pub per_uri: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum CacheKey {
    Cookie(String),
    Header(HeaderName),
}

/// After `failures` failed calls in a row the service is not called for
/// `open_for`; then one call probes it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Breaker {
    pub failures: u32,
    pub open_for: Duration,
}

/// `Authorization: Basic` checked against htpasswd entries (bcrypt, SHA-1,
/// Apache MD5).
#[derive(Debug, Clone, PartialEq)]
pub struct Basic {
    pub htpasswd: Located<PemSource>,
    pub realm: String,
    /// Each user's tenant and plan (`users_file` or `users`).
    pub users: Option<Located<PemSource>>,
}

/// An API key from a header or query parameter, checked against the
/// SHA-256 hashes of a keys file.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiKey {
    pub header: Option<HeaderName>,
    /// Removed from the query before the request is forwarded or logged.
    pub query: Option<String>,
    pub keys: Located<PemSource>,
}

/// Where tenant, user and plan come from; a field left out keeps what
/// the method itself says (an API key's record, a basic-auth user name).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IdentityMap {
    pub tenant: Option<IdSource>,
    pub user: Option<IdSource>,
    pub plan: Option<IdSource>,
}

impl IdentityMap {
    /// This map, with `over`'s fields where it sets them.
    pub fn overlaid(&self, over: &IdentityMap) -> IdentityMap {
        IdentityMap {
            tenant: over.tenant.clone().or_else(|| self.tenant.clone()),
            user: over.user.clone().or_else(|| self.user.clone()),
            plan: over.plan.clone().or_else(|| self.plan.clone()),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum IdSource {
    /// A header of the external auth service's 2xx answer.
    Header(HeaderName),
    /// The same for every request.
    Value(String),
    /// The basic-auth user name (an API key's `user`).
    Username,
}
