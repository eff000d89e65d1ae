//! `fairgate import ingress-nginx --to gateway-api`: for every case of the
//! import corpus, the controller serving the Gateway API objects the import
//! writes (with the base policy it writes) gives the same answers as the
//! controller serving the original Ingresses. Two API stand-ins hold the
//! two clusters (`kubectl create -f` of the case, `kubectl create -f` of
//! the import's objects), with the same Services, each backed by a
//! `fairgate echo` that names its Service; the same requests (every host
//! of the case, paths of its routes and around them, the headers and
//! cookies its matches and canaries look at; over plain HTTP and, for TLS
//! hosts, over TLS) are sent to both, and the status, the backend, the
//! path and Host it received, the headers the routes set on the way up,
//! the redirect and the CORS, HSTS and auth headers on the way back must
//! be the same. The routes the import does not write (reported `not
//! supported`) are the ones listed here, and their paths are not asked.
//!
//! `legacy` is not fed to the Ingress door: no API server has served
//! `extensions/v1beta1` Ingresses since Kubernetes 1.22.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::cluster::*;
use common::doors::{complete_cluster, controller_configmap};
use common::kube_api::KubeApi;
use common::*;
use serde_json::{json, Value};
use yaml_rust2::{Yaml, YamlEmitter, YamlLoader};

/// The gateway class and controller of the Gateway the import writes.
pub(crate) const GATEWAY_CONTROLLER: &str = "fairgate.dev/gateway-controller";

/// What one request got back.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Answer {
    status: u16,
    /// The Service whose echo answered, and the path and headers it got.
    backend: String,
    path: String,
    upstream: BTreeMap<String, String>,
    /// Response headers a route sets or an auth answer carries.
    headers: BTreeMap<String, String>,
}

/// Upstream request headers compared: the Host, and what routes set.
const UPSTREAM: &[&str] = &["host", "x-client-host", "x-forwarded-host"];

/// Response headers compared by value (and `request-id` by presence).
const RESPONSE: &[&str] = &[
    "location",
    "www-authenticate",
    "strict-transport-security",
    "access-control-allow-origin",
    "access-control-allow-credentials",
    "access-control-allow-methods",
    "access-control-allow-headers",
    "access-control-expose-headers",
    "access-control-max-age",
    "x-frame-options",
    "x-content-type-options",
];

/// A request: host, path, headers, over TLS or not.
#[derive(Debug, Clone)]
struct Probe {
    host: String,
    path: String,
    headers: Vec<(String, String)>,
    tls: bool,
}

async fn ask(client: &reqwest::Client, addr: SocketAddr, p: &Probe) -> Answer {
    let scheme = if p.tls { "https" } else { "http" };
    let url = match p.tls {
        // The name resolves to the TLS listener: SNI and Host are the host.
        true => format!("https://{}:{}{}", p.host, addr.port(), p.path),
        false => format!("{scheme}://{addr}{}", p.path),
    };
    let mut req = client.get(url).header("host", &p.host);
    for (k, v) in &p.headers {
        req = req.header(k, v);
    }
    let resp = req.send().await.unwrap_or_else(|e| panic!("{p:?}: {e}"));
    let mut headers = BTreeMap::new();
    for name in RESPONSE {
        if let Some(v) = resp.headers().get(*name) {
            headers.insert(name.to_string(), v.to_str().unwrap_or("?").to_string());
        }
    }
    if resp.headers().contains_key("request-id") {
        headers.insert("request-id".into(), "present".into());
    }
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    let mut upstream = BTreeMap::new();
    for name in UPSTREAM {
        let got = body["headers"]
            .as_object()
            .and_then(|h| h.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)))
            .map(|(_, v)| v.to_string());
        if let Some(v) = got {
            upstream.insert(name.to_string(), v);
        }
    }
    Answer {
        status,
        backend: body["pod"].as_str().unwrap_or_default().to_string(),
        path: format!(
            "{}?{}",
            body["path"].as_str().unwrap_or_default(),
            body["query"].as_str().unwrap_or_default()
        ),
        upstream,
        headers,
    }
}

/// One door: a stand-in, its kubeconfig, and the gateway serving it.
struct Door {
    _api: KubeApi,
    gw: Gateway,
    tls: SocketAddr,
}

