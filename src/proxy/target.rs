//! The one path: reads the request target once (`target`: origin- or
//! absolute-form, normal form, refusals for anything a decoding upstream
//! could read differently) and gives the URI the upstream gets
//! (`upstream_uri`). Picking the route is `crate::routing`.

use std::borrow::Cow;
use std::fmt::Write;

use crate::config::{EscapedSlashes, Route};

/// The URI the upstream gets when it differs from the routed one: the
/// route's `strip_prefix` removed (whole segments; an empty rest is `/`),
/// the query kept.
pub fn upstream_uri(route: &Route, uri: &http::Uri) -> Option<http::Uri> {
    let prefix = route.strip_prefix.as_deref()?;
    let path = match uri.path().strip_prefix(prefix)? {
        "" => "/",
        rest if rest.starts_with('/') => rest,
        _ => return None,
    };
    let text = match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_string(),
    };
    text.parse().ok()
}

/// Why a request target cannot be routed; each is a 400.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadTarget {
    /// Not origin-form `/...`, absolute-form `http(s)://host/...` or `OPTIONS *`.
    Form,
    /// Absolute-form naming another host than `Host`.
    Authority,
    /// A malformed escape, `%00`, `%25XX`, invalid UTF-8 or a non-ASCII byte.
    Escape,
    /// `%2F` or `%5C` under `escaped_slashes: reject`.
    EscapedSlash,
    /// Dot segments, also encoded or as `..;`.
    DotSegment,
    /// `;` under `path_parameters: reject`: servlet containers cut
    /// `/admin;x/users` to `/admin/users`, prefix routes do not.
    PathParameter,
    /// A Host (or absolute-form authority) that is not `host[:port]`.
    Host,
}

impl BadTarget {
    pub fn detail(self) -> &'static str {
        match self {
            BadTarget::Form => "the request target must be a path starting with /",
            BadTarget::Authority => "the absolute request target names another host than Host",
            BadTarget::Escape => {
                "the path has a malformed, NUL, double-encoded or non-UTF-8 escape"
            }
            BadTarget::EscapedSlash => "the path has a backslash or an encoded slash (%2F or %5C)",
            BadTarget::DotSegment => "the path has dot segments",
            BadTarget::PathParameter => "the path has a ; (path parameters are not accepted)",
            BadTarget::Host => "the Host is not a valid host name with an optional port",
        }
    }
}

/// What a request target means to fairgate: the one path it routes,
/// authenticates, limits, logs and forwards, and the query forwarded as sent.
#[derive(Debug, PartialEq, Eq)]
pub struct Target<'a> {
    pub path: Cow<'a, str>,
    pub query: Option<&'a str>,
    /// The authority of an absolute-form target (`http://host:port/...`).
    pub authority: Option<&'a str>,
}

/// Reads a raw request target (RFC 9112 section 3.2). `Ok(None)` is
/// `OPTIONS *`, which names no path. `host` is the normalised Host header.
pub fn target<'a>(
    raw: &'a [u8],
    method: &str,
    host: Option<&str>,
    rules: PathRules,
) -> Result<Option<Target<'a>>, BadTarget> {
    if raw == b"*" {
        return if method == "OPTIONS" {
            Ok(None)
        } else {
            Err(BadTarget::Form)
        };
    }
    let raw = std::str::from_utf8(raw).map_err(|_| BadTarget::Escape)?;
    if raw.contains('#') {
        return Err(BadTarget::Form);
    }
    let (authority, origin) = match absolute_form(raw) {
        Some((authority, rest)) => {
            let named = host_of(authority).ok_or(BadTarget::Host)?;
            if host.is_some_and(|h| h != named) {
                return Err(BadTarget::Authority);
            }
            (Some(authority), rest)
        }
        None => (None, raw),
    };
    let (path, query) = match origin.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (origin, None),
    };
    // Absolute-form with an empty path means `/` (RFC 9112 section 3.2.2).
    let path = if path.is_empty() && origin.len() != raw.len() {
        "/"
    } else {
        path
    };
    if !path.starts_with('/') {
        return Err(BadTarget::Form);
    }
    // Not a URI character, yet IIS and WHATWG parsers read it as `/`.
    if path.contains('\\') {
        return Err(BadTarget::EscapedSlash);
    }
    if path.contains(';') && !rules.keep_path_parameters {
        return Err(BadTarget::PathParameter);
    }
    let path = normalize(path, rules.escaped_slashes)?;
    if !path_is_safe(&path) {
        return Err(BadTarget::DotSegment);
    }
    Ok(Some(Target {
        path,
        query,
        authority,
    }))
}

