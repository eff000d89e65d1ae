//! The gateway binary under test: a config written to a temporary
//! directory, the process, its logs and its metrics; the HS256 secret and
//! token every suite shares.

use super::*;

/// The HS256 secret of every suite's `auth` key (kid `t`), given to the
/// gateway as `FAIRGATE_TEST_JWT`.
pub const TEST_SECRET: &str = "fairgate-test-suite-secret-0123456789";

/// The `auth` section every suite uses: one HS256 key, kid `t`.
pub const AUTH_HS256: &str = "auth:\n  keys: [{kid: t, alg: HS256, secret_env: FAIRGATE_TEST_JWT}]";

/// A token of `tenant` (user `u`) that `AUTH_HS256` accepts.
pub fn token(tenant: &str) -> String {
    hs256_token(TEST_SECRET, serde_json::json!({"tid": tenant, "sub": "u"}))
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
    /// Starts `yaml` with `FAIRGATE_TEST_JWT` set, so `AUTH_HS256` loads.
    pub async fn start_hs256(yaml: &str, mut options: GatewayOptions) -> Gateway {
        options
            .env
            .push(("FAIRGATE_TEST_JWT".into(), TEST_SECRET.into()));
        Self::start_with(yaml, options).await
    }

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

    /// Waits up to 30 s for `/readyz` to answer 200; fails at once if the
    /// process exits first.
    pub async fn wait_ready(&mut self) {
        let url = format!("http://{}/readyz", self.admin);
        let c = client();
        let (child, log) = (self.child.as_mut().unwrap(), &self.log);
        let ready = eventually(Duration::from_secs(30), || {
            if let Some(status) = child.try_wait().unwrap() {
                let logs = std::fs::read_to_string(log).unwrap_or_default();
                panic!("gateway exited with {status} before ready:\n{logs}");
            }
            let request = c.get(&url).send();
            async move { request.await.is_ok_and(|r| r.status() == 200) }
        })
        .await;
        assert!(ready, "gateway not ready in 30 s:\n{}", self.logs());
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
        let child = self.child.as_mut().unwrap();
        let mut status = None;
        eventually(within, || {
            status = child.try_wait().unwrap();
            let exited = status.is_some();
            async move { exited }
        })
        .await;
        status
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

/// How many requests a memory-bound test sends: `full` with
/// `FAIRGATE_FULL=1` (the documented full run), `ci` otherwise. The bound
/// a test asserts is the same per request either way.
pub fn requests(ci: usize, full: usize) -> usize {
    match std::env::var("FAIRGATE_FULL").as_deref() {
        Ok("1") => full,
        _ => ci,
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
