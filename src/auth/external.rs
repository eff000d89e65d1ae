//! External (forward) authentication: before anything is spent, a
//! subrequest to an auth service (oauth2-proxy's `/oauth2/auth`, Authelia,
//! a company SSO service) with the request's method, URI and chosen
//! headers, never its body. A 2xx lets the request on with the answer's
//! headers; a 401/403 is the client's answer; anything else, or no answer
//! within the timeout, fails closed. A breaker keeps a dead service to one
//! call per interval; 2xx answers may be cached by a session value. The
//! service's certificate is checked against the system's roots and the
//! method's `ca_file`, which the policy builder loaded; this opens no file.

use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use http::header::{HeaderMap, HeaderName, HeaderValue};
use rustls::pki_types::CertificateDer;

use crate::breaker::{Breaker, Trip};
use crate::config::{AnswerCache, CacheKey, External};
use crate::metrics::METRICS;

/// What the service answered, as far as the gateway uses it.
#[derive(Debug)]
pub enum Outcome {
    /// 2xx: the answer's headers the policy names (copied upstream, read
    /// for identity, passed to the client).
    Allowed(Arc<Answer>),
    /// 401 or 403, with the headers passed to the client.
    Refused {
        status: u16,
        headers: Vec<(HeaderName, String)>,
    },
    /// No usable answer: the client gets 503 (fail closed).
    Unavailable(Failure),
}

/// The headers of a 2xx answer the policy names.
#[derive(Debug, Default)]
pub struct Answer {
    /// `response_headers` and the identity map's headers.
    pub headers: HeaderMap,
    /// `set_headers`: for the client's response (not kept in the cache).
    pub set: Vec<(HeaderName, HeaderValue)>,
}

impl Answer {
    fn bytes(&self) -> usize {
        self.headers
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len() + 32)
            .sum()
    }
}

/// Why there was no usable answer; a bounded metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The breaker is open: the service failed and is not called now.
    Open,
    TimedOut,
    Unreachable,
    /// A 5xx answer, or another no auth service should give (1xx, 3xx).
    BadStatus,
    /// A 4xx other than 401 and 403: the service is up and refused the
    /// form of this request (a header too large, too many cookies). It
    /// says nothing of the service, so the breaker does not count it: one
    /// anonymous client cannot open the breaker for everyone.
    Rejected,
    /// A 2xx whose headers the policy keeps pass `MAX_ANSWER_HEADERS`:
    /// never copied upstream or to the client (fail closed).
    Oversized,
}

impl Failure {
    pub fn reason(self) -> &'static str {
        match self {
            Failure::Open => "breaker_open",
            Failure::TimedOut => "timed_out",
            Failure::Unreachable => "unreachable",
            Failure::BadStatus => "bad_status",
            Failure::Rejected => "rejected",
            Failure::Oversized => "oversized",
        }
    }

    /// Whether it says the service is failing: transport failures,
    /// timeouts and 5xx, which the breaker counts.
    fn is_the_services(self) -> bool {
        matches!(
            self,
            Failure::TimedOut | Failure::Unreachable | Failure::BadStatus | Failure::Oversized
        )
    }
}

/// What the subrequest says about the original request.
pub struct Original<'a> {
    /// What else a cached answer holds for besides the session and method:
    /// the route and host (an auth service may decide per host or route,
    /// as ingress-nginx caches per location).
    pub scope: &'a str,
    /// The route's exact host, which `$host` in the URL names (a route
    /// without one cannot call such a URL: the address would come from
    /// the client).
    pub route_host: Option<&'a str>,
    pub method: &'a str,
    /// Path and query as routed.
    pub uri: &'a str,
    pub scheme: &'a str,
    pub host: &'a str,
    pub client_ip: String,
    pub request_id: &'a str,
    pub headers: &'a HeaderMap,
}

/// One `external` method: its settings, breaker and answer cache.
pub struct ExternalAuth {
    name: String,
    config: External,
    /// Header names kept from a 2xx answer.
    kept: Vec<HeaderName>,
    /// Shared with the same method of the policies before and after.
    state: Arc<State>,
    /// Shared by every method that trusts the same roots; none when it
    /// could not be built, and then every check is unavailable (never a
    /// client that would follow a redirect to a page answering 200).
    client: Option<Arc<reqwest::Client>>,
}

