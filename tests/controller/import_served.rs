//! The gateway started on policies `fairgate import ingress-nginx` wrote
//! from the corpus in `tests/ingress-nginx/` (see `import.rs`), made
//! runnable here (free ports, the test's Redis and upstreams, Secrets
//! mounted), showing the mapped behaviour with real requests: limits,
//! address rules, verified upstream TLS, rewrites and redirects, canaries,
//! CORS, TLS hosts with HSTS, header snippets, legacy and gRPC backends,
//! external and basic authentication.

use crate::common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use common::ingress_import::*;
use common::*;

/// The policy of `case` made runnable here: the listeners on free loopback
/// ports (`$LISTEN`, `$ADMIN`), the Services' names replaced by the
/// upstreams serving them, the Redis of the test, the Secrets under `tls`.
fn runnable(
    case: &str,
    services: &[(&str, SocketAddr)],
    redis: &Redis,
    tls: Option<(&Path, SocketAddr)>,
) -> String {
    let (policy, _, _) = import(case);
    serveable(&policy, services, redis, tls)
}

/// An imported policy made runnable here, as `runnable` says.
fn serveable(
    policy: &str,
    services: &[(&str, SocketAddr)],
    redis: &Redis,
    tls: Option<(&Path, SocketAddr)>,
) -> String {
    let mut policy = policy
        .replace("0.0.0.0:8080", "$LISTEN")
        .replace("127.0.0.1:9090", "$ADMIN")
        // The store's 50 ms default timeout is for production; a test
        // process sharing 2 cores with others may stall longer, and the
        // local fallback would then admit what the bucket refuses.
        .replace(
            "\"redis://fairgate-redis:6379/0\"",
            &format!("\"{}\", timeout: 2s", redis.url()),
        );
    for (name, addr) in services {
        let before = policy.clone();
        policy = policy.replace(name, &addr.to_string());
        assert_ne!(before, policy, "{name} is not in the policy");
    }
    if let Some((dir, listen)) = tls {
        policy = policy
            .replace("0.0.0.0:8443", &listen.to_string())
            .replace(
                "cert_file: tls/",
                &format!("cert_file: {}/tls/", dir.display()),
            )
            .replace(
                "key_file: tls/",
                &format!("key_file: {}/tls/", dir.display()),
            );
    }
    policy
}

