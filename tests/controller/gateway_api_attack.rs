//! The Gateway API translation attacked as a hostile route author would:
//! strings that would break the YAML fairgate builds its policy from
//! (quotes, `: `, `#`, braces, anchors, aliases, tags) never fail the whole
//! build and are served literally or refused on their own route alone
//! (those the CRDs' schemas refuse are refused by the API server first); a
//! catch-all route of another namespace never answers for a hostname some
//! route names, in any spelling of it; a `RequestHeaderModifier` `set` or
//! `remove` leaves no client-sent copy of the header, in any case; a
//! `RoutePolicy` can name only the base policy file's own limits and auth
//! methods; a ReferenceGrant lets through exactly the kind and namespace
//! it names. Status read back with `kubectl get -o json`.

use crate::common;

use std::time::{Duration, Instant};

use common::gateway_api::*;
use common::Gateway;
use serde_json::Value;

const ROUTES: &str = "httproutes";
const GRPC_ROUTES: &str = "grpcroutes";

/// The header the hostile route matches on: every character is a valid
/// header-name character (tchar), and YAML-breaking.
const HOSTILE_NAME: &str = "x-&a*b#c!!d|~";
/// The value it matches exactly: a mapping, a comment, a flow mapping, an
/// anchor, an alias, a tag and quotes, were it not quoted.
const HOSTILE_VALUE: &str = "a: b # c {d} &anchor *alias !!tag \"q\" 's \\ e";
/// What its `RequestHeaderModifier` sets (no braces, which fairgate would
/// read as a template and so refuses).
const HOSTILE_SET: &str = "a: b # c &anchor *alias !!str \"q\" 's \\ [x] -y";

