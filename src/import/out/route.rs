//! A route as the import writes it: its match and the keys after it
//! (`RouteKeys`, in `RouteKey`'s order), each a typed value.

use super::{
    CanaryKey, CookieRewriteKey, CorsKey, DirectKey, EditKey, ErrorPagesKey, FromToKey, MatchKey,
    MirrorKey, RedirectKey, RegexKey, RetryKey, RewriteKey, RouteKey, TimeoutKey,
};
use crate::import::emit::{Fields, Node};

/// How a path is matched.
#[derive(Debug, Clone, PartialEq)]
pub enum PathRule {
    Any,
    Exact(String),
    Prefix(String),
    Regex(String),
}

/// `match.headers`: one header, its value or a pattern.
#[derive(Debug, Clone, PartialEq)]
pub struct HeaderMatch {
    pub name: String,
    pub value: HeaderValue,
}

#[derive(Debug, Clone, PartialEq)]
pub enum HeaderValue {
    Is(String),
    Regex(String),
}

/// The keys of a route after `name` and `match`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RouteKeys {
    pub upstream: Option<String>,
    pub auth: Option<Auth>,
    pub redirect: Option<Redirect>,
    /// Written when true.
    pub https_redirect: bool,
    pub app_root: Option<String>,
    /// Written when not empty.
    pub limits: Vec<String>,
    pub concurrency: Option<String>,
    pub limit_exempt_cidrs: Option<Vec<String>>,
    pub allow_cidrs: Option<Vec<String>>,
    pub deny_cidrs: Option<Vec<String>>,
    pub max_body: Option<String>,
    pub rewrite: Option<Rewrite>,
    pub request_headers: Option<HeaderEdits>,
    pub response_headers: Option<HeaderEdits>,
    pub timeouts: Option<Timeouts>,
    pub retries: Option<Retries>,
    pub cors: Option<Cors>,
    pub canary: Option<Canary>,
    /// Answered by the gateway with this status, never forwarded: `503`
    /// when the Service has no ready endpoint (ingress-nginx's answer),
    /// `404` on the host of an Ingress not served.
    pub direct: Option<u16>,
    /// `proxy-cookie-domain` and `proxy-cookie-path`: each `(from, to)`.
    pub cookie_domain: Option<(String, String)>,
    pub cookie_path: Option<(String, String)>,
    /// `custom-http-errors`: `error_pages`.
    pub error_pages: Option<ErrorPages>,
    /// `mirror-target`: `mirror`.
    pub mirror: Option<Mirror>,
    /// `proxy-redirect-from` and `-to`: `location_rewrite`.
    pub location_rewrite: Option<(String, String)>,
}

/// `mirror`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mirror {
    pub upstream: String,
    pub host: Option<String>,
    pub body: bool,
}

/// `error_pages`.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorPages {
    pub codes: Vec<u16>,
    pub upstream: String,
    pub headers: Vec<(String, String)>,
}

/// A route's `auth`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// `none`: ingress-nginx's routes authenticate nobody.
    Off,
    /// `required`: the base policy's auth (`fairgate.dev/auth: required`).
    Required,
    /// A method of `auth.methods`: the Ingress's own `auth-url` or
    /// `auth-type`.
    Method(String),
}

/// `redirect`.
#[derive(Debug, Clone, PartialEq)]
pub struct Redirect {
    pub to: String,
    pub code: u64,
}

/// `rewrite`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rewrite {
    pub path: Option<String>,
    pub host: Option<String>,
}

/// Which side's headers an edit changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Request,
    Response,
}

/// `request_headers` or `response_headers`: the edits in the order each
/// kind was first made.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HeaderEdits(Vec<(EditKey, Vec<(String, String)>)>);

impl HeaderEdits {
    fn of(&mut self, op: EditKey) -> &mut Vec<(String, String)> {
        let at = match self.0.iter().position(|(k, _)| *k == op) {
            Some(at) => at,
            None => {
                self.0.push((op, Vec::new()));
                self.0.len() - 1
            }
        };
        &mut self.0[at].1
    }

    /// Sets or adds `name` (a later value of the same name replaces the
    /// earlier in place), or removes it.
    pub fn edit(&mut self, op: EditKey, name: &str, value: &str) {
        let list = self.of(op);
        match list.iter_mut().find(|(n, _)| n == name) {
            Some(slot) if op != EditKey::Remove => slot.1 = value.to_string(),
            _ => list.push((name.to_string(), value.to_string())),
        }
    }

