//! The ingress-style request series (`fairgate_http_*`), labelled as
//! ingress-nginx's are. Their labels come from the policy, never from a
//! request, and stay bounded three ways: a route's labels are its origin,
//! name and host as written; a route counts at most `MAX_ANSWERS` method
//! and status pairs (more are counted as status `other`); and the series
//! of routes a new policy no longer has are removed when it takes effect
//! (`prune_http`), so renamed Ingresses and changed hosts leave nothing
//! behind.

use std::collections::{HashMap, HashSet};
use std::sync::{LazyLock, Mutex};

use prometheus::{Histogram, IntCounter};

use super::METRICS;

/// The labels of the ingress-style request series: where the route came
/// from (`namespace`, `ingress` and `service` in controller mode, empty for
/// a file's routes), its name, and its host as the policy writes it (never
/// the client's `Host`).
pub const HTTP_LABELS: [&str; 5] = ["namespace", "ingress", "service", "route", "host"];

/// The `method` label's values; any other method is `other`.
pub const METHODS: [&str; 10] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE", "other",
];

/// Method and status pairs one route counts apart; past them, `other`.
const MAX_ANSWERS: usize = 32;
/// The status of the pairs past `MAX_ANSWERS` (no real code).
const OTHER: u16 = 1;

fn method_index(method: &http::Method) -> usize {
    METHODS[..9]
        .iter()
        .position(|m| *m == method.as_str())
        .unwrap_or(9)
}

/// A label set's method (an index of `METHODS`) and status pairs.
type Answers = HashSet<(usize, u16)>;

/// Every label set made so far, and its pairs: what `prune_http` removes.
static MADE: LazyLock<Mutex<HashMap<[String; 5], Answers>>> = LazyLock::new(Default::default);

/// A route's `fairgate_http_*` series: the histograms, and the request
/// counters of each method and status seen so far (made at first use: a
/// route answers a handful of statuses, never all 500).
pub(super) struct HttpSeries {
    labels: [String; 5],
    duration: Histogram,
    request_size: Histogram,
    response_size: Histogram,
    requests: std::sync::RwLock<Vec<(usize, u16, IntCounter)>>,
}

/// What one finished request adds to its route's ingress-style series.
pub struct Exchange<'a> {
    pub method: &'a http::Method,
    pub status: u16,
    pub seconds: f64,
    pub request_bytes: u64,
    pub response_bytes: u64,
}

impl HttpSeries {
    pub(super) fn new(labels: [String; 5]) -> Self {
        let m = &*METRICS;
        let refs = labels.each_ref().map(String::as_str);
        let made = &mut MADE.lock().unwrap_or_else(|p| p.into_inner());
        made.entry(labels.clone()).or_default();
        HttpSeries {
            duration: m.http_duration.with_label_values(&refs),
            request_size: m.http_request_size.with_label_values(&refs),
            response_size: m.http_response_size.with_label_values(&refs),
            requests: Default::default(),
            labels,
        }
    }

    /// Counts a finished request.
    pub(super) fn exchange(&self, e: &Exchange<'_>) {
        self.duration.observe(e.seconds);
        self.request_size.observe(e.request_bytes as f64);
        self.response_size.observe(e.response_bytes as f64);
        let method = method_index(e.method);
        let status = if (100..=599).contains(&e.status) {
            e.status
        } else {
            0
        };
        let find = |list: &[(usize, u16, IntCounter)], status: u16| {
            list.iter()
                .find(|(m, s, _)| *m == method && *s == status)
                .map(|(_, _, c)| c.inc())
                .is_some()
        };
        if find(
            &self.requests.read().unwrap_or_else(|p| p.into_inner()),
            status,
        ) {
            return;
        }
        let mut list = self.requests.write().unwrap_or_else(|p| p.into_inner());
        let status = if list.len() >= MAX_ANSWERS {
            OTHER
        } else {
            status
        };
        if find(&list, status) {
            return;
        }
        let code = match status {
            OTHER => "other".to_string(),
            _ => status.to_string(),
        };
        let labels = self.labels.each_ref().map(String::as_str);
        let values = [&labels[..], &[METHODS[method], &code]].concat();
        let counter = METRICS.http_requests.with_label_values(&values);
        counter.inc();
        list.push((method, status, counter));
        let made = &mut MADE.lock().unwrap_or_else(|p| p.into_inner());
        made.entry(self.labels.clone())
            .or_default()
            .insert((method, status));
    }
}

/// Removes the series of every label set not in `live` (the label sets of
/// the policy now in force): a renamed Ingress, a changed host or a
/// removed route leaves no series behind. A request still finishing on
/// the old policy counts into a series no longer exported.
pub fn prune_http(live: &HashSet<[String; 5]>) {
    let m = &*METRICS;
    let made = &mut MADE.lock().unwrap_or_else(|p| p.into_inner());
    made.retain(|labels, answers| {
        if live.contains(labels) {
            return true;
        }
        let refs = labels.each_ref().map(String::as_str);
        let _ = m.http_duration.remove_label_values(&refs);
        let _ = m.http_request_size.remove_label_values(&refs);
        let _ = m.http_response_size.remove_label_values(&refs);
        for (method, status) in answers.iter() {
            let code = match *status {
                OTHER => "other".to_string(),
                s => s.to_string(),
            };
            let values = [&refs[..], &[METHODS[*method], &code]].concat();
            let _ = m.http_requests.remove_label_values(&values);
        }
        false
    });
}
