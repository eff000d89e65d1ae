//! The validated, typed policy. A `Config` cannot hold an invalid value:
//! references are resolved, rates and durations parsed, names checked. It is
//! built from the located tree in `file.rs`, collecting every problem.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::header::HeaderName;
use ipnet::IpNet;
use marked_yaml::Node;

use super::error::Problems;
use super::file::{self, join, At, Reader};
use super::schema;

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
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Admin {
    pub listen: Option<SocketAddr>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Memory,
    Redis,
    RedisCluster,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnUnavailable {
    Local,
    Allow,
    Deny,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Store {
    pub kind: StoreKind,
    /// One URL for `redis`, every seed node for `redis_cluster`, empty for `memory`.
    pub urls: Vec<String>,
    pub password_env: Option<String>,
    pub key_prefix: String,
    pub timeout: Duration,
    pub on_unavailable: OnUnavailable,
    pub local_divisor: NonZeroU64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Auth {
    /// Failed authentications one client address may make back to back,
    /// and their refill; then 429 without a signature check.
    pub failure_limit: Bucket,
    pub issuer: Option<String>,
    pub audience: Vec<String>,
    pub leeway: Duration,
    pub keys: Vec<KeySource>,
    pub claims: ClaimNames,
    pub default_plan: String,
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
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
    pub health_interval: Duration,
}

/// `count` tokens every `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub count: u64,
    pub period: Duration,
}

impl Rate {
    /// Microseconds between two tokens (GCRA's emission interval), at least 1.
    pub fn interval_us(&self) -> u64 {
        (self.period.as_micros() as u64 / self.count).max(1)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    pub capacity: u64,
    pub rate: Rate,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    Tenant,
    TenantUser,
    TenantToken,
    ClientIp,
    Global,
    Path(String),
    Header(HeaderName),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    pub name: String,
    pub scope: Scope,
    pub default: Bucket,
    pub plans: BTreeMap<String, Bucket>,
    pub shadow: bool,
    /// For `{path}`/`{header}` scopes: the only values accepted (404 otherwise).
    pub values: Option<BTreeSet<String>>,
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
    pub slots: u64,
    pub lease: Duration,
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
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathMatch {
    Any,
    Exact(String),
    Prefix(String),
    /// Segments of a pattern such as `/webhooks/{provider}`.
    Pattern(Vec<Segment>),
}

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
    pub exempt: bool,
    /// Names of the limits to spend; `None` means `default_limits` apply.
    pub limits: Option<Vec<String>>,
    pub concurrency: Option<String>,
    pub cost: u64,
    pub max_body: Option<u64>,
    pub strip_prefix: Option<String>,
    pub forward_authorization: bool,
    /// An `auth: none` route keyed only by client-chosen values does not
    /// also spend the per-address default limit.
    pub client_ip_exempt: bool,
}

/// The result of loading a file: the config, plus warnings worth printing.
pub struct Loaded {
    pub config: Config,
    pub warnings: Vec<String>,
}

impl Config {
    /// Reads and validates a file; on failure every problem is returned.
    pub fn load(path: &Path) -> Result<Loaded, Problems> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| {
            let mut p = Problems::new(shown.clone());
            p.push(
                (1, 1),
                "config.unreadable",
                format!("cannot read file: {e}"),
            );
            p
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::from_text(&shown, &text, base)
    }

    /// Validates YAML text; relative file paths resolve against `base`.
    pub fn from_text(file: &str, text: &str, base: &Path) -> Result<Loaded, Problems> {
        let mut problems = Problems::new(file);
        let config = file::parse(text, &mut problems).and_then(|root| {
            build(
                &root,
                base,
                &mut Reader {
                    problems: &mut problems,
                },
            )
        });
        match config {
            Some(config) if !problems.has_errors() => Ok(Loaded {
                config,
                warnings: problems.render_warnings(),
            }),
            _ => Err(problems),
        }
    }

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

fn missing(r: &mut Reader<'_>, parent: &At<'_>, key: &str) {
    r.problems.push(
        parent.pos(),
        "config.missing_field",
        format!("{}: required", join(&parent.path, key)),
    );
}

fn socket_addr(r: &mut Reader<'_>, at: &At<'_>, code: &'static str) -> Option<SocketAddr> {
    let text = r.string(at)?;
    match text.parse() {
        Ok(addr) => Some(addr),
        Err(_) => {
            r.error_value(at, code, "expected IP:PORT, e.g. 0.0.0.0:8080");
            None
        }
    }
}

fn build(root: &Node, base: &Path, r: &mut Reader<'_>) -> Option<Config> {
    let top = r.mapping(&At::root(root), schema::TOP)?;
    let server = server(r, top.get("server"), base);
    let admin = Admin {
        listen: top.get("admin").and_then(|at| {
            let f = r.mapping(&at, schema::ADMIN)?;
            socket_addr(r, &f.get("listen")?, "admin.listen_invalid")
        }),
    };
    let store = store(r, top.get("store"));
    let auth = top.get("auth").and_then(|at| auth(r, &at, base));
    let upstreams = upstreams(r, top.get("upstreams"));
    let limits: BTreeMap<String, Limit> = top
        .get("limits")
        .map(|at| {
            r.named(&at)
                .into_iter()
                .filter_map(|(name, item)| {
                    let limit = limit(r, &item, name)?;
                    Some((name.to_string(), limit))
                })
                .collect()
        })
        .unwrap_or_default();
    let default_limits = default_limits(r, top.get("default_limits"));
    let concurrency = top
        .get("concurrency")
        .map(|at| {
            r.named(&at)
                .into_iter()
                .filter_map(|(name, item)| {
                    let c = concurrency(r, &item, name)?;
                    Some((name.to_string(), c))
                })
                .collect()
        })
        .unwrap_or_default();
    // Names declared in the file, valid or not, so that a broken limit is
    // reported once where it is defined, not again at every use.
    let declared = |key: &str| -> BTreeSet<String> {
        top.get(key)
            .and_then(|at| {
                at.node
                    .as_mapping()
                    .map(|m| m.keys().map(|k| k.as_str().to_string()).collect())
            })
            .unwrap_or_default()
    };
    let declared = Declared {
        limits: declared("limits"),
        concurrency: declared("concurrency"),
    };
    let tenants = tenants(r, top.get("tenants"), &declared);
    let quota_headers = match top.get("quota_headers") {
        None => QuotaHeaders::Both,
        Some(at) => match r.string(&at).as_deref() {
            Some("ietf") => QuotaHeaders::Ietf,
            Some("legacy") => QuotaHeaders::Legacy,
            Some("both") => QuotaHeaders::Both,
            Some("none") => QuotaHeaders::None,
            Some(_) => {
                r.error_value(
                    &at,
                    "config.quota_headers_invalid",
                    "must be one of ietf, legacy, both, none",
                );
                QuotaHeaders::Both
            }
            None => QuotaHeaders::Both,
        },
    };
    let identity_headers = identity_headers(r, top.get("identity_headers"));
    let acknowledge: BTreeSet<String> = top
        .get("acknowledge")
        .map(|at| {
            let mut codes = BTreeSet::new();
            for (i, node) in r.sequence(&at).into_iter().enumerate() {
                let item = at.item(i, node);
                let Some(code) = r.string(&item) else {
                    continue;
                };
                if !ACKNOWLEDGEABLE.contains(&code.as_str()) {
                    let known = ACKNOWLEDGEABLE.join(", ");
                    r.error_value(
                        &item,
                        "config.acknowledge_unknown",
                        format!("not a warning code; known: {known}"),
                    );
                }
                codes.insert(code);
            }
            codes
        })
        .unwrap_or_default();
    let mut config = Config {
        server,
        admin,
        store,
        auth,
        upstreams,
        limits,
        default_limits,
        concurrency,
        tenants,
        quota_headers,
        identity_headers,
        routes: Vec::new(),
        acknowledge,
    };
    config.routes = routes(r, top.get("routes"), &config, &declared);

    if config.store.kind == StoreKind::Memory && !config.acknowledge.contains("store.process_local")
    {
        let at = top.get("store").map(|a| a.pos()).unwrap_or((1, 1));
        r.problems.warn(
            at,
            "store.process_local",
            "store.kind \"memory\": every gateway process counts alone, so N replicas allow N \
             times each limit; use redis or redis_cluster in production, or list \
             store.process_local under `acknowledge:`",
        );
    }
    warn_client_keyed(r, &config, top.get("routes"));
    if config.server.escaped_slashes == EscapedSlashes::Keep
        && !config.acknowledge.contains("server.escaped_slashes_keep")
    {
        let at = top.get("server").map(|a| a.pos()).unwrap_or((1, 1));
        r.problems.warn(
            at,
            "server.escaped_slashes_keep",
            "server.escaped_slashes \"keep\": fairgate routes /a%2Fb as one segment, but many \
             frameworks decode it to /a/b and route it elsewhere; make sure every upstream \
             keeps %2F escaped, or list server.escaped_slashes_keep under `acknowledge:`",
        );
    }
    Some(config)
}

/// `auth: none` routes limited only by values the client picks: every new
/// value is a new, full bucket.
fn warn_client_keyed(r: &mut Reader<'_>, config: &Config, routes: Option<At<'_>>) {
    if config.acknowledge.contains("limits.client_keyed") {
        return;
    }
    let nodes = routes
        .as_ref()
        .and_then(|at| at.node.as_sequence())
        .map(|s| s.iter().collect::<Vec<_>>())
        .unwrap_or_default();
    for (i, route) in config.routes.iter().enumerate() {
        let Some(names) = route
            .limits
            .as_ref()
            .filter(|_| !route.auth && !route.exempt)
        else {
            continue;
        };
        let limits: Vec<&Limit> = names.iter().filter_map(|n| config.limits.get(n)).collect();
        if limits.is_empty() || !limits.iter().all(|l| l.client_keyed()) {
            continue;
        }
        let guard = config.default_limits.unauthenticated.as_ref();
        let then = match guard {
            Some(_) if !route.client_ip_exempt => {
                "it also spends default_limits.unauthenticated per client address"
            }
            _ => "nothing else bounds it",
        };
        let at = nodes.get(i).map(|n| file::position(n)).unwrap_or((1, 1));
        r.problems.warn(
            at,
            "limits.client_keyed",
            format!(
                "route \"{}\" has auth: none and only limits keyed on a path or header value the \
                 client chooses, so every new value gets a full bucket; {then}. List the accepted \
                 values (`scope: {{path: NAME, values: [...]}}`), or list limits.client_keyed \
                 under `acknowledge:`",
                route.name
            ),
        );
    }
}

/// Warning codes a file may silence under `acknowledge:`.
pub const ACKNOWLEDGEABLE: &[&str] = &[
    "store.process_local",
    "limits.client_keyed",
    "server.escaped_slashes_keep",
];

fn server(r: &mut Reader<'_>, at: Option<At<'_>>, base: &Path) -> Server {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut server = Server {
        listen: vec!["0.0.0.0:8080".parse().expect("literal address")],
        tls: None,
        threads: cpus,
        shutdown_grace: Duration::from_secs(10),
        trusted_proxies: Vec::new(),
        escaped_slashes: EscapedSlashes::Reject,
        max_header_size: 32 * 1024,
        max_header_field_size: 8 * 1024,
        header_timeout: Duration::from_secs(10),
        body_idle_timeout: Duration::from_secs(30),
        keepalive_timeout: Duration::from_secs(60),
        keep_path_parameters: false,
        max_connections: 10_000,
        max_connections_per_ip: 256,
        allow_underscores_in_headers: false,
        ipv6_prefix: 64,
    };
    let Some(at) = at else { return server };
    let Some(f) = r.mapping(&at, schema::SERVER) else {
        return server;
    };
    if let Some(at) = f.get("listen") {
        let items = r.sequence(&at);
        server.listen = items
            .into_iter()
            .enumerate()
            .filter_map(|(i, node)| socket_addr(r, &at.item(i, node), "server.listen_invalid"))
            .collect();
        if at.node.as_sequence().is_some_and(|s| s.is_empty()) {
            r.error(&at, "server.listen_invalid", "needs at least one address");
        }
    }
    if let Some(at) = f.get("tls") {
        if let Some(t) = r.mapping(&at, schema::SERVER_TLS) {
            let listen = t
                .get("listen")
                .and_then(|a| socket_addr(r, &a, "server.listen_invalid"));
            let cert = file_path(r, &t, "cert", base);
            let key = file_path(r, &t, "key", base);
            if t.get("listen").is_none() {
                missing(r, &at, "listen");
            }
            if let (Some(listen), Some(cert), Some(key)) = (listen, cert, key) {
                server.tls = Some(ServerTls { listen, cert, key });
            }
        }
    }
    if let Some(at) = f.get("threads") {
        match r.u64(&at, "server.threads_invalid") {
            Some(n @ 1..=1024) => server.threads = n as usize,
            Some(_) => r.error_value(&at, "server.threads_invalid", "must be 1 to 1024"),
            None => {}
        }
    }
    if let Some(d) = f.get("shutdown_grace").and_then(|at| r.duration(&at)) {
        server.shutdown_grace = d;
    }
    if let Some(at) = f.get("trusted_proxies") {
        let items = r.sequence(&at);
        for (i, node) in items.into_iter().enumerate() {
            let item = at.item(i, node);
            let Some(text) = r.string(&item) else {
                continue;
            };
            let net = text
                .parse::<IpNet>()
                .or_else(|_| text.parse::<std::net::IpAddr>().map(IpNet::from));
            match net {
                Ok(net) => server.trusted_proxies.push(net),
                Err(_) => r.error_value(
                    &item,
                    "server.cidr_invalid",
                    "expected a CIDR such as 10.0.0.0/8 or an IP address",
                ),
            }
        }
    }
    if let Some(at) = f.get("escaped_slashes") {
        match r.string(&at).as_deref() {
            Some("reject") => server.escaped_slashes = EscapedSlashes::Reject,
            Some("decode") => server.escaped_slashes = EscapedSlashes::Decode,
            Some("keep") => server.escaped_slashes = EscapedSlashes::Keep,
            Some(_) => r.error_value(
                &at,
                "server.escaped_slashes_invalid",
                "must be one of reject, decode, keep",
            ),
            None => {}
        }
    }
    if let Some(at) = f.get("path_parameters") {
        match r.string(&at).as_deref() {
            Some("reject") => server.keep_path_parameters = false,
            Some("keep") => server.keep_path_parameters = true,
            Some(_) => r.error_value(
                &at,
                "server.path_parameters_invalid",
                "must be one of reject, keep",
            ),
            None => {}
        }
    }
    for (key, slot, min, max) in [
        (
            "max_header_size",
            &mut server.max_header_size,
            1024,
            1 << 20,
        ),
        (
            "max_header_field_size",
            &mut server.max_header_field_size,
            256,
            1 << 20,
        ),
    ] {
        if let Some(at) = f.get(key) {
            match r.size(&at) {
                Some(n) if (min..=max).contains(&n) => *slot = n,
                Some(_) => r.error_value(
                    &at,
                    "server.size_invalid",
                    format!("must be {min} bytes to 1MiB"),
                ),
                None => {}
            }
        }
    }
    if server.max_header_field_size > server.max_header_size {
        r.error(
            &at,
            "server.size_invalid",
            "max_header_field_size cannot exceed max_header_size",
        );
    }
    for (key, slot) in [
        ("header_timeout", &mut server.header_timeout),
        ("body_idle_timeout", &mut server.body_idle_timeout),
        ("keepalive_timeout", &mut server.keepalive_timeout),
    ] {
        if let Some(d) = f.get(key).and_then(|at| r.positive_duration(&at)) {
            *slot = d;
        }
    }
    for (key, slot) in [
        ("max_connections", &mut server.max_connections),
        ("max_connections_per_ip", &mut server.max_connections_per_ip),
    ] {
        if let Some(n) = f
            .get(key)
            .and_then(|at| r.count(&at, "server.connections_invalid"))
        {
            *slot = n;
        }
    }
    if let Some(b) = f
        .get("allow_underscores_in_headers")
        .and_then(|at| r.bool(&at))
    {
        server.allow_underscores_in_headers = b;
    }
    if let Some(at) = f.get("ipv6_prefix") {
        match r.u64(&at, "server.ipv6_prefix_invalid") {
            Some(n @ 48..=128) => server.ipv6_prefix = n as u8,
            Some(_) => r.error_value(&at, "server.ipv6_prefix_invalid", "must be 48 to 128"),
            None => {}
        }
    }
    server
}

/// A file path that must exist, resolved against the config's directory.
fn file_path(r: &mut Reader<'_>, f: &file::Fields<'_>, key: &str, base: &Path) -> Option<PathBuf> {
    let Some(at) = f.get(key) else {
        missing(r, &f.at, key);
        return None;
    };
    let text = r.string(&at)?;
    let path = base.join(&text);
    if !path.is_file() {
        r.error_value(
            &at,
            "config.file_missing",
            format!("no such file {}", path.display()),
        );
        return None;
    }
    Some(path)
}

fn store(r: &mut Reader<'_>, at: Option<At<'_>>) -> Store {
    let mut store = Store {
        kind: StoreKind::Memory,
        urls: Vec::new(),
        password_env: None,
        key_prefix: String::new(),
        timeout: Duration::from_millis(50),
        on_unavailable: OnUnavailable::Local,
        local_divisor: NonZeroU64::MIN,
    };
    let Some(at) = at else { return store };
    let Some(f) = r.mapping(&at, schema::STORE) else {
        return store;
    };
    if let Some(at) = f.get("kind") {
        store.kind = match r.string(&at).as_deref() {
            Some("memory") => StoreKind::Memory,
            Some("redis") => StoreKind::Redis,
            Some("redis_cluster") => StoreKind::RedisCluster,
            Some(_) => {
                r.error_value(
                    &at,
                    "store.kind_invalid",
                    "must be one of redis, redis_cluster, memory",
                );
                StoreKind::Memory
            }
            None => StoreKind::Memory,
        };
    }
    let mut check_url = |r: &mut Reader<'_>, at: &At<'_>, text: String| {
        if redis_url_ok(&text) {
            store.urls.push(text);
        } else {
            r.error_value(
                at,
                "store.url_invalid",
                "expected redis://HOST:PORT[/DB] or rediss://HOST:PORT[/DB]",
            );
        }
    };
    match store.kind {
        StoreKind::Redis => match f.get("url") {
            Some(at) => {
                if let Some(text) = r.string(&at) {
                    check_url(r, &at, text);
                }
            }
            None => r.error(&at, "store.url_invalid", "kind redis needs `url`"),
        },
        StoreKind::RedisCluster => match f.get("nodes") {
            Some(at) => {
                let items = r.sequence(&at);
                for (i, node) in items.into_iter().enumerate() {
                    let item = at.item(i, node);
                    if let Some(text) = r.string(&item) {
                        check_url(r, &item, text);
                    }
                }
                if store.urls.is_empty() {
                    r.error(&at, "store.url_invalid", "needs at least one node URL");
                }
            }
            None => r.error(&at, "store.url_invalid", "kind redis_cluster needs `nodes`"),
        },
        StoreKind::Memory => {}
    }
    if let Some(at) = f.get("password_env") {
        store.password_env = r.string(&at);
        if let Some(env) = &store.password_env {
            if std::env::var_os(env).is_none() {
                r.error_value(
                    &at,
                    "store.password_missing",
                    format!("environment variable {env} is not set"),
                );
            }
        }
    }
    if let (StoreKind::Redis, Some(n)) = (store.kind, f.get("nodes")) {
        r.error(
            &n,
            "store.url_invalid",
            "nodes is for kind redis_cluster; kind redis takes url",
        );
    }
    if let (StoreKind::RedisCluster, Some(u)) = (store.kind, f.get("url")) {
        r.error(
            &u,
            "store.url_invalid",
            "url is for kind redis; kind redis_cluster takes nodes",
        );
    }
    if store.kind == StoreKind::Memory {
        for key in ["url", "nodes", "password_env"] {
            if let Some(k) = f.get(key) {
                r.error(&k, "store.url_invalid", "kind memory connects to nothing");
            }
        }
    }
    if let Some(at) = f.get("key_prefix") {
        store.key_prefix = at
            .node
            .as_scalar()
            .map(|s| s.as_str().to_string())
            .unwrap_or_default();
        if store.key_prefix.contains(['{', '}']) {
            r.error_value(&at, "store.key_prefix_invalid", "must not contain { or }");
        }
    }
    if let Some(d) = f.get("timeout").and_then(|at| r.positive_duration(&at)) {
        store.timeout = d;
    }
    if let Some(at) = f.get("on_unavailable") {
        store.on_unavailable = match r.string(&at).as_deref() {
            Some("local") => OnUnavailable::Local,
            Some("allow") => OnUnavailable::Allow,
            Some("deny") => OnUnavailable::Deny,
            Some(_) => {
                r.error_value(
                    &at,
                    "store.on_unavailable_invalid",
                    "must be one of local, allow, deny",
                );
                OnUnavailable::Local
            }
            None => OnUnavailable::Local,
        };
    }
    if let Some(at) = f.get("local_divisor") {
        if let Some(n) = r
            .count(&at, "store.local_divisor_invalid")
            .and_then(NonZeroU64::new)
        {
            store.local_divisor = n;
        }
    }
    store
}

fn redis_url_ok(text: &str) -> bool {
    let Some(rest) = text
        .strip_prefix("redis://")
        .or_else(|| text.strip_prefix("rediss://"))
    else {
        return false;
    };
    let host_port = rest.rsplit('@').next().unwrap_or(rest);
    let host_port = host_port.split('/').next().unwrap_or("");
    !host_port.is_empty() && !host_port.contains(char::is_whitespace)
}

const ALGORITHMS: &[&str] = &[
    "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256",
    "ES384", "EdDSA",
];

fn auth(r: &mut Reader<'_>, at: &At<'_>, base: &Path) -> Option<Auth> {
    let f = r.mapping(at, schema::AUTH)?;
    let issuer = f.get("issuer").and_then(|at| r.string(&at));
    let audience = match f.get("audience") {
        Some(at) if at.node.as_sequence().is_some() => r.strings(&at),
        Some(at) => r.string(&at).into_iter().collect(),
        None => Vec::new(),
    };
    let leeway = f
        .get("leeway")
        .and_then(|at| r.duration(&at))
        .unwrap_or(Duration::from_secs(30));
    let mut keys = Vec::new();
    if let Some(at) = f.get("keys") {
        for (i, node) in r.sequence(&at).into_iter().enumerate() {
            if let Some(k) = key_source(r, &at.item(i, node), base) {
                keys.push(k);
            }
        }
    }
    let listed = f
        .get("keys")
        .is_some_and(|k| k.node.as_sequence().is_some_and(|s| !s.is_empty()));
    if !listed {
        r.error(
            at,
            "auth.key_missing",
            "needs at least one entry under `keys`",
        );
    }
    let mut claims = ClaimNames {
        tenant: "tid".into(),
        user: "sub".into(),
        plan: "plan".into(),
        token: "jti".into(),
    };
    if let Some(at) = f.get("claims") {
        if let Some(c) = r.mapping(&at, schema::AUTH_CLAIMS) {
            for (key, slot) in [
                ("tenant", &mut claims.tenant),
                ("user", &mut claims.user),
                ("plan", &mut claims.plan),
                ("token", &mut claims.token),
            ] {
                if let Some(v) = c.get(key).and_then(|at| r.string(&at)) {
                    *slot = v;
                }
            }
        }
    }
    let default_plan = f
        .get("default_plan")
        .and_then(|at| r.string(&at))
        .unwrap_or_else(|| "free".into());
    let failure_limit = f
        .get("failure_limit")
        .and_then(|at| bucket(r, &at))
        .unwrap_or(Bucket {
            capacity: 20,
            rate: Rate {
                count: 1,
                period: Duration::from_secs(1),
            },
        });
    Some(Auth {
        failure_limit,
        issuer,
        audience,
        leeway,
        keys,
        claims,
        default_plan,
    })
}

fn key_source(r: &mut Reader<'_>, at: &At<'_>, base: &Path) -> Option<KeySource> {
    let f = r.mapping(at, schema::AUTH_KEY)?;
    let sources: Vec<&str> = ["secret_env", "public_key_file", "jwks_file", "jwks_url"]
        .into_iter()
        .filter(|k| f.get(k).is_some())
        .collect();
    if sources.len() > 1 {
        r.error(
            at,
            "auth.key_invalid",
            format!(
                "give exactly one of secret_env, public_key_file, jwks_file, jwks_url (found {})",
                sources.join(", ")
            ),
        );
        return None;
    }
    let jwks = matches!(sources.first(), Some(&"jwks_file") | Some(&"jwks_url"));
    for key in ["kid", "alg"] {
        if let (true, Some(k)) = (jwks, f.get(key)) {
            r.error(
                &k,
                "auth.key_invalid",
                "a JWKS names its own keys' kid and alg",
            );
        }
    }
    if let (false, Some(k)) = (sources.first() == Some(&"jwks_url"), f.get("refresh")) {
        r.error(&k, "auth.key_invalid", "refresh applies to jwks_url only");
    }
    let kid = f.get("kid").and_then(|at| r.string(&at));
    let alg = match f.get("alg") {
        Some(a) => {
            let alg = r.string(&a)?;
            if !ALGORITHMS.contains(&alg.as_str()) {
                r.error_value(
                    &a,
                    "auth.key_invalid",
                    format!("alg must be one of {}", ALGORITHMS.join(", ")),
                );
                return None;
            }
            Some(alg)
        }
        None => None,
    };
    let need_alg = |r: &mut Reader<'_>| {
        if alg.is_none() {
            missing(r, at, "alg");
        }
        alg.clone()
    };
    if let Some(env_at) = f.get("secret_env") {
        let env = r.string(&env_at)?;
        let alg = need_alg(r)?;
        if !alg.starts_with("HS") {
            r.error(
                at,
                "auth.key_invalid",
                format!("secret_env needs an HS algorithm, not {alg}"),
            );
            return None;
        }
        if std::env::var_os(&env).is_none_or(|v| v.is_empty()) {
            r.error_value(
                &env_at,
                "auth.key_missing",
                format!("environment variable {env} is not set"),
            );
            return None;
        }
        return loadable(r, at, KeySource::Secret { kid, alg, env });
    }
    if f.get("public_key_file").is_some() {
        let alg = need_alg(r)?;
        if alg.starts_with("HS") {
            r.error(
                at,
                "auth.key_invalid",
                format!("public_key_file cannot use {alg}"),
            );
            return None;
        }
        let path = key_file(r, &f, "public_key_file", base)?;
        return loadable(r, at, KeySource::PublicKeyFile { kid, alg, path });
    }
    if f.get("jwks_file").is_some() {
        let path = key_file(r, &f, "jwks_file", base)?;
        return loadable(r, at, KeySource::JwksFile { path });
    }
    if let Some(url_at) = f.get("jwks_url") {
        let url = r.string(&url_at)?;
        if !url.starts_with("http://") && !url.starts_with("https://") {
            r.error_value(
                &url_at,
                "auth.key_invalid",
                "expected an http:// or https:// URL",
            );
            return None;
        }
        let refresh = f
            .get("refresh")
            .and_then(|at| r.positive_duration(&at))
            .unwrap_or(Duration::from_secs(300));
        return Some(KeySource::JwksUrl { url, refresh });
    }
    r.error(
        at,
        "auth.key_missing",
        "needs one of secret_env, public_key_file, jwks_file, jwks_url",
    );
    None
}

/// The source, if its key material loads; else `auth.key_invalid`.
fn loadable(r: &mut Reader<'_>, at: &At<'_>, source: KeySource) -> Option<KeySource> {
    match crate::auth::keys::load_static(&source) {
        Ok(_) => Some(source),
        Err(why) => {
            r.error(at, "auth.key_invalid", why);
            None
        }
    }
}

fn key_file(r: &mut Reader<'_>, f: &file::Fields<'_>, key: &str, base: &Path) -> Option<PathBuf> {
    let at = f.get(key)?;
    let text = r.string(&at)?;
    let path = base.join(&text);
    if !path.is_file() {
        r.error_value(
            &at,
            "auth.key_missing",
            format!("no such file {}", path.display()),
        );
        return None;
    }
    Some(path)
}

fn upstreams(r: &mut Reader<'_>, at: Option<At<'_>>) -> BTreeMap<String, Upstream> {
    let mut out = BTreeMap::new();
    let Some(at) = at else { return out };
    for (name, at) in r.named(&at) {
        let Some(f) = r.mapping(&at, schema::UPSTREAM) else {
            continue;
        };
        let mut targets = Vec::new();
        match f.get("targets") {
            Some(t) => {
                for (i, node) in r.sequence(&t).into_iter().enumerate() {
                    let item = t.item(i, node);
                    let Some(text) = r.string(&item) else {
                        continue;
                    };
                    if target_ok(&text) {
                        targets.push(text);
                    } else {
                        r.error_value(&item, "upstreams.target_invalid", "expected HOST:PORT");
                    }
                }
                if t.node.as_sequence().is_some_and(|s| s.is_empty()) {
                    r.error(&t, "upstreams.target_invalid", "needs at least one target");
                }
            }
            None => missing(r, &at, "targets"),
        }
        let flag = |r: &mut Reader<'_>, key: &str, default: bool| {
            f.get(key).and_then(|at| r.bool(&at)).unwrap_or(default)
        };
        let tls = flag(r, "tls", false);
        let tls_verify = flag(r, "tls_verify", true);
        let dur = |r: &mut Reader<'_>, key: &str, default: u64| {
            f.get(key)
                .and_then(|at| r.positive_duration(&at))
                .unwrap_or(Duration::from_millis(default))
        };
        out.insert(
            name.to_string(),
            Upstream {
                targets,
                tls,
                sni: f.get("sni").and_then(|at| r.string(&at)),
                tls_verify,
                connect_timeout: dur(r, "connect_timeout", 1_000),
                read_timeout: dur(r, "read_timeout", 60_000),
                health_interval: dur(r, "health_check_interval", 5_000),
            },
        );
    }
    out
}

fn target_ok(text: &str) -> bool {
    match text.rsplit_once(':') {
        Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0),
        None => false,
    }
}