    /// Sets `name` unless a set of it (in any case) is there.
    pub fn set_if_unset(&mut self, name: &str, value: &str) {
        let set = self.of(EditKey::Set);
        if !set.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
            set.push((name.to_string(), value.to_string()));
        }
    }

    fn node(&self) -> Node {
        let mut f = Fields::default();
        for (op, list) in &self.0 {
            match op {
                EditKey::Remove => {
                    f.put(*op, Node::strs(list.iter().map(|(n, _)| n.clone())));
                }
                _ => {
                    let mut headers = Fields::default();
                    for (name, value) in list {
                        headers.named(name, value.as_str());
                    }
                    f.put(*op, headers.node());
                }
            }
        }
        f.node()
    }
}

/// `timeouts`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timeouts {
    pub connect: Option<String>,
    pub read: Option<String>,
    pub write: Option<String>,
}

impl Timeouts {
    pub fn is_empty(&self) -> bool {
        *self == Timeouts::default()
    }
}

/// `retries`.
#[derive(Debug, Clone, PartialEq)]
pub struct Retries {
    pub attempts: u64,
    pub retry_on: Vec<String>,
    pub methods: Option<Vec<String>>,
}

/// `cors`.
#[derive(Debug, Clone, PartialEq)]
pub struct Cors {
    pub origins: Vec<String>,
    pub methods: Vec<String>,
    pub headers: Vec<String>,
    /// Written when not empty.
    pub expose: Vec<String>,
    pub credentials: bool,
    pub max_age: Option<String>,
}

/// `canary`: the canary's pool and how a request is sent there.
#[derive(Debug, Clone, PartialEq)]
pub struct Canary {
    pub upstream: String,
    pub cookie: Option<String>,
    pub header: Option<String>,
    pub percent: Option<u64>,
}

/// A route: `name`, `match`, then its keys.
pub fn route_node(
    name: &str,
    host: Option<&str>,
    path: &PathRule,
    headers: Option<&HeaderMatch>,
    keys: &RouteKeys,
) -> Node {
    let mut m = Fields::default();
    m.maybe(MatchKey::Host, host);
    match path {
        PathRule::Any => {}
        PathRule::Exact(p) => m.put(MatchKey::Path, p.as_str()),
        PathRule::Prefix(p) => m.put(MatchKey::PathPrefix, p.as_str()),
        PathRule::Regex(p) => m.put(MatchKey::PathRegex, p.as_str()),
    }
    if let Some(h) = headers {
        let mut f = Fields::default();
        match &h.value {
            HeaderValue::Is(v) => f.named(&h.name, v.as_str()),
            HeaderValue::Regex(re) => {
                let mut pattern = Fields::default();
                pattern.put(RegexKey, re.as_str());
                f.named(&h.name, pattern.node());
            }
        }
        m.put(MatchKey::Headers, f.node());
    }
    let mut f = Fields::default();
    f.put(RouteKey::Name, name);
    f.put(RouteKey::Match, m.node());
    // nginx picks a server block by name first: a named host is never
    // answered by a host-less or wildcard Ingress.
    if host.is_none_or(|h| h.starts_with('*')) {
        f.put(RouteKey::Fallback, true);
    }
    keys.write(&mut f);
    f.node()
}

impl RouteKeys {
    fn write(&self, f: &mut Fields) {
        f.maybe(RouteKey::Upstream, self.upstream.clone());
        f.maybe(
            RouteKey::Auth,
            self.auth.as_ref().map(|a| match a {
                Auth::Off => "none".to_string(),
                Auth::Required => "required".to_string(),
                Auth::Method(name) => name.clone(),
            }),
        );
        f.maybe(RouteKey::Redirect, self.redirect.as_ref().map(redirect));
        if self.https_redirect {
            f.put(RouteKey::HttpsRedirect, true);
        }
        f.maybe(RouteKey::AppRoot, self.app_root.clone());
        if !self.limits.is_empty() {
            f.put(RouteKey::Limits, self.limits.clone());
        }
        f.maybe(RouteKey::Concurrency, self.concurrency.clone());
        f.maybe(RouteKey::LimitExemptCidrs, self.limit_exempt_cidrs.clone());
        f.maybe(RouteKey::AllowCidrs, self.allow_cidrs.clone());
        f.maybe(RouteKey::DenyCidrs, self.deny_cidrs.clone());
        f.maybe(RouteKey::MaxBody, self.max_body.clone());
        f.maybe(RouteKey::Rewrite, self.rewrite.as_ref().map(rewrite));
        let request = self.request_headers.as_ref().map(HeaderEdits::node);
        f.maybe(RouteKey::RequestHeaders, request);
        let response = self.response_headers.as_ref().map(HeaderEdits::node);
        f.maybe(RouteKey::ResponseHeaders, response);
        f.maybe(RouteKey::Timeouts, self.timeouts.as_ref().map(timeouts));
        f.maybe(RouteKey::Retries, self.retries.as_ref().map(retries));
        f.maybe(RouteKey::Cors, self.cors.as_ref().map(cors));
        f.maybe(RouteKey::Canary, self.canary.as_ref().map(canary));
        self.write_answers(f);
        if let Some(status) = self.direct {
            let mut direct = Fields::default();
            direct.put(DirectKey::Status, u64::from(status));
            f.put(RouteKey::DirectResponse, direct.node());
        }
    }

