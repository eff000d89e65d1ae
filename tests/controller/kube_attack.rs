//! Attacks on the ingress-controller mode by a tenant who owns one
//! namespace (Ingresses, Services, EndpointSlices, Secrets, ConfigMaps
//! there) but not the IngressClass nor the base policy, from the attack on
//! issue 27: each test asserts the safe behaviour, and failed before its
//! fix (one tenant's certificate, snippet or canary froze every build; a
//! `custom-headers` reference read another namespace's ConfigMap).
//!
//! Most drive `Composer::compose` in process (the function the controller
//! loop calls on every change), which is deterministic and fast; one drives
//! a real controller process against the API stand-in.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::cluster::*;
use common::kube_api::KubeApi;
use common::*;
use fairgate::cluster::compose::{Composed, Composer};
use fairgate::config::{Config, Problems};
use fairgate::import::Object;
use serde_json::{json, Value};

fn object(v: &Value) -> Object {
    let s = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    Object {
        kind: s("/kind"),
        namespace: s("/metadata/namespace"),
        name: s("/metadata/name"),
        value: v.clone().into(),
    }
}

/// A base with a TLS listener and its own default certificate.
fn tls_base_text(pki: &Pki) -> String {
    let (cert, key) = pki.leaf("default", "default", &["default.example"], "01");
    format!(
        "server:\n  listen: [\"127.0.0.1:18080\"]\n  tls:\n    listen: \"127.0.0.1:18443\"\n    certificates:\n      - {{cert_file: {}, key_file: {}}}\n\
         admin: {{listen: \"127.0.0.1:18081\"}}\n\
         store: {{kind: memory}}\n\
         default_limits: none\n\
         kubernetes:\n  publish_address: [\"203.0.113.7\"]\n  allow_local_endpoints: true\n",
        cert.display(),
        key.display()
    )
}

fn plain_base_text() -> String {
    "server: {listen: [\"127.0.0.1:18080\"]}\n\
     admin: {listen: \"127.0.0.1:18081\"}\n\
     store: {kind: memory}\n\
     default_limits: none\n\
     kubernetes:\n  publish_address: [\"203.0.113.7\"]\n  allow_local_endpoints: true\n"
        .to_string()
}

fn composer(dir: &Path, base: &str) -> Composer {
    let path = dir.join("base.yaml");
    std::fs::write(&path, base).unwrap();
    let loaded = Config::read_text("base.yaml", base, dir)
        .finish()
        .unwrap_or_else(|p| panic!("base: {:?}", p.render_errors()));
    let settings = loaded.config.kubernetes.clone().expect("kubernetes:");
    Composer::new(settings, path)
}

/// The victim's cluster: class, Service shop/web, its slice and an
/// Ingress shop/web for shop.example.
fn victim() -> Vec<Value> {
    let addr: std::net::SocketAddr = "10.0.0.5:8080".parse().unwrap();
    vec![
        ingress_class("fairgate", CONTROLLER, false),
        service("shop", "web"),
        slice("shop", "web-1", "web", &[ready(&addr)]),
        shop_ingress("web", "shop.example", "/"),
        service("evil", "app"),
        slice("evil", "app-1", "app", &[ready(&addr)]),
        // Snippets read, so that the attacks on their translation apply.
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "ingress-nginx-controller", "namespace": "ingress"},
            "data": {"allow-snippet-annotations": "true"}
        }),
    ]
}

fn compose(c: &mut Composer, objects: &[Value]) -> Result<Composed, Problems> {
    let objects: Vec<Object> = objects.iter().map(object).collect();
    c.compose(&objects)
}

/// Adds namespace shop's new Ingress to `objects`: it must be served.
/// What was served.
fn new_still_served(c: &mut Composer, mut objects: Vec<Value>, what: &str) -> Vec<String> {
    objects.push(shop_ingress("new", "new.example", "/"));
    match compose(c, &objects) {
        Ok(composed) => {
            let s = served(&composed);
            assert!(s.contains(&"shop/new".to_string()), "{what}: {s:?}");
            s
        }
        Err(p) => panic!("{what}: {:?}", p.render_errors()),
    }
}

fn served(composed: &Composed) -> Vec<String> {
    composed.served.iter().map(Object::id).collect()
}

