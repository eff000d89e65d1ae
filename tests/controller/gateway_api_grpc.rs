//! The Gateway API conformance suite's core GRPCRoute tests
//! (GRPCExactMethodMatching, GRPCRouteHeaderMatching,
//! GRPCRouteListenerHostnameMatching, GRPCRouteWeight), ported: the same
//! manifests through `kubectl apply`; calls made by grpcio
//! (`tests/peers/grpc_peer.py call`) over HTTP/2 in the clear to the
//! gateway's plain listener, as the suite's client does, each answered by a
//! grpcio backend that names its pod; no matching rule is `UNIMPLEMENTED`.

use crate::common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use common::gateway_api::*;
use common::Gateway;
use serde_json::Value;

const ROUTES: &str = "grpcroutes";
const SERVICE: &str = "gateway_api_conformance.echo_basic.grpcecho.GrpcEcho";

/// One call per line of output: (code, pod, fully qualified method).
fn calls(
    gw: &Gateway,
    method: &str,
    authority: &str,
    metadata: &[(&str, &str)],
    repeat: usize,
) -> Vec<(String, String, String)> {
    let mut cmd = Command::new("python3");
    cmd.args([GRPC_PEER, "call", "--target", &gw.listen.to_string()])
        .args([
            "--method",
            &format!("/{SERVICE}/{method}"),
            "--kind",
            "unary",
        ])
        .args([
            "--authority",
            authority,
            "--timeout",
            "5",
            "--repeat",
            &repeat.to_string(),
        ]);
    for (k, v) in metadata {
        cmd.args(["--metadata", &format!("{k}={v}")]);
    }
    let out = cmd
        .output()
        .expect("python3 with grpcio (run scripts/deps)");
    assert!(
        out.status.success(),
        "grpc_peer.py call: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).expect("a JSON line");
            let code = v["code"].as_str().unwrap_or("").to_string();
            let answer: Value = v["responses"][0]
                .as_str()
                .and_then(|r| serde_json::from_str(r).ok())
                .unwrap_or(Value::Null);
            let pod = answer["pod"].as_str().unwrap_or("").to_string();
            let fqm = answer["fully_qualified_method"]
                .as_str()
                .unwrap_or("")
                .to_string();
            (code, pod, fqm)
        })
        .collect()
}

/// The call answered `code` (and for OK, by `backend`) three times in a
/// row within 30 s, as the suite's gRPC roundtripper.
fn expect(
    gw: &Gateway,
    method: &str,
    authority: &str,
    metadata: &[(&str, &str)],
    code: &str,
    backend: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut streak = 0;
    loop {
        let got = calls(gw, method, authority, metadata, 1).remove(0);
        let met = got.0 == code
            && (code != "OK"
                || (got.1.starts_with(backend) && got.2 == format!("/{SERVICE}/{method}")));
        streak = if met { streak + 1 } else { 0 };
        if streak == 3 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{method} {authority} {metadata:?}: want {code} {backend}, got {got:?}\n{}",
            gw.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test]
async fn grpc_exact_method_matching() {
    let c = Conformance::start().with_grpc();
    let gw = c.gateway("same-namespace").await;
    c.apply(&format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: exact-matching, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: same-namespace}}]
  rules:
  - matches: [{{method: {{service: {SERVICE}, method: Echo}}}}]
    backendRefs: [{{name: grpc-infra-backend-v1, port: 8080}}]
  - matches: [{{method: {{service: {SERVICE}, method: EchoTwo}}}}]
    backendRefs: [{{name: grpc-infra-backend-v2, port: 8080}}]
"#
    ));
    c.accepted(ROUTES, INFRA, "exact-matching", "same-namespace", "");
    let host = gw.listen.to_string();
    expect(&gw, "Echo", &host, &[], "OK", "grpc-infra-backend-v1");
    expect(&gw, "EchoTwo", &host, &[], "OK", "grpc-infra-backend-v2");
    expect(&gw, "EchoThree", &host, &[], "UNIMPLEMENTED", "");
}

#[tokio::test]
async fn grpc_route_header_matching() {
    let c = Conformance::start().with_grpc();
    let gw = c.gateway("same-namespace").await;
    c.apply(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: grpc-header-matching, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{headers: [{name: version, value: one}]}]
    backendRefs: [{name: grpc-infra-backend-v1, port: 8080}]
  - matches: [{headers: [{name: version, value: two}]}]
    backendRefs: [{name: grpc-infra-backend-v2, port: 8080}]
  - matches: [{headers: [{name: version, value: two}, {name: color, value: orange}]}]
    backendRefs: [{name: grpc-infra-backend-v1, port: 8080}]
  - matches: [{headers: [{name: color, value: blue}]}, {headers: [{name: color, value: green}]}]
    backendRefs: [{name: grpc-infra-backend-v1, port: 8080}]
  - matches: [{headers: [{name: color, value: red}]}, {headers: [{name: color, value: yellow}]}]
    backendRefs: [{name: grpc-infra-backend-v2, port: 8080}]
"#,
    );
    c.accepted(ROUTES, INFRA, "grpc-header-matching", "same-namespace", "");
    let host = gw.listen.to_string();
    let (v1, v2) = ("grpc-infra-backend-v1", "grpc-infra-backend-v2");
    let served: &[(&[(&str, &str)], &str)] = &[
        (&[("version", "one")], v1),
        (&[("version", "two")], v2),
        (&[("version", "two"), ("color", "orange")], v1),
        (&[("version", "two"), ("color", "blue")], v2),
        (&[("color", "blue")], v1),
        (&[("color", "green")], v1),
        (&[("color", "red")], v2),
        (&[("color", "yellow")], v2),
    ];
    for (metadata, backend) in served {
        expect(&gw, "Echo", &host, metadata, "OK", backend);
    }
    for metadata in [
        [("color", "orange")],
        [("some-other-header", "one")],
        [("color", "purple")],
    ] {
        expect(&gw, "Echo", &host, &metadata, "UNIMPLEMENTED", "");
    }
}

