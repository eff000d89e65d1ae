//! The shipped controller kit's own base policy
//! (deploy/kubernetes/controller/configmap.yaml), served as a new user
//! applies it, with only what a test machine needs changed: its listeners
//! on loopback, its certificate a test PKI's, its Redis a local one. An
//! Ingress is served as ingress-nginx serves it (no limit unless an
//! annotation asks; identities without a tenant are served), the file
//! import answers the same objects the same, and every `server.tls` form
//! `fairgate check` accepts composes with the Secrets' certificates.

use crate::common;

use std::net::SocketAddr;
use std::path::Path;

use common::cluster::*;
use common::forward_auth::ForwardAuth;
use common::*;
use serde_json::{json, Value};

const REDIS_PASSWORD: &str = "kit-test-redis-password";

/// The kit's base policy, as its ConfigMap ships it.
fn shipped_base() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/kubernetes/controller/configmap.yaml"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let doc = &yaml_rust2::YamlLoader::load_from_str(&text).unwrap()[0];
    doc["data"]["fairgate.yaml"].as_str().unwrap().to_string()
}

/// `shipped_base` on this machine: loopback listeners, `tls` for the TLS
/// listener with `pki`'s default certificate, `redis` for its store.
fn kit_base(pki: &Pki, tls: SocketAddr, redis: &str) -> String {
    let (cert, key) = pki.leaf("default", "default", &["default.example"], "01");
    let (hook_cert, hook_key) = pki.leaf("webhook", "webhook", &["localhost"], "02");
    let base = shipped_base();
    for (shipped, _) in [
        ("\"0.0.0.0:8080\"", ()),
        ("\"0.0.0.0:9090\"", ()),
        ("\"0.0.0.0:8443\"", ()),
        ("/etc/fairgate/tls/tls.crt", ()),
        ("/etc/fairgate/tls/tls.key", ()),
        ("\"0.0.0.0:8444\"", ()),
        ("/etc/fairgate/webhook/tls.crt", ()),
        ("/etc/fairgate/webhook/tls.key", ()),
        ("redis://redis:6379/0", ()),
    ] {
        assert!(
            base.contains(shipped),
            "the kit's base no longer says {shipped}"
        );
    }
    base.replace("\"0.0.0.0:8080\"", "\"$LISTEN\"")
        .replace("\"0.0.0.0:9090\"", "\"$ADMIN\"")
        .replace("\"0.0.0.0:8443\"", &format!("\"{tls}\""))
        .replace("/etc/fairgate/tls/tls.crt", &cert.display().to_string())
        .replace("/etc/fairgate/tls/tls.key", &key.display().to_string())
        .replace("\"0.0.0.0:8444\"", &format!("\"{}\"", free_addr()))
        .replace(
            "/etc/fairgate/webhook/tls.crt",
            &hook_cert.display().to_string(),
        )
        .replace(
            "/etc/fairgate/webhook/tls.key",
            &hook_key.display().to_string(),
        )
        .replace("redis://redis:6379/0", redis)
        // The test's Services run on loopback, which a cluster's never do.
        .replace(
            "  watch_without_class: false\n",
            "  watch_without_class: false\n  allow_local_endpoints: true\n",
        )
}

/// Starts a controller-mode gateway as the kit's pod would run.
async fn kit_controller(base: &str, kubeconfig: &Path) -> Gateway {
    let options = GatewayOptions {
        env: vec![
            ("KUBECONFIG".into(), kubeconfig.display().to_string()),
            ("POD_NAME".into(), "fairgate-0".into()),
            ("POD_NAMESPACE".into(), "ingress".into()),
            ("REDIS_PASSWORD".into(), REDIS_PASSWORD.into()),
        ],
        wait_ready: true,
        configmap: false,
    };
    Gateway::start_with(base, options).await
}

/// Three Ingresses of `shop` on Service `web`: one plain, one behind basic
/// auth, one behind an auth service at `auth_url`; none asks for a limit.
fn ingresses(auth_url: &str) -> Vec<Value> {
    let plain = shop_ingress("plain", "plain.example", "/");
    let mut basic = shop_ingress("basic", "basic.example", "/");
    basic["metadata"]["annotations"] = json!({
        "nginx.ingress.kubernetes.io/auth-type": "basic",
        "nginx.ingress.kubernetes.io/auth-secret": "staff",
    });
    let mut external = shop_ingress("external", "sso.example", "/");
    external["metadata"]["annotations"] = json!({
        "nginx.ingress.kubernetes.io/auth-url": auth_url,
    });
    vec![plain, basic, external]
}

fn basic_alice() -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode("alice:wonderland");
    format!("Basic {b64}")
}

