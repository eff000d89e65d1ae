//! Attacks on the auth methods of `auth.methods` (external, basic,
//! api_key) through the real gateway, checked on the bytes the upstream
//! really received: forged answer headers under other spellings, a second
//! request on an authenticated connection, sign-in redirects to foreign
//! hosts, the answer cache keyed by another cookie than the auth service
//! read, route-level identity headers, and API keys in the query.

use crate::common;

use common::forward_auth::ForwardAuth;
use common::*;
use std::time::Duration;

/// The gateway's listening address.
fn addr_of(gw: &Gateway) -> std::net::SocketAddr {
    gw.url("")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .unwrap()
}

/// `auth.methods.sso` over the peer (extra keys of `external:` in `extra`,
/// the method's identity map in `identity`) and `routes` to upstream `api`.
fn sso_policy(
    auth: &ForwardAuth,
    extra: &str,
    identity: &str,
    up: std::net::SocketAddr,
    routes: &str,
) -> Policy {
    Policy::new()
        .auth(&format!(
            r#"methods:
    sso:
      external: {{url: "{}"{extra}}}{identity}"#,
            auth.auth_url()
        ))
        .sections(&format!(
            r#"
upstreams: {{api: {{targets: ["{up}"]}}}}
limits:
  calls: {{scope: tenant, default: {{capacity: 100, rate: 1/h}}}}
routes:
{routes}
"#
        ))
}

const ANSWERED: &str =
    ", response_headers: [X-Auth-Request-User, X-Auth-Request-Email, X-Auth-Request-Groups]";
const GROUPS_ARE_TENANT: &str = "\n      identity: {tenant: {header: X-Auth-Request-Groups}, \
                                 user: {header: X-Auth-Request-User}}";
const ONE_ROUTE: &str =
    "  - {name: app, match: {path_prefix: /}, upstream: api, auth: sso, limits: [calls]}";

#[tokio::test(flavor = "multi_thread")]
async fn forged_answer_headers_in_any_spelling_never_reach_the_upstream() {
    let auth = ForwardAuth::start(&[]);
    auth.session("s-ann", "ann", "ann@acme.test", "acme").await;
    let up = RawUpstream::start().await;
    let gw = sso_policy(&auth, ANSWERED, GROUPS_ARE_TENANT, up.addr, ONE_ROUTE)
        .start()
        .await;
    let request = "GET /x HTTP/1.1\r\nHost: app.example.test\r\n\
        Cookie: _oauth2_proxy=s-ann\r\n\
        X_Auth_Request_User: root\r\n\
        x-AUTH-request-USER: root\r\n\
        X-Auth-Request-Groups: globex\r\n\
        X-Auth-Request-Groups: globex\r\n\
        x-auth-request-email: root@globex.test\r\n\
        X-Tenant-Id: globex\r\n\
        Connection: close\r\n\r\n";
    let answer = raw_http(addr_of(&gw), request).await;
    assert_eq!(status_of(&answer), 200, "{answer}");
    let got = up.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].cgi_header("x-auth-request-user"), ["ann"]);
    assert_eq!(got[0].cgi_header("x-auth-request-groups"), ["acme"]);
    assert_eq!(got[0].cgi_header("x-auth-request-email"), ["ann@acme.test"]);
    assert_eq!(got[0].cgi_header("x-tenant-id"), ["acme"]);
    assert!(!got[0].head.contains("root"), "{}", got[0].head);
    assert!(!got[0].head.contains("globex"), "{}", got[0].head);

    // An obs-folded line cannot carry a forged header either.
    let folded = "GET /x HTTP/1.1\r\nHost: app.example.test\r\n\
        Cookie: _oauth2_proxy=s-ann\r\nX-Note: a\r\n X-Auth-Request-User: root\r\n\
        Connection: close\r\n\r\n";
    let answer = raw_http(addr_of(&gw), folded).await;
    assert!(matches!(status_of(&answer), 200 | 400), "{answer}");
    assert!(up.received().iter().all(|r| !r.head.contains("root")));
}

