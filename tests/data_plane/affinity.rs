//! Cookie affinity (`upstreams.<name>.affinity`), as ingress-nginx's
//! `affinity: cookie` users rely on it: the first answer sets a cookie
//! naming its target, every later request carrying it reaches that target,
//! a value the gateway did not hand out names nothing, a gone target's
//! clients move (at once with `change_on_failure`), and replicas sharing
//! `FAIRGATE_AFFINITY_KEY` honour each other's cookies. Against real echo
//! processes, each answering with its pod name.

use crate::common;

use common::*;

/// Two echo pods on loopback addresses of their own, named `a` and `b`.
fn pods() -> [EchoProcess; 2] {
    [
        EchoProcess::start_as([127, 6, 0, 1], "a", "shop"),
        EchoProcess::start_as([127, 6, 0, 2], "b", "shop"),
    ]
}

fn policy(pods: &[EchoProcess; 2], affinity: &str) -> Policy {
    Policy::new().sections(&format!(
        r#"
upstreams:
  web: {{targets: ["{}", "{}"], affinity: {{{affinity}}}, passive_health: {{failures: 2, cooldown: 60s}}, health_check: false}}
routes:
  - {{name: web, match: {{path_prefix: /}}, upstream: web, auth: none, exempt: true, retries: {{attempts: 2}}}}
"#,
        pods[0].addr, pods[1].addr
    ))
}

/// One GET with `cookie` (if any): the status, the pod that answered (""
/// for none) and the `Set-Cookie` the answer carries.
async fn get(gw: &Gateway, cookie: Option<&str>) -> (u16, String, Option<String>) {
    let mut request = client().get(gw.url("/cart"));
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    let r = request.send().await.unwrap();
    let status = r.status().as_u16();
    let set = r
        .headers()
        .get("set-cookie")
        .map(|v| v.to_str().unwrap().to_string());
    let body: serde_json::Value = r.json().await.unwrap_or_default();
    (status, body["pod"].as_str().unwrap_or("").to_string(), set)
}

/// `NAME=VALUE` of a `Set-Cookie`.
fn pair(set: &str) -> String {
    set.split(';').next().unwrap().to_string()
}