/// Finding: a tenant's Ingress whose TLS section lists a host its
/// (otherwise valid) Secret's certificate does not name fails the whole
/// build (`tls::CertError::HostNotNamed` is in `server.tls`, which
/// `blame::owners` cannot trace to an Ingress): nothing is built, the last
/// policy stays for every tenant.
#[test]
fn a_tls_host_the_secret_does_not_name_withholds_only_that_ingress() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "atk");
    let mut c = composer(dir.path(), &tls_base_text(&pki));
    let mut objects = victim();
    assert!(compose(&mut c, &objects).is_ok(), "the victim alone builds");

    objects.push(secret_for(&pki, "evil", "cert", &["other.example"], "0B"));
    let mut bad = ingress("evil", "bad", Some("fairgate"), "evil.example", "/", "app");
    bad["spec"]["tls"] = json!([{"hosts": ["evil.example"], "secretName": "cert"}]);
    objects.push(bad);
    // A new Ingress of the victim after the attack.
    let s = new_still_served(
        &mut c,
        objects,
        "one tenant's TLS section stops every build",
    );
    assert!(!s.contains(&"evil/bad".to_string()), "{s:?}");
}

/// Finding: the same with a TLS section without hosts whose certificate
/// names a host the base's default certificate names (`NameClaimedTwice`,
/// once found by a search for the culprit). As ingress-nginx reads such a
/// section, its certificate serves only the Ingress's own hosts it names:
/// here none, so the Ingress is served (its host gets the default
/// certificate) and is told why, and the base's host keeps the base's.
#[test]
fn a_secret_naming_the_base_certificates_host_never_serves_it() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "atk");
    let mut c = composer(dir.path(), &tls_base_text(&pki));
    let mut objects = victim();
    objects.push(secret_for(&pki, "evil", "cert", &["default.example"], "0C"));
    let mut bad = ingress("evil", "bad", Some("fairgate"), "evil.example", "/", "app");
    bad["spec"]["tls"] = json!([{"secretName": "cert"}]);
    objects.push(bad);
    objects.push(shop_ingress("new", "new.example", "/"));
    let composed = compose(&mut c, &objects).unwrap_or_else(|p| panic!("{:?}", p.render_errors()));
    let s = served(&composed);
    assert!(s.contains(&"shop/new".to_string()), "{s:?}");
    assert!(s.contains(&"evil/bad".to_string()), "{s:?}");
    let told = composed.notes.iter().any(|n| {
        n.ingress == "evil/bad" && n.warning && n.message.contains("is served for no host")
    });
    assert!(told, "{:#?}", composed.notes);
}

/// Issue 41 (no culprit search): what the policy reader refuses is traced
/// to the object that made it, even where no route of it names it. An
/// Ingress whose every path another Ingress holds still makes its
/// `limit-rps` limit, which the reader refuses (over 1,000,000 a
/// second); and a tenant's host `www.web-0` with `from-to-www-redirect`
/// makes a redirect route named as namespace `www`'s Ingress `web`'s
/// first route. Neither withholds another namespace's Ingress or keeps
/// a new one waiting.
#[test]
fn what_no_route_names_and_generated_route_names_never_stop_others() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = composer(dir.path(), &plain_base_text());
    let mut objects = victim();
    let addr: std::net::SocketAddr = "10.0.0.6:8080".parse().unwrap();
    objects.push(service("www", "web"));
    objects.push(slice("www", "web-1", "web", &[ready(&addr)]));
    objects.push(ingress(
        "www",
        "web",
        Some("fairgate"),
        "www.example",
        "/",
        "web",
    ));
    let mut limit = ingress(
        "evil",
        "limit",
        Some("fairgate"),
        "shop.example",
        "/",
        "app",
    );
    limit["metadata"]["annotations"] = json!({"nginx.ingress.kubernetes.io/limit-rps": "2000000"});
    objects.push(limit);
    let mut www = ingress("evil", "www", Some("fairgate"), "www.web-0", "/", "app");
    www["metadata"]["annotations"] =
        json!({"nginx.ingress.kubernetes.io/from-to-www-redirect": "true"});
    objects.push(www);
    let s = new_still_served(&mut c, objects, "a tenant's entries stop every build");
    for id in ["shop/web", "www/web", "evil/www"] {
        assert!(s.contains(&id.to_string()), "{id}: {s:?}");
    }
}

