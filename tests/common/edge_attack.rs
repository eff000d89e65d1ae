//! The edge-hardening suites' set-up (`hardening.rs`,
//! `hardening_resources.rs`): a gateway in front of a raw upstream `app`
//! with an authenticated admin area and a strict bucket, and raw requests
//! to it. Not glob-exported by `common`: its `get` writes request bytes.

use super::*;
use serde_json::json;

/// A token of `tenant` for user `u1` (the identity headers tests read it back).
pub fn user_token(tenant: &str) -> String {
    hs256_token(TEST_SECRET, json!({"tid": tenant, "sub": "u1"}))
}

/// A gateway in front of a raw upstream `app`, on one worker thread, with
/// the shared HS256 key and the warnings these tests provoke on purpose
/// acknowledged. `server` adds `server:` keys (one a line), `routes` are
/// YAML lines indented for their section; `extra` adds top-level sections.
pub async fn gateway(up: &RawUpstream, server: &str, extra: &str, routes: &str) -> Gateway {
    gateway_auth(up, server, "", extra, routes).await
}

/// As `gateway`, with more `auth:` keys (one a line).
pub async fn gateway_auth(
    up: &RawUpstream,
    server: &str,
    auth: &str,
    extra: &str,
    routes: &str,
) -> Gateway {
    Policy::new()
        .server("threads: 1")
        .server(server)
        .acknowledge("limits.client_keyed")
        .acknowledge("server.escaped_slashes_keep")
        .auth(auth)
        .sections(&format!(
            r#"
upstreams:
  app: {{targets: ["{up}"]}}
{extra}
routes:
{routes}
"#,
            up = up.addr
        ))
        .start()
        .await
}

/// An exempt public catch-all and an authenticated admin area, the shape
/// the review used: a request that reaches `/admin` without a token walked
/// around the gateway.
pub const ADMIN_ROUTES: &str = r#"
  - {name: admin, match: {path_prefix: /admin}, upstream: app}
  - {name: refresh, match: {path: /v1/auth/refresh}, upstream: app, limits: [strict]}
  - {name: small, match: {path_prefix: /v1/small}, upstream: app, max_body: 100, limits: []}
  - {name: public, match: {path_prefix: /}, upstream: app, auth: none, exempt: true}
"#;
pub const STRICT: &str = "limits:\n  strict: {scope: tenant, default: {capacity: 3, rate: 1/h}}";

/// A `GET` of `target` for `host`, `extra` head lines (CRLF-ended) before
/// `Connection: close`.
pub fn get(target: &str, host: &str, extra: &str) -> Vec<u8> {
    format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n")
        .into_bytes()
}

/// Writes `request` from 127.0.0.1; the answer as text.
pub async fn send(gw: &Gateway, request: &[u8]) -> String {
    raw_http_from("127.0.0.1".parse().unwrap(), gw.listen, request).await
}

/// The gateway's address as a `Host` value.
pub fn host_of(gw: &Gateway) -> String {
    gw.listen.to_string()
}
