//! Every metric fairgate exports, declared once. Labels are bounded by the
//! configuration (route, limit, decision, reason, result); never a tenant,
//! user, token or key, whose cardinality a client could drive.

use std::sync::LazyLock;

mod http;
use http::HttpSeries;
pub use http::{prune_http, Exchange, HTTP_LABELS, METHODS};

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

pub struct Metrics {
    registry: Registry,
    /// Requests by route and status class (`2xx`, `4xx`, ...).
    pub requests: IntCounterVec,
    /// Whole-request latency seen by the client, by route.
    pub request_duration: HistogramVec,
    /// Time from choosing a target to the end of the upstream exchange, by route.
    pub upstream_duration: HistogramVec,
    /// Requests refused at authentication, by reason (expired, bad_signature, ...).
    pub auth_failures: IntCounterVec,
    /// Config loads and reloads by result (`ok`, `error`).
    pub config_reloads: IntCounterVec,
    /// Generation of the policy in force; 1 after start, +1 per successful reload.
    pub config_generation: IntGauge,
    /// Requests being processed right now.
    pub in_flight: IntGauge,
    /// Rate-limit outcomes per bucket: allowed, limited, shadow_limited.
    pub decisions: IntCounterVec,
    /// Latency of store calls, by store kind and result (ok, error).
    pub store_duration: HistogramVec,
    /// Decisions made without the shared store, by reason (unreachable,
    /// failed, timed_out, breaker_open).
    pub fallback: IntCounterVec,
    /// 1 while the shared store answers, 0 while decisions fall back.
    pub store_up: IntGauge,
    /// Slot leases taken, by concurrency policy.
    pub slots_acquired: IntCounterVec,
    /// Requests refused for want of a slot, by concurrency policy.
    pub slots_refused: IntCounterVec,
    /// Leases ended, by policy and reason (complete, error, client_abort, expired_renewal).
    pub slots_released: IntCounterVec,
    /// Leases this process holds now, by policy.
    pub slots_held: IntGaugeVec,
    /// Refusals made from the denial cache, without a store call.
    pub denials_cached: IntCounter,
    /// Unix time of the last successful config load or reload.
    pub config_last_success: IntGauge,
    /// Controller mode: Kubernetes objects held from the watches, by kind.
    pub kube_objects: IntGaugeVec,
    /// Controller mode: Unix time the cluster's objects were last applied.
    pub kube_last_sync: IntGauge,
    /// Controller mode: policy builds from the cluster's objects, by result.
    pub kube_builds: IntCounterVec,
    /// Controller mode: Ingresses withheld (not served) by the last build.
    pub kube_rejected: IntGauge,
    /// Controller mode: pools whose endpoints were applied in place.
    pub kube_endpoint_updates: IntCounter,
    pub kube_reads: IntCounter,
    /// Controller mode: 1 while this replica holds the status Lease.
    pub kube_leader: IntGauge,
    /// Controller mode: watch errors (the API server unreachable, 410 Gone), by kind.
    pub kube_watch_errors: IntCounterVec,
    /// Token signature checks made (cache misses that reached a key).
    pub auth_verifications: IntCounter,
    /// Look-ups of the verified-token cache that found the token.
    pub token_cache_hits: IntCounter,
    /// Look-ups of the verified-token cache that did not.
    pub token_cache_misses: IntCounter,
    /// Requests answered 429 because their address failed authentication too often.
    pub auth_throttled: IntCounter,
    /// Basic-auth requests answered 429 before any check, by `Throttle`
    /// (`user`, `queued`).
    pub basic_throttled: IntCounterVec,
    /// Basic-auth checks running or waiting now (one an address at most).
    pub basic_checks_queued: IntGauge,
    /// Client connections open now.
    pub connections_open: IntGauge,
    /// Client connections closed at accept, by reason (`total`, `per_ip`).
    pub connections_refused: IntCounterVec,
    /// Requests and connections ended by an edge bound, by `EdgeReason`.
    pub edge_refusals: IntCounterVec,
    /// When each served certificate expires (its first name), Unix time.
    pub tls_expiry: IntGaugeVec,
    /// Targets taken out of rotation by passive health, by upstream pool.
    pub upstream_ejections: IntCounterVec,
    /// Attempts made again on another target, by route.
    pub upstream_retries: IntCounterVec,
    /// Requests refused for their client address (`allow_cidrs`, `deny_cidrs`), by route.
    pub address_refusals: IntCounterVec,
    /// Request copies (`routes[].mirror`) by route and outcome (`sent`,
    /// `failed`, `dropped` past the bound in flight, `body_too_large`,
    /// `incomplete`).
    pub mirrors: IntCounterVec,
    /// When each JWKS endpoint last answered a usable key set, Unix time,
    /// by its host and path (never its query).
    pub jwks_last_success: IntGaugeVec,
    /// External auth checks by method and result (`allowed`, `refused`,
    /// `cached`, `breaker_open`, `timed_out`, `unreachable`, `bad_status`,
    /// `rejected`, `oversized`).
    pub external_auth: IntCounterVec,
    /// 1 while an external auth method's breaker is open, by method.
    pub external_auth_open: IntGaugeVec,
    /// Spans handed to the OTLP exporter, by `exported` or `failed`.
    pub trace_spans: IntCounterVec,
    /// Requests by `HTTP_LABELS`, `method` (`METHODS`) and `status` (the
    /// code): ingress-nginx's `nginx_ingress_controller_requests`.
    pub http_requests: IntCounterVec,
    /// Whole-request time, request and response body sizes, by `HTTP_LABELS`.
    pub http_duration: HistogramVec,
    pub http_request_size: HistogramVec,
    pub http_response_size: HistogramVec,
    /// `fair_share` pools (SPEC §12), by upstream pool: permits out, the
    /// limit in force, requests waiting, how long they waited, and
    /// requests refused by `reason` (`queue_full`, `queue_timeout`).
    pub fair_share_in_flight: IntGaugeVec,
    pub fair_share_limit: IntGaugeVec,
    pub fair_share_queued: IntGaugeVec,
    pub fair_share_wait: HistogramVec,
    pub fair_share_refused: IntCounterVec,
}

