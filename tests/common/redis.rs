//! Real Redis: a `redis-server`, a 3-master Cluster and a Sentinel group
//! (master, replica, three sentinels) on free loopback ports, and looking
//! inside them (keys, command statistics, roles).

use super::*;

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
        let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
        create_cluster(&[], &ports, 0);
        let cluster = Cluster { nodes };
        let ok = eventually(Duration::from_secs(20), || {
            let ports = ports.clone();
            async move {
                ports
                    .iter()
                    .all(|p| serves_every_slot(redis_cli(*p, &["CLUSTER", "INFO"])))
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

/// `redis-sentinel` (Debian's `redis-sentinel` package; the same binary as
/// `redis-server`, started in Sentinel mode).
pub fn redis_sentinel_binary() -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("redis-sentinel"))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "redis-sentinel not found on PATH. The Sentinel tests run real sentinels: \
             install them with `apt-get install -y redis-sentinel` (Debian/Ubuntu), \
             or run scripts/deps"
        )
    })
}

/// A Redis Sentinel group on loopback: one master, one replica of it, and
/// three sentinels monitoring it under `name` with quorum 2, quick to call
/// the master down (500 ms) and to fail over.
pub struct SentinelGroup {
    pub name: String,
    /// `requirepass` of the master and the replica, when started with one.
    pub password: Option<String>,
    pub master: Redis,
    pub replica: Redis,
    pub sentinels: Vec<SentinelProcess>,
}

