//! The token-bucket behaviour suite. Every behaviour runs three times:
//! against the in-process `memory` store, a real `redis-server`, and a real
//! 3-master Redis Cluster, all through the real gateway binary; what Redis
//! itself holds (keys, script calls) is checked on the two Redis stores.

mod common;

use std::time::Duration;

use common::*;
use futures_util::future::join_all;
use serde_json::{json, Value};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Backend {
    Memory,
    Redis,
    Cluster,
}

/// The store under test, and how to look inside it.
struct Env {
    backend: Backend,
    redis: Option<Redis>,
    cluster: Option<Cluster>,
    upstream: Upstream,
}

impl Env {
    async fn new(backend: Backend) -> Env {
        Env {
            backend,
            redis: match backend {
                Backend::Redis => Some(Redis::start().await),
                _ => None,
            },
            cluster: match backend {
                Backend::Cluster => Some(Cluster::start().await),
                _ => None,
            },
            upstream: Upstream::start().await,
        }
    }

    /// The store under test's `store:` mapping; `None` for the memory store,
    /// the policy's default.
    fn store(&self) -> Option<String> {
        match self.backend {
            Backend::Memory => None,
            Backend::Redis => Some(format!(
                "{{kind: redis, url: \"{}\", timeout: 2s}}",
                self.redis.as_ref().unwrap().url()
            )),
            Backend::Cluster => Some(format!(
                "{{kind: redis_cluster, nodes: {:?}, timeout: 2s}}",
                self.cluster.as_ref().unwrap().urls()
            )),
        }
    }

    fn ports(&self) -> Vec<u16> {
        match (&self.redis, &self.cluster) {
            (Some(r), _) => vec![r.port],
            (_, Some(c)) => c.nodes.iter().map(|n| n.port).collect(),
            _ => Vec::new(),
        }
    }

    fn is_redis(&self) -> bool {
        self.backend != Backend::Memory
    }

    /// Every key in the store, sorted.
    fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.ports().into_iter().flat_map(scan_keys).collect();
        keys.sort();
        keys
    }

    /// Script executions: EVALSHA and EVAL calls, less EVALSHAs refused
    /// with NOSCRIPT (after which the gateway sends the same call as EVAL).
    fn script_calls(&self) -> u64 {
        self.ports()
            .into_iter()
            .map(|p| {
                command_calls(p, "evalsha") - command_failures(p, "evalsha")
                    + command_calls(p, "eval")
            })
            .sum()
    }

    fn script_flush(&self) {
        for p in self.ports() {
            assert_eq!(redis_cli(p, &["SCRIPT", "FLUSH"]).unwrap().trim(), "OK");
        }
    }

    /// A gateway on the store under test with the shared HS256 key, the
    /// upstream `api`, and the test's own sections, `rest`.
    async fn gateway(&self, rest: &str) -> Gateway {
        let policy = Policy::new().server("shutdown_grace: 1s\nthreads: 1");
        let policy = match self.store() {
            Some(store) => policy.store(&store),
            None => policy,
        };
        policy
            .hs256()
            .sections(&format!(
                "upstreams:\n  api: {{targets: [\"{}\"]}}\n{rest}",
                self.upstream.addr
            ))
            .start()
            .await
    }
}

fn token(tenant: &str, user: &str, plan: Option<&str>) -> String {
    let mut claims = json!({"tid": tenant, "sub": user, "jti": format!("jti-{user}")});
    if let Some(p) = plan {
        claims["plan"] = json!(p);
    }
    hs256_token(TEST_SECRET, claims)
}

fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

macro_rules! on_every_store {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(#[tokio::test(flavor = "multi_thread")]
            async fn $name() { super::$name(super::Backend::Memory).await })*
        }
        mod redis {
            $(#[tokio::test(flavor = "multi_thread")]
            async fn $name() { super::$name(super::Backend::Redis).await })*
        }
        mod cluster {
            $(#[tokio::test(flavor = "multi_thread")]
            async fn $name() { super::$name(super::Backend::Cluster).await })*
        }
    };
}

/// For bodies whose subject is Redis itself (its keys, its script calls,
/// its script cache): the memory store has nothing of the kind to check.
macro_rules! on_redis_stores {
    ($($name:ident),* $(,)?) => {
        mod redis_subject {
            mod redis {
                $(#[tokio::test(flavor = "multi_thread")]
                async fn $name() { super::super::$name(super::super::Backend::Redis).await })*
            }
            mod cluster {
                $(#[tokio::test(flavor = "multi_thread")]
                async fn $name() { super::super::$name(super::super::Backend::Cluster).await })*
            }
        }
    };
}

on_redis_stores!(
    script_flush_is_survived,
    exempt_routes_never_touch_the_store,
    keys_have_exactly_the_spec_shapes,
    one_round_trip_per_decision,
);

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
    a_flood_costs_redis_one_call_per_gateway_per_refill,
    a_refusal_at_one_plan_does_not_refuse_a_bigger_plan,
    values_over_256_bytes_are_refused,
);

/// One tenant-scoped limit `api` sized `bucket`, on every path.
fn tenant_limit(bucket: &str) -> String {
    format!(
        "limits:\n  api: {{scope: tenant, default: {bucket}}}\nroutes:\n  \
         - {{name: api, match: {{path_prefix: /}}, upstream: api, limits: [api]}}\n"
    )
}

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
    let m = gw.metrics().await;
    assert_eq!(
        metric(
            &m,
            r#"fairgate_requests_total{route="health",status_class="2xx"}"#
        ),
        Some(1000.0)
    );
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

/// 100,000 active tenants, one non-full bucket each, in the memory store:
/// the gateway stays under 128 MiB resident and forgets none of them.
#[tokio::test(flavor = "multi_thread")]
async fn the_memory_store_holds_100k_tenants_under_128_mib() {
    use futures_util::StreamExt;
    const TENANTS: usize = 100_000;
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
    let allowed = futures_util::stream::iter(0..TENANTS)
        .map(|i| {
            let r = send(i);
            async move { r.await.unwrap().status() == 200 }
        })
        .buffer_unordered(64)
        .filter(|ok| std::future::ready(*ok))
        .count()
        .await;
    assert_eq!(allowed, TENANTS);
    for i in [0, TENANTS / 2, TENANTS - 1] {
        let r = send(i).await.unwrap();
        assert_eq!(header(&r, "x-ratelimit-remaining"), "998", "tenant-{i}");
    }
    let rss = proc_status_kib(gw.pid(), "VmRSS:");
    println!("{TENANTS} tenants in the memory store: gateway RSS {rss} KiB");
    assert!(rss < 128 * 1024, "gateway RSS {rss} KiB is over 128 MiB");
}
