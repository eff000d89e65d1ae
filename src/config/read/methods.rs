//! Reads `auth.methods` (external, basic, API-key authentication) and the
//! identity maps of methods and routes. The htpasswd and keys files are
//! the policy builder's to load; this checks shapes, URLs and names.

use super::*;
use crate::config::methods::*;

/// The longest an external method's `timeout` may be.
const MAX_TIMEOUT: Duration = Duration::from_secs(30);

/// A query parameter or cookie name: written into URLs and read from
/// cookies as it is, so URL- and cookie-safe characters only.
fn token(r: &mut Reader<'_>, at: &At<'_>) -> Option<String> {
    let text = r.string(at)?;
    let ok = !text.is_empty()
        && text.len() <= 64
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._~-".contains(&b));
    if !ok {
        r.error_value(
            at,
            "auth.method_invalid",
            "use 1 to 64 of A-Z a-z 0-9 . _ ~ -",
        );
        return None;
    }
    Some(text)
}

/// Headers passed to an external auth service unless `request_headers` says.
const REQUEST_HEADERS: &[&str] = &["cookie", "authorization"];
/// Headers of a refusal passed to the client unless `challenge_headers` says.
const CHALLENGE_HEADERS: &[&str] = &["www-authenticate", "location"];

pub(super) fn methods(
    r: &mut Reader<'_>,
    at: Option<At<'_>>,
    base: &Path,
) -> BTreeMap<String, Method> {
    let mut out = BTreeMap::new();
    let Some(at) = at else {
        return out;
    };
    for (name, item) in r.named(&at) {
        if !name_ok(name) || name == "none" || name == "required" {
            r.error(
                &item,
                "auth.method_invalid",
                format!(
                    "{}: names use A-Z a-z 0-9 _ - only and are not none or required",
                    item.path
                ),
            );
            continue;
        }
        if let Some(m) = method(r, &item, base) {
            out.insert(name.to_string(), m);
        }
    }
    out
}

fn method(r: &mut Reader<'_>, at: &At<'_>, base: &Path) -> Option<Method> {
    let f = r.mapping(at, schema::AUTH_METHOD)?;
    let kinds: Vec<&str> = ["external", "basic", "api_key"]
        .into_iter()
        .filter(|k| f.get(k).is_some())
        .collect();
    if kinds.len() != 1 {
        r.error(
            at,
            "auth.method_invalid",
            "give exactly one of external, basic, api_key",
        );
        return None;
    }
    let inner = f.get(kinds[0])?;
    let kind = match kinds[0] {
        "external" => MethodKind::External(Box::new(external(r, &inner, base)?)),
        "basic" => MethodKind::Basic(basic(r, &inner, base)?),
        _ => MethodKind::ApiKey(api_key(r, &inner, base)?),
    };
    let identity = f
        .get("identity")
        .map(|i| identity_map(r, &i, &kind))
        .unwrap_or_default();
    Some(Method { kind, identity })
}

fn external(r: &mut Reader<'_>, at: &At<'_>, base: &Path) -> Option<External> {
    let f = r.mapping(at, schema::AUTH_EXTERNAL)?;
    let Some(url_at) = f.get("url") else {
        missing(r, at, "url");
        return None;
    };
    // Read on after a bad URL, so that every problem is said at once.
    let url = http_url(r, &url_at);
    let method = match f.get("method") {
        Some(m) => subrequest_method(r, &m)?,
        None => http::Method::GET,
    };
    let timeout = match f.get("timeout") {
        Some(t) => match r.positive_duration(&t) {
            Some(d) if d > MAX_TIMEOUT => {
                r.error_value(
                    &t,
                    "auth.method_invalid",
                    "at most 30s: every request waits for it",
                );
                MAX_TIMEOUT
            }
            Some(d) => d,
            None => Duration::from_secs(1),
        },
        None => Duration::from_secs(1),
    };
    let names = |r: &mut Reader<'_>, key: &str, default: &[&'static str]| match f.get(key) {
        Some(h) => {
            let names = header_names(r, &h, key != "request_headers");
            // The gateway's own answer has its Content-Type.
            let to_client = matches!(key, "challenge_headers" | "set_headers");
            if to_client && names.contains(&http::header::CONTENT_TYPE) {
                {
                    r.error(
                        &h,
                        "auth.method_invalid",
                        "content-type: the gateway's answer has its own",
                    );
                }
            }
            names
        }
        None => default.iter().map(|h| HeaderName::from_static(h)).collect(),
    };
    let mut external = External {
        url: String::new(),
        method,
        timeout,
        request_headers: names(r, "request_headers", REQUEST_HEADERS),
        response_headers: names(r, "response_headers", &[]),
        strip_everywhere: f
            .get("strip_everywhere")
            .and_then(|s| r.bool(&s))
            .unwrap_or(true),
        challenge_headers: names(r, "challenge_headers", CHALLENGE_HEADERS),
        set_headers: names(r, "set_headers", &[]),
        signin: f.get("signin").and_then(|s| signin(r, &s)),
        cache: f.get("cache").and_then(|c| answer_cache(r, &c)),
        breaker: f.get("breaker").map(|b| breaker(r, &b)).unwrap_or(Breaker {
            failures: 3,
            open_for: Duration::from_secs(5),
        }),
        ca_file: ca_file(r, &f, url.as_deref(), "auth.ca_invalid", base),
    };
    external.url = url?;
    Some(external)
}