/// Issue 41: a chain of one namespace's Ingresses sharing a host, each
/// with a TLS section for it: only the oldest's certificate is served.
/// When its Secret turns to a certificate of another host, withholding it
/// passes the host to the next, whose certificate fails the same way, and
/// so on past the rounds of one build. The build still ends: what built
/// before is served, each Ingress of the chain is withheld once, and the
/// next build serves another namespace's new Ingress.
#[test]
fn a_chain_of_broken_tls_sections_never_stops_the_build() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "chain");
    let mut c = composer(dir.path(), &tls_base_text(&pki));
    let mut objects = victim();
    for i in 1..=20 {
        let sans: &[&str] = if i == 1 {
            &["h.evil.example"]
        } else {
            &["other.example"]
        };
        let name = format!("s{i:02}");
        objects.push(secret_for(
            &pki,
            "evil",
            &name,
            sans,
            &format!("{:02X}", 0x20 + i),
        ));
        let path = format!("/{i}");
        let mut ing = ingress(
            "evil",
            &format!("i{i:02}"),
            Some("fairgate"),
            "h.evil.example",
            &path,
            "app",
        );
        ing["spec"]["tls"] = json!([{"hosts": ["h.evil.example"], "secretName": name}]);
        objects.push(ing);
    }
    let first = compose(&mut c, &objects).unwrap_or_else(|p| panic!("{:?}", p.render_errors()));
    assert_eq!(
        served(&first)
            .iter()
            .filter(|s| s.starts_with("evil/i"))
            .count(),
        20
    );
    let s01 = objects
        .iter()
        .position(|o| o["metadata"]["name"] == "s01")
        .unwrap();
    objects[s01] = secret_for(&pki, "evil", "s01", &["other.example"], "F1");
    objects.push(shop_ingress("new", "new.example", "/"));
    let mut builds = 0;
    let composed = loop {
        builds += 1;
        let composed = compose(&mut c, &objects)
            .unwrap_or_else(|p| panic!("{builds}: {:?}", p.render_errors()));
        if !composed.retry || builds == 3 {
            break composed;
        }
    };
    let s = served(&composed);
    assert!(
        s.contains(&"shop/new".to_string()),
        "after {builds} builds: {s:?}"
    );
    assert!(s.contains(&"shop/web".to_string()), "{s:?}");
    assert!(!s.iter().any(|id| id.starts_with("evil/i")), "{s:?}");
}

/// Issue 41: Ingresses of one namespace sharing a Service whose pool name
/// the base policy holds are withheld together, in one round: eleven of
/// them never use up a build's rounds and keep another namespace's new
/// Ingress waiting.
#[test]
fn ingresses_sharing_a_pool_name_the_base_holds_are_withheld_in_one_round() {
    let dir = tempfile::tempdir().unwrap();
    let base = plain_base_text() + "upstreams: {shop_web-80: {targets: [\"127.0.0.1:9\"]}}\n";
    let mut c = composer(dir.path(), &base);
    let mut objects = victim();
    for i in 0..10 {
        objects.push(shop_ingress(
            &format!("w{i}"),
            &format!("w{i}.example"),
            "/",
        ));
    }
    objects.push(ingress(
        "evil",
        "new",
        Some("fairgate"),
        "new.evil.example",
        "/",
        "app",
    ));
    let composed = compose(&mut c, &objects).unwrap_or_else(|p| panic!("{:?}", p.render_errors()));
    let s = served(&composed);
    assert!(s.contains(&"evil/new".to_string()), "{s:?}");
    assert!(!s.iter().any(|id| id.starts_with("shop/")), "{s:?}");
    assert!(!composed.retry);
}

