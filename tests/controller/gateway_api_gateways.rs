//! The Gateway API conformance suite's core Gateway and GatewayClass tests
//! (kubernetes-sigs/gateway-api at 4564255, `conformance/tests/gateway-*.go`
//! and `gatewayclass-observed-generation-bump.go`), ported one to one:
//! their manifests through `kubectl apply`, their patches through `kubectl
//! patch --type merge` (the suite's `client.MergeFrom`), their status
//! expectations as the suite's helpers check them (`listeners_match` is
//! `gatewayListenersMatch`). A deployment serves one Gateway, so each
//! Gateway a test names is served by a fairgate of its own; the suite's
//! `NamespacesMustBeReady` is checked on the Gateways the test serves.

use crate::common;

use common::cluster::kubectl;
use common::gateway_api::*;
use common::gateway_status::*;
use common::Pki;
use serde_json::Value;

const UNSUPPORTED_PROTOCOL: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: gateway-only-unsupported-protocols
  namespace: gateway-conformance-infra
  annotations: {gateway-api/skip-this-for-readiness: "true"}
spec:
  gatewayClassName: fairgate
  listeners:
    - {name: invalid, port: 1111, protocol: INVALID}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-supported-and-unsupported-protocols, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: fairgate
  listeners:
    - {name: http, port: 80, protocol: HTTP}
    - {name: invalid, port: 1111, protocol: INVALID}
"#;

const INVALID_LISTENER: Want = Want {
    name: "invalid",
    kinds: &[],
    conditions: &[("Accepted", "False", "UnsupportedProtocol")],
    attached: 0,
};

/// GatewayListenerUnsupportedProtocol
/// (`gateway-invalid-listeners-unsupported-protocol.go`).
#[tokio::test]
async fn gateway_listener_unsupported_protocol() {
    let c = Conformance::start();
    c.apply(UNSUPPORTED_PROTOCOL);
    let only = "gateway-only-unsupported-protocols";
    let both = "gateway-supported-and-unsupported-protocols";
    let _only = c.gateway(only).await;
    let _both = c.gateway(both).await;

    must_have_condition(&c, only, ("Accepted", "False", "ListenersNotValid"));
    must_have_listeners(&c, only, &[INVALID_LISTENER]);
    // Beyond the suite: a Gateway not accepted is not programmed.
    must_have_condition(&c, only, ("Programmed", "False", ""));

    must_have_condition(&c, both, ("Accepted", "True", "ListenersNotValid"));
    let http = Want {
        name: "http",
        kinds: &["HTTPRoute"],
        conditions: &[("Accepted", "True", "Accepted")],
        attached: 0,
    };
    must_have_listeners(&c, both, &[http, INVALID_LISTENER]);
    // Not marked to be skipped for readiness: the suite's other tests wait
    // for it to be Accepted and Programmed.
    ready(&c, &[both]);
}

const INVALID_PARAMETERS_REF: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: gateway-invalid-parameters-ref
  namespace: gateway-conformance-infra
  annotations: {gateway-api/skip-this-for-readiness: "true"}
spec:
  gatewayClassName: fairgate
  listeners:
    - {name: http, port: 80, protocol: HTTP}
  infrastructure:
    parametersRef: {group: invalid.io, kind: InvalidParameters, name: invalid}
"#;

/// GatewayInvalidParametersRef (`gateway-invalid-parameters-ref.go`).
#[tokio::test]
async fn gateway_invalid_parameters_ref() {
    let c = Conformance::start();
    c.apply(INVALID_PARAMETERS_REF);
    let name = "gateway-invalid-parameters-ref";
    let gw = c.gateway(name).await;
    must_have_condition(&c, name, ("Accepted", "False", "InvalidParameters"));
    // Beyond the suite: nothing of it is programmed or served, and a route
    // attached to it says so.
    must_have_condition(&c, name, ("Programmed", "False", ""));
    let http = Want {
        name: "http",
        kinds: &["HTTPRoute"],
        conditions: &[("Programmed", "False", "")],
        attached: 0,
    };
    must_have_listeners(&c, name, &[http]);
    c.apply(&format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: on-it, namespace: gateway-conformance-infra}}\nspec:\n  parentRefs: [{{name: {name}}}]\n  rules: [{{backendRefs: [{{name: infra-backend-v1, port: 8080}}]}}]\n"
    ));
    let refused = [("Accepted", "False", "")];
    c.parent_condition("httproutes", INFRA, "on-it", name, &refused);
    status(&gw, "example.com", "/", &[], 404).await;
}

