//! Issue 39 item 7: what `fairgate import ingress-nginx --to gateway-api`
//! writes is what an operator can apply and serve as written. For every
//! case of the import corpus (but `legacy`: no API server serves
//! `extensions/v1beta1` Ingresses), its objects are created in the API
//! stand-in with `kubectl create -f`, and each Gateway it writes is served
//! by a Gateway-mode fairgate started with the base policy written for it,
//! only the addresses, the admin listener and the store changed for the
//! test: its certificates stay, the Secrets mounted where it says. Each
//! becomes ready and accepts every route attached to its Gateway. Past the
//! 64 listeners the Gateway API allows a Gateway, the import splits.
//! (`import_gateway_api.rs` compares the answers, with a test base.)

use crate::common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::cluster::*;
use common::doors::complete_cluster;
use common::kube_api::KubeApi;
use common::*;
use serde_json::{json, Value};
use yaml_rust2::{Yaml, YamlLoader};

use crate::import_gateway_api::{copy_cluster, edited, set, GATEWAY_CONTROLLER};

/// What the import wrote: its objects (as JSON), the base policy of each
/// Gateway (by the Gateway's name), its report and exit code.
struct Written {
    objects_file: PathBuf,
    objects: Vec<Value>,
    bases: BTreeMap<String, PathBuf>,
    report: String,
}

/// `fairgate import ingress-nginx --to gateway-api` of `manifest`, its
/// Secrets mounted under `d/tls`.
fn import(d: &Path, manifest: &Path) -> Written {
    let objects_file = d.join("gateway-api.yaml");
    let (base, report) = (d.join("base.yaml"), d.join("report"));
    let out = Command::new(env!("CARGO_BIN_EXE_fairgate"))
        .args(["import", "ingress-nginx", "--to", "gateway-api"])
        .args(["--replicas", "1", "--tls-dir"])
        .arg(d.join("tls"))
        .arg("--base")
        .arg(&base)
        .arg("-o")
        .arg(&objects_file)
        .arg("--report")
        .arg(&report)
        .arg(manifest)
        .output()
        .unwrap();
    let report = std::fs::read_to_string(&report).unwrap();
    assert!(
        matches!(out.status.code(), Some(0 | 2)),
        "{out:?}\n{report}"
    );
    let text = std::fs::read_to_string(&objects_file).unwrap();
    let objects: Vec<Value> = YamlLoader::load_from_str(&text)
        .unwrap()
        .iter()
        .map(json_of)
        .collect();
    let mut bases = BTreeMap::new();
    for gw in objects.iter().filter(|o| o["kind"] == "Gateway") {
        let name = gw["metadata"]["name"].as_str().unwrap().to_string();
        let file = match bases.len() {
            0 => base.clone(),
            n => d.join(format!("base-{}.yaml", n + 1)),
        };
        assert!(
            file.exists(),
            "no base policy {} for Gateway {name}\n{report}",
            file.display()
        );
        bases.insert(name, file);
    }
    Written {
        objects_file,
        objects,
        bases,
        report,
    }
}

fn json_of(y: &Yaml) -> Value {
    match y {
        Yaml::Hash(h) => Value::Object(
            h.iter()
                .map(|(k, v)| (k.as_str().unwrap_or_default().to_string(), json_of(v)))
                .collect(),
        ),
        Yaml::Array(a) => Value::Array(a.iter().map(json_of).collect()),
        Yaml::String(s) | Yaml::Real(s) => json!(s),
        Yaml::Integer(i) => json!(i),
        Yaml::Boolean(b) => json!(b),
        _ => Value::Null,
    }
}