/// What outlives a reload of an unchanged method: a controller rebuilds
/// the policy at every EndpointSlice change, and neither the breaker (a
/// dead service would cost a timeout per rebuild) nor the cache should
/// start over then.
struct State {
    breaker: Mutex<Breaker>,
    cache: Option<moka::sync::Cache<[u8; 32], Arc<Answer>>>,
}

/// The state of method `name` with these settings: the live one when a
/// policy in force has it, else a new one.
fn state(name: &str, config: &External, kept: &[HeaderName]) -> Arc<State> {
    use std::collections::HashMap;
    use std::hash::{Hash, Hasher};
    type States = Mutex<HashMap<(String, u64), std::sync::Weak<State>>>;
    static STATES: OnceLock<States> = OnceLock::new();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    format!("{config:?}{kept:?}").hash(&mut h);
    let key = (name.to_string(), h.finish());
    let states = STATES.get_or_init(Default::default);
    let mut states = states.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(live) = states.get(&key).and_then(std::sync::Weak::upgrade) {
        return live;
    }
    states.retain(|_, s| s.strong_count() > 0);
    let fresh = Arc::new(State {
        breaker: Mutex::new(Breaker::default()),
        cache: config.cache.as_ref().map(answer_cache),
    });
    states.insert(key, Arc::downgrade(&fresh));
    fresh
}

