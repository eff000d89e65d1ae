//! Issue 43: the validating admission webhook (`kubernetes.admission`) as
//! a tenant meets it: `kubectl create` from the tenant's namespace against
//! the API stand-in, which calls the webhook as the API server does
//! (`common::kube_api::admission`). An Ingress the controller would
//! withhold is refused at `kubectl` with the Event's words; one served but
//! changed is created with a warning kubectl prints; a plain one is
//! created silently; and a webhook that cannot be reached stops nothing
//! under the kit's `failurePolicy: Ignore`.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;

use common::cluster::*;
use common::kube_api::{KubeApi, Ran};
use common::*;
use serde_json::{json, Value};

const P: &str = "nginx.ingress.kubernetes.io";
const HOOK: &str = "validate.fairgate.dev";

/// The ValidatingWebhookConfiguration of the kit, pointing at `url` and
/// trusting `ca`, with `failure` as its failurePolicy.
fn webhook(name: &str, url: &str, ca: &Path, failure: &str) -> Value {
    use base64::Engine;
    let bundle = base64::engine::general_purpose::STANDARD.encode(std::fs::read(ca).unwrap());
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": HOOK,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": failure,
            "timeoutSeconds": 10,
            "clientConfig": {"url": url, "caBundle": bundle},
            "rules": [{"apiGroups": ["networking.k8s.io"], "apiVersions": ["v1"],
                       "resources": ["ingresses"], "operations": ["CREATE", "UPDATE"]}]
        }]
    })
}

/// An Ingress of `evil` for `host` to its Service `app`, with annotations.
fn tenant_ingress(name: &str, host: &str, annotations: Value) -> Value {
    let mut ing = ingress("evil", name, Some("fairgate"), host, "/", "app");
    ing["metadata"]["annotations"] = annotations;
    ing
}