/// `COUNT/PERIOD`: `5/s`, `600/m`, `1/10s`, `10000/h`, `100000/d`.
pub fn parse_rate(text: &str) -> Result<Rate, String> {
    let (count, period) = text
        .split_once('/')
        .ok_or_else(|| "expected COUNT/PERIOD such as 5/s, 600/m or 1/10s".to_string())?;
    let count: u64 = count
        .trim()
        .parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| "count must be a whole number of at least 1".to_string())?;
    let period = period.trim();
    let split = period
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| "unit must be one of s, m, h, d".to_string())?;
    let (n, unit) = period.split_at(split);
    let n: u64 = if n.is_empty() {
        1
    } else {
        n.parse()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| "period must be at least 1".to_string())?
    };
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err("unit must be one of s, m, h, d".into()),
    };
    let period = n
        .checked_mul(secs)
        .filter(|s| *s <= 366 * 86_400)
        .map(Duration::from_secs)
        .ok_or_else(|| "period must be at most a year".to_string())?;
    if period.as_micros() as u64 / count == 0 {
        return Err("more than 1,000,000 per second is not supported".into());
    }
    Ok(Rate { count, period })
}

fn bucket(r: &mut Reader<'_>, at: &At<'_>) -> Option<Bucket> {
    let f = r.mapping(at, schema::BUCKET)?;
    bucket_fields(r, at, &f)
}

