//! What a route does besides forwarding: address rules, redirects, the
//! path and host the upstream gets, and header edits both ways. Templates
//! are rendered here from one request's values.

use std::net::IpAddr;

use http::header::HeaderName;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::proxy::Session;

use super::ctx::Ctx;
use super::respond::Deny;
use crate::config::{AddressRules, HeaderEdits, PathMatch, Piece, Route, Template};

/// The values a template may name, for one request.
pub struct Values<'a> {
    pub ctx: &'a Ctx,
    pub route: &'a Route,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub host: &'a str,
}

impl Values<'_> {
    fn get(&self, name: &str) -> String {
        match name {
            "path" => self.path.to_string(),
            // With its `?`, so `{path}{query}` is a whole target.
            "query" => self.query.map_or_else(String::new, |q| format!("?{q}")),
            "host" => self.host.to_string(),
            "hostname" => host_name(self.host).to_string(),
            "client_ip" => self
                .ctx
                .client_ip
                .map_or_else(String::new, |ip| ip.to_string()),
            "tenant" => self
                .ctx
                .identity
                .as_ref()
                .map_or_else(String::new, |i| i.tenant.as_str().to_string()),
            "request_id" => self.ctx.request_id.clone(),
            "route" => self.route.name.clone(),
            "rest" => match &self.route.path {
                PathMatch::Prefix(p) => {
                    self.path.strip_prefix(p.as_str()).unwrap_or("").to_string()
                }
                _ => String::new(),
            },
            capture => self
                .ctx
                .captures
                .iter()
                .find(|(k, _)| k == capture)
                .map_or_else(String::new, |(_, v)| v.clone()),
        }
    }

    pub fn render(&self, template: &Template) -> String {
        template
            .0
            .iter()
            .map(|piece| match piece {
                Piece::Text(t) => t.clone(),
                Piece::Var(v) => self.get(v),
            })
            .collect()
    }
}

/// The values of the request in `session` (its routed path and host).
pub fn values<'a>(session: &'a Session, ctx: &'a Ctx, route: &'a Route) -> Values<'a> {
    let req = session.req_header();
    let host = req
        .headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri.authority().map(|a| a.as_str()))
        .unwrap_or("");
    Values {
        ctx,
        route,
        path: req.uri.path(),
        query: req.uri.query(),
        host,
    }
}

/// 403 unless both the server's and the route's rules admit the address.
pub fn check_address(
    server: &AddressRules,
    route: &AddressRules,
    ip: Option<IpAddr>,
) -> Result<(), Deny> {
    let ip = ip.unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
    let admits = |rules: &AddressRules| {
        !rules.deny.iter().any(|n| n.contains(&ip))
            && (rules.allow.is_empty() || rules.allow.iter().any(|n| n.contains(&ip)))
    };
    match admits(server) && admits(route) {
        true => Ok(()),
        false => Err(Deny::AddressForbidden),
    }
}

/// Whether the address spends no tokens (`limit_exempt_cidrs`).
pub fn limit_exempt(server: &AddressRules, route: &AddressRules, ip: Option<IpAddr>) -> bool {
    ip.is_some_and(|ip| {
        server
            .limit_exempt
            .iter()
            .chain(&route.limit_exempt)
            .any(|n| n.contains(&ip))
    })
}

/// The redirect this request gets instead of an upstream, if any: to HTTPS
/// first, then the app root, then the route's own.
pub fn redirect(session: &Session, ctx: &Ctx, route: &Route) -> Option<Deny> {
    let v = values(session, ctx, route);
    let tls = session.digest().is_some_and(|d| d.ssl_digest.is_some());
    // Behind a load balancer that ends TLS, its word counts (trusted only).
    let forwarded_https = ctx.peer_trusted
        && session
            .req_header()
            .headers
            .get("x-forwarded-proto")
            .is_some_and(|p| p.as_bytes().eq_ignore_ascii_case(b"https"));
    if route.actions.https_redirect && !tls && !forwarded_https {
        // To the standard port: a Service or load balancer publishes 443
        // whatever port the gateway's own listener has.
        let location = format!("https://{}{}{}", host_name(v.host), v.path, v.get("query"));
        return Some(Deny::Redirect {
            code: 308,
            location,
        });
    }
    if let Some(root) = route.actions.app_root.as_ref().filter(|_| v.path == "/") {
        return Some(Deny::Redirect {
            code: 302,
            location: root.clone(),
        });
    }
    if let Some(d) = route.actions.direct.filter(|d| direct_picks(d, route)) {
        return Some(Deny::Direct { status: d.status });
    }
    let r = route.actions.redirect.as_ref()?;
    Some(Deny::Redirect {
        code: r.code,
        location: v.render(&r.to),
    })
}

/// Whether this request gets the direct response: always, or by its share
/// of the weights beside the split's.
fn direct_picks(d: &crate::config::DirectResponse, route: &Route) -> bool {
    let Some(weight) = d.weight else {
        return true;
    };
    let split: u64 = route.actions.split.iter().map(|(_, w)| u64::from(*w)).sum();
    let total = split + u64::from(weight);
    total > 0 && (uuid::Uuid::new_v4().as_u128() as u64) % total < u64::from(weight)
}

