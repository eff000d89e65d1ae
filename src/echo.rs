//! A small echo upstream for `fairgate demo` and the test suite. It answers
//! with JSON describing the request (method, path, headers, body size),
//! streams request bodies without keeping them, and on request sleeps
//! (`?sleep_ms=N`, or echo-basic's `?delay=1s`), streams a large body (`?bytes=N`) or picks a status
//! (`?status=N`). `/__echo/stats` reports requests in flight, the most
//! seen at once and (with `--record`) the targets, path and query, of the
//! last 256. As the
//! Gateway API conformance suite's echo backend (echo-basic) does, it names
//! the pod and namespace it runs as (`POD_NAME`, `NAMESPACE`) and the
//! `Host` it was sent, and sets the response headers a request's
//! `X-Echo-Set-Header` names (`Name:value,Name:value`).

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;

#[derive(Default)]
pub struct Stats {
    pub requests: AtomicU64,
    pub in_flight: AtomicU64,
    pub max_in_flight: AtomicU64,
    /// The targets of the last `RECENT` requests, oldest first, when
    /// `record` is set (`fairgate echo --record`).
    pub recent: Mutex<VecDeque<String>>,
    pub record: bool,
}

/// How many request targets `Stats::recent` keeps.
const RECENT: usize = 256;

impl Stats {
    fn record(&self, target: &str) {
        if !self.record {
            return;
        }
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if recent.len() == RECENT {
            recent.pop_front();
        }
        recent.push_back(target.to_string());
    }
}

struct Flight<'a>(&'a Stats);

impl<'a> Flight<'a> {
    fn new(stats: &'a Stats) -> Self {
        stats.requests.fetch_add(1, Ordering::SeqCst);
        let now = stats.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        stats.max_in_flight.fetch_max(now, Ordering::SeqCst);
        Flight(stats)
    }
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

type Body = BoxBody<Bytes, Infallible>;

/// Binds `addr` and serves until the task is dropped; returns the bound address.
pub async fn serve(addr: SocketAddr, stats: Arc<Stats>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let stats = stats.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| handle(req, stats.clone()));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(bound)
}

fn query(req: &Request<Incoming>) -> BTreeMap<String, String> {
    req.uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn handle(req: Request<Incoming>, stats: Arc<Stats>) -> Result<Response<Body>, Infallible> {
    if req.uri().path() == "/__echo/stats" {
        let body = json!({
            "requests": stats.requests.load(Ordering::SeqCst),
            "in_flight": stats.in_flight.load(Ordering::SeqCst),
            "max_in_flight": stats.max_in_flight.load(Ordering::SeqCst),
            "recent": *stats.recent.lock().unwrap_or_else(|e| e.into_inner()),
        });
        return Ok(json_response(200, body.to_string()));
    }
    let _flight = Flight::new(&stats);
    stats.record(req.uri().path_and_query().map_or("/", |p| p.as_str()));
    let set_headers = echo_set_headers(&req);
    let q = query(&req);
    let method = req.method().to_string();
    let host = req
        .headers()
        .get(hyper::header::HOST)
        .map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned())
        .unwrap_or_default();
    let path = req.uri().path().to_string();
    let raw_query = req.uri().query().unwrap_or("").to_string();
    let mut headers = BTreeMap::<String, Vec<String>>::new();
    for (name, value) in req.headers() {
        headers
            .entry(name.as_str().to_string())
            .or_default()
            .push(String::from_utf8_lossy(value.as_bytes()).into_owned());
    }
    let mut body = req.into_body();
    let mut body_bytes: u64 = 0;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    body_bytes += data.len() as u64;
                }
            }
            Err(_) => break,
        }
    }
    if let Some(ms) = q.get("sleep_ms").and_then(|v| v.parse::<u64>().ok()) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let delay = q
        .get("delay")
        .map(|d| crate::config::yaml::parse_duration(d));
    if let Some(Ok(delay)) = delay {
        tokio::time::sleep(delay).await;
    }
    let status = q
        .get("status")
        .and_then(|v| v.parse::<u16>().ok())
        .unwrap_or(200);
    if let Some(n) = q.get("bytes").and_then(|v| v.parse::<u64>().ok()) {
        return Ok(stream_response(status, n));
    }
    let body = json!({
        "method": method,
        "host": host,
        "pod": whoami().0,
        "namespace": whoami().1,
        "path": path,
        "query": raw_query,
        "headers": headers,
        "body_bytes": body_bytes,
    });
    let mut response = json_response(status, body.to_string());
    for (name, value) in set_headers {
        response.headers_mut().append(name, value);
    }
    Ok(response)
}

/// The response headers `X-Echo-Set-Header: Name:value,Name:value` asks
/// for, as echo-basic reads it; what is not a header is left out.
fn echo_set_headers(
    req: &Request<Incoming>,
) -> Vec<(hyper::header::HeaderName, hyper::header::HeaderValue)> {
    let asked = req.headers().get_all("x-echo-set-header").iter();
    asked
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|pair| {
            let (name, value) = pair.split_once(':')?;
            let name = hyper::header::HeaderName::from_bytes(name.trim().as_bytes()).ok()?;
            Some((
                name,
                hyper::header::HeaderValue::from_str(value.trim()).ok()?,
            ))
        })
        .collect()
}

/// `POD_NAME` and `NAMESPACE`, read once.
fn whoami() -> &'static (String, String) {
    static WHO: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    WHO.get_or_init(|| {
        let var = |k: &str| std::env::var(k).unwrap_or_default();
        (var("POD_NAME"), var("NAMESPACE"))
    })
}

fn json_response(status: u16, body: String) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)).boxed())
        .expect("valid response")
}

/// `n` bytes of `x`, in 64 KiB chunks produced as the client reads them.
fn stream_response(status: u16, n: u64) -> Response<Body> {
    const CHUNK: u64 = 64 * 1024;
    let chunk = Bytes::from(vec![b'x'; CHUNK as usize]);
    let stream = futures_util::stream::unfold(n, move |left| {
        let chunk = chunk.clone();
        async move {
            if left == 0 {
                return None;
            }
            let take = left.min(CHUNK);
            let frame = Frame::data(chunk.slice(..take as usize));
            Some((Ok::<_, Infallible>(frame), left - take))
        }
    });
    Response::builder()
        .status(status)
        .header("content-type", "application/octet-stream")
        .header("content-length", n.to_string())
        .body(StreamBody::new(stream).boxed())
        .expect("valid response")
}
