//! The TLS edge against real clients and servers: certificates chosen by
//! SNI (`openssl s_client`, `curl --resolve --cacert`), renewed on disk
//! while a client loops (rewritten files and a Kubernetes Secret's `..data`
//! swap), a broken renewal kept out, client certificates, TLS upstreams
//! with their own CA (`openssl s_server`), and PROXY protocol before TLS.

use crate::common;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// A gateway with a TLS listener on `tls` serving `certificates` (YAML
/// list items, from `item`) and one catch-all route to `echo`; `extra` adds
/// `server.tls` keys (indented by two spaces).
fn tls_policy(
    tls: std::net::SocketAddr,
    certificates: &str,
    extra: &str,
    echo: &Upstream,
) -> Policy {
    Policy::new()
        .server(&format!(
            "tls:\n  listen: \"{tls}\"\n  certificates:\n{certificates}\n{extra}"
        ))
        .catch_all(echo.addr)
}

/// A `certificates` item at its place under `server.tls`.
fn item(cert: &Path, key: &Path, hosts: &str) -> String {
    format!(
        "    - {{cert_file: \"{}\", key_file: \"{}\"{hosts}}}\n",
        cert.display(),
        key.display()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn certificates_are_chosen_by_sni_with_the_first_as_default() {
    let echo = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "a");
    let (api, api_key) = pki.leaf("api", "api", &["api.test", "www.api.test"], "0A01");
    let (wild, wild_key) = pki.leaf("wild", "wild", &["*.apps.test"], "0A02");
    let (other, other_key) = pki.leaf("other", "other", &["other.test"], "0A03");
    let tls = free_addr();
    let list =
        item(&api, &api_key, "") + &item(&wild, &wild_key, "") + &item(&other, &other_key, "");
    let gw = tls_policy(tls, &list, "", &echo).start().await;

    assert_eq!(served_serial(tls, Some("api.test")), "0A01");
    assert_eq!(served_serial(tls, Some("WWW.API.TEST")), "0A01");
    assert_eq!(served_serial(tls, Some("x.apps.test")), "0A02");
    assert_eq!(served_serial(tls, Some("other.test")), "0A03");
    // No SNI, or a name nobody claims: the first certificate.
    assert_eq!(served_serial(tls, None), "0A01");
    assert_eq!(served_serial(tls, Some("a.b.apps.test")), "0A01");

    // curl verifies each name against the CA, over HTTP/2 and HTTP/1.1.
    let ca = pki.ca().display().to_string();
    for (host, version) in [
        ("api.test", "--http2"),
        ("x.apps.test", "--http2"),
        ("other.test", "--http1.1"),
    ] {
        let resolve = format!("{host}:{}:127.0.0.1", tls.port());
        let url = format!("https://{host}:{}/hello", tls.port());
        let (out, code) = curl(&["--cacert", &ca, "--resolve", &resolve, version, &url]);
        assert_eq!(code, 0, "{host}: {out}");
        let last = out.lines().last().unwrap();
        let want = if version == "--http2" {
            "200 2"
        } else {
            "200 1.1"
        };
        assert_eq!(last, want, "{host}");
        let body: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
        assert_eq!(
            body["headers"]["x-forwarded-proto"],
            serde_json::json!(["https"])
        );
    }
    assert_eq!(echo.requests(), 3);

    // One expiry series per certificate, named by its first name.
    let metrics = gw.metrics().await;
    for name in ["api.test", "*.apps.test", "other.test"] {
        let series =
            format!("fairgate_tls_certificate_expiry_timestamp_seconds{{name=\"{name}\"}}");
        let at = metric(&metrics, &series).unwrap_or_else(|| panic!("{series}"));
        let days = (at - fairgate::metrics::unix_now() as f64) / 86_400.0;
        assert!((19.0..=20.1).contains(&days), "{name}: {days} days");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn hosts_lists_decide_a_name_two_certificates_claim() {
    let echo = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "a");
    let (old, old_key) = pki.leaf("old", "old", &["api.test", "old.test"], "0C01");
    let (new, new_key) = pki.leaf("new", "new", &["api.test"], "0C02");
    let tls = free_addr();
    let list = item(&old, &old_key, "") + &item(&new, &new_key, ", hosts: [api.test]");
    let _gw = tls_policy(tls, &list, "", &echo).start().await;
    assert_eq!(served_serial(tls, Some("api.test")), "0C02");
    assert_eq!(served_serial(tls, Some("old.test")), "0C01");
}

/// Requests on fresh connections, one every 10 ms, until `stop`; counts
/// answers that were not 200.
fn loop_client(
    tls: std::net::SocketAddr,
    ca: &Path,
    host: &str,
) -> (
    tokio::task::JoinHandle<(u64, u64)>,
    std::sync::Arc<AtomicU64>,
) {
    let cert = reqwest::Certificate::from_pem(&std::fs::read(ca).unwrap()).unwrap();
    let client = reqwest::Client::builder()
        .no_proxy()
        .add_root_certificate(cert)
        .resolve(host, tls)
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let url = format!("https://{host}:{}/loop", tls.port());
    let stop = std::sync::Arc::new(AtomicU64::new(0));
    let flag = stop.clone();
    let task = tokio::spawn(async move {
        let (mut ok, mut failed) = (0, 0);
        while flag.load(Ordering::SeqCst) == 0 && ok + failed < 3_000 {
            match client.get(&url).send().await {
                Ok(r) if r.status() == 200 => ok += 1,
                _ => failed += 1,
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (ok, failed)
    });
    (task, stop)
}

/// Polls `openssl s_client` until `serial` is served; how long it took.
async fn serial_within(
    tls: std::net::SocketAddr,
    host: &str,
    serial: &str,
    limit: Duration,
) -> Duration {
    let start = Instant::now();
    let served = eventually(limit, || async { served_serial(tls, Some(host)) == serial }).await;
    assert!(served, "{serial} not served within {limit:?}");
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread")]
async fn rewritten_certificate_files_are_served_within_two_seconds_without_failures() {
    let echo = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "a");
    let (cert, key) = pki.leaf("live", "api", &["api.test"], "0B01");
    let (next, next_key) = pki.leaf("next", "api", &["api.test"], "0B02");
    let (broken, _) = pki.leaf("broken", "api", &["api.test"], "0B03");
    let tls = free_addr();
    let gw = tls_policy(tls, &item(&cert, &key, ""), "", &echo)
        .start()
        .await;
    assert_eq!(served_serial(tls, Some("api.test")), "0B01");

    let (client, stop) = loop_client(tls, &pki.ca(), "api.test");
    tokio::time::sleep(Duration::from_millis(300)).await;
    // cert-manager writes both files of the renewed pair.
    std::fs::write(&key, std::fs::read(&next_key).unwrap()).unwrap();
    std::fs::write(&cert, std::fs::read(&next).unwrap()).unwrap();
    let took = serial_within(tls, "api.test", "0B02", Duration::from_secs(2)).await;
    println!("rewritten pair served after {took:?}");

    // A pair whose key is not the certificate's: the old pair stays.
    std::fs::write(&cert, std::fs::read(&broken).unwrap()).unwrap();
    assert!(
        eventually(Duration::from_secs(5), || async {
            gw.logs().contains("config.reload_failed")
        })
        .await,
        "{}",
        gw.logs()
    );
    assert_eq!(served_serial(tls, Some("api.test")), "0B02");
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(1, Ordering::SeqCst);
    let (ok, failed) = client.await.unwrap();
    assert!(ok > 20, "{ok} requests");
    assert_eq!(failed, 0, "{failed} of {} requests failed", ok + failed);

    // Logged located, in `check`'s format.
    let config = gw.config_path().display().to_string();
    let line = gw
        .log_lines()
        .into_iter()
        .find(|l| l["message"] == "config.reload_failed")
        .map(|l| l["problem"].as_str().unwrap_or_default().to_string())
        .unwrap();
    assert!(line.starts_with(&format!("{config}:")), "{line}");
    assert!(line.contains(": server.tls_invalid: "), "{line}");
    assert!(line.contains("is not the key of"), "{line}");
    println!("{line}");
    assert!(
        metric(
            &gw.metrics().await,
            "fairgate_config_reloads_total{result=\"error\"}"
        )
        .unwrap()
            >= 1.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secret_volume_data_swap_is_served_within_two_seconds_without_failures() {
    let echo = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "a");
    let (c1, k1) = pki.leaf("v1", "api", &["api.test"], "0D01");
    let (c2, k2) = pki.leaf("v2", "api", &["api.test"], "0D02");
    // What the kubelet lays out for a Secret volume.
    let vol = dir.path().join("secret");
    std::fs::create_dir_all(vol.join("..2026_11_30_v1")).unwrap();
    std::fs::copy(&c1, vol.join("..2026_11_30_v1/tls.crt")).unwrap();
    std::fs::copy(&k1, vol.join("..2026_11_30_v1/tls.key")).unwrap();
    std::os::unix::fs::symlink("..2026_11_30_v1", vol.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/tls.crt", vol.join("tls.crt")).unwrap();
    std::os::unix::fs::symlink("..data/tls.key", vol.join("tls.key")).unwrap();
    let tls = free_addr();
    let _gw = tls_policy(
        tls,
        &item(&vol.join("tls.crt"), &vol.join("tls.key"), ""),
        "",
        &echo,
    )
    .start()
    .await;
    assert_eq!(served_serial(tls, Some("api.test")), "0D01");

    let (client, stop) = loop_client(tls, &pki.ca(), "api.test");
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::create_dir_all(vol.join("..2026_11_30_v2")).unwrap();
    std::fs::copy(&c2, vol.join("..2026_11_30_v2/tls.crt")).unwrap();
    std::fs::copy(&k2, vol.join("..2026_11_30_v2/tls.key")).unwrap();
    std::os::unix::fs::symlink("..2026_11_30_v2", vol.join("..data_tmp")).unwrap();
    std::fs::rename(vol.join("..data_tmp"), vol.join("..data")).unwrap();
    std::fs::remove_dir_all(vol.join("..2026_11_30_v1")).unwrap();
    let took = serial_within(tls, "api.test", "0D02", Duration::from_secs(2)).await;
    println!("swapped Secret served after {took:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(1, Ordering::SeqCst);
    let (ok, failed) = client.await.unwrap();
    assert!(ok > 20, "{ok} requests");
    assert_eq!(failed, 0, "{failed} of {} requests failed", ok + failed);
}

#[tokio::test(flavor = "multi_thread")]
async fn certificates_added_by_reload_are_served_without_restart() {
    let echo = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "a");
    let (api, api_key) = pki.leaf("api", "api", &["api.test"], "0E01");
    let (other, other_key) = pki.leaf("other", "other", &["other.test"], "0E02");
    let tls = free_addr();
    let gw = tls_policy(tls, &item(&api, &api_key, ""), "", &echo)
        .start()
        .await;
    let pid = gw.pid();
    assert_eq!(served_serial(tls, Some("other.test")), "0E01");
    let both = item(&api, &api_key, "") + &item(&other, &other_key, "");
    gw.write_config(&tls_policy(tls, &both, "", &echo).yaml(), Write::RenameOver);
    serial_within(tls, "other.test", "0E02", Duration::from_secs(5)).await;
    assert_eq!(gw.pid(), pid);
}

/// `curl` to `url` at the gateway's TLS port `tls` as `api.test`, trusting
/// `ca`, presenting `cert` (a certificate and its key) if any, with `more`
/// arguments before the URL.
fn curl_api_test(
    tls: std::net::SocketAddr,
    ca: &Path,
    cert: Option<(&Path, &Path)>,
    more: &[&str],
) -> (String, i32) {
    let ca = ca.display().to_string();
    let resolve = format!("api.test:{}:127.0.0.1", tls.port());
    let url = format!("https://api.test:{}/who", tls.port());
    let mut args = vec!["--cacert".to_string(), ca, "--resolve".into(), resolve];
    if let Some((cert, key)) = cert {
        args.extend(["--cert".into(), cert.display().to_string()]);
        args.extend(["--key".into(), key.display().to_string()]);
    }
    args.extend(more.iter().map(|a| a.to_string()));
    args.push(url);
    curl(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

#[tokio::test(flavor = "multi_thread")]
async fn client_certificates_are_required_and_their_subject_reaches_the_upstream() {
    let echo = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let servers = Pki::new(dir.path(), "servers");
    let clients = Pki::new(dir.path(), "clients");
    let strangers = Pki::new(dir.path(), "strangers");
    let (cert, key) = servers.leaf("api", "api", &["api.test"], "0F01");
    let (billing, billing_key) = clients.leaf("billing", "billing", &[], "1F01");
    let (mallory, mallory_key) = strangers.leaf("mallory", "billing", &[], "1F02");
    let tls = free_addr();
    let extra = format!(
        "  client_ca: \"{}\"\n  client_auth: required",
        clients.ca().display()
    );
    let _gw = tls_policy(tls, &item(&cert, &key, ""), &extra, &echo)
        .start()
        .await;

    let ca = servers.ca();
    let billing = Some((billing.as_path(), billing_key.as_path()));
    let (out, code) = curl_api_test(tls, &ca, billing, &[]);
    assert_eq!(code, 0, "{out}");
    let body: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(
        body["headers"]["x-client-cert-subject"],
        serde_json::json!(["CN=billing"])
    );

    // Without a certificate, or with one another CA signed: no handshake.
    let (out, code) = curl_api_test(tls, &ca, None, &[]);
    assert_ne!(code, 0, "{out}");
    let mallory = Some((mallory.as_path(), mallory_key.as_path()));
    let (out, code) = curl_api_test(tls, &ca, mallory, &[]);
    assert_ne!(code, 0, "{out}");
    // A client's own X-Client-Cert-Subject never passes.
    let spoofed = ["-H", "X-Client-Cert-Subject: CN=admin"];
    let (out, code) = curl_api_test(tls, &ca, billing, &spoofed);
    assert_eq!(code, 0, "{out}");
    let body: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(
        body["headers"]["x-client-cert-subject"],
        serde_json::json!(["CN=billing"])
    );
    assert_eq!(echo.requests(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_upstreams_are_verified_against_their_own_ca_and_name() {
    let dir = tempfile::tempdir().unwrap();
    let up = Pki::new(dir.path(), "up");
    let other = Pki::new(dir.path(), "other");
    let (cert, key) = up.leaf("backend", "backend", &["backend.internal"], "2A01");
    let server = SServer::start(&cert, &key).await;
    let pool = |name: &str, sni: &str, ca: &Path| {
        format!(
            "  {name}: {{targets: [\"{}\"], tls: true, sni: {sni}, ca_file: \"{}\"}}\n",
            server.addr,
            ca.display()
        )
    };
    let upstreams = pool("good", "backend.internal", &up.ca())
        + &pool("wrong_ca", "backend.internal", &other.ca())
        + &pool("wrong_name", "elsewhere.internal", &up.ca());
    let gw = Policy::new()
        .sections(&format!(
            r#"
upstreams:
{upstreams}
routes:
  - {{name: good, match: {{path: /good}}, upstream: good, auth: none, exempt: true}}
  - {{name: wrong_ca, match: {{path: /wrong_ca}}, upstream: wrong_ca, auth: none, exempt: true}}
  - {{name: wrong_name, match: {{path: /wrong_name}}, upstream: wrong_name, auth: none, exempt: true}}
"#
        ))
        .start()
        .await;
    let client = client();
    let r = client.get(gw.url("/good")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("s_server"));
    for path in ["/wrong_ca", "/wrong_name"] {
        let r = client.get(gw.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 502, "{path}");
    }
    // One clear line each, naming what was wrong (polled: logs are written
    // as the exchange ends, maybe after the client has its answer).
    let said = |what: &'static str| {
        let gw = &gw;
        async move {
            gw.logs()
                .lines()
                .any(|l| l.contains("TLSHandshakeFailure") && l.contains(what))
        }
    };
    let wait = std::time::Duration::from_secs(5);
    let unknown = "invalid peer certificate: UnknownIssuer, SNI: backend.internal";
    assert!(eventually(wait, || said(unknown)).await, "{}", gw.logs());
    let name = "not valid for name \\\"elsewhere.internal\\\"";
    assert!(eventually(wait, || said(name)).await, "{}", gw.logs());
}

/// Sends a PROXY header (`v1` text or `v2` binary, naming `client`), then
/// TLS, then one GET, with Python's `ssl`; the response text.
fn proxied_tls_get(tls: std::net::SocketAddr, ca: &Path, client: &str, v2: bool) -> String {
    const SCRIPT: &str = r#"
import socket, ssl, struct, sys, ipaddress
port, ca, client, v2 = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "v2"
s = socket.create_connection(("127.0.0.1", port))
if v2:
    addrs = ipaddress.IPv4Address(client).packed + ipaddress.IPv4Address("127.0.0.1").packed
    s.sendall(b"\r\n\r\n\x00\r\nQUIT\n" + bytes([0x21, 0x11]) + struct.pack("!H", 12) + addrs + struct.pack("!HH", 40000, 443))
else:
    s.sendall(f"PROXY TCP4 {client} 127.0.0.1 40000 443\r\n".encode())
ctx = ssl.create_default_context(cafile=ca)
t = ctx.wrap_socket(s, server_hostname="api.test")
t.sendall(b"GET /who HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n")
out = b""
while True:
    chunk = t.recv(65536)
    if not chunk:
        break
    out += chunk
sys.stdout.write(out.decode())
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", SCRIPT, &tls.port().to_string()])
        .arg(ca)
        .args([client, if v2 { "v2" } else { "v1" }])
        .output()
        .expect("python3 is needed: apt-get install python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn proxy_protocol_before_tls_names_the_client() {
    let echo = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "a");
    let (cert, key) = pki.leaf("api", "api", &["api.test"], "3A01");
    let tls = free_addr();
    let tls_listener = format!(
        r#"tls: {{listen: "{tls}", certificates: [{{cert_file: "{}", key_file: "{}"}}]}}"#,
        cert.display(),
        key.display()
    );
    let _gw = Policy::new()
        .server(&format!(
            "trusted_proxies: [\"127.0.0.0/8\"]\nproxy_protocol: true\n{tls_listener}"
        ))
        .sections(&format!(
            r#"
upstreams: {{api: {{targets: ["{}"]}}}}
limits:
  per_address: {{scope: client_ip, default: {{capacity: 1, rate: 1/h}}}}
routes:
  - {{name: who, match: {{path: /who}}, upstream: api, auth: none, limits: [per_address]}}
"#,
            echo.addr
        ))
        .start()
        .await;
    for (client, v2) in [("203.0.113.7", false), ("198.51.100.9", true)] {
        let first = proxied_tls_get(tls, &pki.ca(), client, v2);
        assert_eq!(status_of(&first), 200, "{first}");
        let body: Value = serde_json::from_str(first.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(
            body["headers"]["x-forwarded-for"],
            serde_json::json!([client])
        );
        // The address's bucket (capacity 1) is spent; another address's is not.
        let second = proxied_tls_get(tls, &pki.ca(), client, v2);
        assert_eq!(status_of(&second), 429, "{second}");
    }
    assert_eq!(echo.requests(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn limits_can_be_kept_per_client_certificate() {
    let echo = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let servers = Pki::new(dir.path(), "servers");
    let clients = Pki::new(dir.path(), "clients");
    let (cert, key) = servers.leaf("api", "api", &["api.test"], "5A01");
    let (billing, billing_key) = clients.leaf("billing", "billing", &[], "5B01");
    let (reports, reports_key) = clients.leaf("reports", "reports", &[], "5B02");
    let tls = free_addr();
    let tls_listener = format!(
        "tls:\n  listen: \"{tls}\"\n  certificates: [{{cert_file: \"{}\", key_file: \"{}\"}}]\n  \
         client_ca: \"{}\"\n  client_auth: optional",
        cert.display(),
        key.display(),
        clients.ca().display()
    );
    let _gw = Policy::new()
        .server(&tls_listener)
        .sections(&format!(
            r#"
upstreams: {{api: {{targets: ["{}"]}}}}
limits:
  per_service: {{scope: client_cert, default: {{capacity: 1, rate: 1/h}}}}
routes:
  - {{name: svc, match: {{path_prefix: /}}, upstream: api, auth: none, limits: [per_service]}}
"#,
            echo.addr
        ))
        .start()
        .await;
    let ca = servers.ca().display().to_string();
    let resolve = format!("api.test:{}:127.0.0.1", tls.port());
    let url = format!("https://api.test:{}/x", tls.port());
    let status = |pair: Option<(&Path, &Path)>| {
        let mut args = vec![
            "--cacert".to_string(),
            ca.clone(),
            "--resolve".into(),
            resolve.clone(),
        ];
        if let Some((c, k)) = pair {
            args.extend([
                "--cert".into(),
                c.display().to_string(),
                "--key".into(),
                k.display().to_string(),
            ]);
        }
        args.push(url.clone());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (out, code) = curl(&args);
        assert_eq!(code, 0, "{out}");
        out.lines()
            .last()
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .to_string()
    };
    let billing = Some((billing.as_path(), billing_key.as_path()));
    let reports = Some((reports.as_path(), reports_key.as_path()));
    assert_eq!(status(billing), "200");
    assert_eq!(status(billing), "429");
    assert_eq!(status(reports), "200");
    // Optional means the handshake succeeds; the limit still needs a subject.
    assert_eq!(status(None), "403");
    assert_eq!(echo.requests(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_3_a_pool_never_reuses_a_connection_verified_with_another_pools_ca() {
    let dir = tempfile::tempdir().unwrap();
    let (up, other) = (Pki::new(dir.path(), "up"), Pki::new(dir.path(), "other"));
    let (cert, key) = up.leaf("backend", "backend", &["backend.internal"], "3A01");
    let docs = dir.path().join("docs");
    std::fs::create_dir(&docs).unwrap();
    std::fs::write(docs.join("x.txt"), "from the backend").unwrap();
    let mut cmd = std::process::Command::new("python3");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/https_files.py");
    cmd.arg(script).arg(&docs).arg(&cert).arg(&key);
    let backend = Peer::spawn(&mut cmd, "python3 is needed: apt-get install python3");
    let target = format!("127.0.0.1:{}", backend.listening_port());
    // Same address, same SNI, same verify flags: only the CA differs.
    let pool = |name: &str, ca: &Path| {
        format!(
            "  {name}: {{targets: [\"{target}\"], tls: true, sni: backend.internal, ca_file: \"{}\"}}\n",
            ca.display()
        )
    };
    let upstreams = pool("trusted", &up.ca()) + &pool("untrusted", &other.ca());
    let gw = Policy::new()
        .sections(&format!(
            r#"
upstreams:
{upstreams}
routes:
  - {{name: trusted, match: {{path: /x.txt, headers: {{x-pool: trusted}}}}, upstream: trusted, auth: none, exempt: true}}
  - {{name: untrusted, match: {{path: /x.txt}}, upstream: untrusted, auth: none, exempt: true}}
"#
        ))
        .start()
        .await;
    let client = client();
    let get = |pool: &'static str| {
        let request = client.get(gw.url("/x.txt"));
        async move {
            let request = match pool {
                "trusted" => request.header("x-pool", "trusted"),
                _ => request,
            };
            request.send().await.unwrap().status().as_u16()
        }
    };
    // The order that used to pass: a verified connection is pooled first.
    assert_eq!(get("trusted").await, 200);
    assert_eq!(get("untrusted").await, 502);
    assert_eq!(get("trusted").await, 200);
    assert_eq!(get("untrusted").await, 502);
}

/// Upstream mTLS (`client_cert_file`/`client_key_file`, nginx's
/// `proxy_ssl_certificate`): `openssl s_server -Verify` requires a client
/// certificate its CA signed; the pool that has one is served, the same
/// target without it gets 502, and a key that is not the certificate's is
/// refused by `check` before anything runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_pool_shows_its_client_certificate_to_a_target_that_requires_one() {
    let dir = tempfile::tempdir().unwrap();
    let up = Pki::new(dir.path(), "up");
    let gateways = Pki::new(dir.path(), "gateways");
    let (cert, key) = up.leaf("backend", "backend", &["backend.internal"], "2B01");
    let (edge_cert, edge_key) = gateways.leaf("edge", "edge-gateway", &[], "2B02");
    let ca = gateways.ca().display().to_string();
    let server = SServer::start_with(&cert, &key, &["-Verify", "1", "-CAfile", &ca]).await;
    let pool = |name: &str, extra: &str| {
        format!(
            "  {name}: {{targets: [\"{}\"], tls: true, sni: backend.internal, ca_file: \"{}\"{extra}}}\n",
            server.addr,
            up.ca().display()
        )
    };
    let mtls = format!(
        ", client_cert_file: \"{}\", client_key_file: \"{}\"",
        edge_cert.display(),
        edge_key.display()
    );
    let upstreams = pool("mtls", &mtls) + &pool("plain", "");
    let gw = Policy::new()
        .sections(&format!(
            "upstreams:\n{upstreams}routes:\n  - {{name: mtls, match: {{path: /mtls}}, upstream: mtls, auth: none, exempt: true}}\n  \
             - {{name: plain, match: {{path: /plain}}, upstream: plain, auth: none, exempt: true}}\n"
        ))
        .start()
        .await;
    let r = client().get(gw.url("/mtls")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("s_server"));
    let r = client().get(gw.url("/plain")).send().await.unwrap();
    assert_eq!(r.status(), 502);

    let (_, other_key) = gateways.leaf("other", "other", &[], "2B03");
    let wrong = format!(
        "upstreams:\n  mtls: {{targets: [\"127.0.0.1:1\"], tls: true, client_cert_file: \"{}\", client_key_file: \"{}\"}}\n\
         routes:\n  - {{name: r, match: {{path: /}}, upstream: mtls, auth: none}}\n",
        edge_cert.display(),
        other_key.display()
    );
    let (code, lines) = common::check::check_in_dir(
        &format!("store: {{kind: memory}}\nacknowledge: [store.process_local]\n{wrong}"),
        &[],
    );
    assert_eq!(code, Some(1), "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("upstreams.tls_invalid") && l.contains("is not the key of")),
        "{lines:?}"
    );
}
