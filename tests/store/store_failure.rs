//! When Redis fails: killed, paused, restarted empty, absent at start-up,
//! or its master killed and replaced by Sentinel. No request fails or waits
//! long, decisions fall back as configured, and each outage logs exactly one
//! fallback line and one recovered line.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

/// A policy with one tenant-scoped bucket of `capacity` refilling slowly
/// (1/h) unless `capacity` is huge (then 1000/s, for request streams).
fn config(redis_port: u16, upstream: &Upstream, store_extra: &str, capacity: u64) -> Policy {
    let store = format!(
        r#"{{kind: redis, url: "redis://127.0.0.1:{redis_port}/0", timeout: 50ms{store_extra}}}"#
    );
    config_with_store(&store, upstream, capacity)
}

/// As `config`, with the whole `store` mapping given.
fn config_with_store(store: &str, upstream: &Upstream, capacity: u64) -> Policy {
    let rate = if capacity >= 1_000_000 {
        "1000/s"
    } else {
        "1/h"
    };
    Policy::new()
        .server("shutdown_grace: 1s")
        .store(store)
        .hs256()
        .sections(&format!(
            r#"
upstreams:
  api: {{targets: ["{}"]}}
limits:
  api: {{scope: tenant, default: {{capacity: {capacity}, rate: {rate}}}}}
routes:
  - {{name: api, match: {{path_prefix: /}}, upstream: api, limits: [api]}}
"#,
            upstream.addr
        ))
}

/// Counts of log lines with this message.
fn lines(gw: &Gateway, message: &str) -> Vec<serde_json::Value> {
    gw.log_lines()
        .into_iter()
        .filter(|l| l["message"] == message)
        .collect()
}

