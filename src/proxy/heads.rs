//! The bounds of a request head on an admitted connection: `Guarded`
//! refuses an HTTP/1 head over `max_header_size` bytes (431) or slower than
//! `header_timeout` (408) before Pingora buffers more, closes an idle
//! kept-alive connection at `keepalive_timeout`, and counts HTTP/2 stream
//! resets; `Heads` re-arms it before each kept-alive request. Its answers
//! come pre-rendered from `respond.rs` through the edge.

use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use pingora::apps::{HttpServerApp, HttpServerOptions, ReusedHttpStream};
use pingora::protocols::http::v2::server::H2Options;
use pingora::protocols::http::ServerSession;
use pingora::protocols::{
    GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, Ssl, Stream, UniqueID,
    UniqueIDType, ALPN,
};
use pingora::server::ShutdownWatch;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};

use crate::metrics::EdgeReason;
use crate::proxy::bounds::{Answers, Bounds};
use crate::proxy::h2::Resets;

/// Runs the proxy's requests on a guarded stream, re-arming the head
/// bounds once a request has ended and its body has been drained, and
/// waiting for the next request's first bytes outside Pingora's request.
pub struct Heads<A> {
    pub(crate) app: Arc<A>,
    /// The server is closing: kept-alive connections take no next request.
    closing: AtomicBool,
    closed: Notify,
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
            self.next_head(&mut guarded).await?;
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
        self.closing.store(true, Ordering::Release);
        self.closed.notify_waiters();
        self.app.http_cleanup().await;
    }
}

impl<A> Heads<A>
where
    A: HttpServerApp + Send + Sync + 'static,
{
    /// HTTP/1's keep-alive loop, as Pingora's `ServerApp` for an
    /// `HttpServerApp` runs it (keep-alive on unless closing, the request
    /// limit of the server options, each next session with the last one's
    /// settings), without that future's HTTP/2 state held for the
    /// connection's life.
    pub(crate) async fn serve_h1(self: &Arc<Self>, guarded: Guarded, shutdown: &ShutdownWatch) {
        let mut session = ServerSession::new_http1(Box::new(guarded));
        session.set_keepalive((!*shutdown.borrow()).then_some(60));
        let limit = self
            .server_options()
            .and_then(|o| o.keepalive_request_limit);
        session.set_keepalive_reuses_remaining(limit);
        while let Some(reused) = self.process_new_http(session, shutdown).await {
            let (stream, settings) = reused.consume();
            session = ServerSession::new_http1(stream);
            if let Some(settings) = settings {
                settings.apply_to_session(&mut session);
            }
        }
    }
}

impl<A> Heads<A> {
    pub(crate) fn new(app: A) -> Self {
        Heads {
            app: Arc::new(app),
            closing: AtomicBool::new(false),
            closed: Notify::new(),
        }
    }

    /// Waits for the first bytes of a kept-alive connection's next request
    /// here, in this small future, so that an idle connection holds none of
    /// Pingora's request future (the whole proxy's state, made again for
    /// each request, tens of KiB). `None`: the client closed, the keep-alive
    /// timeout passed, or the server is closing. Pipelining must stay off
    /// (Pingora's default): with it, the next request's first bytes could
    /// be in Pingora's hands already, and this would wait for more.
    async fn next_head(&self, guarded: &mut Guarded) -> Option<()> {
        if !guarded.early.is_empty() {
            return Some(());
        }
        let closed = self.closed.notified();
        tokio::pin!(closed);
        closed.as_mut().enable();
        if self.closing.load(Ordering::Acquire) {
            return None;
        }
        tokio::select! {
            biased;
            read = std::future::poll_fn(|cx| guarded.poll_next_head(cx)) => match read {
                Ok(n) if n > 0 => Some(()),
                _ => None,
            },
            _ = closed => None,
        }
    }
}

/// Finds the blank line that ends a request head, as httparse reads it
/// (CRLF or bare LF line ends). Public only for the fuzz target.
#[doc(hidden)]
#[derive(Debug, Default)]
pub struct HeadEnd {
    /// Line feeds in a row (CRs ignored) since the head's first byte.
    newlines: u8,
    /// Whether the head has begun: blank lines before a request line
    /// neither start nor end it (RFC 9112 section 2.2).
    begun: bool,
}

