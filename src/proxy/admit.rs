//! Admission: everything that decides whether a request may go upstream,
//! in order: header hygiene → the one routed path → route → body size →
//! authentication → buckets → concurrency slot. A refusal is a typed
//! `Deny`; `respond.rs` alone turns it into a response.

use std::borrow::Cow;

use pingora::proxy::Session;

use super::ctx::Ctx;
use super::headers;
use super::respond::Deny;
use super::target::{self, BadTarget};
use super::{actions, cors, quota};
use crate::auth::{Identity, Verifier};
use crate::limit::{self, SlotAnswer, Source, Subject, Verdict};
use crate::metrics::METRICS;
use crate::routing;
use crate::state::Shared;

/// Admits the request or says why not.
pub async fn admit(shared: &Shared, session: &mut Session, ctx: &mut Ctx) -> Result<(), Deny> {
    headers::clean(session.req_header_mut(), ctx)?;
    let host = route_on_one_path(session, ctx)?;
    super::client_certs::check(session, ctx, &host)?;
    let req = session.req_header();
    let policy = ctx.policy.clone();
    // A CORS preflight is routed as the request it asks about.
    let preflight = cors::preflight_method(&req.method, &req.headers);
    let tls = session.digest().is_some_and(|d| d.ssl_digest.is_some());
    let on = (host.as_str(), tls);
    let matched = pick_route(&policy, req, on, preflight.as_deref()).ok_or(Deny::NoRoute)?;
    ctx.route = Some(matched.index);
    ctx.captures = matched
        .captures
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let route = matched.route;
    let server = &policy.config.server;
    actions::check_address(&server.addresses, &route.actions.addresses, ctx.client_ip)
        .inspect_err(|_| {
            METRICS
                .address_refusals
                .with_label_values(&[route.name.as_str()])
                .inc()
        })?;
    if let (Some(_), Some(cors)) = (&preflight, &route.actions.cors) {
        return Err(Deny::Preflight(cors::preflight(cors, &req.headers)));
    }
    if let Some(redirect) = actions::redirect(session, ctx, route) {
        return Err(redirect);
    }
    let req = session.req_header();
    let exempt_address =
        actions::limit_exempt(&server.addresses, &route.actions.addresses, ctx.client_ip);
    if route.exempt || exempt_address {
        ctx.decision = Verdict::Exempt;
    }
    // Before auth and limits: a body that cannot pass costs no tokens.
    if let Some(max) = route.max_body {
        if headers::content_length(req)
            .flatten()
            .is_some_and(|n| n > max)
        {
            return Err(Deny::BodyTooLarge { max });
        }
    }
    if let Some(name) = &route.method {
        let method = policy
            .methods
            .get(name)
            .ok_or(Deny::Internal("the route's auth method is not loaded"))?
            .clone();
        super::authn::by_method(shared, session, ctx, &method, &host).await?;
    } else if route.auth {
        let verifier = policy
            .verifier
            .as_ref()
            .ok_or(Deny::Internal("authentication is not configured"))?;
        let authorization = req
            .headers
            .get(http::header::AUTHORIZATION)
            .map(|v| v.as_bytes());
        let token = crate::auth::bearer(authorization);
        ctx.identity = match token.and_then(|t| verifier.known(t)) {
            Some(identity) => Some(identity),
            None => Some(authenticate(shared, verifier, token, ctx).await?),
        };
    }
    if !route.exempt {
        if !exempt_address {
            spend(shared, session, ctx).await?;
        }
        take_slot(shared, session, ctx).await?;
        super::queue::take_permit(shared, session, ctx).await?;
    }
    Ok(())
}

/// The route of a request (of the request a preflight asks about, when
/// that route answers CORS; else of the preflight itself).
fn pick_route<'p>(
    policy: &'p crate::state::Policy,
    req: &pingora::http::RequestHeader,
    (host, tls): (&str, bool),
    preflight: Option<&str>,
) -> Option<routing::Matched<'p>> {
    let carried = routing::Carried {
        headers: &req.headers,
        query: req.uri.query(),
        tls,
    };
    let find = |method: &str| {
        policy
            .routes
            .find(&policy.config, host, method, req.uri.path(), &carried)
    };
    preflight
        .and_then(|asked| find(asked).filter(|m| m.route.actions.cors.is_some()))
        .or_else(|| find(req.method.as_str()))
}

/// Reads the request target once and makes its normal form the request's
/// URI (path and the query as sent): what is routed is what is limited,
/// logged and forwarded. Returns the host routes match on.
fn route_on_one_path(session: &mut Session, ctx: &Ctx) -> Result<String, Deny> {
    let req = session.req_header();
    // HTTP/2 names the host in `:authority`, not Host: routed the same,
    // checked the same, and kept as the upstream's Host.
    let authority = match req.headers.contains_key(http::header::HOST) {
        false => req.uri.authority().map(|a| a.as_str().to_string()),
        true => None,
    };
    let named = req
        .headers
        .get(http::header::HOST)
        .map(|h| h.to_str().unwrap_or("\u{0}"))
        .or(authority.as_deref());
    let host = match named {
        Some(h) => Some(target::host_of(h).ok_or(Deny::BadTarget(BadTarget::Host))?),
        None => None,
    };
    let server = &ctx.policy.config.server;
    let rules = target::PathRules {
        escaped_slashes: server.escaped_slashes,
        keep_path_parameters: server.keep_path_parameters,
    };
    let target = target::target(req.raw_path(), req.method.as_str(), host.as_deref(), rules)
        .map_err(Deny::BadTarget)?
        .ok_or(Deny::NoRoute)?;
    // An absolute-form target names the host when there is no Host
    // (HTTP/1.0); the upstream gets it as Host too.
    let (host, set_host) = match (host, target.authority) {
        (None, Some(authority)) => (target::host_of(authority), Some(authority.to_string())),
        (host, _) => (host, authority),
    };
    let unchanged = matches!(target.path, Cow::Borrowed(_))
        && req.raw_path().first() == Some(&b'/')
        && req.uri.path() == target.path;
    if !unchanged {
        let uri = match target.query {
            Some(q) => format!("{}?{q}", target.path),
            None => target.path.into_owned(),
        };
        let uri = uri
            .parse::<http::Uri>()
            .map_err(|_| Deny::BadTarget(BadTarget::Form))?;
        session.req_header_mut().set_uri(uri);
    }
    if let Some(authority) = set_host {
        session
            .req_header_mut()
            .insert_header(http::header::HOST, authority)
            .map_err(|_| Deny::BadTarget(BadTarget::Host))?;
    }
    Ok(host.unwrap_or_default())
}

