//! Admission's authentication by a method of `auth.methods` (a route's
//! `auth: NAME`): an external service's answer, basic credentials or an
//! API key, each turned into the request's identity by the identity map.
//! Basic and API-key failures spend the address's failure bucket as bad
//! tokens do; a basic failure also spends its user name's, and a basic
//! check waits its address's one turn in the check queue.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use pingora::proxy::Session;

use super::ctx::Ctx;
use super::respond::Deny;
use crate::auth::api_keys::take_query_param;
use crate::auth::external::{Original, Outcome};
use crate::auth::failures::{Throttle, UserKey};
use crate::auth::methods::{identity, Authenticator, Kind, Native};
use crate::limit;
use crate::metrics::METRICS;
use crate::state::Shared;

/// Authenticates the request by `method`; sets its identity (none when
/// the method names no tenant) and what the upstream and client get.
pub async fn by_method(
    shared: &Shared,
    session: &mut Session,
    ctx: &mut Ctx,
    method: &Arc<Authenticator>,
    host: &str,
) -> Result<(), Deny> {
    let route = ctx.route().ok_or(Deny::NoRoute)?;
    let map = match &route.identity {
        Some(over) => method.identity.overlaid(over),
        None => method.identity.clone(),
    };
    let (native, answer) = match &method.kind {
        Kind::External(external) => {
            let answer = external_answer(session, ctx, external, host).await?;
            (Native::default(), Some(answer))
        }
        Kind::Basic { auth, users } => {
            let user = basic_user(shared, session, ctx, &method.name, auth).await?;
            let record = users.as_ref().and_then(|u| u.get(&user));
            let native = Native {
                tenant: record.map(|r| r.tenant.clone()),
                plan: record.and_then(|r| r.plan.clone()),
                user: Some(user),
            };
            (native, None)
        }
        Kind::ApiKey { config, keys } => {
            let native = api_key(shared, session, ctx, config, keys)?;
            (native, None)
        }
    };
    let policy = ctx.policy.clone();
    let config = &policy.config;
    let auth = config
        .auth
        .as_ref()
        .ok_or(Deny::Internal("no auth section"))?;
    let headers = answer.as_ref().map(|a| &a.headers);
    ctx.identity = identity(&map, native, headers, auth, &config.tenants).map_err(|e| {
        METRICS.auth_failures.with_label_values(&[e.reason()]).inc();
        Deny::Unauthorized(e)
    })?;
    if let (Kind::External(external), Some(answer)) = (&method.kind, answer) {
        ctx.auth_replaced = external.config().response_headers.clone();
        for name in &external.config().response_headers {
            for value in answer.headers.get_all(name) {
                ctx.auth_headers.push((name.clone(), value.clone()));
            }
        }
        ctx.auth_set.extend(answer.set.iter().cloned());
    }
    Ok(())
}

/// The external service's 2xx answer, or the client's answer: its 401 or
/// 403 (or a sign-in redirect), or 503 when it gave none.
async fn external_answer(
    session: &Session,
    ctx: &Ctx,
    external: &crate::auth::external::ExternalAuth,
    host: &str,
) -> Result<Arc<crate::auth::external::Answer>, Deny> {
    let req = session.req_header();
    let uri = req
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let tls = session.digest().is_some_and(|d| d.ssl_digest.is_some());
    let scheme = if tls { "https" } else { "http" };
    // The host as the client named it, port included (hygiene checked it).
    let authority = req
        .headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri.authority().map(|a| a.as_str()))
        .unwrap_or(host)
        .to_string();
    let scope = format!("{}\0{authority}", ctx.route_label());
    let route_host = match ctx.route().and_then(|r| r.host.as_ref()) {
        Some(crate::config::HostMatch::Exact(h)) => Some(h.as_str()),
        _ => None,
    };
    let original = Original {
        scope: &scope,
        route_host,
        method: req.method.as_str(),
        uri: &uri,
        scheme,
        host: &authority,
        client_ip: ctx.client_ip.map(|ip| ip.to_string()).unwrap_or_default(),
        request_id: &ctx.request_id,
        headers: &req.headers,
    };
    match external.check(&original).await {
        Outcome::Allowed(answer) => Ok(answer),
        Outcome::Refused { status, headers } => {
            let signin = external.config().signin.as_ref();
            match signin.filter(|s| status == 401 && s.allows(host)) {
                Some(s) => {
                    let back = format!("{scheme}://{authority}{uri}");
                    let url = s.url.replace("$host", &authority);
                    let sep = if url.contains('?') { '&' } else { '?' };
                    let location = format!("{url}{sep}{}={}", s.param, encode(&back));
                    Err(Deny::Redirect {
                        code: 302,
                        location,
                    })
                }
                None => Err(Deny::AuthRefused { status, headers }),
            }
        }
        Outcome::Unavailable(_) => Err(Deny::AuthUnavailable),
    }
}

