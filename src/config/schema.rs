//! The config's keys, mapping by mapping. The reader refuses any key not
//! listed here, and `paths()` lists every key as a dotted path, so the
//! configuration reference can be checked against the parser.

pub const TOP: &[&str] = &[
    "server",
    "admin",
    "store",
    "auth",
    "upstreams",
    "limits",
    "default_limits",
    "concurrency",
    "tenants",
    "quota_headers",
    "identity_headers",
    "routes",
    "acknowledge",
];
pub const SERVER: &[&str] = &[
    "listen",
    "tls",
    "threads",
    "shutdown_grace",
    "trusted_proxies",
    "escaped_slashes",
    "path_parameters",
    "max_header_size",
    "max_header_field_size",
    "header_timeout",
    "body_idle_timeout",
    "keepalive_timeout",
    "max_connections",
    "max_connections_per_ip",
    "allow_underscores_in_headers",
    "ipv6_prefix",
    "proxy_protocol",
    "http2",
    "allow_cidrs",
    "deny_cidrs",
    "limit_exempt_cidrs",
];
pub const SERVER_TLS: &[&str] = &[
    "listen",
    "certificates",
    "cert",
    "key",
    "client_ca",
    "client_auth",
];
pub const SERVER_TLS_CERT: &[&str] = &["cert_file", "key_file", "hosts"];
pub const SERVER_HTTP2: &[&str] = &[
    "h2c",
    "max_concurrent_streams",
    "max_header_list_size",
    "max_resets_per_second",
];
pub const ADMIN: &[&str] = &["listen"];
pub const STORE: &[&str] = &[
    "kind",
    "url",
    "nodes",
    "password_env",
    "key_prefix",
    "timeout",
    "on_unavailable",
    "local_divisor",
];
pub const AUTH: &[&str] = &[
    "failure_limit",
    "issuer",
    "audience",
    "leeway",
    "keys",
    "claims",
    "default_plan",
];
pub const AUTH_CLAIMS: &[&str] = &["tenant", "user", "plan", "token"];
pub const AUTH_KEY: &[&str] = &[
    "kid",
    "alg",
    "secret_env",
    "public_key_file",
    "jwks_file",
    "jwks_url",
    "refresh",
];
pub const UPSTREAM: &[&str] = &[
    "targets",
    "tls",
    "sni",
    "tls_verify",
    "ca_file",
    "protocol",
    "passive_health",
    "resolve_every",
    "resolver",
    "balance",
    "connect_timeout",
    "read_timeout",
    "health_check_interval",
];
pub const BUCKET: &[&str] = &["capacity", "rate"];
pub const LIMIT: &[&str] = &["scope", "default", "plans", "shadow", "status"];
pub const DEFAULT_LIMITS: &[&str] = &["authenticated", "unauthenticated"];
pub const DEFAULT_LIMIT: &[&str] = &["scope", "capacity", "rate", "shadow"];
pub const CONCURRENCY: &[&str] = &["scope", "slots", "lease", "status"];
pub const TENANT: &[&str] = &["plan", "limits"];
pub const IDENTITY_HEADERS: &[&str] = &["tenant", "user", "plan", "client_cert"];
pub const ROUTE: &[&str] = &[
    "name",
    "match",
    "host",
    "upstream",
    "auth",
    "exempt",
    "limits",
    "concurrency",
    "cost",
    "max_body",
    "strip_prefix",
    "forward_authorization",
    "client_ip_exempt",
    "redirect",
    "https_redirect",
    "app_root",
    "rewrite",
    "request_headers",
    "response_headers",
    "allow_cidrs",
    "deny_cidrs",
    "limit_exempt_cidrs",
    "timeouts",
    "cors",
    "upstreams",
    "canary",
    "retries",
];
pub const ROUTE_MATCH: &[&str] = &[
    "host",
    "path",
    "path_prefix",
    "path_regex",
    "methods",
    "headers",
    "query",
];
pub const REDIRECT: &[&str] = &["to", "code"];
pub const REWRITE: &[&str] = &["path", "host"];
pub const HEADER_EDITS: &[&str] = &["set", "add", "remove"];
pub const TIMEOUTS: &[&str] = &["connect", "read", "write", "total"];
pub const SPLIT: &[&str] = &["name", "weight"];
pub const RETRIES: &[&str] = &["attempts", "on", "methods"];
pub const PASSIVE_HEALTH: &[&str] = &["failures", "cooldown"];
pub const CANARY: &[&str] = &[
    "upstream", "tenants", "plans", "percent", "header", "cookie",
];
pub const CORS: &[&str] = &[
    "origins",
    "methods",
    "headers",
    "expose",
    "credentials",
    "max_age",
];

/// Every key as a dotted path; operator-chosen names appear as `<name>`,
/// list items as `[]`: `limits.<name>.plans.<plan>.rate`, `routes[].match.path`.
pub fn paths() -> Vec<String> {
    let mut out: Vec<String> = TOP.iter().map(|k| k.to_string()).collect();
    let mut under = |parent: &str, keys: &[&str]| {
        out.extend(keys.iter().map(|k| format!("{parent}.{k}")));
    };
    under("server", SERVER);
    under("server.tls", SERVER_TLS);
    under("server.tls.certificates[]", SERVER_TLS_CERT);
    under("server.http2", SERVER_HTTP2);
    under("admin", ADMIN);
    under("store", STORE);
    under("auth", AUTH);
    under("auth.claims", AUTH_CLAIMS);
    under("auth.failure_limit", BUCKET);
    under("auth.keys[]", AUTH_KEY);
    under("upstreams.<name>", UPSTREAM);
    under("limits.<name>", LIMIT);
    under("limits.<name>.default", BUCKET);
    under("limits.<name>.plans.<plan>", BUCKET);
    under("default_limits", DEFAULT_LIMITS);
    under("default_limits.authenticated", DEFAULT_LIMIT);
    under("default_limits.unauthenticated", DEFAULT_LIMIT);
    under("concurrency.<name>", CONCURRENCY);
    under("tenants.<id>", TENANT);
    under("tenants.<id>.limits.<limit>", BUCKET);
    under("identity_headers", IDENTITY_HEADERS);
    under("routes[]", ROUTE);
    under("routes[].match", ROUTE_MATCH);
    under("routes[].redirect", REDIRECT);
    under("routes[].rewrite", REWRITE);
    under("routes[].request_headers", HEADER_EDITS);
    under("routes[].response_headers", HEADER_EDITS);
    under("routes[].timeouts", TIMEOUTS);
    under("routes[].cors", CORS);
    under("routes[].upstreams[]", SPLIT);
    under("routes[].canary", CANARY);
    under("routes[].retries", RETRIES);
    under("upstreams.<name>.passive_health", PASSIVE_HEALTH);
    out
}
