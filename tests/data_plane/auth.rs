//! Authentication through the real gateway: every accepted algorithm, every
//! refusal with its RFC 6750 challenge, identity headers, JWKS rotation.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use jsonwebtoken::{encode, jwk::Jwk, Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

const SECRET: &str = "test-secret-0123456789abcdef";
const KEYS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/keys");

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn key_pem(name: &str) -> Vec<u8> {
    std::fs::read(format!("{KEYS}/{name}")).unwrap()
}

fn sign(alg: Algorithm, kid: Option<&str>, claims: &Value) -> String {
    let key = match alg {
        Algorithm::HS256 => EncodingKey::from_secret(SECRET.as_bytes()),
        Algorithm::RS256 => EncodingKey::from_rsa_pem(&key_pem("rs256.key")).unwrap(),
        Algorithm::ES256 => EncodingKey::from_ec_pem(&key_pem("es256.key")).unwrap(),
        Algorithm::EdDSA => EncodingKey::from_ed_pem(&key_pem("ed25519.key")).unwrap(),
        _ => unreachable!(),
    };
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_string);
    encode(&header, claims, &key).unwrap()
}

fn claims(tenant: &str) -> Value {
    json!({
        "tid": tenant, "sub": "user-1", "plan": "pro", "jti": "tok-1",
        "iss": "https://auth.test", "aud": "api", "exp": now() + 600,
    })
}

/// A JWKS endpoint whose answer the test changes.
struct Jwks {
    addr: std::net::SocketAddr,
    state: Arc<Mutex<(u16, String)>>,
}