impl ExternalAuth {
    /// `read` are the answer headers the identity map reads besides
    /// `response_headers`; `roots` the CA certificates of its `ca_file`.
    pub fn new(
        name: &str,
        config: &External,
        read: Vec<HeaderName>,
        roots: &[CertificateDer<'static>],
    ) -> Self {
        let mut kept = config.response_headers.clone();
        kept.extend(read);
        kept.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        kept.dedup();
        // The method's breaker series exists (0) from its first policy on,
        // so an alert on it has something to read; a live state keeps its value.
        let _ = METRICS.external_auth_open.with_label_values(&[name]);
        let client = client(roots);
        if client.is_none() {
            tracing::error!(method = name, "auth.external.client_failed");
        }
        ExternalAuth {
            name: name.to_string(),
            state: state(name, config, &kept),
            config: config.clone(),
            kept,
            client,
        }
    }

    pub fn config(&self) -> &External {
        &self.config
    }

    /// The answer headers kept: `response_headers` and those the identity
    /// maps (the method's and its routes') read.
    pub fn kept_headers(&self) -> &[HeaderName] {
        &self.kept
    }

    /// Asks the service about `original`, or the cache, or (while the
    /// breaker is open) nobody.
    pub async fn check(&self, original: &Original<'_>) -> Outcome {
        let key = self.cache_key(original);
        if let (Some(cache), Some(key)) = (&self.state.cache, &key) {
            if let Some(answer) = cache.get(key) {
                METRICS
                    .external_auth
                    .with_label_values(&[&self.name, "cached"])
                    .inc();
                return Outcome::Allowed(answer);
            }
        }
        if !self.breaker_lock().admit(Instant::now(), &self.trip()) {
            METRICS
                .external_auth
                .with_label_values(&[&self.name, "breaker_open"])
                .inc();
            return Outcome::Unavailable(Failure::Open);
        }
        let outcome = self.call(original).await;
        let label = match &outcome {
            Outcome::Allowed(_) => "allowed",
            Outcome::Refused { .. } => "refused",
            Outcome::Unavailable(f) => f.reason(),
        };
        METRICS
            .external_auth
            .with_label_values(&[&self.name, label])
            .inc();
        match &outcome {
            Outcome::Unavailable(f) if f.is_the_services() => self.failed(*f),
            _ => self.answered(),
        }
        if let (Outcome::Allowed(answer), Some(cache), Some(key)) =
            (&outcome, &self.state.cache, key)
        {
            cache.insert(
                key,
                Arc::new(Answer {
                    headers: answer.headers.clone(),
                    set: Vec::new(),
                }),
            );
        }
        outcome
    }

    fn breaker_lock(&self) -> std::sync::MutexGuard<'_, Breaker> {
        self.state.breaker.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The method's breaker settings; a probe whose client hung up is
    /// replaced after twice the timeout.
    fn trip(&self) -> Trip {
        Trip {
            failures: self.config.breaker.failures,
            open_for: self.config.breaker.open_for,
            probe_gap: 2 * self.config.timeout,
        }
    }

    /// The service answered (2xx, 401, 403): it is up. One log line per
    /// change of the breaker.
    fn answered(&self) {
        // Under the lock, as `failed`: a failure that opens the breaker
        // meanwhile sets the gauge after this, never before.
        let mut breaker = self.breaker_lock();
        if breaker.answered() {
            METRICS
                .external_auth_open
                .with_label_values(&[&self.name])
                .set(0);
            tracing::info!(method = self.name.as_str(), "auth.external.recovered");
        }
    }

    fn failed(&self, why: Failure) {
        let mut breaker = self.breaker_lock();
        let opened = breaker.failed(Instant::now(), &self.trip());
        if breaker.is_open() {
            METRICS
                .external_auth_open
                .with_label_values(&[&self.name])
                .set(1);
        }
        if opened {
            let open_for_ms = self.config.breaker.open_for.as_millis() as u64;
            tracing::warn!(
                method = self.name.as_str(),
                reason = why.reason(),
                open_for_ms,
                "auth.external.unavailable"
            );
        }
    }

    /// Where a request's answer is cached, when answers are and the request
    /// names its session unambiguously: the digest of the session value's
    /// exact bytes, the route and host, scheme and method, the path and
    /// query with `per_uri` only, and the exact bytes of every other header
    /// passed to the service. So one session's requests to one route and
    /// host cost one call per method, whatever their paths (ingress-nginx's
    /// `auth-cache-key` is per location, too).
    ///
    /// Why the rest: route, host, scheme and method are what a service may
    /// decide by for one session (a cached `GET` never admits a `DELETE`).
    /// The other passed headers may carry a credential the service reads
    /// before the session (oauth2-proxy reads its cookie before a bearer
    /// token): an answer it earned is never reused without it. A session
    /// named twice, in any spelling a server may read as the same name, is
    /// not cached at all: the gateway and the service could read different
    /// values, and the answer to one would be kept under the other.
    fn cache_key(&self, o: &Original<'_>) -> Option<[u8; 32]> {
        let cache = self.config.cache.as_ref()?;
        let (session, carrier) = match &cache.key {
            CacheKey::Header(h) => (only_value(o.headers, h)?, h),
            CacheKey::Cookie(name) => (session_cookie(o.headers, name)?, &http::header::COOKIE),
        };
        if session.is_empty() {
            return None;
        }
        let mut context = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
        // Each part with its length: no two requests' parts run together.
        let mut part = |bytes: &[u8]| {
            context.update(&(bytes.len() as u64).to_be_bytes());
            context.update(bytes);
        };
        part(session);
        for fact in [o.scope, o.scheme, o.method] {
            part(fact.as_bytes());
        }
        if cache.per_uri {
            part(o.uri.as_bytes());
        }
        let others = self.config.request_headers.iter().filter(|n| *n != carrier);
        for name in others {
            for value in o.headers.get_all(name) {
                part(name.as_str().as_bytes());
                part(value.as_bytes());
            }
        }
        context.finish().as_ref().try_into().ok()
    }

    async fn call(&self, original: &Original<'_>) -> Outcome {
        let Some(client) = &self.client else {
            return Outcome::Unavailable(Failure::Unreachable);
        };
        let url = match (self.config.url.contains("$host"), original.route_host) {
            (false, _) => self.config.url.clone(),
            (true, Some(host)) => self.config.url.replace("$host", host),
            (true, None) => return Outcome::Unavailable(Failure::Unreachable),
        };
        let request = client
            .request(self.config.method.clone(), &url)
            .headers(self.subrequest_headers(original))
            .timeout(self.config.timeout);
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) if e.is_timeout() => return Outcome::Unavailable(Failure::TimedOut),
            Err(_) => return Outcome::Unavailable(Failure::Unreachable),
        };
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        // The body is not used; reading a short one (within the request's
        // timeout) keeps the connection for the next subrequest, a long one
        // (an SSO's sign-in page) is left with its connection.
        let mut response = response;
        let mut read = 0;
        while let Ok(Some(chunk)) = response.chunk().await {
            read += chunk.len();
            if read > MAX_BODY_READ {
                break;
            }
        }
        match status {
            200..=299 => {
                let answer = self.kept(&headers);
                let set: usize = answer
                    .set
                    .iter()
                    .map(|(n, v)| n.as_str().len() + v.len())
                    .sum();
                match answer.bytes() + set > MAX_ANSWER_HEADERS {
                    true => Outcome::Unavailable(Failure::Oversized),
                    false => Outcome::Allowed(Arc::new(answer)),
                }
            }
            401 | 403 => Outcome::Refused {
                status,
                headers: pass(&headers, &self.config.challenge_headers),
            },
            400..=499 => Outcome::Unavailable(Failure::Rejected),
            _ => Outcome::Unavailable(Failure::BadStatus),
        }
    }

    fn kept(&self, headers: &HeaderMap) -> Answer {
        let mut kept = HeaderMap::new();
        for name in &self.kept {
            for value in headers.get_all(name) {
                kept.append(name.clone(), value.clone());
            }
        }
        let set = self
            .config
            .set_headers
            .iter()
            .flat_map(|n| {
                headers
                    .get_all(n)
                    .iter()
                    .map(move |v| (n.clone(), v.clone()))
            })
            .collect();
        Answer { headers: kept, set }
    }

    /// What the service is asked with: the passed headers of the request
    /// (its cookies as one `Cookie` line, as HTTP/2 crumbs are joined, at
    /// most one `Authorization`, within `SUBREQUEST_HEADERS` bytes) and
    /// the facts of the original request.
    fn subrequest_headers(&self, o: &Original<'_>) -> HeaderMap {
        let mut out = HeaderMap::new();
        let mut budget = SUBREQUEST_HEADERS;
        for name in &self.config.request_headers {
            let values: Vec<HeaderValue> = if name == http::header::COOKIE {
                joined_cookies(o.headers).into_iter().collect()
            } else if name == http::header::AUTHORIZATION {
                o.headers.get(name).cloned().into_iter().collect()
            } else {
                o.headers.get_all(name).iter().cloned().collect()
            };
            for value in values {
                let Some(left) = budget.checked_sub(name.as_str().len() + value.len()) else {
                    continue;
                };
                budget = left;
                out.append(name.clone(), value);
            }
        }
        let url = format!("{}://{}{}", o.scheme, o.host, o.uri);
        let facts: [(&str, &str); 11] = [
            ("x-original-uri", o.uri),
            ("x-original-url", &url),
            ("x-original-method", o.method),
            ("x-auth-request-redirect", o.uri),
            ("x-forwarded-method", o.method),
            ("x-forwarded-proto", o.scheme),
            ("x-forwarded-host", o.host),
            ("x-forwarded-uri", o.uri),
            ("x-forwarded-for", &o.client_ip),
            ("x-real-ip", &o.client_ip),
            ("x-request-id", o.request_id),
        ];
        for (name, value) in facts {
            if let Ok(value) = HeaderValue::from_str(value) {
                out.insert(HeaderName::from_static(name), value);
            }
        }
        out
    }
}

