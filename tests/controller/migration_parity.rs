//! Issue 42, migration parity: what ingress-nginx Ingresses ask for that
//! fairgate must either serve or refuse out loud. Each test writes the
//! tenant's Ingress with the real `kubectl` and speaks HTTP to a real
//! controller process.

use crate::common;

use std::time::Duration;

use common::cluster::*;
use common::*;
use serde_json::{json, Value};

const P: &str = "nginx.ingress.kubernetes.io";

fn with_annotation(name: &str, host: &str, key: &str, value: &str) -> Value {
    let mut ing = shop_ingress(name, host, "/");
    ing["metadata"]["annotations"] = json!({format!("{P}/{key}"): value});
    ing
}

/// Whether a Warning Event of `reason` on `shop/name` says `text`, within 10 s.
fn warned(api: &common::kube_api::KubeApi, name: &str, reason: &str, text: &str) -> bool {
    api.wait_for(Duration::from_secs(10), |api| {
        api.list("v1/events", "shop").iter().any(|e| {
            e["involvedObject"]["name"] == name
                && e["type"] == "Warning"
                && e["reason"] == reason
                && e["message"].as_str().is_some_and(|m| m.contains(text))
        })
    })
}

async fn status(gw: &Gateway, host: &str) -> u16 {
    let r = client().get(gw.url("/")).header("host", host).send().await;
    r.map_or(0, |r| r.status().as_u16())
}

/// An Ingress guarded by ingress-nginx's ModSecurity WAF, or one whose
/// backend ends TLS itself (`ssl-passthrough`) when the base policy has no
/// TLS listener to pass it through, is withheld with an Event naming the
/// annotation: served without its WAF it would lose its rules silently,
/// and served with TLS ended it would be broken (SPEC §10). The
/// same annotations set to "false" change nothing, and those Ingresses are
/// served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waf_or_passthrough_ingress_is_withheld_and_false_is_no_op() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("waf", "waf.lab", "enable-modsecurity", "true"),
        ("crs", "crs.lab", "enable-owasp-core-rules", "true"),
        ("pass", "pass.lab", "ssl-passthrough", "true"),
        ("nowaf", "nowaf.lab", "enable-modsecurity", "false"),
        ("nopass", "nopass.lab", "ssl-passthrough", "false"),
    ];
    for (name, host, key, value) in cases {
        api.apply(with_annotation(name, host, key, value));
    }
    let gw = controller(&base_policy(""), &api.kubeconfig(dir.path()), "fairgate-0").await;
    for (name, _, key, value) in &cases[..3] {
        let why = format!("{key} did not carry over");
        assert!(
            warned(&api, name, "Withheld", &why),
            "{name} ({key}: {value}): {:#?}",
            api.list("v1/events", "shop")
        );
    }
    for (name, host, key, value) in cases {
        let expected = if value == "true" { 404 } else { 200 };
        assert_eq!(status(&gw, host).await, expected, "{name} ({key}: {value})");
    }
}

/// Two pods of Deployment `web` (`web-a` at 127.3.`net`.1, `web-b` at .2,
/// one port), as a Service's endpoints are.
fn two_pods(net: u8) -> [EchoProcess; 2] {
    let a = EchoProcess::start_at(
        std::net::SocketAddr::from(([127, 3, net, 1], 0)),
        "web-a",
        "shop",
    );
    let at = std::net::SocketAddr::from(([127, 3, net, 2], a.addr.port()));
    [a, EchoProcess::start_at(at, "web-b", "shop")]
}