fn counter(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    registry
        .register(Box::new(c.clone()))
        .expect("unique metric");
    c
}

/// A counter without labels.
fn single(registry: &Registry, name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).expect("valid metric");
    registry
        .register(Box::new(c.clone()))
        .expect("unique metric");
    c
}

fn histogram(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
    buckets: Vec<f64>,
) -> HistogramVec {
    let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)
        .expect("valid metric");
    registry
        .register(Box::new(h.clone()))
        .expect("unique metric");
    h
}

fn gauge(registry: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).expect("valid metric");
    registry
        .register(Box::new(g.clone()))
        .expect("unique metric");
    g
}

/// Body sizes in bytes: 100 B to 100 MiB.
const SIZES: &[f64] = &[
    100.0,
    1024.0,
    10240.0,
    102400.0,
    1048576.0,
    10485760.0,
    104857600.0,
];

const LATENCY: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

pub static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let r = Registry::new();
    let token_cache = counter(
        &r,
        "fairgate_auth_token_cache_total",
        "Look-ups of the verified-token cache, by result (hit, miss).",
        &["result"],
    );
    Metrics {
        requests: counter(
            &r,
            "fairgate_requests_total",
            "Requests answered, by route and status class.",
            &["route", "status_class"],
        ),
        request_duration: histogram(
            &r,
            "fairgate_request_duration_seconds",
            "Time from request header to the end of the response, by route.",
            &["route"],
            LATENCY.to_vec(),
        ),
        upstream_duration: histogram(
            &r,
            "fairgate_upstream_duration_seconds",
            "Time spent on the upstream exchange, by route.",
            &["route"],
            LATENCY.to_vec(),
        ),
        auth_failures: counter(
            &r,
            "fairgate_auth_failures_total",
            "Requests refused with 401, by reason.",
            &["reason"],
        ),
        config_reloads: counter(
            &r,
            "fairgate_config_reloads_total",
            "Config loads and reloads, by result.",
            &["result"],
        ),
        config_generation: gauge(
            &r,
            "fairgate_config_generation",
            "Generation of the policy in force.",
        ),
        in_flight: gauge(
            &r,
            "fairgate_requests_in_flight",
            "Requests being processed.",
        ),
        decisions: counter(
            &r,
            "fairgate_ratelimit_decisions_total",
            "Rate-limit outcomes per route and limit.",
            &["route", "limit", "decision"],
        ),
        store_duration: histogram(
            &r,
            "fairgate_store_duration_seconds",
            "Latency of rate-limit store calls.",
            &["store", "result"],
            vec![
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
            ],
        ),
        fallback: counter(
            &r,
            "fairgate_ratelimit_fallback_total",
            "Decisions made without the shared store, by reason.",
            &["reason"],
        ),
        store_up: gauge(
            &r,
            "fairgate_store_up",
            "1 while the shared store answers, 0 while decisions fall back.",
        ),
        slots_acquired: counter(
            &r,
            "fairgate_slots_acquired_total",
            "Slot leases taken, by concurrency policy.",
            &["policy"],
        ),
        slots_refused: counter(
            &r,
            "fairgate_slots_refused_total",
            "Requests refused for want of a slot.",
            &["policy"],
        ),
        slots_released: counter(
            &r,
            "fairgate_slots_released_total",
            "Slot leases ended, by reason.",
            &["policy", "reason"],
        ),
        slots_held: gauges(
            &r,
            "fairgate_slots_held",
            "Slot leases this process holds.",
            &["policy"],
        ),
        denials_cached: single(
            &r,
            "fairgate_ratelimit_cached_denials_total",
            "Refusals made from the denial cache, without a store call.",
        ),
        kube_objects: gauges(
            &r,
            "fairgate_kubernetes_objects",
            "Kubernetes objects held from the watches, by kind.",
            &["kind"],
        ),
        kube_last_sync: gauge(
            &r,
            "fairgate_kubernetes_last_sync_timestamp_seconds",
            "Unix time the cluster's objects were last applied.",
        ),
        kube_builds: counter(
            &r,
            "fairgate_kubernetes_policy_builds_total",
            "Policy builds from the cluster's objects, by result (ok, error).",
            &["result"],
        ),
        kube_rejected: gauge(
            &r,
            "fairgate_kubernetes_rejected_ingresses",
            "Ingresses of this controller withheld by the last build.",
        ),
        kube_endpoint_updates: single(
            &r,
            "fairgate_kubernetes_endpoint_updates_total",
            "Pools whose Service endpoints were applied in place, without a policy build.",
        ),
        kube_reads: single(
            &r,
            "fairgate_kubernetes_policy_reads_total",
            "Reads of the merged policy: one a build, one more for each round that withheld \
             what the reader refused.",
        ),
        kube_leader: gauge(
            &r,
            "fairgate_kubernetes_leader",
            "1 while this replica holds the Lease and writes Ingress status.",
        ),
        kube_watch_errors: counter(
            &r,
            "fairgate_kubernetes_watch_errors_total",
            "Watch errors (API server unreachable, 410 Gone relists), by kind.",
            &["kind"],
        ),
        config_last_success: gauge(
            &r,
            "fairgate_config_last_reload_success_timestamp_seconds",
            "Unix time of the last successful config load or reload.",
        ),
        auth_verifications: single(
            &r,
            "fairgate_auth_verifications_total",
            "Token signature checks made (tokens not already known valid).",
        ),
        token_cache_hits: token_cache.with_label_values(&["hit"]),
        token_cache_misses: token_cache.with_label_values(&["miss"]),
        auth_throttled: single(
            &r,
            "fairgate_auth_throttled_total",
            "Requests refused with 429 because their address failed authentication too often.",
        ),
        basic_throttled: counter(
            &r,
            "fairgate_basic_auth_throttled_total",
            "Basic-auth requests refused with 429 before any check, by reason.",
            &["reason"],
        ),
        basic_checks_queued: gauge(
            &r,
            "fairgate_basic_auth_checks_queued",
            "Basic-auth checks running or waiting now.",
        ),
        connections_open: gauge(
            &r,
            "fairgate_connections_open",
            "Client connections open now.",
        ),
        connections_refused: counter(
            &r,
            "fairgate_connections_refused_total",
            "Client connections refused at accept, by reason (total, per_ip).",
            &["reason"],
        ),
        edge_refusals: counter(
            &r,
            "fairgate_edge_refusals_total",
            "Requests ended by a bound on what a client may make the gateway hold, by reason.",
            &["reason"],
        ),
        tls_expiry: gauges(
            &r,
            "fairgate_tls_certificate_expiry_timestamp_seconds",
            "When each served certificate expires, Unix time, by its first name.",
            &["name"],
        ),
        upstream_ejections: counter(
            &r,
            "fairgate_upstream_ejections_total",
            "Targets taken out of rotation by passive health, by upstream pool.",
            &["upstream"],
        ),
        upstream_retries: counter(
            &r,
            "fairgate_upstream_retries_total",
            "Requests tried again on another target, by route.",
            &["route"],
        ),
        address_refusals: counter(
            &r,
            "fairgate_address_refusals_total",
            "Requests refused 403 for their client address, by route.",
            &["route"],
        ),
        mirrors: counter(
            &r,
            "fairgate_mirror_requests_total",
            "Request copies sent to a route's mirror, by route and outcome.",
            &["route", "outcome"],
        ),
        jwks_last_success: gauges(
            &r,
            "fairgate_jwks_last_success_timestamp_seconds",
            "When each JWKS endpoint last answered a usable key set, Unix time, by host and path.",
            &["source"],
        ),
        external_auth: counter(
            &r,
            "fairgate_external_auth_total",
            "External auth checks, by method and result.",
            &["method", "result"],
        ),
        external_auth_open: gauges(
            &r,
            "fairgate_external_auth_breaker_open",
            "1 while an external auth method's breaker is open (its requests get 503 without a call), by method.",
            &["method"],
        ),
        trace_spans: counter(
            &r,
            "fairgate_trace_spans_total",
            "Spans sent to the OTLP endpoint, by result (exported, failed).",
            &["result"],
        ),
        http_requests: counter(
            &r,
            "fairgate_http_requests_total",
            "Requests answered, by namespace, ingress, service, route, host, method and status.",
            &[&HTTP_LABELS[..], &["method", "status"]].concat(),
        ),
        http_duration: histogram(
            &r,
            "fairgate_http_request_duration_seconds",
            "Time from request header to the end of the response, by namespace, ingress, service, route and host.",
            &HTTP_LABELS,
            LATENCY.to_vec(),
        ),
        http_request_size: histogram(
            &r,
            "fairgate_http_request_size_bytes",
            "Request body bytes received, by namespace, ingress, service, route and host.",
            &HTTP_LABELS,
            SIZES.to_vec(),
        ),
        http_response_size: histogram(
            &r,
            "fairgate_http_response_size_bytes",
            "Response body bytes sent, by namespace, ingress, service, route and host.",
            &HTTP_LABELS,
            SIZES.to_vec(),
        ),
        fair_share_in_flight: gauges(
            &r,
            "fairgate_fair_share_in_flight",
            "Requests holding an in-flight permit of a fair_share pool, by upstream pool.",
            &["upstream"],
        ),
        fair_share_limit: gauges(
            &r,
            "fairgate_fair_share_limit",
            "The in-flight limit in force (fixed or adaptive), by upstream pool.",
            &["upstream"],
        ),
        fair_share_queued: gauges(
            &r,
            "fairgate_fair_share_queued",
            "Requests waiting for an in-flight permit, by upstream pool.",
            &["upstream"],
        ),
        fair_share_wait: histogram(
            &r,
            "fairgate_fair_share_wait_seconds",
            "Time queued requests waited for their permit (or their refusal), by upstream pool.",
            &["upstream"],
            LATENCY.to_vec(),
        ),
        fair_share_refused: counter(
            &r,
            "fairgate_fair_share_refused_total",
            "Requests refused by a fair_share pool, by upstream pool and reason \
             (queue_full, queue_timeout).",
            &["upstream", "reason"],
        ),
        registry: r,
    }
});