/// The requests for a case: from the policy the file import writes (its
/// hosts, its routes' paths with a segment more and a near miss, the
/// headers and cookies its matches and canaries read).
fn probes(policy: &Yaml, tls_hosts: &BTreeSet<String>) -> Vec<Probe> {
    let routes = policy["routes"].as_vec().cloned().unwrap_or_default();
    let mut hosts = BTreeSet::from(["unknown.example".to_string()]);
    let mut paths = BTreeSet::from(["/".to_string(), "/nothing-here".to_string()]);
    let mut variants = vec![Vec::new()];
    for r in &routes {
        let m = &r["match"];
        if let Some(h) = m["host"].as_str() {
            hosts.insert(h.replace("*.", "any."));
        }
        for key in ["path", "path_prefix"] {
            if let Some(p) = m[key].as_str() {
                let p = p.trim_end_matches('/');
                paths.extend([format!("{p}/"), format!("{p}/probe?q=1")]);
                if !p.is_empty() {
                    paths.extend([p.to_string(), format!("{p}x")]);
                }
            }
        }
        if let Some(h) = m["headers"].as_hash() {
            for (k, v) in h {
                if let (Some(k), Some(v)) = (k.as_str(), v.as_str()) {
                    variants.push(vec![(k.to_string(), v.to_string())]);
                }
            }
        }
        if let Some(origin) = r["cors"]["origins"][0].as_str() {
            let origin = if origin == "*" {
                "https://any.example"
            } else {
                origin
            };
            variants.push(vec![("origin".into(), origin.to_string())]);
        }
        let canary = &r["canary"];
        if let Some(h) = canary["header"].as_str() {
            for v in ["always", "never"] {
                variants.push(vec![(h.to_string(), v.to_string())]);
            }
        }
        if let Some(c) = canary["cookie"].as_str() {
            for v in ["always", "never"] {
                variants.push(vec![("cookie".into(), format!("a=1; {c}={v}"))]);
            }
        }
    }
    // What the regular-expression routes of the corpus look for.
    paths.extend(
        [
            "/api/v1/status",
            "/api/v1/admin/users",
            "/api/v3/items",
            "/something/abc/def",
            "/app1",
        ]
        .map(String::from),
    );
    let mut out = Vec::new();
    for host in &hosts {
        for path in &paths {
            for headers in &variants {
                for tls in [false, true] {
                    if tls && !tls_hosts.contains(host) {
                        continue;
                    }
                    out.push(Probe {
                        host: host.clone(),
                        path: path.clone(),
                        headers: headers.clone(),
                        tls,
                    });
                }
            }
        }
    }
    out
}

fn client(doors: [&Door; 2]) -> [reqwest::Client; 2] {
    doors.map(|d| {
        reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .danger_accept_invalid_certs(true)
            .dns_resolver(std::sync::Arc::new(Loopback(d.tls)))
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap()
    })
}

/// Every name resolves to one TLS listener.
struct Loopback(SocketAddr);

impl reqwest::dns::Resolve for Loopback {
    fn resolve(&self, _: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let addr = self.0;
        Box::pin(async move {
            let addrs: reqwest::dns::Addrs = Box::new(std::iter::once(addr));
            Ok(addrs)
        })
    }
}

/// The policy text with `edit` applied to its tree.
pub(crate) fn edited(text: &str, edit: impl FnOnce(&mut yaml_rust2::yaml::Hash)) -> String {
    let mut doc = YamlLoader::load_from_str(text).unwrap().remove(0);
    let Yaml::Hash(top) = &mut doc else {
        panic!("not a mapping: {text}")
    };
    edit(top);
    let mut out = String::new();
    YamlEmitter::new(&mut out).dump(&doc).unwrap();
    out
}

pub(crate) fn set(top: &mut yaml_rust2::yaml::Hash, key: &str, yaml: &str) {
    let value = YamlLoader::load_from_str(yaml).unwrap().remove(0);
    top.insert(Yaml::String(key.into()), value);
}

