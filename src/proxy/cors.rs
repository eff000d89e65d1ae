//! CORS as the Fetch standard has browsers do it: a preflight (`OPTIONS`
//! with `Origin` and `Access-Control-Request-Method`) is answered by the
//! gateway, without authentication and without spending tokens; other
//! requests from an allowed origin get `Access-Control-Allow-Origin` and
//! kin on whatever answers them (the upstream or the gateway's own 401 and
//! 429, so pages can read those). A disallowed origin gets no CORS header.

use http::header::{self, HeaderName};
use http::HeaderMap;

use crate::config::Cors;

type Headers = Vec<(HeaderName, String)>;

/// The method a preflight asks about, if `headers` make it one.
pub fn preflight_method(method: &http::Method, headers: &HeaderMap) -> Option<String> {
    if method != http::Method::OPTIONS || !headers.contains_key(header::ORIGIN) {
        return None;
    }
    let asked = headers.get(header::ACCESS_CONTROL_REQUEST_METHOD)?;
    asked.to_str().ok().map(str::to_string)
}

/// The value of `Access-Control-Allow-Origin` for this request's origin,
/// if it is allowed.
fn allowed_origin(cors: &Cors, headers: &HeaderMap) -> Option<String> {
    let origin = headers.get(header::ORIGIN)?.to_str().ok()?;
    let lower = origin.to_ascii_lowercase();
    if cors.origins.contains(&lower) {
        return Some(origin.to_string());
    }
    // Config refuses `*` with credentials.
    cors.origins
        .iter()
        .any(|o| o == "*")
        .then(|| "*".to_string())
}

/// The answer to a preflight: its headers (none for a refused origin).
pub fn preflight(cors: &Cors, headers: &HeaderMap) -> Headers {
    let mut out = vec![(header::VARY, "Origin".to_string())];
    let Some(origin) = allowed_origin(cors, headers) else {
        return out;
    };
    out.push((header::ACCESS_CONTROL_ALLOW_ORIGIN, origin));
    if !cors.methods.is_empty() {
        out.push((
            header::ACCESS_CONTROL_ALLOW_METHODS,
            cors.methods.join(", "),
        ));
    }
    if !cors.headers.is_empty() {
        out.push((
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            cors.headers.join(", "),
        ));
    }
    if cors.credentials {
        out.push((header::ACCESS_CONTROL_ALLOW_CREDENTIALS, "true".into()));
    }
    if let Some(age) = cors.max_age {
        out.push((header::ACCESS_CONTROL_MAX_AGE, age.as_secs().to_string()));
    }
    out
}

/// The CORS headers of any other response: `Vary: Origin` always (a cache
/// must not serve one origin's answer to another, nor a copy fetched
/// without `Origin`), the rest to an allowed origin.
pub fn actual(cors: &Cors, headers: &HeaderMap) -> Headers {
    let mut out = vec![(header::VARY, "Origin".to_string())];
    let Some(origin) = allowed_origin(cors, headers) else {
        return out;
    };
    out.push((header::ACCESS_CONTROL_ALLOW_ORIGIN, origin));
    if cors.credentials {
        out.push((header::ACCESS_CONTROL_ALLOW_CREDENTIALS, "true".into()));
    }
    if !cors.expose.is_empty() {
        out.push((
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            cors.expose.join(", "),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cors(origins: &[&str], credentials: bool) -> Cors {
        Cors {
            origins: origins.iter().map(|o| o.to_string()).collect(),
            methods: vec!["GET".into(), "POST".into()],
            headers: vec!["authorization".into()],
            expose: vec!["RateLimit".into()],
            credentials,
            max_age: Some(std::time::Duration::from_secs(600)),
        }
    }

    fn origin(o: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ORIGIN, o.parse().unwrap());
        h
    }

    #[test]
    fn listed_origins_are_echoed_and_others_get_nothing() {
        let c = cors(&["https://app.example.com"], true);
        let got = preflight(&c, &origin("https://APP.example.com"));
        assert!(got.contains(&(
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            "https://APP.example.com".into()
        )));
        assert!(got.contains(&(header::ACCESS_CONTROL_ALLOW_CREDENTIALS, "true".into())));
        assert!(got.contains(&(header::ACCESS_CONTROL_MAX_AGE, "600".into())));
        assert_eq!(
            preflight(&c, &origin("https://evil.example")),
            vec![(header::VARY, "Origin".into())]
        );
        let any = cors(&["*"], false);
        assert!(actual(&any, &origin("https://x.test"))
            .contains(&(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*".into())));
        assert_eq!(
            actual(&any, &HeaderMap::new()),
            vec![(header::VARY, "Origin".into())]
        );
    }
}
