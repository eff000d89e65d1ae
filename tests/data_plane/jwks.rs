//! JWKS endpoints a gateway can trust: a private identity provider's CA
//! (`ca_file`) over real HTTPS, a size cap that keeps the last good set,
//! a bound on what an unknown `kid` makes a request wait, and the metric
//! that says when each endpoint last answered.

use crate::common;

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use jsonwebtoken::{encode, jwk::Jwk, Algorithm, EncodingKey, Header};
use serde_json::json;

const KEYS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/keys");

fn jwks_of(kid: &str) -> String {
    let key =
        EncodingKey::from_rsa_pem(&std::fs::read(format!("{KEYS}/rs256.key")).unwrap()).unwrap();
    let mut jwk = Jwk::from_encoding_key(&key, Algorithm::RS256).unwrap();
    jwk.common.key_id = Some(kid.to_string());
    json!({ "keys": [jwk] }).to_string()
}

fn token(kid: &str) -> String {
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    let key =
        EncodingKey::from_rsa_pem(&std::fs::read(format!("{KEYS}/rs256.key")).unwrap()).unwrap();
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(kid.to_string());
    encode(
        &header,
        &json!({"tid": "acme", "sub": "u", "exp": exp}),
        &key,
    )
    .unwrap()
}

async fn gateway(keys: &str, upstream: &Upstream) -> Gateway {
    Policy::new()
        .sections(&format!(
            r#"
auth:
  jwks_timeout: 300ms
  failure_limit: {{capacity: 10000, rate: 1000/s}}
  keys:
    - {keys}
upstreams:
  api: {{targets: ["{}"]}}
default_limits: none
routes:
  - {{name: api, match: {{path_prefix: /}}, upstream: api}}
"#,
            upstream.addr
        ))
        .start()
        .await
}

