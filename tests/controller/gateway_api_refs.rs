//! The Gateway API conformance suite's core reference tests: invalid
//! backendRefs and parentRefs, ReferenceGrants (and a grant deleted), a
//! route partly invalid, Service types behind EndpointSlices, and
//! `observedGeneration` following the route's generation; ported with the
//! same manifests through `kubectl`, status read back with `kubectl get -o
//! json`.

use crate::common;

use common::gateway_api::*;
use serde_json::Value;

const ROUTES: &str = "httproutes";

const HTTPROUTE_INVALID_BACKENDREF_UNKNOWN_KIND: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: invalid-backend-ref-unknown-kind, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - backendRefs: [{group: unknownkind.example.com, kind: NonExistent, name: infra-backend-v1, port: 8080}]
"#;

#[tokio::test]
async fn httproute_invalid_backendref_unknown_kind() {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    c.apply(HTTPROUTE_INVALID_BACKENDREF_UNKNOWN_KIND);
    c.parent_condition(
        ROUTES,
        INFRA,
        "invalid-backend-ref-unknown-kind",
        "same-namespace",
        &[
            ("Accepted", "True", "Accepted"),
            ("ResolvedRefs", "False", "InvalidKind"),
        ],
    );
    status(&gw, "example.com", "/v2", &[], 500).await;
}

const HTTPROUTE_INVALID_CROSS_NAMESPACE_BACKEND_REF: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: invalid-cross-namespace-backend-ref, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - backendRefs: [{name: web-backend, namespace: gateway-conformance-web-backend, port: 8080}]
"#;

#[tokio::test]
async fn httproute_invalid_cross_namespace_backend_ref() {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    c.apply(HTTPROUTE_INVALID_CROSS_NAMESPACE_BACKEND_REF);
    c.parent_condition(
        ROUTES,
        INFRA,
        "invalid-cross-namespace-backend-ref",
        "same-namespace",
        &[
            ("Accepted", "True", "Accepted"),
            ("ResolvedRefs", "False", "RefNotPermitted"),
        ],
    );
    status(&gw, "example.com", "/", &[], 500).await;
}

const HTTPROUTE_INVALID_CROSS_NAMESPACE_PARENT_REF: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: invalid-cross-namespace-parent-ref, namespace: gateway-conformance-web-backend}
spec:
  parentRefs: [{name: same-namespace, namespace: gateway-conformance-infra}]
  rules: [{backendRefs: [{name: web-backend, port: 8080}]}]
"#;

#[tokio::test]
async fn httproute_invalid_cross_namespace_parent_ref() {
    let c = Conformance::start();
    let _gw = c.gateway("same-namespace").await;
    c.apply(HTTPROUTE_INVALID_CROSS_NAMESPACE_PARENT_REF);
    let entry = c.parent_condition(
        ROUTES,
        WEB,
        "invalid-cross-namespace-parent-ref",
        "same-namespace",
        &[
            ("ResolvedRefs", "True", "ResolvedRefs"),
            ("Accepted", "False", "NotAllowedByListeners"),
        ],
    );
    let route = c.get(ROUTES, WEB, "invalid-cross-namespace-parent-ref");
    assert_eq!(
        route["status"]["parents"].as_array().unwrap().len(),
        1,
        "{entry:#}"
    );
    zero_routes(&c, "same-namespace");
}

/// `GatewayMustHaveZeroRoutes`: one listener, nothing attached.
fn zero_routes(c: &Conformance, gateway: &str) {
    let gw = c.gateway_status(gateway, |g| listener(g, "http").is_some());
    let listeners = gw["status"]["listeners"].as_array().unwrap();
    assert_eq!(listeners.len(), 1, "{gw:#}");
    assert_eq!(listeners[0]["attachedRoutes"], 0, "{gw:#}");
}

const HTTPROUTE_INVALID_NONEXISTENT_BACKENDREF: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: invalid-nonexistent-backend-ref, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - backendRefs: [{name: nonexistent, namespace: gateway-conformance-infra, port: 8080}]
"#;

