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

/// A GET of `/` on `host` through the TLS listener by `openssl s_client`
/// holding `cert` (its certificate, key and the intermediates it sends):
/// the answer's status (0: the handshake or the answer failed).
fn s_client_status(
    tls: std::net::SocketAddr,
    host: &str,
    ca: &Path,
    cert: Option<(&Path, &Path, &Path)>,
) -> (u16, String) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut cmd = Command::new("openssl");
    cmd.args(["s_client", "-quiet", "-verify_return_error"])
        .args(["-connect", &tls.to_string(), "-servername", host])
        .arg("-CAfile")
        .arg(ca);
    if let Some((c, k, chain)) = cert {
        cmd.arg("-cert").arg(c).arg("-key").arg(k);
        cmd.arg("-cert_chain").arg(chain);
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl is needed: apt-get install openssl");
    let request = format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin.write_all(request.as_bytes());
    let out = child.wait_with_output().unwrap();
    drop(stdin);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (status_of(&text), text)
}

/// `auth-tls-verify-depth` and `auth-tls-error-page` seen by `openssl
/// s_client`: a partner whose certificate hangs under two intermediates
/// it sends gets in where the depth is 2 and fails the handshake where it
/// is 1, a client without a certificate is sent to the error page; and
/// the redirects to HTTPS (`ssl-redirect`, `force-ssl-redirect`) and the
/// name checked on a backend's certificate (`proxy-ssl-name`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_annotations_are_served_to_openssl_s_client() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    let dir = tempfile::tempdir().unwrap();
    let servers = Pki::new(dir.path(), "servers");
    let partners = Pki::new(dir.path(), "partners");
    let squad = partners.intermediate("team").intermediate("squad");
    let (dev, dev_key) = squad.leaf("dev", "dev-gateway", &[], "4B01");
    let dev_chain = dir.path().join("squad-chain.pem");
    assert_eq!(std::fs::read(&dev_chain).unwrap(), squad.chain());
    let hosts = [
        "deep1.lab",
        "deep2.lab",
        "help.lab",
        "secure.lab",
        "open.lab",
    ];
    api.apply(secret_for(&servers, "shop", "shop-tls", &hosts, "0b"));
    api.apply(ca_secret("shop", "partner-ca", &partners.ca()));
    let guarded = |name: &str, host: &str, more: Value| {
        let mut ing = shop_ingress(name, host, "/");
        ing["spec"]["tls"] = json!([{"hosts": [host], "secretName": "shop-tls"}]);
        let mut annotations = json!({
            format!("{P}/auth-tls-secret"): "shop/partner-ca",
            format!("{P}/auth-tls-verify-client"): "on",
        });
        for (k, v) in more.as_object().unwrap() {
            annotations[format!("{P}/{k}")] = v.clone();
        }
        ing["metadata"]["annotations"] = annotations;
        ing
    };
    api.apply(guarded(
        "deep1",
        "deep1.lab",
        json!({"auth-tls-verify-depth": "1"}),
    ));
    api.apply(guarded(
        "deep2",
        "deep2.lab",
        json!({"auth-tls-verify-depth": "2"}),
    ));
    let page = "https://help.lab/certificates";
    api.apply(guarded(
        "help",
        "help.lab",
        json!({"auth-tls-error-page": page}),
    ));
    let _pod = redirects_and_backend_names(&api, dir.path()).await;
    let tls = free_addr();
    let gw = controller(
        &tls_base(&servers, tls),
        &api.kubeconfig(dir.path()),
        "fairgate-0",
    )
    .await;
    let ca = servers.ca();
    let dev = Some((dev.as_path(), dev_key.as_path(), dev_chain.as_path()));
    let served = eventually(Duration::from_secs(30), || async {
        s_client_status(tls, "deep2.lab", &ca, dev).0 == 200
    })
    .await;
    assert!(served, "{:#?}", api.list("v1/events", "shop"));
    let (status, answer) = s_client_status(tls, "deep1.lab", &ca, dev);
    assert_eq!(status, 0, "{answer}");
    let (status, answer) = s_client_status(tls, "help.lab", &ca, None);
    assert_eq!(status, 302, "{answer}");
    assert!(
        answer.contains(&format!("\r\nlocation: {page}\r\n")),
        "{answer}"
    );

    assert_redirects_and_backend_names(&gw).await;
}