/// `upstream-hash-by: $http_x_user` on an Ingress whose Service has two
/// pods: each user always reaches the same pod, and sixteen users reach
/// both; a second Ingress of the same Service without it keeps its own
/// pool, taking the pods in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_hash_by_keeps_each_user_on_one_pod() {
    let [a, b] = two_pods(0);
    let api = shop_api(&a.addr);
    api.apply(slice(
        "shop",
        "web-1",
        "web",
        &[ready(&a.addr), ready(&b.addr)],
    ));
    api.apply(with_annotation(
        "sticky",
        "sticky.lab",
        "upstream-hash-by",
        "$http_x_user",
    ));
    api.apply(shop_ingress("plain", "plain.lab", "/"));
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base_policy(""), &api.kubeconfig(dir.path()), "fairgate-0").await;
    let c = client();
    let pods = [&a, &b];
    let served_by = |host: &'static str, user: String| {
        let (c, url) = (c.clone(), gw.url("/"));
        async move {
            let before: Vec<u64> = pods.iter().map(|p| p.requests()).collect();
            let r = c
                .get(url)
                .header("host", host)
                .header("x-user", user)
                .send()
                .await;
            assert_eq!(r.unwrap().status(), 200);
            let after: Vec<u64> = pods.iter().map(|p| p.requests()).collect();
            (0..2).find(|i| after[*i] != before[*i]).unwrap()
        }
    };
    let mut used = [0, 0];
    for user in 0..16 {
        let first = served_by("sticky.lab", format!("user-{user}")).await;
        used[first] += 1;
        for _ in 0..3 {
            assert_eq!(
                served_by("sticky.lab", format!("user-{user}")).await,
                first,
                "user-{user}\n{}",
                gw.logs()
            );
        }
    }
    assert!(used[0] > 0 && used[1] > 0, "{used:?}");
    // Without the annotation: one user, both pods in turn.
    let mut turns = Vec::new();
    for _ in 0..4 {
        turns.push(served_by("plain.lab", "user-0".into()).await);
    }
    assert!(turns.contains(&0) && turns.contains(&1), "{turns:?}");
}

/// A page at `addr` (a pod of its own) that `fetch`es `/cart` six times
/// one after the other, as a shop's page does, and writes the pods that
/// answered into `<body data-result=...>`.
async fn cart_page(addr: std::net::SocketAddr) {
    let html = r#"<!doctype html><html><body data-result="pending"><script>
(async () => {
  const pods = [];
  for (let i = 0; i < 6; i++) {
    const r = await fetch("/cart");
    pods.push((await r.json()).pod);
  }
  document.body.setAttribute("data-result", pods.join(","));
})().catch(e => document.body.setAttribute("data-result", "failed: " + e));
</script></body></html>"#;
    html_pod(addr, html.to_string()).await;
}

/// A pod at `addr` answering every request with `html`.
async fn html_pod(addr: std::net::SocketAddr, html: String) {
    pod_with(addr, "", html).await;
}

/// A pod at `addr` answering every request with `html` and the header
/// lines `headers` (each ending in CRLF).
async fn pod_with(addr: std::net::SocketAddr, headers: &'static str, html: String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\n{headers}content-length: {}\r\nconnection: close\r\n\r\n{html}",
                html.len()
            );
            let _ = s.write_all(answer.as_bytes()).await;
        }
    });
}

/// `affinity: cookie` with ingress-nginx's `session-cookie-*` on an
/// Ingress whose Service has two pods: a real browser's six requests from
/// one page all reach one pod, four fresh browsers between them reach both
/// (each kept on its own), and the cookie carries exactly the attributes
/// asked for, its path the Ingress's (ingress-nginx's location path).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_affinity_keeps_a_browser_on_one_pod() {
    let [a, b] = two_pods(1);
    let page = std::net::SocketAddr::from(([127, 3, 1, 3], free_addr().port()));
    cart_page(page).await;
    let api = shop_api(&a.addr);
    api.apply(slice(
        "shop",
        "web-1",
        "web",
        &[ready(&a.addr), ready(&b.addr)],
    ));
    backend(&api, "shop", "page", &page);
    let mut sticky = shop_ingress("cart", "shop.lab", "/cart");
    sticky["metadata"]["annotations"] = json!({
        format!("{P}/affinity"): "cookie",
        format!("{P}/affinity-mode"): "persistent",
        format!("{P}/session-cookie-name"): "SHOPID",
        format!("{P}/session-cookie-max-age"): "3600",
        format!("{P}/session-cookie-samesite"): "Lax",
    });
    api.apply(sticky);
    api.apply(ingress(
        "shop",
        "page",
        Some("fairgate"),
        "shop.lab",
        "/page",
        "page",
    ));
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base_policy(""), &api.kubeconfig(dir.path()), "fairgate-0").await;
    let (first, set) = cart(&gw, None).await;
    let set = set.expect("a new client gets the cookie");
    let value = set
        .split(';')
        .next()
        .unwrap()
        .strip_prefix("SHOPID=")
        .unwrap();
    assert_eq!(
        set,
        format!("SHOPID={value}; Path=/cart; Max-Age=3600; HttpOnly; SameSite=Lax")
    );
    let url = gw.url("/page").replace("127.0.0.1", "shop.lab");
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..4 {
        let url = url.clone();
        let pods =
            tokio::task::spawn_blocking(move || common::browser::page_result(&url, &["shop.lab"]))
                .await
                .unwrap();
        let pods: Vec<&str> = pods.split(',').collect();
        assert_eq!(pods.len(), 6, "{pods:?}");
        assert!(
            pods.iter().all(|p| *p == pods[0] && p.starts_with("web-")),
            "{pods:?}"
        );
        seen.insert(pods[0].to_string());
    }
    // Four browsers, round robin between two pods for each new one.
    assert_eq!(seen.len(), 2, "{seen:?}");
    third_pod_joins(&api, &gw, [&a, &b], &format!("SHOPID={value}"), &first).await;
}

