//! Request mirroring (`routes[].mirror`, ingress-nginx's `mirror-target`):
//! a copy of the request as the upstream got it (its head after the
//! gateway's edits, and its body when asked, up to 1 MiB) goes to a target
//! of the mirror pool once the exchange is over, so the client's answer
//! never waits for it; the mirror's answer is read and dropped. At most
//! `IN_FLIGHT` copies are in flight in the process; past that, and for a
//! body over the bound, a copy is not sent (counted by reason).

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

static PERMITS: LazyLock<Arc<Semaphore>> = LazyLock::new(|| Arc::new(Semaphore::new(IN_FLIGHT)));

static CLIENT: LazyLock<Option<reqwest::Client>> = LazyLock::new(|| {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(1))
        .timeout(Duration::from_secs(10))
        .build()
        .ok()
});

/// Hop-by-hop headers and those the client library writes itself.
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
    /// The body went over `MAX_BODY`: nothing is sent.
    too_big: bool,
}

impl Copy {
    /// The copy of `upstream` (the head as the upstream gets it).
    pub fn of(upstream: &RequestHeader) -> Copy {
        let path = upstream
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let mut headers = upstream.headers.clone();
        for name in NOT_COPIED {
            headers.remove(*name);
        }
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
            too_big: false,
        }
    }

    /// Adds a piece of the request body (when the mirror takes bodies).
    pub fn body(&mut self, piece: &[u8]) {
        if self.too_big {
            return;
        }
        if self.body.len() + piece.len() > MAX_BODY {
            self.too_big = true;
            self.body = Vec::new();
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
    let (pool, series) = (pool.clone(), METRICS.mirrors.clone());
    let route = route.to_string();
    tokio::spawn(async move {
        let _permit = permit;
        let sent = match request.send().await {
            Ok(answer) => {
                // Read and dropped, so the connection can be used again.
                let _ = answer.bytes().await;
                true
            }
            Err(_) => false,
        };
        pool.record(addr, sent);
        let outcome = if sent { "sent" } else { "failed" };
        series.with_label_values(&[route.as_str(), outcome]).inc();
    });
}
