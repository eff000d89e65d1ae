//! The Gateway API conformance suite's extended HTTPRoute tests fairgate
//! claims (kubernetes-sigs/gateway-api at 4564255, `conformance/tests/`),
//! ported one to one (requests with `Host: example.com` where the suite
//! sends the gateway's address): HTTPRouteRequestMirror (the mirror's pod
//! is asked which targets it received, where the suite reads its log),
//! HTTPRouteResponseHeaderModifier (the backend sets response headers by
//! `X-Echo-Set-Header`, as echo-basic does) and HTTPRouteTimeoutRequest
//! (the backend waits `?delay=`, as echo-basic does).

use crate::common;

use std::time::{Duration, Instant};

use common::gateway_api::*;

const ROUTES: &str = "httproutes";

const REQUEST_MIRROR: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: request-mirror
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: same-namespace
  rules:
  - matches:
    - path:
        type: PathPrefix
        value: /mirror
    filters:
    - type: RequestMirror
      requestMirror:
        backendRef:
          name: infra-backend-v2
          namespace: gateway-conformance-infra
          port: 8080
    backendRefs:
    - name: infra-backend-v1
      port: 8080
      namespace: gateway-conformance-infra
  - matches:
    - path:
        type: PathPrefix
        value: /mirror-and-modify-headers
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set:
        - name: X-Header-Set
          value: set-overwrites-values
        add:
        - name: X-Header-Add
          value: header-val-1
        - name: X-Header-Add-Append
          value: header-val-2
        remove:
        - X-Header-Remove
    - type: RequestMirror
      requestMirror:
        backendRef:
          name: infra-backend-v2
          namespace: gateway-conformance-infra
          port: 8080
    backendRefs:
    - name: infra-backend-v1
      port: 8080
      namespace: gateway-conformance-infra
"#;

/// `ExpectMirroredRequest`: within 10 s, the mirror's pod received
/// `target` (the suite finds it in the pod's log).
fn mirrored(c: &Conformance, svc: &str, target: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let recent = c.pod(INFRA, svc).stats()["recent"].clone();
        let seen = recent.as_array().into_iter().flatten();
        if seen.filter(|t| *t == target).count() > 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{svc} never received {target}: {recent}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// HTTPRouteRequestMirror (`httproute-request-mirror.go`).
#[tokio::test]
async fn httproute_request_mirror() {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    c.apply(REQUEST_MIRROR);
    c.accepted(ROUTES, INFRA, "request-mirror", "same-namespace", "True");

    let id = uuid::Uuid::new_v4();
    let path = format!("/mirror?gateway-api-conformance-request-id={id}");
    to(&gw, "example.com", &path, &[], "infra-backend-v1", INFRA).await;
    mirrored(&c, "infra-backend-v2", &path);

    let id = uuid::Uuid::new_v4();
    let path = format!("/mirror-and-modify-headers?gateway-api-conformance-request-id={id}");
    let sent = [
        ("X-Header-Remove", "remove-val"),
        ("X-Header-Add-Append", "append-val-1"),
    ];
    let got = to(&gw, "example.com", &path, &sent, "infra-backend-v1", INFRA).await;
    let header = |name: &str| got.headers.get(name).map(String::as_str);
    assert_eq!(header("x-header-add"), Some("header-val-1"));
    assert_eq!(
        header("x-header-add-append"),
        Some("append-val-1,header-val-2")
    );
    assert_eq!(header("x-header-set"), Some("set-overwrites-values"));
    assert_eq!(header("x-header-remove"), None);
    mirrored(&c, "infra-backend-v2", &path);
}

const RESPONSE_HEADER_MODIFIER: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: response-header-modifier
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: same-namespace
  rules:
  - matches: [{path: {type: PathPrefix, value: /set}}]
    filters:
    - type: ResponseHeaderModifier
      responseHeaderModifier:
        set: [{name: X-Header-Set, value: set-overwrites-values}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /add}}]
    filters:
    - type: ResponseHeaderModifier
      responseHeaderModifier:
        add: [{name: X-Header-Add, value: add-appends-values}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /remove}}]
    filters:
    - type: ResponseHeaderModifier
      responseHeaderModifier:
        remove: [X-Header-Remove]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /multiple}}]
    filters:
    - type: ResponseHeaderModifier
      responseHeaderModifier:
        set:
        - {name: X-Header-Set-1, value: header-set-1}
        - {name: X-Header-Set-2, value: header-set-2}
        add:
        - {name: X-Header-Add-1, value: header-add-1}
        - {name: X-Header-Add-2, value: header-add-2}
        - {name: X-Header-Add-3, value: header-add-3}
        remove: [X-Header-Remove-1, X-Header-Remove-2]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /case-insensitivity}}]
    filters:
    - type: ResponseHeaderModifier
      responseHeaderModifier:
        set: [{name: X-Header-Set, value: header-set}]
        add:
        - {name: X-Header-Add, value: header-add}
        - {name: x-lowercase-add, value: lowercase-add}
        - {name: x-Mixedcase-ADD-1, value: mixedcase-add-1}
        - {name: X-mixeDcase-add-2, value: mixedcase-add-2}
        - {name: X-UPPERCASE-ADD, value: uppercase-add}
        remove: [X-Header-Remove]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /response-and-request-header-modifiers}}]
    filters:
    - type: ResponseHeaderModifier
      responseHeaderModifier:
        set:
        - {name: X-Header-Set-1, value: header-set-1}
        - {name: X-Header-Set-2, value: header-set-2}
        add:
        - {name: X-Header-Add-1, value: header-add-1}
        - {name: X-Header-Add-2, value: header-add-2}
        remove: [X-Header-Remove-1, X-Header-Remove-2]
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{name: X-Header-Set, value: set-overwrites-values}]
        add:
        - {name: X-Header-Add, value: header-val-1}
        - {name: X-Header-Add-Append, value: header-val-2}
        remove: [X-Header-Remove]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