/// The listeners, admin, store and certificate a test gateway has, in
/// place of the ones a policy names.
fn test_server(top: &mut yaml_rust2::yaml::Hash, pki_cert: &(String, String), tls: SocketAddr) {
    let server = top
        .entry(Yaml::String("server".into()))
        .or_insert_with(|| Yaml::Hash(Default::default()));
    let Yaml::Hash(server) = server else { panic!() };
    set(server, "listen", "[\"$LISTEN\"]");
    let tls = format!(
        "{{listen: \"{tls}\", certificates: [{{cert_file: \"{}\", key_file: \"{}\"}}]}}",
        pki_cert.0, pki_cert.1
    );
    set(server, "tls", &tls);
    set(top, "admin", "{listen: \"$ADMIN\"}");
    set(top, "store", "{kind: memory}");
}

async fn start(api: KubeApi, dir: &Path, base: String, pod: &str, tls: SocketAddr) -> Door {
    std::fs::create_dir_all(dir).unwrap();
    let kc = api.kubeconfig(dir);
    let options = GatewayOptions {
        env: vec![
            ("KUBECONFIG".into(), kc.display().to_string()),
            ("POD_NAME".into(), pod.into()),
            ("POD_NAMESPACE".into(), "ingress".into()),
        ],
        ..Default::default()
    };
    let gw = Gateway::start_with(&base, options).await;
    Door { _api: api, gw, tls }
}

/// The objects a cluster adds to the case's manifests, copied from the
/// Ingress door's stand-in into the Gateway door's.
pub(crate) fn copy_cluster(from: &KubeApi, to: &KubeApi) {
    for gvr in [
        "v1/services",
        "discovery.k8s.io/v1/endpointslices",
        "v1/secrets",
        "v1/configmaps",
    ] {
        for mut o in from.list(gvr, "") {
            let meta = o["metadata"].as_object_mut().unwrap();
            meta.retain(|k, _| {
                ["name", "namespace", "labels", "annotations"].contains(&k.as_str())
            });
            to.apply(o);
        }
    }
}

/// The routes the `--to gateway-api` report says were not written.
fn unwritten(report: &str) -> BTreeSet<String> {
    report
        .lines()
        .filter(|l| l.contains(": gateway-api: route ") && l.contains("not supported"))
        .filter_map(|l| l.split(": gateway-api: route ").nth(1)?.split(':').next())
        .map(String::from)
        .collect()
}