/// An external method's `method`: one HTTP's own.
fn subrequest_method(r: &mut Reader<'_>, at: &At<'_>) -> Option<http::Method> {
    let text = r.string(at)?;
    if !METHODS.contains(&text.as_str()) {
        r.error_value(
            at,
            "auth.method_invalid",
            format!("must be one of {}", METHODS.join(", ")),
        );
        return None;
    }
    http::Method::from_bytes(text.as_bytes()).ok()
}

/// An absolute `http://` or `https://` URL with a host (a sign-in URL
/// may name the request's host as `$host`).
fn http_url(r: &mut Reader<'_>, at: &At<'_>) -> Option<String> {
    let text = r.string(at)?;
    let ok = text
        .replace("$host", "host.invalid")
        .parse::<http::Uri>()
        .ok()
        .is_some_and(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some());
    if !ok {
        r.error_value(
            at,
            "auth.method_invalid",
            "must be an absolute http:// or https:// URL",
        );
        return None;
    }
    Some(text)
}

/// A list of header names; `answered`: names copied from an answer, so
/// no framing header.
fn header_names(r: &mut Reader<'_>, at: &At<'_>, answered: bool) -> Vec<HeaderName> {
    let mut out = Vec::new();
    for (i, node) in r.sequence(at).into_iter().enumerate() {
        let item = at.item(i, node);
        if let Some(h) = header_name(r, &item, answered) {
            out.push(h);
        }
    }
    out
}

fn header_name(r: &mut Reader<'_>, at: &At<'_>, answered: bool) -> Option<HeaderName> {
    let text = r.string(at)?;
    let Ok(h) = HeaderName::from_bytes(text.as_bytes()) else {
        r.error_value(at, "config.header_invalid", "not a valid header name");
        return None;
    };
    if answered && FRAMING_HEADERS.contains(&h.as_str()) {
        r.error_value(at, "auth.method_invalid", "frames the request or is written by the gateway itself; it is never taken from an auth service's answer");
        return None;
    }
    Some(h)
}

fn signin(r: &mut Reader<'_>, at: &At<'_>) -> Option<SignIn> {
    let f = r.mapping(at, schema::AUTH_SIGNIN)?;
    let Some(url_at) = f.get("url") else {
        missing(r, at, "url");
        return None;
    };
    let url = http_url(r, &url_at)?;
    let hosts = match f.get("hosts") {
        Some(h) => r
            .strings(&h)
            .into_iter()
            .map(|h| h.to_ascii_lowercase())
            .collect(),
        None => Vec::new(),
    };
    if hosts.is_empty() {
        r.error(
            at,
            "auth.signin_hosts_missing",
            "list the hosts a browser may be sent back to under `hosts`, so the sign-in redirect is never an open redirect",
        );
        return None;
    }
    let param = match f.get("param") {
        Some(p) => token(r, &p)?,
        None => "rd".into(),
    };
    Some(SignIn { url, param, hosts })
}

fn answer_cache(r: &mut Reader<'_>, at: &At<'_>) -> Option<AnswerCache> {
    let f = r.mapping(at, schema::AUTH_CACHE)?;
    let key = match (f.get("cookie"), f.get("header")) {
        (Some(c), None) => CacheKey::Cookie(token(r, &c)?),
        (None, Some(h)) => {
            let text = r.string(&h)?;
            match HeaderName::from_bytes(text.as_bytes()) {
                Ok(h) => CacheKey::Header(h),
                Err(_) => {
                    r.error_value(&h, "config.header_invalid", "not a valid header name");
                    return None;
                }
            }
        }
        _ => {
            r.error(
                at,
                "auth.method_invalid",
                "give exactly one of cookie, header (what names the session)",
            );
            return None;
        }
    };
    let ttl = match f.get("ttl") {
        Some(t) => r.positive_duration(&t)?,
        None => Duration::from_secs(30),
    };
    let entries = f
        .get("entries")
        .and_then(|e| r.count(&e, "auth.method_invalid"))
        .map_or(10_000, NonZeroU64::get);
    let max_bytes = f
        .get("max_bytes")
        .and_then(|b| r.size(&b))
        .unwrap_or(16 << 20);
    let per_uri = f.get("per_uri").and_then(|p| r.bool(&p)).unwrap_or(false);
    Some(AnswerCache {
        key,
        ttl,
        entries,
        max_bytes,
        per_uri,
    })
}