"#;

/// One case: path, what the backend sets (`X-Echo-Set-Header`), the
/// response headers wanted and those that must be absent.
type Case = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static [&'static str],
);

const RESPONSE_CASES: &[Case] = &[
    ("/set", "Some-Other-Header:val", &[("some-other-header", "val"), ("x-header-set", "set-overwrites-values")], &[]),
    ("/set", "Some-Other-Header:val,X-Header-Set:some-other-value", &[("some-other-header", "val"), ("x-header-set", "set-overwrites-values")], &[]),
    ("/add", "Some-Other-Header:val", &[("some-other-header", "val"), ("x-header-add", "add-appends-values")], &[]),
    ("/add", "Some-Other-Header:val,X-Header-Add:some-other-value", &[("some-other-header", "val"), ("x-header-add", "some-other-value,add-appends-values")], &[]),
    ("/remove", "X-Header-Remove:val", &[], &["x-header-remove"]),
    (
        "/multiple",
        "X-Header-Set-2:set-val-2,X-Header-Add-2:add-val-2,X-Header-Remove-2:remove-val-2,Another-Header:another-header-val,X-Header-Remove-1:val",
        &[
            ("x-header-set-1", "header-set-1"),
            ("x-header-set-2", "header-set-2"),
            ("x-header-add-1", "header-add-1"),
            ("x-header-add-2", "add-val-2,header-add-2"),
            ("x-header-add-3", "header-add-3"),
            ("another-header", "another-header-val"),
        ],
        &["x-header-remove-1", "x-header-remove-2"],
    ),
    (
        "/case-insensitivity",
        "x-header-set:original-val-set,x-header-add:original-val-add,x-header-remove:original-val-remove,Another-Header:another-header-val",
        &[
            ("x-header-set", "header-set"),
            ("x-header-add", "original-val-add,header-add"),
            ("x-lowercase-add", "lowercase-add"),
            ("x-mixedcase-add-1", "mixedcase-add-1"),
            ("x-mixedcase-add-2", "mixedcase-add-2"),
            ("x-uppercase-add", "uppercase-add"),
            ("another-header", "another-header-val"),
        ],
        &["x-header-remove"],
    ),
];

