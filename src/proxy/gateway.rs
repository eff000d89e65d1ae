//! `ProxyHttp` for fairgate. Each phase reads the request's policy snapshot
//! and calls into route, auth and limit modules; policy decisions live there,
//! error responses live in `respond.rs`.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::modules::http::HttpModules;
use pingora::prelude::*;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::{ErrorSource, ErrorType};

use super::ctx::Ctx;
use super::respond::{self, Refusal};
use super::route;
use super::Shared;
use crate::limit::{self, SlotAnswer, Source, Subject};
use crate::metrics::{status_class, METRICS};

pub struct Gateway {
    pub shared: Arc<Shared>,
}

const X_REQUEST_ID: &str = "x-request-id";

impl Gateway {
    /// Everything that decides whether a request may go upstream. An `Err`
    /// is the gateway's own answer.
    async fn admit(&self, session: &mut Session, ctx: &mut Ctx) -> Result<(), Refusal> {
        let req = session.req_header();
        let path = route::normalize(req.uri.path())
            .filter(|p| route::path_is_safe(p))
            .ok_or_else(|| {
                Refusal::new(
                    400,
                    "bad-path",
                    "Bad request path",
                    "the path has dot segments or a malformed escape",
                )
            })?;
        let host = req
            .headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .or(req.uri.host())
            .map(route::host_of)
            .unwrap_or_default();
        let policy = ctx.policy.clone();
        let matched = route::find(&policy.config, &host, req.method.as_str(), &path)
            .ok_or_else(Refusal::not_found)?;
        ctx.route = Some(matched.index);
        if let std::borrow::Cow::Owned(p) = &path {
            ctx.normalized_path = Some(p.clone());
        }
        ctx.captures = matched
            .captures
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let route = matched.route;
        if route.exempt {
            ctx.decision = "exempt";
        }
        // Before auth and limits: a body that cannot pass costs no tokens.
        if let Some(max) = route.max_body {
            let declared = req
                .headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            if declared.is_some_and(|n| n > max) {
                return Err(body_too_large(max));
            }
        }
        if route.auth {
            let verifier = policy.verifier.as_ref().ok_or_else(|| {
                Refusal::new(
                    500,
                    "internal",
                    "Internal error",
                    "authentication is not configured",
                )
            })?;
            let authorization = req
                .headers
                .get(http::header::AUTHORIZATION)
                .map(|v| v.as_bytes());
            match verifier.verify(authorization).await {
                Ok(identity) => ctx.identity = Some(identity),
                Err(e) => {
                    METRICS.auth_failures.with_label_values(&[e.reason()]).inc();
                    return Err(Refusal::unauthorized(e));
                }
            }
        }
        if !route.exempt {
            self.limit(session, ctx).await?;
            self.take_slot(session, ctx).await?;
        }
        Ok(())
    }

    /// Spends the route's buckets; sets the quota headers either way.
    async fn limit(&self, session: &Session, ctx: &mut Ctx) -> Result<(), Refusal> {
        let policy = ctx.policy.clone();
        let route = ctx.route().ok_or_else(Refusal::not_found)?;
        let subject = subject(session, ctx);
        let planned = limit::plan(&policy.config, route, &subject).map_err(unkeyable)?;
        if planned.is_empty() {
            return Ok(());
        }
        let decision = self
            .shared
            .limiter
            .decide(planned, route.cost, policy.generation)
            .await;
        let route_name = route.name.as_str();
        for (p, state) in &decision.buckets {
            let outcome = match (state.allowed, p.spend.shadow) {
                (true, _) => "allowed",
                (false, true) => "shadow_limited",
                (false, false) => "limited",
            };
            METRICS
                .decisions
                .with_label_values(&[route_name, &p.limit, outcome])
                .inc();
        }
        ctx.decision = match (decision.allowed, decision.source) {
            (_, Source::Denied) => "store_unavailable",
            (true, Source::Allowed) => "allowed_unchecked",
            (true, Source::Local) => "allowed_local",
            (false, Source::Local) => "limited_local",
            (true, _) => "allowed",
            (false, _) => "limited",
        };
        if decision.source == Source::Denied {
            return Err(Refusal::new(
                503,
                "store-unavailable",
                "Service unavailable",
                "the rate-limit store is unavailable",
            )
            .header(http::header::RETRY_AFTER, "1"));
        }
        // Allowed: report the tightest bucket; refused: the one that refused.
        let mode = policy.config.quota_headers;
        let reported = if decision.allowed {
            decision.tightest()
        } else {
            decision.refusing()
        };
        let Some((p, state)) = reported else {
            // Allowed with no bucket to report (`allow` while the store is down).
            return if decision.allowed {
                Ok(())
            } else {
                Err(Refusal::new(
                    500,
                    "internal",
                    "Internal error",
                    "no refusing bucket",
                ))
            };
        };
        let quota = respond::quota_headers(
            mode,
            &p.limit,
            &p.bucket,
            state.remaining,
            state.reset_after_ms,
        );
        if decision.allowed {
            ctx.quota = quota;
            return Ok(());
        }
        Err(Refusal::rate_limited(
            &p.limit,
            state.retry_after_ms,
            state.reset_after_ms,
            quota,
        ))
    }

