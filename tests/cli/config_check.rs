//! `fairgate check` on the broken configs in `config/bad/`, through the real
//! binary: each file must fail (exit 1) with exactly the located problem lines
//! below, `FILE:LINE:COL: CODE: message`. Each fixture is named after the code
//! it triggers; `many_problems.yaml` proves every problem is reported at once.

use std::path::Path;
use std::process::{Command, Output};

use crate::common;

use common::check::check_in_dir;

/// Named by `secret_env` in the fixtures that need one valid HS256 key.
const SECRET_ENV: &str = "FAIRGATE_TEST_SECRET";
/// Named by `auth.key_missing.yaml`; it must be unset when `check` runs.
const UNSET_SECRET_ENV: &str = "FAIRGATE_TEST_UNSET_SECRET";

/// Runs `fairgate check -c CONFIG` from the crate root, so the file name it
/// prints is the relative path given here.
fn check(config: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fairgate"))
        .args(["check", "-c", config])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env(SECRET_ENV, "config-check-test-secret")
        // The secret the shipped configs (demo, example) name.
        .env("FAIRGATE_JWT_SECRET", "config-check-test-secret")
        .env("REDIS_PASSWORD", "config-check-test-password")
        .env_remove(UNSET_SECRET_ENV)
        .output()
        .expect("run fairgate check")
}

fn assert_problems(config: &str, expected: &[&str]) {
    let out = check(config);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{config}: expected exit 1\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        expected,
        "{config}: wrong problem lines\nstderr:\n{stderr}"
    );
}

/// One `#[test]` per fixture: `test_name: "config/bad/FILE" => [LINES],`.
/// Also collects every listed path into `FIXTURES`.
macro_rules! bad_configs {
    ($($test:ident: $config:literal => [$($line:literal),+ $(,)?],)+) => {
        const FIXTURES: &[&str] = &[$($config),+];

        $(
            #[test]
            fn $test() {
                assert_problems($config, &[$($line),+]);
            }
        )+
    };
}

