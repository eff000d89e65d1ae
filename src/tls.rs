//! Served certificates: each pair loaded from PEM and checked (the chain
//! parses, the key is the certificate's), named by its `hosts:` or its
//! SANs, and chosen per handshake by SNI: the exact name, then a one-label
//! wildcard, then the first certificate. Also the roots for client and
//! upstream certificates, and the verified client certificate's subject.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::RootCertStore;

use crate::config::Certificate;

/// One loaded pair and what `check`, the metrics and the tests read from it.
#[derive(Debug)]
pub struct Served {
    pub key: Arc<CertifiedKey>,
    /// The names it serves, lower case (`*.example.com` for a wildcard).
    pub names: Vec<String>,
    /// The leaf's `notAfter`, Unix time.
    pub not_after: i64,
    /// The leaf's serial number, hex.
    pub serial: String,
    /// Its name in metrics: the first name, else the certificate file's.
    pub label: String,
}

/// Every served certificate of a policy, indexed by name.
#[derive(Debug)]
pub struct Certs {
    served: Vec<Served>,
    by_name: HashMap<String, usize>,
}

impl Certs {
    /// Loads each pair; on failure, which one (its index), a `check` code
    /// and why. A name two certificates claim is an error unless exactly
    /// one lists it under `hosts:`, which then wins.
    pub fn build(list: &[Certificate]) -> Result<Certs, (usize, &'static str, String)> {
        let mut certs = Certs {
            served: Vec::new(),
            by_name: HashMap::new(),
        };
        let mut explicit: HashMap<String, bool> = HashMap::new();
        for (i, c) in list.iter().enumerate() {
            let mut served = load(&c.cert, &c.key).map_err(|e| (i, "server.tls_invalid", e))?;
            for host in &c.hosts {
                if !served.names.iter().any(|n| n == host || covers(n, host)) {
                    let message = format!(
                        "hosts: {host} is not a name of {} (its names: {})",
                        c.cert.display(),
                        served.names.join(", ")
                    );
                    return Err((i, "server.tls_invalid", message));
                }
            }
            let listed = !c.hosts.is_empty();
            if listed {
                served.names = c.hosts.clone();
                served.label = c.hosts[0].clone();
            }
            for name in &served.names {
                match explicit.get(name) {
                    Some(&other) if other == listed => {
                        let message = format!(
                            "{name} is claimed by {} and an earlier certificate; \
                             list it under hosts: of the one that should serve it",
                            c.cert.display()
                        );
                        return Err((i, "server.tls_duplicate_name", message));
                    }
                    Some(true) => continue,
                    _ => {}
                }
                explicit.insert(name.clone(), listed);
                certs.by_name.insert(name.clone(), i);
            }
            certs.served.push(served);
        }
        if certs.served.is_empty() {
            return Err((
                0,
                "server.tls_invalid",
                "needs at least one certificate".into(),
            ));
        }
        Ok(certs)
    }

    /// The certificate for a client's SNI (none: the first one).
    pub fn choose(&self, sni: Option<&str>) -> &Served {
        let index = sni.map(normal_name).and_then(|name| {
            self.by_name.get(&name).copied().or_else(|| {
                let (_, parent) = name.split_once('.')?;
                self.by_name.get(&format!("*.{parent}")).copied()
            })
        });
        &self.served[index.unwrap_or(0)]
    }

    /// Whether some certificate names `host` (exactly or by wildcard).
    pub fn covers(&self, host: &str) -> bool {
        let host = normal_name(host);
        self.by_name.keys().any(|n| covers(n, &host))
    }

    pub fn served(&self) -> &[Served] {
        &self.served
    }

    /// Sets `fairgate_tls_certificate_expiry_timestamp_seconds`, one series
    /// per certificate, named by its first name.
    pub fn publish_expiry(&self) {
        let gauge = &crate::metrics::METRICS.tls_expiry;
        gauge.reset();
        for s in &self.served {
            gauge
                .with_label_values(&[s.label.as_str()])
                .set(s.not_after);
        }
    }
}