/// One `redis-sentinel` process; killed by PID when dropped.
pub struct SentinelProcess {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl SentinelProcess {
    fn start(name: &str, master_port: u16, password: Option<&str>) -> SentinelProcess {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_addr().port();
        // Sentinel rewrites its config file, so it lives in a writable temp dir.
        let conf = dir.path().join("sentinel.conf");
        let text = format!(
            "port {port}\nbind 127.0.0.1\ndir {dir}\n\
             sentinel monitor {name} 127.0.0.1 {master_port} 2\n\
             sentinel down-after-milliseconds {name} 500\n\
             sentinel failover-timeout {name} 5000\n\
             sentinel parallel-syncs {name} 1\n{auth}",
            dir = dir.path().display(),
            auth = password
                .map(|p| format!("sentinel auth-pass {name} {p}\n"))
                .unwrap_or_default()
        );
        std::fs::write(&conf, text).expect("write sentinel.conf");
        let child = Command::new(redis_sentinel_binary())
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-sentinel");
        SentinelProcess {
            child,
            port,
            _dir: dir,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `SENTINEL MASTER name` as field → value.
    pub fn master_info(&self, name: &str) -> std::collections::HashMap<String, String> {
        let out = redis_cli(self.port, &["SENTINEL", "MASTER", name]).unwrap_or_default();
        let lines: Vec<&str> = out.lines().collect();
        lines
            .chunks(2)
            .filter_map(|kv| Some((kv[0].to_string(), kv.get(1)?.to_string())))
            .collect()
    }

    /// The port this sentinel names for the master now.
    pub fn master_port(&self, name: &str) -> Option<u16> {
        let out = redis_cli(self.port, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", name])?;
        out.lines().nth(1)?.trim().parse().ok()
    }
}

impl SentinelGroup {
    /// Starts the group and returns once replication is up and every
    /// sentinel knows the replica and the two other sentinels (without
    /// that, a failover cannot reach its quorum or elect a leader).
    pub async fn start(name: &str) -> SentinelGroup {
        Self::start_with_password(name, None).await
    }

    /// As `start`, with `requirepass` (and `masterauth`) on both data nodes
    /// and `auth-pass` in the sentinels when `password` is given.
    pub async fn start_with_password(name: &str, password: Option<&str>) -> SentinelGroup {
        let auth: Vec<&str> = match password {
            Some(p) => vec!["--requirepass", p, "--masterauth", p],
            None => Vec::new(),
        };
        let master = Redis::start_with(&auth).await;
        let port = master.port.to_string();
        let replica =
            Redis::start_with(&[&["--replicaof", "127.0.0.1", &port], &auth[..]].concat()).await;
        let linked = eventually(Duration::from_secs(20), || async {
            data_cli(replica.port, password, &["INFO", "replication"])
                .is_some_and(|i| i.contains("master_link_status:up"))
        })
        .await;
        assert!(linked, "the replica did not sync with the master");
        let sentinels: Vec<SentinelProcess> = (0..3)
            .map(|_| SentinelProcess::start(name, master.port, password))
            .collect();
        let group = SentinelGroup {
            name: name.to_string(),
            password: password.map(str::to_string),
            master,
            replica,
            sentinels,
        };
        // Sentinels find each other through hello messages every 2 s.
        let ready = eventually(Duration::from_secs(30), || async {
            group.sentinels.iter().all(|s| {
                let info = s.master_info(&group.name);
                info.get("num-slaves").map(String::as_str) == Some("1")
                    && info.get("num-other-sentinels").map(String::as_str) == Some("2")
            })
        })
        .await;
        assert!(
            ready,
            "the sentinels did not discover the replica and each other"
        );
        group
    }

    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(SentinelProcess::url).collect()
    }

    /// Whether every sentinel names `port` as the master and that server
    /// says it is one.
    pub fn master_is(&self, port: u16) -> bool {
        self.sentinels
            .iter()
            .all(|s| s.master_port(&self.name) == Some(port))
            && data_cli(port, self.password.as_deref(), &["ROLE"])
                .is_some_and(|r| r.lines().next() == Some("master"))
    }
}

/// `redis-cli` on a data node, authenticated when it has a password.
pub fn data_cli(port: u16, password: Option<&str>, args: &[&str]) -> Option<String> {
    match password {
        Some(p) => redis_cli(port, &[&["-a", p, "--no-auth-warning"], args].concat()),
        None => redis_cli(port, args),
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

/// `redis-server` serving TLS only (`--port 0`): `cert`/`key` from a test
/// CA, and with `client_ca` it asks clients for a certificate signed by it
/// (`--tls-auth-clients yes`). Looked into with `redis-cli --tls`.
pub struct TlsRedis {
    pub server: Redis,
    /// The CA `redis-cli` verifies the server with.
    pub ca: PathBuf,
    /// The pair `redis-cli` presents when clients must have one.
    client: Option<(PathBuf, PathBuf)>,
}

impl TlsRedis {
    /// TLS on a free loopback port; `client` is the CA clients must be
    /// signed by, and the pair `redis-cli` uses.
    pub async fn start(
        ca: &Path,
        cert: &Path,
        key: &Path,
        client: Option<(&Path, &Path)>,
    ) -> TlsRedis {
        Self::start_with(ca, cert, key, client, &[]).await
    }

    /// As `start`, with more `redis-server` arguments.
    pub async fn start_with(
        ca: &Path,
        cert: &Path,
        key: &Path,
        client: Option<(&Path, &Path)>,
        extra: &[&str],
    ) -> TlsRedis {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_addr().port();
        let auth_clients = if client.is_some() { "yes" } else { "no" };
        let args = [
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--tls-cert-file",
            &cert.display().to_string(),
            "--tls-key-file",
            &key.display().to_string(),
            "--tls-ca-cert-file",
            &ca.display().to_string(),
            "--tls-auth-clients",
            auth_clients,
        ]
        .map(String::from);
        let args: Vec<&str> = args
            .iter()
            .map(String::as_str)
            .chain(extra.iter().copied())
            .collect();
        let child = Redis::spawn(dir.path(), port, &args);
        let redis = TlsRedis {
            server: Redis { child, port, dir },
            ca: ca.to_path_buf(),
            client: client.map(|(c, k)| (c.to_path_buf(), k.to_path_buf())),
        };
        let up = eventually(Duration::from_secs(10), || async {
            redis.try_cli(&["PING"]).is_some_and(|o| o.trim() == "PONG")
        })
        .await;
        assert!(
            up,
            "redis-server with TLS on port {port} did not answer PING (Debian's redis-server \
             and redis-tools are built with TLS: apt-get install -y redis-server redis-tools)"
        );
        redis
    }

    pub fn port(&self) -> u16 {
        self.server.port
    }

    fn try_cli(&self, args: &[&str]) -> Option<String> {
        let mut cmd = Command::new("redis-cli");
        cmd.args(["--tls", "--cacert"]).arg(&self.ca);
        if let Some((cert, key)) = &self.client {
            cmd.arg("--cert").arg(cert).arg("--key").arg(key);
        }
        let out = cmd
            .args(["-h", "127.0.0.1", "-p", &self.port().to_string()])
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// One command through `redis-cli --tls`; its stdout.
    pub fn cli(&self, args: &[&str]) -> String {
        self.try_cli(args)
            .expect("redis-cli --tls (apt-get install -y redis-tools)")
    }
}

/// A 3-master Redis Cluster serving TLS only, its bus too (`tls-cluster`),
/// announcing its nodes by the host name `localhost`, which their
/// certificate (`cert`, from `ca`) names.
pub struct TlsCluster {
    pub nodes: Vec<TlsRedis>,
}

impl TlsCluster {
    pub async fn start(ca: &Path, cert: &Path, key: &Path) -> TlsCluster {
        let cluster_args = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "5000",
            "--tls-cluster",
            "yes",
            "--tls-replication",
            "yes",
            "--cluster-announce-hostname",
            "localhost",
            "--cluster-preferred-endpoint-type",
            "hostname",
        ];
        let mut nodes = Vec::new();
        for _ in 0..3 {
            nodes.push(TlsRedis::start_with(ca, cert, key, None, &cluster_args).await);
        }
        let tls = [
            "--tls".to_string(),
            "--cacert".to_string(),
            ca.display().to_string(),
        ];
        let ports: Vec<u16> = nodes.iter().map(|n| n.port()).collect();
        create_cluster(&tls, &ports, 0);
        let cluster = TlsCluster { nodes };
        let ok = eventually(Duration::from_secs(20), || async {
            cluster
                .nodes
                .iter()
                .all(|n| serves_every_slot(n.try_cli(&["CLUSTER", "INFO"])))
        })
        .await;
        assert!(ok, "the TLS cluster did not reach cluster_state:ok");
        cluster
    }

    /// The seed URLs, by the name the certificates carry.
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("rediss://localhost:{}", n.port()))
            .collect()
    }
}

/// `redis-cli [OPTIONS] --cluster create` over the nodes at `ports`, with
/// no replicas: every slot assigned.
/// `redis-cli --cluster create` over `ports`, `replicas` per master.
pub fn create_cluster(options: &[String], ports: &[u16], replicas: u32) {
    let mut args = options.to_vec();
    args.extend(["--cluster", "create"].map(String::from));
    args.extend(ports.iter().map(|p| format!("127.0.0.1:{p}")));
    args.extend([
        "--cluster-replicas".into(),
        replicas.to_string(),
        "--cluster-yes".into(),
    ]);
    let out = Command::new("redis-cli")
        .args(&args)
        .output()
        .expect("redis-cli --cluster create (install redis-tools)");
    assert!(
        out.status.success(),
        "cluster create failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Whether a node's `CLUSTER INFO` says the cluster serves every slot.
fn serves_every_slot(info: Option<String>) -> bool {
    info.is_some_and(|i| {
        i.contains("cluster_state:ok") && i.contains("cluster_slots_assigned:16384")
    })
}
