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

use common::cluster::{kubectl, secret_for};
use common::gateway_api::*;
use common::{Gateway, Pki};
use serde_json::Value;

const GROUP: &str = "gateway.networking.k8s.io";

/// A listener's status as the suite expects it: its kinds (empty: none
/// at all), conditions `(type, status, reason)` (an empty reason: any),
/// attached routes.
struct Want {
    name: &'static str,
    kinds: &'static [&'static str],
    conditions: &'static [(&'static str, &'static str, &'static str)],
    attached: u64,
}

/// `ConditionsHaveLatestObservedGeneration` on the object's own
/// conditions. The CRD defaults them to `Unknown` at no generation, which
/// the stand-in does not, so none at all is not taken as current here.
fn latest(o: &Value) -> bool {
    let generation = &o["metadata"]["generation"];
    o["status"]["conditions"].as_array().is_some_and(|list| {
        !list.is_empty() && list.iter().all(|c| &c["observedGeneration"] == generation)
    })
}

/// `findConditionInList`: a condition of that type with that status and
/// (unless empty) reason.
fn find(conditions: &Value, want: (&str, &str, &str)) -> bool {
    let (kind, status, reason) = want;
    conditions.as_array().is_some_and(|list| {
        list.iter().any(|c| {
            c["type"] == kind
                && (status.is_empty() || c["status"] == status)
                && (reason.is_empty() || c["reason"] == reason)
        })
    })
}

/// `gatewayListenersMatch`: as many listeners as wanted, each by name
/// (in any order) with the kinds wanted (none when none are), the same
/// attached routes and the conditions wanted among its own.
fn listeners_match(gw: &Value, want: &[Want]) -> bool {
    let Some(got) = gw["status"]["listeners"].as_array() else {
        return false;
    };
    latest(gw)
        && got.len() == want.len()
        && want.iter().all(|w| {
            got.iter()
                .find(|l| l["name"] == w.name)
                .is_some_and(|l| listener_is(l, w))
        })
}

fn listener_is(l: &Value, w: &Want) -> bool {
    let kinds: Vec<(&str, &str)> = l["supportedKinds"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|k| {
            (
                k["group"].as_str().unwrap_or(GROUP),
                k["kind"].as_str().unwrap_or(""),
            )
        })
        .collect();
    let kinds_ok = match w.kinds.is_empty() {
        true => kinds.is_empty(),
        false => w.kinds.iter().all(|k| kinds.contains(&(GROUP, *k))),
    };
    kinds_ok
        && l["attachedRoutes"] == w.attached
        && w.conditions.iter().all(|c| find(&l["conditions"], *c))
}

/// `GatewayStatusMustHaveListeners`.
fn must_have_listeners(c: &Conformance, gateway: &str, want: &[Want]) -> Value {
    c.gateway_status(gateway, |g| listeners_match(g, want))
}

/// `GatewayMustHaveLatestConditions` and `GatewayMustHaveCondition`.
fn must_have_condition(c: &Conformance, gateway: &str, want: (&str, &str, &str)) -> Value {
    c.gateway_status(gateway, |g| {
        latest(g) && find(&g["status"]["conditions"], want)
    })
}

/// `NamespacesMustBeReady` for the Gateways the test serves: Accepted and
/// Programmed, at their generation.
fn ready(c: &Conformance, gateways: &[&str]) {
    for gateway in gateways {
        must_have_condition(c, gateway, ("Accepted", "True", ""));
        must_have_condition(c, gateway, ("Programmed", "True", ""));
    }
}

/// `client.Patch(ctx, mutate, client.MergeFrom(original))`: a JSON merge
/// patch of the Gateway.
fn merge_patch(c: &Conformance, gateway: &str, patch: &Value) {
    let patch = patch.to_string();
    let args = [
        "patch", "gateways", gateway, "-n", INFRA, "--type", "merge", "-p", &patch,
    ];
    kubectl(&c.kc, &args, None).unwrap_or_else(|e| panic!("kubectl patch {gateway}: {e}"));
}