#[tokio::test]
async fn httproute_invalid_nonexistent_backendref() {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    c.apply(HTTPROUTE_INVALID_NONEXISTENT_BACKENDREF);
    c.parent_condition(
        ROUTES,
        INFRA,
        "invalid-nonexistent-backend-ref",
        "same-namespace",
        &[
            ("Accepted", "True", "Accepted"),
            ("ResolvedRefs", "False", "BackendNotFound"),
        ],
    );
    status(&gw, "example.com", "/", &[], 500).await;
}

const HTTPROUTE_INVALID_PARENTREF_NOT_MATCHING_SECTION_NAME: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: httproute-listener-not-matching-section-name, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace, namespace: gateway-conformance-infra, port: 80, sectionName: http1}]
  rules: [{backendRefs: [{name: infra-backend-v1, kind: Service, port: 8080}]}]
"#;

#[tokio::test]
async fn httproute_invalid_parentref_not_matching_section_name() {
    let c = Conformance::start();
    let _gw = c.gateway("same-namespace").await;
    c.apply(HTTPROUTE_INVALID_PARENTREF_NOT_MATCHING_SECTION_NAME);
    c.parent_condition(
        ROUTES,
        INFRA,
        "httproute-listener-not-matching-section-name",
        "same-namespace",
        &[("Accepted", "False", "NoMatchingParent")],
    );
    zero_routes(&c, "same-namespace");
}

const CROSS_ROUTE: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: reference-grant, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - backendRefs: [{name: web-backend, namespace: gateway-conformance-web-backend, port: 8080}]
"#;

/// A ReferenceGrant in `ns` from `(group, kind, namespace)` to `(group, kind, name)`.
fn grant(name: &str, ns: &str, from: (&str, &str, &str), to: (&str, &str, &str)) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         spec:\n  from: [{{group: \"{}\", kind: {}, namespace: {}}}]\n  to: [{{group: \"{}\", kind: {}, name: {}}}]\n---\n",
        from.0, from.1, from.2, to.0, to.1, to.2
    )
}

#[tokio::test]
async fn httproute_invalid_reference_grant() {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    let (g, route) = ("gateway.networking.k8s.io", "HTTPRoute");
    let svc = ("", "Service", "web-backend");
    let grants = [
        grant(
            "reference-grant-wrong-namespace",
            INFRA,
            (g, route, INFRA),
            svc,
        ),
        grant(
            "reference-grant-wrong-from-group",
            WEB,
            ("not-the-group-youre-looking-for", route, INFRA),
            svc,
        ),
        grant(
            "reference-grant-wrong-from-kind",
            WEB,
            (g, "Gateway", INFRA),
            svc,
        ),
        grant(
            "reference-grant-wrong-from-namespace",
            WEB,
            (g, route, "not-the-namespace-youre-looking-for"),
            svc,
        ),
        grant(
            "reference-grant-wrong-to-group",
            WEB,
            (g, route, INFRA),
            ("not-the-group-youre-looking-for", "Service", "web-backend"),
        ),
        grant(
            "reference-grant-wrong-to-kind",
            WEB,
            (g, route, INFRA),
            ("", "Secret", "web-backend"),
        ),
        grant(
            "reference-grant-wrong-to-name",
            WEB,
            (g, route, INFRA),
            ("", "Secret", "not-the-service-youre-looking-for"),
        ),
    ];
    c.apply(&format!("{}{CROSS_ROUTE}", grants.concat()));
    c.parent_condition(
        ROUTES,
        INFRA,
        "reference-grant",
        "same-namespace",
        &[
            ("Accepted", "True", "Accepted"),
            ("ResolvedRefs", "False", "RefNotPermitted"),
        ],
    );
    status(&gw, "example.com", "/", &[], 500).await;
}

#[tokio::test]
async fn httproute_reference_grant() {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    let grant = grant(
        "reference-grant",
        WEB,
        ("gateway.networking.k8s.io", "HTTPRoute", INFRA),
        ("", "Service", "web-backend"),
    );
    c.apply(&format!("{grant}{CROSS_ROUTE}"));
    c.accepted(ROUTES, INFRA, "reference-grant", "same-namespace", "True");
    to(&gw, "example.com", "/", &[], "web-backend", WEB).await;
    c.delete("referencegrants", WEB, "reference-grant");
    status(&gw, "example.com", "/", &[], 500).await;
}

#[tokio::test]
async fn httproute_partially_invalid_via_invalid_reference_grant() {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    let grant = grant(
        "invalid-reference-grant",
        APP,
        ("gateway.networking.k8s.io", "HTTPRoute", INFRA),
        ("", "Service", "app-backend-v1"),
    );
    c.apply(&format!(
        "{grant}{}",
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: invalid-reference-grant, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /v2}}]
    backendRefs: [{name: app-backend-v2, namespace: gateway-conformance-app-backend, port: 8080}]
  - backendRefs: [{name: app-backend-v1, namespace: gateway-conformance-app-backend, port: 8080}]
"#
    ));
    c.parent_condition(
        ROUTES,
        INFRA,
        "invalid-reference-grant",
        "same-namespace",
        &[
            ("Accepted", "True", "Accepted"),
            ("ResolvedRefs", "False", "RefNotPermitted"),
        ],
    );
    status(&gw, "example.com", "/v2", &[], 500).await;
    to(&gw, "example.com", "/", &[], "app-backend-v1", APP).await;
}

