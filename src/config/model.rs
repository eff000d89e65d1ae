//! The validated, typed policy. A `Config` cannot hold an invalid value:
//! references are resolved, rates and durations parsed, names checked. It
//! holds types only; `read/` builds it from the located tree of `yaml.rs`,
//! collecting every problem. Files it names are paths (or PEM handed over
//! in memory), never their contents: loading them is the policy builder's
//! (`crate::build`), which reports what fails at the `Place` kept here.

use super::compression::Compression;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::num::NonZeroU64;
use std::path::PathBuf;
use std::time::Duration;

use http::header::HeaderName;
use ipnet::IpNet;

use super::kubernetes::Kubernetes;
use super::place::*;
use super::route::*;

/// The methods routes may name.
pub const METHODS: &[&str] = &[
    "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT",
];

/// A whole, validated configuration file.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub server: Server,
    pub admin: Admin,
    pub store: Store,
    pub auth: Option<Auth>,
    pub upstreams: BTreeMap<String, Upstream>,
    pub limits: BTreeMap<String, Limit>,
    pub default_limits: DefaultLimits,
    pub concurrency: BTreeMap<String, Concurrency>,
    pub tenants: BTreeMap<String, TenantOverride>,
    pub quota_headers: QuotaHeaders,
    pub identity_headers: IdentityHeaders,
    pub routes: Vec<Route>,
    pub acknowledge: BTreeSet<String>,
    pub access_log: AccessLog,
    pub telemetry: Telemetry,
    /// Controller mode: the cluster's Ingresses are added to this policy.
    pub kubernetes: Option<Kubernetes>,
}

/// `telemetry`: traces over OTLP. Off (no `otlp`) by default, and then
/// nothing of it runs per request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Telemetry {
    pub otlp: Option<Otlp>,
    /// Whether request spans carry the tenant id (`fairgate.tenant`).
    pub tenant_attribute: bool,
}

/// Where and how spans are exported; a change needs a restart.
#[derive(Debug, Clone, PartialEq)]
pub struct Otlp {
    /// The traces URL (`/v1/traces` added to a URL without a path).
    pub endpoint: String,
    pub timeout: Duration,
    /// Share of new traces recorded; a request with a parent follows it.
    pub ratio: f64,
    pub service_name: String,
    /// PEM roots trusted for an `https://` collector besides the system's;
    /// loaded by the policy builder.
    pub ca_file: Option<Located<PemSource>>,
}

/// The fields an access line can have, in the order they are written;
/// `log.access.fields` picks among them by these names.
pub const ACCESS_FIELDS: [&str; 23] = [
    "route",
    "method",
    "path",
    "upstream",
    "upstream_path",
    "status",
    "duration_ms",
    "tenant",
    "decision",
    "client",
    "request_id",
    "error",
    "request_bytes",
    "response_bytes",
    "user_agent",
    "host",
    "upstream_addr",
    "upstream_status",
    "upstream_ms",
    "gateway_ms",
    "tls_version",
    "sni",
    "trace_id",
];

/// `log.access`: which fields each access line has, and which share of
/// successful requests is logged (errors and refusals always are).
#[derive(Debug, Clone, PartialEq)]
pub struct AccessLog {
    /// Bit i set: field `ACCESS_FIELDS[i]` is written.
    pub fields: u32,
    pub sample: f64,
}

impl Default for AccessLog {
    fn default() -> Self {
        AccessLog {
            fields: (1 << ACCESS_FIELDS.len()) - 1,
            sample: 1.0,
        }
    }
}

impl AccessLog {
    /// The bit of the field named `name`; in a `const` block a name that is
    /// not one of `ACCESS_FIELDS` fails the build.
    pub const fn bit(name: &str) -> u32 {
        let mut i = 0;
        while i < ACCESS_FIELDS.len() {
            if same_str(ACCESS_FIELDS[i], name) {
                return 1 << i;
            }
            i += 1;
        }
        panic!("not an access log field")
    }

    /// Whether the field with this bit (from `bit`) is written.
    pub fn has(&self, bit: u32) -> bool {
        self.fields & bit != 0
    }
}