/// A fairgate serving `gateway` with a TLS listener (its HTTPS listeners'
/// certificates are served there).
async fn serve_tls(c: &Conformance, gateway: &str, pki: &Pki) -> Gateway {
    let tls = common::free_addr();
    let (cert, key) = pki.leaf("default", "default", &["default.example"], "01");
    let base = format!(
        "server:\n  listen: [\"$LISTEN\"]\n  tls:\n    listen: \"{tls}\"\n    certificates:\n      - {{cert_file: {}, key_file: {}}}\nstore: {{kind: memory}}",
        cert.display(),
        key.display()
    );
    c.start_base(gateway, &base, 0).await
}

/// The suite's programmatic Secrets `infra/tls-validity-checks-certificate`
/// and `web-backend/certificate` (any valid pair: these tests read no
/// names from them).
fn suite_secrets(c: &Conformance, pki: &Pki) {
    let names = ["secure.test.com", "data.test.com"];
    c.api.apply(secret_for(
        pki,
        INFRA,
        "tls-validity-checks-certificate",
        &names,
        "02",
    ));
    c.api
        .apply(secret_for(pki, WEB, "certificate", &names, "03"));
}

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

/// The Gateway of the four GatewaySecret* tests: one HTTPS listener whose
/// certificate is `web-backend/certificate`.
fn secret_gateway(name: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {name}, namespace: gateway-conformance-infra}}\nspec:\n  gatewayClassName: fairgate\n  listeners:\n    - name: https\n      port: 443\n      protocol: HTTPS\n      allowedRoutes: {{namespaces: {{from: All}}}}\n      tls:\n        certificateRefs:\n          - {{group: \"\", kind: Secret, name: certificate, namespace: gateway-conformance-web-backend}}\n"
    )
}

/// A ReferenceGrant in `ns` from (group, kind, namespace) to (group,
/// kind, name: none for any). The suite writes them at `v1`, which the
/// standard CRD serves beside `v1beta1` (its storage version); the
/// stand-in serves `v1beta1`, the version fairgate watches.
fn grant(name: &str, ns: &str, from: (&str, &str, &str), to: (&str, &str, Option<&str>)) -> String {
    let to_name = to.2.map(|n| format!(", name: {n}")).unwrap_or_default();
    format!(
        "---\napiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  from: [{{group: \"{}\", kind: {}, namespace: {}}}]\n  to: [{{group: \"{}\", kind: {}{to_name}}}]\n",
        from.0, from.1, from.2, to.0, to.1
    )
}

const FROM_INFRA: (&str, &str, &str) = (GROUP, "Gateway", INFRA);
const REF_NOT_PERMITTED: Want = Want {
    name: "https",
    kinds: &["HTTPRoute"],
    conditions: &[("ResolvedRefs", "False", "RefNotPermitted")],
    attached: 0,
};
const PROGRAMMED: Want = Want {
    name: "https",
    kinds: &["HTTPRoute"],
    conditions: &[
        ("Programmed", "True", "Programmed"),
        ("ResolvedRefs", "True", ""),
    ],
    attached: 0,
};

/// Applies the Gateway `name` with `grants`, serves it, and waits for its
/// listener to be as `want`.
async fn secret_test(name: &str, grants: &str, want: Want) {
    let c = Conformance::start();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "conformance");
    suite_secrets(&c, &pki);
    c.apply(&format!("{}{grants}", secret_gateway(name)));
    let _gw = serve_tls(&c, name, &pki).await;
    must_have_listeners(&c, name, &[want]);
}

/// GatewaySecretMissingReferenceGrant
/// (`gateway-secret-missing-reference-grant.go`).
#[tokio::test]
async fn gateway_secret_missing_reference_grant() {
    secret_test(
        "gateway-secret-missing-reference-grant",
        "",
        REF_NOT_PERMITTED,
    )
    .await;
}