bad_configs! {
    admin_listen_invalid: "config/bad/admin.listen_invalid.yaml" => [
        r#"config/bad/admin.listen_invalid.yaml:3:11: admin.listen_invalid: admin.listen "localhost:9090": expected IP:PORT, e.g. 0.0.0.0:8080"#,
    ],
    auth_api_keys_invalid: "config/bad/auth.api_keys_invalid.yaml" => [
        r#"config/bad/auth.api_keys_invalid.yaml:11:11: auth.api_keys_invalid: auth.methods.partners.api_key.keys: line 2: keys[0].sha256: must be 64 hex digits"#,
    ],
    item_5_auth_ca_invalid: "config/bad/auth.ca_invalid.yaml" => [
        r#"config/bad/auth.ca_invalid.yaml:9:72: auth.ca_invalid: auth.methods.sso.external.ca_file "../certs/api.key": config/bad/../certs/api.key: holds no usable CA certificate"#,
        r#"config/bad/auth.ca_invalid.yaml:11:71: auth.ca_invalid: auth.methods.plain.external.ca_file: ca_file needs an https:// URL: over http:// nothing is verified"#,
    ],
    auth_htpasswd_invalid: "config/bad/auth.htpasswd_invalid.yaml" => [
        r#"config/bad/auth.htpasswd_invalid.yaml:10:11: auth.htpasswd_invalid: auth.methods.staff.basic.htpasswd: line 2: the password is not hashed as bcrypt, {SHA} or $apr1$ (plain text, as htpasswd -p writes, is refused); re-create the entry with htpasswd -B"#,
    ],
    auth_identity_invalid: "config/bad/auth.identity_invalid.yaml" => [
        r#"config/bad/auth.identity_invalid.yaml:9:18: auth.identity_invalid: auth.methods.staff.identity.tenant: give {header: NAME} (external auth only) or {value: TEXT}"#,
    ],
    auth_method_invalid: "config/bad/auth.method_invalid.yaml" => [
        r#"config/bad/auth.method_invalid.yaml:9:23: auth.method_invalid: auth.methods.sso.external.url "/oauth2/auth": must be an absolute http:// or https:// URL"#,
        r#"config/bad/auth.method_invalid.yaml:9:79: auth.method_invalid: auth.methods.sso.external.response_headers[1] "Content-Length": frames the request or is written by the gateway itself; it is never taken from an auth service's answer"#,
    ],
    auth_signin_hosts_missing: "config/bad/auth.signin_hosts_missing.yaml" => [
        r#"config/bad/auth.signin_hosts_missing.yaml:10:9: auth.signin_hosts_missing: auth.methods.sso.external.signin: list the hosts a browser may be sent back to under `hosts`, so the sign-in redirect is never an open redirect"#,
    ],
    auth_users_invalid: "config/bad/auth.users_invalid.yaml" => [
        r#"config/bad/auth.users_invalid.yaml:11:11: auth.users_invalid: auth.methods.staff.basic.users: line 2: users.ann: tenant: not a tenant id ([A-Za-z0-9._@-]{1,128})"#,
    ],
    auth_key_invalid: "config/bad/auth.key_invalid.yaml" => [
        r#"config/bad/auth.key_invalid.yaml:7:23: auth.key_invalid: auth.keys[0].alg "HS999": alg must be one of HS256, HS384, HS512, RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA"#,
    ],
    auth_key_missing: "config/bad/auth.key_missing.yaml" => [
        r#"config/bad/auth.key_missing.yaml:7:42: auth.key_missing: auth.keys[0].secret_env "FAIRGATE_TEST_UNSET_SECRET": environment variable FAIRGATE_TEST_UNSET_SECRET is not set"#,
    ],
    concurrency_lease_invalid: "config/bad/concurrency.lease_invalid.yaml" => [
        r#"config/bad/concurrency.lease_invalid.yaml:12:12: concurrency.lease_invalid: concurrency.uploads.lease "500ms": must be at least 1s"#,
    ],
    concurrency_name_invalid: "config/bad/concurrency.name_invalid.yaml" => [
        "config/bad/concurrency.name_invalid.yaml:9:3: concurrency.name_invalid: concurrency.big uploads: names use A-Z a-z 0-9 _ - only",
    ],
    concurrency_slots_invalid: "config/bad/concurrency.slots_invalid.yaml" => [
        r#"config/bad/concurrency.slots_invalid.yaml:11:12: concurrency.slots_invalid: concurrency.uploads.slots "0": must be at least 1"#,
    ],
    concurrency_status_invalid: "config/bad/concurrency.status_invalid.yaml" => [
        r#"config/bad/concurrency.status_invalid.yaml:12:13: concurrency.status_invalid: concurrency.uploads.status "200": must be an HTTP status from 400 to 599"#,
    ],
    config_acknowledge_unknown: "config/bad/config.acknowledge_unknown.yaml" => [
        r#"config/bad/config.acknowledge_unknown.yaml:4:36: config.acknowledge_unknown: acknowledge[1] "store.memory": not a warning code; known: store.process_local, limits.client_keyed, server.escaped_slashes_keep, server.tls_host_uncovered"#,
    ],
    config_duration_invalid: "config/bad/config.duration_invalid.yaml" => [
        r#"config/bad/config.duration_invalid.yaml:4:19: config.duration_invalid: server.shutdown_grace "10": needs a unit: ms, s, m, h or d (e.g. 250ms, 30s)"#,
    ],
    server_tls_invalid: "config/bad/server.tls_invalid.yaml" => [
        "config/bad/server.tls_invalid.yaml:7:9: server.tls_invalid: server.tls.certificates[0]: config/bad/../certs/legacy.key is not the key of config/bad/../certs/api.pem (their public keys differ)",
    ],
    server_tls_clients_invalid: "config/bad/server.tls_clients_invalid.yaml" => [
        r#"config/bad/server.tls_clients_invalid.yaml:12:77: server.tls_invalid: server.tls.client_certificates[0].depth "9": must be 1 to 8"#,
        "config/bad/server.tls_clients_invalid.yaml:13:9: server.tls_invalid: server.tls.client_certificates[1]: api.example.com is in two entries",
        r#"config/bad/server.tls_clients_invalid.yaml:13:78: server.tls_invalid: server.tls.client_certificates[1].verify "optional_no_ca": must be required or optional"#,
        r#"config/bad/server.tls_clients_invalid.yaml:14:80: server.tls_invalid: server.tls.client_certificates[2].error_page "/help": must be an http:// or https:// URL"#,
        r#"config/bad/server.tls_clients_invalid.yaml:14:102: server.tls_invalid: server.tls.client_certificates[2].match_subject "CN=(": not a regular expression: error: unclosed group"#,
        "config/bad/server.tls_clients_invalid.yaml:16:9: server.tls_invalid: server.tls.passthrough[0]: b.example.com is in two entries (of passthrough or client_certificates)",
        r#"config/bad/server.tls_clients_invalid.yaml:16:9: server.tls_invalid: server.tls.passthrough[0]: upstream "argocd": no upstream with this name"#,
        r#"config/bad/server.tls_clients_invalid.yaml:17:9: server.tls_invalid: server.tls.passthrough[1]: upstream "api" has tls: true; a passthrough pool carries the client's own TLS"#,
    ],
    routes_location_rewrite_invalid: "config/bad/routes.location_rewrite_invalid.yaml" => [
        r#"config/bad/routes.location_rewrite_invalid.yaml:7:122: routes.location_rewrite_invalid: routes[0].location_rewrite.to "https://shop example/": no space or control byte"#,
    ],
    routes_mirror_invalid: "config/bad/routes.mirror_invalid.yaml" => [
        "config/bad/routes.mirror_invalid.yaml:10:68: routes.mirror_invalid: routes[0].mirror: a mirror pool speaks plain HTTP (tls: false)",
        r#"config/bad/routes.mirror_invalid.yaml:11:101: routes.mirror_invalid: routes[1].mirror.host "bad host/": not a host name"#,
    ],
    server_tcp_invalid: "config/bad/server.tcp_invalid.yaml" => [
        "config/bad/server.tcp_invalid.yaml:6:7: server.tcp_invalid: server.tcp_services[0]: 127.0.0.1:8080 is an HTTP listener's address",
        "config/bad/server.tcp_invalid.yaml:8:7: server.tcp_invalid: server.tcp_services[2]: 127.0.0.1:5432 is in two entries",
        r#"config/bad/server.tcp_invalid.yaml:8:7: server.tcp_invalid: server.tcp_services[2]: upstream "nope": no upstream with this name"#,
        r#"config/bad/server.tcp_invalid.yaml:9:7: server.tcp_invalid: server.tcp_services[3]: upstream "api" has tls: true; a TCP service passes the client's bytes as they are"#,
    ],
    server_tls_duplicate_name: "config/bad/server.tls_duplicate_name.yaml" => [
        "config/bad/server.tls_duplicate_name.yaml:9:9: server.tls_duplicate_name: server.tls.certificates[1]: api.example.com is claimed by config/bad/../certs/api-renewed.pem and by config/bad/../certs/api.pem; list it under hosts: of the one that should serve it",
    ],
    server_http2_invalid: "config/bad/server.http2_invalid.yaml" => [
        r#"config/bad/server.http2_invalid.yaml:4:46: server.http2_invalid: server.http2.max_concurrent_streams "0": must be at least 1"#,
    ],
    upstreams_protocol_invalid: "config/bad/upstreams.protocol_invalid.yaml" => [
        r#"config/bad/upstreams.protocol_invalid.yaml:7:50: upstreams.protocol_invalid: upstreams.grpc.protocol "h2": h2 needs tls: true (use h2c)"#,
    ],
    upstreams_tls_invalid: "config/bad/upstreams.tls_invalid.yaml" => [
        "config/bad/upstreams.tls_invalid.yaml:7:47: upstreams.tls_invalid: upstreams.api.ca_file: ca_file needs tls: true",
    ],
    limits_client_cert_without_ca: "config/bad/limits.client_cert_without_ca.yaml" => [
        "config/bad/limits.client_cert_without_ca.yaml:8:3: limits.scope_invalid: limits.per_service: scope client_cert needs server.tls.client_ca (no client sends a certificate unless asked)",
    ],
    routes_template_invalid: "config/bad/routes.template_invalid.yaml" => [
        r#"config/bad/routes.template_invalid.yaml:9:112: routes.template_invalid: routes[0].request_headers.set.X-User "{user}": no variable {user} here; known: path, query, host, hostname, client_ip, request_id, route, uid, tenant"#,
    ],
    routes_redirect_invalid: "config/bad/routes.redirect_invalid.yaml" => [
        r#"config/bad/routes.redirect_invalid.yaml:9:79: routes.redirect_invalid: routes[0].app_root "dashboard/": a path other than /, starting with /"#,
    ],
    routes_direct_response_invalid: "config/bad/routes.direct_response_invalid.yaml" => [
        "config/bad/routes.direct_response_invalid.yaml:10:108: routes.direct_response_invalid: routes[0].direct_response.weight: a weight is a share beside upstreams: give upstreams too",
    ],
    routes_rewrite_invalid: "config/bad/routes.rewrite_invalid.yaml" => [
        r#"config/bad/routes.rewrite_invalid.yaml:9:90: routes.rewrite_invalid: routes[0].rewrite.path "v2{rest}": a path starts with /"#,
    ],
    routes_header_reserved: "config/bad/routes.header_reserved.yaml" => [
        r#"config/bad/routes.header_reserved.yaml:9:112: routes.header_reserved: routes[0].request_headers.set.X-Forwarded-Proto: x-forwarded-proto is set or read by the gateway itself"#,
    ],
    routes_cors_invalid: "config/bad/routes.cors_invalid.yaml" => [
        r#"config/bad/routes.cors_invalid.yaml:9:76: routes.cors_invalid: routes[0].cors.origins: credentials cannot be allowed to any origin (*): list the origins"#,
    ],
    routes_split_invalid: "config/bad/routes.split_invalid.yaml" => [
        r#"config/bad/routes.split_invalid.yaml:8:52: routes.split_invalid: routes[0].upstream: give upstream or upstreams, not both"#,
    ],
    routes_retries_invalid: "config/bad/routes.retries_invalid.yaml" => [
        r#"config/bad/routes.retries_invalid.yaml:9:92: routes.retries_invalid: routes[0].retries.retry_on: 500: one of connect_failure, reset, 502, 503, 504"#,
    ],
    upstreams_passive_health_invalid: "config/bad/upstreams.passive_health_invalid.yaml" => [
        r#"config/bad/upstreams.passive_health_invalid.yaml:7:65: upstreams.passive_health_invalid: upstreams.api.passive_health.failures "0": must be at least 1"#,
    ],
    upstreams_fair_share_invalid: "config/bad/upstreams.fair_share_invalid.yaml" => [
        r#"config/bad/upstreams.fair_share_invalid.yaml:7:67: upstreams.fair_share_invalid: upstreams.zero.fair_share.max_in_flight "0": must be adaptive or a whole number from 1 to 1000000"#,
        r#"config/bad/upstreams.fair_share_invalid.yaml:8:67: upstreams.fair_share_invalid: upstreams.word.fair_share.max_in_flight "lots": must be adaptive or a whole number from 1 to 1000000"#,
        r#"config/bad/upstreams.fair_share_invalid.yaml:9:79: upstreams.fair_share_invalid: upstreams.bounds.fair_share.adaptive: max (4) is below min (8)"#,
        r#"config/bad/upstreams.fair_share_invalid.yaml:10:72: upstreams.fair_share_invalid: upstreams.fixed.fair_share.adaptive: adaptive needs max_in_flight: adaptive"#,
        r#"config/bad/upstreams.fair_share_invalid.yaml:11:73: upstreams.fair_share_invalid: upstreams.by.fair_share.by "path": must be tenant, tenant_user, client_ip or {header: NAME}"#,
        r#"config/bad/upstreams.fair_share_invalid.yaml:12:92: upstreams.fair_share_invalid: upstreams.queue.fair_share.queue.per_tenant "-1": must be a whole number from 0 to 100000"#,
        r#"config/bad/upstreams.fair_share_invalid.yaml:12:105: config.duration_invalid: upstreams.queue.fair_share.queue.timeout "0s": must be more than 0"#,
        r#"config/bad/upstreams.fair_share_invalid.yaml:13:90: upstreams.fair_share_invalid: upstreams.weights.fair_share.weights.gold "0": must be a whole number from 1 to 1000"#,
        r#"config/bad/upstreams.fair_share_invalid.yaml:14:42: config.missing_field: upstreams.missing.fair_share.max_in_flight: required"#,
    ],
    upstreams_resolver_invalid: "config/bad/upstreams.resolver_invalid.yaml" => [
        r#"config/bad/upstreams.resolver_invalid.yaml:7:51: upstreams.resolver_invalid: upstreams.api.resolver "dns.internal:53": expected IP:PORT, e.g. 0.0.0.0:8080"#,
    ],
    upstreams_balance_invalid: "config/bad/upstreams.balance_invalid.yaml" => [
        r#"config/bad/upstreams.balance_invalid.yaml:7:65: upstreams.balance_invalid: upstreams.api.balance "random": must be round_robin, least_requests, hash_tenant, hash_client_ip, hash_uri, {hash_header: NAME} or {hash_cookie: NAME}"#,
    ],
    upstreams_affinity_invalid: "config/bad/upstreams.affinity_invalid.yaml" => [
        r#"config/bad/upstreams.affinity_invalid.yaml:8:75: upstreams.affinity_invalid: upstreams.api.affinity.cookie "my;cookie": a cookie name has no separators or spaces"#,
        r#"config/bad/upstreams.affinity_invalid.yaml:8:99: upstreams.affinity_invalid: upstreams.api.affinity.same_site "always": same_site is lax, strict or none"#,
    ],
    server_compression_invalid: "config/bad/server.compression_invalid.yaml" => [
        r#"config/bad/server.compression_invalid.yaml:4:34: server.compression_invalid: server.compression.algorithms[1] "deflate": gzip, br or zstd"#,
        r#"config/bad/server.compression_invalid.yaml:4:56: server.compression_invalid: server.compression.gzip_level "11": 1 to 9"#,
    ],
    config_file_missing: "config/bad/config.file_missing.yaml" => [
        r#"config/bad/config.file_missing.yaml:4:41: config.file_missing: server.tls.cert "no-such-cert.pem": no such file config/bad/no-such-cert.pem"#,
    ],
    config_header_invalid: "config/bad/config.header_invalid.yaml" => [
        r#"config/bad/config.header_invalid.yaml:5:28: config.header_invalid: identity_headers.tenant "X Tenant": not a valid header name"#,
    ],
    config_missing_field: "config/bad/config.missing_field.yaml" => [
        "config/bad/config.missing_field.yaml:9:5: config.missing_field: routes[0].upstream: required",
    ],
    config_quota_headers_invalid: "config/bad/config.quota_headers_invalid.yaml" => [
        r#"config/bad/config.quota_headers_invalid.yaml:5:16: config.quota_headers_invalid: quota_headers "draft": must be one of ietf, legacy, both, none"#,
    ],
    config_size_invalid: "config/bad/config.size_invalid.yaml" => [
        r#"config/bad/config.size_invalid.yaml:9:79: config.size_invalid: routes[0].max_body "5 GiB": unit must be one of B, KiB, MiB, GiB, TiB, KB, MB, GB, TB"#,
    ],
    config_type_invalid: "config/bad/config.type_invalid.yaml" => [
        r#"config/bad/config.type_invalid.yaml:8:10: config.type_invalid: upstreams.api.tls "maybe": expected true or false"#,
    ],
    config_unknown_field: "config/bad/config.unknown_field.yaml" => [
        "config/bad/config.unknown_field.yaml:4:3: config.unknown_field: server.port: unknown field; expected one of listen, tls, tcp_services, threads, shutdown_grace, trusted_proxies, escaped_slashes, path_parameters, max_header_size, max_header_field_size, header_timeout, body_idle_timeout, upgrade_idle_timeout, keepalive_timeout, max_connections, max_connections_per_ip, allow_underscores_in_headers, ipv6_prefix, proxy_protocol, http2, compression, allow_cidrs, deny_cidrs, limit_exempt_cidrs",
    ],
    config_yaml_syntax: "config/bad/config.yaml_syntax.yaml" => [
        "config/bad/config.yaml_syntax.yaml:3:29: config.yaml_syntax: while parsing a block mapping, did not find expected key",
    ],
    kubernetes_invalid: "config/bad/kubernetes.invalid.yaml" => [
        r#"config/bad/kubernetes.invalid.yaml:8:15: kubernetes.invalid: kubernetes.controller "ingress-controller": expected a domain-prefixed path, e.g. fairgate.dev/ingress-controller"#,
        r#"config/bad/kubernetes.invalid.yaml:9:22: kubernetes.invalid: kubernetes.namespaces[1] "Web_Team": not a namespace name"#,
        r#"config/bad/kubernetes.invalid.yaml:11:3: kubernetes.invalid: kubernetes.publish_address: give publish_service or publish_address, not both"#,
        r#"config/bad/kubernetes.invalid.yaml:12:14: kubernetes.invalid: kubernetes.configmap "fairgate-controller": expected NAMESPACE/NAME"#,
    ],
    limits_capacity_invalid: "config/bad/limits.capacity_invalid.yaml" => [
        r#"config/bad/limits.capacity_invalid.yaml:12:17: limits.capacity_invalid: limits.api.default.capacity "0": must be at least 1"#,
    ],
    limits_name_invalid: "config/bad/limits.name_invalid.yaml" => [
        "config/bad/limits.name_invalid.yaml:9:3: limits.name_invalid: limits.api.v1: limit names use A-Z a-z 0-9 _ - only",
    ],
    limits_rate_invalid: "config/bad/limits.rate_invalid.yaml" => [
        r#"config/bad/limits.rate_invalid.yaml:11:36: limits.rate_invalid: limits.api.default.rate "5/x": unit must be one of s, m, h, d"#,
    ],
    limits_status_invalid: "config/bad/limits.status_invalid.yaml" => [
        r#"config/bad/limits.status_invalid.yaml:12:13: limits.status_invalid: limits.per_ip.status "302": must be an HTTP status from 400 to 599"#,
    ],
    limits_scope_invalid: "config/bad/limits.scope_invalid.yaml" => [
        r#"config/bad/limits.scope_invalid.yaml:10:12: limits.scope_invalid: limits.api.scope "per_user": must be tenant, tenant_user, tenant_token, client_ip, client_cert, global, {path: NAME} or {header: NAME}"#,
    ],
    routes_auth_invalid: "config/bad/routes.auth_invalid.yaml" => [
        r#"config/bad/routes.auth_invalid.yaml:12:63: routes.auth_invalid: routes[0].auth "optional": must be none, required (a bearer JWT) or a name under auth.methods"#,
    ],
    routes_auth_unconfigured: "config/bad/routes.auth_unconfigured.yaml" => [
        "config/bad/routes.auth_unconfigured.yaml:9:5: routes.auth_unconfigured: routes[0]: this route authenticates with a bearer JWT (the default) but there is no `auth` section with keys; add one, name a method of auth.methods or set `auth: none`",
    ],
    routes_concurrency_unknown: "config/bad/routes.concurrency_unknown.yaml" => [
        r#"config/bad/routes.concurrency_unknown.yaml:17:18: routes.concurrency_unknown: routes[0].concurrency "downloads": no concurrency policy with this name"#,
    ],
    routes_cost_invalid: "config/bad/routes.cost_invalid.yaml" => [
        r#"config/bad/routes.cost_invalid.yaml:9:75: routes.cost_invalid: routes[0].cost "0": must be at least 1"#,
    ],
    routes_limit_unknown: "config/bad/routes.limit_unknown.yaml" => [
        r#"config/bad/routes.limit_unknown.yaml:13:83: routes.limit_unknown: routes[0].limits[1] "burst": no limit with this name"#,
    ],
    routes_match_invalid: "config/bad/routes.match_invalid.yaml" => [
        r#"config/bad/routes.match_invalid.yaml:9:38: routes.match_invalid: routes[0].match.path_prefix "v1": paths start with /"#,
    ],
    routes_method_invalid: "config/bad/routes.method_invalid.yaml" => [
        r#"config/bad/routes.method_invalid.yaml:9:56: routes.method_invalid: routes[0].match.methods[1] "FETCH": not an HTTP method"#,
    ],
    routes_name_duplicate: "config/bad/routes.name_duplicate.yaml" => [
        r#"config/bad/routes.name_duplicate.yaml:10:5: routes.name_duplicate: routes[1]: route name "api" is used twice"#,
    ],
    routes_name_invalid: "config/bad/routes.name_invalid.yaml" => [
        r#"config/bad/routes.name_invalid.yaml:9:12: routes.name_invalid: routes[0].name "api/v1": route names use A-Z a-z 0-9 _ - only"#,
    ],
    routes_path_capture_unknown: "config/bad/routes.path_capture_unknown.yaml" => [
        r#"config/bad/routes.path_capture_unknown.yaml:13:88: routes.path_capture_unknown: routes[0].limits[0] "webhooks": the limit uses path capture {provider} but the route's path has none"#,
    ],
    routes_scope_needs_auth: "config/bad/routes.scope_needs_auth.yaml" => [
        r#"config/bad/routes.scope_needs_auth.yaml:13:78: routes.scope_needs_auth: routes[0].limits[0] "api": this limit is scoped by tenant but the route has `auth: none`"#,
    ],
    routes_strip_prefix_invalid: "config/bad/routes.strip_prefix_invalid.yaml" => [
        "config/bad/routes.strip_prefix_invalid.yaml:9:85: routes.strip_prefix_invalid: routes[0].strip_prefix: true needs match.path_prefix",
    ],
    routes_upstream_unknown: "config/bad/routes.upstream_unknown.yaml" => [
        r#"config/bad/routes.upstream_unknown.yaml:9:52: routes.upstream_unknown: routes[0].upstream "backend": no upstream with this name"#,
    ],
    server_cidr_invalid: "config/bad/server.cidr_invalid.yaml" => [
        r#"config/bad/server.cidr_invalid.yaml:4:35: server.cidr_invalid: server.trusted_proxies[1] "10.0.0.0/33": expected a CIDR such as 10.0.0.0/8 or an IP address"#,
    ],
    server_listen_invalid: "config/bad/server.listen_invalid.yaml" => [
        r#"config/bad/server.listen_invalid.yaml:3:30: server.listen_invalid: server.listen[1] "8081": expected IP:PORT, e.g. 0.0.0.0:8080"#,
    ],
    server_threads_invalid: "config/bad/server.threads_invalid.yaml" => [
        r#"config/bad/server.threads_invalid.yaml:4:12: server.threads_invalid: server.threads "0": must be 1 to 1024"#,
    ],
    store_durability_invalid: "config/bad/store.durability_invalid.yaml" => [
        r#"config/bad/store.durability_invalid.yaml:5:15: store.durability_invalid: store.durability "sync": must be one of fast, replicated"#,
    ],
    store_key_prefix_invalid: "config/bad/store.key_prefix_invalid.yaml" => [
        r#"config/bad/store.key_prefix_invalid.yaml:5:15: store.key_prefix_invalid: store.key_prefix "{fairgate}:": must not contain { or }"#,
    ],
    store_kind_invalid: "config/bad/store.kind_invalid.yaml" => [
        r#"config/bad/store.kind_invalid.yaml:3:9: store.kind_invalid: store.kind "postgres": must be one of redis, redis_cluster, redis_sentinel, memory"#,
    ],
    store_local_divisor_invalid: "config/bad/store.local_divisor_invalid.yaml" => [
        r#"config/bad/store.local_divisor_invalid.yaml:5:18: store.local_divisor_invalid: store.local_divisor "0": must be at least 1"#,
    ],
    store_master_name_invalid: "config/bad/store.master_name_invalid.yaml" => [
        "config/bad/store.master_name_invalid.yaml:2:1: store.master_name_invalid: store: kind redis_sentinel needs `master_name`",
    ],
    store_on_unavailable_invalid: "config/bad/store.on_unavailable_invalid.yaml" => [
        r#"config/bad/store.on_unavailable_invalid.yaml:5:19: store.on_unavailable_invalid: store.on_unavailable "retry": must be one of local, allow, deny"#,
    ],
    store_tls_invalid: "config/bad/store.tls_invalid.yaml" => [
        "config/bad/store.tls_invalid.yaml:6:12: store.tls_invalid: store.ca_file: TLS settings need rediss:// URLs; store.url uses redis://",
    ],
    store_url_invalid: "config/bad/store.url_invalid.yaml" => [
        r#"config/bad/store.url_invalid.yaml:4:8: store.url_invalid: store.url "http://127.0.0.1:6379/0": expected redis://HOST:PORT[/DB] or rediss://HOST:PORT[/DB]"#,
    ],
    tenants_id_invalid: "config/bad/tenants.id_invalid.yaml" => [
        "config/bad/tenants.id_invalid.yaml:9:3: tenants.id_invalid: tenants.acme corp: tenant ids match [A-Za-z0-9._@-]{1,128}",
    ],
    tenants_limit_unknown: "config/bad/tenants.limit_unknown.yaml" => [
        r#"config/bad/tenants.limit_unknown.yaml:15:7: tenants.limit_unknown: tenants.acme.limits.uploads: no limit named "uploads""#,
    ],
    upstreams_target_invalid: "config/bad/upstreams.target_invalid.yaml" => [
        r#"config/bad/upstreams.target_invalid.yaml:7:33: upstreams.target_invalid: upstreams.api.targets[1] "127.0.0.1:0": expected HOST:PORT"#,
    ],
    routes_limit_duplicate: "config/bad/routes.limit_duplicate.yaml" => [
        r#"config/bad/routes.limit_duplicate.yaml:11:85: routes.limit_duplicate: routes[0].limits[1] "hooks": this limit is listed twice"#,
    ],
    routes_cross_slot: "config/bad/routes.cross_slot.yaml" => [
        "config/bad/routes.cross_slot.yaml:14:5: routes.cross_slot: routes[0]: on redis_cluster one atomic check needs one hash slot: a route with several limits must key them all by tenant",
    ],
    server_escaped_slashes_invalid: "config/bad/server.escaped_slashes_invalid.yaml" => [
        r#"config/bad/server.escaped_slashes_invalid.yaml:4:20: server.escaped_slashes_invalid: server.escaped_slashes "allow": must be one of reject, decode, keep"#,
    ],
    server_size_invalid: "config/bad/server.size_invalid.yaml" => [
        r#"config/bad/server.size_invalid.yaml:4:20: server.size_invalid: server.max_header_size "4MiB": must be 1024 bytes to 1MiB"#,
        r#"config/bad/server.size_invalid.yaml:5:26: server.size_invalid: server.max_header_field_size "100": must be 256 bytes to 1MiB"#,
    ],
    server_ipv6_prefix_invalid: "config/bad/server.ipv6_prefix_invalid.yaml" => [
        r#"config/bad/server.ipv6_prefix_invalid.yaml:4:16: server.ipv6_prefix_invalid: server.ipv6_prefix "32": must be 48 to 128"#,
    ],
    server_connections_invalid: "config/bad/server.connections_invalid.yaml" => [
        r#"config/bad/server.connections_invalid.yaml:4:27: server.connections_invalid: server.max_connections_per_ip "0": must be at least 1"#,
    ],
    store_password_missing: "config/bad/store.password_missing.yaml" => [
        r#"config/bad/store.password_missing.yaml:5:17: store.password_missing: store.password_env "FAIRGATE_TEST_UNSET_SECRET": environment variable FAIRGATE_TEST_UNSET_SECRET is not set"#,
    ],
    one_problem_per_mistake: "config/bad/one_problem_per_mistake.yaml" => [
        r#"config/bad/one_problem_per_mistake.yaml:11:34: limits.rate_invalid: limits.hooks.default.rate "1/999999999999999999d": period must be at most a year"#,
        r#"config/bad/one_problem_per_mistake.yaml:13:29: routes.match_invalid: routes[0].match.path "/a/{x}/{x}": capture {x} appears twice"#,
    ],
    log_field_unknown: "config/bad/log.field_unknown.yaml" => [
        r#"config/bad/log.field_unknown.yaml:12:29: log.field_unknown: log.access.fields[2] "query": not an access log field; one of route, method, path, upstream, upstream_path, status, duration_ms, tenant, decision, client, request_id, error, request_bytes, response_bytes, user_agent, host, upstream_addr, upstream_status, upstream_ms, gateway_ms, tls_version, sni, trace_id"#,
    ],
    log_sample_invalid: "config/bad/log.sample_invalid.yaml" => [
        r#"config/bad/log.sample_invalid.yaml:12:13: log.sample_invalid: log.access.sample "10%": must be a number from 0 to 1"#,
    ],
    telemetry_endpoint_invalid: "config/bad/telemetry.endpoint_invalid.yaml" => [
        r#"config/bad/telemetry.endpoint_invalid.yaml:12:15: telemetry.endpoint_invalid: telemetry.otlp.endpoint "grpc://collector:4317": expected an http:// or https:// URL"#,
    ],
    item_5_telemetry_ca_invalid: "config/bad/telemetry.ca_invalid.yaml" => [
        r#"config/bad/telemetry.ca_invalid.yaml:14:14: telemetry.ca_invalid: telemetry.otlp.ca_file "../certs/api.key": config/bad/../certs/api.key: holds no usable CA certificate"#,
    ],
    telemetry_ratio_invalid: "config/bad/telemetry.ratio_invalid.yaml" => [
        r#"config/bad/telemetry.ratio_invalid.yaml:12:21: telemetry.ratio_invalid: telemetry.sampling.ratio "1.5": must be a number from 0 to 1"#,
    ],
    many_problems: "config/bad/many_problems.yaml" => [
        r#"config/bad/many_problems.yaml:4:19: config.duration_invalid: server.shutdown_grace "10": needs a unit: ms, s, m, h or d (e.g. 250ms, 30s)"#,
        "config/bad/many_problems.yaml:5:3: config.unknown_field: server.port: unknown field; expected one of listen, tls, tcp_services, threads, shutdown_grace, trusted_proxies, escaped_slashes, path_parameters, max_header_size, max_header_field_size, header_timeout, body_idle_timeout, upgrade_idle_timeout, keepalive_timeout, max_connections, max_connections_per_ip, allow_underscores_in_headers, ipv6_prefix, proxy_protocol, http2, compression, allow_cidrs, deny_cidrs, limit_exempt_cidrs",
        r#"config/bad/many_problems.yaml:7:9: store.kind_invalid: store.kind "postgres": must be one of redis, redis_cluster, redis_sentinel, memory"#,
        r#"config/bad/many_problems.yaml:18:35: limits.rate_invalid: limits.burst.default.rate "5/x": unit must be one of s, m, h, d"#,
        r#"config/bad/many_problems.yaml:20:55: routes.upstream_unknown: routes[0].upstream "backend": no upstream with this name"#,
        r#"config/bad/many_problems.yaml:21:83: routes.limit_unknown: routes[1].limits[1] "nope": no limit with this name"#,
    ],
}

