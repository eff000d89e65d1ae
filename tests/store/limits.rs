//! The token-bucket behaviour suite. Every behaviour runs three times:
//! against the in-process `memory` store, a real `redis-server`, and a real
//! 3-master Redis Cluster, all through the real gateway binary (the store
//! under test is `common::stores`). What the store holds and what it costs
//! (keys, script calls, round trips, the memory store's size) is
//! `limits_store.rs`.

use crate::common;

use std::time::Duration;

use common::stores::*;
use common::*;
// The suite's token, with a user and a plan, over common's.
use common::stores::token;
use futures_util::future::join_all;
use serde_json::Value;

on_every_store!(
    burst_of_sixty_allows_exactly_capacity,
    sequential_sixth_is_the_first_refused,
    refill_lets_exactly_one_more_and_idle_keys_expire,
    costs_spend_exactly_and_oversized_writes_nothing,
    multi_bucket_is_all_or_nothing,
    three_gateways_share_one_budget,
    plans_and_overrides_pick_the_capacity,
    shadow_limits_count_but_never_refuse,
    quota_headers_match_the_spec_byte_for_byte,
    default_limits_apply_to_routes_without_limits,
    a_refusal_at_one_plan_does_not_refuse_a_bigger_plan,
    values_over_256_bytes_are_refused,
);

async fn burst_of_sixty_allows_exactly_capacity(backend: Backend) {
    let env = Env::new(backend).await;
    let gw = env
        .gateway(&tenant_limit("{capacity: 5, rate: 1/10s}"))
        .await;
    let t = token("acme", "u1", None);
    let responses = join_all((0..60).map(|_| get(&gw, "/v1/x", &t))).await;
    let ok = responses.iter().filter(|r| r.status() == 200).count();
    let refused: Vec<_> = responses.iter().filter(|r| r.status() == 429).collect();
    assert_eq!((ok, refused.len()), (5, 55), "{backend:?}");
    for r in refused {
        let retry = header(r, "retry-after");
        assert!(retry == "9" || retry == "10", "Retry-After {retry}");
    }
    assert_eq!(env.upstream.requests(), 5);
}

async fn sequential_sixth_is_the_first_refused(backend: Backend) {
    let env = Env::new(backend).await;
    let gw = env
        .gateway(&tenant_limit("{capacity: 5, rate: 1/10s}"))
        .await;
    let t = token("acme", "u1", None);
    for i in 1..=5 {
        let r = get(&gw, "/v1/x", &t).await;
        assert_eq!(r.status(), 200, "request {i}");
        assert_eq!(header(&r, "x-ratelimit-remaining"), (5 - i).to_string());
    }
    let r = get(&gw, "/v1/x", &t).await;
    assert_eq!(r.status(), 429);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["limit"], "api");
    assert_eq!(body["type"], "urn:fairgate:problem:rate-limited");
    assert_eq!(body["status"], 429);
    let ms = body["retry_after_ms"].as_u64().unwrap();
    assert!((9_000..=10_000).contains(&ms), "{ms}");
    // The body names the limit, never a key or tenant.
    assert!(!body.to_string().contains("tenant:"));
    assert!(!body.to_string().contains("acme"));
    // Another tenant has its own bucket.
    assert_eq!(
        get(&gw, "/v1/x", &token("globex", "u1", None))
            .await
            .status(),
        200
    );
}

async fn refill_lets_exactly_one_more_and_idle_keys_expire(backend: Backend) {
    let env = Env::new(backend).await;
    let gw = env
        .gateway(&tenant_limit("{capacity: 2, rate: 1/2s}"))
        .await;
    let t = token("acme", "u1", None);
    assert_eq!(get(&gw, "/v1/x", &t).await.status(), 200);
    assert_eq!(get(&gw, "/v1/x", &t).await.status(), 200);
    let r = get(&gw, "/v1/x", &t).await;
    assert_eq!(r.status(), 429);
    let body: Value = r.json().await.unwrap();
    let wait = body["retry_after_ms"].as_u64().unwrap();
    // Time must pass for a token to come back; wait just past it, well
    // inside the next token's interval (2 s).
    tokio::time::sleep(Duration::from_millis(wait + 150)).await;
    let burst = join_all((0..5).map(|_| get(&gw, "/v1/x", &t))).await;
    assert_eq!(burst.iter().filter(|r| r.status() == 200).count(), 1);
    if env.is_redis() {
        assert_eq!(env.keys(), vec!["tenant:{acme}:rate:api".to_string()]);
        let gone = eventually(Duration::from_secs(8), || async { env.keys().is_empty() }).await;
        assert!(gone, "the idle bucket's key never expired");
    }
}