/// GatewaySecretInvalidReferenceGrant
/// (`gateway-secret-invalid-reference-grant.go`): seven grants, each
/// wrong in one place.
#[tokio::test]
async fn gateway_secret_invalid_reference_grant() {
    let secret = ("", "Secret", Some("certificate"));
    let grants = [
        grant("reference-grant-wrong-namespace", APP, FROM_INFRA, secret),
        grant(
            "reference-grant-wrong-from-group",
            WEB,
            ("not-the-group-youre-looking-for", "Gateway", INFRA),
            secret,
        ),
        grant(
            "reference-grant-wrong-from-kind",
            WEB,
            (GROUP, "HTTPRoute", INFRA),
            secret,
        ),
        grant(
            "reference-grant-wrong-from-namespace",
            WEB,
            (GROUP, "Gateway", "not-the-namespace-youre-looking-for"),
            secret,
        ),
        grant(
            "reference-grant-wrong-to-group",
            WEB,
            FROM_INFRA,
            (
                "not-the-group-youre-looking-for",
                "Secret",
                Some("not-the-certificate-youre-looking-for"),
            ),
        ),
        grant(
            "reference-grant-wrong-to-kind",
            WEB,
            FROM_INFRA,
            ("", "Service", Some("certificate")),
        ),
        grant(
            "reference-grant-wrong-to-name",
            WEB,
            FROM_INFRA,
            ("", "Secret", Some("not-the-certificate-youre-looking-for")),
        ),
    ];
    secret_test(
        "gateway-secret-invalid-reference-grant",
        &grants.concat(),
        REF_NOT_PERMITTED,
    )
    .await;
}

/// GatewaySecretReferenceGrantAllInNamespace
/// (`gateway-secret-reference-grant-all-in-namespace.go`).
#[tokio::test]
async fn gateway_secret_reference_grant_all_in_namespace() {
    let grants = grant(
        "reference-grant-all-in-namespace",
        WEB,
        FROM_INFRA,
        ("", "Secret", None),
    );
    secret_test(
        "gateway-secret-reference-grant-all-in-namespace",
        &grants,
        PROGRAMMED,
    )
    .await;
}

/// GatewaySecretReferenceGrantSpecific
/// (`gateway-secret-reference-grant-specific.go`).
#[tokio::test]
async fn gateway_secret_reference_grant_specific() {
    let grants = grant(
        "reference-grant-specific",
        WEB,
        FROM_INFRA,
        ("", "Secret", Some("certificate")),
    );
    secret_test(
        "gateway-secret-reference-grant-specific",
        &grants,
        PROGRAMMED,
    )
    .await;
}

/// Not a conformance test: a listener's Secret whose key is not its
/// certificate's (a half-rotated Secret, perhaps another team's through a
/// ReferenceGrant) is refused on that listener, as the build would refuse
/// it, and the Gateway's other listener and its route are served.
#[tokio::test]
async fn a_secret_whose_key_is_not_its_certificates_is_refused_on_its_listener_alone() {
    let c = Conformance::start();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "conformance");
    let (cert, _) = pki.leaf("a", "a", &["a.example"], "02");
    let (_, key) = pki.leaf("b", "b", &["b.example"], "03");
    let read = |p: std::path::PathBuf| std::fs::read(p).unwrap();
    c.api.apply(common::cluster::tls_secret(
        INFRA,
        "mixed",
        &read(cert),
        &read(key),
    ));
    let name = "gateway-mixed-secret";
    c.apply(&format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {name}, namespace: gateway-conformance-infra}}\nspec:\n  gatewayClassName: fairgate\n  listeners:\n    - {{name: https, port: 443, protocol: HTTPS, tls: {{certificateRefs: [{{name: mixed}}]}}}}\n    - {{name: http, port: 80, protocol: HTTP}}\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: plain, namespace: gateway-conformance-infra}}\nspec:\n  parentRefs: [{{name: {name}, sectionName: http}}]\n  rules: [{{backendRefs: [{{name: infra-backend-v1, port: 8080}}]}}]\n"
    ));
    let gw = serve_tls(&c, name, &pki).await;
    let refused = Want {
        name: "https",
        kinds: &["HTTPRoute"],
        conditions: &[
            ("ResolvedRefs", "False", "InvalidCertificateRef"),
            ("Programmed", "False", ""),
        ],
        attached: 0,
    };
    let http = Want {
        name: "http",
        kinds: &["HTTPRoute"],
        conditions: &[
            ("Accepted", "True", ""),
            ("ResolvedRefs", "True", ""),
            ("Programmed", "True", ""),
        ],
        attached: 1,
    };
    let status = must_have_listeners(&c, name, &[refused, http]);
    let https = status["status"]["listeners"].to_string();
    assert!(https.contains("key"), "the message says why: {https}");
    to(&gw, "example.com", "/", &[], "infra-backend-v1", INFRA).await;
}
