//! The one place the gateway's own answers are made: a typed `Deny` (why
//! admission refused a request) or a Pingora error becomes a status,
//! headers and an `application/problem+json` body (RFC 9457). Bodies never
//! echo a token, name a key or another tenant.

use bytes::Bytes;
use http::header::HeaderName;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use pingora::{Error, ErrorSource, ErrorType, Result};
use serde_json::{json, Map, Value};
use std::time::Duration;

use crate::auth::AuthError;
use crate::limit::Unkeyable;
use crate::proxy::quota::{int, sf_list};
use crate::proxy::target::BadTarget;

/// Why the gateway answers a request itself instead of forwarding it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deny {
    /// The request target or Host cannot be routed as one path.
    BadTarget(BadTarget),
    /// A malformed head: Host count, Content-Length (the detail says which).
    BadRequest(&'static str),
    /// The request target is over `max_header_field_size`.
    UriTooLong {
        max: usize,
    },
    /// A header line is over `max_header_field_size`.
    HeaderTooLarge {
        max: usize,
    },
    NoRoute,
    /// The declared or streamed body is over the route's `max_body`.
    BodyTooLarge {
        max: u64,
    },
    Unauthorized(AuthError),
    /// Basic credentials missing or wrong (`auth: NAME` of a basic method).
    BasicUnauthorized {
        realm: String,
    },
    /// An API key missing, unknown or expired.
    KeyUnauthorized(crate::auth::api_keys::ApiKeyError),
    /// The external auth service answered 401 or 403: its status, with
    /// the headers it passes to the client.
    AuthRefused {
        status: u16,
        headers: Vec<(HeaderName, String)>,
    },
    /// The external auth service gave no usable answer: fail closed.
    AuthUnavailable,
    /// Refused before any check of the credentials: why, and how long
    /// until a retry may be checked.
    AuthThrottled {
        wait_ms: u64,
        by: crate::auth::failures::Throttle,
    },
    /// The request cannot be keyed into a scope of its route.
    Unkeyable(Unkeyable),
    /// A bucket is short: its name, the waits and its quota headers.
    RateLimited {
        limit: String,
        status: u16,
        retry_after_ms: Option<u64>,
        reset_after_ms: u64,
        quota: Vec<(HeaderName, String)>,
    },
    /// Every slot of a concurrency policy is held.
    NoSlot {
        policy: String,
        status: u16,
        slots: u64,
    },
    /// `on_unavailable: deny` while the store is down.
    StoreUnavailable,
    /// An upload lost its lease mid-way and was stopped.
    SlotLost,
    /// A `fair_share` pool's answers (`queue.rs`): the flow's queue is
    /// full; the request waited `queue.timeout`; the client hung up.
    QueueFull {
        pool: String,
    },
    QueueTimeout {
        pool: String,
        timeout: Duration,
    },
    ClientGone,
    /// The request body stopped arriving for `body_idle_timeout`.
    BodyTimeout,
    /// The client address is outside the route's or server's address rules.
    AddressForbidden,
    /// The route sends this request elsewhere (`redirect`, `https_redirect`, `app_root`).
    Redirect {
        code: u16,
        location: String,
    },
    /// The route answers this status itself (`direct_response`).
    Direct {
        status: u16,
    },
    /// A CORS preflight, answered with these headers.
    Preflight(Vec<(HeaderName, String)>),
    Internal(&'static str),
    /// A host's client certificates (`server.tls.client_certificates`).
    ClientCert(super::client_certs::Refused),
    /// The edge: a connection over `max_connections` or
    /// `max_connections_per_ip`, answered at accept (plain listeners).
    TooManyConnections,
    /// The edge: a request head over `max_header_size` bytes.
    HeadTooLarge {
        max: usize,
    },
    /// The edge: a request head not received within `header_timeout`.
    HeadTimeout,
}

impl Deny {
    pub fn refusal(self) -> Refusal {
        match self {
            Deny::BadTarget(why) => {
                Refusal::new(400, "bad-target", "Bad request target", why.detail())
            }
            // What follows a malformed head cannot be trusted to frame.
            Deny::BadRequest(detail) => {
                Refusal::new(400, "bad-request", "Bad request", detail).close()
            }
            Deny::UriTooLong { max } => Refusal::new(
                414,
                "uri-too-long",
                "URI too long",
                format!("the request target is over {max} bytes"),
            ),
            Deny::HeaderTooLarge { max } => Refusal::new(
                431,
                "header-too-large",
                "Request header fields too large",
                format!("a header line is over {max} bytes"),
            ),
            Deny::NoRoute | Deny::Unkeyable(Unkeyable::NotListed) => Refusal::not_found(),
            Deny::BodyTooLarge { max } => Refusal::body_too_large(max),
            Deny::Unauthorized(e) => Refusal::unauthorized(e),
            auth @ (Deny::BasicUnauthorized { .. }
            | Deny::KeyUnauthorized(_)
            | Deny::AuthRefused { .. }
            | Deny::AuthUnavailable) => Refusal::auth_method(auth),
            Deny::Unkeyable(Unkeyable::MissingClaim) => {
                Refusal::unauthorized(AuthError::MissingClaim)
            }
            Deny::Unkeyable(Unkeyable::ValueTooLong) => Refusal::value_too_long(),
            Deny::Unkeyable(Unkeyable::NoClientCert) => Refusal::new(
                403,
                "client-cert-required",
                "Forbidden",
                "this route is limited per client certificate; connect with one",
            ),
            Deny::AuthThrottled { wait_ms, by } => Refusal::auth_throttled(wait_ms, by),
            limited @ (Deny::RateLimited { .. } | Deny::NoSlot { .. }) => Refusal::limited(limited),
            Deny::StoreUnavailable => Refusal::new(
                503,
                "store-unavailable",
                "Service unavailable",
                "the rate-limit store is unavailable",
            )
            .header(http::header::RETRY_AFTER, "1"),
            queued @ (Deny::QueueFull { .. } | Deny::QueueTimeout { .. } | Deny::ClientGone) => {
                super::queue::refusal(queued)
            }
            Deny::SlotLost => Refusal::new(
                503,
                "slot-lost",
                "Service unavailable",
                "this upload lost its concurrency slot and was stopped; retry it",
            ),
            Deny::BodyTimeout => Refusal::new(
                408,
                "body-timeout",
                "Request timeout",
                "the request body stopped arriving",
            ),
            Deny::AddressForbidden => Refusal::new(
                403,
                "address-forbidden",
                "Forbidden",
                "this route does not serve the client's address",
            ),
            Deny::Redirect { code, location } => {
                Refusal::bodyless(code, "redirect", vec![(http::header::LOCATION, location)])
            }
            Deny::Direct { status } => Refusal::direct(status),
            Deny::Preflight(headers) => Refusal::bodyless(204, "preflight", headers),
            Deny::Internal(detail) => Refusal::new(500, "internal", "Internal error", detail),
            Deny::ClientCert(why) => why.refusal(),
            edge @ (Deny::TooManyConnections | Deny::HeadTooLarge { .. } | Deny::HeadTimeout) => {
                super::edge::refusal(edge)
            }
        }
    }

    /// A name for logs: the problem slug of the answer.
    pub fn slug(&self) -> &'static str {
        self.clone().refusal().slug
    }
}

