//! External authentication attacked as a shared cluster's tenant and an
//! anonymous client would (issue 40): an auth service's answer never
//! writes the gateway's identity headers, one client cannot open a
//! method's breaker for everyone, an oversized answer is never copied on.

use crate::common;

use common::forward_auth::ForwardAuth;
use common::*;

use super::auth_external::{get_with, policy};

/// Issue 40, finding 1: the breaker of a method is the service's health,
/// not a weapon. Three anonymous requests with 101 `Cookie` lines reach the
/// service as one `Cookie` line (the peer answers 431 past 8 lines, as
/// header limits do) and are refused as anonymous; answers that only
/// refuse a request's form (4xx but 401 and 403) never count against the
/// service; a signed-in user is served all along.
#[tokio::test(flavor = "multi_thread")]
async fn issue_40_finding_1_an_anonymous_client_cannot_open_the_breaker_for_everyone() {
    let auth = ForwardAuth::start(&[]);
    auth.session("s-ann", "ann", "ann@acme.test", "acme").await;
    let up = RawUpstream::start().await;
    let breaker = ", breaker: {failures: 2, open_for: 30s}";
    let gw = policy(&auth.auth_url(), breaker, up.addr, 1000)
        .start()
        .await;
    let mut attack = String::from("GET /x HTTP/1.1\r\nHost: app.example\r\n");
    for i in 0..101 {
        attack.push_str(&format!("Cookie: c{i}=1\r\n"));
    }
    attack.push_str("Connection: close\r\n\r\n");
    for _ in 0..3 {
        let answer = raw_http(gw.listen, &attack).await;
        assert_eq!(status_of(&answer), 401, "{answer}");
    }
    let (_, headers) = auth.last().await;
    let cookies: Vec<&(String, String)> = headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("cookie"))
        .collect();
    assert_eq!(cookies.len(), 1, "{headers:?}");
    assert!(cookies[0].1.starts_with("c0=1; c1=1; "), "{cookies:?}");

    // A service that refuses every request's form: 503 for them, and
    // nothing counted against the service.
    auth.mode("bad-request", 0).await;
    for _ in 0..5 {
        let r = get_with(&gw, "/x", &[("cookie", "_oauth2_proxy=nobody")]).await;
        assert_eq!(r.status(), 503);
    }
    auth.mode("ok", 0).await;
    for i in 0..20 {
        let r = get_with(
            &gw,
            &format!("/o/{i}"),
            &[("cookie", "_oauth2_proxy=s-ann")],
        )
        .await;
        assert_eq!(r.status(), 200, "request {i}\n{}", gw.logs());
    }
    let metrics = client()
        .get(gw.admin_url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("fairgate_external_auth_breaker_open{method=\"sso\"} 0"),
        "{metrics}"
    );
}

/// An auth service that allows every request and answers with the
/// gateway's identity headers, in both spellings, and one header of its
/// own: what a tenant's own `auth-url` service may answer.
async fn impersonating_auth_service() -> std::net::SocketAddr {
    let answer = "HTTP/1.1 202 Accepted\r\nX-Tenant-Id: acme\r\nX-User-Id: admin\r\n\
        X-Plan: enterprise\r\nX-Client-Cert-Subject: CN=billing\r\nX_Tenant_Id: acme\r\n\
        X-Auth-Request-User: mallory\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    auth_service_answering(answer.to_string()).await
}

/// An auth service that answers every request with `answer`, byte for byte.
async fn auth_service_answering(answer: String) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let answer = std::sync::Arc::new(answer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    addr
}

/// Issue 40, finding 0: a tenant's own auth service, or a route's header
/// edits, never write the gateway's trusted identity headers in any
/// spelling: the upstream hears the service's own header and no identity
/// (the request has none), whatever the service answered.
#[tokio::test(flavor = "multi_thread")]
async fn issue_40_finding_0_an_auth_service_never_writes_the_identity_headers() {
    let auth = impersonating_auth_service().await;
    let up = RawUpstream::start().await;
    let names =
        "[X-Tenant-Id, X-User-Id, X-Plan, X-Client-Cert-Subject, X_Tenant_Id, X-Auth-Request-User]";
    let gw = Policy::new()
        .server("allow_underscores_in_headers: true")
        .auth(&format!(
            "methods:\n    tenant-sso:\n      external: {{url: \"http://{auth}/check\", response_headers: {names}}}"
        ))
        .sections(&format!(
            r#"
upstreams: {{api: {{targets: ["{}"]}}}}
default_limits: none
routes:
  - {{name: app, match: {{path_prefix: /}}, upstream: api, auth: tenant-sso, request_headers: {{set: {{X_User_Id: root, X_Plan: enterprise}}}}}}
"#,
            up.addr
        ))
        .start()
        .await;
    let r = get_with(&gw, "/billing", &[("x_tenant_id", "globex")]).await;
    assert_eq!(r.status(), 200, "{}", gw.logs());
    let got = up.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].cgi_header("x-auth-request-user"), ["mallory"]);
    for id in [
        "x-tenant-id",
        "x-user-id",
        "x-plan",
        "x-client-cert-subject",
    ] {
        assert!(
            got[0].cgi_header(id).is_empty(),
            "{id} reached the upstream:\n{}",
            got[0].head
        );
    }
}

/// Issue 40, finding 17 (its auth part): a 2xx whose kept headers pass
/// 32 KiB (here one of 200,000 bytes) is no answer: 503, and nothing of it
/// reaches the upstream or the client.
#[tokio::test(flavor = "multi_thread")]
async fn issue_40_finding_17_an_oversized_auth_answer_is_never_copied_on() {
    let huge = "u".repeat(200_000);
    let answer = format!(
        "HTTP/1.1 200 OK\r\nX-Auth-Request-User: {huge}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    let auth = auth_service_answering(answer).await;
    let up = RawUpstream::start().await;
    let gw = Policy::new()
        .auth(&format!(
            "methods:\n    sso:\n      external: {{url: \"http://{auth}/check\", response_headers: [X-Auth-Request-User]}}"
        ))
        .sections(&format!(
            "\nupstreams: {{api: {{targets: [\"{}\"]}}}}\ndefault_limits: none\nroutes:\n  - {{name: app, match: {{path_prefix: /}}, upstream: api, auth: sso}}\n",
            up.addr
        ))
        .start()
        .await;
    let r = get_with(&gw, "/x", &[]).await;
    assert_eq!(r.status(), 503, "{}", gw.logs());
    let body = r.text().await.unwrap();
    assert!(!body.contains("uuuuuuuu"), "{body}");
    assert_eq!(up.received().len(), 0, "nothing reaches the upstream");
}