/// A third pod joins (the pool's targets move in place): new clients
/// reach it, and the client with `cookie` still reaches its pod `first`.
async fn third_pod_joins(
    api: &common::kube_api::KubeApi,
    gw: &Gateway,
    [a, b]: [&EchoProcess; 2],
    cookie: &str,
    first: &str,
) {
    let at = std::net::SocketAddr::from(([127, 3, 1, 4], a.addr.port()));
    let c = EchoProcess::start_at(at, "web-c", "shop");
    let endpoints = [ready(&a.addr), ready(&b.addr), ready(&c.addr)];
    api.apply(slice("shop", "web-1", "web", &endpoints));
    for _ in 0..100 {
        assert_eq!(cart(gw, Some(cookie)).await, (first.to_string(), None));
        if cart(gw, None).await.0 == "web-c" {
            return;
        }
    }
    panic!("no new client reached the new pod\n{}", gw.logs());
}

/// A GET of shop.lab/cart with `cookie`: the pod that answered and the
/// `Set-Cookie`, if any.
async fn cart(gw: &Gateway, cookie: Option<&str>) -> (String, Option<String>) {
    let mut request = client().get(gw.url("/cart")).header("host", "shop.lab");
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    let r = request.send().await.unwrap();
    assert_eq!(r.status(), 200);
    let set = r
        .headers()
        .get("set-cookie")
        .map(|v| v.to_str().unwrap().to_string());
    let body: Value = r.json().await.unwrap();
    (body["pod"].as_str().unwrap().to_string(), set)
}

/// The controller ConfigMap's `use-gzip` and `enable-brotli`: a real
/// browser loads a 60 KiB page through the gateway compressed (what it
/// downloaded is under a quarter of what it decoded, and the page's own
/// script ran), and asks as browsers do, getting brotli first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configmaps_gzip_and_brotli_compress_what_a_browser_loads() {
    let page = std::net::SocketAddr::from(([127, 3, 2, 1], free_addr().port()));
    let filler = "<p>Our catalogue: lamps, chairs, tables and shelves.</p>\n".repeat(1100);
    let html = format!(
        r#"<!doctype html><html><body data-result="pending">{filler}<script>
const nav = performance.getEntriesByType("navigation")[0];
document.body.setAttribute("data-result", nav.encodedBodySize + ":" + nav.decodedBodySize);
</script></body></html>"#
    );
    html_pod(page, html.clone()).await;
    let api = shop_api(&page);
    api.apply(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "fairgate-controller", "namespace": "ingress"},
        "data": {"use-gzip": "true", "enable-brotli": "true", "gzip-level": "5"}
    }));
    api.apply(shop_ingress("shop", "shop.lab", "/"));
    let dir = tempfile::tempdir().unwrap();
    let base = base_policy("  configmap: ingress/fairgate-controller\n");
    let gw = controller(&base, &api.kubeconfig(dir.path()), "fairgate-0").await;
    let url = gw.url("/index.html").replace("127.0.0.1", "shop.lab");
    let sizes =
        tokio::task::spawn_blocking(move || common::browser::page_result(&url, &["shop.lab"]))
            .await
            .unwrap();
    let (encoded, decoded) = sizes.split_once(':').expect("encoded:decoded");
    let (encoded, decoded): (usize, usize) = (encoded.parse().unwrap(), decoded.parse().unwrap());
    assert_eq!(decoded, html.len(), "{sizes}");
    assert!(encoded * 4 < decoded, "{sizes}");
    for (accept, coding) in [
        ("gzip, deflate, br, zstd", Some("br")),
        ("gzip", Some("gzip")),
        ("identity", None),
    ] {
        let r = client()
            .get(gw.url("/"))
            .header("host", "shop.lab")
            .header("accept-encoding", accept)
            .send()
            .await
            .unwrap();
        let got = r
            .headers()
            .get("content-encoding")
            .map(|v| v.to_str().unwrap().to_string());
        assert_eq!(got.as_deref(), coding, "{accept}");
    }
}

