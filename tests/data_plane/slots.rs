//! Concurrency slots for uploads, against a real Redis and a deliberately
//! slow upstream that records how many uploads it has in flight at once.

use crate::common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use futures_util::future::join_all;

const SET: &str = "tenant:{acme}:slots:uploads";

/// Uploads to `upstream` hold a slot of `uploads` (`slots` per tenant,
/// leased for `lease`) in `redis`; `extra_limits` adds top-level sections.
fn config(
    redis: &Redis,
    upstream: &Upstream,
    slots: u64,
    lease: &str,
    extra_limits: &str,
) -> Policy {
    Policy::new()
        .server("shutdown_grace: 1s")
        .store(&format!(r#"{{kind: redis, url: "{}", timeout: 2s}}"#, redis.url()))
        .hs256()
        .sections(&format!(
            r#"
upstreams:
  api: {{targets: ["{}"], read_timeout: 120s}}
default_limits: none
{extra_limits}
concurrency:
  uploads: {{scope: tenant, slots: {slots}, lease: {lease}}}
routes:
  - {{name: uploads, match: {{path_prefix: /v1/attachments, methods: [POST, PUT]}}, upstream: api, concurrency: uploads, max_body: 5GiB}}
"#,
            upstream.addr
        ))
}

async fn upload(gw: &Gateway, query: &str, body: Vec<u8>) -> reqwest::Response {
    client()
        .post(gw.url(&format!("/v1/attachments{query}")))
        .bearer_auth(token("acme"))
        .body(body)
        .send()
        .await
        .unwrap()
}

/// An upload of one byte that runs while the test goes on.
fn upload_in_background(
    gw: &Gateway,
    query: &str,
) -> tokio::task::JoinHandle<reqwest::Result<reqwest::Response>> {
    let url = gw.url(&format!("/v1/attachments{query}"));
    tokio::spawn(async move {
        client()
            .post(url)
            .bearer_auth(token("acme"))
            .body("x")
            .send()
            .await
    })
}

fn held(redis: &Redis) -> u64 {
    redis.cli(&["ZCARD", SET]).trim().parse().unwrap()
}

fn max_in_flight(up: &Upstream) -> u64 {
    up.stats.max_in_flight.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_uploads_over_two_gateways_never_exceed_three() {
    let redis = Redis::start().await;
    let up = Upstream::start().await;
    let policy = config(&redis, &up, 3, "30s", "");
    let (a, b) = (policy.start().await, policy.start().await);
    let gws = [&a, &b];
    let responses =
        join_all((0..20).map(|i| upload(gws[i % 2], "?sleep_ms=1500", vec![b'x'; 1024]))).await;
    let ok = responses.iter().filter(|r| r.status() == 200).count();
    let refused: Vec<_> = responses.iter().filter(|r| r.status() == 429).collect();
    assert_eq!((ok, refused.len()), (3, 17));
    assert!(
        max_in_flight(&up) <= 3,
        "upstream saw {} at once",
        max_in_flight(&up)
    );
    for r in refused {
        let h = r.headers();
        assert_eq!(h["retry-after"], "1");
        assert_eq!(
            h["ratelimit-policy"],
            r#""uploads";q=3;qu="concurrent-requests""#
        );
        assert_eq!(h["ratelimit"], r#""uploads";r=0"#);
        assert_eq!(h["content-type"], "application/problem+json");
    }
    // Every lease is released as its response completes (the logging phase
    // runs after the last byte is sent, so poll briefly).
    assert!(eventually(Duration::from_secs(1), || async { held(&redis) == 0 }).await);
    // A release is counted before it is sent to Redis.
    let m = a.metrics().await + &b.metrics().await;
    let released: f64 = m
        .lines()
        .filter(|l| {
            l.starts_with(r#"fairgate_slots_released_total{policy="uploads",reason="complete"}"#)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(released, 3.0, "{m}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_bucket_takes_no_slot() {
    let redis = Redis::start().await;
    let up = Upstream::start().await;
    let limits = "limits:\n  api: {scope: tenant, default: {capacity: 1, rate: 1/h}}";
    let yaml = config(&redis, &up, 3, "30s", limits).yaml().replace(
        "concurrency: uploads, max_body",
        "concurrency: uploads, limits: [api], max_body",
    );
    let gw = Gateway::start_hs256(&yaml, GatewayOptions::default()).await;
    let first = upload_in_background(&gw, "?sleep_ms=1000");
    assert!(eventually(Duration::from_secs(5), || async { held(&redis) == 1 }).await);
    let r = upload(&gw, "", b"y".to_vec()).await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["ratelimit-policy"], r#""api";q=1;w=3600"#);
    assert_eq!(held(&redis), 1, "the refused request took a slot");
    assert_eq!(first.await.unwrap().unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_hangs_up_mid_upload_frees_its_slot() {
    use tokio::io::AsyncWriteExt;
    let redis = Redis::start().await;
    let up = Upstream::start().await;
    let gw = config(&redis, &up, 1, "30s", "").start().await;
    let mut stream = tokio::net::TcpStream::connect(gw.listen).await.unwrap();
    let head = format!(
        "POST /v1/attachments HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {}\r\nContent-Length: 10000000\r\n\r\n",
        token("acme")
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&[b'x'; 65536]).await.unwrap();
    assert!(eventually(Duration::from_secs(5), || async { held(&redis) == 1 }).await);
    assert_eq!(upload(&gw, "", b"y".to_vec()).await.status(), 429);
    drop(stream);
    let hung_up = Instant::now();
    let admitted = eventually(Duration::from_secs(1), || async {
        upload(&gw, "", b"y".to_vec()).await.status() == 200
    })
    .await;
    assert!(admitted, "no upload admitted within 1 s of the hang-up");
    assert!(hung_up.elapsed() < Duration::from_secs(2));
    let m = gw.metrics().await;
    assert_eq!(
        metric(
            &m,
            r#"fairgate_slots_released_total{policy="uploads",reason="client_abort"}"#
        ),
        Some(1.0),
        "{m}"
    );
    // A hang-up is the client's doing: one access-log line says so (written
    // once Redis answered the release), and no ERROR line is logged for it.
    let is_aborted = |l: &serde_json::Value| l["target"] == "access" && l["status"] == 0;
    let logged = eventually(Duration::from_secs(1), || async {
        gw.log_lines().iter().any(is_aborted)
    })
    .await;
    assert!(logged, "{}", gw.logs());
    let lines = gw.log_lines();
    let aborted: Vec<_> = lines.iter().filter(|l| is_aborted(l)).collect();
    assert_eq!(aborted.len(), 1, "{}", gw.logs());
    assert_eq!(aborted[0]["path"], "/v1/attachments");
    assert_eq!(aborted[0]["error"], "ConnectionClosed", "{}", gw.logs());
    assert!(lines.iter().all(|l| l["level"] != "ERROR"), "{}", gw.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn leases_of_a_killed_gateway_expire() {
    let redis = Redis::start().await;
    let up = Upstream::start().await;
    let policy = config(&redis, &up, 3, "2s", "");
    let (doomed, survivor) = (policy.start().await, policy.start().await);
    let mut uploads = Vec::new();
    for _ in 0..3 {
        uploads.push(upload_in_background(&doomed, "?sleep_ms=20000"));
    }
    assert!(eventually(Duration::from_secs(5), || async { held(&redis) == 3 }).await);
    doomed.signal(libc::SIGKILL);
    let killed = Instant::now();
    assert_eq!(upload(&survivor, "", b"y".to_vec()).await.status(), 429);
    let admitted = eventually(Duration::from_secs(6), || async {
        upload(&survivor, "", b"y".to_vec()).await.status() == 200
    })
    .await;
    assert!(admitted, "leases never expired");
    // Renewed every lease/3 until the kill, so they lived at least 2/3 of the lease.
    assert!(
        killed.elapsed() >= Duration::from_millis(1300),
        "{:?}",
        killed.elapsed()
    );
    for u in uploads {
        assert!(
            u.await.unwrap().is_err(),
            "the killed gateway's uploads failed"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_upload_keeps_its_slot_by_renewal() {
    let redis = Redis::start().await;
    let up = Upstream::start().await;
    let gw = config(&redis, &up, 1, "1s", "").start().await;
    let long = upload_in_background(&gw, "?sleep_ms=3500");
    assert!(eventually(Duration::from_secs(5), || async { held(&redis) == 1 }).await);
    let started = Instant::now();
    let mut refused = 0;
    while started.elapsed() < Duration::from_millis(3000) {
        assert_eq!(upload(&gw, "", b"y".to_vec()).await.status(), 429);
        refused += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(refused >= 8);
    assert_eq!(long.await.unwrap().unwrap().status(), 200);
    assert_eq!(max_in_flight(&up), 1);
    // The lease is released as the response completes.
    let admitted = eventually(Duration::from_secs(1), || async {
        upload(&gw, "", b"y".to_vec()).await.status() == 200
    })
    .await;
    assert!(admitted);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gigabyte_upload_streams_in_bounded_memory() {
    let redis = Redis::start().await;
    let up = Upstream::start().await;
    let gw = config(&redis, &up, 1, "30s", "").start().await;
    // The process's own size (a debug binary, its runtime, the first
    // exchange's buffers) is its peak before the upload; the upload may add
    // only buffers, not its body.
    assert_eq!(upload(&gw, "", b"warm".to_vec()).await.status(), 200);
    // The warm-up's lease is released in the logging phase, one Redis round
    // trip after its response went out: wait for it, or the single slot may
    // still be held when the upload asks.
    assert!(eventually(Duration::from_secs(1), || async { held(&redis) == 0 }).await);
    let before = gw.peak_rss_kib();
    let r = client()
        .post(gw.url("/v1/attachments"))
        .bearer_auth(token("acme"))
        .header("content-length", GIB.to_string())
        .body(gib_body())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["body_bytes"], GIB);
    let peak = gw.peak_rss_kib();
    println!(
        "1 GiB upload through a slot route: gateway peak RSS {before} KiB before, {peak} KiB after"
    );
    assert!(
        peak - before < 32 * 1024,
        "gateway peak RSS {before} -> {peak} KiB"
    );
    assert!(eventually(Duration::from_secs(1), || async { held(&redis) == 0 }).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_releases_every_lease() {
    let redis = Redis::start().await;
    let up = Upstream::start().await;
    let mut gw = config(&redis, &up, 3, "30s", "").start().await;
    for _ in 0..3 {
        upload_in_background(&gw, "?sleep_ms=30000");
    }
    assert!(eventually(Duration::from_secs(5), || async { held(&redis) == 3 }).await);
    gw.signal(libc::SIGTERM);
    let status = gw.wait_exit(Duration::from_secs(5)).await.expect("exited");
    assert_eq!(status.code(), Some(0));
    assert_eq!(held(&redis), 0, "leases left behind after SIGTERM");
    assert_eq!(redis.cli(&["EXISTS", SET]).trim(), "0");
}