impl Refusal {
    /// A route's `direct_response`.
    fn direct(status: u16) -> Self {
        let detail =
            "this route answers with this status (its backend is not configured to be reached)";
        Refusal::new(status, "direct-response", "Answered by the gateway", detail)
    }

    /// The answers of `auth.methods` (basic, API key, external).
    fn auth_method(deny: Deny) -> Self {
        match deny {
            Deny::BasicUnauthorized { realm } => Refusal::new(
                401,
                "unauthorized",
                "Unauthorized",
                "no valid user name and password",
            )
            .header(
                http::header::WWW_AUTHENTICATE,
                format!("Basic realm=\"{realm}\", charset=\"UTF-8\""),
            ),
            Deny::KeyUnauthorized(e) => {
                Refusal::new(401, "unauthorized", "Unauthorized", e.description())
                    .header(http::header::WWW_AUTHENTICATE, "ApiKey")
            }
            Deny::AuthRefused { status, headers } => {
                let (slug, title, detail) = match status {
                    401 => (
                        "unauthorized",
                        "Unauthorized",
                        "the auth service did not authenticate this request",
                    ),
                    _ => (
                        "forbidden",
                        "Forbidden",
                        "the auth service refused this request",
                    ),
                };
                let mut r = Refusal::new(status, slug, title, detail);
                r.headers = headers;
                r
            }
            Deny::AuthUnavailable => Refusal::new(
                503,
                "auth-unavailable",
                "Service unavailable",
                "the auth service did not answer; retry shortly",
            )
            .header(http::header::RETRY_AFTER, "1"),
            other => other.refusal(),
        }
    }

    /// An answer that is not a problem (a redirect, a preflight): no body.
    fn bodyless(status: u16, slug: &'static str, headers: Vec<(HeaderName, String)>) -> Self {
        let mut r = Refusal::new(status, slug, "", "");
        r.headers = headers;
        r.bodyless = true;
        r
    }

