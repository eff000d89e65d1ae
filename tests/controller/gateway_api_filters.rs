//! The Gateway API conformance suite's core filter and backend tests
//! (HTTPRouteRedirectHostAndStatus, HTTPRouteRequestHeaderModifier,
//! HTTPRouteWeight), ported: the same manifests through `kubectl apply`,
//! the same requests, and what the backend received checked as the suite
//! checks it (header values joined by `,`).

use crate::common;

use std::collections::BTreeMap;

use common::gateway_api::*;

const ROUTES: &str = "httproutes";

const HTTPROUTE_REDIRECT_HOST_AND_STATUS: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: redirect-host-and-status, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /hostname-redirect}}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org}}]
  - matches: [{path: {type: PathPrefix, value: /host-and-status}}]
    filters: [{type: RequestRedirect, requestRedirect: {statusCode: 301, hostname: example.org}}]
"#;

#[tokio::test]
async fn httproute_redirect_host_and_status() {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    c.apply(HTTPROUTE_REDIRECT_HOST_AND_STATUS);
    c.accepted(
        ROUTES,
        INFRA,
        "redirect-host-and-status",
        "same-namespace",
        "True",
    );
    let got = status(&gw, "example.com", "/hostname-redirect", &[], 302).await;
    assert_eq!(
        got.location.as_deref(),
        Some("http://example.org/hostname-redirect")
    );
    let got = status(&gw, "example.com", "/host-and-status", &[], 301).await;
    assert_eq!(
        got.location.as_deref(),
        Some("http://example.org/host-and-status")
    );
}

const MODIFIER: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: request-header-modifier, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /set}}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier: {set: [{name: X-Header-Set, value: set-overwrites-values}]}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /add}}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier: {add: [{name: X-Header-Add, value: add-appends-values}]}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /remove}}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier: {remove: [X-Header-Remove]}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /multiple}}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{name: X-Header-Set-1, value: header-set-1}, {name: X-Header-Set-2, value: header-set-2}]
        add: [{name: X-Header-Add-1, value: header-add-1}, {name: X-Header-Add-2, value: header-add-2}, {name: X-Header-Add-3, value: header-add-3}]
        remove: [X-Header-Remove-1, X-Header-Remove-2]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /case-insensitivity}}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{name: X-Header-Set, value: header-set}]
        add: [{name: X-Header-Add, value: header-add}]
        remove: [X-Header-Remove]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
"#;

type Headers<'a> = &'a [(&'a str, &'a str)];

/// (path, request headers, expected upstream headers, absent upstream headers)
const MODIFIER_CASES: &[(&str, Headers, Headers, &[&str])] = &[
    (
        "/set",
        &[("Some-Other-Header", "val")],
        &[
            ("Some-Other-Header", "val"),
            ("X-Header-Set", "set-overwrites-values"),
        ],
        &[],
    ),
    (
        "/set",
        &[
            ("Some-Other-Header", "val"),
            ("X-Header-Set", "some-other-value"),
        ],
        &[
            ("Some-Other-Header", "val"),
            ("X-Header-Set", "set-overwrites-values"),
        ],
        &[],
    ),
    (
        "/add",
        &[("Some-Other-Header", "val")],
        &[
            ("Some-Other-Header", "val"),
            ("X-Header-Add", "add-appends-values"),
        ],
        &[],
    ),
    (
        "/add",
        &[
            ("Some-Other-Header", "val"),
            ("X-Header-Add", "some-other-value"),
        ],
        &[
            ("Some-Other-Header", "val"),
            ("X-Header-Add", "some-other-value,add-appends-values"),
        ],
        &[],
    ),
    (
        "/remove",
        &[("X-Header-Remove", "val")],
        &[],
        &["X-Header-Remove"],
    ),
    (
        "/multiple",
        &[
            ("X-Header-Set-2", "set-val-2"),
            ("X-Header-Add-2", "add-val-2"),
            ("X-Header-Remove-2", "remove-val-2"),
            ("Another-Header", "another-header-val"),
        ],
        &[
            ("X-Header-Set-1", "header-set-1"),
            ("X-Header-Set-2", "header-set-2"),
            ("X-Header-Add-1", "header-add-1"),
            ("X-Header-Add-2", "add-val-2,header-add-2"),
            ("X-Header-Add-3", "header-add-3"),
            ("Another-Header", "another-header-val"),
        ],
        &["X-Header-Remove-1", "X-Header-Remove-2"],
    ),
    (
        "/case-insensitivity",
        &[
            ("x-header-set", "original-val-set"),
            ("x-header-add", "original-val-add"),
            ("x-header-remove", "original-val-remove"),
            ("Another-Header", "another-header-val"),
        ],
        &[
            ("X-Header-Set", "header-set"),
            ("X-Header-Add", "original-val-add,header-add"),
            ("Another-Header", "another-header-val"),
        ],
        &["x-header-remove"],
    ),
];

