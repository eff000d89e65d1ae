//! Issue 40, the fourth attack: a team allowed to create Ingresses,
//! Services, EndpointSlices and Secrets in its own namespace (`evil`,
//! `aaa`) tries to reach across into namespace `shop` and the operator's
//! policy. Each test is named after its finding, drives a real controller
//! process against the API stand-in, writes the attacker's objects with the
//! real `kubectl` in the attacker's namespace, and speaks raw HTTP to the
//! gateway; each failed on the main the issue was filed against.

use crate::common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use common::cluster::*;
use common::kube_api::{KubeApi, Ran};
use common::*;
use serde_json::{json, Value};

const INGRESSES: &str = "networking.k8s.io/v1/ingresses";

/// `kubectl -n NS create -f -` of `manifest`, as the tenant of `ns` runs it.
fn tenant_creates(api: &KubeApi, dir: &Path, ns: &str, manifest: &Value) -> Ran {
    api.kubectl(dir)
        .run(&["-n", ns, "create", "-f", "-"], &manifest.to_string())
}

/// An Ingress with `annotations`.
fn annotated(mut ing: Value, annotations: Value) -> Value {
    ing["metadata"]["annotations"] = annotations;
    ing
}

/// An Ingress of no host: `path` of every host no rule names.
fn catch_all(ns: &str, name: &str, svc: &str) -> Value {
    let mut ing = ingress(ns, name, Some("fairgate"), "x", "/", svc);
    ing["spec"]["rules"][0]
        .as_object_mut()
        .unwrap()
        .remove("host");
    ing
}

/// The address of `url`.
fn addr_of(url: &str) -> SocketAddr {
    reqwest::Url::parse(url)
        .unwrap()
        .socket_addrs(|| None)
        .unwrap()[0]
}

/// The status of a raw GET of `host` `path` with `extra` header lines, on
/// a connection of its own.
async fn get(gw: &Gateway, host: &str, path: &str, extra: &str) -> u16 {
    let addr = addr_of(&gw.url("/"));
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n");
    status_of(&raw_http(addr, &request).await)
}

/// Whether a Warning Event of `reason` on `ns/name` says `text`, within 10 s.
fn warned(api: &KubeApi, ns: &str, name: &str, reason: &str, text: &str) -> bool {
    api.wait_for(Duration::from_secs(10), |api| {
        api.list("v1/events", ns).iter().any(|e| {
            e["involvedObject"]["name"] == name
                && e["type"] == "Warning"
                && e["reason"] == reason
                && e["message"].as_str().is_some_and(|m| m.contains(text))
        })
    })
}

fn events(api: &KubeApi, ns: &str) -> String {
    format!("{:#?}", api.list("v1/events", ns))
}

/// The victim's cluster: our class, `shop/web` at `shop`, `evil/app` at
/// `evil`.
fn cluster(shop: &SocketAddr, evil: &SocketAddr) -> KubeApi {
    let api = KubeApi::start();
    api.apply(ingress_class("fairgate", CONTROLLER, false));
    backend(&api, "shop", "web", shop);
    backend(&api, "evil", "app", evil);
    api
}

