//! What a stranger can make the edge hold, attacked with raw bytes as in
//! `hardening.rs`: memory for hostile heads, time and connections for slow
//! heads and floods, a slot for a trickling upload, a connection share for
//! an idle kept-alive connection.

use crate::common;

use std::net::IpAddr;
use std::time::Duration;

use common::edge_attack::*;
use common::*;
// Request bytes, over common's `get` of a client.
use common::edge_attack::get;

#[tokio::test]
async fn finding_3_hostile_heads_cannot_grow_memory() {
    let up = RawUpstream::start().await;
    let gw = gateway(&up, "", STRICT, ADMIN_ROUTES).await;
    let host = host_of(&gw);
    assert_eq!(status_of(&send(&gw, &get("/ok", &host, "")).await), 200);
    let idle_kib = proc_status_kib(gw.pid(), "VmRSS:");

    // 300 connections (100 from each of three addresses, under the per-address
    // cap), each trickling a 1 MiB head in 4 KiB pieces.
    let mut tasks = Vec::new();
    for i in 0..300u32 {
        let addr = gw.listen;
        let source: IpAddr = format!("127.0.0.{}", 1 + i % 3).parse().unwrap();
        tasks.push(tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(std::net::SocketAddr::new(source, 0)).unwrap();
            let stream = socket.connect(addr).await.unwrap();
            let (mut rd, mut wr) = stream.into_split();
            // Read while writing, so the answer is taken before a reset.
            let reader = tokio::spawn(async move {
                let mut out = Vec::new();
                let _ =
                    tokio::time::timeout(Duration::from_secs(20), rd.read_to_end(&mut out)).await;
                String::from_utf8_lossy(&out).into_owned()
            });
            let _ = wr.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").await;
            let line = format!("X-Pad: {}\r\n", "a".repeat(4086));
            for _ in 0..256 {
                if wr.write_all(line.as_bytes()).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            drop(wr);
            reader.await.unwrap()
        }));
    }
    let mut statuses = std::collections::BTreeMap::new();
    for t in tasks {
        *statuses.entry(status_of(&t.await.unwrap())).or_insert(0) += 1;
    }
    let peak_kib = gw.peak_rss_kib();
    eprintln!("idle {idle_kib} KiB, peak {peak_kib} KiB, answers {statuses:?}");
    // Each got its 431, or a reset if its next piece crossed the close.
    assert!(statuses.get(&431).is_some_and(|n| *n >= 1), "{statuses:?}");
    assert!(
        statuses.keys().all(|s| [0, 431].contains(s)),
        "{statuses:?}"
    );
    assert!(
        peak_kib < idle_kib + 64 * 1024,
        "peak RSS {peak_kib} KiB, idle {idle_kib} KiB"
    );
    assert_eq!(up.count(), 1, "no oversized head reached the upstream");
    assert_eq!(status_of(&send(&gw, &get("/ok", &host, "")).await), 200);
    let m = gw.metrics().await;
    assert_eq!(
        metric(&m, "fairgate_edge_refusals_total{reason=\"header_size\"}"),
        Some(300.0)
    );
}