/// How paths are read: `server.escaped_slashes` and `server.path_parameters`.
#[derive(Debug, Clone, Copy)]
pub struct PathRules {
    pub escaped_slashes: EscapedSlashes,
    pub keep_path_parameters: bool,
}

/// `http://authority/rest` or `https://...` (scheme case-insensitive):
/// the authority and the rest, which may be empty or start with `/` or `?`.
fn absolute_form(raw: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = raw.split_once("://")?;
    if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) {
        return None;
    }
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..end];
    (!authority.is_empty() && !authority.contains('@')).then(|| (authority, &rest[end..]))
}

/// The one form of a path that fairgate routes on and forwards, so it and
/// the upstream cannot read a request differently: percent-encoded
/// unreserved characters decoded (RFC 3986 6.2.2.2: `%73` is `s`), other
/// escapes upper-cased, empty segments (`//`) collapsed, encoded slashes
/// refused, decoded or kept as `slashes` says. Refused: malformed escapes,
/// `%00`, `%25` before two hex digits (a second decoding would change the
/// path), non-ASCII bytes, and escapes that decode to invalid UTF-8.
pub fn normalize(path: &str, slashes: EscapedSlashes) -> Result<Cow<'_, str>, BadTarget> {
    if !path.is_ascii() {
        return Err(BadTarget::Escape);
    }
    if !path.contains('%') && !path.contains("//") {
        return Ok(Cow::Borrowed(path));
    }
    let bytes = path.as_bytes();
    let hex_at = |i: usize| {
        path.get(i..i + 2)
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|h| u8::from_str_radix(h, 16).ok())
    };
    let mut out = String::with_capacity(path.len());
    // Every escape decoded, to check that the path is UTF-8 once decoded.
    let mut decoded = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let v = hex_at(i + 1).ok_or(BadTarget::Escape)?;
            i += 3;
            decoded.push(v);
            match v {
                0 => return Err(BadTarget::Escape),
                b'%' if hex_at(i).is_some() => return Err(BadTarget::Escape),
                b'/' | b'\\' => match slashes {
                    EscapedSlashes::Reject => return Err(BadTarget::EscapedSlash),
                    EscapedSlashes::Decode if out.ends_with('/') => {}
                    EscapedSlashes::Decode => out.push('/'),
                    EscapedSlashes::Keep => {
                        let _ = write!(out, "%{v:02X}");
                    }
                },
                v if v.is_ascii_alphanumeric() || matches!(v, b'-' | b'.' | b'_' | b'~') => {
                    out.push(v as char)
                }
                v => {
                    let _ = write!(out, "%{v:02X}");
                }
            }
            continue;
        }
        decoded.push(b);
        i += 1;
        if b == b'/' && out.ends_with('/') {
            continue;
        }
        out.push(b as char);
    }
    std::str::from_utf8(&decoded).map_err(|_| BadTarget::Escape)?;
    // Decoding `%32%46` after `%25` spells `%252F`: as double-encoded as `%252F`.
    let double = out.match_indices("%25").any(|(i, _)| {
        out.get(i + 3..i + 5)
            .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
    });
    if double {
        return Err(BadTarget::Escape);
    }
    Ok(Cow::Owned(out))
}