/// `from-to-www-redirect`: `www.shop.lab` answers 308 to `shop.lab` with
/// the path and query kept, and an Ingress naming `www.news.lab` makes
/// `news.lab` redirect there; but where another Ingress serves the other
/// name (`deals.lab`'s `www.deals.lab`), that Ingress answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_to_www_redirect_sends_the_other_name_home() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    for (name, host) in [
        ("shop", "shop.lab"),
        ("news", "www.news.lab"),
        ("deals", "deals.lab"),
    ] {
        api.apply(with_annotation(name, host, "from-to-www-redirect", "true"));
    }
    api.apply(shop_ingress("deals-www", "www.deals.lab", "/"));
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base_policy(""), &api.kubeconfig(dir.path()), "fairgate-0").await;
    let no_follow = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    for (host, location) in [
        ("www.shop.lab", Some("http://shop.lab/a/b?c=1&d")),
        ("news.lab", Some("http://www.news.lab/a/b?c=1&d")),
        ("www.deals.lab", None),
        ("shop.lab", None),
    ] {
        let r = no_follow
            .get(gw.url("/a/b?c=1&d"))
            .header("host", host)
            .send()
            .await
            .unwrap();
        let got = r
            .headers()
            .get("location")
            .map(|v| v.to_str().unwrap().to_string());
        let status = if location.is_some() { 308 } else { 200 };
        assert_eq!(
            (r.status().as_u16(), got.as_deref()),
            (status, location),
            "{host}"
        );
    }
}

/// The annotations fairgate answers its own way (cipher lists, tracing
/// switches, HTTP/2 push, subsets, `satisfy`, ...) never withhold an
/// Ingress: one carrying them all is served, with no Warning Event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotations_answered_their_own_way_never_withhold() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    let mut ing = shop_ingress("tuned", "tuned.lab", "/");
    let said = [
        ("connection-proxy-header", "keep-alive"),
        ("enable-opentelemetry", "true"),
        ("http2-push-preload", "true"),
        ("modsecurity-transaction-id", "$request_id"),
        ("opentelemetry-trust-incoming-span", "false"),
        ("preserve-trailing-slash", "true"),
        ("proxy-http-version", "1.0"),
        ("proxy-next-upstream-timeout", "10"),
        ("proxy-ssl-ciphers", "HIGH:!aNULL"),
        ("proxy-ssl-protocols", "TLSv1.2"),
        ("proxy-ssl-verify-depth", "2"),
        ("satisfy", "any"),
        ("ssl-ciphers", "ECDHE-RSA-AES128-GCM-SHA256"),
        ("ssl-prefer-server-ciphers", "true"),
        ("upstream-hash-by-subset", "true"),
        ("upstream-hash-by-subset-size", "3"),
    ];
    ing["metadata"]["annotations"] = said
        .iter()
        .map(|(k, v)| (format!("{P}/{k}"), json!(v)))
        .collect::<serde_json::Map<String, Value>>()
        .into();
    api.apply(ing);
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base_policy(""), &api.kubeconfig(dir.path()), "fairgate-0").await;
    assert_eq!(status(&gw, "tuned.lab").await, 200);
    let warnings: Vec<Value> = api
        .list("v1/events", "shop")
        .into_iter()
        .filter(|e| e["involvedObject"]["name"] == "tuned" && e["type"] == "Warning")
        .collect();
    assert!(warnings.is_empty(), "{warnings:#?}");
}

/// `proxy-cookie-domain` and `proxy-cookie-path`: an application that
/// names its internal host and mount path in its cookies gets them
/// rewritten as nginx does; a cookie of another domain and path is kept
/// byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_cookie_domain_and_path_rewrite_the_upstreams_cookies() {
    let app = std::net::SocketAddr::from(([127, 3, 3, 1], free_addr().port()));
    let cookies = "set-cookie: sid=1; Domain=.APP.shop.svc; Path=/app/cart; HttpOnly\r\n\
                   set-cookie: theme=dark; Domain=other.example; Path=/api\r\n";
    pod_with(app, cookies, "ok".into()).await;
    let api = shop_api(&app);
    let mut ing = shop_ingress("app", "app.lab", "/");
    ing["metadata"]["annotations"] = json!({
        format!("{P}/proxy-cookie-domain"): "app.shop.svc app.lab",
        format!("{P}/proxy-cookie-path"): "/app/ /",
    });
    api.apply(ing);
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base_policy(""), &api.kubeconfig(dir.path()), "fairgate-0").await;
    let r = client()
        .get(gw.url("/"))
        .header("host", "app.lab")
        .send()
        .await
        .unwrap();
    let set: Vec<&str> = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(
        set,
        [
            "sid=1; Domain=.app.lab; Path=/cart; HttpOnly",
            "theme=dark; Domain=other.example; Path=/api"
        ]
    );
}