/// The answer headers passed on, as strings (a value that is not one is
/// dropped).
fn pass(headers: &HeaderMap, names: &[HeaderName]) -> Vec<(HeaderName, String)> {
    names
        .iter()
        .flat_map(|n| {
            headers
                .get_all(n)
                .iter()
                .filter_map(move |v| v.to_str().ok().map(|v| (n.clone(), v.to_string())))
        })
        .collect()
}

/// The value of cookie `name` in the request's Cookie headers.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

/// The value of header `name` when the request has exactly one (a service
/// may read another of several).
fn only_value<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Option<&'h [u8]> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (Some(v), None) => Some(v.as_bytes()),
        _ => None,
    }
}

/// The value of session cookie `name`, as sent (quotes and all: another
/// spelling is another entry), when the request names it once: no other
/// pair of its Cookie headers has a name some server reads as the same
/// (`loose`), and every Cookie header is text. Else none: not cached.
fn session_cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h [u8]> {
    let wanted = loose(name.as_bytes());
    let mut found = None;
    for line in headers.get_all(http::header::COOKIE) {
        // Bytes the gateway cannot read as text, a server may read as pairs.
        line.to_str().ok()?;
        for pair in line.as_bytes().split(|b| *b == b';') {
            let pair = pair.trim_ascii();
            let (k, v) = match pair.iter().position(|b| *b == b'=') {
                Some(i) => (&pair[..i], &pair[i + 1..]),
                None => (pair, &pair[pair.len()..]),
            };
            if loose(k) != wanted {
                continue;
            }
            if found.is_some() || k != name.as_bytes() {
                return None;
            }
            found = Some(v);
        }
    }
    found
}