    fn body_too_large(max: u64) -> Self {
        Refusal::new(
            413,
            "body-too-large",
            "Request body too large",
            format!("this route accepts request bodies of at most {max} bytes"),
        )
        .close()
    }

    fn value_too_long() -> Self {
        Refusal::new(
            400,
            "value-too-long",
            "Bad request",
            format!(
                "a path segment or header this route is limited by is over {} bytes",
                crate::limit::MAX_VALUE_BYTES
            ),
        )
    }

    fn auth_throttled(wait_ms: u64, by: crate::auth::failures::Throttle) -> Self {
        use crate::auth::failures::Throttle;
        let detail = match by {
            Throttle::Address => "too many requests from this address failed authentication",
            Throttle::User => "too many attempts at this user name failed",
            Throttle::Queued => "this address's credentials are being checked already",
        };
        Refusal::new(
            429,
            "auth-throttled",
            "Too many failed authentications",
            format!("{detail}; retry later"),
        )
        .header(
            http::header::RETRY_AFTER,
            wait_ms.div_ceil(1000).max(1).to_string(),
        )
        .extra("retry_after_ms", json!(wait_ms))
    }

    fn no_slot(policy: &str, slots: u64) -> Self {
        let mut r = Refusal::new(
            429,
            "no-slot",
            "Too many concurrent requests",
            format!("all {slots} \"{policy}\" slots are in use; retry shortly"),
        )
        .header(http::header::RETRY_AFTER, "1");
        let unit = sfv::RefBareItem::String("concurrent-requests");
        let quota = [
            (
                "ratelimit-policy",
                sf_list([(policy, [("q", int(slots)), ("qu", unit)])]),
            ),
            ("ratelimit", sf_list([(policy, [("r", int(0))])])),
        ];
        for (name, value) in quota {
            if let Some(value) = value {
                r = r.header(HeaderName::from_static(name), value);
            }
        }
        r.extra("limit", json!(policy))
            .extra("retry_after_ms", json!(1000))
    }
}

/// The answer to a request that failed after admission: `deny` when a
/// phase of the gateway stopped it (body too large, lease lost), else the
/// Pingora error's kind and side. `None`: nobody is left to answer.
pub fn for_error(e: &Error, deny: Option<Deny>) -> Option<Refusal> {
    use ErrorType::*;
    if let Some(deny) = deny {
        return Some(deny.refusal());
    }
    let upstream = e.esource() == &ErrorSource::Upstream;
    let downstream = e.esource() == &ErrorSource::Downstream;
    Some(match e.etype() {
        HTTPStatus(code) => {
            Refusal::new(*code, "error", "Error", "the gateway refused this request")
        }
        ConnectTimedout | ReadTimedout | WriteTimedout | TLSHandshakeTimedout if upstream => {
            Refusal::gateway_timeout()
        }
        _ if upstream => Refusal::bad_gateway("the upstream refused or reset the connection"),
        ReadTimedout if downstream => {
            crate::metrics::EdgeReason::BodyIdle.count();
            Deny::BodyTimeout.refusal()
        }
        ReadError | WriteError | ConnectionClosed => return None,
        _ if downstream => Refusal::new(
            400,
            "bad-request",
            "Bad request",
            "the request could not be read",
        ),
        _ => Deny::Internal("the gateway failed").refusal(),
    })
}

/// A response the gateway makes itself instead of forwarding.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub status: u16,
    /// A short slug; the problem `type` is `urn:fairgate:problem:<slug>`.
    pub slug: &'static str,
    pub title: &'static str,
    pub detail: String,
    pub headers: Vec<(HeaderName, String)>,
    /// Extra members of the problem object, e.g. `limit`, `retry_after_ms`.
    pub extra: Map<String, Value>,
    /// Close the connection after answering (the request body was not read).
    pub close: bool,
    /// No problem body (a redirect).
    pub bodyless: bool,
}

impl Refusal {
    pub(super) fn new(
        status: u16,
        slug: &'static str,
        title: &'static str,
        detail: impl Into<String>,
    ) -> Self {
        Refusal {
            status,
            slug,
            title,
            detail: detail.into(),
            headers: Vec::new(),
            extra: Map::new(),
            close: false,
            bodyless: false,
        }
    }

