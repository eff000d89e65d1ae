//! The policy the import writes, typed: the sections it fills in (server,
//! admin, store, pools, limits, concurrency policies, routes and what a
//! route carries) as structs and enums, and their YAML keys. Each key is
//! named once, in the vocabulary of its mapping (`keys!`), which says where
//! config/schema.rs lists that mapping's keys; a test checks every key
//! against it, so a key the reader renames breaks here, not in a golden
//! file. Writing goes through `emit`'s one writer. What a value becomes is
//! decided by the families; this file holds types and their writing only.

use std::collections::BTreeMap;

use super::emit::{Fields, Key, Node};

#[macro_use]
mod keys;

keys! {
    /// The policy's top-level keys.
    TopKey at [""] {
        Server = "server",
        Admin = "admin",
        Store = "store",
        DefaultLimits = "default_limits",
        Auth = "auth",
        Upstreams = "upstreams",
        Limits = "limits",
        Concurrency = "concurrency",
        Routes = "routes",
        Acknowledge = "acknowledge",
    }
}

keys! {
    ServerKey at ["server"] {
        Listen = "listen",
        Tls = "tls",
        AllowUnderscoresInHeaders = "allow_underscores_in_headers",
        AllowCidrs = "allow_cidrs",
        DenyCidrs = "deny_cidrs",
        Compression = "compression",
        TcpServices = "tcp_services",
    }
}

keys! {
    CompressionKey at ["server.compression"] {
        Algorithms = "algorithms",
        GzipLevel = "gzip_level",
        BrotliLevel = "brotli_level",
        MinLength = "min_length",
        Types = "types",
    }
}

keys! {
    AdminKey at ["admin"] {
        Listen = "listen",
    }
}

keys! {
    StoreKey at ["store"] {
        Kind = "kind",
        Url = "url",
    }
}

keys! {
    PoolKey at ["upstreams.<name>"] {
        Targets = "targets",
        Tls = "tls",
        TlsVerify = "tls_verify",
        CaFile = "ca_file",
        CaPem = "ca_pem",
        ClientCertPem = "client_cert_pem",
        ClientKeyPem = "client_key_pem",
        Sni = "sni",
        Protocol = "protocol",
        ConnectTimeout = "connect_timeout",
        HealthCheck = "health_check",
        Balance = "balance",
        Affinity = "affinity",
        FairShare = "fair_share",
    }
}

keys! {
    LimitKey at ["limits.<name>"] {
        Scope = "scope",
        Default = "default",
        Status = "status",
        Shadow = "shadow",
        ExemptCidrs = "exempt_cidrs",
    }
}

keys! {
    BucketKey at ["limits.<name>.default"] {
        Capacity = "capacity",
        Rate = "rate",
    }
}

keys! {
    DirectKey at ["routes[].direct_response"] {
        Status = "status",
    }
}

keys! {
    ConcurrencyKey at ["concurrency.<name>"] {
        Scope = "scope",
        Slots = "slots",
        Status = "status",
    }
}

keys! {
    /// A route's keys, in the order they are written.
    RouteKey at ["routes[]"] {
        Name = "name",
        Match = "match",
        Fallback = "fallback",
        Upstream = "upstream",
        Auth = "auth",
        Redirect = "redirect",
        HttpsRedirect = "https_redirect",
        AppRoot = "app_root",
        Limits = "limits",
        Concurrency = "concurrency",
        LimitExemptCidrs = "limit_exempt_cidrs",
        AllowCidrs = "allow_cidrs",
        DenyCidrs = "deny_cidrs",
        MaxBody = "max_body",
        Rewrite = "rewrite",
        RequestHeaders = "request_headers",
        ResponseHeaders = "response_headers",
        Timeouts = "timeouts",
        Retries = "retries",
        Cors = "cors",
        Canary = "canary",
        DirectResponse = "direct_response",
        CookieRewrite = "cookie_rewrite",
        ErrorPages = "error_pages",
        Mirror = "mirror",
        LocationRewrite = "location_rewrite",
    }
}