const HOSTILE_STRINGS: &str = r##"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: innocent, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: all-namespaces}]
  hostnames: [innocent.example]
  rules: [{backendRefs: [{name: infra-backend-v2, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: hostile-literal, namespace: gateway-conformance-app-backend}
spec:
  parentRefs: [{name: all-namespaces, namespace: gateway-conformance-infra}]
  hostnames: [hostile.example]
  rules:
  - matches:
    - path: {type: PathPrefix, value: /hostile}
      headers: [{name: 'x-&a*b#c!!d|~', value: 'a: b # c {d} &anchor *alias !!tag "q" ''s \ e'}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{name: X-Echo-Hostile, value: 'a: b # c &anchor *alias !!str "q" ''s \ [x] -y'}]
    backendRefs: [{name: app-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: hostile-braces, namespace: gateway-conformance-app-backend}
spec:
  parentRefs: [{name: all-namespaces, namespace: gateway-conformance-infra}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /braces}}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{name: X-Tenant, value: '{tenant}'}]
        add: [{name: X-Evil, value: '}{ &x *x !!map'}]
    backendRefs: [{name: app-backend-v2, port: 8080}]
"##;

/// What the CRDs' schemas refuse before fairgate sees it: a header name no
/// HTTP message can carry, braces in a path, an uppercase hostname.
const REFUSED_STRINGS: &str = r##"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: hostile-name, namespace: gateway-conformance-app-backend}
spec:
  parentRefs: [{name: all-namespaces, namespace: gateway-conformance-infra}]
  rules:
  - matches:
    - path: {type: PathPrefix, value: /names}
      headers: [{name: 'X-Evil: yes # {no}', value: '*alias'}]
    backendRefs: [{name: app-backend-v2, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: hostile-path, namespace: gateway-conformance-app-backend}
spec:
  parentRefs: [{name: all-namespaces, namespace: gateway-conformance-infra}]
  hostnames: [Hostile.EXAMPLE]
  rules:
  - matches: [{path: {type: Exact, value: '/a{b}'}}]
    backendRefs: [{name: app-backend-v1, port: 8080}]
"##;

#[tokio::test]
async fn hostile_strings_are_served_literally_or_refused_alone_never_failing_the_build() {
    let c = Conformance::start();
    let gw = c.gateway("all-namespaces").await;
    c.apply(HOSTILE_STRINGS);
    c.accepted(ROUTES, INFRA, "innocent", "all-namespaces", "True");
    innocent(&gw).await;
    // Braces in a header modifier's value: the documented refusal.
    let braces = c.parent_condition(
        ROUTES,
        APP,
        "hostile-braces",
        "all-namespaces",
        &[("Accepted", "False", "UnsupportedValue")],
    );
    let why = condition(&braces, "Accepted");
    assert!(
        why["message"].as_str().unwrap_or("").contains('{'),
        "{braces:#}"
    );
    status(&gw, "other.example", "/braces", &[], 404).await;
    // The API server refuses the rest, each field named, in the CRDs' words.
    let refused = c.refused(REFUSED_STRINGS);
    for field in [
        "spec.rules[0].matches[0].headers[0].name in body should match",
        "spec.hostnames[0] in body should match",
        "spec.rules[0].matches[0].path: Invalid value: \"object\": must only contain valid characters",
    ] {
        assert!(refused.contains(field), "{field}: {refused}");
    }
    hostile_literal(&c, &gw).await;
    innocent(&gw).await;
}

/// The innocent route of another namespace, served from its backend.
async fn innocent(gw: &Gateway) {
    to(gw, "innocent.example", "/", &[], "infra-backend-v2", INFRA).await;
}

/// The route whose strings are all servable: served literally, or (if
/// fairgate refuses it) refused with its own Accepted False; either way
/// its parent entry for `all-namespaces` says which.
async fn hostile_literal(c: &Conformance, gw: &Gateway) {
    c.parent_condition(
        ROUTES,
        APP,
        "hostile-literal",
        "all-namespaces",
        &[("Accepted", "", "")],
    );
    let route = c.get(ROUTES, APP, "hostile-literal");
    let entry = parent_entry(&route, "all-namespaces")
        .unwrap_or_else(|| panic!("no parent entry for all-namespaces:\n{:#}", route["status"]));
    let accepted = condition(&entry, "Accepted");
    let matching = [(HOSTILE_NAME, HOSTILE_VALUE)];
    if accepted["status"] != "True" {
        assert_eq!(accepted["status"], "False", "{entry:#}");
        assert_eq!(accepted["reason"], "UnsupportedValue", "{entry:#}");
        status(gw, "hostile.example", "/hostile", &matching, 404).await;
        return;
    }
    let got = to(
        gw,
        "hostile.example",
        "/hostile",
        &matching,
        "app-backend-v1",
        APP,
    )
    .await;
    assert_eq!(
        got.headers.get("x-echo-hostile").map(String::as_str),
        Some(HOSTILE_SET),
        "{got:?}"
    );
    // A hostname is matched without case.
    to(
        gw,
        "HOSTILE.example",
        "/hostile",
        &matching,
        "app-backend-v1",
        APP,
    )
    .await;
    // The match is exact: a part of the value, or none, is not it.
    status(
        gw,
        "hostile.example",
        "/hostile",
        &[(HOSTILE_NAME, "a: b")],
        404,
    )
    .await;
    status(gw, "hostile.example", "/hostile", &[], 404).await;
}

/// The condition of `kind` in a parent entry (Null when absent).
fn condition(entry: &Value, kind: &str) -> Value {
    entry["conditions"]
        .as_array()
        .and_then(|list| list.iter().find(|c| c["type"] == kind))
        .cloned()
        .unwrap_or(Value::Null)
}

const CATCH_ALL: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: shop, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: all-namespaces}]
  hostnames: [shop.example]
  rules: [{matches: [{path: {type: PathPrefix, value: /api}}], backendRefs: [{name: infra-backend-v1, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: catch-all, namespace: gateway-conformance-app-backend}
spec:
  parentRefs: [{name: all-namespaces, namespace: gateway-conformance-infra}]
  rules: [{matches: [{path: {type: PathPrefix, value: /}}], backendRefs: [{name: app-backend-v1, port: 8080}]}]
"#;

#[tokio::test]
async fn another_namespaces_catch_all_never_answers_for_a_named_hostname() {
    let c = Conformance::start();
    let gw = c.gateway("all-namespaces").await;
    c.apply(CATCH_ALL);
    c.accepted(ROUTES, INFRA, "shop", "all-namespaces", "True");
    c.accepted(ROUTES, APP, "catch-all", "all-namespaces", "True");
    to(
        &gw,
        "shop.example",
        "/api/x",
        &[],
        "infra-backend-v1",
        INFRA,
    )
    .await;
    to(
        &gw,
        "Shop.Example",
        "/api/x",
        &[],
        "infra-backend-v1",
        INFRA,
    )
    .await;
    to(&gw, "other.example", "/admin", &[], "app-backend-v1", APP).await;
    // shop.example is its routes': what they do not match is 404 there,
    // however the Host spells the name.
    for host in [
        "shop.example",
        "SHOP.EXAMPLE",
        "shop.example.",
        "shop.example:80",
    ] {
        status(&gw, host, "/admin", &[], 404).await;
    }
    // A prefix is whole segments: /apix is not under /api.
    status(&gw, "shop.example", "/apix", &[], 404).await;
    to(&gw, "other.example", "/apix", &[], "app-backend-v1", APP).await;
}

const HEADER_OVERRIDE: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: header-override, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /role}}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{name: X-Tenant-Role, value: viewer}]
        remove: [X-Internal-Token]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
"#;

#[tokio::test]
async fn a_set_or_removed_header_reaches_the_backend_in_no_client_spelling() {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    c.apply(HEADER_OVERRIDE);
    c.accepted(ROUTES, INFRA, "header-override", "same-namespace", "True");
    let sent: [&[(&str, &str)]; 3] = [
        &[],
        &[("X-Tenant-Role", "admin")],
        &[
            ("X-Tenant-Role", "admin"),
            ("x-tenant-role", "admin"),
            ("X-INTERNAL-TOKEN", "t1"),
            ("x-internal-token", "t2"),
            ("x-Internal-Token", "t3"),
        ],
    ];
    for headers in sent {
        let got = to(
            &gw,
            "example.com",
            "/role",
            headers,
            "infra-backend-v1",
            INFRA,
        )
        .await;
        assert_eq!(
            got.headers.get("x-tenant-role").map(String::as_str),
            Some("viewer"),
            "sent {headers:?}, the backend got {:?}",
            got.headers
        );
        assert!(
            !got.headers.contains_key("x-internal-token"),
            "sent {headers:?}, the backend got {:?}",
            got.headers
        );
    }
}

const FOREIGN_NAMES: &str = r#"
apiVersion: fairgate.dev/v1alpha1
kind: RoutePolicy
metadata: {name: limited, namespace: gateway-conformance-app-backend}
spec: {limits: [api]}
---
apiVersion: fairgate.dev/v1alpha1
kind: RoutePolicy
metadata: {name: foreign-auth, namespace: gateway-conformance-app-backend}
spec: {auth: some-other-method}
---
apiVersion: fairgate.dev/v1alpha1
kind: RoutePolicy
metadata: {name: foreign-limit, namespace: gateway-conformance-app-backend}
spec: {limits: [api, not-in-the-base]}
---
apiVersion: fairgate.dev/v1alpha1
kind: RoutePolicy
metadata: {name: infra-only, namespace: gateway-conformance-infra}
spec: {exempt: true, auth: none}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: route-x, namespace: gateway-conformance-app-backend}
spec:
  parentRefs: [{name: all-namespaces, namespace: gateway-conformance-infra}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /x}}]
    filters: [{type: ExtensionRef, extensionRef: {group: fairgate.dev, kind: RoutePolicy, name: limited}}]
    backendRefs: [{name: app-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: route-y, namespace: gateway-conformance-app-backend}
spec:
  parentRefs: [{name: all-namespaces, namespace: gateway-conformance-infra}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /y}}]
    filters: [{type: ExtensionRef, extensionRef: {group: fairgate.dev, kind: RoutePolicy, name: foreign-auth}}]
    backendRefs: [{name: app-backend-v2, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: route-z, namespace: gateway-conformance-app-backend}
spec:
  parentRefs: [{name: all-namespaces, namespace: gateway-conformance-infra}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /z}}]
    filters: [{type: ExtensionRef, extensionRef: {group: fairgate.dev, kind: RoutePolicy, name: foreign-limit}}]
    backendRefs: [{name: app-backend-v2, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: borrowed, namespace: gateway-conformance-app-backend}
spec:
  parentRefs: [{name: all-namespaces, namespace: gateway-conformance-infra}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /w}}]
    filters: [{type: ExtensionRef, extensionRef: {group: fairgate.dev, kind: RoutePolicy, name: infra-only}}]
    backendRefs: [{name: app-backend-v2, port: 8080}]