/// `capacity` and `rate` of a mapping that may hold other fields too.
fn bucket_fields(r: &mut Reader<'_>, at: &At<'_>, f: &file::Fields<'_>) -> Option<Bucket> {
    let capacity = match f.get("capacity") {
        Some(c) => r.count(&c, "limits.capacity_invalid"),
        None => {
            missing(r, at, "capacity");
            None
        }
    };
    let rate = match f.get("rate") {
        Some(at) => {
            let text = at.node.as_scalar().map(|s| s.as_str()).unwrap_or("");
            match parse_rate(text) {
                Ok(rate) => Some(rate),
                Err(why) => {
                    r.error_value(&at, "limits.rate_invalid", why);
                    None
                }
            }
        }
        None => {
            missing(r, at, "rate");
            None
        }
    };
    let bucket = Bucket {
        capacity: capacity?,
        rate: rate?,
    };
    // Bucket arithmetic runs in integer microseconds, also as Lua doubles
    // (exact below 2^53): keep capacity x interval far inside that.
    if bucket.capacity.saturating_mul(bucket.rate.interval_us()) > MAX_WINDOW_US {
        r.error(
            at,
            "limits.capacity_invalid",
            "capacity / rate must refill within 10 years",
        );
        return None;
    }
    Some(bucket)
}

