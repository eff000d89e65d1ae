//! The findings of the third attack, tested as the attacker ran them: raw
//! sockets that stall a TLS handshake or a PROXY header, answers read byte
//! for byte and parsed by a real HTTP parser, raw heads with repeated
//! fields, and what the upstream really received. One test per finding,
//! named after it (the importer's are in `import.rs`, the Redis TLS ones
//! in `redis_tls.rs`).

use crate::common;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Open file descriptors of process `pid`.
fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// A connection from `source` that sends `bytes` and then nothing.
async fn stall(source: IpAddr, to: SocketAddr, bytes: &[u8]) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(source, 0)).unwrap();
    let mut stream = socket.connect(to).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    stream
}

/// How long after `since` the server closed `stream` (what it wrote is
/// returned too); `None` if still open after `within`.
async fn closed_after(
    mut stream: tokio::net::TcpStream,
    since: Instant,
    within: Duration,
) -> Option<(Duration, Vec<u8>)> {
    let mut out = Vec::new();
    match tokio::time::timeout(within, stream.read_to_end(&mut out)).await {
        Ok(_) => Some((since.elapsed(), out)),
        Err(_) => None,
    }
}

/// The first five bytes of a TLS record carrying a ClientHello, and a few
/// of the hello: half a handshake.
const HALF_CLIENT_HELLO: &[u8] = &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01];

fn curl_tls(pki: &Pki, tls: SocketAddr, source: &str) -> String {
    let resolve = format!("gw.test:{}:127.0.0.1", tls.port());
    let url = format!("https://gw.test:{}/served", tls.port());
    let ca = pki.ca().display().to_string();
    let args = [
        "--resolve",
        &resolve,
        "--cacert",
        &ca,
        "--interface",
        source,
        "-o",
        "/dev/null",
        &url,
    ];
    curl(&args).0
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_1_stalled_tls_handshakes_are_capped_per_address_and_cut_at_the_deadline() {
    let echo = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "a");
    let (cert, key) = pki.leaf("gw", "gw", &["gw.test"], "0B01");
    let tls = free_addr();
    let server = format!(
        "header_timeout: 2s\nmax_connections_per_ip: 50\ntls:\n  listen: \"{tls}\"\n  \
         certificates:\n    - {{cert_file: \"{}\", key_file: \"{}\"}}",
        cert.display(),
        key.display()
    );
    let gw = Policy::new()
        .server(&server)
        .catch_all(echo.addr)
        .start()
        .await;
    assert!(curl_tls(&pki, tls, "127.0.0.2").starts_with("\n200"));
    let idle = open_files(gw.pid());

    // 500 half handshakes from one address: 50 are held, 450 closed at once.
    let mut stalled = Vec::new();
    for _ in 0..500 {
        let stream = stall("127.0.0.1".parse().unwrap(), tls, HALF_CLIENT_HELLO).await;
        stalled.push((Instant::now(), stream));
    }
    let closes: Vec<_> = stalled
        .into_iter()
        .map(|(at, s)| tokio::spawn(closed_after(s, at, Duration::from_secs(10))))
        .collect();
    // A well-behaved client from another address is served meanwhile.
    for _ in 0..3 {
        assert!(curl_tls(&pki, tls, "127.0.0.2").starts_with("\n200"));
    }
    let mut held = 0;
    for close in closes {
        let (after, wrote) = close.await.unwrap().expect("closed within 10 s");
        assert!(wrote.is_empty(), "nothing is written before a handshake");
        assert!(
            after <= Duration::from_secs(3),
            "closed {after:?} after connect"
        );
        if after >= Duration::from_millis(1500) {
            held += 1;
        }
    }
    assert_eq!(held, 50, "held until the 2 s deadline");
    let m = gw.metrics().await;
    let refused = "fairgate_connections_refused_total{reason=\"per_ip\"}";
    assert_eq!(metric(&m, refused), Some(450.0));
    let timed_out = "fairgate_edge_refusals_total{reason=\"handshake_timeout\"}";
    assert_eq!(metric(&m, timed_out), Some(50.0));
    let back = eventually(Duration::from_secs(5), || async {
        open_files(gw.pid()) <= idle
    })
    .await;
    assert!(
        back,
        "{} files open, {idle} when idle",
        open_files(gw.pid())
    );
    assert!(curl_tls(&pki, tls, "127.0.0.1").starts_with("\n200"));
}