"#;

#[tokio::test]
async fn a_route_policy_names_only_the_base_files_limits_and_auth_methods() {
    let c = Conformance::start();
    let limits = "limits:\n  api: {scope: client_ip, default: {capacity: 3, rate: 1/h}}\n";
    let gw = c
        .gateway_with("all-namespaces", "store: {kind: memory}", limits, 0)
        .await;
    c.apply(FOREIGN_NAMES);
    c.accepted(ROUTES, APP, "route-x", "all-namespaces", "True");
    // The base's own limit: exactly its capacity, then 429. Every request
    // counts, so the first served one is waited for rather than `to`.
    let first = first_served(&gw, "/x/1").await;
    assert!(first.pod.starts_with("app-backend-v1"), "{first:?}");
    let mut seen = vec![first.status];
    for _ in 0..3 {
        seen.push(exchange(&gw, "example.com", "/x/1", &[]).await.status);
    }
    assert_eq!(seen, [200, 200, 200, 429], "{}", tail(&gw.logs()));
    // Names the base does not define: refused, naming them, unserved.
    for (route, path, name) in [
        ("route-y", "/y", "some-other-method"),
        ("route-z", "/z", "not-in-the-base"),
    ] {
        let entry = c.parent_condition(
            ROUTES,
            APP,
            route,
            "all-namespaces",
            &[("Accepted", "False", "UnsupportedValue")],
        );
        let message = condition(&entry, "Accepted")["message"]
            .as_str()
            .unwrap_or("")
            .to_string();
        assert!(message.contains(name), "{route}: {entry:#}");
        status(&gw, "example.com", path, &[], 404).await;
    }
    // Another namespace's RoutePolicy is not the route's to name.
    c.accepted(ROUTES, APP, "borrowed", "all-namespaces", "False");
    status(&gw, "example.com", "/w", &[], 500).await;
}