async fn costs_spend_exactly_and_oversized_writes_nothing(backend: Backend) {
    let env = Env::new(backend).await;
    let gw = env
        .gateway(
            r#"
limits:
  api: {scope: tenant, default: {capacity: 10, rate: 1/h}}
routes:
  - {name: c4, match: {path: /c4}, upstream: api, limits: [api], cost: 4}
  - {name: c6, match: {path: /c6}, upstream: api, limits: [api], cost: 6}
  - {name: c7, match: {path: /c7}, upstream: api, limits: [api], cost: 7}
  - {name: c11, match: {path: /c11}, upstream: api, limits: [api], cost: 11}
"#,
        )
        .await;
    let t = token("acme", "u1", None);
    let r = get(&gw, "/c4", &t).await;
    assert_eq!(
        (r.status().as_u16(), header(&r, "x-ratelimit-remaining")),
        (200, "6".into())
    );
    let r = get(&gw, "/c7", &t).await;
    assert_eq!(
        (r.status().as_u16(), header(&r, "x-ratelimit-remaining")),
        (429, "6".into())
    );
    let r = get(&gw, "/c6", &t).await;
    assert_eq!(
        (r.status().as_u16(), header(&r, "x-ratelimit-remaining")),
        (200, "0".into())
    );
    let other = token("initech", "u1", None);
    let r = get(&gw, "/c11", &other).await;
    assert_eq!(r.status(), 429);
    assert_eq!(header(&r, "x-ratelimit-remaining"), "10");
    if env.is_redis() {
        assert_eq!(
            env.keys(),
            vec!["tenant:{acme}:rate:api".to_string()],
            "c11 wrote a key"
        );
    }
}

async fn multi_bucket_is_all_or_nothing(backend: Backend) {
    let env = Env::new(backend).await;
    let gw = env
        .gateway(
            r#"
limits:
  api: {scope: tenant, default: {capacity: 10, rate: 1/h}}
  auth: {scope: tenant_user, default: {capacity: 1, rate: 1/h}}
routes:
  - {name: refresh, match: {path: /v1/auth/refresh}, upstream: api, limits: [api, auth]}
  - {name: api, match: {path_prefix: /}, upstream: api, limits: [api]}
"#,
        )
        .await;
    let t = token("acme", "alice", None);
    let r = get(&gw, "/v1/auth/refresh", &t).await;
    assert_eq!(r.status(), 200);
    // The tightest bucket is reported: auth has 0 left.
    assert_eq!(header(&r, "ratelimit"), r#""auth";r=0;t=3600"#);
    for _ in 0..3 {
        let r = get(&gw, "/v1/auth/refresh", &t).await;
        assert_eq!(r.status(), 429);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["limit"], "auth");
    }
    // Refused requests took nothing from `api`: 10 - 1 (refresh) - 1 (this).
    let r = get(&gw, "/v1/items", &t).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-ratelimit-remaining"), "8");
}

async fn three_gateways_share_one_budget(backend: Backend) {
    let env = Env::new(backend).await;
    let rest = &tenant_limit("{capacity: 20, rate: 1/h}");
    let gws = join_all((0..3).map(|_| env.gateway(rest))).await;
    let t = token("acme", "u1", None);
    let responses = join_all((0..90).map(|i| get(&gws[i % 3], "/v1/x", &t))).await;
    let ok = responses.iter().filter(|r| r.status() == 200).count();
    let refused = responses.iter().filter(|r| r.status() == 429).count();
    match backend {
        // Each process counts alone: this is what `store.process_local` warns of.
        Backend::Memory => assert_eq!((ok, refused), (60, 30)),
        _ => assert_eq!((ok, refused), (20, 70), "{backend:?}"),
    }
}