#[tokio::test]
async fn httproute_request_header_modifier() {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    c.apply(MODIFIER);
    c.accepted(
        ROUTES,
        INFRA,
        "request-header-modifier",
        "same-namespace",
        "True",
    );
    let cases = MODIFIER_CASES;
    for (path, sent, want, absent) in cases {
        let got = to(&gw, "example.com", path, sent, "infra-backend-v1", INFRA).await;
        for (name, value) in *want {
            assert_eq!(
                got.headers
                    .get(&name.to_ascii_lowercase())
                    .map(String::as_str),
                Some(*value),
                "{path} {sent:?}: {name} in {:?}",
                got.headers
            );
        }
        for name in *absent {
            assert!(
                !got.headers.contains_key(&name.to_ascii_lowercase()),
                "{path}: {name} reached the backend"
            );
        }
    }
}

const HTTPROUTE_WEIGHT: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: weighted-backends, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - backendRefs:
    - {name: infra-backend-v1, port: 8080, weight: 70}
    - {name: infra-backend-v2, port: 8080, weight: 30}
    - {name: infra-backend-v3, port: 8080, weight: 0}
"#;

#[tokio::test]
async fn httproute_weight() {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    c.apply(HTTPROUTE_WEIGHT);
    c.accepted(ROUTES, INFRA, "weighted-backends", "same-namespace", "True");
    to(&gw, "example.com", "/", &[], "infra-backend-v", INFRA).await;
    // As the suite: rounds of 500 requests, 10 at a time; a round passes
    // when each share is within 5 points of its weight and weight 0 got
    // none; at most 10 rounds.
    let mut last = BTreeMap::new();
    for _ in 0..10 {
        last = weighted_round(&gw).await;
        let share = |b: &str| *last.get(b).unwrap_or(&0) as f64 / 500.0;
        let v3 = *last.get("infra-backend-v3").unwrap_or(&0);
        assert_eq!(v3, 0, "weight 0 got requests: {last:?}");
        assert_eq!(
            last.values().sum::<u32>(),
            500,
            "every request answered by a backend: {last:?}"
        );
        if (share("infra-backend-v1") - 0.7).abs() <= 0.05
            && (share("infra-backend-v2") - 0.3).abs() <= 0.05
        {
            println!("weighted round: {last:?}");
            return;
        }
    }
    panic!("no round within 5 points of 70/30: {last:?}");
}

/// 500 requests, 10 at a time: how many each backend (pod name without its
/// last two segments) answered.
async fn weighted_round(gw: &common::Gateway) -> BTreeMap<String, u32> {
    let mut counts = BTreeMap::new();
    for _ in 0..50 {
        let batch = (0..10).map(|i| async move {
            let jitter = (i * 997 % 10_000).to_string();
            exchange(gw, "example.com", "/", &[("X-Jitter", jitter.as_str())]).await
        });
        for got in futures_util::future::join_all(batch).await {
            assert_eq!(got.status, 200, "{got:?}");
            let backend: Vec<&str> = got.pod.rsplitn(3, '-').collect();
            *counts
                .entry(backend.last().unwrap_or(&"").to_string())
                .or_insert(0) += 1;
        }
    }
    counts
}