/// A path fairgate and the upstream would read alike: absolute, without
/// `.`/`..` segments (also percent-encoded, or with `;params` as servlet
/// containers read them) and without NUL.
pub fn path_is_safe(path: &str) -> bool {
    if !path.starts_with('/') || path.contains('\0') {
        return false;
    }
    let dot_segment = |seg: &str| {
        let seg = seg.split(';').next().unwrap_or("");
        seg == "." || seg == ".."
    };
    if !path.contains(['%', '\\']) {
        return !path.split('/').any(dot_segment);
    }
    // Read the path as the most lenient upstream would: encoded dots,
    // slashes and semicolons decoded (a reader that decodes before it cuts
    // `;params` reads `..%3B` as `..`), backslashes as slashes.
    let lenient = path
        .to_ascii_lowercase()
        .replace("%2e", ".")
        .replace("%3b", ";")
        .replace("%2f", "/")
        .replace("%5c", "/")
        .replace('\\', "/");
    !lenient.split('/').any(dot_segment)
}

/// The Host header as routes see it: without port, lower-cased, without
/// the one trailing dot of a fully qualified name. `None` when it is not
/// `host[:port]` (a reg-name of letters, digits, `-`, `.`, `_`, an IPv4
/// address or a bracketed IPv6 address; the port all digits): a host that
/// one reader cuts at `:` and another does not would pick different routes.
pub fn host_of(raw: &str) -> Option<String> {
    let (host, port) = if raw.starts_with('[') {
        let end = raw.find(']')?;
        let (host, rest) = raw.split_at(end + 1);
        let port = match rest {
            "" => "",
            r => r.strip_prefix(':')?,
        };
        let inner = &host[1..host.len() - 1];
        let ipv6 = !inner.is_empty()
            && inner
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
        if !ipv6 {
            return None;
        }
        (host, port)
    } else {
        let (host, port) = raw.rsplit_once(':').unwrap_or((raw, ""));
        let name = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
        if !name {
            return None;
        }
        (host, port)
    };
    if port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(crate::host::normal_name(host))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_paths() {
        assert!(path_is_safe("/v1/a.b/c"));
        assert!(!path_is_safe("/healthz/../v1"));
        assert!(!path_is_safe("/a/%2E%2e/b"));
        assert!(!path_is_safe("/a/./b"));
        assert!(!path_is_safe("/a%2F..%2Fb"));
        assert!(path_is_safe("/projects/group%2Fname"));
        assert!(!path_is_safe("v1"));
    }

    fn norm(path: &str, slashes: EscapedSlashes) -> Result<String, BadTarget> {
        normalize(path, slashes).map(|p| p.into_owned())
    }

    #[test]
    fn normal_form() {
        use EscapedSlashes::*;
        assert_eq!(
            norm("/v1/auth/%72efresh", Reject).unwrap(),
            "/v1/auth/refresh"
        );
        assert_eq!(
            norm("/webhooks/%73tripe", Reject).unwrap(),
            "/webhooks/stripe"
        );
        assert_eq!(norm("//v1///x/", Reject).unwrap(), "/v1/x/");
        assert_eq!(norm("/a%2fb%3A", Keep).unwrap(), "/a%2Fb%3A");
        assert_eq!(norm("/a%2fb", Reject), Err(BadTarget::EscapedSlash));
        assert_eq!(norm("/a%5Cb", Reject), Err(BadTarget::EscapedSlash));
        assert_eq!(norm("/a%2f%2Fb", Decode).unwrap(), "/a/b");
        assert_eq!(norm("/bad%zz", Keep), Err(BadTarget::Escape));
        assert_eq!(norm("/cut%4", Keep), Err(BadTarget::Escape));
        assert_eq!(norm("/nul%00x", Keep), Err(BadTarget::Escape));
        assert_eq!(norm("/twice%252F", Keep), Err(BadTarget::Escape));
        assert_eq!(norm("/pct%25zz", Keep).unwrap(), "/pct%25zz");
        assert_eq!(norm("/p%25%32%46", Keep), Err(BadTarget::Escape));
        assert_eq!(norm("/overlong%C0%AF", Keep), Err(BadTarget::Escape));
        assert_eq!(norm("/caf%C3%A9", Keep).unwrap(), "/caf%C3%A9");
        assert_eq!(norm("/raw\u{e9}", Keep), Err(BadTarget::Escape));
    }

    #[test]
    fn servlet_dot_segments() {
        assert!(!path_is_safe("/public/..;/admin"));
        assert!(path_is_safe("/items;v=1/x"));
    }

    #[test]
    fn hosts() {
        let h = |raw: &str| host_of(raw);
        assert_eq!(
            h("API.example.com:8080").as_deref(),
            Some("api.example.com")
        );
        assert_eq!(h("[::1]:80").as_deref(), Some("[::1]"));
        assert_eq!(h("example.com").as_deref(), Some("example.com"));
        assert_eq!(
            h("API.example.com.:443").as_deref(),
            Some("api.example.com")
        );
        assert_eq!(h("127.0.0.1:").as_deref(), Some("127.0.0.1"));
        for bad in [
            "api.example.com:abc",
            "api.example.com:80x",
            "api.example.com:+80",
            "api.example.com:-1",
            "user@api.example.com",
            "",
            ":80",
            "[::1",
            "[zz]:80",
            "a b",
            "api.example.com:123456",
        ] {
            assert_eq!(h(bad), None, "{bad}");
        }
    }

    #[test]
    fn targets() {
        let rules = PathRules {
            escaped_slashes: EscapedSlashes::Reject,
            keep_path_parameters: false,
        };
        let t = |raw: &str, method: &str, host: Option<&str>| {
            target(raw.as_bytes(), method, host, rules)
                .map(|t| t.map(|t| (t.path.into_owned(), t.query.map(str::to_string))))
        };
        for bad in [
            "x:/admin/users",
            "v1/secret",
            "foo:bar/x",
            "mailto:/healthz",
            "",
        ] {
            assert_eq!(t(bad, "GET", None), Err(BadTarget::Form), "{bad}");
        }
        assert_eq!(t("*", "GET", None), Err(BadTarget::Form));
        assert_eq!(t("*", "OPTIONS", None), Ok(None));
        assert_eq!(t("/a#frag", "GET", None), Err(BadTarget::Form));
        assert_eq!(
            t("/v1/x?a=1", "GET", None),
            Ok(Some(("/v1/x".into(), Some("a=1".into()))))
        );
        assert_eq!(
            t(
                "HTTP://api.example.com:80/v1?q",
                "GET",
                Some("api.example.com")
            ),
            Ok(Some(("/v1".into(), Some("q".into()))))
        );
        assert_eq!(
            t("http://api.example.com", "GET", Some("api.example.com")),
            Ok(Some(("/".into(), None)))
        );
        assert_eq!(
            t("http://evil.example/admin", "GET", Some("api.example.com")),
            Err(BadTarget::Authority)
        );
        assert_eq!(t("ftp://h/x", "GET", None), Err(BadTarget::Form));
        assert_eq!(t("/a/%2e%2E/b", "GET", None), Err(BadTarget::DotSegment));
        assert_eq!(t("/\\admin", "GET", None), Err(BadTarget::EscapedSlash));
        assert_eq!(
            t("/admin;x/users", "GET", None),
            Err(BadTarget::PathParameter)
        );
        assert_eq!(
            t("/a?b;c", "GET", None),
            Ok(Some(("/a".into(), Some("b;c".into()))))
        );
        assert_eq!(t("http://a:b/x", "GET", None), Err(BadTarget::Host));
        let keep = PathRules {
            keep_path_parameters: true,
            ..rules
        };
        assert!(target(b"/items;v=1", "GET", None, keep).is_ok());
    }
}
