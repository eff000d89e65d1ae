//! Response compression (`server.compression`, `routes[].compression`),
//! judged by what a client gets: the coding it asked for (q values read,
//! the gateway's order among those it accepts), the same bytes once curl
//! decodes them, `Vary` and a weakened `ETag`; and the answers that must
//! pass untouched (other types, short, already encoded, `no-transform`,
//! `HEAD`, `206`, a route that says no) byte for byte.

use crate::common;

use std::net::SocketAddr;

use common::*;

/// 96 KiB of HTML-ish text that compresses well but not trivially.
fn page() -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0u64;
    while out.len() < 96 * 1024 {
        out.extend(format!("<li id=\"item-{i}\">Item {i}: {}</li>\n", i * 7919 % 1000).as_bytes());
        i += 1;
    }
    out
}

/// An upstream answering by path: `/html` (Content-Length, a strong ETag),
/// `/chunked` (the page in 4 KiB chunks), `/png`, `/short`, `/encoded`
/// (already gzip), `/no-transform`, `/partial` (206).
async fn scripted() -> SocketAddr {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut stream = BufReader::new(stream);
                loop {
                    let mut line = String::new();
                    if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split(' ').nth(1).unwrap_or("/").to_string();
                    while line != "\r\n" {
                        line.clear();
                        if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                    }
                    if path == "/events" {
                        // One event, then the stream stays open.
                        let head = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n";
                        let event = b"data: hello\n\n";
                        let chunk =
                            [format!("{:x}\r\n", event.len()).as_bytes(), event, b"\r\n"].concat();
                        let _ = stream
                            .get_mut()
                            .write_all(&[head.as_slice(), &chunk].concat())
                            .await;
                        tokio::time::sleep(std::time::Duration::from_secs(30)).await;
                        return;
                    }
                    let answer = answer(&path);
                    if stream.get_mut().write_all(&answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn answer(path: &str) -> Vec<u8> {
    let body = page();
    let fixed = |status: &str, headers: &str, body: &[u8]| {
        let head = format!(
            "HTTP/1.1 {status}\r\n{headers}content-length: {}\r\n\r\n",
            body.len()
        );
        [head.as_bytes(), body].concat()
    };
    match path {
        "/html" | "/off" => fixed(
            "200 OK",
            "content-type: text/html; charset=utf-8\r\netag: \"v1\"\r\n",
            &body,
        ),
        "/chunked" => {
            let mut out = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
            for chunk in body.chunks(4096) {
                out.extend(format!("{:x}\r\n", chunk.len()).as_bytes());
                out.extend(chunk);
                out.extend(b"\r\n");
            }
            out.extend(b"0\r\n\r\n");
            out
        }
        "/png" => fixed("200 OK", "content-type: image/png\r\n", &body),
        "/created" => fixed("201 Created", "content-type: text/html\r\n", &body),
        "/identity" => fixed(
            "200 OK",
            "content-type: text/html\r\ncontent-encoding: identity\r\n",
            &body,
        ),
        "/short" => fixed("200 OK", "content-type: text/plain\r\n", &body[..100]),
        "/encoded" => fixed(
            "200 OK",
            "content-type: text/html\r\ncontent-encoding: gzip\r\n",
            b"\x1f\x8b not really gzip",
        ),
        "/no-transform" => fixed(
            "200 OK",
            "content-type: text/html\r\ncache-control: public, no-transform\r\n",
            &body,
        ),
        _ => fixed(
            "206 Partial Content",
            "content-type: text/html\r\ncontent-range: bytes 0-999/98304\r\n",
            &body[..1000],
        ),
    }
}

async fn gateway(codings: &str) -> Gateway {
    let up = scripted().await;
    Policy::new()
        .server(&format!("compression: {{algorithms: {codings}, min_length: 1KiB}}"))
        .sections(&format!(
            r#"
upstreams: {{site: {{targets: ["{up}"]}}}}
routes:
  - {{name: off, match: {{path_prefix: /off}}, upstream: site, auth: none, exempt: true, compression: false}}
  - {{name: site, match: {{path_prefix: /}}, upstream: site, auth: none, exempt: true}}
"#
        ))
        .start()
        .await
}

/// The headers (lower-case names) and the body bytes as they came, for
/// `method` with `accept` as `Accept-Encoding` (none: not sent).
async fn raw(
    gw: &Gateway,
    method: &str,
    path: &str,
    accept: Option<&str>,
) -> (Vec<(String, String)>, Vec<u8>) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = client().request(method, gw.url(path));
    if let Some(accept) = accept {
        request = request.header("accept-encoding", accept);
    }
    let r = request.send().await.unwrap();
    let headers = r
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().to_string(), v.to_str().unwrap().to_string()))
        .collect();
    (headers, r.bytes().await.unwrap().to_vec())
}

