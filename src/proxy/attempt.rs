//! One attempt at the upstream: the pool (of a split or canary) and its
//! target (by the pool's balance and hash key), the attempt's timeouts
//! (route overrides, WebSocket idle, what is left of `timeouts.total`),
//! passive health, and whether a failure or an answer is retried on
//! another target. The phases in `gateway.rs` call it; it makes no answer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pingora::prelude::*;
use pingora::proxy::Session;
use pingora::upstreams::peer::Peer;
use pingora::{ErrorSource, ErrorType};

use super::actions;
use super::ctx::Ctx;
use crate::config::{Affinity, Balance, HashKey, Retries, SameSite, Timeouts};
use crate::upstream::{Pins, Pool};

/// The next attempt's peer: its pool, its target and its timeouts.
pub fn peer(session: &Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
    let route = ctx
        .route()
        .ok_or_else(|| Error::new(ErrorType::InternalError))?;
    let name = match (ctx.upstream.error_page, &route.actions.error_pages) {
        (Some(_), Some(pages)) => pages.upstream.clone(),
        _ => match &ctx.upstream.picked {
            Some(picked) => picked.clone(),
            None => actions::pool(session, ctx, route).to_string(),
        },
    };
    let pool = ctx
        .policy
        .pools
        .get(&name)
        .cloned()
        .ok_or_else(|| Error::explain(ErrorType::InternalError, "upstream pool missing"))?;
    let (client_ip, cookie): (Option<String>, Option<String>);
    let key = match pool.balance() {
        Balance::Hash(HashKey::Tenant) => {
            ctx.identity.as_ref().map(|i| i.tenant.as_str().as_bytes())
        }
        Balance::Hash(HashKey::Header(h)) => {
            session.req_header().headers.get(h).map(|v| v.as_bytes())
        }
        Balance::Hash(HashKey::ClientIp) => {
            client_ip = ctx.client_ip.map(|ip| ip.to_string());
            client_ip.as_deref().map(str::as_bytes)
        }
        Balance::Hash(HashKey::Uri) => {
            let uri = &session.req_header().uri;
            uri.path_and_query().map(|pq| pq.as_str().as_bytes())
        }
        Balance::Hash(HashKey::Cookie(name)) => {
            cookie = crate::auth::external::cookie(&session.req_header().headers, name);
            cookie.as_deref().map(str::as_bytes)
        }
        _ => None,
    };
    // A retry goes to another target while there is one in rotation.
    let avoid = match ctx.upstream.count {
        0 => None,
        _ => ctx.upstream.target,
    };
    let (pins, pinned, unpin) = pinned(session, ctx, &pool, avoid);
    let mut peer = pool
        .peer(key, avoid, pinned)
        .ok_or_else(|| Error::explain(ErrorType::ConnectNoRoute, "no upstream target"))?;
    let upgrade = session
        .is_upgrade_req()
        .then_some(ctx.policy.config.server.upgrade_idle_timeout);
    let left = route
        .actions
        .timeouts
        .total
        .map(|total| total.saturating_sub(ctx.started.elapsed()));
    timeouts(&mut peer, &route.actions.timeouts, upgrade, left);
    let attempts = &mut ctx.upstream;
    attempts.unpinned |= unpin;
    attempts.started.get_or_insert_with(Instant::now);
    attempts.pool = Some(name);
    attempts.target = peer.address().as_inet().copied();
    // A client without its target's cookie (none, another pool's, a
    // target gone or moved from) is given this one's.
    attempts.cookie = match (pool.affinity(), pins, attempts.target) {
        (Some(a), Some(pins), Some(addr)) if pinned != Some(addr) => {
            let tls = session.digest().is_some_and(|d| d.ssl_digest.is_some());
            pins.value(addr).map(|v| set_cookie(a, v, tls))
        }
        _ => None,
    };
    attempts.busy = attempts.target.map(|addr| pool.busy(addr));
    attempts.count += 1;
    if let Some(trace) = ctx.trace.as_mut() {
        trace.upstream_attempt(&session.req_header().method);
    }
    Ok(Box::new(peer))
}

/// The pool's cookie values (with affinity), the target the client's
/// cookie names, and whether a failed attempt at it moves the client
/// (`change_on_failure`) for the rest of the request.
fn pinned(
    session: &Session,
    ctx: &Ctx,
    pool: &Pool,
    avoid: Option<std::net::SocketAddr>,
) -> (Option<Arc<Pins>>, Option<std::net::SocketAddr>, bool) {
    let (Some(a), false) = (pool.affinity(), ctx.upstream.unpinned) else {
        return (pool.affinity().map(|_| pool.pins()), None, false);
    };
    let pins = pool.pins();
    let headers = &session.req_header().headers;
    let pinned = cookies(headers, &a.cookie).find_map(|v| pins.target(v));
    let moved = a.change_on_failure && pinned.is_some() && pinned == avoid;
    (Some(pins), pinned.filter(|_| !moved), moved)
}

/// Every value of cookie `name` the request carries, in order (a browser
/// sends an older one of another path or domain too).
fn cookies<'a>(headers: &'a http::HeaderMap, name: &'a str) -> impl Iterator<Item = &'a str> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(move |pair| {
            let (k, v) = pair.trim().split_once('=')?;
            (k == name).then_some(v)
        })
}