impl HeadEnd {
    /// Reads `bytes` of the head; true when they end it.
    pub fn scan(&mut self, bytes: &[u8]) -> bool {
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
    answers: Arc<Answers>,
    /// Reading a request head (HTTP/1 only).
    in_head: bool,
    head_bytes: usize,
    scan: HeadEnd,
    /// When the head (or the idle wait before it) must be over. The timer
    /// is armed at it only when a read has to wait: a head that arrives
    /// whole, the keep-alive common case, moves no timer.
    until: Instant,
    deadline: Pin<Box<Sleep>>,
    /// Bytes read before the stream was wrapped (after a PROXY header),
    /// served first.
    pub(crate) early: Vec<u8>,
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
    pub(crate) fn new(inner: Stream, bounds: Arc<Bounds>, answers: Arc<Answers>, h1: bool) -> Self {
        // The first head's clock starts at accept: a connection that sends
        // nothing is closed at the deadline too.
        let until = Instant::now() + bounds.header_timeout;
        let deadline = Box::pin(tokio::time::sleep_until(until));
        let resets = (!h1).then(|| Resets::new(bounds.h2_resets_per_second));
        Guarded {
            inner,
            bounds,
            answers,
            in_head: h1,
            head_bytes: 0,
            scan: HeadEnd::default(),
            until,
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
        self.until = Instant::now() + self.bounds.keepalive_timeout;
    }

    /// A head read must wait: whether its deadline has passed, and if not,
    /// a wake-up at it.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        if self.deadline.deadline() != self.until {
            self.deadline.as_mut().reset(self.until);
        }
        std::future::Future::poll(self.deadline.as_mut(), cx).is_ready()
    }

    /// Best effort: the answer goes out if the socket takes it now.
    fn refuse(&mut self, cx: &mut Context<'_>, reason: EdgeReason) -> std::io::Error {
        reason.count();
        self.drain(cx);
        let answer = match reason {
            EdgeReason::HeaderTimeout => &self.answers.head_timeout,
            _ => &self.answers.head_too_large,
        };
        let _ = Pin::new(&mut self.inner).poll_write(cx, answer);
        let _ = Pin::new(&mut self.inner).poll_flush(cx);
        self.in_head = false;
        std::io::Error::other(format!("request head refused: {}", reason.as_str()))
    }
}

impl Guarded {
    /// Reads the first bytes of the next head into `early` (the head reader
    /// takes and counts them from there), within the keep-alive timeout:
    /// 0 when the client closed or the timeout passed.
    fn poll_next_head(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
        let mut scratch = [MaybeUninit::uninit(); 4096];
        let mut buf = ReadBuf::uninit(&mut scratch);
        match Pin::new(&mut self.inner).poll_read(cx, &mut buf) {
            Poll::Ready(Ok(())) => {
                self.early.extend_from_slice(buf.filled());
                Poll::Ready(Ok(buf.filled().len()))
            }
            Poll::Pending if self.expired(cx) => Poll::Ready(Ok(0)),
            other => other.map_ok(|()| 0),
        }
    }

    /// Reads and drops what the client has already sent, up to 64 KiB (a
    /// refused head's rest, a refused request's body): closing with unread
    /// bytes resets the connection, and a reset makes the client drop the
    /// answer before reading it.
    fn drain(&mut self, cx: &mut Context<'_>) {
        let mut scratch = [MaybeUninit::uninit(); 4096];
        let mut left = DRAIN;
        while left > 0 {
            let mut buf = ReadBuf::uninit(&mut scratch);
            match Pin::new(&mut self.inner).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if !buf.filled().is_empty() => {
                    left = left.saturating_sub(buf.filled().len());
                }
                _ => return,
            }
        }
    }
}

/// Reads at most `room` bytes of `inner` into `buf` without zeroing its
/// unfilled part, as tokio's `Take` does, and counts them.
fn read_at_most<R: AsyncRead + Unpin>(
    inner: &mut R,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
    room: usize,
) -> Poll<std::io::Result<usize>> {
    let mut limited = buf.take(room);
    let ours = limited.filled().as_ptr();
    std::task::ready!(Pin::new(inner).poll_read(cx, &mut limited))?;
    // A reader that put a buffer of its own in our `ReadBuf` filled none of
    // ours: counting its bytes would hand on memory nobody initialised.
    assert_eq!(
        limited.filled().as_ptr(),
        ours,
        "the stream swapped the read buffer"
    );
    let n = limited.filled().len();
    // SAFETY: the reader initialised and filled the first `n` unfilled
    // bytes of `buf` (the same memory, checked above); `assume_init`
    // counts from the filled part.
    unsafe { buf.assume_init(n) };
    buf.advance(n);
    Poll::Ready(Ok(n))
}

