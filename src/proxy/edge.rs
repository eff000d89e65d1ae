//! The edge: every client connection passes here before Pingora reads a
//! byte of it. It caps open connections (overall and per peer address),
//! bounds the bytes and the time of every HTTP/1 request head, and answers
//! 503, 431 or 408 itself, so a client without a token cannot make the
//! gateway hold more than these bounds. Pingora alone would buffer up to
//! 1 MiB of head per connection, with 60 s per read and no overall deadline.
//! It holds no policy: its bounds are `server.*` settings, fixed for the
//! life of the process; what a server name or a TCP service gets (a host's
//! own handshake, its TLS passed through, bytes to a pool) it asks of the
//! policy in force through `ByName`.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use pingora::apps::{HttpServerApp, ServerApp};
use pingora::listeners::tls::Acceptor;
use pingora::protocols::l4::stream::Stream as L4Stream;
use pingora::protocols::{Shutdown, Stream, ALPN};
use pingora::server::ShutdownWatch;
use tokio::io::AsyncWriteExt;
use tokio::time::{timeout_at, Instant};

use crate::metrics::{ConnectionCap, EdgeReason, METRICS};
use crate::proxy::bounds::{Answers, Bounds};
use crate::proxy::h2::opens_with_preface;
use crate::proxy::heads::{Guarded, Heads};
use crate::proxy::respond::{Deny, Refusal};

/// The TLS listener: Pingora sees it as plain TCP, and the edge runs the
/// handshake itself, after admitting the connection and within
/// `header_timeout` (Pingora's own listener would hold a handshake for a
/// fixed 60 s before any cap applies).
pub struct TlsListener {
    pub addr: SocketAddr,
    pub acceptor: Acceptor,
}

/// What some server names get instead of the listener's own handshake (a
/// host's client certificates, or its TLS passed through), and where a TCP
/// service's connections go; read from the policy in force.
pub trait ByName: Send + Sync {
    /// Whether any name has one (else no ClientHello is read ahead).
    fn any(&self) -> bool;
    fn choose(&self, sni: &str) -> Choice;
    /// The pool of the TCP service listening at `local`, if one does.
    fn tcp(&self, local: SocketAddr) -> Option<Choice>;
    /// Whether the server's address rules (`allow_cidrs`, `deny_cidrs`)
    /// admit a connection from `client` that will be passed as bytes.
    fn admits(&self, client: Option<IpAddr>) -> bool;
}

/// How a connection is served: by its ClientHello's server name on the
/// TLS listener, or by the TCP service it came to.
pub enum Choice {
    /// The listener's own handshake.
    Listener,
    /// A host's own handshake (its client certificates).
    Acceptor(Arc<Acceptor>),
    /// Passed unterminated to a target of the pool (`server.tls.passthrough`),
    /// closed after `idle` without a byte either way.
    Pass {
        pool: Arc<crate::upstream::Pool>,
        sni: String,
        idle: Duration,
    },
}

/// A TLS connection after its ClientHello.
enum Handshaken {
    Tls(Stream),
    /// To be passed through: the bytes read so far go first.
    Pass(Stream, Vec<u8>, Choice),
}

impl TlsListener {
    fn serves(&self, local: Option<SocketAddr>) -> bool {
        local.is_some_and(|l| {
            l.port() == self.addr.port()
                && (self.addr.ip().is_unspecified() || l.ip() == self.addr.ip())
        })
    }
}

/// Which kind of listener a connection came to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Door {
    /// HTTP in the clear: a refusal is answered 503.
    Plain,
    Tls,
    /// A TCP service: bytes, never an HTTP answer.
    Tcp,
}

/// Why a connection did not reach the proxy.
#[derive(Clone, Copy)]
enum Refused {
    /// Over a connection cap (answered 503 on a plain listener).
    Cap(ConnectionCap),
    /// A PROXY header or TLS handshake that failed.
    Edge(EdgeReason),
}

impl Refused {
    fn count(&self) {
        match self {
            Refused::Cap(cap) => METRICS
                .connections_refused
                .with_label_values(&[cap.as_str()])
                .inc(),
            Refused::Edge(reason) => reason.count(),
        }
    }
}

