//! The edge: every client connection passes here before Pingora reads a
//! byte of it. It caps open connections (overall and per peer address),
//! bounds the bytes and the time of every HTTP/1 request head, and answers
//! 503, 431 or 408 itself, so a client without a token cannot make the
//! gateway hold more than these bounds. Pingora alone would buffer up to
//! 1 MiB of head per connection, with 60 s per read and no overall deadline.
//! It holds no policy: its bounds are `server.*` settings, fixed for the
//! life of the process.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use ipnet::IpNet;
use pingora::apps::{HttpServerApp, HttpServerOptions, ReusedHttpStream, ServerApp};
use pingora::protocols::http::v2::server::H2Options;
use pingora::protocols::http::ServerSession;
use pingora::protocols::{
    GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, Ssl, Stream, UniqueID,
    UniqueIDType, ALPN,
};
use pingora::server::ShutdownWatch;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::config::Server;
use crate::metrics::METRICS;
use crate::proxy::h2::{opens_with_preface, Resets};

/// What one client may make the gateway hold.
#[derive(Debug, Clone)]
pub struct Bounds {
    pub max_header_size: usize,
    pub header_timeout: Duration,
    /// Idle time allowed between two requests on one connection.
    pub keepalive_timeout: Duration,
    /// IPv6 peers are capped per network of this many bits.
    pub ipv6_prefix: u8,
    pub max_connections: u64,
    pub max_connections_per_ip: u64,
    /// Peers not capped per address (load balancers, proxies).
    pub trusted: Vec<IpNet>,
    /// Plain connections start with a PROXY protocol header (TLS ones had
    /// theirs read before the handshake).
    pub proxy_protocol: bool,
    /// Plain connections may open with the HTTP/2 preface (h2c).
    pub h2c: bool,
    /// RST_STREAM frames one HTTP/2 connection may send per second.
    pub h2_resets_per_second: u32,
}

impl Bounds {
    pub fn from_config(server: &Server) -> Self {
        Bounds {
            max_header_size: server.max_header_size as usize,
            header_timeout: server.header_timeout,
            keepalive_timeout: server.keepalive_timeout,
            ipv6_prefix: server.ipv6_prefix,
            max_connections: server.max_connections,
            max_connections_per_ip: server.max_connections_per_ip,
            trusted: server.trusted_proxies.clone(),
            proxy_protocol: server.proxy_protocol,
            h2c: server.http2.h2c,
            h2_resets_per_second: server.http2.max_resets_per_second,
        }
    }
}

/// The proxy's `ServerApp`: admits a connection, wraps its stream in a
/// `Guarded`, and hands it to `Heads`, which re-arms the head bounds
/// before each keep-alive request.
pub struct Edge<A> {
    http: Arc<Heads<A>>,
    bounds: Arc<Bounds>,
    open: AtomicU64,
    per_ip: Mutex<HashMap<IpAddr, u64>>,
}

impl<A> Edge<A> {
    pub fn new(app: A, bounds: Bounds) -> Self {
        Edge {
            http: Arc::new(Heads { app: Arc::new(app) }),
            bounds: Arc::new(bounds),
            open: AtomicU64::new(0),
            per_ip: Mutex::new(HashMap::new()),
        }
    }

    /// Counts a connection in, or says which cap refuses it.
    fn admit(&self, peer: Option<IpAddr>) -> Result<Option<IpAddr>, &'static str> {
        if self.open.fetch_add(1, Ordering::AcqRel) >= self.bounds.max_connections {
            self.open.fetch_sub(1, Ordering::AcqRel);
            return Err("total");
        }
        let capped = peer
            .filter(|ip| !self.bounds.trusted.iter().any(|n| n.contains(ip)))
            .map(|ip| crate::limit::address_key(ip, self.bounds.ipv6_prefix));
        if let Some(ip) = capped {
            let mut per_ip = self.per_ip.lock().unwrap_or_else(|e| e.into_inner());
            let n = per_ip.entry(ip).or_insert(0);
            if *n >= self.bounds.max_connections_per_ip {
                drop(per_ip);
                self.open.fetch_sub(1, Ordering::AcqRel);
                return Err("per_ip");
            }
            *n += 1;
        }
        METRICS.connections_open.inc();
        Ok(capped)
    }

    fn release(&self, capped: Option<IpAddr>) {
        self.open.fetch_sub(1, Ordering::AcqRel);
        METRICS.connections_open.dec();
        if let Some(ip) = capped {
            let mut per_ip = self.per_ip.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(n) = per_ip.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    per_ip.remove(&ip);
                }
            }
        }
    }
}