#[test]
fn every_bad_config_has_a_test() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/bad");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .expect("read config/bad")
        .map(|entry| entry.expect("read config/bad entry").file_name())
        .map(|name| format!("config/bad/{}", name.to_string_lossy()))
        .filter(|path| path.ends_with(".yaml"))
        .collect();
    on_disk.sort();
    let mut listed = FIXTURES.to_vec();
    listed.sort_unstable();
    assert_eq!(on_disk, listed, "config/bad/ and the table above differ");
}

#[test]
fn every_shipped_config_is_ok() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let name = format!("config/{}", path.file_name().unwrap().to_string_lossy());
        let out = check(&name);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{name}: expected exit 0\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
        assert_eq!(stdout.lines().next(), Some("ok"), "{name}:\n{stdout}");
        assert!(
            !stdout.contains("(warning)"),
            "{name} has unacknowledged warnings:\n{stdout}"
        );
        checked += 1;
    }
    assert!(checked >= 1);
}

/// `check` on YAML written to a temporary file: (exit code, stdout lines).
pub(crate) fn check_text(yaml: &str) -> (Option<i32>, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("edge.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fairgate"))
        .args(["check", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    let shown = path.display().to_string();
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.replace(&shown, "edge.yaml"))
        .collect();
    (out.status.code(), lines)
}

