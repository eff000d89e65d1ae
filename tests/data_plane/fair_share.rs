//! Fair share of a saturated pool (SPEC §12), through the real binary and
//! the echo upstream (which counts what reaches it): refusals as a client
//! reads them, clients hanging up while queued, permits coming back
//! however an exchange ends, and a reload under a full queue.

use crate::common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use futures_util::future::join_all;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The pool `api` (the echo upstream) with `fair_share`, a limited route
/// `/v1` and an exempt probe `/healthz` on the same pool; `more` adds
/// pools and routes (`(pools, routes)`, indented as entries).
fn policy(up: &Upstream, fair_share: &str, more: (&str, &str)) -> Policy {
    let (pools, routes) = more;
    Policy::new().hs256().sections(&format!(
        r#"
upstreams:
  api: {{targets: ["{}"], fair_share: {fair_share}}}
{pools}
default_limits: none
routes:
  - {{name: probe, match: {{path: /healthz}}, upstream: api, auth: none, exempt: true}}
  - {{name: api, match: {{path_prefix: /v1}}, upstream: api}}
{routes}
"#,
        up.addr
    ))
}

/// A request of `tenant` sent in the background; its status and headers.
fn send(gw: &Gateway, tenant: &str, query: &str) -> tokio::task::JoinHandle<(u16, String, String)> {
    let url = gw.url(&format!("/v1/x{query}"));
    let bearer = token(tenant);
    tokio::spawn(async move {
        let r = client().get(url).bearer_auth(bearer).send().await.unwrap();
        let status = r.status().as_u16();
        let retry = r
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        (status, retry, r.text().await.unwrap())
    })
}

async fn gauge(gw: &Gateway, name: &str, pool: &str) -> f64 {
    let text = gw.metrics().await;
    metric(
        &text,
        &format!("fairgate_fair_share_{name}{{upstream=\"{pool}\"}}"),
    )
    .unwrap_or(-1.0)
}