#[tokio::test]
async fn grpc_route_listener_hostname_matching() {
    let c = Conformance::start().with_grpc();
    c.apply(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: grpcroute-listener-hostname-matching, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: fairgate
  listeners:
  - {name: listener-1, hostname: bar.com, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Same}}}
  - {name: listener-2, hostname: foo.bar.com, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Same}}}
  - {name: listener-3, hostname: "*.bar.com", port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Same}}}
  - {name: listener-4, hostname: "*.foo.com", port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Same}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: backend-v1, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: grpcroute-listener-hostname-matching, namespace: gateway-conformance-infra, sectionName: listener-1}]
  rules: [{backendRefs: [{name: grpc-infra-backend-v1, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: backend-v2, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: grpcroute-listener-hostname-matching, namespace: gateway-conformance-infra, sectionName: listener-2}]
  rules: [{backendRefs: [{name: grpc-infra-backend-v2, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: backend-v3, namespace: gateway-conformance-infra}
spec:
  parentRefs:
  - {name: grpcroute-listener-hostname-matching, namespace: gateway-conformance-infra, sectionName: listener-3}
  - {name: grpcroute-listener-hostname-matching, namespace: gateway-conformance-infra, sectionName: listener-4}
  rules: [{backendRefs: [{name: grpc-infra-backend-v3, port: 8080}]}]
"#,
    );
    let gw = c.gateway("grpcroute-listener-hostname-matching").await;
    for route in ["backend-v1", "backend-v2", "backend-v3"] {
        c.accepted(
            ROUTES,
            INFRA,
            route,
            "grpcroute-listener-hostname-matching",
            "",
        );
    }
    let (v1, v2, v3) = (
        "grpc-infra-backend-v1",
        "grpc-infra-backend-v2",
        "grpc-infra-backend-v3",
    );
    let served = [
        ("bar.com", v1),
        ("foo.bar.com", v2),
        ("baz.bar.com", v3),
        ("boo.bar.com", v3),
        ("multiple.prefixes.bar.com", v3),
        ("multiple.prefixes.foo.com", v3),
    ];
    for (authority, backend) in served {
        expect(&gw, "Echo", authority, &[], "OK", backend);
    }
    for authority in ["foo.com", "no.matching.host"] {
        expect(&gw, "Echo", authority, &[], "UNIMPLEMENTED", "");
    }
}

#[tokio::test]
async fn grpc_route_weight() {
    let c = Conformance::start().with_grpc();
    let gw = c.gateway("same-namespace").await;
    c.apply(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: weighted-backends, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - backendRefs:
    - {name: grpc-infra-backend-v1, port: 8080, weight: 70}
    - {name: grpc-infra-backend-v2, port: 8080, weight: 30}
    - {name: grpc-infra-backend-v3, port: 8080, weight: 0}
"#,
    );
    c.accepted(ROUTES, INFRA, "weighted-backends", "same-namespace", "");
    let host = gw.listen.to_string();
    expect(&gw, "Echo", &host, &[], "OK", "grpc-infra-backend-");
    // As the suite: rounds of 500 calls, each on a connection of its own.
    let mut last = BTreeMap::new();
    for _ in 0..10 {
        last = BTreeMap::new();
        for (code, pod, _) in calls(&gw, "Echo", &host, &[], 500) {
            assert_eq!(code, "OK");
            let backend: Vec<&str> = pod.rsplitn(3, '-').collect();
            *last
                .entry(backend.last().unwrap_or(&"").to_string())
                .or_insert(0u32) += 1;
        }
        assert_eq!(
            last.get("grpc-infra-backend-v3"),
            None,
            "weight 0 got calls: {last:?}"
        );
        let share = |b: &str| *last.get(b).unwrap_or(&0) as f64 / 500.0;
        if (share("grpc-infra-backend-v1") - 0.7).abs() <= 0.05
            && (share("grpc-infra-backend-v2") - 0.3).abs() <= 0.05
        {
            println!("weighted round: {last:?}");
            return;
        }
    }
    panic!("no round within 5 points of 70/30: {last:?}");
}
