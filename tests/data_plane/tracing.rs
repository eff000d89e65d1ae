//! Traces, received by a real OTLP/HTTP receiver (`common::otlp`): the
//! request span with its attributes and its store and upstream children;
//! `traceparent` continued from the client or started, and what the
//! upstream received; parent-based ratio sampling; a collector that refuses
//! costs spans, not requests; with telemetry off, headers pass untouched.

use crate::common;

use common::*;
use serde_json::Value;
use std::net::SocketAddr;
use std::time::Duration;

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// An authenticated route whose tenant bucket holds `capacity` requests.
fn config(echo: SocketAddr, capacity: u32, telemetry: &str) -> String {
    Policy::new()
        .hs256()
        .sections(&format!(
            r#"
upstreams: {{api: {{targets: ["{echo}"]}}}}
limits:
  api: {{scope: tenant, default: {{capacity: {capacity}, rate: 1/h}}}}
routes:
  - {{name: items, match: {{path_prefix: /v1/items}}, upstream: api, limits: [api]}}
{telemetry}
"#
        ))
        .yaml()
}

/// A collector answering `status`, the echo upstream, and a gateway on
/// `config(echo, capacity, ..)` exporting to that collector: `otlp_keys`
/// follow its endpoint, `more` follows `otlp` (each starting with `, `).
async fn traced(
    status: u16,
    capacity: u32,
    otlp_keys: &str,
    more: &str,
    env: Vec<(String, String)>,
) -> (OtlpReceiver, Upstream, Gateway) {
    let otlp = OtlpReceiver::start(status).await;
    let echo = Upstream::start().await;
    let endpoint = otlp.endpoint();
    let telemetry = format!("telemetry: {{otlp: {{endpoint: \"{endpoint}\"{otlp_keys}}}{more}}}");
    let options = GatewayOptions {
        env,
        ..Default::default()
    };
    let gw = Gateway::start_hs256(&config(echo.addr, capacity, &telemetry), options).await;
    (otlp, echo, gw)
}

/// A `traceparent` as W3C Trace Context defines it: its trace id, parent
/// id and flags, or `None` for anything else.
fn parse_traceparent(v: &str) -> Option<(String, String, String)> {
    let parts: Vec<&str> = v.split('-').collect();
    let hex = |s: &str, n| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    };
    (parts.len() == 4
        && parts[0] == "00"
        && hex(parts[1], 32)
        && hex(parts[2], 16)
        && hex(parts[3], 2))
    .then(|| (parts[1].into(), parts[2].into(), parts[3].into()))
}

/// What the echo upstream says it received under `name` (one value).
fn received(echo: &Value, name: &str) -> Option<String> {
    let values = echo["headers"][name].as_array()?;
    assert_eq!(values.len(), 1, "{name}: {values:?}");
    values[0].as_str().map(String::from)
}

