//! `ProxyHttp` for fairgate: the Pingora phases, each short and delegating.
//! Admission is `admit.rs`, header policy `headers.rs`, the routed path
//! `target.rs`, the upstream attempt (pool, target, timeouts, retries,
//! passive health) `attempt.rs`, the gateway's own answers `respond.rs`,
//! the access line `access_log.rs`. No policy and no status code live here.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::modules::http::HttpModules;
use pingora::prelude::*;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::{ErrorSource, ErrorType};

use super::ctx::{Ctx, X_REQUEST_ID};
use super::headers;
use super::respond::{self, Deny};
use super::{access_log, actions, admit, attempt, compress, cors, quota, target};
use crate::limit::Answered;
use crate::state::Shared;

pub struct Gateway {
    pub shared: Arc<Shared>,
}

/// Whether the request carries a body the gateway has not read.
fn has_body(req: &RequestHeader) -> bool {
    let declared = headers::content_length(req).is_some_and(|n| n != Some(0));
    declared || req.headers.contains_key(http::header::TRANSFER_ENCODING)
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx::new(self.shared.policy.load_full())
    }

    /// No downstream modules: fairgate compresses in its own filters (for
    /// the routes and answers that ask), and Pingora's default (disabled)
    /// compression module still costs per request.
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
        end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if let Some(chunk) = body {
            ctx.request_body_bytes += chunk.len() as u64;
        }
        let copies = ctx
            .route()
            .and_then(|r| r.actions.mirror.as_ref())
            .is_some_and(|m| m.body);
        if let Some(copy) = ctx.mirror.as_mut() {
            copy.body(body.as_deref().filter(|_| copies), end_of_stream);
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
        attempt::peer(session, ctx)
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
            return headers::identity(session, upstream, ctx);
        };
        if let Some(uri) = target::upstream_uri(route, &upstream.uri) {
            ctx.forwarded_path = Some(uri.path().to_string());
            upstream.set_uri(uri);
        }
        if let Some(path) = actions::forward(session, ctx, route, upstream)? {
            ctx.forwarded_path = Some(path);
        }
        if let Some(code) = ctx.upstream.error_page {
            super::error_page::request(ctx, session, code, upstream)?;
        }
        headers::identity(session, upstream, ctx)?;
        // The copy is of what the upstream gets, made once (not per retry);
        // a copy is never copied again (a mirror that leads back here).
        let copied = session
            .req_header()
            .headers
            .contains_key(super::mirror::MARK);
        let copies = route.actions.mirror.is_some() && ctx.upstream.error_page.is_none() && !copied;
        if copies && ctx.mirror.is_none() {
            ctx.mirror = Some(super::mirror::Copy::of(upstream, session.is_body_empty()));
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
            if let Some(rules) = &route.actions.cookie_rewrite {
                super::cookies::rewrite(rules, response)?;
            }
            if let Some(rule) = &route.actions.location_rewrite {
                super::cookies::locations(rule, response)?;
            }
            actions::respond(session, ctx, route, response)?;
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
        super::authn::set_on_response(ctx, response)?;
        // Not on a `100 Continue` or `103 Early Hints`: on the answer.
        let informational = response.status.is_informational() && response.status != 101;
        if let Some(cookie) = ctx.upstream.cookie.take_if(|_| !informational) {
            response.append_header(http::header::SET_COOKIE, cookie)?;
        }
        for (name, value) in &ctx.quota {
            if quota::is_quota_list(name) && response.headers.contains_key(name) {
                let theirs = response.headers.get_all(name).iter().map(|v| v.as_bytes());
                let merged = quota::merge_quota(theirs, value);
                response.insert_header(name.clone(), merged)?;
            } else {
                response.insert_header(name.clone(), value.as_str())?;
            }
        }
        let policy = ctx.policy.clone();
        let compressed = ctx.route().is_some_and(|r| !r.actions.no_compression);
        if let Some(c) = policy
            .config
            .server
            .compression
            .as_ref()
            .filter(|_| compressed)
        {
            ctx.encoder = compress::start(c, session.req_header(), response)?;
        }
        Ok(())
    }

    /// The answer's body through its encoder, if it is compressed.
    fn response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> Result<Option<Duration>> {
        if let Some(encoder) = ctx.encoder.as_mut() {
            let input = body.as_deref().unwrap_or_default();
            let out = encoder
                .encode(input, end_of_stream)
                .or_err(ErrorType::InternalError, "while compressing the answer")?;
            *body = Some(out);
        }
        Ok(None)
    }

    /// An HTTP/2 upstream's trailers end a compressed body: the encoder's
    /// last bytes are written in their place (a compressed answer of a
    /// listed type carries no trailers a client reads).
    async fn response_trailer_filter(
        &self,
        _session: &mut Session,
        _trailers: &mut http::HeaderMap,
        ctx: &mut Ctx,
    ) -> Result<Option<Bytes>> {
        let Some(mut encoder) = ctx.encoder.take() else {
            return Ok(None);
        };
        let tail = encoder
            .encode(&[], true)
            .or_err(ErrorType::InternalError, "while compressing the answer")?;
        Ok(Some(tail))
    }

    fn fail_to_connect(
        &self,
        session: &mut Session,
        peer: &HttpPeer,
        ctx: &mut Ctx,
        mut e: Box<Error>,
    ) -> Box<Error> {
        attempt::failed(ctx, peer);
        if attempt::retry(session, ctx, |r| r.on_connect_failure) {
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
        attempt::on_error(peer, session, e, ctx, client_reused)
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
        attempt::answered(session, ctx, response.status.as_u16())
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
        if let Some(mut permit) = ctx.upstream.permit.take() {
            // The upstream's time to answer, when it answered under 500
            // (not a WebSocket's 101): what an adaptive limit learns from.
            permit.sample = match ctx.upstream.status {
                Some(s) if s < 500 && s != 101 => ctx.upstream.answered_after,
                _ => None,
            };
            drop(permit);
        }
        if let Some(lease) = ctx.lease.take() {
            let client_gone = error.map(|e| e.esource() == &ErrorSource::Downstream);
            let reason = lease.end_reason(client_gone, status);
            lease.release(reason).await;
        }
        let elapsed = ctx.started.elapsed();
        let series = ctx.policy.route_metrics(ctx.route);
        series.requests(status).inc();
        series.duration.observe(elapsed.as_secs_f64());
        series.exchange(&crate::metrics::Exchange {
            method: &session.req_header().method,
            status,
            seconds: elapsed.as_secs_f64(),
            request_bytes: ctx.request_body_bytes,
            response_bytes: session.as_ref().body_bytes_sent() as u64,
        });
        if let Some(t) = ctx.upstream.started {
            series.upstream.observe(t.elapsed().as_secs_f64());
        }
        access_log::line(session, ctx, status, error);
        if let Some(copy) = ctx.mirror.take().filter(|_| ctx.refused.is_none()) {
            let policy = ctx.policy.clone();
            if let Some((route, mirror)) = ctx
                .route()
                .and_then(|r| Some((r, r.actions.mirror.as_ref()?)))
            {
                super::mirror::send(
                    copy,
                    mirror,
                    policy.pools.get(&mirror.upstream),
                    &route.name,
                );
            }
        }
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
                upstream_addr: ctx.upstream.target,
                upstream_status: ctx.upstream.status,
                attempts: ctx.upstream.count,
                error: error.map(|e| e.etype().as_str()),
            });
        }
    }
}

/// The CORS headers of the route, for this request's origin.
fn cors_headers(session: &Session, ctx: &Ctx) -> Vec<(http::HeaderName, String)> {
    match ctx.route().and_then(|r| r.actions.cors.as_ref()) {
        Some(c) => cors::actual(c, &session.req_header().headers),
        None => Vec::new(),
    }
}