#[tokio::test]
async fn finding_1_a_stalled_proxy_header_is_cut_and_the_client_it_names_is_capped() {
    let echo = Upstream::start().await;
    let server = "header_timeout: 1s\nmax_connections_per_ip: 1\nproxy_protocol: true\n\
                  trusted_proxies: [\"127.0.0.1/32\"]";
    let gw = Policy::new()
        .server(server)
        .catch_all(echo.addr)
        .start()
        .await;
    let at = Instant::now();
    let half = stall(
        "127.0.0.1".parse().unwrap(),
        gw.listen,
        b"PROXY TCP4 203.0.1",
    )
    .await;
    let (after, _) = closed_after(half, at, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(after <= Duration::from_secs(2), "closed after {after:?}");
    let m = gw.metrics().await;
    let timed_out = "fairgate_edge_refusals_total{reason=\"handshake_timeout\"}";
    assert_eq!(metric(&m, timed_out), Some(1.0));

    // The proxy is trusted (not capped); the client it names is.
    let header = b"PROXY TCP4 203.0.113.7 127.0.0.1 5555 80\r\n";
    let _first = stall("127.0.0.1".parse().unwrap(), gw.listen, header).await;
    let counted = eventually(Duration::from_secs(5), || async {
        metric(&gw.metrics().await, "fairgate_connections_open") == Some(1.0)
    })
    .await;
    assert!(counted);
    let mut second = header.to_vec();
    second.extend(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let r = raw_http(gw.listen, &String::from_utf8(second).unwrap()).await;
    assert_eq!(status_of(&r), 503, "{r}");
    let other = "PROXY TCP4 203.0.113.8 127.0.0.1 5555 80\r\nGET / HTTP/1.1\r\nHost: x\r\n\
                 Connection: close\r\n\r\n";
    assert_eq!(status_of(&raw_http(gw.listen, other).await), 200);
}

/// Reads every byte until the server closes, parses one response with
/// httparse and checks that its `Content-Length` is exactly the bytes that
/// followed the head: its status and body.
async fn parsed_answer(mut stream: tokio::net::TcpStream) -> (u16, serde_json::Value) {
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out));
    read.await.expect("closed within 10 s").unwrap();
    let mut headers = [httparse::EMPTY_HEADER; 16];
    let mut resp = httparse::Response::new(&mut headers);
    let head = match resp.parse(&out) {
        Ok(httparse::Status::Complete(n)) => n,
        other => panic!("{other:?}: {}", String::from_utf8_lossy(&out)),
    };
    let length: usize = resp
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .map(|h| std::str::from_utf8(h.value).unwrap().parse().unwrap())
        .expect("a content-length");
    assert_eq!(
        length,
        out.len() - head,
        "{}",
        String::from_utf8_lossy(&out)
    );
    let body = serde_json::from_slice(&out[head..]).unwrap();
    (resp.code.unwrap(), body)
}

