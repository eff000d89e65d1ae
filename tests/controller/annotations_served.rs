//! Issue 42: each mapped ingress-nginx annotation served by a real
//! controller process. The Ingresses are written to the API stand-in, the
//! gateway reads them as it would a cluster's, and real requests show what
//! a user of that annotation relies on: status codes, header values,
//! counts. (The same mappings are also served from `fairgate import`'s
//! policies in `import_served.rs`; these tests are the controller's.)

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::cluster::*;
use common::forward_auth::ForwardAuth;
use common::*;
use serde_json::{json, Value};

const P: &str = "nginx.ingress.kubernetes.io";

/// Ingress `name` of `shop` for `host` `/` with the annotations `pairs`
/// (their keys without the prefix).
pub(super) fn annotated(name: &str, host: &str, pairs: &[(&str, &str)]) -> Value {
    let mut ing = shop_ingress(name, host, "/");
    let map: serde_json::Map<String, Value> = pairs
        .iter()
        .map(|(k, v)| (format!("{P}/{k}"), json!(v)))
        .collect();
    ing["metadata"]["annotations"] = Value::Object(map);
    ing
}

/// The controller's ConfigMap `ingress/fairgate-controller` with `data`.
pub(super) fn configmap(data: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "fairgate-controller", "namespace": "ingress"},
        "data": data
    })
}

/// The base policy reading that ConfigMap.
pub(super) fn with_configmap() -> String {
    base_policy("  configmap: ingress/fairgate-controller\n")
}

/// What a client got: the status, the headers, the body.
pub(super) struct Got {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Got {
    /// Header `name`'s values joined by ", " (empty when absent).
    pub fn header(&self, name: &str) -> String {
        let values: Vec<&str> = self
            .headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        values.join(", ")
    }

