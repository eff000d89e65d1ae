//! Controller mode under traffic: a rolling update moved by EndpointSlices
//! with no failed request, a TLS Secret renewed (and then broken) while
//! clients handshake, and an API server lost for 10 s and back with its
//! history compacted (410 Gone) while the gateway serves its last policy.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cluster::*;
use common::kube_api::KubeApi;
use common::*;

/// Sends GETs to `host` one after another until `stop`: how many, and
/// how many did not answer 200.
fn steady_client(
    gw: &Gateway,
    host: &'static str,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(u64, u64)> {
    let url = gw.url("/");
    tokio::spawn(async move {
        let c = client();
        let (mut sent, mut failed) = (0, 0);
        // Bounded: at most 100,000 requests.
        while !stop.load(Ordering::Relaxed) && sent < 100_000 {
            sent += 1;
            let ok = c
                .get(&url)
                .header("host", host)
                .send()
                .await
                .is_ok_and(|r| r.status() == 200);
            failed += u64::from(!ok);
        }
        (sent, failed)
    })
}

/// Whether, within `within`, `quiet` answered no request while `busy`
/// answered 50.
async fn quiet_while(quiet: &EchoProcess, busy: &EchoProcess, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let (q, b) = (quiet.requests(), busy.requests());
        while busy.requests() < b + 50 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if quiet.requests() == q {
            return true;
        }
    }
    false
}

fn endpoint(echo: &EchoProcess, ready: bool, terminating: bool) -> Endpoint<'_> {
    Endpoint {
        addr: &echo.addr,
        ready,
        terminating,
    }
}

#[tokio::test]
async fn a_rolling_update_moves_traffic_with_no_failed_request() {
    let old = EchoProcess::start_on([127, 0, 0, 2]);
    let new = EchoProcess::start_on([127, 0, 0, 3]);
    let api = KubeApi::start();
    let dir = tempfile::tempdir().unwrap();
    let kc = api.kubeconfig(dir.path());
    api.apply(ingress_class("fairgate", CONTROLLER, false));
    api.apply(service("shop", "web"));
    api.apply(slice(
        "shop",
        "web-old",
        "web",
        &[endpoint(&old, true, false)],
    ));
    api.apply(shop_ingress("web", "shop.example", "/"));
    let gw = controller(&base_policy(""), &kc, "fairgate-0").await;
    let stop = Arc::new(AtomicBool::new(false));
    let load = steady_client(&gw, "shop.example", stop.clone());
    assert!(eventually(Duration::from_secs(10), || async { old.requests() > 20 }).await);

    // The new pod is ready: both serve.
    api.apply(slice(
        "shop",
        "web-new",
        "web",
        &[endpoint(&new, true, false)],
    ));
    assert!(eventually(Duration::from_secs(10), || async { new.requests() > 20 }).await);
    // The old one terminates: no new request reaches it, though it still answers.
    api.apply(slice(
        "shop",
        "web-old",
        "web",
        &[endpoint(&old, false, true)],
    ));
    let drained = quiet_while(&old, &new, Duration::from_secs(10)).await;
    assert!(drained, "the terminating endpoint still gets requests");
    let frozen = old.requests();
    let more = new.requests() + 200;
    assert!(eventually(Duration::from_secs(20), || async { new.requests() >= more }).await);
    assert_eq!(
        old.requests(),
        frozen,
        "a terminating endpoint got a new request"
    );
    // Then it is removed, and the old process ends.
    api.delete("discovery.k8s.io/v1/endpointslices", "shop", "web-old");
    let more = new.requests() + 200;
    assert!(eventually(Duration::from_secs(20), || async { new.requests() >= more }).await);
    drop(old);
    let more = new.requests() + 200;
    assert!(eventually(Duration::from_secs(20), || async { new.requests() >= more }).await);
    stop.store(true, Ordering::Relaxed);
    let (sent, failed) = load.await.unwrap();
    println!(
        "rolling update: {sent} requests, {failed} failed; old served {frozen}, new {}",
        new.requests()
    );
    assert_eq!(failed, 0, "of {sent}:\n{}", gw.logs());
    assert!(frozen > 20 && new.requests() > 600);
}