const CLIENT_KEYED: &str = r#"server:
  listen: ["127.0.0.1:8080"]
  escaped_slashes: keep
store: {kind: memory}
acknowledge: [store.process_local]
upstreams: {api: {targets: ["127.0.0.1:3000"]}}
limits:
  hooks: {scope: {path: provider}, default: {capacity: 5, rate: 1/s}}
  listed: {scope: {path: provider, values: [stripe]}, default: {capacity: 5, rate: 1/s}}
routes:
  - {name: hooks, match: {path: "/hooks/{provider}"}, upstream: api, auth: none, limits: [hooks]}
  - {name: bare, match: {path: "/bare/{provider}"}, upstream: api, auth: none, limits: [hooks], client_ip_exempt: true}
  - {name: listed, match: {path: "/listed/{provider}"}, upstream: api, auth: none, limits: [listed]}
"#;

#[test]
fn client_keyed_routes_and_kept_slashes_are_warned_about() {
    let (code, lines) = check_text(CLIENT_KEYED);
    assert_eq!(code, Some(0), "{lines:?}");
    assert_eq!(
        lines[..3],
        [
            r#"edge.yaml:1:1: server.escaped_slashes_keep: server.escaped_slashes "keep": fairgate routes /a%2Fb as one segment, but many frameworks decode it to /a/b and route it elsewhere; make sure every upstream keeps %2F escaped, or list server.escaped_slashes_keep under `acknowledge:` (warning)"#,
            r#"edge.yaml:11:5: limits.client_keyed: route "hooks" has auth: none and only limits keyed on a path or header value the client chooses, so every new value gets a full bucket; it also spends default_limits.unauthenticated per client address. List the accepted values (`scope: {path: NAME, values: [...]}`), or list limits.client_keyed under `acknowledge:` (warning)"#,
            r#"edge.yaml:12:5: limits.client_keyed: route "bare" has auth: none and only limits keyed on a path or header value the client chooses, so every new value gets a full bucket; nothing else bounds it. List the accepted values (`scope: {path: NAME, values: [...]}`), or list limits.client_keyed under `acknowledge:` (warning)"#,
        ]
    );
    assert_eq!(lines[3], "ok");
    let acknowledged = CLIENT_KEYED.replace(
        "acknowledge: [store.process_local]",
        "acknowledge: [store.process_local, limits.client_keyed, server.escaped_slashes_keep]",
    );
    let (code, lines) = check_text(&acknowledged);
    assert_eq!((code, lines[0].as_str()), (Some(0), "ok"), "{lines:?}");
}