/// `proxy-redirect-from` and `-to`: an application that redirects to its
/// internal address sends the browser to the public one, the rest of the
/// URL kept (nginx's `proxy_redirect`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_redirect_rewrites_the_upstreams_location() {
    let app = std::net::SocketAddr::from(([127, 3, 3, 2], free_addr().port()));
    let moved = "location: http://app.shop.svc:8080/cart/done?to=http://app.shop.svc:8080/\r\n\
                 refresh: 3; url=http://app.shop.svc:8080/home\r\n";
    pod_with(app, moved, "ok".into()).await;
    let api = shop_api(&app);
    let mut ing = shop_ingress("app", "app.lab", "/");
    ing["metadata"]["annotations"] = json!({
        format!("{P}/proxy-redirect-from"): "http://app.shop.svc:8080/",
        format!("{P}/proxy-redirect-to"): "https://app.lab/",
    });
    api.apply(ing);
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base_policy(""), &api.kubeconfig(dir.path()), "fairgate-0").await;
    let r = client()
        .get(gw.url("/"))
        .header("host", "app.lab")
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()["location"],
        "https://app.lab/cart/done?to=http://app.shop.svc:8080/"
    );
    assert_eq!(r.headers()["refresh"], "3; url=https://app.lab/home");
}

/// `server-alias`: each alias serves the Ingress's paths as its host does,
/// but an alias an older Ingress names as its host is that Ingress's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_alias_serves_the_ingress_under_more_names() {
    let [a, b] = two_pods(5);
    let api = shop_api(&a.addr);
    backend(&api, "shop", "other", &b.addr);
    // The older Ingress (created first, and first by name in the same
    // second) names taken.lab as its host: the alias is not the newer one's.
    api.apply(ingress(
        "shop",
        "a-taken",
        Some("fairgate"),
        "taken.lab",
        "/cart",
        "other",
    ));
    let mut shop = shop_ingress("shop", "shop.lab", "/cart");
    shop["metadata"]["annotations"] = json!({format!("{P}/server-alias"): "store.lab, Taken.lab"});
    api.apply(shop);
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base_policy(""), &api.kubeconfig(dir.path()), "fairgate-0").await;
    let pod = |host: &'static str, path: &'static str| {
        let request = client().get(gw.url(path)).header("host", host).send();
        async move {
            let r = request.await.unwrap();
            let status = r.status().as_u16();
            let body: Value = r.json().await.unwrap_or_default();
            (status, body["pod"].as_str().unwrap_or("").to_string())
        }
    };
    assert_eq!(pod("shop.lab", "/cart/1").await, (200, "web-a".into()));
    assert_eq!(pod("store.lab", "/cart/1").await, (200, "web-a".into()));
    assert_eq!(pod("store.lab", "/other").await.0, 404);
    assert_eq!(pod("taken.lab", "/cart/1").await, (200, "web-b".into()));
}