#[tokio::test]
async fn finding_4_the_edge_answers_say_their_true_length() {
    let echo = Upstream::start().await;
    let server = "header_timeout: 1s\nmax_header_size: 1024\nmax_header_field_size: 512\n\
                  max_connections_per_ip: 1";
    let gw = Policy::new()
        .server(server)
        .catch_all(echo.addr)
        .start()
        .await;
    let from = |ip: &str| ip.parse::<IpAddr>().unwrap();

    // 503: over the per-address cap.
    let held = stall(from("127.0.0.2"), gw.listen, b"").await;
    let counted = eventually(Duration::from_secs(5), || async {
        metric(&gw.metrics().await, "fairgate_connections_open") == Some(1.0)
    })
    .await;
    assert!(counted);
    let over = stall(from("127.0.0.2"), gw.listen, b"GET / HTTP/1.1\r\n").await;
    let (status, body) = parsed_answer(over).await;
    assert_eq!((status, body["status"].as_u64()), (503, Some(503)));
    drop(held);

    // 431: a head over max_header_size.
    let big = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(2000)
    );
    let (status, body) =
        parsed_answer(stall(from("127.0.0.3"), gw.listen, big.as_bytes()).await).await;
    assert_eq!((status, body["status"].as_u64()), (431, Some(431)));
    // Also when 60 KiB of it came at once: the edge reads the rest before
    // answering (a close with unread bytes is a reset, and the client would
    // drop the answer), and has no read buffer that would have taken it.
    let huge = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(60 << 10)
    );
    let (status, body) =
        parsed_answer(stall(from("127.0.0.5"), gw.listen, huge.as_bytes()).await).await;
    assert_eq!((status, body["status"].as_u64()), (431, Some(431)));

    // 408: a head that does not arrive in time.
    let slow = stall(
        from("127.0.0.4"),
        gw.listen,
        b"GET / HTTP/1.1\r\nHost: x\r\n",
    )
    .await;
    let (status, body) = parsed_answer(slow).await;
    assert_eq!((status, body["status"].as_u64()), (408, Some(408)));
}

