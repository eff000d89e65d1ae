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
    "log",
    "telemetry",
    "kubernetes",
];
pub const LOG: &[&str] = &["access"];
pub const KUBERNETES: &[&str] = &[
    "controller",
    "namespaces",
    "watch_without_class",
    "publish_service",
    "publish_address",
    "configmap",
    "cluster_domain",
    "annotation_prefix",
    "lease_name",
    "lease_duration",
    "event_refresh",
    "nginx_replicas",
    "gateway",
    "gateway_controller",
    "allow_local_endpoints",
    "admission",
];
pub const KUBERNETES_ADMISSION: &[&str] = &["listen", "cert_file", "key_file"];
pub const TELEMETRY: &[&str] = &["otlp", "sampling", "service_name", "tenant_attribute"];
pub const TELEMETRY_OTLP: &[&str] = &["endpoint", "timeout", "ca_file"];
pub const TELEMETRY_SAMPLING: &[&str] = &["ratio"];
pub const LOG_ACCESS: &[&str] = &["fields", "sample"];
pub const SERVER: &[&str] = &[
    "listen",
    "tls",
    "tcp_services",
    "threads",
    "shutdown_grace",
    "trusted_proxies",
    "escaped_slashes",
    "path_parameters",
    "max_header_size",
    "max_header_field_size",
    "header_timeout",
    "body_idle_timeout",
    "upgrade_idle_timeout",
    "keepalive_timeout",
    "max_connections",
    "max_connections_per_ip",
    "allow_underscores_in_headers",
    "ipv6_prefix",
    "proxy_protocol",
    "http2",
    "compression",
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
    "client_certificates",
    "passthrough",
];
pub const SERVER_TLS_PASSTHROUGH: &[&str] = &["hosts", "upstream"];
pub const SERVER_TCP: &[&str] = &["listen", "upstream", "idle_timeout"];
pub const SERVER_TLS_CLIENTS: &[&str] = &[
    "hosts",
    "ca_file",
    "ca_pem",
    "verify",
    "depth",
    "pass_certificate",
    "match_subject",
    "error_page",
];
pub const SERVER_TLS_CERT: &[&str] = &["cert_file", "key_file", "cert_pem", "key_pem", "hosts"];
pub const SERVER_HTTP2: &[&str] = &[
    "h2c",
    "max_concurrent_streams",
    "max_header_list_size",
    "max_resets_per_second",
];
pub const ADMIN: &[&str] = &["listen", "token_env"];
pub const STORE: &[&str] = &[
    "kind",
    "url",
    "nodes",
    "sentinels",
    "master_name",
    "password_env",
    "ca_file",
    "tls_verify",
    "cert_file",
    "key_file",
    "key_prefix",
    "timeout",
    "on_unavailable",
    "local_divisor",
    "durability",
];
pub const AUTH: &[&str] = &[
    "failure_limit",
    "user_failure_limit",
    "issuer",
    "audience",
    "leeway",
    "keys",
    "claims",
    "default_plan",
    "jwks_timeout",
    "methods",
];
pub const AUTH_METHOD: &[&str] = &["external", "basic", "api_key", "identity"];
pub const AUTH_EXTERNAL: &[&str] = &[
    "url",
    "method",
    "timeout",
    "request_headers",
    "response_headers",
    "strip_everywhere",
    "challenge_headers",
    "set_headers",
    "signin",
    "cache",
    "breaker",
    "ca_file",
];
pub const AUTH_SIGNIN: &[&str] = &["url", "param", "hosts"];
pub const AUTH_CACHE: &[&str] = &["cookie", "header", "per_uri", "ttl", "entries", "max_bytes"];
pub const AUTH_BREAKER: &[&str] = &["failures", "open_for"];
pub const AUTH_BASIC: &[&str] = &["htpasswd_file", "htpasswd", "realm", "users_file", "users"];
pub const AUTH_API_KEY: &[&str] = &["header", "query", "keys_file", "keys"];
pub const IDENTITY_MAP: &[&str] = &["tenant", "user", "plan"];
pub const AUTH_CLAIMS: &[&str] = &["tenant", "user", "plan", "token"];
pub const AUTH_KEY: &[&str] = &[
    "kid",
    "alg",
    "secret_env",
    "public_key_file",
    "jwks_file",
    "jwks_url",
    "refresh",
    "ca_file",
];
pub const UPSTREAM: &[&str] = &[
    "targets",
    "tls",
    "sni",
    "tls_verify",
    "ca_file",
    "ca_pem",
    "client_cert_file",
    "client_cert_pem",
    "client_key_file",
    "client_key_pem",
    "protocol",
    "passive_health",
    "resolve_every",
    "resolver",
    "balance",
    "affinity",
    "connect_timeout",
    "read_timeout",
    "health_check_interval",
    "health_check",
    "fair_share",
];
pub const FAIR_SHARE: &[&str] = &["max_in_flight", "adaptive", "by", "queue", "weights"];
pub const FAIR_SHARE_ADAPTIVE: &[&str] = &["min", "max"];
pub const FAIR_SHARE_QUEUE: &[&str] = &["per_tenant", "timeout"];
pub const BUCKET: &[&str] = &["capacity", "rate"];
pub const LIMIT: &[&str] = &[
    "scope",
    "default",
    "plans",
    "shadow",
    "status",
    "exempt_cidrs",
];
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
    "identity",
    "exempt",
    "limits",
    "concurrency",
    "cost",
    "max_body",
    "strip_prefix",
    "forward_authorization",
    "client_ip_exempt",
    "fallback",
    "redirect",
    "direct_response",
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
    "compression",
    "cookie_rewrite",
    "error_pages",
    "mirror",
    "location_rewrite",
];
pub const MIRROR: &[&str] = &["upstream", "host", "body"];
pub const ERROR_PAGES: &[&str] = &["codes", "upstream", "headers"];
pub const COOKIE_REWRITE: &[&str] = &["domain", "path"];
pub const FROM_TO: &[&str] = &["from", "to"];
pub const ROUTE_MATCH: &[&str] = &[
    "host",
    "path",
    "path_prefix",
    "path_regex",
    "methods",
    "headers",
    "query",
    "listener",
];
pub const REDIRECT: &[&str] = &["to", "code"];
pub const DIRECT_RESPONSE: &[&str] = &["status", "weight"];
pub const REWRITE: &[&str] = &["path", "host"];
pub const HEADER_EDITS: &[&str] = &["set", "add", "remove"];
pub const TIMEOUTS: &[&str] = &["connect", "read", "write", "total"];
pub const SPLIT: &[&str] = &["name", "weight"];
pub const RETRIES: &[&str] = &["attempts", "retry_on", "on", "methods"];
pub const PASSIVE_HEALTH: &[&str] = &["failures", "cooldown"];
pub const COMPRESSION: &[&str] = &[
    "algorithms",
    "gzip_level",
    "brotli_level",
    "zstd_level",
    "min_length",
    "types",
    "max_memory",
];
pub const AFFINITY: &[&str] = &[
    "cookie",
    "path",
    "domain",
    "max_age",
    "same_site",
    "secure",
    "change_on_failure",
];
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
    under("server.tls.client_certificates[]", SERVER_TLS_CLIENTS);
    under("server.tls.passthrough[]", SERVER_TLS_PASSTHROUGH);
    under("server.tcp_services[]", SERVER_TCP);
    under("server.http2", SERVER_HTTP2);
    under("admin", ADMIN);
    under("log", LOG);
    under("log.access", LOG_ACCESS);
    under("telemetry", TELEMETRY);
    under("kubernetes", KUBERNETES);
    under("kubernetes.admission", KUBERNETES_ADMISSION);
    under("telemetry.otlp", TELEMETRY_OTLP);
    under("telemetry.sampling", TELEMETRY_SAMPLING);
    under("store", STORE);
    under("auth", AUTH);
    under("auth.claims", AUTH_CLAIMS);
    under("auth.failure_limit", BUCKET);
    under("auth.user_failure_limit", BUCKET);
    under("auth.keys[]", AUTH_KEY);
    under("auth.methods.<name>", AUTH_METHOD);
    under("auth.methods.<name>.external", AUTH_EXTERNAL);
    under("auth.methods.<name>.external.signin", AUTH_SIGNIN);
    under("auth.methods.<name>.external.cache", AUTH_CACHE);
    under("auth.methods.<name>.external.breaker", AUTH_BREAKER);
    under("auth.methods.<name>.basic", AUTH_BASIC);
    under("auth.methods.<name>.api_key", AUTH_API_KEY);
    under("auth.methods.<name>.identity", IDENTITY_MAP);
    under("routes[].identity", IDENTITY_MAP);
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
    under("routes[].direct_response", DIRECT_RESPONSE);
    under("routes[].rewrite", REWRITE);
    under("routes[].request_headers", HEADER_EDITS);
    under("routes[].response_headers", HEADER_EDITS);
    under("routes[].timeouts", TIMEOUTS);
    under("routes[].cors", CORS);
    under("routes[].upstreams[]", SPLIT);
    under("routes[].canary", CANARY);
    under("routes[].retries", RETRIES);
    under("upstreams.<name>.passive_health", PASSIVE_HEALTH);
    under("upstreams.<name>.affinity", AFFINITY);
    under("upstreams.<name>.fair_share", FAIR_SHARE);
    under("upstreams.<name>.fair_share.adaptive", FAIR_SHARE_ADAPTIVE);
    under("upstreams.<name>.fair_share.queue", FAIR_SHARE_QUEUE);
    under("server.compression", COMPRESSION);
    under("routes[].cookie_rewrite", COOKIE_REWRITE);
    under("routes[].error_pages", ERROR_PAGES);
    under("routes[].mirror", MIRROR);
    under("routes[].cookie_rewrite.domain", FROM_TO);
    under("routes[].cookie_rewrite.path", FROM_TO);
    under("routes[].location_rewrite", FROM_TO);
    out
}

