//! A real Prometheus (Debian's `prometheus` package) scraping gateways'
//! admin listeners every second, and its query API: what an operator's
//! dashboards and alerts read. Ended by PID when dropped.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

pub struct Prometheus {
    child: Child,
    pub addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts it scraping `targets` (admin listeners) as job `fairgate`,
    /// and waits until it is ready.
    pub async fn start(targets: &[SocketAddr]) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let targets: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
        let config = format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             scrape_configs:\n  - job_name: fairgate\n    honor_labels: true\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        );
        let file = dir.path().join("prometheus.yml");
        std::fs::write(&file, config).unwrap();
        let addr = super::free_addr();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus is needed: apt-get install prometheus (scripts/deps does)");
        let p = Prometheus {
            child,
            addr,
            _dir: dir,
        };
        let url = format!("http://{addr}/-/ready");
        let ready = super::eventually(Duration::from_secs(30), || {
            let url = url.clone();
            async move {
                let r = super::client().get(url).send().await;
                r.is_ok_and(|r| r.status() == 200)
            }
        })
        .await;
        assert!(ready, "prometheus on {addr} never became ready");
        p
    }

    /// The result of an instant query: its series (empty when none).
    pub async fn query(&self, expr: &str) -> Vec<Value> {
        let url = format!("http://{}/api/v1/query", self.addr);
        let r = super::client()
            .get(url)
            .query(&[("query", expr)])
            .send()
            .await
            .unwrap_or_else(|e| panic!("prometheus query {expr}: {e}"));
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["status"], "success", "{expr}: {body}");
        body["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The targets' health as Prometheus sees them (`up`), by instance.
    pub async fn up(&self) -> Vec<(String, f64)> {
        self.query("up")
            .await
            .iter()
            .map(|s| {
                let instance = s["metric"]["instance"].as_str().unwrap_or("").to_string();
                let value = s["value"][1].as_str().unwrap_or("0").parse().unwrap_or(0.0);
                (instance, value)
            })
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
