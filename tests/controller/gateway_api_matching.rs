//! The Gateway API conformance suite's core HTTPRoute matching tests
//! (kubernetes-sigs/gateway-api `conformance/tests/httproute-*.go` and
//! their manifests), ported: the same manifests through `kubectl apply`,
//! the same requests, the same backends and statuses expected, each seen
//! three times in a row as the suite's roundtripper requires.

use crate::common;

use common::gateway_api::*;
use common::Gateway;

const ROUTES: &str = "httproutes";

/// Request headers, as (name, value).
type Headers<'a> = &'a [(&'a str, &'a str)];

const HTTPROUTE_SIMPLE_SAME_NAMESPACE: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: gateway-conformance-infra-test, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules: [{backendRefs: [{name: infra-backend-v1, port: 8080}]}]
"#;

#[tokio::test]
async fn httproute_simple_same_namespace() {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    c.apply(HTTPROUTE_SIMPLE_SAME_NAMESPACE);
    c.accepted(
        ROUTES,
        INFRA,
        "gateway-conformance-infra-test",
        "same-namespace",
        "True",
    );
    to(&gw, "example.com", "/", &[], "infra-backend-v1", INFRA).await;
}

const HTTPROUTE_CROSS_NAMESPACE: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: cross-namespace, namespace: gateway-conformance-web-backend}
spec:
  parentRefs: [{name: backend-namespaces, namespace: gateway-conformance-infra}]
  rules: [{backendRefs: [{name: web-backend, port: 8080}]}]
"#;

#[tokio::test]
async fn httproute_cross_namespace() {
    let c = Conformance::start();
    let gw = c.gateway("backend-namespaces").await;
    c.apply(HTTPROUTE_CROSS_NAMESPACE);
    c.accepted(ROUTES, WEB, "cross-namespace", "backend-namespaces", "True");
    to(&gw, "example.com", "/", &[], "web-backend", WEB).await;
}

const HTTPROUTE_EXACT_PATH_MATCHING: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: exact-matching, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: Exact, value: /one}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: Exact, value: /two}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
"#;

#[tokio::test]
async fn httproute_exact_path_matching() {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    c.apply(HTTPROUTE_EXACT_PATH_MATCHING);
    c.accepted(ROUTES, INFRA, "exact-matching", "same-namespace", "True");
    let h = "example.com";
    to(&gw, h, "/one", &[], "infra-backend-v1", INFRA).await;
    to(&gw, h, "/two", &[], "infra-backend-v2", INFRA).await;
    for path in ["/", "/one/example", "/two/", "/Two"] {
        status(&gw, h, path, &[], 404).await;
    }
}

const HEADER_MATCHING: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: header-matching, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{headers: [{name: version, value: one}]}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{headers: [{name: version, value: two}]}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches: [{headers: [{name: version, value: two}, {name: color, value: orange}]}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{headers: [{name: color, value: blue}]}, {headers: [{name: color, value: green}]}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{headers: [{name: color, value: red}]}, {headers: [{name: color, value: yellow}]}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
"#;

#[tokio::test]
async fn httproute_header_matching() {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    c.apply(HEADER_MATCHING);
    c.accepted(ROUTES, INFRA, "header-matching", "same-namespace", "True");
    let (h, v1, v2) = ("example.com", "infra-backend-v1", "infra-backend-v2");
    let cases: &[(&[(&str, &str)], &str)] = &[
        (&[("Version", "one")], v1),
        (&[("Version", "two")], v2),
        (&[("Version", "two"), ("Color", "orange")], v1),
        (&[("Version", "two"), ("Color", "blue")], v2),
        (&[("Color", "blue")], v1),
        (&[("Color", "green")], v1),
        (&[("Color", "red")], v2),
        (&[("Color", "yellow")], v2),
    ];
    for (headers, backend) in cases {
        to(&gw, h, "/", headers, backend, INFRA).await;
    }
    for headers in [
        [("Color", "orange")],
        [("Some-Other-Header", "one")],
        [("Color", "purple")],
    ] {
        status(&gw, h, "/", &headers, 404).await;
    }
}

const MATCHING: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: matching, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /}}, {headers: [{name: version, value: one}]}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /v2}}, {headers: [{name: version, value: two}]}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
"#;

#[tokio::test]
async fn httproute_matching() {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    c.apply(MATCHING);
    c.accepted(ROUTES, INFRA, "matching", "same-namespace", "True");
    let (h, v1, v2) = ("example.com", "infra-backend-v1", "infra-backend-v2");
    let cases: &[(&str, Headers, &str)] = &[
        ("/", &[], v1),
        ("/example", &[], v1),
        ("/", &[("Version", "one")], v1),
        ("/v2", &[], v2),
        ("/v2/example", &[], v2),
        ("/", &[("Version", "two")], v2),
        ("/v2/", &[], v2),
        ("/v2example", &[], v1),
        ("/foo/v2/example", &[], v1),
    ];
    for (path, headers, backend) in cases {
        to(&gw, h, path, headers, backend, INFRA).await;
    }
}