/// TLS handshakes with one name, one after another on a thread, each
/// expected to be served one of some serials.
struct Handshakes {
    stop: Arc<AtomicBool>,
    counts: Arc<[AtomicU64; 2]>,
    thread: std::thread::JoinHandle<()>,
}

impl Handshakes {
    fn start(
        tls: std::net::SocketAddr,
        name: &'static str,
        serials: &'static [&'static str],
    ) -> Handshakes {
        let stop = Arc::new(AtomicBool::new(false));
        let counts: Arc<[AtomicU64; 2]> = Arc::new(Default::default());
        let (s, c) = (stop.clone(), counts.clone());
        // Bounded: at most 10,000 handshakes.
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) && c[0].load(Ordering::Relaxed) < 10_000 {
                let serial = served_serial(tls, Some(name));
                c[1].fetch_add(
                    u64::from(!serials.contains(&serial.as_str())),
                    Ordering::Relaxed,
                );
                c[0].fetch_add(1, Ordering::Relaxed);
            }
        });
        Handshakes {
            stop,
            counts,
            thread,
        }
    }

    /// How many handshakes were made, and how many were not served as expected.
    fn stop(self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        (
            self.counts[0].load(Ordering::Relaxed),
            self.counts[1].load(Ordering::Relaxed),
        )
    }
}

#[tokio::test]
async fn a_renewed_secret_is_served_on_the_next_handshake_and_a_broken_one_keeps_the_last() {
    let echo = EchoProcess::start();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "kube");
    let api = shop_api(&echo.addr);
    let kc = api.kubeconfig(dir.path());
    let secret = |serial: &str| {
        let (c, k) = pki.leaf(&format!("shop-{serial}"), "shop", &["shop.example"], serial);
        tls_secret(
            "shop",
            "web-tls",
            &std::fs::read(c).unwrap(),
            &std::fs::read(k).unwrap(),
        )
    };
    api.apply(secret("0A"));
    let mut ing = shop_ingress("web", "shop.example", "/");
    ing["spec"]["tls"] = serde_json::json!([{"hosts": ["shop.example"], "secretName": "web-tls"}]);
    api.apply(ing);
    let tls = free_addr();
    let gw = controller(&tls_base(&pki, tls), &kc, "fairgate-0").await;
    assert_eq!(
        served_serial(tls, Some("shop.example")),
        "0A",
        "{}",
        gw.logs()
    );
    assert_eq!(served_serial(tls, Some("default.example")), "01");

    // Handshakes go on while the Secret is replaced with kubectl.
    let handshakes = Handshakes::start(tls, "shop.example", &["0A", "0B"]);
    let renewed = Instant::now();
    kubectl(&kc, &["replace", "-f", "-"], Some(&secret("0B"))).expect("kubectl replace");
    let served = eventually(Duration::from_secs(10), || async {
        served_serial(tls, Some("shop.example")) == "0B"
    })
    .await;
    println!("renewed Secret served after {:?}", renewed.elapsed());
    assert!(served, "{}", gw.logs());

    // A broken Secret: the last good certificate stays, and the Ingress says so.
    let mut garbage = secret("0C");
    garbage["data"]["tls.crt"] = "bm90IGEgY2VydGlmaWNhdGU=".into();
    kubectl(&kc, &["replace", "-f", "-"], Some(&garbage)).expect("kubectl replace");
    let warned = api.wait_for(Duration::from_secs(10), |api| {
        api.list("v1/events", "shop").iter().any(|e| {
            e["reason"] == "InvalidSecret"
                && e["type"] == "Warning"
                && e["involvedObject"]["name"] == "web"
        })
    });
    assert!(warned, "no Event: {:?}", api.list("v1/events", "shop"));
    let (done, failed) = handshakes.stop();
    assert_eq!(served_serial(tls, Some("shop.example")), "0B");
    assert_eq!(served_serial(tls, Some("default.example")), "01");
    println!("{done} handshakes during the renewal, {failed} failed");
    assert!(done > 0);
    assert_eq!(failed, 0);
}