/// Finding 2: a host-less Ingress of namespace `evil` answered every path
/// of `shop.lab` that shop's Ingress does not define (its login page, the
/// ACME challenge that would get evil a certificate for shop.lab), and the
/// hosts of withheld Ingresses, with the victims' cookies. Each named host
/// is closed now: 404 from its own table; a withheld Ingress also gets no
/// load-balancer status (external-dns would publish it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_40_finding_2_a_named_host_never_reaches_another_namespaces_catch_all() {
    let (shop, evil) = (RawUpstream::start().await, RawUpstream::start().await);
    let api = cluster(&shop.addr, &evil.addr);
    api.apply(ingress(
        "shop",
        "web",
        Some("fairgate"),
        "shop.lab",
        "/app",
        "web",
    ));
    // Withheld: its basic-auth Secret is missing.
    let locked = ingress("shop", "locked", Some("fairgate"), "locked.lab", "/", "web");
    let p = "nginx.ingress.kubernetes.io";
    api.apply(annotated(
        locked,
        json!({format!("{p}/auth-type"): "basic", format!("{p}/auth-secret"): "absent"}),
    ));
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base_policy(""), &api.kubeconfig(dir.path()), "fairgate-0").await;
    let ran = tenant_creates(&api, dir.path(), "evil", &catch_all("evil", "all", "app"));
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let served = eventually(Duration::from_secs(10), || async {
        get(&gw, "other.lab", "/", "").await == 200
    })
    .await;
    assert!(
        served,
        "evil's catch-all serves hosts nobody names\n{}",
        gw.logs()
    );
    let before = evil.count();
    for (host, path) in [
        ("shop.lab", "/login"),
        ("shop.lab", "/.well-known/acme-challenge/t0k3n"),
        ("locked.lab", "/"),
        ("locked.lab", "/account"),
    ] {
        let status = get(&gw, host, path, "Cookie: session=victim\r\n").await;
        assert_eq!(status, 404, "{host}{path}");
    }
    assert_eq!(evil.count(), before, "nothing reached evil's catch-all");
    assert_eq!(get(&gw, "shop.lab", "/app/cart", "").await, 200);
    let published = |api: &KubeApi, name: &str| {
        let ing = api.get(INGRESSES, "shop", name).unwrap_or_default();
        ing["status"]["loadBalancer"]["ingress"][0]["ip"] == "203.0.113.7"
    };
    assert!(api.wait_for(Duration::from_secs(10), |api| published(api, "web")));
    assert!(
        !published(&api, "locked"),
        "a withheld Ingress is not published"
    );
    // Withheld once published: its address is taken back.
    let annotate = api.kubectl(dir.path()).run(
        &[
            "-n",
            "shop",
            "annotate",
            "ingress",
            "web",
            &format!("{p}/auth-type=basic"),
            &format!("{p}/auth-secret=absent"),
        ],
        "",
    );
    assert_eq!(annotate.code, 0, "{}", annotate.stderr);
    assert!(api.wait_for(Duration::from_secs(10), |api| !published(api, "web")));
}

/// Finding 3: ties between namespaces went to the namespace that sorts
/// first, not to the oldest Ingress: a newer Ingress of `aaa` took
/// `shop.lab/api` from `shop`, and a canary of `aaa` folded into shop's
/// route (`canary-weight: 100` took all of it). The oldest claim keeps the
/// path now, and the later ones get a Warning Event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_40_finding_3_the_oldest_ingress_keeps_its_host_and_path() {
    let (shop, evil) = (RawUpstream::start().await, RawUpstream::start().await);
    let api = cluster(&shop.addr, &evil.addr);
    backend(&api, "aaa", "app", &evil.addr);
    let web = api.apply(ingress(
        "shop",
        "web",
        Some("fairgate"),
        "shop.lab",
        "/api",
        "web",
    ));
    // A later creation time than shop's (the API's clock counts seconds).
    let created = web["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap()
        .to_string();
    let later = api.wait_for(Duration::from_secs(3), |_| {
        common::kube_api::now_rfc3339() > created
    });
    assert!(later);
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base_policy(""), &api.kubeconfig(dir.path()), "fairgate-0").await;
    let take = ingress("aaa", "take", Some("fairgate"), "shop.lab", "/api", "app");
    let p = "nginx.ingress.kubernetes.io";
    let canary = annotated(
        ingress("aaa", "canary", Some("fairgate"), "shop.lab", "/api", "app"),
        json!({format!("{p}/canary"): "true", format!("{p}/canary-weight"): "100"}),
    );
    for attack in [&take, &canary] {
        let ran = tenant_creates(&api, dir.path(), "aaa", attack);
        assert_eq!(ran.code, 0, "{}", ran.stderr);
    }
    assert!(
        warned(
            &api,
            "aaa",
            "take",
            "NotSupported",
            "belongs to Ingress shop/web"
        ),
        "{}",
        events(&api, "aaa")
    );
    assert!(
        warned(
            &api,
            "aaa",
            "canary",
            "NotSupported",
            "no main Ingress of namespace aaa"
        ),
        "{}",
        events(&api, "aaa")
    );
    let before = evil.count();
    for _ in 0..20 {
        assert_eq!(get(&gw, "shop.lab", "/api/orders", "").await, 200);
    }
    assert_eq!(evil.count(), before, "aaa received none of shop.lab/api");
}