/// The Ingresses of `tls_annotations_are_served_to_openssl_s_client`'s
/// second half: `secure.lab` (a TLS section), `open.lab` (one with
/// `ssl-redirect: "false"`), `forced.lab` (none, `force-ssl-redirect`),
/// and two Ingresses of an HTTPS backend whose certificate is for
/// `api.internal`, one naming it with `proxy-ssl-name`: that backend.
async fn redirects_and_backend_names(api: &common::kube_api::KubeApi, dir: &Path) -> SServer {
    let tls = json!([{"hosts": ["secure.lab", "open.lab"], "secretName": "shop-tls"}]);
    let mut secure = shop_ingress("secure", "secure.lab", "/");
    secure["spec"]["tls"] = tls.clone();
    api.apply(secure);
    let mut open = shop_ingress("open", "open.lab", "/");
    open["spec"]["tls"] = tls;
    open["metadata"]["annotations"] = json!({format!("{P}/ssl-redirect"): "false"});
    api.apply(open);
    let mut forced = shop_ingress("forced", "forced.lab", "/");
    forced["metadata"]["annotations"] = json!({format!("{P}/force-ssl-redirect"): "true"});
    api.apply(forced);

    let pods = Pki::new(dir, "pods");
    let (cert, key) = pods.leaf("api", "api", &["api.internal"], "5C01");
    let pod = SServer::start(&cert, &key).await;
    backend(api, "shop", "tlsapp", &pod.addr);
    api.apply(ca_secret("shop", "pods-ca", &pods.ca()));
    for (name, sni) in [("named", Some("api.internal")), ("unnamed", None)] {
        let host = format!("{name}.lab");
        let mut ing = ingress("shop", name, Some("fairgate"), &host, "/", "tlsapp");
        ing["metadata"]["annotations"] = json!({
            format!("{P}/backend-protocol"): "HTTPS",
            format!("{P}/proxy-ssl-verify"): "on",
            format!("{P}/proxy-ssl-secret"): "shop/pods-ca",
        });
        if let Some(sni) = sni {
            ing["metadata"]["annotations"][format!("{P}/proxy-ssl-name")] = json!(sni);
        }
        api.apply(ing);
    }
    pod
}

async fn assert_redirects_and_backend_names(gw: &Gateway) {
    let plain = |host: &str| {
        let request =
            format!("GET /cart?id=7 HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        let addr = gw.listen;
        async move { raw_http(addr, &request).await }
    };
    for host in ["secure.lab", "forced.lab"] {
        let answer = plain(host).await;
        assert_eq!(status_of(&answer), 308, "{answer}");
        let location = format!("\r\nlocation: https://{host}/cart?id=7\r\n");
        assert!(answer.to_ascii_lowercase().contains(&location), "{answer}");
    }
    assert_eq!(status_of(&plain("open.lab").await), 200);
    assert_eq!(host_status(gw, "named.lab", "/").await, 200);
    assert_eq!(host_status(gw, "unnamed.lab", "/").await, 502);
}

/// A TLS section, as ingress-nginx reads one, serves its Secret's
/// certificate only for its own Ingress's rule hosts; and a host's
/// certificate is its oldest Ingress's namespace's (SPEC §11). Namespace
/// `aaa`'s certificates also name shop's `shop.lab` (which has no TLS
/// section, so gets the default certificate): one without hosts used to
/// be served for `shop.lab` by its names alone, one listing `shop.lab`
/// (with a path of aaa's own there) by its list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_section_serves_only_its_own_ingresss_hosts() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    backend(&api, "aaa", "app", &echo.addr);
    api.apply(shop_ingress("web", "shop.lab", "/"));
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "hostless");
    let tls = free_addr();
    let kubeconfig = api.kubeconfig(dir.path());
    let gw = controller(&tls_base(&pki, tls), &kubeconfig, "fairgate-0").await;
    let secret = secret_for(&pki, "aaa", "take", &["shop.lab", "mine.example"], "0b");
    let mut ing = ingress("aaa", "take", Some("fairgate"), "mine.example", "/", "app");
    ing["spec"]["tls"] = json!([{"secretName": "take"}]);
    for object in [secret, ing] {
        let create = ["-n", "aaa", "create", "-f", "-"];
        let ran = api.kubectl(dir.path()).run(&create, &object.to_string());
        assert_eq!(ran.code, 0, "{}", ran.stderr);
    }
    let mine = eventually(Duration::from_secs(10), || async {
        served_serial(tls, Some("mine.example")) == "0B"
    })
    .await;
    assert!(mine, "aaa's own host gets its certificate\n{}", gw.logs());
    assert_eq!(served_serial(tls, Some("shop.lab")), "01", "{}", gw.logs());
    // Listed, as no rule of the Ingress names it, or with a path of its
    // own on shop's host: neither is aaa's to serve a certificate for.
    let secret = secret_for(&pki, "aaa", "also", &["shop.lab", "other.lab"], "0c");
    let mut ing = ingress("aaa", "also", Some("fairgate"), "shop.lab", "/aaa", "app");
    ing["spec"]["tls"] = json!([{"hosts": ["shop.lab", "other.lab"], "secretName": "also"}]);
    for object in [secret, ing] {
        let create = ["-n", "aaa", "create", "-f", "-"];
        let ran = api.kubectl(dir.path()).run(&create, &object.to_string());
        assert_eq!(ran.code, 0, "{}", ran.stderr);
    }
    for text in [
        "the certificate of shop.lab belongs to Ingress shop/web",
        "no rule of this Ingress names other.lab",
    ] {
        let told = api.wait_for(Duration::from_secs(10), |api| {
            api.list("v1/events", "aaa").iter().any(|e| {
                e["involvedObject"]["name"] == "also"
                    && e["type"] == "Warning"
                    && e["message"].as_str().is_some_and(|m| m.contains(text))
            })
        });
        assert!(told, "{text}: {:#?}", api.list("v1/events", "aaa"));
    }
    assert_eq!(served_serial(tls, Some("shop.lab")), "01", "{}", gw.logs());
    assert_eq!(served_serial(tls, Some("other.lab")), "01", "{}", gw.logs());
}
