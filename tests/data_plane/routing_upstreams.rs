//! Which upstream a routed request reaches, against real echo processes:
//! weighted splits and canaries (by tenant, plan, share, header, cookie),
//! retries and passive health around failed targets (`retry_on` and its old
//! name `on`), targets named by DNS followed as the name moves, and pools
//! balanced round robin (skipping a target the health check found dead), by
//! least requests or by a hash.

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::*;

/// Which of `pools` served one request (the one whose count went up).
/// Sends `request` and reads its body, so the connection goes back to the
/// pool: the next request on it is read only once this one's context (and
/// its count of requests in flight) is gone. Returns the status.
async fn read_whole(request: reqwest::RequestBuilder) -> u16 {
    let r = request.send().await.unwrap();
    let status = r.status().as_u16();
    r.bytes().await.unwrap();
    status
}

async fn served_by(pools: &[&EchoProcess], send: impl std::future::Future<Output = u16>) -> usize {
    let before: Vec<u64> = pools.iter().map(|p| p.requests()).collect();
    assert_eq!(send.await, 200);
    let after: Vec<u64> = pools.iter().map(|p| p.requests()).collect();
    let moved: Vec<usize> = (0..pools.len())
        .filter(|i| after[*i] != before[*i])
        .collect();
    assert_eq!(moved.len(), 1, "{before:?} -> {after:?}");
    moved[0]
}

async fn split_gateway(v1: &EchoProcess, v2: &EchoProcess) -> Gateway {
    Policy::new()
        .auth("claims: {tenant: tid, user: sub, plan: plan}")
        .sections(&format!(
            r#"
upstreams: {{v1: {{targets: ["{}"]}}, v2: {{targets: ["{}"]}}}}
routes:
  - {{name: weighted, match: {{path_prefix: /w}}, upstreams: [{{name: v1, weight: 95}}, {{name: v2, weight: 5}}], auth: none, exempt: true}}
  - name: canary
    match: {{path_prefix: /c}}
    upstream: v1
    limits: []
    canary: {{upstream: v2, tenants: [acme], plans: [beta], percent: 30, header: X-Canary, cookie: canary}}
"#,
            v1.addr, v2.addr
        ))
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_weighted_split_holds_its_shares_over_ten_thousand_requests() {
    let (v1, v2) = (EchoProcess::start(), EchoProcess::start());
    let gw = split_gateway(&v1, &v2).await;
    let c = client();
    let url = gw.url("/w");
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (c, url) = (c.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..1250 {
                assert_eq!(c.get(&url).send().await.unwrap().status(), 200);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (a, b) = (v1.requests(), v2.requests());
    assert_eq!(a + b, 10_000);
    let share = b as f64 / 100.0;
    println!("v1 {a}, v2 {b}: {share:.2}% to the 5% side");
    assert!((2.0..=8.0).contains(&share), "{share}% (want 5 ± 3)");
}

#[tokio::test(flavor = "multi_thread")]
async fn canaries_pick_by_tenant_plan_share_header_and_cookie() {
    let (v1, v2) = (EchoProcess::start(), EchoProcess::start());
    let gw = split_gateway(&v1, &v2).await;
    let pools = [&v1, &v2];
    let c = client();
    let call = |tenant: &str, plan: &str, extra: Option<(&'static str, &'static str)>| {
        let token = hs256_token(
            TEST_SECRET,
            serde_json::json!({"tid": tenant, "sub": "u", "plan": plan}),
        );
        let mut req = c.get(gw.url("/c")).bearer_auth(token);
        if let Some((k, v)) = extra {
            req = req.header(k, v);
        }
        async move { req.send().await.unwrap().status().as_u16() }
    };
    // Listed tenant and plan: always the canary.
    for _ in 0..5 {
        assert_eq!(served_by(&pools, call("acme", "free", None)).await, 1);
        assert_eq!(served_by(&pools, call("initech", "beta", None)).await, 1);
    }
    // A share of tenants, each sticky: 100 requests of one tenant, one side.
    let mut sides = [0, 0];
    for t in 0..40 {
        let tenant = format!("tenant-{t}");
        let first = served_by(&pools, call(&tenant, "free", None)).await;
        sides[first] += 1;
        let rounds = if t == 0 { 99 } else { 4 };
        for _ in 0..rounds {
            assert_eq!(
                served_by(&pools, call(&tenant, "free", None)).await,
                first,
                "{tenant}"
            );
        }
    }
    println!("of 40 tenants, {} on the canary (30%)", sides[1]);
    assert!((6..=18).contains(&sides[1]), "{sides:?}");
    // The header and cookie decide over everything else.
    assert_eq!(
        served_by(&pools, call("acme", "beta", Some(("x-canary", "never")))).await,
        0
    );
    assert_eq!(
        served_by(
            &pools,
            call("tenant-x", "free", Some(("x-canary", "always")))
        )
        .await,
        1
    );
    assert_eq!(
        served_by(
            &pools,
            call("acme", "free", Some(("cookie", "a=1; canary=never")))
        )
        .await,
        0
    );
    assert_eq!(
        served_by(
            &pools,
            call("tenant-x", "free", Some(("cookie", "canary=always")))
        )
        .await,
        1
    );
}

/// A listener that accepts and at once closes every connection.
async fn resetter() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            drop(s);
        }
    });
    addr
}