#[tokio::test]
async fn a_lost_api_server_leaves_the_last_policy_and_its_return_is_relisted() {
    let echo = EchoProcess::start();
    let mut api = shop_api(&echo.addr);
    let dir = tempfile::tempdir().unwrap();
    let kc = api.kubeconfig(dir.path());
    api.apply(shop_ingress("one", "one.example", "/"));
    let gw = controller(&base_policy(""), &kc, "fairgate-0").await;
    let ingress_lists = api.list_requests("networking.k8s.io/v1/ingresses");

    api.stop();
    // Changed while it is away; the watch history is compacted on return.
    api.apply(shop_ingress("two", "two.example", "/"));
    api.delete("networking.k8s.io/v1/ingresses", "shop", "one");
    let stop = Arc::new(AtomicBool::new(false));
    let load = steady_client(&gw, "one.example", stop.clone());
    let away = Instant::now();
    while away.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!load.is_finished());
    }
    stop.store(true, Ordering::Relaxed);
    let (sent, failed) = load.await.unwrap();
    println!("API server away 10 s: {sent} requests, {failed} failed");
    assert_eq!(failed, 0, "{}", gw.logs());
    assert!(sent > 100);

    api.restart(true);
    let back = Instant::now();
    let served = eventually(Duration::from_secs(20), || async {
        client()
            .get(gw.url("/"))
            .header("host", "two.example")
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;
    println!(
        "changes made while away served {:?} after the API server returned",
        back.elapsed()
    );
    assert!(served, "{}", gw.logs());
    let gone = client()
        .get(gw.url("/"))
        .header("host", "one.example")
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404);
    assert!(
        api.list_requests("networking.k8s.io/v1/ingresses") > ingress_lists,
        "no relist"
    );
}

/// Issue 39, item 7: a Service with no ready endpoint answers `503` on its
/// Ingress's paths, as ingress-nginx does (fairgate answered `404`, and a
/// host-less Ingress of another namespace could take the request), and is
/// forwarded to once an endpoint turns ready.
#[tokio::test]
async fn item_7_a_service_without_a_ready_endpoint_answers_503_until_one_is_ready() {
    let echo = EchoProcess::start();
    let api = shop_api(&echo.addr);
    let dir = tempfile::tempdir().unwrap();
    let kc = api.kubeconfig(dir.path());
    api.apply(service("shop", "idle"));
    let starting = Endpoint {
        addr: &echo.addr,
        ready: false,
        terminating: false,
    };
    api.apply(slice("shop", "idle-1", "idle", &[starting]));
    api.apply(ingress(
        "shop",
        "idle",
        Some("fairgate"),
        "idle.example",
        "/",
        "idle",
    ));
    // A catch-all of another namespace, which must not answer for idle.example.
    api.apply(service("other", "web"));
    api.apply(slice("other", "web-1", "web", &[ready(&echo.addr)]));
    let mut catch_all = ingress("other", "all", Some("fairgate"), "x", "/", "web");
    catch_all["spec"]["rules"][0]
        .as_object_mut()
        .unwrap()
        .remove("host");
    api.apply(catch_all);
    let gw = controller(&base_policy(""), &kc, "fairgate-0").await;
    assert_eq!(
        host_status(&gw, "any.example", "/").await,
        200,
        "{}",
        gw.logs()
    );
    let before = echo.requests();
    for path in ["/", "/cart", "/deep/path?q=1"] {
        assert_eq!(host_status(&gw, "idle.example", path).await, 503, "{path}");
    }
    assert_eq!(
        echo.requests(),
        before,
        "nothing is forwarded for idle.example"
    );
    let warned = api.wait_for(Duration::from_secs(10), |api| {
        api.list("v1/events", "shop").iter().any(|e| {
            e["involvedObject"]["name"] == "idle"
                && e["type"] == "Warning"
                && e["reason"] == "Unavailable"
        })
    });
    assert!(warned, "{:?}", api.list("v1/events", "shop"));

    api.apply(slice("shop", "idle-1", "idle", &[ready(&echo.addr)]));
    let served = eventually(Duration::from_secs(10), || async {
        host_status(&gw, "idle.example", "/cart").await == 200
    })
    .await;
    assert!(served, "not served once ready:\n{}", gw.logs());
}