    /// Takes a concurrency slot on routes with a policy. Runs after the
    /// bucket check, so a refused bucket never takes a slot.
    async fn take_slot(&self, session: &Session, ctx: &mut Ctx) -> Result<(), Refusal> {
        let policy = ctx.policy.clone();
        let index = ctx.route.ok_or_else(Refusal::not_found)?;
        let Some(name) = &policy.config.routes[index].concurrency else {
            return Ok(());
        };
        let Some(slots) = policy.config.concurrency.get(name) else {
            return Ok(());
        };
        let subject = subject(session, ctx);
        let key = limit::slot_key(&policy.config, slots, &subject).map_err(unkeyable)?;
        match self.shared.limiter.acquire(slots, key).await {
            SlotAnswer::Granted(lease) => {
                ctx.lease = Some(lease);
                Ok(())
            }
            SlotAnswer::Unchecked => Ok(()),
            SlotAnswer::Full => {
                ctx.decision = "no_slot";
                Err(Refusal::new(
                    429,
                    "no-slot",
                    "Too many concurrent requests",
                    format!(
                        "all {} \"{name}\" slots are in use; retry shortly",
                        slots.slots
                    ),
                )
                .header(http::header::RETRY_AFTER, "1")
                .header(
                    http::HeaderName::from_static("ratelimit-policy"),
                    format!("\"{name}\";q={};qu=\"concurrent-requests\"", slots.slots),
                )
                .header(
                    http::HeaderName::from_static("ratelimit"),
                    format!("\"{name}\";r=0"),
                )
                .extra("limit", serde_json::json!(name))
                .extra("retry_after_ms", serde_json::json!(1000)))
            }
            SlotAnswer::Denied => Err(Refusal::new(
                503,
                "store-unavailable",
                "Service unavailable",
                "the rate-limit store is unavailable",
            )
            .header(http::header::RETRY_AFTER, "1")),
        }
    }