/// The cluster of a case: its Services, endpoints (one echo per Service)
/// and Secrets, made from its Ingresses in a scratch stand-in and copied,
/// Ingresses left behind, into the one the Gateway-mode fairgates watch.
fn cluster(manifest: &Path, d: &Path, pki: &Pki) -> (KubeApi, PathBuf, Vec<EchoProcess>) {
    let scratch = KubeApi::start();
    std::fs::create_dir_all(d.join("scratch")).unwrap();
    let skc = scratch.kubeconfig(&d.join("scratch"));
    kubectl(&skc, &["create", "-f", manifest.to_str().unwrap()], None)
        .expect("kubectl create -f the case");
    let mut echoes: BTreeMap<(String, String), EchoProcess> = BTreeMap::new();
    complete_cluster(&scratch, pki, &mut |ns, svc, _| {
        let key = (ns.to_string(), svc.to_string());
        echoes
            .entry(key)
            .or_insert_with(|| EchoProcess::start_as([127, 0, 0, 1], svc, ns))
            .addr
    });
    let api = KubeApi::start();
    copy_cluster(&scratch, &api);
    api.apply(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
        "metadata": {"name": "fairgate"}, "spec": {"controllerName": GATEWAY_CONTROLLER}
    }));
    std::fs::create_dir_all(d.join("g")).unwrap();
    let kc = api.kubeconfig(&d.join("g"));
    (api, kc, echoes.into_values().collect())
}

/// Each certificate file the base names, written from the Secret it is
/// the mount of (`--tls-dir/NAMESPACE/SECRET/tls.crt`), as a kubelet would.
fn mount(api: &KubeApi, base: &Path, tls_dir: &Path) {
    let text = std::fs::read_to_string(base).unwrap();
    let doc = YamlLoader::load_from_str(&text).unwrap().remove(0);
    for c in doc["server"]["tls"]["certificates"]
        .as_vec()
        .into_iter()
        .flatten()
    {
        let cert = Path::new(c["cert_file"].as_str().expect("a mounted certificate"));
        let dir = cert.parent().unwrap();
        let rel = dir.strip_prefix(tls_dir).expect("under --tls-dir");
        let (ns, name) = (
            rel.parent().unwrap().to_str().unwrap(),
            rel.file_name().unwrap().to_str().unwrap(),
        );
        let secret = api
            .get("v1/secrets", ns, name)
            .unwrap_or_else(|| panic!("the base mounts Secret {ns}/{name}, not in the cluster"));
        std::fs::create_dir_all(dir).unwrap();
        use base64::Engine;
        for key in ["tls.crt", "tls.key"] {
            let b64 = secret["data"][key].as_str().unwrap();
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap();
            std::fs::write(dir.join(key), bytes).unwrap();
        }
    }
    // Client certificates' roots (`auth-tls-secret`'s ca.crt): any CA.
    let clients = doc["server"]["tls"]["client_certificates"]
        .as_vec()
        .cloned();
    for c in clients.into_iter().flatten() {
        let ca = Path::new(c["ca_file"].as_str().expect("a mounted ca.crt"));
        std::fs::create_dir_all(ca.parent().unwrap()).unwrap();
        let roots = Pki::new(tls_dir, "client-roots");
        std::fs::copy(roots.ca(), ca).unwrap();
    }
}

/// The base as written, but for the test's addresses, admin listener,
/// in-memory store and published address.
fn for_test(base: &Path, tls: SocketAddr) -> String {
    edited(&std::fs::read_to_string(base).unwrap(), |top| {
        let server = top
            .entry(Yaml::String("server".into()))
            .or_insert_with(|| Yaml::Hash(Default::default()));
        let Yaml::Hash(server) = server else { panic!() };
        set(server, "listen", "[\"$LISTEN\"]");
        if let Some(Yaml::Hash(t)) = server.get_mut(&Yaml::String("tls".into())) {
            set(t, "listen", &format!("\"{tls}\""));
        }
        set(top, "admin", "{listen: \"$ADMIN\"}");
        set(top, "store", "{kind: memory}");
        let Some(Yaml::Hash(k)) = top.get_mut(&Yaml::String("kubernetes".into())) else {
            panic!("the base names no Gateway")
        };
        set(k, "publish_address", "[\"203.0.113.9\"]");
        set(k, "allow_local_endpoints", "true");
    })
}

