//! External (forward) authentication through the real gateway, against a
//! Python auth service behaving as oauth2-proxy's `/oauth2/auth` does: the
//! answer's headers reach the upstream and name the tenant whose bucket is
//! spent; a client cannot forge them; a dead, slow or failing service is
//! 503 within its timeout and costs one call per breaker interval; cached
//! answers cost no call; a 401 sends a browser to sign in only for the
//! hosts listed.

use crate::common;

use std::time::{Duration, Instant};

use common::forward_auth::ForwardAuth;
use common::*;

/// `auth.methods.sso` over `auth_url` (extra keys of `external:` in
/// `extra`), and a route `app` on `/` behind it spending `calls`.
pub(crate) fn policy(
    auth_url: &str,
    extra: &str,
    upstream: std::net::SocketAddr,
    capacity: u32,
) -> Policy {
    Policy::new()
        .auth(&format!(
            r#"methods:
    sso:
      external: {{url: "{auth_url}", response_headers: [X-Auth-Request-User, X-Auth-Request-Email, X-Auth-Request-Groups]{extra}}}
      identity: {{tenant: {{header: X-Auth-Request-Groups}}, user: {{header: X-Auth-Request-User}}}}"#
        ))
        .sections(&format!(
            r#"
upstreams: {{api: {{targets: ["{upstream}"]}}}}
limits:
  calls: {{scope: tenant, default: {{capacity: {capacity}, rate: 1/h}}}}
routes:
  - {{name: app, match: {{path_prefix: /}}, upstream: api, auth: sso, limits: [calls]}}
"#
        ))
}