fn breaker(r: &mut Reader<'_>, at: &At<'_>) -> Breaker {
    let mut b = Breaker {
        failures: 3,
        open_for: Duration::from_secs(5),
    };
    if let Some(f) = r.mapping(at, schema::AUTH_BREAKER) {
        if let Some(n) = f
            .get("failures")
            .and_then(|n| r.count(&n, "auth.method_invalid"))
        {
            b.failures = u32::try_from(n.get()).unwrap_or(u32::MAX);
        }
        if let Some(d) = f.get("open_for").and_then(|d| r.positive_duration(&d)) {
            b.open_for = d;
        }
    }
    b
}

fn basic(r: &mut Reader<'_>, at: &At<'_>, base: &Path) -> Option<Basic> {
    let f = r.mapping(at, schema::AUTH_BASIC)?;
    let htpasswd = text_source(r, at, &f, "htpasswd", base)?;
    let realm = f
        .get("realm")
        .and_then(|x| r.string(&x))
        .unwrap_or_else(|| "fairgate".into());
    if realm.contains('"') || realm.contains('\\') || realm.chars().any(char::is_control) {
        r.error(
            at,
            "auth.method_invalid",
            "realm: no quotes, backslashes or control characters",
        );
        return None;
    }
    let users = match (f.get("users_file"), f.get("users")) {
        (None, None) => None,
        _ => Some(text_source(r, at, &f, "users", base)?),
    };
    Some(Basic {
        htpasswd,
        realm,
        users,
    })
}

fn api_key(r: &mut Reader<'_>, at: &At<'_>, base: &Path) -> Option<ApiKey> {
    let f = r.mapping(at, schema::AUTH_API_KEY)?;
    let keys = text_source(r, at, &f, "keys", base)?;
    let header = match f.get("header") {
        Some(h) => {
            let text = r.string(&h)?;
            match HeaderName::from_bytes(text.as_bytes()) {
                Ok(h) => Some(h),
                Err(_) => {
                    r.error_value(&h, "config.header_invalid", "not a valid header name");
                    return None;
                }
            }
        }
        None => None,
    };
    let query = match f.get("query") {
        Some(q) => Some(token(r, &q)?),
        None => None,
    };
    if header.is_none() && query.is_none() {
        r.error(
            at,
            "auth.method_invalid",
            "give header, query or both (where the key is sent)",
        );
        return None;
    }
    Some(ApiKey {
        header,
        query,
        keys,
    })
}

/// `{what}_file` (a path) or `{what}` (the text itself, as the Kubernetes
/// controller hands over a Secret's), exactly one.
fn text_source(
    r: &mut Reader<'_>,
    at: &At<'_>,
    f: &yaml::Fields<'_>,
    what: &str,
    base: &Path,
) -> Option<Located<PemSource>> {
    let file = format!("{what}_file");
    match (f.get(&file), f.get(what)) {
        (Some(_), Some(_)) | (None, None) => {
            r.error(
                at,
                "auth.method_invalid",
                "give exactly one of {file}, {what}",
            );
            None
        }
        (None, Some(t)) => {
            let text = r.string(&t)?;
            // Placed without its value: the text is the secret.
            Some(Located {
                place: t.place(),
                value: PemSource::Pem {
                    name: t.path.clone(),
                    bytes: text.into_bytes().into(),
                },
            })
        }
        (Some(p), None) => {
            let path = file_path(r, f, &file, base)?;
            Some(Located {
                place: p.place_value(),
                value: PemSource::File(path),
            })
        }
    }
}

/// `identity:` of a method or route: each of tenant, user, plan is
/// `{header: NAME}` (external answers only), `{value: TEXT}` or `username`.
pub(super) fn identity_map(r: &mut Reader<'_>, at: &At<'_>, kind: &MethodKind) -> IdentityMap {
    let mut map = IdentityMap::default();
    let Some(f) = r.mapping(at, schema::IDENTITY_MAP) else {
        return map;
    };
    for (key, slot) in [
        ("tenant", &mut map.tenant),
        ("user", &mut map.user),
        ("plan", &mut map.plan),
    ] {
        if let Some(s) = f.get(key) {
            *slot = id_source(r, &s, kind);
        }
    }
    map
}

fn id_source(r: &mut Reader<'_>, at: &At<'_>, kind: &MethodKind) -> Option<IdSource> {
    if at.node.as_scalar().is_some() {
        return match r.string(at).as_deref() {
            Some("username") if !matches!(kind, MethodKind::External(_)) => {
                Some(IdSource::Username)
            }
            _ => {
                r.error_value(
                    at,
                    "auth.identity_invalid",
                    "must be username (basic, api_key), {header: NAME} (external) or {value: TEXT}",
                );
                None
            }
        };
    }
    let f = r.mapping(at, &["header", "value"])?;
    match (f.get("header"), f.get("value")) {
        (Some(h), None) if matches!(kind, MethodKind::External(_)) => {
            header_name(r, &h, true).map(IdSource::Header)
        }
        (None, Some(v)) => r.string(&v).map(IdSource::Value),
        _ => {
            r.error(
                at,
                "auth.identity_invalid",
                "give {header: NAME} (external auth only) or {value: TEXT}",
            );
            None
        }
    }
}