/// Starts a fairgate per Gateway written, each with its base; each must
/// become ready and accept every route whose parentRefs name its Gateway.
/// Each with the address of its TLS listener.
async fn serve(
    api: &KubeApi,
    kc: &Path,
    written: &Written,
    d: &Path,
    case: &str,
) -> Vec<(Gateway, SocketAddr)> {
    let mut gateways = Vec::new();
    for (i, (name, base)) in written.bases.iter().enumerate() {
        mount(api, base, &d.join("tls"));
        let tls = free_addr();
        let options = GatewayOptions {
            env: vec![
                ("KUBECONFIG".into(), kc.display().to_string()),
                ("POD_NAME".into(), format!("fairgate-{i}")),
                ("POD_NAMESPACE".into(), "ingress".into()),
            ],
            wait_ready: false,
            configmap: false,
        };
        let mut gw = Gateway::start_with(&for_test(base, tls), options).await;
        let ready = eventually(Duration::from_secs(30), || {
            let url = gw.admin_url("/readyz");
            async move {
                let r = client().get(url).send().await;
                r.is_ok_and(|r| r.status() == 200)
            }
        })
        .await;
        assert!(
            ready,
            "case {case}: the fairgate serving Gateway {name} is not ready:\n{}\n--- {}:\n{}",
            gateway_api::tail(&gw.logs()),
            base.display(),
            std::fs::read_to_string(base).unwrap()
        );
        accepted(api, written, name, &gw, case);
        assert!(!gw.logs().contains("build_failed"), "{}", gw.logs());
        gw.wait_ready().await;
        gateways.push((gw, tls));
    }
    gateways
}