/// Finding 9: an EndpointSlice of namespace `evil` at the gateway's own
/// admin listener served every namespace's `/metrics` on the public port
/// (and one at its traffic port fanned one request out into hundreds).
/// Kubernetes refuses loopback and link-local Endpoints; so does the
/// controller now unless the operator allows them, and never the
/// gateway's own listeners.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_40_finding_9_endpoints_never_point_at_the_gateway_or_loopback() {
    let shop = RawUpstream::start().await;
    let api = cluster(&shop.addr, &shop.addr);
    let dir = tempfile::tempdir().unwrap();
    let kc = api.kubeconfig(dir.path());
    let strict = base_policy("").replace("  allow_local_endpoints: true\n", "");
    let gw = controller(&strict, &kc, "fairgate-0").await;
    let admin = addr_of(&gw.admin_url("/"));
    let metadata: SocketAddr = "169.254.169.254:80".parse().unwrap();
    for (name, at) in [("admin", admin), ("metadata", metadata)] {
        let mut svc = service("evil", name);
        svc["spec"]["ports"][0]["port"] = json!(at.port());
        for object in [
            svc,
            slice("evil", &format!("{name}-1"), name, &[ready(&at)]),
        ] {
            let ran = tenant_creates(&api, dir.path(), "evil", &object);
            assert_eq!(ran.code, 0, "{}", ran.stderr);
        }
        let mut ing = ingress(
            "evil",
            name,
            Some("fairgate"),
            &format!("{name}.lab"),
            "/",
            name,
        );
        ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["port"]["number"] =
            json!(at.port());
        let ran = tenant_creates(&api, dir.path(), "evil", &ing);
        assert_eq!(ran.code, 0, "{}", ran.stderr);
        assert!(
            warned(&api, "evil", name, "Unavailable", "allow_local_endpoints"),
            "{}",
            events(&api, "evil")
        );
        assert_eq!(get(&gw, &format!("{name}.lab"), "/metrics", "").await, 503);
    }
    // Even where the operator allows loopback: never the gateway itself.
    drop(gw);
    let gw = controller(&base_policy(""), &kc, "fairgate-1").await;
    let own = addr_of(&gw.url("/"));
    let mut svc = service("evil", "loop");
    svc["spec"]["ports"][0]["port"] = json!(own.port());
    let mut ing = ingress("evil", "loop", Some("fairgate"), "loop.lab", "/", "loop");
    ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["port"]["number"] =
        json!(own.port());
    for object in [svc, slice("evil", "loop-1", "loop", &[ready(&own)]), ing] {
        let ran = tenant_creates(&api, dir.path(), "evil", &object);
        assert_eq!(ran.code, 0, "{}", ran.stderr);
    }
    assert!(
        warned(
            &api,
            "evil",
            "loop",
            "Unavailable",
            "the gateway's own listener"
        ),
        "{}",
        events(&api, "evil")
    );
    let status = get(&gw, "loop.lab", "/", "").await;
    assert_eq!(status, 503, "the gateway's own listener is no endpoint");
}

/// Finding 13: one Ingress naming 400 missing TLS Secrets opened 400
/// watches on the API server (and 826 file descriptors in the gateway).
/// Past 16 Secrets and ConfigMaps an Ingress is withheld with an Event,
/// and none of them is watched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_40_finding_13_what_an_ingress_names_is_bounded() {
    let shop = RawUpstream::start().await;
    let api = cluster(&shop.addr, &shop.addr);
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base_policy(""), &api.kubeconfig(dir.path()), "fairgate-0").await;
    let watches = api.watch_requests("v1/secrets");
    let mut ing = ingress("evil", "many", Some("fairgate"), "many.lab", "/", "app");
    let tls: Vec<Value> = (0..400)
        .map(|i| json!({"hosts": ["many.lab"], "secretName": format!("tls-{i}")}))
        .collect();
    ing["spec"]["tls"] = json!(tls);
    let ran = tenant_creates(&api, dir.path(), "evil", &ing);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(
        warned(&api, "evil", "many", "Withheld", "an Ingress may name 16"),
        "{}",
        events(&api, "evil")
    );
    assert_eq!(
        api.watch_requests("v1/secrets"),
        watches,
        "no Secret watched"
    );
    let served = api.apply(shop_ingress("new", "new.lab", "/"));
    assert!(served["metadata"]["name"] == "new");
    let ok = eventually(Duration::from_secs(10), || async {
        get(&gw, "new.lab", "/", "").await == 200
    })
    .await;
    assert!(ok, "{}", gw.logs());
}