/// `kubectl -n evil create -f -` as the tenant runs it.
fn create(api: &KubeApi, dir: &Path, manifest: &Value) -> Ran {
    api.kubectl(dir)
        .run(&["-n", "evil", "create", "-f", "-"], &manifest.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_refuses_what_the_controller_would_withhold_with_its_reason() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    backend(&api, "evil", "app", &echo.addr);
    let dir = tempfile::tempdir().unwrap();
    let (pki, listen, admission) = webhook_listener(dir.path());
    let _gw = controller(
        &base_policy(&admission),
        &api.kubeconfig(dir.path()),
        "fairgate-0",
    )
    .await;
    let url = format!("https://localhost:{}/validate", listen.port());
    api.apply(webhook("fairgate", &url, &pki.ca(), "Ignore"));

    let refused = [
        (
            "waf",
            json!({format!("{P}/enable-modsecurity"): "true"}),
            "enable-modsecurity did not carry over",
        ),
        (
            "regex",
            json!({format!("{P}/use-regex"): "true", format!("{P}/rewrite-target"): "/$9"}),
            "Withheld",
        ),
        (
            "borrow",
            json!({format!("{P}/auth-tls-secret"): "shop/partner-ca"}),
            "auth-tls-secret: the base policy has no server.tls listener for client certificates",
        ),
    ];
    for (name, annotations, why) in refused {
        let ran = create(
            &api,
            dir.path(),
            &tenant_ingress(name, &format!("{name}.lab"), annotations),
        );
        assert_ne!(ran.code, 0, "{name} was created: {}", ran.stdout);
        let said = format!("admission webhook \"{HOOK}\" denied the request: fairgate would not serve Ingress evil/{name}: ");
        assert!(ran.stderr.contains(&said), "{name}: {}", ran.stderr);
        assert!(ran.stderr.contains(why), "{name}: {}", ran.stderr);
    }
    let stored = api.list("networking.k8s.io/v1/ingresses", "evil");
    assert_eq!(stored.len(), 0, "{stored:#?}");

    let plain = create(
        &api,
        dir.path(),
        &tenant_ingress("plain", "plain.lab", json!({})),
    );
    assert_eq!(plain.code, 0, "{}", plain.stderr);
    assert!(!plain.stderr.contains("Warning"), "{}", plain.stderr);
    let elsewhere =
        json!({format!("{P}/mirror-target"): "http://metrics.kube-system.svc/$request_uri"});
    let warned = create(
        &api,
        dir.path(),
        &tenant_ingress("copies", "copies.lab", elsewhere),
    );
    assert_eq!(warned.code, 0, "{}", warned.stderr);
    assert!(
        warned.stderr.contains("Warning: NotSupported: ")
            && warned
                .stderr
                .contains("a Service of the Ingress's own namespace"),
        "{}",
        warned.stderr
    );

    a_webhook_out_of_reach_stops_nothing_under_ignore(&api, dir.path(), &pki.ca());
}

/// With the webhook's address dead, `Ignore` lets the write through and
/// `Fail` refuses it, as the API server does; the kit ships `Ignore`.
fn a_webhook_out_of_reach_stops_nothing_under_ignore(api: &KubeApi, dir: &Path, ca: &Path) {
    api.delete(
        "admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        "",
        "fairgate",
    );
    let dead = format!("https://localhost:{}/validate", free_addr().port());
    api.apply(webhook("fairgate", &dead, ca, "Ignore"));
    let waf = json!({format!("{P}/enable-modsecurity"): "true"});
    let ran = create(
        api,
        dir,
        &tenant_ingress("unchecked", "unchecked.lab", waf.clone()),
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    api.apply(webhook("fairgate", &dead, ca, "Fail"));
    let ran = create(api, dir, &tenant_ingress("stopped", "stopped.lab", waf));
    assert_ne!(ran.code, 0);
    assert!(
        ran.stderr.contains("failed calling webhook"),
        "{}",
        ran.stderr
    );
}

/// The webhook answers as the controller acts: every Ingress of the import
/// corpus (`tests/ingress-nginx`: the networking.k8s.io/v1 Ingresses of
/// teams moving from ingress-nginx, in our class) is stored as is, the
/// controller builds, and the webhook, asked about each as the API server
/// asks, refuses exactly the Ingresses the controller withheld, and allows
/// every other one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_agrees_with_the_controller_on_the_whole_corpus() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    let stored = corpus_in_our_class(&api);
    assert!(stored >= 48, "{stored} Ingresses read");
    let dir = tempfile::tempdir().unwrap();
    let (pki, listen, admission) = webhook_listener(dir.path());
    let gw = controller(
        &base_policy(&admission),
        &api.kubeconfig(dir.path()),
        "fairgate-0",
    )
    .await;
    let rejected = metric(
        &gw.metrics().await,
        "fairgate_kubernetes_rejected_ingresses",
    )
    .expect("the build's count") as usize;
    let settled = api.wait_for(std::time::Duration::from_secs(30), |api| {
        withheld(api).len() == rejected
    });
    assert!(settled, "{rejected} withheld: {:?}", withheld(&api));
    let expected = withheld(&api);
    let url = format!("https://localhost:{}/validate", listen.port());
    let refused = refused_by(&url, &pki.ca(), &api).await;
    assert_eq!(refused, expected);
    assert!(expected.len() >= 3, "{expected:?}");
}

/// The corpus's Ingresses (our class; extensions/v1beta1 ones left out:
/// every API server since 1.22 refuses them, so no webhook sees them) and
/// the Services, Secrets and ConfigMaps beside them, stored as they are:
/// how many Ingresses.
fn corpus_in_our_class(api: &KubeApi) -> usize {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ingress-nginx");
    let mut files: Vec<_> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path().join("ingress.yaml"))
        .collect();
    files.sort();
    let mut ingresses = 0;
    for o in fairgate::import::manifests::read(&files).unwrap() {
        let mut value = (*o.value).clone();
        value["metadata"]["namespace"] = json!(o.namespace);
        if o.kind == "Ingress" {
            if value["apiVersion"] != "networking.k8s.io/v1" {
                continue;
            }
            value["spec"]["ingressClassName"] = json!("fairgate");
            if let Some(a) = value["metadata"]["annotations"].as_object_mut() {
                a.remove("kubernetes.io/ingress.class");
            }
            ingresses += 1;
        }
        if ["Ingress", "Service", "Secret", "ConfigMap"].contains(&o.kind.as_str()) {
            api.apply(value);
        }
    }
    ingresses
}

