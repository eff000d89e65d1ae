//! The Kubernetes API stand-in (`common::kube_api`) is faithful where the
//! ingress controller and an operator depend on it: the real `kubectl`
//! creates, reads, replaces, patches, lists, watches and deletes through
//! it, and raw requests check what kubectl does not show (410 Gone after a
//! compaction, pages, bookmarks, replayed watches, Status bodies, a stop
//! that closes every connection).

use crate::common;

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use common::kube_api::{line_with, KubeApi, Kubectl, Ran};
use serde_json::{json, Value};

const INGRESSES: &str = "networking.k8s.io/v1/ingresses";
const CONFIGMAPS: &str = "v1/configmaps";

/// The stand-in, and kubectl pointed at it.
struct Cluster {
    api: KubeApi,
    dir: tempfile::TempDir,
    k: Kubectl,
}

impl Cluster {
    fn start() -> Cluster {
        let api = KubeApi::start();
        let dir = tempfile::tempdir().unwrap();
        let k = api.kubectl(dir.path());
        Cluster { api, dir, k }
    }

    fn kubectl(&self, args: &[&str], stdin: &str) -> Ran {
        self.k.run(args, stdin)
    }

    fn create(&self, manifest: &Value) -> String {
        self.k.create(manifest)
    }

    /// `kubectl create namespace NAME` (a protobuf body).
    fn namespace(&self, name: &str) {
        let ran = self.kubectl(&["create", "namespace", name], "");
        assert_eq!(
            ran.stdout.trim(),
            format!("namespace/{name} created"),
            "{}",
            ran.stderr
        );
        let ns = self.api.get("v1/namespaces", "", name).unwrap();
        assert_eq!(ns["metadata"]["name"], name);
    }
}

fn ingress(ns: &str, name: &str, path: &str) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
        "spec": {"ingressClassName": "fairgate", "rules": [{"host": "shop.example", "http": {"paths": [
            {"path": path, "pathType": "Prefix",
             "backend": {"service": {"name": name, "port": {"number": 80}}}}]}}]},
    })
}

fn configmap(ns: &str, name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": ns, "labels": labels}, "data": {"k": "v"}})
}

fn rv_of(object: &Value) -> u64 {
    let rv = object["metadata"]["resourceVersion"]
        .as_str()
        .expect("a resourceVersion");
    rv.parse().expect("a decimal resourceVersion")
}

fn get_ingress(c: &Cluster, name: &str) -> Value {
    c.kubectl(&["get", "ingress", name, "-n", "shop", "-o", "json"], "")
        .json()
}

#[test]
fn kubectl_creates_reads_replaces_and_deletes_an_ingress() {
    let c = Cluster::start();
    c.namespace("shop");
    let created = c.create(&ingress("shop", "web", "/"));
    assert_eq!(created, "ingress.networking.k8s.io/web created");
    let got = get_ingress(&c, "web");
    let uid = got["metadata"]["uid"].as_str().unwrap().to_string();
    assert_eq!(uid.len(), 36, "a UUID: {uid}");
    assert_eq!(rv_of(&got), c.api.resource_version());
    assert_eq!(got["metadata"]["generation"], 1);
    assert_eq!(got["metadata"]["namespace"], "shop");
    assert_eq!(got["spec"]["rules"][0]["http"]["paths"][0]["path"], "/");
    assert_eq!(Some(&got), c.api.get(INGRESSES, "shop", "web").as_ref());

    let ran = c.kubectl(
        &["replace", "-f", "-"],
        &ingress("shop", "web", "/v2").to_string(),
    );
    assert_eq!(
        ran.stdout.trim(),
        "ingress.networking.k8s.io/web replaced",
        "{}",
        ran.stderr
    );
    let replaced = get_ingress(&c, "web");
    assert_eq!(
        replaced["spec"]["rules"][0]["http"]["paths"][0]["path"],
        "/v2"
    );
    assert_eq!(rv_of(&replaced), rv_of(&got) + 1);
    assert_eq!(replaced["metadata"]["generation"], 2);
    assert_eq!(replaced["metadata"]["uid"], uid.as_str());

    let ran = c.kubectl(&["delete", "ingress", "web", "-n", "shop"], "");
    assert_eq!(
        ran.stdout.trim(),
        "ingress.networking.k8s.io \"web\" deleted",
        "{}",
        ran.stderr
    );
    let ran = c.kubectl(&["get", "ingress", "web", "-n", "shop", "-o", "json"], "");
    assert_eq!(ran.code, 1);
    assert_eq!(
        ran.stderr.trim(),
        "Error from server (NotFound): ingresses.networking.k8s.io \"web\" not found"
    );
    assert_eq!(c.api.get(INGRESSES, "shop", "web"), None);
}