/// Finding 15: `fairgate.dev/limits` named another namespace's Ingress-made
/// limit, so evil's page spent shop's bucket. Only the base policy's
/// limits may be named now; the Ingress is withheld with an Event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_40_finding_15_an_ingress_names_only_the_base_policys_limits() {
    let shop = RawUpstream::start().await;
    let api = cluster(&shop.addr, &shop.addr);
    let p = "nginx.ingress.kubernetes.io";
    api.apply(annotated(
        shop_ingress("web", "shop.lab", "/"),
        json!({format!("{p}/limit-rpm"): "6"}),
    ));
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base_policy(""), &api.kubeconfig(dir.path()), "fairgate-0").await;
    let theirs = format!("{}-rpm", fairgate::import::route_prefix("shop", "web"));
    let spend = annotated(
        ingress("evil", "spend", Some("fairgate"), "evil.lab", "/", "app"),
        json!({"fairgate.dev/limits": theirs}),
    );
    let ran = tenant_creates(&api, dir.path(), "evil", &spend);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(
        warned(
            &api,
            "evil",
            "spend",
            "Withheld",
            "the base policy's limits has no limit"
        ),
        "{}",
        events(&api, "evil")
    );
    for _ in 0..10 {
        assert_eq!(get(&gw, "evil.lab", "/", "").await, 404);
    }
    assert_eq!(
        get(&gw, "shop.lab", "/", "").await,
        200,
        "shop's bucket is whole"
    );
}

/// Finding 0 (the snippet and import part): snippets were honoured by
/// default, though ingress-nginx has ignored them since 1.9 unless its
/// ConfigMap allows them, so a snippet inert before the move became active
/// after it; and `auth-response-headers` could name an identity header.
/// Snippets are ignored now unless allowed, and an auth answer naming an
/// identity header (any spelling) withholds the Ingress.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_40_finding_0_snippets_are_inert_and_answers_name_no_identity() {
    let (shop, evil) = (RawUpstream::start().await, RawUpstream::start().await);
    let api = cluster(&shop.addr, &evil.addr);
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base_policy(""), &api.kubeconfig(dir.path()), "fairgate-0").await;
    let p = "nginx.ingress.kubernetes.io";
    let snippet = annotated(
        ingress(
            "evil",
            "snippet",
            Some("fairgate"),
            "snippet.lab",
            "/",
            "app",
        ),
        json!({format!("{p}/configuration-snippet"):
            "proxy_set_header X_Tenant_Id acme; more_set_headers \"X-Snippet: on\";"}),
    );
    let answers = annotated(
        ingress(
            "evil",
            "answers",
            Some("fairgate"),
            "answers.lab",
            "/",
            "app",
        ),
        json!({
            format!("{p}/auth-url"): "http://auth.evil.svc.cluster.local/check",
            format!("{p}/auth-response-headers"): "X-Auth-Request-User, X_Tenant_Id",
        }),
    );
    for attack in [&snippet, &answers] {
        let ran = tenant_creates(&api, dir.path(), "evil", attack);
        assert_eq!(ran.code, 0, "{}", ran.stderr);
    }
    assert!(
        warned(
            &api,
            "evil",
            "answers",
            "NotSupported",
            "X_Tenant_Id is an identity header"
        ) && warned(&api, "evil", "answers", "Withheld", "auth-response-headers"),
        "{}",
        events(&api, "evil")
    );
    let served = eventually(Duration::from_secs(10), || async {
        get(&gw, "snippet.lab", "/", "").await == 200
    })
    .await;
    assert!(served, "{}", gw.logs());
    let seen = evil.received();
    let head = seen.last().unwrap();
    assert_eq!(
        head.cgi_header("X-Tenant-Id"),
        Vec::<String>::new(),
        "{}",
        head.head
    );
    assert_eq!(get(&gw, "answers.lab", "/", "").await, 404);
}