const HTTPROUTE_OBSERVED_GENERATION_BUMP: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: observed-generation-bump, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules: [{backendRefs: [{name: infra-backend-v1, port: 8080}]}]
"#;

#[tokio::test]
async fn httproute_observed_generation_bump() {
    let c = Conformance::start();
    let _gw = c.gateway("same-namespace").await;
    c.apply(HTTPROUTE_OBSERVED_GENERATION_BUMP);
    let before = c.accepted(
        ROUTES,
        INFRA,
        "observed-generation-bump",
        "same-namespace",
        "True",
    );
    // Transition times have a resolution of a second: let one pass, so a
    // condition written again would show a new time.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let generation =
        c.get(ROUTES, INFRA, "observed-generation-bump")["metadata"]["generation"].clone();
    let patch = r#"{"spec":{"rules":[{"backendRefs":[{"name":"infra-backend-v2","port":8080}]}]}}"#;
    common::cluster::kubectl(
        &c.kc,
        &[
            "patch",
            ROUTES,
            "observed-generation-bump",
            "-n",
            INFRA,
            "--type=merge",
            "-p",
            patch,
        ],
        None,
    )
    .expect("kubectl patch");
    let after = c.accepted(
        ROUTES,
        INFRA,
        "observed-generation-bump",
        "same-namespace",
        "True",
    );
    let bumped = c.get(ROUTES, INFRA, "observed-generation-bump")["metadata"]["generation"].clone();
    assert_ne!(bumped, generation, "the generation did not change");
    for entry in [&before, &after] {
        let seen: Vec<&Value> = entry["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| &c["observedGeneration"])
            .collect();
        assert!(!seen.is_empty());
    }
    let accepted_at = |entry: &Value| {
        entry["conditions"]
            .as_array()
            .and_then(|l| l.iter().find(|c| c["type"] == "Accepted"))
            .map(|c| c["lastTransitionTime"].clone())
    };
    assert_eq!(
        accepted_at(&after),
        accepted_at(&before),
        "Accepted stayed True: its transition time stays"
    );
    assert!(
        after["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["observedGeneration"] == bumped),
        "{after:#}"
    );
}

/// The suite's Services without a selector and headless ones, their
/// EndpointSlices empty, and the route to each.
fn service_types_manifests() -> String {
    let mut manifests = String::new();
    for (svc, headless, selector) in [
        ("manual-endpointslices", false, false),
        ("headless", true, true),
        ("headless-manual-endpointslices", true, false),
    ] {
        let cluster_ip = if headless { "\n  clusterIP: None" } else { "" };
        let select = if selector {
            "\n  selector: {app: infra-backend-v1}"
        } else {
            ""
        };
        manifests.push_str(&format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {svc}, namespace: {INFRA}}}\nspec:{cluster_ip}{select}\n  ports: [{{name: first-port, protocol: TCP, port: 8080, targetPort: 3000}}]\n---\n\
             apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {svc}-ip4, namespace: {INFRA}, labels: {{kubernetes.io/service-name: {svc}}}}}\n\
             addressType: IPv4\nports: [{{name: first-port, port: 3000, protocol: TCP}}]\nendpoints: []\n---\n"
        ));
    }
    manifests.push_str(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: service-types, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: Exact, value: /manual-endpointslices}}]
    backendRefs: [{name: manual-endpointslices, port: 8080}]
  - matches: [{path: {type: Exact, value: /headless}}]
    backendRefs: [{name: headless, port: 8080}]
  - matches: [{path: {type: Exact, value: /headless-manual-endpointslices}}]
    backendRefs: [{name: headless-manual-endpointslices, port: 8080}]