/// The first answer sets the cookie with exactly the attributes asked for;
/// twenty requests with it reach the same pod and set nothing; sixteen new
/// clients reach both pods; a forged value names nothing (a new cookie is
/// set, valid from then on).
#[tokio::test(flavor = "multi_thread")]
async fn a_client_keeps_its_pod_and_cannot_pick_another() {
    let pods = pods();
    let gw = policy(&pods, "cookie: route, max_age: 1h, same_site: lax")
        .start()
        .await;
    let (status, first, set) = get(&gw, None).await;
    assert_eq!(status, 200);
    let set = set.expect("the first answer sets the cookie");
    let value = pair(&set).strip_prefix("route=").unwrap().to_string();
    assert_eq!(value.len(), 32, "{set}");
    assert!(value.bytes().all(|b| b.is_ascii_hexdigit()), "{set}");
    assert_eq!(
        set,
        format!("route={value}; Path=/; Max-Age=3600; HttpOnly; SameSite=Lax")
    );
    let cookie = format!("theme=dark; route={value}");
    for _ in 0..20 {
        assert_eq!(get(&gw, Some(&cookie)).await, (200, first.clone(), None));
    }
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..16 {
        let (_, pod, set) = get(&gw, None).await;
        assert!(set.is_some());
        seen.insert(pod);
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
    // A value of the right shape that was never handed out: balanced as a
    // new client, with a cookie of its own.
    let forged = format!("route={}", "0".repeat(32));
    let (status, _, set) = get(&gw, Some(&forged)).await;
    assert_eq!(status, 200);
    let renewed = pair(&set.expect("a forged value is replaced"));
    assert_ne!(renewed, forged);
    let pod = get(&gw, Some(&renewed)).await.1;
    assert_eq!(get(&gw, Some(&renewed)).await, (200, pod, None));
}

/// A pod gone, on a route that retries once: with `change_on_failure` the
/// retry goes to the other pod and the answer moves the client there;
/// without, the retry goes to its pod again and fails (as ingress-nginx's
/// does), which takes the pod out (two failures in a row), and the next
/// request moves.
#[tokio::test(flavor = "multi_thread")]
async fn a_gone_pods_clients_move_to_another() {
    for change in [true, false] {
        let [a, b] = pods();
        let pods = [a, b];
        let affinity = format!("cookie: sid, change_on_failure: {change}");
        let gw = policy(&pods, &affinity).start().await;
        // Round robin: one of two new clients lands on `a`.
        let mut cookie = String::new();
        for _ in 0..2 {
            let (_, pod, set) = get(&gw, None).await;
            if pod == "a" {
                cookie = pair(&set.unwrap());
            }
        }
        assert!(!cookie.is_empty());
        let [a, b] = pods;
        drop(a);
        let (status, pod, set) = get(&gw, Some(&cookie)).await;
        if !change {
            assert_eq!((status, set), (502, None));
            let (status, pod, set) = get(&gw, Some(&cookie)).await;
            assert_eq!((status, pod.as_str()), (200, "b"));
            assert!(set.is_some_and(|s| pair(&s) != cookie));
        } else {
            assert_eq!((status, pod.as_str()), (200, "b"), "change_on_failure");
            let moved = pair(&set.expect("the new pod's cookie"));
            assert_ne!(moved, cookie);
            assert_eq!(get(&gw, Some(&moved)).await, (200, "b".into(), None));
        }
        drop(b);
    }
}

/// Two replicas with the same `FAIRGATE_AFFINITY_KEY` honour each other's
/// cookies; a replica with another key does not (the value names nothing
/// there, and it sets its own).
#[tokio::test(flavor = "multi_thread")]
async fn replicas_sharing_the_key_honour_each_others_cookies() {
    let pods = pods();
    let key = "9c1f0e7d2b4a68350f1e2d3c4b5a6978";
    let start = |key: &str| policy(&pods, "cookie: route").env("FAIRGATE_AFFINITY_KEY", key);
    let (one, two) = (start(key).start().await, start(key).start().await);
    let other = start("another-key-0123456789abcdef0123456789")
        .start()
        .await;
    for _ in 0..4 {
        let (_, pod, set) = get(&one, None).await;
        let cookie = pair(&set.unwrap());
        for _ in 0..5 {
            assert_eq!(get(&two, Some(&cookie)).await, (200, pod.clone(), None));
        }
        let (status, _, set) = get(&other, Some(&cookie)).await;
        assert_eq!(status, 200);
        assert!(set.is_some_and(|s| pair(&s) != cookie));
    }
}

/// The cookie goes on the answer, not on a `100 Continue` before it; of
/// two cookies of the name (a stale one of a parent path first, as
/// browsers order them), the one naming a target is read.
#[tokio::test(flavor = "multi_thread")]
async fn the_cookie_survives_continue_and_stale_twins() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let pods = pods();
    let gw = policy(&pods, "cookie: sid, change_on_failure: true")
        .start()
        .await;
    let mut s = tokio::net::TcpStream::connect(gw.listen).await.unwrap();
    s.write_all(b"POST /cart HTTP/1.1\r\nHost: shop\r\nContent-Length: 5\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        s.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap().to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 100 continue\r\n"), "{head}");
    assert!(!head.contains("set-cookie"), "{head}");
    s.write_all(b"hello").await.unwrap();
    let mut rest = String::new();
    s.read_to_string(&mut rest).await.unwrap();
    let rest = rest.to_ascii_lowercase();
    assert!(rest.starts_with("http/1.1 200"), "{rest}");
    assert_eq!(rest.matches("set-cookie: sid=").count(), 1, "{rest}");
    // A stale value first, the real one second: the real one is read.
    let (_, pod, set) = get(&gw, None).await;
    let real = pair(&set.unwrap());
    let twins = format!("sid={}; {real}", "f".repeat(32));
    for _ in 0..6 {
        assert_eq!(get(&gw, Some(&twins)).await, (200, pod.clone(), None));
    }
}