/// A webhook certificate for `localhost` (its CA the returned Pki's), a
/// free address, and the `kubernetes.admission` lines of the base policy.
fn webhook_listener(dir: &Path) -> (Pki, std::net::SocketAddr, String) {
    let pki = Pki::new(dir, "webhook");
    let (cert, key) = pki.leaf("webhook", "fairgate-admission", &["localhost"], "6D01");
    let listen = free_addr();
    let admission = format!(
        "  admission: {{listen: \"{listen}\", cert_file: \"{}\", key_file: \"{}\"}}\n",
        cert.display(),
        key.display()
    );
    (pki, listen, admission)
}

/// `namespace/name` of each stored Ingress.
fn id(ing: &Value) -> String {
    let meta = &ing["metadata"];
    format!(
        "{}/{}",
        meta["namespace"].as_str().unwrap(),
        meta["name"].as_str().unwrap()
    )
}

/// The Ingresses the build did not serve: never given the load-balancer
/// address in their status (Events are written a bounded number a build,
/// so they are not all there at once).
fn withheld(api: &KubeApi) -> BTreeSet<String> {
    api.list("networking.k8s.io/v1/ingresses", "")
        .iter()
        .filter(|i| {
            i["status"]["loadBalancer"]["ingress"]
                .as_array()
                .is_none_or(Vec::is_empty)
        })
        .map(id)
        .collect()
}

/// The stored Ingresses the webhook at `url` refuses, each asked about in
/// an AdmissionReview as the API server sends it.
async fn refused_by(url: &str, ca: &Path, api: &KubeApi) -> BTreeSet<String> {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(ca).unwrap()).unwrap();
    let client = reqwest::Client::builder()
        .add_root_certificate(ca)
        .no_proxy()
        .build()
        .unwrap();
    let mut refused = BTreeSet::new();
    for ing in api.list("networking.k8s.io/v1/ingresses", "") {
        let meta = &ing["metadata"];
        let kind = json!({"group": "networking.k8s.io", "version": "v1", "kind": "Ingress"});
        let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": kind, "namespace": meta["namespace"],
                "name": meta["name"], "operation": "CREATE", "object": ing}});
        let answer = client.post(url).json(&review).send().await.unwrap();
        let answer: Value = answer.json().await.unwrap();
        assert_eq!(answer["response"]["uid"], "u");
        if answer["response"]["allowed"] == false {
            refused.insert(id(&ing));
        }
    }
    refused
}

/// A tenant's everyday flows pass: the Secret created just before its
/// Ingress is read (the controller holds no copy yet), and an Ingress the
/// controller does not serve can still be changed (to fix it, or to
/// delete it); a host another namespace owns is refused without naming
/// that namespace's Ingress.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_reads_new_secrets_lets_unserved_ingresses_change_and_names_no_other_tenant() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    backend(&api, "evil", "app", &echo.addr);
    api.apply(shop_ingress("storefront", "shop.lab", "/"));
    let waf = json!({format!("{P}/enable-modsecurity"): "true"});
    api.apply(tenant_ingress("old-waf", "old.lab", waf));
    let dir = tempfile::tempdir().unwrap();
    let (pki, listen, admission) = webhook_listener(dir.path());
    let _gw = controller(
        &base_policy(&admission),
        &api.kubeconfig(dir.path()),
        "fairgate-0",
    )
    .await;
    let url = format!("https://localhost:{}/validate", listen.port());
    api.apply(webhook("fairgate", &url, &pki.ca(), "Ignore"));
    let mut staff = users("staff", &[ALICE]);
    staff["metadata"]["namespace"] = json!("evil");
    let ran = create(&api, dir.path(), &staff);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let basic = json!({format!("{P}/auth-type"): "basic", format!("{P}/auth-secret"): "staff"});
    let ran = create(
        &api,
        dir.path(),
        &tenant_ingress("office", "office.lab", basic),
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);

    let annotate = ["-n", "evil", "annotate", "ingress", "old-waf", "team=blue"];
    let ran = api.kubectl(dir.path()).run(&annotate, "");
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(ran.stderr.contains("is not served now"), "{}", ran.stderr);

    let ran = create(
        &api,
        dir.path(),
        &tenant_ingress("grab", "shop.lab", json!({})),
    );
    assert_ne!(ran.code, 0, "{}", ran.stdout);
    assert!(
        ran.stderr.contains("an Ingress of another namespace"),
        "{}",
        ran.stderr
    );
    assert!(!ran.stderr.contains("shop/"), "{}", ran.stderr);
}
