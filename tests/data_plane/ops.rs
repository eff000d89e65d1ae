//! The operations kit against the real gateway: every metric the Grafana
//! dashboard and the Prometheus alerts name exists in `/metrics` after
//! traffic (with a JWKS endpoint and an OTLP collector to feed theirs, and
//! a controller for its own), and a real Prometheus scraping them answers
//! every panel's queries; the ingress-style request series' labels.

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
  api: {{targets: ["{}"], fair_share: {{max_in_flight: 64}}}}
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

/// A controller-mode gateway serving one Ingress, with traffic: the
/// controller's series (builds, withheld Ingresses, watch errors, the
/// Lease) and the ingress-style ones with a namespace and an Ingress.
async fn controller_with_traffic(
    echo: &EchoProcess,
    dir: &std::path::Path,
) -> (common::kube_api::KubeApi, Gateway) {
    use common::cluster::*;
    let api = shop_api(&echo.addr);
    api.apply(shop_ingress("storefront", "shop.lab", "/"));
    let gw = controller(&base_policy(""), &api.kubeconfig(dir), "fairgate-0").await;
    for _ in 0..3 {
        assert_eq!(host_status(&gw, "shop.lab", "/").await, 200);
    }
    (api, gw)
}

/// Every metric the dashboard and the alerts name is exported by a gateway
/// or a controller after traffic; and a real Prometheus scraping both
/// answers every dashboard panel's queries with series.
#[tokio::test(flavor = "multi_thread")]
async fn every_metric_in_the_dashboard_and_alerts_is_exported_and_scraped() {
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
    let (echo, dir) = (EchoProcess::start(), tempfile::tempdir().unwrap());
    let (_api, ctl) = controller_with_traffic(&echo, dir.path()).await;

    let exported = gw.metrics().await + &ctl.metrics().await;
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
    let prometheus = Prometheus::start(&[gw.admin, ctl.admin]).await;
    every_panel_has_series(&prometheus).await;
}

/// Each panel of the dashboard: at least one of its queries (`$job`,
/// `$instance` and `$__rate_interval` as Grafana fills them) returns
/// series, once Prometheus has scraped both targets a few times.
async fn every_panel_has_series(prometheus: &Prometheus) {
    let scraped = eventually(std::time::Duration::from_secs(30), || async {
        let samples = prometheus.query("count_over_time(up[1m]) >= 4").await;
        samples.len() == 2
    })
    .await;
    assert!(scraped, "{:?}", prometheus.up().await);
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/grafana/fairgate.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut empty = Vec::new();
    let mut panels = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        let Some(targets) = panel["targets"].as_array() else {
            continue;
        };
        panels += 1;
        let mut answered = false;
        for target in targets {
            let expr = target["expr"].as_str().unwrap();
            let expr = expr
                .replace("$job", "fairgate")
                .replace("$instance", ".*")
                .replace("$__rate_interval", "1m");
            answered |= !prometheus.query(&expr).await.is_empty();
        }
        if !answered {
            empty.push(panel["title"].as_str().unwrap_or("").to_string());
        }
    }
    assert!(panels >= 20, "{panels} panels read");
    assert_eq!(empty, Vec::<String>::new(), "panels without series");
}

