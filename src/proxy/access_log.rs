//! The access line of a request: the fields `log.access.fields` names,
//! every error and refusal and `log.access.sample` of the rest. Never a
//! query string, a token, a cookie or a key.

use pingora::prelude::*;
use pingora::proxy::Session;

use super::ctx::Ctx;
use super::headers;

/// The access line: the fields `log.access.fields` names (an unset field is
/// left out), for every error and refusal and for `log.access.sample` of
/// the rest. Never a query string, a token or a key.
pub fn line(session: &Session, ctx: &Ctx, status: u16, error: Option<&Error>) {
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
        .upstream
        .started
        .map(|t| t.elapsed().as_secs_f64() * 1000.0);
    let tls = session.digest().and_then(|d| d.ssl_digest.as_ref());
    tracing::info!(
        target: "access",
        route = on!("route").then(|| ctx.route_label()),
        method = on!("method").then(|| tracing::field::display(&req.method)),
        path = on!("path").then(|| req.uri.path()),
        upstream = on!("upstream").then(|| ctx.upstream.pool.as_deref().unwrap_or("")),
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
        upstream_addr = on!("upstream_addr").then(|| ctx.upstream.target.map(|a| a.to_string())).flatten(),
        upstream_status = on!("upstream_status").then_some(ctx.upstream.status).flatten(),
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
