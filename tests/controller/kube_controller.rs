//! Controller mode against the Kubernetes API stand-in (`common::kube_api`),
//! driven by the real `kubectl` the way an operator would: Ingresses
//! created, replaced and deleted are served (and only those of our
//! class), pools follow EndpointSlices, withheld Ingresses get Events.

use crate::common;

use std::time::{Duration, Instant};

use common::cluster::*;
use common::kube_api::KubeApi;
use common::*;
use serde_json::Value;

const INGRESSES: &str = "networking.k8s.io/v1/ingresses";
const EVENTS: &str = "v1/events";

/// A GET of `path` on `host` through the gateway: its status.
/// Polls until `host` `path` answers `want`; how long it took.
async fn answers(gw: &Gateway, host: &str, path: &str, want: u16) -> Option<Duration> {
    let started = Instant::now();
    let ok = eventually(Duration::from_secs(10), || async move {
        host_status(gw, host, path).await == want
    })
    .await;
    ok.then(|| started.elapsed())
}

/// The API with our class, nginx's class, and Service `web` backed by `echo`.
fn cluster(echo: &EchoProcess) -> KubeApi {
    let api = shop_api(&echo.addr);
    api.apply(ingress_class("nginx", "k8s.io/ingress-nginx", false));
    api
}

#[tokio::test]
async fn kubectl_create_replace_and_delete_are_served_and_another_class_never() {
    let echo = EchoProcess::start();
    let api = cluster(&echo);
    let dir = tempfile::tempdir().unwrap();
    let kc = api.kubeconfig(dir.path());
    let gw = controller(&base_policy(""), &kc, "fairgate-0").await;

    let ing = shop_ingress("web", "shop.example", "/cart");
    kubectl(&kc, &["create", "-f", "-"], Some(&ing)).expect("kubectl create");
    let took = answers(&gw, "shop.example", "/cart", 200).await;
    let took = took.unwrap_or_else(|| panic!("not served in 10 s:\n{}", gw.logs()));
    println!("created Ingress served after {took:?}");
    assert!(took < Duration::from_secs(2), "served only after {took:?}");

    let other = ingress("shop", "other", Some("nginx"), "other.example", "/", "web");
    kubectl(&kc, &["create", "-f", "-"], Some(&other)).expect("kubectl create");

    let moved = shop_ingress("web", "shop.example", "/basket");
    kubectl(&kc, &["replace", "-f", "-"], Some(&moved)).expect("kubectl replace");
    let took = answers(&gw, "shop.example", "/basket", 200)
        .await
        .expect("new path served");
    println!("replaced Ingress served after {took:?}");
    assert_eq!(host_status(&gw, "shop.example", "/cart").await, 404);

    kubectl(&kc, &["delete", "ingress", "web", "-n", "shop"], None).expect("kubectl delete");
    answers(&gw, "shop.example", "/basket", 404)
        .await
        .expect("deleted Ingress gone");
    // Built several times since; another class's Ingress never served,
    // and its status never written.
    assert_eq!(host_status(&gw, "other.example", "/").await, 404);
    let other = api.get(INGRESSES, "shop", "other").unwrap();
    assert_eq!(other["status"]["loadBalancer"], Value::Null, "{other}");
    assert!(api
        .writes()
        .iter()
        .all(|w| !w.path.contains("/ingresses/other")));
}