#[test]
fn creating_an_existing_ingress_fails_with_already_exists() {
    let c = Cluster::start();
    c.namespace("shop");
    c.create(&ingress("shop", "web", "/"));
    let before = c.api.resource_version();
    let ran = c.kubectl(
        &["create", "-f", "-"],
        &ingress("shop", "web", "/other").to_string(),
    );
    assert_eq!(ran.code, 1);
    assert_eq!(
        ran.stderr.trim(),
        "Error from server (AlreadyExists): error when creating \"STDIN\": \
         ingresses.networking.k8s.io \"web\" already exists"
    );
    assert_eq!(
        c.api.resource_version(),
        before,
        "a refused create writes nothing"
    );
    let kept = c.api.get(INGRESSES, "shop", "web").unwrap();
    assert_eq!(kept["spec"]["rules"][0]["http"]["paths"][0]["path"], "/");
}

#[test]
fn kubectl_lists_ingresses_of_one_and_of_every_namespace() {
    let c = Cluster::start();
    for ns in ["a", "b"] {
        c.namespace(ns);
        c.create(&ingress(ns, "web", "/"));
    }
    c.create(&ingress("b", "api", "/api"));
    let names = |list: &Value| -> Vec<String> {
        let items = list["items"].as_array().unwrap();
        let name = |i: &Value| format!("{}/{}", i["metadata"]["namespace"], i["metadata"]["name"]);
        items.iter().map(name).map(|n| n.replace('"', "")).collect()
    };
    let all = c
        .kubectl(&["get", "ingress", "-A", "-o", "json"], "")
        .json();
    assert_eq!(names(&all), ["a/web", "b/api", "b/web"]);
    let in_b = c
        .kubectl(&["get", "ing", "-n", "b", "-o", "json"], "")
        .json();
    assert_eq!(names(&in_b), ["b/api", "b/web"]);
    let selected = c.kubectl(&["get", "ing", "-A", "-l", "app=api", "-o", "name"], "");
    assert_eq!(selected.stdout.trim(), "ingress.networking.k8s.io/api");
    assert_eq!(c.api.list_requests(INGRESSES), 3);
}

/// Waits until the watch of a kubectl just started has reached the server.
fn watching(c: &Cluster) {
    let watched = |api: &KubeApi| api.watch_requests(INGRESSES) == 1;
    assert!(c.api.wait_for(Duration::from_secs(10), watched));
}

#[test]
fn kubectl_watch_sees_an_ingress_created_after_it_started() {
    let c = Cluster::start();
    c.namespace("shop");
    c.create(&ingress("shop", "web", "/"));
    let (watch, lines) = c.k.spawn(&["get", "ingresses", "-A", "-w"]);
    let header = line_with(&lines, "NAME");
    let columns: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(columns, ["NAMESPACE", "NAME", "AGE"]);
    assert!(line_with(&lines, "web").starts_with("shop"));
    watching(&c);
    c.create(&ingress("shop", "late", "/late"));
    let late = line_with(&lines, "late");
    let columns: Vec<&str> = late.split_whitespace().take(2).collect();
    assert_eq!(columns, ["shop", "late"]);
    drop(watch);
}

#[test]
fn kubectl_watch_as_json_prints_each_change() {
    let c = Cluster::start();
    c.namespace("shop");
    c.create(&ingress("shop", "web", "/"));
    let template = r#"jsonpath={.metadata.name} {.spec.rules[0].http.paths[0].path} {.metadata.resourceVersion}{"\n"}"#;
    let (watch, lines) =
        c.k.spawn(&["get", "ingress", "-n", "shop", "-w", "-o", template]);
    let rv = c.api.resource_version();
    assert_eq!(line_with(&lines, "web"), format!("web / {rv}"));
    watching(&c);
    c.api.apply(ingress("shop", "web", "/changed"));
    assert_eq!(line_with(&lines, "web"), format!("web /changed {}", rv + 1));
    drop(watch);
}