const INVALID_ROUTE_KIND: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: gateway-only-invalid-route-kind
  namespace: gateway-conformance-infra
  annotations: {gateway-api/skip-this-for-readiness: "true"}
spec:
  gatewayClassName: fairgate
  listeners:
    - {name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}, kinds: [{kind: InvalidRoute}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: gateway-supported-and-invalid-route-kind
  namespace: gateway-conformance-infra
  annotations: {gateway-api/skip-this-for-readiness: "true"}
spec:
  gatewayClassName: fairgate
  listeners:
    - {name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}, kinds: [{kind: InvalidRoute}, {kind: HTTPRoute}]}}
"#;

const INVALID_ROUTE_KINDS: (&str, &str, &str) = ("ResolvedRefs", "False", "InvalidRouteKinds");

/// GatewayInvalidRouteKind (`gateway-invalid-route-kind.go`).
#[tokio::test]
async fn gateway_invalid_route_kind() {
    let c = Conformance::start();
    c.apply(INVALID_ROUTE_KIND);
    let only = "gateway-only-invalid-route-kind";
    let both = "gateway-supported-and-invalid-route-kind";
    let _only = c.gateway(only).await;
    let _both = c.gateway(both).await;
    let none = Want {
        name: "http",
        kinds: &[],
        conditions: &[INVALID_ROUTE_KINDS],
        attached: 0,
    };
    must_have_listeners(&c, only, &[none]);
    let http = Want {
        name: "http",
        kinds: &["HTTPRoute"],
        conditions: &[INVALID_ROUTE_KINDS],
        attached: 0,
    };
    must_have_listeners(&c, both, &[http]);
}

/// The suite's four Gateways of `gateway-invalid-tls-configuration.yaml`:
/// name and certificateRef.
const INVALID_TLS: &[(&str, &str)] = &[
    (
        "gateway-certificate-nonexistent-secret",
        "{group: \"\", kind: Secret, name: nonexistent-certificate}",
    ),
    (
        "gateway-certificate-unsupported-group",
        "{group: wrong.group.company.io, kind: Secret, name: tls-validity-checks-certificate}",
    ),
    (
        "gateway-certificate-unsupported-kind",
        "{group: \"\", kind: WrongKind, name: tls-validity-checks-certificate}",
    ),
    (
        "gateway-certificate-malformed-secret",
        "{group: \"\", kind: Secret, name: malformed-certificate}",
    ),
];

/// The malformed Secret of that manifest: base64 of "Hello world\n" as
/// both certificate and key.
const MALFORMED: &str = r#"
apiVersion: v1
kind: Secret
metadata: {name: malformed-certificate, namespace: gateway-conformance-infra}
data: {tls.crt: SGVsbG8gd29ybGQK, tls.key: SGVsbG8gd29ybGQK}
type: kubernetes.io/tls
"#;