pub(crate) async fn get_with(
    gw: &Gateway,
    path: &str,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut req = client().get(gw.url(path));
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    req.send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_answer_names_the_tenant_and_a_client_cannot_forge_it() {
    let auth = ForwardAuth::start(&[]);
    auth.session("s-ann", "ann", "ann@acme.test", "acme").await;
    let up = RawUpstream::start().await;
    let gw = policy(&auth.auth_url(), "", up.addr, 100).start().await;

    let forged = [
        ("cookie", "_oauth2_proxy=s-ann"),
        ("x-auth-request-user", "root"),
        ("x-auth-request-groups", "globex"),
    ];
    let r = get_with(&gw, "/v1/orders?page=2", &forged).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["ratelimit-policy"], "\"calls\";q=100;w=360000");
    let got = up.received();
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].cgi_header("x-auth-request-user"),
        ["ann"],
        "the service's, not the client's"
    );
    assert_eq!(got[0].cgi_header("x-auth-request-groups"), ["acme"]);
    assert_eq!(got[0].cgi_header("x-auth-request-email"), ["ann@acme.test"]);
    assert_eq!(got[0].cgi_header("x-tenant-id"), ["acme"]);
    assert_eq!(got[0].cgi_header("x-user-id"), ["ann"]);

    // What the auth service was told: the original request, the cookie,
    // never the client's copy of an answer header.
    let (line, headers) = auth.last().await;
    assert!(line.starts_with("GET /oauth2/auth "), "{line}");
    let header = |name: &str| {
        headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>()
    };
    assert_eq!(header("x-original-uri"), ["/v1/orders?page=2"]);
    assert_eq!(header("x-original-method"), ["GET"]);
    assert_eq!(
        header("x-forwarded-host"),
        [gw.url("")
            .trim_start_matches("http://")
            .trim_end_matches('/')]
    );
    assert_eq!(header("cookie"), ["_oauth2_proxy=s-ann"]);
    assert!(header("x-auth-request-user").is_empty(), "{headers:?}");
    assert!(
        header("content-length").iter().all(|v| *v == "0"),
        "never the body"
    );

    // No session: the service's 401 and challenge, nothing upstream.
    let r = get_with(&gw, "/v1/orders", &[("x-auth-request-user", "root")]).await;
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["www-authenticate"], "Bearer realm=\"sso\"");
    assert_eq!(up.count(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn users_of_one_group_share_its_bucket_exactly_across_two_gateways() {
    let redis = Redis::start().await;
    let auth = ForwardAuth::start(&[]);
    auth.session("s-ann", "ann", "ann@acme.test", "acme").await;
    auth.session("s-bob", "bob", "bob@acme.test", "acme").await;
    auth.session("s-cy", "cy", "cy@globex.test", "globex").await;
    let echo = Upstream::start().await;
    let store = format!("{{kind: redis, url: \"{}\"}}", redis.url());
    let p = policy(&auth.auth_url(), "", echo.addr, 5).store(&store);
    let (a, b) = (p.start().await, p.start().await);
    let mut allowed = 0;
    for i in 0..12 {
        let gw = if i % 2 == 0 { &a } else { &b };
        let session = if i % 3 == 0 {
            "_oauth2_proxy=s-bob"
        } else {
            "_oauth2_proxy=s-ann"
        };
        let status = get_with(gw, "/x", &[("cookie", session)]).await.status();
        assert!(status == 200 || status == 429, "{status}");
        allowed += u32::from(status == 200);
    }
    assert_eq!(allowed, 5, "acme's capacity, once, across both gateways");
    let r = get_with(&b, "/x", &[("cookie", "_oauth2_proxy=s-cy")]).await;
    assert_eq!(r.status(), 200, "another group, another bucket");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cached_answer_costs_no_call_and_a_refusal_is_never_cached() {
    let auth = ForwardAuth::start(&[]);
    auth.session("s-ann", "ann", "ann@acme.test", "acme").await;
    let echo = Upstream::start().await;
    let cache = ", cache: {cookie: _oauth2_proxy, ttl: 60s}";
    let gw = policy(&auth.auth_url(), cache, echo.addr, 100)
        .start()
        .await;
    for _ in 0..5 {
        let r = get_with(&gw, "/x", &[("cookie", "_oauth2_proxy=s-ann")]).await;
        assert_eq!(r.status(), 200);
    }
    assert_eq!(auth.calls().await, 1);
    for _ in 0..3 {
        let r = get_with(&gw, "/x", &[("cookie", "_oauth2_proxy=nobody")]).await;
        assert_eq!(r.status(), 401);
    }
    assert_eq!(auth.calls().await, 4, "each refusal asked again");
    assert_eq!(echo.requests(), 5);
}

/// Requests until one is answered, at most `n`; their statuses.
async fn statuses(gw: &Gateway, n: usize) -> Vec<u16> {
    let mut out = Vec::new();
    for _ in 0..n {
        let r = get_with(gw, "/x", &[("cookie", "_oauth2_proxy=s-ann")]).await;
        out.push(r.status().as_u16());
    }
    out
}

fn log_events(gw: &Gateway, event: &str) -> usize {
    gw.log_lines()
        .iter()
        .filter(|l| l["message"] == event)
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_service_is_503_fail_closed_and_the_breaker_spares_it() {
    let auth = ForwardAuth::start(&[]);
    auth.session("s-ann", "ann", "ann@acme.test", "acme").await;
    let echo = Upstream::start().await;
    let extra = ", timeout: 300ms, breaker: {failures: 2, open_for: 2s}";
    let gw = policy(&auth.auth_url(), extra, echo.addr, 100)
        .start()
        .await;

    for (mode, ms) in [("error", 0), ("slow", 1500)] {
        auth.mode(mode, ms).await;
        auth.reset().await;
        let started = Instant::now();
        let got = statuses(&gw, 6).await;
        assert_eq!(got, [503; 6], "{mode}");
        assert_eq!(
            auth.calls().await,
            2,
            "{mode}: two failures open the breaker"
        );
        // Two timeouts and four answers at once, however slow the service.
        assert!(
            started.elapsed() < Duration::from_millis(2 * 300 + 1000),
            "{mode}: {:?}",
            started.elapsed()
        );
        let r = get_with(&gw, "/x", &[("cookie", "_oauth2_proxy=s-ann")]).await;
        assert_eq!(r.headers()["retry-after"], "1");
        assert_eq!(r.headers()["content-type"], "application/problem+json");
        // Recover: after the interval one probe finds it answering again.
        auth.mode("ok", 0).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while get_with(&gw, "/x", &[("cookie", "_oauth2_proxy=s-ann")])
            .await
            .status()
            != 200
        {
            assert!(Instant::now() < deadline, "{mode}: never recovered");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert_eq!(
        echo.requests(),
        2,
        "only the two recoveries reached the upstream"
    );
    assert_eq!(
        log_events(&gw, "auth.external.unavailable"),
        2,
        "{}",
        gw.logs()
    );
    assert_eq!(
        log_events(&gw, "auth.external.recovered"),
        2,
        "{}",
        gw.logs()
    );
    let metrics = gw.metrics().await;
    assert!(
        metrics.contains("fairgate_external_auth_total{method=\"sso\",result=\"bad_status\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("fairgate_external_auth_total{method=\"sso\",result=\"timed_out\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("fairgate_external_auth_breaker_open{method=\"sso\"} 0"),
        "{metrics}"
    );

    // A dead service (nothing listening): 503 as well.
    let dead = free_addr();
    let gw = policy(&format!("http://{dead}/oauth2/auth"), extra, echo.addr, 100)
        .start()
        .await;
    assert_eq!(statuses(&gw, 3).await, [503; 3]);
    assert_eq!(echo.requests(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_401_sends_a_browser_to_sign_in_only_for_listed_hosts() {
    let auth = ForwardAuth::start(&[]);
    let echo = Upstream::start().await;
    let signin = format!(
        ", signin: {{url: \"{}\", hosts: [app.example.test, \"*.apps.example.test\"]}}",
        auth.signin_url()
    );
    let gw = policy(&auth.auth_url(), &signin, echo.addr, 100)
        .start()
        .await;
    let port = gw
        .url("")
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_string();
    let ask = |host: &str| {
        let request =
            format!("GET /page?x=1 HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n");
        let addr = gw
            .url("")
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .unwrap();
        async move { raw_http(addr, &request).await }
    };
    let answer = ask("app.example.test").await;
    assert_eq!(status_of(&answer), 302, "{answer}");
    let rd = format!("http%3A%2F%2Fapp.example.test%3A{port}%2Fpage%3Fx%3D1");
    assert!(
        answer.contains(&format!("\r\nlocation: {}?rd={rd}\r\n", auth.signin_url())),
        "{answer}"
    );
    let answer = ask("a.apps.example.test").await;
    assert_eq!(status_of(&answer), 302, "{answer}");
    // Any other host: the service's 401 as is, never a redirect naming it.
    for host in [
        "evil.example.test",
        "apps.example.test",
        "app.example.test.evil.test",
    ] {
        let answer = ask(host).await;
        assert_eq!(status_of(&answer), 401, "{host}: {answer}");
        assert!(
            !answer.to_ascii_lowercase().contains("location:"),
            "{answer}"
        );
    }
    assert_eq!(echo.requests(), 0);
}

/// The application behind the gateway: `/page` is HTML that asks
/// `/api/me` (same origin, so the session cookie goes along) and writes
/// its status, RateLimit header and answer (the tenant the upstream was
/// told) into `<body data-result=...>`; `/api/me` answers that tenant.
async fn application() -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16384];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
                let tenant = head
                    .lines()
                    .find_map(|l| l.strip_prefix("x-tenant-id:"))
                    .unwrap_or("none")
                    .trim()
                    .to_string();
                let (kind, body) = match head.starts_with("get /api/me") {
                    true => ("text/plain", tenant),
                    false => (
                        "text/html",
                        r#"<!doctype html><html><body data-result="pending"><script>
fetch("/api/me").then(r => r.text().then(t => document.body.setAttribute("data-result",
  r.status + "|" + (r.headers.get("ratelimit") || "no-quota") + "|" + t)))
  .catch(e => document.body.setAttribute("data-result", "failed"));
</script></body></html>"#
                            .to_string(),
                    ),
                };
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(answer.as_bytes()).await;
            });
        }
    });
    addr
}

/// The DOM headless Chromium ends on after loading `url`, with the test
/// host names resolved to 127.0.0.1 and a fresh profile (no cookies).
fn browse(url: &str) -> String {
    common::browser::browse(url, &["app.example.test", "evil.example.test"])
}

#[tokio::test(flavor = "multi_thread")]
async fn a_real_browser_signs_in_and_comes_back_to_its_page() {
    let auth = ForwardAuth::start(&["app.example.test"]);
    auth.session("s-ann", "ann", "ann@acme.test", "acme").await;
    auth.signin_user("s-ann").await;
    let app = application().await;
    // As ingress-nginx deployments do: the sign-in endpoint is served
    // under the application's host, so its cookie is the host's.
    let signin = "http://$host/oauth2/start";
    let gw = Policy::new()
        .auth(&format!(
            r#"methods:
    sso:
      external: {{url: "{}", signin: {{url: "{signin}", hosts: [app.example.test]}}}}
      identity: {{tenant: {{header: X-Auth-Request-Groups}}, user: {{header: X-Auth-Request-User}}}}"#,
            auth.auth_url()
        ))
        .sections(&format!(
            r#"
upstreams: {{app: {{targets: ["{app}"]}}, sso: {{targets: ["127.0.0.1:{}"]}}}}
limits:
  calls: {{scope: tenant, default: {{capacity: 100, rate: 1/h}}}}
routes:
  - {{name: signin, match: {{path_prefix: /oauth2/}}, upstream: sso, auth: none, exempt: true}}
  - {{name: app, match: {{path_prefix: /}}, upstream: app, auth: sso, limits: [calls]}}
"#,
            auth.port
        ))
        .start()
        .await;
    let port = gw.listen.port();

    let dom = browse(&format!("http://app.example.test:{port}/page"));
    let result = dom
        .split("data-result=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| panic!("no result in the page: {dom}"));
    // 200, the tenant's bucket (quotes as the DOM writes them), the tenant
    // the upstream was told.
    assert!(result.starts_with("200|&quot;calls&quot;;r="), "{result}");
    assert!(result.ends_with("|acme"), "{result}");
    assert!(
        auth.calls().await >= 3,
        "the page, its API call, the first refusal"
    );

    // A host not listed: no redirect that would bring a browser back to
    // it, the service's 401 instead.
    let dom = browse(&format!("http://evil.example.test:{port}/page"));
    assert!(dom.contains("urn:fairgate:problem:unauthorized"), "{dom}");
    // And the sign-in endpoint itself refuses to send anyone elsewhere.
    let dom = browse(&format!(
        "http://app.example.test:{port}/oauth2/start?rd=http%3A%2F%2Fevil.example.test%3A{port}%2Fpage"
    ));
    assert!(dom.contains("rd refused"), "{dom}");
}

#[tokio::test(flavor = "multi_thread")]
async fn host_in_the_url_is_the_routes_exact_host_never_the_clients() {
    let auth = ForwardAuth::start(&[]);
    auth.session("s-ann", "ann", "ann@acme.test", "acme").await;
    let echo = Upstream::start().await;
    let gw = Policy::new()
        .auth(&format!(
            r#"methods:
    own:
      external: {{url: "http://$host:{}/oauth2/auth"}}"#,
            auth.port
        ))
        .sections(&format!(
            r#"
upstreams: {{api: {{targets: ["{}"]}}}}
routes:
  - {{name: named, match: {{host: localhost, path_prefix: /}}, upstream: api, auth: own, limits: []}}
  - {{name: any, match: {{path_prefix: /}}, upstream: api, auth: own, limits: []}}
"#,
            echo.addr
        ))
        .start()
        .await;
    let port = gw.listen.port();
    let ask = |host: String| {
        let request = client()
            .get(gw.url("/x"))
            .header("host", host)
            .header("cookie", "_oauth2_proxy=s-ann");
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(ask(format!("localhost:{port}")).await, 200);
    assert_eq!(auth.calls().await, 1);
    // A route for any host: the address would be the client's to choose.
    assert_eq!(ask(format!("127.0.0.1:{port}")).await, 503);
    assert_eq!(auth.calls().await, 1);
    assert_eq!(echo.requests(), 1);
}

/// An auth service over HTTPS whose certificate (for `localhost`) a
/// private CA signed, as cert-manager's does in a cluster; session `s-ann`
/// known. Returns the CA's directory with it.
async fn private_ca_auth() -> (tempfile::TempDir, Pki, ForwardAuth) {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "cluster");
    let (cert, key) = pki.leaf("sso", "localhost", &["localhost"], "0b");
    let auth = ForwardAuth::start_tls(&cert, &key, &pki.ca());
    auth.session("s-ann", "ann", "ann@acme.test", "acme").await;
    (dir, pki, auth)
}

#[tokio::test(flavor = "multi_thread")]
async fn item_5_external_auth_trusts_its_ca_file() {
    let (_dir, pki, auth) = private_ca_auth().await;
    let echo = Upstream::start().await;
    let ca = format!(", ca_file: \"{}\"", pki.ca().display());
    let gw = policy(&auth.auth_url(), &ca, echo.addr, 100).start().await;
    let r = get_with(&gw, "/x", &[("cookie", "_oauth2_proxy=s-ann")]).await;
    assert_eq!(r.status(), 200, "{}", gw.logs());
    assert_eq!(auth.calls().await, 1);
    assert_eq!(echo.requests(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn item_5_external_auth_without_its_ca_file_fails_closed() {
    let (_dir, _pki, auth) = private_ca_auth().await;
    let echo = Upstream::start().await;
    let gw = policy(&auth.auth_url(), "", echo.addr, 100).start().await;
    let r = get_with(&gw, "/x", &[("cookie", "_oauth2_proxy=s-ann")]).await;
    // The system's roots do not know the CA: the handshake fails, so the
    // service is never asked and nothing reaches the upstream.
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(auth.calls().await, 0);
    assert_eq!(echo.requests(), 0);
    let metrics = gw.metrics().await;
    assert!(
        metrics.contains("fairgate_external_auth_total{method=\"sso\",result=\"unreachable\"} 1"),
        "{metrics}"
    );
}

/// A gateway whose `sso` method caches answers by the session cookie
/// (`more` adds keys to `cache:`), with session `s-ann` known.
async fn cached(more: &str) -> (ForwardAuth, Upstream, Gateway) {
    let auth = ForwardAuth::start(&[]);
    auth.session("s-ann", "ann", "ann@acme.test", "acme").await;
    let echo = Upstream::start().await;
    let cache = format!(", cache: {{cookie: _oauth2_proxy, ttl: 60s{more}}}");
    let gw = policy(&auth.auth_url(), &cache, echo.addr, 1000)
        .start()
        .await;
    (auth, echo, gw)
}

/// GETs `/orders/0` to `/orders/19` with session `s-ann`; each must be 200.
async fn twenty_paths(gw: &Gateway) {
    for i in 0..20 {
        let path = format!("/orders/{i}?view=full");
        let r = get_with(gw, &path, &[("cookie", "a=1; _oauth2_proxy=s-ann")]).await;
        assert_eq!(r.status(), 200, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn item_6_one_session_on_20_paths_costs_one_auth_call() {
    let (auth, echo, gw) = cached("").await;
    twenty_paths(&gw).await;
    assert_eq!(auth.calls().await, 1);
    assert_eq!(echo.requests(), 20);
    let metrics = gw.metrics().await;
    assert!(
        metrics.contains("fairgate_external_auth_total{method=\"sso\",result=\"cached\"} 19"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn item_6_per_uri_cache_asks_once_per_path() {
    let (auth, echo, gw) = cached(", per_uri: true").await;
    twenty_paths(&gw).await;
    assert_eq!(auth.calls().await, 20, "one call per path and query");
    twenty_paths(&gw).await;
    assert_eq!(auth.calls().await, 20, "the same paths again: all cached");
    assert_eq!(echo.requests(), 40);
}

#[tokio::test(flavor = "multi_thread")]
async fn item_6_another_method_host_or_request_never_uses_anothers_entry() {
    let (auth, echo, gw) = cached("").await;
    let port = gw.listen.port();
    let ask =
        |method: reqwest::Method, host: String, headers: Vec<(&'static str, &'static str)>| {
            let mut request = client()
                .request(method, gw.url("/orders/1"))
                .header("host", host);
            for (name, value) in headers {
                request = request.header(name, value);
            }
            async move { request.send().await.unwrap().status().as_u16() }
        };
    let session = || vec![("cookie", "_oauth2_proxy=s-ann")];
    let here = format!("localhost:{port}");
    assert_eq!(
        ask(reqwest::Method::GET, here.clone(), session()).await,
        200
    );
    assert_eq!(
        ask(reqwest::Method::GET, here.clone(), session()).await,
        200
    );
    assert_eq!(
        auth.calls().await,
        1,
        "the same session, route, host, method"
    );
    // Another method, then another host: each its own entry, asked once.
    assert_eq!(
        ask(reqwest::Method::DELETE, here.clone(), session()).await,
        200
    );
    assert_eq!(auth.calls().await, 2, "a DELETE is never the GET's answer");
    let there = format!("127.0.0.1:{port}");
    assert_eq!(ask(reqwest::Method::GET, there, session()).await, 200);
    assert_eq!(auth.calls().await, 3, "another host asks");
    // Without the session, with another, or with the session named twice
    // (the service might read either): asked, refused, never the entry's.
    for headers in [
        vec![],
        vec![("cookie", "_oauth2_proxy=s-bob")],
        vec![("cookie", "_oauth2_proxy=nobody; _OAUTH2_PROXY=s-ann")],
    ] {
        let status = ask(reqwest::Method::GET, here.clone(), headers.clone()).await;
        assert_eq!(status, 401, "{headers:?}");
    }
    assert_eq!(auth.calls().await, 6);
    // Another credential passed besides the session: its own entry, as
    // the service may decide by it first.
    let mut both = session();
    both.push(("authorization", "Bearer s-bob"));
    assert_eq!(ask(reqwest::Method::GET, here, both).await, 200);
    assert_eq!(auth.calls().await, 7);
    assert_eq!(echo.requests(), 5);
}
