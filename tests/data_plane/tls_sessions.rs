//! Session resumption at the TLS edge, as returning clients see it: 1,000
//! distinct clients (OpenSSL, through Python's `ssl`) each make a request
//! with a full handshake, then each comes back with the session it was
//! given: every one resumes (session tickets), over TLS 1.3 and TLS 1.2,
//! however many other clients came between.

use crate::common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::Value;

const PEER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/tls_resume.py");

fn returning_clients(tls: SocketAddr, ca: &Path, n: usize, version: &str) -> Value {
    let out = Command::new("python3")
        .args([PEER, "127.0.0.1", &tls.port().to_string(), "api.test"])
        .arg(ca)
        .args([&n.to_string(), version])
        .output()
        .expect("python3 (apt-get install python3)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

async fn gateway(tls: SocketAddr, cert: &Path, key: &Path, echo: &Upstream) -> Gateway {
    Policy::new()
        .server(&format!(
            "tls: {{listen: \"{tls}\", certificates: [{{cert_file: \"{}\", key_file: \"{}\"}}]}}",
            cert.display(),
            key.display()
        ))
        .catch_all(echo.addr)
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_returning_clients_all_resume_their_sessions() {
    let echo = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "sessions");
    let (cert, key) = pki.leaf("api", "api", &["api.test"], "0B01");
    let tls = free_addr();
    let gw = gateway(tls, &cert, &key, &echo).await;

    let v13 = returning_clients(tls, &pki.ca(), 1000, "1.3");
    assert_eq!(
        (
            v13["full"].as_u64(),
            v13["resumed"].as_u64(),
            v13["version"].as_str()
        ),
        (Some(1000), Some(1000), Some("TLSv1.3")),
        "{v13}"
    );
    let v12 = returning_clients(tls, &pki.ca(), 200, "1.2");
    assert_eq!(
        (
            v12["full"].as_u64(),
            v12["resumed"].as_u64(),
            v12["version"].as_str()
        ),
        (Some(200), Some(200), Some("TLSv1.2")),
        "{v12}"
    );
    drop(gw);
}