/// Finding: `custom-headers: OTHER-NAMESPACE/NAME` copies another
/// namespace's ConfigMap (any namespace, even outside
/// `kubernetes.namespaces`, even the controller's own ConfigMap) into the
/// response headers of the tenant's route. ingress-nginx refuses
/// cross-namespace annotation references by default since v1.12
/// (`allow-cross-namespace-resources: false`); fairgate's own
/// `proxy-ssl-secret` refuses them too.
#[test]
fn custom_headers_never_reads_a_configmap_of_another_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = composer(dir.path(), &plain_base_text());
    let mut objects = victim();
    objects.push(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "bank"},
        "data": {"X-Db-Password": "hunter2-of-the-bank"}
    }));
    let mut bad = ingress("evil", "leak", Some("fairgate"), "evil.example", "/", "app");
    bad["metadata"]["annotations"] =
        json!({"nginx.ingress.kubernetes.io/custom-headers": "bank/settings"});
    objects.push(bad.clone());
    let objs: Vec<Object> = objects.iter().map(object).collect();
    let referenced = c.referenced(&objs);
    println!("watched by name: {referenced:?}");
    let composed = compose(&mut c, &objects).unwrap_or_else(|p| panic!("{:?}", p.render_errors()));
    let text = composed.checked.text.text();
    assert!(
        served(&composed).contains(&"evil/leak".to_string()),
        "{:?}",
        composed.notes
    );
    assert!(
        !text.contains("hunter2-of-the-bank"),
        "namespace evil's route answers with namespace bank's ConfigMap:\n{text}"
    );
}

/// Probes of the YAML the importer writes and the reader re-reads: values
/// an attacker controls that might break out of their scalar, or break the
/// parse of the whole imported text (which fails every build).
#[test]
fn hostile_strings_never_fail_the_whole_build() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = composer(dir.path(), &plain_base_text());
    let payloads: Vec<String> = vec![
        "a\u{85}b".into(),
        "a\u{2028}b".into(),
        "a\u{2029}b".into(),
        "a\u{feff}b".into(),
        "a\u{7f}b".into(),
        "a\u{9b}b".into(),
        "a\u{fffe}b".into(),
        "a\u{ffff}b".into(),
        "a\u{1}b".into(),
        "\"\n- name: x\n  match: {path_prefix: /}\n#".into(),
        "x: y\n  auth: off".into(),
        "&a *a !!str {x}".into(),
        "\u{d7ff}\u{e000}".into(),
        "a".repeat(1 << 20),
    ];
    let places = [
        "annotation",
        "path",
        "host",
        "configmap",
        "header-name",
        "snippet",
    ];
    let mut failures = Vec::new();
    for (i, p) in payloads.iter().enumerate() {
        // ConfigMap keys are at most 253 of [-._a-zA-Z0-9] (API server).
        for place in places
            .iter()
            .filter(|pl| **pl != "header-name" || p.len() <= 253)
        {
            let mut objects = victim();
            objects.extend(hostile(place, p));
            objects.push(shop_ingress("new", "new.example", "/"));
            match compose(&mut c, &objects) {
                Ok(composed) => {
                    let s = served(&composed);
                    if !s.contains(&"shop/new".to_string()) {
                        failures.push(format!("payload {i} in {place}: victim not served {s:?}"));
                    }
                    let routes = composed.checked.config.routes.len();
                    if routes > 3 {
                        failures.push(format!("payload {i} in {place}: {routes} routes"));
                    }
                }
                Err(e) => failures.push(format!(
                    "payload {i} in {place}: build failed: {:?}",
                    e.render_errors().into_iter().take(2).collect::<Vec<_>>()
                )),
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The attacker's objects carrying `p` in `place`.
fn hostile(place: &str, p: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut ing = ingress("evil", "x", Some("fairgate"), "evil.example", "/", "app");
    let prefix = "nginx.ingress.kubernetes.io";
    match place {
        "annotation" => {
            ing["metadata"]["annotations"] = json!({
                format!("{prefix}/rewrite-target"): p,
                format!("{prefix}/cors-allow-origin"): p,
                format!("{prefix}/limit-whitelist"): p,
                format!("{prefix}/permanent-redirect"): p,
                "fairgate.dev/limits": p,
                "fairgate.dev/concurrency": p,
            })
        }
        "path" => ing["spec"]["rules"][0]["http"]["paths"][0]["path"] = json!(format!("/{p}")),
        "host" => ing["spec"]["rules"][0]["host"] = json!(p),
        "snippet" => {
            let snippet = format!("more_set_headers \"X-A: {}\";", p.replace('"', "'"));
            ing["metadata"]["annotations"] =
                json!({format!("{prefix}/configuration-snippet"): snippet});
        }
        _ => {
            let data = match place {
                "configmap" => json!({"X-A": p}),
                _ => json!({p: "v"}),
            };
            out.push(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "hdr", "namespace": "evil"},
                "data": data
            }));
            ing["metadata"]["annotations"] = json!({format!("{prefix}/custom-headers"): "hdr"});
        }
    }
    out.push(ing);
    out
}