    /// The echo's JSON: what the upstream received.
    pub fn echoed(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// `method` `path` on `host` with `headers` and `body`, redirects not
/// followed, a 10 s client timeout.
pub(super) async fn ask(
    gw: &Gateway,
    method: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Got {
    let c = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = c.request(method, gw.url(path)).header("host", host);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req
        .body(body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{host}{path}: {e}"));
    let (status, headers) = (r.status().as_u16(), r.headers().clone());
    let body = r.text().await.unwrap_or_default();
    Got {
        status,
        headers,
        body,
    }
}

pub(super) async fn get(gw: &Gateway, host: &str, path: &str) -> Got {
    ask(gw, "GET", host, path, &[], Vec::new()).await
}

/// Redirects, the upstream's view of the request, address rules, body
/// size and read timeout, each from its annotation on an Ingress of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirect_and_request_annotations_are_served() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    let ingresses = [
        annotated("root", "root.lab", &[("app-root", "/shop")]),
        annotated(
            "moved",
            "moved.lab",
            &[
                ("permanent-redirect", "https://new.lab/home"),
                ("permanent-redirect-code", "308"),
            ],
        ),
        annotated(
            "away",
            "away.lab",
            &[("temporal-redirect", "https://tmp.lab/sale")],
        ),
        annotated(
            "away307",
            "away307.lab",
            &[
                ("temporal-redirect", "https://tmp.lab/sale"),
                ("temporal-redirect-code", "307"),
            ],
        ),
        annotated("prefix", "prefix.lab", &[("x-forwarded-prefix", "/shop")]),
        annotated(
            "vhost",
            "vhost.lab",
            &[("upstream-vhost", "internal.shop.svc")],
        ),
        annotated(
            "deny",
            "deny.lab",
            &[("denylist-source-range", "127.0.0.0/8")],
        ),
        annotated(
            "denyother",
            "ok.lab",
            &[("denylist-source-range", "10.0.0.0/8")],
        ),
        annotated("small", "small.lab", &[("proxy-body-size", "1k")]),
        annotated("slow", "slow.lab", &[("proxy-read-timeout", "1")]),
    ];
    for ing in ingresses {
        api.apply(ing);
    }
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base_policy(""), &api.kubeconfig(dir.path()), "fairgate-0").await;

    let r = get(&gw, "root.lab", "/").await;
    assert_eq!((r.status, r.header("location").as_str()), (302, "/shop"));
    assert_eq!(get(&gw, "root.lab", "/shop").await.status, 200);
    let r = get(&gw, "moved.lab", "/old?x=1").await;
    let want = (308, "https://new.lab/home");
    assert_eq!((r.status, r.header("location").as_str()), want);
    let r = get(&gw, "away.lab", "/").await;
    let want = (302, "https://tmp.lab/sale");
    assert_eq!((r.status, r.header("location").as_str()), want);
    let r = get(&gw, "away307.lab", "/").await;
    assert_eq!((r.status, r.header("location").as_str()), (307, want.1));

    let seen = get(&gw, "prefix.lab", "/a").await.echoed();
    assert_eq!(seen["headers"]["x-forwarded-prefix"], json!(["/shop"]));
    let seen = get(&gw, "vhost.lab", "/a").await.echoed();
    assert_eq!(seen["host"], json!("internal.shop.svc"), "{seen}");
    assert_eq!(seen["headers"]["x-forwarded-host"], json!(["vhost.lab"]));

    assert_eq!(get(&gw, "deny.lab", "/").await.status, 403);
    assert_eq!(get(&gw, "ok.lab", "/").await.status, 200);

    let post = |n: usize| ask(&gw, "POST", "small.lab", "/", &[], vec![b'x'; n]);
    assert_eq!(post(1024).await.status, 200);
    assert_eq!(post(1025).await.status, 413);

    assert_eq!(get(&gw, "slow.lab", "/?sleep_ms=10").await.status, 200);
    assert_eq!(get(&gw, "slow.lab", "/?sleep_ms=3000").await.status, 504);
    assert_eq!(echo.requests(), 7, "{}", gw.logs());
}

/// `enable-cors` with every `cors-*` annotation: the gateway answers a
/// listed origin's preflight itself with exactly those values, refuses
/// an unlisted origin's, and marks the actual answer for the browser.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_annotations_answer_preflights_as_written() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    api.apply(annotated(
        "api",
        "api.lab",
        &[
            ("enable-cors", "true"),
            ("cors-allow-origin", "https://app.lab"),
            ("cors-allow-methods", "GET, PUT"),
            ("cors-allow-headers", "X-Token"),
            ("cors-allow-credentials", "true"),
            ("cors-expose-headers", "X-Total"),
            ("cors-max-age", "600"),
        ],
    ));
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base_policy(""), &api.kubeconfig(dir.path()), "fairgate-0").await;
    let preflight = |origin| {
        let headers = [
            ("origin", origin),
            ("access-control-request-method", "PUT"),
            ("access-control-request-headers", "x-token"),
        ];
        let gw = &gw;
        async move { ask(gw, "OPTIONS", "api.lab", "/items", &headers, Vec::new()).await }
    };
    let r = preflight("https://app.lab").await;
    assert_eq!(r.status, 204);
    let answered: Vec<String> = [
        "access-control-allow-origin",
        "access-control-allow-methods",
        "access-control-allow-headers",
        "access-control-allow-credentials",
        "access-control-max-age",
    ]
    .iter()
    .map(|h| r.header(h))
    .collect();
    let want = ["https://app.lab", "GET, PUT", "x-token", "true", "600"];
    assert_eq!(answered, want);
    let r = preflight("https://evil.lab").await;
    assert_eq!(r.header("access-control-allow-origin"), "");
    let origin = [("origin", "https://app.lab")];
    let r = ask(&gw, "GET", "api.lab", "/items", &origin, Vec::new()).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("access-control-allow-origin"), "https://app.lab");
    assert_eq!(r.header("access-control-expose-headers"), "X-Total");
    assert_eq!(r.header("access-control-allow-credentials"), "true");
    assert_eq!(echo.requests(), 1, "preflights never reach the upstream");
}