/// The config's shape as a JSON Schema (draft 2020-12), built from the same
/// key lists the reader checks against: every mapping lists its keys and
/// refuses others, `<name>` mappings take any name, `[]` are lists. Each
/// key's type, default and description come from `reference` (the text of
/// docs/configuration.md, which a test holds to these keys): editors and
/// CI catch an unknown or misplaced key, and a value of the wrong type or
/// outside its range, before `check`. Published as docs/fairgate.schema.json
/// (a test keeps it current).
pub fn json_schema(reference: &str) -> serde_json::Value {
    let mut root = Shape::default();
    for path in paths() {
        let mut node = &mut root;
        for segment in path.split('.') {
            node = if segment.starts_with('<') {
                node.named.get_or_insert_with(Default::default)
            } else {
                let (key, list) = match segment.strip_suffix("[]") {
                    Some(key) => (key, true),
                    None => (segment, false),
                };
                let child = node.child(key);
                if list {
                    child.items.get_or_insert_with(Default::default)
                } else {
                    child
                }
            };
        }
    }
    let rows = super::schema_types::rows(reference);
    let mut schema = root.json("", &rows);
    let map = schema.as_object_mut().expect("an object");
    map.insert(
        "$schema".into(),
        "https://json-schema.org/draft/2020-12/schema".into(),
    );
    map.insert("title".into(), "fairgate policy".into());
    schema
}