const MAX_WINDOW_US: u64 = 10 * 366 * 86_400 * 1_000_000;

fn scope(r: &mut Reader<'_>, at: &At<'_>) -> Option<Scope> {
    const HELP: &str =
        "must be tenant, tenant_user, tenant_token, client_ip, global, {path: NAME} or {header: NAME}";
    if let Some(s) = at.node.as_scalar() {
        return match s.as_str() {
            "tenant" => Some(Scope::Tenant),
            "tenant_user" => Some(Scope::TenantUser),
            "tenant_token" => Some(Scope::TenantToken),
            "client_ip" => Some(Scope::ClientIp),
            "global" => Some(Scope::Global),
            _ => {
                r.error_value(at, "limits.scope_invalid", HELP);
                None
            }
        };
    }
    let Some(map) = at.node.as_mapping() else {
        r.error(at, "limits.scope_invalid", HELP);
        return None;
    };
    let mut named = map.iter().filter(|(k, _)| k.as_str() != "values");
    let (Some((key, value)), None) = (named.next(), named.next()) else {
        r.error(at, "limits.scope_invalid", HELP);
        return None;
    };
    let value_at = at.child(key.as_str(), value, at.key_pos);
    let name = value
        .as_scalar()
        .map(|s| s.as_str().to_string())
        .unwrap_or_default();
    match key.as_str() {
        "path" if !name.is_empty() => Some(Scope::Path(name)),
        "header" => match HeaderName::from_bytes(name.as_bytes()) {
            Ok(h) if !name.is_empty() => Some(Scope::Header(h)),
            _ => {
                r.error_value(&value_at, "limits.scope_invalid", "not a valid header name");
                None
            }
        },
        _ => {
            r.error(at, "limits.scope_invalid", HELP);
            None
        }
    }
}