/// What 200 quick requests from one address to each Ingress get, by host:
/// the count of each status.
async fn answers(addr: SocketAddr) -> Vec<(String, Vec<(u16, usize)>)> {
    let mut out = Vec::new();
    for (host, header) in [
        ("plain.example", None),
        ("basic.example", Some(("authorization", basic_alice()))),
        (
            "sso.example",
            Some(("cookie", "_oauth2_proxy=kit-session".to_string())),
        ),
    ] {
        let mut counts = std::collections::BTreeMap::new();
        for i in 0..200 {
            let mut request = client()
                .get(format!("http://{addr}/item/{i}"))
                .header("host", host);
            if let Some((name, value)) = &header {
                request = request.header(*name, value);
            }
            let status = request.send().await.map_or(0, |r| r.status().as_u16());
            *counts.entry(status).or_insert(0) += 1;
        }
        out.push((host.to_string(), counts.into_iter().collect()));
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn item_2_the_kit_serves_ingresses_unlimited_and_tenantless_identities_as_the_import_does() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    let dir = tempfile::tempdir().unwrap();
    let kc = api.kubeconfig(dir.path());
    let sso = ForwardAuth::start(&[]);
    sso.session("kit-session", "alice", "alice@example.com", "staff")
        .await;
    api.apply(users("staff", &[ALICE]));
    let objects = ingresses(&sso.auth_url());
    for ing in &objects {
        api.apply(ing.clone());
    }
    let redis = Redis::start_with(&["--requirepass", REDIS_PASSWORD]).await;
    let pki = Pki::new(dir.path(), "kit");
    let gw = kit_controller(&kit_base(&pki, free_addr(), &redis.url()), &kc).await;
    let all_200 = |host: &str| (host.to_string(), vec![(200u16, 200usize)]);
    let expected = vec![
        all_200("plain.example"),
        all_200("basic.example"),
        all_200("sso.example"),
    ];
    let cluster = answers(gw.listen).await;
    assert_eq!(cluster, expected, "the controller's answers\n{}", gw.logs());

    // The same objects through the file import, as a user migrating with
    // `fairgate import ingress-nginx` would serve them.
    let manifest = dir.path().join("objects.yaml");
    let docs: Vec<String> = objects
        .iter()
        .chain([&users("staff", &[ALICE])])
        .map(|o| format!("{o}\n"))
        .collect();
    std::fs::write(&manifest, docs.join("---\n")).unwrap();
    let (policy, report, _) = ingress_import::import_with(&[
        "--replicas",
        "1",
        "--ingress-class",
        "fairgate",
        manifest.to_str().unwrap(),
    ]);
    let redis_url = redis
        .url()
        .replace("redis://", &format!("redis://:{REDIS_PASSWORD}@"));
    let policy = policy
        .replace("0.0.0.0:8080", "$LISTEN")
        .replace("127.0.0.1:9090", "$ADMIN")
        .replace("web.shop.svc.cluster.local:80", &echo.addr.to_string())
        .replace(
            "\"redis://fairgate-redis:6379/0\"",
            &format!("\"{redis_url}\", timeout: 2s"),
        );
    let imported = Gateway::start(&policy).await;
    let file = answers(imported.listen).await;
    assert_eq!(
        file, cluster,
        "the import answers otherwise\n{report}\n{policy}"
    );
}

/// The `server.tls` forms `fairgate check` accepts, each with `pki`'s
/// default certificate (serial 01), listening on `tls`.
fn tls_forms(pki: &Pki, tls: SocketAddr) -> Vec<(&'static str, String)> {
    let (cert, key) = pki.leaf("default", "default", &["default.example"], "01");
    let (c, k) = (cert.display(), key.display());
    let pem = |p: &Path| serde_json::to_string(&std::fs::read_to_string(p).unwrap()).unwrap();
    vec![
        (
            "cert and key",
            format!("{{listen: \"{tls}\", cert: {c}, key: {k}}}"),
        ),
        (
            "certificates, files",
            format!("{{listen: \"{tls}\", certificates: [{{cert_file: {c}, key_file: {k}}}]}}"),
        ),
        (
            "certificates, PEM",
            format!(
                "{{listen: \"{tls}\", certificates: [{{cert_pem: {}, key_pem: {}}}]}}",
                pem(&cert),
                pem(&key)
            ),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn item_3_every_server_tls_form_composes_with_the_secrets_certificates() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    let dir = tempfile::tempdir().unwrap();
    let kc = api.kubeconfig(dir.path());
    let pki = Pki::new(dir.path(), "forms");
    api.apply(secret_for(&pki, "shop", "web-tls", &["shop.example"], "0A"));
    let mut ing = shop_ingress("web", "shop.example", "/");
    ing["spec"]["tls"] = json!([{"hosts": ["shop.example"], "secretName": "web-tls"}]);
    api.apply(ing);
    for (form, tls_section) in tls_forms(&pki, free_addr()) {
        let tls: SocketAddr = tls_section.split('"').nth(1).unwrap().parse().unwrap();
        let base = base_policy("").replace(
            "server: {listen: [\"$LISTEN\"]}",
            &format!("server: {{listen: [\"$LISTEN\"], tls: {tls_section}}}"),
        );
        let checked = dir.path().join("check.yaml");
        std::fs::write(
            &checked,
            base.replace("$LISTEN", "127.0.0.1:1")
                .replace("$ADMIN", "127.0.0.1:2"),
        )
        .unwrap();
        let check = std::process::Command::new(env!("CARGO_BIN_EXE_fairgate"))
            .args(["check", "-c"])
            .arg(&checked)
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "{form}: check refuses the base: {check:?}"
        );
        let gw = controller(&base, &kc, "fairgate-0").await;
        let served = (
            served_serial(tls, Some("shop.example")),
            served_serial(tls, Some("default.example")),
        );
        assert_eq!(served, ("0A".into(), "01".into()), "{form}\n{}", gw.logs());
    }
}
