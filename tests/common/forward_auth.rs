//! A forward-auth peer behaving as oauth2-proxy's `/oauth2/auth` and
//! `/oauth2/start` (`tests/peers/forward_auth.py`), and its control calls:
//! sessions, the sign-in user, the behaviour mode, the count and the last
//! auth call it received. Plain HTTP, or HTTPS with a certificate of the
//! test's own. Ended by PID when dropped.

use super::upstream::Peer;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct ForwardAuth {
    peer: Peer,
    pub port: u16,
    /// Over HTTPS: the CA its certificate (for `localhost`) chains to.
    ca: Option<PathBuf>,
}

impl ForwardAuth {
    /// Starts the peer; `/oauth2/start` accepts an `rd` only on these hosts
    /// (exact names, no port).
    pub fn start(allow_hosts: &[&str]) -> ForwardAuth {
        Self::spawn(allow_hosts, None)
    }

    /// Starts the peer over HTTPS with `cert` and `key` (PEM, a
    /// certificate for `localhost` signed by `ca`).
    pub fn start_tls(cert: &Path, key: &Path, ca: &Path) -> ForwardAuth {
        Self::spawn(&[], Some((cert, key, ca)))
    }

    fn spawn(allow_hosts: &[&str], tls: Option<(&Path, &Path, &Path)>) -> ForwardAuth {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/forward_auth.py");
        let mut cmd = Command::new("python3");
        cmd.arg("-u").arg(script);
        for host in allow_hosts {
            cmd.arg("--allow-host").arg(host);
        }
        if let Some((cert, key, _)) = tls {
            cmd.arg("--tls-cert").arg(cert).arg("--tls-key").arg(key);
        }
        let peer = Peer::spawn(
            &mut cmd,
            "python3 is needed: apt-get install python3 (scripts/deps does)",
        );
        let port = peer.listening_port();
        let ca = tls.map(|(_, _, ca)| ca.to_path_buf());
        ForwardAuth { peer, port, ca }
    }

    fn url(&self, path: &str) -> String {
        match self.ca {
            Some(_) => format!("https://localhost:{}{path}", self.port),
            None => format!("http://127.0.0.1:{}{path}", self.port),
        }
    }

    /// `http://127.0.0.1:PORT/oauth2/auth`, the auth check.
    pub fn auth_url(&self) -> String {
        self.url("/oauth2/auth")
    }

    /// `http://127.0.0.1:PORT/oauth2/start`, the sign-in.
    pub fn signin_url(&self) -> String {
        self.url("/oauth2/start")
    }

    /// Sends a control call and asserts a 2xx; the JSON it answered.
    async fn control(&self, post: bool, path: &str, query: &[(&str, &str)]) -> serde_json::Value {
        let mut client = reqwest::Client::builder()
            .no_proxy()
            .timeout(std::time::Duration::from_secs(30));
        if let Some(ca) = &self.ca {
            let pem = std::fs::read(ca).unwrap();
            client = client.add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap());
        }
        let client = client.build().unwrap();
        let url = self.url(path);
        let request = if post {
            client.post(&url)
        } else {
            client.get(&url)
        };
        let response = request
            .query(query)
            .send()
            .await
            .unwrap_or_else(|e| panic!("forward-auth peer {path}: {e}"));
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        assert!(
            status.is_success(),
            "forward-auth peer {path} {query:?} answered {status}: {body}"
        );
        serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("forward-auth peer {path} answered {body:?}: {e}"))
    }

    /// Registers session `id` (the cookie's value, or a bearer token).
    pub async fn session(&self, id: &str, user: &str, email: &str, groups: &str) {
        let query = [
            ("id", id),
            ("user", user),
            ("email", email),
            ("groups", groups),
        ];
        self.control(true, "/control/session", &query).await;
    }

    /// Registers session `id`, whose auth checks also answer a `Set-Cookie`
    /// with the same session (oauth2-proxy refreshing it).
    pub async fn session_refreshing(&self, id: &str, user: &str, email: &str, groups: &str) {
        let query = [
            ("id", id),
            ("user", user),
            ("email", email),
            ("groups", groups),
            ("refresh", "1"),
        ];
        self.control(true, "/control/session", &query).await;
    }

    /// The session `/oauth2/start` sets in its cookie.
    pub async fn signin_user(&self, session: &str) {
        self.control(true, "/control/signin-user", &[("session", session)])
            .await;
    }

    /// `ok`, `slow` (`ms` milliseconds before each auth answer), `error`
    /// (500) or `refuse` (403 for everyone).
    pub async fn mode(&self, mode: &str, ms: u64) {
        let ms = ms.to_string();
        self.control(true, "/control/mode", &[("m", mode), ("ms", &ms)])
            .await;
    }

    /// Calls to `/oauth2/auth` since the start or the last `reset`.
    pub async fn calls(&self) -> u64 {
        let answer = self.control(false, "/control/calls", &[]).await;
        answer["calls"]
            .as_u64()
            .unwrap_or_else(|| panic!("forward-auth peer calls: {answer}"))
    }

    /// Zeroes the count of auth calls.
    pub async fn reset(&self) {
        self.control(true, "/control/reset", &[]).await;
    }

    /// The last auth call's request line and headers (names as received,
    /// in order).
    pub async fn last(&self) -> (String, Vec<(String, String)>) {
        let answer = self.control(false, "/control/last", &[]).await;
        let request_line = answer["request_line"]
            .as_str()
            .unwrap_or_else(|| panic!("forward-auth peer last: {answer}"))
            .to_string();
        let headers = answer["headers"]
            .as_array()
            .unwrap_or_else(|| panic!("forward-auth peer last: {answer}"))
            .iter()
            .map(|h| {
                let name = h[0].as_str().unwrap_or_default().to_string();
                let value = h[1].as_str().unwrap_or_default().to_string();
                (name, value)
            })
            .collect();
        (request_line, headers)
    }
}