const fn same_str(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

#[derive(Debug, Clone, PartialEq)]
pub struct Server {
    pub listen: Vec<SocketAddr>,
    pub tls: Option<ServerTls>,
    pub threads: usize,
    pub shutdown_grace: Duration,
    pub trusted_proxies: Vec<IpNet>,
    /// What `%2F` and `%5C` in a path mean (SPEC section 10).
    pub escaped_slashes: EscapedSlashes,
    /// Bytes of one request head (request line and headers); 431 beyond.
    pub max_header_size: u64,
    /// Bytes of the request target or of one header line; 414 or 431 beyond.
    pub max_header_field_size: u64,
    /// From the first byte of a request head to its end; then the connection closes.
    pub header_timeout: Duration,
    /// Longest wait for the next byte of a request body.
    pub body_idle_timeout: Duration,
    /// An upgraded connection (WebSocket, any `101`) idle this long in
    /// either direction is closed.
    pub upgrade_idle_timeout: Duration,
    /// Longest wait for the next request on a kept-alive connection.
    pub keepalive_timeout: Duration,
    /// Accept `;` in paths (`path_parameters: keep`); refused by default.
    pub keep_path_parameters: bool,
    /// Open client connections, overall and from one peer address.
    pub max_connections: u64,
    pub max_connections_per_ip: u64,
    /// Keep client headers whose names hold `_` (nginx `underscores_in_headers`).
    pub allow_underscores_in_headers: bool,
    /// IPv6 clients share a `client_ip` bucket per this prefix (48 to 128).
    pub ipv6_prefix: u8,
    /// Every listener expects a PROXY protocol header (v1 or v2) from a
    /// trusted proxy before anything else.
    pub proxy_protocol: bool,
    pub http2: Http2,
    /// Address rules for every route (a route's own apply too).
    pub addresses: AddressRules,
    /// Answers compressed for clients that ask (`server.compression`).
    pub compression: Option<Compression>,
    /// Listeners passing bytes to a pool (`server.tcp_services`).
    pub tcp_services: Vec<Located<super::TcpService>>,
}

/// `server.escaped_slashes`, like Envoy's `path_with_escaped_slashes_action`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EscapedSlashes {
    /// 400 for a path holding `%2F` or `%5C`.
    Reject,
    /// Route and forward them as `/`.
    Decode,
    /// Route and forward them escaped, as one segment.
    Keep,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ServerTls {
    pub listen: SocketAddr,
    /// Chosen by SNI; the first also serves clients that send no name or
    /// one no certificate claims. Reloadable; the rest of `tls` is not.
    pub certificates: Vec<Located<Certificate>>,
    /// Ask clients for a certificate signed by one of these roots.
    pub client_ca: Option<Located<PemSource>>,
    /// Refuse the handshake without a client certificate (`client_auth: required`).
    pub client_cert_required: bool,
    /// Client certificates of some hosts only (`client_certificates`).
    pub clients: Vec<Located<super::HostClientCerts>>,
    /// Hosts whose TLS passes through to a pool (`passthrough`).
    pub passthrough: Vec<Located<super::Passthrough>>,
}

/// One served certificate chain and its key (PEM).
#[derive(Debug, Clone, PartialEq)]
pub struct Certificate {
    pub cert: PemSource,
    pub key: PemSource,
    /// The names it serves; empty: the DNS names of its SANs.
    pub hosts: Vec<String>,
}

/// `server.http2`: the limits each HTTP/2 client connection gets.
#[derive(Debug, Clone, PartialEq)]
pub struct Http2 {
    /// Plain listeners also take HTTP/2 with prior knowledge (h2c).
    pub h2c: bool,
    pub max_concurrent_streams: u32,
    /// Decoded bytes of one request's header list.
    pub max_header_list_size: u32,
    /// Streams a client may reset in one second before the connection is cut.
    pub max_resets_per_second: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Admin {
    pub listen: Option<SocketAddr>,
    /// The environment variable holding the bearer token of the `/v1/` API;
    /// without it (or with it empty) the API refuses every request.
    pub token_env: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Memory,
    Redis,
    RedisCluster,
    /// A master found through Redis Sentinel, followed across failovers.
    RedisSentinel,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnUnavailable {
    Local,
    Allow,
    Deny,
}

/// What a decision waits for before it admits (`store.durability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// The master's answer: a failover may lose the last moments' spends.
    Fast,
    /// The master's answer and a replica's acknowledgement of the write
    /// (`WAIT 1`), so a promoted replica holds every admitted spend.
    Replicated,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Store {
    pub kind: StoreKind,
    /// One URL for `redis`, every seed node for `redis_cluster`, every
    /// sentinel for `redis_sentinel`, empty for `memory`.
    pub urls: Vec<String>,
    /// The master's name in Sentinel (`redis_sentinel` only).
    pub master_name: Option<String>,
    pub password_env: Option<String>,
    /// What `rediss://` connections trust and present.
    pub tls: StoreTls,
    pub key_prefix: String,
    pub timeout: Duration,
    pub on_unavailable: OnUnavailable,
    pub local_divisor: NonZeroU64,
    pub durability: Durability,
}

/// TLS to the store, used when its URLs are `rediss://`: the server's
/// certificate is verified against the system's roots, or `ca_file`'s, for
/// the URL's host name, unless `verify` is off.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreTls {
    /// Trust these roots (PEM) instead of the system's.
    pub ca_file: Option<Located<PathBuf>>,
    /// `false`: any certificate is accepted, for any name (`tls_verify: false`).
    pub verify: bool,
    /// A client certificate chain and its key (PEM), for servers that ask;
    /// placed at `cert_file`.
    pub client: Option<Located<(PathBuf, PathBuf)>>,
}

impl Default for StoreTls {
    fn default() -> Self {
        StoreTls {
            ca_file: None,
            verify: true,
            client: None,
        }
    }
}

/// The plan of an identity that names none, when `auth.default_plan` is
/// not set (and of the admin API's tenant reads without auth).
pub const DEFAULT_PLAN: &str = "free";

#[derive(Debug, Clone, PartialEq)]
pub struct Auth {
    /// Failed authentications one client address may make back to back,
    /// and their refill; then 429 without a signature check.
    pub failure_limit: Bucket,
    /// Failed basic-auth checks of one user name (of one method) from all
    /// addresses together, and their refill; then 429 without a check.
    pub user_failure_limit: Bucket,
    pub issuer: Option<String>,
    pub audience: Vec<String>,
    pub leeway: Duration,
    /// Each placed where it is written (`auth.keys[i]`).
    pub keys: Vec<Located<KeySource>>,
    pub claims: ClaimNames,
    pub default_plan: String,
    /// Longest a request waits for a JWKS refresh when its token names an
    /// unknown `kid`; the refresh goes on in the background.
    pub jwks_timeout: Duration,
    /// `auth.methods`: what a route's `auth: NAME` names besides JWTs.
    pub methods: BTreeMap<String, super::Method>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum KeySource {
    /// A shared secret read from the named environment variable.
    Secret {
        kid: Option<String>,
        alg: String,
        env: String,
    },
    PublicKeyFile {
        kid: Option<String>,
        alg: String,
        path: PathBuf,
    },
    JwksFile {
        path: PathBuf,
    },
    JwksUrl {
        url: String,
        refresh: Duration,
        /// PEM roots trusted for this endpoint besides the system's (a
        /// private IdP's CA).
        ca_file: Option<Located<PemSource>>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct ClaimNames {
    pub tenant: String,
    pub user: String,
    pub plan: String,
    pub token: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Upstream {
    pub targets: Vec<String>,
    pub tls: bool,
    pub sni: Option<String>,
    pub tls_verify: bool,
    /// Trust these roots (PEM) for the pool's certificates instead of the system's.
    pub ca_file: Option<Located<PemSource>>,
    /// The certificate chain and key the gateway shows the pool's targets
    /// (`client_cert_*`, `client_key_*`): upstream mTLS.
    pub client_cert: Option<Located<(PemSource, PemSource)>>,
    pub protocol: UpstreamProtocol,
    /// Take a target out of rotation after this many failures in a row.
    pub passive_health: Option<PassiveHealth>,
    /// Targets named by DNS are looked up again this often (or when the
    /// answer's TTL runs out, if sooner).
    pub resolve_every: Duration,
    /// The DNS server to ask; `None`: the system's configuration.
    pub resolver: Option<SocketAddr>,
    pub balance: Balance,
    /// A client that got a target's cookie keeps that target (`affinity`).
    pub affinity: Option<Affinity>,
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
    pub health_interval: Duration,
    /// Whether targets are checked by TCP connects (`health_check`; off
    /// for a Kubernetes Service's endpoints, whose readiness the cluster
    /// checks).
    pub health_check: bool,
    /// Its in-flight permits shared fairly among waiting tenants.
    pub fair_share: Option<super::FairShare>,
    /// Where the pool is written (`upstreams.NAME`).
    pub place: Place,
}

/// Cookie affinity: the first answer to a client sets a cookie naming its
/// target (signed: a client cannot name one it was not given), and later
/// requests carrying it go to that target while it is in rotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Affinity {
    pub cookie: String,
    pub path: String,
    pub domain: Option<String>,
    /// `Max-Age`; none: a session cookie.
    pub max_age: Option<Duration>,
    pub same_site: Option<SameSite>,
    /// `Secure` (always with `SameSite=None`, which browsers require).
    pub secure: bool,
    /// A failed attempt moves the client to another target (and cookie);
    /// otherwise a retry goes to its target again.
    pub change_on_failure: bool,
}

/// A cookie name as RFC 6265 allows it (a token: no separators, no
/// spaces, no controls).
pub fn cookie_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_graphic() && !b"()<>@,;:\\\"/[]?={}".contains(&b))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SameSite {
    Lax,
    Strict,
    None,
}

/// How a pool picks a target for each request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Balance {
    RoundRobin,
    /// The less busy of two targets picked at random (power of two choices).
    LeastRequests,
    /// The same key, the same target while it is in rotation (rendezvous
    /// hashing: a target leaving moves only its own keys).
    Hash(HashKey),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashKey {
    Tenant,
    Header(HeaderName),
    /// The client's address (after `server.trusted_proxies`).
    ClientIp,
    /// The request's path and query, as sent.
    Uri,
    Cookie(String),
}

/// `failures` in a row (connect failures, resets, 5xx answers) take a
/// target out of rotation for `cooldown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassiveHealth {
    pub failures: u32,
    pub cooldown: Duration,
}

/// How the gateway speaks to a pool: HTTP/1.1, HTTP/2 over TLS (ALPN), or
/// HTTP/2 in the clear with prior knowledge (gRPC servers without TLS).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamProtocol {
    Http1,
    H2,
    H2c,
}

/// `count` tokens every `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub count: NonZeroU64,
    pub period: Duration,
}

impl Rate {
    /// Microseconds between two tokens (GCRA's emission interval), at least 1.
    pub fn interval_us(&self) -> u64 {
        (self.period.as_micros() as u64 / self.count.get()).max(1)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    pub capacity: NonZeroU64,
    pub rate: Rate,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    Tenant,
    TenantUser,
    TenantToken,
    ClientIp,
    /// The subject of the client's verified TLS certificate.
    ClientCert,
    Global,
    Path(String),
    Header(HeaderName),
}

impl Scope {
    /// Whether this scope's keys carry the tenant's hash tag (on a route
    /// that authenticates when `auth`), so they share the tenant's shard.
    pub fn tenant_tagged(&self, auth: bool) -> bool {
        match self {
            Scope::Tenant | Scope::TenantUser | Scope::TenantToken => true,
            Scope::Path(_) | Scope::Header(_) => auth,
            Scope::ClientIp | Scope::ClientCert | Scope::Global => false,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    pub name: String,
    pub scope: Scope,
    pub default: Bucket,
    pub plans: BTreeMap<String, Bucket>,
    pub shadow: bool,
    /// The status of a refusal: 429, or what the API answered before
    /// (ingress-nginx's `limit-req-status-code`, 503).
    pub status: u16,
    /// For `{path}`/`{header}` scopes: the only values accepted (404 otherwise).
    pub values: Option<BTreeSet<String>>,
    /// Client addresses this limit does not count (`exempt_cidrs`): an
    /// Ingress's `limit-whitelist` exempts from its own limits only.
    pub exempt: Vec<ipnet::IpNet>,
}

impl Limit {
    /// Keyed on a value the client picks freely: a new value, a new bucket.
    pub fn client_keyed(&self) -> bool {
        matches!(self.scope, Scope::Path(_) | Scope::Header(_)) && self.values.is_none()
    }
}

/// Limits applied to non-exempt routes that name none.
#[derive(Debug, Clone, PartialEq)]
pub struct DefaultLimits {
    pub authenticated: Option<Limit>,
    pub unauthenticated: Option<Limit>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Concurrency {
    pub name: String,
    pub scope: Scope,
    pub slots: NonZeroU64,
    pub lease: Duration,
    /// The status when every slot is held: 429 unless configured.
    pub status: u16,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct TenantOverride {
    pub plan: Option<String>,
    pub limits: BTreeMap<String, Bucket>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaHeaders {
    Ietf,
    Legacy,
    Both,
    None,
}

#[derive(Debug, Clone, PartialEq)]
pub struct IdentityHeaders {
    pub tenant: HeaderName,
    pub user: HeaderName,
    pub plan: HeaderName,
    /// The subject of the client's verified TLS certificate.
    pub client_cert: HeaderName,
}

impl Default for IdentityHeaders {
    fn default() -> Self {
        IdentityHeaders {
            tenant: HeaderName::from_static("x-tenant-id"),
            user: HeaderName::from_static("x-user-id"),
            plan: HeaderName::from_static("x-plan"),
            client_cert: HeaderName::from_static("x-client-cert-subject"),
        }
    }
}

impl IdentityHeaders {
    pub fn all(&self) -> [&HeaderName; 4] {
        [&self.tenant, &self.user, &self.plan, &self.client_cert]
    }
}

impl Config {
    /// The limits a route spends, in order, with `default_limits` resolved.
    pub fn route_limits(&self, route: &Route) -> Vec<&Limit> {
        if route.exempt {
            return Vec::new();
        }
        match &route.limits {
            Some(names) => {
                let mut limits: Vec<&Limit> =
                    names.iter().filter_map(|n| self.limits.get(n)).collect();
                if self.needs_address_guard(route, &limits) {
                    limits.extend(self.default_limits.unauthenticated.as_ref());
                }
                limits
            }
            None => {
                let default = if route.auth {
                    &self.default_limits.authenticated
                } else {
                    &self.default_limits.unauthenticated
                };
                default.iter().collect()
            }
        }
    }

    /// An `auth: none` route whose every limit is keyed on a value the
    /// client picks would give each new value a full bucket; it also spends
    /// the unauthenticated default (per address) unless it opts out.
    fn needs_address_guard(&self, route: &Route, limits: &[&Limit]) -> bool {
        !route.auth
            && !route.client_ip_exempt
            && !limits.is_empty()
            && limits.iter().all(|l| l.client_keyed())
    }

    /// A one-paragraph summary for `check`.
    pub fn summary(&self) -> String {
        let store = match self.store.kind {
            StoreKind::Memory => "memory",
            StoreKind::Redis => "redis",
            StoreKind::RedisCluster => "redis_cluster",
            StoreKind::RedisSentinel => "redis_sentinel",
        };
        let listen: Vec<String> = self.server.listen.iter().map(|a| a.to_string()).collect();
        format!(
            "{} routes, {} upstreams, {} limits, {} concurrency policies, {} tenant overrides; \
             store {store}; auth {}; listening on {}{}{}.",
            self.routes.len(),
            self.upstreams.len(),
            self.limits.len(),
            self.concurrency.len(),
            self.tenants.len(),
            match &self.auth {
                Some(a) => format!("with {} key sources", a.keys.len()),
                None => "off".into(),
            },
            listen.join(", "),
            match &self.server.tls {
                Some(t) => format!(", TLS on {}", t.listen),
                None => String::new(),
            },
            match self.admin.listen {
                Some(a) => format!(", admin on {a}"),
                None => String::new(),
            },
        )
    }
}
