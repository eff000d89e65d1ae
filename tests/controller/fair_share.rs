//! Issue 44 in controller mode: `fairgate.dev/fair-share` on an Ingress
//! written by a tenant with `kubectl` gives that Ingress's pools a fair
//! share, served by a real controller; a bad value withholds only that
//! Ingress, with an Event; an Ingress without it gets none.

use crate::common;

use std::time::Duration;

use common::cluster::*;
use common::*;
use serde_json::json;

const ANNOTATION: &str = "fairgate.dev/fair-share";

fn annotated(name: &str, host: &str, value: &str) -> serde_json::Value {
    let mut ing = shop_ingress(name, host, "/");
    ing["metadata"]["annotations"] = json!({ ANNOTATION: value });
    ing
}

/// `GET /` on `host` in the background: its status and body.
fn send(gw: &Gateway, host: &str, query: &str) -> tokio::task::JoinHandle<(u16, String)> {
    let request = client()
        .get(gw.url(&format!("/{query}")))
        .header("host", host);
    tokio::spawn(async move {
        let r = request.send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    })
}

/// The `fair_share` series of the gateway, by name (without the prefix).
async fn series(gw: &Gateway, name: &str) -> Vec<String> {
    let text = gw.metrics().await;
    let prefix = format!("fairgate_fair_share_{name}{{");
    text.lines()
        .filter(|l| l.starts_with(&prefix))
        .map(String::from)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_annotation_queues_and_refuses_and_nothing_adds_a_fair_share_unasked() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    let dir = tempfile::tempdir().unwrap();
    let kc = api.kubeconfig(dir.path());
    let fair = "{max_in_flight: 1, by: client_ip, queue: {per_tenant: 1, timeout: 5s}}";
    let apply = |ing: &serde_json::Value| kubectl(&kc, &["apply", "-f", "-"], Some(ing));
    apply(&annotated("web", "fair.lab", fair)).unwrap();
    apply(&shop_ingress("plain", "plain.lab", "/")).unwrap();
    let gw = controller(&base_policy(""), &kc, "fairgate-0").await;
    let served = eventually(Duration::from_secs(10), || async {
        host_status(&gw, "fair.lab", "/").await == 200
            && host_status(&gw, "plain.lab", "/").await == 200
    })
    .await;
    assert!(served, "{}", gw.logs());
    // Exactly one pool has a fair share: the annotated Ingress's.
    let limits = series(&gw, "limit").await;
    assert_eq!(limits.len(), 1, "{limits:?}");
    assert!(limits[0].ends_with(" 1"), "{limits:?}");

    let holder = send(&gw, "fair.lab", "?sleep_ms=2000");
    let in_flight = eventually(Duration::from_secs(10), || async {
        series(&gw, "in_flight")
            .await
            .iter()
            .any(|l| l.ends_with(" 1"))
    })
    .await;
    assert!(in_flight, "{:?}", series(&gw, "in_flight").await);
    let waiting = send(&gw, "fair.lab", "");
    let queued = eventually(Duration::from_secs(10), || async {
        series(&gw, "queued")
            .await
            .iter()
            .any(|l| l.ends_with(" 1"))
    })
    .await;
    assert!(queued, "{:?}", series(&gw, "queued").await);
    let (status, body) = send(&gw, "fair.lab", "").await.unwrap();
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("queue-full\""), "{body}");
    // The other Ingress's pool is not held back.
    assert_eq!(host_status(&gw, "plain.lab", "/").await, 200);
    assert_eq!(waiting.await.unwrap().0, 200);
    assert_eq!(holder.await.unwrap().0, 200);

    // A bad value withholds that Ingress only, and says why.
    apply(&annotated("bad", "bad.lab", "{max_in_flight: 0}")).unwrap();
    let withheld = api.wait_for(Duration::from_secs(10), |api| {
        api.list("v1/events", "shop").iter().any(|e| {
            e["involvedObject"]["name"] == "bad"
                && e["reason"] == "Withheld"
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("fair_share"))
        })
    });
    assert!(
        withheld,
        "{:#?}\n{}",
        api.list("v1/events", "shop"),
        gw.logs()
    );
    assert_eq!(host_status(&gw, "bad.lab", "/").await, 404);
    assert_eq!(host_status(&gw, "fair.lab", "/").await, 200);
}

const FAIR_POLICY: &str = r#"
apiVersion: fairgate.dev/v1alpha1
kind: RoutePolicy
metadata: {name: shared-fairly, namespace: gateway-conformance-infra}
spec:
  auth: none
  fairShare: {maxInFlight: 1, byHeader: X-Team, perTenant: 1, timeout: 5s, weights: {gold: 4}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: fair, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /fair}}]
    filters: [{type: ExtensionRef, extensionRef: {group: fairgate.dev, kind: RoutePolicy, name: shared-fairly}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - backendRefs: [{name: infra-backend-v1, port: 8080}]
"#;

/// A RoutePolicy's `fairShare` gives the rules naming it a pool of their
/// own with that fair share (queued per `X-Team`); the route's other rule,
/// to the same Service, is not held back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_policy_fair_share_queues_the_rules_that_name_it() {
    use common::gateway_api::*;
    let c = Conformance::start();
    let gw = c.gateway("same-namespace").await;
    c.apply(FAIR_POLICY);
    c.accepted("httproutes", INFRA, "fair", "same-namespace", "True");
    status(&gw, "example.com", "/fair", &[], 200).await;
    let limits = series(&gw, "limit").await;
    assert_eq!(limits.len(), 1, "{limits:?}");
    assert!(limits[0].ends_with(" 1"), "{limits:?}");

    let team = |query: &str, team: &str| {
        let request = client()
            .get(gw.url(&format!("/fair{query}")))
            .header("host", "example.com")
            .header("x-team", team.to_string());
        tokio::spawn(async move {
            let r = request.send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        })
    };
    let holder = team("?sleep_ms=2000", "red");
    let held = eventually(Duration::from_secs(10), || async {
        series(&gw, "in_flight")
            .await
            .iter()
            .any(|l| l.ends_with(" 1"))
    })
    .await;
    assert!(held, "{:?}", series(&gw, "in_flight").await);
    let (red, blue) = (team("", "red"), team("", "blue"));
    let queued = eventually(Duration::from_secs(10), || async {
        series(&gw, "queued")
            .await
            .iter()
            .any(|l| l.ends_with(" 2"))
    })
    .await;
    assert!(queued, "{:?}", series(&gw, "queued").await);
    // Red's queue (of one) is full; blue's is not, and neither holds back
    // the rule without the policy.
    let (status_red, body) = team("", "red").await.unwrap();
    assert_eq!(status_red, 429, "{body}");
    assert_eq!(host_status(&gw, "example.com", "/other").await, 200);
    for waiting in [holder, red, blue] {
        assert_eq!(waiting.await.unwrap().0, 200);
    }

    // A bad value leaves that route unaccepted, and the others served.
    c.apply(
        &FAIR_POLICY
            .replace("shared-fairly", "broken")
            .replace("maxInFlight: 1", "maxInFlight: 0")
            .replace("name: fair,", "name: unfair,")
            .replace("/fair", "/unfair"),
    );
    let entry = c.parent_condition(
        "httproutes",
        INFRA,
        "unfair",
        "same-namespace",
        &[("Accepted", "False", "UnsupportedValue")],
    );
    assert!(
        entry.to_string().contains("fair_share.max_in_flight"),
        "{entry}"
    );
    status(&gw, "example.com", "/fair", &[("x-team", "red")], 200).await;
}
