//! Issue 42, continued from `annotations_served.rs`: the annotations that
//! decide where a request goes and what it carries (canaries, address
//! rules, rewrites, balancing, header snippets), served by a real
//! controller process to real requests.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use super::annotations_served::{annotated, ask, configmap, get, with_configmap};
use common::cluster::*;
use common::*;
use serde_json::{json, Value};

/// A canary Ingress `name` for `host` to Service `beta` with `pairs`.
fn canary(name: &str, host: &str, pairs: &[(&str, &str)]) -> Value {
    let all = [&[("canary", "true")][..], pairs].concat();
    let mut ing = annotated(name, host, &all);
    ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"] = json!("beta");
    ing
}

/// Request headers, as names and values.
type Headers<'a> = &'a [(&'a str, &'a str)];

/// Which pod answered `host` with `headers`.
async fn pod(gw: &Gateway, host: &str, headers: &[(&str, &str)]) -> String {
    let r = ask(gw, "GET", host, "/", headers, Vec::new()).await;
    assert_eq!(r.status, 200, "{host} {headers:?}: {}", r.body);
    r.echoed()["pod"].as_str().unwrap().to_string()
}

/// Each way a canary Ingress takes requests from its main Ingress: by a
/// header (`always`/`never`, an exact value, a pattern), by a cookie, and
/// by weight over `canary-weight-total`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_annotations_split_requests_as_written() {
    let stable = EchoProcess::start_as([127, 0, 0, 1], "stable", "shop");
    let beta = EchoProcess::start_as([127, 0, 0, 1], "beta", "shop");
    let api = shop_api(&stable.addr);
    backend(&api, "shop", "beta", &beta.addr);
    let by = ("canary-by-header", "X-Beta");
    let canaries = [
        canary("c0", "c0.lab", &[by]),
        canary("c1", "c1.lab", &[by, ("canary-by-header-value", "yes")]),
        canary("c2", "c2.lab", &[by, ("canary-by-header-pattern", "b.*")]),
        canary("c3", "c3.lab", &[("canary-by-cookie", "beta")]),
        canary(
            "c4",
            "c4.lab",
            &[("canary-weight", "1"), ("canary-weight-total", "1")],
        ),
    ];
    for (i, c) in canaries.into_iter().enumerate() {
        api.apply(shop_ingress(&format!("main{i}"), &format!("c{i}.lab"), "/"));
        api.apply(c);
    }
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base_policy(""), &api.kubeconfig(dir.path()), "fairgate-0").await;
    let cases: [(&str, Headers, &str); 11] = [
        ("c0.lab", &[("x-beta", "always")], "beta"),
        ("c0.lab", &[("x-beta", "never")], "stable"),
        ("c0.lab", &[], "stable"),
        ("c1.lab", &[("x-beta", "yes")], "beta"),
        ("c1.lab", &[("x-beta", "Yes")], "stable"),
        ("c2.lab", &[("x-beta", "blue")], "beta"),
        ("c2.lab", &[("x-beta", "red")], "stable"),
        ("c3.lab", &[("cookie", "beta=always")], "beta"),
        ("c3.lab", &[("cookie", "beta=never")], "stable"),
        ("c3.lab", &[], "stable"),
        ("c4.lab", &[], "beta"),
    ];
    for (host, headers, want) in cases {
        assert_eq!(pod(&gw, host, headers).await, want, "{host} {headers:?}");
    }
    for _ in 0..5 {
        assert_eq!(pod(&gw, "c4.lab", &[]).await, "beta");
    }
}

/// `from-to-www-redirect` on two Ingresses of one host (paths `/a` and
/// `/b`): both paths are served, as ingress-nginx serves them, and
/// `www.two.lab` answers one redirect. Each Ingress used to add a redirect
/// route of the same name, so the policy did not build with the second,
/// which was withheld (`/b` answered 404).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_ingresses_of_one_host_both_redirect_from_www() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    for (name, path) in [("a", "/a"), ("b", "/b")] {
        let mut ing = shop_ingress(name, "two.lab", path);
        ing["metadata"]["annotations"] =
            json!({"nginx.ingress.kubernetes.io/from-to-www-redirect": "true"});
        api.apply(ing);
    }
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base_policy(""), &api.kubeconfig(dir.path()), "fairgate-0").await;
    for path in ["/a", "/b"] {
        let status = host_status(&gw, "two.lab", path).await;
        assert_eq!(status, 200, "{path}\n{}", gw.logs());
    }
    let no_follow = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = no_follow
        .get(gw.url("/b/c?d=1"))
        .header("host", "www.two.lab")
        .send()
        .await
        .unwrap();
    let location = r.headers().get("location").map(|v| v.to_str().unwrap());
    assert_eq!(
        (r.status().as_u16(), location),
        (308, Some("http://two.lab/b/c?d=1"))
    );
}