/// Names a limit or concurrency policy cannot take: `default` is what
/// `default_limits` spend under, and the others begin key shapes of their
/// own (`global:{...}`, `tenant:{...}`, `ip:{...}`), which a value-scoped
/// key named alike could otherwise reach.
const RESERVED_NAMES: &[&str] = &["default", "global", "tenant", "ip"];

fn limit(r: &mut Reader<'_>, at: &At<'_>, name: &str) -> Option<Limit> {
    if RESERVED_NAMES.contains(&name) {
        r.error(
            at,
            "limits.name_invalid",
            format!("\"{name}\" is reserved (default, global, tenant, ip)"),
        );
    } else if !name_ok(name) {
        r.error(
            at,
            "limits.name_invalid",
            "limit names use A-Z a-z 0-9 _ - only",
        );
    }
    let f = r.mapping(at, schema::LIMIT)?;
    let scope = match f.get("scope") {
        Some(s) => scope(r, &s),
        None => Some(Scope::Tenant),
    };
    let default = match f.get("default") {
        Some(d) => bucket(r, &d),
        None => {
            missing(r, at, "default");
            None
        }
    };
    let mut plans = BTreeMap::new();
    if let Some(p) = f.get("plans") {
        for (plan, item) in r.named(&p) {
            if let Some(b) = bucket(r, &item) {
                plans.insert(plan.to_string(), b);
            }
        }
    }
    let shadow = f.get("shadow").and_then(|s| r.bool(&s)).unwrap_or(false);
    let values = f
        .get("scope")
        .and_then(|s| scope_values(r, &s, scope.as_ref()?));
    Some(Limit {
        name: name.to_string(),
        scope: scope?,
        default: default?,
        plans,
        shadow,
        values,
    })
}

