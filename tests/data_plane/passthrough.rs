//! Connections passed as bytes. TLS passthrough (`server.tls.passthrough`,
//! what ingress-nginx's `ssl-passthrough` asks): a ClientHello naming a
//! passthrough host reaches the backend unterminated (the real `openssl
//! s_client` sees the backend's own certificate, `curl` talks to `openssl
//! s_server` through the gateway), other names get the gateway's handshake
//! on the same listener, and a dead target costs only its own connections.
//! TCP services (`server.tcp_services`): raw bytes to a TCP echo.

use crate::common;

use common::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_passthrough_host_gets_the_backends_own_tls_and_others_the_gateways() {
    let echo = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let edge = Pki::new(dir.path(), "edge");
    let backend = Pki::new(dir.path(), "backend");
    let (site, site_key) = edge.leaf("site", "site", &["site.test"], "0D01");
    let (argo, argo_key) = backend.leaf("argo", "argo", &["argocd.test"], "0D02");
    let server = SServer::start(&argo, &argo_key).await;
    let tls = free_addr();
    let config = format!(
        r#"tls:
  listen: "{tls}"
  certificates: [{{cert_file: "{}", key_file: "{}"}}]
  passthrough:
    - {{hosts: [argocd.test], upstream: argo}}
    - {{hosts: ["*.dead.test"], upstream: dead}}
"#,
        site.display(),
        site_key.display()
    );
    let sections = format!(
        r#"upstreams:
  api: {{targets: ["{}"]}}
  argo: {{targets: ["127.0.0.1:{}"]}}
  dead: {{targets: ["127.0.0.1:9"]}}
routes:
  - {{name: all, match: {{path_prefix: /}}, upstream: api, auth: none, exempt: true}}
"#,
        echo.addr,
        server.addr.port()
    );
    let _gw = Policy::new()
        .server(&config)
        .sections(&sections)
        .start()
        .await;

    // The backend's certificate, not the gateway's: TLS is not ended here.
    assert_eq!(served_serial(tls, Some("argocd.test")), "0D02");
    assert_eq!(served_serial(tls, Some("ARGOCD.test")), "0D02");
    assert_eq!(served_serial(tls, Some("site.test")), "0D01");
    assert_eq!(served_serial(tls, None), "0D01");

    // HTTP inside the backend's TLS: s_server's own status page.
    let port = tls.port();
    let (out, code) = curl(&[
        "--cacert",
        &backend.ca().display().to_string(),
        "--resolve",
        &format!("argocd.test:{port}:127.0.0.1"),
        &format!("https://argocd.test:{port}/"),
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("s_server -www"), "{out}");
    assert!(out.ends_with("\n200 1"), "HTTP/1.0 from s_server: {out}");

    // A request for the passthrough host on a connection the gateway
    // ended (SNI site.test): 421, never its HTTP routes.
    let (out, code) = curl(&[
        "--cacert",
        &edge.ca().display().to_string(),
        "--resolve",
        &format!("site.test:{port}:127.0.0.1"),
        "-H",
        "Host: argocd.test",
        &format!("https://site.test:{port}/"),
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.ends_with("421 2"), "{out}");

    a_dead_target_costs_only_its_own(port, &edge.ca());
}

/// A dead passthrough target: the client's handshake fails; the gateway's
/// own hosts are served.
fn a_dead_target_costs_only_its_own(port: u16, edge_ca: &std::path::Path) {
    let (out, code) = curl(&[
        "-k",
        "--resolve",
        &format!("x.dead.test:{port}:127.0.0.1"),
        &format!("https://x.dead.test:{port}/"),
    ]);
    assert_ne!(code, 0, "{out}");
    let (out, code) = curl(&[
        "--cacert",
        &edge_ca.display().to_string(),
        "--resolve",
        &format!("site.test:{port}:127.0.0.1"),
        &format!("https://site.test:{port}/"),
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.ends_with("200 2"), "{out}");
}

/// A TCP echo server on a free loopback port: every connection gets its
/// bytes back until it closes; ended with the test's runtime.
async fn tcp_echo() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// A connection to `addr` that echoed one byte within a second.
async fn echoing(addr: std::net::SocketAddr) -> Option<tokio::net::TcpStream> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(b"x").await.ok()?;
    let mut one = [0u8; 1];
    let read = tokio::time::timeout(std::time::Duration::from_secs(1), s.read_exact(&mut one));
    read.await.ok()?.ok()?;
    Some(s)
}

/// `server.tcp_services` (ingress-nginx's `tcp-services`): a database or
/// MQTT port on its own listener, bytes both ways, half-closes passed on,
/// within the connection caps (a refused connection gets no HTTP answer:
/// it is not HTTP), closed when idle.
#[tokio::test(flavor = "multi_thread")]
async fn a_tcp_service_passes_bytes_both_ways_within_the_caps() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let echo = tcp_echo().await;
    let (tcp, idle) = (free_addr(), free_addr());
    let server = format!(
        "max_connections_per_ip: 2\ntcp_services:\n  - {{listen: \"{tcp}\", upstream: db}}\n  \
         - {{listen: \"{idle}\", upstream: db, idle_timeout: 1s}}"
    );
    let sections = format!(
        "upstreams:\n  db: {{targets: [\"{echo}\"]}}\nroutes:\n  - {{name: all, match: {{path_prefix: /}}, upstream: db, auth: none}}\n"
    );
    let _gw = Policy::new()
        .server(&server)
        .sections(&sections)
        .start()
        .await;

    // Bytes that are not HTTP, both ways, then a half-close passed on.
    let mut a = tokio::net::TcpStream::connect(tcp).await.unwrap();
    let payload: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    a.write_all(b"\x00\x01PING\r\n\xff").await.unwrap();
    let mut back = [0u8; 9];
    a.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"\x00\x01PING\r\n\xff");
    let (mut r, mut w) = a.split();
    let writing = async {
        w.write_all(&payload).await.unwrap();
        w.shutdown().await.unwrap();
    };
    let mut got = Vec::new();
    let reading = r.read_to_end(&mut got);
    let ((), read) = tokio::join!(writing, reading);
    read.unwrap();
    assert_eq!(got.len(), payload.len());
    assert!(got == payload, "the bytes came back changed");

    drop(a);

    // Two connections from one address are held (once the first is
    // counted out); a third is closed unanswered.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = None;
        for _ in 0..100 {
            s = echoing(tcp).await;
            if s.is_some() {
                break;
            }
        }
        held.push(s.expect("a connection within the cap is served"));
    }
    let mut third = tokio::net::TcpStream::connect(tcp).await.unwrap();
    let mut rest = Vec::new();
    let n = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        third.read_to_end(&mut rest),
    )
    .await
    .expect("the third connection is closed")
    .unwrap_or(0);
    assert_eq!(
        n,
        0,
        "no HTTP answer on a TCP service: {:?}",
        String::from_utf8_lossy(&rest)
    );
    drop(held);

    // Silent for its idle_timeout (1 s): closed by the gateway.
    let mut quiet = tokio::net::TcpStream::connect(idle).await.unwrap();
    let mut none = Vec::new();
    let closed = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        quiet.read_to_end(&mut none),
    )
    .await;
    assert!(closed.is_ok(), "an idle TCP service connection stays open");
}