#[test]
fn a_tls_secret_made_by_kubectl_reads_back() {
    let c = Cluster::start();
    let pki = common::Pki::new(c.dir.path(), "kube");
    let (cert, key) = pki.leaf("site", "shop.example", &["shop.example"], "0A");
    let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
    // The typed generator posts protobuf, which the stand-in reads.
    let args = [
        "create", "secret", "tls", "site-tls", "--cert", cert, "--key", key,
    ];
    let ran = c.kubectl(&args, "");
    assert_eq!(
        ran.stdout.trim(),
        "secret/site-tls created",
        "{}",
        ran.stderr
    );
    let last = c.api.writes().pop().unwrap();
    assert_eq!(last.content_type, "application/vnd.kubernetes.protobuf");
    let got = c
        .kubectl(&["get", "secret", "site-tls", "-o", "json"], "")
        .json();
    assert_eq!(got["type"], "kubernetes.io/tls");
    assert_eq!(got["metadata"]["namespace"], "default");
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let crt = b64
        .decode(got["data"]["tls.crt"].as_str().unwrap())
        .unwrap();
    assert_eq!(crt, std::fs::read(cert).unwrap());
    let k = b64
        .decode(got["data"]["tls.key"].as_str().unwrap())
        .unwrap();
    assert_eq!(k, std::fs::read(key).unwrap());
    let by_type = [
        "get",
        "secrets",
        "--field-selector",
        "type=kubernetes.io/tls",
        "-o",
        "name",
    ];
    assert_eq!(c.kubectl(&by_type, "").stdout.trim(), "secret/site-tls");
    let mut broken = got.clone();
    broken["metadata"] = json!({"name": "broken"});
    broken["data"].as_object_mut().unwrap().remove("tls.key");
    let ran = c.kubectl(&["create", "-f", "-"], &broken.to_string());
    assert_eq!(
        ran.stderr.trim(),
        "The Secret \"broken\" is invalid: data[tls.key]: Required value"
    );
}

/// `kubectl patch ingress web -n shop ARGS -p PATCH`.
fn patch_web(c: &Cluster, args: &[&str], patch: &str) -> Ran {
    let web = ["patch", "ingress", "web", "-n", "shop"];
    c.kubectl(&[&web[..], args, &["-p", patch]].concat(), "")
}

/// An ingress `shop/web` whose status has a load balancer IP.
fn with_status(c: &Cluster) {
    c.namespace("shop");
    c.create(&ingress("shop", "web", "/"));
    let patch = r#"{"status":{"loadBalancer":{"ingress":[{"ip":"10.0.0.7"}]}},
                    "spec":{"ingressClassName":"other"}}"#;
    let ran = patch_web(c, &["--subresource=status", "--type=merge"], patch);
    let printed = ran.stdout.trim();
    assert_eq!(
        printed, "ingress.networking.k8s.io/web patched",
        "{}",
        ran.stderr
    );
}

#[test]
fn a_status_patch_changes_only_the_status() {
    let c = Cluster::start();
    with_status(&c);
    let got = get_ingress(&c, "web");
    let status = json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.7"}]}});
    assert_eq!(got["status"], status);
    assert_eq!(got["spec"]["ingressClassName"], "fairgate");
    assert_eq!(got["metadata"]["generation"], 1);
    let last = c.api.writes().pop().unwrap();
    let path = "/apis/networking.k8s.io/v1/namespaces/shop/ingresses/web/status";
    assert_eq!((last.method.as_str(), last.path.as_str()), ("PATCH", path));
    assert!(
        last.user_agent.starts_with("kubectl/"),
        "{}",
        last.user_agent
    );
    assert_eq!(last.content_type, "application/merge-patch+json");
}