/// Sends requests from `clients` loops until `stop`; returns (status, latency) of each.
fn stream(
    gw: &Gateway,
    clients: usize,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<(u16, Duration)>> {
    let url = gw.url("/v1/x");
    tokio::spawn(async move {
        let loops = (0..clients).map(|i| {
            let (url, stop) = (url.clone(), stop.clone());
            tokio::spawn(async move {
                let c = client();
                let t = token(&format!("tenant{i}"));
                let mut out = Vec::new();
                // Bounded: at most 20 000 requests per loop.
                for _ in 0..20_000 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let started = Instant::now();
                    let status = match c.get(&url).bearer_auth(&t).send().await {
                        Ok(r) => r.status().as_u16(),
                        Err(_) => 0,
                    };
                    out.push((status, started.elapsed()));
                }
                out
            })
        });
        let mut all = Vec::new();
        for l in loops {
            all.extend(l.await.unwrap());
        }
        all
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_killed_mid_stream_then_restarted_empty() {
    let mut redis = Redis::start().await;
    let up = Upstream::start().await;
    let gw = config(redis.port, &up, "", 1_000_000).start().await;
    let stop = Arc::new(AtomicBool::new(false));
    let run = stream(&gw, 4, stop.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;
    redis.kill();
    let fell_back = eventually(Duration::from_secs(5), || async {
        lines(&gw, "rate_limits.fallback").len() == 1
    })
    .await;
    assert!(fell_back, "{}", gw.logs());
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Back, empty: no keys, no scripts.
    redis.restart(&[]).await;
    let recovered = eventually(Duration::from_secs(10), || async {
        lines(&gw, "rate_limits.recovered").len() == 1
    })
    .await;
    assert!(recovered, "{}", gw.logs());
    // Decisions are Redis's again: its keys fill up.
    let back = eventually(Duration::from_secs(5), || async {
        scan_keys(redis.port)
            .iter()
            .any(|k| k.starts_with("tenant:{"))
    })
    .await;
    assert!(back);
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let results = run.await.unwrap();
    assert!(
        results.len() > 100,
        "the stream stalled: {} responses",
        results.len()
    );
    let bad: Vec<_> = results
        .iter()
        .filter(|(s, _)| *s != 200 && *s != 429)
        .collect();
    assert!(
        bad.is_empty(),
        "{} failed responses, e.g. {:?}",
        bad.len(),
        bad.first()
    );
    // Exactly one line each for this one outage, naming a reason, never a key.
    let fallback = lines(&gw, "rate_limits.fallback");
    assert_eq!(fallback.len(), 1);
    assert!(
        ["unreachable", "failed", "timed_out"].contains(&fallback[0]["reason"].as_str().unwrap())
    );
    assert!(recovered_once(&gw).await, "{}", gw.logs());
    assert!(!gw.logs().contains("tenant:{"), "a key was logged");
    let m = gw.metrics().await;
    assert_eq!(metric(&m, "fairgate_store_up"), Some(1.0));
}

#[tokio::test(flavor = "multi_thread")]
async fn paused_redis_never_holds_requests_past_the_timeout() {
    let redis = Redis::start().await;
    let up = Upstream::start().await;
    let gw = config(redis.port, &up, "", 1_000_000).start().await;
    let stop = Arc::new(AtomicBool::new(false));
    redis.pause();
    let paused = Instant::now();
    let run = stream(&gw, 4, stop.clone());
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    let results = run.await.unwrap();
    redis.resume();
    assert!(
        results.iter().all(|(s, _)| *s == 200),
        "all decided locally"
    );
    // The first requests wait for the 50 ms timeout; once the breaker is
    // open nothing waits on Redis. Judge by counts, not wall-clock budgets.
    let slow = results
        .iter()
        .filter(|(_, d)| *d > Duration::from_millis(100))
        .count();
    assert!(
        (slow as f64) < 0.01 * results.len() as f64 + 8.0,
        "{slow} of {} responses took over 2x timeout",
        results.len()
    );
    assert!(paused.elapsed() < Duration::from_secs(10));
    assert_eq!(lines(&gw, "rate_limits.fallback").len(), 1, "{}", gw.logs());
    assert_eq!(lines(&gw, "rate_limits.fallback")[0]["reason"], "timed_out");
    let recovered = eventually(Duration::from_secs(10), || async {
        client()
            .get(gw.url("/v1/x"))
            .bearer_auth(token("t"))
            .send()
            .await
            .is_ok()
            && lines(&gw, "rate_limits.recovered").len() == 1
    })
    .await;
    assert!(recovered, "{}", gw.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn local_fallback_enforces_the_divided_policy() {
    let up = Upstream::start().await;
    let closed = free_addr().port();
    let gw = config(closed, &up, ", local_divisor: 2", 10).start().await;
    let t = token("acme");
    let mut ok = 0;
    for _ in 0..10 {
        let r = get(&gw, "/v1/x", &t).await;
        match r.status().as_u16() {
            200 => ok += 1,
            429 => assert_eq!(r.headers()["ratelimit-policy"], r#""api";q=5;w=36000"#),
            s => panic!("status {s}"),
        }
    }
    assert_eq!(ok, 5, "capacity 10 / divisor 2");
    let r = client().get(gw.admin_url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200, "readiness stays up while falling back");
    let m = gw.metrics().await;
    assert_eq!(metric(&m, "fairgate_store_up"), Some(0.0));
    assert!(
        metric_sum(&m, "fairgate_ratelimit_fallback_total") >= 10.0,
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn deny_refuses_with_503_and_allow_passes_everything() {
    let up = Upstream::start().await;
    let closed = free_addr().port();
    // Not ready by design (readiness is 503 under deny while Redis is down),
    // so wait for the fallback line instead of /readyz.
    let deny = config(closed, &up, ", on_unavailable: deny", 1)
        .start_with(GatewayOptions {
            wait_ready: false,
            ..Default::default()
        })
        .await;
    let listening = eventually(Duration::from_secs(30), || async {
        tokio::net::TcpStream::connect(deny.listen).await.is_ok()
            && lines(&deny, "rate_limits.fallback").len() == 1
    })
    .await;
    assert!(listening, "{}", deny.logs());
    let r = get(&deny, "/v1/x", &token("a")).await;
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let r = client()
        .get(deny.admin_url("/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(up.requests(), 0);

    let allow = config(closed, &up, ", on_unavailable: allow", 1)
        .start()
        .await;
    for _ in 0..20 {
        let r = get(&allow, "/v1/x", &token("a")).await;
        assert_eq!(r.status(), 200);
    }
    assert_eq!(up.requests(), 20);
}

#[tokio::test(flavor = "multi_thread")]
async fn starts_with_redis_down_and_switches_when_it_comes_up() {
    let up = Upstream::start().await;
    let port = free_addr().port();
    let gw = config(port, &up, "", 100).start().await;
    let t = token("acme");
    let r = get(&gw, "/v1/x", &t).await;
    assert_eq!(r.status(), 200, "serves with Redis down");
    assert_eq!(lines(&gw, "rate_limits.fallback").len(), 1);
    let redis = Redis::start_on(port, &[]).await;
    let switched = eventually(Duration::from_secs(10), || async {
        get(&gw, "/v1/x", &t).await;
        scan_keys(redis.port).contains(&"tenant:{acme}:rate:api".to_string())
    })
    .await;
    assert!(switched, "{}", gw.logs());
    assert!(recovered_once(&gw).await, "{}", gw.logs());
}

/// The outage's end is logged once the store has answered for 2 s:
/// waits for exactly one `rate_limits.recovered`.
async fn recovered_once(gw: &Gateway) -> bool {
    let once = eventually(Duration::from_secs(10), || async {
        lines(gw, "rate_limits.recovered").len() == 1
    });
    once.await && lines(gw, "rate_limits.recovered").len() == 1
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_passwords_never_reach_the_logs() {
    let up = Upstream::start().await;
    let password = "s3cret-redis-pw-do-not-log";
    let redis = Redis::start_with(&["--requirepass", password]).await;
    let policy = config(redis.port, &up, ", password_env: FG_REDIS_PW", 100);
    let gw = policy.clone().env("FG_REDIS_PW", password).start().await;
    let r = get(&gw, "/v1/x", &token("acme")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ratelimit-remaining"], "99");
    assert_eq!(
        redis_cli(
            redis.port,
            &[
                "-a",
                password,
                "--no-auth-warning",
                "EXISTS",
                "tenant:{acme}:rate:api"
            ]
        )
        .unwrap()
        .trim(),
        "1"
    );
    // A wrong password: failures are logged, the password is not.
    let wrong = policy
        .env("FG_REDIS_PW", "wrong-pw-also-secret")
        .start()
        .await;
    let r = get(&wrong, "/v1/x", &token("acme")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        lines(&wrong, "rate_limits.fallback").len(),
        1,
        "{}",
        wrong.logs()
    );
    for g in [&gw, &wrong] {
        let logs = g.logs();
        assert!(
            !logs.contains(password) && !logs.contains("wrong-pw-also-secret"),
            "{logs}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_redis_is_one_outage_not_a_flapping_breaker() {
    let up = Upstream::start().await;
    let redis = Redis::start_with(&["--maxmemory-policy", "noeviction"]).await;
    let gw = config(redis.port, &up, "", 100).start().await;
    let t = token("acme");
    // Writes now fail with OOM while PING still answers.
    redis.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    for _ in 0..30 {
        let r = get(&gw, "/v1/x", &t).await;
        assert_eq!(r.status(), 200);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(lines(&gw, "rate_limits.fallback").len(), 1, "{}", gw.logs());
    assert_eq!(
        lines(&gw, "rate_limits.recovered").len(),
        0,
        "recovered while writes fail"
    );
    redis.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    let recovered = eventually(Duration::from_secs(5), || async {
        get(&gw, "/v1/x", &t).await;
        lines(&gw, "rate_limits.recovered").len() == 1
    })
    .await;
    assert!(recovered, "{}", gw.logs());
    assert_eq!(lines(&gw, "rate_limits.fallback").len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rejected_password_is_retried_once_it_becomes_valid() {
    let up = Upstream::start().await;
    let redis = Redis::start_with(&["--requirepass", "old-password-1"]).await;
    let gw = config(redis.port, &up, ", password_env: FG_REDIS_PW", 100)
        .env("FG_REDIS_PW", "new-password-2")
        .start()
        .await;
    let t = token("acme");
    assert_eq!(get(&gw, "/v1/x", &t).await.status(), 200);
    assert_eq!(lines(&gw, "rate_limits.fallback").len(), 1);
    redis_cli(
        redis.port,
        &[
            "-a",
            "old-password-1",
            "--no-auth-warning",
            "CONFIG",
            "SET",
            "requirepass",
            "new-password-2",
        ],
    )
    .unwrap();
    let recovered = eventually(Duration::from_secs(10), || async {
        get(&gw, "/v1/x", &t).await;
        lines(&gw, "rate_limits.recovered").len() == 1
    })
    .await;
    assert!(recovered, "{}", gw.logs());
}

/// A gateway on `group` (store timeout 50 ms) with 4 clients streaming
/// through it until `stop`; and whether decisions reached the master.
async fn stream_through_sentinels(
    group: &SentinelGroup,
    up: &Upstream,
) -> (
    Gateway,
    Arc<AtomicBool>,
    tokio::task::JoinHandle<Vec<(u16, Duration)>>,
    bool,
) {
    let store = format!(
        r#"{{kind: redis_sentinel, sentinels: {:?}, master_name: "{}", timeout: 50ms}}"#,
        group.sentinel_urls(),
        group.name
    );
    let gw = config_with_store(&store, up, 1_000_000).start().await;
    let stop = Arc::new(AtomicBool::new(false));
    let run = stream(&gw, 4, stop.clone());
    let port = group.master.port;
    let on_master = eventually(Duration::from_secs(5), || async {
        command_calls(port, "evalsha") > 100
    })
    .await;
    (gw, stop, run, on_master)
}

#[tokio::test(flavor = "multi_thread")]
async fn sentinel_failover_mid_stream_loses_no_request() {
    let mut group = SentinelGroup::start("fairgate-main").await;
    let new = group.replica.port;
    let up = Upstream::start().await;
    let (gw, stop, run, on_master) = stream_through_sentinels(&group, &up).await;
    assert!(
        on_master,
        "decisions never reached the master\n{}",
        gw.logs()
    );
    assert!(
        lines(&gw, "rate_limits.fallback").is_empty(),
        "{}",
        gw.logs()
    );

    let killed = Instant::now();
    group.master.kill();
    let fell_back = eventually(Duration::from_secs(5), || async {
        lines(&gw, "rate_limits.fallback").len() == 1
    })
    .await;
    assert!(fell_back, "{}", gw.logs());
    let promoted = eventually(Duration::from_secs(30), || async { group.master_is(new) }).await;
    assert!(promoted, "Sentinel did not promote the replica");
    let failover = killed.elapsed();
    let recovered = eventually(Duration::from_secs(10), || async {
        lines(&gw, "rate_limits.recovered").len() == 1
    })
    .await;
    assert!(recovered, "{}", gw.logs());
    let recovered_after = killed.elapsed();
    // Decisions are the new master's: its own script calls grow (a replica
    // receives the script's effects, never EVALSHA).
    let before = command_calls(new, "evalsha");
    let back = eventually(Duration::from_secs(5), || async {
        command_calls(new, "evalsha") > before + 100
    })
    .await;
    assert!(back, "decisions did not return to the store\n{}", gw.logs());
    stop.store(true, Ordering::Relaxed);
    let results = run.await.unwrap();

    let failed = results.iter().filter(|(s, _)| *s != 200).count();
    eprintln!(
        "sentinel failover: {} requests, {failed} failed; promoted after {failover:?}, \
         recovered after {recovered_after:?}; {} EVALSHA on the new master",
        results.len(),
        command_calls(new, "evalsha")
    );
    assert!(results.len() > 100, "the stream stalled: {}", results.len());
    assert_eq!(
        failed,
        0,
        "e.g. {:?}",
        results.iter().find(|(s, _)| *s != 200)
    );
    let fallback = lines(&gw, "rate_limits.fallback");
    assert_eq!(fallback.len(), 1, "{}", gw.logs());
    assert!(
        ["unreachable", "failed", "timed_out"].contains(&fallback[0]["reason"].as_str().unwrap())
    );
    assert_eq!(
        lines(&gw, "rate_limits.recovered").len(),
        1,
        "{}",
        gw.logs()
    );
    let m = gw.metrics().await;
    assert_eq!(metric(&m, "fairgate_store_up"), Some(1.0));
    assert!(
        metric_sum(&m, "fairgate_ratelimit_fallback_total") >= 1.0,
        "{m}"
    );
}

/// A planned failover: the old master stays up (and keeps answering as a
/// master until Sentinel demotes it, seconds later). Decisions follow the
/// `+switch-master` announcement instead of waiting for the demotion.
#[tokio::test(flavor = "multi_thread")]
async fn a_planned_failover_moves_decisions_before_the_old_master_is_demoted() {
    let group = SentinelGroup::start("fairgate-switch").await;
    let (old, new) = (group.master.port, group.replica.port);
    let up = Upstream::start().await;
    let (gw, stop, run, on_master) = stream_through_sentinels(&group, &up).await;
    assert!(on_master, "{}", gw.logs());
    let out = redis_cli(
        group.sentinels[0].port,
        &["SENTINEL", "FAILOVER", &group.name],
    );
    assert_eq!(out.as_deref().map(str::trim), Some("OK"));
    let promoted = eventually(Duration::from_secs(30), || async { group.master_is(new) }).await;
    assert!(promoted, "Sentinel did not promote the replica");
    let before = command_calls(new, "evalsha");
    let moved = eventually(Duration::from_secs(5), || async {
        command_calls(new, "evalsha") > before + 100
    })
    .await;
    assert!(
        moved,
        "decisions did not move to the new master\n{}",
        gw.logs()
    );
    let old_role = redis_cli(old, &["ROLE"]).unwrap_or_default();
    assert_eq!(
        old_role.lines().next(),
        Some("master"),
        "the old master was demoted first: this proves nothing"
    );
    let switched = lines(&gw, "store.master_switched");
    assert_eq!(switched.len(), 1, "{}", gw.logs());
    assert_eq!(switched[0]["address"], format!("127.0.0.1:{new}"));
    stop.store(true, Ordering::Relaxed);
    let results = run.await.unwrap();
    assert!(results.len() > 100, "the stream stalled: {}", results.len());
    assert!(results.iter().all(|(s, _)| *s == 200), "a request failed");
    // No outage here; at most a lookup that outlasted one request's timeout.
    let fallback = lines(&gw, "rate_limits.fallback").len();
    eprintln!(
        "planned failover: {} requests, none failed; {fallback} fallback lines",
        results.len()
    );
    assert!(fallback <= 1, "{}", gw.logs());
    assert_eq!(lines(&gw, "rate_limits.recovered").len(), fallback);
}

#[tokio::test(flavor = "multi_thread")]
async fn password_env_authenticates_to_the_master_sentinel_names() {
    let password = "s3ntinel-data-pw-do-not-log";
    let group = SentinelGroup::start_with_password("fairgate-auth", Some(password)).await;
    let up = Upstream::start().await;
    let store = format!(
        r#"{{kind: redis_sentinel, sentinels: {:?}, master_name: "{}", password_env: FG_REDIS_PW}}"#,
        group.sentinel_urls(),
        group.name
    );
    let gw = config_with_store(&store, &up, 100)
        .env("FG_REDIS_PW", password)
        .start()
        .await;
    let r = get(&gw, "/v1/x", &token("acme")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ratelimit-remaining"], "99", "{}", gw.logs());
    let exists = data_cli(
        group.master.port,
        Some(password),
        &["EXISTS", "tenant:{acme}:rate:api"],
    );
    assert_eq!(exists.as_deref().map(str::trim), Some("1"));
    assert!(
        lines(&gw, "rate_limits.fallback").is_empty(),
        "{}",
        gw.logs()
    );
    assert!(!gw.logs().contains(password));
}