    /// The client address: the peer, or when the peer is a trusted proxy the
    /// right-most untrusted address of `X-Forwarded-For`.
    fn client_ip(&self, session: &Session, ctx: &mut Ctx) {
        // Canonical: an IPv4 peer on a dual-stack listener is `::ffff:a.b.c.d`.
        let peer = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip().to_canonical());
        let trusted = &ctx.policy.config.server.trusted_proxies;
        let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
        ctx.client_ip = peer;
        ctx.peer_trusted = peer.as_ref().is_some_and(is_trusted);
        if !ctx.peer_trusted {
            return;
        }
        let chain = session
            .req_header()
            .headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|s| s.trim().to_string())
            .collect::<Vec<_>>();
        for hop in chain.iter().rev() {
            match hop.parse::<IpAddr>().map(|ip| ip.to_canonical()) {
                Ok(ip) => {
                    ctx.client_ip = Some(ip);
                    if !is_trusted(&ip) {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
    }
}

fn unkeyable(why: limit::Unkeyable) -> Refusal {
    match why {
        limit::Unkeyable::MissingClaim => {
            Refusal::unauthorized(crate::auth::AuthError::MissingClaim)
        }
        limit::Unkeyable::ValueTooLong => Refusal::new(
            400,
            "value-too-long",
            "Bad request",
            format!(
                "a path segment or header this route is limited by is over {} bytes",
                limit::MAX_VALUE_BYTES
            ),
        ),
    }
}

/// Whether the request carries a body the gateway has not read.
fn has_body(req: &RequestHeader) -> bool {
    let declared = req
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim() != "0");
    declared || req.headers.contains_key(http::header::TRANSFER_ENCODING)
}

/// What scopes can key on for this request.
fn subject<'a>(session: &'a Session, ctx: &'a Ctx) -> Subject<'a> {
    Subject {
        identity: ctx.identity.as_ref(),
        captures: &ctx.captures,
        headers: &session.req_header().headers,
        client_ip: ctx.client_ip,
    }
}

fn body_too_large(max: u64) -> Refusal {
    Refusal::new(
        413,
        "body-too-large",
        "Request body too large",
        format!("this route accepts request bodies of at most {max} bytes"),
    )
    .close()
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

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx::new(self.shared.policy.load_full())
    }

    /// No downstream modules: fairgate does not compress, and Pingora's
    /// default (disabled) compression module still costs per request.
    fn init_downstream_modules(&self, _modules: &mut HttpModules) {}

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        ctx.request_id = match session.req_header().headers.get(X_REQUEST_ID) {
            Some(v) if request_id_ok(v.as_bytes()) => {
                String::from_utf8_lossy(v.as_bytes()).into_owned()
            }
            _ => new_request_id(),
        };
        self.client_ip(session, ctx);
        match self.admit(session, ctx).await {
            Ok(()) => Ok(false),
            Err(refusal) => {
                ctx.refused = Some(refusal.status);
                // Never read (and so never drain) a body we refused.
                let refusal = if has_body(session.req_header()) {
                    refusal.close()
                } else {
                    refusal
                };
                refusal.send(session, &ctx.request_id).await?;
                Ok(true)
            }
        }
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        _end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if let Some(chunk) = body {
            ctx.request_body_bytes += chunk.len() as u64;
        }
        if ctx.lease.as_ref().is_some_and(|l| l.lost()) {
            // The slot may have been given to someone else: stop this upload.
            return Error::e_explain(
                ErrorType::Custom("lease lost"),
                "slot lease lost mid-upload",
            );
        }
        if let Some(max) = ctx.route().and_then(|r| r.max_body) {
            if ctx.request_body_bytes > max {
                return Error::e_explain(ErrorType::HTTPStatus(413), "request body over max_body");
            }
        }
        Ok(())
    }

    async fn upstream_peer(&self, _session: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        let route = ctx
            .route()
            .ok_or_else(|| Error::new(ErrorType::InternalError))?;
        let pool = ctx
            .policy
            .pools
            .get(&route.upstream)
            .ok_or_else(|| Error::explain(ErrorType::InternalError, "upstream pool missing"))?;
        let peer = pool
            .peer()
            .ok_or_else(|| Error::explain(ErrorType::ConnectNoRoute, "no upstream target"))?;
        ctx.upstream_started.get_or_insert_with(Instant::now);
        Ok(Box::new(peer))
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        let config = &ctx.policy.config;
        let ids = &config.identity_headers;
        for name in [&ids.tenant, &ids.user, &ids.plan] {
            upstream.remove_header(name);
        }
        if let Some(identity) = &ctx.identity {
            upstream.insert_header(ids.tenant.clone(), identity.tenant.as_str())?;
            upstream.insert_header(ids.plan.clone(), identity.plan.as_str())?;
            if let Some(user) = &identity.user {
                // User ids may hold any bytes a JWT string can; send only header-safe ones.
                if let Ok(value) = http::HeaderValue::from_str(user) {
                    upstream.insert_header(ids.user.clone(), value)?;
                }
            }
        }
        let route = ctx
            .route()
            .ok_or_else(|| Error::new(ErrorType::InternalError))?;
        if !route.forward_authorization {
            upstream.remove_header(&http::header::AUTHORIZATION);
        }

        let peer = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip().to_string())
            .unwrap_or_default();
        let forwarded_for = match upstream.headers.get("x-forwarded-for") {
            Some(v) if ctx.peer_trusted => {
                format!("{}, {peer}", String::from_utf8_lossy(v.as_bytes()))
            }
            _ => peer,
        };
        upstream.insert_header("x-forwarded-for", forwarded_for)?;
        let tls = session.digest().is_some_and(|d| d.ssl_digest.is_some());
        if !(ctx.peer_trusted && upstream.headers.contains_key("x-forwarded-proto")) {
            upstream.insert_header("x-forwarded-proto", if tls { "https" } else { "http" })?;
        }
        if !(ctx.peer_trusted && upstream.headers.contains_key("x-forwarded-host")) {
            let host = session
                .req_header()
                .headers
                .get(http::header::HOST)
                .cloned()
                .or_else(|| {
                    session
                        .req_header()
                        .uri
                        .authority()
                        .and_then(|a| http::HeaderValue::from_str(a.as_str()).ok())
                });
            match host {
                Some(h) => upstream.insert_header("x-forwarded-host", h)?,
                None => {
                    upstream.remove_header("x-forwarded-host");
                }
            }
        }
        upstream.insert_header(X_REQUEST_ID, ctx.request_id.as_str())?;

        // The path the upstream gets: the normal form routed on, less the
        // route's `strip_prefix`; the URI is rebuilt only when it changed.
        let routed = ctx.normalized_path.as_deref();
        let path = routed.unwrap_or(upstream.uri.path());
        let stripped = route.strip_prefix.as_deref().and_then(|prefix| {
            let rest = path.strip_prefix(prefix)?;
            match rest {
                "" => Some("/"),
                r if r.starts_with('/') => Some(r),
                _ => None,
            }
        });
        if routed.is_some() || stripped.is_some() {
            let path = stripped.unwrap_or(path);
            let uri = match upstream.uri.query() {
                Some(q) => format!("{path}?{q}"),
                None => path.to_string(),
            };
            let uri = uri
                .parse()
                .map_err(|_| Error::explain(ErrorType::InternalError, "bad upstream uri"))?;
            upstream.set_uri(uri);
        }
        Ok(())
    }

    async fn response_filter(
        &self,
        _session: &mut Session,
        response: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        response.insert_header(X_REQUEST_ID, ctx.request_id.as_str())?;
        for (name, value) in &ctx.quota {
            response.insert_header(name.clone(), value.as_str())?;
        }
        Ok(())
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy {
        use ErrorType::*;
        let refusal = match e.etype() {
            HTTPStatus(413) => {
                let max = ctx.route().and_then(|r| r.max_body).unwrap_or(0);
                Some(body_too_large(max))
            }
            Custom("lease lost") => Some(Refusal::new(
                503,
                "slot-lost",
                "Service unavailable",
                "this upload lost its concurrency slot and was stopped; retry it",
            )),
            HTTPStatus(code) => Some(Refusal::new(
                *code,
                "error",
                "Error",
                "the gateway refused this request",
            )),
            ConnectTimedout | ReadTimedout | WriteTimedout | TLSHandshakeTimedout
                if e.esource() == &ErrorSource::Upstream =>
            {
                Some(Refusal::gateway_timeout())
            }
            _ if e.esource() == &ErrorSource::Upstream => Some(Refusal::bad_gateway(
                "the upstream refused or reset the connection",
            )),
            ReadError | WriteError | ConnectionClosed => None,
            _ if e.esource() == &ErrorSource::Downstream => Some(Refusal::new(
                400,
                "bad-request",
                "Bad request",
                "the request could not be read",
            )),
            _ => Some(Refusal::new(
                500,
                "internal",
                "Internal error",
                "the gateway failed",
            )),
        };
        // Once the response has started, nothing but closing is possible.
        if let Some(written) = session.response_written() {
            return FailToProxy {
                error_code: written.status.as_u16(),
                can_reuse_downstream: false,
            };
        }
        let code = match refusal {
            Some(refusal) => {
                ctx.refused = Some(refusal.status);
                let mut refusal = refusal.close();
                refusal.headers.extend(ctx.quota.iter().cloned());
                if let Err(err) = refusal.send(session, &ctx.request_id).await {
                    tracing::debug!(error = %err, "could not send error response");
                }
                refusal.status
            }
            None => 0,
        };
        FailToProxy {
            error_code: code,
            can_reuse_downstream: false,
        }
    }

    /// A client that hangs up is routine, not a gateway fault: its access-log
    /// line already says so (`error`), so Pingora's ERROR line is dropped.
    fn suppress_error_log(&self, _session: &Session, _ctx: &Ctx, error: &Error) -> bool {
        error.esource() == &ErrorSource::Downstream
            && matches!(
                error.etype(),
                ErrorType::ConnectionClosed | ErrorType::ReadError | ErrorType::WriteError
            )
    }

    /// How Pingora names a request in its own error logs: method and path,
    /// never the query string, which may carry tokens.
    fn request_summary(&self, session: &Session, _ctx: &Ctx) -> String {
        let req = session.req_header();
        format!("{} {}", req.method, req.uri.path())
    }

    async fn logging(&self, session: &mut Session, error: Option<&Error>, ctx: &mut Ctx) {
        let status = session
            .response_written()
            .map(|r| r.status.as_u16())
            .or(ctx.refused)
            .unwrap_or(0);
        if let Some(lease) = ctx.lease.take() {
            let reason = match error {
                _ if lease.lost() => "expired_renewal",
                Some(e) if e.esource() == &ErrorSource::Downstream => "client_abort",
                Some(_) => "error",
                None if status >= 500 || status == 0 => "error",
                None => "complete",
            };
            lease.release(reason).await;
        }
        let route = ctx.route_label();
        let elapsed = ctx.started.elapsed();
        METRICS
            .requests
            .with_label_values(&[route, status_class(status)])
            .inc();
        METRICS
            .request_duration
            .with_label_values(&[route])
            .observe(elapsed.as_secs_f64());
        if let Some(t) = ctx.upstream_started {
            METRICS
                .upstream_duration
                .with_label_values(&[route])
                .observe(t.elapsed().as_secs_f64());
        }
        let req = session.req_header();
        tracing::info!(
            target: "access",
            route,
            method = %req.method,
            path = req.uri.path(),
            status,
            duration_ms = elapsed.as_secs_f64() * 1000.0,
            tenant = ctx.identity.as_ref().map_or("-", |i| i.tenant.as_str()),
            decision = ctx.decision,
            client = %ctx.client_ip.map(|ip| ip.to_string()).unwrap_or_default(),
            request_id = %ctx.request_id,
            error = error.map(|e| e.etype().as_str()).unwrap_or(""),
        );
    }
}
