//! fairgate's own policy on Gateway API routes: a `RoutePolicy` named by
//! an `ExtensionRef` filter gives a rule the base policy's tenant limit,
//! which holds exactly across two replicas on one Redis, and exempts a
//! health rule, which never calls the store; status for accepted,
//! conflicting and broken routes read back with `kubectl get -o json`.

use crate::common;

use common::gateway_api::*;
use common::*;

const ROUTES: &str = "httproutes";

const POLICED: &str = r#"
apiVersion: fairgate.dev/v1alpha1
kind: RoutePolicy
metadata: {name: per-tenant, namespace: gateway-conformance-infra}
spec: {limits: [api], auth: required}
---
apiVersion: fairgate.dev/v1alpha1
kind: RoutePolicy
metadata: {name: probes, namespace: gateway-conformance-infra}
spec: {exempt: true, auth: none}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: policed, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: Exact, value: /healthz}}]
    filters: [{type: ExtensionRef, extensionRef: {group: fairgate.dev, kind: RoutePolicy, name: probes}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - filters: [{type: ExtensionRef, extensionRef: {group: fairgate.dev, kind: RoutePolicy, name: per-tenant}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
"#;

#[tokio::test]
async fn a_route_policy_limit_holds_exactly_across_two_gateways_and_an_exempt_rule_never_calls_the_store(
) {
    let c = Conformance::start();
    let redis = Redis::start().await;
    let store = format!("store: {{kind: redis, url: \"{}\"}}", redis.url());
    let extra = format!(
        "{AUTH_HS256}\nlimits:\n  api: {{scope: tenant, default: {{capacity: 20, rate: 1/h}}}}\n"
    );
    let a = c.gateway_with("same-namespace", &store, &extra, 0).await;
    let b = c.gateway_with("same-namespace", &store, &extra, 1).await;
    c.apply(POLICED);
    c.accepted(ROUTES, INFRA, "policed", "same-namespace", "True");
    for gw in [&a, &b] {
        status(gw, "example.com", "/healthz", &[], 200).await;
        status(gw, "example.com", "/", &[], 401).await;
    }

    let before = command_calls(redis.port, "evalsha") + command_calls(redis.port, "eval");
    for i in 0..200 {
        let gw = if i % 2 == 0 { &a } else { &b };
        assert_eq!(
            exchange(gw, "example.com", "/healthz", &[]).await.status,
            200
        );
    }
    let after = command_calls(redis.port, "evalsha") + command_calls(redis.port, "eval");
    assert_eq!(after, before, "the exempt rule called the store");

    let acme = format!("Bearer {}", token("acme"));
    let mut answered = std::collections::BTreeMap::new();
    for i in 0..60 {
        let gw = if i % 2 == 0 { &a } else { &b };
        let got = exchange(
            gw,
            "example.com",
            "/orders",
            &[("Authorization", acme.as_str())],
        )
        .await;
        *answered.entry(got.status).or_insert(0) += 1;
    }
    assert_eq!(
        answered.get(&200),
        Some(&20),
        "capacity 20 across both replicas: {answered:?}"
    );
    assert_eq!(answered.get(&429), Some(&40), "{answered:?}");
    let other = format!("Bearer {}", token("globex"));
    let got = exchange(
        &a,
        "example.com",
        "/orders",
        &[("Authorization", other.as_str())],
    )
    .await;
    assert_eq!(got.status, 200, "another tenant has its own bucket");
}

const ACCEPTED_CONFLICTING_AND_BROKEN_ROUTES_SAY_SO_IN_THEIR_STATUS: &str = r#"
apiVersion: fairgate.dev/v1alpha1
kind: RoutePolicy
metadata: {name: unknown-limit, namespace: gateway-conformance-infra}
spec: {limits: [no-such-limit]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: first, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules: [{matches: [{path: {type: PathPrefix, value: /shared}}], backendRefs: [{name: infra-backend-v1, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: second, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules: [{matches: [{path: {type: PathPrefix, value: /shared}}], backendRefs: [{name: infra-backend-v2, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: broken-policy, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /broken}}]
    filters: [{type: ExtensionRef, extensionRef: {group: fairgate.dev, kind: RoutePolicy, name: unknown-limit}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: mirror, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /mirror}}]
    filters: [{type: RequestMirror, requestMirror: {backendRef: {name: infra-backend-v2, port: 8080}, percent: 50}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
"#;

#[tokio::test]
async fn accepted_conflicting_and_broken_routes_say_so_in_their_status() {
    let c = Conformance::start();
    let gw = c
        .gateway_with(
            "same-namespace",
            "store: {kind: memory}",
            "limits:\n  api: {scope: client_ip, default: {capacity: 5, rate: 1/s}}\n",
            0,
        )
        .await;
    c.apply(ACCEPTED_CONFLICTING_AND_BROKEN_ROUTES_SAY_SO_IN_THEIR_STATUS);
    // Two routes claim the same match: both are accepted, the older one
    // (then the first by name) serves it, as the spec ranks them.
    c.accepted(ROUTES, INFRA, "first", "same-namespace", "True");
    c.accepted(ROUTES, INFRA, "second", "same-namespace", "True");
    to(
        &gw,
        "example.com",
        "/shared",
        &[],
        "infra-backend-v1",
        INFRA,
    )
    .await;
    // A limit the base policy lacks: the reader's refusal, on that route only.
    let broken = c.parent_condition(
        ROUTES,
        INFRA,
        "broken-policy",
        "same-namespace",
        &[("Accepted", "False", "UnsupportedValue")],
    );
    let message = broken["conditions"][0]["message"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(message.contains("no-such-limit"), "{broken:#}");
    status(&gw, "example.com", "/broken", &[], 404).await;
    // A filter fairgate does not serve as written: a mirror of half the
    // requests.
    let mirror = c.parent_condition(
        ROUTES,
        INFRA,
        "mirror",
        "same-namespace",
        &[("Accepted", "False", "UnsupportedValue")],
    );
    assert!(
        mirror.to_string().contains("RequestMirror of a share"),
        "{mirror:#}"
    );
    status(&gw, "example.com", "/mirror", &[], 404).await;
}

const A_ROUTE_REACHES_NEITHER_AN_EXTERNAL_NAME_SERVICE_NOR_PAST_ITS_HOSTNAME: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: elsewhere, namespace: gateway-conformance-infra}
spec: {type: ExternalName, externalName: localhost, ports: [{port: 9090}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: to-elsewhere, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  hostnames: [elsewhere.example]
  rules: [{backendRefs: [{name: elsewhere, port: 9090}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: shop, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  hostnames: [shop.example]
  rules: [{matches: [{path: {type: PathPrefix, value: /api}}], backendRefs: [{name: infra-backend-v1, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: catch-all, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules: [{backendRefs: [{name: infra-backend-v2, port: 8080}]}]
"#;

#[tokio::test]
async fn a_route_reaches_neither_an_external_name_service_nor_past_its_hostname() {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    c.apply(A_ROUTE_REACHES_NEITHER_AN_EXTERNAL_NAME_SERVICE_NOR_PAST_ITS_HOSTNAME);
    c.parent_condition(
        ROUTES,
        INFRA,
        "to-elsewhere",
        "same-namespace",
        &[
            ("Accepted", "True", "Accepted"),
            ("ResolvedRefs", "False", "UnsupportedValue"),
        ],
    );
    status(&gw, "elsewhere.example", "/metrics", &[], 500).await;
    c.accepted(ROUTES, INFRA, "shop", "same-namespace", "True");
    c.accepted(ROUTES, INFRA, "catch-all", "same-namespace", "True");
    to(
        &gw,
        "shop.example",
        "/api/orders",
        &[],
        "infra-backend-v1",
        INFRA,
    )
    .await;
    // The catch-all has any host, shop.example has a route of its own: a
    // path none of shop.example's routes take is 404 there, not the
    // catch-all's, as a proxy choosing the virtual host by name answers.
    status(&gw, "shop.example", "/login", &[], 404).await;
    to(
        &gw,
        "other.example",
        "/login",
        &[],
        "infra-backend-v2",
        INFRA,
    )
    .await;
}

const UNPOLICED: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: unpoliced, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - backendRefs: [{name: infra-backend-v1, port: 8080}]
"#;

/// Issue 39, item 2: a Gateway API route that no RoutePolicy limits spends
/// no limit, whatever the base's `default_limits` (which are for the base's
/// own routes): 50 quick requests from one address all answered, against
/// a base default of 5 a minute per address.
#[tokio::test]
async fn item_2_a_route_without_a_route_policy_spends_none_of_the_bases_default_limits() {
    let c = Conformance::start();
    let extra = "default_limits:\n  unauthenticated: {scope: client_ip, capacity: 5, rate: 5/m}\n";
    let gw = c
        .gateway_with("same-namespace", "store: {kind: memory}", extra, 0)
        .await;
    c.apply(UNPOLICED);
    c.accepted(ROUTES, INFRA, "unpoliced", "same-namespace", "True");
    let mut statuses = std::collections::BTreeMap::new();
    for _ in 0..50 {
        let answer = exchange(&gw, "example.com", "/", &[]).await.status;
        *statuses.entry(answer).or_insert(0) += 1;
    }
    assert_eq!(
        statuses.into_iter().collect::<Vec<_>>(),
        vec![(200u16, 50)],
        "{}",
        gw.logs()
    );
}