/// Finding 4: `auth-cache-key: $http_x_auth_request_groups` on any
/// namespace's `auth-url` Ingress made that header an "input" of the
/// policy, which took it off the gateway-wide strip list of the operator's
/// SSO: a forged `X-Auth-Request-Groups: admins` then reached the base's
/// upstreams. What an Ingress reads never changes the operator's stripping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_40_finding_4_an_ingress_never_turns_the_operators_stripping_off() {
    let (base_app, evil) = (RawUpstream::start().await, RawUpstream::start().await);
    let sso = common::forward_auth::ForwardAuth::start(&[]);
    let api = cluster(&evil.addr, &evil.addr);
    let base = base_policy("").replace(
        "store: {kind: memory}\n",
        &format!(
            "store: {{kind: memory}}\n\
             auth:\n  methods:\n    sso:\n      external: {{url: \"{}\", response_headers: [X-Auth-Request-Groups]}}\n\
             upstreams: {{internal: {{targets: [\"{}\"]}}}}\n\
             routes:\n  - {{name: open, match: {{host: base.lab, path_prefix: /}}, upstream: internal, auth: none}}\n",
            sso.auth_url(),
            base_app.addr
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base, &api.kubeconfig(dir.path()), "fairgate-0").await;
    let forged = "X-Auth-Request-Groups: admins\r\n";
    assert_eq!(get(&gw, "base.lab", "/", forged).await, 200);
    let p = "nginx.ingress.kubernetes.io";
    let cached = annotated(
        ingress("evil", "cached", Some("fairgate"), "evil.lab", "/", "app"),
        json!({
            format!("{p}/auth-url"): sso.auth_url(),
            format!("{p}/auth-cache-key"): "$http_x_auth_request_groups",
        }),
    );
    let ran = tenant_creates(&api, dir.path(), "evil", &cached);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let served = eventually(Duration::from_secs(10), || async {
        get(&gw, "evil.lab", "/", "").await == 401
    })
    .await;
    assert!(served, "{}", gw.logs());
    for _ in 0..3 {
        assert_eq!(get(&gw, "base.lab", "/", forged).await, 200);
    }
    let heads = base_app.received();
    assert_eq!(heads.len(), 4);
    for (i, head) in heads.iter().enumerate() {
        assert_eq!(
            head.cgi_header("X-Auth-Request-Groups"),
            Vec::<String>::new(),
            "request {i}: {}",
            head.head
        );
    }
}

/// Finding 8: an Ingress's `auth-response-headers` were replaced only on
/// its own routes: a sibling Ingress of the same host forwarded a forged
/// `X-Auth-Request-Email`, and with underscores allowed `X_Auth_Request_Email`
/// rode along even on the method's own route. They are stripped in every
/// spelling on every route of their host now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_40_finding_8_answer_headers_are_stripped_on_every_route_of_their_host() {
    let app = RawUpstream::start().await;
    let sso = common::forward_auth::ForwardAuth::start(&[]);
    sso.session("s1", "alice", "alice@shop.lab", "users").await;
    let api = cluster(&app.addr, &app.addr);
    let p = "nginx.ingress.kubernetes.io";
    api.apply(annotated(
        shop_ingress("account", "app.lab", "/account"),
        json!({
            format!("{p}/auth-url"): sso.auth_url(),
            format!("{p}/auth-response-headers"): "X-Auth-Request-Email",
        }),
    ));
    api.apply(shop_ingress("public", "app.lab", "/public"));
    let base = base_policy("").replace(
        "server: {listen: [\"$LISTEN\"]}",
        "server: {listen: [\"$LISTEN\"], allow_underscores_in_headers: true}",
    );
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base, &api.kubeconfig(dir.path()), "fairgate-0").await;
    let forged = "X-Auth-Request-Email: root@evil.lab\r\nX_Auth_Request_Email: root@evil.lab\r\n";
    assert_eq!(get(&gw, "app.lab", "/public/x", forged).await, 200);
    let signed_in = format!("Cookie: _oauth2_proxy=s1\r\n{forged}");
    assert_eq!(get(&gw, "app.lab", "/account", &signed_in).await, 200);
    let heads = app.received();
    assert_eq!(heads.len(), 2);
    let emails: Vec<Vec<String>> = heads
        .iter()
        .map(|h| h.cgi_header("X-Auth-Request-Email"))
        .collect();
    assert_eq!(
        emails,
        vec![Vec::<String>::new(), vec!["alice@shop.lab".to_string()]],
        "{heads:#?}"
    );
}