type Rows = std::collections::HashMap<String, super::schema_types::Documented>;

/// A node of the key tree: named keys, any-name children, list items.
#[derive(Default)]
struct Shape {
    keys: Vec<(String, Shape)>,
    named: Option<Box<Shape>>,
    items: Option<Box<Shape>>,
}

impl Shape {
    fn child(&mut self, key: &str) -> &mut Shape {
        let at = match self.keys.iter().position(|(k, _)| k == key) {
            Some(at) => at,
            None => {
                self.keys.push((key.to_string(), Shape::default()));
                self.keys.len() - 1
            }
        };
        &mut self.keys[at].1
    }

    /// The schema of the key at `path`, annotated from its reference row.
    fn json(&self, path: &str, rows: &Rows) -> serde_json::Value {
        use serde_json::Value;
        let leaf = self.keys.is_empty() && self.named.is_none() && self.items.is_none();
        let mut schema = self.structure(path, rows);
        let Value::Object(map) = &mut schema else {
            return schema;
        };
        match rows.get(path) {
            Some(doc) => super::schema_types::annotate(map, doc, leaf),
            // A key the reference names only as part of its parent's type
            // (a plan's bucket, `capacity` and `rate`): typed as the same
            // key where it has a row of its own.
            None if leaf => {
                let last = path.rsplit('.').next().unwrap_or(path);
                let suffix = format!(".{last}");
                let mut same: Vec<&String> = rows.keys().filter(|k| k.ends_with(&suffix)).collect();
                same.sort();
                if let Some(Value::Object(keywords)) = same
                    .first()
                    .map(|k| super::schema_types::typed(&rows[*k].kind))
                {
                    map.extend(keywords);
                }
            }
            None => {}
        }
        schema
    }

    fn structure(&self, path: &str, rows: &Rows) -> serde_json::Value {
        use serde_json::{json, Map, Value};
        if let Some(items) = &self.items {
            return json!({"type": "array", "items": items.json(&format!("{path}[]"), rows)});
        }
        if self.keys.is_empty() && self.named.is_none() {
            return json!({});
        }
        let properties: Map<String, Value> = self
            .keys
            .iter()
            .map(|(k, s)| {
                let child = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                (k.clone(), s.json(&child, rows))
            })
            .collect();
        let rest = match &self.named {
            Some(named) => named.json(&format!("{path}.<name>"), rows),
            None => Value::Bool(false),
        };
        let object =
            json!({"type": "object", "properties": properties, "additionalProperties": rest});
        // `default_limits: none` and `default_limits.<kind>: none` turn them off.
        if path.starts_with("default_limits") {
            return json!({"anyOf": [{"const": "none"}, object]});
        }
        object
    }
}