/// `allowlist-source-range`, `rewrite-target` with `use-regex`,
/// `custom-headers` from the namespace's ConfigMap, `server-snippet`
/// header directives (snippets allowed by the controller's ConfigMap),
/// and `limit-allowlist` exempting loopback from the Ingress's own limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn address_rewrite_header_and_allowlist_annotations_are_served() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    api.apply(configmap(json!({"allow-snippet-annotations": "true"})));
    api.apply(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "extra", "namespace": "shop"},
        "data": {"X-Shop": "lamps"}
    }));
    let mut rewrite = annotated(
        "rewrite",
        "re.lab",
        &[("use-regex", "true"), ("rewrite-target", "/$2")],
    );
    let path = &mut rewrite["spec"]["rules"][0]["http"]["paths"][0];
    path["path"] = json!("/api(/|$)(.*)");
    path["pathType"] = json!("ImplementationSpecific");
    let limit = [("limit-rps", "1"), ("limit-burst-multiplier", "1")];
    let allowed = [&limit[..], &[("limit-allowlist", "127.0.0.0/8")]].concat();
    let snippet = "more_set_headers \"X-Frame-Options: DENY\";";
    let ingresses = [
        annotated(
            "far",
            "far.lab",
            &[("allowlist-source-range", "10.0.0.0/8")],
        ),
        annotated(
            "near",
            "near.lab",
            &[("allowlist-source-range", "127.0.0.1/32")],
        ),
        rewrite,
        annotated("custom", "custom.lab", &[("custom-headers", "extra")]),
        annotated("snippet", "snippet.lab", &[("server-snippet", snippet)]),
        annotated("limited", "limited.lab", &limit),
        annotated("exempt", "exempt.lab", &allowed),
    ];
    for ing in ingresses {
        api.apply(ing);
    }
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&with_configmap(), &api.kubeconfig(dir.path()), "fairgate-0").await;
    assert_eq!(get(&gw, "far.lab", "/").await.status, 403);
    assert_eq!(get(&gw, "near.lab", "/").await.status, 200);
    let seen = get(&gw, "re.lab", "/api/items?page=2").await.echoed();
    assert_eq!(
        (&seen["path"], &seen["query"]),
        (&json!("/items"), &json!("page=2"))
    );
    assert_eq!(get(&gw, "re.lab", "/other").await.status, 404);
    assert_eq!(get(&gw, "custom.lab", "/").await.header("x-shop"), "lamps");
    let r = get(&gw, "snippet.lab", "/").await;
    assert_eq!(r.header("x-frame-options"), "DENY");
    let mut limited = Vec::new();
    for _ in 0..4 {
        limited.push(get(&gw, "limited.lab", "/").await.status);
    }
    assert_eq!(limited, [200, 200, 503, 503]);
    for _ in 0..4 {
        assert_eq!(get(&gw, "exempt.lab", "/").await.status, 200);
    }
}

/// `load-balance: ewma` (served as the less busy of two endpoints): while
/// one pod holds a slow request, every other request goes to the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_balance_ewma_sends_requests_to_the_idle_pod() {
    let a = EchoProcess::start_at(SocketAddr::from(([127, 3, 30, 1], 0)), "pod-a", "shop");
    let at = SocketAddr::from(([127, 3, 30, 2], a.addr.port()));
    let b = EchoProcess::start_at(at, "pod-b", "shop");
    let api = shop_api(&a.addr);
    api.apply(slice(
        "shop",
        "web-1",
        "web",
        &[ready(&a.addr), ready(&b.addr)],
    ));
    api.apply(annotated("lb", "lb.lab", &[("load-balance", "ewma")]));
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base_policy(""), &api.kubeconfig(dir.path()), "fairgate-0").await;
    let slow = tokio::spawn({
        let url = gw.url("/?sleep_ms=3000");
        async move {
            let r = client().get(url).header("host", "lb.lab").send().await;
            r.unwrap().status().as_u16()
        }
    });
    let busy = |p: &EchoProcess| p.stats()["in_flight"].as_u64() == Some(1);
    let held = eventually(Duration::from_secs(5), || async { busy(&a) || busy(&b) }).await;
    assert!(held);
    let idle = if busy(&a) { "pod-b" } else { "pod-a" };
    for _ in 0..6 {
        assert_eq!(pod(&gw, "lb.lab", &[]).await, idle);
    }
    assert_eq!(slow.await.unwrap(), 200);
}

/// Every annotation the migration guide's mapping table maps (its fairgate
/// key is not "nothing") is written, by name, in a test that starts a
/// controller process: the Done-when of issue 42, kept true.
#[test]
fn every_mapped_annotation_is_served_by_a_controller_test() {
    let root = env!("CARGO_MANIFEST_DIR");
    let guide = std::fs::read_to_string(format!("{root}/docs/migrating-from-ingress-nginx.md"))
        .expect("the migration guide");
    let table = guide
        .split("## The mapping")
        .nth(1)
        .and_then(|t| t.split("| annotation | fairgate key |").nth(1))
        .and_then(|t| t.split("\n\n").next())
        .expect("the mapping section's annotation table");
    let served = [
        "annotations_served.rs",
        "annotations_routing.rs",
        "migration_parity.rs",
        "tls_hosts.rs",
        "fourth_attack.rs",
        "fourth_attack_bounds.rs",
        "kube_auth.rs",
        "kube_controller.rs",
        "kit.rs",
    ];
    let sources: Vec<String> = served
        .iter()
        .map(|f| std::fs::read_to_string(format!("{root}/tests/controller/{f}")).unwrap())
        .collect();
    for text in &sources {
        assert!(
            text.contains("controller("),
            "a file that starts no controller"
        );
    }
    let mut missing = Vec::new();
    let mut mapped = 0;
    for row in table.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split(" | ").collect();
        let name = cells[0].trim_start_matches("| ").trim_matches('`');
        if cells.get(1) == Some(&"nothing") {
            continue;
        }
        mapped += 1;
        let quoted = [format!("\"{name}\""), format!("/{name}\"")];
        if !sources.iter().any(|s| quoted.iter().any(|q| s.contains(q))) {
            missing.push(name.to_string());
        }
    }
    assert!(mapped >= 85, "{mapped} mapped rows read: the table moved?");
    assert_eq!(missing, Vec::<String>::new());
}