/// An admitted connection; dropping it gives its share back.
struct Open<A> {
    edge: Arc<Edge<A>>,
    capped: Option<IpAddr>,
}

impl<A> Drop for Open<A> {
    fn drop(&mut self) {
        self.edge.release(self.capped);
    }
}

const REFUSED_503: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: 124\r\n\r\n{\"type\":\"urn:fairgate:problem:too-many-connections\",\"title\":\"Too many connections\",\"status\":503,\"detail\":\"retry shortly\"}";
const REFUSED_431: &[u8] = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/problem+json\r\nconnection: close\r\ncontent-length: 134\r\n\r\n{\"type\":\"urn:fairgate:problem:header-too-large\",\"title\":\"Request header fields too large\",\"status\":431,\"detail\":\"the head is too large\"}";
const REFUSED_408: &[u8] = b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/problem+json\r\nconnection: close\r\ncontent-length: 128\r\n\r\n{\"type\":\"urn:fairgate:problem:header-timeout\",\"title\":\"Request timeout\",\"status\":408,\"detail\":\"the head did not arrive in time\"}";

#[async_trait]
impl<A> ServerApp for Edge<A>
where
    A: HttpServerApp + Send + Sync + 'static,
{
    async fn process_new(
        self: &Arc<Self>,
        mut stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let mut early = Vec::new();
        if self.bounds.proxy_protocol && stream.get_ssl_digest().is_none() {
            let read =
                crate::proxy::proxy_protocol::read_header(&mut *stream, &self.bounds.trusted);
            match read.await {
                Ok((client, rest)) => {
                    if let Some(client) = client {
                        let fd = stream.id();
                        crate::proxy::proxy_protocol::set_peer(&mut *stream, fd, client);
                    }
                    early = rest;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "connection.proxy_protocol_refused");
                    return None;
                }
            }
        }
        let peer = stream
            .get_socket_digest()
            .and_then(|d| d.peer_addr().and_then(|a| a.as_inet()).map(|a| a.ip()))
            .map(|ip| ip.to_canonical());
        let capped = match self.admit(peer) {
            Ok(capped) => capped,
            Err(reason) => {
                METRICS
                    .connections_refused
                    .with_label_values(&[reason])
                    .inc();
                let answer = async {
                    stream.write_all(REFUSED_503).await?;
                    stream.flush().await
                };
                let _ = tokio::time::timeout(Duration::from_secs(1), answer).await;
                Shutdown::shutdown(&mut *stream).await;
                return None;
            }
        };
        // Counted out however the connection's task ends.
        let _open = Open {
            edge: self.clone(),
            capped,
        };
        // HTTP/2 frames its own headers (h2's limits apply); only HTTP/1
        // heads are read here, and only HTTP/2 resets are counted.
        let h2 = match stream.selected_alpn_proto() {
            Some(ALPN::H2) => true,
            _ if self.bounds.h2c && stream.get_ssl_digest().is_none() => {
                match opens_with_preface(&mut stream, &mut early, self.bounds.header_timeout).await
                {
                    Some(h2) => h2,
                    None => return None,
                }
            }
            _ => false,
        };
        let mut guarded = Guarded::new(stream, self.bounds.clone(), !h2);
        guarded.early = early;
        self.http.process_new(Box::new(guarded), shutdown).await;
        None
    }

    async fn cleanup(&self) {
        self.http.app.http_cleanup().await;
    }
}

/// Runs the proxy's requests on a guarded stream, re-arming the head
/// bounds once a request has ended and its body has been drained.
pub struct Heads<A> {
    app: Arc<A>,
}

#[async_trait]
impl<A> HttpServerApp for Heads<A>
where
    A: HttpServerApp + Send + Sync + 'static,
{
    async fn process_new_http(
        self: &Arc<Self>,
        session: ServerSession,
        shutdown: &ShutdownWatch,
    ) -> Option<ReusedHttpStream> {
        let reused = self.app.process_new_http(session, shutdown).await?;
        let (stream, settings) = reused.consume();
        let stream: Stream = if stream.as_any().is::<Guarded>() {
            let mut guarded = stream
                .into_any()
                .downcast::<Guarded>()
                .expect("checked type");
            guarded.expect_head();
            guarded
        } else {
            stream
        };
        Some(ReusedHttpStream::new(stream, settings))
    }

    fn h2_options(&self) -> Option<H2Options> {
        self.app.h2_options()
    }

    fn server_options(&self) -> Option<&HttpServerOptions> {
        self.app.server_options()
    }

    async fn http_cleanup(&self) {
        self.app.http_cleanup().await;
    }
}

/// Finds the blank line that ends a request head, as httparse reads it
/// (CRLF or bare LF line ends).
#[derive(Debug, Default)]
struct HeadEnd {
    /// Line feeds in a row (CRs ignored) since the head's first byte.
    newlines: u8,
    /// Whether the head has begun: blank lines before a request line
    /// neither start nor end it (RFC 9112 section 2.2).
    begun: bool,
}

impl HeadEnd {
    /// Reads `bytes` of the head; true when they end it.
    fn scan(&mut self, bytes: &[u8]) -> bool {
        for &b in bytes {
            match b {
                b'\n' if self.begun => {
                    self.newlines += 1;
                    if self.newlines == 2 {
                        return true;
                    }
                }
                b'\r' | b'\n' => {}
                _ => {
                    self.begun = true;
                    self.newlines = 0;
                }
            }
        }
        false
    }
}

/// A client stream that refuses a request head over `max_header_size`
/// bytes (431) or slower than `header_timeout` (408), by reading at most
/// one byte past the bound and answering before Pingora buffers more.
pub struct Guarded {
    inner: Stream,
    bounds: Arc<Bounds>,
    /// Reading a request head (HTTP/1 only).
    in_head: bool,
    head_bytes: usize,
    scan: HeadEnd,
    deadline: Pin<Box<Sleep>>,
    /// Bytes read before the stream was wrapped (after a PROXY header),
    /// served first.
    early: Vec<u8>,
    /// Between two requests: the deadline is the keep-alive timeout, and
    /// passing it closes the connection quietly.
    idle: bool,
    /// HTTP/2 only: the client's stream resets, counted.
    resets: Option<Resets>,
}

impl std::fmt::Debug for Guarded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guarded")
            .field("inner", &self.inner)
            .field("in_head", &self.in_head)
            .field("head_bytes", &self.head_bytes)
            .finish()
    }
}

