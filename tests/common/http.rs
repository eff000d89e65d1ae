//! Clients: reqwest without proxies, raw bytes over TCP (from a chosen
//! loopback address), tokens and large bodies.

use super::*;

/// An HS256 token with kid `t`, signed with `secret`, valid for 10 minutes;
/// `claims` are added to its `exp`.
pub fn hs256_token(secret: &str, mut claims: serde_json::Value) -> String {
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    claims["exp"] = exp.into();
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    header.kid = Some("t".into());
    jsonwebtoken::encode(
        &header,
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap()
}

pub const GIB: u64 = 1 << 30;

/// A 1 GiB request body, streamed in 1 MiB chunks.
pub fn gib_body() -> reqwest::Body {
    let chunk = bytes::Bytes::from(vec![b'u'; 1 << 20]);
    let chunks = (0..GIB >> 20).map(move |_| Ok::<_, std::io::Error>(chunk.clone()));
    reqwest::Body::wrap_stream(futures_util::stream::iter(chunks))
}

/// A plain HTTP client that never uses a proxy from the environment.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// `GET path` on the gateway with a bearer token.
pub async fn get(gw: &Gateway, path: &str, token: &str) -> reqwest::Response {
    client()
        .get(gw.url(path))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
}

/// Sends raw bytes on a new connection and returns everything read until
/// the server closes it (send `Connection: close`).
pub async fn raw_http(addr: SocketAddr, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Sends raw bytes from `source` (a loopback address) on a new connection
/// and returns everything read until the server closes it, or 10 s pass.
pub async fn raw_http_from(source: std::net::IpAddr, addr: SocketAddr, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(source, 0)).unwrap();
    let mut stream = socket.connect(addr).await.expect("connect");
    stream.write_all(request).await.expect("write");
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// The status code of a raw HTTP response (0 when there is none).
pub fn status_of(response: &str) -> u16 {
    response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}