#[tokio::test]
async fn finding_3_slow_heads_and_connection_floods_are_bounded() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let up = RawUpstream::start().await;
    let gw = gateway(&up, "header_timeout: 1s", STRICT, ADMIN_ROUTES).await;

    // A head trickled one byte at a time is cut at the deadline with a 408.
    let slow = tokio::net::TcpStream::connect(gw.listen).await.unwrap();
    let (mut rd, mut wr) = slow.into_split();
    let reader = tokio::spawn(async move {
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), rd.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).into_owned()
    });
    wr.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .await
        .unwrap();
    for _ in 0..50 {
        if wr.write_all(b"a").await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let answer = reader.await.unwrap();
    assert_eq!(status_of(&answer), 408, "{answer}");
    let m = gw.metrics().await;
    assert_eq!(
        metric(
            &m,
            "fairgate_edge_refusals_total{reason=\"header_timeout\"}"
        ),
        Some(1.0)
    );
    drop(gw);

    let gw = gateway(&up, "max_connections_per_ip: 2", STRICT, ADMIN_ROUTES).await;
    // Two idle connections from one address hold its share; a third is
    // refused at once; another address is served.
    let a = tokio::net::TcpStream::connect(gw.listen).await.unwrap();
    let b = tokio::net::TcpStream::connect(gw.listen).await.unwrap();
    let ok = eventually(Duration::from_secs(5), || async {
        metric(&gw.metrics().await, "fairgate_connections_open").unwrap_or(0.0) >= 2.0
    })
    .await;
    assert!(ok, "the two idle connections are open");
    let r = send(&gw, &get("/", &host_of(&gw), "")).await;
    assert_eq!(status_of(&r), 503, "{r}");
    let other = raw_http_from("127.0.0.2".parse().unwrap(), gw.listen, &get("/", "x", "")).await;
    assert_eq!(status_of(&other), 200, "{other}");
    let m = gw.metrics().await;
    assert_eq!(
        metric(&m, "fairgate_connections_refused_total{reason=\"per_ip\"}"),
        Some(1.0)
    );
    drop((a, b));
    // Closed connections give their share back.
    let ok = eventually(Duration::from_secs(5), || async {
        status_of(&send(&gw, &get("/", "x", "")).await) == 200
    })
    .await;
    assert!(ok);
}

#[tokio::test]
async fn finding_9_a_trickling_upload_loses_its_slot() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let up = RawUpstream::start().await;
    let extra = "concurrency:\n  uploads: {scope: tenant, slots: 1, lease: 30s}";
    let routes = "  - {name: up, match: {path_prefix: /up}, upstream: app, concurrency: uploads, limits: []}";
    let gw = gateway(&up, "body_idle_timeout: 1s", extra, routes).await;
    let auth = format!("Authorization: Bearer {}\r\n", user_token("acme"));
    let mut stream = tokio::net::TcpStream::connect(gw.listen).await.unwrap();
    let head = format!("POST /up HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 100\r\n\r\na");
    stream.write_all(head.as_bytes()).await.unwrap();
    // While it stalls, the slot is taken.
    let ok = eventually(Duration::from_secs(5), || async {
        metric(
            &gw.metrics().await,
            "fairgate_slots_held{policy=\"uploads\"}",
        ) == Some(1.0)
    })
    .await;
    assert!(ok);
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out)).await;
    let answer = String::from_utf8_lossy(&out);
    assert_eq!(status_of(&answer), 408, "{answer}");
    assert_eq!(
        metric(
            &gw.metrics().await,
            "fairgate_edge_refusals_total{reason=\"body_idle\"}"
        ),
        Some(1.0)
    );
    let ok = eventually(Duration::from_secs(5), || async {
        metric(
            &gw.metrics().await,
            "fairgate_slots_held{policy=\"uploads\"}",
        ) == Some(0.0)
    })
    .await;
    assert!(ok, "the stalled upload's slot is free");
    let post = format!(
        "POST /up HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 1\r\nConnection: close\r\n\r\na"
    );
    assert_eq!(status_of(&send(&gw, post.as_bytes()).await), 200);
}