impl Jwks {
    async fn start(body: String) -> Jwks {
        use hyper::service::service_fn;
        let state = Arc::new(Mutex::new((200u16, body)));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = state.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let shared = shared.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |_req| {
                        let (status, body) = shared.lock().unwrap().clone();
                        async move {
                            Ok::<_, std::convert::Infallible>(
                                hyper::Response::builder()
                                    .status(status)
                                    .body(http_body_util::Full::new(bytes::Bytes::from(body)))
                                    .unwrap(),
                            )
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Jwks { addr, state }
    }

    fn set(&self, status: u16, body: String) {
        *self.state.lock().unwrap() = (status, body);
    }
}

fn jwks_of(keys: &[(&str, &str)]) -> String {
    let keys: Vec<Jwk> = keys
        .iter()
        .map(|(file, kid)| {
            let key = EncodingKey::from_rsa_pem(&key_pem(file)).unwrap();
            let mut jwk = Jwk::from_encoding_key(&key, Algorithm::RS256).unwrap();
            jwk.common.key_id = Some(kid.to_string());
            jwk
        })
        .collect();
    json!({ "keys": keys }).to_string()
}

fn sign_rs(file: &str, kid: &str, claims: &Value) -> String {
    let key = EncodingKey::from_rsa_pem(&key_pem(file)).unwrap();
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(kid.to_string());
    encode(&header, claims, &key).unwrap()
}

async fn gateway(upstream: &Upstream, jwks: Option<&Jwks>) -> Gateway {
    let jwks_key = jwks
        .map(|j| {
            format!(
                r#"    - {{jwks_url: "http://{}/jwks.json", refresh: 1h}}"#,
                j.addr
            )
        })
        .unwrap_or_default();
    Policy::new()
        .server("shutdown_grace: 1s")
        .env("FAIRGATE_TEST_HS", SECRET)
        .sections(&format!(
            r#"
auth:
  issuer: "https://auth.test"
  audience: api
  leeway: 5s
  # These tests fail on purpose many times from one address.
  failure_limit: {{capacity: 10000, rate: 1000/s}}
  keys:
    - {{kid: hs, alg: HS256, secret_env: FAIRGATE_TEST_HS}}
    - {{kid: rs, alg: RS256, public_key_file: {KEYS}/rs256.pub.pem}}
    - {{kid: es, alg: ES256, public_key_file: {KEYS}/es256.pub.pem}}
    - {{kid: ed, alg: EdDSA, public_key_file: {KEYS}/ed25519.pub.pem}}
{jwks_key}
tenants:
  acme: {{plan: enterprise}}
upstreams:
  api: {{targets: ["{}"]}}
default_limits: none
routes:
  - {{name: open, match: {{path_prefix: /open}}, upstream: api, auth: none}}
  - {{name: api, match: {{path_prefix: /}}, upstream: api}}
"#,
            upstream.addr
        ))
        .start()
        .await
}

async fn call(gw: &Gateway, path: &str, token: Option<&str>) -> reqwest::Response {
    let mut req = client().get(gw.url(path)).header("x-tenant-id", "spoofed");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    req.send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn valid_tokens_of_every_algorithm_pass_with_identity_headers() {
    let up = Upstream::start().await;
    let gw = gateway(&up, None).await;
    for (alg, kid) in [
        (Algorithm::HS256, "hs"),
        (Algorithm::RS256, "rs"),
        (Algorithm::ES256, "es"),
        (Algorithm::EdDSA, "ed"),
    ] {
        let token = sign(alg, Some(kid), &claims("globex"));
        let r = call(&gw, "/v1/x", Some(&token)).await;
        assert_eq!(r.status(), 200, "{alg:?}");
        let body: Value = r.json().await.unwrap();
        let h = &body["headers"];
        assert_eq!(
            h["x-tenant-id"],
            json!(["globex"]),
            "{alg:?}: spoofed header replaced"
        );
        assert_eq!(h["x-user-id"], json!(["user-1"]));
        assert_eq!(h["x-plan"], json!(["pro"]));
        // Authorization is forwarded unchanged by default.
        assert_eq!(h["authorization"], json!([format!("Bearer {token}")]));
    }
    // Without a kid, each key of the token's algorithm is tried.
    let token = sign(Algorithm::ES256, None, &claims("globex"));
    assert_eq!(call(&gw, "/v1/x", Some(&token)).await.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn plans_come_from_claims_defaults_and_tenant_overrides() {
    let up = Upstream::start().await;
    let gw = gateway(&up, None).await;
    // The tenants.acme.plan override wins over the claim.
    let r = call(
        &gw,
        "/v1/x",
        Some(&sign(Algorithm::HS256, Some("hs"), &claims("acme"))),
    )
    .await;
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["headers"]["x-plan"], json!(["enterprise"]));
    // No plan claim: default_plan (free).
    let mut c = claims("globex");
    c.as_object_mut().unwrap().remove("plan");
    let r = call(&gw, "/v1/x", Some(&sign(Algorithm::HS256, Some("hs"), &c))).await;
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["headers"]["x-plan"], json!(["free"]));
}

#[tokio::test(flavor = "multi_thread")]
async fn spoofed_identity_never_reaches_the_upstream_on_open_routes() {
    let up = Upstream::start().await;
    let gw = gateway(&up, None).await;
    let r = call(&gw, "/open/x", None).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert!(body["headers"].get("x-tenant-id").is_none(), "{body}");
}

/// `claims("globex")` with `key` set to `value`.
fn claims_with(key: &str, value: Value) -> Value {
    let mut c = claims("globex");
    c[key] = value;
    c
}

/// `claims("globex")` without `key`.
fn claims_without(key: &str) -> Value {
    let mut c = claims("globex");
    c.as_object_mut().unwrap().remove(key);
    c
}

/// Signed with the gateway's HS256 key (kid `hs`).
fn hs(claims: &Value) -> String {
    sign(Algorithm::HS256, Some("hs"), claims)
}

/// A refused token: what the case is, the token, and the
/// `error_description` its challenge must carry.
type BadToken = (&'static str, String, &'static str);

/// Tokens no key of the gateway verifies: no algorithm, a confused one,
/// another key's signature, an unknown kid, not a JWT at all.
fn forged_tokens() -> Vec<BadToken> {
    // alg "none": header {"alg":"none"}, claims, empty signature.
    let b64 = |v: &Value| {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    };
    let alg_none = format!(
        "{}.{}.",
        b64(&json!({"alg": "none"})),
        b64(&claims("globex"))
    );
    // Algorithm confusion: HS256 keyed with the RS256 public key PEM.
    let confused = {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("rs".into());
        encode(
            &header,
            &claims("globex"),
            &EncodingKey::from_secret(&key_pem("rs256.pub.pem")),
        )
        .unwrap()
    };
    let other_rsa = sign_rs("rs256-b.key", "rs", &claims("globex"));
    vec![
        (
            "alg none",
            alg_none,
            "the token's algorithm is not accepted",
        ),
        (
            "HS256 with the RSA public key",
            confused,
            "the token names an unknown key",
        ),
        (
            "bad signature",
            other_rsa,
            "the token's signature is invalid",
        ),
        (
            "unknown kid",
            sign(Algorithm::HS256, Some("nope"), &claims("globex")),
            "the token names an unknown key",
        ),
        ("malformed", "not.a.jwt".into(), "the token is malformed"),
    ]
}

/// Verified tokens whose registered claims (time, issuer, audience) fail.
fn tokens_with_bad_registered_claims() -> Vec<BadToken> {
    let t = now();
    vec![
        (
            "expired",
            hs(&claims_with("exp", json!(t - 60))),
            "the token has expired",
        ),
        (
            "nbf in the future",
            hs(&claims_with("nbf", json!(t + 600))),
            "the token is not valid yet",
        ),
        (
            "wrong issuer",
            hs(&claims_with("iss", json!("https://evil.test"))),
            "the token has the wrong issuer",
        ),
        (
            "wrong audience",
            hs(&claims_with("aud", json!("other"))),
            "the token has the wrong audience",
        ),
        (
            "no exp",
            hs(&claims_without("exp")),
            "the token lacks a required claim",
        ),
        (
            "no iss",
            hs(&claims_without("iss")),
            "the token lacks a required claim",
        ),
        (
            "no aud",
            hs(&claims_without("aud")),
            "the token lacks a required claim",
        ),
    ]
}

/// Verified tokens whose identity claims (tenant, user, plan) are missing
/// or not acceptable.
fn tokens_with_bad_identity_claims() -> Vec<BadToken> {
    vec![
        (
            "plan with a newline",
            hs(&claims_with("plan", json!("pro\nx"))),
            "a claim of the token is too long or not a string",
        ),
        (
            "missing tenant",
            hs(&claims_without("tid")),
            "the token lacks a required claim",
        ),
        (
            "tenant a:b",
            hs(&claims("a:b")),
            "the token's tenant id is not acceptable",
        ),
        (
            "tenant {x}",
            hs(&claims("{x}")),
            "the token's tenant id is not acceptable",
        ),
        (
            "200-char tenant",
            hs(&claims(&"t".repeat(200))),
            "the token's tenant id is not acceptable",
        ),
        (
            "300-byte user",
            hs(&claims_with("sub", json!("u".repeat(300)))),
            "a claim of the token is too long or not a string",
        ),
    ]
}

/// `token` is refused with a 401 whose challenge and problem body carry
/// `description`, and whose body does not echo the token.
async fn assert_invalid_token(gw: &Gateway, name: &str, token: &str, description: &str) {
    let r = call(gw, "/v1/x", Some(token)).await;
    assert_eq!(r.status(), 401, "{name}");
    assert_eq!(
        r.headers()["www-authenticate"].to_str().unwrap(),
        format!(r#"Bearer error="invalid_token", error_description="{description}""#),
        "{name}"
    );
    assert_eq!(
        r.headers()["content-type"].to_str().unwrap(),
        "application/problem+json"
    );
    let text = r.text().await.unwrap();
    assert!(!text.contains(token), "{name}: the body echoes the token");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["status"], 401);
    assert_eq!(body["detail"], description);
}

#[tokio::test(flavor = "multi_thread")]
async fn every_bad_token_is_a_401_with_the_right_challenge() {
    let up = Upstream::start().await;
    let gw = gateway(&up, None).await;
    let cases = forged_tokens()
        .into_iter()
        .chain(tokens_with_bad_registered_claims())
        .chain(tokens_with_bad_identity_claims());
    for (name, token, description) in cases {
        assert_invalid_token(&gw, name, &token, description).await;
    }
    assert_eq!(up.requests(), 0, "no refused request reached the upstream");

    // No token at all, or another scheme: a bare challenge.
    for auth in [None, Some("Basic dXNlcjpwYXNz")] {
        let mut req = client().get(gw.url("/v1/x"));
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 401);
        assert_eq!(r.headers()["www-authenticate"], "Bearer");
    }
    let m = gw.metrics().await;
    assert_eq!(
        metric(&m, r#"fairgate_auth_failures_total{reason="expired"}"#),
        Some(1.0)
    );
    assert_eq!(
        metric(&m, r#"fairgate_auth_failures_total{reason="missing"}"#),
        Some(2.0)
    );
    assert_eq!(
        metric(
            &m,
            r#"fairgate_auth_failures_total{reason="tenant_invalid"}"#
        ),
        Some(3.0)
    );
    assert!(!gw.logs().contains(SECRET));
}

#[tokio::test(flavor = "multi_thread")]
async fn user_ids_with_delimiters_are_accepted() {
    let up = Upstream::start().await;
    let gw = gateway(&up, None).await;
    for user in ["auth0|42:rate:api", "a@b.com", "https://idp.example/u/{7}"] {
        let token = sign(Algorithm::HS256, Some("hs"), &{
            let mut c = claims("globex");
            c["sub"] = json!(user);
            c
        });
        let r = call(&gw, "/v1/x", Some(&token)).await;
        assert_eq!(r.status(), 200, "{user}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["headers"]["x-user-id"], json!([user]));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn jwks_url_rotation_without_restart_and_last_good_keys_on_failure() {
    let up = Upstream::start().await;
    let jwks = Jwks::start(jwks_of(&[("rs256.key", "k1")])).await;
    let gw = gateway(&up, Some(&jwks)).await;
    let k1 = sign_rs("rs256.key", "k1", &claims("globex"));
    let k2 = sign_rs("rs256-b.key", "k2", &claims("globex"));
    assert_eq!(call(&gw, "/v1/x", Some(&k1)).await.status(), 200);
    assert_eq!(call(&gw, "/v1/x", Some(&k2)).await.status(), 401);

    // The identity provider rotates in k2: an unknown kid triggers a refresh.
    jwks.set(200, jwks_of(&[("rs256.key", "k1"), ("rs256-b.key", "k2")]));
    let accepted = eventually(Duration::from_secs(10), || async {
        call(&gw, "/v1/x", Some(&k2)).await.status() == 200
    })
    .await;
    assert!(accepted, "k2 never accepted:\n{}", gw.logs());

    // The endpoint fails: the last good set stays in use.
    jwks.set(500, "oops".into());
    let k3 = sign_rs("rs256-b.key", "k3", &claims("globex"));
    let refreshed = eventually(Duration::from_secs(10), || async {
        call(&gw, "/v1/x", Some(&k3)).await.status() == 401
            && gw.logs().contains("auth.jwks_refresh_failed")
    })
    .await;
    assert!(refreshed, "{}", gw.logs());
    assert_eq!(call(&gw, "/v1/x", Some(&k1)).await.status(), 200);
    assert_eq!(call(&gw, "/v1/x", Some(&k2)).await.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_jwks_rotation_fails_the_cached_tokens_of_a_removed_key() {
    let up = Upstream::start().await;
    let jwks = Jwks::start(jwks_of(&[("rs256.key", "k1")])).await;
    let gw = gateway(&up, Some(&jwks)).await;
    let k1 = sign_rs("rs256.key", "k1", &claims("globex"));
    let k2 = sign_rs("rs256-b.key", "k2", &claims("globex"));
    assert_eq!(call(&gw, "/v1/x", Some(&k1)).await.status(), 200);
    assert_eq!(call(&gw, "/v1/x", Some(&k1)).await.status(), 200);
    let m = gw.metrics().await;
    assert_eq!(
        metric(&m, r#"fairgate_auth_token_cache_total{result="hit"}"#),
        Some(1.0)
    );
    // The identity provider replaces k1 by k2: the first k2 token refreshes.
    jwks.set(200, jwks_of(&[("rs256-b.key", "k2")]));
    let accepted = eventually(Duration::from_secs(10), || async {
        call(&gw, "/v1/x", Some(&k2)).await.status() == 200
    })
    .await;
    assert!(accepted, "k2 never accepted:\n{}", gw.logs());
    assert_eq!(call(&gw, "/v1/x", Some(&k1)).await.status(), 401);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_token_command_mints_tokens_the_gateway_accepts() {
    let up = Upstream::start().await;
    let gw = gateway(&up, None).await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fairgate"))
        .args(["token", "-c"])
        .arg(gw.config_path())
        .args([
            "--tenant", "initech", "--user", "peter", "--plan", "pro", "--ttl", "10m",
        ])
        .env("FAIRGATE_TEST_HS", SECRET)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let r = call(&gw, "/v1/x", Some(&token)).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["headers"]["x-tenant-id"], json!(["initech"]));
    assert_eq!(body["headers"]["x-user-id"], json!(["peter"]));
    assert_eq!(body["headers"]["x-plan"], json!(["pro"]));
}
