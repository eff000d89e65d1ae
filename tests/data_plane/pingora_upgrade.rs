//! New WebSockets hold against a fast upstream: cloudflare/pingora#946,
//! fixed by the one patched Pingora crate (vendor/README.md).
//!
//! A `GET` upgrade has an empty body, and Pingora's downstream half queues
//! its end as a task for the upstream half at once. When the upstream half
//! read the upstream's `101` before it took that task, Pingora 0.9.1 took
//! the end of the request's own body for the end of the upgraded tunnel
//! and ended both directions: the client got the `101`, then EOF (15 to 45
//! of 100 with this upstream, which answers `101` the moment it accepts).
//! With the patch the tunnel stays; this suite fails without it.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// WebSockets opened through the gateway, and how many at once.
const SOCKETS: usize = 1_000;
const AT_ONCE: usize = 50;

/// RFC 6455's sample key and the accept value it gives, so the eager
/// upstream can answer before it has read the key.
const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
const ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

/// An upstream that answers `101` the moment it accepts, before the
/// request's head arrives, then reads that head, sends its own first
/// frame (`hello`) and echoes every frame the client sends.
async fn eager_websocket_upstream() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let answer = format!(
                    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                     Connection: Upgrade\r\nSec-WebSocket-Accept: {ACCEPT}\r\n\r\n"
                );
                stream.write_all(answer.as_bytes()).await?;
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if stream.read(&mut byte).await? == 0 {
                        return Ok::<_, std::io::Error>(());
                    }
                    head.push(byte[0]);
                }
                let mut ws = WebSocketStream::from_raw_socket(stream, Role::Server, None).await;
                if ws.send(Message::text("hello")).await.is_err() {
                    return Ok(());
                }
                while let Some(Ok(m)) = ws.next().await {
                    if (m.is_text() || m.is_binary()) && ws.send(m).await.is_err() {
                        break;
                    }
                }
                Ok(())
            });
        }
    });
    addr
}

/// One WebSocket through the gateway, by a real client: its `101`, the
/// upstream's first frame, and its own first frame echoed. What went
/// wrong, if anything.
async fn first_frames_both_ways(gw: &Gateway, n: usize) -> Result<(), String> {
    let tcp = tokio::net::TcpStream::connect(gw.listen)
        .await
        .map_err(|e| e.to_string())?;
    let request = http::Request::builder()
        .uri("ws://ws.example/ws")
        .header("Host", "ws.example")
        .header("Connection", "Upgrade")
        .header("Upgrade", "websocket")
        .header("Sec-WebSocket-Version", "13")
        .header("Sec-WebSocket-Key", KEY)
        .body(())
        .unwrap();
    let within = Duration::from_secs(10);
    let (mut ws, answer) =
        tokio::time::timeout(within, tokio_tungstenite::client_async(request, tcp))
            .await
            .map_err(|_| "no 101 in time".to_string())?
            .map_err(|e| format!("handshake: {e}"))?;
    assert_eq!(answer.status(), 101);
    let first = tokio::time::timeout(within, ws.next()).await;
    match first {
        Ok(Some(Ok(m))) if m == Message::text("hello") => {}
        other => return Err(format!("the upstream's first frame: {other:?}")),
    }
    let ping = format!("ping {n}");
    ws.send(Message::text(ping.clone()))
        .await
        .map_err(|e| format!("send: {e}"))?;
    match tokio::time::timeout(within, ws.next()).await {
        Ok(Some(Ok(m))) if m == Message::text(ping) => Ok(()),
        other => Err(format!("the echo of the client's first frame: {other:?}")),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn item_4_a_thousand_new_websockets_each_carry_their_first_frame_both_ways() {
    let upstream = eager_websocket_upstream().await;
    let gw = Policy::new()
        .sections(&format!(
            r#"
upstreams:
  ws: {{targets: ["{upstream}"]}}
routes:
  - {{name: ws, match: {{path: /ws}}, upstream: ws, auth: none, limits: []}}
"#
        ))
        .start()
        .await;
    let mut failed = Vec::new();
    for wave in 0..SOCKETS / AT_ONCE {
        let opened = (0..AT_ONCE).map(|i| first_frames_both_ways(&gw, wave * AT_ONCE + i));
        for result in futures_util::future::join_all(opened).await {
            if let Err(why) = result {
                failed.push(why);
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {SOCKETS} new WebSockets did not carry their first frames \
         (cloudflare/pingora#946: is vendor/pingora-proxy patched in?); first: {}\n{}",
        failed.len(),
        failed[0],
        gw.logs()
    );
}
