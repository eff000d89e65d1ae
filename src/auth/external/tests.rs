use super::*;

fn config(failures: u32) -> External {
    External {
        url: "http://127.0.0.1:9/auth".into(),
        method: http::Method::GET,
        timeout: Duration::from_millis(100),
        request_headers: vec![],
        response_headers: vec![],
        strip_everywhere: true,
        challenge_headers: vec![],
        set_headers: vec![],
        signin: None,
        cache: None,
        breaker: crate::config::Breaker {
            failures,
            open_for: Duration::from_secs(5),
        },
        ca_file: None,
    }
}

fn cached(key: CacheKey, per_uri: bool) -> ExternalAuth {
    let mut c = config(3);
    c.request_headers = vec![http::header::COOKIE, http::header::AUTHORIZATION];
    c.cache = Some(AnswerCache {
        key,
        ttl: Duration::from_secs(30),
        entries: 10,
        max_bytes: 1 << 20,
        per_uri,
    });
    ExternalAuth::new("m", &c, vec![], &[])
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (n, v) in pairs {
        h.append(
            HeaderName::from_bytes(n.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

/// The cache key of a request of `method` to `uri` on `scope`.
fn key(
    auth: &ExternalAuth,
    scope: &str,
    method: &str,
    uri: &str,
    h: &HeaderMap,
) -> Option<[u8; 32]> {
    let original = Original {
        scope,
        route_host: None,
        method,
        uri,
        scheme: "https",
        host: "app.test",
        client_ip: "192.0.2.1".into(),
        request_id: "r",
        headers: h,
    };
    auth.cache_key(&original)
}

#[test]
fn one_session_has_one_entry_per_route_host_and_method_whatever_the_path() {
    let auth = cached(CacheKey::Cookie("_oauth2_proxy".into()), false);
    let ann = headers(&[("cookie", "a=1; _oauth2_proxy=s-ann")]);
    let k = |scope, method, uri, h| key(&auth, scope, method, uri, h);
    let first = k("app\0app.test", "GET", "/orders/1", &ann).unwrap();
    assert_eq!(
        k("app\0app.test", "GET", "/orders/2?x=1", &ann),
        Some(first)
    );
    for (scope, method) in [
        ("app\0other.test", "GET"),
        ("api\0app.test", "GET"),
        ("app\0app.test", "POST"),
    ] {
        assert_ne!(
            k(scope, method, "/orders/1", &ann),
            Some(first),
            "{scope} {method}"
        );
    }
    // Another session, or another credential passed besides it.
    let bob = headers(&[("cookie", "a=1; _oauth2_proxy=s-bob")]);
    assert_ne!(k("app\0app.test", "GET", "/orders/1", &bob), Some(first));
    let mut plus = ann.clone();
    plus.append(
        http::header::AUTHORIZATION,
        HeaderValue::from_static("Bearer t"),
    );
    assert_ne!(k("app\0app.test", "GET", "/orders/1", &plus), Some(first));
    // Other cookies are not part of it.
    let other = headers(&[("cookie", "_oauth2_proxy=s-ann; theme=dark")]);
    assert_eq!(k("app\0app.test", "GET", "/orders/1", &other), Some(first));
    // With per_uri, the path and query too.
    let per_uri = cached(CacheKey::Cookie("_oauth2_proxy".into()), true);
    let one = key(&per_uri, "app\0app.test", "GET", "/orders/1", &ann);
    assert!(one.is_some());
    assert_eq!(
        key(&per_uri, "app\0app.test", "GET", "/orders/1", &ann),
        one
    );
    assert_ne!(
        key(&per_uri, "app\0app.test", "GET", "/orders/2", &ann),
        one
    );
}

#[test]
fn nothing_is_cached_without_one_unambiguous_session() {
    let auth = cached(CacheKey::Cookie("_oauth2_proxy".into()), false);
    let k = |pairs: &[(&str, &str)]| key(&auth, "app", "GET", "/", &headers(pairs));
    assert!(k(&[("cookie", "_oauth2_proxy=s-ann")]).is_some());
    for cookies in [
        "",
        "a=1",
        "_oauth2_proxy=",
        "oauth2_proxy=s-ann",
        "_oauth2_proxy=s-ann; _oauth2_proxy=s-bob",
        "_oauth2_proxy =s-ann; _oauth2_proxy=s-bob",
        "_OAUTH2_PROXY=s-ann; _oauth2_proxy=s-bob",
        "%5Foauth2_proxy=s-ann; _oauth2_proxy=s-bob",
        "_oauth2.proxy=s-ann; _oauth2_proxy=s-bob",
    ] {
        assert_eq!(k(&[("cookie", cookies)]), None, "{cookies:?}");
    }
    assert_eq!(
        k(&[
            ("cookie", "_oauth2_proxy=s-ann"),
            ("cookie", "_oauth2_proxy=s-bob")
        ]),
        None
    );
    // The value's bytes as sent: another spelling, another entry.
    let quoted = k(&[("cookie", "_oauth2_proxy=\"s-ann\"")]);
    assert!(quoted.is_some());
    assert_ne!(quoted, k(&[("cookie", "_oauth2_proxy=s-ann")]));

    let auth = cached(CacheKey::Header(http::header::AUTHORIZATION), false);
    let k = |pairs: &[(&str, &str)]| key(&auth, "app", "GET", "/", &headers(pairs));
    assert!(k(&[("authorization", "Bearer a")]).is_some());
    let twice = [("authorization", "Bearer a"), ("authorization", "Bearer b")];
    assert_eq!(k(&twice), None);
    assert_eq!(k(&[("cookie", "_oauth2_proxy=s-ann")]), None);
}

#[test]
fn cookies_are_found_by_exact_name() {
    let mut h = HeaderMap::new();
    h.append(
        http::header::COOKIE,
        HeaderValue::from_static("a=1; _oauth2_proxy=s1; b=2"),
    );
    assert_eq!(cookie(&h, "_oauth2_proxy").as_deref(), Some("s1"));
    assert_eq!(cookie(&h, "oauth2_proxy"), None);
    assert_eq!(cookie(&h, "c"), None);
}
