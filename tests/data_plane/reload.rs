//! Hot reload through the real binary with a real Redis: every way a file
//! changes, SIGHUP, invalid files, restart-only fields, and 50 reloads under
//! load without one failed request.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;

/// Written whole, not through `Policy`: the invalid-file test names lines
/// and columns of this text.
fn config(redis: &Redis, up: &Upstream, capacity: u64, routes_extra: &str) -> String {
    // Small buckets refill slowly so tests can see them; huge ones never run dry.
    // One worker thread: reloads work on the single-threaded runtime.
    let rate = if capacity >= 1000 { "1000/s" } else { "1/h" };
    format!(
        r#"
server: {{listen: ["$LISTEN"], shutdown_grace: 1s, threads: 1}}
admin: {{listen: "$ADMIN"}}
store: {{kind: redis, url: "{}", timeout: 1s}}
auth:
  keys: [{{kid: t, alg: HS256, secret_env: FAIRGATE_TEST_JWT}}]
upstreams:
  api: {{targets: ["{}"], read_timeout: 30s}}
limits:
  api: {{scope: tenant, default: {{capacity: {capacity}, rate: {rate}}}}}
routes:
{routes_extra}
  - {{name: api, match: {{path_prefix: /v1}}, upstream: api, limits: [api]}}
"#,
        redis.url(),
        up.addr
    )
}

async fn gateway(yaml: &str, configmap: bool) -> Gateway {
    Gateway::start_with(
        yaml,
        GatewayOptions {
            env: vec![("FAIRGATE_TEST_JWT".into(), TEST_SECRET.into())],
            configmap,
            ..Default::default()
        },
    )
    .await
}