#[test]
fn a_json_patch_of_the_main_resource_keeps_the_status() {
    let c = Cluster::start();
    with_status(&c);
    let patch = r#"[{"op":"test","path":"/spec/ingressClassName","value":"fairgate"},
                    {"op":"replace","path":"/spec/ingressClassName","value":"b"},
                    {"op":"remove","path":"/status"}]"#;
    let ran = patch_web(&c, &["--type=json"], patch);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let got = get_ingress(&c, "web");
    assert_eq!(got["spec"]["ingressClassName"], "b");
    assert_eq!(
        got["status"]["loadBalancer"]["ingress"][0]["ip"],
        "10.0.0.7"
    );
    assert_eq!(got["metadata"]["generation"], 2);
    let before = c.api.resource_version();
    let failing = r#"[{"op":"test","path":"/spec/ingressClassName","value":"fairgate"}]"#;
    let ran = patch_web(&c, &["--type=json"], failing);
    assert_eq!(ran.code, 1, "a failed test operation refuses the patch");
    let refused = "The request is invalid: testing value /spec/ingressClassName failed";
    assert_eq!(ran.stderr.trim(), refused);
    assert_eq!(c.api.resource_version(), before);
}

/// Raw requests, as the controller's client makes them.
fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Every event a watch sends until it ends.
fn watch_events(api: &KubeApi, query: &str) -> Vec<Value> {
    let url = format!("{}/api/v1/configmaps?watch=1&{query}", api.url());
    let response = http().get(url).send().unwrap();
    assert_eq!(response.status(), 200);
    let lines = BufReader::new(response).lines().map_while(Result::ok);
    lines.map(|l| serde_json::from_str(&l).unwrap()).collect()
}

#[test]
fn a_watch_from_before_a_compaction_gets_410_expired() {
    let mut api = KubeApi::start();
    let old = rv_of(&api.apply(configmap("default", "one", json!({}))));
    api.apply(configmap("default", "two", json!({})));
    let compacted = api.resource_version();
    api.restart(true);
    let events = watch_events(&api, &format!("resourceVersion={old}"));
    let status = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("too old resource version: {old} ({compacted})"),
        "reason": "Expired", "code": 410,
    });
    assert_eq!(events, [json!({"type": "ERROR", "object": status})]);
    let list = format!(
        "{}/api/v1/configmaps?resourceVersion={old}&resourceVersionMatch=NotOlderThan",
        api.url()
    );
    let listed = http().get(list).send().unwrap();
    assert_eq!(listed.status(), 410);
    assert_eq!(listed.json::<Value>().unwrap()["reason"], "Expired");
    // From the compaction point on, a watch goes on as usual.
    let events = watch_events(
        &api,
        &format!("resourceVersion={compacted}&timeoutSeconds=1"),
    );
    assert_eq!(events, Vec::<Value>::new());
    assert_eq!(api.watch_requests(CONFIGMAPS), 2);
}

#[test]
fn a_watch_replays_the_changes_after_its_resource_version_through_its_selector() {
    let api = KubeApi::start();
    let from = api.resource_version();
    api.apply(configmap("default", "web", json!({"app": "web"})));
    api.apply(configmap("default", "db", json!({"app": "db"})));
    let mut changed = configmap("default", "web", json!({"app": "web"}));
    changed["data"]["k"] = "w".into();
    api.apply(changed);
    let deleted = api.delete(CONFIGMAPS, "default", "web").unwrap();
    let events = watch_events(
        &api,
        &format!("resourceVersion={from}&labelSelector=app%3Dweb&timeoutSeconds=1"),
    );
    let seen: Vec<(&str, u64, &str)> = events
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap(),
                rv_of(&e["object"]),
                e["object"]["data"]["k"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("ADDED", from + 1, "v"),
            ("MODIFIED", from + 3, "w"),
            ("DELETED", from + 4, "w")
        ]
    );
    assert_eq!(events[2]["object"], deleted);
    // From "0", the current objects come first, as ADDED.
    let events = watch_events(
        &api,
        "resourceVersion=0&fieldSelector=metadata.name%3Ddb&timeoutSeconds=1",
    );
    assert_eq!(events.len(), 1);
    assert_eq!(
        (events[0]["type"].as_str(), rv_of(&events[0]["object"])),
        (Some("ADDED"), from + 2)
    );
}