/// Hands rustls the certificate for each handshake from whatever `current`
/// returns then (the policy in force), so a reload changes new handshakes
/// only: open connections keep the certificate they were given.
pub struct BySni<F>(pub F);

impl<F> std::fmt::Debug for BySni<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BySni")
    }
}

impl<F> ResolvesServerCert for BySni<F>
where
    F: Fn() -> Option<Arc<Certs>> + Send + Sync,
{
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let certs = (self.0)()?;
        Some(certs.choose(hello.server_name()).key.clone())
    }
}

/// Lower case, without a trailing dot: how names are compared.
pub fn normal_name(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// Whether certificate name `pattern` (maybe `*.example.com`) names `host`.
fn covers(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(parent) => host
            .split_once('.')
            .is_some_and(|(label, rest)| !label.is_empty() && label != "*" && rest == parent),
        None => pattern == host,
    }
}

/// Certificate chains and keys are small; a bigger file is a mistake.
const MAX_PEM_BYTES: u64 = 1 << 20;

fn bounded(path: &Path) -> Result<(), String> {
    match std::fs::metadata(path) {
        Ok(m) if m.len() > MAX_PEM_BYTES => Err(format!(
            "{}: {} bytes, over the 1 MiB a PEM chain or key may hold",
            path.display(),
            m.len()
        )),
        Ok(_) => Ok(()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Loads and checks one pair.
pub fn load(cert: &Path, key: &Path) -> Result<Served, String> {
    bounded(cert)?;
    bounded(key)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<_, _>>())
        .map_err(|e| format!("{}: not a PEM certificate chain: {e}", cert.display()))?;
    let Some(leaf) = chain.first() else {
        return Err(format!("{}: holds no certificate", cert.display()));
    };
    for (i, der) in chain.iter().enumerate() {
        x509_parser::parse_x509_certificate(der).map_err(|e| {
            format!(
                "{}: certificate {} of the chain does not parse: {e}",
                cert.display(),
                i + 1
            )
        })?;
    }
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf).map_err(|e| e.to_string())?;
    let private = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("{}: not a PEM private key: {e}", key.display()))?;
    let provider = rustls::crypto::ring::default_provider();
    let certified =
        CertifiedKey::from_der(chain.clone(), private, &provider).map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => format!(
                "{} is not the key of {} (their public keys differ)",
                key.display(),
                cert.display()
            ),
            e => format!("{}: cannot use this private key: {e}", key.display()),
        })?;
    let names = parsed
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|san| {
            san.value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    x509_parser::extensions::GeneralName::DNSName(d) => Some(normal_name(d)),
                    _ => None,
                })
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let label = names.first().cloned().unwrap_or_else(|| {
        cert.file_name()
            .map_or_else(String::new, |f| f.to_string_lossy().into_owned())
    });
    Ok(Served {
        key: Arc::new(certified),
        label,
        names,
        not_after: parsed.validity().not_after.timestamp(),
        serial: parsed.raw_serial_as_string().replace(':', ""),
    })
}

/// The root certificates in a PEM file (client CA, upstream CA).
pub fn load_roots(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    bounded(path)?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<_, _>>())
        .map_err(|e| format!("{}: not PEM certificates: {e}", path.display()))?;
    let mut store = RootCertStore::empty();
    let (added, _) = store.add_parsable_certificates(certs.clone());
    if added == 0 {
        return Err(format!(
            "{}: holds no usable CA certificate",
            path.display()
        ));
    }
    Ok(certs)
}

/// Verifies client certificates against the roots in `ca`.
pub fn client_verifier(
    ca: &Path,
    required: bool,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, String> {
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(load_roots(ca)?);
    let builder = WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    );
    let builder = if required {
        builder
    } else {
        builder.allow_unauthenticated()
    };
    builder
        .build()
        .map_err(|e| format!("{}: {e}", ca.display()))
}

/// Keeps what a handshake learnt with the connection (Pingora's
/// `SslDigest` extension): the subject of a verified client certificate,
/// for scopes and identity headers, and the SNI, for the access log.
pub struct ConnectionFacts;

