//! The Gateway API conformance suite's core hostname and listener tests
//! (HTTPRouteHostnameIntersection, HTTPRouteListenerHostnameMatching,
//! GatewayWithAttachedRoutes), ported: manifests through `kubectl apply`,
//! requests by Host, listener and route status read back with `kubectl
//! get -o json`.

use crate::common;

use common::gateway_api::*;
use serde_json::Value;

const ROUTES: &str = "httproutes";

const INTERSECTION: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: httproute-hostname-intersection, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: fairgate
  listeners:
  - {name: listener-1, hostname: very.specific.com, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Same}}}
  - {name: listener-2, hostname: "*.wildcard.io", port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Same}}}
  - {name: listener-3, hostname: "*.anotherwildcard.io", port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Same}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: specific-host-matches-listener-specific-host, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: httproute-hostname-intersection, namespace: gateway-conformance-infra}]
  hostnames: [non.matching.com, "*.nonmatchingwildcard.io", very.specific.com]
  rules: [{matches: [{path: {type: PathPrefix, value: /s1}}], backendRefs: [{name: infra-backend-v1, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: specific-host-matches-listener-wildcard-host, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: httproute-hostname-intersection, namespace: gateway-conformance-infra}]
  hostnames: [non.matching.com, wildcard.io, foo.wildcard.io, bar.wildcard.io, foo.bar.wildcard.io]
  rules: [{matches: [{path: {type: PathPrefix, value: /s2}}], backendRefs: [{name: infra-backend-v2, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: wildcard-host-matches-listener-specific-host, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: httproute-hostname-intersection, namespace: gateway-conformance-infra}]
  hostnames: [non.matching.com, "*.specific.com"]
  rules: [{matches: [{path: {type: PathPrefix, value: /s3}}], backendRefs: [{name: infra-backend-v3, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: wildcard-host-matches-listener-wildcard-host, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: httproute-hostname-intersection, namespace: gateway-conformance-infra}]
  hostnames: ["*.anotherwildcard.io"]
  rules: [{matches: [{path: {type: PathPrefix, value: /s4}}], backendRefs: [{name: infra-backend-v1, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: no-intersecting-hosts, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: httproute-hostname-intersection, namespace: gateway-conformance-infra}]
  hostnames: [specific.but.wrong.com, wildcard.io]
  rules: [{matches: [{path: {type: PathPrefix, value: /s5}}], backendRefs: [{name: infra-backend-v2, port: 8080}]}]
"#;

const INTERSECTION_ALL: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: httproute-hostname-intersection-all, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: fairgate
  listeners:
  - {name: listener-1, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Same}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: httproute-hostname-intersection-all, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: httproute-hostname-intersection-all, namespace: gateway-conformance-infra}]
  hostnames: [first.com, sub.first.com, second.com, sub.second.com]
  rules: [{backendRefs: [{name: infra-backend-v2, port: 8080}]}]
"#;

const V1: &str = "infra-backend-v1";
const V2: &str = "infra-backend-v2";
const V3: &str = "infra-backend-v3";

/// Host, path, backend: served through the intersections.
const SERVED_INTERSECTION: &[(&str, &str, &str)] = &[
    ("very.specific.com", "/s1", V1),
    ("very.specific.com:1234", "/s1", V1),
    ("foo.wildcard.io", "/s2", V2),
    ("bar.wildcard.io", "/s2", V2),
    ("foo.bar.wildcard.io", "/s2", V2),
    ("very.specific.com", "/s3", V3),
    ("foo.anotherwildcard.io", "/s4", V1),
    ("bar.anotherwildcard.io", "/s4", V1),
    ("foo.bar.anotherwildcard.io", "/s4", V1),
];

/// Host and path: 404.
const REFUSED_INTERSECTION: &[(&str, &str)] = &[
    ("non.matching.com", "/s1"),
    ("foo.nonmatchingwildcard.io", "/s1"),
    ("foo.wildcard.io", "/s1"),
    ("very.specific.com", "/non-matching-prefix"),
    ("non.matching.com", "/s2"),
    ("wildcard.io", "/s2"),
    ("very.specific.com", "/s2"),
    ("foo.wildcard.io", "/non-matching-prefix"),
    ("non.matching.com", "/s3"),
    ("foo.specific.com", "/s3"),
    ("foo.wildcard.io", "/s3"),
    ("anotherwildcard.io", "/s4"),
    ("foo.wildcard.io", "/s4"),
    ("very.specific.com", "/s4"),
    ("foo.anotherwildcard.io", "/non-matching-prefix"),
    ("specific.but.wrong.com", "/s5"),
    ("wildcard.io", "/s5"),
];

#[tokio::test]
async fn httproute_hostname_intersection() {
    let c = Conformance::start();
    c.apply(INTERSECTION);
    c.apply(INTERSECTION_ALL);
    let gw = c.gateway("httproute-hostname-intersection").await;
    for route in [
        "specific-host-matches-listener-specific-host",
        "specific-host-matches-listener-wildcard-host",
        "wildcard-host-matches-listener-specific-host",
        "wildcard-host-matches-listener-wildcard-host",
    ] {
        c.accepted(
            ROUTES,
            INFRA,
            route,
            "httproute-hostname-intersection",
            "True",
        );
    }
    for (host, path, backend) in SERVED_INTERSECTION {
        to(&gw, host, path, &[], backend, INFRA).await;
    }
    for (host, path) in REFUSED_INTERSECTION {
        status(&gw, host, path, &[], 404).await;
    }
    c.parent_condition(
        ROUTES,
        INFRA,
        "no-intersecting-hosts",
        "httproute-hostname-intersection",
        &[("Accepted", "False", "NoMatchingListenerHostname")],
    );
    let gateway = c.gateway_status("httproute-hostname-intersection", |g| {
        let attached = |l: &str| listener(g, l).map(|l| l["attachedRoutes"].clone());
        attached("listener-1") == Some(Value::from(2))
            && attached("listener-2") == Some(Value::from(1))
            && attached("listener-3") == Some(Value::from(1))
    });
    let listeners = gateway["status"]["listeners"].as_array().unwrap();
    assert_eq!(listeners.len(), 3, "{gateway:#}");
    for l in listeners {
        let generation = &gateway["metadata"]["generation"];
        for kind in ["Accepted", "ResolvedRefs", "Programmed"] {
            assert!(
                has_condition(&l["conditions"], (kind, "True", ""), generation),
                "{l:#}"
            );
        }
        assert!(l["supportedKinds"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k["kind"] == "HTTPRoute"));
    }

    let all = c.gateway("httproute-hostname-intersection-all").await;
    c.accepted(
        ROUTES,
        INFRA,
        "httproute-hostname-intersection-all",
        "httproute-hostname-intersection-all",
        "True",
    );
    for host in ["first.com", "sub.first.com", "second.com", "sub.second.com"] {
        to(&all, host, "/", &[], V2, INFRA).await;
    }
    for host in ["third.com", "sub.third.com"] {
        status(&all, host, "/", &[], 404).await;
    }
}

const HTTPROUTE_LISTENER_HOSTNAME_MATCHING: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: httproute-listener-hostname-matching, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: fairgate
  listeners:
  - {name: listener-1, hostname: bar.com, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Same}}}
  - {name: listener-2, hostname: foo.bar.com, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Same}}}
  - {name: listener-3, hostname: "*.bar.com", port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Same}}}
  - {name: listener-4, hostname: "*.foo.com", port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Same}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: backend-v1, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: httproute-listener-hostname-matching, namespace: gateway-conformance-infra, sectionName: listener-1}]
  rules: [{backendRefs: [{name: infra-backend-v1, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: backend-v2, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: httproute-listener-hostname-matching, namespace: gateway-conformance-infra, sectionName: listener-2}]
  rules: [{backendRefs: [{name: infra-backend-v2, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: backend-v3, namespace: gateway-conformance-infra}
spec:
  parentRefs:
  - {name: httproute-listener-hostname-matching, namespace: gateway-conformance-infra, sectionName: listener-3}
  - {name: httproute-listener-hostname-matching, namespace: gateway-conformance-infra, sectionName: listener-4}
  rules: [{backendRefs: [{name: infra-backend-v3, port: 8080}]}]
"#;

#[tokio::test]
async fn httproute_listener_hostname_matching() {
    let c = Conformance::start();
    c.apply(HTTPROUTE_LISTENER_HOSTNAME_MATCHING);
    let gw = c.gateway("httproute-listener-hostname-matching").await;
    for route in ["backend-v1", "backend-v2", "backend-v3"] {
        c.accepted(
            ROUTES,
            INFRA,
            route,
            "httproute-listener-hostname-matching",
            "True",
        );
    }
    let (v1, v2, v3) = ("infra-backend-v1", "infra-backend-v2", "infra-backend-v3");
    let served = [
        ("bar.com", v1),
        ("foo.bar.com", v2),
        ("baz.bar.com", v3),
        ("boo.bar.com", v3),
        ("multiple.prefixes.bar.com", v3),
        ("multiple.prefixes.foo.com", v3),
    ];
    for (host, backend) in served {
        to(&gw, host, "/", &[], backend, INFRA).await;
    }
    for host in ["foo.com", "no.matching.host"] {
        status(&gw, host, "/", &[], 404).await;
    }
}

const GATEWAY_WITH_ATTACHED_ROUTES: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-with-one-attached-route, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: fairgate
  listeners:
  - name: http
    port: 80
    protocol: HTTP
    allowedRoutes:
      kinds: [{kind: HTTPRoute}]
      namespaces: {from: Selector, selector: {matchLabels: {kubernetes.io/metadata.name: gateway-conformance-infra}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: http-route-1, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{kind: Gateway, name: gateway-with-one-attached-route, namespace: gateway-conformance-infra}]
  rules: [{backendRefs: [{name: infra-backend-v1, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-with-two-attached-routes, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: fairgate
  listeners:
  - name: http
    port: 80
    protocol: HTTP
    hostname: foo.example.com
    allowedRoutes:
      kinds: [{kind: HTTPRoute}]
      namespaces: {from: Selector, selector: {matchLabels: {kubernetes.io/metadata.name: gateway-conformance-infra}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: http-route-2, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{kind: Gateway, name: gateway-with-two-attached-routes, namespace: gateway-conformance-infra}]
  rules: [{backendRefs: [{name: infra-backend-v1, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: http-route-3, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{kind: Gateway, name: gateway-with-two-attached-routes, namespace: gateway-conformance-infra}]
  rules: [{backendRefs: [{name: infra-backend-v1, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: http-route-not-accepted, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{kind: Gateway, name: gateway-with-two-attached-routes, namespace: gateway-conformance-infra}]
  hostnames: [not-accepted.test.com]
  rules: [{backendRefs: [{name: infra-backend-v1, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: unresolved-gateway-with-one-attached-unresolved-route, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: fairgate
  listeners:
  - name: tls
    port: 443
    protocol: HTTPS
    allowedRoutes:
      kinds: [{kind: HTTPRoute}]
      namespaces: {from: Selector, selector: {matchLabels: {kubernetes.io/metadata.name: gateway-conformance-infra}}}
    tls:
      mode: Terminate
      certificateRefs: [{group: "", kind: Secret, name: does-not-exist}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: http-route-4, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{kind: Gateway, name: unresolved-gateway-with-one-attached-unresolved-route, namespace: gateway-conformance-infra, sectionName: tls}]
  rules: [{backendRefs: [{name: does-not-exist, port: 8080}]}]
"#;

#[tokio::test]
async fn gateway_with_attached_routes() {
    let c = Conformance::start();
    c.apply(GATEWAY_WITH_ATTACHED_ROUTES);
    let _one = c.gateway("gateway-with-one-attached-route").await;
    let _two = c.gateway("gateway-with-two-attached-routes").await;
    let _unresolved = c
        .gateway("unresolved-gateway-with-one-attached-unresolved-route")
        .await;
    let one = c.gateway_status("gateway-with-one-attached-route", |g| {
        listener(g, "http").is_some_and(|l| l["attachedRoutes"] == 1)
    });
    check_listener(
        &one,
        "http",
        &[("Accepted", "True"), ("ResolvedRefs", "True")],
    );
    let kinds = &listener(&one, "http").unwrap()["supportedKinds"];
    assert_eq!(
        kinds,
        &serde_json::json!([{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"}])
    );
    let two = c.gateway_status("gateway-with-two-attached-routes", |g| {
        listener(g, "http").is_some_and(|l| l["attachedRoutes"] == 2)
    });
    check_listener(
        &two,
        "http",
        &[("Accepted", "True"), ("ResolvedRefs", "True")],
    );
    c.parent_condition(
        ROUTES,
        INFRA,
        "http-route-not-accepted",
        "gateway-with-two-attached-routes",
        &[("Accepted", "False", "NoMatchingListenerHostname")],
    );
    let unresolved = c.gateway_status(
        "unresolved-gateway-with-one-attached-unresolved-route",
        |g| listener(g, "tls").is_some_and(|l| l["attachedRoutes"] == 1),
    );
    check_listener(
        &unresolved,
        "tls",
        &[("Programmed", "False"), ("ResolvedRefs", "False")],
    );
    c.parent_condition(
        ROUTES,
        INFRA,
        "http-route-4",
        "unresolved-gateway-with-one-attached-unresolved-route",
        &[("ResolvedRefs", "False", "")],
    );
}

fn check_listener(gw: &Value, name: &str, want: &[(&str, &str)]) {
    let l = listener(gw, name).unwrap_or_else(|| panic!("no listener {name}: {gw:#}"));
    for (kind, status) in want {
        assert!(
            has_condition(
                &l["conditions"],
                (kind, status, ""),
                &gw["metadata"]["generation"]
            ),
            "listener {name} lacks {kind}={status}: {l:#}"
        );
    }
}

const HTTPROUTE_HTTPS_LISTENER: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: same-namespace-with-https-listener, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: fairgate
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    allowedRoutes: {namespaces: {from: Same}}
    tls: {certificateRefs: [{group: "", kind: Secret, name: tls-validity-checks-certificate, namespace: gateway-conformance-infra}]}
  - name: https-with-hostname
    port: 443
    protocol: HTTPS
    hostname: second-example.org
    allowedRoutes: {namespaces: {from: Same}}
    tls: {certificateRefs: [{group: "", kind: Secret, name: tls-validity-checks-certificate, namespace: gateway-conformance-infra}]}
  - name: https-with-wildcard-hostname
    port: 443
    protocol: HTTPS
    hostname: "*.wildcard.org"
    allowedRoutes: {namespaces: {from: Same}}
    tls: {certificateRefs: [{group: "", kind: Secret, name: tls-validity-checks-certificate, namespace: gateway-conformance-infra}]}
  - name: https-with-hostname-matching-wildcard
    port: 443
    protocol: HTTPS
    hostname: fourth-example.wildcard.org
    allowedRoutes: {namespaces: {from: Same}}
    tls: {certificateRefs: [{group: "", kind: Secret, name: tls-validity-checks-certificate, namespace: gateway-conformance-infra}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: httproute-https-test, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-with-https-listener}]
  hostnames: [example.org]
  rules: [{backendRefs: [{name: infra-backend-v1, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: httproute-https-test-no-hostname, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-with-https-listener, sectionName: https-with-hostname}]
  rules: [{backendRefs: [{name: infra-backend-v2, port: 8080}]}]
"#;

/// The names the HTTPS listener test's certificate is for.
const HTTPS_NAMES: [&str; 4] = [
    "example.org",
    "unknown-example.org",
    "second-example.org",
    "*.wildcard.org",
];

#[tokio::test]
async fn httproute_https_listener() {
    let c = Conformance::start();
    let dir = tempfile::tempdir().unwrap();
    let pki = common::Pki::new(dir.path(), "conformance");
    // The suite's Secret tls-validity-checks-certificate is for `*`, `*.org`
    // and `*.wildcard.org`, which Go's client accepts and rustls does not
    // (a wildcard right under a public suffix): a leaf for the names the
    // requests use.
    let sans = HTTPS_NAMES;
    c.api.apply(common::cluster::secret_for(
        &pki,
        INFRA,
        "tls-validity-checks-certificate",
        &sans,
        "02",
    ));
    c.apply(HTTPROUTE_HTTPS_LISTENER);
    let tls = common::free_addr();
    let (cert, key) = pki.leaf("default", "default", &["default.example"], "01");
    let base = format!(
        "server:\n  listen: [\"$LISTEN\"]\n  tls:\n    listen: \"{tls}\"\n    certificates:\n      - {{cert_file: {}, key_file: {}}}\nstore: {{kind: memory}}",
        cert.display(),
        key.display()
    );
    let gw = c
        .start_base("same-namespace-with-https-listener", &base, 0)
        .await;
    c.accepted(
        ROUTES,
        INFRA,
        "httproute-https-test",
        "same-namespace-with-https-listener",
        "True",
    );
    c.accepted(
        ROUTES,
        INFRA,
        "httproute-https-test-no-hostname",
        "same-namespace-with-https-listener",
        "True",
    );
    let g = c.gateway_status("same-namespace-with-https-listener", |g| {
        g["status"]["listeners"]
            .as_array()
            .is_some_and(|l| l.len() == 4)
    });
    for name in [
        "https",
        "https-with-hostname",
        "https-with-wildcard-hostname",
        "https-with-hostname-matching-wildcard",
    ] {
        check_listener(
            &g,
            name,
            &[
                ("Accepted", "True"),
                ("ResolvedRefs", "True"),
                ("Programmed", "True"),
            ],
        );
    }
    // HTTPS with SNI = Host, trusting the Secret's CA, as the suite does.
    let ca = reqwest::Certificate::from_pem(&std::fs::read(pki.ca()).unwrap()).unwrap();
    let cases = [
        ("example.org", 200, "infra-backend-v1"),
        ("unknown-example.org", 404, ""),
        ("second-example.org", 200, "infra-backend-v2"),
    ];
    for (host, want, backend) in cases {
        https_expect(&gw, tls, &ca, (host, want, backend)).await;
    }
    // Routes of HTTPS listeners only are not served in the clear.
    status(&gw, "example.org", "/", &[], 404).await;
    status(&gw, "second-example.org", "/", &[], 404).await;
}

/// `GET https://HOST/` (SNI and Host `host`) answered `want` (by `backend`
/// for a 200) three times in a row within 30 s.
async fn https_expect(
    gw: &common::Gateway,
    tls: std::net::SocketAddr,
    ca: &reqwest::Certificate,
    (host, want, backend): (&str, u16, &str),
) {
    let client = reqwest::Client::builder()
        .add_root_certificate(ca.clone())
        .resolve(host, tls)
        .no_proxy()
        .build()
        .unwrap();
    let mut streak = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while streak < 3 {
        let got = client
            .get(format!("https://{host}:{}/", tls.port()))
            .send()
            .await;
        let seen = format!("{got:?}");
        let ok = match got {
            Ok(r) if r.status().as_u16() == want => {
                let body: Value = r.json().await.unwrap_or(Value::Null);
                want != 200 || body["pod"].as_str().unwrap_or("").starts_with(backend)
            }
            _ => false,
        };
        streak = if ok { streak + 1 } else { 0 };
        assert!(
            std::time::Instant::now() < deadline,
            "{host}: not {want} {backend}: {seen}\n{}",
            tail(&gw.logs())
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