/// Reads one response (head and a Content-Length body) from a kept-alive
/// connection; returns its status.
async fn read_response(stream: &mut tokio::net::TcpStream) -> u16 {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await.unwrap() == 0 {
            return 0;
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    let mut body = vec![0; length];
    stream.read_exact(&mut body).await.unwrap();
    status_of(&head)
}

#[tokio::test]
async fn review_an_idle_kept_alive_connection_is_closed_and_gives_its_share_back() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let up = RawUpstream::start().await;
    let server = "keepalive_timeout: 1s\nmax_connections_per_ip: 2";
    let gw = gateway(&up, server, STRICT, ADMIN_ROUTES).await;
    let mut held = Vec::new();
    for target in ["/x", "/admin/x"] {
        let mut c = tokio::net::TcpStream::connect(gw.listen).await.unwrap();
        let req = format!("GET {target} HTTP/1.1\r\nHost: a\r\n\r\n");
        c.write_all(req.as_bytes()).await.unwrap();
        assert!([200, 401].contains(&read_response(&mut c).await));
        held.push(c);
    }
    // Both sit idle after their answer (one a refusal); each is closed
    // quietly at the keep-alive timeout, and the address may connect again.
    for c in &mut held {
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut rest)).await;
        assert!(closed.is_ok(), "still open after 5 s");
        assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    }
    let ok = eventually(Duration::from_secs(5), || async {
        status_of(&send(&gw, &get("/x", "a", "")).await) == 200
    })
    .await;
    assert!(ok);
}

/// An idle kept-alive connection waits for its next request outside
/// Pingora's request state; a stopping server still closes it at once (not
/// at its keep-alive timeout, nor when a request still in flight is done).
#[tokio::test(flavor = "multi_thread")]
async fn an_idle_kept_alive_connection_is_closed_when_the_server_stops() {
    use std::sync::atomic::Ordering::SeqCst;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let up = Upstream::start().await;
    let mut gw = Policy::new()
        .server("keepalive_timeout: 60s\nshutdown_grace: 30s")
        .catch_all(up.addr)
        .start()
        .await;
    let mut idle = tokio::net::TcpStream::connect(gw.listen).await.unwrap();
    for _ in 0..3 {
        idle.write_all(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(read_response(&mut idle).await, 200);
    }
    // A request in flight for 5 s keeps the server from leaving at once.
    let url = format!("http://{}/slow?sleep_ms=5000", gw.listen);
    let slow = tokio::spawn(async move { reqwest::get(url).await.map(|r| r.status()) });
    let started = eventually(Duration::from_secs(5), || async {
        up.stats.in_flight.load(SeqCst) == 1
    })
    .await;
    assert!(started);
    gw.signal(libc::SIGTERM);
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(3), idle.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "still open 3 s after SIGTERM");
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    assert_eq!(up.stats.in_flight.load(SeqCst), 1, "closed by the exit");
    assert_eq!(slow.await.unwrap().unwrap(), 200);
    let status = gw.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{}", gw.logs());
    assert_eq!(up.requests(), 4);
}

/// What an idle kept-alive connection costs: its socket's state and the
/// edge's guard, not a read buffer or Pingora's per-request state (about
/// 80 KiB each in a release build before, 16 now; `bench/edge.py` measures
/// it beside nginx). 500 connections, each after one request.
#[tokio::test(flavor = "multi_thread")]
async fn an_idle_kept_alive_connection_holds_no_buffers() {
    use tokio::io::AsyncWriteExt;
    let up = Upstream::start().await;
    let gw = Policy::new()
        .server("keepalive_timeout: 60s\nmax_connections_per_ip: 1000")
        .catch_all(up.addr)
        .start()
        .await;
    let open = |n: usize| {
        let listen = gw.listen;
        async move {
            let mut held = Vec::new();
            for _ in 0..n {
                let mut c = tokio::net::TcpStream::connect(listen).await.unwrap();
                c.write_all(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
                    .await
                    .unwrap();
                assert_eq!(read_response(&mut c).await, 200);
                held.push(c);
            }
            held
        }
    };
    // The first connections warm the allocator and the pools.
    let _warm = open(50).await;
    let before = proc_status_kib(gw.pid(), "VmRSS:");
    let held = open(500).await;
    let each = (proc_status_kib(gw.pid(), "VmRSS:") - before) as f64 / held.len() as f64;
    println!("RSS per idle kept-alive connection: {each:.1} KiB");
    assert!(each < 32.0, "{each:.1} KiB per idle connection");
}
