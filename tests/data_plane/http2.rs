//! HTTP/2 on the plain listener (h2c with prior knowledge, opt-in) and its
//! defences: the advertised stream and header limits, and a client that
//! opens and cancels streams in a tight loop (rapid reset, CVE-2023-44487)
//! being cut off while other clients keep being served. Clients: `curl`
//! and the `h2` crate (a real HTTP/2 implementation, not the gateway's).

use crate::common;

use std::time::Duration;

use common::*;

#[tokio::test(flavor = "multi_thread")]
async fn h2c_prior_knowledge_is_opt_in_and_http1_still_works() {
    let echo = Upstream::start().await;
    let on = Policy::new()
        .server("http2: {h2c: true}")
        .catch_all(echo.addr)
        .start()
        .await;
    let url = on.url("/h2c");
    let (out, code) = curl(&["--http2-prior-knowledge", &url]);
    assert_eq!((code, out.lines().last().unwrap()), (0, "200 2"), "{out}");
    let (out, code) = curl(&["--http1.1", &url]);
    assert_eq!((code, out.lines().last().unwrap()), (0, "200 1.1"), "{out}");
    // A request shorter than the 24-byte preface is not kept waiting for more.
    let answer = raw_http(on.listen, "GET /short HTTP/1.0\r\n\r\n").await;
    assert_eq!(status_of(&answer), 200, "{answer}");

    let off = Policy::new()
        .server("http2: {h2c: false}")
        .catch_all(echo.addr)
        .start()
        .await;
    let (out, code) = curl(&["--http2-prior-knowledge", &off.url("/h2c")]);
    assert_ne!(code, 0, "h2c answered while off: {out}");
    assert_eq!(echo.requests(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn configured_limits_are_advertised_and_enforced() {
    let echo = Upstream::start().await;
    let gw = Policy::new()
        .server("http2: {h2c: true, max_concurrent_streams: 7, max_header_list_size: 4KiB}")
        .catch_all(echo.addr)
        .start()
        .await;
    let tcp = tokio::net::TcpStream::connect(gw.listen).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    // The server's SETTINGS arrive with the first exchange.
    let request = http::Request::get(gw.url("/one")).body(()).unwrap();
    let (response, _) = client.send_request(request, true).unwrap();
    assert_eq!(response.await.unwrap().status(), 200);
    assert_eq!(client.current_max_send_streams(), 7);

    // A header list over 4 KiB never reaches the upstream.
    let mut client = client.ready().await.unwrap();
    let request = http::Request::get(gw.url("/big"))
        .header("x-big", "a".repeat(6000))
        .body(())
        .unwrap();
    let (response, _) = client.send_request(request, true).unwrap();
    match response.await {
        Ok(r) => assert_eq!(r.status(), 431),
        Err(e) => assert!(e.is_reset() || e.is_go_away(), "{e}"),
    }
    assert_eq!(echo.requests(), 1);
}

/// How a rapid-reset client's connection ended.
#[derive(Debug, PartialEq)]
enum Ended {
    /// Still open when it stopped sending (closed cleanly by the client).
    Kept,
    /// The edge closed it (its RST_STREAM count).
    Cut,
    /// h2 sent GOAWAY ENHANCE_YOUR_CALM (streams reset before accepted).
    Calm,
}

/// Opens streams on one connection and cancels each at once, until the
/// connection fails or `max` resets were sent: how many were sent, and how
/// the connection ended.
async fn rapid_reset(addr: std::net::SocketAddr, url: &str, max: u32) -> (u32, Ended) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    let driver = tokio::spawn(connection);
    let mut sent = 0;
    while sent < max {
        let Ok(mut ready) = client.clone().ready().await else {
            break;
        };
        let request = http::Request::get(url).body(()).unwrap();
        let Ok((response, mut stream)) = ready.send_request(request, false) else {
            break;
        };
        stream.send_reset(h2::Reason::CANCEL);
        drop(response);
        sent += 1;
        tokio::task::yield_now().await;
    }
    drop(client);
    let end = tokio::time::timeout(Duration::from_secs(5), driver).await;
    let ended = match end {
        Ok(Ok(Err(e))) if e.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM) => Ended::Calm,
        Ok(Ok(Ok(()))) if sent == max => Ended::Kept,
        _ => Ended::Cut,
    };
    (sent, ended)
}

#[tokio::test(flavor = "multi_thread")]
async fn rapid_reset_clients_are_cut_off_and_others_are_served() {
    let echo = Upstream::start().await;
    let gw = Policy::new()
        .server("http2: {h2c: true, max_resets_per_second: 50}")
        .catch_all(echo.addr)
        .start()
        .await;
    let slow = gw.url("/slow?sleep_ms=2000");

    // A well-behaved client on its own connection, throughout.
    let tcp = tokio::net::TcpStream::connect(gw.listen).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let url = gw.url("/fine");
    let served = tokio::spawn(async move {
        let mut ok = 0;
        for _ in 0..40 {
            let mut c = client.clone().ready().await.unwrap();
            let (response, _) = c
                .send_request(http::Request::get(&url).body(()).unwrap(), true)
                .unwrap();
            if response.await.is_ok_and(|r| r.status() == 200) {
                ok += 1;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        ok
    });

    let (sent, ended) = rapid_reset(gw.listen, &slow, 10_000).await;
    assert_ne!(
        ended,
        Ended::Kept,
        "the attacking connection was not cut off"
    );
    println!(
        "{ended:?} after {sent} streams opened and reset; the upstream saw {} requests",
        echo.requests()
    );
    // Which layer closed it depends on whether the gateway had accepted the
    // streams yet; the edge's count says so when it was the edge.
    let metrics = gw.metrics().await;
    let series = "fairgate_edge_refusals_total{reason=\"h2_resets\"}";
    let want = if ended == Ended::Cut { 1.0 } else { 0.0 };
    assert_eq!(metric(&metrics, series), Some(want));
    assert_eq!(served.await.unwrap(), 40);
    // Streams reset at once never cost an upstream request beyond the bound.
    assert!(echo.requests() <= 40 + 51, "{}", echo.requests());

    // Resets below the bound, spread out, are a client's right.
    let (sent, ended) = rapid_reset(gw.listen, &slow, 30).await;
    assert_eq!((sent, ended), (30, Ended::Kept));
    let (out, code) = curl(&["--http2-prior-knowledge", &gw.url("/after")]);
    assert_eq!((code, out.lines().last().unwrap()), (0, "200 2"), "{out}");
    let metrics = gw.metrics().await;
    assert_eq!(metric(&metrics, series), Some(want));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_h2c_upgrade_cannot_open_a_tunnel_past_the_gateway() {
    let up = RawUpstream::start().await;
    let gw = Policy::new()
        .server("http2: {h2c: true}")
        .catch_all(up.addr)
        .start()
        .await;
    for upgrade in [
        "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n",
        "Connection: Upgrade\r\nUpgrade: websocket, H2C\r\n",
        "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n",
    ] {
        let request = format!("GET /x HTTP/1.1\r\nHost: a\r\n{upgrade}\r\n");
        let answer = raw_http(gw.listen, &request).await;
        assert_eq!(status_of(&answer), 400, "{upgrade}: {answer}");
    }
    assert!(up.received.lock().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn http2_requests_route_on_their_authority_and_keep_it_as_host() {
    let echo = Upstream::start().await;
    let gw = Policy::new()
        .server("http2: {h2c: true}")
        .hs256()
        .sections(&format!(
            r#"
upstreams: {{api: {{targets: ["{}"]}}}}
routes:
  - {{name: admin, match: {{host: admin.test, path_prefix: /}}, upstream: api, limits: []}}
  - {{name: public, match: {{path_prefix: /}}, upstream: api, auth: none, exempt: true}}
"#,
            echo.addr
        ))
        .start()
        .await;
    let port = gw.listen.port();
    let connect = format!("admin.test:{port}:127.0.0.1:{port}");
    let url = format!("http://admin.test:{port}/anything");
    // The host route (and its authentication) holds over HTTP/2 as over HTTP/1.1.
    for version in ["--http2-prior-knowledge", "--http1.1"] {
        let (out, code) = curl(&[version, "--connect-to", &connect, &url]);
        assert_eq!(code, 0, "{out}");
        assert!(
            out.ends_with("401 2") || out.ends_with("401 1.1"),
            "{version}: {out}"
        );
    }
    assert_eq!(echo.requests(), 0);

    // A path the gateway rewrites to its normal form keeps the authority as Host.
    let tcp = tokio::net::TcpStream::connect(gw.listen).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let request = http::Request::get(format!("http://other.test:{port}/%78//y"))
        .body(())
        .unwrap();
    let (response, _) = client.send_request(request, true).unwrap();
    let response = response.await.unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut bytes = Vec::new();
    while let Some(chunk) = body.data().await {
        bytes.extend_from_slice(&chunk.unwrap());
    }
    let echoed: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(echoed["path"], "/x/y");
    assert_eq!(
        echoed["headers"]["host"],
        serde_json::json!([format!("other.test:{port}")])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_http2_connection_that_sends_no_request_is_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let echo = Upstream::start().await;
    let gw = Policy::new()
        .server("header_timeout: 1s\nhttp2: {h2c: true}")
        .catch_all(echo.addr)
        .start()
        .await;
    // The preface alone, the preface and SETTINGS, and a head without END_HEADERS.
    let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    let settings = [0u8, 0, 0, 4, 0, 0, 0, 0, 0];
    let open_head = [0u8, 0, 1, 1, 0, 0, 0, 0, 1, 0x82];
    let cases = [
        preface.clone(),
        [preface.clone(), settings.to_vec()].concat(),
        [preface, settings.to_vec(), open_head.to_vec()].concat(),
    ];
    let mut tasks = Vec::new();
    for bytes in cases {
        let addr = gw.listen;
        tasks.push(tokio::spawn(async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(&bytes).await.unwrap();
            // Closed at header_timeout (1 s), long before keepalive_timeout (60 s).
            let mut sink = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut sink));
            assert!(read.await.is_ok(), "still open after 10 s");
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let metrics = gw.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "fairgate_edge_refusals_total{reason=\"header_timeout\"}"
        ),
        Some(3.0)
    );
    // Served as usual otherwise.
    let (out, code) = curl(&["--http2-prior-knowledge", &gw.url("/ok")]);
    assert_eq!((code, out.lines().last().unwrap()), (0, "200 2"), "{out}");
}
