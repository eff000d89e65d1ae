//! A store reached over TLS (`rediss://`), as managed Redis services require:
//! a real `redis-server` serving TLS only, with a certificate from a CA made
//! for the test, and the real gateway. The bucket is Redis's when the
//! gateway trusts that CA and the name matches; with the wrong CA or the
//! wrong name the gateway never talks to that server, it falls back.

use crate::common;

use std::path::Path;

use common::*;

/// A policy with one tenant bucket of capacity 3 (refilling 1/h) on the
/// store given (`$DIR` is the gateway's directory).
fn config(store: &str, upstream: &Upstream) -> Policy {
    Policy::new()
        .server("shutdown_grace: 1s")
        .store(store)
        .hs256()
        .sections(&format!(
            r#"
upstreams:
  api: {{targets: ["{}"]}}
limits:
  api: {{scope: tenant, default: {{capacity: 3, rate: 1/h}}}}
routes:
  - {{name: api, match: {{path_prefix: /}}, upstream: api, limits: [api]}}
"#,
            upstream.addr
        ))
}

/// The statuses of `n` requests of tenant `acme`, one after the other.
async fn statuses(gw: &Gateway, n: usize) -> Vec<u16> {
    let c = client();
    let t = token("acme");
    let mut out = Vec::new();
    for _ in 0..n {
        let r = c.get(gw.url("/v1/x")).bearer_auth(&t).send().await.unwrap();
        out.push(r.status().as_u16());
    }
    out
}

/// The gateway's log lines with this message.
fn lines(gw: &Gateway, message: &str) -> Vec<serde_json::Value> {
    gw.log_lines()
        .into_iter()
        .filter(|l| l["message"] == message)
        .collect()
}

/// A test CA and a server certificate it signs for `localhost`.
struct Certs {
    _dir: tempfile::TempDir,
    pki: Pki,
    cert: std::path::PathBuf,
    key: std::path::PathBuf,
}

/// The tenant's 3 tokens were spent in `redis` over TLS: three 200s and a
/// 429, its one key there, and no fallback to local buckets.
async fn spent_in(gw: &Gateway, redis: &TlsRedis) {
    assert_eq!(statuses(gw, 4).await, [200, 200, 200, 429]);
    assert_eq!(redis.cli(&["KEYS", "tenant:*"]).trim(), KEY);
    assert!(
        lines(gw, "rate_limits.fallback").is_empty(),
        "{}",
        gw.logs()
    );
}

fn certs() -> Certs {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "redis");
    let (cert, key) = pki.leaf("server", "localhost", &["localhost"], "1001");
    Certs {
        _dir: dir,
        pki,
        cert,
        key,
    }
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

const KEY: &str = "tenant:{acme}:rate:api";

#[tokio::test(flavor = "multi_thread")]
async fn finding_13_rediss_store_works_with_a_test_ca() {
    let c = certs();
    let redis = TlsRedis::start(&c.pki.ca(), &c.cert, &c.key, None).await;
    let up = Upstream::start().await;
    let store = format!(
        r#"{{kind: redis, url: "rediss://localhost:{}/0", ca_file: "{}", timeout: 2s}}"#,
        redis.port(),
        path(&c.pki.ca())
    );
    let gw = config(&store, &up).start().await;
    spent_in(&gw, &redis).await;
}

/// Without `ca_file` the platform's roots are used; the test's CA is made
/// one of them with `SSL_CERT_FILE`, which the platform lookup honours (as
/// OpenSSL does). The policy has no key the old reader lacked: `rediss://`
/// alone used to pass `check` and fail `serve` at start.
#[tokio::test(flavor = "multi_thread")]
async fn finding_13_rediss_store_trusts_the_platform_roots() {
    let c = certs();
    let redis = TlsRedis::start(&c.pki.ca(), &c.cert, &c.key, None).await;
    let up = Upstream::start().await;
    let store = format!(
        r#"{{kind: redis, url: "rediss://localhost:{}/0", timeout: 2s}}"#,
        redis.port()
    );
    let gw = config(&store, &up)
        .env("SSL_CERT_FILE", &path(&c.pki.ca()))
        .start()
        .await;
    spent_in(&gw, &redis).await;
}