/// `limit-rps` with `limit-burst-multiplier` and `limit-connections`,
/// refused with the ConfigMap's `limit-req-status-code` and
/// `limit-conn-status-code`: one pod's arithmetic (capacity 1 × (1 × 2 +
/// 1) = 3 back to back), and one request in flight per client address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_annotations_refuse_with_the_configmaps_codes() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    api.apply(configmap(json!({
        "limit-req-status-code": "429",
        "limit-conn-status-code": "503",
    })));
    api.apply(annotated(
        "rps",
        "rps.lab",
        &[("limit-rps", "1"), ("limit-burst-multiplier", "2")],
    ));
    api.apply(annotated("conn", "conn.lab", &[("limit-connections", "1")]));
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&with_configmap(), &api.kubeconfig(dir.path()), "fairgate-0").await;
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(get(&gw, "rps.lab", "/").await.status);
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);

    let slow = tokio::spawn({
        let url = gw.url("/?sleep_ms=3000");
        async move {
            let r = client().get(url).header("host", "conn.lab").send().await;
            r.unwrap().status().as_u16()
        }
    });
    let in_flight = eventually(Duration::from_secs(5), || async {
        fairgate_echo_in_flight(&echo) == 1
    })
    .await;
    assert!(in_flight);
    assert_eq!(get(&gw, "conn.lab", "/").await.status, 503);
    assert_eq!(slow.await.unwrap(), 200);
    assert_eq!(get(&gw, "conn.lab", "/").await.status, 200);
}

/// Requests the echo process has in flight.
fn fairgate_echo_in_flight(echo: &EchoProcess) -> u64 {
    echo.stats()["in_flight"].as_u64().expect("in_flight")
}

/// The auth annotations with an oauth2-proxy: the method, the sign-in
/// redirect and its parameter, a refreshed session's cookie, the answer
/// cache's duration, an `auth-map` Secret, and `enable-global-auth:
/// "false"` against the ConfigMap's `global-auth-url`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_annotations_are_served_through_the_auth_service() {
    let echo = EchoProcess::start();
    let sso = ForwardAuth::start(&[]);
    sso.session_refreshing("r3fresh", "bo", "bo@shop.lab", "staff")
        .await;
    let api = shop_api(&echo.addr);
    api.apply(configmap(json!({"global-auth-url": sso.auth_url()})));
    for ing in auth_ingresses(&sso.auth_url()) {
        api.apply(ing);
    }
    api.apply(auth_map("staff-map", &[ALICE]));
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&with_configmap(), &api.kubeconfig(dir.path()), "fairgate-0").await;

    let session = [("cookie", "_oauth2_proxy=r3fresh")];
    let as_bo = |host| ask(&gw, "GET", host, "/", &session, Vec::new());
    assert_eq!(as_bo("post.lab").await.status, 200);
    let (line, _) = sso.last().await;
    assert!(line.starts_with("POST /oauth2/auth "), "{line}");

    let r = get(&gw, "signin.lab", "/cart?id=7").await;
    assert_eq!(r.status, 302);
    let want = "https://signin.lab/oauth2/start?return_to=http%3A%2F%2Fsignin.lab%2Fcart%3Fid%3D7";
    assert_eq!(r.header("location"), want);

    let r = as_bo("fresh.lab").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("set-cookie"),
        "_oauth2_proxy=r3fresh; Path=/; HttpOnly"
    );
    let r = as_bo("stale.lab").await;
    assert_eq!((r.status, r.header("set-cookie").as_str()), (200, ""));

    sso.reset().await;
    for _ in 0..3 {
        assert_eq!(as_bo("cached.lab").await.status, 200);
    }
    assert_eq!(
        sso.calls().await,
        1,
        "answers within 1 s come from the cache"
    );
    let expired = eventually(Duration::from_secs(10), || async {
        as_bo("cached.lab").await;
        sso.calls().await == 2
    })
    .await;
    assert!(expired, "the cached answer outlived auth-cache-duration");

    assert_eq!(get(&gw, "open.lab", "/").await.status, 200);
    assert_eq!(get(&gw, "global.lab", "/").await.status, 401);
    assert_eq!(as_bo("global.lab").await.status, 200);

    let alice = [("authorization", "Basic YWxpY2U6d29uZGVybGFuZA==")];
    let r = ask(&gw, "GET", "map.lab", "/", &alice, Vec::new()).await;
    assert_eq!(r.status, 200, "{:#?}", api.list("v1/events", "shop"));
    assert_eq!(get(&gw, "map.lab", "/").await.status, 401);
}