/// A cookie name as the most lenient server reads it: percent-decoded,
/// its letters in one case, and nothing but letters and digits (Go trims
/// spaces, PHP reads `.` and ` ` as `_`, some frameworks ignore case).
fn loose(name: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::with_capacity(name.len());
    let mut i = 0;
    while i < name.len() {
        let mut b = name[i];
        if b == b'%' {
            let pair = name
                .get(i + 1)
                .and_then(|h| hex(*h))
                .zip(name.get(i + 2).and_then(|l| hex(*l)));
            if let Some((h, l)) = pair {
                b = (h * 16 + l) as u8;
                i += 2;
            }
        }
        if b.is_ascii_alphanumeric() {
            out.push(b.to_ascii_lowercase());
        }
        i += 1;
    }
    out
}

/// Each entry weighs at least `max_bytes / entries`, so the cache holds
/// at most `entries` answers and at most `max_bytes` of them.
fn answer_cache(c: &AnswerCache) -> moka::sync::Cache<[u8; 32], Arc<Answer>> {
    let floor = (c.max_bytes / c.entries.max(1)).max(1);
    moka::sync::Cache::builder()
        .max_capacity(c.max_bytes)
        .time_to_live(c.ttl)
        .weigher(move |_, answer: &Arc<Answer>| {
            let weight = (answer.bytes() as u64 + 32).max(floor);
            u32::try_from(weight).unwrap_or(u32::MAX)
        })
        .build()
}

/// The most bytes of a 2xx answer's headers that the policy keeps (for the
/// upstream and the client) taken: an answer past it is no answer.
const MAX_ANSWER_HEADERS: usize = 32 << 10;

/// The most bytes of the request's own headers passed to the service; what
/// would pass it is left out (the facts of the request are added after).
const SUBREQUEST_HEADERS: usize = 16 << 10;

/// Every `Cookie` line of the request as one, joined by `; `.
fn joined_cookies(headers: &HeaderMap) -> Option<HeaderValue> {
    let lines: Vec<&[u8]> = headers
        .get_all(http::header::COOKIE)
        .iter()
        .map(HeaderValue::as_bytes)
        .collect();
    match lines.len() {
        0 => None,
        1 => headers.get(http::header::COOKIE).cloned(),
        _ => HeaderValue::from_bytes(&lines.join(&b"; "[..])).ok(),
    }
}

/// The most of an answer's body read (and dropped).
const MAX_BODY_READ: usize = 64 << 10;

/// The client of the external methods that trust the system's roots and
/// `private` (a `ca_file`'s): pooled connections (idle for 60 s at most),
/// no redirects followed, no proxy from the environment. Methods trusting
/// the same certificates share one while a policy holds it, across
/// reloads; methods trusting others never share a connection with them,
/// so one verified against one CA never serves a method that trusts
/// another. The system's roots are read when one is made.
fn client(private: &[CertificateDer<'static>]) -> Option<Arc<reqwest::Client>> {
    use std::collections::HashMap;
    type Clients = Mutex<HashMap<[u8; 32], Weak<reqwest::Client>>>;
    static CLIENTS: OnceLock<Clients> = OnceLock::new();
    let mut digest = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    for der in private {
        digest.update(&(der.len() as u64).to_be_bytes());
        digest.update(der);
    }
    let key: [u8; 32] = digest.finish().as_ref().try_into().ok()?;
    let clients = CLIENTS.get_or_init(Default::default);
    let mut clients = clients.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(live) = clients.get(&key).and_then(Weak::upgrade) {
        return Some(live);
    }
    clients.retain(|_, c| c.strong_count() > 0);
    let roots = crate::tls::trust::client_roots(private);
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .pool_idle_timeout(Duration::from_secs(60))
        .tls_built_in_root_certs(roots.built_in);
    for cert in roots.certs {
        builder = builder.add_root_certificate(cert);
    }
    let client = Arc::new(builder.build().ok()?);
    clients.insert(key, Arc::downgrade(&client));
    Some(client)
}

#[cfg(test)]
mod tests;
