//! `ProxyHttp` for fairgate: the Pingora phases, each short and delegating.
//! Admission is `admit.rs`, header policy `headers.rs`, the upstream path
//! `route.rs`, the gateway's own answers `respond.rs`. No policy and no
//! status code live here.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::modules::http::HttpModules;
use pingora::prelude::*;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::upstreams::peer::Peer;
use pingora::{ErrorSource, ErrorType};

use super::ctx::Ctx;
use super::headers::{self, X_REQUEST_ID};
use super::respond::{self, Deny};
use super::{admit, cors, directives, quota, route};
use crate::config::{Balance, HashKey};
use crate::limit::Answered;
use crate::state::Shared;

pub struct Gateway {
    pub shared: Arc<Shared>,
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
        ctx.take_request_id(&session.req_header().headers);
        if let Some(t) = &self.shared.telemetry {
            ctx.trace = Some(Box::new(t.start_request(session.req_header())));
        }
        headers::client_ip(session, ctx);
        // A body that stops arriving ends the exchange (and frees its slot).
        session.set_read_timeout(Some(ctx.policy.config.server.body_idle_timeout));
        let Err(deny) = admit::admit(&self.shared, session, ctx).await else {
            return Ok(false);
        };
        let preflight = matches!(deny, Deny::Preflight(_));
        let mut refusal = deny.refusal();
        if !preflight {
            refusal.headers.extend(cors_headers(session, ctx));
        }
        // Never read (and so never drain) a body we refused.
        if has_body(session.req_header()) {
            refusal = refusal.close();
        }
        ctx.refused = Some(refusal.status);
        refusal.send(session, &ctx.request_id).await?;
        Ok(true)
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
        // The slot may have been given to someone else: stop this upload.
        let deny = if ctx.lease.as_ref().is_some_and(|l| l.lost()) {
            Some(Deny::SlotLost)
        } else {
            ctx.route()
                .and_then(|r| r.max_body)
                .filter(|max| ctx.request_body_bytes > *max)
                .map(|max| Deny::BodyTooLarge { max })
        };
        match deny {
            Some(deny) => {
                // The kind names the answer in logs; `ctx.deny` carries it.
                let kind = ErrorType::Custom(deny.slug());
                ctx.deny = Some(deny);
                Error::e_explain(kind, "the gateway stopped the request body")
            }
            None => Ok(()),
        }
    }

    async fn upstream_peer(&self, session: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        let route = ctx
            .route()
            .ok_or_else(|| Error::new(ErrorType::InternalError))?;
        let name = directives::pool(session, ctx, route).to_string();
        let pool = ctx
            .policy
            .pools
            .get(&name)
            .cloned()
            .ok_or_else(|| Error::explain(ErrorType::InternalError, "upstream pool missing"))?;
        let key = match pool.balance() {
            Balance::Hash(HashKey::Tenant) => {
                ctx.identity.as_ref().map(|i| i.tenant.as_str().as_bytes())
            }
            Balance::Hash(HashKey::Header(h)) => {
                session.req_header().headers.get(h).map(|v| v.as_bytes())
            }
            _ => None,
        };
        let mut peer = pool
            .peer(key)
            .ok_or_else(|| Error::explain(ErrorType::ConnectNoRoute, "no upstream target"))?;
        let t = &route.actions.timeouts;
        let options = &mut peer.options;
        if let Some(connect) = t.connect {
            options.connection_timeout = Some(connect);
            options.total_connection_timeout = Some(connect * 2);
        }
        options.read_timeout = t.read.or(options.read_timeout);
        options.write_timeout = t.write.or(options.write_timeout);
        if session.is_upgrade_req() {
            // A WebSocket may be quiet for long: the same idle bound both
            // ways (Pingora fixes the upstream's at connect).
            let idle = Some(ctx.policy.config.server.upgrade_idle_timeout);
            (options.read_timeout, options.write_timeout) = (idle, idle);
        }
        if let Some(total) = t.total {
            // What is left of the total bounds every wait of this attempt.
            let left = total
                .saturating_sub(ctx.started.elapsed())
                .max(Duration::from_millis(1));
            for slot in [
                &mut options.connection_timeout,
                &mut options.total_connection_timeout,
                &mut options.read_timeout,
                &mut options.write_timeout,
            ] {
                *slot = Some(slot.map_or(left, |d| d.min(left)));
            }
        }
        ctx.upstream_started.get_or_insert_with(Instant::now);
        ctx.pool = Some(name);
        ctx.target = peer.address().as_inet().copied();
        ctx.busy = ctx.target.map(|addr| pool.busy(addr));
        ctx.attempts += 1;
        if let Some(trace) = ctx.trace.as_mut() {
            trace.upstream_attempt(&session.req_header().method);
        }
        Ok(Box::new(peer))
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        headers::upstream(session, upstream, ctx)?;
        if let Some(trace) = &ctx.trace {
            trace.propagate(upstream)?;
        }
        let policy = ctx.policy.clone();
        let Some(route) = ctx.route.map(|i| &policy.config.routes[i]) else {
            return Ok(());
        };
        if let Some(uri) = route::upstream_uri(route, &upstream.uri) {
            ctx.forwarded_path = Some(uri.path().to_string());
            upstream.set_uri(uri);
        }
        if let Some(path) = directives::forward(session, ctx, route, upstream)? {
            ctx.forwarded_path = Some(path);
        }
        Ok(())
    }

    async fn response_filter(
        &self,
        session: &mut Session,
        response: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if let Some(route) = ctx.route() {
            directives::respond(session, ctx, route, response)?;
        }
        let cors = cors_headers(session, ctx);
        if ctx.route().is_some_and(|r| r.actions.cors.is_some()) {
            // The gateway answers for CORS on this route, not the upstream.
            let theirs: Vec<http::HeaderName> = response
                .headers
                .keys()
                .filter(|k| k.as_str().starts_with("access-control-"))
                .cloned()
                .collect();
            for name in theirs {
                response.remove_header(&name);
            }
        }
        for (name, value) in cors {
            response.append_header(name, value)?;
        }
        response.insert_header(X_REQUEST_ID, ctx.request_id.as_str())?;
        for (name, value) in &ctx.quota {
            if quota::is_quota_list(name) && response.headers.contains_key(name) {
                let theirs = response.headers.get_all(name).iter().map(|v| v.as_bytes());
                let merged = quota::merge_quota(theirs, value);
                response.insert_header(name.clone(), merged)?;
            } else {
                response.insert_header(name.clone(), value.as_str())?;
            }
        }
        Ok(())
    }

    fn fail_to_connect(
        &self,
        session: &mut Session,
        peer: &HttpPeer,
        ctx: &mut Ctx,
        mut e: Box<Error>,
    ) -> Box<Error> {
        self.upstream_failed(peer, ctx);
        if retry(session, ctx, |r| r.on_connect_failure) {
            e.set_retry(true);
        }
        e
    }

    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        session: &mut Session,
        e: Box<Error>,
        ctx: &mut Ctx,
        client_reused: bool,
    ) -> Box<Error> {
        if std::mem::take(&mut ctx.status_retry) {
            let mut e = e;
            e.set_retry(true);
            return e;
        }
        let upstream = e.esource() == &ErrorSource::Upstream;
        if upstream {
            self.upstream_failed(peer, ctx);
        }
        let mut e = e.more_context(format!("Peer: {peer}"));
        let body_sent = ctx.request_body_bytes > 0 || session.as_ref().retry_buffer_truncated();
        if body_sent || !session.req_header().method.is_idempotent() {
            e.set_retry(false);
        } else {
            e.retry.decide_reuse(client_reused);
        }
        // Only before any answer reached the client, and only the upstream's fault.
        let answered = session.response_written().is_some();
        if upstream && !answered && !body_sent && retry(session, ctx, |r| r.on_reset) {
            e.set_retry(true);
        }
        e
    }

    /// `timeouts.total` also ends a response still streaming past it.
    fn upstream_response_body_filter(
        &self,
        _session: &mut Session,
        _body: &mut Option<Bytes>,
        _end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> Result<Option<Duration>> {
        let total = ctx.route().and_then(|r| r.actions.timeouts.total);
        if total.is_some_and(|t| ctx.started.elapsed() > t) {
            return Error::e_explain(ErrorType::ReadTimedout, "the route's total timeout passed")
                .map_err(|e| e.into_up());
        }
        Ok(None)
    }

    async fn upstream_response_filter(
        &self,
        session: &mut Session,
        response: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        let status = response.status.as_u16();
        ctx.upstream_status = Some(status);
        if status == 101 {
            let idle = ctx.policy.config.server.upgrade_idle_timeout;
            session.set_read_timeout(Some(idle));
        }
        if let (Some(pool), Some(addr)) = (self.pool(ctx), ctx.target) {
            // A gateway-ish failure, not the application's word on a request.
            pool.record(addr, !matches!(status, 502..=504));
        }
        // Nothing of this answer has reached the client: another target may
        // give a better one (`error_while_proxy` marks it for retry).
        let body_sent = ctx.request_body_bytes > 0 || session.as_ref().retry_buffer_truncated();
        if !body_sent && retry(session, ctx, |r| r.on_status.contains(&status)) {
            ctx.status_retry = true;
            return Error::e_explain(ErrorType::HTTPStatus(status), "retried on another target")
                .map_err(|e| e.into_up());
        }
        Ok(())
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy {
        let refusal = respond::for_error(e, ctx.deny.take());
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
                refusal.headers.extend(cors_headers(session, ctx));
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

    /// Always runs: releases the lease, records metrics, writes the access line.
    async fn logging(&self, session: &mut Session, error: Option<&Error>, ctx: &mut Ctx) {
        // The gateway's own decision first: a gRPC refusal is sent as 200.
        let status = ctx
            .refused
            .or_else(|| session.response_written().map(|r| r.status.as_u16()))
            .unwrap_or(0);
        if let Some(lease) = ctx.lease.take() {
            let client_gone = error.map(|e| e.esource() == &ErrorSource::Downstream);
            let reason = lease.end_reason(client_gone, status);
            lease.release(reason).await;
        }
        let elapsed = ctx.started.elapsed();
        let series = ctx.policy.route_metrics(ctx.route);
        series.requests(status).inc();
        series.duration.observe(elapsed.as_secs_f64());
        if let Some(t) = ctx.upstream_started {
            series.upstream.observe(t.elapsed().as_secs_f64());
        }
        access_line(session, ctx, status, error);
        if let Some(trace) = ctx.trace.take() {
            let tenant_attribute = ctx.policy.config.telemetry.tenant_attribute;
            trace.end(crate::telemetry::Outcome {
                method: &session.req_header().method,
                route: ctx.route_label(),
                request_id: &ctx.request_id,
                status,
                decision: ctx.decision.as_str(),
                store: ctx.store_source.map(Answered::as_str),
                tenant: ctx
                    .identity
                    .as_ref()
                    .filter(|_| tenant_attribute)
                    .map(|i| i.tenant.as_str()),
                upstream_addr: ctx.target,
                upstream_status: ctx.upstream_status,
                attempts: ctx.attempts,
                error: error.map(|e| e.etype().as_str()),
            });
        }
    }
}

/// The access line: the fields `log.access.fields` names (an unset field is
/// left out), for every error and refusal and for `log.access.sample` of
/// the rest. Never a query string, a token or a key.
fn access_line(session: &Session, ctx: &Ctx, status: u16, error: Option<&Error>) {
    let log = &ctx.policy.config.access_log;
    let failed = status == 0 || status >= 400 || error.is_some() || ctx.refused.is_some();
    if !failed && !sampled(log.sample, &ctx.request_id) {
        return;
    }
    // Each field's bit is found at build time: nothing is looked up here.
    macro_rules! on {
        ($name:literal) => {
            log.has(const { crate::config::AccessLog::bit($name) })
        };
    }
    let req = session.req_header();
    let header = |name: http::HeaderName| {
        req.headers.get(name).map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .chars()
                .take(256)
                .collect::<String>()
        })
    };
    let elapsed = ctx.started.elapsed().as_secs_f64() * 1000.0;
    let upstream_ms = ctx
        .upstream_started
        .map(|t| t.elapsed().as_secs_f64() * 1000.0);
    let tls = session.digest().and_then(|d| d.ssl_digest.as_ref());
    tracing::info!(
        target: "access",
        route = on!("route").then(|| ctx.route_label()),
        method = on!("method").then(|| tracing::field::display(&req.method)),
        path = on!("path").then(|| req.uri.path()),
        upstream = on!("upstream").then(|| ctx.pool.as_deref().unwrap_or("")),
        upstream_path = on!("upstream_path").then(|| ctx.forwarded_path.as_deref().unwrap_or("")),
        status = on!("status").then_some(status),
        duration_ms = on!("duration_ms").then_some(elapsed),
        tenant = on!("tenant").then(|| ctx.identity.as_ref().map_or("-", |i| i.tenant.as_str())),
        decision = on!("decision").then_some(ctx.decision.as_str()),
        client = on!("client").then(|| ctx.client_ip.map(|ip| ip.to_string()).unwrap_or_default()),
        request_id = on!("request_id").then_some(ctx.request_id.as_str()),
        error = on!("error").then(|| error.map(|e| e.etype().as_str()).unwrap_or("")),
        request_bytes = on!("request_bytes").then_some(ctx.request_body_bytes),
        response_bytes = on!("response_bytes").then(|| session.as_ref().body_bytes_sent() as u64),
        user_agent = on!("user_agent").then(|| header(http::header::USER_AGENT)).flatten(),
        host = on!("host")
            .then(|| {
                header(http::header::HOST).or_else(|| {
                    let a = req.uri.authority()?;
                    Some(a.port().map_or(a.host().to_string(), |p| format!("{}:{p}", a.host())))
                })
            })
            .flatten(),
        upstream_addr = on!("upstream_addr").then(|| ctx.target.map(|a| a.to_string())).flatten(),
        upstream_status = on!("upstream_status").then_some(ctx.upstream_status).flatten(),
        upstream_ms = on!("upstream_ms").then_some(upstream_ms).flatten(),
        gateway_ms = on!("gateway_ms").then(|| elapsed - upstream_ms.unwrap_or(0.0)),
        tls_version = on!("tls_version").then(|| tls.map(|t| t.version.as_ref())).flatten(),
        sni = on!("sni").then(|| headers::tls_facts(session).and_then(|f| f.sni.as_deref())).flatten(),
        trace_id = on!("trace_id")
            .then(|| match &ctx.trace {
                Some(trace) => Some(trace.trace_id()),
                None => req
                    .headers
                    .get("traceparent")
                    .and_then(|v| v.to_str().ok())
                    .and_then(crate::telemetry::trace_id)
                    .map(str::to_string),
            })
            .flatten(),
    );
}

