//! The one place gateway-made errors become a status, headers and an
//! `application/problem+json` body (RFC 9457). Bodies never echo a token,
//! name a key or another tenant.

use bytes::Bytes;
use http::header::HeaderName;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use pingora::Result;
use serde_json::{json, Map, Value};

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
}

impl Refusal {
    pub fn new(
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

    pub fn close(mut self) -> Self {
        self.close = true;
        self
    }

    pub fn not_found() -> Self {
        Refusal::new(404, "no-route", "No route", "no route matches this request")
    }

    pub fn bad_gateway(detail: &str) -> Self {
        Refusal::new(502, "upstream-unavailable", "Bad gateway", detail)
    }

    pub fn gateway_timeout() -> Self {
        Refusal::new(
            504,
            "upstream-timeout",
            "Gateway timeout",
            "the upstream did not answer in time",
        )
    }

    /// 401 with RFC 6750 `WWW-Authenticate`: bare `Bearer` when no token
    /// was sent, `error="invalid_token"` with a description otherwise.
    pub fn unauthorized(error: crate::auth::AuthError) -> Self {
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

    /// 429 for a refused bucket, with `Retry-After` (whole seconds, rounded
    /// up, at least 1) and a body naming the limit, never a key.
    pub fn rate_limited(
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
        obj.insert("request_id".into(), json!(request_id));
        Bytes::from(Value::Object(obj).to_string())
    }

    /// Writes the whole response to the client.
    pub async fn send(&self, session: &mut Session, request_id: &str) -> Result<()> {
        let body = self.body(request_id);
        let mut resp = ResponseHeader::build(self.status, Some(4 + self.headers.len()))?;
        resp.insert_header(http::header::CONTENT_TYPE, "application/problem+json")?;
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

/// Quota headers for one bucket (SPEC section 5): IETF draft fields and/or
/// the legacy `X-RateLimit-*` trio.
pub fn quota_headers(
    mode: crate::config::QuotaHeaders,
    limit: &str,
    bucket: &crate::config::Bucket,
    remaining: u64,
    reset_after_ms: u64,
) -> Vec<(HeaderName, String)> {
    use crate::config::QuotaHeaders;
    let full_window = (bucket.capacity * bucket.rate.interval_us()).div_ceil(1_000_000);
    let reset = reset_after_ms.div_ceil(1000);
    let mut out = Vec::new();
    if matches!(mode, QuotaHeaders::Ietf | QuotaHeaders::Both) {
        out.push((
            HeaderName::from_static("ratelimit-policy"),
            format!("\"{limit}\";q={};w={full_window}", bucket.capacity),
        ));
        out.push((
            HeaderName::from_static("ratelimit"),
            format!("\"{limit}\";r={remaining};t={reset}"),
        ));
    }
    if matches!(mode, QuotaHeaders::Legacy | QuotaHeaders::Both) {
        out.push((
            HeaderName::from_static("x-ratelimit-limit"),
            bucket.capacity.to_string(),
        ));
        out.push((
            HeaderName::from_static("x-ratelimit-remaining"),
            remaining.to_string(),
        ));
        out.push((
            HeaderName::from_static("x-ratelimit-reset"),
            reset.to_string(),
        ));
    }
    out
}