/// Four upstreams, each with a failing target before `echo`: `dead` (no
/// listener; ejected after one failure), `reset` (closes every
/// connection), `busy` (503 to everything), `failing` (503s; ejected after
/// two). Routes /e, /f, /b retry; /n and /j do not.
fn failing_targets_config(
    echo: SocketAddr,
    dead: SocketAddr,
    reset: SocketAddr,
    busy: SocketAddr,
    failing: SocketAddr,
) -> Policy {
    Policy::new().sections(&format!(
        r#"
upstreams:
  ejecting: {{targets: ["{dead}", "{echo}"], passive_health: {{failures: 1, cooldown: 1h}}}}
  flaky: {{targets: ["{reset}", "{echo}"]}}
  busy: {{targets: ["{busy}", "{echo}"]}}
  ejects: {{targets: ["{failing}", "{echo}"], passive_health: {{failures: 2, cooldown: 1h}}}}
routes:
  - {{name: ejecting, match: {{path_prefix: /e}}, upstream: ejecting, auth: none, exempt: true, retries: {{attempts: 2}}}}
  - {{name: flaky, match: {{path_prefix: /f}}, upstream: flaky, auth: none, exempt: true, retries: {{attempts: 3, retry_on: [reset]}}}}
  - {{name: busy, match: {{path_prefix: /b}}, upstream: busy, auth: none, exempt: true, retries: {{attempts: 2, retry_on: [503]}}}}
  - {{name: busy_once, match: {{path_prefix: /n}}, upstream: busy, auth: none, exempt: true}}
  - {{name: ejects, match: {{path_prefix: /j}}, upstream: ejects, auth: none, exempt: true}}
"#
    ))
}

/// The status of a GET (or a POST with a body) of `path`, sent with `c`.
async fn get_or_post_status(c: &reqwest::Client, gw: &Gateway, path: &str, post: bool) -> u16 {
    let req = match post {
        true => c.post(gw.url(path)).body("x"),
        false => c.get(gw.url(path)),
    };
    req.send().await.unwrap().status().as_u16()
}

/// The dead target cost one retry and was ejected, unless the TCP health
/// check (its first runs at start) took it out before any request met it;
/// every GET that met the resetter was retried once (round robin counts
/// the retry's pick too, so most met it first); no POST was.
fn assert_dead_and_reset_targets_cost_one_retry(metrics: &str) {
    let retried = metric(
        metrics,
        "fairgate_upstream_retries_total{route=\"ejecting\"}",
    );
    let ejected = metric(
        metrics,
        "fairgate_upstream_ejections_total{upstream=\"ejecting\"}",
    );
    assert!(matches!(retried, None | Some(1.0)), "{retried:?}");
    assert_eq!(retried, ejected);
    let flaky = metric(metrics, "fairgate_upstream_retries_total{route=\"flaky\"}").unwrap();
    assert!((10.0..=20.0).contains(&flaky), "{flaky}");
}