/// Issue 41, item 4: the Secrets of twelve TLS Ingresses are read through
/// one metadata-only watch and one GET each (one watch per Secret cost
/// two file descriptors each and ran a 10,000-Ingress gateway out of
/// them); a Secret no Ingress names is never read, nor is its change a
/// build; a renewed one is read again.
#[tokio::test]
async fn named_secrets_come_through_one_watch_and_an_unnamed_one_is_never_read() {
    let echo = EchoProcess::start();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "kube");
    let api = shop_api(&echo.addr);
    let kc = api.kubeconfig(dir.path());
    let host = |i: usize| format!("s{i}.example");
    for i in 0..12 {
        let serial = format!("{:02X}", 0x10 + i);
        api.apply(secret_for(
            &pki,
            "shop",
            &format!("s{i}-tls"),
            &[&host(i)],
            &serial,
        ));
        let mut ing = shop_ingress(&format!("s{i}"), &host(i), "/");
        ing["spec"]["tls"] =
            serde_json::json!([{"hosts": [host(i)], "secretName": format!("s{i}-tls")}]);
        api.apply(ing);
    }
    let unnamed = |serial: &str| secret_for(&pki, "shop", "unnamed", &["unnamed.example"], serial);
    api.apply(unnamed("0E"));
    let tls = free_addr();
    let gw = controller(&tls_base(&pki, tls), &kc, "fairgate-0").await;
    for i in 0..12 {
        let serial = format!("{:02X}", 0x10 + i);
        assert_eq!(served_serial(tls, Some(&host(i))), serial, "{}", gw.logs());
    }
    assert_eq!(api.watch_requests("v1/secrets"), 1);
    assert_eq!(api.list_requests("v1/secrets"), 1);
    assert_eq!(
        api.get_requests("v1/secrets"),
        12,
        "one GET per named Secret"
    );
    let builds = |m: &str| metric(m, r#"fairgate_kubernetes_policy_builds_total{result="ok"}"#);
    let before = builds(&gw.metrics().await);

    // An unnamed Secret changes: not read, no build. Then a named one is
    // renewed: read once more, built, served.
    api.apply(unnamed("0F"));
    api.apply(secret_for(&pki, "shop", "s3-tls", &[&host(3)], "3F"));
    let renewed = eventually(Duration::from_secs(10), || async {
        served_serial(tls, Some(&host(3))) == "3F"
    })
    .await;
    assert!(renewed, "{}", gw.logs());
    assert_eq!(api.get_requests("v1/secrets"), 13);
    let built = eventually(Duration::from_secs(2), || async {
        builds(&gw.metrics().await) >= before.map(|b| b + 1.0)
    })
    .await;
    let m = gw.metrics().await;
    assert!(built, "{m}");
    assert_eq!(
        builds(&m),
        before.map(|b| b + 1.0),
        "one build, for the renewal"
    );
    let held = metric(&m, r#"fairgate_kubernetes_objects{kind="Secret"}"#);
    assert_eq!(held, Some(12.0), "only the named Secrets are held");
    assert_eq!(api.watch_requests("v1/secrets"), 1);
}
