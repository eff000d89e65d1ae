//! What the token-bucket store holds and what it costs, through the real
//! gateway binary: the keys and script calls on a real `redis-server` and a
//! real 3-master Redis Cluster (a flushed script cache survived, exempt
//! routes never touching it, exactly the spec's key shapes, one round trip
//! per decision), a flood costing one call per gateway per refill on every
//! store, and 100,000 tenants in the memory store under 128 MiB.

use crate::common;

use common::stores::*;
use common::*;
// The suite's token, with a user and a plan, over common's.
use common::stores::token;
use futures_util::future::join_all;

on_redis_stores!(
    script_flush_is_survived,
    exempt_routes_never_touch_the_store,
    keys_have_exactly_the_spec_shapes,
    one_round_trip_per_decision,
);

on_every_store!(a_flood_costs_redis_one_call_per_gateway_per_refill);

async fn script_flush_is_survived(backend: Backend) {
    let env = Env::new(backend).await;
    let gw = env
        .gateway(&tenant_limit("{capacity: 10, rate: 1/h}"))
        .await;
    let t = token("acme", "u1", None);
    for expect in ["9", "8"] {
        let r = get(&gw, "/v1/x", &t).await;
        assert_eq!(header(&r, "x-ratelimit-remaining"), expect);
    }
    env.script_flush();
    for expect in ["7", "6"] {
        let r = get(&gw, "/v1/x", &t).await;
        assert_eq!(r.status(), 200);
        assert_eq!(
            header(&r, "x-ratelimit-remaining"),
            expect,
            "decided by the store"
        );
    }
    let m = gw.metrics().await;
    assert_eq!(
        metric_sum(&m, "fairgate_ratelimit_fallback_total"),
        0.0,
        "{m}"
    );
}

async fn exempt_routes_never_touch_the_store(backend: Backend) {
    let env = Env::new(backend).await;
    let gw = env
        .gateway(
            r#"
limits:
  api: {scope: tenant, default: {capacity: 1, rate: 1/h}}
routes:
  - {name: health, match: {path: /healthz}, upstream: api, auth: none, exempt: true}
  - {name: api, match: {path_prefix: /}, upstream: api, limits: [api]}
"#,
        )
        .await;
    let before = env.script_calls();
    let c = client();
    for chunk in 0..10 {
        let batch = join_all((0..100).map(|_| c.get(gw.url("/healthz")).send())).await;
        for r in batch {
            assert_eq!(r.unwrap().status(), 200, "chunk {chunk}");
        }
    }
    assert_eq!(env.script_calls(), before, "probes reached the store");
    assert!(env.keys().is_empty());
    // Counted in the logging phase, after the last byte went out.
    let series = r#"fairgate_requests_total{route="health",status_class="2xx"}"#;
    let counted = eventually(std::time::Duration::from_secs(2), || async {
        metric(&gw.metrics().await, series) == Some(1000.0)
    })
    .await;
    assert!(counted, "{:?}", metric(&gw.metrics().await, series));
}

async fn keys_have_exactly_the_spec_shapes(backend: Backend) {
    let env = Env::new(backend).await;
    let gw = env
        .gateway(
            r#"
limits:
  api: {scope: tenant, default: {capacity: 100, rate: 1/h}}
  auth: {scope: tenant_user, default: {capacity: 100, rate: 1/h}}
  tok: {scope: tenant_token, default: {capacity: 100, rate: 1/h}}
  hooks: {scope: {path: provider}, default: {capacity: 100, rate: 1/h}}
  partner: {scope: {header: X-Partner}, default: {capacity: 100, rate: 1/h}}
  anon: {scope: client_ip, default: {capacity: 100, rate: 1/h}}
  all: {scope: global, default: {capacity: 100, rate: 1/h}}
routes:
  - {name: hooks, match: {path: "/webhooks/{provider}"}, upstream: api, auth: none, limits: [hooks], client_ip_exempt: true}
  - {name: tenant_hooks, match: {path: "/t/webhooks/{provider}"}, upstream: api, limits: [hooks]}
  - {name: partner, match: {path: /partner}, upstream: api, auth: none, limits: [partner], client_ip_exempt: true}
  - {name: anon, match: {path: /anon}, upstream: api, auth: none, limits: [anon]}
  - {name: all, match: {path: /all}, upstream: api, auth: none, limits: [all]}
  - {name: user, match: {path: /user}, upstream: api, limits: [api, auth, tok]}
"#,
        )
        .await;
    let c = client();
    let t = token("acme", "auth0|42:rate:api", None);
    assert_eq!(get(&gw, "/user", &t).await.status(), 200);
    assert_eq!(get(&gw, "/t/webhooks/stripe", &t).await.status(), 200);
    for path in ["/webhooks/stripe", "/webhooks/a:b%7B", "/anon", "/all"] {
        assert_eq!(
            c.get(gw.url(path)).send().await.unwrap().status(),
            200,
            "{path}"
        );
    }
    let r = c
        .get(gw.url("/partner"))
        .header("x-partner", "p/1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut expected = vec![
        "tenant:{acme}:rate:api",
        "tenant:{acme}:user:auth0%7C42%3Arate%3Aapi:rate:auth",
        "tenant:{acme}:token:jti-auth0%7C42%3Arate%3Aapi:rate:tok",
        "tenant:{acme}:hooks:{stripe}:rate",
        "hooks:{stripe}:rate",
        "hooks:{a%3Ab%257B}:rate",
        "partner:{p%2F1}:rate",
        "ip:{127.0.0.1}:rate:anon",
        "global:{all}:rate",
    ];
    expected.sort();
    assert_eq!(env.keys(), expected);
    // Every key carries a TTL equal to its time until full: one token at 1/h.
    for key in env.keys() {
        let ttl = env.ports().iter().find_map(|p| {
            redis_cli(*p, &["PTTL", &key])
                .and_then(|v| v.trim().parse::<i64>().ok())
                .filter(|v| *v != -2)
        });
        let ttl = ttl.unwrap_or(-2);
        assert!(
            (3_590_000..=3_600_000).contains(&ttl),
            "{key} has PTTL {ttl}"
        );
    }
}