#[test]
fn on_a_cluster_a_client_keyed_route_must_list_values_or_opt_out() {
    let yaml = CLIENT_KEYED.replace(
        "store: {kind: memory}",
        "store: {kind: redis_cluster, nodes: [\"redis://127.0.0.1:7000\"]}",
    );
    let (code, lines) = check_text(&yaml);
    assert_eq!(code, Some(1), "{lines:?}");
    assert_eq!(
        lines,
        [
            r#"edge.yaml:11:5: routes.cross_slot: routes[0]: on redis_cluster this auth: none route, limited only by client-chosen values, cannot also spend the per-address default in one atomic check: list the accepted values in the limit's scope, or set client_ip_exempt: true"#
        ]
    );
}

#[test]
fn proxy_protocol_needs_trusted_proxies() {
    let yaml = CLIENT_KEYED.replace(
        "  escaped_slashes: keep",
        "  escaped_slashes: keep\n  proxy_protocol: true",
    );
    let (code, lines) = check_text(&yaml);
    assert_eq!(code, Some(1), "{lines:?}");
    assert_eq!(
        lines,
        ["edge.yaml:4:19: server.proxy_protocol_untrusted: server.proxy_protocol: PROXY protocol is believed only from trusted_proxies; list the load balancers there"]
    );
}

