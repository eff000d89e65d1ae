//! The edge, attacked as a stranger would: raw request bytes written to the
//! socket (no client library to fix them up), and assertions on what a real
//! upstream received, byte for byte, read as a decoding upstream (Go,
//! WSGI) would read it. One test per finding of the edge-hardening review;
//! what a stranger can make the edge hold (memory, time, connections,
//! slots) is `hardening_resources.rs`.

use crate::common;

use std::time::Duration;

use common::edge_attack::*;
use common::*;
// Request bytes, over common's `get` of a client.
use common::edge_attack::get;
use serde_json::json;

#[tokio::test]
async fn finding_1_targets_that_are_not_a_path_are_refused() {
    let up = RawUpstream::start().await;
    let gw = gateway(&up, "", STRICT, ADMIN_ROUTES).await;
    let host = gw.listen.to_string();
    for target in [
        "x:/admin/users",
        "v1/secret",
        "foo:bar/x",
        "mailto:/healthz",
        "admin/users",
        "*",
    ] {
        let r = send(&gw, &get(target, &host, "")).await;
        assert_eq!(status_of(&r), 400, "{target}: {r}");
    }
    assert_eq!(up.count(), 0, "nothing reached the upstream");

    // Absolute-form is routed on its path, and must agree with Host.
    let r = send(&gw, &get(&format!("http://{host}/admin/users"), &host, "")).await;
    assert_eq!(status_of(&r), 401, "{r}");
    let r = send(&gw, &get("http://evil.example/admin/users", &host, "")).await;
    assert_eq!(status_of(&r), 400, "{r}");
    assert_eq!(up.count(), 0);
    let auth = format!("Authorization: Bearer {}\r\n", user_token("acme"));
    let r = send(
        &gw,
        &get(&format!("HTTP://{host}/admin/users?a=1"), &host, &auth),
    )
    .await;
    assert_eq!(status_of(&r), 200, "{r}");
    assert_eq!(
        up.received()[0].target(),
        "/admin/users?a=1",
        "forwarded in origin-form"
    );

    // The route's own limit (3) and max_body hold for every spelling.
    let mut statuses = Vec::new();
    for target in [
        "/v1/auth/refresh",
        "/v1/auth/%72efresh",
        "//v1//auth/refresh",
    ] {
        for _ in 0..2 {
            statuses.push(status_of(&send(&gw, &get(target, &host, &auth)).await));
        }
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429]);
    let body = "x".repeat(200);
    let post = format!(
        "POST http://{host}/v1/small HTTP/1.1\r\nHost: {host}\r\n{auth}Content-Length: 200\r\nConnection: close\r\n\r\n{body}"
    );
    assert_eq!(status_of(&send(&gw, post.as_bytes()).await), 413);

    // The access log names the path that was routed and forwarded.
    let paths: Vec<String> = gw
        .log_lines()
        .iter()
        .filter(|l| l["target"] == "access" && l["route"] == "refresh")
        .map(|l| l["path"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(paths, vec!["/v1/auth/refresh"; 6]);
}

#[tokio::test]
async fn finding_2_encoded_slashes_are_refused_decoded_or_kept_as_configured() {
    let up = RawUpstream::start().await;
    let gw = gateway(&up, "", STRICT, ADMIN_ROUTES).await;
    let host = gw.listen.to_string();
    for target in [
        "/admin%2Fusers",
        "/admin%2fusers",
        "/v1/auth%2Frefresh",
        "/x%5Cadmin",
    ] {
        let r = send(&gw, &get(target, &host, "")).await;
        assert_eq!(status_of(&r), 400, "{target}: {r}");
    }
    assert_eq!(up.count(), 0);
    drop(gw);

    let gw = gateway(&up, "escaped_slashes: decode", STRICT, ADMIN_ROUTES).await;
    let r = send(&gw, &get("/admin%2Fusers", &host_of(&gw), "")).await;
    assert_eq!(status_of(&r), 401, "decoded, it is the admin route: {r}");
    let auth = format!("Authorization: Bearer {}\r\n", user_token("acme"));
    let r = send(&gw, &get("/admin%2Fusers", &host_of(&gw), &auth)).await;
    assert_eq!(status_of(&r), 200);
    assert_eq!(up.received()[0].target(), "/admin/users");
    drop(gw);

    let gw = gateway(&up, "escaped_slashes: keep", STRICT, ADMIN_ROUTES).await;
    let r = send(&gw, &get("/files/a%2Fb", &host_of(&gw), "")).await;
    assert_eq!(status_of(&r), 200);
    assert_eq!(up.received()[1].target(), "/files/a%2Fb");
}

#[tokio::test]
async fn finding_4_headers_with_underscores_never_reach_the_upstream() {
    let up = RawUpstream::start().await;
    let gw = gateway(&up, "", STRICT, ADMIN_ROUTES).await;
    let host = host_of(&gw);
    let forged = "X_Tenant_Id: globex\r\nX_User_Id: root\r\nX_Custom: 1\r\n";
    assert_eq!(
        status_of(&send(&gw, &get("/open", &host, forged)).await),
        200
    );
    let auth = format!("{forged}Authorization: Bearer {}\r\n", user_token("acme"));
    assert_eq!(
        status_of(&send(&gw, &get("/admin", &host, &auth)).await),
        200
    );
    let got = up.received();
    for r in &got {
        assert!(
            r.headers().iter().all(|(n, _)| !n.contains('_')),
            "{}",
            r.head
        );
    }
    assert!(got[0].cgi_header("X-Tenant-Id").is_empty());
    assert_eq!(got[1].cgi_header("X-Tenant-Id"), ["acme"]);
    assert_eq!(got[1].cgi_header("X-User-Id"), ["u1"]);
    drop(gw);

    // Opted in, other names with `_` pass; identity look-alikes never do.
    let gw = gateway(
        &up,
        "allow_underscores_in_headers: true",
        STRICT,
        ADMIN_ROUTES,
    )
    .await;
    assert_eq!(
        status_of(&send(&gw, &get("/admin", &host_of(&gw), &auth)).await),
        200
    );
    let last = up.received().pop().unwrap();
    assert_eq!(last.cgi_header("X-Tenant-Id"), ["acme"], "{}", last.head);
    assert_eq!(last.cgi_header("X-User-Id"), ["u1"]);
    assert_eq!(last.cgi_header("X_Custom"), ["1"]);
}

#[tokio::test]
async fn finding_5_clients_cannot_pick_a_fresh_bucket() {
    let up = RawUpstream::start().await;
    let extra = r#"
limits:
  webhooks: {scope: {path: provider}, default: {capacity: 50, rate: 1/h}}
  listed: {scope: {path: provider, values: [stripe, github]}, default: {capacity: 2, rate: 1/h}}
default_limits:
  unauthenticated: {scope: client_ip, capacity: 5, rate: 1/h}
"#;
    let routes = r#"
  - {name: hooks, match: {path: "/webhooks/{provider}"}, upstream: app, auth: none, limits: [webhooks]}
  - {name: listed, match: {path: "/listed/{provider}"}, upstream: app, auth: none, limits: [listed]}
"#;
    let gw = gateway(&up, "", extra, routes).await;
    let host = host_of(&gw);
    let mut passed = 0;
    for i in 0..200 {
        let r = send(&gw, &get(&format!("/webhooks/p{i}"), &host, "")).await;
        passed += usize::from(status_of(&r) == 200);
    }
    assert_eq!(passed, 5, "the per-address default still applies");

    let r = send(&gw, &get("/listed/random", &host, "")).await;
    assert_eq!(status_of(&r), 404, "{r}");
    let mut statuses = Vec::new();
    for p in [
        "/listed/stripe",
        "/listed/stripe",
        "/listed/stripe",
        "/listed/github",
    ] {
        statuses.push(status_of(&send(&gw, &get(p, &host, "")).await));
    }
    assert_eq!(statuses, [200, 200, 429, 200]);
}

#[tokio::test]
async fn finding_6_debug_logs_never_show_tokens_cookies_or_queries() {
    let up = RawUpstream::start().await;
    let gw = Policy::new()
        .server("threads: 1")
        .hs256()
        .env("RUST_LOG", "debug")
        .sections(&format!(
            r#"
upstreams: {{app: {{targets: ["{}"]}}}}
{STRICT}
routes:
{ADMIN_ROUTES}
"#,
            up.addr
        ))
        .start()
        .await;
    let tok = user_token("acme");
    let extra = format!("Authorization: Bearer {tok}\r\nCookie: session=cookie-secret-42\r\n");
    let r = send(
        &gw,
        &get("/admin/x?password=hunter2-secret", &host_of(&gw), &extra),
    )
    .await;
    assert_eq!(status_of(&r), 200);
    let bad = send(
        &gw,
        &get(
            "/admin/y?password=hunter2-secret",
            &host_of(&gw),
            "Authorization: Bearer not.a.jwt\r\n",
        ),
    )
    .await;
    assert_eq!(status_of(&bad), 401);
    let ok = eventually(Duration::from_secs(5), || async {
        gw.logs().matches("\"target\":\"access\"").count() >= 2
    })
    .await;
    assert!(ok, "access lines written");
    let logs = gw.logs();
    let signature = tok.rsplit('.').next().unwrap();
    for secret in [signature, "cookie-secret-42", "hunter2-secret", "not.a.jwt"] {
        assert!(!logs.contains(secret), "{secret} leaked into:\n{logs}");
    }
}

#[tokio::test]
async fn finding_7_proxy_headers_from_untrusted_peers_are_removed() {
    let up = RawUpstream::start().await;
    let gw = gateway(&up, "", STRICT, ADMIN_ROUTES).await;
    let forged = "Forwarded: for=1.2.3.4;host=evil\r\nX-Real-IP: 1.2.3.4\r\n\
        X-Forwarded-For: 1.2.3.4\r\nX-Forwarded-Host: evil.example\r\nX-Forwarded-Proto: https\r\n\
        X-Forwarded-Port: 443\r\nX-Forwarded-Prefix: /admin\r\nX-Original-URL: /admin/users\r\n\
        X-Rewrite-URL: /admin/users\r\n";
    let r = send(&gw, &get("/healthz", "api.test", forged)).await;
    assert_eq!(status_of(&r), 200);
    let got = &up.received()[0];
    for name in [
        "Forwarded",
        "X-Real-IP",
        "X-Forwarded-Port",
        "X-Forwarded-Prefix",
        "X-Original-URL",
        "X-Rewrite-URL",
    ] {
        assert!(
            got.cgi_header(name).is_empty(),
            "{name} passed:\n{}",
            got.head
        );
    }
    assert_eq!(got.cgi_header("X-Forwarded-For"), ["127.0.0.1"]);
    assert_eq!(got.cgi_header("X-Forwarded-Proto"), ["http"]);
    assert_eq!(got.cgi_header("X-Forwarded-Host"), ["api.test"]);
}

#[tokio::test]
async fn finding_8_failed_authentication_is_limited_per_address() {
    let up = RawUpstream::start().await;
    // No refill during the test, so the count is exact however slow the machine.
    let auth = "failure_limit: {capacity: 20, rate: 1/h}";
    let gw = gateway_auth(&up, "", auth, STRICT, ADMIN_ROUTES).await;
    let host = host_of(&gw);
    let good = format!("Authorization: Bearer {}\r\n", user_token("acme"));
    assert_eq!(
        status_of(&send(&gw, &get("/admin", &host, &good)).await),
        200
    );
    let verifications = |m: &str| metric(m, "fairgate_auth_verifications_total").unwrap();
    let before = verifications(&gw.metrics().await);

    let forged = format!(
        "Authorization: Bearer {}\r\n",
        hs256_token("not-the-secret", json!({"tid": "acme"}))
    );
    let mut statuses = std::collections::BTreeMap::new();
    for i in 0..200 {
        let r = send(&gw, &get("/admin", &host, &forged)).await;
        *statuses.entry(status_of(&r)).or_insert(0) += 1;
        if i == 100 {
            // Mid-flood: the token verified before still passes from here,
            // and a valid token from another address is unaffected.
            assert_eq!(
                status_of(&send(&gw, &get("/admin", &host, &good)).await),
                200
            );
            let other = format!("Authorization: Bearer {}\r\n", user_token("globex"));
            let r = raw_http_from(
                "127.0.0.2".parse().unwrap(),
                gw.listen,
                &get("/admin", &host, &other),
            )
            .await;
            assert_eq!(status_of(&r), 200, "{r}");
        }
    }
    assert_eq!(statuses.get(&401), Some(&20), "{statuses:?}");
    assert_eq!(statuses.get(&429), Some(&180), "{statuses:?}");
    let checks = verifications(&gw.metrics().await) - before;
    // 20 forged tokens and globex's token: no check for the known token.
    assert_eq!(checks, 21.0);
    let r = send(&gw, &get("/admin", &host, &forged)).await;
    assert!(r.to_ascii_lowercase().contains("retry-after: "), "{r}");
}

#[tokio::test]
async fn finding_9_ipv6_clients_share_a_bucket_per_64() {
    let up = RawUpstream::start().await;
    let server = "trusted_proxies: [127.0.0.1/32]";
    let extra = "default_limits:\n  unauthenticated: {scope: client_ip, capacity: 1, rate: 1/h}";
    let routes = "  - {name: open, match: {path_prefix: /}, upstream: app, auth: none}";
    let gw = gateway(&up, server, extra, routes).await;
    let from = |ip: &str| format!("X-Forwarded-For: {ip}\r\n");
    let mut statuses = Vec::new();
    for ip in [
        "2001:db8:0:1::1",
        "2001:db8:0:1:ffff::2",
        "2001:db8:0:2::1",
        "192.0.2.1",
        "192.0.2.2",
    ] {
        statuses.push(status_of(&send(&gw, &get("/", "x", &from(ip))).await));
    }
    assert_eq!(statuses, [200, 429, 200, 200, 200]);
}

#[tokio::test]
async fn finding_9_host_content_length_and_escapes() {
    let up = RawUpstream::start().await;
    let routes = r#"
  - {name: api, match: {host: api.example.com, path_prefix: /}, upstream: app}
  - {name: public, match: {path_prefix: /}, upstream: app, auth: none, exempt: true}
"#;
    let gw = gateway(&up, "", "", routes).await;
    // A trailing dot or a port does not leave the host's route.
    for host in [
        "api.example.com.",
        "API.Example.com.:8080",
        "api.example.com",
    ] {
        let r = send(&gw, &get("/", host, "")).await;
        assert_eq!(status_of(&r), 401, "{host}: {r}");
    }
    // HTTP/1.1 needs one Host; HTTP/1.0 may go without.
    let r = send(&gw, b"GET /p HTTP/1.1\r\nConnection: close\r\n\r\n").await;
    assert_eq!(status_of(&r), 400, "{r}");
    let r = send(
        &gw,
        b"GET /p HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status_of(&r), 400, "{r}");
    let r = send(&gw, b"GET /p HTTP/1.0\r\n\r\n").await;
    assert_eq!(status_of(&r), 200, "{r}");
    // Forwarded as HTTP/1.1, which needs a Host: the target's address, as
    // nginx's proxy_pass sends its upstream's (an HTTP/1.1 upstream answers
    // a request without one 400 and closes the pooled connection).
    let host = up.received().last().unwrap().cgi_header("Host");
    assert_eq!(host, [up.addr.to_string()]);
    let before = up.count();

    // Exactly one Content-Length is forwarded; conflicting ones are refused.
    for lengths in [
        "Content-Length: 3\r\nContent-Length: 3\r\n",
        "Content-Length: 3, 3\r\n",
    ] {
        let req = format!("POST /p HTTP/1.1\r\nHost: x\r\n{lengths}Connection: close\r\n\r\nabc");
        assert_eq!(status_of(&send(&gw, req.as_bytes()).await), 200);
        let got = up.received().pop().unwrap();
        assert_eq!(got.cgi_header("Content-Length"), ["3"], "{}", got.head);
        assert_eq!(got.body_bytes, 3);
    }
    let req =
        "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 4\r\nConnection: close\r\n\r\nabcd";
    assert_eq!(status_of(&send(&gw, req.as_bytes()).await), 400);
    assert_eq!(up.count(), before + 2);

    // NUL, double encoding and overlong UTF-8 never reach an exempt prefix.
    for target in ["/p%00x", "/p%252Fadmin", "/p%25%32%46", "/p%C0%AF", "/p%ff"] {
        let r = send(&gw, &get(target, "x", "")).await;
        assert_eq!(status_of(&r), 400, "{target}: {r}");
    }
    assert_eq!(up.count(), before + 2);
    let r = send(&gw, &get("/caf%C3%A9", "x", "")).await;
    assert_eq!(status_of(&r), 200, "valid UTF-8 escapes pass: {r}");
    assert_eq!(up.received().pop().unwrap().decoded_path(), "/café");
}

#[tokio::test]
async fn review_paths_and_hosts_that_readers_cut_differently_are_refused() {
    let up = RawUpstream::start().await;
    let routes = r#"
  - {name: api, match: {host: api.example.com, path_prefix: /}, upstream: app}
  - {name: admin, match: {path_prefix: /admin}, upstream: app}
  - {name: refresh, match: {path: /v1/auth/refresh}, upstream: app}
  - {name: public, match: {path_prefix: /}, upstream: app, auth: none, exempt: true}
"#;
    let gw = gateway(&up, "", "", routes).await;
    // Servlet containers cut `;params`; a raw backslash is `/` to IIS and WHATWG.
    for target in [
        "/admin;x/users",
        "/admin;",
        "///admin;",
        "/v1/auth/refresh;a",
        "/\\admin",
    ] {
        let r = send(&gw, &get(target, "a", "")).await;
        assert_eq!(status_of(&r), 400, "{target}: {r}");
    }
    // Go and Python take the host before any ':', whatever follows.
    for host in [
        "api.example.com:abc",
        "api.example.com:80x",
        "api.example.com:+80",
        "api.example.com:-1",
    ] {
        let r = send(&gw, &get("/x", host, "")).await;
        assert_eq!(status_of(&r), 400, "{host}: {r}");
    }
    assert_eq!(up.count(), 0);
    // HTTP/1.0 absolute-form without Host: routed and forwarded with its host.
    let r = send(&gw, b"GET http://api.example.com/x HTTP/1.0\r\n\r\n").await;
    assert_eq!(status_of(&r), 401, "{r}");
    let r = send(&gw, b"GET http://other.example/x HTTP/1.0\r\n\r\n").await;
    assert_eq!(status_of(&r), 200, "{r}");
    assert_eq!(up.received()[0].cgi_header("Host"), ["other.example"]);
    drop(gw);

    let gw = gateway(&up, "path_parameters: keep", "", routes).await;
    let r = send(&gw, &get("/items;v=1", "a", "")).await;
    assert_eq!(status_of(&r), 200, "{r}");
    assert_eq!(up.received()[1].target(), "/items;v=1");
}

#[tokio::test]
async fn review_look_alike_proxy_and_method_headers_are_removed() {
    let up = RawUpstream::start().await;
    let gw = gateway(
        &up,
        "allow_underscores_in_headers: true",
        STRICT,
        ADMIN_ROUTES,
    )
    .await;
    let forged =
        "X_Forwarded_For: 6.6.6.6\r\nX_Real_IP: 6.6.6.6\r\nX_Original_URL: /admin/users\r\n\
        X_Forwarded_Proto: https\r\nTrue-Client-IP: 6.6.6.6\r\nX-Client-IP: 6.6.6.6\r\n\
        X-Forwarded: for=6.6.6.6\r\nX-HTTP-Method-Override: DELETE\r\nX_Custom: kept\r\n";
    assert_eq!(status_of(&send(&gw, &get("/x", "a", forged)).await), 200);
    let got = &up.received()[0];
    for name in [
        "X-Real-IP",
        "X-Original-URL",
        "True-Client-IP",
        "X-Client-IP",
        "X-Forwarded",
        "X-HTTP-Method-Override",
    ] {
        assert!(
            got.cgi_header(name).is_empty(),
            "{name} passed:\n{}",
            got.head
        );
    }
    assert_eq!(
        got.cgi_header("X-Forwarded-For"),
        ["127.0.0.1"],
        "{}",
        got.head
    );
    assert_eq!(got.cgi_header("X-Forwarded-Proto"), ["http"]);
    assert_eq!(got.cgi_header("X-Custom"), ["kept"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn review_lower_case_methods_are_refused() {
    let up = RawUpstream::start().await;
    let gw = Policy::new()
        .sections(&format!(
            r#"
upstreams: {{api: {{targets: ["{}"]}}}}
routes:
  - {{name: writes, match: {{path_prefix: /x, methods: [POST]}}, upstream: api, auth: none, exempt: true}}
  - {{name: all, match: {{path_prefix: /}}, upstream: api, auth: none, exempt: true}}
"#,
            up.addr
        ))
        .start()
        .await;
    for method in ["post", "Post", "gEt"] {
        let answer = raw_http(
            gw.listen,
            &format!("{method} /x HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"),
        )
        .await;
        assert_eq!(status_of(&answer), 400, "{method}: {answer}");
    }
    assert!(up.received.lock().unwrap().is_empty());
}