/// Whether a successful request is logged: `sample` of them, chosen by a
/// hash of the request id (so a request id either is in the log or is not).
fn sampled(sample: f64, request_id: &str) -> bool {
    use std::hash::BuildHasher;
    // Keyed afresh per process, so a client choosing its X-Request-Id
    // cannot choose whether it is logged.
    static KEY: std::sync::LazyLock<std::collections::hash_map::RandomState> =
        std::sync::LazyLock::new(Default::default);
    if sample >= 1.0 {
        return true;
    }
    (KEY.hash_one(request_id) as f64 / u64::MAX as f64) < sample
}

/// The CORS headers of the route, for this request's origin.
fn cors_headers(session: &Session, ctx: &Ctx) -> Vec<(http::HeaderName, String)> {
    match ctx.route().and_then(|r| r.actions.cors.as_ref()) {
        Some(c) => cors::actual(c, &session.req_header().headers),
        None => Vec::new(),
    }
}

impl Gateway {
    fn pool(&self, ctx: &Ctx) -> Option<std::sync::Arc<crate::upstream::Pool>> {
        ctx.policy.pools.get(ctx.pool.as_deref()?).cloned()
    }

    /// Passive health: the target of this attempt failed.
    fn upstream_failed(&self, peer: &HttpPeer, ctx: &Ctx) {
        if let (Some(pool), Some(addr)) = (self.pool(ctx), peer.address().as_inet()) {
            pool.record(*addr, false);
        }
    }
}

/// Whether the route's `retries` allow another attempt of this request
/// after a failure of the kind `on` selects (counted when they do).
fn retry(session: &Session, ctx: &Ctx, on: impl Fn(&crate::config::Retries) -> bool) -> bool {
    let Some(route) = ctx.route() else {
        return false;
    };
    let Some(r) = route.actions.retries.as_ref() else {
        return false;
    };
    let method = session.req_header().method.as_str();
    let allowed = on(r) && ctx.attempts < r.attempts && r.methods.iter().any(|m| m == method);
    if allowed {
        crate::metrics::METRICS
            .upstream_retries
            .with_label_values(&[route.name.as_str()])
            .inc();
    }
    allowed
}