/// Percent-encodes a URL as a query value.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3 / 2);
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The address's failure bucket, and the address it is kept for.
fn failure_bucket(ctx: &Ctx) -> Result<(IpAddr, crate::config::Bucket), Deny> {
    let config = &ctx.policy.config;
    let bucket = config
        .auth
        .as_ref()
        .map(|a| a.failure_limit)
        .ok_or(Deny::Internal("no auth section"))?;
    Ok((client_key(ctx), bucket))
}

/// The client's address as its buckets and check queue know it (an IPv6
/// address by its `ipv6_prefix`).
fn client_key(ctx: &Ctx) -> IpAddr {
    limit::address_key(
        ctx.client_ip.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
        ctx.policy.config.server.ipv6_prefix,
    )
}

/// Refuses an address whose failure bucket is empty, before any check
/// (of a token, a password or a key).
pub(super) fn not_throttled(shared: &Shared, ctx: &Ctx) -> Result<(), Deny> {
    let (addr, bucket) = failure_bucket(ctx)?;
    if let Err(wait_ms) = shared.auth_failures.check(addr, &bucket) {
        return Err(throttled(Throttle::Address, wait_ms));
    }
    Ok(())
}

/// The 429 of `by`, counted.
fn throttled(by: Throttle, wait_ms: u64) -> Deny {
    match by {
        Throttle::Address => METRICS.auth_throttled.inc(),
        _ => METRICS
            .basic_throttled
            .with_label_values(&[by.as_str()])
            .inc(),
    }
    Deny::AuthThrottled { wait_ms, by }
}

/// Spends from the address's failure bucket and counts the reason.
pub(super) fn failed(shared: &Shared, ctx: &Ctx, reason: &str) {
    if let Ok((addr, bucket)) = failure_bucket(ctx) {
        shared.auth_failures.record(addr, &bucket);
    }
    METRICS.auth_failures.with_label_values(&[reason]).inc();
}

/// The user name a basic check is about: the bucket of its failures.
struct Claim {
    key: UserKey,
    bucket: crate::config::Bucket,
}

impl Claim {
    /// Refuses a user name whose failure bucket is empty, before a check.
    fn not_throttled(&self, shared: &Shared) -> Result<(), Deny> {
        match shared.user_failures.check(self.key, &self.bucket) {
            Ok(()) => Ok(()),
            Err(wait_ms) => Err(throttled(Throttle::User, wait_ms)),
        }
    }
}

/// The user of valid basic credentials: known from before, or verified
/// on a blocking thread (bcrypt is slow by design) in its turn of the
/// check queue. Before a check: the address's and the user name's
/// failure buckets, and the address's one place in the queue.
async fn basic_user(
    shared: &Shared,
    session: &Session,
    ctx: &Ctx,
    method: &str,
    basic: &Arc<crate::auth::basic::BasicAuth>,
) -> Result<String, Deny> {
    let header = session
        .req_header()
        .headers
        .get(http::header::AUTHORIZATION)
        .map(|v| v.as_bytes().to_vec());
    if let Some(user) = basic.known(header.as_deref()) {
        return Ok(user);
    }
    not_throttled(shared, ctx)?;
    let refused = |e: crate::auth::basic::BasicError| {
        failed(shared, ctx, e.reason());
        Deny::BasicUnauthorized {
            realm: basic.realm().to_string(),
        }
    };
    // Nothing to check: no queue, no blocking thread.
    let user = basic.claimed(header.as_deref()).map_err(refused)?;
    let claim = Claim {
        key: UserKey::new(method, &user),
        bucket: ctx
            .policy
            .config
            .auth
            .as_ref()
            .map(|a| a.user_failure_limit)
            .ok_or(Deny::Internal("no auth section"))?,
    };
    claim.not_throttled(shared)?;
    let turn = queued_turn(shared, ctx).await?;
    // The failures of those it waited behind count.
    not_throttled(shared, ctx)?;
    claim.not_throttled(shared)?;
    let checker = basic.clone();
    // The turn goes with the check: a client that hangs up does not free
    // it (nor its address's place) while bcrypt still runs.
    let verified = tokio::task::spawn_blocking(move || {
        let verified = checker.verify(header.as_deref());
        drop(turn);
        verified
    })
    .await
    .map_err(|_| Deny::Internal("the basic-auth check failed"))?;
    verified.map_err(|e| {
        shared.user_failures.record(claim.key, &claim.bucket);
        refused(e)
    })
}