/// Finding: a header name longer than 1024 characters in a
/// `configuration-snippet` (`more_set_headers "NAME: v"`) is written as a
/// YAML mapping key, which YAML limits to 1024 characters: the imported
/// text does not parse, and the whole build fails for every tenant. An
/// annotation may hold 256 KiB, so the API server lets it through.
#[test]
fn a_long_header_name_in_a_snippet_withholds_only_that_ingress() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = composer(dir.path(), &plain_base_text());
    let mut objects = victim();
    let mut ing = ingress("evil", "x", Some("fairgate"), "evil.example", "/", "app");
    ing["metadata"]["annotations"] = json!({
        "nginx.ingress.kubernetes.io/configuration-snippet":
            format!("more_set_headers \"X-{}: v\";", "a".repeat(1100))
    });
    objects.push(ing);
    let s = new_still_served(&mut c, objects, "one tenant's snippet stops every build");
    assert!(!s.contains(&"evil/x".to_string()), "{s:?}");
}

/// Probes of snippets whose header edits might collide as YAML keys.
#[test]
fn snippet_header_edits_never_fail_the_whole_build() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = composer(dir.path(), &plain_base_text());
    let snippets = [
        "more_set_headers \"X-A: 1\" \"X-A: 2\";",
        "more_set_headers \"X-A: 1\"; more_set_headers \"X-A: 2\";",
        "add_header X-A 1 always; add_header X-A 2 always;",
        "add_header X-A 1 always; more_set_headers \"X-A: 2\";",
        "more_set_headers \"x-a: 1\" \"X-A: 2\";",
        "more_set_headers \"<<: 1\";",
        "more_set_headers \"? : 1\";",
        "more_clear_headers X-A X-A;",
        "more_set_headers \"X-A: 1\"; more_clear_headers X-A;",
        "proxy_set_header X-A 1; proxy_set_header X-A 2;",
        "more_set_headers \"Set-Cookie: a\";",
        "more_set_headers \"Content-Length: 1\";",
        "more_set_headers \"Host: x\";",
    ];
    let mut failures = Vec::new();
    for snippet in snippets {
        let mut objects = victim();
        let mut ing = ingress("evil", "x", Some("fairgate"), "evil.example", "/", "app");
        ing["metadata"]["annotations"] =
            json!({"nginx.ingress.kubernetes.io/configuration-snippet": snippet});
        objects.push(ing);
        objects.push(shop_ingress("new", "new.example", "/"));
        match compose(&mut c, &objects) {
            Ok(composed) if served(&composed).contains(&"shop/new".to_string()) => {}
            Ok(composed) => failures.push(format!("{snippet}: {:?}", served(&composed))),
            Err(p) => failures.push(format!("{snippet}: {:?}", p.render_errors())),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A canary Ingress of another namespace, folded into the victim's main
/// route, whose header pattern does not compile: only the canary may be
/// withheld, never the victim's Ingress.
#[test]
fn a_broken_canary_of_another_namespace_never_withholds_the_main_ingress() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = composer(dir.path(), &plain_base_text());
    let mut failures = Vec::new();
    let cases = [
        json!({"canary": "true", "canary-by-header": "X-Canary", "canary-by-header-pattern": "(("}),
        json!({"canary": "true", "canary-by-header": "X-Canary", "canary-by-header-value": "a\u{85}\"b"}),
        json!({"canary": "true", "canary-by-header": "X Canary:", "canary-by-header-value": "v"}),
        json!({"canary": "true", "canary-by-cookie": "a=b; c"}),
        json!({"canary": "true", "canary-weight": "101"}),
        json!({"canary": "true", "canary-weight": "50", "canary-weight-total": "0"}),
        json!({"canary": "true", "canary-by-header": "X-Canary", "backend-protocol": "HTTPS", "proxy-ssl-verify": "on", "proxy-ssl-secret": "evil/none"}),
    ];
    for case in cases {
        let mut objects = victim();
        let mut canary = ingress(
            "evil",
            "canary",
            Some("fairgate"),
            "shop.example",
            "/",
            "app",
        );
        let ann: serde_json::Map<String, Value> = case
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (format!("nginx.ingress.kubernetes.io/{k}"), v.clone()))
            .collect();
        canary["metadata"]["annotations"] = Value::Object(ann);
        objects.push(canary);
        match compose(&mut c, &objects) {
            Ok(composed) if served(&composed).contains(&"shop/web".to_string()) => {}
            Ok(composed) => failures.push(format!(
                "{case}: the victim is withheld: {:?}",
                composed
                    .notes
                    .iter()
                    .filter(|n| n.reason == "Withheld")
                    .collect::<Vec<_>>()
            )),
            Err(p) => failures.push(format!("{case}: {:?}", p.render_errors())),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The same certificate attack end to end: after a tenant applies one
/// Ingress, a new Ingress of another namespace is never served.
#[tokio::test]
async fn after_a_bad_tls_section_other_namespaces_ingresses_are_still_served() {
    let echo = EchoProcess::start();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "kube");
    let api = shop_api(&echo.addr);
    let kc = api.kubeconfig(dir.path());
    api.apply(shop_ingress("web", "shop.example", "/"));
    let gw = controller(&tls_base(&pki, free_addr()), &kc, "fairgate-0").await;
    assert_eq!(
        host_status(&gw, "shop.example", "/").await,
        200,
        "{}",
        gw.logs()
    );

    // The attacker: a valid pair, for a name its TLS section does not list.
    api.apply(service("evil", "app"));
    api.apply(secret_for(&pki, "evil", "cert", &["other.example"], "0B"));
    let mut bad = ingress("evil", "bad", Some("fairgate"), "evil.example", "/", "app");
    bad["spec"]["tls"] = json!([{"hosts": ["evil.example"], "secretName": "cert"}]);
    api.apply(bad);
    let withheld = api.wait_for(Duration::from_secs(10), |api| {
        let events = api.list("v1/events", "evil");
        events
            .iter()
            .any(|e| e["involvedObject"]["name"] == "bad" && e["reason"] == "Withheld")
    });
    assert!(withheld, "no Withheld Event:\n{}", gw.logs());
    // The victim deploys a new Ingress.
    api.apply(shop_ingress("new", "new.example", "/"));
    let served = eventually(Duration::from_secs(10), || async {
        host_status(&gw, "new.example", "/").await == 200
    })
    .await;
    assert!(
        served,
        "namespace shop's new Ingress is not served:\n{}",
        gw.logs()
    );
    assert_eq!(host_status(&gw, "evil.example", "/").await, 404);
}

/// The cross-namespace ConfigMap read end to end: namespace evil's route
/// answers with namespace bank's ConfigMap as response headers.
#[tokio::test]
async fn a_tenant_never_reads_another_namespaces_configmap_through_its_responses() {
    let echo = EchoProcess::start();
    let dir = tempfile::tempdir().unwrap();
    let api = KubeApi::start();
    let kc = api.kubeconfig(dir.path());
    api.apply(ingress_class("fairgate", CONTROLLER, false));
    api.apply(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "bank"},
        "data": {"X-Db-Password": "hunter2-of-the-bank"}
    }));
    api.apply(service("evil", "app"));
    api.apply(slice("evil", "app-1", "app", &[ready(&echo.addr)]));
    let mut leak = ingress("evil", "leak", Some("fairgate"), "evil.example", "/", "app");
    leak["metadata"]["annotations"] =
        json!({"nginx.ingress.kubernetes.io/custom-headers": "bank/settings"});
    api.apply(leak);
    let gw = controller(&base_policy(""), &kc, "fairgate-0").await;
    let c = client();
    let mut leaked = None;
    for _ in 0..50 {
        let r = c
            .get(gw.url("/"))
            .header("host", "evil.example")
            .send()
            .await
            .unwrap();
        if r.status() == 200 {
            leaked = r
                .headers()
                .get("x-db-password")
                .map(|v| v.to_str().unwrap_or("").to_string());
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        leaked, None,
        "namespace bank's ConfigMap is served to namespace evil's clients"
    );
}
