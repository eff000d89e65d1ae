//! PROXY protocol v1 and v2 on the listener, through the real gateway with
//! headers written byte by byte: the carried address is the client's for
//! `X-Forwarded-For` and `client_ip` limits; only trusted proxies may send
//! it, and a connection without it is dropped before any HTTP.

use crate::common;

use common::*;

async fn gateway(up: &RawUpstream, trusted: &str) -> Gateway {
    Policy::new()
        .server(&format!(
            "threads: 1\nproxy_protocol: true\ntrusted_proxies: [{trusted}]"
        ))
        .sections(&format!(
            r#"
upstreams: {{app: {{targets: ["{}"]}}}}
default_limits:
  unauthenticated: {{scope: client_ip, capacity: 1, rate: 1/h}}
routes:
  - {{name: open, match: {{path_prefix: /}}, upstream: app, auth: none}}
"#,
            up.addr
        ))
        .start()
        .await
}

const GET: &[u8] = b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";

fn v1(client: &str) -> Vec<u8> {
    let mut bytes = format!("PROXY TCP4 {client} 127.0.0.1 40000 80\r\n").into_bytes();
    bytes.extend_from_slice(GET);
    bytes
}

fn v2(client: [u8; 4]) -> Vec<u8> {
    let mut bytes = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    bytes.extend([0x21, 0x11, 0, 12]);
    bytes.extend(client);
    bytes.extend([127, 0, 0, 1, 0x9c, 0x40, 0, 80]);
    bytes.extend_from_slice(GET);
    bytes
}

async fn send(gw: &Gateway, bytes: &[u8]) -> String {
    raw_http_from("127.0.0.1".parse().unwrap(), gw.listen, bytes).await
}

#[tokio::test]
async fn the_carried_address_is_the_client() {
    let up = RawUpstream::start().await;
    let gw = gateway(&up, "127.0.0.1/32").await;
    assert_eq!(status_of(&send(&gw, &v1("203.0.113.7")).await), 200);
    assert_eq!(status_of(&send(&gw, &v2([198, 51, 100, 9])).await), 200);
    let got = up.received();
    assert_eq!(got[0].cgi_header("X-Forwarded-For"), ["203.0.113.7"]);
    assert_eq!(got[1].cgi_header("X-Forwarded-For"), ["198.51.100.9"]);
    // One bucket per carried address (capacity 1), not per proxy.
    assert_eq!(status_of(&send(&gw, &v1("203.0.113.7")).await), 429);
    assert_eq!(status_of(&send(&gw, &v2([198, 51, 100, 9])).await), 429);
    assert_eq!(status_of(&send(&gw, &v1("203.0.113.8")).await), 200);
    let access: Vec<String> = gw
        .log_lines()
        .iter()
        .filter(|l| l["target"] == "access")
        .map(|l| l["client"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        access,
        [
            "203.0.113.7",
            "198.51.100.9",
            "203.0.113.7",
            "198.51.100.9",
            "203.0.113.8"
        ]
    );
}

#[tokio::test]
async fn no_header_or_an_untrusted_proxy_is_dropped() {
    let up = RawUpstream::start().await;
    let gw = gateway(&up, "127.0.0.1/32").await;
    assert_eq!(
        send(&gw, GET).await,
        "",
        "no PROXY header: closed, no answer"
    );
    assert_eq!(send(&gw, b"PROXY TCP4 nonsense\r\n").await, "");
    drop(gw);
    let gw = gateway(&up, "127.0.0.2/32").await;
    assert_eq!(
        send(&gw, &v1("203.0.113.7")).await,
        "",
        "127.0.0.1 is not trusted"
    );
    let trusted = raw_http_from("127.0.0.2".parse().unwrap(), gw.listen, &v1("203.0.113.9")).await;
    assert_eq!(status_of(&trusted), 200, "{trusted}");
    assert_eq!(up.count(), 1);
    assert_eq!(
        up.received()[0].cgi_header("X-Forwarded-For"),
        ["203.0.113.9"]
    );
}