const HTTPROUTE_MATCHING_ACROSS_ROUTES: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: matching-part1, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  hostnames: [example.com, example.net]
  rules:
  - matches: [{path: {type: PathPrefix, value: /}}, {headers: [{name: version, value: one}]}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: matching-part2, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  hostnames: [example.com]
  rules:
  - matches: [{path: {type: PathPrefix, value: /v2}}, {headers: [{name: version, value: two}]}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
"#;

#[tokio::test]
async fn httproute_matching_across_routes() {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    c.apply(HTTPROUTE_MATCHING_ACROSS_ROUTES);
    c.accepted(ROUTES, INFRA, "matching-part1", "same-namespace", "True");
    c.accepted(ROUTES, INFRA, "matching-part2", "same-namespace", "True");
    let (v1, v2) = ("infra-backend-v1", "infra-backend-v2");
    let cases: &[(&str, &str, Headers, &str)] = &[
        ("example.com", "/", &[], v1),
        ("example.com", "/example", &[], v1),
        ("example.net", "/example", &[], v1),
        ("example.com", "/example", &[("Version", "one")], v1),
        ("example.com", "/v2", &[], v2),
        ("example.net", "/v2", &[], v1),
        ("example.com", "/v2/example", &[], v2),
        ("example.com", "/", &[("Version", "two")], v2),
    ];
    for (host, path, headers, backend) in cases {
        to(&gw, host, path, headers, backend, INFRA).await;
    }
}

const HTTPROUTE_PATH_MATCH_ORDER: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: path-matching-order, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: Exact, value: /match}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: Exact, value: /match/exact}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches: [{path: {type: Exact, value: /match/exact/one}}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /match/}}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /match/prefix/}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /match/prefix/one}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
"#;

#[tokio::test]
async fn httproute_path_match_order() {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    c.apply(HTTPROUTE_PATH_MATCH_ORDER);
    c.accepted(
        ROUTES,
        INFRA,
        "path-matching-order",
        "same-namespace",
        "True",
    );
    let cases = [
        ("/match/exact/one", "infra-backend-v3"),
        ("/match/exact", "infra-backend-v2"),
        ("/match", "infra-backend-v1"),
        ("/match/prefix/one/any", "infra-backend-v2"),
        ("/match/prefix/any", "infra-backend-v1"),
        ("/match/any", "infra-backend-v3"),
    ];
    for (path, backend) in cases {
        to(&gw, "example.com", path, &[], backend, INFRA).await;
    }
}

const HTTPROUTE_NO_BACKEND_REFS: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: omitted-backendrefs, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: Exact, value: /omitted-no-forward}}]
  - matches: [{path: {type: Exact, value: /empty-no-forward}}]
    backendRefs: []
  - matches: [{path: {type: PathPrefix, value: /}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
"#;

#[tokio::test]
async fn httproute_no_backend_refs() {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    c.apply(HTTPROUTE_NO_BACKEND_REFS);
    c.accepted(
        ROUTES,
        INFRA,
        "omitted-backendrefs",
        "same-namespace",
        "True",
    );
    to(
        &gw,
        "example.com",
        "/forward",
        &[],
        "infra-backend-v1",
        INFRA,
    )
    .await;
    status(&gw, "example.com", "/omitted-no-forward", &[], 500).await;
    status(&gw, "example.com", "/empty-no-forward", &[], 500).await;
}

const HTTPROUTE_MULTIPLE_GATEWAYS: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: multiple-gateways-shared-route, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}, {name: all-namespaces}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /shared}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: same-namespace-dedicated-route, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: all-namespaces-dedicated-route, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: all-namespaces}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /}}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
"#;

#[tokio::test]
async fn httproute_multiple_gateways() {
    let c = Conformance::start();
    let same = c.gateway("same-namespace").await;
    let all = c.gateway("all-namespaces").await;
    c.apply(HTTPROUTE_MULTIPLE_GATEWAYS);
    // Each Gateway's fairgate writes its own parent entry of the shared route.
    c.accepted(
        ROUTES,
        INFRA,
        "multiple-gateways-shared-route",
        "same-namespace",
        "True",
    );
    c.accepted(
        ROUTES,
        INFRA,
        "multiple-gateways-shared-route",
        "all-namespaces",
        "True",
    );
    c.accepted(
        ROUTES,
        INFRA,
        "same-namespace-dedicated-route",
        "same-namespace",
        "True",
    );
    c.accepted(
        ROUTES,
        INFRA,
        "all-namespaces-dedicated-route",
        "all-namespaces",
        "True",
    );
    to(
        &same,
        "example.com",
        "/shared",
        &[],
        "infra-backend-v1",
        INFRA,
    )
    .await;
    to(&same, "example.com", "/", &[], "infra-backend-v2", INFRA).await;
    to(
        &all,
        "example.com",
        "/shared",
        &[],
        "infra-backend-v1",
        INFRA,
    )
    .await;
    to(&all, "example.com", "/", &[], "infra-backend-v3", INFRA).await;
}