/// GatewayInvalidTLSConfiguration (`gateway-invalid-tls-configuration.go`).
#[tokio::test]
async fn gateway_invalid_tls_configuration() {
    let c = Conformance::start();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "conformance");
    suite_secrets(&c, &pki);
    let mut manifest = MALFORMED.to_string();
    for (name, reference) in INVALID_TLS {
        manifest.push_str(&format!(
            "---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata:\n  name: {name}\n  namespace: gateway-conformance-infra\n  annotations: {{gateway-api/skip-this-for-readiness: \"true\"}}\nspec:\n  gatewayClassName: fairgate\n  listeners:\n    - {{name: https, port: 443, protocol: HTTPS, allowedRoutes: {{namespaces: {{from: All}}}}, tls: {{certificateRefs: [{reference}]}}}}\n"
        ));
    }
    c.apply(&manifest);
    let mut gateways = Vec::new();
    for (name, _) in INVALID_TLS {
        gateways.push(serve_tls(&c, name, &pki).await);
    }
    for (name, _) in INVALID_TLS {
        let https = Want {
            name: "https",
            kinds: &["HTTPRoute"],
            conditions: &[("ResolvedRefs", "False", "InvalidCertificateRef")],
            attached: 0,
        };
        must_have_listeners(&c, name, &[https]);
    }
    drop(gateways);
}

