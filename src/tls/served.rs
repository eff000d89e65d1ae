//! Served certificates: each pair decoded and checked (the chain parses,
//! the key is the certificate's), named by its `hosts:` or its SANs, and
//! chosen per handshake by SNI: the exact name, then a one-label wildcard,
//! then the first certificate. It reads no file (the policy builder hands
//! it decoded PEM) and knows no config.

use std::collections::HashMap;
use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::pem::{Pem, PemError};
use crate::host::normal_name;

/// Why a pair cannot be served, or a set of pairs cannot share names.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error(transparent)]
    Pem(#[from] PemError),
    #[error("{cert}: certificate {index} of the chain does not parse: {why}")]
    ChainInvalid {
        cert: String,
        index: usize,
        why: String,
    },
    #[error("{key} is not the key of {cert} (their public keys differ)")]
    NotItsKey { key: String, cert: String },
    #[error("{key}: cannot use this private key: {source}")]
    KeyUnusable { key: String, source: rustls::Error },
    #[error("hosts: {host} is not a name of {cert} (its names: {names})")]
    HostNotNamed {
        host: String,
        cert: String,
        names: String,
    },
    /// Two certificates claim a name and neither (or both) list it.
    #[error(
        "{name} is claimed by {cert} and by {earlier}; \
         list it under hosts: of the one that should serve it"
    )]
    NameClaimedTwice {
        name: String,
        cert: String,
        earlier: String,
    },
    #[error("needs at least one certificate")]
    None,
}

/// One decoded pair and what `check`, the metrics and the tests read from it.
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
    /// The certificate's source as errors show it (path or Secret).
    source: String,
}

/// Every served certificate of a policy, indexed by name.
#[derive(Debug, Default)]
pub struct Certs {
    served: Vec<Served>,
    by_name: HashMap<String, usize>,
    /// While adding: whether each name came from a `hosts:` list.
    listed: HashMap<String, bool>,
}

impl Certs {
    /// Adds a pair, in file order, serving `hosts` (empty: its SANs). A
    /// name two certificates claim is an error unless exactly one lists it
    /// under `hosts:`, which then wins, or they are the same certificate
    /// (a Secret that is also mounted as a file), which the first serves.
    pub fn add(&mut self, mut served: Served, hosts: &[String]) -> Result<(), CertError> {
        let index = self.served.len();
        for host in hosts {
            if !served.names.iter().any(|n| n == host || covers(n, host)) {
                return Err(CertError::HostNotNamed {
                    host: host.clone(),
                    cert: served.source.clone(),
                    names: served.names.join(", "),
                });
            }
        }
        let listed = !hosts.is_empty();
        if listed {
            served.names = hosts.to_vec();
            served.label = hosts[0].clone();
        }
        for name in &served.names {
            match self.listed.get(name) {
                Some(&other) if other == listed => {
                    let earlier = &self.served[self.by_name[name]];
                    if earlier.key.cert == served.key.cert {
                        continue;
                    }
                    return Err(CertError::NameClaimedTwice {
                        name: name.clone(),
                        cert: served.source.clone(),
                        earlier: earlier.source.clone(),
                    });
                }
                Some(true) => continue,
                _ => {}
            }
            self.listed.insert(name.clone(), listed);
            self.by_name.insert(name.clone(), index);
        }
        self.served.push(served);
        Ok(())
    }

    /// The set, once every pair is added; at least one.
    pub fn finish(mut self) -> Result<Certs, CertError> {
        if self.served.is_empty() {
            return Err(CertError::None);
        }
        self.listed = HashMap::new();
        Ok(self)
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
        // As `covers` each name, by look-ups (a controller's 20,000
        // routes against 500 certificates' names was 10 million calls).
        self.by_name.contains_key(&host)
            || host.split_once('.').is_some_and(|(label, parent)| {
                !label.is_empty()
                    && label != "*"
                    && self.by_name.contains_key(&format!("*.{parent}"))
            })
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

/// Whether certificate name `pattern` (maybe `*.example.com`) names `host`.
/// Whether the certificate name `pattern` (`*.example.com` a wildcard)
/// covers `host`.
pub fn covers(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(parent) => host
            .split_once('.')
            .is_some_and(|(label, rest)| !label.is_empty() && label != "*" && rest == parent),
        None => pattern == host,
    }
}

/// Decodes and checks one pair: the chain, then the key against it.
pub fn pair(cert: Pem, key: Pem) -> Result<Served, CertError> {
    let (cert_name, key_name) = (cert.name().to_string(), key.name().to_string());
    let chain = cert.chain()?;
    for (i, der) in chain.iter().enumerate() {
        x509_parser::parse_x509_certificate(der).map_err(|e| CertError::ChainInvalid {
            cert: cert_name.clone(),
            index: i + 1,
            why: e.to_string(),
        })?;
    }
    let (_, parsed) =
        x509_parser::parse_x509_certificate(&chain[0]).map_err(|e| CertError::ChainInvalid {
            cert: cert_name.clone(),
            index: 1,
            why: e.to_string(),
        })?;
    let private = key.private_key()?;
    let provider = super::provider();
    let certified =
        CertifiedKey::from_der(chain.clone(), private, &provider).map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => CertError::NotItsKey {
                key: key_name.clone(),
                cert: cert_name.clone(),
            },
            source => CertError::KeyUnusable {
                key: key_name.clone(),
                source,
            },
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
        std::path::Path::new(&cert_name)
            .file_name()
            .map_or_else(String::new, |f| f.to_string_lossy().into_owned())
    });
    Ok(Served {
        key: Arc::new(certified),
        label,
        names,
        not_after: parsed.validity().not_after.timestamp(),
        serial: parsed.raw_serial_as_string().replace(':', ""),
        source: cert_name,
    })
}

#[cfg(test)]
mod tests {
    use super::covers;

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