/// `default-backend`: while the Ingress's Service has no ready endpoint
/// its paths are served by the default backend's pod; the first ready
/// endpoint takes them back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_backend_serves_until_the_service_has_endpoints() {
    let [web, fallback] = two_pods(6);
    let api = shop_api(&web.addr);
    api.apply(slice("shop", "web-1", "web", &[]));
    backend(&api, "shop", "fallback", &fallback.addr);
    api.apply(with_annotation(
        "shop",
        "shop.lab",
        "default-backend",
        "fallback",
    ));
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base_policy(""), &api.kubeconfig(dir.path()), "fairgate-0").await;
    let pod = || {
        let request = client().get(gw.url("/")).header("host", "shop.lab").send();
        async move {
            let r = request.await.unwrap();
            let status = r.status().as_u16();
            let body: Value = r.json().await.unwrap_or_default();
            (status, body["pod"].as_str().unwrap_or("").to_string())
        }
    };
    assert_eq!(pod().await, (200, "web-b".into()));
    api.apply(slice("shop", "web-1", "web", &[ready(&web.addr)]));
    // Polled: the endpoint's arrival makes a build.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while pod().await != (200, "web-a".into()) {
        assert!(tokio::time::Instant::now() < deadline, "{}", gw.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `custom-http-errors` with `default-backend`: the application's 404
/// becomes the error backend's page, asked with ingress-nginx's headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_http_errors_are_answered_by_the_default_backend() {
    let [web, errors] = two_pods(7);
    let api = shop_api(&web.addr);
    backend(&api, "shop", "errors", &errors.addr);
    let mut ing = shop_ingress("shop", "shop.lab", "/");
    ing["metadata"]["annotations"] = json!({
        format!("{P}/custom-http-errors"): "404,503",
        format!("{P}/default-backend"): "errors",
    });
    api.apply(ing);
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base_policy(""), &api.kubeconfig(dir.path()), "fairgate-0").await;
    let r = client()
        .get(gw.url("/gone?status=404"))
        .header("host", "shop.lab")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["pod"], "web-b", "{body}");
    let h = |name: &str| body["headers"][name][0].clone();
    assert_eq!(
        (h("x-code"), h("x-namespace"), h("x-ingress-name")),
        (json!("404"), json!("shop"), json!("shop"))
    );
    let r = client()
        .get(gw.url("/fine"))
        .header("host", "shop.lab")
        .send()
        .await
        .unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["pod"], "web-a");
}

/// `mirror-target` through the controller: copies go to the endpoints of
/// a Service of the Ingress's own namespace, the client is answered by its
/// own Service; a tenant pointing its copies at another namespace's
/// Service (or anywhere else) gets none, and is told so. With
/// `mirror-request-body: "off"` a copy carries no body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrored_requests_reach_the_namespaces_own_service_only() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    let shadow = RawUpstream::start().await;
    backend(&api, "shop", "shadow", &shadow.addr);
    let mut ing = shop_ingress("copied", "copied.lab", "/");
    ing["metadata"]["annotations"] = json!({
        format!("{P}/mirror-target"): "http://shadow.shop.svc.cluster.local/$request_uri",
        format!("{P}/mirror-host"): "shadow.internal",
    });
    api.apply(ing);
    let mut bodiless = shop_ingress("bodiless", "bodiless.lab", "/");
    bodiless["metadata"]["annotations"] = json!({
        format!("{P}/mirror-target"): "http://shadow.shop.svc.cluster.local/$request_uri",
        format!("{P}/mirror-request-body"): "off",
    });
    api.apply(bodiless);
    api.apply(with_annotation(
        "elsewhere",
        "elsewhere.lab",
        "mirror-target",
        "http://metrics.kube-system.svc/$request_uri",
    ));
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base_policy(""), &api.kubeconfig(dir.path()), "fairgate-0").await;
    let c = client();
    let served = eventually(Duration::from_secs(10), || async {
        let r = c
            .post(gw.url("/cart?id=7"))
            .header("host", "copied.lab")
            .body("item")
            .send()
            .await;
        r.is_ok_and(|r| r.status() == 200)
    })
    .await;
    assert!(served);
    assert!(eventually(Duration::from_secs(5), || async { shadow.count() >= 1 }).await);
    let copy = shadow.received()[0].clone();
    assert_eq!(copy.request_line(), "POST /cart?id=7 HTTP/1.1");
    assert!(copy
        .headers()
        .contains(&("host".into(), "shadow.internal".into())));
    assert_eq!(copy.body_bytes, 4);
    // mirror-request-body: "off": the copy has no body.
    let r = c
        .post(gw.url("/x"))
        .header("host", "bodiless.lab")
        .body("item");
    assert_eq!(r.send().await.unwrap().status(), 200);
    assert!(eventually(Duration::from_secs(5), || async { shadow.count() >= 2 }).await);
    let copy = shadow.received()[1].clone();
    assert_eq!(copy.request_line(), "POST /x HTTP/1.1");
    assert_eq!(copy.body_bytes, 0);
    assert_eq!(status(&gw, "elsewhere.lab").await, 200);
    assert!(warned(
        &api,
        "elsewhere",
        "NotSupported",
        "a Service of the Ingress's own namespace"
    ));
}