/// `fairgate import ingress-nginx --to gateway-api` of the case, as an
/// operator runs it: the objects' and the base policy's files, and the
/// routes it did not write (checked against `not_written`).
fn import_to_gateway_api(
    d: &Path,
    manifest: &str,
    not_written: &[&str],
) -> (std::path::PathBuf, std::path::PathBuf, BTreeSet<String>) {
    let (objects, base, report) = (
        d.join("gateway-api.yaml"),
        d.join("base.yaml"),
        d.join("report"),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_fairgate"))
        .args([
            "import",
            "ingress-nginx",
            "--to",
            "gateway-api",
            "--replicas",
            "1",
        ])
        .arg("--base")
        .arg(&base)
        .arg("-o")
        .arg(&objects)
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
    let unwritten = unwritten(&report);
    let want: BTreeSet<String> = not_written.iter().map(|s| s.to_string()).collect();
    assert_eq!(unwritten, want, "routes not written\n{report}");

    (objects, base, unwritten)
}

async fn case(name: &str, not_written: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pki = Pki::new(d, "gwimport");
    let manifest = format!("tests/ingress-nginx/{name}/ingress.yaml");
    let (file_policy, _, _) = ingress_import::import_with(&["--replicas", "1", &manifest]);
    let file_policy = YamlLoader::load_from_str(&file_policy).unwrap().remove(0);

    let (objects, base, unwritten) = import_to_gateway_api(d, &manifest, not_written);

    // Both clusters, with one echo per Service.
    let ingress_api = KubeApi::start();
    let kc = ingress_api.kubeconfig(d);
    kubectl(&kc, &["create", "-f", &manifest], None).expect("kubectl create -f the case");
    let mut echoes: BTreeMap<(String, String), EchoProcess> = BTreeMap::new();
    complete_cluster(&ingress_api, &pki, &mut |ns, svc, _| {
        let key = (ns.to_string(), svc.to_string());
        echoes
            .entry(key)
            .or_insert_with(|| EchoProcess::start_as([127, 0, 0, 1], svc, ns))
            .addr
    });
    let gateway_api = KubeApi::start();
    copy_cluster(&ingress_api, &gateway_api);
    std::fs::create_dir_all(d.join("g")).unwrap();
    let gkc = gateway_api.kubeconfig(&d.join("g"));
    gateway_api.apply(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
        "metadata": {"name": "fairgate"}, "spec": {"controllerName": GATEWAY_CONTROLLER}
    }));
    kubectl(&gkc, &["create", "-f", objects.to_str().unwrap()], None).unwrap_or_else(|e| {
        panic!(
            "kubectl create -f the import's objects: {e}\n{}",
            std::fs::read_to_string(&objects).unwrap()
        )
    });

    // The two gateways: the same test listeners, certificate and store.
    let (cert, key) = pki.leaf("default", "default", &["default.example"], "01");
    let cert = (cert.display().to_string(), key.display().to_string());
    let configmap = controller_configmap(&ingress_api);
    let (tls_a, tls_b) = (free_addr(), free_addr());
    let ingress_base = edited("default_limits: none\n", |top| {
        test_server(top, &cert, tls_a);
        let cm = configmap.map_or(String::new(), |c| format!(", configmap: \"{c}\""));
        set(
            top,
            "kubernetes",
            &format!("{{watch_without_class: true, allow_local_endpoints: true, publish_address: [\"203.0.113.7\"]{cm}}}"),
        );
    });
    let gateway_base = edited(&std::fs::read_to_string(&base).unwrap(), |top| {
        test_server(top, &cert, tls_b);
        set(
            top,
            "kubernetes",
            "{gateway: ingress/edge, allow_local_endpoints: true, publish_address: [\"203.0.113.8\"]}",
        );
    });
    let a = start(ingress_api, &d.join("a"), ingress_base, "fairgate-a", tls_a).await;
    let b = start(gateway_api, &d.join("b"), gateway_base, "fairgate-b", tls_b).await;

    compare(&file_policy, [&a, &b], &unwritten, name).await;
    for door in [&a, &b] {
        limits_hold(&file_policy, door, name).await;
    }
    drop(echoes);
}