/// The Ingresses of `auth_annotations_are_served_through_the_auth_service`,
/// each asking the auth service at `url` in its own way.
fn auth_ingresses(url: &str) -> Vec<Value> {
    let cookie_key = "$cookie__oauth2_proxy";
    vec![
        annotated(
            "post",
            "post.lab",
            &[("auth-url", url), ("auth-method", "POST")],
        ),
        annotated(
            "signin",
            "signin.lab",
            &[
                ("auth-url", url),
                ("auth-signin", "https://$host/oauth2/start"),
                ("auth-signin-redirect-param", "return_to"),
            ],
        ),
        annotated(
            "fresh",
            "fresh.lab",
            &[("auth-url", url), ("auth-always-set-cookie", "true")],
        ),
        annotated("stale", "stale.lab", &[("auth-url", url)]),
        annotated(
            "cached",
            "cached.lab",
            &[
                ("auth-url", url),
                ("auth-cache-key", cookie_key),
                ("auth-cache-duration", "200 1s"),
            ],
        ),
        annotated("open", "open.lab", &[("enable-global-auth", "false")]),
        annotated("global", "global.lab", &[]),
        annotated(
            "map",
            "map.lab",
            &[
                ("auth-type", "basic"),
                ("auth-secret", "staff-map"),
                ("auth-secret-type", "auth-map"),
                ("enable-global-auth", "false"),
            ],
        ),
    ]
}

/// An `auth-map` Secret of `shop`: each htpasswd line's user a key, its
/// hash the value.
fn auth_map(name: &str, lines: &[&str]) -> Value {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let data: serde_json::Map<String, Value> = lines
        .iter()
        .map(|l| l.split_once(':').unwrap())
        .map(|(user, hash)| (user.to_string(), json!(b64(hash))))
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": name, "namespace": "shop"},
        "data": data
    })
}

/// Service `svc` of `shop` with a live pod (`EchoProcess`) and an
/// endpoint where nothing listens (a pod that died), on one port, as a
/// Deployment's pods are.
fn live_and_dead(api: &common::kube_api::KubeApi, svc: &str, net: u8) -> EchoProcess {
    let live = EchoProcess::start_at(SocketAddr::from(([127, 3, net, 1], 0)), "live", "shop");
    let dead = SocketAddr::from(([127, 3, net, 2], live.addr.port()));
    api.apply(service("shop", svc));
    let name = format!("{svc}-1");
    api.apply(slice(
        "shop",
        &name,
        svc,
        &[ready(&live.addr), ready(&dead)],
    ));
    live
}

/// Ingress `name` of `shop` for `{name}.lab` to Service `svc` with the
/// annotations `pairs`.
pub(super) fn to_service(name: &str, svc: &str, pairs: &[(&str, &str)]) -> Value {
    let host = format!("{name}.lab");
    let mut ing = annotated(name, &host, pairs);
    ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"] = json!(svc);
    ing
}

