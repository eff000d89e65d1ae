//! The test harness: real processes on ephemeral loopback ports. An echo
//! upstream (fairgate's own `echo` module), the gateway binary with a config
//! written to a temporary directory, and `redis-server`. Everything started
//! here is ended by PID when its handle drops.

#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use fairgate::echo::Stats;

/// A loopback address with a free port, never the same twice in one test
/// process. Ports come from 10000-19999, below the kernel's ephemeral range
/// (so no client socket of a parallel test is handed the same port), and a
/// Redis Cluster node's bus port (+10000) stays below it too.
pub fn free_addr() -> SocketAddr {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const FIRST: u32 = 10_000;
    const SPAN: u32 = 10_000;
    let start = std::process::id() % SPAN;
    for _ in 0..SPAN {
        let port = FIRST + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % SPAN;
        let addr = SocketAddr::from(([127, 0, 0, 1], port as u16));
        // Both the port and its cluster bus port must be free now.
        let bus = SocketAddr::from(([127, 0, 0, 1], (port + 10_000) as u16));
        if TcpListener::bind(addr).is_ok() && TcpListener::bind(bus).is_ok() {
            return addr;
        }
    }
    panic!("no free loopback port in {FIRST}..{}", FIRST + SPAN)
}

/// Polls `cond` every 20 ms until it holds or `within` passes.
pub async fn eventually<F, Fut>(within: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if cond().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

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

/// A plain HTTP client that never uses a proxy from the environment.
pub const GIB: u64 = 1 << 30;

/// A 1 GiB request body, streamed in 1 MiB chunks.
pub fn gib_body() -> reqwest::Body {
    let chunk = bytes::Bytes::from(vec![b'u'; 1 << 20]);
    let chunks = (0..GIB >> 20).map(move |_| Ok::<_, std::io::Error>(chunk.clone()));
    reqwest::Body::wrap_stream(futures_util::stream::iter(chunks))
}

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

/// The gateway binary running one config.
pub struct Gateway {
    child: Option<Child>,
    pub listen: SocketAddr,
    pub admin: SocketAddr,
    pub dir: tempfile::TempDir,
    pub log: PathBuf,
}

pub struct GatewayOptions {
    pub env: Vec<(String, String)>,
    /// Wait for `/readyz` before returning.
    pub wait_ready: bool,
    /// Lay the config out as a Kubernetes ConfigMap volume does:
    /// `fairgate.yaml -> ..data/fairgate.yaml`, `..data -> ..v1/`.
    pub configmap: bool,
}

impl Default for GatewayOptions {
    fn default() -> Self {
        GatewayOptions {
            env: Vec::new(),
            wait_ready: true,
            configmap: false,
        }
    }
}

/// How a new config reaches the file.
#[derive(Clone, Copy, Debug)]
pub enum Write {
    /// Truncate and write the same file.
    InPlace,
    /// Write a temporary file, then rename it over (editors, `sed -i`).
    RenameOver,
    /// A new `..vN` directory and an atomic `..data` symlink swap (kubelet).
    ConfigMapSwap,
}

impl Gateway {
    /// Starts the gateway with `yaml`, where `$LISTEN`, `$ADMIN` and `$DIR`
    /// are replaced by a free proxy address, a free admin address and the
    /// config's directory.
    pub async fn start(yaml: &str) -> Gateway {
        Self::start_with(yaml, GatewayOptions::default()).await
    }

    pub async fn start_with(yaml: &str, options: GatewayOptions) -> Gateway {
        let dir = tempfile::tempdir().expect("temp dir");
        let listen = free_addr();
        let admin = free_addr();
        let text = yaml
            .replace("$LISTEN", &listen.to_string())
            .replace("$ADMIN", &admin.to_string())
            .replace("$DIR", &dir.path().display().to_string());
        let config = dir.path().join("fairgate.yaml");
        if options.configmap {
            let v1 = dir.path().join("..v1");
            std::fs::create_dir(&v1).unwrap();
            std::fs::write(v1.join("fairgate.yaml"), text).expect("write config");
            std::os::unix::fs::symlink("..v1", dir.path().join("..data")).unwrap();
            std::os::unix::fs::symlink("..data/fairgate.yaml", &config).unwrap();
        } else {
            std::fs::write(&config, text).expect("write config");
        }
        let log = dir.path().join("gateway.log");
        let mut gw = Gateway {
            child: None,
            listen,
            admin,
            dir,
            log,
        };
        gw.spawn(&options);
        if options.wait_ready {
            gw.wait_ready().await;
        }
        gw
    }

    fn spawn(&mut self, options: &GatewayOptions) {
        let out = std::fs::File::create(&self.log).expect("log file");
        let err = out.try_clone().expect("log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fairgate"));
        cmd.arg("serve")
            .arg("-c")
            .arg(self.config_path())
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        for (k, v) in &options.env {
            cmd.env(k, v);
        }
        self.child = Some(cmd.spawn().expect("spawn the fairgate binary"));
    }

    pub async fn wait_ready(&mut self) {
        let url = format!("http://{}/readyz", self.admin);
        let c = client();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = c.get(&url).send().await {
                if r.status() == 200 {
                    return;
                }
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "gateway exited with {status} before ready:\n{}",
                    self.logs()
                );
            }
            assert!(
                Instant::now() < deadline,
                "gateway not ready in 30 s:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("fairgate.yaml")
    }

    /// Replaces the config (placeholders as in `start`) the way `how` says.
    pub fn write_config(&self, yaml: &str, how: Write) {
        let text = yaml
            .replace("$LISTEN", &self.listen.to_string())
            .replace("$ADMIN", &self.admin.to_string())
            .replace("$DIR", &self.dir.path().display().to_string());
        let dir = self.dir.path();
        match how {
            Write::InPlace => std::fs::write(self.config_path(), text).unwrap(),
            Write::RenameOver => {
                let tmp = dir.join(".fairgate.yaml.swp");
                std::fs::write(&tmp, text).unwrap();
                std::fs::rename(tmp, self.config_path()).unwrap();
            }
            Write::ConfigMapSwap => {
                let n = std::fs::read_dir(dir).unwrap().count();
                let version = format!("..v{n}");
                std::fs::create_dir(dir.join(&version)).unwrap();
                std::fs::write(dir.join(&version).join("fairgate.yaml"), text).unwrap();
                let tmp = dir.join("..data_tmp");
                std::os::unix::fs::symlink(&version, &tmp).unwrap();
                std::fs::rename(tmp, dir.join("..data")).unwrap();
            }
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.listen, path)
    }

    /// The status of a GET without credentials.
    pub async fn status(&self, path: &str) -> u16 {
        client()
            .get(self.url(path))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{}", self.admin, path)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The gateway's log lines, parsed as JSON; non-JSON lines are skipped.
    pub fn log_lines(&self) -> Vec<serde_json::Value> {
        self.logs()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Peak resident memory (VmHWM) in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        proc_status_kib(self.pid(), "VmHWM:")
    }

    pub fn signal(&self, signal: i32) {
        let rc = unsafe { libc::kill(self.pid() as i32, signal) };
        assert_eq!(rc, 0, "kill({}) failed", self.pid());
    }

    /// Waits up to `within` for the process to exit.
    pub async fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Body of `GET /metrics` on the admin listener.
    pub async fn metrics(&self) -> String {
        self.admin_text("/metrics").await
    }

    /// Body of a `GET` on the admin listener.
    pub async fn admin_text(&self, path: &str) -> String {
        let r = client().get(self.admin_url(path)).send().await.unwrap();
        r.text().await.unwrap()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let logs = self.logs();
            let tail: Vec<&str> = logs.lines().rev().take(40).collect();
            let status = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            eprintln!(
                "--- gateway {} (exit: {status:?}), last log lines:\n{}",
                self.listen,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn proc_status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .expect("field in /proc status")
}

/// A value from a metrics text: the sample whose name and labels start with `prefix`.
pub fn metric(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The sum of every sample whose name and labels start with `prefix`.
pub fn metric_sum(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `redis-server` on a free loopback port, with persistence off.
pub struct Redis {
    child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

pub fn redis_server_binary() -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("redis-server"))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "redis-server not found on PATH. These tests need a real Redis: \
             install it with `apt-get install -y redis-server` (Debian/Ubuntu)"
        )
    })
}

impl Redis {
    pub async fn start() -> Redis {
        Self::start_with(&[]).await
    }

    pub async fn start_with(extra: &[&str]) -> Redis {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_addr().port();
        let child = Self::spawn(dir.path(), port, extra);
        let redis = Redis { child, port, dir };
        redis.wait_up().await;
        redis
    }

    fn spawn(dir: &Path, port: u16, extra: &[&str]) -> Child {
        let mut cmd = Command::new(redis_server_binary());
        cmd.args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--dir", &dir.display().to_string()])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd.spawn().expect("spawn redis-server")
    }

    /// Starts on a given port (e.g. one a gateway already points at).
    pub async fn start_on(port: u16, extra: &[&str]) -> Redis {
        let dir = tempfile::tempdir().expect("temp dir");
        let child = Self::spawn(dir.path(), port, extra);
        let redis = Redis { child, port, dir };
        redis.wait_up().await;
        redis
    }

    /// SIGKILL: the server vanishes with everything it held.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// A new, empty server on the same port (no scripts, no keys).
    pub async fn restart(&mut self, extra: &[&str]) {
        self.kill();
        self.child = Self::spawn(self.dir.path(), self.port, extra);
        self.wait_up().await;
    }

    pub fn pause(&self) {
        unsafe { libc::kill(self.pid() as i32, libc::SIGSTOP) };
    }

    pub fn resume(&self) {
        unsafe { libc::kill(self.pid() as i32, libc::SIGCONT) };
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub async fn wait_up(&self) {
        let port = self.port;
        let up = eventually(Duration::from_secs(10), || async move {
            // NOAUTH: up, and protected by a password.
            redis_cli(port, &["PING"]).is_some_and(|o| o.trim() == "PONG" || o.contains("NOAUTH"))
        })
        .await;
        assert!(up, "redis-server on port {port} did not answer PING");
    }

    /// Runs one command with `redis-cli` and returns its stdout.
    pub fn cli(&self, args: &[&str]) -> String {
        redis_cli(self.port, args).expect("redis-cli")
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn redis_cli(port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
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

/// A 3-master Redis Cluster (no replicas) on free loopback ports.
pub struct Cluster {
    pub nodes: Vec<Redis>,
}

impl Cluster {
    pub async fn start() -> Cluster {
        let mut nodes = Vec::new();
        for _ in 0..3 {
            nodes.push(
                Redis::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "5000",
                ])
                .await,
            );
        }
        let mut args = vec!["--cluster".to_string(), "create".to_string()];
        args.extend(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)));
        args.extend(["--cluster-replicas", "0", "--cluster-yes"].map(String::from));
        let out = Command::new("redis-cli")
            .args(&args)
            .output()
            .expect("redis-cli --cluster create (install redis-tools)");
        assert!(
            out.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = Cluster { nodes };
        let ports: Vec<u16> = cluster.nodes.iter().map(|n| n.port).collect();
        let ok = eventually(Duration::from_secs(20), || {
            let ports = ports.clone();
            async move {
                ports.iter().all(|p| {
                    redis_cli(*p, &["CLUSTER", "INFO"]).is_some_and(|i| {
                        i.contains("cluster_state:ok") && i.contains("cluster_slots_assigned:16384")
                    })
                })
            }
        })
        .await;
        assert!(ok, "the cluster did not reach cluster_state:ok");
        cluster
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}", n.port))
            .collect()
    }
}

/// Keys on one node (SCAN, so it is safe on a live server).
pub fn scan_keys(port: u16) -> Vec<String> {
    let mut keys = Vec::new();
    let mut cursor = "0".to_string();
    loop {
        let out = redis_cli(port, &["SCAN", &cursor, "COUNT", "1000"]).expect("SCAN");
        let mut lines = out.lines();
        cursor = lines.next().unwrap_or("0").to_string();
        keys.extend(lines.filter(|l| !l.is_empty()).map(str::to_string));
        if cursor == "0" {
            return keys;
        }
    }
}

/// Calls of one command from `INFO commandstats` (e.g. `evalsha`).
pub fn command_calls(port: u16, command: &str) -> u64 {
    command_stat(port, command, "calls")
}

/// Calls of one command that failed (e.g. EVALSHA answered NOSCRIPT).
pub fn command_failures(port: u16, command: &str) -> u64 {
    command_stat(port, command, "failed_calls")
}

fn command_stat(port: u16, command: &str, field: &str) -> u64 {
    let info = redis_cli(port, &["INFO", "commandstats"]).expect("INFO");
    let prefix = format!("cmdstat_{command}:");
    info.lines()
        .find_map(|l| l.trim().strip_prefix(&prefix))
        .and_then(|rest| {
            rest.split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{field}=")))
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
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
