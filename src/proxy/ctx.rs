//! The per-request context: the policy snapshot the request started with and
//! what the phases learn about it. Dropping it ends the request's in-flight
//! count, whatever path the request took.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use crate::metrics::METRICS;
use crate::proxy::Policy;

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
    pub upstream_started: Option<Instant>,
    pub request_body_bytes: u64,
    /// Status of a response the gateway made itself.
    pub refused: Option<u16>,
    pub identity: Option<crate::auth::Identity>,
    /// The concurrency slot this request holds, if its route has a policy.
    pub lease: Option<crate::limit::slots::Lease>,
    /// Quota headers to add to the response.
    pub quota: Vec<(http::header::HeaderName, String)>,
    /// What the limiter decided: `exempt`, `allowed`, `limited`, ... or `-`.
    pub decision: &'static str,
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
            upstream_started: None,
            request_body_bytes: 0,
            refused: None,
            identity: None,
            quota: Vec::new(),
            lease: None,
            decision: "-",
            _in_flight: InFlight::new(),
        }
    }

    pub fn route(&self) -> Option<&crate::config::Route> {
        self.route.map(|i| &self.policy.config.routes[i])
    }

    /// The route's name for metrics and logs; `none` when nothing matched.
    pub fn route_label(&self) -> &str {
        self.route().map_or("none", |r| r.name.as_str())
    }
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
