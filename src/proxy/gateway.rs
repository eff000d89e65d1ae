//! `ProxyHttp` for fairgate: the Pingora phases, each short and delegating.
//! Admission is `admit.rs`, header policy `headers.rs`, the upstream path
//! `route.rs`, the gateway's own answers `respond.rs`. No policy and no
//! status code live here.

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
use super::headers::{self, X_REQUEST_ID};
use super::respond::{self, Deny};
use super::{admit, route};
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
        headers::client_ip(session, ctx);
        // A body that stops arriving ends the exchange (and frees its slot).
        session.set_read_timeout(Some(ctx.policy.config.server.body_idle_timeout));
        let Err(deny) = admit::admit(&self.shared, session, ctx).await else {
            return Ok(false);
        };
        let mut refusal = deny.refusal();
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
        headers::upstream(session, upstream, ctx)?;
        if let Some(uri) = ctx
            .route()
            .and_then(|r| route::upstream_uri(r, &upstream.uri))
        {
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
        let req = session.req_header();
        tracing::info!(
            target: "access",
            route = ctx.route_label(),
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
