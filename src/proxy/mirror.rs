//! Request mirroring (`routes[].mirror`, ingress-nginx's `mirror-target`):
//! a copy of the request as the upstream got it (its head after the
//! gateway's edits, and its body when asked, up to 1 MiB) goes to a target
//! of the mirror pool once the exchange is over, so the client's answer
//! never waits for it; the mirror's answer is read and dropped. At most
//! `IN_FLIGHT` copies are in flight in the process, and the bodies being
//! copied take at most `MAX_BODIES` bytes together; past either, and for a
//! body over its own bound, a copy is not sent (counted by reason).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use pingora::http::RequestHeader;
use pingora::upstreams::peer::Peer;
use tokio::sync::Semaphore;

use crate::config::Mirror;
use crate::metrics::METRICS;

/// Bytes of body a copy may carry; a bigger body is not mirrored.
const MAX_BODY: usize = 1 << 20;
/// Copies in flight at once in the process.
const IN_FLIGHT: usize = 256;
/// Bytes of body held by every copy of the process at once (copies being
/// made and copies in flight).
const MAX_BODIES: usize = 64 << 20;

static BODIES: AtomicUsize = AtomicUsize::new(0);

/// Body bytes a copy holds against `MAX_BODIES`, given back when dropped.
#[derive(Default)]
struct Held(usize);

impl Held {
    /// Takes `n` more bytes, if the process's bound allows.
    fn take(&mut self, n: usize) -> bool {
        let before = BODIES.fetch_add(n, Ordering::AcqRel);
        if before + n > MAX_BODIES {
            BODIES.fetch_sub(n, Ordering::AcqRel);
            return false;
        }
        self.0 += n;
        true
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        BODIES.fetch_sub(self.0, Ordering::AcqRel);
    }
}

static PERMITS: LazyLock<Arc<Semaphore>> = LazyLock::new(|| Arc::new(Semaphore::new(IN_FLIGHT)));

static CLIENT: LazyLock<Option<reqwest::Client>> = LazyLock::new(|| {
    // reqwest has no provider of its own: the process default.
    crate::tls::install_provider();
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(1))
        .timeout(Duration::from_secs(10))
        .build()
        .ok()
});

/// Hop-by-hop headers and those the client library writes itself.
/// The header each copy carries: a request that has it is not copied
/// again, so a mirror whose target leads back to a gateway makes one copy,
/// not a loop.
pub const MARK: &str = "fairgate-mirrored";

const NOT_COPIED: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "host",
];

/// A request's copy, made as it goes upstream.
pub struct Copy {
    method: http::Method,
    path: String,
    headers: http::HeaderMap,
    host: Option<String>,
    body: Vec<u8>,
    held: Held,
    /// The body went over `MAX_BODY` (or the process's `MAX_BODIES`):
    /// nothing is sent.
    too_big: bool,
    /// The whole body arrived (a request cut short is not mirrored).
    complete: bool,
}

impl Copy {
    /// The copy of `upstream` (the head as the upstream gets it);
    /// `bodiless`: the request has no body to wait for.
    pub fn of(upstream: &RequestHeader, bodiless: bool) -> Copy {
        let path = upstream
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let mut headers = upstream.headers.clone();
        for name in NOT_COPIED {
            headers.remove(*name);
        }
        headers.insert(MARK, http::HeaderValue::from_static("1"));
        let host = upstream
            .headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_string);
        Copy {
            method: upstream.method.clone(),
            path,
            headers,
            host,
            body: Vec::new(),
            held: Held::default(),
            too_big: false,
            complete: bodiless,
        }
    }

    /// Adds a piece of the request body (when the mirror takes bodies);
    /// `end`: the body is whole.
    pub fn body(&mut self, piece: Option<&[u8]>, end: bool) {
        self.complete = end;
        let Some(piece) = piece.filter(|_| !self.too_big) else {
            return;
        };
        if self.body.len() + piece.len() > MAX_BODY || !self.held.take(piece.len()) {
            self.too_big = true;
            self.body = Vec::new();
            self.held = Held::default();
            return;
        }
        self.body.extend_from_slice(piece);
    }
}

/// Sends the copy to a target of `mirror`'s pool, without waiting.
pub fn send(copy: Copy, mirror: &Mirror, pool: Option<&Arc<crate::upstream::Pool>>, route: &str) {
    let outcome = |o: &str| METRICS.mirrors.with_label_values(&[route, o]).inc();
    if copy.too_big {
        return outcome("body_too_large");
    }
    if !copy.complete {
        return outcome("incomplete");
    }
    let (Some(pool), Some(client)) = (pool, CLIENT.as_ref()) else {
        return outcome("failed");
    };
    let Ok(permit) = PERMITS.clone().try_acquire_owned() else {
        return outcome("dropped");
    };
    let Some(addr) = pool
        .peer(None, None, None)
        .and_then(|p| p.address().as_inet().copied())
    else {
        return outcome("failed");
    };
    let host = mirror
        .host
        .clone()
        .or(copy.host)
        .unwrap_or_else(|| addr.to_string());
    let request = client
        .request(copy.method, format!("http://{addr}{}", copy.path))
        .headers(copy.headers)
        .header(http::header::HOST, host)
        .body(copy.body);
    let series = METRICS.mirrors.clone();
    let route = route.to_string();
    let held = copy.held;
    tokio::spawn(async move {
        let (_permit, _held) = (permit, held);
        let sent = match request.send().await {
            Ok(mut answer) => {
                // Read and dropped (up to 1 MiB), so the connection can be
                // used again; never held whole.
                let mut read = 0;
                while let Ok(Some(piece)) = answer.chunk().await {
                    read += piece.len();
                    if read > MAX_BODY {
                        break;
                    }
                }
                true
            }
            Err(_) => false,
        };
        // Not the pool's passive health: a mirror may share its pool with
        // a route's primary, whose targets its failures must not eject.
        let outcome = if sent { "sent" } else { "failed" };
        series.with_label_values(&[route.as_str(), outcome]).inc();
    });
}