    pub fn header(mut self, name: HeaderName, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    pub fn extra(mut self, key: &str, value: Value) -> Self {
        self.extra.insert(key.to_string(), value);
        self
    }

    /// The configured status of a limit's refusal (429 unless its policy
    /// says otherwise); the title follows it.
    fn status(mut self, status: u16) -> Self {
        if status != self.status {
            self.status = status;
            self.title = http::StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("Refused");
        }
        self
    }

    pub fn close(mut self) -> Self {
        self.close = true;
        self
    }

    fn not_found() -> Self {
        Refusal::new(404, "no-route", "No route", "no route matches this request")
    }

    fn bad_gateway(detail: &str) -> Self {
        Refusal::new(502, "upstream-unavailable", "Bad gateway", detail)
    }

    fn gateway_timeout() -> Self {
        Refusal::new(
            504,
            "upstream-timeout",
            "Gateway timeout",
            "the upstream did not answer in time",
        )
    }

    /// 401 with RFC 6750 `WWW-Authenticate`: bare `Bearer` when no token
    /// was sent, `error="invalid_token"` with a description otherwise.
    fn unauthorized(error: crate::auth::AuthError) -> Self {
        let challenge = match error {
            crate::auth::AuthError::Missing => "Bearer".to_string(),
            e => format!(
                "Bearer error=\"invalid_token\", error_description=\"{}\"",
                e.description()
            ),
        };
        Refusal::new(401, "unauthorized", "Unauthorized", error.description())
            .header(http::header::WWW_AUTHENTICATE, challenge)
            .extra("reason", json!(error.reason()))
    }

    /// A bucket's or a concurrency policy's refusal, with its configured status.
    fn limited(deny: Deny) -> Self {
        match deny {
            Deny::RateLimited {
                limit,
                status,
                retry_after_ms,
                reset_after_ms,
                quota,
            } => {
                Refusal::rate_limited(&limit, retry_after_ms, reset_after_ms, quota).status(status)
            }
            Deny::NoSlot {
                policy,
                status,
                slots,
            } => Refusal::no_slot(&policy, slots).status(status),
            other => other.refusal(),
        }
    }

    /// 429 for a refused bucket, with `Retry-After` (whole seconds, rounded
    /// up, at least 1) and a body naming the limit, never a key.
    fn rate_limited(
        limit: &str,
        retry_after_ms: Option<u64>,
        full_after_ms: u64,
        quota: Vec<(HeaderName, String)>,
    ) -> Self {
        let (detail, wait_ms) = match retry_after_ms {
            Some(ms) => (
                format!("the \"{limit}\" limit is exhausted; retry later"),
                ms,
            ),
            None => (
                format!("this request costs more than the \"{limit}\" bucket holds"),
                full_after_ms,
            ),
        };
        let seconds = wait_ms.div_ceil(1000).max(1);
        let mut r = Refusal::new(429, "rate-limited", "Too many requests", detail)
            .header(http::header::RETRY_AFTER, seconds.to_string())
            .extra("limit", json!(limit))
            .extra("retry_after_ms", json!(wait_ms));
        r.headers.extend(quota);
        r
    }

    pub fn body(&self, request_id: &str) -> Bytes {
        self.problem(Some(request_id))
    }

    /// The problem+json body; `request_id` is absent from answers written
    /// before a request exists (the edge's).
    fn problem(&self, request_id: Option<&str>) -> Bytes {
        let mut obj = Map::new();
        obj.insert(
            "type".into(),
            json!(format!("urn:fairgate:problem:{}", self.slug)),
        );
        obj.insert("title".into(), json!(self.title));
        obj.insert("status".into(), json!(self.status));
        obj.insert("detail".into(), json!(self.detail));
        for (k, v) in &self.extra {
            obj.insert(k.clone(), v.clone());
        }
        if let Some(id) = request_id {
            obj.insert("request_id".into(), json!(id));
        }
        Bytes::from(Value::Object(obj).to_string())
    }

    /// The whole HTTP/1.1 answer as bytes, for the edge, which writes
    /// before any session exists: rendered once at start, never typed.
    pub fn wire(&self) -> Vec<u8> {
        let body = match self.bodyless {
            true => Bytes::new(),
            false => self.problem(None),
        };
        let reason = http::StatusCode::from_u16(self.status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("");
        let mut out = format!("HTTP/1.1 {} {reason}\r\n", self.status);
        if !self.bodyless {
            out.push_str("content-type: application/problem+json\r\n");
        }
        for (name, value) in &self.headers {
            out.push_str(&format!("{name}: {value}\r\n"));
        }
        if self.close {
            out.push_str("connection: close\r\n");
        }
        out.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
        let mut out = out.into_bytes();
        out.extend_from_slice(&body);
        out
    }

    /// Writes the whole response to the client: in gRPC form to a gRPC
    /// request, else as a problem.
    pub async fn send(&self, session: &mut Session, request_id: &str) -> Result<()> {
        if let Some(kind) = grpc_content_type(session) {
            // gRPC-Web clients read their own content type back.
            let kind = match kind.starts_with("application/grpc-web") {
                true => kind.to_string(),
                false => "application/grpc".to_string(),
            };
            return self.send_grpc(session, request_id, &kind).await;
        }
        let body = match self.bodyless {
            true => Bytes::new(),
            false => self.body(request_id),
        };
        let mut resp = ResponseHeader::build(self.status, Some(4 + self.headers.len()))?;
        if !self.bodyless {
            resp.insert_header(http::header::CONTENT_TYPE, "application/problem+json")?;
        }
        resp.insert_header(http::header::CONTENT_LENGTH, body.len().to_string())?;
        resp.insert_header("x-request-id", request_id)?;
        for (name, value) in &self.headers {
            resp.append_header(name.clone(), value.as_str())?;
        }
        if self.close {
            resp.insert_header(http::header::CONNECTION, "close")?;
            session.set_keepalive(None);
        }
        session.write_response_header(Box::new(resp), false).await?;
        session.write_response_body(Some(body), true).await?;
        Ok(())
    }
}

impl Refusal {
    /// The gRPC status a client library reports for this answer.
    pub fn grpc_status(&self) -> u8 {
        match self.status {
            400 => 3,                   // INVALID_ARGUMENT
            401 => 16,                  // UNAUTHENTICATED
            403 => 7,                   // PERMISSION_DENIED
            404 => 12,                  // UNIMPLEMENTED
            408 | 504 => 4,             // DEADLINE_EXCEEDED
            413 | 414 | 429 | 431 => 8, // RESOURCE_EXHAUSTED
            502 | 503 => 14,            // UNAVAILABLE
            _ => 13,                    // INTERNAL
        }
    }

    /// A gRPC answer without messages: HTTP 200, then `grpc-status`,
    /// `grpc-message` and the refusal's headers as trailing metadata (on
    /// HTTP/1, gRPC-Web's trailers-only form: all in the head). gRPC clients
    /// read any other HTTP status as UNAVAILABLE and drop the reason.
    async fn send_grpc(&self, session: &mut Session, request_id: &str, kind: &str) -> Result<()> {
        // Values the gateway made; one that is not valid fails the answer.
        let value = |v: &str| {
            http::HeaderValue::from_str(v).map_err(|_| Error::new(ErrorType::InternalError))
        };
        let mut trailers = http::HeaderMap::with_capacity(2 + self.headers.len());
        trailers.insert("grpc-status", value(&self.grpc_status().to_string())?);
        trailers.insert("grpc-message", value(&grpc_message(&self.detail))?);
        for (name, v) in &self.headers {
            trailers.append(name.clone(), value(v)?);
        }
        let mut resp = ResponseHeader::build(200, Some(3))?;
        resp.insert_header(http::header::CONTENT_TYPE, kind)?;
        resp.insert_header("x-request-id", request_id)?;
        // A 200 a shared cache must never keep for the URL.
        resp.insert_header(http::header::CACHE_CONTROL, "no-store")?;
        if self.close {
            session.set_keepalive(None);
        }
        if session.is_http2() {
            // Pingora cannot end an HTTP/2 stream on its head (the flag is
            // dropped), so the status goes in trailers, as gRPC servers send it.
            session.write_response_header(Box::new(resp), false).await?;
            return session.write_response_trailers(trailers).await;
        }
        for (name, value) in &trailers {
            resp.append_header(name.clone(), value.clone())?;
        }
        resp.insert_header(http::header::CONTENT_LENGTH, "0")?;
        session.write_response_header(Box::new(resp), true).await?;
        session.write_response_body(None, true).await
    }
}

/// The content type of a gRPC (or gRPC-Web) request, whose answers must be
/// gRPC answers: `application/grpc`, `application/grpc+proto`, `;...`.
fn grpc_content_type(session: &Session) -> Option<&str> {
    if session.req_header().method != http::Method::POST {
        return None;
    }
    let value = session
        .req_header()
        .headers
        .get(http::header::CONTENT_TYPE)?
        .to_str()
        .ok()?;
    let rest = value.strip_prefix("application/grpc")?;
    let rest = rest.strip_prefix("-web").unwrap_or(rest);
    (rest.is_empty() || rest.starts_with(['+', ';'])).then_some(value)
}

/// `grpc-message` is percent-encoded: bytes outside printable ASCII, and `%`.
fn grpc_message(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        match b {
            b' '..=b'~' if b != b'%' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
#[path = "respond_tests.rs"]
mod tests;