/// The proxy's `ServerApp`: admits a connection, reads its PROXY header and
/// runs its TLS handshake within `header_timeout`, wraps its stream in a
/// `Guarded`, and hands it to `Heads`, which re-arms the head bounds
/// before each keep-alive request.
pub struct Edge<A> {
    http: Arc<Heads<A>>,
    bounds: Arc<Bounds>,
    answers: Arc<Answers>,
    tls: Option<TlsListener>,
    /// Per-name handshakes and TCP services (none: only HTTP).
    names: Option<Arc<dyn ByName>>,
    open: AtomicU64,
    per_ip: Mutex<HashMap<IpAddr, u64>>,
}

impl<A> Edge<A> {
    pub fn new(
        app: A,
        bounds: Bounds,
        tls: Option<TlsListener>,
        names: Option<Arc<dyn ByName>>,
    ) -> Self {
        Edge {
            http: Arc::new(Heads::new(app)),
            answers: Arc::new(Answers::new(&bounds)),
            bounds: Arc::new(bounds),
            tls,
            names,
            open: AtomicU64::new(0),
            per_ip: Mutex::new(HashMap::new()),
        }
    }

    /// Counts a connection in, or says which cap refuses it.
    fn admit(&self, peer: Option<IpAddr>) -> Result<Option<IpAddr>, ConnectionCap> {
        if self.open.fetch_add(1, Ordering::AcqRel) >= self.bounds.max_connections {
            self.open.fetch_sub(1, Ordering::AcqRel);
            return Err(ConnectionCap::Total);
        }
        match self.admit_address(peer) {
            Ok(capped) => {
                METRICS.connections_open.inc();
                Ok(capped)
            }
            Err(cap) => {
                self.open.fetch_sub(1, Ordering::AcqRel);
                Err(cap)
            }
        }
    }

    /// Counts a connection against its address's cap (untrusted peers
    /// only): the address it was counted under, if any.
    fn admit_address(&self, peer: Option<IpAddr>) -> Result<Option<IpAddr>, ConnectionCap> {
        let capped = peer
            .filter(|ip| !self.bounds.trusted.iter().any(|n| n.contains(ip)))
            .map(|ip| crate::limit::address_key(ip, self.bounds.ipv6_prefix));
        if let Some(ip) = capped {
            let mut per_ip = self.per_ip.lock().unwrap_or_else(|e| e.into_inner());
            let n = per_ip.entry(ip).or_insert(0);
            if *n >= self.bounds.max_connections_per_ip {
                return Err(ConnectionCap::PerIp);
            }
            *n += 1;
        }
        Ok(capped)
    }

    fn release(&self, capped: Option<IpAddr>) {
        self.open.fetch_sub(1, Ordering::AcqRel);
        METRICS.connections_open.dec();
        self.release_address(capped);
    }

