//! Unit tests of `auth`.

use super::*;

#[test]
fn the_answer_cache_takes_the_time_of_the_2xx_entry() {
    let ttl = |s: &str| cache_ttl(s);
    assert_eq!(ttl("200 202 401 5m"), Some(("5m".into(), true)));
    assert_eq!(ttl("200 202 10m, 401 30s"), Some(("10m".into(), true)));
    assert_eq!(ttl("200 1h"), Some(("1h".into(), false)));
    assert_eq!(ttl("any 90"), Some(("90s".into(), true)));
    // Without codes nginx caches 200, 301 and 302.
    assert_eq!(ttl("2m"), Some(("2m".into(), false)));
    assert_eq!(ttl("401 5m"), None);
    assert_eq!(ttl("200 5x"), None);
    assert_eq!(ttl("200 1h30m"), None);
    assert_eq!(ttl(""), None);
}

#[test]
fn the_signin_url_loses_its_own_redirect_parameter() {
    let url = "https://$host/oauth2/start?rd=$escaped_request_uri";
    assert_eq!(
        strip_param(url, "rd"),
        (
            "https://$host/oauth2/start".into(),
            Some("$escaped_request_uri".into())
        )
    );
    assert_eq!(
        strip_param("https://sso/start?a=1&rd=x&b=2", "rd"),
        ("https://sso/start?a=1&b=2".into(), Some("x".into()))
    );
    assert_eq!(
        strip_param("https://sso/start?ard=1", "rd"),
        ("https://sso/start?ard=1".into(), None)
    );
    assert_eq!(strip_param("https://sso/start", "rd").1, None);
}

#[test]
fn framing_headers_are_never_copied_from_an_answer() {
    assert_eq!(answered_problem("X-Auth-Request-User"), None);
    assert!(answered_problem("Content-Length").is_some());
    assert!(answered_problem("x-forwarded-for").is_some());
    assert!(answered_problem("bad header").is_some());
}

#[test]
fn an_auth_map_secret_becomes_htpasswd_lines() {
    let secret = Object {
        kind: "Secret".into(),
        namespace: "apps".into(),
        name: "users".into(),
        value: serde_json::json!({"stringData": {"bob": "{SHA}x", "alice": "$apr1$y"}}).into(),
    };
    assert_eq!(auth_map(&secret), "alice:$apr1$y\nbob:{SHA}x\n");
}
