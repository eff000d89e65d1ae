//! `server.tls` (its certificates, client certificates and passthrough)
//! and `server.tcp_services` as the import writes them.

use super::{ClientCerts, Passthrough};
use crate::import::emit::{Fields, Key, Node};

keys! {
    TlsKey at ["server.tls"] {
        Listen = "listen",
        Certificates = "certificates",
        ClientCertificates = "client_certificates",
        Passthrough = "passthrough",
    }
}

keys! {
    CertKey at ["server.tls.certificates[]"] {
        CertFile = "cert_file",
        KeyFile = "key_file",
        CertPem = "cert_pem",
        KeyPem = "key_pem",
        Hosts = "hosts",
    }
}

keys! {
    TcpKey at ["server.tcp_services[]"] {
        Listen = "listen",
        Upstream = "upstream",
    }
}

/// One of `server.tcp_services`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpService {
    pub listen: String,
    pub upstream: String,
}

impl TcpService {
    pub(super) fn node(&self) -> Node {
        let mut f = Fields::default();
        f.put(TcpKey::Listen, self.listen.as_str());
        f.put(TcpKey::Upstream, self.upstream.as_str());
        f.node()
    }
}

/// `server.tls`.
pub struct ServerTls {
    pub listen: String,
    pub certificates: Vec<Certificate>,
    /// Written when not empty.
    pub client_certificates: Vec<ClientCerts>,
    /// Written when not empty.
    pub passthrough: Vec<Passthrough>,
}

impl ServerTls {
    pub(super) fn node(&self) -> Node {
        let mut f = Fields::default();
        f.put(TlsKey::Listen, self.listen.as_str());
        if !self.certificates.is_empty() {
            let certs: Vec<Node> = self.certificates.iter().map(Certificate::node).collect();
            f.put(TlsKey::Certificates, certs);
        }
        if !self.client_certificates.is_empty() {
            let clients: Vec<Node> = self
                .client_certificates
                .iter()
                .map(ClientCerts::node)
                .collect();
            f.put(TlsKey::ClientCertificates, clients);
        }
        if !self.passthrough.is_empty() {
            let passed: Vec<Node> = self.passthrough.iter().map(Passthrough::node).collect();
            f.put(TlsKey::Passthrough, passed);
        }
        f.node()
    }
}

/// One of `server.tls.certificates`.
pub struct Certificate {
    pub cert: CertSource,
    /// Written when not empty.
    pub hosts: Vec<String>,
}

impl Certificate {
    fn node(&self) -> Node {
        let mut f = Fields::default();
        match &self.cert {
            CertSource::Files { cert, key } => {
                f.put(CertKey::CertFile, cert.as_str());
                f.put(CertKey::KeyFile, key.as_str());
            }
            CertSource::Pem { cert, key } => {
                f.put(CertKey::CertPem, cert.as_str());
                f.put(CertKey::KeyPem, key.as_str());
            }
        }
        if !self.hosts.is_empty() {
            f.put(CertKey::Hosts, self.hosts.clone());
        }
        f.node()
    }
}

/// Where a served certificate comes from: the files a Secret is mounted
/// as (the import), or the Secret's PEM itself (the controller).
pub enum CertSource {
    Files { cert: String, key: String },
    Pem { cert: String, key: String },
}