    fn release_address(&self, capped: Option<IpAddr>) {
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

impl<A> Open<A> {
    /// A PROXY header named the client: the connection is counted under
    /// the client's address from now on (a trusted proxy's is not counted).
    fn client(&mut self, client: IpAddr) -> Result<(), ConnectionCap> {
        let capped = self.edge.admit_address(Some(client))?;
        let before = std::mem::replace(&mut self.capped, capped);
        self.edge.release_address(before);
        Ok(())
    }
}

impl<A> Drop for Open<A> {
    fn drop(&mut self) {
        self.edge.release(self.capped);
    }
}

fn peer_ip(stream: &Stream) -> Option<IpAddr> {
    stream
        .get_socket_digest()
        .and_then(|d| d.peer_addr().and_then(|a| a.as_inet()).map(|a| a.ip()))
        .map(|ip| ip.to_canonical())
}

fn local_addr(stream: &Stream) -> Option<SocketAddr> {
    stream
        .get_socket_digest()
        .and_then(|d| d.local_addr().and_then(|a| a.as_inet()).copied())
}

impl<A> Edge<A>
where
    A: HttpServerApp + Send + Sync + 'static,
{
    /// Reads the PROXY header, and counts the connection under the client
    /// it names: any bytes of the first request read with it.
    async fn proxy_header(
        &self,
        stream: &mut Stream,
        open: &mut Open<A>,
    ) -> Result<Vec<u8>, Refused> {
        if !self.bounds.proxy_protocol {
            return Ok(Vec::new());
        }
        let read = crate::proxy::proxy_protocol::read_header(&mut **stream, &self.bounds.trusted);
        let (client, rest) = read.await.map_err(|e| {
            tracing::debug!(error = %e, "connection.proxy_protocol_refused");
            Refused::Edge(EdgeReason::HandshakeFailed)
        })?;
        if let Some(client) = client {
            let fd = stream.id();
            crate::proxy::proxy_protocol::set_peer(&mut **stream, fd, client);
            open.client(client.ip()).map_err(Refused::Cap)?;
        }
        Ok(rest)
    }

    /// Runs the TLS handshake, the bytes read with a PROXY header first;
    /// by the ClientHello's server name, a host's own, or none (`ByName`).
    async fn tls_handshake(
        &self,
        mut stream: Stream,
        early: Vec<u8>,
    ) -> Result<Handshaken, Refused> {
        let failed = |why: String| {
            tracing::debug!(error = %why, "connection.tls_handshake_failed");
            Refused::Edge(EdgeReason::HandshakeFailed)
        };
        let Some(listener) = self.tls.as_ref() else {
            return Err(failed("no TLS listener".into()));
        };
        let (choice, early) = match self.names.as_ref().filter(|n| n.any()) {
            Some(names) => {
                let (sni, read) = crate::proxy::hello::read(&mut *stream, early)
                    .await
                    .map_err(failed)?;
                let choice = sni.map_or(Choice::Listener, |s| names.choose(&s));
                (choice, read)
            }
            None => (Choice::Listener, early),
        };
        let own = match choice {
            Choice::Listener => None,
            Choice::Acceptor(acceptor) => Some(acceptor),
            pass @ Choice::Pass { .. } => return Ok(Handshaken::Pass(stream, early, pass)),
        };
        let mut l4 = stream
            .into_any()
            .downcast::<L4Stream>()
            .map_err(|_| failed("not a TCP stream".into()))?;
        l4.rewind(&early);
        let stream = own
            .as_deref()
            .unwrap_or(&listener.acceptor)
            .tls_handshake(*l4)
            .await
            .map_err(|e| failed(e.to_string()))?;
        Ok(Handshaken::Tls(Box::new(stream)))
    }

    /// Passes a connection on as bytes (TLS passthrough, a TCP service),
    /// if the server's address rules admit its client.
    async fn pass(&self, mut stream: Stream, early: Vec<u8>, choice: Choice) {
        let client = peer_ip(&stream);
        if self.names.as_ref().is_some_and(|n| !n.admits(client)) {
            METRICS
                .address_refusals
                .with_label_values(&["(passthrough)"])
                .inc();
            Shutdown::shutdown(&mut *stream).await;
            return;
        }
        crate::proxy::passthrough::relay(stream, early, choice, client).await;
    }

    /// Counts a refusal; a connection over a cap on a plain listener gets
    /// its 503 (best effort, within a second), nothing before a handshake
    /// or on a TCP service.
    async fn refuse(&self, mut stream: Stream, refused: Refused, door: Door) {
        refused.count();
        if let (Refused::Cap(_), Door::Plain) = (refused, door) {
            let answer = async {
                stream.write_all(&self.answers.too_many_connections).await?;
                stream.flush().await
            };
            let _ = tokio::time::timeout(Duration::from_secs(1), answer).await;
        }
        Shutdown::shutdown(&mut *stream).await;
    }

    /// Admits, then reads the PROXY header and runs the TLS handshake
    /// within `header_timeout` of accept; `None` when the connection was
    /// refused (and counted).
    async fn accept(
        self: &Arc<Self>,
        mut stream: Stream,
        door: Door,
    ) -> Option<(Stream, Vec<u8>, Open<A>)> {
        let mut open = match self.admit(peer_ip(&stream)) {
            Ok(capped) => Open {
                edge: self.clone(),
                capped,
            },
            Err(cap) => {
                self.refuse(stream, Refused::Cap(cap), door).await;
                return None;
            }
        };
        let deadline = Instant::now() + self.bounds.header_timeout;
        let early = match timeout_at(deadline, self.proxy_header(&mut stream, &mut open)).await {
            Ok(Ok(early)) => early,
            Ok(Err(refused)) => {
                self.refuse(stream, refused, door).await;
                return None;
            }
            Err(_) => {
                EdgeReason::HandshakeTimeout.count();
                return None;
            }
        };
        if door != Door::Tls {
            return Some((stream, early, open));
        }
        match timeout_at(deadline, self.tls_handshake(stream, early)).await {
            Ok(Ok(Handshaken::Tls(stream))) => Some((stream, Vec::new(), open)),
            Ok(Ok(Handshaken::Pass(stream, hello, choice))) => {
                // Still counted (`open`) while it lasts.
                self.pass(stream, hello, choice).await;
                drop(open);
                None
            }
            Ok(Err(refused)) => {
                refused.count();
                None
            }
            Err(_) => {
                EdgeReason::HandshakeTimeout.count();
                None
            }
        }
    }
}

#[async_trait]
impl<A> ServerApp for Edge<A>
where
    A: HttpServerApp + Send + Sync + 'static,
{
    async fn process_new(
        self: &Arc<Self>,
        stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let local = local_addr(&stream);
        let tls = self.tls.as_ref().is_some_and(|l| l.serves(local));
        let tcp = match (tls, &self.names, local) {
            (false, Some(names), Some(local)) => names.tcp(local),
            _ => None,
        };
        let door = match (tls, &tcp) {
            (true, _) => Door::Tls,
            (false, Some(_)) => Door::Tcp,
            (false, None) => Door::Plain,
        };
        // Counted from accept, before any PROXY header or handshake, and
        // counted out however the connection's task ends. Boxed: the
        // handshake's state (7.5 KiB) is freed once done, not held in this
        // future for the connection's life.
        let (mut stream, mut early, open) = Box::pin(self.accept(stream, door)).await?;
        if let Some(service) = tcp {
            self.pass(stream, early, service).await;
            drop(open);
            return None;
        }
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
        let answers = self.answers.clone();
        let mut guarded = Guarded::new(stream, self.bounds.clone(), answers, !h2);
        guarded.early = early;
        // h2c is decided above, from the setting that also turns on
        // Pingora's h2c (`server.http2.h2c`); Pingora's own preface check
        // is not run again for HTTP/1.
        if h2 {
            self.http.process_new(Box::new(guarded), shutdown).await;
        } else {
            self.http.serve_h1(guarded, shutdown).await;
        }
        None
    }

    async fn cleanup(&self) {
        self.http.http_cleanup().await;
    }
}

/// The edge's answers, written before a request exists: each closes.
pub(super) fn refusal(deny: Deny) -> Refusal {
    match deny {
        Deny::TooManyConnections => Refusal::new(
            503,
            "too-many-connections",
            "Too many connections",
            "retry shortly",
        )
        .header(http::header::RETRY_AFTER, "1")
        .close(),
        Deny::HeadTooLarge { max } => Refusal::new(
            431,
            "header-too-large",
            "Request header fields too large",
            format!("the request head is over {max} bytes"),
        )
        .close(),
        Deny::HeadTimeout => Refusal::new(
            408,
            "header-timeout",
            "Request timeout",
            "the request head did not arrive in time",
        )
        .close(),
        other => other.refusal(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let edge = Edge::new((), bounds, None, None);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let lb: IpAddr = "10.1.2.3".parse().unwrap();
        let held = edge.admit(Some(a)).unwrap();
        assert_eq!(edge.admit(Some(a)), Err(ConnectionCap::PerIp));
        assert_eq!(
            edge.admit(Some(lb)),
            Ok(None),
            "trusted peers are not capped"
        );
        assert_eq!(edge.admit(Some(lb)), Ok(None));
        assert_eq!(edge.admit(Some(lb)), Err(ConnectionCap::Total));
        edge.release(held);
        assert!(edge.admit(Some(a)).is_ok());
        // IPv6 peers are capped per /64.
        let edge = Edge::new((), edge.bounds.as_ref().clone(), None, None);
        let v6 = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        assert!(edge.admit(v6("2001:db8:0:1::1")).is_ok());
        assert_eq!(edge.admit(v6("2001:db8:0:1::2")), Err(ConnectionCap::PerIp));
        assert!(edge.admit(v6("2001:db8:0:2::1")).is_ok());
    }
}