async fn until_gauge(gw: &Gateway, name: &str, pool: &str, want: f64) {
    let reached = eventually(Duration::from_secs(10), || async {
        gauge(gw, name, pool).await == want
    })
    .await;
    assert!(
        reached,
        "{name} of {pool}: {} not {want}",
        gauge(gw, name, pool).await
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_queue_is_429_at_once_a_long_wait_503_and_probes_never_wait() {
    let up = Upstream::start().await;
    let fair = "{max_in_flight: 2, queue: {per_tenant: 2, timeout: 700ms}}";
    let gw = policy(&up, fair, ("", "")).start().await;
    let holders = [
        send(&gw, "acme", "?sleep_ms=3000"),
        send(&gw, "acme", "?sleep_ms=3000"),
    ];
    until_gauge(&gw, "in_flight", "api", 2.0).await;
    let queued = [send(&gw, "acme", ""), send(&gw, "acme", "")];
    until_gauge(&gw, "queued", "api", 2.0).await;

    // The third waiting request of acme: refused at once, nothing upstream.
    let raw = format!(
        "GET /v1/x HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
        token("acme")
    );
    let answer = raw_http(gw.listen, &raw).await;
    assert_eq!(status_of(&answer), 429, "{answer}");
    let lower = answer.to_ascii_lowercase();
    assert!(lower.contains("\r\nretry-after: 1\r\n"), "{answer}");
    assert!(
        lower.contains("content-type: application/problem+json"),
        "{answer}"
    );
    assert!(answer.contains("queue-full\""), "{answer}");
    assert_eq!(up.requests(), 2);

    // A probe on the saturated pool goes at once.
    assert_eq!(gw.status("/healthz").await, 200);

    // Another tenant queues, and waits no longer than the timeout.
    let (status, retry, body) = send(&gw, "beta", "").await.unwrap();
    assert_eq!((status, retry.as_str()), (503, "1"), "{body}");
    assert!(body.contains("queue-timeout\""), "{body}");
    for q in queued {
        assert_eq!(q.await.unwrap().0, 503);
    }
    for h in holders {
        assert_eq!(h.await.unwrap().0, 200);
    }
    // The two holders and the probe: no refused request reached the upstream.
    assert_eq!(up.requests(), 3);
    until_gauge(&gw, "in_flight", "api", 0.0).await;
    assert_eq!(gauge(&gw, "queued", "api").await, 0.0);
    let m = gw.metrics().await;
    let refused =
        |why| format!("fairgate_fair_share_refused_total{{reason=\"{why}\",upstream=\"api\"}}");
    assert_eq!(metric(&m, &refused("queue_full")), Some(1.0));
    assert_eq!(metric(&m, &refused("queue_timeout")), Some(3.0));
    // The access lines of the refused name the pool that refused.
    let refused_lines: Vec<_> = gw
        .log_lines()
        .into_iter()
        .filter(|l| l["status"] == 429 || l["status"] == 503)
        .collect();
    assert_eq!(refused_lines.len(), 4, "{refused_lines:#?}");
    assert!(
        refused_lines.iter().all(|l| l["upstream"] == "api"),
        "{refused_lines:#?}"
    );
}

/// Finding 1 of the docs review: a split drew its pool again for the
/// attempt, so a request could reach the `fair_share` side without its
/// permit. Twenty requests through a split: the `fair_share` side never
/// holds more than its limit, and every request is answered.
#[tokio::test(flavor = "multi_thread")]
async fn a_split_never_reaches_its_fair_share_side_without_a_permit() {
    let (up, other) = (Upstream::start().await, Upstream::start().await);
    let fair = "{max_in_flight: 1, queue: {per_tenant: 64, timeout: 60s}}";
    let pools = format!("  other: {{targets: [\"{}\"]}}", other.addr);
    let routes =
        "  - {name: split, match: {path_prefix: /split}, upstreams: [{name: api}, {name: other}]}";
    let gw = policy(&up, fair, (&pools, routes)).start().await;
    let requests = (0..20).map(|_| {
        let url = gw.url("/split?sleep_ms=150");
        let bearer = token("acme");
        tokio::spawn(async move {
            let r = client().get(url).bearer_auth(bearer).send().await.unwrap();
            r.status().as_u16()
        })
    });
    for status in join_all(requests).await {
        assert_eq!(status.unwrap(), 200);
    }
    assert_eq!(up.requests() + other.requests(), 20);
    assert!(up.requests() > 0 && other.requests() > 0);
    assert_eq!(up.stats.max_in_flight.load(Ordering::SeqCst), 1);
}

/// Ten HTTP/1 clients close their connections and ten HTTP/2 streams are
/// reset (their connection kept) while queued: all twenty leave the queue
/// at once, none reaches the upstream, and the HTTP/2 connection still
/// serves.
#[tokio::test(flavor = "multi_thread")]
async fn twenty_clients_hanging_up_while_queued_leave_the_queue() {
    let up = Upstream::start().await;
    let fair = "{max_in_flight: 1, queue: {per_tenant: 64, timeout: 60s}}";
    let gw = policy(&up, fair, ("", ""))
        .server("http2: {h2c: true}")
        .start()
        .await;
    let holder = send(&gw, "acme", "?sleep_ms=4000");
    until_gauge(&gw, "in_flight", "api", 1.0).await;
    let bearer = format!("Bearer {}", token("acme"));
    let head = format!("GET /v1/x HTTP/1.1\r\nHost: t\r\nAuthorization: {bearer}\r\n\r\n");
    let mut clients = Vec::new();
    for _ in 0..10 {
        let mut s = tokio::net::TcpStream::connect(gw.listen).await.unwrap();
        s.write_all(head.as_bytes()).await.unwrap();
        clients.push(s);
    }
    let tcp = tokio::net::TcpStream::connect(gw.listen).await.unwrap();
    let (h2, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let request = || {
        http::Request::get(gw.url("/v1/x"))
            .header("authorization", bearer.as_str())
            .body(())
            .unwrap()
    };
    let mut streams = Vec::new();
    for _ in 0..10 {
        let mut ready = h2.clone().ready().await.unwrap();
        streams.push(ready.send_request(request(), true).unwrap());
    }
    until_gauge(&gw, "queued", "api", 20.0).await;
    drop(clients);
    for (response, mut stream) in streams {
        stream.send_reset(h2::Reason::CANCEL);
        drop(response);
    }
    // Gone long before the holder ends or any timeout.
    until_gauge(&gw, "queued", "api", 0.0).await;
    assert_eq!(gauge(&gw, "in_flight", "api").await, 1.0);
    assert_eq!(holder.await.unwrap().0, 200);
    until_gauge(&gw, "in_flight", "api", 0.0).await;
    assert_eq!(
        up.requests(),
        1,
        "a client that hung up reached the upstream"
    );
    let (response, _) = h2
        .ready()
        .await
        .unwrap()
        .send_request(request(), true)
        .unwrap();
    assert_eq!(response.await.unwrap().status(), 200);
}

/// A target that reads a request and closes the connection unanswered.
async fn closes_unanswered() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread")]
async fn permits_come_back_however_a_thousand_exchanges_end() {
    let up = Upstream::start().await;
    let (ws, reset) = (websocket_echo().await, closes_unanswered().await);
    let fair = "{max_in_flight: 4, queue: {per_tenant: 1000, timeout: 60s}}";
    let pools = format!(
        r#"  ws: {{targets: ["{ws}"], fair_share: {fair}}}
  reset: {{targets: ["{reset}"], fair_share: {fair}}}
  slow: {{targets: ["{}"], read_timeout: 100ms, fair_share: {fair}}}"#,
        up.addr
    );
    let routes = r#"  - {name: ws, match: {path: /ws}, upstream: ws}
  - {name: reset, match: {path: /reset}, upstream: reset}
  - {name: slow, match: {path: /slow}, upstream: slow}"#;
    let gw = policy(&up, fair, (&pools, routes)).start().await;
    let ended = |kind: usize, i: usize| exchange(&gw, kind, i);
    // 1,000 exchanges, 25 at a time: 400 answered, 200 reset upstream,
    // 200 abandoned by their client, 100 timed out, 100 WebSockets.
    let kinds: Vec<usize> = (0..1000)
        .map(|i| [0, 0, 1, 2, 3, 4, 0, 0, 1, 2][i % 10])
        .collect();
    let mut outcomes = [0u32; 5];
    for batch in kinds.chunks(25).enumerate() {
        let (b, batch) = batch;
        let done = join_all(batch.iter().enumerate().map(|(i, k)| ended(*k, b * 25 + i))).await;
        for (k, ok) in batch.iter().zip(done) {
            outcomes[*k] += u32::from(ok);
        }
    }
    assert_eq!(
        outcomes,
        [400, 200, 200, 100, 100],
        "exchanges that ended as meant"
    );
    for pool in ["api", "ws", "reset", "slow"] {
        until_gauge(&gw, "in_flight", pool, 0.0).await;
        assert_eq!(gauge(&gw, "queued", pool).await, 0.0, "{pool}");
    }
    assert_eq!(up.stats.in_flight.load(Ordering::SeqCst), 0);
}

/// One exchange of `kind` (0 answered, 1 reset upstream, 2 abandoned by
/// the client mid-way, 3 timed out, 4 a WebSocket opened, echoed, closed);
/// whether it ended as meant.
async fn exchange(gw: &Gateway, kind: usize, i: usize) -> bool {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::{client::IntoClientRequest, Message};
    let tenant = format!("t{}", i % 7);
    let get = |path: &str| {
        client()
            .get(gw.url(path))
            .bearer_auth(token(&tenant))
            .send()
    };
    match kind {
        0 => get("/v1/x").await.is_ok_and(|r| r.status() == 200),
        1 => get("/reset").await.is_ok_and(|r| r.status() == 502),
        2 => tokio::time::timeout(Duration::from_millis(30), get("/v1/x?sleep_ms=500"))
            .await
            .is_err(),
        3 => get("/slow?sleep_ms=1000")
            .await
            .is_ok_and(|r| r.status() == 504),
        _ => {
            let mut request = format!("ws://{}/ws", gw.listen)
                .into_client_request()
                .unwrap();
            let bearer = format!("Bearer {}", token(&tenant)).parse().unwrap();
            request.headers_mut().insert("authorization", bearer);
            let Ok((mut socket, _)) = tokio_tungstenite::connect_async(request).await else {
                return false;
            };
            let sent = socket.send(Message::text("hi")).await.is_ok();
            let echoed = matches!(socket.next().await, Some(Ok(m)) if m.is_text());
            sent && echoed && socket.close(None).await.is_ok()
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reload_keeps_the_queued_requests_and_applies_the_new_limit() {
    let up = Upstream::start().await;
    let fair = |n: u32| format!("{{max_in_flight: {n}, queue: {{per_tenant: 64, timeout: 60s}}}}");
    let gw = policy(&up, &fair(1), ("", "")).start().await;
    let requests: Vec<_> = (0..5)
        .map(|_| send(&gw, "acme", "?sleep_ms=1500"))
        .collect();
    until_gauge(&gw, "queued", "api", 4.0).await;
    // The one permitted is on its way: the upstream holds it once it arrives.
    let arrived = eventually(Duration::from_secs(10), || async {
        up.stats.in_flight.load(Ordering::SeqCst) == 1
    })
    .await;
    assert!(arrived, "{}", up.stats.in_flight.load(Ordering::SeqCst));
    gw.write_config(&policy(&up, &fair(4), ("", "")).yaml(), Write::RenameOver);
    until_gauge(&gw, "limit", "api", 4.0).await;
    // Three waiting requests go at once under the new limit; one still waits.
    until_gauge(&gw, "in_flight", "api", 4.0).await;
    assert_eq!(gauge(&gw, "queued", "api").await, 1.0);
    for r in requests {
        assert_eq!(r.await.unwrap().0, 200);
    }
    assert_eq!(up.requests(), 5);
    assert_eq!(up.stats.max_in_flight.load(Ordering::SeqCst), 4);
}
