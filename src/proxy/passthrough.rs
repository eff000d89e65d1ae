//! Connections passed as bytes: TLS passthrough (`server.tls.passthrough`:
//! a ClientHello naming a passthrough host) and TCP services
//! (`server.tcp_services`). Each is connected to a target of its pool (a
//! second target is tried when the first refuses), the bytes read so far
//! sent first, then bytes both ways, each direction on its own, until both
//! sides have closed or nothing moves either way for the idle time. The
//! edge has admitted and counted it already; the gateway never sees inside.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
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
pub async fn relay(client: Stream, hello: Vec<u8>, choice: Choice, peer: Option<IpAddr>) {
    let Choice::Pass { pool, sni, idle } = choice else {
        return;
    };
    let started = Instant::now();
    let Some((mut upstream, addr)) = connect(&pool, &sni).await else {
        return;
    };
    let sent = hello.len() as u64;
    let first = timeout(idle, upstream.write_all(&hello)).await;
    drop(hello);
    let moved = match first {
        Ok(Ok(())) => both_ways(client, upstream, idle).await,
        _ => Moved {
            why: Some("the target took no bytes"),
            ..Moved::default()
        },
    };
    tracing::info!(
        name = %sni,
        client = %peer.map_or_else(String::new, |ip| ip.to_string()),
        upstream = %addr,
        bytes_up = sent + moved.up,
        bytes_down = moved.down,
        duration_ms = started.elapsed().as_secs_f64() * 1000.0,
        error = moved.why.unwrap_or(""),
        "passthrough.closed"
    );
}

/// A connection to a target of `pool` (another one when the first
/// refuses), each failure counted for the pool's passive health.
async fn connect(
    pool: &crate::upstream::Pool,
    name: &str,
) -> Option<(TcpStream, std::net::SocketAddr)> {
    let mut avoid = None;
    for _ in 0..2 {
        let peer = pool.peer(None, avoid, None)?;
        let addr = peer.address().as_inet().copied()?;
        let limit = peer
            .options
            .connection_timeout
            .unwrap_or(Duration::from_secs(5));
        match timeout(limit, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                pool.record(addr, true);
                let _ = stream.set_nodelay(true);
                return Some((stream, addr));
            }
            failed => {
                pool.record(addr, false);
                let why = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => "connect timed out".into(),
                };
                tracing::warn!(name = %name, upstream = %addr, error = %why, "passthrough.connect_failed");
                avoid = Some(addr);
            }
        }
    }
    None
}

/// What moved each way, and why it stopped (none: both sides closed).
#[derive(Default)]
struct Moved {
    up: u64,
    down: u64,
    why: Option<&'static str>,
}

/// Each direction copies on its own (a side blocked writing never stops
/// the other from being read), a read of 0 passed on as a half-close;
/// done when both are, when either fails (a reset ends both at once), or
/// when nothing moved either way for `idle`.
async fn both_ways(client: Stream, mut upstream: TcpStream, idle: Duration) -> Moved {
    let started = Instant::now();
    let last = AtomicU64::new(0);
    let (mut cr, mut cw) = tokio::io::split(client);
    let (mut ur, mut uw) = upstream.split();
    let up = one_way(&mut cr, &mut uw, &last, started);
    let down = one_way(&mut ur, &mut cw, &last, started);
    let watchdog = async {
        loop {
            let since = Duration::from_millis(last.load(Ordering::Relaxed));
            let quiet = started.elapsed().saturating_sub(since);
            if quiet >= idle {
                return;
            }
            tokio::time::sleep(idle - quiet).await;
        }
    };
    tokio::pin!(up, down, watchdog);
    let mut moved = Moved::default();
    let (mut up_done, mut down_done) = (false, false);
    while !(up_done && down_done) {
        tokio::select! {
            (n, why) = &mut up, if !up_done => {
                (moved.up, up_done) = (n, true);
                if why.is_some() {
                    moved.why = why;
                    break;
                }
            }
            (n, why) = &mut down, if !down_done => {
                (moved.down, down_done) = (n, true);
                if why.is_some() {
                    moved.why = why;
                    break;
                }
            }
            () = &mut watchdog => {
                moved.why = Some("idle");
                break;
            }
        }
    }
    moved
}

/// Copies `from` to `to` until `from` ends (then `to` is shut for
/// writing) or fails: the bytes, and the failure.
async fn one_way<R, W>(
    from: &mut R,
    to: &mut W,
    last: &AtomicU64,
    started: Instant,
) -> (u64, Option<&'static str>)
where
    R: AsyncRead + Unpin + ?Sized,
    W: AsyncWrite + Unpin + ?Sized,
{
    let mut buf = vec![0u8; BUFFER];
    let mut moved = 0u64;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) => {
                let _ = to.shutdown().await;
                return (moved, None);
            }
            Ok(n) => n,
            Err(_) => return (moved, Some("read failed")),
        };
        last.store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
        if to.write_all(&buf[..n]).await.is_err() || to.flush().await.is_err() {
            return (moved, Some("write failed"));
        }
        moved += n as u64;
        last.store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}