    /// What rewrites or copies the exchange: `cookie_rewrite`,
    /// `error_pages`, `location_rewrite` and `mirror`.
    fn write_answers(&self, f: &mut Fields) {
        let pair = |(from, to): &(String, String)| {
            let mut g = Fields::default();
            g.put(FromToKey::From, from.as_str());
            g.put(FromToKey::To, to.as_str());
            g.node()
        };
        if self.cookie_domain.is_some() || self.cookie_path.is_some() {
            let mut c = Fields::default();
            c.maybe(
                CookieRewriteKey::Domain,
                self.cookie_domain.as_ref().map(pair),
            );
            c.maybe(CookieRewriteKey::Path, self.cookie_path.as_ref().map(pair));
            f.put(RouteKey::CookieRewrite, c.node());
        }
        if let Some(pages) = &self.error_pages {
            let mut e = Fields::default();
            let codes: Vec<Node> = pages
                .codes
                .iter()
                .map(|c| Node::from(u64::from(*c)))
                .collect();
            e.put(ErrorPagesKey::Codes, codes);
            e.put(ErrorPagesKey::Upstream, pages.upstream.as_str());
            let headers = pages
                .headers
                .iter()
                .map(|(n, v)| (n.clone(), Node::str(v)))
                .collect();
            e.put(ErrorPagesKey::Headers, Node::Map(headers));
            f.put(RouteKey::ErrorPages, e.node());
        }
        f.maybe(
            RouteKey::LocationRewrite,
            self.location_rewrite.as_ref().map(pair),
        );
        if let Some(m) = &self.mirror {
            let mut e = Fields::default();
            e.put(MirrorKey::Upstream, m.upstream.as_str());
            e.maybe(MirrorKey::Host, m.host.clone());
            e.maybe(MirrorKey::Body, (!m.body).then_some(false));
            f.put(RouteKey::Mirror, e.node());
        }
    }

    /// The header edits of one side, made when first asked for.
    pub fn edits(&mut self, side: Side) -> &mut HeaderEdits {
        match side {
            Side::Request => self.request_headers.get_or_insert_with(Default::default),
            Side::Response => self.response_headers.get_or_insert_with(Default::default),
        }
    }
}

fn redirect(r: &Redirect) -> Node {
    let mut f = Fields::default();
    f.put(RedirectKey::To, r.to.as_str());
    f.put(RedirectKey::Code, r.code);
    f.node()
}

fn rewrite(r: &Rewrite) -> Node {
    let mut f = Fields::default();
    f.maybe(RewriteKey::Path, r.path.clone());
    f.maybe(RewriteKey::Host, r.host.clone());
    f.node()
}

fn timeouts(t: &Timeouts) -> Node {
    let mut f = Fields::default();
    f.maybe(TimeoutKey::Connect, t.connect.clone());
    f.maybe(TimeoutKey::Read, t.read.clone());
    f.maybe(TimeoutKey::Write, t.write.clone());
    f.node()
}

fn retries(r: &Retries) -> Node {
    let mut f = Fields::default();
    f.put(RetryKey::Attempts, r.attempts);
    f.put(RetryKey::RetryOn, r.retry_on.clone());
    f.maybe(RetryKey::Methods, r.methods.clone());
    f.node()
}

fn cors(c: &Cors) -> Node {
    let mut f = Fields::default();
    f.put(CorsKey::Origins, c.origins.clone());
    f.put(CorsKey::Methods, c.methods.clone());
    f.put(CorsKey::Headers, c.headers.clone());
    if !c.expose.is_empty() {
        f.put(CorsKey::Expose, c.expose.clone());
    }
    f.put(CorsKey::Credentials, c.credentials);
    f.maybe(CorsKey::MaxAge, c.max_age.clone());
    f.node()
}

fn canary(c: &Canary) -> Node {
    let mut f = Fields::default();
    f.put(CanaryKey::Upstream, c.upstream.as_str());
    f.maybe(CanaryKey::Cookie, c.cookie.clone());
    f.maybe(CanaryKey::Header, c.header.clone());
    f.maybe(CanaryKey::Percent, c.percent);
    f.node()
}