async fn one_round_trip_per_decision(backend: Backend) {
    let env = Env::new(backend).await;
    let gw = env
        .gateway(
            r#"
limits:
  api: {scope: tenant, default: {capacity: 1000, rate: 1/h}}
  auth: {scope: tenant_user, default: {capacity: 1000, rate: 1/h}}
routes:
  - {name: api, match: {path_prefix: /}, upstream: api, limits: [api, auth]}
"#,
        )
        .await;
    let t = token("acme", "u1", None);
    get(&gw, "/warm", &t).await;
    let before = env.script_calls();
    for _ in 0..50 {
        assert_eq!(get(&gw, "/v1/x", &t).await.status(), 200);
    }
    assert_eq!(
        env.script_calls() - before,
        50,
        "two buckets, one script call each request"
    );
}

/// A tenant flooding at far above its rate, over two gateways: each gateway
/// asks Redis once, learns when the bucket refills, and refuses locally
/// until then. Redis load follows refills, not the flood; counts stay exact.
async fn a_flood_costs_redis_one_call_per_gateway_per_refill(backend: Backend) {
    let env = Env::new(backend).await;
    let rest = &tenant_limit("{capacity: 5, rate: 1/10s}");
    let gws = join_all((0..2).map(|_| env.gateway(rest))).await;
    let before = env.script_calls();
    let t = token("acme", "u1", None);
    // One sequential client per gateway, 250 requests each.
    let flood = join_all(gws.iter().map(|gw| {
        let t = t.clone();
        async move {
            let mut statuses = Vec::new();
            for _ in 0..250 {
                statuses.push(get(gw, "/v1/x", &t).await.status().as_u16());
            }
            statuses
        }
    }))
    .await;
    let all: Vec<u16> = flood.into_iter().flatten().collect();
    // `memory` counts per process: each gateway allows 5.
    let allowed = if env.is_redis() { 5 } else { 10 };
    assert_eq!(all.iter().filter(|s| **s == 200).count(), allowed);
    assert_eq!(all.iter().filter(|s| **s == 429).count(), 500 - allowed);
    if env.is_redis() {
        // 5 allowed + 1 refusal per gateway (the flood lasts well under the
        // 10 s refill interval).
        assert_eq!(env.script_calls() - before, 7);
    }
}

/// 100,000 active tenants (25,000 in CI; `FAIRGATE_FULL=1` sends the
/// 100,000), one non-full bucket each, in the memory store: the gateway
/// forgets none of them, stays under 128 MiB resident, and each tenant past
/// the first 10,000 costs under 640 bytes (so 100,000 fit in 128 MiB).
#[tokio::test(flavor = "multi_thread")]
async fn the_memory_store_holds_100k_tenants_under_128_mib() {
    use futures_util::StreamExt;
    let tenants = requests(25_000, 100_000);
    let env = Env::new(Backend::Memory).await;
    let gw = env
        .gateway(
            r#"
limits:
  api: {scope: {header: X-Tenant}, default: {capacity: 1000, rate: 1/h}}
routes:
  - {name: api, match: {path_prefix: /}, upstream: api, auth: none, limits: [api], client_ip_exempt: true}
"#,
        )
        .await;
    let c = client();
    let url = gw.url("/t");
    let send = |i: usize| c.get(&url).header("x-tenant", format!("tenant-{i}")).send();
    let admit = |range: std::ops::Range<usize>| {
        futures_util::stream::iter(range)
            .map(|i| {
                let r = send(i);
                async move { r.await.unwrap().status() == 200 }
            })
            .buffer_unordered(64)
            .filter(|ok| std::future::ready(*ok))
            .count()
    };
    assert_eq!(admit(0..10_000).await, 10_000);
    let warm = proc_status_kib(gw.pid(), "VmRSS:");
    assert_eq!(admit(10_000..tenants).await, tenants - 10_000);
    for i in [0, tenants / 2, tenants - 1] {
        let r = send(i).await.unwrap();
        assert_eq!(header(&r, "x-ratelimit-remaining"), "998", "tenant-{i}");
    }
    let rss = proc_status_kib(gw.pid(), "VmRSS:");
    let per_tenant = rss.saturating_sub(warm) * 1024 / (tenants as u64 - 10_000);
    println!("{tenants} tenants in the memory store: gateway RSS {warm} KiB at 10,000, {rss} KiB at {tenants}, {per_tenant} bytes a tenant");
    assert!(per_tenant < 640, "{per_tenant} bytes a tenant");
    assert!(rss < 128 * 1024, "gateway RSS {rss} KiB is over 128 MiB");
}