/// Sends each request on one connection after the answer to the one
/// before (answers with a Content-Length), and returns the answers.
async fn one_connection(addr: std::net::SocketAddr, requests: &[&str]) -> Vec<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut answers = Vec::new();
    for request in requests {
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        for _ in 0..100 {
            let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await;
            let Ok(Ok(n @ 1..)) = read else { break };
            got.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
            let Some((head, body)) = text.split_once("\r\n\r\n") else {
                continue;
            };
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            if length.is_some_and(|n| body.len() >= n) {
                break;
            }
        }
        answers.push(String::from_utf8_lossy(&got).into_owned());
    }
    answers
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_request_on_an_authenticated_connection_is_authenticated_again() {
    let auth = ForwardAuth::start(&[]);
    auth.session("s-ann", "ann", "ann@acme.test", "acme").await;
    let up = RawUpstream::start().await;
    let gw = sso_policy(&auth, ANSWERED, GROUPS_ARE_TENANT, up.addr, ONE_ROUTE)
        .start()
        .await;
    let first = "GET /first HTTP/1.1\r\nHost: app.example.test\r\n\
        Cookie: _oauth2_proxy=s-ann\r\n\r\n";
    let second = "GET /second HTTP/1.1\r\nHost: app.example.test\r\n\
        X-Auth-Request-User: root\r\nConnection: close\r\n\r\n";
    let answers = one_connection(addr_of(&gw), &[first, second]).await;
    assert_eq!(status_of(&answers[0]), 200, "{answers:?}");
    assert_eq!(status_of(&answers[1]), 401, "{answers:?}");
    let got = up.received();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].target(), "/first");
}

/// The port of the gateway's listener.
fn port_of(gw: &Gateway) -> u16 {
    addr_of(gw).port()
}