async fn policy_header(gw: &Gateway, tenant: &str) -> String {
    let r = get(gw, "/v1/x", &token(tenant)).await;
    r.headers()
        .get("ratelimit-policy")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

async fn generation(gw: &Gateway) -> String {
    gw.admin_text("/readyz").await
}

#[tokio::test(flavor = "multi_thread")]
async fn capacity_changes_apply_within_two_seconds_however_the_file_changes() {
    let redis = Redis::start().await;
    let up = Upstream::start().await;
    for (how, configmap) in [
        (Write::InPlace, false),
        (Write::RenameOver, false),
        (Write::ConfigMapSwap, true),
    ] {
        let gw = gateway(&config(&redis, &up, 10, ""), configmap).await;
        assert_eq!(policy_header(&gw, "acme").await, r#""api";q=10;w=36000"#);
        gw.write_config(&config(&redis, &up, 20, ""), how);
        let applied = eventually(Duration::from_secs(2), || async {
            policy_header(&gw, "acme").await == r#""api";q=20;w=72000"#
        })
        .await;
        assert!(applied, "{how:?}: not applied within 2 s\n{}", gw.logs());
        assert_eq!(generation(&gw).await, "ready generation=2\n", "{how:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_reloads_and_bucket_state_survives() {
    let redis = Redis::start().await;
    let up = Upstream::start().await;
    let gw = gateway(&config(&redis, &up, 10, ""), false).await;
    for _ in 0..4 {
        get(&gw, "/v1/x", &token("acme")).await;
    }
    gw.signal(libc::SIGHUP);
    assert!(
        eventually(Duration::from_secs(2), || async {
            generation(&gw).await == "ready generation=2\n"
        })
        .await
    );
    // Same keys, same state: 4 spent before the reload.
    let r = get(&gw, "/v1/x", &token("acme")).await;
    assert_eq!(r.headers()["x-ratelimit-remaining"], "5");
    // A lowered capacity applies to the live bucket at once: 5 spent of 6.
    gw.write_config(&config(&redis, &up, 6, ""), Write::RenameOver);
    assert!(
        eventually(Duration::from_secs(2), || async {
            generation(&gw).await == "ready generation=3\n"
        })
        .await
    );
    let r = get(&gw, "/v1/x", &token("acme")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ratelimit-remaining"], "0");
    let r = get(&gw, "/v1/x", &token("acme")).await;
    assert_eq!(r.status(), 429);
    let m = gw.metrics().await;
    assert_eq!(
        metric(&m, r#"fairgate_config_reloads_total{result="ok"}"#),
        Some(3.0)
    );
    assert_eq!(metric(&m, "fairgate_config_generation"), Some(3.0));
    assert!(metric(&m, "fairgate_config_last_reload_success_timestamp_seconds").unwrap() > 1.7e9);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_invalid_file_keeps_the_old_policy() {
    let redis = Redis::start().await;
    let up = Upstream::start().await;
    let gw = gateway(&config(&redis, &up, 10, ""), false).await;
    let bad_syntax = config(&redis, &up, 20, "").replace("limits:\n", "limits: [\n");
    let unknown_limit = config(&redis, &up, 20, "").replace("limits: [api]}", "limits: [nope]}");
    // Valid to `check`, but the target does not resolve when the policy is built.
    let unresolvable =
        config(&redis, &up, 20, "").replace(&up.addr.to_string(), "no-such-host.invalid:80");
    for (n, bad) in [bad_syntax, unknown_limit, unresolvable].iter().enumerate() {
        gw.write_config(bad, Write::RenameOver);
        let counted = eventually(Duration::from_secs(5), || async {
            metric(
                &gw.metrics().await,
                r#"fairgate_config_reloads_total{result="error"}"#,
            ) == Some(n as f64 + 1.0)
        })
        .await;
        assert!(counted, "{}", gw.logs());
        assert_eq!(policy_header(&gw, "acme").await, r#""api";q=10;w=36000"#);
        assert_eq!(generation(&gw).await, "ready generation=1\n");
    }
    let problems: Vec<String> = gw
        .log_lines()
        .iter()
        .filter(|l| l["message"] == "config.reload_failed")
        .map(|l| l["problem"].as_str().unwrap().to_string())
        .collect();
    let path = gw.config_path().display().to_string();
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with(&path) && p.contains(": config.yaml_syntax: ")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with(&format!("{path}:13:68:"))
                && p.contains(": routes.limit_unknown: routes[0].limits[0] \"nope\"")),
        "{problems:?}"
    );
    // Placed at the pool, with its section's code.
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with(&format!("{path}:8:3:"))
                && p.contains(": upstreams.target_invalid: upstreams.api: cannot resolve targets")),
        "{problems:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn routes_come_and_go_and_listen_changes_need_a_restart() {
    let redis = Redis::start().await;
    let up = Upstream::start().await;
    let gw = gateway(&config(&redis, &up, 10, ""), false).await;
    assert_eq!(gw.status("/status").await, 404);
    let with_status =
        "  - {name: status, match: {path: /status}, upstream: api, auth: none, exempt: true}";
    gw.write_config(&config(&redis, &up, 10, with_status), Write::InPlace);
    assert!(
        eventually(Duration::from_secs(2), || async {
            gw.status("/status").await == 200
        })
        .await
    );
    gw.write_config(&config(&redis, &up, 10, ""), Write::InPlace);
    assert!(
        eventually(Duration::from_secs(2), || async {
            gw.status("/status").await == 404
        })
        .await
    );

    let moved =
        config(&redis, &up, 99, "").replace("listen: [\"$LISTEN\"]", "listen: [\"127.0.0.1:1\"]");
    gw.write_config(&moved, Write::InPlace);
    let refused = eventually(Duration::from_secs(2), || async {
        gw.log_lines().iter().any(|l| {
            l["message"] == "config.reload_failed"
                && l["problem"]
                    .as_str()
                    .unwrap()
                    .contains("reload.restart_required: server.listen")
        })
    })
    .await;
    assert!(refused, "{}", gw.logs());
    assert_eq!(policy_header(&gw, "acme").await, r#""api";q=10;w=36000"#);
}

#[tokio::test(flavor = "multi_thread")]
async fn fifty_reloads_under_load_fail_no_request() {
    let redis = Redis::start().await;
    let up = Upstream::start().await;
    let gw = gateway(&config(&redis, &up, 1_000_000, ""), false).await;
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|i| {
            let (url, stop) = (gw.url("/v1/x"), stop.clone());
            tokio::spawn(async move {
                let c = client();
                let t = token(&format!("t{i}"));
                let mut statuses = Vec::new();
                for _ in 0..50_000 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let s = c
                        .get(&url)
                        .bearer_auth(&t)
                        .send()
                        .await
                        .map(|r| r.status().as_u16());
                    statuses.push(s.unwrap_or(0));
                }
                statuses
            })
        })
        .collect();
    let slow = tokio::spawn({
        let url = gw.url("/v1/slow?sleep_ms=3000");
        async move {
            client()
                .get(url)
                .bearer_auth(token("slow"))
                .send()
                .await
                .unwrap()
                .status()
        }
    });
    for i in 0..50u64 {
        let how = [Write::InPlace, Write::RenameOver][(i % 2) as usize];
        gw.write_config(&config(&redis, &up, 1_000_000 + i + 1, ""), how);
        let want = format!("ready generation={}\n", i + 2);
        let applied = eventually(Duration::from_secs(2), || async {
            generation(&gw).await == want
        })
        .await;
        assert!(applied, "reload {i} not applied\n{}", gw.logs());
    }
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for c in clients {
        let statuses = c.await.unwrap();
        total += statuses.len();
        let bad: Vec<_> = statuses
            .iter()
            .filter(|s| **s != 200 && **s != 429)
            .collect();
        assert!(bad.is_empty(), "failed responses during reloads: {bad:?}");
    }
    assert!(total > 200, "only {total} requests");
    assert_eq!(
        slow.await.unwrap(),
        200,
        "the slow in-flight request completed"
    );
    let m = gw.metrics().await;
    assert_eq!(
        metric(&m, r#"fairgate_config_reloads_total{result="ok"}"#),
        Some(51.0)
    );
}
