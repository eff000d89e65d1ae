//! Request mirroring (`routes[].mirror`, ingress-nginx's `mirror-target`):
//! the copy reaches the mirror as sent (method, path and query, the
//! client's headers, the body unless `body: false`, the `Host` asked for),
//! the client gets the primary's answer whatever the mirror does, and a
//! dead mirror is counted, never felt.

use crate::common;

use std::time::Duration;

use common::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_copy_of_each_request_reaches_the_mirror_and_never_the_client() {
    let primary = Upstream::start().await;
    let shadow = RawUpstream::start().await;
    let gw = Policy::new()
        .sections(&format!(
            r#"
upstreams:
  api: {{targets: ["{}"]}}
  shadow: {{targets: ["{}"]}}
  dead: {{targets: ["127.0.0.1:9"]}}
routes:
  - {{name: m, match: {{path_prefix: /m}}, upstream: api, auth: none, exempt: true, mirror: {{upstream: shadow, host: shadow.test}}}}
  - {{name: headless, match: {{path_prefix: /headless}}, upstream: api, auth: none, exempt: true, mirror: {{upstream: shadow, body: false}}}}
  - {{name: dead, match: {{path_prefix: /dead}}, upstream: api, auth: none, exempt: true, mirror: {{upstream: dead}}}}
"#,
            primary.addr, shadow.addr
        ))
        .start()
        .await;
    let c = client();
    let r = c
        .post(gw.url("/m/orders?page=2"))
        .header("x-trace", "abc")
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["path"], "/m/orders", "the primary answers: {body}");
    assert!(eventually(Duration::from_secs(5), || async { shadow.count() == 1 }).await);
    let copy = shadow.received()[0].clone();
    assert_eq!(copy.request_line(), "POST /m/orders?page=2 HTTP/1.1");
    let headers = copy.headers();
    let header = |n: &str| {
        headers
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(header("host"), Some("shadow.test"));
    assert_eq!(header("x-trace"), Some("abc"));
    assert_eq!(copy.body_bytes, 5);

    let r = c
        .post(gw.url("/headless"))
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(eventually(Duration::from_secs(5), || async { shadow.count() == 2 }).await);
    assert_eq!(shadow.received()[1].body_bytes, 0);

    // A mirror that refuses: the client is served all the same.
    for _ in 0..3 {
        let r = c.get(gw.url("/dead")).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    let failed = "fairgate_mirror_requests_total{outcome=\"failed\",route=\"dead\"} 3";
    assert!(
        eventually(Duration::from_secs(10), || async {
            gw.metrics().await.contains(failed)
        })
        .await,
        "{}",
        gw.metrics().await
    );
    let sent = "fairgate_mirror_requests_total{outcome=\"sent\",route=\"m\"} 1";
    assert!(gw.metrics().await.contains(sent));
}

/// A mirror whose target leads back to the gateway (a tenant's Service
/// whose endpoint is a gateway pod): the copy comes back marked and is not
/// copied again, so one request makes one copy, not a loop.
#[tokio::test(flavor = "multi_thread")]
async fn a_mirror_that_leads_back_to_the_gateway_copies_once() {
    let primary = Upstream::start().await;
    let gw = Policy::new()
        .sections(&format!(
            r#"
upstreams:
  api: {{targets: ["{}"]}}
  back: {{targets: ["$LISTEN"]}}
routes:
  - {{name: loop, match: {{path_prefix: /loop}}, upstream: api, auth: none, exempt: true, mirror: {{upstream: back}}}}
"#,
            primary.addr
        ))
        .start()
        .await;
    let r = client().get(gw.url("/loop/x")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    // The request and its copy (which the gateway forwards as any other).
    assert!(eventually(Duration::from_secs(5), || async { primary.requests() == 2 }).await);
    // Absence cannot be polled for: a loop would make a copy each exchange
    // (about a millisecond); in a second none came.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(primary.requests(), 2);
}