/// The address's turn in the check queue: at most two checks a CPU run
/// at once, and an address with a check running or waiting already gets
/// 429 at once, so a check waits behind at most one of each address's
/// however many requests (an HTTP/2 connection's streams, many
/// connections) instead of all of them.
async fn queued_turn(shared: &Shared, ctx: &Ctx) -> Result<QueuedTurn, Deny> {
    let place = shared
        .basic_checks
        .enter(client_key(ctx))
        .ok_or_else(|| throttled(Throttle::Queued, 1000))?;
    let queued = Queued::count();
    let turn = shared.basic_checks.turn(place).await;
    Ok(QueuedTurn {
        _turn: turn,
        _queued: queued,
    })
}

/// A turn in the check queue, counted in `basic_checks_queued` until it
/// is given back.
struct QueuedTurn {
    _turn: crate::auth::checks::Turn,
    _queued: Queued,
}

/// One check counted as queued (running or waiting) while it lives.
struct Queued;

impl Queued {
    fn count() -> Queued {
        METRICS.basic_checks_queued.inc();
        Queued
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        METRICS.basic_checks_queued.dec();
    }
}

/// The record of the request's API key. A key sent in the query or its
/// header is removed from the request first, valid or not, so neither the
/// upstream nor a log line ever sees it.
fn api_key(
    shared: &Shared,
    session: &mut Session,
    ctx: &Ctx,
    config: &crate::config::ApiKey,
    keys: &crate::auth::api_keys::ApiKeys,
) -> Result<Native, Deny> {
    let from_query = match (&config.query, session.req_header().uri.query()) {
        (Some(name), Some(query)) => {
            let (key, rest) = take_query_param(query, name);
            if key.is_some() {
                let path = session.req_header().uri.path().to_string();
                let uri = match rest.is_empty() {
                    true => path,
                    false => format!("{path}?{rest}"),
                };
                let uri = uri
                    .parse::<http::Uri>()
                    .map_err(|_| Deny::Internal("the query without its key"))?;
                session.req_header_mut().set_uri(uri);
            }
            key
        }
        _ => None,
    };
    let from_header = config.header.as_ref().and_then(|h| {
        let key = session.req_header_mut().remove_header(h)?;
        Some(String::from_utf8_lossy(key.as_bytes()).into_owned())
    });
    not_throttled(shared, ctx)?;
    let now = crate::auth::unix_now() as i64;
    let key = from_header.or(from_query);
    let checked = match &key {
        Some(key) => keys.check(key, now),
        None => Err(crate::auth::api_keys::ApiKeyError::Missing),
    };
    let record = checked.map_err(|e| {
        failed(shared, ctx, e.reason());
        Deny::KeyUnauthorized(e)
    })?;
    Ok(Native {
        tenant: Some(record.tenant.clone()),
        user: record.user.clone(),
        plan: record.plan.clone(),
    })
}

/// The headers an external answer gives the client's response.
pub fn set_on_response(
    ctx: &Ctx,
    response: &mut pingora::http::ResponseHeader,
) -> pingora::Result<()> {
    for (name, value) in &ctx.auth_set {
        response.append_header(name.clone(), value.clone())?;
    }
    Ok(())
}