/// What [`ConnectionFacts`] keeps of one handshake.
#[derive(Debug, Clone, Default)]
pub struct TlsFacts {
    pub subject: Option<ClientSubject>,
    /// The server name the client asked for, as sent (at most 255 bytes).
    pub sni: Option<String>,
}

#[async_trait::async_trait]
impl pingora::listeners::TlsAccept for ConnectionFacts {
    async fn handshake_complete_callback(
        &self,
        tls: &pingora::protocols::tls::TlsRef,
    ) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        let facts = TlsFacts {
            subject: tls.peer_certificate_der().and_then(ClientSubject::of),
            sni: tls
                .server_name()
                .filter(|s| s.len() <= 255)
                .map(str::to_string),
        };
        Some(Arc::new(facts))
    }
}

/// Bytes of subject text kept; beyond, the certificate names no subject.
const MAX_SUBJECT: usize = 1024;

/// The subject of a verified client certificate, as RFC 4514 text
/// (`CN=billing,O=Acme`); `None` without one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSubject(pub String);

impl ClientSubject {
    /// RFC 4514: the last RDN first, multi-valued RDNs joined with `+`,
    /// special characters escaped, non-string values as `#` and hex; so
    /// two different subjects never read the same.
    pub fn of(der: &[u8]) -> Option<ClientSubject> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let registry = x509_parser::objects::oid_registry();
        let rdns: Vec<String> = cert
            .subject()
            .iter_rdn()
            .map(|rdn| {
                let parts: Vec<String> = rdn
                    .iter()
                    .map(|atv| {
                        let key = x509_parser::objects::oid2abbrev(atv.attr_type(), registry)
                            .map_or_else(|_| atv.attr_type().to_id_string(), str::to_string);
                        let value = match atv.as_str() {
                            Ok(text) => escape_dn_value(text),
                            Err(_) => format!("#{}", hex(atv.as_slice())),
                        };
                        format!("{key}={value}")
                    })
                    .collect();
                parts.join("+")
            })
            .collect();
        let text: Vec<&str> = rdns.iter().rev().map(String::as_str).collect();
        let text = text.join(",");
        // Too long for a header line: no subject (client_cert routes refuse).
        (!text.is_empty() && text.len() <= MAX_SUBJECT).then_some(ClientSubject(text))
    }
}

/// RFC 4514 section 2.4: `"+,;<>\` escaped anywhere, `#` and space first,
/// space last; control characters as `\XX` per byte.
fn escape_dn_value(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let last = text.chars().count().saturating_sub(1);
    for (i, c) in text.chars().enumerate() {
        match c {
            '"' | '+' | ',' | ';' | '<' | '>' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '#' if i == 0 => out.push_str("\\#"),
            ' ' if i == 0 || i == last => out.push_str("\\ "),
            c if c.is_control() => {
                let mut b = [0u8; 4];
                for byte in c.encode_utf8(&mut b).bytes() {
                    out.push_str(&format!("\\{byte:02X}"));
                }
            }
            c => out.push(c),
        }
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::{covers, escape_dn_value};

    #[test]
    fn subject_values_are_escaped_as_rfc_4514_says() {
        assert_eq!(escape_dn_value("Acme, Inc."), r"Acme\, Inc.");
        assert_eq!(escape_dn_value("a+b=c"), r"a\+b=c");
        assert_eq!(escape_dn_value("#1 "), r"\#1\ ");
        assert_eq!(escape_dn_value(" x"), r"\ x");
        assert_eq!(escape_dn_value("line\nbreak"), r"line\0Abreak");
        assert_eq!(escape_dn_value("café"), "café");
    }

    #[test]
    fn a_wildcard_names_one_label() {
        assert!(covers("*.example.com", "api.example.com"));
        assert!(!covers("*.example.com", "example.com"));
        assert!(!covers("*.example.com", "a.b.example.com"));
        assert!(!covers("*.example.com", "*.example.com"));
        assert!(covers("api.example.com", "api.example.com"));
        assert!(!covers("api.example.com", "www.example.com"));
    }
}