keys! {
    MirrorKey at ["routes[].mirror"] {
        Upstream = "upstream",
        Host = "host",
        Body = "body",
    }
}

keys! {
    ErrorPagesKey at ["routes[].error_pages"] {
        Codes = "codes",
        Upstream = "upstream",
        Headers = "headers",
    }
}

keys! {
    CookieRewriteKey at ["routes[].cookie_rewrite"] {
        Domain = "domain",
        Path = "path",
    }
}

keys! {
    FromToKey at ["routes[].cookie_rewrite.domain", "routes[].cookie_rewrite.path", "routes[].location_rewrite"] {
        From = "from",
        To = "to",
    }
}

keys! {
    MatchKey at ["routes[].match"] {
        Host = "host",
        Path = "path",
        PathPrefix = "path_prefix",
        PathRegex = "path_regex",
        Headers = "headers",
    }
}

keys! {
    RedirectKey at ["routes[].redirect"] {
        To = "to",
        Code = "code",
    }
}

keys! {
    RewriteKey at ["routes[].rewrite"] {
        Path = "path",
        Host = "host",
    }
}

keys! {
    /// What a header edit does: the keys of `request_headers` and
    /// `response_headers`.
    EditKey at ["routes[].request_headers", "routes[].response_headers"] {
        Set = "set",
        Add = "add",
        Remove = "remove",
    }
}

keys! {
    TimeoutKey at ["routes[].timeouts"] {
        Connect = "connect",
        Read = "read",
        Write = "write",
    }
}

keys! {
    RetryKey at ["routes[].retries"] {
        Attempts = "attempts",
        RetryOn = "retry_on",
        Methods = "methods",
    }
}

keys! {
    CorsKey at ["routes[].cors"] {
        Origins = "origins",
        Methods = "methods",
        Headers = "headers",
        Expose = "expose",
        Credentials = "credentials",
        MaxAge = "max_age",
    }
}

keys! {
    CanaryKey at ["routes[].canary"] {
        Upstream = "upstream",
        Cookie = "cookie",
        Header = "header",
        Percent = "percent",
    }
}

keys! {
    AuthKey at ["auth"] {
        Methods = "methods",
    }
}

// A header match's `regex` is read by config/read/actions.rs from its own
// list, not schema.rs: the one key here the schema test cannot see.
#[derive(Debug, Clone, Copy)]
struct RegexKey;

impl Key for RegexKey {
    fn as_str(self) -> &'static str {
        "regex"
    }
}

/// The whole policy, borrowing what the draft holds.
pub struct Policy<'a> {
    pub server: Server<'a>,
    pub admin_listen: &'a str,
    pub redis_url: &'a str,
    pub upstreams: &'a BTreeMap<String, Pool>,
    pub limits: &'a [(String, Limit)],
    pub concurrency: &'a [(String, Concurrency)],
    /// `auth.methods`: what ingress-nginx's `auth-*` annotations became.
    pub methods: &'a [(String, AuthMethod)],
    pub routes: Vec<Node>,
    /// `acknowledge: [server.tls_host_uncovered]`.
    pub tls_host_uncovered: bool,
}