fn gauges(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    registry
        .register(Box::new(g.clone()))
        .expect("unique metric");
    g
}

impl Metrics {
    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding cannot fail");
        out
    }
}

/// Why the edge ended a connection or a request before the proxy ran: the
/// label of `fairgate_edge_refusals_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EdgeReason {
    /// A request head over `max_header_size` (431).
    HeaderSize,
    /// A header line over `max_header_field_size` (431).
    HeaderFieldSize,
    /// A request head not received within `header_timeout` (408).
    HeaderTimeout,
    /// A request body that paused for `body_idle_timeout`.
    BodyIdle,
    /// An HTTP/2 connection resetting streams faster than allowed.
    H2Resets,
    /// A PROXY protocol header or TLS handshake not done within
    /// `header_timeout` of accept.
    HandshakeTimeout,
    /// A TLS handshake (or PROXY header) that failed.
    HandshakeFailed,
}

impl EdgeReason {
    pub const ALL: [EdgeReason; 7] = [
        EdgeReason::HeaderSize,
        EdgeReason::HeaderFieldSize,
        EdgeReason::HeaderTimeout,
        EdgeReason::BodyIdle,
        EdgeReason::H2Resets,
        EdgeReason::HandshakeTimeout,
        EdgeReason::HandshakeFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EdgeReason::HeaderSize => "header_size",
            EdgeReason::HeaderFieldSize => "header_field_size",
            EdgeReason::HeaderTimeout => "header_timeout",
            EdgeReason::BodyIdle => "body_idle",
            EdgeReason::H2Resets => "h2_resets",
            EdgeReason::HandshakeTimeout => "handshake_timeout",
            EdgeReason::HandshakeFailed => "handshake_failed",
        }
    }

    /// Counts one refusal.
    pub fn count(self) {
        METRICS
            .edge_refusals
            .with_label_values(&[self.as_str()])
            .inc();
    }
}