const MODIFY_LISTENERS: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-add-listener, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: fairgate
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    hostname: "secure.test.com"
    allowedRoutes: {namespaces: {from: All}}
    tls:
      certificateRefs:
      - {group: "", kind: Secret, name: tls-validity-checks-certificate, namespace: gateway-conformance-infra}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: http-route-1, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{kind: Gateway, name: gateway-add-listener, namespace: gateway-conformance-infra}]
  rules: [{backendRefs: [{name: infra-backend-v1, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-remove-listener, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: fairgate
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    hostname: "secure.test.com"
    allowedRoutes: {namespaces: {from: All}}
    tls:
      certificateRefs:
      - {group: "", kind: Secret, name: tls-validity-checks-certificate, namespace: gateway-conformance-infra}
  - {name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: http-route-2, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{kind: Gateway, name: gateway-remove-listener, namespace: gateway-conformance-infra}]
  rules: [{backendRefs: [{name: infra-backend-v1, port: 8080}]}]
"#;

/// The listeners of GatewayModifyListeners after each patch: accepted,
/// resolved, the test's route attached to each.
const fn served(name: &'static str) -> Want {
    Want {
        name,
        kinds: &["HTTPRoute"],
        conditions: &[("Accepted", "True", ""), ("ResolvedRefs", "True", "")],
        attached: 1,
    }
}

/// GatewayModifyListeners (`gateway-modify-listeners.go`).
#[tokio::test]
async fn gateway_modify_listeners() {
    let c = Conformance::start();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "conformance");
    suite_secrets(&c, &pki);
    c.apply(MODIFY_LISTENERS);
    let (add, remove) = ("gateway-add-listener", "gateway-remove-listener");
    let _add = serve_tls(&c, add, &pki).await;
    let _remove = serve_tls(&c, remove, &pki).await;

    // A listener added is accepted and takes the route.
    ready(&c, &[add, remove]);
    let original = c.get("gateways", INFRA, add);
    let mut listeners = original["spec"]["listeners"].clone();
    let http = serde_json::json!({"name": "http", "port": 80, "protocol": "HTTP", "hostname": "data.test.com", "allowedRoutes": {"namespaces": {"from": "All"}}});
    listeners.as_array_mut().unwrap().push(http);
    merge_patch(
        &c,
        add,
        &serde_json::json!({"spec": {"listeners": listeners}}),
    );
    ready(&c, &[add]);
    let updated = must_have_listeners(&c, add, &[served("https"), served("http")]);
    assert_ne!(
        original["metadata"]["generation"],
        updated["metadata"]["generation"]
    );

    // A listener removed leaves the status.
    let original = c.get("gateways", INFRA, remove);
    let listeners = original["spec"]["listeners"].as_array().unwrap();
    assert_eq!(listeners.len(), 2, "the gateway must have 2 listeners");
    let kept: Vec<&Value> = listeners.iter().filter(|l| l["name"] == "http").collect();
    merge_patch(
        &c,
        remove,
        &serde_json::json!({"spec": {"listeners": kept}}),
    );
    ready(&c, &[remove]);
    let updated = must_have_listeners(&c, remove, &[served("http")]);
    assert_ne!(
        original["metadata"]["generation"],
        updated["metadata"]["generation"]
    );
}

/// GatewayNameMaximumLength (`gateway-name-maximum-length.go`): a Gateway
/// of the longest name Kubernetes takes (253).
#[tokio::test]
async fn gateway_name_maximum_length() {
    let prefix = "gateway-name-maximum-length-";
    let name = format!("{prefix}{}", "a".repeat(253 - prefix.len()));
    let c = Conformance::start();
    c.apply(&format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata:\n  name: {name}\n  namespace: gateway-conformance-infra\n  annotations: {{gateway-api/skip-this-for-readiness: \"true\"}}\nspec:\n  gatewayClassName: fairgate\n  listeners:\n    - {{name: http, port: 80, protocol: HTTP}}\n"
    ));
    let _gw = c.gateway(&name).await;
    c.gateway_status(&name, latest);
}

const OBSERVED_GENERATION_BUMP: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-observed-generation-bump, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: fairgate
  listeners:
    - {name: http, hostname: "bar.com", port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}
"#;

/// GatewayObservedGenerationBump (`gateway-observed-generation-bump.go`).
#[tokio::test]
async fn gateway_observed_generation_bump() {
    let c = Conformance::start();
    c.apply(OBSERVED_GENERATION_BUMP);
    let name = "gateway-observed-generation-bump";
    let _gw = c.gateway(name).await;
    ready(&c, &[name]);
    let original = c.get("gateways", INFRA, name);
    let mut listeners = original["spec"]["listeners"].clone();
    let alternate = serde_json::json!({"name": "alternate", "hostname": "foo.com", "port": 80, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}});
    listeners.as_array_mut().unwrap().push(alternate);
    merge_patch(
        &c,
        name,
        &serde_json::json!({"spec": {"listeners": listeners}}),
    );
    ready(&c, &[name]);
    let updated = c.gateway_status(name, latest);
    assert_ne!(
        original["metadata"]["generation"],
        updated["metadata"]["generation"]
    );
}

/// GatewayClassObservedGenerationBump
/// (`gatewayclass-observed-generation-bump.go`): a second GatewayClass of
/// the controller is reconciled too, at each generation.
#[tokio::test]
async fn gatewayclass_observed_generation_bump() {
    let c = Conformance::start();
    let name = "gatewayclass-observed-generation-bump";
    c.apply(&format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {{name: {name}}}\nspec: {{controllerName: {CONTROLLER}, description: old}}\n"
    ));
    let _gw = c.gateway("same-namespace").await;
    let class = || {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let out = kubectl(&c.kc, &["get", "gatewayclasses", name, "-o", "json"], None).unwrap();
            let class: Value = serde_json::from_str(&out).unwrap();
            if latest(&class) && find(&class["status"]["conditions"], ("Accepted", "", "")) {
                return class;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "GatewayClass {name}: {:#}",
                class["status"]
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    let original = class();
    let patch = r#"{"spec":{"description":"new"}}"#;
    kubectl(
        &c.kc,
        &[
            "patch",
            "gatewayclasses",
            name,
            "--type",
            "merge",
            "-p",
            patch,
        ],
        None,
    )
    .unwrap();
    let updated = class();
    assert_ne!(
        original["metadata"]["generation"],
        updated["metadata"]["generation"]
    );
    assert_eq!(updated["spec"]["description"], "new");
    // The features it supports, sorted by name as the spec asks (what
    // they are, scripts/conformance-report checks against its report).
    let features = updated["status"]["supportedFeatures"].as_array().unwrap();
    let names: Vec<&str> = features.iter().filter_map(|f| f["name"].as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
    for core in ["GRPCRoute", "Gateway", "HTTPRoute", "ReferenceGrant"] {
        assert!(names.contains(&core), "{names:?}");
    }
}