/// Sends every probe to both doors once both serve; the differences.
async fn compare(policy: &Yaml, doors: [&Door; 2], unwritten: &BTreeSet<String>, name: &str) {
    let routes = policy["routes"].as_vec().cloned().unwrap_or_default();
    let mut tls_hosts = BTreeSet::new();
    for c in policy["server"]["tls"]["certificates"]
        .as_vec()
        .into_iter()
        .flatten()
    {
        for h in c["hosts"].as_vec().into_iter().flatten() {
            tls_hosts.insert(h.as_str().unwrap().replace("*.", "any."));
        }
    }
    // Not asked: the paths of routes not written, and (drawn per request)
    // a weighted canary's host without a header or cookie choosing.
    let skipped = |p: &Probe| {
        routes.iter().any(|r| {
            let m = &r["match"];
            let host = m["host"].as_str().map(|h| h.replace("*.", "any."));
            let same_host = host.as_deref().is_none_or(|h| h == p.host);
            let prefix = m["path_prefix"]
                .as_str()
                .or(m["path"].as_str())
                .unwrap_or("/");
            let name = r["name"].as_str().unwrap_or_default();
            let canary = &r["canary"];
            let chooses = p.headers.iter().any(|(k, v)| {
                Some(k.as_str()) == canary["header"].as_str()
                    || canary["cookie"]
                        .as_str()
                        .is_some_and(|c| k == "cookie" && v.contains(&format!("{c}=")))
            });
            let weighted = canary["percent"].as_i64().unwrap_or(0) > 0 && !chooses;
            same_host && (weighted || (unwritten.contains(name) && p.path.starts_with(prefix)))
        })
    };
    let probes: Vec<Probe> = probes(policy, &tls_hosts)
        .into_iter()
        .filter(|p| !skipped(p))
        .collect();
    assert!(
        probes.len() > routes.len(),
        "case {name}: only {} probes",
        probes.len()
    );
    let clients = client(doors);
    // Each door serves its objects within a moment of starting: asked
    // again until they agree, for at most 20 s.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut differ = Vec::new();
        for p in &probes {
            let a = ask(&clients[0], addr(doors[0], p), p).await;
            let b = ask(&clients[1], addr(doors[1], p), p).await;
            if a != b && !query_kept(p, &a, &b) {
                differ.push(format!("{p:?}\n  ingress:     {a:?}\n  gateway-api: {b:?}"));
            }
        }
        if differ.is_empty() {
            return;
        }
        if std::time::Instant::now() > deadline {
            panic!(
                "case {name}: {} of {} requests answered differently:\n{}\n--- gateway-api door:\n{}",
                differ.len(),
                probes.len(),
                differ.join("\n"),
                gateway_api::tail(&doors[1].gw.logs())
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Each route's limit refuses, with its status, the request after its
/// bucket's capacity (give or take what refills meanwhile), as the
/// policy the file import writes says; asked from an address of its own.
async fn limits_hold(policy: &Yaml, door: &Door, name: &str) {
    let client = reqwest::Client::builder()
        .no_proxy()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    for r in policy["routes"].as_vec().into_iter().flatten() {
        let Some(limit) = r["limits"][0].as_str() else {
            continue;
        };
        let limit = &policy["limits"][limit];
        let capacity = limit["default"]["capacity"].as_i64().unwrap() as usize;
        let rate = limit["default"]["rate"].as_str().unwrap();
        let (n, per) = rate.split_once('/').unwrap();
        let per_second = n.parse::<f64>().unwrap() / if per == "m" { 60.0 } else { 1.0 };
        let host = r["match"]["host"].as_str().unwrap();
        let path = r["match"]["path_prefix"].as_str().unwrap();
        let started = std::time::Instant::now();
        let mut refused = None;
        for i in 0..capacity * 2 {
            let resp = client
                .get(door.gw.url(path))
                .header("host", host)
                .send()
                .await
                .unwrap();
            if resp.status() != 200 {
                refused = Some((i, resp.status().as_u16()));
                break;
            }
        }
        let refill = (per_second * started.elapsed().as_secs_f64()).ceil() as usize;
        let want_status = limit["status"].as_i64().unwrap_or(429) as u16;
        let (i, status) = refused.unwrap_or_else(|| panic!("case {name}: {limit:?} never refused"));
        assert_eq!(status, want_status, "case {name}: {limit:?}");
        assert!(
            (capacity..=capacity + refill).contains(&i),
            "case {name}: refused after {i} requests, capacity {capacity} (+{refill} refilled)"
        );
    }
}

/// The one difference the report owns up to (`redirect: approximated`): a
/// RequestRedirect keeps the request's query string, which
/// ingress-nginx's `permanent-redirect` and `temporal-redirect` drop.
fn query_kept(p: &Probe, a: &Answer, b: &Answer) -> bool {
    let (Some((_, query)), Some(location)) = (p.path.split_once('?'), a.headers.get("location"))
    else {
        return false;
    };
    let mut kept = a.clone();
    kept.headers
        .insert("location".into(), format!("{location}?{query}"));
    matches!(a.status, 301 | 302 | 307) && kept == *b
}

fn addr(door: &Door, p: &Probe) -> SocketAddr {
    if p.tls {
        door.tls
    } else {
        door.gw.listen
    }
}

macro_rules! cases {
    ($($test:ident => $case:literal, [$($unwritten:literal),*]),* $(,)?) => {$(
        #[tokio::test]
        async fn $test() {
            case($case, &[$($unwritten),*]).await;
        }
    )*};
}

cases! {
    auth_answers_the_same => "auth", [],
    canary_answers_the_same => "canary", [],
    cors_answers_the_same => "cors", [],
    defaults_answers_the_same => "defaults", [],
    grpc_answers_the_same => "grpc", ["grpc_secure-grpc-0"],
    rate_limit_answers_the_same => "rate-limit", [],
    regex_host_answers_the_same => "regex-host", [],
    rewrite_answers_the_same => "rewrite", [],
    snippets_answers_the_same => "snippets", [],
    tls_answers_the_same => "tls", [],
    upstream_tls_answers_the_same => "upstream-tls",
        ["shop_ledger-0", "shop_payments-0", "shop_payments-legacy-0"],
}
