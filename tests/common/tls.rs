//! Certificates made by the real `openssl` command line: a CA and leaves
//! with chosen SANs and serials; and the real clients that check them
//! (`curl`, `openssl s_client`); `openssl s_server` as a TLS upstream.

use super::*;

/// A CA in a directory, and the leaves it signs there.
pub struct Pki {
    pub dir: PathBuf,
    name: String,
}

fn openssl(args: &[&str], dir: &Path) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl command line is needed: apt-get install openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Pki {
    /// A new CA named `name` (its files `<name>-ca.pem`, `<name>-ca.key`).
    pub fn new(dir: &Path, name: &str) -> Pki {
        let ca = format!("{name}-ca");
        openssl(
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-days",
                "30",
                "-subj",
                &format!("/CN={name} test CA"),
                "-keyout",
                &format!("{ca}.key"),
                "-out",
                &format!("{ca}.pem"),
            ],
            dir,
        );
        Pki {
            dir: dir.to_path_buf(),
            name: name.to_string(),
        }
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.join(format!("{}-ca.pem", self.name))
    }

    /// An intermediate CA `name` signed by this one (its files
    /// `<name>-ca.pem` and `.key` beside this CA's), signing leaves of its
    /// own; `<name>-chain.pem` holds its certificate and those above it
    /// up to (not including) the root, as a client sends them.
    pub fn intermediate(&self, name: &str) -> Pki {
        let (ca, parent) = (format!("{name}-ca"), format!("{}-ca", self.name));
        let ext = format!("{ca}.ext");
        let text = "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n";
        std::fs::write(self.dir.join(&ext), text).unwrap();
        let subject = format!("/CN={name} test CA");
        let (key, csr, pem) = (
            format!("{ca}.key"),
            format!("{ca}.csr"),
            format!("{ca}.pem"),
        );
        let new_key = [
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ];
        let rest = ["-nodes", "-subj", &subject, "-keyout", &key, "-out", &csr];
        openssl(&[&new_key[..], &rest[..]].concat(), &self.dir);
        let (parent_pem, parent_key) = (format!("{parent}.pem"), format!("{parent}.key"));
        let sign = [
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &parent_pem,
            "-CAkey",
            &parent_key,
            "-set_serial",
            "0x7E",
            "-days",
            "25",
            "-extfile",
            &ext,
            "-out",
            &pem,
        ];
        openssl(&sign, &self.dir);
        let mut chain = std::fs::read(self.dir.join(&pem)).unwrap();
        if let Ok(above) = std::fs::read(self.dir.join(format!("{}-chain.pem", self.name))) {
            chain.extend(above);
        }
        std::fs::write(self.dir.join(format!("{name}-chain.pem")), chain).unwrap();
        Pki {
            dir: self.dir.clone(),
            name: name.to_string(),
        }
    }

    /// The intermediates from this CA up to the root (empty for a root).
    pub fn chain(&self) -> Vec<u8> {
        std::fs::read(self.dir.join(format!("{}-chain.pem", self.name))).unwrap_or_default()
    }

    /// A leaf `<file>.pem` / `<file>.key` for `sans` (DNS names), with
    /// `serial` (hex), subject `/CN=<cn>`, signed by this CA.
    pub fn leaf(&self, file: &str, cn: &str, sans: &[&str], serial: &str) -> (PathBuf, PathBuf) {
        let ext = format!("{file}.ext");
        let san: Vec<String> = sans.iter().map(|s| format!("DNS:{s}")).collect();
        let mut text =
            String::from("basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\n");
        if !san.is_empty() {
            text.push_str(&format!("subjectAltName={}\n", san.join(",")));
        }
        std::fs::write(self.dir.join(&ext), text).unwrap();
        let (key, csr, pem) = (
            format!("{file}.key"),
            format!("{file}.csr"),
            format!("{file}.pem"),
        );
        openssl(
            &[
                "req",
                "-new",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-subj",
                &format!("/CN={cn}"),
                "-keyout",
                &key,
                "-out",
                &csr,
            ],
            &self.dir,
        );
        let ca = format!("{}-ca", self.name);
        openssl(
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &format!("{ca}.pem"),
                "-CAkey",
                &format!("{ca}.key"),
                "-set_serial",
                &format!("0x{serial}"),
                "-days",
                "20",
                "-extfile",
                &ext,
                "-out",
                &pem,
            ],
            &self.dir,
        );
        (self.dir.join(pem), self.dir.join(key))
    }
}

/// `curl` with `args`; its stdout, and its exit code. The last line of
/// stdout is the status (`-w '\n%{http_code}'`).
pub fn curl(args: &[&str]) -> (String, i32) {
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "10",
            "-w",
            "\n%{http_code} %{http_version}",
        ])
        .args(args)
        .output()
        .expect("curl is needed: apt-get install curl");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.code().unwrap_or(-1),
    )
}

/// The serial number (upper-case hex) of the certificate `addr` serves
/// to a client that sends `sni` (none: no SNI), as `openssl s_client` sees it.
pub fn served_serial(addr: SocketAddr, sni: Option<&str>) -> String {
    let connect = addr.to_string();
    let mut args = vec!["s_client", "-connect", connect.as_str()];
    match sni {
        Some(name) => args.extend(["-servername", name]),
        None => args.push("-noservername"),
    }
    let mut client = Command::new("openssl")
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl is needed: apt-get install openssl");
    let mut pem = Vec::new();
    std::io::Read::read_to_end(client.stdout.as_mut().unwrap(), &mut pem).unwrap();
    let _ = client.wait();
    let mut x509 = Command::new("openssl")
        .args(["x509", "-noout", "-serial"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(x509.stdin.as_mut().unwrap(), &pem).unwrap();
    let out = x509.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .trim_start_matches("serial=")
        .to_string()
}

/// `openssl s_server -www` on a free port with `cert`/`key`: a TLS upstream
/// that answers every request with a status page; ended on drop.
pub struct SServer {
    child: Child,
    pub addr: SocketAddr,
}

impl SServer {
    /// Starts it and waits until it accepts connections.
    pub async fn start(cert: &Path, key: &Path) -> SServer {
        SServer::start_with(cert, key, &[]).await
    }

    /// `start`, with more `openssl s_server` arguments (`-Verify 1
    /// -CAfile CA`: it requires a client certificate that CA signed).
    pub async fn start_with(cert: &Path, key: &Path, more: &[&str]) -> SServer {
        let addr = free_addr();
        let child = Command::new("openssl")
            .args(["s_server", "-www", "-accept", &addr.port().to_string()])
            .arg("-cert")
            .arg(cert)
            .arg("-key")
            .arg(key)
            .args(more)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("openssl is needed: apt-get install openssl");
        // Owned before the wait, so a server that never listens is ended too.
        let server = SServer { child, addr };
        let listening = eventually(Duration::from_secs(10), || async move {
            tokio::net::TcpStream::connect(addr).await.is_ok()
        })
        .await;
        assert!(listening, "openssl s_server did not start");
        server
    }
}

impl Drop for SServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
