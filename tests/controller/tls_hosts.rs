//! Issue 42, what hosts get at the TLS listener through the controller: an
//! Ingress with ingress-nginx's `auth-tls-*` annotations and its CA in a
//! Secret, written with the real `kubectl`, served to the real `curl`
//! holding a partner's certificate or none; a tenant that names another
//! namespace's CA; and `ssl-passthrough` to an `openssl s_server` pod,
//! seen by `openssl s_client`.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::cluster::*;
use common::*;
use serde_json::{json, Value};

const P: &str = "nginx.ingress.kubernetes.io";

/// An Opaque Secret holding `ca.crt`, as `auth-tls-secret` names one.
fn ca_secret(ns: &str, name: &str, ca: &Path) -> Value {
    use base64::Engine;
    let pem = std::fs::read(ca).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD.encode(pem);
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": name, "namespace": ns},
        "data": {"ca.crt": b64}
    })
}

/// `curl https://shop.lab/` over the TLS listener with `cert`: the
/// upstream's JSON (if any) and the status (0: no answer).
fn get(tls: std::net::SocketAddr, ca: &Path, cert: Option<&(PathBuf, PathBuf)>) -> (Value, u16) {
    let mut args = vec![
        "--cacert".to_string(),
        ca.display().to_string(),
        "--resolve".into(),
        format!("shop.lab:{}:127.0.0.1", tls.port()),
    ];
    if let Some((c, k)) = cert {
        args.extend([
            "--cert".into(),
            c.display().to_string(),
            "--key".into(),
            k.display().to_string(),
        ]);
    }
    args.push(format!("https://shop.lab:{}/", tls.port()));
    let (out, _) = curl(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let mut lines: Vec<&str> = out.lines().collect();
    let status = lines
        .pop()
        .and_then(|l| l.split(' ').next()?.parse().ok())
        .unwrap_or(0);
    (
        serde_json::from_str(&lines.join("\n")).unwrap_or(Value::Null),
        status,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auth_tls_ingress_asks_its_clients_for_a_certificate_its_secret_signed() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    backend(&api, "evil", "app", &echo.addr);
    let dir = tempfile::tempdir().unwrap();
    let servers = Pki::new(dir.path(), "servers");
    let partners = Pki::new(dir.path(), "partners");
    let acme = partners.leaf("acme", "acme-gateway", &[], "2A01");
    let intern = partners.leaf("intern", "intern", &[], "2A02");
    api.apply(secret_for(
        &servers,
        "shop",
        "shop-tls",
        &["shop.lab"],
        "0a",
    ));
    api.apply(ca_secret("shop", "partner-ca", &partners.ca()));
    let mut ing = shop_ingress("partner", "shop.lab", "/");
    ing["spec"]["tls"] = json!([{"hosts": ["shop.lab"], "secretName": "shop-tls"}]);
    ing["metadata"]["annotations"] = json!({
        format!("{P}/auth-tls-secret"): "shop/partner-ca",
        format!("{P}/auth-tls-verify-client"): "on",
        format!("{P}/auth-tls-pass-certificate-to-upstream"): "true",
        format!("{P}/auth-tls-match-cn"): "CN=(acme|globex)-gateway",
    });
    api.apply(ing);
    let tls = free_addr();
    let gw = controller(
        &tls_base(&servers, tls),
        &api.kubeconfig(dir.path()),
        "fairgate-0",
    )
    .await;
    let ca = servers.ca();
    assert!(
        eventually(Duration::from_secs(30), || async {
            get(tls, &ca, Some(&acme)).1 == 200
        })
        .await,
        "{:#?}",
        api.list("v1/events", "shop")
    );
    let (body, _) = get(tls, &ca, Some(&acme));
    assert_eq!(body["headers"]["ssl-client-verify"][0], "SUCCESS");
    assert_eq!(
        body["headers"]["ssl-client-subject-dn"][0],
        "CN=acme-gateway"
    );
    assert_eq!(
        body["headers"]["ssl-client-issuer-dn"][0],
        "CN=partners test CA"
    );
    let cert = body["headers"]["ssl-client-cert"][0].as_str().unwrap();
    assert!(
        cert.starts_with("-----BEGIN%20CERTIFICATE-----%0A"),
        "{cert}"
    );
    assert_eq!(get(tls, &ca, None).1, 400);
    assert_eq!(get(tls, &ca, Some(&intern)).1, 403);
    // Over plain HTTP the host's requests cannot show a certificate.
    assert_eq!(host_status(&gw, "shop.lab", "/").await, 400);

    a_tenant_cannot_name_shops_ca(&api, dir.path());
    assert_eq!(host_status(&gw, "evil.lab", "/").await, 404);
}

/// A tenant naming shop's CA for its own host is withheld: a namespace
/// names only its own Secrets.
fn a_tenant_cannot_name_shops_ca(api: &common::kube_api::KubeApi, dir: &Path) {
    let mut evil = ingress("evil", "borrow", Some("fairgate"), "evil.lab", "/", "app");
    evil["metadata"]["annotations"] = json!({format!("{P}/auth-tls-secret"): "shop/partner-ca"});
    let ran = api
        .kubectl(dir)
        .run(&["-n", "evil", "create", "-f", "-"], &evil.to_string());
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let said = |api: &common::kube_api::KubeApi, reason: &str, text: &str| {
        api.list("v1/events", "evil").iter().any(|e| {
            e["involvedObject"]["name"] == "borrow"
                && e["reason"] == reason
                && e["message"].as_str().is_some_and(|m| m.contains(text))
        })
    };
    let withheld = api.wait_for(Duration::from_secs(30), |api| {
        said(
            api,
            "NotSupported",
            "a Secret of namespace shop, not the Ingress's evil",
        ) && said(api, "Withheld", "auth-tls-secret did not carry over")
    });
    assert!(withheld, "{:#?}", api.list("v1/events", "evil"));
}

/// ArgoCD's documented Ingress (`ssl-passthrough` with `backend-protocol:
/// HTTPS`): its handshake reaches the pod, which shows its own certificate,
/// while other hosts get the gateway's; a tenant's Ingress asking to pass
/// the same host through is withheld.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ssl_passthrough_ingress_hands_its_tls_to_its_pods() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    let dir = tempfile::tempdir().unwrap();
    let servers = Pki::new(dir.path(), "servers");
    let pods = Pki::new(dir.path(), "pods");
    let (cert, key) = pods.leaf("argo", "argo", &["argo.lab"], "3A01");
    let pod = SServer::start(&cert, &key).await;
    backend(&api, "shop", "argo", &pod.addr);
    backend(&api, "evil", "app", &echo.addr);
    let mut ing = ingress("shop", "argo", Some("fairgate"), "argo.lab", "/", "argo");
    ing["metadata"]["annotations"] = json!({
        format!("{P}/ssl-passthrough"): "true",
        format!("{P}/backend-protocol"): "HTTPS",
    });
    let ing = api.apply(ing);
    // The tenant's Ingress comes a second later: the host is shop's (the
    // oldest claim; one of the same second would be decided by name).
    let created = ing["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap()
        .to_string();
    let later = api.wait_for(Duration::from_secs(3), |_| {
        common::kube_api::now_rfc3339() > created
    });
    assert!(later);
    let tls = free_addr();
    let _gw = controller(
        &tls_base(&servers, tls),
        &api.kubeconfig(dir.path()),
        "fairgate-0",
    )
    .await;
    assert!(
        eventually(Duration::from_secs(30), || async {
            served_serial(tls, Some("argo.lab")) == "3A01"
        })
        .await,
        "{:#?}",
        api.list("v1/events", "shop")
    );
    assert_eq!(served_serial(tls, Some("default.example")), "01");
    let (out, code) = curl(&[
        "--cacert",
        &pods.ca().display().to_string(),
        "--resolve",
        &format!("argo.lab:{}:127.0.0.1", tls.port()),
        &format!("https://argo.lab:{}/", tls.port()),
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("s_server -www"), "{out}");

    let mut grab = ingress("evil", "grab", Some("fairgate"), "argo.lab", "/", "app");
    grab["metadata"]["annotations"] = json!({format!("{P}/ssl-passthrough"): "true"});
    let ran = api
        .kubectl(dir.path())
        .run(&["-n", "evil", "create", "-f", "-"], &grab.to_string());
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let withheld = api.wait_for(Duration::from_secs(30), |api| {
        api.list("v1/events", "evil").iter().any(|e| {
            e["involvedObject"]["name"] == "grab"
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("may set TLS passthrough for it"))
        })
    });
    assert!(withheld, "{:#?}", api.list("v1/events", "evil"));
    assert_eq!(served_serial(tls, Some("argo.lab")), "3A01");
}
