//! TLS passthrough (`server.tls.passthrough`): a connection whose
//! ClientHello names a passthrough host is connected to a target of its
//! pool, the bytes read so far sent first, then bytes both ways until
//! either side closes or nothing moves for the idle time. The edge has
//! admitted and counted it already; the gateway never sees inside.

use std::time::{Duration, Instant};

use pingora::protocols::Stream;
use pingora::upstreams::peer::Peer;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

use super::edge::Choice;

/// Bytes read at once each way (HAProxy's `tune.bufsize` is 16 KiB too).
const BUFFER: usize = 16 * 1024;

/// Serves one passed-through connection to its end.
pub async fn relay(mut client: Stream, hello: Vec<u8>, choice: Choice) {
    let Choice::Pass { pool, sni, idle } = choice else {
        return;
    };
    let started = Instant::now();
    let Some(peer) = pool.peer(None, None, None) else {
        tracing::warn!(sni = %sni, "passthrough.no_target");
        return;
    };
    let Some(addr) = peer.address().as_inet().copied() else {
        return;
    };
    let connect_timeout = peer
        .options
        .connection_timeout
        .unwrap_or(Duration::from_secs(5));
    let mut upstream = match timeout(connect_timeout, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        failed => {
            pool.record(addr, false);
            let why = match failed {
                Ok(Err(e)) => e.to_string(),
                _ => "connect timed out".into(),
            };
            tracing::warn!(sni = %sni, upstream = %addr, error = %why, "passthrough.connect_failed");
            return;
        }
    };
    pool.record(addr, true);
    let _ = upstream.set_nodelay(true);
    let sent = match timeout(idle, upstream.write_all(&hello)).await {
        Ok(Ok(())) => both_ways(&mut client, &mut upstream, idle).await,
        _ => Err("the target took no bytes".to_string()),
    };
    let (up, down, why) = match sent {
        Ok((up, down)) => (up + hello.len() as u64, down, None),
        Err(why) => (hello.len() as u64, 0, Some(why)),
    };
    tracing::info!(
        sni = %sni,
        upstream = %addr,
        bytes_up = up,
        bytes_down = down,
        duration_ms = started.elapsed().as_secs_f64() * 1000.0,
        error = why.as_deref().unwrap_or(""),
        "passthrough.closed"
    );
}

/// Copies both ways until both sides have closed, a side fails, or
/// nothing moves for `idle`: the bytes each way.
async fn both_ways<A, B>(a: &mut A, b: &mut B, idle: Duration) -> Result<(u64, u64), String>
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let (mut ab, mut ba) = (vec![0u8; BUFFER], vec![0u8; BUFFER]);
    let (mut up, mut down) = (0u64, 0u64);
    let (mut a_open, mut b_open) = (true, true);
    while a_open || b_open {
        let moved = tokio::select! {
            r = a.read(&mut ab), if a_open => Dir::Up(r),
            r = b.read(&mut ba), if b_open => Dir::Down(r),
            _ = tokio::time::sleep(idle) => return Err("idle".into()),
        };
        let io = |e: std::io::Error| e.to_string();
        match moved {
            Dir::Up(r) => match r.map_err(io)? {
                0 => {
                    a_open = false;
                    let _ = b.shutdown().await;
                }
                n => {
                    write(b, &ab[..n], idle).await?;
                    up += n as u64;
                }
            },
            Dir::Down(r) => match r.map_err(io)? {
                0 => {
                    b_open = false;
                    let _ = a.shutdown().await;
                }
                n => {
                    write(a, &ba[..n], idle).await?;
                    down += n as u64;
                }
            },
        }
    }
    Ok((up, down))
}

enum Dir {
    Up(std::io::Result<usize>),
    Down(std::io::Result<usize>),
}

/// Writes all of `bytes`, or fails when the reader takes none for `idle`.
async fn write<W>(w: &mut W, bytes: &[u8], idle: Duration) -> Result<(), String>
where
    W: AsyncWrite + Unpin + ?Sized,
{
    match timeout(idle, async {
        w.write_all(bytes).await?;
        w.flush().await
    })
    .await
    {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err("idle".into()),
    }
}