/// How much of what the client sent and nobody read is read and dropped
/// before a refusal's answer or a close.
const DRAIN: usize = 64 << 10;

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
            EdgeReason::HeaderTimeout.count();
            return Poll::Ready(Err(std::io::Error::other("no HTTP/2 request in time")));
        }
        let start = buf.filled().len();
        let read = self.as_mut().poll_read_guarded(cx, buf);
        let Some(resets) = self.resets.as_mut() else {
            return read;
        };
        if matches!(read, Poll::Ready(Ok(()))) && resets.over(&buf.filled()[start..]) {
            EdgeReason::H2Resets.count();
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
            if this.early.is_empty() {
                // Not held while the connection idles.
                this.early = Vec::new();
            }
            return Poll::Ready(this.head_read(cx, buf, start));
        }
        if !this.in_head {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        // One byte past the bound is enough to know it was crossed.
        let room =
            this.bounds.max_header_size + 1 - this.head_bytes.min(this.bounds.max_header_size);
        let n = match read_at_most(&mut this.inner, cx, buf, room) {
            Poll::Ready(Ok(n)) => n,
            // Bytes that are there are taken; the deadline is looked at
            // whenever the head must wait, so a trickle is cut off at it,
            // a read at most after.
            Poll::Pending if this.expired(cx) => {
                if this.idle {
                    // Nothing was asked: end of stream, and Pingora closes quietly.
                    this.in_head = false;
                    return Poll::Ready(Ok(()));
                }
                return Poll::Ready(Err(this.refuse(cx, EdgeReason::HeaderTimeout)));
            }
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
        };
        if n == 0 {
            return Poll::Ready(Ok(()));
        }
        let start = buf.filled().len() - n;
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
            self.until = Instant::now() + self.bounds.header_timeout;
        }
        let ended = self.scan.scan(read);
        self.head_bytes += read.len();
        if ended {
            self.in_head = false;
        } else if self.head_bytes > self.bounds.max_header_size {
            return Err(self.refuse(cx, EdgeReason::HeaderSize));
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

    /// What the client sent and nobody read (a refused request's body) is
    /// drained first, or the close would be a reset that loses the answer.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.drain(cx);
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
        std::future::poll_fn(|cx| {
            self.drain(cx);
            Poll::Ready(())
        })
        .await;
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

    /// Gives whatever it holds, at most as much as is asked.
    struct Bytes(&'static [u8]);

    impl AsyncRead for Bytes {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let n = self.0.len().min(buf.remaining());
            buf.put_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Poll::Ready(Ok(()))
        }
    }

    /// Puts a buffer of its own in the caller's `ReadBuf`, filled.
    struct Swapper;

    impl AsyncRead for Swapper {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let own: &'static mut [u8] = Box::leak(vec![7u8; 8].into_boxed_slice());
            *buf = ReadBuf::new(own);
            buf.set_filled(8);
            Poll::Ready(Ok(()))
        }
    }

    fn read<R: AsyncRead + Unpin>(reader: &mut R, room: usize) -> (usize, Vec<u8>) {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut storage = [MaybeUninit::<u8>::uninit(); 16];
        let mut buf = ReadBuf::uninit(&mut storage);
        buf.put_slice(b"ab");
        let Poll::Ready(Ok(n)) = read_at_most(reader, &mut cx, &mut buf, room) else {
            panic!("not ready")
        };
        (n, buf.filled().to_vec())
    }

    #[test]
    fn item_7_a_head_read_takes_at_most_its_room_after_what_was_filled() {
        let (n, filled) = read(&mut Bytes(b"GET / HTTP/1.1\r\n"), 5);
        assert_eq!((n, filled.as_slice()), (5, &b"abGET /"[..]));
        let (n, filled) = read(&mut Bytes(b"xyz"), 100);
        assert_eq!((n, filled.as_slice()), (3, &b"abxyz"[..]));
    }

    #[test]
    #[should_panic(expected = "the stream swapped the read buffer")]
    fn item_7_a_stream_that_swaps_the_read_buffer_is_caught_not_trusted() {
        read(&mut Swapper, 4);
    }

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
}