async fn status(gw: &Gateway, token: &str) -> u16 {
    client()
        .get(gw.url("/x"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// An identity provider serving `jwks.json` over HTTPS with a certificate
/// for `localhost` from a CA of its own.
struct PrivateIdp {
    port: u16,
    ca: std::path::PathBuf,
    _peer: Peer,
    _dir: tempfile::TempDir,
}

impl PrivateIdp {
    fn start(jwks: &str) -> PrivateIdp {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::new(dir.path(), "idp");
        let (cert, key) = pki.leaf("idp", "localhost", &["localhost"], "0a");
        let docs = dir.path().join("docs");
        std::fs::create_dir(&docs).unwrap();
        std::fs::write(docs.join("jwks.json"), jwks).unwrap();
        let mut cmd = Command::new("python3");
        cmd.arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/peers/https_files.py"
        ))
        .args([&docs, &cert, &key]);
        let peer = Peer::spawn(&mut cmd, "python3 is needed: apt-get install python3");
        PrivateIdp {
            port: peer.listening_port(),
            ca: pki.ca(),
            _peer: peer,
            _dir: dir,
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_private_identity_provider_is_trusted_through_its_ca_file_only() {
    let (idp, echo) = (PrivateIdp::start(&jwks_of("k1")), Upstream::start().await);
    let url = format!("https://localhost:{}/jwks.json", idp.port);
    let trusted = gateway(
        &format!(r#"{{jwks_url: "{url}", ca_file: "{}"}}"#, idp.ca.display()),
        &echo,
    )
    .await;
    assert_eq!(
        status(&trusted, &token("k1")).await,
        200,
        "{}",
        trusted.logs()
    );
    let metrics = trusted.metrics().await;
    let last = metric(
        &metrics,
        "fairgate_jwks_last_success_timestamp_seconds{source=\"localhost/jwks.json\"}",
    );
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as f64;
    assert!(
        last.is_some_and(|t| t > now - 60.0 && t <= now + 1.0),
        "{last:?}"
    );
    // Without the CA, the same endpoint is not trusted: no keys, 401.
    let untrusted = gateway(&format!(r#"{{jwks_url: "{url}"}}"#), &echo).await;
    assert_eq!(status(&untrusted, &token("k1")).await, 401);
    assert!(untrusted.logs().contains("auth.jwks_refresh_failed"));
    assert_eq!(
        metric(
            &untrusted.metrics().await,
            "fairgate_jwks_last_success_timestamp_seconds"
        ),
        None
    );
}

/// A plain HTTP JWKS endpoint whose answer the test sets, and which can be
/// told to hold every request until released.
struct Endpoint {
    addr: std::net::SocketAddr,
    body: Arc<Mutex<String>>,
    hold: Arc<tokio::sync::Semaphore>,
    held: Arc<AtomicU64>,
    answered: Arc<AtomicU64>,
}

impl Endpoint {
    async fn start(body: String) -> Endpoint {
        use hyper::service::service_fn;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let body = Arc::new(Mutex::new(body));
        let hold = Arc::new(tokio::sync::Semaphore::new(1000));
        let (held, answered) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (b, h, hd, a) = (body.clone(), hold.clone(), held.clone(), answered.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (b, h, hd, a) = (b.clone(), h.clone(), hd.clone(), a.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |_req| {
                        let (b, h, hd, a) = (b.clone(), h.clone(), hd.clone(), a.clone());
                        async move {
                            hd.fetch_add(1, Ordering::SeqCst);
                            let _permit = h.acquire().await;
                            a.fetch_add(1, Ordering::SeqCst);
                            let text = b.lock().unwrap().clone();
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(
                                http_body_util::Full::new(bytes::Bytes::from(text)),
                            ))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Endpoint {
            addr,
            body,
            hold,
            held,
            answered,
        }
    }
}

/// An endpoint serving k1, and a gateway (with its upstream) fetching from it.
async fn served_by_endpoint() -> (Endpoint, Upstream, Gateway) {
    let (jwks, echo) = (
        Endpoint::start(jwks_of("k1")).await,
        Upstream::start().await,
    );
    let url = format!("http://{}/jwks.json", jwks.addr);
    let gw = gateway(&format!(r#"{{jwks_url: "{url}"}}"#), &echo).await;
    (jwks, echo, gw)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_jwks_over_a_mebibyte_is_refused_and_the_last_good_set_kept() {
    let (jwks, _echo, gw) = served_by_endpoint().await;
    assert_eq!(status(&gw, &token("k1")).await, 200);
    // The next set is 2 MiB: it would hold k2, but is never read.
    let mut big: serde_json::Value = serde_json::from_str(&jwks_of("k2")).unwrap();
    big["padding"] = json!("x".repeat(2 << 20));
    *jwks.body.lock().unwrap() = big.to_string();
    let refused = eventually(Duration::from_secs(10), || async {
        status(&gw, &token("k2")).await == 401 && gw.logs().contains("over 1024 KiB")
    })
    .await;
    assert!(refused, "{}", gw.logs());
    assert_eq!(
        status(&gw, &token("k1")).await,
        200,
        "the last good set is kept"
    );
    assert!(gw.logs().contains("\"source\":\"127.0.0.1/jwks.json\""));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_kid_waits_at_most_jwks_timeout_for_a_slow_provider() {
    let (jwks, _echo, gw) = served_by_endpoint().await;
    assert_eq!(status(&gw, &token("k1")).await, 200);
    // The provider now holds every request; it has k2 ready for when it answers.
    // All the permits: this waits for a fetch still in flight to finish.
    let held_permits = jwks.hold.acquire_many(1000).await.unwrap();
    *jwks.body.lock().unwrap() = jwks_of("k2");
    let (answered, arrived) = (
        jwks.answered.load(Ordering::SeqCst),
        jwks.held.load(Ordering::SeqCst),
    );
    // An unknown kid is answered 401 while the provider still holds the
    // refresh it caused (it may take a few tries: refreshes are at most one
    // per 2 s).
    let refused_while_held = eventually(Duration::from_secs(10), || async {
        let s = status(&gw, &token("k2")).await;
        s == 401 && jwks.held.load(Ordering::SeqCst) > arrived
    })
    .await;
    assert!(
        refused_while_held,
        "held {} answered {} (at hold: {arrived}, {answered}); last status {}",
        jwks.held.load(Ordering::SeqCst),
        jwks.answered.load(Ordering::SeqCst),
        status(&gw, &token("k2")).await
    );
    assert_eq!(
        jwks.answered.load(Ordering::SeqCst),
        answered,
        "nothing answered yet"
    );
    // Released, the refresh the request did not wait for still lands.
    drop(held_permits);
    let accepted = eventually(Duration::from_secs(10), || async {
        status(&gw, &token("k2")).await == 200
    })
    .await;
    assert!(accepted, "{}", gw.logs());
}
