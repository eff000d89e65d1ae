//! What some hosts get at the TLS listener, found by the handshake's SNI
//! (and, for client certificates, by the request's Host): their TLS passed
//! through to a pool (`server.tls.passthrough`), or client certificates
//! (`server.tls.client_certificates`), each entry's verifier ready. The handshake asks for a certificate (never requires one: a
//! missing one is answered in HTTP, as nginx does), verifies what is sent
//! against the entry's roots and depth, and records the entry's `id` with
//! the connection; a request whose host's entry is not the one its
//! connection was verified for is misdirected (421).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

use crate::config::HostClientCerts;
use crate::host::normal_name;

/// One entry, ready to verify.
pub struct HostClients {
    /// The same roots and depth give the same id in every policy, so a
    /// reload leaves open connections' verification standing.
    pub id: u64,
    pub settings: HostClientCerts,
    pub verifier: Arc<dyn ClientCertVerifier>,
}

impl std::fmt::Debug for HostClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostClients").field("id", &self.id).finish()
    }
}

/// Every entry of a policy, by host name.
#[derive(Debug, Default)]
pub struct TlsHosts {
    entries: Vec<Arc<HostClients>>,
    by_name: HashMap<String, usize>,
    /// Passthrough hosts and their pools.
    passthrough: HashMap<String, String>,
}

impl TlsHosts {
    /// Verifiers for `settings`, with the roots each `ca` held (`ca_name`
    /// for errors). Hosts are unique across entries (the reader checked).
    /// The error names the entry (its index) whose roots cannot verify.
    pub fn new(
        loaded: Vec<(HostClientCerts, String, Vec<CertificateDer<'static>>)>,
    ) -> Result<TlsHosts, (usize, super::ClientCaError)> {
        let mut out = TlsHosts::default();
        for (i, (settings, ca_name, roots)) in loaded.into_iter().enumerate() {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            roots.hash(&mut hasher);
            settings.depth.hash(&mut hasher);
            // 0 is the listener's own acceptor.
            let id = hasher.finish().max(1);
            let inner = super::client_verifier(&ca_name, roots, false).map_err(|e| (i, e))?;
            let verifier = Arc::new(Depth {
                inner,
                depth: settings.depth,
            });
            for host in &settings.hosts {
                out.by_name.insert(host.clone(), out.entries.len());
            }
            out.entries.push(Arc::new(HostClients {
                id,
                settings,
                verifier,
            }));
        }
        Ok(out)
    }

    /// Adds `server.tls.passthrough`'s hosts (unique; the reader checked).
    pub fn with_passthrough(
        mut self,
        entries: &[crate::config::Located<crate::config::Passthrough>],
    ) -> Self {
        for entry in entries {
            for host in &entry.value.hosts {
                self.passthrough
                    .insert(host.clone(), entry.value.upstream.clone());
            }
        }
        self
    }

    /// Whether an entry has this id.
    pub fn has_id(&self, id: u64) -> bool {
        self.entries.iter().any(|e| e.id == id)
    }

    /// Whether no host has client certificates.
    pub fn no_clients(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether any host gets anything but the listener's own handshake.
    pub fn any(&self) -> bool {
        !self.entries.is_empty() || !self.passthrough.is_empty()
    }

    /// Whether a client certificates entry names `host` exactly.
    pub fn find_exact(&self, host: &str) -> bool {
        !self.by_name.is_empty() && self.by_name.contains_key(&normal_name(host))
    }

    /// The client certificates entry naming `host`.
    pub fn find(&self, host: &str) -> Option<&Arc<HostClients>> {
        self.entries.get(*lookup(&self.by_name, host)?)
    }

    /// The pool `host`'s TLS passes through to, if it does.
    pub fn passed(&self, host: &str) -> Option<&str> {
        lookup(&self.passthrough, host).map(String::as_str)
    }
}

/// `host`'s value: by its exact name, else by the nearest wildcard above
/// it (`*.lab` covers `a.b.lab`, as a route's and nginx's do).
fn lookup<'m, V>(map: &'m HashMap<String, V>, host: &str) -> Option<&'m V> {
    if map.is_empty() {
        return None;
    }
    let name = normal_name(host);
    if let Some(v) = map.get(&name) {
        return Some(v);
    }
    let mut rest = name.as_str();
    while let Some((label, parent)) = rest.split_once('.') {
        if label.is_empty() {
            return None;
        }
        if let Some(v) = map.get(&format!("*.{parent}")) {
            return Some(v);
        }
        rest = parent;
    }
    None
}

/// A verifier that also refuses a chain with more than `depth`
/// intermediate certificates (ingress-nginx's `auth-tls-verify-depth`,
/// counted on what the client sends).
#[derive(Debug)]
struct Depth {
    inner: Arc<dyn ClientCertVerifier>,
    depth: u8,
}

impl ClientCertVerifier for Depth {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        if intermediates.len() > usize::from(self.depth) {
            return Err(rustls::Error::General(format!(
                "the client sent {} intermediate certificates; depth allows {}",
                intermediates.len(),
                self.depth
            )));
        }
        self.inner
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
