//! Upstreams: fairgate's echo server, and a raw one that records every
//! request head byte for byte.

use super::*;

/// The echo upstream, serving on the test's runtime.
pub struct Upstream {
    pub addr: SocketAddr,
    pub stats: Arc<Stats>,
}

impl Upstream {
    pub async fn start() -> Upstream {
        let stats = Arc::new(Stats::default());
        let addr = fairgate::echo::serve("127.0.0.1:0".parse().unwrap(), stats.clone())
            .await
            .expect("start echo upstream");
        Upstream { addr, stats }
    }

    pub fn requests(&self) -> u64 {
        self.stats
            .requests
            .load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A peer process the test started, serving until dropped (then ended by
/// PID), and the first line it printed (its address, as each says it).
pub struct Peer {
    child: Child,
    pub first_line: String,
}

impl Peer {
    /// Spawns `cmd` and waits for its first line on stdout.
    pub fn spawn(cmd: &mut Command, install_hint: &str) -> Peer {
        use std::io::BufRead;
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{e}: {install_hint}"));
        let mut first_line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first_line)
            .expect("read the peer's first line");
        Peer { child, first_line }
    }

    /// The port of a first line `listening on [ADDR:]PORT`.
    pub fn listening_port(&self) -> u16 {
        self.first_line
            .trim()
            .strip_prefix("listening on ")
            .and_then(|a| a.rsplit(':').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the peer printed {:?}", self.first_line))
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The echo upstream as a process of its own (`fairgate echo`), as the pods
/// behind a Service are: counted by asking it.
pub struct EchoProcess {
    pub addr: SocketAddr,
    _peer: Peer,
}

impl EchoProcess {
    pub fn start() -> EchoProcess {
        Self::start_on([127, 0, 0, 1])
    }

    /// On a loopback address of its own (a pod's IP).
    pub fn start_on(ip: [u8; 4]) -> EchoProcess {
        Self::start_as(ip, "", "")
    }

    /// As pod `pod` of namespace `namespace`, which its answers name (the
    /// Gateway API conformance suite's echo backend does so).
    pub fn start_as(ip: [u8; 4], pod: &str, namespace: &str) -> EchoProcess {
        Self::start_at(SocketAddr::from((ip, 0)), pod, namespace)
    }

    /// As `start_as`, on `addr`'s port too (port 0: a free one): the pods
    /// of one Deployment share a port, each on its own address.
    pub fn start_at(addr: SocketAddr, pod: &str, namespace: &str) -> EchoProcess {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fairgate"));
        let (ip, listen) = (addr.ip(), addr.to_string());
        cmd.args(["echo", "--listen", &listen, "--record"]);
        cmd.env("POD_NAME", pod).env("NAMESPACE", namespace);
        let peer = Peer::spawn(&mut cmd, "the fairgate binary");
        EchoProcess {
            addr: SocketAddr::from((ip, peer.listening_port())),
            _peer: peer,
        }
    }

    /// Requests this process has answered (`/__echo/stats` is not counted).
    pub fn requests(&self) -> u64 {
        self.stats()["requests"].as_u64().expect("a request count")
    }

    /// Its `/__echo/stats`: `requests`, `in_flight`, `max_in_flight`.
    pub fn stats(&self) -> serde_json::Value {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(self.addr).expect("reach the echo process");
        s.write_all(b"GET /__echo/stats HTTP/1.0\r\nHost: echo\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        serde_json::from_str(body).expect("stats JSON")
    }
}

/// The files of a directory served over plain HTTP by Python's
/// `http.server` (a JWKS endpoint, say).
pub struct StaticFiles {
    pub addr: SocketAddr,
    _peer: Peer,
}

impl StaticFiles {
    pub fn start(dir: &Path) -> StaticFiles {
        let mut cmd = Command::new("python3");
        cmd.args([
            "-u",
            "-m",
            "http.server",
            "0",
            "--bind",
            "127.0.0.1",
            "--directory",
        ])
        .arg(dir);
        let peer = Peer::spawn(&mut cmd, "python3 is needed: apt-get install python3");
        // "Serving HTTP on 127.0.0.1 port 40123 (http://127.0.0.1:40123/) ..."
        let port: u16 = peer
            .first_line
            .split(" port ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("http.server printed {:?}", peer.first_line));
        StaticFiles {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            _peer: peer,
        }
    }
}

/// What a raw upstream received: the request head exactly as sent, and
/// how many body bytes followed it.
#[derive(Debug, Clone)]
pub struct Received {
    pub head: String,
    pub body_bytes: usize,
}

impl Received {
    /// `GET /x?y HTTP/1.1`
    pub fn request_line(&self) -> &str {
        self.head.lines().next().unwrap_or("")
    }

    /// The request target as sent.
    pub fn target(&self) -> &str {
        self.request_line().split(' ').nth(1).unwrap_or("")
    }

    /// The path as a WSGI or Go upstream routes it: percent-decoded.
    pub fn decoded_path(&self) -> String {
        let path = self.target().split('?').next().unwrap_or("");
        let mut out = Vec::new();
        let b = path.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'%' && i + 2 < b.len() + 1 {
                if let Some(v) = path
                    .get(i + 1..i + 3)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    out.push(v);
                    i += 3;
                    continue;
                }
            }
            out.push(b[i]);
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Header lines as (name, value), names as sent.
    pub fn headers(&self) -> Vec<(String, String)> {
        self.head
            .lines()
            .skip(1)
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.to_string(), v.trim().to_string()))
            .collect()
    }

    /// Every value of a header, matched as CGI/WSGI match names: case
    /// insensitive, `_` and `-` alike (`X_Tenant_Id` is `HTTP_X_TENANT_ID`).
    pub fn cgi_header(&self, name: &str) -> Vec<String> {
        let cgi = |n: &str| n.to_ascii_uppercase().replace('-', "_");
        self.headers()
            .into_iter()
            .filter(|(n, _)| cgi(n) == cgi(name))
            .map(|(_, v)| v)
            .collect()
    }
}

/// An upstream that records every request head byte for byte and answers
/// `200 ok`; it reads bodies framed by one Content-Length or chunked.
pub struct RawUpstream {
    pub addr: SocketAddr,
    pub received: Arc<std::sync::Mutex<Vec<Received>>>,
}

impl RawUpstream {
    pub async fn start() -> RawUpstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = received.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let log = log.clone();
                tokio::spawn(async move {
                    let _ = Self::serve(stream, log).await;
                });
            }
        });
        RawUpstream { addr, received }
    }

    async fn serve(
        stream: tokio::net::TcpStream,
        log: Arc<std::sync::Mutex<Vec<Received>>>,
    ) -> std::io::Result<()> {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
        let mut stream = BufReader::new(stream);
        loop {
            let mut head = String::new();
            loop {
                let mut line = String::new();
                if stream.read_line(&mut line).await? == 0 {
                    return Ok(());
                }
                head.push_str(&line);
                if line == "\r\n" || line == "\n" {
                    break;
                }
            }
            let lower = head.to_ascii_lowercase();
            let length = lower
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            let chunked = lower.contains("transfer-encoding: chunked");
            let mut body_bytes = 0;
            if let Some(n) = length {
                let mut body = vec![0; n];
                stream.read_exact(&mut body).await?;
                body_bytes = n;
            } else if chunked {
                loop {
                    let mut size = String::new();
                    stream.read_line(&mut size).await?;
                    let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
                    let mut chunk = vec![0; n + 2];
                    stream.read_exact(&mut chunk).await?;
                    body_bytes += n;
                    if n == 0 {
                        break;
                    }
                }
            }
            log.lock().unwrap().push(Received {
                head: head.trim_end().to_string(),
                body_bytes,
            });
            stream
                .get_mut()
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await?;
        }
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.received.lock().unwrap().len()
    }
}

/// A target that answers every request 503, and how many it answered.
pub async fn unavailable() -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicU64>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while s.read(&mut buf).await.is_ok_and(|n| n > 0) {
                    counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let answer =
                        b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\n\r\nbusy";
                    if s.write_all(answer).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    (addr, count)
}

/// A WebSocket echo server on loopback: its address.
pub async fn websocket_echo() -> SocketAddr {
    use futures_util::{SinkExt, StreamExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    if msg.is_text() && ws.send(msg).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}