impl Guarded {
    fn new(inner: Stream, bounds: Arc<Bounds>, h1: bool) -> Self {
        // The first head's clock starts at accept: a connection that sends
        // nothing is closed at the deadline too.
        let deadline = Box::pin(tokio::time::sleep(bounds.header_timeout));
        let resets = (!h1).then(|| Resets::new(bounds.h2_resets_per_second));
        Guarded {
            inner,
            bounds,
            in_head: h1,
            head_bytes: 0,
            scan: HeadEnd::default(),
            deadline,
            early: Vec::new(),
            idle: false,
            resets,
        }
    }

    /// The next bytes are a new request head. Until its first byte the
    /// connection may idle for `keepalive_timeout`; from it, the head has
    /// `header_timeout`.
    fn expect_head(&mut self) {
        self.in_head = true;
        self.head_bytes = 0;
        self.scan = HeadEnd::default();
        self.idle = true;
        let at = Instant::now() + self.bounds.keepalive_timeout;
        self.deadline.as_mut().reset(at);
    }

    /// Best effort: the answer goes out if the socket takes it now.
    fn refuse(&mut self, cx: &mut Context<'_>, answer: &[u8], reason: &str) -> std::io::Error {
        METRICS.edge_refusals.with_label_values(&[reason]).inc();
        let _ = Pin::new(&mut self.inner).poll_write(cx, answer);
        let _ = Pin::new(&mut self.inner).poll_flush(cx);
        self.in_head = false;
        std::io::Error::other(format!("request head refused: {reason}"))
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        // HTTP/2: the preface, SETTINGS and a first whole request head
        // within `header_timeout`, like an HTTP/1 head; then h2's idle timeout.
        let this = &mut *self;
        let waiting = this.resets.as_ref().is_some_and(|r| !r.seen_request);
        if waiting && std::future::Future::poll(this.deadline.as_mut(), cx).is_ready() {
            METRICS
                .edge_refusals
                .with_label_values(&["header_timeout"])
                .inc();
            return Poll::Ready(Err(std::io::Error::other("no HTTP/2 request in time")));
        }
        let start = buf.filled().len();
        let read = self.as_mut().poll_read_guarded(cx, buf);
        let Some(resets) = self.resets.as_mut() else {
            return read;
        };
        if matches!(read, Poll::Ready(Ok(()))) && resets.over(&buf.filled()[start..]) {
            METRICS
                .edge_refusals
                .with_label_values(&["h2_resets"])
                .inc();
            tracing::info!(limit = resets.limit, "connection.h2_resets_exceeded");
            return Poll::Ready(Err(std::io::Error::other("too many HTTP/2 stream resets")));
        }
        read
    }
}