#[tokio::test]
async fn status_is_published_by_the_lease_holder_only() {
    let echo = EchoProcess::start();
    let api = cluster(&echo);
    let dir = tempfile::tempdir().unwrap();
    let kc = api.kubeconfig(dir.path());
    api.apply(shop_ingress("web", "shop.example", "/"));
    let first = controller(&base_policy(""), &kc, "fairgate-a").await;
    let second = controller(&base_policy(""), &kc, "fairgate-b").await;
    answers(&second, "shop.example", "/", 200)
        .await
        .expect("second serves");
    let published = api.wait_for(Duration::from_secs(10), |api| {
        api.get(INGRESSES, "shop", "web").unwrap()["status"]["loadBalancer"]["ingress"][0]["ip"]
            == "203.0.113.7"
    });
    assert!(published, "status not written:\n{}", first.logs());
    let lease = api
        .get(
            "coordination.k8s.io/v1/leases",
            "ingress",
            "fairgate-leader",
        )
        .unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "fairgate-a", "{lease}");
    let status_writers: Vec<String> = api
        .writes()
        .iter()
        .filter(|w| w.path.ends_with("/status"))
        .map(|w| w.path.clone())
        .collect();
    assert_eq!(status_writers.len(), 1, "{status_writers:?}");

    // The holder dies: the other takes the Lease within its duration (3 s,
    // from the last renewal, which came before the kill; 0.5 s for the
    // take itself), and writes the status it finds wrong.
    let killed = Instant::now();
    drop(first);
    api.apply(shop_ingress("web2", "two.example", "/"));
    let taken = api.wait_for(Duration::from_secs(10), |api| {
        api.get(
            "coordination.k8s.io/v1/leases",
            "ingress",
            "fairgate-leader",
        )
        .unwrap()["spec"]["holderIdentity"]
            == "fairgate-b"
    });
    println!("Lease taken over after {:?}", killed.elapsed());
    assert!(taken, "not taken over:\n{}", second.logs());
    assert!(
        killed.elapsed() < Duration::from_millis(3500),
        "{:?}",
        killed.elapsed()
    );
    let written = api.wait_for(Duration::from_secs(10), |api| {
        api.get(INGRESSES, "shop", "web2").unwrap()["status"]["loadBalancer"]["ingress"][0]["ip"]
            == "203.0.113.7"
    });
    assert!(written, "the new holder did not write status");
}

#[tokio::test]
async fn hostile_ingresses_are_withheld_alone_with_a_warning_event() {
    let echo = EchoProcess::start();
    let api = cluster(&echo);
    let dir = tempfile::tempdir().unwrap();
    let kc = api.kubeconfig(dir.path());
    for i in 0..50 {
        let host = format!("h{i}.example");
        api.apply(shop_ingress(&format!("ok-{i}"), &host, "/"));
    }
    let mut auth = shop_ingress("auth", "auth.example", "/");
    auth["metadata"]["annotations"] = serde_json::json!({"nginx.ingress.kubernetes.io/auth-url": "http://sso.example/check?uri=$request_uri"});
    api.apply(auth);
    let mut regex = shop_ingress("regex", "re.example", "/(a");
    regex["metadata"]["annotations"] =
        serde_json::json!({"nginx.ingress.kubernetes.io/use-regex": "true"});
    regex["spec"]["rules"][0]["http"]["paths"][0]["pathType"] = "ImplementationSpecific".into();
    api.apply(regex);
    let gw = controller(&base_policy(""), &kc, "fairgate-0").await;

    for i in 0..50 {
        assert_eq!(
            host_status(&gw, &format!("h{i}.example"), "/").await,
            200,
            "h{i}"
        );
    }
    assert_eq!(host_status(&gw, "auth.example", "/").await, 404);
    assert_eq!(host_status(&gw, "re.example", "/a").await, 404);
    for name in ["auth", "regex"] {
        let found = api.wait_for(Duration::from_secs(10), |api| {
            api.list(EVENTS, "shop").iter().any(|e| {
                e["involvedObject"]["name"] == name
                    && e["type"] == "Warning"
                    && e["reason"] == "Withheld"
            })
        });
        assert!(
            found,
            "no Warning Event for {name}: {:?}",
            api.list(EVENTS, "shop")
        );
    }
    let metrics = reqwest::get(gw.admin_url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        metric(&metrics, "fairgate_kubernetes_rejected_ingresses"),
        Some(2.0)
    );
}