fn get<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// The body curl gets for `path` asking for `accept`, decoded by curl.
fn decoded(gw: &Gateway, path: &str, accept: &str) -> Vec<u8> {
    let out = std::process::Command::new("curl")
        .args([
            "-sS",
            "--compressed",
            "-H",
            &format!("accept-encoding: {accept}"),
            &gw.url(path),
        ])
        .output()
        .expect("curl is needed: apt-get install curl (scripts/deps does)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Each client gets the gateway's first coding among those it accepts
/// (`br;q=0` refuses br), its body decodes to the upstream's bytes, and
/// it is under half of them; the answer says `Vary: Accept-Encoding`,
/// has no length, and its strong ETag became weak. Without an accepted
/// coding the answer is the upstream's, but for `Vary`.
#[tokio::test(flavor = "multi_thread")]
async fn each_client_gets_the_first_coding_it_accepts() {
    let gw = gateway("[br, zstd, gzip]").await;
    let page = page();
    for (accept, coding) in [
        (Some("gzip"), Some("gzip")),
        (Some("gzip, deflate, br, zstd"), Some("br")),
        (Some("zstd, gzip"), Some("zstd")),
        (Some("br;q=0, gzip;q=0.5"), Some("gzip")),
        (Some("*"), Some("br")),
        (Some("deflate, identity"), None),
        (None, None),
    ] {
        for path in ["/html", "/chunked"] {
            let (headers, body) = raw(&gw, "GET", path, accept).await;
            let what = format!("{path} {accept:?}");
            assert_eq!(get(&headers, "content-encoding"), coding, "{what}");
            assert_eq!(get(&headers, "vary"), Some("Accept-Encoding"), "{what}");
            match coding {
                Some(_) => {
                    assert!(body.len() < page.len() / 2, "{what}: {} bytes", body.len());
                    assert_eq!(get(&headers, "content-length"), None, "{what}");
                    let accept = accept.unwrap();
                    assert!(
                        decoded(&gw, path, accept) == page,
                        "{what}: decodes to other bytes"
                    );
                }
                None => assert!(body == page, "{what}: not the upstream's bytes"),
            }
            if path == "/html" {
                let etag = if coding.is_some() {
                    "W/\"v1\""
                } else {
                    "\"v1\""
                };
                assert_eq!(get(&headers, "etag"), Some(etag), "{what}");
            }
        }
    }
}

/// Answers that must not be compressed pass exactly as the upstream sent
/// them to a client that accepts every coding: another type, shorter than
/// `min_length`, already encoded, `no-transform`, partial, a `201` (nginx
/// compresses 200, 403 and 404), bodiless, and any answer on a route with
/// `compression: false`.
#[tokio::test(flavor = "multi_thread")]
async fn what_must_not_be_compressed_passes_untouched() {
    let gw = gateway("[gzip]").await;
    for (method, path) in [
        ("GET", "/png"),
        ("GET", "/short"),
        ("GET", "/encoded"),
        ("GET", "/no-transform"),
        ("GET", "/partial"),
        ("GET", "/created"),
        ("HEAD", "/html"),
        ("GET", "/off"),
    ] {
        let (headers, body) = raw(&gw, method, path, Some("gzip, br, zstd")).await;
        let expected = answer(path);
        let upstream_body =
            &expected[expected.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4..];
        let what = format!("{method} {path}");
        let coding = if path == "/encoded" {
            Some("gzip")
        } else {
            None
        };
        assert_eq!(get(&headers, "content-encoding"), coding, "{what}");
        if method == "GET" {
            assert!(body == upstream_body, "{what}: changed");
            let length = upstream_body.len().to_string();
            assert_eq!(
                get(&headers, "content-length"),
                Some(length.as_str()),
                "{what}"
            );
        }
    }
}

/// Each piece the upstream sends is flushed at once: a client reading an
/// event stream of a compressed type gets the first event, decodable,
/// while the stream stays open. An `identity` coding is no coding.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_is_flushed_piece_by_piece() {
    use std::io::Write;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let gw = gateway("[gzip]").await;
    let mut s = tokio::net::TcpStream::connect(gw.listen).await.unwrap();
    s.write_all(b"GET /events HTTP/1.1\r\nHost: site\r\nAccept-Encoding: gzip\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut decoded = flate2::write::GzDecoder::new(Vec::new());
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !String::from_utf8_lossy(decoded.get_ref()).contains("data: hello") {
        let mut buf = [0u8; 4096];
        let n = tokio::time::timeout_at(deadline, s.read(&mut buf))
            .await
            .expect("the first event within 10 s")
            .unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
        let Some(at) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&got[..at]).to_ascii_lowercase();
        assert!(head.contains("content-encoding: gzip"), "{head}");
        // The body so far, unchunked.
        let mut body = Vec::new();
        let mut rest = &got[at + 4..];
        while let Some(line) = rest.windows(2).position(|w| w == b"\r\n") {
            let size =
                usize::from_str_radix(std::str::from_utf8(&rest[..line]).unwrap(), 16).unwrap();
            if rest.len() < line + 2 + size + 2 {
                break;
            }
            body.extend_from_slice(&rest[line + 2..line + 2 + size]);
            rest = &rest[line + 2 + size + 2..];
        }
        decoded = flate2::write::GzDecoder::new(Vec::new());
        decoded.write_all(&body).unwrap();
        decoded.flush().unwrap();
    }
    let (headers, body) = raw(&gw, "GET", "/identity", Some("gzip")).await;
    assert_eq!(get(&headers, "content-encoding"), Some("gzip"));
    assert!(body.len() < page().len() / 2);
}

/// An HTTP/1.0 client cannot take a chunked answer: it gets the
/// upstream's bytes as they are.
#[tokio::test(flavor = "multi_thread")]
async fn an_http_1_0_client_gets_the_answer_uncompressed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let gw = gateway("[gzip]").await;
    let mut s = tokio::net::TcpStream::connect(gw.listen).await.unwrap();
    s.write_all(b"GET /html HTTP/1.0\r\nHost: site\r\nAccept-Encoding: gzip\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).await.unwrap();
    let at = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&got[..at]).to_ascii_lowercase();
    assert!(!head.contains("content-encoding"), "{head}");
    assert!(got[at + 4..] == page()[..], "the upstream's bytes");
}
