//! The Gateway API conformance suite's GatewayHTTPListenerIsolation
//! (kubernetes-sigs/gateway-api at 4564255,
//! `conformance/tests/gateway-http-listener-isolation.go`), ported: its
//! two manifests (`gateway-http-listener-isolation.yaml` and
//! `…-with-hostname-intersection.yaml`, written here from one template:
//! the same four listeners, one route on each, the second with hostnames
//! that name the more specific listeners' hosts) and the same 16 cases
//! against each: a request is answered only by the routes of the most
//! specific listener its host matches.

use crate::common;

use common::gateway_api::*;

/// The listeners, each with its hostname (none for the first).
const LISTENERS: [(&str, Option<&str>); 4] = [
    ("empty-hostname", None),
    ("wildcard-example-com", Some("*.example.com")),
    ("wildcard-foo-example-com", Some("*.foo.example.com")),
    ("abc-foo-example-com", Some("abc.foo.example.com")),
];

/// The second manifest's route hostnames, on each route.
const INTERSECTION_HOSTS: &str =
    r#"["bar.com", "*.example.com", "*.foo.example.com", "abc.foo.example.com"]"#;

/// Gateway `gateway` with the four listeners and, on each, a route of
/// path `/LISTENER` attached by `sectionName` (named `attaches-to-LISTENER`
/// then `suffix`), with `hostnames` when given.
fn manifest(gateway: &str, suffix: &str, hostnames: Option<&str>) -> String {
    let mut out = format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {gateway}, namespace: gateway-conformance-infra}}\nspec:\n  gatewayClassName: fairgate\n  listeners:\n"
    );
    for (name, host) in LISTENERS {
        let host = host
            .map(|h| format!(", hostname: \"{h}\""))
            .unwrap_or_default();
        out.push_str(&format!(
            "  - {{name: {name}, port: 80, protocol: HTTP{host}, allowedRoutes: {{namespaces: {{from: All}}}}}}\n"
        ));
    }
    for (name, _) in LISTENERS {
        let hostnames = hostnames
            .map(|h| format!("  hostnames: {h}\n"))
            .unwrap_or_default();
        out.push_str(&format!(
            "---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: attaches-to-{name}{suffix}, namespace: gateway-conformance-infra}}\nspec:\n  parentRefs: [{{name: {gateway}, namespace: gateway-conformance-infra, sectionName: {name}}}]\n{hostnames}  rules:\n  - matches: [{{path: {{type: PathPrefix, value: /{name}}}}}]\n    backendRefs: [{{name: infra-backend-v1, port: 8080}}]\n"
        ));
    }
    out
}

/// Each host is answered on the path of one listener's route, and 404 on
/// the other three.
const ANSWERED: [(&str, &str); 4] = [
    ("bar.com", "empty-hostname"),
    ("bar.example.com", "wildcard-example-com"),
    ("bar.foo.example.com", "wildcard-foo-example-com"),
    ("abc.foo.example.com", "abc-foo-example-com"),
];

async fn isolated(c: &Conformance, gateway: &str, suffix: &str) {
    let gw = c.gateway(gateway).await;
    for (name, _) in LISTENERS {
        c.accepted(
            "httproutes",
            INFRA,
            &format!("attaches-to-{name}{suffix}"),
            gateway,
            "True",
        );
    }
    for (host, own) in ANSWERED {
        for (listener, _) in LISTENERS {
            let path = format!("/{listener}");
            match listener == own {
                true => {
                    let got = to(&gw, host, &path, &[], "infra-backend-v1", INFRA).await;
                    assert_eq!(got.host, host);
                }
                false => {
                    status(&gw, host, &path, &[], 404).await;
                }
            }
        }
    }
}

/// GatewayHTTPListenerIsolation (`gateway-http-listener-isolation.go`).
#[tokio::test]
async fn gateway_http_listener_isolation() {
    let c = Conformance::start();
    let plain = "http-listener-isolation";
    let named = "http-listener-isolation-with-hostname-intersection";
    let suffix = "-with-hostname-intersection";
    c.apply(&manifest(plain, "", None));
    c.apply(&manifest(named, suffix, Some(INTERSECTION_HOSTS)));
    isolated(&c, plain, "").await;
    isolated(&c, named, suffix).await;
}
