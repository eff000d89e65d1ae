//! The per-request context: the policy snapshot the request started with and
//! what the phases learn about it. Dropping it ends the request's in-flight
//! count, whatever path the request took.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use crate::limit::{Answered, Verdict};
use crate::metrics::METRICS;
use crate::state::Policy;

pub struct Ctx {
    /// One snapshot from start to end, even across a reload.
    pub policy: Arc<Policy>,
    pub route: Option<usize>,
    pub captures: Vec<(String, String)>,
    pub request_id: String,
    pub client_ip: Option<IpAddr>,
    /// Whether the connecting peer is a trusted proxy.
    pub peer_trusted: bool,
    pub started: Instant,
    pub request_body_bytes: u64,
    /// Status of a response the gateway made itself.
    pub refused: Option<u16>,
    pub identity: Option<crate::auth::Identity>,
    /// Headers of an external auth answer for the upstream request, and
    /// the names they replace (every client copy removed first).
    pub auth_headers: Vec<(http::HeaderName, http::HeaderValue)>,
    pub auth_replaced: Vec<http::HeaderName>,
    /// Headers of an external auth answer for the client's response.
    pub auth_set: Vec<(http::HeaderName, http::HeaderValue)>,
    /// The concurrency slot this request holds, if its route has a policy.
    pub lease: Option<crate::limit::lease::Lease>,
    /// Quota headers to add to the response.
    pub quota: Vec<(http::header::HeaderName, String)>,
    /// What the limiter decided.
    pub decision: Verdict,
    /// Why a phase after admission stopped the request (body too large,
    /// lease lost), for `fail_to_proxy` to answer.
    pub deny: Option<crate::proxy::respond::Deny>,
    /// The path the upstream got, when a rewrite changed it.
    pub forwarded_path: Option<String>,
    /// The attempts at the upstream.
    pub upstream: Attempts,
    /// Encodes the answer's body (`server.compression`).
    pub encoder: Option<crate::proxy::compress::Encoder>,
    /// The copy for the route's mirror, when it has one.
    pub mirror: Option<crate::proxy::mirror::Copy>,
    /// The host's client certificates entry, when it has one.
    pub client_certs: Option<Arc<crate::tls::HostClients>>,
    /// The request's spans, when traces are on.
    pub trace: Option<Box<crate::telemetry::RequestTrace>>,
    /// What answered the limit decision (`Decision::via`), for the span.
    pub store_source: Option<Answered>,
    _in_flight: InFlight,
}

impl Ctx {
    pub fn new(policy: Arc<Policy>) -> Self {
        Ctx {
            policy,
            route: None,
            captures: Vec::new(),
            request_id: String::new(),
            client_ip: None,
            peer_trusted: false,
            started: Instant::now(),
            request_body_bytes: 0,
            refused: None,
            identity: None,
            auth_headers: Vec::new(),
            auth_replaced: Vec::new(),
            auth_set: Vec::new(),
            encoder: None,
            quota: Vec::new(),
            lease: None,
            decision: Verdict::None,
            deny: None,
            forwarded_path: None,
            upstream: Default::default(),
            client_certs: None,
            mirror: None,
            trace: None,
            store_source: None,
            _in_flight: InFlight::new(),
        }
    }

    /// The client's `X-Request-Id` when it is sane, else a new one.
    pub fn take_request_id(&mut self, headers: &http::HeaderMap) {
        self.request_id = match headers.get(X_REQUEST_ID) {
            Some(v) if request_id_ok(v.as_bytes()) => {
                String::from_utf8_lossy(v.as_bytes()).into_owned()
            }
            _ => new_request_id(),
        };
    }

    pub fn route(&self) -> Option<&crate::config::Route> {
        self.route.map(|i| &self.policy.config.routes[i])
    }

    /// The route's name for metrics and logs; `none` when nothing matched.
    pub fn route_label(&self) -> &str {
        self.route().map_or("none", |r| r.name.as_str())
    }
}

/// 32 hex digits: a random per-process prefix and a counter. Unique across
/// replicas without a `getrandom` system call per request (a v4 UUID made
/// one, measurable in the profile).
fn new_request_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static PREFIX: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let prefix = *PREFIX.get_or_init(|| uuid::Uuid::new_v4().as_u64_pair().0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix:016x}{n:016x}")
}

/// A request id worth keeping: 1 to 128 printable characters, no spaces.
fn request_id_ok(id: &[u8]) -> bool {
    (1..=128).contains(&id.len())
        && id
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:+/=~".contains(b))
}

/// Counts a request as in flight for as long as it lives.
struct InFlight;

impl InFlight {
    fn new() -> Self {
        METRICS.in_flight.inc();
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        METRICS.in_flight.dec();
    }
}

/// The request id header: read from trusted peers, sent upstream and
/// answered.
pub const X_REQUEST_ID: &str = "x-request-id";

/// What the request's attempts at the upstream have been so far.
#[derive(Default)]
pub struct Attempts {
    /// When the first attempt was made.
    pub started: Option<Instant>,
    /// The pool the request was sent to (of a split or canary).
    pub pool: Option<String>,
    /// The target of the latest attempt.
    pub target: Option<std::net::SocketAddr>,
    pub count: u32,
    /// The latest answer is to be retried (`retries.retry_on` a status).
    pub status_retry: bool,
    /// The status the upstream answered (the latest attempt's).
    pub status: Option<u16>,
    /// How long after the first attempt began that answer's head came.
    pub answered_after: Option<std::time::Duration>,
    /// This request counted in flight at its target (`least_requests`).
    pub busy: Option<crate::upstream::Busy>,
    /// The affinity cookie the answer sets (`Set-Cookie`), when the
    /// client did not name the target of the latest attempt.
    pub cookie: Option<String>,
    /// The client's pinned target failed and `change_on_failure` moved it
    /// for the rest of this request.
    pub unpinned: bool,
    /// The upstream answered this status, and the error pool is asked for
    /// the page (`error_pages`).
    pub error_page: Option<u16>,
    /// The pool chosen at admission, whose `fair_share` permit this
    /// request holds: every attempt goes there.
    pub picked: Option<String>,
    /// The in-flight permit of that pool, returned when the exchange ends.
    pub permit: Option<crate::upstream::fair::Permit>,
}
