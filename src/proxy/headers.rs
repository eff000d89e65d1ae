//! Request headers: which the gateway believes, which it removes, and which
//! it writes. The trusted-proxy rule (the client address), header hygiene
//! before anything reads the request, and the `X-Forwarded-*`, identity and
//! request-id headers sent upstream. Routing and limits live elsewhere.

use std::borrow::Cow;
use std::net::IpAddr;

use pingora::http::RequestHeader;
use pingora::proxy::Session;

use super::ctx::{Ctx, X_REQUEST_ID};
use super::respond::Deny;
use crate::metrics::EdgeReason;

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

/// The client address: the peer, or when the peer is a trusted proxy the
/// right-most untrusted address of `X-Forwarded-For`.
pub fn client_ip(session: &Session, ctx: &mut Ctx) {
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

/// Header hygiene, before anything reads the request: bounded fields, one
/// Host on HTTP/1.1, one Content-Length, no `_` in names (CGI and WSGI read
/// `X_Tenant_Id` as `X-Tenant-Id`), no proxy headers from untrusted peers,
/// no method overrides.
pub fn clean(req: &mut RequestHeader, ctx: &Ctx) -> Result<(), Deny> {
    bounded(req, ctx.policy.config.server.max_header_field_size as usize)?;
    let hosts = req.headers.get_all(http::header::HOST).iter().count();
    if hosts > 1 || (hosts == 0 && req.version == http::Version::HTTP_11) {
        return Err(Deny::BadRequest(
            "an HTTP/1.1 request needs exactly one Host header",
        ));
    }
    one_content_length(req)?;
    // `post` is not POST to a route, but frameworks that upper-case it
    // would run it as one.
    let method = req.method.as_str();
    if method.bytes().any(|b| b.is_ascii_lowercase())
        && crate::config::METHODS.contains(&method.to_ascii_uppercase().as_str())
    {
        return Err(Deny::BadRequest("methods are upper case"));
    }
    // An accepted h2c upgrade would turn the connection into a tunnel to
    // the upstream, whose next requests the gateway never sees.
    let h2c_upgrade = req.headers.get_all(http::header::UPGRADE).iter().any(|v| {
        v.as_bytes()
            .windows(3)
            .any(|w| w.eq_ignore_ascii_case(b"h2c"))
    });
    if h2c_upgrade || req.headers.contains_key("http2-settings") {
        return Err(Deny::BadRequest(
            "an h2c upgrade is not accepted; use HTTP/2 with prior knowledge",
        ));
    }
    let drop: Vec<http::HeaderName> = req
        .headers
        .keys()
        .filter(|name| dropped(name.as_str(), ctx))
        .cloned()
        .collect();
    for name in drop {
        req.remove_header(&name);
    }
    Ok(())
}

/// The request target and every header line within `max_field` bytes.
fn bounded(req: &RequestHeader, max: usize) -> Result<(), Deny> {
    let refuse = |deny| {
        EdgeReason::HeaderFieldSize.count();
        Err(deny)
    };
    if req.raw_path().len() > max {
        return refuse(Deny::UriTooLong { max });
    }
    if req
        .headers
        .iter()
        .any(|(n, v)| n.as_str().len() + v.len() + 2 > max)
    {
        return refuse(Deny::HeaderTooLarge { max });
    }
    Ok(())
}

/// The request's declared body length: `None` without a Content-Length,
/// `Some(None)` for one that does not parse (hygiene refuses it; whatever
/// reads before hygiene must assume a body). The one reader of the header.
pub fn content_length(req: &RequestHeader) -> Option<Option<u64>> {
    let value = req.headers.get(http::header::CONTENT_LENGTH)?;
    Some(value.to_str().ok().and_then(|v| v.trim().parse().ok()))
}

/// Repeated equal Content-Lengths (`3, 3` or two lines) become one; any
/// disagreement is refused.
fn one_content_length(req: &mut RequestHeader) -> Result<(), Deny> {
    let not_a_number = Deny::BadRequest("the Content-Length is not a number");
    let mut values = req
        .headers
        .get_all(http::header::CONTENT_LENGTH)
        .iter()
        .flat_map(|v| {
            v.to_str()
                .unwrap_or(",")
                .split(',')
                .map(|n| n.trim().parse::<u64>().ok())
        });
    let Some(first) = values.next() else {
        return Ok(());
    };
    let first = first.ok_or(not_a_number.clone())?;
    let mut repeated = false;
    for other in values {
        if other != Some(first) {
            return Err(Deny::BadRequest("conflicting Content-Length values"));
        }
        repeated = true;
    }
    if repeated {
        req.insert_header(http::header::CONTENT_LENGTH, first.to_string())
            .map_err(|_| not_a_number)?;
    }
    Ok(())
}

/// Whether a client header is removed before anything reads it.
fn dropped(name: &str, ctx: &Ctx) -> bool {
    let server = &ctx.policy.config.server;
    let underscored = name.contains('_');
    if underscored && !server.allow_underscores_in_headers {
        return true;
    }
    // With underscores allowed, `X_Real_IP` is still read as `X-Real-IP`.
    let dashed = match underscored {
        true => Cow::Owned(name.replace('_', "-")),
        false => Cow::Borrowed(name),
    };
    let dashed = dashed.as_ref();
    let ids = &ctx.policy.config.identity_headers;
    let identity = underscored && ids.all().iter().any(|h| h.as_str() == dashed);
    // What an external auth service answers with is the gateway's to write.
    let answered = ctx
        .policy
        .methods
        .answer_headers
        .iter()
        .any(|h| h.as_str() == dashed);
    let proxy = !ctx.peer_trusted
        && (dashed.starts_with("x-forwarded-") || PROXY_HEADERS.contains(&dashed));
    identity || answered || proxy || METHOD_OVERRIDES.contains(&dashed)
}

/// The subject of the client's TLS certificate, if it sent one that the
/// listener's `client_ca` verified (one a host's own roots verified is
/// that host's: `ssl-client-*`, never an identity or a scope).
pub fn client_subject(session: &Session) -> Option<&crate::tls::ClientSubject> {
    tls_facts(session)
        .filter(|f| f.clients == 0)?
        .subject
        .as_ref()
}

/// What the TLS handshake of this request's connection learnt.
pub fn tls_facts(session: &Session) -> Option<&crate::tls::TlsFacts> {
    let tls = session.digest()?.ssl_digest.as_ref()?;
    tls.extension.get::<crate::tls::TlsFacts>()
}

/// What the upstream is told: an external answer's headers (never an
/// identity header), `X-Forwarded-For`, `-Proto`, `-Host` (kept from
/// trusted peers, written otherwise) and `X-Request-Id`. The identity
/// headers come last, from `identity`.
pub fn upstream(session: &Session, upstream: &mut RequestHeader, ctx: &Ctx) -> pingora::Result<()> {
    let ids = &ctx.policy.config.identity_headers;
    // Every spelling of what an auth service answers on this host, or on
    // this route: `X_Auth_Request_Email` is read as the real one.
    let host = ctx.route().and_then(|r| r.host.as_ref());
    let by_host = host.and_then(|h| {
        let methods = &ctx.policy.methods;
        methods
            .answer_headers_by_host
            .get(&crate::auth::methods::host_key(h))
    });
    let answered: Vec<&http::HeaderName> = ctx
        .auth_replaced
        .iter()
        .chain(by_host.into_iter().flatten())
        .collect();
    if !answered.is_empty() {
        let spelled: Vec<http::HeaderName> = upstream
            .headers
            .keys()
            .filter(|k| answered.iter().any(|a| same_name(k.as_str(), a.as_str())))
            .cloned()
            .collect();
        for name in spelled {
            upstream.remove_header(&name);
        }
    }
    for (name, value) in &ctx.auth_headers {
        // The service's answer names no identity: only the gateway does.
        if !ids
            .all()
            .iter()
            .any(|id| same_name(name.as_str(), id.as_str()))
        {
            upstream.append_header(name.clone(), value.clone())?;
        }
    }
    forwarded(session, upstream, ctx)
}

/// Whether `name` is `id` read as CGI, WSGI and PHP upstreams read header
/// names: `X_Tenant_Id` is `X-Tenant-Id`.
pub(super) fn same_name(name: &str, id: &str) -> bool {
    name.len() == id.len()
        && name
            .bytes()
            .zip(id.bytes())
            .all(|(a, b)| a.eq_ignore_ascii_case(&b) || (a == b'_' && b == b'-'))
}

/// The identity headers, written last (after the route's header edits):
/// every copy of them in any spelling removed, whoever wrote it, then the
/// identity the gateway established, and nothing else, written.
pub fn identity(session: &Session, upstream: &mut RequestHeader, ctx: &Ctx) -> pingora::Result<()> {
    let ids = &ctx.policy.config.identity_headers;
    let spelled: Vec<http::HeaderName> = upstream
        .headers
        .keys()
        .filter(|name| {
            ids.all()
                .iter()
                .any(|id| same_name(name.as_str(), id.as_str()))
        })
        .cloned()
        .collect();
    for name in spelled {
        upstream.remove_header(&name);
    }
    if let Some(subject) = client_subject(session) {
        if let Ok(value) = http::HeaderValue::from_str(&subject.0) {
            upstream.insert_header(ids.client_cert.clone(), value)?;
        }
    }
    if let Some(entry) = &ctx.client_certs {
        super::client_certs::upstream(session, upstream, entry)?;
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
    Ok(())
}

/// The forwarding headers and the request's host.
fn forwarded(session: &Session, upstream: &mut RequestHeader, ctx: &Ctx) -> pingora::Result<()> {
    if ctx.route().is_some_and(|r| !r.forward_authorization) {
        upstream.remove_header(&http::header::AUTHORIZATION);
    }
    // HTTP/1.0 lets a client name no host; the upstream hears HTTP/1.1,
    // which needs one: the target's address, as nginx's `proxy_pass` sends
    // (a route's `rewrite.host` still replaces it).
    if !upstream.headers.contains_key(http::header::HOST) {
        if let Some(target) = ctx.upstream.target {
            upstream.insert_header(http::header::HOST, target.to_string())?;
        }
    }
    let peer = session
        .client_addr()
        .and_then(|a| a.as_inet())
        .map(|a| a.ip().to_string())
        .unwrap_or_default();
    let forwarded_for = match upstream.headers.get("x-forwarded-for") {
        Some(v) if ctx.peer_trusted => format!("{}, {peer}", String::from_utf8_lossy(v.as_bytes())),
        _ => peer,
    };
    upstream.insert_header("x-forwarded-for", forwarded_for)?;
    let tls = session.digest().is_some_and(|d| d.ssl_digest.is_some());
    if !(ctx.peer_trusted && upstream.headers.contains_key("x-forwarded-proto")) {
        upstream.insert_header("x-forwarded-proto", if tls { "https" } else { "http" })?;
    }
    if !(ctx.peer_trusted && upstream.headers.contains_key("x-forwarded-host")) {
        // HTTP/2 requests name their host in `:authority` (the URI), not Host.
        let req = session.req_header();
        let host = req.headers.get(http::header::HOST).cloned().or_else(|| {
            req.uri
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
    Ok(())
}