/// The suite's check of one answer: each wanted header with its value,
/// none of the absent ones.
fn answer_is(got: &Exchange, want: &[(&str, &str)], absent: &[&str]) -> Result<(), String> {
    for (name, value) in want {
        if got.response.get(*name).map(String::as_str) != Some(*value) {
            return Err(format!(
                "{name}: want {value:?}, got {:?}",
                got.response.get(*name)
            ));
        }
    }
    match absent.iter().find(|n| got.response.contains_key(**n)) {
        Some(n) => Err(format!("{n} should be absent")),
        None => Ok(()),
    }
}

/// HTTPRouteResponseHeaderModifier (`httproute-response-header-modifier.go`).
#[tokio::test]
async fn httproute_response_header_modifier() {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    c.apply(RESPONSE_HEADER_MODIFIER);
    c.accepted(
        ROUTES,
        INFRA,
        "response-header-modifier",
        "same-namespace",
        "True",
    );
    for (path, set, want, absent) in RESPONSE_CASES {
        let got = to(
            &gw,
            "example.com",
            path,
            &[("X-Echo-Set-Header", set)],
            "infra-backend-v1",
            INFRA,
        )
        .await;
        answer_is(&got, want, absent).unwrap_or_else(|e| panic!("{path} ({set}): {e}: {got:?}"));
    }

    // Both directions on one rule.
    let path = "/response-and-request-header-modifiers";
    let set = "X-Header-Set-2:set-val-2,X-Header-Add-2:add-val-2,X-Header-Remove-2:remove-val-2,Another-Header:another-header-val,X-Header-Remove-1:remove-val-1,X-Header-Echo:echo";
    let sent = [
        ("X-Header-Remove", "remove-val"),
        ("X-Header-Add-Append", "append-val-1"),
        ("X-Header-Echo", "echo"),
        ("X-Echo-Set-Header", set),
    ];
    let got = to(&gw, "example.com", path, &sent, "infra-backend-v1", INFRA).await;
    let want = [
        ("x-header-set-1", "header-set-1"),
        ("x-header-set-2", "header-set-2"),
        ("x-header-add-1", "header-add-1"),
        ("x-header-add-2", "add-val-2,header-add-2"),
        ("another-header", "another-header-val"),
        ("x-header-echo", "echo"),
    ];
    answer_is(&got, &want, &["x-header-remove-1", "x-header-remove-2"])
        .unwrap_or_else(|e| panic!("{e}: {got:?}"));
    let header = |name: &str| got.headers.get(name).map(String::as_str);
    assert_eq!(header("x-header-add"), Some("header-val-1"));
    assert_eq!(header("x-header-set"), Some("set-overwrites-values"));
    assert_eq!(
        header("x-header-add-append"),
        Some("append-val-1,header-val-2")
    );
    assert_eq!(header("x-header-echo"), Some("echo"));
    assert_eq!(header("x-header-remove"), None);
}

const REQUEST_TIMEOUT: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: request-timeout
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: same-namespace
  rules:
  - matches:
    - path:
        type: PathPrefix
        value: /request-timeout
    backendRefs:
    - name: infra-backend-v1
      port: 8080
    timeouts:
      request: 500ms
  - matches:
    - path:
        type: PathPrefix
        value: /disable-request-timeout
    backendRefs:
    - name: infra-backend-v1
      port: 8080
    timeouts:
      request: "0s"
"#;

/// HTTPRouteTimeoutRequest (`httproute-timeout-request.go`): the backend
/// answers after `?delay=1s`, past the rule's 500 ms.
#[tokio::test]
async fn httproute_timeout_request() {
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    c.apply(REQUEST_TIMEOUT);
    c.accepted(ROUTES, INFRA, "request-timeout", "same-namespace", "True");
    to(
        &gw,
        "example.com",
        "/request-timeout",
        &[],
        "infra-backend-v1",
        INFRA,
    )
    .await;
    status(&gw, "example.com", "/request-timeout?delay=1s", &[], 504).await;
    let slow = "/disable-request-timeout?delay=1s";
    to(&gw, "example.com", slow, &[], "infra-backend-v1", INFRA).await;
}
