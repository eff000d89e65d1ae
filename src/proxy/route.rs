//! Picks the route for a request: the first route, in file order, whose
//! host, path and method all match. Also refuses paths that could mean one
//! route to fairgate and another to the upstream (dot segments).

use std::borrow::Cow;

use crate::config::{Config, HostMatch, PathMatch, Route, Segment};

/// The chosen route and the values of its path captures.
#[derive(Debug)]
pub struct Matched<'c> {
    pub index: usize,
    pub route: &'c Route,
    pub captures: Vec<(&'c str, String)>,
}

/// `host` is the request's Host without port, lower-cased.
pub fn find<'c>(config: &'c Config, host: &str, method: &str, path: &str) -> Option<Matched<'c>> {
    config.routes.iter().enumerate().find_map(|(index, route)| {
        if !host_matches(route.host.as_ref(), host) {
            return None;
        }
        if !route.methods.is_empty() && !route.methods.iter().any(|m| m == method) {
            return None;
        }
        let captures = path_matches(&route.path, path)?;
        Some(Matched {
            index,
            route,
            captures,
        })
    })
}

fn host_matches(want: Option<&HostMatch>, host: &str) -> bool {
    match want {
        None => true,
        Some(HostMatch::Exact(h)) => h == host,
        Some(HostMatch::Suffix(s)) => host.len() > s.len() && host.ends_with(s.as_str()),
    }
}

fn path_matches<'c>(want: &'c PathMatch, path: &str) -> Option<Vec<(&'c str, String)>> {
    match want {
        PathMatch::Any => Some(Vec::new()),
        PathMatch::Exact(p) => (p == path).then(Vec::new),
        // A prefix matches whole segments: `/v1/files` matches `/v1/files` and
        // `/v1/files/x`, never `/v1/filesystem`.
        PathMatch::Prefix(p) => {
            let rest = path.strip_prefix(p.as_str())?;
            (rest.is_empty() || rest.starts_with('/')).then(Vec::new)
        }
        PathMatch::Pattern(segments) => {
            let mut parts = path.strip_prefix('/')?.split('/');
            let mut captures = Vec::new();
            for seg in segments {
                let part = parts.next()?;
                match seg {
                    Segment::Literal(l) if l == part => {}
                    Segment::Literal(_) => return None,
                    Segment::Capture(_) if part.is_empty() => return None,
                    Segment::Capture(name) => captures.push((name.as_str(), part.to_string())),
                }
            }
            parts.next().is_none().then_some(captures)
        }
    }
}

/// The one form of a path that fairgate routes on and forwards, so it and
/// the upstream cannot read a request differently: percent-encoded
/// unreserved characters decoded (RFC 3986 6.2.2.2: `%73` is `s`), other
/// escapes upper-cased, empty segments (`//`) collapsed. `None` for a
/// malformed escape.
pub fn normalize(path: &str) -> Option<Cow<'_, str>> {
    if !path.is_ascii() {
        return None;
    }
    if !path.contains('%') && !path.contains("//") {
        return Some(Cow::Borrowed(path));
    }
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let hex = path.get(i + 1..i + 3)?;
            let v = u8::from_str_radix(hex, 16).ok()?;
            if v.is_ascii_alphanumeric() || matches!(v, b'-' | b'.' | b'_' | b'~') {
                out.push(v as char);
            } else {
                out.push('%');
                out.push_str(&hex.to_ascii_uppercase());
            }
            i += 3;
            continue;
        }
        if b == b'/' && out.ends_with('/') {
            i += 1;
            continue;
        }
        out.push(b as char);
        i += 1;
    }
    Some(Cow::Owned(out))
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
    // Read the path as the most lenient upstream would: encoded dots and
    // slashes decoded, backslashes as slashes.
    let lenient = path
        .to_ascii_lowercase()
        .replace("%2e", ".")
        .replace("%2f", "/")
        .replace("%5c", "/")
        .replace('\\', "/");
    !lenient.split('/').any(dot_segment)
}

/// The Host header without port, lower-cased.
pub fn host_of(raw: &str) -> String {
    let without_port = if raw.starts_with('[') {
        raw.split(']')
            .next()
            .map(|h| format!("{h}]"))
            .unwrap_or_default()
    } else {
        raw.rsplit_once(':')
            .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
            .map(|(h, _)| h.to_string())
            .unwrap_or_else(|| raw.to_string())
    };
    without_port.to_ascii_lowercase()
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

    #[test]
    fn normal_form() {
        assert_eq!(
            normalize("/v1/auth/%72efresh").as_deref(),
            Some("/v1/auth/refresh")
        );
        assert_eq!(
            normalize("/webhooks/%73tripe").as_deref(),
            Some("/webhooks/stripe")
        );
        assert_eq!(normalize("//v1///x/").as_deref(), Some("/v1/x/"));
        assert_eq!(normalize("/a%2fb%3A").as_deref(), Some("/a%2Fb%3A"));
        assert_eq!(normalize("/bad%zz"), None);
        assert_eq!(normalize("/cut%4"), None);
        assert!(!path_is_safe("/public/..;/admin"));
        assert!(path_is_safe("/items;v=1/x"));
    }

    #[test]
    fn hosts() {
        assert_eq!(host_of("API.example.com:8080"), "api.example.com");
        assert_eq!(host_of("[::1]:80"), "[::1]");
        assert_eq!(host_of("example.com"), "example.com");
    }
}