#[test]
fn bookmarks_arrive_and_the_watch_ends_at_its_timeout() {
    let api = KubeApi::start();
    api.set_bookmark_interval(Duration::from_millis(300));
    api.apply(configmap("default", "web", json!({})));
    let rv = api.resource_version();
    let started = Instant::now();
    let events = watch_events(
        &api,
        &format!("resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=2"),
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(5),
        "{took:?}"
    );
    let bookmark = json!({"type": "BOOKMARK", "object": {"kind": "ConfigMap", "apiVersion": "v1",
        "metadata": {"resourceVersion": rv.to_string()}}});
    assert!(events.len() >= 4, "{events:?}");
    assert!(events.iter().all(|e| *e == bookmark), "{events:?}");
    let without = watch_events(&api, &format!("resourceVersion={rv}&timeoutSeconds=1"));
    assert_eq!(without, Vec::<Value>::new());
}

#[test]
fn pages_of_two_give_every_item_once() {
    let c = Cluster::start();
    for (ns, name) in [("b", "x"), ("a", "y"), ("a", "x"), ("c", "z"), ("b", "w")] {
        c.api.apply(configmap(ns, name, json!({})));
    }
    let rv = c.api.resource_version().to_string();
    let (mut seen, mut token, mut pages) = (Vec::new(), String::new(), 0);
    loop {
        let url = format!("{}/api/v1/configmaps?limit=2&continue={token}", c.api.url());
        let page: Value = http().get(url).send().unwrap().json().unwrap();
        pages += 1;
        assert_eq!(page["kind"], "ConfigMapList");
        assert_eq!(page["metadata"]["resourceVersion"], rv.as_str());
        for i in page["items"].as_array().unwrap() {
            seen.push(format!(
                "{}/{}",
                i["metadata"]["namespace"].as_str().unwrap(),
                i["metadata"]["name"].as_str().unwrap()
            ));
        }
        match page["metadata"]["continue"].as_str() {
            Some(next) => token = next.to_string(),
            None => break,
        }
    }
    assert_eq!(seen, ["a/x", "a/y", "b/w", "b/x", "c/z"]);
    assert_eq!(pages, 3);
    // kubectl pages the same way with --chunk-size.
    let ran = c.kubectl(&["get", "cm", "-A", "--chunk-size=2", "-o", "name"], "");
    assert_eq!(ran.stdout.lines().count(), 5, "{}", ran.stderr);
    assert_eq!(c.api.list_requests(CONFIGMAPS), 6);
}

#[test]
fn refusals_are_metav1_status_objects() {
    let api = KubeApi::start();
    let missing = http()
        .get(format!(
            "{}/api/v1/namespaces/default/configmaps/nope",
            api.url()
        ))
        .send()
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(
        missing.json::<Value>().unwrap(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "configmaps \"nope\" not found", "reason": "NotFound", "code": 404,
               "details": {"name": "nope", "group": "", "kind": "configmaps"}})
    );
    let stored = api.apply(configmap("default", "web", json!({})));
    let mut stale = stored.clone();
    stale["metadata"]["resourceVersion"] = "1".into();
    let url = format!("{}/api/v1/namespaces/default/configmaps/web", api.url());
    let conflict = http().put(&url).json(&stale).send().unwrap();
    assert_eq!(conflict.status(), 409);
    let status: Value = conflict.json().unwrap();
    assert_eq!(status["reason"], "Conflict");
    let fresh = http().put(&url).json(&stored).send().unwrap();
    assert_eq!(fresh.status(), 200);
}

#[test]
fn stop_closes_every_connection_and_restart_serves_the_same_objects() {
    let mut api = KubeApi::start();
    api.apply(configmap("default", "web", json!({})));
    let url = format!("{}/api/v1/configmaps?watch=1&resourceVersion=0", api.url());
    let watch = http().get(url).send().unwrap();
    let mut lines = BufReader::new(watch).lines();
    assert!(lines.next().unwrap().unwrap().contains("ADDED"));
    api.stop();
    assert!(
        lines.next().is_none_or(|l| l.is_err()),
        "the watch ended with the server"
    );
    let refused = std::net::TcpStream::connect(api.addr()).unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    api.restart(false);
    let get = format!("{}/api/v1/namespaces/default/configmaps/web", api.url());
    let got: Value = http().get(get).send().unwrap().json().unwrap();
    assert_eq!(got["metadata"]["name"], "web");
}

