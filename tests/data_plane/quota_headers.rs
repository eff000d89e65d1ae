//! The quota headers as the IETF draft (draft-ietf-httpapi-ratelimit-headers)
//! has them, read back with a structured-fields parser (RFC 8941):
//! `RateLimit-Policy` lists every policy of the route, the same on every
//! response; `RateLimit` reports the one closest to refusing; an upstream's
//! own members are kept, not overwritten.

use crate::common;

use common::*;
use sfv::{BareItem, ListEntry, Parser};

/// An upstream that reports a quota of its own.
async fn quota_upstream() -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = s.read(&mut buf).await {
                    head.extend_from_slice(&buf[..n]);
                    while let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                        head.drain(..end + 4);
                        let answer = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\
                             RateLimit-Policy: \"daily\";q=1000;w=86400\r\n\
                             RateLimit: \"daily\";r=998;t=3600\r\n\r\nok";
                        if s.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

/// (name, parameters as text) of every member of a List field.
fn members(value: &str) -> Vec<(String, Vec<(String, i64)>)> {
    let list = Parser::parse_list(value.as_bytes()).unwrap_or_else(|e| panic!("{value:?}: {e}"));
    list.into_iter()
        .map(|entry| match entry {
            ListEntry::Item(item) => {
                let name = match item.bare_item {
                    BareItem::String(s) => s,
                    other => panic!("a policy name is a String, not {other:?}"),
                };
                let params = item
                    .params
                    .into_iter()
                    .map(|(k, v)| (k, v.as_int().expect("an Integer parameter")))
                    .collect();
                (name, params)
            }
            ListEntry::InnerList(_) => panic!("{value:?}: an inner list"),
        })
        .collect()
}

fn p(items: &[(&str, i64)]) -> Vec<(String, i64)> {
    items.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_policy_is_listed_and_the_upstreams_members_are_kept() {
    let (theirs, echo) = (quota_upstream().await, Upstream::start().await);
    let gw = Policy::new()
        .hs256()
        .sections(&format!(
            r#"
upstreams: {{theirs: {{targets: ["{theirs}"]}}, echo: {{targets: ["{}"]}}}}
limits:
  api: {{scope: tenant, default: {{capacity: 10, rate: 10/m}}}}
  auth: {{scope: tenant_user, default: {{capacity: 3, rate: 1/h}}}}
routes:
  - {{name: theirs, match: {{path_prefix: /theirs}}, upstream: theirs, limits: [api, auth]}}
  - {{name: ours, match: {{path_prefix: /ours}}, upstream: echo, limits: [api, auth]}}
"#,
            echo.addr
        ))
        .start()
        .await;
    let t = token("acme");
    let get = |path: &'static str| {
        let req = client().get(gw.url(path)).bearer_auth(&t);
        async move { req.send().await.unwrap() }
    };
    let header = |r: &reqwest::Response, name: &str| {
        let all: Vec<&str> = r
            .headers()
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(all.len(), 1, "{name}: one field line");
        all[0].to_string()
    };
    let ours = [
        ("api".to_string(), p(&[("q", 10), ("w", 60)])),
        ("auth".to_string(), p(&[("q", 3), ("w", 10800)])),
    ];
    // Through an upstream with a quota of its own: its member first, then
    // every policy of the route; RateLimit: its member and the tightest.
    let r = get("/theirs").await;
    assert_eq!(r.status(), 200);
    let policy = header(&r, "ratelimit-policy");
    let mut want = vec![("daily".to_string(), p(&[("q", 1000), ("w", 86400)]))];
    want.extend(ours.clone());
    assert_eq!(members(&policy), want);
    assert_eq!(
        members(&header(&r, "ratelimit")),
        [
            ("daily".to_string(), p(&[("r", 998), ("t", 3600)])),
            ("auth".to_string(), p(&[("r", 2), ("t", 3600)])),
        ]
    );
    // The policy is the same on the next response.
    let r = get("/theirs").await;
    assert_eq!(header(&r, "ratelimit-policy"), policy);
    // Without the upstream's: the route's policies alone, also on the
    // gateway's own 429 once auth is spent.
    let r = get("/ours").await;
    assert_eq!(r.status(), 200);
    assert_eq!(members(&header(&r, "ratelimit-policy")), ours);
    assert_eq!(
        members(&header(&r, "ratelimit")),
        [("auth".to_string(), p(&[("r", 0), ("t", 10800)]))]
    );
    let r = get("/ours").await;
    assert_eq!(r.status(), 429);
    assert_eq!(members(&header(&r, "ratelimit-policy")), ours);
    assert_eq!(members(&header(&r, "ratelimit"))[0].0, "auth");
}