/// `method` of `path` with `headers` answered by `backend` (infra), or
/// with `status` when `backend` is "".
async fn by_method(
    gw: &Gateway,
    method: &str,
    path: &str,
    headers: Headers<'_>,
    backend: &str,
    status: u16,
) {
    let want = Expect {
        host: "example.com",
        path,
        headers,
        status,
        backend,
        namespace: if backend.is_empty() { "" } else { INFRA },
        method,
        ..Expect::default()
    };
    expect(gw, &want).await;
}

const HTTPROUTE_METHOD_MATCHING: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: method-matching, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{method: POST}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{method: GET}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /path1}, method: GET}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{headers: [{name: version, value: one}], method: PUT}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /path2}, headers: [{name: version, value: two}], method: POST}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches:
    - {path: {type: PathPrefix, value: /path3}, method: PATCH}
    - {path: {type: PathPrefix, value: /path4}, headers: [{name: version, value: three}], method: DELETE}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /path5}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{method: PATCH}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches: [{headers: [{name: version, value: four}]}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
"#;

/// HTTPRouteMethodMatching (extended: HTTPRouteMethodMatching),
/// `httproute-method-matching.go`.
#[tokio::test]
async fn httproute_method_matching() {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    c.apply(HTTPROUTE_METHOD_MATCHING);
    c.accepted(ROUTES, INFRA, "method-matching", "same-namespace", "True");
    let (v1, v2, v3) = ("infra-backend-v1", "infra-backend-v2", "infra-backend-v3");
    let cases: &[(&str, &str, Headers, &str, u16)] = &[
        ("POST", "/", &[], v1, 200),
        ("GET", "/", &[], v2, 200),
        ("HEAD", "/", &[], "", 404),
        ("GET", "/path1", &[], v1, 200),
        ("PUT", "/", &[("version", "one")], v2, 200),
        ("POST", "/path2", &[("version", "two")], v3, 200),
        ("PATCH", "/path3", &[], v1, 200),
        ("DELETE", "/path4", &[("version", "three")], v1, 200),
        ("PUT", "/", &[], "", 404),
        ("DELETE", "/path4", &[], "", 404),
        ("PATCH", "/path5", &[], v1, 200),
        ("PATCH", "/", &[("version", "four")], v2, 200),
    ];
    for (method, path, headers, backend, status) in cases {
        by_method(&gw, method, path, headers, backend, *status).await;
    }
}

const HTTPROUTE_QUERY_PARAM_MATCHING: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: query-param-matching, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{queryParams: [{name: animal, value: whale}]}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{queryParams: [{name: animal, value: dolphin}]}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches:
    - queryParams: [{name: animal, value: dolphin}, {name: color, value: blue}]
    - queryParams: [{name: ANIMAL, value: Whale}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /path1}, queryParams: [{name: animal, value: whale}]}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{headers: [{name: version, value: one}], queryParams: [{name: animal, value: whale}]}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /path2}, headers: [{name: version, value: two}], queryParams: [{name: animal, value: whale}]}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches:
    - {path: {type: PathPrefix, value: /path3}, queryParams: [{name: animal, value: shark}]}
    - {path: {type: PathPrefix, value: /path4}, headers: [{name: version, value: three}], queryParams: [{name: animal, value: kraken}]}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /path5}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{queryParams: [{name: animal, value: hydra}]}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches: [{headers: [{name: version, value: four}]}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
"#;

/// HTTPRouteQueryParamMatching (extended: HTTPRouteQueryParamMatching),
/// `httproute-query-param-matching.go`.
#[tokio::test]
async fn httproute_query_param_matching() {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    c.apply(HTTPROUTE_QUERY_PARAM_MATCHING);
    c.accepted(
        ROUTES,
        INFRA,
        "query-param-matching",
        "same-namespace",
        "True",
    );
    let (h, v1, v2, v3) = (
        "example.com",
        "infra-backend-v1",
        "infra-backend-v2",
        "infra-backend-v3",
    );
    let cases: &[(&str, Headers, &str)] = &[
        ("/?animal=whale", &[], v1),
        ("/?animal=dolphin", &[], v2),
        ("/?animal=dolphin&color=blue", &[], v3),
        ("/?ANIMAL=Whale", &[], v3),
        ("/?animal=whale&otherparam=irrelevant", &[], v1),
        ("/?animal=dolphin&color=yellow", &[], v2),
        ("/path1?animal=whale", &[], v1),
        ("/?animal=whale", &[("version", "one")], v2),
        ("/path2?animal=whale", &[("version", "two")], v3),
        ("/path3?animal=shark", &[], v1),
        ("/path4?animal=kraken", &[("version", "three")], v1),
        ("/path5?animal=hydra", &[], v1),
        ("/?animal=hydra", &[("version", "four")], v3),
    ];
    for (path, headers, backend) in cases {
        to(&gw, h, path, headers, backend, INFRA).await;
    }
    for path in [
        "/?color=blue",
        "/?animal=dog",
        "/?animal=whaledolphin",
        "/",
        "/?animal=shark",
        "/path4?animal=kraken",
    ] {
        status(&gw, h, path, &[], 404).await;
    }
}
