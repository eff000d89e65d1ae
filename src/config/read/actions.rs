//! Reads what a route does besides forwarding: header and query matches,
//! redirects, rewrites, header edits, address rules and timeouts; and the
//! `{name}` templates they use, whose every variable must exist.

use super::*;

/// Variables every template may use, besides the route's path captures
/// (and `rest` after a `path_prefix`).
const REQUEST_VARS: &[&str] = &[
    "path",
    "query",
    "host",
    "hostname",
    "client_ip",
    "request_id",
    "route",
];

/// Headers the gateway sets or reads itself: no edit may touch them.
const RESERVED: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "x-request-id",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "ratelimit",
    "ratelimit-policy",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "retry-after",
];

/// Whether a route's header edits may not name `name` (with the default
/// identity headers).
pub fn edit_reserved(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    RESERVED.contains(&name.as_str())
        || IdentityHeaders::default()
            .all()
            .iter()
            .any(|h| h.as_str() == name)
}

/// A route's `redirect`, `rewrite`, header edits, address rules, timeouts, `cors`.
pub(super) fn actions(
    r: &mut Reader<'_>,
    f: &yaml::Fields<'_>,
    path: &PathMatch,
    config: &Config,
) -> Actions {
    let vars = Vars::of(path, false);
    let header_vars = Vars::of(path, true);
    let edits = |r: &mut Reader<'_>, key: &str| {
        f.get(key).map_or_else(HeaderEdits::default, |e| {
            header_edits(r, &e, &header_vars, &config.identity_headers)
        })
    };
    let app_root = f.get("app_root").and_then(|a| {
        let text = r.string(&a)?;
        if !text.starts_with('/') || text == "/" || text.bytes().any(|b| b < 0x21 || b == 0x7f) {
            r.error_value(
                &a,
                "routes.redirect_invalid",
                "a path other than /, starting with /",
            );
        }
        Some(text)
    });
    let rewrite = f
        .get("rewrite")
        .map_or_else(Rewrite::default, |w| rewrite(r, &w, &vars));
    if let (Some(_), Some(w)) = (&rewrite.path, f.get("strip_prefix")) {
        r.error(
            &w,
            "routes.rewrite_invalid",
            "use rewrite.path or strip_prefix, not both",
        );
    }
    Actions {
        redirect: f.get("redirect").and_then(|d| redirect(r, &d, &vars)),
        direct: f
            .get("direct_response")
            .and_then(|d| direct_response(r, &d, f)),
        https_redirect: f
            .get("https_redirect")
            .and_then(|b| r.bool(&b))
            .unwrap_or(false),
        app_root,
        rewrite,
        request_headers: edits(r, "request_headers"),
        response_headers: edits(r, "response_headers"),
        addresses: address_rules(r, f),
        timeouts: f
            .get("timeouts")
            .map_or_else(Timeouts::default, |t| timeouts(r, &t)),
        cors: f.get("cors").and_then(|c| cors(r, &c)),
        split: f
            .get("upstreams")
            .map(|u| split(r, &u, config))
            .unwrap_or_default(),
        canary: f.get("canary").and_then(|c| canary(r, &c, config)),
        retries: f.get("retries").and_then(|c| retries(r, &c)),
        no_compression: f.get("compression").and_then(|b| r.bool(&b)) == Some(false),
        cookie_rewrite: f.get("cookie_rewrite").and_then(|c| cookie_rewrite(r, &c)),
        error_pages: f
            .get("error_pages")
            .and_then(|e| error_pages(r, &e, config)),
        mirror: f.get("mirror").and_then(|m| mirror(r, &m, config)),
        location_rewrite: f
            .get("location_rewrite")
            .and_then(|l| location_rewrite(r, &l)),
    }
}

/// `location_rewrite: {from, to}`: text without spaces or control bytes.
fn location_rewrite(r: &mut Reader<'_>, at: &At<'_>) -> Option<(String, String)> {
    let g = r.mapping(at, schema::FROM_TO)?;
    let (Some(from_at), Some(to_at)) = (g.get("from"), g.get("to")) else {
        let absent = if g.get("from").is_none() {
            "from"
        } else {
            "to"
        };
        missing(r, at, absent);
        return None;
    };
    let (from, to) = (r.string(&from_at)?, r.string(&to_at)?);
    for (v, at) in [(&from, &from_at), (&to, &to_at)] {
        if !v.bytes().all(|b| b.is_ascii_graphic()) {
            r.error_value(
                at,
                "routes.location_rewrite_invalid",
                "no space or control byte",
            );
        }
    }
    Some((from, to))
}