/// Verifies a token not known to be valid. Each failure spends from the
/// client address's failure bucket; while it is empty, the address is
/// refused without a signature check.
async fn authenticate(
    shared: &Shared,
    verifier: &Verifier,
    token: Option<&str>,
    ctx: &Ctx,
) -> Result<Identity, Deny> {
    super::authn::not_throttled(shared, ctx)?;
    verifier.verify_fresh(token).await.map_err(|e| {
        super::authn::failed(shared, ctx, e.reason());
        Deny::Unauthorized(e)
    })
}

/// Spends the route's buckets in one store call; sets the quota headers
/// either way.
async fn spend(shared: &Shared, session: &Session, ctx: &mut Ctx) -> Result<(), Deny> {
    let policy = ctx.policy.clone();
    let route = ctx.route().ok_or(Deny::NoRoute)?;
    let planned =
        limit::plan(&policy.config, route, &subject(session, ctx)).map_err(Deny::Unkeyable)?;
    if planned.is_empty() {
        return Ok(());
    }
    let span = ctx.trace.as_ref().and_then(|t| t.store_span("store spend"));
    let decision = shared
        .limiter
        .decide(planned, route.cost.get(), policy.generation)
        .await;
    ctx.store_source = Some(decision.via);
    if let Some(span) = span {
        let (via, verdict) = (decision.via.as_str(), decision.verdict().as_str());
        crate::telemetry::end_store_span(span, via, verdict);
    }
    let series = &policy.route_metrics(ctx.route).decisions;
    for ((p, state), counters) in decision.buckets.iter().zip(series) {
        counters[limit::outcome(state.allowed, p.shadow)].inc();
    }
    ctx.decision = decision.verdict();
    if decision.source == Source::Denied {
        return Err(Deny::StoreUnavailable);
    }
    // Allowed: report the tightest bucket; refused: the one that refused.
    let reported = if decision.allowed {
        decision.tightest()
    } else {
        decision.refusing()
    };
    let Some((p, state)) = reported else {
        // Allowed with no bucket to report (`allow` while the store is down).
        return match decision.allowed {
            true => Ok(()),
            false => Err(Deny::Internal("no refusing bucket")),
        };
    };
    let policies: Vec<(&str, &crate::config::Bucket)> = decision
        .buckets
        .iter()
        .map(|(p, _)| (p.limit.as_str(), &p.bucket))
        .collect();
    let quota = quota::quota_headers(
        policy.config.quota_headers,
        &policies,
        (&p.limit, &p.bucket, state.remaining, state.reset_after_ms),
    );
    if decision.allowed {
        ctx.quota = quota;
        return Ok(());
    }
    Err(Deny::RateLimited {
        limit: p.limit.clone(),
        status: p.status,
        retry_after_ms: state.retry_after_ms,
        reset_after_ms: state.reset_after_ms,
        quota,
    })
}

/// Takes a concurrency slot on routes with a policy. Runs after the bucket
/// check, so a refused bucket never takes a slot.
async fn take_slot(shared: &Shared, session: &Session, ctx: &mut Ctx) -> Result<(), Deny> {
    let policy = ctx.policy.clone();
    let index = ctx.route.ok_or(Deny::NoRoute)?;
    let Some(name) = &policy.config.routes[index].concurrency else {
        return Ok(());
    };
    let Some(slots) = policy.config.concurrency.get(name) else {
        return Ok(());
    };
    let key =
        limit::slot_key(&policy.config, slots, &subject(session, ctx)).map_err(Deny::Unkeyable)?;
    match shared.limiter.acquire(slots, key).await {
        SlotAnswer::Granted(lease) => {
            ctx.lease = Some(lease);
            Ok(())
        }
        SlotAnswer::Unchecked => Ok(()),
        SlotAnswer::Full => {
            ctx.decision = Verdict::NoSlot;
            Err(Deny::NoSlot {
                policy: name.clone(),
                status: slots.status,
                slots: slots.slots.get(),
            })
        }
        SlotAnswer::Denied => Err(Deny::StoreUnavailable),
    }
}

/// What scopes can key on for this request.
fn subject<'a>(session: &'a Session, ctx: &'a Ctx) -> Subject<'a> {
    Subject {
        identity: ctx.identity.as_ref(),
        captures: &ctx.captures,
        headers: &session.req_header().headers,
        client_ip: ctx.client_ip,
        client_cert: crate::proxy::headers::client_subject(session).map(|s| s.0.as_str()),
    }
}
