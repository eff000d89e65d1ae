//! The routing an ingress needs, against the real echo upstream, with
//! requests written as raw bytes from chosen loopback sources: header,
//! query and regex path matches, redirects (`redirect`, `https_redirect`,
//! `app_root`), rewrites of path and host, header edits both ways, address
//! rules, per-route timeouts and CORS as a browser sends it. Which upstream
//! a route reaches is `routing_upstreams.rs`.

use crate::common;

use std::collections::BTreeMap;
use std::net::IpAddr;

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
        let got = tokio::task::spawn_blocking(move || common::browser::page_result(&url, &[]))
            .await
            .unwrap();
        assert_eq!(got, want, "{path}");
    }
    // The refused page's POST never reached the upstream; the allowed one did, once.
    assert_eq!(echo.requests(), 1);
}