/// `cookie_rewrite: {domain: {from, to}, path: {from, to}}`: attribute
/// values (no space, `;` or control), paths starting with `/`.
fn cookie_rewrite(r: &mut Reader<'_>, at: &At<'_>) -> Option<CookieRewrite> {
    let f = r.mapping(at, schema::COOKIE_REWRITE)?;
    let mut pair = |key: &str| {
        let at = f.get(key)?;
        let g = r.mapping(&at, schema::FROM_TO)?;
        let (Some(from_at), Some(to_at)) = (g.get("from"), g.get("to")) else {
            let absent = if g.get("from").is_none() {
                "from"
            } else {
                "to"
            };
            missing(r, &at, absent);
            return None;
        };
        let (from, to) = (r.string(&from_at)?, r.string(&to_at)?);
        for (v, at) in [(&from, &from_at), (&to, &to_at)] {
            let text_ok = !v.is_empty() && v.bytes().all(|b| b.is_ascii_graphic() && b != b';');
            if !text_ok || (key == "path" && !v.starts_with('/')) {
                let why = match key {
                    "path" => "a cookie path: starting with /, no space or ;",
                    _ => "a cookie domain: no space or ;",
                };
                r.error_value(at, "routes.cookie_rewrite_invalid", why);
            }
        }
        Some((from, to))
    };
    Some(CookieRewrite {
        domain: pair("domain"),
        path: pair("path"),
    })
}

/// What a route's templates may name.
pub(super) struct Vars {
    names: Vec<String>,
}

impl Vars {
    pub(super) fn of(path: &PathMatch, with_tenant: bool) -> Vars {
        let mut names: Vec<String> = REQUEST_VARS.iter().map(|v| v.to_string()).collect();
        names.extend(path.captures().iter().map(|c| c.to_string()));
        if let PathMatch::Prefix(_) = path {
            names.push("rest".into());
        }
        if with_tenant {
            names.push("tenant".into());
        }
        Vars { names }
    }
}

pub(super) fn template(r: &mut Reader<'_>, at: &At<'_>, vars: &Vars) -> Option<Template> {
    let text = r.string(at)?;
    // Headers and `Location` carry no line break or control byte: one
    // would be refused at every request, or end the header early.
    if text.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        r.error_value(
            at,
            "routes.template_invalid",
            "a control character (CR, LF, ...) in a header or redirect value",
        );
        return None;
    }
    let mut pieces = Vec::new();
    let mut rest = text.as_str();
    while let Some(open) = rest.find('{') {
        if open > 0 {
            pieces.push(Piece::Text(rest[..open].to_string()));
        }
        let Some(close) = rest[open..].find('}') else {
            r.error_value(at, "routes.template_invalid", "a { without its }");
            return None;
        };
        let name = &rest[open + 1..open + close];
        if !vars.names.iter().any(|v| v == name) {
            let known = vars.names.join(", ");
            r.error_value(
                at,
                "routes.template_invalid",
                format!("no variable {{{name}}} here; known: {known}"),
            );
            return None;
        }
        pieces.push(Piece::Var(name.to_string()));
        rest = &rest[open + close + 1..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest.to_string()));
    }
    Some(Template(pieces))
}

/// `match.headers` and `match.query`: `NAME: VALUE` (exact) or `NAME: true` (present).
pub(super) fn conditions(r: &mut Reader<'_>, mf: &yaml::Fields<'_>) -> Vec<Condition> {
    let mut out = Vec::new();
    if let Some(at) = mf.get("listener") {
        match r.string(&at).as_deref() {
            Some("plain") => out.push(Condition::Tls(false)),
            Some("tls") => out.push(Condition::Tls(true)),
            Some(_) => r.error_value(&at, "routes.match_invalid", "expected plain or tls"),
            None => {}
        }
    }
    for key in ["headers", "query"] {
        let Some(at) = mf.get(key) else { continue };
        for (name, item) in r.named(&at) {
            let want = match item.node.as_scalar().map(|s| s.as_str()) {
                Some("true") => ValueMatch::Present,
                Some(_) => ValueMatch::Exact(r.string(&item).unwrap_or_default()),
                None => match value_regex(r, &item) {
                    Some(re) => ValueMatch::Regex(re),
                    None => continue,
                },
            };
            if key == "query" {
                out.push(Condition::Query(name.to_string(), want));
                continue;
            }
            match HeaderName::from_bytes(name.as_bytes()) {
                Ok(h) => out.push(Condition::Header(h, want)),
                Err(_) => r.error(&item, "routes.match_invalid", "not a valid header name"),
            }
        }
    }
    out
}