/// Finding 10: `limit-whitelist: 0.0.0.0/0,::/0` exempted a tenant's
/// routes from every limit, the operator's too (ingress-nginx's whitelist
/// exempts from that Ingress's own limit annotations only). It exempts
/// from the Ingress's own limits now: the base policy's limit it spends
/// (`fairgate.dev/limits`) still counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_40_finding_10_a_whitelist_exempts_from_the_ingresss_own_limits_only() {
    let evil = RawUpstream::start().await;
    let api = cluster(&evil.addr, &evil.addr);
    let base = base_policy("").replace(
        "default_limits: none\n",
        "default_limits: none\n\
         limits: {edge: {scope: client_ip, default: {capacity: 3, rate: 1/m}}}\n",
    );
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base, &api.kubeconfig(dir.path()), "fairgate-0").await;
    let p = "nginx.ingress.kubernetes.io";
    let open = annotated(
        ingress("evil", "open", Some("fairgate"), "open.lab", "/", "app"),
        json!({
            format!("{p}/limit-rpm"): "1",
            format!("{p}/limit-whitelist"): "0.0.0.0/0,::/0",
            "fairgate.dev/limits": "edge",
        }),
    );
    let ran = tenant_creates(&api, dir.path(), "evil", &open);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let served = eventually(Duration::from_secs(10), || async {
        get(&gw, "open.lab", "/", "").await == 200
    })
    .await;
    assert!(served, "{}", gw.logs());
    let mut answers = Vec::new();
    for _ in 0..5 {
        answers.push(get(&gw, "open.lab", "/", "").await);
    }
    // One was spent while waiting above: 2 more of the base's 3, then 429.
    assert_eq!(answers, [200, 200, 429, 429, 429]);
}

/// Finding 3, the certificate: a newer TLS section of namespace `aaa` for
/// `shop.lab` took shop's certificate, and a tenant's wildcard section
/// took the certificate of the operator's own host. The oldest TLS section
/// of a host keeps it, and a wildcard never covers the operator's hosts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_40_finding_3_the_oldest_tls_section_keeps_the_certificate() {
    let (shop, evil) = (RawUpstream::start().await, RawUpstream::start().await);
    let api = cluster(&shop.addr, &evil.addr);
    backend(&api, "aaa", "app", &evil.addr);
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "issue40");
    api.apply(secret_for(&pki, "shop", "shop-tls", &["shop.lab"], "0a"));
    let mut web = ingress("shop", "web", Some("fairgate"), "shop.lab", "/", "web");
    web["spec"]["tls"] = json!([{"hosts": ["shop.lab"], "secretName": "shop-tls"}]);
    let web = api.apply(web);
    let created = web["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap()
        .to_string();
    let later = api.wait_for(Duration::from_secs(3), |_| {
        common::kube_api::now_rfc3339() > created
    });
    assert!(later);
    let tls = free_addr();
    // The operator's own host, served by the base's default certificate.
    let base = tls_base(&pki, tls).replace(
        "default_limits: none\n",
        "default_limits: none\n\
         upstreams: {ops: {targets: [\"127.0.0.1:9\"]}}\n\
         routes:\n  - {name: ops, match: {host: default.example, path_prefix: /}, upstream: ops, auth: none}\n",
    );
    let gw = controller(&base, &api.kubeconfig(dir.path()), "fairgate-0").await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            served_serial(tls, Some("shop.lab")) == "0A"
        })
        .await
    );
    let take = secret_for(&pki, "aaa", "take-tls", &["shop.lab", "*.example"], "0b");
    let mut take_ing = ingress("aaa", "take", Some("fairgate"), "mine.example", "/", "app");
    take_ing["spec"]["tls"] =
        json!([{"hosts": ["shop.lab", "*.example", "mine.example"], "secretName": "take-tls"}]);
    for object in [take, take_ing] {
        let ran = tenant_creates(&api, dir.path(), "aaa", &object);
        assert_eq!(ran.code, 0, "{}", ran.stderr);
    }
    assert!(
        warned(
            &api,
            "aaa",
            "take",
            "NotSupported",
            "the certificate of shop.lab belongs to Ingress shop/web"
        ),
        "{}",
        events(&api, "aaa")
    );
    assert!(
        warned(
            &api,
            "aaa",
            "take",
            "NotSupported",
            "the certificate of *.example is the operator's"
        ),
        "{}",
        events(&api, "aaa")
    );
    let mine = eventually(Duration::from_secs(10), || async {
        served_serial(tls, Some("mine.example")) == "0B"
    })
    .await;
    assert!(mine, "aaa's own host gets its certificate\n{}", gw.logs());
    assert_eq!(served_serial(tls, Some("shop.lab")), "0A");
    assert_eq!(served_serial(tls, Some("default.example")), "01");
}