impl Guarded {
    fn poll_read_guarded(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if !this.early.is_empty() {
            let start = buf.filled().len();
            let n = this.early.len().min(buf.remaining());
            buf.put_slice(&this.early[..n]);
            this.early.drain(..n);
            return Poll::Ready(this.head_read(cx, buf, start));
        }
        if !this.in_head {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        if std::future::Future::poll(this.deadline.as_mut(), cx).is_ready() {
            if this.idle {
                // Nothing was asked: end of stream, and Pingora closes quietly.
                this.in_head = false;
                return Poll::Ready(Ok(()));
            }
            return Poll::Ready(Err(this.refuse(cx, REFUSED_408, "header_timeout")));
        }
        // One byte past the bound is enough to know it was crossed.
        let room =
            this.bounds.max_header_size + 1 - this.head_bytes.min(this.bounds.max_header_size);
        let n = {
            let mut limited = buf.take(room);
            match Pin::new(&mut this.inner).poll_read(cx, &mut limited) {
                Poll::Ready(Ok(())) => limited.filled().len(),
                other => return other,
            }
        };
        if n == 0 {
            return Poll::Ready(Ok(()));
        }
        let start = buf.filled().len();
        // SAFETY: the inner stream initialised and filled the first `n`
        // unfilled bytes (`assume_init` counts from the filled part).
        unsafe { buf.assume_init(n) };
        buf.advance(n);
        Poll::Ready(this.head_read(cx, buf, start))
    }
}

impl Guarded {
    /// Accounts the bytes `buf` gained after `start` while reading a head.
    fn head_read(
        &mut self,
        cx: &mut Context<'_>,
        buf: &ReadBuf<'_>,
        start: usize,
    ) -> std::io::Result<()> {
        if !self.in_head {
            return Ok(());
        }
        let read = &buf.filled()[start..];
        if self.idle && !read.is_empty() {
            self.idle = false;
            let at = Instant::now() + self.bounds.header_timeout;
            self.deadline.as_mut().reset(at);
        }
        let ended = self.scan.scan(read);
        self.head_bytes += read.len();
        if ended {
            self.in_head = false;
        } else if self.head_bytes > self.bounds.max_header_size {
            return Err(self.refuse(cx, REFUSED_431, "header_size"));
        }
        Ok(())
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[async_trait]
impl Shutdown for Guarded {
    async fn shutdown(&mut self) {
        Shutdown::shutdown(&mut *self.inner).await
    }
}

impl UniqueID for Guarded {
    fn id(&self) -> UniqueIDType {
        self.inner.id()
    }
}

impl Ssl for Guarded {
    fn get_ssl(&self) -> Option<&pingora::protocols::tls::TlsRef> {
        self.inner.get_ssl()
    }

    fn get_ssl_digest(&self) -> Option<Arc<pingora::protocols::tls::SslDigest>> {
        self.inner.get_ssl_digest()
    }

    fn selected_alpn_proto(&self) -> Option<ALPN> {
        self.inner.selected_alpn_proto()
    }
}

impl GetTimingDigest for Guarded {
    fn get_timing_digest(&self) -> Vec<Option<pingora::protocols::TimingDigest>> {
        self.inner.get_timing_digest()
    }

    fn get_read_pending_time(&self) -> Duration {
        self.inner.get_read_pending_time()
    }

    fn get_write_pending_time(&self) -> Duration {
        self.inner.get_write_pending_time()
    }
}

impl GetProxyDigest for Guarded {
    fn get_proxy_digest(&self) -> Option<Arc<pingora::protocols::raw_connect::ProxyDigest>> {
        self.inner.get_proxy_digest()
    }
}

impl GetSocketDigest for Guarded {
    fn get_socket_digest(&self) -> Option<Arc<pingora::protocols::SocketDigest>> {
        self.inner.get_socket_digest()
    }

    fn set_socket_digest(&mut self, digest: pingora::protocols::SocketDigest) {
        self.inner.set_socket_digest(digest)
    }
}

#[async_trait]
impl Peek for Guarded {
    /// Bytes read before the stream was wrapped come first.
    async fn try_peek(&mut self, buf: &mut [u8]) -> std::io::Result<bool> {
        if self.early.is_empty() {
            return self.inner.try_peek(buf).await;
        }
        let n = self.early.len().min(buf.len());
        buf[..n].copy_from_slice(&self.early[..n]);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_lines_before_a_request_line_do_not_end_the_head() {
        let mut h = HeadEnd::default();
        assert!(!h.scan(b"\r\n\r\n\r\n"));
        assert!(!h.scan(b"GET / HTTP/1.1\r\nHost: a\r\n"));
        assert!(h.scan(b"\r\n"));
        let mut h = HeadEnd::default();
        assert!(h.scan(b"GET / HTTP/1.1\n\n"));
        let mut h = HeadEnd::default();
        assert!(!h.scan(b"GET / HTTP/1.1\r\nA: b\r\n"));
    }

    #[test]
    fn caps_count_per_address_and_overall() {
        let bounds = Bounds {
            max_header_size: 64,
            header_timeout: Duration::from_secs(10),
            keepalive_timeout: Duration::from_secs(10),
            ipv6_prefix: 64,
            max_connections: 3,
            max_connections_per_ip: 1,
            trusted: vec!["10.0.0.0/8".parse().unwrap()],
            proxy_protocol: false,
            h2c: false,
            h2_resets_per_second: 100,
        };
        let edge = Edge::new((), bounds);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let lb: IpAddr = "10.1.2.3".parse().unwrap();
        let held = edge.admit(Some(a)).unwrap();
        assert_eq!(edge.admit(Some(a)), Err("per_ip"));
        assert_eq!(
            edge.admit(Some(lb)),
            Ok(None),
            "trusted peers are not capped"
        );
        assert_eq!(edge.admit(Some(lb)), Ok(None));
        assert_eq!(edge.admit(Some(lb)), Err("total"));
        edge.release(held);
        assert!(edge.admit(Some(a)).is_ok());
        // IPv6 peers are capped per /64.
        let edge = Edge::new((), edge.bounds.as_ref().clone());
        let v6 = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        assert!(edge.admit(v6("2001:db8:0:1::1")).is_ok());
        assert_eq!(edge.admit(v6("2001:db8:0:1::2")), Err("per_ip"));
        assert!(edge.admit(v6("2001:db8:0:2::1")).is_ok());
    }
}
