//! Client certificates per host (`server.tls.client_certificates`, what
//! ingress-nginx's `auth-tls-*` annotations ask) against real `curl`: a
//! host that requires one, a host that takes one optionally, a host that
//! sends its clients to an error page, and a host that asks for none, all
//! on one listener; a client that names one host in its handshake and
//! another in its request; a certificate another CA signed.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

struct Site {
    tls: std::net::SocketAddr,
    ca: PathBuf,
    _gw: Gateway,
}

impl Site {
    /// `curl https://<sni>/x` with `cert`, `more` args; the body's JSON
    /// (when there is one), the status, and curl's exit code.
    fn get(
        &self,
        sni: &str,
        cert: Option<&(PathBuf, PathBuf)>,
        more: &[&str],
    ) -> (Value, u16, i32) {
        let port = self.tls.port();
        let mut args = vec![
            "--cacert".to_string(),
            self.ca.display().to_string(),
            "--resolve".into(),
            format!("{sni}:{port}:127.0.0.1"),
        ];
        if let Some((c, k)) = cert {
            args.extend(["--cert".into(), c.display().to_string()]);
            args.extend(["--key".into(), k.display().to_string()]);
        }
        args.extend(more.iter().map(|a| a.to_string()));
        args.push(format!("https://{sni}:{port}/x?q=1"));
        let (out, code) = curl(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let mut lines: Vec<&str> = out.lines().collect();
        let status = lines
            .pop()
            .and_then(|l| l.split(' ').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let body = serde_json::from_str(&lines.join("\n")).unwrap_or(Value::Null);
        (body, status, code)
    }
}

fn header<'a>(body: &'a Value, name: &str) -> Option<&'a str> {
    body["headers"][name][0].as_str()
}

async fn site(dir: &Path, clients: &Pki, echo: &Upstream) -> Site {
    site_with(dir, clients, echo, "").await
}