/// `{regex: PATTERN}`: the whole value must match (anchored).
fn value_regex(r: &mut Reader<'_>, at: &At<'_>) -> Option<PathRegex> {
    let f = r.mapping(at, &["regex"])?;
    let Some(p) = f.get("regex") else {
        r.error(
            at,
            "routes.match_invalid",
            "expected a value, true or {regex: PATTERN}",
        );
        return None;
    };
    let text = r.string(&p)?;
    let anchored = format!("^(?:{text})$");
    match regex::RegexBuilder::new(&anchored)
        .size_limit(1 << 20)
        .build()
    {
        Ok(re) => Some(PathRegex(re)),
        Err(e) => {
            let why = e.to_string().lines().last().unwrap_or("").to_string();
            r.error_value(
                &p,
                "routes.match_invalid",
                format!("not a regular expression: {why}"),
            );
            None
        }
    }
}

pub(super) fn redirect(r: &mut Reader<'_>, at: &At<'_>, vars: &Vars) -> Option<Redirect> {
    let f = r.mapping(at, schema::REDIRECT)?;
    let Some(to_at) = f.get("to") else {
        missing(r, at, "to");
        return None;
    };
    let to = template(r, &to_at, vars)?;
    {
        // `https://good.lab@evil.example/` sends the browser to evil.example.
        let shape: String =
            to.0.iter()
                .map(|p| match p {
                    Piece::Text(t) => t.as_str(),
                    Piece::Var(_) => "x",
                })
                .collect();
        let authority = shape
            .split_once("://")
            .map(|(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or(""));
        if authority.is_some_and(|a| a.contains(['@', '\\'])) {
            r.error_value(
                &to_at,
                "routes.redirect_invalid",
                "the host of a redirect holds no user part (@) or backslash",
            );
            return None;
        }
    }
    let code = match f.get("code") {
        None => 302,
        Some(c) => match r.u64(&c, "routes.redirect_invalid") {
            Some(n @ (301 | 302 | 307 | 308)) => n as u16,
            Some(_) => {
                r.error_value(
                    &c,
                    "routes.redirect_invalid",
                    "must be 301, 302, 307 or 308",
                );
                return None;
            }
            None => return None,
        },
    };
    Some(Redirect { to, code })
}

/// `direct_response: {status, weight}`: a status from 200 to 599; a
/// weight only beside `upstreams`.
fn direct_response(
    r: &mut Reader<'_>,
    at: &At<'_>,
    route: &yaml::Fields<'_>,
) -> Option<DirectResponse> {
    const CODE: &str = "routes.direct_response_invalid";
    let f = r.mapping(at, schema::DIRECT_RESPONSE)?;
    let Some(s) = f.get("status") else {
        missing(r, at, "status");
        return None;
    };
    let status = match r.u64(&s, CODE)? {
        n @ 200..=599 => n as u16,
        _ => {
            r.error_value(&s, CODE, "a status from 200 to 599");
            return None;
        }
    };
    let weight = match f.get("weight") {
        None => None,
        Some(w) if route.get("upstreams").is_none() => {
            r.error(
                &w,
                CODE,
                "a weight is a share beside upstreams: give upstreams too",
            );
            return None;
        }
        Some(w) => Some(u32::try_from(r.u64(&w, CODE)?).unwrap_or(u32::MAX)),
    };
    Some(DirectResponse { status, weight })
}

pub(super) fn rewrite(r: &mut Reader<'_>, at: &At<'_>, vars: &Vars) -> Rewrite {
    let Some(f) = r.mapping(at, schema::REWRITE) else {
        return Rewrite::default();
    };
    let path = f.get("path").and_then(|p| {
        let t = template(r, &p, vars)?;
        if !matches!(t.0.first(), Some(Piece::Text(s)) if s.starts_with('/'))
            && !matches!(t.0.first(), Some(Piece::Var(v)) if v == "path" || v == "rest")
        {
            r.error_value(&p, "routes.rewrite_invalid", "a path starts with /");
        }
        if t.0.iter().any(|piece| *piece == Piece::Var("query".into())) {
            r.error_value(
                &p,
                "routes.rewrite_invalid",
                "the query is kept as sent; leave {query} out",
            );
        }
        Some(t)
    });
    let host = f.get("host").and_then(|h| {
        let text = r.string(&h)?;
        let (name, port) = text.rsplit_once(':').unwrap_or((&text, "1"));
        let name_ok = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
        match name_ok && port.parse::<u16>().is_ok() {
            true => Some(text),
            false => {
                r.error_value(&h, "routes.rewrite_invalid", "not a host[:port]");
                None
            }
        }
    });
    Rewrite { path, host }
}

/// `set`/`add` (`NAME: template`) and `remove` (`[NAME]`) for one direction.
pub(super) fn header_edits(
    r: &mut Reader<'_>,
    at: &At<'_>,
    vars: &Vars,
    identity: &IdentityHeaders,
) -> HeaderEdits {
    let mut out = HeaderEdits::default();
    let Some(f) = r.mapping(at, schema::HEADER_EDITS) else {
        return out;
    };
    let name = |r: &mut Reader<'_>, at: &At<'_>, text: &str| {
        let Ok(h) = HeaderName::from_bytes(text.as_bytes()) else {
            r.error(at, "config.header_invalid", "not a valid header name");
            return None;
        };
        if RESERVED.contains(&h.as_str()) || identity.all().contains(&&h) {
            r.error(
                at,
                "routes.header_reserved",
                format!("{h} is set or read by the gateway itself"),
            );
            return None;
        }
        Some(h)
    };
    for (key, list) in [("set", &mut out.set), ("add", &mut out.add)] {
        let Some(m) = f.get(key) else { continue };
        for (text, item) in r.named(&m) {
            if let (Some(h), Some(t)) = (name(r, &item, text), template(r, &item, vars)) {
                list.push((h, t));
            }
        }
    }
    if let Some(rm) = f.get("remove") {
        for (i, node) in r.sequence(&rm).into_iter().enumerate() {
            let item = rm.item(i, node);
            if let Some(h) = r.string(&item).and_then(|t| name(r, &item, &t)) {
                out.remove.push(h);
            }
        }
    }
    out
}

/// `allow_cidrs`, `deny_cidrs`, `limit_exempt_cidrs` of a route or the server.
pub(super) fn address_rules(r: &mut Reader<'_>, f: &yaml::Fields<'_>) -> AddressRules {
    let mut out = AddressRules::default();
    for (key, list) in [
        ("allow_cidrs", &mut out.allow),
        ("deny_cidrs", &mut out.deny),
        ("limit_exempt_cidrs", &mut out.limit_exempt),
    ] {
        let Some(at) = f.get(key) else { continue };
        for (i, node) in r.sequence(&at).into_iter().enumerate() {
            let item = at.item(i, node);
            if let Some(net) = cidr(r, &item) {
                list.push(net);
            }
        }
    }
    out
}

pub(super) fn cidr(r: &mut Reader<'_>, item: &At<'_>) -> Option<IpNet> {
    let text = r.string(item)?;
    let net = text
        .parse::<IpNet>()
        .or_else(|_| text.parse::<std::net::IpAddr>().map(IpNet::from));
    match net {
        Ok(net) => Some(net),
        Err(_) => {
            r.error_value(
                item,
                "server.cidr_invalid",
                "expected a CIDR such as 10.0.0.0/8 or an IP address",
            );
            None
        }
    }
}

pub(super) fn timeouts(r: &mut Reader<'_>, at: &At<'_>) -> Timeouts {
    let mut out = Timeouts::default();
    let Some(f) = r.mapping(at, schema::TIMEOUTS) else {
        return out;
    };
    for (key, slot) in [
        ("connect", &mut out.connect),
        ("read", &mut out.read),
        ("write", &mut out.write),
        ("total", &mut out.total),
    ] {
        *slot = f.get(key).and_then(|d| r.positive_duration(&d));
    }
    out
}

/// `cors`: the origins, methods and headers a browser page may use.
pub(super) fn cors(r: &mut Reader<'_>, at: &At<'_>) -> Option<Cors> {
    let f = r.mapping(at, schema::CORS)?;
    let list =
        |r: &mut Reader<'_>, key: &str| f.get(key).map(|a| r.strings(&a)).unwrap_or_default();
    let origins: Vec<String> = list(r, "origins")
        .iter()
        .map(|o| o.to_ascii_lowercase())
        .collect();
    let Some(origins_at) = f.get("origins") else {
        missing(r, at, "origins");
        return None;
    };
    for o in &origins {
        let (scheme, rest) = o.split_once("://").unwrap_or(("", ""));
        let ok = o == "*"
            || (matches!(scheme, "http" | "https") && !rest.is_empty() && !rest.contains('/'));
        if !ok {
            r.error(
                &origins_at,
                "routes.cors_invalid",
                format!("{o} is not * or scheme://host[:port]"),
            );
        }
    }
    let credentials = f
        .get("credentials")
        .and_then(|c| r.bool(&c))
        .unwrap_or(false);
    if credentials && origins.iter().any(|o| o == "*") {
        r.error(
            &origins_at,
            "routes.cors_invalid",
            "credentials cannot be allowed to any origin (*): list the origins",
        );
    }
    let methods: Vec<String> = list(r, "methods")
        .iter()
        .map(|m| m.to_ascii_uppercase())
        .collect();
    if let Some(bad) = methods.iter().find(|m| !METHODS.contains(&m.as_str())) {
        r.error(
            &f.get("methods")?,
            "routes.cors_invalid",
            format!("{bad} is not an HTTP method"),
        );
    }
    Some(Cors {
        origins,
        methods,
        headers: list(r, "headers")
            .iter()
            .map(|h| h.to_ascii_lowercase())
            .collect(),
        expose: list(r, "expose"),
        credentials,
        max_age: f.get("max_age").and_then(|d| r.duration(&d)),
    })
}