/// Waits for each route attached to Gateway `name` to be Accepted by it.
fn accepted(api: &KubeApi, written: &Written, name: &str, gw: &Gateway, case: &str) {
    let routes = written.objects.iter().filter(|o| {
        matches!(o["kind"].as_str(), Some("HTTPRoute" | "GRPCRoute"))
            && o["spec"]["parentRefs"]
                .as_array()
                .is_some_and(|p| p.iter().any(|p| p["name"] == name))
    });
    for route in routes {
        let kind = route["kind"].as_str().unwrap().to_ascii_lowercase();
        let gvr = format!("gateway.networking.k8s.io/v1/{kind}s");
        let (ns, rname) = (
            route["metadata"]["namespace"].as_str().unwrap(),
            route["metadata"]["name"].as_str().unwrap(),
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let got = api.get(&gvr, ns, rname).unwrap_or_default();
            let ours = got["status"]["parents"].as_array().and_then(|ps| {
                ps.iter()
                    .find(|p| {
                        p["controllerName"] == GATEWAY_CONTROLLER && p["parentRef"]["name"] == name
                    })
                    .cloned()
            });
            let ok = ours.as_ref().is_some_and(|p| {
                p["conditions"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Accepted" && c["status"] == "True")
                })
            });
            if ok {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "case {case}: {kind} {ns}/{rname} not accepted by Gateway {name}: {:#}\n{}",
                got["status"],
                gateway_api::tail(&gw.logs())
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// One case: imported, created with kubectl, served as written.
async fn served_as_written(manifest: &Path, case: &str) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pki = Pki::new(d, "built");
    let written = import(d, manifest);
    let (api, kc, _echoes) = cluster(manifest, d, &pki);
    kubectl(
        &kc,
        &["create", "-f", written.objects_file.to_str().unwrap()],
        None,
    )
    .unwrap_or_else(|e| {
        panic!(
            "case {case}: kubectl create -f the import's objects: {e}\n{}",
            written.report
        )
    });
    serve(&api, &kc, &written, d, case).await;
}

#[tokio::test]
async fn item_7_gateway_api_import_builds_for_every_case() {
    let mut cases: Vec<PathBuf> = std::fs::read_dir("tests/ingress-nginx")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().is_some_and(|n| n != "legacy"))
        .collect();
    cases.sort();
    assert!(cases.len() >= 10, "{cases:?}");
    for case in cases {
        let name = case.file_name().unwrap().to_str().unwrap().to_string();
        served_as_written(&case.join("ingress.yaml"), &name).await;
    }
}

/// `n` Ingresses of namespace `web`, each for host `hI.example.com` with
/// a TLS section of its own Secret `hI-tls`.
fn tls_hosts(n: usize) -> String {
    (1..=n)
        .map(|i| {
            format!(
                "---\napiVersion: networking.k8s.io/v1\nkind: Ingress\n\
                 metadata: {{name: app-{i}, namespace: web}}\n\
                 spec:\n  ingressClassName: nginx\n  tls: [{{hosts: [h{i}.example.com], secretName: h{i}-tls}}]\n\
                 \x20 rules:\n  - host: h{i}.example.com\n    http: {{paths: [{{path: /, pathType: Prefix, \
                 backend: {{service: {{name: site, port: {{number: 80}}}}}}}}]}}\n"
            )
        })
        .collect()
}

/// The Gateway a route's parentRefs name (one, never two).
fn parent(route: &Value) -> String {
    let names: std::collections::BTreeSet<&str> = route["spec"]["parentRefs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 1, "{route:#}");
    names.into_iter().next().unwrap().to_string()
}

#[tokio::test]
async fn item_7_gateway_api_import_splits_past_64_listeners() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let manifest = d.join("ingresses.yaml");
    std::fs::write(&manifest, tls_hosts(70)).unwrap();
    let written = import(d, &manifest);
    let gateways: Vec<&Value> = written
        .objects
        .iter()
        .filter(|o| o["kind"] == "Gateway")
        .collect();
    assert!(gateways.len() >= 2, "{}", written.report);
    // Which Gateway has the HTTPS listener of each host.
    let mut home = BTreeMap::new();
    for gw in &gateways {
        let listeners = gw["spec"]["listeners"].as_array().unwrap();
        assert!(
            listeners.len() <= 64,
            "{} listeners: {gw:#}",
            listeners.len()
        );
        let name = gw["metadata"]["name"].as_str().unwrap();
        for l in listeners {
            if let Some(h) = l["hostname"].as_str() {
                assert!(
                    home.insert(h.to_string(), name.to_string()).is_none(),
                    "{h} twice"
                );
            }
        }
    }
    assert_eq!(home.len(), 70, "{home:?}");
    assert!(
        written
            .report
            .contains("gateway-api: gateway ingress/edge-2: approximated"),
        "{}",
        written.report
    );
    for route in written.objects.iter().filter(|o| o["kind"] == "HTTPRoute") {
        let host = route["spec"]["hostnames"][0].as_str().unwrap();
        assert_eq!(parent(route), home[host], "{route:#}");
    }

    let pki = Pki::new(d, "split");
    let (api, kc, _echoes) = cluster(&manifest, d, &pki);
    kubectl(
        &kc,
        &["create", "-f", written.objects_file.to_str().unwrap()],
        None,
    )
    .unwrap_or_else(|e| panic!("kubectl create -f the import's objects: {e}"));
    let served = serve(&api, &kc, &written, d, "70 TLS hosts").await;
    // Every host answers over TLS from the fairgate of its Gateway, with
    // its own certificate.
    let ca = reqwest::Certificate::from_pem(&std::fs::read(pki.ca()).unwrap()).unwrap();
    for (i, (name, _)) in written.bases.iter().enumerate() {
        let (_, tls) = &served[i];
        for (host, _) in home.iter().filter(|(_, g)| *g == name).take(3) {
            let client = reqwest::Client::builder()
                .no_proxy()
                .add_root_certificate(ca.clone())
                .resolve(host, *tls)
                .build()
                .unwrap();
            let url = format!("https://{host}:{}/", tls.port());
            let status = client.get(&url).send().await.map(|r| r.status().as_u16());
            assert_eq!(status.ok(), Some(200), "{host} on {name}");
        }
    }
}

/// The stand-in refuses a Gateway of more listeners than the CRD allows,
/// as an API server with the Gateway API's CRDs does.
#[test]
fn item_7_a_gateway_of_65_listeners_is_refused_by_kubectl() {
    let api = KubeApi::start();
    let dir = tempfile::tempdir().unwrap();
    let kc = api.kubeconfig(dir.path());
    let listeners: Vec<Value> = (0..65)
        .map(|i| json!({"name": format!("l{i}"), "port": 80, "protocol": "HTTP", "hostname": format!("h{i}.example.com")}))
        .collect();
    let gw = json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "edge", "namespace": "ingress"},
        "spec": {"gatewayClassName": "fairgate", "listeners": listeners}
    });
    let err = kubectl(&kc, &["create", "-f", "-"], Some(&gw)).unwrap_err();
    assert!(err.contains("must have at most 64 items"), "{err}");
}