/// `values: [stripe, github]` inside a `{path}` or `{header}` scope.
fn scope_values(r: &mut Reader<'_>, at: &At<'_>, scope: &Scope) -> Option<BTreeSet<String>> {
    let map = at.node.as_mapping()?;
    let (key, node) = map.iter().find(|(k, _)| k.as_str() == "values")?;
    let values_at = at.child(key.as_str(), node, file::position(node));
    if !matches!(scope, Scope::Path(_) | Scope::Header(_)) {
        r.error(
            &values_at,
            "limits.scope_invalid",
            "values need a {path} or {header} scope",
        );
        return None;
    }
    let values: BTreeSet<String> = r.strings(&values_at).into_iter().collect();
    if values.is_empty() {
        r.error(
            &values_at,
            "limits.scope_invalid",
            "values needs at least one value",
        );
        return None;
    }
    Some(values)
}

fn name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn default_limits(r: &mut Reader<'_>, at: Option<At<'_>>) -> DefaultLimits {
    let builtin = |name: &str, scope: Scope, count: u64| Limit {
        name: name.to_string(),
        scope,
        default: Bucket {
            capacity: count,
            rate: Rate {
                count,
                period: Duration::from_secs(60),
            },
        },
        plans: BTreeMap::new(),
        shadow: false,
        values: None,
    };
    let mut out = DefaultLimits {
        authenticated: Some(builtin("default", Scope::Tenant, 600)),
        unauthenticated: Some(builtin("default", Scope::ClientIp, 120)),
    };
    let Some(at) = at else { return out };
    if at.node.as_scalar().is_some_and(|s| s.as_str() == "none") {
        return DefaultLimits {
            authenticated: None,
            unauthenticated: None,
        };
    }
    let Some(f) = r.mapping(&at, schema::DEFAULT_LIMITS) else {
        return out;
    };
    for (key, slot) in [
        ("authenticated", &mut out.authenticated),
        ("unauthenticated", &mut out.unauthenticated),
    ] {
        let Some(at) = f.get(key) else { continue };
        if at.node.as_scalar().is_some_and(|s| s.as_str() == "none") {
            *slot = None;
            continue;
        }
        let Some(m) = r.mapping(&at, schema::DEFAULT_LIMIT) else {
            continue;
        };
        let scope = m.get("scope").and_then(|s| scope(r, &s));
        if let Some(bucket) = bucket_fields(r, &at, &m) {
            let default_scope = if key == "authenticated" {
                Scope::Tenant
            } else {
                Scope::ClientIp
            };
            *slot = Some(Limit {
                name: "default".into(),
                scope: scope.unwrap_or(default_scope),
                default: bucket,
                plans: BTreeMap::new(),
                shadow: m.get("shadow").and_then(|s| r.bool(&s)).unwrap_or(false),
                values: None,
            });
        }
    }
    out
}

fn concurrency(r: &mut Reader<'_>, at: &At<'_>, name: &str) -> Option<Concurrency> {
    if RESERVED_NAMES.contains(&name) {
        r.error(
            at,
            "concurrency.name_invalid",
            format!("\"{name}\" is reserved (default, global, tenant, ip)"),
        );
    } else if !name_ok(name) {
        r.error(
            at,
            "concurrency.name_invalid",
            "names use A-Z a-z 0-9 _ - only",
        );
    }
    let f = r.mapping(at, schema::CONCURRENCY)?;
    let scope = match f.get("scope") {
        Some(s) => scope(r, &s),
        None => Some(Scope::Tenant),
    };
    let slots = match f.get("slots") {
        Some(s) => r.count(&s, "concurrency.slots_invalid"),
        None => {
            missing(r, at, "slots");
            None
        }
    };
    let lease = match f.get("lease") {
        Some(l) => r.duration(&l).filter(|d| {
            let ok = *d >= Duration::from_secs(1);
            if !ok {
                r.error_value(&l, "concurrency.lease_invalid", "must be at least 1s");
            }
            ok
        }),
        None => Some(Duration::from_secs(30)),
    };
    Some(Concurrency {
        name: name.to_string(),
        scope: scope?,
        slots: slots?,
        lease: lease?,
    })
}