/// Whether an answer is no redirect, or one to app.example.test's sign-in
/// that brings the browser back to app.example.test.
fn stays_home(answer: &str) -> bool {
    let Some(location) = answer.lines().find_map(|l| l.strip_prefix("location: ")) else {
        return !answer.to_ascii_lowercase().contains("\r\nlocation:");
    };
    let home = |rest: &str, sep: &[&str]| sep.iter().any(|s| rest.starts_with(s));
    let Some(rest) = location.strip_prefix("http://app.example.test") else {
        return false;
    };
    let Some((_, rd)) = rest.split_once("?rd=http%3A%2F%2Fapp.example.test") else {
        return false;
    };
    home(rest, &["/", ":"]) && home(rd, &["%2F", "%3A"])
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sign_in_redirect_never_names_a_foreign_host() {
    let auth = ForwardAuth::start(&[]);
    let up = RawUpstream::start().await;
    let signin = format!(
        ", signin: {{url: \"http://$host/oauth2/start\", hosts: [app.example.test]}}{ANSWERED}"
    );
    let gw = sso_policy(&auth, &signin, GROUPS_ARE_TENANT, up.addr, ONE_ROUTE)
        .start()
        .await;
    let port = port_of(&gw);
    let tricks = [
        format!("GET http://evil.test/p HTTP/1.1\r\nHost: app.example.test:{port}\r\n"),
        format!("GET http://evil.test:{port}/p HTTP/1.1\r\nHost: app.example.test\r\n"),
        "GET /p HTTP/1.1\r\nHost: app.example.test@evil.test\r\n".to_string(),
        "GET /p HTTP/1.1\r\nHost: evil.test#app.example.test\r\n".to_string(),
        "GET /p HTTP/1.1\r\nHost: app.example.test\r\nHost: evil.test\r\n".to_string(),
        "GET /p HTTP/1.1\r\nHost: evil.test\r\nX-Forwarded-Host: app.example.test\r\n".to_string(),
        "GET //evil.test/p HTTP/1.1\r\nHost: app.example.test\r\n".to_string(),
    ];
    for head in &tricks {
        let answer = raw_http(addr_of(&gw), &format!("{head}Connection: close\r\n\r\n")).await;
        assert!(stays_home(&answer), "{head:?}: {answer}");
    }
    // The listed host in other spellings still signs in at itself.
    for host in ["APP.example.test", "app.example.test."] {
        let head = format!("GET /p HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        let answer = raw_http(addr_of(&gw), &head).await;
        assert_eq!(status_of(&answer), 302, "{host}: {answer}");
        let location = format!("\r\nlocation: http://{host}/oauth2/start?rd=http%3A%2F%2F");
        assert!(answer.contains(&location), "{host}: {answer}");
    }
    assert_eq!(up.count(), 0);
}

/// A method naming tenant `acme` for everyone and answering only the user
/// upstream; the routes read the rest of the identity from the answer.
const ROUTE_IDENTITY: &str =
    "  - {name: mail, match: {path_prefix: /mail}, upstream: api, auth: sso, \
       identity: {user: {header: X-Auth-Request-Email}}}
  - {name: group, match: {path_prefix: /group}, upstream: api, auth: sso, limits: [calls], \
       identity: {tenant: {header: X-Auth-Request-Groups}}}";

#[tokio::test(flavor = "multi_thread")]
async fn a_route_identity_header_is_read_from_the_answer_never_from_the_client() {
    let auth = ForwardAuth::start(&[]);
    auth.session("s-ann", "ann", "ann@acme.test", "acme").await;
    let up = RawUpstream::start().await;
    let answered = ", response_headers: [X-Auth-Request-User]";
    let identity = "\n      identity: {tenant: {value: acme}}";
    let gw = sso_policy(&auth, answered, identity, up.addr, ROUTE_IDENTITY)
        .start()
        .await;
    let forged = "Cookie: _oauth2_proxy=s-ann\r\nX-Auth-Request-Email: root@globex.test\r\n\
                  X-Auth-Request-Groups: globex\r\n";
    let ask = |path: &str| {
        format!(
            "GET {path} HTTP/1.1\r\nHost: app.example.test\r\n{forged}Connection: close\r\n\r\n"
        )
    };
    let answer = raw_http(addr_of(&gw), &ask("/mail")).await;
    assert_eq!(status_of(&answer), 200, "{answer}");
    let got = up.received();
    assert_eq!(got.len(), 1);
    // The client's copy of a header the route reads identity from is the
    // gateway's to write (SPEC 10), as a method's own identity headers are.
    assert!(
        !got[0].head.contains("root@globex.test"),
        "the client's copy reached the upstream: {}",
        got[0].head
    );
    assert_eq!(
        got[0].cgi_header("x-user-id"),
        ["ann@acme.test"],
        "the user of the route's identity map: {}",
        got[0].head
    );
    // A tenant-scoped route naming its tenant from the answer's group.
    let answer = raw_http(addr_of(&gw), &ask("/group")).await;
    assert_eq!(status_of(&answer), 200, "{answer}");
    assert_eq!(up.received()[1].cgi_header("x-tenant-id"), ["acme"]);
}

/// With the answer cache keyed by `cache`, a request whose headers
/// (`planted`) the service accepts by its session never lets a later
/// request carrying only `alone` in by the cached answer.
async fn a_planted_answer_is_never_reused(cache: &str, planted: &str, alone: &str) {
    let auth = ForwardAuth::start(&[]);
    auth.session("s-ann", "ann", "ann@acme.test", "acme").await;
    let up = RawUpstream::start().await;
    let extra = format!("{ANSWERED}, cache: {{{cache}, ttl: 60s}}");
    let gw = sso_policy(&auth, &extra, GROUPS_ARE_TENANT, up.addr, ONE_ROUTE)
        .start()
        .await;
    let ask = |headers: &str| {
        format!("GET /x HTTP/1.1\r\nHost: app.example.test\r\n{headers}Connection: close\r\n\r\n")
    };
    let answer = raw_http(addr_of(&gw), &ask(planted)).await;
    assert_eq!(status_of(&answer), 200, "{answer}");
    // A value the auth service never accepted as a session.
    let answer = raw_http(addr_of(&gw), &ask(alone)).await;
    assert_eq!(
        status_of(&answer),
        401,
        "a session the auth service never accepted let in by a cached answer: {answer}"
    );
    assert_eq!(up.count(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_answer_cache_is_keyed_by_the_session_the_auth_service_read() {
    // The auth service reads `_oauth2_proxy =s-ann` as the session (as Go's
    // net/http does, names are trimmed); `skeleton` it never accepted.
    let planted = "Cookie: _oauth2_proxy =s-ann; _oauth2_proxy=skeleton\r\n";
    let alone = "Cookie: _oauth2_proxy=skeleton\r\n";
    a_planted_answer_is_never_reused("cookie: _oauth2_proxy", planted, alone).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_header_keyed_cache_holds_only_for_what_the_service_decided_by() {
    // The service decides by the session cookie (as oauth2-proxy does when
    // both come); the gateway keeps the answer under the Authorization.
    let planted = "Cookie: _oauth2_proxy=s-ann\r\nAuthorization: Bearer skeleton\r\n";
    let alone = "Authorization: Bearer skeleton\r\n";
    a_planted_answer_is_never_reused("header: Authorization", planted, alone).await;
}

/// SHA-256 hex of `text`, as a keys file holds it.
fn sha256_hex(text: &str) -> String {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, text.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_query_key_in_any_spelling_the_gateway_reads_never_reaches_the_upstream() {
    let up = RawUpstream::start().await;
    let key = "k-0123456789abcdef";
    let gw = Policy::new()
        .auth(&format!(
            "methods:\n    keyed:\n      api_key: {{query: api_key, keys: 'keys: [{{sha256: {}, tenant: acme, user: bot}}]'}}",
            sha256_hex(key)
        ))
        .sections(&format!(
            "upstreams: {{api: {{targets: [\"{}\"]}}}}\nroutes:\n  - {{name: k, match: {{path_prefix: /}}, upstream: api, auth: keyed}}",
            up.addr
        ))
        .start()
        .await;
    for query in [
        format!("api_key={key}&x=1"),
        format!("x=1&api%5Fkey={key}"),
        format!("api_key={key}&api_key={key}&x=1"),
        format!("%61pi_key={key}&x=1"),
    ] {
        let head = format!("GET /v?{query} HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n");
        let answer = raw_http(addr_of(&gw), &head).await;
        assert_eq!(status_of(&answer), 200, "{query}: {answer}");
    }
    let got = up.received();
    assert_eq!(got.len(), 4);
    for r in &got {
        assert!(!r.head.contains(key), "{}", r.head);
        assert_eq!(r.target(), "/v?x=1");
        assert_eq!(r.cgi_header("x-tenant-id"), ["acme"]);
    }
    assert!(!gw.logs().contains(key));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_naming_no_valid_tenant_or_an_oversized_user_is_refused() {
    let auth = ForwardAuth::start(&[]);
    let long = "u".repeat(300);
    let sessions = [
        ("s-two", "ann", "acme,globex"),
        ("s-dots", "ann", "../acme"),
        ("s-space", "ann", "acme globex"),
        ("s-long", long.as_str(), "acme"),
    ];
    for (id, user, groups) in sessions {
        auth.session(id, user, "e@acme.test", groups).await;
    }
    let up = RawUpstream::start().await;
    let gw = sso_policy(&auth, ANSWERED, GROUPS_ARE_TENANT, up.addr, ONE_ROUTE)
        .start()
        .await;
    for (id, _, groups) in sessions {
        let head = format!(
            "GET /x HTTP/1.1\r\nHost: app.example.test\r\nCookie: _oauth2_proxy={id}\r\nConnection: close\r\n\r\n"
        );
        let answer = raw_http(addr_of(&gw), &head).await;
        assert_eq!(status_of(&answer), 401, "{groups}: {answer}");
    }
    assert_eq!(up.count(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn one_slow_auth_call_does_not_hold_the_others() {
    let auth = ForwardAuth::start(&[]);
    auth.session("s-ann", "ann", "ann@acme.test", "acme").await;
    auth.mode("slow", 400).await;
    let up = RawUpstream::start().await;
    let extra = format!("{ANSWERED}, timeout: 3s");
    let gw = sso_policy(&auth, &extra, GROUPS_ARE_TENANT, up.addr, ONE_ROUTE)
        .start()
        .await;
    let started = std::time::Instant::now();
    let asks = (0..8).map(|i| {
        let head = format!(
            "GET /x/{i} HTTP/1.1\r\nHost: app.example.test\r\nCookie: _oauth2_proxy=s-ann\r\nConnection: close\r\n\r\n"
        );
        let addr = addr_of(&gw);
        async move { status_of(&raw_http(addr, &head).await) }
    });
    let statuses = futures_util::future::join_all(asks).await;
    assert_eq!(statuses, [200; 8]);
    let took = started.elapsed();
    assert!(took < Duration::from_millis(2400), "serialised: {took:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn http2_requests_cannot_forge_answers_nor_redirect_elsewhere() {
    let auth = ForwardAuth::start(&[]);
    auth.session("s-ann", "ann", "ann@acme.test", "acme").await;
    let up = RawUpstream::start().await;
    let signin = format!(
        ", signin: {{url: \"http://$host/oauth2/start\", hosts: [app.example.test]}}{ANSWERED}"
    );
    let gw = sso_policy(&auth, &signin, GROUPS_ARE_TENANT, up.addr, ONE_ROUTE)
        .server("http2: {h2c: true}")
        .start()
        .await;
    let h2 = reqwest::Client::builder()
        .no_proxy()
        .http2_prior_knowledge()
        .redirect(reqwest::redirect::Policy::none())
        .resolve("app.example.test", addr_of(&gw))
        .build()
        .unwrap();
    let url = format!("http://app.example.test:{}/x", port_of(&gw));
    let r = h2
        .get(&url)
        .header("cookie", "_oauth2_proxy=s-ann")
        .header("x_auth_request_user", "root")
        .header("X-AUTH-REQUEST-USER", "root")
        .header("x-auth-request-groups", "globex")
        .send()
        .await
        .unwrap();
    assert_eq!(r.version(), reqwest::Version::HTTP_2);
    assert_eq!(r.status(), 200);
    let got = up.received();
    assert_eq!(got[0].cgi_header("x-auth-request-user"), ["ann"]);
    assert_eq!(got[0].cgi_header("x-tenant-id"), ["acme"]);
    assert!(!got[0].head.contains("root") && !got[0].head.contains("globex"));
    // `:authority` of a listed host with a Host of another: never a
    // redirect naming the other.
    let r = h2
        .get(&url)
        .header("host", "evil.test")
        .send()
        .await
        .unwrap();
    let location = r
        .headers()
        .get("location")
        .map(|l| l.to_str().unwrap().to_string());
    assert!(
        location.as_deref().is_none_or(|l| !l.contains("evil")),
        "{location:?}"
    );
    assert_eq!(up.count(), 1);
}

/// An htpasswd SHA-1 entry (`htpasswd -s`).
fn sha1_entry(user: &str, password: &str) -> String {
    use base64::Engine as _;
    let digest = aws_lc_rs::digest::digest(
        &aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY,
        password.as_bytes(),
    );
    let encoded = base64::engine::general_purpose::STANDARD.encode(digest.as_ref());
    format!("{user}:{{SHA}}{encoded}")
}

fn basic(credentials: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(credentials)
}

#[tokio::test(flavor = "multi_thread")]
async fn basic_credentials_name_only_their_user_whatever_the_header_spelling() {
    let up = RawUpstream::start().await;
    let entries = format!("{}\\n{}", sha1_entry("ann", "pw"), sha1_entry("bob", "p:w"));
    let gw = Policy::new()
        .auth(&format!(
            "methods:\n    staff:\n      basic: {{htpasswd: \"{entries}\"}}\n      identity: {{tenant: {{value: staff}}}}"
        ))
        .sections(&format!(
            "upstreams: {{api: {{targets: [\"{}\"]}}}}\nroutes:\n  - {{name: app, match: {{path_prefix: /}}, upstream: api, auth: staff, limits: []}}",
            up.addr
        ))
        .start()
        .await;
    let ask = |headers: String| {
        let addr = addr_of(&gw);
        async move {
            let head = format!(
                "GET /x HTTP/1.1\r\nHost: a.test\r\n{headers}X-User-Id: root\r\nX_User_Id: root\r\nConnection: close\r\n\r\n"
            );
            status_of(&raw_http(addr, &head).await)
        }
    };
    let ann = basic("ann:pw");
    assert_eq!(ask(format!("Authorization: basic {ann}\r\n")).await, 200);
    assert_eq!(ask(format!("Authorization: BASIC   {ann}\r\n")).await, 200);
    assert_eq!(
        ask(format!("Authorization: Basic {}\r\n", basic("bob:p:w"))).await,
        200
    );
    for refused in [
        format!("Authorization: Basic {ann}, Basic {ann}\r\n"),
        format!("Authorization: Bearer {ann}\r\n"),
        format!("Authorization: Basic {}\r\n", basic("ann\u{0}:pw")),
        format!("Authorization: Basic {}\r\n", basic("ann:pw\n")),
        format!("Authorization: Basic {}\r\n", basic("bob:p")),
        format!(
            "Authorization: Basic {}\r\n",
            basic(&format!("ann:{}", "p".repeat(3000)))
        ),
    ] {
        assert_eq!(ask(refused.clone()).await, 401, "{refused}");
    }
    let got = up.received();
    let users: Vec<Vec<String>> = got.iter().map(|r| r.cgi_header("x-user-id")).collect();
    assert_eq!(users, [["ann"], ["ann"], ["bob"]], "{got:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_auth_service_lets_nothing_reach_the_upstream() {
    let dead = free_addr();
    let up = RawUpstream::start().await;
    let gw = Policy::new()
        .auth(&format!(
            "methods:\n    sso:\n      external: {{url: \"http://{dead}/oauth2/auth\", timeout: 300ms{ANSWERED}, cache: {{cookie: _oauth2_proxy}}}}\n      identity: {{tenant: {{header: X-Auth-Request-Groups}}}}"
        ))
        .sections(&format!(
            "upstreams: {{api: {{targets: [\"{}\"]}}}}\nroutes:\n  - {{name: app, match: {{path_prefix: /}}, upstream: api, auth: sso}}",
            up.addr
        ))
        .start()
        .await;
    for method in ["GET", "HEAD", "OPTIONS", "POST", "DELETE", "GET", "GET"] {
        let head = format!(
            "{method} /x HTTP/1.1\r\nHost: a.test\r\nCookie: _oauth2_proxy=s\r\n\
             X-Auth-Request-Groups: acme\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        let answer = raw_http(addr_of(&gw), &head).await;
        assert_eq!(status_of(&answer), 503, "{method}: {answer}");
    }
    assert_eq!(up.count(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_authorization_answered_by_the_service_leaves_bearer_routes_working() {
    // oauth2-proxy with --set-authorization-header answers the session's
    // ID token in Authorization, which ingress-nginx setups pass upstream
    // (auth-response-headers: Authorization).
    let auth = ForwardAuth::start(&[]);
    auth.session("s-ann", "ann", "ann@acme.test", "acme").await;
    let up = RawUpstream::start().await;
    let gw = Policy::new()
        .hs256()
        .auth(&format!(
            "methods:\n    sso:\n      external: {{url: \"{}\", response_headers: [Authorization, X-Auth-Request-Groups]}}\n      identity: {{tenant: {{header: X-Auth-Request-Groups}}}}",
            auth.auth_url()
        ))
        .sections(&format!(
            "upstreams: {{api: {{targets: [\"{}\"]}}}}\nroutes:\n  \
             - {{name: api, match: {{path_prefix: /api}}, upstream: api, auth: required, limits: []}}\n  \
             - {{name: app, match: {{path_prefix: /}}, upstream: api, auth: sso, limits: []}}",
            up.addr
        ))
        .start()
        .await;
    // Another route, authenticated by a bearer JWT as before; and the
    // method itself asked with a bearer session (oauth2-proxy reads
    // `Authorization: Bearer` for API clients).
    let jwt_route = get(&gw, "/api/orders", &token("acme")).await.status();
    let bearer_session = get(&gw, "/app", "s-ann").await.status();
    assert_eq!(
        [jwt_route.as_u16(), bearer_session.as_u16()],
        [200, 200],
        "the client's Authorization was removed on every route"
    );
}

/// A minimal auth service on HTTP/1.1 keep-alive: each request head
/// (lower-cased) is answered with what `decide` returns.
async fn tiny_auth(decide: fn(&str) -> &'static str) -> std::net::SocketAddr {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut stream = BufReader::new(stream);
                loop {
                    let mut head = String::new();
                    for _ in 0..100 {
                        let mut line = String::new();
                        if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        head.push_str(&line.to_ascii_lowercase());
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let answer = decide(&head);
                    if stream.get_mut().write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// Lets `GET` (and `HEAD`) through for session cookie `s-ann` (group
/// acme) and refuses every other method with 403, as an Authelia or OPA
/// rule on `X-Original-Method` does.
fn reads_only(head: &str) -> &'static str {
    let read =
        head.contains("x-original-method: get\r\n") || head.contains("x-original-method: head\r\n");
    match head.contains("_oauth2_proxy=s-ann") && read {
        true => "HTTP/1.1 202 Accepted\r\nX-Auth-Request-Groups: acme\r\nContent-Length: 0\r\n\r\n",
        false => "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n",
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cached_answer_for_a_read_never_admits_a_write() {
    let auth = tiny_auth(reads_only).await;
    let up = RawUpstream::start().await;
    let gw = Policy::new()
        .auth(&format!(
            "methods:\n    sso:\n      external: {{url: \"http://{auth}/auth\", response_headers: [X-Auth-Request-Groups], cache: {{cookie: _oauth2_proxy, ttl: 60s}}}}\n      identity: {{tenant: {{header: X-Auth-Request-Groups}}}}"
        ))
        .sections(&format!(
            "upstreams: {{api: {{targets: [\"{}\"]}}}}\nroutes:\n  - {{name: app, match: {{path_prefix: /}}, upstream: api, auth: sso, limits: []}}",
            up.addr
        ))
        .start()
        .await;
    let ask = |method: &str| {
        format!("{method} /orders/1 HTTP/1.1\r\nHost: app.example.test\r\nCookie: _oauth2_proxy=s-ann\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    };
    // Without an answer cached, the service refuses the write.
    let answer = raw_http(addr_of(&gw), &ask("DELETE")).await;
    assert_eq!(status_of(&answer), 403, "{answer}");
    let answer = raw_http(addr_of(&gw), &ask("GET")).await;
    assert_eq!(status_of(&answer), 200, "{answer}");
    // The read's answer, cached, must not decide the write.
    let answer = raw_http(addr_of(&gw), &ask("DELETE")).await;
    assert_eq!(status_of(&answer), 403, "{answer}");
    let methods: Vec<String> = up
        .received()
        .iter()
        .map(|r| r.request_line().to_string())
        .collect();
    assert_eq!(methods, ["GET /orders/1 HTTP/1.1"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forged_answer_header_in_a_chunked_trailer_never_reaches_the_upstream() {
    let auth = ForwardAuth::start(&[]);
    auth.session("s-ann", "ann", "ann@acme.test", "acme").await;
    let up = RawUpstream::start().await;
    let gw = sso_policy(&auth, ANSWERED, GROUPS_ARE_TENANT, up.addr, ONE_ROUTE)
        .start()
        .await;
    let request = "POST /x HTTP/1.1\r\nHost: app.example.test\r\nCookie: _oauth2_proxy=s-ann\r\n\
        Transfer-Encoding: chunked\r\nTrailer: X-Auth-Request-User\r\nConnection: close\r\n\r\n\
        5\r\nhello\r\n0\r\nX-Auth-Request-User: root\r\n\r\n";
    let answer = raw_http(addr_of(&gw), request).await;
    assert_eq!(status_of(&answer), 200, "{answer}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let got = up.received();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].body_bytes, 5);
    assert_eq!(got[0].cgi_header("x-auth-request-user"), ["ann"]);
    assert!(got.iter().all(|r| !r.head.contains("root")), "{got:?}");
}

/// A 401 carrying headers besides the challenge.
fn refuses_loudly(_: &str) -> &'static str {
    "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"sso\"\r\n\
     Set-Cookie: admin=1; Path=/\r\nX-Evil: 1\r\nAccess-Control-Allow-Origin: *\r\n\
     Content-Type: text/html\r\nContent-Length: 12\r\n\r\n<b>evil</b>\n"
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refusal_passes_only_the_challenge_headers_to_the_client() {
    let auth = tiny_auth(refuses_loudly).await;
    let up = RawUpstream::start().await;
    let gw = Policy::new()
        .auth(&format!(
            "methods:\n    sso:\n      external: {{url: \"http://{auth}/auth\"}}"
        ))
        .sections(&format!(
            "upstreams: {{api: {{targets: [\"{}\"]}}}}\nroutes:\n  - {{name: app, match: {{path_prefix: /}}, upstream: api, auth: sso, limits: []}}",
            up.addr
        ))
        .start()
        .await;
    let head = "GET /x HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n";
    let answer = raw_http(addr_of(&gw), head).await;
    assert_eq!(status_of(&answer), 401, "{answer}");
    assert!(
        answer.contains("\r\nwww-authenticate: Bearer realm=\"sso\"\r\n"),
        "{answer}"
    );
    let lower = answer.to_ascii_lowercase();
    for leaked in [
        "set-cookie",
        "x-evil",
        "access-control-allow-origin",
        "evil</b>",
    ] {
        assert!(!lower.contains(leaked), "{leaked}: {answer}");
    }
    assert_eq!(up.count(), 0);
}