/// A refused request whose body nobody reads (48 KiB sent at once) gets its
/// answer whole, not a reset. (On loopback the answer has left before the
/// close, so this holds without `Guarded`'s drain at shutdown too; on a
/// slower link, unread bytes at the close would reset an answer still
/// queued, which the drain prevents.)
#[tokio::test]
async fn a_refused_body_does_not_turn_the_answer_into_a_reset() {
    let echo = Upstream::start().await;
    let gw = Policy::new()
        .sections(&format!(
            "upstreams: {{api: {{targets: [\"{}\"]}}}}\nroutes:\n  - {{name: small, \
             match: {{path_prefix: /}}, upstream: api, auth: none, exempt: true, max_body: 1KiB}}",
            echo.addr
        ))
        .start()
        .await;
    let body = "a".repeat(48 << 10);
    let post = format!(
        "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let sent = stall("127.0.0.1".parse().unwrap(), gw.listen, post.as_bytes()).await;
    let (status, answer) = parsed_answer(sent).await;
    assert_eq!(status, 413);
    assert_eq!(answer["type"], "urn:fairgate:problem:body-too-large");
    assert_eq!(echo.requests(), 0);
}

#[tokio::test]
async fn finding_12_a_client_carried_as_ipv4_mapped_reaches_the_upstream_as_ipv4() {
    let up = RawUpstream::start().await;
    let gw = Policy::new()
        .server("proxy_protocol: true\ntrusted_proxies: [\"127.0.0.1/32\"]")
        .catch_all(up.addr)
        .start()
        .await;
    let request = "PROXY TCP6 ::ffff:203.0.113.7 ::1 5555 80\r\nGET / HTTP/1.1\r\nHost: x\r\n\
                   Connection: close\r\n\r\n";
    assert_eq!(status_of(&raw_http(gw.listen, request).await), 200);
    let got = up.received().pop().unwrap();
    assert_eq!(got.cgi_header("x-forwarded-for"), ["203.0.113.7"]);
    let logged = gw.log_lines().into_iter().find(|l| l["target"] == "access");
    let line = logged.expect("an access line").to_string();
    assert!(
        line.contains("\"203.0.113.7\"") && !line.contains("::ffff:"),
        "{line}"
    );
}

#[tokio::test]
async fn finding_9_a_repeated_header_or_parameter_matches_no_value() {
    let up = RawUpstream::start().await;
    let gw = Policy::new()
        .sections(&format!(
            r#"
upstreams: {{api: {{targets: ["{}"]}}}}
routes:
  - {{name: v2, match: {{path: /h, headers: {{x-version: "2"}}}}, upstream: api, auth: none, exempt: true}}
  - {{name: beta, match: {{path: /q, query: {{beta: {{regex: "1"}}}}}}, upstream: api, auth: none, exempt: true}}
  - {{name: canary, match: {{path: /p, headers: {{x-canary: true}}}}, upstream: api, auth: none, exempt: true}}
"#,
            up.addr
        ))
        .start()
        .await;
    let status = |target: &str, headers: &str| {
        let request =
            format!("GET {target} HTTP/1.1\r\nHost: x\r\n{headers}Connection: close\r\n\r\n");
        let addr = gw.listen;
        async move { status_of(&raw_http(addr, &request).await) }
    };
    assert_eq!(status("/h", "X-Version: 2\r\n").await, 200);
    assert_eq!(status("/h", "X-Version: 1\r\nX-Version: 2\r\n").await, 404);
    assert_eq!(status("/h", "X-Version: 2\r\nX-Version: 2\r\n").await, 404);
    assert_eq!(status("/q?beta=1", "").await, 200);
    assert_eq!(status("/q?beta=0&beta=1", "").await, 404);
    assert_eq!(status("/q?beta=1&b%65ta=1", "").await, 404);
    // Presence asks for no value: any number of lines is present.
    assert_eq!(status("/p", "X-Canary: a\r\nX-Canary: b\r\n").await, 200);
    assert_eq!(
        up.count(),
        3,
        "only the unambiguous requests were forwarded"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_10_an_idle_websocket_outlives_the_body_timeout_and_keeps_its_slot() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::{client::IntoClientRequest, Message};
    let (redis, ws) = (Redis::start().await, websocket_echo().await);
    let gw = Policy::new()
        .server("body_idle_timeout: 1s\nupgrade_idle_timeout: 4s")
        .store(&format!(r#"{{kind: redis, url: "{}"}}"#, redis.url()))
        .hs256()
        .sections(&format!(
            r#"
upstreams: {{ws: {{targets: ["{ws}"], read_timeout: 1s}}}}
default_limits: none
concurrency:
  live: {{scope: tenant, slots: 1, lease: 1s}}
routes:
  - {{name: live, match: {{path: /live}}, upstream: ws, concurrency: live}}
"#
        ))
        .start()
        .await;
    let slots = || {
        let keys = scan_keys(redis.port);
        let key = keys.iter().find(|k| k.contains(":slots:live"));
        key.map_or(0, |k| {
            redis.cli(&["ZCARD", k]).trim().parse::<u64>().unwrap()
        })
    };
    let mut request = format!("ws://{}/live", gw.listen)
        .into_client_request()
        .unwrap();
    let bearer = format!("Bearer {}", token("acme")).parse().unwrap();
    request.headers_mut().insert("authorization", bearer);
    let (mut socket, resp) = tokio_tungstenite::connect_async(request).await.unwrap();
    assert_eq!(resp.status(), 101);
    socket.send(Message::text("open")).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), socket.next()).await;
    assert!(
        matches!(first, Ok(Some(Ok(_)))),
        "the new WebSocket's first echo: {first:?}"
    );
    // Quiet past the body timeout, the pool's read timeout and two leases:
    // still open, still holding (renewing) its one slot.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(slots(), 1);
    socket.send(Message::text("still here")).await.unwrap();
    let echoed = socket.next().await.unwrap().unwrap();
    assert_eq!(echoed.into_text().unwrap().as_str(), "still here");
    // Quiet past upgrade_idle_timeout: closed by the gateway, slot freed.
    let quiet = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(10), socket.next()).await;
    assert!(ended.is_ok(), "still open 10 s later");
    let after = quiet.elapsed();
    assert!(
        after >= Duration::from_millis(3500),
        "closed after {after:?}"
    );
    assert!(eventually(Duration::from_secs(5), || async { slots() == 0 }).await);
}