#[test]
fn a_route_host_no_certificate_names_is_warned_about() {
    let certs = concat!(env!("CARGO_MANIFEST_DIR"), "/config/certs");
    let yaml = format!(
        r#"server:
  listen: ["127.0.0.1:8080"]
  tls: {{listen: "127.0.0.1:8443", certificates: [{{cert_file: "{certs}/api.pem", key_file: "{certs}/api.key"}}]}}
store: {{kind: memory}}
acknowledge: [store.process_local]
upstreams: {{api: {{targets: ["127.0.0.1:3000"]}}}}
routes:
  - {{name: api, match: {{host: api.example.com, path_prefix: /}}, upstream: api, auth: none}}
  - {{name: shop, match: {{host: shop.example.com, path_prefix: /}}, upstream: api, auth: none}}
  - {{name: any, match: {{path_prefix: /}}, upstream: api, auth: none}}
"#
    );
    let (code, lines) = check_text(&yaml);
    assert_eq!(code, Some(0), "{lines:?}");
    assert_eq!(
        lines[..2],
        [
            r#"edge.yaml:9:5: server.tls_host_uncovered: route "shop" serves host shop.example.com, which no certificate in server.tls names; its HTTPS clients get the default certificate and fail to verify it. Add a certificate for it, or list server.tls_host_uncovered under `acknowledge:` (warning)"#,
            "ok",
        ]
    );
}