/// The `Set-Cookie` value that pins a client to the target `value` names;
/// `Secure` also on a TLS connection, as ingress-nginx does.
fn set_cookie(a: &Affinity, value: &str, tls: bool) -> String {
    let mut out = format!("{}={value}; Path={}", a.cookie, a.path);
    if let Some(domain) = &a.domain {
        out.push_str(&format!("; Domain={domain}"));
    }
    if let Some(age) = a.max_age {
        out.push_str(&format!("; Max-Age={}", age.as_secs()));
    }
    out.push_str("; HttpOnly");
    if a.secure || tls {
        out.push_str("; Secure");
    }
    match a.same_site {
        Some(SameSite::Lax) => out.push_str("; SameSite=Lax"),
        Some(SameSite::Strict) => out.push_str("; SameSite=Strict"),
        Some(SameSite::None) => out.push_str("; SameSite=None"),
        None => {}
    }
    out
}

/// The route's timeouts over the pool's; an upgrade's idle bound both ways
/// (Pingora fixes the upstream's at connect); what is `left` of
/// `timeouts.total` bounds every wait of this attempt.
fn timeouts(peer: &mut HttpPeer, t: &Timeouts, upgrade: Option<Duration>, left: Option<Duration>) {
    let options = &mut peer.options;
    if let Some(connect) = t.connect {
        options.connection_timeout = Some(connect);
        options.total_connection_timeout = Some(connect * 2);
    }
    options.read_timeout = t.read.or(options.read_timeout);
    options.write_timeout = t.write.or(options.write_timeout);
    if let Some(idle) = upgrade {
        (options.read_timeout, options.write_timeout) = (Some(idle), Some(idle));
    }
    if let Some(left) = left {
        let left = left.max(Duration::from_millis(1));
        for slot in [
            &mut options.connection_timeout,
            &mut options.total_connection_timeout,
            &mut options.read_timeout,
            &mut options.write_timeout,
        ] {
            *slot = Some(slot.map_or(left, |d| d.min(left)));
        }
    }
}

fn pool(ctx: &Ctx) -> Option<Arc<Pool>> {
    ctx.policy.pools.get(ctx.upstream.pool.as_deref()?).cloned()
}

/// Passive health: the target of this attempt failed.
pub fn failed(ctx: &Ctx, peer: &HttpPeer) {
    if let (Some(pool), Some(addr)) = (pool(ctx), peer.address().as_inet()) {
        pool.record(*addr, false);
    }
}

/// The upstream answered with `status`: passive health, the idle bound of
/// an upgraded connection, and a retry on another target if the route
/// retries this status and nothing of the request body has gone.
pub fn answered(session: &mut Session, ctx: &mut Ctx, status: u16) -> Result<()> {
    ctx.upstream.status = Some(status);
    ctx.upstream.answered_after = ctx.upstream.started.map(|t| t.elapsed());
    if status == 101 {
        let idle = ctx.policy.config.server.upgrade_idle_timeout;
        session.set_read_timeout(Some(idle));
    }
    if let (Some(pool), Some(addr)) = (pool(ctx), ctx.upstream.target) {
        // A gateway-ish failure, not the application's word on a request.
        pool.record(addr, !matches!(status, 502..=504));
    }
    // Nothing of this answer has reached the client: another target may
    // give a better one (`on_error` marks it for retry).
    let body_sent = ctx.request_body_bytes > 0 || session.as_ref().retry_buffer_truncated();
    if !body_sent && super::error_page::wanted(session, ctx, status).is_some() {
        ctx.upstream.error_page = Some(status);
        ctx.upstream.status_retry = true;
        return Error::e_explain(ErrorType::HTTPStatus(status), "sent to the error pages")
            .map_err(|e| e.into_up());
    }
    if !body_sent && retry(session, ctx, |r| r.on_status.contains(&status)) {
        ctx.upstream.status_retry = true;
        return Error::e_explain(ErrorType::HTTPStatus(status), "retried on another target")
            .map_err(|e| e.into_up());
    }
    Ok(())
}

/// An error while proxying: passive health, and whether Pingora may try
/// again (idempotent requests whose body has not gone, before any answer).
pub fn on_error(
    peer: &HttpPeer,
    session: &mut Session,
    e: Box<Error>,
    ctx: &mut Ctx,
    client_reused: bool,
) -> Box<Error> {
    if std::mem::take(&mut ctx.upstream.status_retry) {
        let mut e = e;
        e.set_retry(true);
        return e;
    }
    let upstream = e.esource() == &ErrorSource::Upstream;
    if upstream {
        failed(ctx, peer);
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

/// Whether the route's `retries` allow another attempt of this request
/// after a failure of the kind `on` selects (counted when they do).
pub fn retry(session: &Session, ctx: &Ctx, on: impl Fn(&Retries) -> bool) -> bool {
    let Some(route) = ctx.route() else {
        return false;
    };
    let Some(r) = route.actions.retries.as_ref() else {
        return false;
    };
    let method = session.req_header().method.as_str();
    let allowed = on(r) && ctx.upstream.count < r.attempts && r.methods.iter().any(|m| m == method);
    if allowed {
        crate::metrics::METRICS
            .upstream_retries
            .with_label_values(&[route.name.as_str()])
            .inc();
    }
    allowed
}