#[tokio::test]
async fn an_ingress_never_reaches_a_pool_or_a_route_of_the_base_policy() {
    let echo = EchoProcess::start();
    let internal = EchoProcess::start();
    let api = cluster(&echo);
    let dir = tempfile::tempdir().unwrap();
    let kc = api.kubeconfig(dir.path());
    // The base keeps a pool of the name an Ingress of Service shop/web gets.
    let base = base_policy("").replace(
        "default_limits: none\n",
        &format!(
            "default_limits: none\nupstreams: {{shop_web-80: {{targets: [\"{}\"]}}}}\n\
             routes:\n  - {{name: internal, match: {{host: internal.example, path_prefix: /}}, upstream: shop_web-80, auth: none}}\n",
            internal.addr
        ),
    );
    api.apply(shop_ingress("web", "shop.example", "/"));
    api.apply(ingress(
        "shop",
        "ok",
        Some("fairgate"),
        "ok.example",
        "/",
        "other",
    ));
    // And one claiming the host of a base route: the base's comes first.
    api.apply(ingress(
        "shop",
        "sneaky",
        Some("fairgate"),
        "internal.example",
        "/",
        "other",
    ));
    backend(&api, "shop", "other", &echo.addr);
    let gw = controller(&base, &kc, "fairgate-0").await;
    assert_eq!(host_status(&gw, "ok.example", "/").await, 200);
    assert_eq!(host_status(&gw, "internal.example", "/").await, 200);
    assert_eq!(host_status(&gw, "shop.example", "/").await, 404);
    assert_eq!(
        internal.requests(),
        1,
        "only the base's own route reached it"
    );
    let warned = api.wait_for(Duration::from_secs(10), |api| {
        api.list(EVENTS, "shop").iter().any(|e| {
            e["involvedObject"]["name"] == "web"
                && e["reason"] == "Withheld"
                && e["message"]
                    .as_str()
                    .unwrap_or("")
                    .contains("kubernetes.name_taken")
        })
    });
    assert!(warned, "{:?}", api.list(EVENTS, "shop"));
}

#[tokio::test]
async fn the_controller_configmap_address_rules_are_served_and_follow_its_changes() {
    let echo = EchoProcess::start();
    let api = cluster(&echo);
    let dir = tempfile::tempdir().unwrap();
    let kc = api.kubeconfig(dir.path());
    let configmap = |range: &str| {
        serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "fairgate-controller", "namespace": "ingress"},
            "data": {"whitelist-source-range": range}
        })
    };
    api.apply(configmap("10.0.0.0/8"));
    api.apply(shop_ingress("web", "shop.example", "/"));
    let base = base_policy("  configmap: ingress/fairgate-controller\n");
    let gw = controller(&base, &kc, "fairgate-0").await;
    // Only 10/8 may come in: the test's 127.0.0.1 is refused.
    assert_eq!(host_status(&gw, "shop.example", "/").await, 403);
    kubectl(
        &kc,
        &["replace", "-f", "-"],
        Some(&configmap("127.0.0.0/8")),
    )
    .expect("replace");
    let opened = answers(&gw, "shop.example", "/", 200).await;
    assert!(opened.is_some(), "{}", gw.logs());
    assert_eq!(echo.requests(), 1);
}

#[tokio::test]
async fn the_legacy_class_annotation_and_the_default_class_are_honoured() {
    let echo = EchoProcess::start();
    let api = cluster(&echo);
    let dir = tempfile::tempdir().unwrap();
    let kc = api.kubeconfig(dir.path());
    let legacy = |name: &str, class: &str, host: &str| {
        let mut ing = ingress("shop", name, None, host, "/", "web");
        ing["metadata"]["annotations"] = serde_json::json!({"kubernetes.io/ingress.class": class});
        ing
    };
    api.apply(legacy("ours", "fairgate", "ours.example"));
    api.apply(legacy("theirs", "nginx", "theirs.example"));
    api.apply(ingress("shop", "none", None, "none.example", "/", "web"));
    let gw = controller(&base_policy(""), &kc, "fairgate-0").await;
    assert_eq!(host_status(&gw, "ours.example", "/").await, 200);
    assert_eq!(host_status(&gw, "theirs.example", "/").await, 404);
    assert_eq!(host_status(&gw, "none.example", "/").await, 404);
    // Our class becomes the cluster's default: Ingresses naming none are ours.
    api.apply(ingress_class("fairgate", CONTROLLER, true));
    assert!(answers(&gw, "none.example", "/", 200).await.is_some());
    assert_eq!(host_status(&gw, "theirs.example", "/").await, 404);
}

#[tokio::test]
async fn a_tls_ingress_on_a_gateway_without_a_tls_listener_is_told_so() {
    let echo = EchoProcess::start();
    let api = cluster(&echo);
    let dir = tempfile::tempdir().unwrap();
    let kc = api.kubeconfig(dir.path());
    let mut ing = shop_ingress("web", "shop.example", "/");
    ing["spec"]["tls"] = serde_json::json!([{"hosts": ["shop.example"], "secretName": "web-tls"}]);
    api.apply(ing);
    let gw = controller(&base_policy(""), &kc, "fairgate-0").await;
    assert_eq!(host_status(&gw, "shop.example", "/").await, 200);
    let told = api.wait_for(Duration::from_secs(10), |api| {
        api.list(EVENTS, "shop")
            .iter()
            .any(|e| e["reason"] == "NoTLSListener" && e["type"] == "Warning")
    });
    assert!(told, "{:?}", api.list(EVENTS, "shop"));
}