#[tokio::test(flavor = "multi_thread")]
async fn retries_and_passive_health_route_around_failed_targets() {
    let echo = EchoProcess::start();
    let dead = free_addr(); // nothing listens
    let reset = resetter().await;
    let (busy, busy_count) = unavailable().await;
    let (failing, failing_count) = unavailable().await;
    let gw = failing_targets_config(echo.addr, dead, reset, busy, failing)
        .start()
        .await;
    let c = client();
    let status = |path: &'static str, post: bool| get_or_post_status(&c, &gw, path, post);
    // Every 200 below is one request the echo process answered, no more:
    // a retried attempt that failed never reached it twice.
    let answered = std::cell::Cell::new(0);
    let answered_since = || {
        let now = echo.requests();
        now - answered.replace(now)
    };
    // A connect failure is retried on the next target; the dead one is then out.
    for _ in 0..20 {
        assert_eq!(status("/e", false).await, 200);
    }
    assert_eq!(answered_since(), 20);
    // A reset before any answer is retried too.
    for _ in 0..20 {
        assert_eq!(status("/f", false).await, 200);
    }
    assert_eq!(answered_since(), 20);
    // So is a 503, before any byte of it reaches the client; without
    // retries, the target's 503 is the answer half the time.
    for _ in 0..10 {
        assert_eq!(status("/b", false).await, 200);
    }
    assert_eq!(answered_since(), 10);
    let before = busy_count.load(std::sync::atomic::Ordering::SeqCst);
    let once: Vec<u16> = futures_util::future::join_all((0..10).map(|_| status("/n", false))).await;
    assert_eq!(once.iter().filter(|s| **s == 503).count(), 5, "{once:?}");
    assert_eq!(answered_since(), 5);
    // Counted at the upstream: the 503 target answered each retried attempt
    // of /b and five of /n.
    let busy_retries = metric(
        &gw.metrics().await,
        "fairgate_upstream_retries_total{route=\"busy\"}",
    );
    assert_eq!(
        busy_count.load(std::sync::atomic::Ordering::SeqCst) - before,
        5
    );
    assert_eq!(Some(before as f64), busy_retries);
    // Two 503s in a row eject the target: it never sees a third request.
    let ejected: Vec<u16> = {
        let mut out = Vec::new();
        for _ in 0..20 {
            out.push(status("/j", false).await);
        }
        out
    };
    assert_eq!(
        ejected.iter().filter(|s| **s == 503).count(),
        2,
        "{ejected:?}"
    );
    assert_eq!(failing_count.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(answered_since(), 18);
    // A POST is never retried.
    let posts: Vec<u16> = futures_util::future::join_all((0..10).map(|_| status("/f", true))).await;
    assert!(posts.contains(&502), "{posts:?}");
    let posted = posts.iter().filter(|s| **s == 200).count() as u64;
    assert_eq!(answered_since(), posted);
    assert_dead_and_reset_targets_cost_one_retry(&gw.metrics().await);
}

/// `retry_on` is the key (YAML 1.1 tools turn a key `on:` into `true:`);
/// `on` still works as its old name, and `check` warns about it.
#[tokio::test(flavor = "multi_thread")]
async fn finding_16_retry_on_and_its_old_name_on_both_retry_a_503() {
    let echo = EchoProcess::start();
    let (busy, busy_count) = unavailable().await;
    // Written whole, not through `Policy`: `check`'s warning below names
    // its line and column in this text.
    let yaml = format!(
        r#"
server: {{listen: ["$LISTEN"]}}
admin: {{listen: "$ADMIN"}}
upstreams:
  busy: {{targets: ["{busy}", "{echo}"]}}
routes:
  - {{name: new, match: {{path_prefix: /new}}, upstream: busy, auth: none, exempt: true, retries: {{attempts: 2, retry_on: [503]}}}}
  - {{name: old, match: {{path_prefix: /old}}, upstream: busy, auth: none, exempt: true, retries: {{attempts: 2, on: [503]}}}}
acknowledge: [store.process_local]
"#,
        echo = echo.addr
    );
    let gw = Gateway::start(&yaml).await;
    // Round robin over the two targets: at least every other request meets
    // the 503 target first, and is retried on the echo, which answers all.
    for path in ["/new", "/old"] {
        let mut statuses = Vec::new();
        for _ in 0..10 {
            statuses.push(gw.status(path).await);
        }
        assert_eq!(statuses, [200; 10], "{path}");
    }
    assert_eq!(echo.requests(), 20);
    let metrics = gw.metrics().await;
    let retried = |route: &str| {
        metric(
            &metrics,
            &format!("fairgate_upstream_retries_total{{route=\"{route}\"}}"),
        )
        .unwrap_or(0.0)
    };
    let (new, old) = (retried("new"), retried("old"));
    assert!(new >= 5.0 && old >= 5.0, "{new} {old}");
    let met_503 = busy_count.load(std::sync::atomic::Ordering::SeqCst) as f64;
    assert_eq!(new + old, met_503);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fairgate"))
        .args(["check", "-c"])
        .arg(gw.config_path())
        .output()
        .unwrap();
    let shown = gw.config_path().display().to_string();
    let stdout = String::from_utf8_lossy(&out.stdout).replace(&shown, "fairgate.yaml");
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert_eq!(
        stdout.lines().take(2).collect::<Vec<_>>(),
        [
            "fairgate.yaml:8:110: routes.retries_on_deprecated: routes[1].retries.on: YAML 1.1 tools (Helm's toYaml, PyYAML, go-yaml v2) read the key on: as true:, which fairgate refuses; name it retry_on: (warning)",
            "ok",
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn targets_named_by_dns_are_followed_as_the_name_moves() {
    use std::net::Ipv4Addr;
    // Two echo upstreams on one port, at 127.0.0.2 and 127.0.0.3 (as two pods).
    let a = Arc::new(fairgate::echo::Stats::default());
    let b = Arc::new(fairgate::echo::Stats::default());
    let first = fairgate::echo::serve("127.0.0.2:0".parse().unwrap(), a.clone())
        .await
        .unwrap();
    let port = first.port();
    fairgate::echo::serve(format!("127.0.0.3:{port}").parse().unwrap(), b.clone())
        .await
        .unwrap();
    let (two, three) = (Ipv4Addr::new(127, 0, 0, 2), Ipv4Addr::new(127, 0, 0, 3));
    let dns = Dns::start(&[two]).await;
    let gw = Policy::new()
        .sections(&format!(
            r#"
upstreams:
  svc: {{targets: ["api.svc.test:{port}"], resolver: "{}", resolve_every: 1s}}
routes:
  - {{name: all, match: {{path_prefix: /}}, upstream: svc, auth: none, exempt: true}}
"#,
            dns.addr
        ))
        .start()
        .await;
    let count = |s: &fairgate::echo::Stats| s.requests.load(std::sync::atomic::Ordering::SeqCst);
    let c = client();
    for _ in 0..5 {
        assert_eq!(c.get(gw.url("/x")).send().await.unwrap().status(), 200);
    }
    assert_eq!((count(&a), count(&b)), (5, 0));

    // The name moves: new requests follow within the TTL and the interval.
    dns.set(&[three]);
    let moved = eventually(Duration::from_secs(5), || async {
        let before = count(&b);
        c.get(gw.url("/x"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
            && count(&b) > before
    })
    .await;
    assert!(moved, "{}", gw.logs());
    assert!(gw.logs().contains("upstream.resolved"));

    // A headless Service: both pods, balanced per request.
    dns.set(&[two, three]);
    let both = eventually(Duration::from_secs(5), || async {
        let (x, y) = (count(&a), count(&b));
        for _ in 0..4 {
            let _ = c.get(gw.url("/x")).send().await;
        }
        count(&a) > x && count(&b) > y
    })
    .await;
    assert!(both);
}

#[tokio::test(flavor = "multi_thread")]
async fn pools_balance_by_least_requests_or_by_a_hash() {
    let (a, b) = (EchoProcess::start(), EchoProcess::start());
    let gw = Policy::new()
        .hs256()
        .sections(&format!(
            r#"
upstreams:
  least: {{targets: ["{a}", "{b}"], balance: least_requests}}
  by_user: {{targets: ["{a}", "{b}"], balance: {{hash_header: X-User}}}}
  by_tenant: {{targets: ["{a}", "{b}"], balance: hash_tenant}}
routes:
  - {{name: least, match: {{path_prefix: /l}}, upstream: least, auth: none, exempt: true}}
  - {{name: user, match: {{path_prefix: /u}}, upstream: by_user, auth: none, exempt: true}}
  - {{name: tenant, match: {{path_prefix: /t}}, upstream: by_tenant, limits: []}}
"#,
            a = a.addr,
            b = b.addr
        ))
        .start()
        .await;
    let pools = [&a, &b];
    let c = client();
    // One slow request holds a target; the quick ones all go to the other.
    let slow = tokio::spawn(c.get(gw.url("/l?sleep_ms=1500")).send());
    let held = eventually(Duration::from_secs(2), || async {
        a.requests() + b.requests() == 1
    })
    .await;
    assert!(held);
    let busy = if a.requests() == 1 { 0 } else { 1 };
    for _ in 0..10 {
        let got = served_by(&pools, read_whole(c.get(gw.url("/l")))).await;
        assert_eq!(got, 1 - busy);
    }
    assert_eq!(slow.await.unwrap().unwrap().status(), 200);

    // The same user (or tenant) always reaches the same target; both are used.
    let mut used = [0, 0];
    for user in 0..16 {
        let name = format!("user-{user}");
        let send = || async {
            c.get(gw.url("/u"))
                .header("x-user", &name)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        };
        let first = served_by(&pools, send()).await;
        used[first] += 1;
        for _ in 0..3 {
            assert_eq!(served_by(&pools, send()).await, first, "{name}");
        }
    }
    assert!(used[0] > 0 && used[1] > 0, "{used:?}");
    for tenant in ["acme", "globex", "initech"] {
        let token = token(tenant);
        let send = || async {
            c.get(gw.url("/t"))
                .bearer_auth(&token)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        };
        let first = served_by(&pools, send()).await;
        for _ in 0..3 {
            assert_eq!(served_by(&pools, send()).await, first, "{tenant}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn upstream_pools_round_robin_and_skip_unhealthy_targets() {
    let (a, b) = (Upstream::start().await, Upstream::start().await);
    let dead = free_addr();
    let gw = Policy::new()
        .server("shutdown_grace: 1s")
        .sections(&format!(
            r#"
upstreams:
  pair: {{targets: ["{}", "{}"]}}
  flaky: {{targets: ["{}", "{dead}"], health_check_interval: 200ms, connect_timeout: 200ms}}
routes:
  - {{name: pair, match: {{path_prefix: /pair}}, upstream: pair, auth: none}}
  - {{name: flaky, match: {{path_prefix: /flaky}}, upstream: flaky, auth: none}}
"#,
            a.addr, b.addr, a.addr
        ))
        .start()
        .await;
    let c = client();
    for _ in 0..10 {
        assert_eq!(c.get(gw.url("/pair")).send().await.unwrap().status(), 200);
    }
    assert_eq!(
        (a.requests(), b.requests()),
        (5, 5),
        "round robin over two targets"
    );

    // Once the health check has seen the dead target, every request goes to the live one.
    let healthy = eventually(Duration::from_secs(5), || async {
        let before = a.requests();
        let mut all_ok = true;
        for _ in 0..4 {
            all_ok &= c.get(gw.url("/flaky")).send().await.unwrap().status() == 200;
        }
        all_ok && a.requests() == before + 4
    })
    .await;
    assert!(healthy, "the dead target was never skipped");
}

/// `upstream-hash-by`'s keys: the client's address (as the trusted proxy
/// says it), the path and query, a cookie. The same key always reaches the
/// same target, and sixteen keys reach both.
#[tokio::test(flavor = "multi_thread")]
async fn pools_hash_by_client_address_uri_or_cookie() {
    let (a, b) = (EchoProcess::start(), EchoProcess::start());
    let gw = Policy::new()
        .server("trusted_proxies: [127.0.0.1/32]")
        .sections(&format!(
            r#"
upstreams:
  by_ip: {{targets: ["{a}", "{b}"], balance: hash_client_ip}}
  by_uri: {{targets: ["{a}", "{b}"], balance: hash_uri}}
  by_cookie: {{targets: ["{a}", "{b}"], balance: {{hash_cookie: sid}}}}
routes:
  - {{name: ip, match: {{path_prefix: /ip}}, upstream: by_ip, auth: none, exempt: true}}
  - {{name: uri, match: {{path_prefix: /uri}}, upstream: by_uri, auth: none, exempt: true}}
  - {{name: cookie, match: {{path_prefix: /c}}, upstream: by_cookie, auth: none, exempt: true}}
"#,
            a = a.addr,
            b = b.addr
        ))
        .start()
        .await;
    let pools = [&a, &b];
    let c = client();
    for (kind, path, header) in [
        ("client address", "/ip".to_string(), "x-forwarded-for"),
        ("uri", String::new(), ""),
        ("cookie", "/c".to_string(), "cookie"),
    ] {
        let mut used = [0, 0];
        for key in 0..16 {
            let (url, name, value) = match kind {
                "client address" => (path.clone(), header, format!("203.0.113.{key}")),
                "uri" => (format!("/uri/{key}?q={key}"), "x-unused", String::new()),
                _ => (path.clone(), header, format!("other=1; sid=s{key}")),
            };
            let send = || async {
                let r = c.get(gw.url(&url)).header(name, &value).send().await;
                r.unwrap().status().as_u16()
            };
            let first = served_by(&pools, send()).await;
            used[first] += 1;
            for _ in 0..3 {
                assert_eq!(served_by(&pools, send()).await, first, "{kind} {key}");
            }
        }
        assert!(used[0] > 0 && used[1] > 0, "{kind}: {used:?}");
    }
}

/// Counts the TCP connections a listener on a free loopback port accepts.
async fn counting_listener() -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicU64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            drop(conn);
        }
    });
    (addr, count)
}

/// `health_check: false` (what the controller writes for a Service's
/// endpoints, whose readiness Kubernetes checks): the targets are never
/// probed, while a checked pool beside it is, every 100 ms.
#[tokio::test(flavor = "multi_thread")]
async fn a_pool_with_health_check_false_is_never_probed() {
    let (checked, checks) = counting_listener().await;
    let (unchecked, probes) = counting_listener().await;
    let _gw = Policy::new()
        .sections(&format!(
            r#"
upstreams:
  checked: {{targets: ["{checked}"], health_check_interval: 100ms}}
  unchecked: {{targets: ["{unchecked}"], health_check_interval: 100ms, health_check: false}}
routes:
  - {{name: a, match: {{path_prefix: /a}}, upstream: checked, auth: none}}
  - {{name: b, match: {{path_prefix: /b}}, upstream: unchecked, auth: none}}
"#
        ))
        .start()
        .await;
    let load = std::sync::atomic::Ordering::Relaxed;
    let checked_thrice =
        eventually(Duration::from_secs(10), || async { checks.load(load) >= 3 }).await;
    assert!(
        checked_thrice,
        "the checked pool was probed {} times",
        checks.load(load)
    );
    assert_eq!(probes.load(load), 0, "the unchecked pool was probed");
}

/// Found by the chaos soak: a retry picked its target like a first attempt
/// (round robin), so under concurrent requests it often went back to the
/// target that had just refused the connection, before any health check
/// took it out, and the client got a 502. It goes to another target now.
#[tokio::test(flavor = "multi_thread")]
async fn a_retry_never_goes_back_to_the_target_that_just_failed() {
    let echo = EchoProcess::start();
    // Healthy at the gateway's first (and, in this test, only) health
    // check, then gone: every connection to it is refused.
    let doomed = EchoProcess::start();
    let gw = Policy::new()
        .sections(&format!(
            r#"
upstreams:
  api: {{targets: ["{}", "{}"], health_check_interval: 1h}}
routes:
  - {{name: api, match: {{path_prefix: /}}, upstream: api, auth: none, exempt: true, retries: {{attempts: 2, retry_on: [connect_failure]}}}}
"#,
            doomed.addr, echo.addr
        ))
        .start()
        .await;
    drop(doomed);
    let clients = (0..8).map(|_| {
        let url = gw.url("/x");
        tokio::spawn(async move {
            let c = client();
            let mut statuses = Vec::new();
            for _ in 0..50 {
                statuses.push(c.get(&url).send().await.unwrap().status().as_u16());
            }
            statuses
        })
    });
    let mut statuses = Vec::new();
    for run in clients.collect::<Vec<_>>() {
        statuses.extend(run.await.unwrap());
    }
    let failed = statuses.iter().filter(|s| **s != 200).count();
    assert_eq!(failed, 0, "{failed} of 400 not 200");
    assert_eq!(echo.requests(), 400);
}