#[test]
fn an_object_entering_or_leaving_a_watchs_selector_is_added_or_deleted() {
    let api = KubeApi::start();
    let from = api.resource_version();
    api.apply(configmap("default", "web", json!({"tier": "back"})));
    api.apply(configmap("default", "web", json!({"tier": "front"})));
    api.apply(configmap("default", "web", json!({"tier": "back"})));
    let query = format!("resourceVersion={from}&labelSelector=tier%3Dfront&timeoutSeconds=1");
    let events = watch_events(&api, &query);
    let seen: Vec<(&str, u64)> = events
        .iter()
        .map(|e| (e["type"].as_str().unwrap(), rv_of(&e["object"])))
        .collect();
    assert_eq!(seen, [("ADDED", from + 2), ("DELETED", from + 3)]);
}

#[test]
fn send_initial_events_ends_the_current_state_with_a_marked_bookmark() {
    let api = KubeApi::start();
    api.set_bookmark_interval(Duration::from_secs(60));
    api.apply(configmap("default", "web", json!({})));
    let rv = api.resource_version();
    let query = "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1";
    let events = watch_events(&api, query);
    assert_eq!(events[0]["type"], "ADDED");
    assert_eq!(events[0]["object"]["metadata"]["name"], "web");
    let end = json!({"type": "BOOKMARK", "object": {"kind": "ConfigMap", "apiVersion": "v1",
        "metadata": {"resourceVersion": rv.to_string(),
                     "annotations": {"k8s.io/initial-events-end": "true"}}}});
    assert_eq!(events[1], end);
    assert_eq!(events.len(), 2, "{events:?}");
}

#[test]
fn kubectl_apply_creates_then_patches_client_and_server_side() {
    let c = Cluster::start();
    c.namespace("shop");
    let manifest = ingress("shop", "web", "/").to_string();
    let ran = c.kubectl(&["apply", "-f", "-"], &manifest);
    assert_eq!(
        ran.stdout.trim(),
        "ingress.networking.k8s.io/web created",
        "{}",
        ran.stderr
    );
    let changed = ingress("shop", "web", "/applied").to_string();
    let ran = c.kubectl(&["apply", "-f", "-"], &changed);
    assert_eq!(
        ran.stdout.trim(),
        "ingress.networking.k8s.io/web configured",
        "{}",
        ran.stderr
    );
    let got = get_ingress(&c, "web");
    assert_eq!(
        got["spec"]["rules"][0]["http"]["paths"][0]["path"],
        "/applied"
    );
    assert_eq!(got["metadata"]["generation"], 2);
    let last = c.api.writes().pop().unwrap();
    assert_eq!(last.content_type, "application/strategic-merge-patch+json");

    let server_side = ingress("shop", "web", "/ssa").to_string();
    let ran = c.kubectl(
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        &server_side,
    );
    assert_eq!(
        ran.stdout.trim(),
        "ingress.networking.k8s.io/web serverside-applied",
        "{}",
        ran.stderr
    );
    let got = get_ingress(&c, "web");
    assert_eq!(got["spec"]["rules"][0]["http"]["paths"][0]["path"], "/ssa");
    let ran = c.kubectl(
        &["apply", "--server-side", "-f", "-"],
        &ingress("shop", "new", "/").to_string(),
    );
    assert_eq!(
        ran.stdout.trim(),
        "ingress.networking.k8s.io/new serverside-applied",
        "{}",
        ran.stderr
    );
    assert!(c.api.get(INGRESSES, "shop", "new").is_some());
}

#[test]
fn many_watches_at_once_each_see_a_write() {
    let api = KubeApi::start();
    let rv = api.resource_version();
    let url = format!(
        "{}/api/v1/configmaps?watch=1&resourceVersion={rv}&timeoutSeconds=20",
        api.url()
    );
    let watches: Vec<_> = (0..24).map(|_| http().get(&url).send().unwrap()).collect();
    assert!(api.wait_for(Duration::from_secs(10), |api| api
        .watch_requests(CONFIGMAPS)
        == 24));
    api.apply(configmap("default", "web", json!({})));
    let readers: Vec<_> = watches
        .into_iter()
        .map(|w| std::thread::spawn(move || BufReader::new(w).lines().next().unwrap().unwrap()))
        .collect();
    for reader in readers {
        let first: Value = serde_json::from_str(&reader.join().unwrap()).unwrap();
        assert_eq!(
            (first["type"].as_str(), rv_of(&first["object"])),
            (Some("ADDED"), rv + 1)
        );
    }
}