fn tenants(
    r: &mut Reader<'_>,
    at: Option<At<'_>>,
    declared: &Declared,
) -> BTreeMap<String, TenantOverride> {
    let mut out = BTreeMap::new();
    let Some(at) = at else { return out };
    for (tenant, at) in r.named(&at) {
        if !crate::auth::tenant_id_ok(tenant) {
            r.error(
                &at,
                "tenants.id_invalid",
                "tenant ids match [A-Za-z0-9._@-]{1,128}",
            );
        }
        let Some(f) = r.mapping(&at, schema::TENANT) else {
            continue;
        };
        let mut o = TenantOverride {
            plan: f.get("plan").and_then(|p| r.string(&p)),
            ..Default::default()
        };
        if let Some(l) = f.get("limits") {
            for (name, item) in r.named(&l) {
                if !declared.limits.contains(name) {
                    r.error(
                        &item,
                        "tenants.limit_unknown",
                        format!("no limit named \"{name}\""),
                    );
                    continue;
                }
                if let Some(b) = bucket(r, &item) {
                    o.limits.insert(name.to_string(), b);
                }
            }
        }
        out.insert(tenant.to_string(), o);
    }
    out
}

fn identity_headers(r: &mut Reader<'_>, at: Option<At<'_>>) -> IdentityHeaders {
    let mut out = IdentityHeaders {
        tenant: HeaderName::from_static("x-tenant-id"),
        user: HeaderName::from_static("x-user-id"),
        plan: HeaderName::from_static("x-plan"),
    };
    let Some(at) = at else { return out };
    let Some(f) = r.mapping(&at, schema::IDENTITY_HEADERS) else {
        return out;
    };
    for (key, slot) in [
        ("tenant", &mut out.tenant),
        ("user", &mut out.user),
        ("plan", &mut out.plan),
    ] {
        let Some(at) = f.get(key) else { continue };
        let Some(text) = r.string(&at) else { continue };
        match HeaderName::from_bytes(text.as_bytes()) {
            Ok(h) if RESERVED_HEADERS.contains(&h.as_str()) => r.error_value(
                &at,
                "config.header_invalid",
                "the gateway sets or reads this header itself",
            ),
            Ok(h) => *slot = h,
            Err(_) => r.error_value(&at, "config.header_invalid", "not a valid header name"),
        }
    }
    if out.tenant == out.user || out.tenant == out.plan || out.user == out.plan {
        r.error(
            &at,
            "config.header_invalid",
            "tenant, user and plan need three different headers",
        );
    }
    out
}

const METHODS: &[&str] = &[
    "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT",
];

struct Declared {
    limits: BTreeSet<String>,
    concurrency: BTreeSet<String>,
}

fn routes(
    r: &mut Reader<'_>,
    at: Option<At<'_>>,
    config: &Config,
    declared: &Declared,
) -> Vec<Route> {
    let mut out: Vec<Route> = Vec::new();
    let Some(at) = at else {
        r.problems
            .push((1, 1), "config.missing_field", "routes: required");
        return out;
    };
    for (i, node) in r.sequence(&at).into_iter().enumerate() {
        if let Some(route) = route(r, &at.item(i, node), config, declared) {
            if out.iter().any(|o| o.name == route.name) {
                r.error(
                    &at.item(i, node),
                    "routes.name_duplicate",
                    format!("route name \"{}\" is used twice", route.name),
                );
            }
            out.push(route);
        }
    }
    out
}

fn route(r: &mut Reader<'_>, at: &At<'_>, config: &Config, declared: &Declared) -> Option<Route> {
    let f = r.mapping(at, schema::ROUTE)?;
    let name = match f.get("name") {
        Some(n) => {
            let name = r.string(&n)?;
            if !name_ok(&name) {
                r.error_value(
                    &n,
                    "routes.name_invalid",
                    "route names use A-Z a-z 0-9 _ - only",
                );
            }
            name
        }
        None => {
            missing(r, at, "name");
            return None;
        }
    };
    let mut host = f.get("host").and_then(|h| host_match(r, &h));
    let mut path = PathMatch::Any;
    let mut methods = Vec::new();
    match f.get("match") {
        Some(m) => {
            if let Some(mf) = r.mapping(&m, schema::ROUTE_MATCH) {
                if let Some(h) = mf.get("host") {
                    host = host_match(r, &h);
                }
                match (mf.get("path"), mf.get("path_prefix")) {
                    (Some(p), None) => path = path_match(r, &p, false),
                    (None, Some(p)) => path = path_match(r, &p, true),
                    (Some(p), Some(_)) => r.error(
                        &p,
                        "routes.match_invalid",
                        "use path or path_prefix, not both",
                    ),
                    (None, None) => {}
                }
                if let Some(ms) = mf.get("methods") {
                    for (i, node) in r.sequence(&ms).into_iter().enumerate() {
                        let item = ms.item(i, node);
                        let Some(text) = r.string(&item) else {
                            continue;
                        };
                        let upper = text.to_ascii_uppercase();
                        if METHODS.contains(&upper.as_str()) {
                            methods.push(upper);
                        } else {
                            r.error_value(&item, "routes.method_invalid", "not an HTTP method");
                        }
                    }
                }
            }
        }
        None => missing(r, at, "match"),
    }
    let upstream = match f.get("upstream") {
        Some(u) => {
            let name = r.string(&u)?;
            if !config.upstreams.contains_key(&name) {
                r.error_value(&u, "routes.upstream_unknown", "no upstream with this name");
            }
            name
        }
        None => {
            missing(r, at, "upstream");
            String::new()
        }
    };
    let auth = match f.get("auth") {
        Some(a) => match r.string(&a).as_deref() {
            Some("none") => false,
            Some("required") => true,
            _ => {
                r.error_value(&a, "routes.auth_invalid", "must be none or required");
                false
            }
        },
        None => true,
    };
    if auth && config.auth.is_none() {
        r.error(
            at,
            "routes.auth_unconfigured",
            "this route authenticates (the default) but there is no `auth` section; add one or set `auth: none`",
        );
    }
    let exempt = f.get("exempt").and_then(|e| r.bool(&e)).unwrap_or(false);
    let limits = f.get("limits").map(|l| {
        let mut names = Vec::new();
        for (i, node) in r.sequence(&l).into_iter().enumerate() {
            let item = l.item(i, node);
            let Some(name) = r.string(&item) else {
                continue;
            };
            if names.contains(&name) {
                r.error_value(
                    &item,
                    "routes.limit_duplicate",
                    "this limit is listed twice",
                );
                continue;
            }
            match config.limits.get(&name) {
                Some(limit) => check_scope(r, &item, &limit.scope, auth, &path),
                None if declared.limits.contains(&name) => {}
                None => r.error_value(&item, "routes.limit_unknown", "no limit with this name"),
            }
            names.push(name);
        }
        names
    });
    let concurrency = f.get("concurrency").and_then(|c| {
        let name = r.string(&c)?;
        match config.concurrency.get(&name) {
            None if declared.concurrency.contains(&name) => {}
            None => r.error_value(
                &c,
                "routes.concurrency_unknown",
                "no concurrency policy with this name",
            ),
            Some(policy) => check_scope(r, &c, &policy.scope, auth, &path),
        }
        Some(name)
    });
    if config.store.kind == StoreKind::RedisCluster && !exempt {
        if let Some(names) = &limits {
            let tenant_keyed = |n: &String| {
                config.limits.get(n).is_none_or(|l| match l.scope {
                    Scope::Tenant | Scope::TenantUser | Scope::TenantToken => true,
                    Scope::Path(_) | Scope::Header(_) => auth,
                    Scope::ClientIp | Scope::Global => false,
                })
            };
            if names.len() > 1 && !names.iter().all(tenant_keyed) {
                r.error(
                    at,
                    "routes.cross_slot",
                    "on redis_cluster one atomic check needs one hash slot: a route with several \
                     limits must key them all by tenant",
                );
            }
            let client_keyed = !names.is_empty()
                && names
                    .iter()
                    .all(|n| config.limits.get(n).is_some_and(|l| l.client_keyed()));
            let guarded = f
                .get("client_ip_exempt")
                .and_then(|a| a.node.as_scalar().and_then(|s| s.as_bool()))
                != Some(true);
            if !auth && client_keyed && guarded && config.default_limits.unauthenticated.is_some() {
                r.error(
                    at,
                    "routes.cross_slot",
                    "on redis_cluster this auth: none route, limited only by client-chosen \
                     values, cannot also spend the per-address default in one atomic check: \
                     list the accepted values in the limit's scope, or set client_ip_exempt: true",
                );
            }
        }
    }
    if !exempt && limits.is_none() {
        let default = if auth {
            &config.default_limits.authenticated
        } else {
            &config.default_limits.unauthenticated
        };
        if let Some(d) = default {
            check_scope(r, at, &d.scope, auth, &path);
        }
    }
    let cost = f
        .get("cost")
        .and_then(|c| r.count(&c, "routes.cost_invalid"))
        .unwrap_or(1);
    let max_body = f.get("max_body").and_then(|m| r.size(&m));
    let strip_prefix =
        f.get("strip_prefix")
            .and_then(|s| match s.node.as_scalar().and_then(|n| n.as_bool()) {
                Some(true) => match &path {
                    PathMatch::Prefix(p) => Some(p.clone()),
                    _ => {
                        r.error(
                            &s,
                            "routes.strip_prefix_invalid",
                            "true needs match.path_prefix",
                        );
                        None
                    }
                },
                Some(false) => None,
                None => {
                    let text = r.string(&s)?;
                    if !text.starts_with('/') {
                        r.error_value(&s, "routes.strip_prefix_invalid", "must start with /");
                    }
                    Some(text)
                }
            });
    let forward_authorization = f
        .get("forward_authorization")
        .and_then(|a| r.bool(&a))
        .unwrap_or(true);
    let client_ip_exempt = f
        .get("client_ip_exempt")
        .and_then(|a| r.bool(&a))
        .unwrap_or(false);
    Some(Route {
        name,
        host,
        path,
        methods,
        upstream,
        auth,
        exempt,
        limits,
        concurrency,
        cost,
        max_body,
        strip_prefix,
        forward_authorization,
        client_ip_exempt,
    })
}

