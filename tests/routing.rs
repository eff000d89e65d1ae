//! The routing an ingress needs, against the real echo upstream, with
//! requests written as raw bytes from chosen loopback sources: header and
//! query matches, redirects (`redirect`, `https_redirect`, `app_root`),
//! rewrites of path and host, header edits both ways, address rules,
//! per-route timeouts and CORS as a browser sends it.

mod common;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// One answer, read off the wire.
struct Answer {
    status: u16,
    headers: BTreeMap<String, Vec<String>>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .and_then(|v| v.first())
            .map(String::as_str)
    }

    /// What the echo upstream received.
    fn echoed(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// `METHOD path` from `source` with `headers` (lines without CRLF).
async fn send(gw: &Gateway, source: &str, method: &str, path: &str, headers: &[&str]) -> Answer {
    let mut request = format!("{method} {path} HTTP/1.1\r\n");
    if !headers
        .iter()
        .any(|h| h.to_ascii_lowercase().starts_with("host:"))
    {
        request.push_str("Host: api.test\r\n");
    }
    for h in headers {
        request.push_str(h);
        request.push_str("\r\n");
    }
    request.push_str("Connection: close\r\n\r\n");
    let source: IpAddr = source.parse().unwrap();
    let raw = raw_http_from(source, gw.listen, request.as_bytes()).await;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let mut headers = BTreeMap::<String, Vec<String>>::new();
    for line in head.lines().skip(1) {
        if let Some((k, v)) = line.split_once(':') {
            headers
                .entry(k.trim().to_ascii_lowercase())
                .or_default()
                .push(v.trim().to_string());
        }
    }
    Answer {
        status: status_of(&raw),
        headers,
        body: body.to_string(),
    }
}

const LOCAL: &str = "127.0.0.1";

async fn gateway(echo: &Upstream) -> Gateway {
    Policy::new()
        .server(r#"deny_cidrs: ["127.0.0.9/32"]"#)
        .hs256()
        .sections(&format!(
            r#"
upstreams: {{api: {{targets: ["{echo}"]}}}}
limits:
  tight: {{scope: client_ip, default: {{capacity: 1, rate: 1/h}}}}
routes:
  - {{name: beta, match: {{path_prefix: /m, headers: {{x-beta: "1"}}}}, upstream: api, auth: none, exempt: true, request_headers: {{set: {{x-variant: beta}}}}}}
  - {{name: versioned, match: {{path_prefix: /m, headers: {{x-version: {{regex: "v[0-9]+\\.2"}}}}, query: {{lang: {{regex: "en|fr"}}}}}}, upstream: api, auth: none, exempt: true, request_headers: {{set: {{x-variant: versioned}}}}}}
  - {{name: flagged, match: {{path_prefix: /m, query: {{flag: true}}}}, upstream: api, auth: none, exempt: true, request_headers: {{set: {{x-variant: flagged}}}}}}
  - {{name: plain, match: {{path_prefix: /m}}, upstream: api, auth: none, exempt: true, request_headers: {{set: {{x-variant: plain}}}}}}
  - {{name: moved, match: {{path: "/old/{{id}}"}}, redirect: {{to: "https://new.example.com/items/{{id}}{{query}}", code: 301}}}}
  - {{name: secure, match: {{path_prefix: /secure}}, https_redirect: true, upstream: api, auth: none, exempt: true}}
  - {{name: root, match: {{host: root.test, path_prefix: /}}, app_root: /app/, upstream: api, auth: none, exempt: true}}
  - {{name: v1, match: {{path_prefix: /api/v1}}, rewrite: {{path: "/v2{{rest}}", host: internal.example}}, upstream: api, auth: none, exempt: true}}
  - {{name: profile, match: {{path: "/users/{{uid}}/profile"}}, rewrite: {{path: "/profiles/{{uid}}"}}, upstream: api, auth: none, exempt: true}}
  - name: edits
    match: {{path_prefix: /edits}}
    upstream: api
    auth: none
    exempt: true
    request_headers: {{set: {{x-client: "{{client_ip}}", x-route: "{{route}}"}}, add: {{x-tag: a}}, remove: [x-debug]}}
    response_headers: {{set: {{x-served-by: "fairgate/{{route}}"}}, remove: [content-type]}}
  - {{name: who, match: {{path_prefix: /who}}, upstream: api, limits: [], request_headers: {{set: {{x-who: "{{tenant}}"}}}}}}
  - {{name: private, match: {{path_prefix: /private}}, allow_cidrs: ["127.0.0.2/32"], upstream: api, auth: none, exempt: true}}
  - {{name: open, match: {{path_prefix: /open}}, deny_cidrs: ["127.0.0.3/32"], limit_exempt_cidrs: ["127.0.0.4/32"], upstream: api, auth: none, limits: [tight]}}
  - {{name: slow, match: {{path_prefix: /slow}}, timeouts: {{read: 300ms}}, upstream: api, auth: none, exempt: true}}
  - {{name: bounded, match: {{path_prefix: /total}}, timeouts: {{total: 400ms}}, upstream: api, auth: none, exempt: true}}
  - name: cors
    match: {{path_prefix: /cors}}
    upstream: api
    limits: [tight]
    cors: {{origins: ["https://app.example"], methods: [GET, POST], headers: [authorization, content-type], expose: [ratelimit], credentials: true, max_age: 10m}}
"#,
            echo = echo.addr
        ))
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn header_and_query_matches_pick_the_route() {
    let echo = Upstream::start().await;
    let gw = gateway(&echo).await;
    let variant = |a: Answer| {
        a.echoed()["headers"]["x-variant"][0]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        variant(send(&gw, LOCAL, "GET", "/m", &["X-Beta: 1"]).await),
        "beta"
    );
    assert_eq!(
        variant(send(&gw, LOCAL, "GET", "/m", &["X-Beta: 2"]).await),
        "plain"
    );
    assert_eq!(
        variant(send(&gw, LOCAL, "GET", "/m?flag", &[]).await),
        "flagged"
    );
    assert_eq!(
        variant(send(&gw, LOCAL, "GET", "/m?a=1&fl%61g=no", &[]).await),
        "flagged"
    );
    assert_eq!(
        variant(send(&gw, LOCAL, "GET", "/m?flags=1", &[]).await),
        "plain"
    );
    // Regular expressions match whole values.
    for (target, header, want) in [
        ("/m?lang=fr", "X-Version: v12.2", "versioned"),
        ("/m?lang=fra", "X-Version: v12.2", "plain"),
        ("/m?lang=en", "X-Version: v12.20", "plain"),
    ] {
        let answer = send(&gw, LOCAL, "GET", target, &[header]).await;
        assert_eq!(variant(answer), want, "{target} {header}");
    }
    // A client's own x-variant is replaced by the route's.
    assert_eq!(
        variant(send(&gw, LOCAL, "GET", "/m", &["X-Variant: forged"]).await),
        "plain"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn redirects_answer_without_the_upstream() {
    let echo = Upstream::start().await;
    let gw = gateway(&echo).await;
    let a = send(&gw, LOCAL, "GET", "/old/42?x=1", &[]).await;
    assert_eq!(
        (a.status, a.header("location")),
        (301, Some("https://new.example.com/items/42?x=1"))
    );
    assert_eq!(a.header("content-length"), Some("0"));
    let a = send(&gw, LOCAL, "GET", "/old/7", &[]).await;
    assert_eq!(
        a.header("location"),
        Some("https://new.example.com/items/7")
    );

    let a = send(
        &gw,
        LOCAL,
        "POST",
        "/secure/pay?b=2",
        &["Host: shop.test:8080", "Content-Length: 0"],
    )
    .await;
    assert_eq!(
        (a.status, a.header("location")),
        (308, Some("https://shop.test/secure/pay?b=2"))
    );

    let a = send(&gw, LOCAL, "GET", "/", &["Host: root.test"]).await;
    assert_eq!((a.status, a.header("location")), (302, Some("/app/")));
    let a = send(&gw, LOCAL, "GET", "/app/", &["Host: root.test"]).await;
    assert_eq!(a.status, 200);
    assert_eq!(echo.requests(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn rewrites_change_what_is_forwarded_and_both_paths_are_logged() {
    let echo = Upstream::start().await;
    let gw = gateway(&echo).await;
    let e = send(&gw, LOCAL, "GET", "/api/v1/items/9?q=1", &[])
        .await
        .echoed();
    assert_eq!(
        (e["path"].as_str(), e["query"].as_str()),
        (Some("/v2/items/9"), Some("q=1"))
    );
    assert_eq!(e["headers"]["host"][0], "internal.example");
    // X-Forwarded-Host keeps the client's.
    assert_eq!(e["headers"]["x-forwarded-host"][0], "api.test");
    let e = send(&gw, LOCAL, "GET", "/api/v1", &[]).await.echoed();
    assert_eq!(e["path"], "/v2");
    let e = send(&gw, LOCAL, "GET", "/users/u-17/profile", &[])
        .await
        .echoed();
    assert_eq!(e["path"], "/profiles/u-17");

    let ok = eventually(std::time::Duration::from_secs(5), || async {
        gw.log_lines().iter().any(|l| {
            l["target"] == "access"
                && l["path"] == "/api/v1/items/9"
                && l["upstream_path"] == "/v2/items/9"
        })
    })
    .await;
    assert!(ok, "{}", gw.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn header_edits_both_ways_with_variables() {
    let echo = Upstream::start().await;
    let gw = gateway(&echo).await;
    let a = send(
        &gw,
        LOCAL,
        "GET",
        "/edits",
        &["X-Tag: z", "X-Debug: 1", "X-Route: forged"],
    )
    .await;
    assert_eq!(a.header("x-served-by"), Some("fairgate/edits"));
    assert_eq!(a.header("content-type"), None);
    assert!(a.header("x-request-id").is_some());
    let h = &a.echoed()["headers"];
    assert_eq!(h["x-client"], serde_json::json!(["127.0.0.1"]));
    assert_eq!(h["x-route"], serde_json::json!(["edits"]));
    assert_eq!(h["x-tag"], serde_json::json!(["z", "a"]));
    assert!(h.get("x-debug").is_none());

    let bearer = format!("Authorization: Bearer {}", token("acme"));
    let a = send(&gw, LOCAL, "GET", "/who", &[&bearer]).await;
    assert_eq!(a.echoed()["headers"]["x-who"], serde_json::json!(["acme"]));
}

#[tokio::test(flavor = "multi_thread")]
async fn address_rules_refuse_and_exempt_by_client_address() {
    let echo = Upstream::start().await;
    let gw = gateway(&echo).await;
    let a = send(&gw, LOCAL, "GET", "/private", &[]).await;
    assert_eq!(a.status, 403);
    assert_eq!(a.header("content-type"), Some("application/problem+json"));
    assert!(
        a.body.contains("urn:fairgate:problem:address-forbidden"),
        "{}",
        a.body
    );
    assert_eq!(
        send(&gw, "127.0.0.2", "GET", "/private", &[]).await.status,
        200
    );
    // The server's deny list holds on every route.
    assert_eq!(send(&gw, "127.0.0.9", "GET", "/m", &[]).await.status, 403);
    // A route's deny list, and its limit (capacity 1 per address).
    assert_eq!(
        send(&gw, "127.0.0.3", "GET", "/open", &[]).await.status,
        403
    );
    assert_eq!(
        send(&gw, "127.0.0.5", "GET", "/open", &[]).await.status,
        200
    );
    assert_eq!(
        send(&gw, "127.0.0.5", "GET", "/open", &[]).await.status,
        429
    );
    for _ in 0..3 {
        assert_eq!(
            send(&gw, "127.0.0.4", "GET", "/open", &[]).await.status,
            200
        );
    }
    assert_eq!(echo.requests(), 5);
    let metrics = gw.metrics().await;
    for (route, n) in [("private", 1.0), ("plain", 1.0), ("open", 1.0)] {
        let series = format!("fairgate_address_refusals_total{{route=\"{route}\"}}");
        assert_eq!(metric(&metrics, &series).unwrap_or(0.0), n, "{route}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_route_timeout_overrides_the_pools() {
    let echo = Upstream::start().await;
    let gw = gateway(&echo).await;
    assert_eq!(
        send(&gw, LOCAL, "GET", "/slow?sleep_ms=10", &[])
            .await
            .status,
        200
    );
    assert_eq!(
        send(&gw, LOCAL, "GET", "/slow?sleep_ms=1500", &[])
            .await
            .status,
        504
    );
    // The pool's own read timeout (60 s) elsewhere.
    assert_eq!(
        send(&gw, LOCAL, "GET", "/m?sleep_ms=1500", &[])
            .await
            .status,
        200
    ); // A total: from the request's arrival, whatever each wait allows.
    assert_eq!(
        send(&gw, LOCAL, "GET", "/total?sleep_ms=10", &[])
            .await
            .status,
        200
    );
    assert_eq!(
        send(&gw, LOCAL, "GET", "/total?sleep_ms=1500", &[])
            .await
            .status,
        504
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn cors_preflights_are_answered_free_and_actual_answers_carry_cors() {
    let echo = Upstream::start().await;
    let gw = gateway(&echo).await;
    let preflight = [
        "Origin: https://app.example",
        "Access-Control-Request-Method: POST",
        "Access-Control-Request-Headers: authorization, content-type",
    ];
    for _ in 0..3 {
        let a = send(&gw, LOCAL, "OPTIONS", "/cors/items", &preflight).await;
        assert_eq!(a.status, 204);
        assert_eq!(
            a.header("access-control-allow-origin"),
            Some("https://app.example")
        );
        assert_eq!(a.header("access-control-allow-methods"), Some("GET, POST"));
        assert_eq!(
            a.header("access-control-allow-headers"),
            Some("authorization, content-type")
        );
        assert_eq!(a.header("access-control-allow-credentials"), Some("true"));
        assert_eq!(a.header("access-control-max-age"), Some("600"));
        assert_eq!(a.header("vary"), Some("Origin"));
    }
    let refused = send(
        &gw,
        LOCAL,
        "OPTIONS",
        "/cors/items",
        &[
            "Origin: https://evil.example",
            "Access-Control-Request-Method: POST",
        ],
    )
    .await;
    assert_eq!(refused.status, 204);
    assert_eq!(refused.header("access-control-allow-origin"), None);
    assert_eq!(echo.requests(), 0);

    // Preflights spent nothing: the one token of this address is still there.
    let bearer = format!("Authorization: Bearer {}", token("acme"));
    let origin = "Origin: https://app.example";
    let a = send(&gw, LOCAL, "GET", "/cors/items", &[&bearer, origin]).await;
    assert_eq!(a.status, 200);
    assert_eq!(
        a.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    assert_eq!(a.header("access-control-expose-headers"), Some("ratelimit"));
    // The gateway's own answers carry CORS too, so the page can read them.
    let a = send(&gw, LOCAL, "GET", "/cors/items", &[&bearer, origin]).await;
    assert_eq!(
        (a.status, a.header("access-control-allow-origin")),
        (429, Some("https://app.example"))
    );
    let a = send(&gw, "127.0.0.6", "GET", "/cors/items", &[origin]).await;
    assert_eq!(
        (a.status, a.header("access-control-allow-origin")),
        (401, Some("https://app.example"))
    );
    let a = send(
        &gw,
        "127.0.0.7",
        "GET",
        "/cors/items",
        &[&bearer, "Origin: https://evil.example"],
    )
    .await;
    assert_eq!(
        (a.status, a.header("access-control-allow-origin")),
        (200, None)
    );
    // Without Origin: no CORS headers, but Vary: Origin, so no cache hands
    // this copy to a page.
    let a = send(&gw, "127.0.0.8", "GET", "/cors/items", &[&bearer]).await;
    assert_eq!((a.status, a.header("vary")), (200, Some("Origin")));
    assert_eq!(a.header("access-control-allow-origin"), None);
}

/// Which of `pools` served one request (the one whose count went up).
async fn served_by(pools: &[&EchoProcess], send: impl std::future::Future<Output = u16>) -> usize {
    let before: Vec<u64> = pools.iter().map(|p| p.requests()).collect();
    assert_eq!(send.await, 200);
    let after: Vec<u64> = pools.iter().map(|p| p.requests()).collect();
    let moved: Vec<usize> = (0..pools.len())
        .filter(|i| after[*i] != before[*i])
        .collect();
    assert_eq!(moved.len(), 1, "{before:?} -> {after:?}");
    moved[0]
}

async fn split_gateway(v1: &EchoProcess, v2: &EchoProcess) -> Gateway {
    Policy::new()
        .auth("claims: {tenant: tid, user: sub, plan: plan}")
        .sections(&format!(
            r#"
upstreams: {{v1: {{targets: ["{}"]}}, v2: {{targets: ["{}"]}}}}
routes:
  - {{name: weighted, match: {{path_prefix: /w}}, upstreams: [{{name: v1, weight: 95}}, {{name: v2, weight: 5}}], auth: none, exempt: true}}
  - name: canary
    match: {{path_prefix: /c}}
    upstream: v1
    limits: []
    canary: {{upstream: v2, tenants: [acme], plans: [beta], percent: 30, header: X-Canary, cookie: canary}}
"#,
            v1.addr, v2.addr
        ))
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_weighted_split_holds_its_shares_over_ten_thousand_requests() {
    let (v1, v2) = (EchoProcess::start(), EchoProcess::start());
    let gw = split_gateway(&v1, &v2).await;
    let c = client();
    let url = gw.url("/w");
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (c, url) = (c.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..1250 {
                assert_eq!(c.get(&url).send().await.unwrap().status(), 200);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (a, b) = (v1.requests(), v2.requests());
    assert_eq!(a + b, 10_000);
    let share = b as f64 / 100.0;
    println!("v1 {a}, v2 {b}: {share:.2}% to the 5% side");
    assert!((2.0..=8.0).contains(&share), "{share}% (want 5 ± 3)");
}

#[tokio::test(flavor = "multi_thread")]
async fn canaries_pick_by_tenant_plan_share_header_and_cookie() {
    let (v1, v2) = (EchoProcess::start(), EchoProcess::start());
    let gw = split_gateway(&v1, &v2).await;
    let pools = [&v1, &v2];
    let c = client();
    let call = |tenant: &str, plan: &str, extra: Option<(&'static str, &'static str)>| {
        let token = hs256_token(
            TEST_SECRET,
            serde_json::json!({"tid": tenant, "sub": "u", "plan": plan}),
        );
        let mut req = c.get(gw.url("/c")).bearer_auth(token);
        if let Some((k, v)) = extra {
            req = req.header(k, v);
        }
        async move { req.send().await.unwrap().status().as_u16() }
    };
    // Listed tenant and plan: always the canary.
    for _ in 0..5 {
        assert_eq!(served_by(&pools, call("acme", "free", None)).await, 1);
        assert_eq!(served_by(&pools, call("initech", "beta", None)).await, 1);
    }
    // A share of tenants, each sticky: 100 requests of one tenant, one side.
    let mut sides = [0, 0];
    for t in 0..40 {
        let tenant = format!("tenant-{t}");
        let first = served_by(&pools, call(&tenant, "free", None)).await;
        sides[first] += 1;
        let rounds = if t == 0 { 99 } else { 4 };
        for _ in 0..rounds {
            assert_eq!(
                served_by(&pools, call(&tenant, "free", None)).await,
                first,
                "{tenant}"
            );
        }
    }
    println!("of 40 tenants, {} on the canary (30%)", sides[1]);
    assert!((6..=18).contains(&sides[1]), "{sides:?}");
    // The header and cookie decide over everything else.
    assert_eq!(
        served_by(&pools, call("acme", "beta", Some(("x-canary", "never")))).await,
        0
    );
    assert_eq!(
        served_by(
            &pools,
            call("tenant-x", "free", Some(("x-canary", "always")))
        )
        .await,
        1
    );
    assert_eq!(
        served_by(
            &pools,
            call("acme", "free", Some(("cookie", "a=1; canary=never")))
        )
        .await,
        0
    );
    assert_eq!(
        served_by(
            &pools,
            call("tenant-x", "free", Some(("cookie", "canary=always")))
        )
        .await,
        1
    );
}

/// A listener that accepts and at once closes every connection.
async fn resetter() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            drop(s);
        }
    });
    addr
}

/// Four upstreams, each with a failing target before `echo`: `dead` (no
/// listener; ejected after one failure), `reset` (closes every
/// connection), `busy` (503 to everything), `failing` (503s; ejected after
/// two). Routes /e, /f, /b retry; /n and /j do not.
fn failing_targets_config(
    echo: SocketAddr,
    dead: SocketAddr,
    reset: SocketAddr,
    busy: SocketAddr,
    failing: SocketAddr,
) -> Policy {
    Policy::new().sections(&format!(
        r#"
upstreams:
  ejecting: {{targets: ["{dead}", "{echo}"], passive_health: {{failures: 1, cooldown: 1h}}}}
  flaky: {{targets: ["{reset}", "{echo}"]}}
  busy: {{targets: ["{busy}", "{echo}"]}}
  ejects: {{targets: ["{failing}", "{echo}"], passive_health: {{failures: 2, cooldown: 1h}}}}
routes:
  - {{name: ejecting, match: {{path_prefix: /e}}, upstream: ejecting, auth: none, exempt: true, retries: {{attempts: 2}}}}
  - {{name: flaky, match: {{path_prefix: /f}}, upstream: flaky, auth: none, exempt: true, retries: {{attempts: 3, retry_on: [reset]}}}}
  - {{name: busy, match: {{path_prefix: /b}}, upstream: busy, auth: none, exempt: true, retries: {{attempts: 2, retry_on: [503]}}}}
  - {{name: busy_once, match: {{path_prefix: /n}}, upstream: busy, auth: none, exempt: true}}
  - {{name: ejects, match: {{path_prefix: /j}}, upstream: ejects, auth: none, exempt: true}}
"#
    ))
}

/// The status of a GET (or a POST with a body) of `path`, sent with `c`.
async fn get_or_post_status(c: &reqwest::Client, gw: &Gateway, path: &str, post: bool) -> u16 {
    let req = match post {
        true => c.post(gw.url(path)).body("x"),
        false => c.get(gw.url(path)),
    };
    req.send().await.unwrap().status().as_u16()
}

/// The dead target cost one retry and was ejected, unless the TCP health
/// check (its first runs at start) took it out before any request met it;
/// every GET that met the resetter was retried once (round robin counts
/// the retry's pick too, so most met it first); no POST was.
fn assert_dead_and_reset_targets_cost_one_retry(metrics: &str) {
    let retried = metric(
        metrics,
        "fairgate_upstream_retries_total{route=\"ejecting\"}",
    );
    let ejected = metric(
        metrics,
        "fairgate_upstream_ejections_total{upstream=\"ejecting\"}",
    );
    assert!(matches!(retried, None | Some(1.0)), "{retried:?}");
    assert_eq!(retried, ejected);
    let flaky = metric(metrics, "fairgate_upstream_retries_total{route=\"flaky\"}").unwrap();
    assert!((10.0..=20.0).contains(&flaky), "{flaky}");
}

#[tokio::test(flavor = "multi_thread")]
async fn retries_and_passive_health_route_around_failed_targets() {
    let echo = EchoProcess::start();
    let dead = free_addr(); // nothing listens
    let reset = resetter().await;
    let (busy, busy_count) = unavailable().await;
    let (failing, failing_count) = unavailable().await;
    let gw = failing_targets_config(echo.addr, dead, reset, busy, failing)
        .start()
        .await;
    let c = client();
    let status = |path: &'static str, post: bool| get_or_post_status(&c, &gw, path, post);
    // Every 200 below is one request the echo process answered, no more:
    // a retried attempt that failed never reached it twice.
    let answered = std::cell::Cell::new(0);
    let answered_since = || {
        let now = echo.requests();
        now - answered.replace(now)
    };
    // A connect failure is retried on the next target; the dead one is then out.
    for _ in 0..20 {
        assert_eq!(status("/e", false).await, 200);
    }
    assert_eq!(answered_since(), 20);
    // A reset before any answer is retried too.
    for _ in 0..20 {
        assert_eq!(status("/f", false).await, 200);
    }
    assert_eq!(answered_since(), 20);
    // So is a 503, before any byte of it reaches the client; without
    // retries, the target's 503 is the answer half the time.
    for _ in 0..10 {
        assert_eq!(status("/b", false).await, 200);
    }
    assert_eq!(answered_since(), 10);
    let before = busy_count.load(std::sync::atomic::Ordering::SeqCst);
    let once: Vec<u16> = futures_util::future::join_all((0..10).map(|_| status("/n", false))).await;
    assert_eq!(once.iter().filter(|s| **s == 503).count(), 5, "{once:?}");
    assert_eq!(answered_since(), 5);
    // Counted at the upstream: the 503 target answered each retried attempt
    // of /b and five of /n.
    let busy_retries = metric(
        &gw.metrics().await,
        "fairgate_upstream_retries_total{route=\"busy\"}",
    );
    assert_eq!(
        busy_count.load(std::sync::atomic::Ordering::SeqCst) - before,
        5
    );
    assert_eq!(Some(before as f64), busy_retries);
    // Two 503s in a row eject the target: it never sees a third request.
    let ejected: Vec<u16> = {
        let mut out = Vec::new();
        for _ in 0..20 {
            out.push(status("/j", false).await);
        }
        out
    };
    assert_eq!(
        ejected.iter().filter(|s| **s == 503).count(),
        2,
        "{ejected:?}"
    );
    assert_eq!(failing_count.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(answered_since(), 18);
    // A POST is never retried.
    let posts: Vec<u16> = futures_util::future::join_all((0..10).map(|_| status("/f", true))).await;
    assert!(posts.contains(&502), "{posts:?}");
    let posted = posts.iter().filter(|s| **s == 200).count() as u64;
    assert_eq!(answered_since(), posted);
    assert_dead_and_reset_targets_cost_one_retry(&gw.metrics().await);
}

/// `retry_on` is the key (YAML 1.1 tools turn a key `on:` into `true:`);
/// `on` still works as its old name, and `check` warns about it.
#[tokio::test(flavor = "multi_thread")]
async fn finding_16_retry_on_and_its_old_name_on_both_retry_a_503() {
    let echo = EchoProcess::start();
    let (busy, busy_count) = unavailable().await;
    // Written whole, not through `Policy`: `check`'s warning below names
    // its line and column in this text.
    let yaml = format!(
        r#"
server: {{listen: ["$LISTEN"]}}
admin: {{listen: "$ADMIN"}}
upstreams:
  busy: {{targets: ["{busy}", "{echo}"]}}
routes:
  - {{name: new, match: {{path_prefix: /new}}, upstream: busy, auth: none, exempt: true, retries: {{attempts: 2, retry_on: [503]}}}}
  - {{name: old, match: {{path_prefix: /old}}, upstream: busy, auth: none, exempt: true, retries: {{attempts: 2, on: [503]}}}}
acknowledge: [store.process_local]
"#,
        echo = echo.addr
    );
    let gw = Gateway::start(&yaml).await;
    // Round robin over the two targets: at least every other request meets
    // the 503 target first, and is retried on the echo, which answers all.
    for path in ["/new", "/old"] {
        let mut statuses = Vec::new();
        for _ in 0..10 {
            statuses.push(gw.status(path).await);
        }
        assert_eq!(statuses, [200; 10], "{path}");
    }
    assert_eq!(echo.requests(), 20);
    let metrics = gw.metrics().await;
    let retried = |route: &str| {
        metric(
            &metrics,
            &format!("fairgate_upstream_retries_total{{route=\"{route}\"}}"),
        )
        .unwrap_or(0.0)
    };
    let (new, old) = (retried("new"), retried("old"));
    assert!(new >= 5.0 && old >= 5.0, "{new} {old}");
    let met_503 = busy_count.load(std::sync::atomic::Ordering::SeqCst) as f64;
    assert_eq!(new + old, met_503);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fairgate"))
        .args(["check", "-c"])
        .arg(gw.config_path())
        .output()
        .unwrap();
    let shown = gw.config_path().display().to_string();
    let stdout = String::from_utf8_lossy(&out.stdout).replace(&shown, "fairgate.yaml");
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert_eq!(
        stdout.lines().take(2).collect::<Vec<_>>(),
        [
            "fairgate.yaml:8:110: routes.retries_on_deprecated: routes[1].retries.on: YAML 1.1 tools (Helm's toYaml, PyYAML, go-yaml v2) read the key on: as true:, which fairgate refuses; name it retry_on: (warning)",
            "ok",
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn targets_named_by_dns_are_followed_as_the_name_moves() {
    use std::net::Ipv4Addr;
    // Two echo upstreams on one port, at 127.0.0.2 and 127.0.0.3 (as two pods).
    let a = Arc::new(fairgate::echo::Stats::default());
    let b = Arc::new(fairgate::echo::Stats::default());
    let first = fairgate::echo::serve("127.0.0.2:0".parse().unwrap(), a.clone())
        .await
        .unwrap();
    let port = first.port();
    fairgate::echo::serve(format!("127.0.0.3:{port}").parse().unwrap(), b.clone())
        .await
        .unwrap();
    let (two, three) = (Ipv4Addr::new(127, 0, 0, 2), Ipv4Addr::new(127, 0, 0, 3));
    let dns = Dns::start(&[two]).await;
    let gw = Policy::new()
        .sections(&format!(
            r#"
upstreams:
  svc: {{targets: ["api.svc.test:{port}"], resolver: "{}", resolve_every: 1s}}
routes:
  - {{name: all, match: {{path_prefix: /}}, upstream: svc, auth: none, exempt: true}}
"#,
            dns.addr
        ))
        .start()
        .await;
    let count = |s: &fairgate::echo::Stats| s.requests.load(std::sync::atomic::Ordering::SeqCst);
    let c = client();
    for _ in 0..5 {
        assert_eq!(c.get(gw.url("/x")).send().await.unwrap().status(), 200);
    }
    assert_eq!((count(&a), count(&b)), (5, 0));

    // The name moves: new requests follow within the TTL and the interval.
    dns.set(&[three]);
    let moved = eventually(Duration::from_secs(5), || async {
        let before = count(&b);
        c.get(gw.url("/x"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
            && count(&b) > before
    })
    .await;
    assert!(moved, "{}", gw.logs());
    assert!(gw.logs().contains("upstream.resolved"));

    // A headless Service: both pods, balanced per request.
    dns.set(&[two, three]);
    let both = eventually(Duration::from_secs(5), || async {
        let (x, y) = (count(&a), count(&b));
        for _ in 0..4 {
            let _ = c.get(gw.url("/x")).send().await;
        }
        count(&a) > x && count(&b) > y
    })
    .await;
    assert!(both);
}

#[tokio::test(flavor = "multi_thread")]
async fn regex_paths_are_anchored_and_their_groups_are_captures() {
    let echo = Upstream::start().await;
    let gw = Policy::new()
        .acknowledge("limits.client_keyed")
        .sections(&format!(
            r#"
upstreams: {{api: {{targets: ["{}"]}}}}
limits:
  per_item: {{scope: {{path: id}}, default: {{capacity: 1, rate: 1/h}}}}
routes:
  - name: items
    match: {{path_regex: "/v(?<ver>[0-9]+)/items/(?<id>[a-z0-9-]+)"}}
    rewrite: {{path: "/api/{{ver}}/{{id}}"}}
    upstream: api
    auth: none
    limits: [per_item]
    client_ip_exempt: true
"#,
            echo.addr
        ))
        .start()
        .await;
    let a = send(&gw, LOCAL, "GET", "/v2/items/abc-1?x=1", &[]).await;
    assert_eq!(a.status, 200);
    let e = a.echoed();
    assert_eq!(
        (e["path"].as_str(), e["query"].as_str()),
        (Some("/api/2/abc-1"), Some("x=1"))
    );
    // The capture keys the limit: the same item again is refused, another is not.
    assert_eq!(
        send(&gw, LOCAL, "GET", "/v2/items/abc-1", &[]).await.status,
        429
    );
    assert_eq!(
        send(&gw, LOCAL, "GET", "/v3/items/other", &[]).await.status,
        200
    );
    // Anchored at both ends.
    for path in ["/x/v2/items/abc", "/v2/items/abc/more", "/v2/items/ABC"] {
        assert_eq!(
            send(&gw, LOCAL, "GET", path, &[]).await.status,
            404,
            "{path}"
        );
    }
    assert_eq!(echo.requests(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn pools_balance_by_least_requests_or_by_a_hash() {
    let (a, b) = (EchoProcess::start(), EchoProcess::start());
    let gw = Policy::new()
        .hs256()
        .sections(&format!(
            r#"
upstreams:
  least: {{targets: ["{a}", "{b}"], balance: least_requests}}
  by_user: {{targets: ["{a}", "{b}"], balance: {{hash_header: X-User}}}}
  by_tenant: {{targets: ["{a}", "{b}"], balance: hash_tenant}}
routes:
  - {{name: least, match: {{path_prefix: /l}}, upstream: least, auth: none, exempt: true}}
  - {{name: user, match: {{path_prefix: /u}}, upstream: by_user, auth: none, exempt: true}}
  - {{name: tenant, match: {{path_prefix: /t}}, upstream: by_tenant, limits: []}}
"#,
            a = a.addr,
            b = b.addr
        ))
        .start()
        .await;
    let pools = [&a, &b];
    let c = client();
    // One slow request holds a target; the quick ones all go to the other.
    let slow = tokio::spawn(c.get(gw.url("/l?sleep_ms=1500")).send());
    let held = eventually(Duration::from_secs(2), || async {
        a.requests() + b.requests() == 1
    })
    .await;
    assert!(held);
    let busy = if a.requests() == 1 { 0 } else { 1 };
    for _ in 0..10 {
        let got = served_by(&pools, async {
            c.get(gw.url("/l")).send().await.unwrap().status().as_u16()
        })
        .await;
        assert_eq!(got, 1 - busy);
    }
    assert_eq!(slow.await.unwrap().unwrap().status(), 200);

    // The same user (or tenant) always reaches the same target; both are used.
    let mut used = [0, 0];
    for user in 0..16 {
        let name = format!("user-{user}");
        let send = || async {
            c.get(gw.url("/u"))
                .header("x-user", &name)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        };
        let first = served_by(&pools, send()).await;
        used[first] += 1;
        for _ in 0..3 {
            assert_eq!(served_by(&pools, send()).await, first, "{name}");
        }
    }
    assert!(used[0] > 0 && used[1] > 0, "{used:?}");
    for tenant in ["acme", "globex", "initech"] {
        let token = token(tenant);
        let send = || async {
            c.get(gw.url("/t"))
                .bearer_auth(&token)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        };
        let first = served_by(&pools, send()).await;
        for _ in 0..3 {
            assert_eq!(served_by(&pools, send()).await, first, "{tenant}");
        }
    }
}

/// Serves HTML pages at `addr` (another origin than the gateway's): the
/// page at `/NAME` `fetch`es `{gateway}/NAME` with a bearer token (so the
/// browser sends a preflight) and writes the outcome into
/// `<body data-result=...>`.
async fn page_server(addr: std::net::SocketAddr, gateway: String, token: String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).await.unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]).into_owned();
            let path = head.split(' ').nth(1).unwrap_or("/").to_string();
            let html = format!(
                r#"<!doctype html><html><body data-result="pending"><script>
fetch("{gateway}{path}", {{method: "POST", headers: {{"Authorization": "Bearer {token}", "Content-Type": "application/json"}}, body: "{{}}"}})
  .then(r => r.text().then(t => document.body.setAttribute("data-result", "status:" + r.status + ":" + (r.headers.get("ratelimit") || "no-quota"))))
  .catch(e => document.body.setAttribute("data-result", "blocked"));
</script></body></html>"#
            );
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{html}",
                html.len()
            );
            let _ = s.write_all(answer.as_bytes()).await;
        }
    });
}

/// What the page at `url` wrote, as headless Chromium ran it.
fn browser_result(url: &str) -> String {
    let out = std::process::Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--virtual-time-budget=10000",
            "--dump-dom",
            url,
        ])
        .output()
        .expect("headless Chromium is needed: apt-get install chromium (scripts/deps does)");
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    dom.split("data-result=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no result in the page: {dom}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_real_browser_is_let_through_or_stopped_by_cors() {
    let echo = Upstream::start().await;
    let page = free_addr();
    let origin = format!("http://{page}");
    let gw = Policy::new()
        .hs256()
        .sections(&format!(
            r#"
upstreams: {{api: {{targets: ["{}"]}}}}
limits:
  calls: {{scope: tenant, default: {{capacity: 5, rate: 1/h}}}}
routes:
  - {{name: allowed, match: {{path_prefix: /allowed}}, upstream: api, limits: [calls], cors: {{origins: ["{origin}"], methods: [POST], headers: [authorization, content-type], expose: [ratelimit]}}}}
  - {{name: refused, match: {{path_prefix: /refused}}, upstream: api, limits: [calls], cors: {{origins: ["https://elsewhere.example"], methods: [POST], headers: [authorization, content-type]}}}}
"#,
            echo.addr
        ))
        .start()
        .await;
    page_server(page, gw.url(""), token("acme")).await;
    for (path, want) in [
        // The page read the exposed RateLimit header (quotes as the DOM writes them).
        ("/allowed", "status:200:&quot;calls&quot;;r=4;t=3600"),
        ("/refused", "blocked"),
    ] {
        let url = format!("{origin}{path}");
        let got = tokio::task::spawn_blocking(move || browser_result(&url))
            .await
            .unwrap();
        assert_eq!(got, want, "{path}");
    }
    // The refused page's POST never reached the upstream; the allowed one did, once.
    assert_eq!(echo.requests(), 1);
}