async fn send(gw: &Gateway, host: &str, path: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut req = no_redirects().get(gw.url(path)).header("host", host);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn limit_rps_5_on_3_replicas_admits_78_back_to_back_then_refuses_503() {
    let (redis, echo) = (Redis::start().await, Upstream::start().await);
    let services = [
        ("api.shop.svc.cluster.local:80", echo.addr),
        ("reports.shop.svc.cluster.local:8080", echo.addr),
    ];
    let gw = Gateway::start(&runnable("rate-limit", &services, &redis, None)).await;
    let started = std::time::Instant::now();
    let first = send(&gw, "api.example.com", "/x", &[]).await;
    assert_eq!(first.status(), 200);
    assert_eq!(
        header(&first, "ratelimit-policy"),
        "\"shop_api-rps\";q=78;w=6"
    );
    assert_eq!(header(&first, "x-ratelimit-limit"), "78");
    assert_eq!(header(&first, "x-ratelimit-remaining"), "77");
    // A full bucket of 78 admits 78 in a row whatever the clock does.
    for i in 2..=78 {
        let status = send(&gw, "api.example.com", "/x", &[]).await.status();
        assert_eq!(status, 200, "request {i}");
    }
    // Then it refuses with ingress-nginx's 503, once the few tokens that
    // refilled meanwhile (15/s) are spent.
    let mut extra = 0;
    let refused = loop {
        let r = send(&gw, "api.example.com", "/x", &[]).await;
        if r.status() != 200 {
            break r;
        }
        extra += 1;
        assert!(extra < 1000, "never refused");
    };
    let refill = (started.elapsed().as_secs_f64() * 15.0).ceil() as u64;
    assert!(
        extra <= refill,
        "{extra} admitted beyond 78, {refill} refilled"
    );
    assert_eq!(refused.status(), 503);
    assert_eq!(header(&refused, "retry-after"), "1");
    assert_eq!(echo.requests(), 78 + extra);
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_2_a_regex_ingress_cannot_shadow_an_address_restricted_path() {
    let redis = Redis::start().await;
    let (api, admin) = (Upstream::start().await, Upstream::start().await);
    let services = [
        ("api.t.svc.cluster.local:80", api.addr),
        ("admin.t.svc.cluster.local:80", admin.addr),
    ];
    // Only 10/8 may reach the admin paths; this client is 127.0.0.1.
    let gw = Gateway::start(&runnable("regex-host", &services, &redis, None)).await;
    let admin_paths = [
        "/api/v1/admin",
        "/api/v1/admin/users",
        "/API/V1/ADMIN",
        "/api/v1/administrators",
        "/api/v1/status/x",
    ];
    for path in admin_paths {
        let status = send(&gw, "api.example.com", path, &[]).await.status();
        assert_eq!(status, 403, "{path} from outside the allow list");
    }
    for path in ["/api/v2/items", "/API/V1/users"] {
        let status = send(&gw, "api.example.com", path, &[]).await.status();
        assert_eq!(status, 200, "{path}");
    }
    assert_eq!((api.requests(), admin.requests()), (2, 0));
    drop(gw);
    // The same Ingresses with this client's network allowed.
    let dir = tempfile::tempdir().unwrap();
    let manifest = std::fs::read_to_string("tests/ingress-nginx/regex-host/ingress.yaml")
        .unwrap()
        .replace("10.0.0.0/8", "127.0.0.0/8");
    std::fs::write(dir.path().join("ingress.yaml"), manifest).unwrap();
    let (policy, _, code) = import_with(&["--replicas", "3", dir.path().to_str().unwrap()]);
    assert_eq!(code, 0);
    let gw = Gateway::start(&serveable(&policy, &services, &redis, None)).await;
    for path in admin_paths {
        let status = send(&gw, "api.example.com", path, &[]).await.status();
        assert_eq!(status, 200, "{path} from inside the allow list");
    }
    assert_eq!((api.requests(), admin.requests()), (2, 5));
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_6_an_imported_verified_backend_refuses_a_certificate_of_another_ca() {
    let redis = Redis::start().await;
    let dir = tempfile::tempdir().unwrap();
    // The verified Ingress and the one that never verified, of one Service.
    let manifests =
        std::fs::read_to_string("tests/ingress-nginx/upstream-tls/ingress.yaml").unwrap();
    let two: Vec<&str> = manifests.split("\n---\n").take(2).collect();
    std::fs::write(dir.path().join("ingress.yaml"), two.join("\n---\n")).unwrap();
    let (policy, _, _) = import_with(&["--tls-dir", "tls", dir.path().to_str().unwrap()]);
    // The Secret's ca.crt, mounted where the policy says.
    let ca = Pki::new(dir.path(), "payments");
    let other = Pki::new(dir.path(), "other");
    let mounted = dir.path().join("tls/shop/payments-ca");
    std::fs::create_dir_all(&mounted).unwrap();
    std::fs::copy(ca.ca(), mounted.join("ca.crt")).unwrap();
    let policy = policy.replace(
        "ca_file: tls/",
        &format!("ca_file: {}/tls/", dir.path().display()),
    );
    // Signed by the Secret's CA: served; by another: 502 on the verified
    // pool, and still served by the Ingress that never verified.
    for (pki, file, verified) in [(&ca, "good", 200), (&other, "forged", 502)] {
        let (cert, key) = pki.leaf(file, "payments", &["payments.internal"], "01");
        let server = SServer::start(&cert, &key).await;
        let services = [("payments.shop.svc.cluster.local:443", server.addr)];
        let gw = Gateway::start(&serveable(&policy, &services, &redis, None)).await;
        let status = send(&gw, "pay.example.com", "/", &[]).await.status();
        assert_eq!(status, verified, "{file}");
        let status = send(&gw, "pay-legacy.example.com", "/", &[]).await.status();
        assert_eq!(status, 200, "{file}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn rewrites_and_redirects_answer_as_ingress_nginx_did() {
    let (redis, echo) = (Redis::start().await, Upstream::start().await);
    let services = [("http-svc.default.svc.cluster.local:80", echo.addr)];
    let gw = Gateway::start(&runnable("rewrite", &services, &redis, None)).await;
    for (path, forwarded) in [
        ("/something/new?x=1", "/new"),
        ("/something", "/"),
        ("/SOMETHING/a/b", "/a/b"),
    ] {
        let r = send(&gw, "rewrite.bar.com", path, &[]).await;
        assert_eq!(r.status(), 200, "{path}");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["path"], forwarded, "{path}");
    }
    let r = send(&gw, "approot.bar.com", "/", &[]).await;
    assert_eq!(
        (r.status().as_u16(), header(&r, "location")),
        (302, "/app1".into())
    );
    let r = send(&gw, "approot.bar.com", "/status", &[]).await;
    assert_eq!(r.status(), 200);
    let r = send(&gw, "old.bar.com", "/any/path", &[]).await;
    assert_eq!(
        (r.status().as_u16(), header(&r, "location")),
        (301, "https://www.example.com/new-home".into())
    );
    let r = send(&gw, "down.bar.com", "/", &[]).await;
    assert_eq!(
        (r.status().as_u16(), header(&r, "location")),
        (307, "https://status.example.com/".into())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn canaries_go_by_header_cookie_and_header_value() {
    let redis = Redis::start().await;
    let (v1, v2) = (EchoProcess::start(), EchoProcess::start());
    let services = [
        ("web-v1.prod.svc.cluster.local:80", v1.addr),
        ("web-v2.prod.svc.cluster.local:80", v2.addr),
        ("api-v1.prod.svc.cluster.local:80", v1.addr),
        ("api-v2.prod.svc.cluster.local:80", v2.addr),
    ];
    let gw = Gateway::start(&runnable("canary", &services, &redis, None)).await;
    /// Host, path, headers, and which pool (0 main, 1 canary) serves it.
    type Case<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], usize);
    let cases: &[Case] = &[
        ("web.example.com", "/", &[("x-canary", "always")], 1),
        ("web.example.com", "/", &[("x-canary", "never")], 0),
        ("web.example.com", "/", &[("cookie", "canary=always")], 1),
        ("api.example.com", "/v1/x", &[("x-region", "eu-west")], 1),
        ("api.example.com", "/v1/x", &[("x-region", "us-east")], 0),
        ("api.example.com", "/v1/x", &[], 0),
    ];
    for (host, path, headers, want) in cases {
        let before = [v1.requests(), v2.requests()];
        assert_eq!(send(&gw, host, path, headers).await.status(), 200);
        let after = [v1.requests(), v2.requests()];
        let got: Vec<usize> = (0..2).filter(|i| after[*i] != before[*i]).collect();
        assert_eq!(got, [*want], "{host}{path} {headers:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn cors_preflights_are_answered_for_listed_origins() {
    let (redis, echo) = (Redis::start().await, Upstream::start().await);
    let services = [
        ("widgets.default.svc.cluster.local:80", echo.addr),
        ("public.default.svc.cluster.local:80", echo.addr),
    ];
    let gw = Gateway::start(&runnable("cors", &services, &redis, None)).await;
    let preflight = |origin: &'static str| {
        let c = no_redirects();
        let url = gw.url("/v1/widgets");
        async move {
            c.request(reqwest::Method::OPTIONS, url)
                .header("host", "widgets.example.com")
                .header("origin", origin)
                .header("access-control-request-method", "DELETE")
                .header("access-control-request-headers", "authorization")
                .send()
                .await
                .unwrap()
        }
    };
    let r = preflight("https://app.example.com").await;
    assert_eq!(r.status(), 204);
    assert_eq!(
        header(&r, "access-control-allow-origin"),
        "https://app.example.com"
    );
    assert_eq!(header(&r, "access-control-allow-credentials"), "true");
    assert_eq!(header(&r, "access-control-max-age"), "600");
    let r = preflight("https://shop.example.org").await;
    assert_eq!(header(&r, "access-control-allow-origin"), "");
    assert_eq!(echo.requests(), 0, "preflights never reach the upstream");
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_hosts_redirect_plain_http_unless_told_not_to() {
    let (redis, echo) = (Redis::start().await, Upstream::start().await);
    let dir = tempfile::tempdir().unwrap();
    let (policy, _, _) = import("tls");
    mount_secrets(&policy, dir.path());
    let tls_listen = free_addr();
    let services = [("site.web.svc.cluster.local:80", echo.addr)];
    let gw = Gateway::start(&runnable(
        "tls",
        &services,
        &redis,
        Some((dir.path(), tls_listen)),
    ))
    .await;
    let r = send(&gw, "secure.example.com", "/a?b=1", &[]).await;
    assert_eq!(r.status(), 308);
    // To the standard port, which the Service publishes.
    assert_eq!(header(&r, "location"), "https://secure.example.com/a?b=1");
    let r = send(&gw, "plain.example.com", "/", &[]).await;
    assert_eq!(r.status(), 308, "force-ssl-redirect");
    let r = send(&gw, "mixed.example.com", "/", &[]).await;
    assert_eq!(r.status(), 200, "ssl-redirect: false");
    assert_eq!(echo.requests(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_15_a_tls_host_answers_https_with_hsts_as_ingress_nginx_did() {
    let (redis, echo) = (Redis::start().await, Upstream::start().await);
    let dir = tempfile::tempdir().unwrap();
    let (policy, _, _) = import("tls");
    let pki = mount_secrets(&policy, dir.path());
    let tls_listen = free_addr();
    let services = [("site.web.svc.cluster.local:80", echo.addr)];
    let _gw = Gateway::start(&runnable(
        "tls",
        &services,
        &redis,
        Some((dir.path(), tls_listen)),
    ))
    .await;
    let resolve = format!("secure.example.com:{}:127.0.0.1", tls_listen.port());
    let url = format!("https://secure.example.com:{}/a", tls_listen.port());
    let ca = pki.ca().display().to_string();
    let (out, code) = curl(&["-i", "--cacert", &ca, "--resolve", &resolve, &url]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.starts_with("HTTP/1.1 200") || out.starts_with("HTTP/2 200"),
        "{out}"
    );
    assert!(
        out.lines().any(|l| l.trim_end().eq_ignore_ascii_case(
            "strict-transport-security: max-age=31536000; includeSubDomains"
        )),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn header_snippets_and_custom_headers_reach_both_sides_and_withheld_hosts_are_not_served() {
    let (redis, echo) = (Redis::start().await, Upstream::start().await);
    let services = [("app.app.svc.cluster.local:80", echo.addr)];
    let gw = Gateway::start(&runnable("snippets", &services, &redis, None)).await;
    let r = send(&gw, "app.example.com", "/x", &[]).await;
    assert_eq!(r.status(), 200);
    // Response headers from custom-headers and more_set_headers.
    assert_eq!(header(&r, "x-frame-options"), "DENY");
    assert_eq!(header(&r, "x-content-type-options"), "nosniff");
    assert_eq!(header(&r, "request-id"), header(&r, "x-request-id"));
    // proxy_set_header X-Client-Host $host, as the upstream got it.
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["headers"]["x-client-host"][0], "app.example.com");
    // The Ingress with a rewrite snippet was withheld: nothing serves its host.
    assert_eq!(
        send(&gw, "legacy.example.com", "/", &[]).await.status(),
        404
    );
    assert_eq!(echo.requests(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_v1beta1_backend_is_served_and_an_ajp_one_is_not() {
    let (redis, echo) = (Redis::start().await, Upstream::start().await);
    let services = [("catalogue.store.svc.cluster.local:8080", echo.addr)];
    let gw = Gateway::start(&runnable("legacy", &services, &redis, None)).await;
    let r = send(&gw, "shop.example.com", "/catalogue/items", &[]).await;
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["path"], "/catalogue/items");
    assert_eq!(
        send(&gw, "shop.example.com", "/legacy-app", &[])
            .await
            .status(),
        404
    );
    assert_eq!(echo.requests(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grpc_backend_is_called_over_tls_through_the_imported_policy() {
    let redis = Redis::start().await;
    let mut cmd = Command::new("python3");
    cmd.args([
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/grpc_peer.py"),
        "serve",
        "--port",
        "0",
    ]);
    let peer = Peer::spawn(&mut cmd, "python3 with grpcio is needed: scripts/deps");
    let port: u16 = peer
        .first_line
        .trim()
        .strip_prefix("ready ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("grpc_peer.py printed {:?}", peer.first_line));
    let dir = tempfile::tempdir().unwrap();
    let (policy, _, _) = import("grpc");
    let pki = mount_secrets(&policy, dir.path());
    let tls = free_addr();
    let grpc_server = SocketAddr::from(([127, 0, 0, 1], port));
    let services = [
        ("fortune-teller.grpc.svc.cluster.local:50051", grpc_server),
        ("secure-teller.grpc.svc.cluster.local:443", free_addr()),
    ];
    let _gw = Gateway::start(&runnable(
        "grpc",
        &services,
        &redis,
        Some((dir.path(), tls)),
    ))
    .await;
    let ca = pki.ca().display().to_string();
    let out = Command::new("python3")
        .args([
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/grpc_peer.py"),
            "call",
        ])
        .args([
            "--target",
            &tls.to_string(),
            "--method",
            "/fairgate.test.Echo/Unary",
        ])
        .args(["--ca", &ca, "--authority", "grpctest.dev.mydomain.com"])
        .output()
        .unwrap();
    let r: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    // backend-protocol GRPC: h2c to the peer, its answer and trailers back.
    assert_eq!(r["code"], "OK", "{r}");
    assert_eq!(r["responses"], serde_json::json!(["echo:hi"]));
}

/// The `auth` fixture made runnable with `echo` as every Service and
/// `sso` as oauth2-proxy; the report checked for `mapped` lines.
async fn auth_gateway(
    redis: &Redis,
    echo: &Upstream,
    sso: &common::forward_auth::ForwardAuth,
    mapped: &[(&str, &str)],
) -> Gateway {
    let sso_addr = SocketAddr::from(([127, 0, 0, 1], sso.port));
    let services = [
        ("web.apps.svc.cluster.local:80", echo.addr),
        ("oauth2-proxy.auth.svc.cluster.local:4180", sso_addr),
    ];
    let (policy, report, _) = import("auth");
    for (ingress, annotation) in mapped {
        let line = format!("apps/{ingress}: nginx.ingress.kubernetes.io/{annotation}: mapped (");
        assert!(report.contains(&line), "{line}\n{report}");
    }
    Gateway::start(&serveable(&policy, &services, redis, None)).await
}

#[tokio::test(flavor = "multi_thread")]
async fn imported_auth_url_is_served_through_the_auth_service() {
    let (redis, echo) = (Redis::start().await, Upstream::start().await);
    let sso = common::forward_auth::ForwardAuth::start(&[]);
    sso.session("s3cr3t", "ada", "ada@example.com", "admins")
        .await;
    let mapped = [
        ("dashboard", "auth-url"),
        ("dashboard", "auth-response-headers"),
        ("api", "auth-url"),
    ];
    let gw = auth_gateway(&redis, &echo, &sso, &mapped).await;
    // A valid session: the upstream gets the service's user, not the
    // client's forged copy.
    let cookie = ("cookie", "_oauth2_proxy=s3cr3t");
    let forged = ("x-auth-request-user", "mallory");
    let r = send(&gw, "dashboard.example.com", "/reports", &[cookie, forged]).await;
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        body["headers"]["x-auth-request-user"],
        serde_json::json!(["ada"])
    );
    assert_eq!(
        body["headers"]["x-auth-request-email"],
        serde_json::json!(["ada@example.com"])
    );
    // auth-always-set-cookie: a refreshed session's cookie reaches the
    // client.
    sso.session_refreshing("r3fresh", "bo", "bo@example.com", "staff")
        .await;
    let refreshing = ("cookie", "_oauth2_proxy=r3fresh");
    let r = send(&gw, "dashboard.example.com", "/", &[refreshing]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        header(&r, "set-cookie"),
        "_oauth2_proxy=r3fresh; Path=/; HttpOnly"
    );
    // No session: the API (no auth-signin) answers the service's 401; the
    // dashboard sends the browser to sign in on its own host.
    let r = send(&gw, "api.example.com", "/v1/items", &[]).await;
    assert_eq!(r.status(), 401);
    assert_eq!(header(&r, "www-authenticate"), "Bearer realm=\"sso\"");
    let r = send(&gw, "dashboard.example.com", "/reports?q=1", &[]).await;
    assert_eq!(r.status(), 302);
    assert_eq!(
        header(&r, "location"),
        "https://dashboard.example.com/oauth2/start?rd=http%3A%2F%2Fdashboard.example.com%2Freports%3Fq%3D1"
    );
    // The ConfigMap's global-auth-url guards an Ingress without its own;
    // enable-global-auth: "false" leaves one open.
    let r = send(&gw, "docs.example.com", "/", &[cookie]).await;
    assert_eq!(r.status(), 200);
    let r = send(
        &gw,
        "docs.example.com",
        "/",
        &[("authorization", "Bearer nope")],
    )
    .await;
    assert_eq!(r.status(), 302);
    assert_eq!(
        header(&r, "location"),
        "https://docs.example.com/oauth2/start?rd=http%3A%2F%2Fdocs.example.com%2F"
    );
    assert_eq!(send(&gw, "www.example.com", "/", &[]).await.status(), 200);
    assert_eq!(echo.requests(), 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn imported_basic_auth_checks_the_secrets_htpasswd_entries() {
    let (redis, echo) = (Redis::start().await, Upstream::start().await);
    let sso = common::forward_auth::ForwardAuth::start(&[]);
    let mapped = [
        ("private", "auth-type"),
        ("private", "auth-secret"),
        ("private", "auth-realm"),
        ("team", "auth-type"),
        ("team", "auth-secret"),
    ];
    let gw = auth_gateway(&redis, &echo, &sso, &mapped).await;
    // Basic auth from the Secret's htpasswd entries (`htpasswd -nbB`).
    let basic = |user: &str, password: &str| {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        format!("Basic {b64}")
    };
    let right = basic("alice", "wonderland");
    let r = send(
        &gw,
        "private.example.com",
        "/",
        &[("authorization", &right)],
    )
    .await;
    assert_eq!(r.status(), 200);
    for wrong in [basic("alice", "looking-glass"), basic("carol", "singer")] {
        let r = send(
            &gw,
            "private.example.com",
            "/",
            &[("authorization", &wrong)],
        )
        .await;
        assert_eq!(r.status(), 401, "{wrong}");
        assert_eq!(
            header(&r, "www-authenticate"),
            "Basic realm=\"Authentication Required - private\", charset=\"UTF-8\""
        );
    }
    // The auth-map Secret's user, on its own Ingress.
    let carol = basic("carol", "singer");
    let r = send(&gw, "team.example.com", "/", &[("authorization", &carol)]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(echo.requests(), 2);
}