/// `proxy-next-upstream` and `proxy-next-upstream-tries` against a
/// Service with one dead endpoint: retried on a connection error, every
/// request is served; with one try or `off`, round robin sends one of
/// the first two to the dead one, which answers 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_annotations_move_past_a_dead_endpoint() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    let pods = [
        live_and_dead(&api, "retry", 10),
        live_and_dead(&api, "single", 11),
        live_and_dead(&api, "off", 12),
    ];
    let error = ("proxy-next-upstream", "error timeout");
    api.apply(to_service(
        "retry",
        "retry",
        &[error, ("proxy-next-upstream-tries", "3")],
    ));
    api.apply(to_service(
        "single",
        "single",
        &[error, ("proxy-next-upstream-tries", "1")],
    ));
    api.apply(to_service("off", "off", &[("proxy-next-upstream", "off")]));
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base_policy(""), &api.kubeconfig(dir.path()), "fairgate-0").await;
    for _ in 0..6 {
        assert_eq!(get(&gw, "retry.lab", "/").await.status, 200);
    }
    assert_eq!(pods[0].requests(), 6);
    for (i, host) in [(1, "single.lab"), (2, "off.lab")] {
        let mut statuses = [
            get(&gw, host, "/").await.status,
            get(&gw, host, "/").await.status,
        ];
        statuses.sort();
        assert_eq!(statuses, [200, 502], "{host}");
        assert_eq!(pods[i].requests(), 1, "{host}");
    }
}

/// The `session-cookie-*` attributes on the affinity cookie, and
/// `session-cookie-change-on-failure`: when the pod a client is pinned to
/// dies, a retried request moves it to the other pod (a new cookie);
/// without it the retry goes to the same pod and fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn affinity_cookie_attributes_and_change_on_failure_are_served() {
    let at = |host: u8, pod: &str, port: u16| {
        EchoProcess::start_at(SocketAddr::from(([127, 3, 20, host], port)), pod, "shop")
    };
    let a = at(1, "web-a", 0);
    let b = at(2, "web-b", a.addr.port());
    let api = shop_api(&a.addr);
    api.apply(slice(
        "shop",
        "web-1",
        "web",
        &[ready(&a.addr), ready(&b.addr)],
    ));
    let affinity = [
        ("affinity", "cookie"),
        ("session-cookie-name", "route"),
        ("proxy-next-upstream", "error"),
    ];
    let attributes = [
        ("session-cookie-path", "/cart"),
        ("session-cookie-domain", "shop.lab"),
        ("session-cookie-expires", "3600"),
        ("session-cookie-secure", "true"),
        ("session-cookie-change-on-failure", "true"),
    ];
    api.apply(annotated(
        "moves",
        "moves.lab",
        &[&affinity[..], &attributes[..]].concat(),
    ));
    api.apply(annotated("stays", "stays.lab", &affinity));
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base_policy(""), &api.kubeconfig(dir.path()), "fairgate-0").await;

    let r = get(&gw, "moves.lab", "/cart").await;
    let moves_pod = r.echoed()["pod"].as_str().unwrap().to_string();
    let set = r.header("set-cookie");
    let (pair, attrs) = set.split_once("; ").unwrap_or_else(|| panic!("{set}"));
    assert!(pair.starts_with("route="), "{set}");
    let mut attrs: Vec<&str> = attrs.split("; ").collect();
    attrs.sort();
    let want = [
        "Domain=shop.lab",
        "HttpOnly",
        "Max-Age=3600",
        "Path=/cart",
        "Secure",
    ];
    assert_eq!(attrs, want, "{set}");
    let moves_cookie = pair.to_string();
    // Pinned to the same pod on the Ingress without change-on-failure.
    let mut stays_cookie = String::new();
    for _ in 0..2 {
        let r = get(&gw, "stays.lab", "/").await;
        if r.echoed()["pod"] == json!(moves_pod) {
            let set = r.header("set-cookie");
            stays_cookie = set.split("; ").next().unwrap().to_string();
        }
    }
    assert!(stays_cookie.starts_with("route="), "{stays_cookie:?}");
    let other = if moves_pod == "web-a" {
        drop(a);
        "web-b"
    } else {
        drop(b);
        "web-a"
    };
    let cookie = [("cookie", moves_cookie.as_str())];
    let r = ask(&gw, "GET", "moves.lab", "/cart", &cookie, Vec::new()).await;
    assert_eq!((r.status, r.echoed()["pod"].clone()), (200, json!(other)));
    let moved = r.header("set-cookie");
    assert!(
        moved.starts_with("route=") && !moved.starts_with(&moves_cookie),
        "{moved}"
    );
    let cookie = [("cookie", stays_cookie.as_str())];
    let r = ask(&gw, "GET", "stays.lab", "/", &cookie, Vec::new()).await;
    assert_eq!(r.status, 502, "{}", r.body);
}