/// A Host without its port (`[::1]:8080` → `[::1]`).
fn host_name(host: &str) -> &str {
    match host.strip_prefix('[') {
        Some(rest) => rest.find(']').map_or(host, |end| &host[..end + 2]),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    }
}

/// The path and host the upstream gets, and the route's request header
/// edits. Returns the forwarded path when it differs from the routed one.
pub fn forward(
    session: &Session,
    ctx: &Ctx,
    route: &Route,
    upstream: &mut RequestHeader,
) -> pingora::Result<Option<String>> {
    let v = values(session, ctx, route);
    let mut forwarded = None;
    if let Some(path) = &route.actions.rewrite.path {
        let mut path = v.render(path);
        // `{rest}` of a request for the prefix itself is empty.
        if !path.starts_with('/') {
            path.insert(0, '/');
        }
        let target = format!("{path}{}", v.get("query"));
        let uri = target.parse::<http::Uri>().map_err(|_| {
            pingora::Error::explain(
                pingora::ErrorType::InternalError,
                "rewritten path is not a URI",
            )
        })?;
        upstream.set_uri(uri);
        forwarded = Some(path);
    }
    if let Some(host) = &route.actions.rewrite.host {
        upstream.insert_header(http::header::HOST, host.as_str())?;
    }
    edit(
        &route.actions.request_headers,
        &v,
        |name, value, append| match (value, append) {
            (None, _) => {
                upstream.remove_header(name);
                Ok(())
            }
            (Some(value), false) => upstream.insert_header(name.clone(), value).map(|_| ()),
            (Some(value), true) => upstream.append_header(name.clone(), value).map(|_| ()),
        },
    )?;
    Ok(forwarded)
}

/// The route's response header edits.
pub fn respond(
    session: &Session,
    ctx: &Ctx,
    route: &Route,
    response: &mut ResponseHeader,
) -> pingora::Result<()> {
    // Every response passes here: nothing to render on most routes.
    if route.actions.response_headers.is_empty() {
        return Ok(());
    }
    let v = values(session, ctx, route);
    edit(
        &route.actions.response_headers,
        &v,
        |name, value, append| match (value, append) {
            (None, _) => {
                response.remove_header(name);
                Ok(())
            }
            (Some(value), false) => response.insert_header(name.clone(), value).map(|_| ()),
            (Some(value), true) => response.append_header(name.clone(), value).map(|_| ()),
        },
    )
}

/// Applies `edits` through `apply(name, value, append)` (a `None` value
/// removes): remove, then set, then add. A rendered value that is not a
/// valid header value (a client-chosen capture with a control byte) is
/// skipped.
fn edit(
    edits: &HeaderEdits,
    v: &Values<'_>,
    mut apply: impl FnMut(&HeaderName, Option<String>, bool) -> pingora::Result<()>,
) -> pingora::Result<()> {
    if edits.is_empty() {
        return Ok(());
    }
    for name in &edits.remove {
        apply(name, None, false)?;
    }
    for (list, append) in [(&edits.set, false), (&edits.add, true)] {
        for (name, template) in list {
            let value = v.render(template);
            if http::HeaderValue::from_str(&value).is_ok() {
                apply(name, Some(value), append)?;
            }
        }
    }
    Ok(())
}

/// The pool this request goes to: the canary's when it picks the request,
/// else one of the split's by weight, else the route's.
pub fn pool<'r>(session: &Session, ctx: &Ctx, route: &'r Route) -> &'r str {
    let actions = &route.actions;
    if let Some(c) = actions
        .canary
        .as_ref()
        .filter(|c| canary_picks(c, session, ctx))
    {
        return &c.upstream;
    }
    let total: u64 = actions.split.iter().map(|(_, w)| u64::from(*w)).sum();
    if total == 0 {
        return &route.upstream;
    }
    let mut n = (uuid::Uuid::new_v4().as_u128() as u64) % total;
    for (name, weight) in &actions.split {
        let weight = u64::from(*weight);
        if n < weight {
            return name;
        }
        n -= weight;
    }
    &route.upstream
}

fn canary_picks(c: &crate::config::Canary, session: &Session, ctx: &Ctx) -> bool {
    let headers = &session.req_header().headers;
    let says = |v: &str| match v.trim() {
        "always" => Some(true),
        "never" => Some(false),
        _ => None,
    };
    let by_header = c
        .header
        .as_ref()
        .and_then(|h| headers.get(h)?.to_str().ok().and_then(says));
    let by_cookie = c
        .cookie
        .as_ref()
        .and_then(|name| says(&crate::auth::external::cookie(headers, name)?));
    if let Some(decided) = by_header.or(by_cookie) {
        return decided;
    }
    let identity = ctx.identity.as_ref();
    if identity.is_some_and(|i| {
        c.tenants.iter().any(|t| t == i.tenant.as_str()) || c.plans.contains(&i.plan)
    }) {
        return true;
    }
    // Sticky: the same tenant (or address) lands on the same side every time.
    let key = match (identity, ctx.client_ip) {
        (Some(i), _) => i.tenant.as_str().to_string(),
        (None, Some(ip)) => ip.to_string(),
        (None, None) => return false,
    };
    c.percent > 0 && crate::upstream::stable_hash(key.as_bytes()) % 100 < u64::from(c.percent)
}