/// The ingress-style series of a file's routes: `route` and the host as
/// the policy writes it (never the client's `Host`), empty `namespace`,
/// `ingress` and `service`; a method outside the fixed set is `other`;
/// each status its own code; the body sizes observed. (Prometheus's text
/// format writes the labels in name order.)
#[tokio::test(flavor = "multi_thread")]
async fn the_http_series_label_route_host_method_and_status() {
    let up = Upstream::start().await;
    let policy = Policy::new()
        .sections(&format!(
            "upstreams:\n  app: {{targets: [\"{}\"]}}\nroutes:\n  - {{name: shop, match: {{host: \"*.shop.lab\", path_prefix: /}}, upstream: app, auth: none, exempt: true}}\n",
            up.addr
        ))
        .yaml();
    let gw = Gateway::start(&policy).await;
    let addr = gw.listen;
    let ask = |request: String| async move { status_of(&raw_http(addr, &request).await) };
    let head = |method: &str, host: &str| {
        format!("{method} /cart HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n")
    };
    assert_eq!(ask(head("GET", "a.shop.lab") + "\r\n").await, 200);
    assert_eq!(ask(head("GET", "b.shop.lab") + "\r\n").await, 200);
    let post = head("POST", "a.shop.lab") + "Content-Length: 5\r\n\r\nhello";
    assert_eq!(ask(post).await, 200);
    assert_eq!(ask(head("PROPFIND", "a.shop.lab") + "\r\n").await, 200);
    assert_eq!(ask(head("GET", "other.lab") + "\r\n").await, 404);
    let labels = |m: &str, s: &str| {
        format!("fairgate_http_requests_total{{host=\"*.shop.lab\",ingress=\"\",method=\"{m}\",namespace=\"\",route=\"shop\",service=\"\",status=\"{s}\"}}")
    };
    let counted = eventually(std::time::Duration::from_secs(2), || async {
        metric(&gw.metrics().await, &labels("other", "200")) == Some(1.0)
    })
    .await;
    let m = gw.metrics().await;
    assert!(counted, "{m}");
    assert_eq!(metric(&m, &labels("GET", "200")), Some(2.0), "{m}");
    assert_eq!(metric(&m, &labels("POST", "200")), Some(1.0), "{m}");
    let none = "fairgate_http_requests_total{host=\"\",ingress=\"\",method=\"GET\",namespace=\"\",route=\"none\",service=\"\",status=\"404\"}";
    assert_eq!(metric(&m, none), Some(1.0), "{m}");
    let shop = "{host=\"*.shop.lab\",ingress=\"\",namespace=\"\",route=\"shop\",service=\"\"";
    let sizes = format!("fairgate_http_request_size_bytes_sum{shop}}}");
    assert_eq!(metric(&m, &sizes), Some(5.0), "{m}");
    let durations = format!("fairgate_http_request_duration_seconds_count{shop}}}");
    assert_eq!(metric(&m, &durations), Some(4.0), "{m}");
    assert!(!m.contains("a.shop.lab") && !m.contains("other.lab"), "{m}");
}

/// A route answering more method and status pairs than 32 counts the rest
/// as status `other`; a reload that renames the route (as a renamed
/// Ingress would) removes the old name's series, so none is left behind.
#[tokio::test(flavor = "multi_thread")]
async fn the_http_series_are_bounded_per_route_and_pruned_on_reload() {
    let up = Upstream::start().await;
    let policy = |name: &str| {
        Policy::new()
            .sections(&format!(
                "upstreams:\n  app: {{targets: [\"{}\"]}}\nroutes:\n  - {{name: {name}, match: {{path_prefix: /}}, upstream: app, auth: none, exempt: true}}\n",
                up.addr
            ))
            .yaml()
    };
    let gw = Gateway::start(&policy("shop")).await;
    let addr = gw.listen;
    for status in 400..440 {
        let request =
            format!("GET /?status={status} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        assert_eq!(status_of(&raw_http(addr, &request).await), status);
    }
    let shop = "fairgate_http_requests_total{host=\"\",ingress=\"\",method=\"GET\",namespace=\"\",route=\"shop\",service=\"\",status=";
    let lines = |m: &str, prefix: &str| m.lines().filter(|l| l.starts_with(prefix)).count();
    let other = format!("{shop}\"other\"}}");
    let counted = eventually(std::time::Duration::from_secs(2), || async {
        metric(&gw.metrics().await, &other) == Some(8.0)
    })
    .await;
    let m = gw.metrics().await;
    assert!(counted, "{m}");
    assert_eq!(lines(&m, shop), 33, "{m}");

    // The file's change is seen and reloaded.
    gw.write_config(&policy("storefront"), Write::RenameOver);
    let reloaded = eventually(std::time::Duration::from_secs(5), || async {
        metric(&gw.metrics().await, "fairgate_config_generation") >= Some(2.0)
    })
    .await;
    assert!(reloaded, "{}", gw.logs());
    let request = "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    assert_eq!(status_of(&raw_http(addr, request).await), 200);
    let m = gw.metrics().await;
    let left = m
        .lines()
        .filter(|l| l.starts_with("fairgate_http_") && l.contains("route=\"shop\""));
    assert_eq!(left.count(), 0, "{m}");
    let storefront = "fairgate_http_requests_total{host=\"\",ingress=\"\",method=\"GET\",namespace=\"\",route=\"storefront\",service=\"\",status=\"200\"} 1";
    assert!(m.lines().any(|l| l == storefront), "{m}");
}
