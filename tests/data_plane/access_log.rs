//! The access line: every field `log.access.fields` names, measured on a
//! real TLS request (bytes both ways, user agent, host, upstream address
//! and status, the upstream/gateway time split, TLS version and SNI, the
//! `traceparent` trace id); a chosen subset; successful requests sampled
//! while errors and refusals are always logged; never a query or a token.

use crate::common;

use common::*;
use serde_json::Value;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

fn access_lines_now(gw: &Gateway) -> Vec<Value> {
    gw.log_lines()
        .into_iter()
        .filter(|l| l["target"] == "access")
        .collect()
}

/// The access lines once there are `n` (a line is written after its
/// response is sent, so it may trail the client by a moment).
async fn access_lines(gw: &Gateway, n: usize) -> Vec<Value> {
    eventually(std::time::Duration::from_secs(5), || async {
        access_lines_now(gw).len() >= n
    })
    .await;
    access_lines_now(gw)
}

#[tokio::test(flavor = "multi_thread")]
async fn every_field_is_measured_on_a_real_tls_request() {
    let echo = Upstream::start().await;
    let tls = free_addr();
    let tls_listener = format!(
        r#"tls: {{listen: "{tls}", certificates: [{{cert_file: "{FIXTURES}/gw.pem", key_file: "{FIXTURES}/gw.key"}}]}}"#
    );
    let gw = Policy::new()
        .server(&tls_listener)
        .hs256()
        .acknowledge("server.tls_host_uncovered")
        .sections(&format!(
            r#"
upstreams: {{api: {{targets: ["{}"]}}}}
routes:
  - {{name: items, match: {{path_prefix: /v1/items}}, upstream: api, limits: []}}
"#,
            echo.addr
        ))
        .start()
        .await;
    let ca = reqwest::Certificate::from_pem(&std::fs::read(format!("{FIXTURES}/ca.pem")).unwrap())
        .unwrap();
    let c = reqwest::Client::builder()
        .add_root_certificate(ca)
        .resolve("localhost", tls)
        .build()
        .unwrap();
    let token = token("acme");
    let send = |traceparent: &'static str| {
        c.post(format!(
            "https://localhost:{}/v1/items?token=SECRET-IN-QUERY",
            tls.port()
        ))
        .bearer_auth(&token)
        .header("user-agent", "fairgate-test/1")
        .header("traceparent", traceparent)
        .body("hello")
        .send()
    };
    let r = send("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body = r.bytes().await.unwrap();
    let lines = access_lines(&gw, 1).await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    let l = &lines[0];
    assert_eq!(l["path"], "/v1/items");
    assert_eq!(l["request_bytes"], 5);
    assert_eq!(l["response_bytes"], body.len());
    assert_eq!(l["user_agent"], "fairgate-test/1");
    assert_eq!(l["host"], format!("localhost:{}", tls.port()));
    assert_eq!(l["upstream_addr"], echo.addr.to_string());
    assert_eq!(l["upstream_status"], 200);
    assert_eq!(l["sni"], "localhost");
    assert!(
        l["tls_version"].as_str().is_some_and(|v| v.contains('1')),
        "{l}"
    );
    assert_eq!(l["trace_id"], TRACE);
    let (total, upstream, gateway) = (
        l["duration_ms"].as_f64().unwrap(),
        l["upstream_ms"].as_f64().unwrap(),
        l["gateway_ms"].as_f64().unwrap(),
    );
    assert!(upstream > 0.0 && upstream <= total, "{l}");
    assert!((upstream + gateway - total).abs() < 0.01, "{l}");
    // An invalid traceparent has no trace id; the query and the token are
    // never in the log.
    send("00-00000000000000000000000000000000-00f067aa0ba902b7-01")
        .await
        .unwrap();
    let lines = access_lines(&gw, 2).await;
    assert_eq!(lines.len(), 2);
    assert!(lines[1].get("trace_id").is_none(), "{}", lines[1]);
    let logs = gw.logs();
    assert!(!logs.contains("SECRET-IN-QUERY") && !logs.contains(&token));
}

#[tokio::test(flavor = "multi_thread")]
async fn chosen_fields_only_and_successes_sampled_but_never_errors() {
    let echo = Upstream::start().await;
    let gw = Policy::new()
        .sections(&format!(
            r#"
upstreams: {{api: {{targets: ["{}"]}}}}
limits:
  one: {{scope: client_ip, default: {{capacity: 3, rate: 1/h}}}}
routes:
  - {{name: api, match: {{path_prefix: /api}}, upstream: api, auth: none, limits: [one]}}
log:
  access: {{fields: [route, status], sample: 0}}
"#,
            echo.addr
        ))
        .start()
        .await;
    let c = client();
    let mut statuses = Vec::new();
    for path in ["/api", "/api", "/nowhere", "/api", "/api"] {
        statuses.push(c.get(gw.url(path)).send().await.unwrap().status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 404, 200, 429]);
    // Sample 0: no 200 is logged; the 404 and the 429 are, with exactly
    // the two fields chosen.
    let lines = access_lines(&gw, 2).await;
    let seen: Vec<(Value, Value)> = lines
        .iter()
        .map(|l| (l["route"].clone(), l["status"].clone()))
        .collect();
    assert_eq!(
        seen,
        [("none".into(), 404.into()), ("api".into(), 429.into())]
    );
    for l in &lines {
        let mut keys: Vec<&str> = l.as_object().unwrap().keys().map(String::as_str).collect();
        keys.retain(|k| !["timestamp", "level", "target"].contains(k));
        keys.sort();
        assert_eq!(keys, ["route", "status"], "{l}");
    }
}