/// The first answer of `path` that is not `404` (the route not yet
/// served, which spends nothing) nor a failed connection, within 30 s.
async fn first_served(gw: &Gateway, path: &str) -> Exchange {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = exchange(gw, "example.com", path, &[]).await;
        if got.status != 404 && got.status != 0 {
            assert_eq!(got.status, 200, "{got:?}\n{}", tail(&gw.logs()));
            return got;
        }
        if Instant::now() > deadline {
            panic!("{path} never served: {got:?}\n{}", tail(&gw.logs()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

const NARROW_GRANT: &str = r#"
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: infra-httproutes-only, namespace: gateway-conformance-web-backend}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: gateway-conformance-infra}]
  to: [{group: "", kind: Service, name: web-backend}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: granted, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: all-namespaces}]
  hostnames: [granted.example]
  rules: [{backendRefs: [{name: web-backend, namespace: gateway-conformance-web-backend, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: ungranted, namespace: gateway-conformance-app-backend}
spec:
  parentRefs: [{name: all-namespaces, namespace: gateway-conformance-infra}]
  hostnames: [ungranted.example]
  rules: [{backendRefs: [{name: web-backend, namespace: gateway-conformance-web-backend, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: ungranted-grpc, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: all-namespaces}]
  hostnames: [grpc.example]
  rules: [{backendRefs: [{name: web-backend, namespace: gateway-conformance-web-backend, port: 8080}]}]
"#;

#[tokio::test]
async fn a_reference_grant_lets_through_only_the_kind_and_namespace_it_names() {
    let c = Conformance::start();
    let gw = c.gateway("all-namespaces").await;
    c.apply(NARROW_GRANT);
    // What the grant names: served.
    c.accepted(ROUTES, INFRA, "granted", "all-namespaces", "True");
    to(&gw, "granted.example", "/", &[], "web-backend", WEB).await;
    // An HTTPRoute of another namespace: not granted.
    c.parent_condition(
        ROUTES,
        APP,
        "ungranted",
        "all-namespaces",
        &[
            ("Accepted", "True", "Accepted"),
            ("ResolvedRefs", "False", "RefNotPermitted"),
        ],
    );
    status(&gw, "ungranted.example", "/", &[], 500).await;
    // A GRPCRoute of the granted namespace: not the granted kind.
    c.parent_condition(
        GRPC_ROUTES,
        INFRA,
        "ungranted-grpc",
        "all-namespaces",
        &[
            ("Accepted", "True", "Accepted"),
            ("ResolvedRefs", "False", "RefNotPermitted"),
        ],
    );
    status(
        &gw,
        "grpc.example",
        "/grpc.health.v1.Health/Check",
        &[],
        500,
    )
    .await;
    to(&gw, "granted.example", "/", &[], "web-backend", WEB).await;
}

#[tokio::test]
async fn a_route_of_too_many_matches_and_hostnames_is_refused_alone() {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    // Past the CRD's bounds (16 hostnames), the API server refuses it.
    let hosts = |n: usize| (0..n).map(|i| format!("h{i}.example")).collect::<Vec<_>>();
    let matches = |from: usize, to: usize| {
        (from..to)
            .map(|i| format!("{{path: {{type: Exact, value: /m{i}}}}}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let route = |hostnames: &[String], rules: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n\
             metadata: {{name: sprawling, namespace: {INFRA}}}\n\
             spec:\n  parentRefs: [{{name: same-namespace}}]\n  hostnames: [{}]\n  rules: [{rules}]\n",
            hostnames.join(", ")
        )
    };
    let backend = "backendRefs: [{name: infra-backend-v1, port: 8080}]";
    let too_many = c.refused(&route(
        &hosts(40),
        &format!("{{matches: [{}], {backend}}}", matches(0, 30)),
    ));
    assert!(
        too_many.contains("spec.hostnames: Too many: 40: must have at most 16 items"),
        "{too_many}"
    );
    // Within them, 16 hostnames × 65 matches: 1,040 routes, over the 1,024
    // one route may make.
    let rules = format!(
        "{{matches: [{}], {backend}}}, {{matches: [{}], {backend}}}",
        matches(0, 64),
        matches(64, 65)
    );
    c.apply(&format!(
        "{}---\n\
         apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n\
         metadata: {{name: modest, namespace: {INFRA}}}\n\
         spec:\n  parentRefs: [{{name: same-namespace}}]\n  hostnames: [modest.example]\n  rules: [{{backendRefs: [{{name: infra-backend-v2, port: 8080}}]}}]\n",
        route(&hosts(16), &rules)
    ));
    let refused = c.parent_condition(
        ROUTES,
        INFRA,
        "sprawling",
        "same-namespace",
        &[("Accepted", "False", "UnsupportedValue")],
    );
    assert!(refused.to_string().contains("1024"), "{refused:#}");
    status(&gw, "h0.example", "/m0", &[], 404).await;
    to(&gw, "modest.example", "/", &[], "infra-backend-v2", INFRA).await;
}

const MIRROR_BOUNDS: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: mirror-elsewhere, namespace: gateway-conformance-app-backend}
spec:
  parentRefs: [{name: all-namespaces, namespace: gateway-conformance-infra}]
  hostnames: [app.example]
  rules:
  - filters: [{type: RequestMirror, requestMirror: {backendRef: {name: infra-backend-v2, namespace: gateway-conformance-infra, port: 8080}}}]
    backendRefs: [{name: app-backend-v1, port: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: outside, namespace: gateway-conformance-infra}
spec: {type: ExternalName, externalName: localhost, ports: [{port: 8080}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: mirror-outside, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: all-namespaces}]
  hostnames: [outside.example]
  rules:
  - filters: [{type: RequestMirror, requestMirror: {backendRef: {name: outside, port: 8080}}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: mirror-twice, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: all-namespaces}]
  hostnames: [twice.example]
  rules:
  - filters:
    - {type: RequestMirror, requestMirror: {backendRef: {name: infra-backend-v2, port: 8080}}}
    - {type: RequestMirror, requestMirror: {backendRef: {name: infra-backend-v3, port: 8080}}}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: mirror-control, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: all-namespaces}]
  hostnames: [control.example]
  rules:
  - filters: [{type: RequestMirror, requestMirror: {backendRef: {name: infra-backend-v2, port: 8080}}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
"#;

/// A RequestMirror reaches no further than a backendRef: another
/// namespace's Service only by its ReferenceGrant, never an ExternalName
/// Service (each: `ResolvedRefs` false, the rule served without copies),
/// and one mirror a rule. A well-formed mirror's copy, sent after, shows
/// the refused ones had their chance to arrive.
#[tokio::test]
async fn a_request_mirror_reaches_no_further_than_a_backend_ref() {
    let c = Conformance::start();
    let gw = c.gateway("all-namespaces").await;
    c.apply(MIRROR_BOUNDS);
    let gateway = "all-namespaces";
    let unresolved = [
        ("Accepted", "True", ""),
        ("ResolvedRefs", "False", "RefNotPermitted"),
    ];
    c.parent_condition(ROUTES, APP, "mirror-elsewhere", gateway, &unresolved);
    let external = [("Accepted", "True", ""), ("ResolvedRefs", "False", "")];
    c.parent_condition(ROUTES, INFRA, "mirror-outside", gateway, &external);
    let twice = [("Accepted", "False", "UnsupportedValue")];
    c.parent_condition(ROUTES, INFRA, "mirror-twice", gateway, &twice);
    c.accepted(ROUTES, INFRA, "mirror-control", gateway, "True");

    to(&gw, "app.example", "/elsewhere", &[], "app-backend-v1", APP).await;
    to(
        &gw,
        "outside.example",
        "/outside",
        &[],
        "infra-backend-v1",
        INFRA,
    )
    .await;
    status(&gw, "twice.example", "/twice", &[], 404).await;
    to(
        &gw,
        "control.example",
        "/control",
        &[],
        "infra-backend-v1",
        INFRA,
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let received = loop {
        let recent = c.pod(INFRA, "infra-backend-v2").stats()["recent"].to_string();
        if recent.contains("/control") || Instant::now() > deadline {
            break recent;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(received.contains("/control"), "{received}");
    for refused in ["/elsewhere", "/twice"] {
        assert!(
            !received.contains(refused),
            "{refused} was mirrored: {received}"
        );
    }
    assert_eq!(
        c.pod(INFRA, "infra-backend-v3").stats()["recent"],
        serde_json::json!([])
    );
}