/// Which connection cap refused a connection at accept: the label of
/// `fairgate_connections_refused_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionCap {
    /// `server.max_connections`.
    Total,
    /// `server.max_connections_per_ip`.
    PerIp,
}

impl ConnectionCap {
    pub const ALL: [ConnectionCap; 2] = [ConnectionCap::Total, ConnectionCap::PerIp];

    pub fn as_str(self) -> &'static str {
        match self {
            ConnectionCap::Total => "total",
            ConnectionCap::PerIp => "per_ip",
        }
    }
}

pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

const STATUS_CLASSES: [&str; 6] = ["1xx", "2xx", "3xx", "4xx", "5xx", "none"];

fn status_index(status: u16) -> usize {
    match status {
        100..=599 => usize::from(status / 100 - 1),
        _ => 5,
    }
}

/// Rate-limit outcomes, the `decision` label of `decisions`.
pub const OUTCOMES: [&str; 3] = ["allowed", "limited", "shadow_limited"];

/// One route's series, resolved once per policy generation, so a request
/// increments counters instead of looking its labels up.
pub struct RouteMetrics {
    requests: [IntCounter; 6],
    pub duration: Histogram,
    pub upstream: Histogram,
    /// For each limit the route spends, in order, one counter per `OUTCOMES`.
    pub decisions: Vec<[IntCounter; 3]>,
    /// The ingress-style series (`HTTP_LABELS`).
    http: HttpSeries,
}

impl RouteMetrics {
    /// `route` is the route's name; `limits` the names of the limits it
    /// spends; `labels` its `HTTP_LABELS` values.
    pub fn new(route: &str, limits: &[&str], labels: [String; 5]) -> Self {
        let m = &*METRICS;
        RouteMetrics {
            requests: STATUS_CLASSES.map(|class| m.requests.with_label_values(&[route, class])),
            duration: m.request_duration.with_label_values(&[route]),
            upstream: m.upstream_duration.with_label_values(&[route]),
            decisions: limits
                .iter()
                .map(|limit| OUTCOMES.map(|o| m.decisions.with_label_values(&[route, limit, o])))
                .collect(),
            http: HttpSeries::new(labels),
        }
    }

    pub fn requests(&self, status: u16) -> &IntCounter {
        &self.requests[status_index(status)]
    }

    /// Counts a finished request in the ingress-style series.
    pub fn exchange(&self, e: &Exchange<'_>) {
        self.http.exchange(e);
    }
}