/// Issue 39 item 7: a Gateway whose certificates do not compose with the
/// base's (here a host-less HTTPS listener whose Secret, not the base's
/// default certificate, claims the default's name) stops the build, and
/// the log line says so: the Gateway, the listener, the Secret and the
/// base's certificate it collides with; no route is blamed for it.
#[tokio::test]
async fn item_7_a_gateway_that_does_not_build_is_named_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "named");
    let echo = EchoProcess::start_as([127, 0, 0, 1], "site", "web");
    let api = KubeApi::start();
    backend(&api, "web", "site", &echo.addr);
    api.apply(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
        "metadata": {"name": "fairgate"}, "spec": {"controllerName": GATEWAY_CONTROLLER}
    }));
    api.apply(secret_for(
        &pki,
        "ingress",
        "other",
        &["default.example"],
        "07",
    ));
    let tls =
        json!({"mode": "Terminate", "certificateRefs": [{"kind": "Secret", "name": "other"}]});
    api.apply(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "edge", "namespace": "ingress"},
        "spec": {"gatewayClassName": "fairgate", "listeners": [
            {"name": "http", "port": 80, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}},
            {"name": "https", "port": 443, "protocol": "HTTPS", "tls": tls,
             "allowedRoutes": {"namespaces": {"from": "All"}}}]}
    }));
    api.apply(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "site", "namespace": "web"},
        "spec": {"parentRefs": [{"name": "edge", "namespace": "ingress"}],
                 "hostnames": ["site.example.com"],
                 "rules": [{"backendRefs": [{"name": "site", "port": 80}]}]}
    }));
    let base = tls_base(&pki, free_addr()).replace(
        "  lease_duration: 3s\n",
        "  lease_duration: 3s\n  gateway: ingress/edge\n",
    );
    let kc = api.kubeconfig(dir.path());
    let options = GatewayOptions {
        wait_ready: false,
        env: vec![
            ("KUBECONFIG".into(), kc.display().to_string()),
            ("POD_NAME".into(), "fairgate-0".into()),
            ("POD_NAMESPACE".into(), "ingress".into()),
        ],
        ..GatewayOptions::default()
    };
    let gw = Gateway::start_with(&base, options).await;
    let failed = eventually(Duration::from_secs(20), || {
        let logs = gw.logs();
        async move { logs.contains("kubernetes.build_failed") }
    })
    .await;
    let logs = gw.logs();
    assert!(failed, "{logs}");
    let line = logs
        .lines()
        .find(|l| l.contains("kubernetes.build_failed"))
        .unwrap();
    println!("{line}");
    let default = pki.dir.join("default.pem");
    for cause in [
        "Gateway ingress/edge",
        "listener https",
        "Secret ingress/other",
        "default.example is claimed by",
        default.to_str().unwrap(),
    ] {
        assert!(line.contains(cause), "{cause:?} not in {line}");
    }
    assert!(!logs.contains("unbuildable"), "{logs}");
    let route = api
        .get("gateway.networking.k8s.io/v1/httproutes", "web", "site")
        .unwrap();
    assert!(
        !route["status"].to_string().contains("claimed"),
        "{route:#}"
    );
}