async fn plans_and_overrides_pick_the_capacity(backend: Backend) {
    let env = Env::new(backend).await;
    let gw = env
        .gateway(
            r#"
limits:
  api:
    scope: tenant
    default: {capacity: 100, rate: 50/s}
    plans:
      free: {capacity: 20, rate: 5/s}
      enterprise: {capacity: 500, rate: 200/s}
tenants:
  acme: {plan: enterprise, limits: {api: {capacity: 1000, rate: 500/s}}}
  hooli: {plan: enterprise}
routes:
  - {name: api, match: {path_prefix: /}, upstream: api, limits: [api]}
"#,
        )
        .await;
    for (tenant, plan, policy) in [
        ("globex", None, r#""api";q=20;w=4"#),
        ("initech", Some("enterprise"), r#""api";q=500;w=3"#),
        ("umbrella", Some("platinum"), r#""api";q=100;w=2"#),
        ("hooli", Some("free"), r#""api";q=500;w=3"#),
        ("acme", Some("free"), r#""api";q=1000;w=2"#),
    ] {
        let r = get(&gw, "/v1/x", &token(tenant, "u", plan)).await;
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "ratelimit-policy"), policy, "{tenant}");
    }
}

async fn shadow_limits_count_but_never_refuse(backend: Backend) {
    let env = Env::new(backend).await;
    let gw = env
        .gateway(
            r#"
limits:
  api: {scope: tenant, default: {capacity: 10, rate: 1/h}}
  trial: {scope: tenant, default: {capacity: 1, rate: 1/h}, shadow: true}
routes:
  - {name: api, match: {path_prefix: /}, upstream: api, limits: [api, trial]}
"#,
        )
        .await;
    let t = token("acme", "u1", None);
    for i in 0..3 {
        let r = get(&gw, "/v1/x", &t).await;
        assert_eq!(r.status(), 200, "request {i}");
        assert_eq!(header(&r, "x-ratelimit-remaining"), (9 - i).to_string());
    }
    let m = gw.metrics().await;
    let count = |d: &str| {
        metric(
            &m,
            &format!(
                r#"fairgate_ratelimit_decisions_total{{decision="{d}",limit="trial",route="api"}}"#
            ),
        )
    };
    assert_eq!(count("allowed"), Some(1.0), "{m}");
    assert_eq!(count("shadow_limited"), Some(2.0), "{m}");
}

async fn quota_headers_match_the_spec_byte_for_byte(backend: Backend) {
    let env = Env::new(backend).await;
    let gw = env
        .gateway(
            r#"
limits:
  api: {scope: tenant, default: {capacity: 100, rate: 100/m}}
routes:
  - {name: bulk, match: {path: /bulk}, upstream: api, limits: [api], cost: 40}
"#,
        )
        .await;
    let r = get(&gw, "/bulk", &token("acme", "u1", None)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "ratelimit-policy"), r#""api";q=100;w=60"#);
    assert_eq!(header(&r, "ratelimit"), r#""api";r=60;t=24"#);
    assert_eq!(header(&r, "x-ratelimit-limit"), "100");
    assert_eq!(header(&r, "x-ratelimit-remaining"), "60");
    assert_eq!(header(&r, "x-ratelimit-reset"), "24");
    // One more: 20 left, full in 48 s; a third is refused with the wait
    // for 40 tokens (20 missing at 0.6 s each = 12 s).
    let r = get(&gw, "/bulk", &token("acme", "u1", None)).await;
    assert_eq!(header(&r, "ratelimit"), r#""api";r=20;t=48"#);
    let r = get(&gw, "/bulk", &token("acme", "u1", None)).await;
    assert_eq!(r.status(), 429);
    let retry = header(&r, "retry-after");
    assert!(retry == "12" || retry == "11", "{retry}");
    assert_eq!(header(&r, "ratelimit"), r#""api";r=20;t=48"#);
}

async fn default_limits_apply_to_routes_without_limits(backend: Backend) {
    let env = Env::new(backend).await;
    let gw = env
        .gateway(
            r#"
routes:
  - {name: open, match: {path_prefix: /open}, upstream: api, auth: none}
  - {name: api, match: {path_prefix: /}, upstream: api}
"#,
        )
        .await;
    let r = get(&gw, "/v1/x", &token("acme", "u1", None)).await;
    assert_eq!(header(&r, "ratelimit-policy"), r#""default";q=600;w=60"#);
    assert_eq!(header(&r, "ratelimit"), r#""default";r=599;t=1"#);
    let r = client().get(gw.url("/open")).send().await.unwrap();
    assert_eq!(header(&r, "ratelimit-policy"), r#""default";q=120;w=60"#);
    if env.is_redis() {
        assert_eq!(
            env.keys(),
            vec![
                "ip:{127.0.0.1}:rate:default".to_string(),
                "tenant:{acme}:rate:default".to_string()
            ]
        );
    }
}

/// One tenant's bucket is sized by each token's plan; a refusal cached for
/// the small plan must not refuse a token of the big plan.
async fn a_refusal_at_one_plan_does_not_refuse_a_bigger_plan(backend: Backend) {
    let env = Env::new(backend).await;
    let gw = env
        .gateway(
            r#"
limits:
  api:
    scope: tenant
    default: {capacity: 2, rate: 1/h}
    plans:
      enterprise: {capacity: 100, rate: 1/h}
routes:
  - {name: api, match: {path_prefix: /}, upstream: api, limits: [api]}
"#,
        )
        .await;
    let free = token("acme", "u1", None);
    let enterprise = token("acme", "u2", Some("enterprise"));
    for _ in 0..2 {
        assert_eq!(get(&gw, "/v1/x", &free).await.status(), 200);
    }
    assert_eq!(get(&gw, "/v1/x", &free).await.status(), 429);
    let r = get(&gw, "/v1/x", &enterprise).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-ratelimit-remaining"), "97");
}

async fn values_over_256_bytes_are_refused(backend: Backend) {
    let env = Env::new(backend).await;
    let gw = env
        .gateway(
            r#"
limits:
  partner: {scope: {header: X-Partner}, default: {capacity: 100, rate: 1/h}}
routes:
  - {name: partner, match: {path: /partner}, upstream: api, auth: none, limits: [partner], client_ip_exempt: true}
"#,
        )
        .await;
    let c = client();
    let ok = c
        .get(gw.url("/partner"))
        .header("x-partner", "p".repeat(256))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let long = c
        .get(gw.url("/partner"))
        .header("x-partner", "p".repeat(257))
        .send()
        .await
        .unwrap();
    assert_eq!(long.status(), 400);
    if env.is_redis() {
        assert_eq!(env.keys().len(), 1, "the refused value wrote no key");
    }
}