/// Starts a gateway on `store` against a TLS Redis it must not trust, and
/// checks that it decided without it: the capacity is kept by the local
/// fallback, one `rate_limits.fallback` line says why, and the server holds
/// no key.
async fn refused(redis: &TlsRedis, store: &str, why: &str) {
    let up = Upstream::start().await;
    let gw = config(store, &up).start().await;
    assert_eq!(statuses(&gw, 4).await, [200, 200, 200, 429]);
    let fallback = lines(&gw, "rate_limits.fallback");
    assert_eq!(fallback.len(), 1, "{}", gw.logs());
    assert_eq!(fallback[0]["reason"], "unreachable");
    let error = fallback[0]["error"].as_str().unwrap_or_default();
    assert!(error.contains(why), "{error}");
    assert_eq!(redis.cli(&["DBSIZE"]).trim(), "0");
    // The commands of the CLI (PING when it started, DBSIZE, INFO) are all
    // the server ever ran.
    let stats = redis.cli(&["INFO", "commandstats"]);
    let others: Vec<&str> = stats
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_")?.split(':').next())
        .filter(|c| !["ping", "dbsize", "info"].contains(c))
        .collect();
    assert!(others.is_empty(), "{stats}");
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_13_rediss_store_with_the_wrong_ca_is_not_used() {
    let c = certs();
    let redis = TlsRedis::start(&c.pki.ca(), &c.cert, &c.key, None).await;
    let other = tempfile::tempdir().unwrap();
    let stranger = Pki::new(other.path(), "stranger");
    let store = format!(
        r#"{{kind: redis, url: "rediss://localhost:{}/0", ca_file: "{}", timeout: 2s}}"#,
        redis.port(),
        path(&stranger.ca())
    );
    refused(&redis, &store, "invalid peer certificate: UnknownIssuer").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_13_rediss_store_checks_the_host_name() {
    let c = certs();
    let redis = TlsRedis::start(&c.pki.ca(), &c.cert, &c.key, None).await;
    // The certificate names localhost, not 127.0.0.1.
    let store = format!(
        r#"{{kind: redis, url: "rediss://127.0.0.1:{}/0", ca_file: "{}", timeout: 2s}}"#,
        redis.port(),
        path(&c.pki.ca())
    );
    refused(&redis, &store, "certificate not valid for name").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_13_tls_verify_false_accepts_a_certificate_it_cannot_verify() {
    let c = certs();
    let redis = TlsRedis::start(&c.pki.ca(), &c.cert, &c.key, None).await;
    let up = Upstream::start().await;
    // Neither the CA (not given: the system's roots) nor the name match.
    let store = format!(
        r#"{{kind: redis, url: "rediss://127.0.0.1:{}/0", tls_verify: false, timeout: 2s}}"#,
        redis.port(),
    );
    let gw = config(&store, &up).start().await;
    spent_in(&gw, &redis).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_13_rediss_store_presents_a_client_certificate() {
    let c = certs();
    let (client_cert, client_key) = c.pki.leaf("gateway", "fairgate", &["fairgate"], "2002");
    let redis = TlsRedis::start(
        &c.pki.ca(),
        &c.cert,
        &c.key,
        Some((&client_cert, &client_key)),
    )
    .await;
    let up = Upstream::start().await;
    let store = format!(
        r#"{{kind: redis, url: "rediss://localhost:{}/0", ca_file: "{}", cert_file: "{}", key_file: "{}", timeout: 2s}}"#,
        redis.port(),
        path(&c.pki.ca()),
        path(&client_cert),
        path(&client_key),
    );
    let gw = config(&store, &up).start().await;
    spent_in(&gw, &redis).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_13_rediss_cluster_store_works_with_a_test_ca() {
    let c = certs();
    let cluster = TlsCluster::start(&c.pki.ca(), &c.cert, &c.key).await;
    let up = Upstream::start().await;
    let store = format!(
        r#"{{kind: redis_cluster, nodes: {:?}, ca_file: "{}", timeout: 2s}}"#,
        cluster.urls(),
        path(&c.pki.ca())
    );
    let gw = config(&store, &up).start().await;
    assert_eq!(statuses(&gw, 4).await, [200, 200, 200, 429]);
    // On the one node that owns the tenant's hash slot.
    let holding: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| n.cli(&["KEYS", "tenant:*"]).trim().to_string())
        .filter(|k| !k.is_empty())
        .collect();
    assert_eq!(holding, [KEY]);
    assert!(
        lines(&gw, "rate_limits.fallback").is_empty(),
        "{}",
        gw.logs()
    );
}
