//! The operations kit against the real gateway: every metric the Grafana
//! dashboard and the Prometheus alerts name exists in `/metrics` after
//! traffic (with a JWKS endpoint and an OTLP collector to feed theirs).

use crate::common;

use std::collections::BTreeSet;

use common::*;

/// Every `fairgate_*` name in a file.
fn metric_names(path: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let mut names = BTreeSet::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("fairgate_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// A JWKS endpoint serving the RS256 fixture key, for
/// fairgate_jwks_last_success_timestamp_seconds; its directory lives as
/// long as the server.
fn jwks_server(fixtures: &str) -> (tempfile::TempDir, StaticFiles) {
    let jwks_dir = tempfile::tempdir().unwrap();
    let key = std::fs::read(format!("{fixtures}/keys/rs256.key")).unwrap();
    let key = jsonwebtoken::EncodingKey::from_rsa_pem(&key).unwrap();
    let jwk =
        jsonwebtoken::jwk::Jwk::from_encoding_key(&key, jsonwebtoken::Algorithm::RS256).unwrap();
    let jwks = serde_json::json!({ "keys": [jwk] }).to_string();
    std::fs::write(jwks_dir.path().join("jwks.json"), jwks).unwrap();
    let jwks = StaticFiles::start(jwks_dir.path());
    (jwks_dir, jwks)
}

/// A policy that gives every metric family a reason to exist: TLS, Redis,
/// a static and a JWKS key, a limit, a concurrency policy, OTLP export.
fn every_feature_policy(
    fixtures: &str,
    redis: &Redis,
    jwks: &StaticFiles,
    up: &Upstream,
    otlp: &OtlpReceiver,
) -> Policy {
    let tls_listener = format!(
        r#"tls: {{listen: "{}", certificates: [{{cert_file: "{fixtures}/gw.pem", key_file: "{fixtures}/gw.key"}}]}}"#,
        free_addr()
    );
    Policy::new()
        .server(&format!("shutdown_grace: 1s\n{tls_listener}"))
        .store(&format!(r#"{{kind: redis, url: "{}"}}"#, redis.url()))
        .sections(&format!(
            r#"
auth:
  keys: [{{kid: t, alg: HS256, secret_env: FAIRGATE_TEST_JWT}}, {{jwks_url: "http://{}/jwks.json"}}]
  methods: {{sso: {{external: {{url: "http://127.0.0.1:9/oauth2/auth"}}}}}}
upstreams:
  api: {{targets: ["{}"]}}
limits:
  api: {{scope: tenant, default: {{capacity: 2, rate: 1/h}}}}
concurrency:
  uploads: {{scope: tenant, slots: 1, lease: 30s}}
routes:
  - {{name: uploads, match: {{path_prefix: /v1/attachments}}, upstream: api, concurrency: uploads, limits: []}}
  - {{name: api, match: {{path_prefix: /v1}}, upstream: api, limits: [api]}}
  - {{name: sso, match: {{path_prefix: /sso}}, upstream: api, auth: sso, limits: []}}
telemetry: {{otlp: {{endpoint: "{}"}}}}
"#,
            jwks.addr,
            up.addr,
            otlp.endpoint()
        ))
        .env("FAIRGATE_TEST_JWT", TEST_SECRET)
}

/// Traffic that moves every counter: allowed and limited requests, one
/// without a token, an upload taking a slot, and a reload by SIGHUP.
async fn exercise(gw: &Gateway) {
    let token = token("acme");
    let c = client();
    for _ in 0..3 {
        c.get(gw.url("/v1/x"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
    }
    c.get(gw.url("/v1/x")).send().await.unwrap();
    c.post(gw.url("/v1/attachments"))
        .bearer_auth(&token)
        .body("x")
        .send()
        .await
        .unwrap();
    gw.signal(libc::SIGHUP);
    let reloaded = eventually(std::time::Duration::from_secs(2), || async {
        metric(&gw.metrics().await, "fairgate_config_generation") == Some(2.0)
    })
    .await;
    assert!(reloaded);
}

#[tokio::test(flavor = "multi_thread")]
async fn every_metric_in_the_dashboard_and_alerts_is_exported() {
    let redis = Redis::start().await;
    let up = Upstream::start().await;
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    // A JWKS endpoint, for fairgate_jwks_last_success_timestamp_seconds.
    let (_jwks_dir, jwks) = jwks_server(fixtures);
    // A collector, for fairgate_trace_spans_total.
    let otlp = OtlpReceiver::start(200).await;
    let gw = every_feature_policy(fixtures, &redis, &jwks, &up, &otlp)
        .start()
        .await;
    exercise(&gw).await;

    let exported = gw.metrics().await;
    let mut wanted = metric_names("deploy/grafana/fairgate.json");
    wanted.extend(metric_names("deploy/prometheus/alerts.yaml"));
    assert!(wanted.len() >= 10, "{wanted:?}");
    let missing: Vec<_> = wanted
        .iter()
        .filter(|name| {
            // A sample of the name, or a histogram family's TYPE line with samples.
            !exported.lines().any(|l| {
                l.starts_with(&format!("{name}{{"))
                    || l.starts_with(&format!("{name} "))
                    || l.starts_with(&format!("{name}_count{{"))
            })
        })
        .collect();
    assert!(
        missing.is_empty(),
        "named but not exported: {missing:?}\n{exported}"
    );
}
