//! TLS passthrough (`server.tls.passthrough`, what ingress-nginx's
//! `ssl-passthrough` asks): a ClientHello naming a passthrough host reaches
//! the backend unterminated (the real `openssl s_client` sees the
//! backend's own certificate, `curl` talks to `openssl s_server` through
//! the gateway), other names get the gateway's handshake on the same
//! listener, and a dead target costs only its own connections.

use crate::common;

use common::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_passthrough_host_gets_the_backends_own_tls_and_others_the_gateways() {
    let echo = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let edge = Pki::new(dir.path(), "edge");
    let backend = Pki::new(dir.path(), "backend");
    let (site, site_key) = edge.leaf("site", "site", &["site.test"], "0D01");
    let (argo, argo_key) = backend.leaf("argo", "argo", &["argocd.test"], "0D02");
    let server = SServer::start(&argo, &argo_key).await;
    let tls = free_addr();
    let config = format!(
        r#"tls:
  listen: "{tls}"
  certificates: [{{cert_file: "{}", key_file: "{}"}}]
  passthrough:
    - {{hosts: [argocd.test], upstream: argo}}
    - {{hosts: ["*.dead.test"], upstream: dead}}
"#,
        site.display(),
        site_key.display()
    );
    let sections = format!(
        r#"upstreams:
  api: {{targets: ["{}"]}}
  argo: {{targets: ["127.0.0.1:{}"]}}
  dead: {{targets: ["127.0.0.1:9"]}}
routes:
  - {{name: all, match: {{path_prefix: /}}, upstream: api, auth: none, exempt: true}}
"#,
        echo.addr,
        server.addr.port()
    );
    let _gw = Policy::new()
        .server(&config)
        .sections(&sections)
        .start()
        .await;

    // The backend's certificate, not the gateway's: TLS is not ended here.
    assert_eq!(served_serial(tls, Some("argocd.test")), "0D02");
    assert_eq!(served_serial(tls, Some("ARGOCD.test")), "0D02");
    assert_eq!(served_serial(tls, Some("site.test")), "0D01");
    assert_eq!(served_serial(tls, None), "0D01");

    // HTTP inside the backend's TLS: s_server's own status page.
    let port = tls.port();
    let (out, code) = curl(&[
        "--cacert",
        &backend.ca().display().to_string(),
        "--resolve",
        &format!("argocd.test:{port}:127.0.0.1"),
        &format!("https://argocd.test:{port}/"),
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("s_server -www"), "{out}");
    assert!(out.ends_with("\n200 1"), "HTTP/1.0 from s_server: {out}");

    // A dead target: the client's handshake fails; the rest is served.
    let (out, code) = curl(&[
        "-k",
        "--resolve",
        &format!("x.dead.test:{port}:127.0.0.1"),
        &format!("https://x.dead.test:{port}/"),
    ]);
    assert_ne!(code, 0, "{out}");
    let (out, code) = curl(&[
        "--cacert",
        &edge.ca().display().to_string(),
        "--resolve",
        &format!("site.test:{port}:127.0.0.1"),
        &format!("https://site.test:{port}/"),
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.ends_with("200 2"), "{out}");
}