impl Policy<'_> {
    pub fn node(&self) -> Node {
        let mut f = Fields::default();
        f.put(TopKey::Server, self.server.node());
        let mut admin = Fields::default();
        admin.put(AdminKey::Listen, self.admin_listen);
        f.put(TopKey::Admin, admin.node());
        let mut store = Fields::default();
        store.put(StoreKey::Kind, "redis");
        store.put(StoreKey::Url, self.redis_url);
        f.put(TopKey::Store, store.node());
        f.put(TopKey::DefaultLimits, "none");
        if !self.methods.is_empty() {
            let mut auth = Fields::default();
            let methods = self.methods.iter().map(|(k, v)| (k, v));
            auth.put(AuthKey::Methods, named(methods, AuthMethod::node));
            f.put(TopKey::Auth, auth.node());
        }
        f.put(TopKey::Upstreams, named(self.upstreams, Pool::node));
        if !self.limits.is_empty() {
            f.put(
                TopKey::Limits,
                named(self.limits.iter().map(|(k, v)| (k, v)), Limit::node),
            );
        }
        if !self.concurrency.is_empty() {
            let policies = self.concurrency.iter().map(|(k, v)| (k, v));
            f.put(TopKey::Concurrency, named(policies, Concurrency::node));
        }
        f.put(TopKey::Routes, self.routes.clone());
        if self.tls_host_uncovered {
            f.put(
                TopKey::Acknowledge,
                Node::strs(["server.tls_host_uncovered"]),
            );
        }
        f.node()
    }
}

/// A mapping of policy-chosen names.
fn named<'a, T: 'a>(
    entries: impl IntoIterator<Item = (&'a String, &'a T)>,
    node: impl Fn(&T) -> Node,
) -> Node {
    let mut f = Fields::default();
    for (name, value) in entries {
        f.named(name, node(value));
    }
    f.node()
}

/// `server`: the listeners and the controller's server-wide settings.
pub struct Server<'a> {
    pub listen: String,
    pub tls: Option<ServerTls>,
    pub settings: &'a [ServerSetting],
}

impl Server<'_> {
    fn node(&self) -> Node {
        let mut f = Fields::default();
        f.put(ServerKey::Listen, vec![self.listen.clone()]);
        f.maybe(ServerKey::Tls, self.tls.as_ref().map(ServerTls::node));
        for setting in self.settings {
            match setting {
                ServerSetting::AllowUnderscoresInHeaders(on) => {
                    f.put(ServerKey::AllowUnderscoresInHeaders, *on)
                }
                ServerSetting::AllowCidrs(list) => f.put(ServerKey::AllowCidrs, list.clone()),
                ServerSetting::DenyCidrs(list) => f.put(ServerKey::DenyCidrs, list.clone()),
                ServerSetting::Compression(c) => f.put(ServerKey::Compression, c.node()),
                ServerSetting::TcpServices(list) => {
                    let nodes: Vec<Node> = list.iter().map(TcpService::node).collect();
                    f.put(ServerKey::TcpServices, nodes)
                }
            }
        }
        f.node()
    }
}

/// A server key the controller's ConfigMap sets, written in the order said.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerSetting {
    AllowUnderscoresInHeaders(bool),
    AllowCidrs(Vec<String>),
    DenyCidrs(Vec<String>),
    Compression(Compression),
    TcpServices(Vec<TcpService>),
}

/// `server.compression` from the ConfigMap: what it says, the rest the
/// policy's defaults (which are ingress-nginx's).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Compression {
    pub algorithms: Vec<&'static str>,
    pub gzip_level: Option<u32>,
    pub brotli_level: Option<u32>,
    pub min_length: Option<u64>,
    pub types: Option<Vec<String>>,
}

impl Compression {
    fn node(&self) -> Node {
        let mut f = Fields::default();
        let algorithms: Vec<String> = self.algorithms.iter().map(|a| a.to_string()).collect();
        f.put(CompressionKey::Algorithms, algorithms);
        f.maybe(CompressionKey::GzipLevel, self.gzip_level.map(u64::from));
        f.maybe(
            CompressionKey::BrotliLevel,
            self.brotli_level.map(u64::from),
        );
        f.maybe(CompressionKey::MinLength, self.min_length);
        f.maybe(CompressionKey::Types, self.types.clone());
        f.node()
    }
}