/// The Warning Events of `ingress`: (name, count) of each.
fn warnings(api: &KubeApi, ingress: &str) -> Vec<(String, i64)> {
    api.list(EVENTS, "shop")
        .iter()
        .filter(|e| e["involvedObject"]["name"] == ingress && e["type"] == "Warning")
        .map(|e| {
            let name = e["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            (name, e["count"].as_i64().unwrap_or(0))
        })
        .collect()
}

/// Issue 39, item 7: the API server deletes an Event an hour after its
/// last write, while a withheld Ingress stays withheld: its Warning is
/// written again every `kubernetes.event_refresh` (count raised), made
/// anew once it has expired, and left alone once its cause is gone.
#[tokio::test]
async fn item_7_a_withheld_ingress_keeps_its_warning_while_the_cause_stands() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    let dir = tempfile::tempdir().unwrap();
    let kc = api.kubeconfig(dir.path());
    let mut regex = shop_ingress("regex", "re.example", "/(a");
    regex["metadata"]["annotations"] =
        serde_json::json!({"nginx.ingress.kubernetes.io/use-regex": "true"});
    regex["spec"]["rules"][0]["http"]["paths"][0]["pathType"] = "ImplementationSpecific".into();
    api.apply(regex);
    let gw = controller(&base_policy("  event_refresh: 1s\n"), &kc, "fairgate-0").await;
    let withheld = || warnings(&api, "regex");
    let raised = api.wait_for(Duration::from_secs(10), |_| {
        withheld().iter().any(|(_, count)| *count >= 3)
    });
    assert!(raised, "not written again: {:?}\n{}", withheld(), gw.logs());

    // Expired (the API server's TTL, as a delete): made anew.
    let names: Vec<String> = withheld().into_iter().map(|(n, _)| n).collect();
    for name in &names {
        api.delete(EVENTS, "shop", name);
    }
    assert!(withheld().is_empty());
    let back = api.wait_for(Duration::from_secs(10), |_| !withheld().is_empty());
    assert!(back, "not made anew after it expired\n{}", gw.logs());

    // The cause gone: served, and its Warnings are no longer written.
    let fixed = shop_ingress("regex", "re.example", "/a");
    api.apply(fixed);
    let served = eventually(Duration::from_secs(10), || async {
        host_status(&gw, "re.example", "/a").await == 200
    })
    .await;
    assert!(served, "{}", gw.logs());
    let counts = withheld();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(withheld(), counts, "refreshed after its cause was gone");
}

/// The ingress-style request series name where a request went as an
/// ingress-nginx dashboard reads it: the Ingress's namespace and name, its
/// Service, the host its rule names; a request no Ingress routes has
/// empty ones and the route `none`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_series_carry_the_ingresss_namespace_name_and_service() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    api.apply(shop_ingress("storefront", "shop.lab", "/"));
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base_policy(""), &api.kubeconfig(dir.path()), "fairgate-0").await;
    for _ in 0..2 {
        assert_eq!(host_status(&gw, "shop.lab", "/").await, 200);
    }
    assert_eq!(host_status(&gw, "nowhere.lab", "/").await, 404);
    let series = |m: &str| -> Vec<String> {
        m.lines()
            .filter(|l| l.starts_with("fairgate_http_requests_total{"))
            .map(String::from)
            .collect()
    };
    let wanted = "fairgate_http_requests_total{host=\"shop.lab\",ingress=\"storefront\",method=\"GET\",namespace=\"shop\",route=\"shop_storefront-0\",service=\"web\",status=\"200\"} 2";
    let seen = eventually(Duration::from_secs(5), || async {
        series(&gw.metrics().await).iter().any(|l| l == wanted)
    })
    .await;
    let lines = series(&gw.metrics().await);
    assert!(seen, "{lines:#?}");
    let none = "fairgate_http_requests_total{host=\"\",ingress=\"\",method=\"GET\",namespace=\"\",route=\"none\",service=\"\",status=\"404\"} 1";
    assert!(lines.iter().any(|l| l == none), "{lines:#?}");
}
