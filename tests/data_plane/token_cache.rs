//! The verified-token cache, through the real gateway: a token known to be
//! valid skips its signature check, but never past its `exp`, never after
//! its key is removed, and a failed token is checked again every time.
//! Its size is bounded however many distinct tokens arrive.

use crate::common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use serde_json::json;

const SECRET: &str = "token-cache-secret-0123456789";
const SECOND: &str = "token-cache-second-secret-012345";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn sign(secret: &str, kid: &str, claims: serde_json::Value) -> String {
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    header.kid = Some(kid.into());
    jsonwebtoken::encode(
        &header,
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap()
}

/// The config, with or without the second key (kid `b`).
fn config(up: &Upstream, second_key: bool) -> String {
    let second = if second_key {
        "    - {kid: b, alg: HS256, secret_env: SECOND}"
    } else {
        ""
    };
    Policy::new()
        .server("threads: 1")
        .sections(&format!(
            r#"
auth:
  leeway: 2s
  failure_limit: {{capacity: 10000, rate: 1000/s}}
  keys:
    - {{kid: a, alg: HS256, secret_env: FIRST}}
{second}
upstreams: {{api: {{targets: ["{}"]}}}}
default_limits: none
routes:
  - {{name: api, match: {{path_prefix: /}}, upstream: api}}
"#,
            up.addr
        ))
        .yaml()
}

async fn start(up: &Upstream) -> Gateway {
    Gateway::start_with(
        &config(up, true),
        GatewayOptions {
            env: vec![
                ("FIRST".into(), SECRET.into()),
                ("SECOND".into(), SECOND.into()),
            ],
            ..Default::default()
        },
    )
    .await
}

async fn status(gw: &Gateway, token: &str) -> u16 {
    get(gw, "/x", token).await.status().as_u16()
}

async fn verifications(gw: &Gateway) -> f64 {
    metric(&gw.metrics().await, "fairgate_auth_verifications_total").unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_known_token_is_not_checked_again_until_its_exp() {
    let up = Upstream::start().await;
    let gw = start(&up).await;
    let exp = now() + 2;
    let token = sign(SECRET, "a", json!({"tid": "acme", "exp": exp}));
    let before = verifications(&gw).await;
    assert_eq!(status(&gw, &token).await, 200);
    assert_eq!(status(&gw, &token).await, 200);
    assert_eq!(status(&gw, &token).await, 200);
    assert_eq!(verifications(&gw).await - before, 1.0, "checked once");
    let m = gw.metrics().await;
    assert_eq!(
        metric(&m, "fairgate_auth_token_cache_total{result=\"hit\"}"),
        Some(2.0)
    );

    // Past `exp`, within the 2 s leeway: valid, but no longer from the cache.
    assert!(eventually(Duration::from_secs(5), || async { now() > exp }).await);
    assert_eq!(status(&gw, &token).await, 200);
    assert_eq!(
        verifications(&gw).await - before,
        2.0,
        "checked again after exp"
    );
    // Past the leeway: refused.
    let refused = eventually(Duration::from_secs(10), || async {
        status(&gw, &token).await == 401
    })
    .await;
    assert!(refused);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_removed_by_reload_fails_its_cached_tokens_at_once() {
    let up = Upstream::start().await;
    let gw = start(&up).await;
    let exp = now() + 600;
    let kept = sign(SECRET, "a", json!({"tid": "acme", "exp": exp}));
    let removed = sign(SECOND, "b", json!({"tid": "acme", "exp": exp}));
    for token in [&kept, &removed, &kept, &removed] {
        assert_eq!(status(&gw, token).await, 200);
    }
    gw.write_config(&config(&up, false), Write::RenameOver);
    let reloaded = eventually(Duration::from_secs(10), || async {
        metric(&gw.metrics().await, "fairgate_config_generation") == Some(2.0)
    })
    .await;
    assert!(reloaded, "{}", gw.logs());
    assert_eq!(status(&gw, &removed).await, 401);
    assert_eq!(status(&gw, &kept).await, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_token_is_checked_again_every_time() {
    let up = Upstream::start().await;
    let gw = start(&up).await;
    let forged = sign(
        "not-the-secret-0123456789",
        "a",
        json!({"tid": "acme", "exp": now() + 600}),
    );
    let before = verifications(&gw).await;
    for _ in 0..3 {
        assert_eq!(status(&gw, &forged).await, 401);
    }
    assert_eq!(verifications(&gw).await - before, 3.0);
}

/// 100,000 distinct valid tokens (40,000 in CI; `FAIRGATE_FULL=1` sends
/// the 100,000): the cache keeps at most 10,000 of them and 8 MiB of token
/// text, so after the first 20,000 the gateway's memory grows by less than
/// 0.2 KiB a token (an unbounded cache adds some 0.5 KiB a token: 40 MiB
/// over the 80,000; measured bounded: 2.3 MiB).
#[tokio::test(flavor = "multi_thread")]
async fn a_hundred_thousand_distinct_tokens_stay_bounded() {
    use futures_util::StreamExt;
    let total = requests(40_000, 100_000);
    let up = Upstream::start().await;
    let gw = start(&up).await;
    let exp = now() + 600;
    let c = client();
    let url = gw.url("/x");
    let send = |range: std::ops::Range<usize>| {
        futures_util::stream::iter(range)
            .map(|i| {
                // A realistic size: an IdP's tokens carry a few hundred bytes of claims.
                let token = sign(
                    SECRET,
                    "a",
                    json!({"tid": "acme", "sub": format!("user-{i}"), "jti": format!("{i:0>40}"),
                           "scope": "read:files write:files read:users", "exp": exp}),
                );
                let r = c.get(&url).bearer_auth(token).send();
                async move { r.await.unwrap().status() == 200 }
            })
            .buffer_unordered(64)
            .filter(|ok| std::future::ready(*ok))
            .count()
    };
    assert_eq!(send(0..20_000).await, 20_000);
    let warm = proc_status_kib(gw.pid(), "VmRSS:");
    assert_eq!(send(20_000..total).await, total - 20_000);
    let rss = proc_status_kib(gw.pid(), "VmRSS:");
    println!("distinct tokens: RSS {warm} KiB after 20,000, {rss} KiB after {total}");
    let bound = (total as u64 - 20_000) / 5;
    assert!(
        rss < warm + bound,
        "grew from {warm} to {rss} KiB over {total} tokens"
    );
    assert!(rss < 128 * 1024, "gateway RSS {rss} KiB is over 128 MiB");
}