/// An upstream pool.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    pub targets: Vec<String>,
    pub tls: Option<PoolTls>,
    pub protocol: Option<Wire>,
    pub connect_timeout: String,
    /// False for a Service's endpoints (the cluster checks their
    /// readiness): written only then.
    pub health_check: bool,
    /// How it picks an endpoint, when not round robin (`load-balance`,
    /// `upstream-hash-by`).
    pub balance: Option<Balance>,
    /// Cookie affinity (`affinity: cookie`).
    pub affinity: Option<Affinity>,
    /// `fairgate.dev/fair-share`, as given (the reader checks it).
    pub fair_share: Option<Node>,
}

/// A pool's `balance` other than round robin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Balance {
    LeastRequests,
    ClientIp,
    Uri,
    Header(String),
    Cookie(String),
}

impl Balance {
    fn node(&self) -> Node {
        let named = |key: &str, name: &str| Node::Map(vec![(key.into(), Node::str(name))]);
        match self {
            Balance::LeastRequests => Node::str("least_requests"),
            Balance::ClientIp => Node::str("hash_client_ip"),
            Balance::Uri => Node::str("hash_uri"),
            Balance::Header(h) => named("hash_header", h),
            Balance::Cookie(c) => named("hash_cookie", c),
        }
    }
}

/// A TLS pool's `tls: true` and how its certificate is checked.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolTls {
    pub verify: bool,
    pub ca_file: Option<String>,
    pub ca_pem: Option<String>,
    pub sni: Option<String>,
    /// The chain and key shown to the backend (a Secret's, as PEM).
    pub client: Option<(String, String)>,
}

/// A pool's `protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    H2c,
    H2,
}

impl Pool {
    fn node(&self) -> Node {
        let mut f = Fields::default();
        f.put(PoolKey::Targets, self.targets.clone());
        if let Some(tls) = &self.tls {
            f.put(PoolKey::Tls, true);
            f.put(PoolKey::TlsVerify, tls.verify);
            f.maybe(PoolKey::CaFile, tls.ca_file.clone());
            f.maybe(PoolKey::CaPem, tls.ca_pem.clone());
            f.maybe(PoolKey::Sni, tls.sni.clone());
            if let Some((cert, key)) = &tls.client {
                f.put(PoolKey::ClientCertPem, cert.as_str());
                f.put(PoolKey::ClientKeyPem, key.as_str());
            }
        }
        let wire = self.protocol.map(|w| match w {
            Wire::H2c => "h2c",
            Wire::H2 => "h2",
        });
        f.maybe(PoolKey::Protocol, wire);
        f.put(PoolKey::ConnectTimeout, self.connect_timeout.as_str());
        if !self.health_check {
            f.put(PoolKey::HealthCheck, false);
        }
        f.maybe(PoolKey::Balance, self.balance.as_ref().map(Balance::node));
        f.maybe(
            PoolKey::Affinity,
            self.affinity.as_ref().map(Affinity::node),
        );
        f.maybe(PoolKey::FairShare, self.fair_share.clone());
        f.node()
    }
}

/// The key a limit or concurrency policy counts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    ClientIp,
}

impl Scope {
    fn as_str(self) -> &'static str {
        match self {
            Scope::ClientIp => "client_ip",
        }
    }
}

/// A rate limit: one bucket for everyone in its scope.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    pub scope: Scope,
    pub capacity: u64,
    /// `N/s` or `N/m`.
    pub rate: String,
    pub status: Option<u16>,
    /// Written when true.
    pub shadow: bool,
    /// Client addresses the limit does not count (`limit-whitelist`).
    pub exempt_cidrs: Option<Vec<String>>,
}

impl Limit {
    fn node(&self) -> Node {
        let mut f = Fields::default();
        f.put(LimitKey::Scope, self.scope.as_str());
        let mut bucket = Fields::default();
        bucket.put(BucketKey::Capacity, self.capacity);
        bucket.put(BucketKey::Rate, self.rate.as_str());
        f.put(LimitKey::Default, bucket.node());
        f.maybe(LimitKey::Status, self.status.map(u64::from));
        if self.shadow {
            f.put(LimitKey::Shadow, true);
        }
        f.maybe(LimitKey::ExemptCidrs, self.exempt_cidrs.clone());
        f.node()
    }
}

