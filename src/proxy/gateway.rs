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
use crate::metrics::METRICS;

pub struct Gateway {
    pub shared: Arc<Shared>,
}

const X_REQUEST_ID: &str = "x-request-id";

impl Gateway {
    /// Everything that decides whether a request may go upstream. An `Err`
    /// is the gateway's own answer.
    async fn admit(&self, session: &mut Session, ctx: &mut Ctx) -> Result<(), Refusal> {
        clean_headers(session.req_header_mut(), ctx)?;
        let bad_target = |why: route::BadTarget| {
            Refusal::new(400, "bad-target", "Bad request target", why.detail())
        };
        let req = session.req_header();
        let host = match req.headers.get(http::header::HOST) {
            Some(h) => Some(
                h.to_str()
                    .ok()
                    .and_then(route::host_of)
                    .ok_or(bad_target(route::BadTarget::Host))?,
            ),
            None => None,
        };
        let server = &ctx.policy.config.server;
        let rules = route::PathRules {
            escaped_slashes: server.escaped_slashes,
            keep_path_parameters: server.keep_path_parameters,
        };
        let target = route::target(req.raw_path(), req.method.as_str(), host.as_deref(), rules)
            .map_err(bad_target)?
            .ok_or_else(Refusal::not_found)?;
        // An absolute-form target names the host when there is no Host
        // (HTTP/1.0); the upstream gets it as Host too.
        let (host, set_host) = match (host, target.authority) {
            (None, Some(authority)) => (route::host_of(authority), Some(authority.to_string())),
            (host, _) => (host, None),
        };
        // From here on the request's URI is the routed path (and the query as
        // sent): what is routed is what is limited, logged and forwarded.
        let unchanged = matches!(target.path, std::borrow::Cow::Borrowed(_))
            && req.raw_path().first() == Some(&b'/')
            && req.uri.path() == target.path;
        if !unchanged {
            let uri = match target.query {
                Some(q) => format!("{}?{q}", target.path),
                None => target.path.into_owned(),
            };
            let uri = uri.parse::<http::Uri>().map_err(|_| {
                Refusal::new(
                    400,
                    "bad-target",
                    "Bad request target",
                    route::BadTarget::Form.detail(),
                )
            })?;
            session.req_header_mut().set_uri(uri);
        }
        if let Some(authority) = set_host {
            session
                .req_header_mut()
                .insert_header(http::header::HOST, authority)
                .map_err(|_| bad_target(route::BadTarget::Host))?;
        }
        let req = session.req_header();
        let path = req.uri.path();
        let host = host.unwrap_or_default();
        let policy = ctx.policy.clone();
        let matched = route::find(&policy.config, &host, req.method.as_str(), path)
            .ok_or_else(Refusal::not_found)?;
        ctx.route = Some(matched.index);
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
            let token = crate::auth::bearer(authorization);
            ctx.identity = match token.and_then(|t| verifier.known(t)) {
                Some(identity) => Some(identity),
                None => Some(self.authenticate(verifier, token, ctx).await?),
            };
        }
        if !route.exempt {
            self.limit(session, ctx).await?;
            self.take_slot(session, ctx).await?;
        }
        Ok(())
    }

    /// Verifies a token not known to be valid. Each failure spends from the
    /// client address's failure bucket; while it is empty, the address gets
    /// 429 without a signature check.
    async fn authenticate(
        &self,
        verifier: &crate::auth::Verifier,
        token: Option<&str>,
        ctx: &Ctx,
    ) -> Result<crate::auth::Identity, Refusal> {
        let config = &ctx.policy.config;
        let bucket = config
            .auth
            .as_ref()
            .map(|a| a.failure_limit)
            .ok_or_else(|| Refusal::new(500, "internal", "Internal error", "no auth section"))?;
        let addr = limit::address_key(
            ctx.client_ip
                .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)),
            config.server.ipv6_prefix,
        );
        let failures = &self.shared.auth_failures;
        if let Err(wait_ms) = failures.check(addr, &bucket) {
            METRICS.auth_throttled.inc();
            return Err(Refusal::new(
                429,
                "auth-throttled",
                "Too many failed authentications",
                "too many requests from this address failed authentication; retry later",
            )
            .header(
                http::header::RETRY_AFTER,
                wait_ms.div_ceil(1000).max(1).to_string(),
            )
            .extra("retry_after_ms", serde_json::json!(wait_ms)));
        }
        verifier.verify_fresh(token).await.map_err(|e| {
            failures.spend(addr, &bucket);
            METRICS.auth_failures.with_label_values(&[e.reason()]).inc();
            Refusal::unauthorized(e)
        })
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
        let series = &policy.route_metrics(ctx.route).decisions;
        for (i, (p, state)) in decision.buckets.iter().enumerate() {
            let outcome = match (state.allowed, p.spend.shadow) {
                (true, _) => 0,
                (false, false) => 1,
                (false, true) => 2,
            };
            if let Some(counters) = series.get(i) {
                counters[outcome].inc();
            }
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
        limit::Unkeyable::NotListed => Refusal::not_found(),
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

/// Proxy headers believed only from trusted peers; from anyone else they
/// are removed before any phase reads the request (SPEC section 10), with
/// every `x-forwarded-*` and the client-address headers frameworks read.
const PROXY_HEADERS: &[&str] = &[
    "forwarded",
    "x-forwarded",
    "x-real-ip",
    "x-original-url",
    "x-rewrite-url",
    "x-original-host",
    "x-host",
    "x-client-ip",
    "x-cluster-client-ip",
    "true-client-ip",
];

/// Method overrides, removed from every client: the upstream would serve
/// another method than the one routed on (`GET` with `X-HTTP-Method-Override:
/// POST` would skip a `POST` route's limits).
const METHOD_OVERRIDES: &[&str] = &[
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// Header hygiene, before anything reads the request: bounded fields, one
/// Host on HTTP/1.1, one Content-Length, no `_` in names (CGI and WSGI read
/// `X_Tenant_Id` as `X-Tenant-Id`), no proxy headers from untrusted peers.
fn clean_headers(req: &mut RequestHeader, ctx: &Ctx) -> Result<(), Refusal> {
    let config = &ctx.policy.config;
    let server = &config.server;
    let bad = |detail: &'static str| Refusal::new(400, "bad-request", "Bad request", detail);
    let max_field = server.max_header_field_size as usize;
    if req.raw_path().len() > max_field {
        METRICS
            .edge_refusals
            .with_label_values(&["header_field_size"])
            .inc();
        return Err(Refusal::new(
            414,
            "uri-too-long",
            "URI too long",
            format!("the request target is over {max_field} bytes"),
        ));
    }
    if req
        .headers
        .iter()
        .any(|(n, v)| n.as_str().len() + v.len() + 2 > max_field)
    {
        METRICS
            .edge_refusals
            .with_label_values(&["header_field_size"])
            .inc();
        return Err(Refusal::new(
            431,
            "header-too-large",
            "Request header fields too large",
            format!("a header line is over {max_field} bytes"),
        ));
    }
    let hosts = req.headers.get_all(http::header::HOST).iter().count();
    if hosts > 1 || (hosts == 0 && req.version == http::Version::HTTP_11) {
        return Err(bad("an HTTP/1.1 request needs exactly one Host header"));
    }
    let lengths = req.headers.get_all(http::header::CONTENT_LENGTH);
    let mut values = lengths.iter().flat_map(|v| {
        v.to_str()
            .unwrap_or(",")
            .split(',')
            .map(|n| n.trim().parse::<u64>().ok())
    });
    if let Some(first) = values.next() {
        let first = first.ok_or_else(|| bad("the Content-Length is not a number"))?;
        let mut repeated = false;
        for other in values {
            if other != Some(first) {
                return Err(bad("conflicting Content-Length values"));
            }
            repeated = true;
        }
        if repeated {
            req.insert_header(http::header::CONTENT_LENGTH, first.to_string())
                .map_err(|_| bad("the Content-Length is not a number"))?;
        }
    }
    let ids = &config.identity_headers;
    let drop: Vec<http::HeaderName> = req
        .headers
        .keys()
        .filter(|name| {
            let name = name.as_str();
            // With underscores allowed, `X_Real_IP` is read as `X-Real-IP`.
            let underscored = name.contains('_');
            if underscored && !server.allow_underscores_in_headers {
                return true;
            }
            let dashed = if underscored {
                std::borrow::Cow::Owned(name.replace('_', "-"))
            } else {
                std::borrow::Cow::Borrowed(name)
            };
            let dashed = dashed.as_ref();
            let identity = underscored
                && [&ids.tenant, &ids.user, &ids.plan]
                    .iter()
                    .any(|h| h.as_str() == dashed);
            let proxy = !ctx.peer_trusted
                && (dashed.starts_with("x-forwarded-") || PROXY_HEADERS.contains(&dashed));
            identity || proxy || METHOD_OVERRIDES.contains(&dashed)
        })
        .cloned()
        .collect();
    for name in drop {
        req.remove_header(&name);
    }
    Ok(())
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
        // A body that stops arriving ends the exchange (and frees its slot).
        session.set_read_timeout(Some(ctx.policy.config.server.body_idle_timeout));
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

        // The path the upstream gets: the one routed on (already the
        // request's URI), less the route's `strip_prefix`.
        let stripped = route.strip_prefix.as_deref().and_then(|prefix| {
            let rest = upstream.uri.path().strip_prefix(prefix)?;
            match rest {
                "" => Some("/"),
                r if r.starts_with('/') => Some(r),
                _ => None,
            }
        });
        if let Some(path) = stripped {
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
            ReadTimedout if e.esource() == &ErrorSource::Downstream => {
                METRICS
                    .edge_refusals
                    .with_label_values(&["body_idle"])
                    .inc();
                Some(Refusal::new(
                    408,
                    "body-timeout",
                    "Request timeout",
                    "the request body stopped arriving",
                ))
            }
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
        let series = ctx.policy.route_metrics(ctx.route);
        series.requests(status).inc();
        series.duration.observe(elapsed.as_secs_f64());
        if let Some(t) = ctx.upstream_started {
            series.upstream.observe(t.elapsed().as_secs_f64());
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