/// A scope must be computable on the route that uses it.
fn check_scope(r: &mut Reader<'_>, at: &At<'_>, scope: &Scope, auth: bool, path: &PathMatch) {
    match scope {
        Scope::Tenant | Scope::TenantUser | Scope::TenantToken if !auth => r.error_value(
            at,
            "routes.scope_needs_auth",
            "this limit is scoped by tenant but the route has `auth: none`",
        ),
        Scope::Path(capture) => {
            let known = matches!(path, PathMatch::Pattern(segs)
                if segs.iter().any(|s| matches!(s, Segment::Capture(c) if c == capture)));
            if !known {
                r.error_value(
                    at,
                    "routes.path_capture_unknown",
                    format!(
                        "the limit uses path capture {{{capture}}} but the route's path has none"
                    ),
                );
            }
        }
        _ => {}
    }
}

/// Headers identity headers may not name: the gateway sets or reads them.
const RESERVED_HEADERS: &[&str] = &[
    "authorization",
    "host",
    "connection",
    "content-length",
    "transfer-encoding",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-request-id",
];

fn host_match(r: &mut Reader<'_>, at: &At<'_>) -> Option<HostMatch> {
    let text = r.string(at)?.to_ascii_lowercase();
    if text
        .rsplit_once(':')
        .is_some_and(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
    {
        r.error_value(at, "routes.match_invalid", "hosts match without the port");
        return None;
    }
    if let Some(suffix) = text.strip_prefix("*.") {
        return Some(HostMatch::Suffix(format!(".{suffix}")));
    }
    if text.contains(['/', ' ', '*']) {
        r.error_value(
            at,
            "routes.match_invalid",
            "expected a host name or *.domain",
        );
        return None;
    }
    Some(HostMatch::Exact(text))
}

fn path_match(r: &mut Reader<'_>, at: &At<'_>, prefix: bool) -> PathMatch {
    let Some(text) = r.string(at) else {
        return PathMatch::Any;
    };
    if !text.starts_with('/') {
        r.error_value(at, "routes.match_invalid", "paths start with /");
        return PathMatch::Any;
    }
    if prefix {
        if text.contains(['{', '}']) {
            r.error_value(
                at,
                "routes.match_invalid",
                "path_prefix cannot hold {captures}",
            );
        }
        let trimmed = text.trim_end_matches('/');
        return if trimmed.is_empty() {
            PathMatch::Any
        } else {
            PathMatch::Prefix(trimmed.to_string())
        };
    }
    if !text.contains(['{', '}']) {
        return PathMatch::Exact(text);
    }
    let mut segments = Vec::new();
    for seg in text[1..].split('/') {
        if let Some(name) = seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            if !name_ok(name) {
                r.error_value(
                    at,
                    "routes.match_invalid",
                    "a capture is {NAME} with NAME of A-Z a-z 0-9 _ -",
                );
            }
            if segments
                .iter()
                .any(|s| matches!(s, Segment::Capture(c) if c == name))
            {
                r.error_value(
                    at,
                    "routes.match_invalid",
                    format!("capture {{{name}}} appears twice"),
                );
            }
            segments.push(Segment::Capture(name.to_string()));
        } else if seg.contains(['{', '}']) {
            r.error_value(
                at,
                "routes.match_invalid",
                "a capture must be a whole path segment",
            );
        } else {
            segments.push(Segment::Literal(seg.to_string()));
        }
    }
    PathMatch::Pattern(segments)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        let r = parse_rate("1/10s").unwrap();
        assert_eq!((r.count, r.period), (1, Duration::from_secs(10)));
        assert_eq!(r.interval_us(), 10_000_000);
        assert_eq!(parse_rate("600/m").unwrap().interval_us(), 100_000);
        assert_eq!(
            parse_rate("5/x").unwrap_err(),
            "unit must be one of s, m, h, d"
        );
        assert!(parse_rate("0/s").is_err());
        assert!(parse_rate("5").is_err());
    }
}