/// `site`, with `extra` keys under `server.tls`.
async fn site_with(dir: &Path, clients: &Pki, echo: &Upstream, extra: &str) -> Site {
    let servers = Pki::new(dir, "servers");
    let names = [
        "partner.test",
        "open.test",
        "maybe.test",
        "paged.test",
        "strict.test",
        "*.b.deep.test",
    ];
    let (cert, key) = servers.leaf("site", "site", &names, "0C01");
    let tls = free_addr();
    let ca = clients.ca().display().to_string();
    let server = format!(
        r#"tls:
  listen: "{tls}"
  certificates: [{{cert_file: "{}", key_file: "{}"}}]
  client_certificates:
    - {{hosts: [partner.test], ca_file: "{ca}", pass_certificate: true, match_subject: "^CN=partner-"}}
    - {{hosts: [maybe.test], ca_file: "{ca}", verify: optional}}
    - {{hosts: [paged.test], ca_file: "{ca}", error_page: "https://open.test/cert-help"}}
    - {{hosts: [strict.test], ca_file: "{ca}", verify: optional, match_subject: "^CN=partner-"}}
    - {{hosts: ["*.deep.test"], ca_file: "{ca}"}}
{extra}"#,
        cert.display(),
        key.display()
    );
    let gw = Policy::new()
        .server(&server)
        .catch_all(echo.addr)
        .start()
        .await;
    Site {
        tls,
        ca: servers.ca(),
        _gw: gw,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_requires_a_certificate_its_ca_signed_and_its_upstream_hears_of_it() {
    let echo = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let clients = Pki::new(dir.path(), "partners");
    let strangers = Pki::new(dir.path(), "strangers");
    let partner = clients.leaf("partner", "partner-1", &[], "1A01");
    let other = clients.leaf("other", "intern", &[], "1A02");
    let stranger = strangers.leaf("stranger", "partner-1", &[], "1A03");
    let site = site(dir.path(), &clients, &echo).await;

    // The partner's certificate: served, and the upstream is told so in
    // ingress-nginx's headers; the client's own copies never pass.
    let spoof = [
        "-H",
        "ssl-client-verify: FORGED",
        "-H",
        "SSL_Client_Subject_DN: CN=admin",
    ];
    let (body, status, code) = site.get("partner.test", Some(&partner), &spoof);
    assert_eq!((status, code), (200, 0), "{body}");
    assert_eq!(header(&body, "ssl-client-verify"), Some("SUCCESS"));
    assert_eq!(header(&body, "ssl-client-subject-dn"), Some("CN=partner-1"));
    assert_eq!(
        header(&body, "ssl-client-issuer-dn"),
        Some("CN=partners test CA")
    );
    assert_eq!(
        body["headers"]["ssl-client-verify"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert!(
        body["headers"].get("ssl_client_subject_dn").is_none(),
        "{body}"
    );
    let pem = header(&body, "ssl-client-cert").unwrap();
    assert!(
        pem.starts_with("-----BEGIN%20CERTIFICATE-----%0AMII"),
        "{pem}"
    );
    assert!(pem.ends_with("-----END%20CERTIFICATE-----%0A"), "{pem}");
    // A host's own roots verified it: not the listener's identity header.
    assert!(
        body["headers"].get("x-client-cert-subject").is_none(),
        "{body}"
    );

    // No certificate: 400, as nginx's "No required SSL certificate was sent".
    let (body, status, _) = site.get("partner.test", None, &[]);
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["type"], "urn:fairgate:problem:client-cert-missing");
    // Signed by the CA but not a partner's subject: 403.
    let (body, status, _) = site.get("partner.test", Some(&other), &[]);
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        body["type"],
        "urn:fairgate:problem:client-cert-unauthorized"
    );
    // Another CA's certificate with the right subject: no handshake at all.
    let (_, status, code) = site.get("partner.test", Some(&stranger), &[]);
    assert_eq!(status, 0);
    assert_ne!(code, 0);

    // A wildcard entry covers names two labels down, as its routes do.
    let (body, status, _) = site.get("a.b.deep.test", None, &[]);
    assert_eq!(status, 400, "{body}");
    let (body, status, _) = site.get("a.b.deep.test", Some(&partner), &[]);
    assert_eq!(status, 200, "{body}");

    // The host that asks for none: served without, and told nothing.
    let (body, status, _) = site.get("open.test", None, &[]);
    assert_eq!(status, 200, "{body}");
    assert!(body["headers"].get("ssl-client-verify").is_none(), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handshake_for_one_host_does_not_carry_a_request_for_another() {
    let echo = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let clients = Pki::new(dir.path(), "partners");
    let partner = clients.leaf("partner", "partner-1", &[], "1B01");
    let site = site(dir.path(), &clients, &echo).await;

    // Handshake as open.test (no certificate asked), request partner.test:
    // 421, whatever the client holds, as nginx answers.
    for cert in [None, Some(&partner)] {
        let (body, status, _) = site.get("open.test", cert, &["-H", "Host: partner.test"]);
        assert_eq!(status, 421, "{body}");
        assert_eq!(body["type"], "urn:fairgate:problem:misdirected-request");
    }
    // A connection verified by the same roots (maybe.test's entry has the
    // partners' CA too) carries maybe.test's requests: the same check.
    let (body, status, _) = site.get("partner.test", Some(&partner), &["-H", "Host: maybe.test"]);
    assert_eq!(status, 200, "{body}");
    assert_eq!(header(&body, "ssl-client-verify"), Some("SUCCESS"));
    // A request to a host without client certificates on a partner's
    // connection is served: that host asks nothing.
    let (body, status, _) = site.get("partner.test", Some(&partner), &["-H", "Host: open.test"]);
    assert_eq!(status, 200, "{body}");
    assert!(body["headers"].get("ssl-client-verify").is_none(), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn optional_hosts_serve_without_and_error_pages_redirect() {
    let echo = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let clients = Pki::new(dir.path(), "partners");
    let partner = clients.leaf("partner", "partner-1", &[], "1C01");
    let site = site(dir.path(), &clients, &echo).await;

    let (body, status, _) = site.get("maybe.test", None, &["-H", "ssl-client-verify: SUCCESS"]);
    assert_eq!(status, 200, "{body}");
    assert_eq!(header(&body, "ssl-client-verify"), Some("NONE"));
    assert!(
        body["headers"].get("ssl-client-subject-dn").is_none(),
        "{body}"
    );
    // Optional, with a subject to match: no certificate is the empty
    // subject, which does not match (nginx's `$ssl_client_s_dn !~`).
    let (body, status, _) = site.get("strict.test", None, &[]);
    assert_eq!(status, 403, "{body}");
    let (body, status, _) = site.get("strict.test", Some(&partner), &[]);
    assert_eq!(status, 200, "{body}");
    let (body, status, _) = site.get("maybe.test", Some(&partner), &[]);
    assert_eq!(status, 200, "{body}");
    assert_eq!(header(&body, "ssl-client-verify"), Some("SUCCESS"));
    assert!(
        body["headers"].get("ssl-client-cert").is_none(),
        "not asked for: {body}"
    );

    let (out, code) = curl(&[
        "--cacert",
        &site.ca.display().to_string(),
        "--resolve",
        &format!("paged.test:{}:127.0.0.1", site.tls.port()),
        "-D",
        "-",
        &format!("https://paged.test:{}/x", site.tls.port()),
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.starts_with("HTTP/2 302") || out.starts_with("HTTP/1.1 302"),
        "{out}"
    );
    assert!(
        out.contains("location: https://open.test/cert-help\r\n"),
        "{out}"
    );
    let (body, status, _) = site.get("paged.test", Some(&partner), &[]);
    assert_eq!(status, 200, "{body}");
}

/// With the listener's own `client_ca`, a connection a host's roots
/// verified does not carry a request for the listener's hosts: its
/// certificate was never checked against `client_ca`.
#[tokio::test(flavor = "multi_thread")]
async fn a_hosts_roots_never_stand_in_for_the_listeners_client_ca() {
    let echo = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let clients = Pki::new(dir.path(), "partners");
    let staff = Pki::new(dir.path(), "staff");
    let partner = clients.leaf("partner", "partner-1", &[], "1D01");
    let employee = staff.leaf("employee", "employee-1", &[], "1D02");
    let ca = staff.ca().display().to_string();
    let extra = format!("  client_ca: \"{ca}\"\n  client_auth: optional\n");
    let site = site_with(dir.path(), &clients, &echo, &extra).await;

    let (body, status, _) = site.get("partner.test", Some(&partner), &["-H", "Host: open.test"]);
    assert_eq!(status, 421, "{body}");
    let (body, status, _) = site.get("open.test", Some(&employee), &[]);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        header(&body, "x-client-cert-subject"),
        Some("CN=employee-1")
    );
}
