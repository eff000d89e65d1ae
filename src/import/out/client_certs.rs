//! `server.tls.client_certificates` (ingress-nginx's `auth-tls-*`) and
//! `server.tls.passthrough` (`ssl-passthrough`) as the import writes them.

use crate::import::emit::{Fields, Key, Node};

keys! {
    ClientCertsKey at ["server.tls.client_certificates[]"] {
        Hosts = "hosts",
        CaFile = "ca_file",
        CaPem = "ca_pem",
        Verify = "verify",
        Depth = "depth",
        PassCertificate = "pass_certificate",
        MatchSubject = "match_subject",
        ErrorPage = "error_page",
    }
}

/// Where an entry's roots are: a mounted file, or the Secret's `ca.crt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaSource {
    File(String),
    Pem(String),
}

/// One entry: the hosts and what their clients must show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCerts {
    pub hosts: Vec<String>,
    pub ca: CaSource,
    pub optional: bool,
    pub depth: u8,
    pub pass_certificate: bool,
    pub match_subject: Option<String>,
    pub error_page: Option<String>,
}

impl ClientCerts {
    pub(super) fn node(&self) -> Node {
        let mut f = Fields::default();
        f.put(ClientCertsKey::Hosts, self.hosts.clone());
        match &self.ca {
            CaSource::File(path) => f.put(ClientCertsKey::CaFile, path.as_str()),
            CaSource::Pem(pem) => f.put(ClientCertsKey::CaPem, pem.as_str()),
        }
        f.maybe(ClientCertsKey::Verify, self.optional.then_some("optional"));
        f.maybe(
            ClientCertsKey::Depth,
            (self.depth != 1).then_some(u64::from(self.depth)),
        );
        f.maybe(
            ClientCertsKey::PassCertificate,
            self.pass_certificate.then_some(true),
        );
        f.maybe(ClientCertsKey::MatchSubject, self.match_subject.clone());
        f.maybe(ClientCertsKey::ErrorPage, self.error_page.clone());
        f.node()
    }
}

keys! {
    PassthroughKey at ["server.tls.passthrough[]"] {
        Hosts = "hosts",
        Upstream = "upstream",
    }
}

/// One `server.tls.passthrough` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passthrough {
    pub hosts: Vec<String>,
    pub upstream: String,
}

impl Passthrough {
    pub(super) fn node(&self) -> Node {
        let mut f = Fields::default();
        f.put(PassthroughKey::Hosts, self.hosts.clone());
        f.put(PassthroughKey::Upstream, self.upstream.as_str());
        f.node()
    }
}
