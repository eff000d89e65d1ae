//! The admin listener's `/v1/` API against a real Redis: a tenant's buckets
//! read without spending, the numbers equal to what requests' headers say,
//! a reset that lets the next request through, the policy in force; and
//! every request without the bearer token refused, the token never logged.

use crate::common;

use common::*;
use serde_json::Value;

const ADMIN_TOKEN: &str = "admin-token-for-the-test-0123456789";

async fn gateway(redis: &Redis, echo: &Upstream, token_env: bool) -> Gateway {
    let policy = Policy::new()
        .store(&format!(r#"{{kind: redis, url: "{}"}}"#, redis.url()))
        .hs256()
        .env("FAIRGATE_TEST_ADMIN", ADMIN_TOKEN);
    let policy = match token_env {
        true => policy.admin("token_env: FAIRGATE_TEST_ADMIN"),
        false => policy,
    };
    policy
        .sections(&format!(
            r#"
upstreams: {{api: {{targets: ["{}"]}}}}
limits:
  api: {{scope: tenant, default: {{capacity: 5, rate: 1/h}}, plans: {{pro: {{capacity: 8, rate: 2/h}}}}}}
  per_user: {{scope: tenant_user, default: {{capacity: 50, rate: 1/h}}}}
default_limits: none
routes:
  - {{name: api, match: {{path_prefix: /}}, upstream: api, limits: [api, per_user]}}
"#,
            echo.addr
        ))
        .start()
        .await
}

async fn admin(
    gw: &Gateway,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
) -> (u16, Value) {
    let mut req = client().request(method, gw.admin_url(path));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

fn api_limit(body: &Value) -> (u64, u64) {
    let limits = body["limits"].as_array().expect("limits");
    assert_eq!(limits.len(), 1, "only tenant-keyed limits: {body}");
    assert_eq!(limits[0]["limit"], "api");
    (
        limits[0]["remaining"].as_u64().unwrap(),
        limits[0]["reset_seconds"].as_u64().unwrap(),
    )
}

/// `RateLimit: "api";r=R;t=T` as (R, T), for the route's `api` bucket.
fn header_state(r: &reqwest::Response) -> (u16, String) {
    let value = r.headers()["ratelimit"].to_str().unwrap().to_string();
    (r.status().as_u16(), value)
}

/// One request of tenant acme (bearer `token`) through the gateway.
async fn spend(gw: &Gateway, token: &str) -> reqwest::Response {
    client()
        .get(gw.url("/x"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
}

/// A fresh tenant read through the API: refused without the token or with
/// another, then a full bucket, read without spending (twice the same).
async fn assert_a_fresh_tenant_reads_full(gw: &Gateway, limits: &str) {
    let get = reqwest::Method::GET;
    // Without the token, or with another: 401, and nothing read.
    let (status, _) = admin(gw, get.clone(), limits, None).await;
    assert_eq!(status, 401);
    let (status, _) = admin(gw, get.clone(), limits, Some("wrong")).await;
    assert_eq!(status, 401);
    // A fresh tenant: a full bucket, read without spending (twice the same).
    let (status, body) = admin(gw, get.clone(), limits, Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["plan"], "free");
    assert_eq!(body["limits"][0]["capacity"], 5);
    assert_eq!(api_limit(&body), (5, 0));
    let (_, again) = admin(gw, get, limits, Some(ADMIN_TOKEN)).await;
    assert_eq!(api_limit(&again), (5, 0));
}

/// What the API may not touch: a limit not keyed by tenant, a tenant id
/// that is not one, a path that is no endpoint.
async fn assert_other_targets_are_refused(gw: &Gateway, limits: &str) {
    let (status, _) = admin(
        gw,
        reqwest::Method::DELETE,
        &format!("{limits}/per_user"),
        Some(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(status, 404);
    let (status, _) = admin(
        gw,
        reqwest::Method::GET,
        "/v1/tenants/a%20b/limits",
        Some(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(status, 400);
    let (status, _) = admin(gw, reqwest::Method::GET, "/v1/nothing", Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 404);
}

/// The one reset is audited (tenant and limit); the admin token never
/// reaches the log.
fn assert_the_reset_is_audited_without_the_token(gw: &Gateway) {
    let logs = gw.logs();
    let resets: Vec<Value> = gw
        .log_lines()
        .into_iter()
        .filter(|l| l["message"] == "admin.limit_reset")
        .collect();
    assert_eq!(resets.len(), 1, "{logs}");
    assert_eq!(
        (resets[0]["tenant"].as_str(), resets[0]["limit"].as_str()),
        (Some("acme"), Some("api"))
    );
    assert!(!logs.contains(ADMIN_TOKEN));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_quota_api_reads_and_resets_what_requests_spend() {
    let (redis, echo) = (Redis::start().await, Upstream::start().await);
    let gw = gateway(&redis, &echo, true).await;
    let get = reqwest::Method::GET;
    let limits = "/v1/tenants/acme/limits";
    assert_a_fresh_tenant_reads_full(&gw, limits).await;
    // Two requests; the API then reports what the last one's headers said,
    // and the next request spends from exactly that.
    let t = token("acme");
    spend(&gw, &t).await;
    let last = spend(&gw, &t).await;
    assert_eq!(header_state(&last), (200, r#""api";r=3;t=7200"#.into()));
    let (_, body) = admin(&gw, get.clone(), limits, Some(ADMIN_TOKEN)).await;
    assert_eq!(api_limit(&body), (3, 7200));
    assert_eq!(
        header_state(&spend(&gw, &t).await),
        (200, r#""api";r=2;t=10800"#.into())
    );
    // Another plan's sizing, on request.
    let (_, pro) = admin(
        &gw,
        get.clone(),
        &format!("{limits}?plan=pro"),
        Some(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(pro["plan"], "pro");
    assert_eq!(pro["limits"][0]["capacity"], 8);
    // Spent out: refused; a reset lets the next request through.
    spend(&gw, &t).await;
    spend(&gw, &t).await;
    assert_eq!(spend(&gw, &t).await.status(), 429);
    assert_eq!(
        spend(&gw, &t).await.status(),
        429,
        "refused again (from the denial cache)"
    );
    let (status, body) = admin(
        &gw,
        reqwest::Method::DELETE,
        &format!("{limits}/api"),
        Some(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        header_state(&spend(&gw, &t).await),
        (200, r#""api";r=4;t=3600"#.into())
    );
    let (_, body) = admin(&gw, get.clone(), limits, Some(ADMIN_TOKEN)).await;
    assert_eq!(api_limit(&body), (4, 3600));
    // Not a tenant-keyed limit, not a tenant id, not an endpoint.
    assert_other_targets_are_refused(&gw, limits).await;
    // The reset is audited; the token never reaches the log.
    assert_the_reset_is_audited_without_the_token(&gw);
    // The open endpoints stay open.
    assert_eq!(
        client()
            .get(gw.admin_url("/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_policy_in_force_is_shown_with_its_digest() {
    let (redis, echo) = (Redis::start().await, Upstream::start().await);
    let gw = gateway(&redis, &echo, true).await;
    let (status, body) = admin(&gw, reqwest::Method::GET, "/v1/policy", Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200);
    assert_eq!(body["generation"], 1);
    let text = std::fs::read_to_string(gw.config_path()).unwrap();
    // The parsed policy, re-emitted: the same tree as the file (which
    // holds no secret), without its comments.
    let tree = |yaml: &str| yaml_rust2::YamlLoader::load_from_str(yaml).unwrap();
    assert_eq!(tree(body["policy"].as_str().unwrap()), tree(&text));
    let digest = body["digest"].as_str().unwrap();
    assert!(
        digest.starts_with("sha256:") && digest.len() == 7 + 64,
        "{digest}"
    );
    // The scheme is case-insensitive, as RFC 9110 has it.
    let lower = client()
        .get(gw.admin_url("/v1/policy"))
        .header("authorization", format!("bearer  {ADMIN_TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(lower.status(), 200);
    // A reload shows the new file and a new digest.
    gw.write_config(
        &text.replace("capacity: 5,", "capacity: 6,"),
        Write::InPlace,
    );
    let reloaded = eventually(std::time::Duration::from_secs(5), || async {
        admin(&gw, reqwest::Method::GET, "/v1/policy", Some(ADMIN_TOKEN))
            .await
            .1["generation"]
            == 2
    })
    .await;
    assert!(reloaded);
    let (_, body) = admin(&gw, reqwest::Method::GET, "/v1/policy", Some(ADMIN_TOKEN)).await;
    let reread = std::fs::read_to_string(gw.config_path()).unwrap();
    assert!(reread.contains("capacity: 6,"));
    assert_eq!(tree(body["policy"].as_str().unwrap()), tree(&reread));
    assert_ne!(body["digest"].as_str().unwrap(), digest);
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_token_configured_the_api_refuses_everything() {
    let (redis, echo) = (Redis::start().await, Upstream::start().await);
    let gw = gateway(&redis, &echo, false).await;
    for path in ["/v1/policy", "/v1/tenants/acme/limits"] {
        let (status, body) = admin(&gw, reqwest::Method::GET, path, Some(ADMIN_TOKEN)).await;
        assert_eq!(status, 403, "{path}: {body}");
    }
    assert_eq!(
        client()
            .get(gw.admin_url("/metrics"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}