/// Issue 39 item 7: the same certificate twice (a Secret mounted as the
/// default and named by a Gateway's listener as well) claims its names
/// once; `config/bad/server.tls_duplicate_name.yaml` has two different ones.
#[test]
fn item_7_the_same_certificate_twice_claims_its_names_once() {
    let certs = concat!(env!("CARGO_MANIFEST_DIR"), "/config/certs");
    let pair = format!("{{cert_file: \"{certs}/api.pem\", key_file: \"{certs}/api.key\"}}");
    let yaml = format!(
        r#"server:
  listen: ["127.0.0.1:8080"]
  tls: {{listen: "127.0.0.1:8443", certificates: [{pair}, {pair}]}}
store: {{kind: memory}}
acknowledge: [store.process_local]
upstreams: {{api: {{targets: ["127.0.0.1:3000"]}}}}
routes:
  - {{name: api, match: {{host: api.example.com, path_prefix: /}}, upstream: api, auth: none}}
"#
    );
    let (code, lines) = check_text(&yaml);
    assert_eq!(code, Some(0), "{lines:?}");
    assert_eq!(lines[0], "ok", "{lines:?}");
}

/// A policy whose `store` is `store` (one flow mapping).
fn with_store(store: &str) -> String {
    format!(
        r#"server: {{listen: ["127.0.0.1:8080"]}}
store: {store}
upstreams: {{api: {{targets: ["127.0.0.1:3000"]}}}}
routes:
  - {{name: api, match: {{path_prefix: /}}, upstream: api, auth: none}}
"#
    )
}