async fn send(gw: &Gateway, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut req = client()
        .get(gw.url("/v1/items/7?api_key=QUERY-SECRET"))
        .bearer_auth(token("acme"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let body = r.text().await.unwrap();
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// What the upstream received on a request continued from the client's
/// trace: the same trace and flags, the vendor state, and the gateway's own
/// span as parent. Returns that parent span id.
fn assert_upstream_continues_the_client_trace(body: &Value) -> String {
    let forwarded = received(body, "traceparent").expect("traceparent reached the upstream");
    let (trace, upstream_parent, flags) = parse_traceparent(&forwarded).expect("valid");
    assert_eq!(trace, CLIENT_TRACE);
    assert_eq!(flags, "01");
    assert_ne!(
        upstream_parent, CLIENT_SPAN,
        "the gateway's own span is the upstream's parent"
    );
    assert_eq!(received(body, "tracestate").as_deref(), Some("vendor=abc"));
    upstream_parent
}

/// The request span of the client's trace: its kind, parent, service and
/// attributes; then its two children, one store call and one upstream
/// exchange whose span id is `upstream_parent`, the parent the upstream
/// received.
async fn assert_request_span_and_children(
    otlp: &OtlpReceiver,
    echo: &Upstream,
    upstream_parent: &str,
) {
    let spans = otlp.trace_with(CLIENT_TRACE, "GET items").await;
    let server = spans.iter().find(|s| s.name == "GET items").unwrap();
    assert_eq!(server.kind, 2, "server span");
    assert_eq!(server.parent_span_id, CLIENT_SPAN);
    assert_eq!(server.service, "edge-test");
    for (key, value) in [
        ("fairgate.route", "items"),
        ("http.request.method", "GET"),
        ("http.response.status_code", "200"),
        ("fairgate.tenant", "acme"),
        ("fairgate.limit.decision", "allowed"),
        ("fairgate.store.source", "memory"),
        ("fairgate.upstream.address", echo.addr.to_string().as_str()),
        ("fairgate.upstream.status_code", "200"),
    ] {
        assert_eq!(server.attr(key), Some(value), "{key} of {server:#?}");
    }
    // The children: one store call, one upstream exchange, whose span id
    // is the parent the upstream received.
    let store = spans
        .iter()
        .find(|s| s.name == "store spend")
        .expect("store span");
    assert_eq!(store.parent_span_id, server.span_id);
    assert_eq!(store.attr("fairgate.store.source"), Some("memory"));
    assert_eq!(store.attr("fairgate.limit.decision"), Some("allowed"));
    let up = spans
        .iter()
        .find(|s| s.name == "GET upstream")
        .expect("upstream span");
    assert_eq!(up.kind, 3, "client span");
    assert_eq!(up.parent_span_id, server.span_id);
    assert_eq!(up.span_id, upstream_parent);
    assert_eq!(
        up.attr("server.address"),
        Some(echo.addr.to_string().as_str())
    );
    assert_eq!(up.attr("http.response.status_code"), Some("200"));
    assert_eq!(up.attr("fairgate.upstream.attempts"), Some("1"));
    assert_eq!(spans.len(), 3, "{spans:#?}");
}

/// A request without `traceparent`: a trace is started, the upstream is in
/// it, and its request span is a root. Returns the started trace id.
async fn assert_a_trace_is_started(gw: &Gateway, otlp: &OtlpReceiver) -> String {
    let (status, body) = send(gw, &[]).await;
    assert_eq!(status, 200);
    let (started, _, flags) =
        parse_traceparent(&received(&body, "traceparent").expect("started")).expect("valid");
    assert_ne!(started, CLIENT_TRACE);
    assert_eq!(flags, "01");
    assert_eq!(received(&body, "tracestate"), None);
    let spans = otlp.trace_with(&started, "GET items").await;
    let server = spans.iter().find(|s| s.name == "GET items").unwrap();
    assert_eq!(server.parent_span_id, "", "a root span");
    started
}

/// A request its bucket refuses, in trace `refused_trace`: the span says
/// so, with the store's word and no upstream child.
async fn assert_a_refusal_is_traced(gw: &Gateway, otlp: &OtlpReceiver, refused_trace: &str) {
    let parent = format!("00-{refused_trace}-b7ad6b7169203331-01");
    let (status, _) = send(gw, &[("traceparent", &parent)]).await;
    assert_eq!(status, 429);
    let spans = otlp.trace_with(refused_trace, "GET items").await;
    let server = spans.iter().find(|s| s.name == "GET items").unwrap();
    assert_eq!(server.attr("http.response.status_code"), Some("429"));
    assert_eq!(server.attr("fairgate.limit.decision"), Some("limited"));
    assert_eq!(server.attr("fairgate.upstream.address"), None);
    assert_eq!(
        server.status, 0,
        "a 4xx is the client's, not a server error"
    );
    assert!(spans.iter().all(|s| s.name != "GET upstream"), "{spans:#?}");
}

/// Exports go to the traces path as protobuf, and nothing secret rides
/// along: no token or query in any span name or attribute.
fn assert_exports_are_protobuf_without_secrets(otlp: &OtlpReceiver) {
    let posts = otlp.posts.lock().unwrap().clone();
    assert!(
        posts
            .iter()
            .all(|(p, h)| p == "/v1/traces" && h["content-type"] == "application/x-protobuf"),
        "{posts:?}"
    );
    let tok = token("acme");
    for s in otlp.spans() {
        let text = format!("{} {:?}", s.name, s.attributes);
        assert!(
            !text.contains(&tok) && !text.contains("QUERY-SECRET"),
            "{s:#?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_span_has_its_attributes_and_children_and_the_upstream_continues_the_trace() {
    let more = ", service_name: edge-test, tenant_attribute: true";
    let (otlp, echo, gw) = traced(200, 2, "", more, vec![]).await;

    // 1. Continued from the client's trace, its vendor state kept.
    let parent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    let (status, body) = send(
        &gw,
        &[("traceparent", &parent), ("tracestate", "vendor=abc")],
    )
    .await;
    assert_eq!(status, 200);
    let upstream_parent = assert_upstream_continues_the_client_trace(&body);
    assert_request_span_and_children(&otlp, &echo, &upstream_parent).await;

    // 2. No traceparent: a trace is started and the upstream is in it.
    let started = assert_a_trace_is_started(&gw, &otlp).await;

    // 3. Refused by its bucket (capacity 2): the span says so, with the
    // store's word and no upstream child.
    let refused_trace = "0af7651916cd43dd8448eb211c80319c";
    assert_a_refusal_is_traced(&gw, &otlp, refused_trace).await;

    // The access log carries the same trace ids, started one included.
    let logged: Vec<String> = gw
        .log_lines()
        .into_iter()
        .filter(|l| l["target"] == "access")
        .filter_map(|l| l["trace_id"].as_str().map(String::from))
        .collect();
    assert_eq!(logged, [CLIENT_TRACE, started.as_str(), refused_trace]);
    assert_exports_are_protobuf_without_secrets(&otlp);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_invalid_or_repeated_traceparent_starts_a_new_trace() {
    let otlp = OtlpReceiver::start(200).await;
    let bad = [
        // All-zero trace id, version ff, upper case, too short, junk.
        "traceparent: 00-00000000000000000000000000000000-00f067aa0ba902b7-01\r\n".to_string(),
        format!("traceparent: ff-{CLIENT_TRACE}-{CLIENT_SPAN}-01\r\n"),
        format!("traceparent: 00-{}-{CLIENT_SPAN}-01\r\n", CLIENT_TRACE.to_uppercase()),
        format!("traceparent: 00-{CLIENT_TRACE}-00f067aa-01\r\n"),
        "traceparent: hello\r\ntracestate: vendor=abc\r\n".to_string(),
        // Two traceparent lines: which one holds? Neither.
        format!(
            "traceparent: 00-{CLIENT_TRACE}-{CLIENT_SPAN}-01\r\ntraceparent: 00-0af7651916cd43dd8448eb211c80319c-{CLIENT_SPAN}-01\r\n"
        ),
    ];
    let (_gw, received) = forwarded_trace_headers(&otlp, &bad).await;
    let mut traces = std::collections::BTreeSet::new();
    for ((parents, states), sent) in received.iter().zip(&bad) {
        assert_eq!(parents.len(), 1, "{sent:?}");
        assert!(states.is_empty(), "no tracestate for {sent:?}: {states:?}");
        let value = &parents[0];
        let (trace, _, flags) = parse_traceparent(value).unwrap_or_else(|| panic!("{value}"));
        assert_eq!(flags, "01", "a new trace, sampled at ratio 1");
        assert!(
            trace != CLIENT_TRACE && !trace.starts_with("0000"),
            "{sent:?} gave {trace}"
        );
        traces.insert(trace);
    }
    assert_eq!(traces.len(), bad.len(), "a new trace each time");
    // Each new trace is a root span at the receiver.
    for trace in &traces {
        let spans = otlp.trace_with(trace, "GET open").await;
        let root = spans.iter().find(|s| s.name == "GET open").unwrap();
        assert_eq!(root.parent_span_id, "");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sampling_follows_the_parent_then_the_ratio() {
    let (otlp, _echo, gw) = traced(200, 10, "", ", sampling: {ratio: 0}", vec![]).await;
    // Ratio 0: a new trace is propagated but not recorded.
    let (status, body) = send(&gw, &[]).await;
    assert_eq!(status, 200);
    let (unsampled, _, flags) =
        parse_traceparent(&received(&body, "traceparent").unwrap()).unwrap();
    assert_eq!(flags, "00");
    // A parent that was not sampled is followed: not recorded.
    let quiet = "11111111111111111111111111111111";
    let (_, body) = send(
        &gw,
        &[("traceparent", &format!("00-{quiet}-{CLIENT_SPAN}-00"))],
    )
    .await;
    let (trace, _, flags) = parse_traceparent(&received(&body, "traceparent").unwrap()).unwrap();
    assert_eq!((trace.as_str(), flags.as_str()), (quiet, "00"));
    // A sampled parent is followed: recorded, whatever the ratio.
    let parent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    let (_, body) = send(&gw, &[("traceparent", &parent)]).await;
    let (_, _, flags) = parse_traceparent(&received(&body, "traceparent").unwrap()).unwrap();
    assert_eq!(flags, "01");
    otlp.trace_with(CLIENT_TRACE, "GET items").await;
    // Spans leave in the order they end: the sampled request came last, so
    // anything of the two before it would have arrived by now.
    let traces: std::collections::BTreeSet<String> =
        otlp.spans().into_iter().map(|s| s.trace_id).collect();
    assert_eq!(traces.into_iter().collect::<Vec<_>>(), [CLIENT_TRACE]);
    assert!(!unsampled.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_collector_that_refuses_costs_spans_not_requests() {
    // The collector's credentials, from the standard variable: sent, never logged.
    let env = vec![(
        "OTEL_EXPORTER_OTLP_HEADERS".into(),
        "x-collector-key=COLLECTOR-SECRET".into(),
    )];
    let (otlp, _echo, gw) = traced(503, 10, ", timeout: 1s", "", env).await;
    for _ in 0..2 {
        assert_eq!(send(&gw, &[]).await.0, 200);
    }
    let failed = eventually(Duration::from_secs(15), || async {
        metric(
            &gw.metrics().await,
            "fairgate_trace_spans_total{result=\"failed\"}",
        )
        .is_some_and(|n| n >= 6.0)
    })
    .await;
    let text = gw.metrics().await;
    assert!(failed, "two requests' six spans counted failed:\n{text}");
    assert_eq!(
        metric(&text, "fairgate_trace_spans_total{result=\"exported\"}").unwrap_or(0.0),
        0.0
    );
    let posts = otlp.posts.lock().unwrap().clone();
    assert!(!posts.is_empty());
    assert!(posts
        .iter()
        .all(|(_, h)| h["x-collector-key"] == "COLLECTOR-SECRET"));
    // Polled: the line may be written after the spans are counted.
    let logged = eventually(Duration::from_secs(10), || async {
        gw.logs().contains("telemetry.export_failed")
    })
    .await;
    assert!(logged, "{}", gw.logs());
    assert!(!gw.logs().contains("COLLECTOR-SECRET"));
}

#[tokio::test(flavor = "multi_thread")]
async fn with_telemetry_off_trace_headers_pass_untouched() {
    let echo = Upstream::start().await;
    let gw = Gateway::start_hs256(&config(echo.addr, 10, ""), GatewayOptions::default()).await;
    let parent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    let (status, body) = send(
        &gw,
        &[("traceparent", &parent), ("tracestate", "vendor=abc")],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(received(&body, "traceparent"), Some(parent));
    assert_eq!(received(&body, "tracestate").as_deref(), Some("vendor=abc"));
    let (_, body) = send(&gw, &[]).await;
    assert_eq!(received(&body, "traceparent"), None, "none is started");
    assert!(!gw.metrics().await.contains("fairgate_trace_spans_total{"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_tenant_attribute_reloads_and_the_exporter_needs_a_restart() {
    let otlp = OtlpReceiver::start(200).await;
    let echo = Upstream::start().await;
    let telemetry = |endpoint: &str, tenant: bool| {
        config(
            echo.addr,
            10,
            &format!(
                "telemetry: {{otlp: {{endpoint: \"{endpoint}\"}}, tenant_attribute: {tenant}}}"
            ),
        )
    };
    let gw = Gateway::start_hs256(
        &telemetry(&otlp.endpoint(), false),
        GatewayOptions::default(),
    )
    .await;
    assert_eq!(
        tenant_of(&gw, &otlp, "11111111111111111111111111111111").await,
        None,
        "off by default"
    );

    // The file is watched: a write reloads it.
    gw.write_config(&telemetry(&otlp.endpoint(), true), Write::InPlace);
    assert!(
        eventually(Duration::from_secs(5), || async {
            metric(&gw.metrics().await, "fairgate_config_generation") == Some(2.0)
        })
        .await
    );
    assert_eq!(
        tenant_of(&gw, &otlp, "22222222222222222222222222222222")
            .await
            .as_deref(),
        Some("acme")
    );

    // Another endpoint is refused as a whole: the old policy and exporter go on.
    gw.write_config(&telemetry("http://127.0.0.1:9", false), Write::InPlace);
    let refused = eventually(Duration::from_secs(5), || async {
        gw.logs()
            .contains("reload.restart_required: telemetry (otlp, sampling, service_name): changed")
    })
    .await;
    assert!(refused, "{}", gw.logs());
    assert_eq!(
        tenant_of(&gw, &otlp, "33333333333333333333333333333333")
            .await
            .as_deref(),
        Some("acme")
    );
    assert_eq!(
        metric(&gw.metrics().await, "fairgate_config_generation"),
        Some(2.0)
    );
}

/// The `fairgate.tenant` of a traced request's span.
async fn tenant_of(gw: &Gateway, otlp: &OtlpReceiver, trace: &str) -> Option<String> {
    let parent = format!("00-{trace}-{CLIENT_SPAN}-01");
    assert_eq!(send(gw, &[("traceparent", &parent)]).await.0, 200);
    let spans = otlp.trace_with(trace, "GET items").await;
    let server = spans.into_iter().find(|s| s.name == "GET items").unwrap();
    server.attr("fairgate.tenant").map(String::from)
}

#[tokio::test(flavor = "multi_thread")]
async fn unusual_but_valid_trace_headers_continue_the_trace() {
    let otlp = OtlpReceiver::start(200).await;
    let big = (0..40)
        .map(|i| format!("v{i}=x"))
        .collect::<Vec<_>>()
        .join(",");
    let ok = format!("traceparent: 00-{CLIENT_TRACE}-{CLIENT_SPAN}");
    // Extra head lines; the flags and tracestate the upstream must get.
    let cases: [(String, &str, Option<&str>); 4] = [
        // W3C Level 2's random flag: still this trace, sampled.
        (format!("{ok}-03\r\n"), "01", None),
        // A later version with more fields: read as version 00.
        (
            format!("traceparent: 01-{CLIENT_TRACE}-{CLIENT_SPAN}-01-later\r\n"),
            "01",
            None,
        ),
        // Two tracestate lines are one list.
        (
            format!("{ok}-01\r\ntracestate: a=1\r\ntracestate: b=2\r\n"),
            "01",
            Some("a=1,b=2"),
        ),
        // Over 32 members: the state is dropped, the trace kept.
        (format!("{ok}-00\r\ntracestate: {big}\r\n"), "00", None),
    ];
    let heads: Vec<String> = cases.iter().map(|c| c.0.clone()).collect();
    let (_gw, received) = forwarded_trace_headers(&otlp, &heads).await;
    for ((parents, states), (sent, flags, state)) in received.iter().zip(&cases) {
        assert_eq!(parents.len(), 1, "{sent:?}");
        let (trace, parent, got) = parse_traceparent(&parents[0]).unwrap();
        assert_eq!(
            (trace.as_str(), got.as_str()),
            (CLIENT_TRACE, *flags),
            "{sent:?}"
        );
        assert_ne!(parent, CLIENT_SPAN);
        let expected: Vec<String> = state.iter().map(|s| s.to_string()).collect();
        assert_eq!(states, &expected, "{sent:?}");
    }
    // The sampled ones are spans of the client's trace, under its span.
    let spans = otlp.trace_with(CLIENT_TRACE, "GET open").await;
    let roots: Vec<_> = spans.iter().filter(|s| s.name == "GET open").collect();
    assert!(
        roots.iter().all(|s| s.parent_span_id == CLIENT_SPAN),
        "{roots:#?}"
    );
}

/// Sends one raw request per item of `heads` (extra head lines) through a
/// gateway on an open route with traces on, and returns what a raw upstream
/// received of each: its `traceparent` and its `tracestate` lines. The
/// gateway is returned too: its spans leave after the requests.
async fn forwarded_trace_headers(
    otlp: &OtlpReceiver,
    heads: &[String],
) -> (Gateway, Vec<(Vec<String>, Vec<String>)>) {
    let echo = RawUpstream::start().await;
    let gw = Policy::new()
        .sections(&format!(
            r#"
upstreams: {{api: {{targets: ["{}"]}}}}
routes:
  - {{name: open, match: {{path_prefix: /}}, upstream: api, auth: none, limits: []}}
telemetry: {{otlp: {{endpoint: "{}"}}}}
"#,
            echo.addr,
            otlp.endpoint()
        ))
        .start()
        .await;
    for (i, head) in heads.iter().enumerate() {
        let request =
            format!("GET /t/{i} HTTP/1.1\r\nHost: api.test\r\n{head}Connection: close\r\n\r\n");
        let response = raw_http(gw.listen, &request).await;
        assert_eq!(status_of(&response), 200, "{head}: {response}");
    }
    let received = echo.received.lock().unwrap().clone();
    assert_eq!(received.len(), heads.len());
    let values = |head: &str, name: &str| -> Vec<String> {
        head.lines()
            .filter_map(|l| l.split_once(':'))
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_string())
            .collect()
    };
    let received = received
        .iter()
        .map(|r| {
            (
                values(&r.head, "traceparent"),
                values(&r.head, "tracestate"),
            )
        })
        .collect();
    (gw, received)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retried_request_has_one_upstream_span_with_the_last_attempt() {
    let otlp = OtlpReceiver::start(200).await;
    let echo = Upstream::start().await;
    let (busy, busy_count) = unavailable().await;
    let gw = Policy::new()
        .sections(&format!(
            r#"
upstreams: {{api: {{targets: ["{busy}", "{}"]}}}}
routes:
  - {{name: open, match: {{path_prefix: /}}, upstream: api, auth: none, limits: [], retries: {{attempts: 2, on: [503]}}}}
telemetry: {{otlp: {{endpoint: "{}"}}}}
"#,
            echo.addr,
            otlp.endpoint()
        ))
        .start()
        .await;
    // Round robin over two targets: half the requests meet the 503 first.
    let traces: Vec<String> = (0..4)
        .map(|i| format!("{i:032x}").replace('0', "a"))
        .collect();
    for trace in &traces {
        let parent = format!("00-{trace}-{CLIENT_SPAN}-01");
        let r = client()
            .get(gw.url("/"))
            .header("traceparent", parent)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let retried = busy_count.load(std::sync::atomic::Ordering::SeqCst);
    assert!(retried >= 1, "no request met the busy target");
    let mut attempts = Vec::new();
    for trace in &traces {
        let spans = otlp.trace_with(trace, "GET open").await;
        let ups: Vec<_> = spans.iter().filter(|s| s.name == "GET upstream").collect();
        assert_eq!(ups.len(), 1, "one upstream span: {spans:#?}");
        // The last attempt's target and answer, once each (checked by
        // `trace_with`: no key twice).
        assert_eq!(
            ups[0].attr("server.address"),
            Some(echo.addr.to_string().as_str())
        );
        assert_eq!(ups[0].attr("http.response.status_code"), Some("200"));
        attempts.push(
            ups[0]
                .attr("fairgate.upstream.attempts")
                .unwrap()
                .to_string(),
        );
    }
    let twice = attempts.iter().filter(|a| *a == "2").count() as u64;
    assert_eq!(twice, retried, "{attempts:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn item_5_otlp_exporter_trusts_its_ca_file() {
    // A collector over HTTPS whose certificate a private CA signed.
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "collector");
    let (cert, key) = pki.leaf("otlp", "localhost", &["localhost"], "0c");
    let otlp = OtlpReceiver::start_tls(200, &cert, &key).await;
    let echo = Upstream::start().await;
    let start = |ca: String| {
        let telemetry = format!(
            "telemetry: {{otlp: {{endpoint: \"{}\"{ca}}}}}",
            otlp.endpoint()
        );
        let yaml = config(echo.addr, 10, &telemetry);
        async move { Gateway::start_hs256(&yaml, GatewayOptions::default()).await }
    };

    let trusting = start(format!(", ca_file: \"{}\"", pki.ca().display())).await;
    let started = assert_a_trace_is_started(&trusting, &otlp).await;
    assert!(!started.is_empty());

    // Without it the system's roots do not know the CA: every export fails
    // its handshake, and the requests are served all the same.
    let before = otlp.spans().len();
    let plain = start(String::new()).await;
    assert_eq!(send(&plain, &[]).await.0, 200);
    let failed = eventually(Duration::from_secs(15), || async {
        metric(
            &plain.metrics().await,
            "fairgate_trace_spans_total{result=\"failed\"}",
        )
        .is_some_and(|n| n >= 1.0)
    })
    .await;
    assert!(failed, "{}", plain.metrics().await);
    assert_eq!(
        otlp.spans().len(),
        before,
        "nothing arrived without ca_file"
    );
}