/// A concurrency policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Concurrency {
    pub scope: Scope,
    pub slots: u64,
    pub status: Option<u16>,
}

impl Concurrency {
    fn node(&self) -> Node {
        let mut f = Fields::default();
        f.put(ConcurrencyKey::Scope, self.scope.as_str());
        f.put(ConcurrencyKey::Slots, self.slots);
        f.maybe(ConcurrencyKey::Status, self.status.map(u64::from));
        f.node()
    }
}

mod affinity;
mod client_certs;
mod method;
mod route;
mod tls;

pub use affinity::*;
pub use client_certs::*;
pub use method::*;
pub use route::*;
pub use tls::*;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::schema;

    fn texts<K: Key>(all: &[K], at: &[&'static str]) -> Vec<String> {
        let mut out = Vec::new();
        for parent in at {
            for key in all {
                out.push(match *parent {
                    "" => key.as_str().to_string(),
                    p => format!("{p}.{}", key.as_str()),
                });
            }
        }
        out
    }

    #[test]
    fn every_key_the_import_writes_is_one_the_config_reads_there() {
        let written = [
            texts(TopKey::ALL, TopKey::AT),
            texts(ServerKey::ALL, ServerKey::AT),
            texts(TlsKey::ALL, TlsKey::AT),
            texts(CertKey::ALL, CertKey::AT),
            texts(ClientCertsKey::ALL, ClientCertsKey::AT),
            texts(PassthroughKey::ALL, PassthroughKey::AT),
            texts(TcpKey::ALL, TcpKey::AT),
            texts(AdminKey::ALL, AdminKey::AT),
            texts(StoreKey::ALL, StoreKey::AT),
            texts(PoolKey::ALL, PoolKey::AT),
            texts(AffinityKey::ALL, AffinityKey::AT),
            texts(CompressionKey::ALL, CompressionKey::AT),
            texts(CookieRewriteKey::ALL, CookieRewriteKey::AT),
            texts(FromToKey::ALL, FromToKey::AT),
            texts(ErrorPagesKey::ALL, ErrorPagesKey::AT),
            texts(MirrorKey::ALL, MirrorKey::AT),
            texts(LimitKey::ALL, LimitKey::AT),
            texts(BucketKey::ALL, BucketKey::AT),
            texts(ConcurrencyKey::ALL, ConcurrencyKey::AT),
            texts(RouteKey::ALL, RouteKey::AT),
            texts(MatchKey::ALL, MatchKey::AT),
            texts(RedirectKey::ALL, RedirectKey::AT),
            texts(RewriteKey::ALL, RewriteKey::AT),
            texts(EditKey::ALL, EditKey::AT),
            texts(TimeoutKey::ALL, TimeoutKey::AT),
            texts(RetryKey::ALL, RetryKey::AT),
            texts(CorsKey::ALL, CorsKey::AT),
            texts(CanaryKey::ALL, CanaryKey::AT),
            texts(DirectKey::ALL, DirectKey::AT),
            texts(AuthKey::ALL, AuthKey::AT),
            texts(MethodKey::ALL, MethodKey::AT),
            texts(ExternalKey::ALL, ExternalKey::AT),
            texts(SigninKey::ALL, SigninKey::AT),
            texts(AnswerCacheKey::ALL, AnswerCacheKey::AT),
            texts(BasicKey::ALL, BasicKey::AT),
            texts(IdentityKey::ALL, IdentityKey::AT),
        ];
        let read = schema::paths();
        let unknown: Vec<&String> = written
            .iter()
            .flatten()
            .filter(|p| !read.contains(p))
            .collect();
        assert!(
            unknown.is_empty(),
            "keys config/schema.rs does not list: {unknown:?}"
        );
        assert!(written.iter().all(|w| !w.is_empty()));
    }
}