const EXAMPLE_CA: &str = include_str!("../../config/certs/example-ca.pem");
const API_PEM: &str = include_str!("../../config/certs/api.pem");
const API_KEY: &str = include_str!("../../config/certs/api.key");

#[test]
fn finding_13_check_accepts_a_rediss_store_with_a_ca_and_a_client_certificate() {
    let files = [
        ("ca.pem", EXAMPLE_CA),
        ("gw.pem", API_PEM),
        ("gw.key", API_KEY),
    ];
    for store in [
        r#"{kind: redis, url: "rediss://redis.example.com:6380/0", ca_file: ca.pem}"#,
        r#"{kind: redis, url: "rediss://redis.example.com:6380/0", ca_file: ca.pem, cert_file: gw.pem, key_file: gw.key}"#,
        r#"{kind: redis, url: "rediss://redis.example.com:6380/0", tls_verify: false}"#,
        r#"{kind: redis_cluster, nodes: ["rediss://10.0.0.1:6379", "rediss://10.0.0.2:6379"], ca_file: ca.pem}"#,
    ] {
        let (code, lines) = check_in_dir(&with_store(store), &files);
        assert_eq!(
            (code, lines[0].as_str()),
            (Some(0), "ok"),
            "{store}: {lines:?}"
        );
    }
}

#[test]
fn finding_13_check_refuses_tls_settings_it_could_not_use() {
    let files = [
        ("ca.pem", EXAMPLE_CA),
        ("garbage.pem", "not a certificate\n"),
        ("gw.pem", API_PEM),
        ("other.key", include_str!("../../config/certs/legacy.key")),
    ];
    let cases = [
        (
            r#"{kind: redis, url: "rediss://redis.example.com:6380/0", ca_file: garbage.pem}"#,
            r#"edge.yaml:2:73: store.tls_invalid: store.ca_file "garbage.pem": garbage.pem: holds no usable CA certificate"#,
        ),
        (
            r#"{kind: redis, url: "rediss://redis.example.com:6380/0", ca_file: missing.pem}"#,
            r#"edge.yaml:2:73: config.file_missing: store.ca_file "missing.pem": no such file missing.pem"#,
        ),
        (
            r#"{kind: redis, url: "rediss://redis.example.com:6380/0", ca_file: ca.pem, tls_verify: false}"#,
            "edge.yaml:2:73: store.tls_invalid: store.ca_file: tls_verify: false accepts any certificate, so ca_file would not be used; keep one of them",
        ),
        (
            r#"{kind: redis, url: "rediss://redis.example.com:6380/0", cert_file: gw.pem}"#,
            "edge.yaml:2:1: config.missing_field: store.key_file: required",
        ),
        (
            r#"{kind: redis, url: "rediss://redis.example.com:6380/0", cert_file: gw.pem, key_file: other.key}"#,
            "edge.yaml:2:75: store.tls_invalid: store.cert_file: other.key is not the key of gw.pem (their public keys differ)",
        ),
        (
            r#"{kind: redis, url: "rediss://redis.example.com:6380/0#insecure"}"#,
            r#"edge.yaml:2:27: store.url_invalid: store.url "rediss://redis.example.com:6380/0#insecure": no #fragment: TLS settings are store keys (tls_verify, ca_file)"#,
        ),
        (
            r#"{kind: redis_cluster, nodes: ["rediss://10.0.0.1:6379", "redis://10.0.0.2:6379"]}"#,
            "edge.yaml:2:30: store.url_invalid: store.nodes: mixes redis:// and rediss:// URLs; use one scheme for all",
        ),
        (
            r#"{kind: redis_sentinel, sentinels: ["rediss://10.0.0.1:26379"], master_name: main}"#,
            r#"edge.yaml:2:43: store.tls_invalid: store.sentinels[0] "rediss://10.0.0.1:26379": kind redis_sentinel does not support TLS yet; its sentinels and data nodes are reached over plain TCP"#,
        ),
        (
            r#"{kind: redis_sentinel, sentinels: ["redis://10.0.0.1:26379"], master_name: main, ca_file: ca.pem}"#,
            "edge.yaml:2:98: store.tls_invalid: store.ca_file: kind redis_sentinel does not support TLS yet; its sentinels and data nodes are reached over plain TCP",
        ),
    ];
    for (store, line) in cases {
        let (code, lines) = check_in_dir(&with_store(store), &files);
        assert_eq!((code, lines), (Some(1), vec![line.to_string()]), "{store}");
    }
}