"#,
    );
    manifests
}

#[tokio::test]
async fn httproute_service_types() {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    // The Services with no selector and the headless ones of the suite,
    // their EndpointSlices empty until the test fills them in.
    let infra_v1 = c
        .api
        .list("discovery.k8s.io/v1/endpointslices", INFRA)
        .into_iter()
        .find(|s| s["metadata"]["labels"]["kubernetes.io/service-name"] == "infra-backend-v1")
        .expect("the slice of infra-backend-v1");
    let ip = infra_v1["endpoints"][0]["addresses"][0]
        .as_str()
        .unwrap()
        .to_string();
    let port = infra_v1["ports"][0]["port"].as_u64().unwrap();
    let manifests = service_types_manifests();
    c.apply(&manifests);
    c.accepted(ROUTES, INFRA, "service-types", "same-namespace", "True");
    // The suite patches the slices with the pods' addresses.
    for svc in [
        "manual-endpointslices",
        "headless",
        "headless-manual-endpointslices",
    ] {
        let patch = format!(
            r#"{{"ports":[{{"name":"first-port","port":{port},"protocol":"TCP"}}],"endpoints":[{{"addresses":["{ip}"],"conditions":{{"ready":true,"serving":true}}}}]}}"#
        );
        common::cluster::kubectl(
            &c.kc,
            &[
                "patch",
                "endpointslices",
                &format!("{svc}-ip4"),
                "-n",
                INFRA,
                "--type=merge",
                "-p",
                &patch,
            ],
            None,
        )
        .expect("kubectl patch");
    }
    for path in [
        "/manual-endpointslices",
        "/headless",
        "/headless-manual-endpointslices",
    ] {
        to(&gw, "example.com", path, &[], "infra-backend-v1", INFRA).await;
    }
}

const LEAVING: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: leaving, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules: [{backendRefs: [{name: infra-backend-v1, port: 8080}]}]
"#;

#[tokio::test]
async fn a_route_that_leaves_the_gateway_loses_its_parent_entry() {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    c.apply(LEAVING);
    c.accepted(ROUTES, INFRA, "leaving", "same-namespace", "True");
    to(&gw, "example.com", "/", &[], "infra-backend-v1", INFRA).await;
    let patch = r#"{"spec":{"parentRefs":[{"name":"all-namespaces"}]}}"#;
    common::cluster::kubectl(
        &c.kc,
        &[
            "patch",
            ROUTES,
            "leaving",
            "-n",
            INFRA,
            "--type=merge",
            "-p",
            patch,
        ],
        None,
    )
    .expect("kubectl patch");
    status(&gw, "example.com", "/", &[], 404).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let route = c.get(ROUTES, INFRA, "leaving");
        if parent_entry(&route, "same-namespace").is_none() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the entry for same-namespace stayed: {:#}",
            route["status"]
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}