/// A listener whose accept queue is full (it never accepts): a connection
/// to it hangs in the handshake, as one to a host that drops packets.
async fn unanswered() -> (
    SocketAddr,
    tokio::net::TcpListener,
    Vec<tokio::net::TcpStream>,
) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut queued = Vec::new();
    for _ in 0..8 {
        let connect = tokio::net::TcpStream::connect(addr);
        match tokio::time::timeout(Duration::from_millis(300), connect).await {
            Ok(Ok(s)) => queued.push(s),
            _ => return (addr, listener, queued),
        }
    }
    panic!("the accept queue of {addr} never filled");
}

/// `proxy-connect-timeout: "1"` against an endpoint that never completes
/// a handshake: the gateway gives up and answers 504 while the client
/// still waits (ingress-nginx's default is 5 s, and the client here waits
/// 4); `proxy-send-timeout: "1"` against one that never reads: an upload
/// that stalls is ended with 504.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_and_send_timeouts_end_stalled_exchanges() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    let (hole, _listener, _queued) = unanswered().await;
    backend(&api, "shop", "hole", &hole);
    api.apply(to_service(
        "connect",
        "hole",
        &[("proxy-connect-timeout", "1")],
    ));
    let (deaf, _held) = deaf_listener();
    backend(&api, "shop", "deaf", &deaf);
    let send = [("proxy-send-timeout", "1"), ("proxy-body-size", "100m")];
    api.apply(to_service("send", "deaf", &send));
    let dir = tempfile::tempdir().unwrap();
    let gw = controller(&base_policy(""), &api.kubeconfig(dir.path()), "fairgate-0").await;
    let r = client()
        .get(gw.url("/"))
        .header("host", "connect.lab")
        .timeout(Duration::from_secs(4))
        .send()
        .await
        .expect("answered before the client's 4 s");
    assert_eq!(r.status().as_u16(), 504);
    let answer = stalled_upload(gw.listen, "send.lab");
    assert_eq!(status_of(&answer), 504, "{answer}\n{}", gw.logs());
}

/// Sends a 64 MiB upload to `host` over a raw connection until the
/// gateway stops reading, and returns what it answered.
fn stalled_upload(gw: SocketAddr, host: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(gw).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let head = format!("POST / HTTP/1.1\r\nHost: {host}\r\nContent-Length: 67108864\r\n\r\n");
    s.write_all(head.as_bytes()).unwrap();
    let mut w = s.try_clone().unwrap();
    std::thread::spawn(move || {
        let chunk = vec![b'x'; 1 << 16];
        for _ in 0..1024 {
            if w.write_all(&chunk).is_err() {
                return;
            }
        }
    });
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

/// A listener that accepts connections and never reads from them: an
/// upload to it stalls once the socket buffers are full.
fn deaf_listener() -> (SocketAddr, std::thread::JoinHandle<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let held = std::thread::spawn(move || {
        let mut kept = Vec::new();
        while let Ok((s, _)) = listener.accept() {
            kept.push(s);
            if kept.len() == 4 {
                break;
            }
        }
        std::thread::sleep(Duration::from_secs(20));
    });
    (addr, held)
}
