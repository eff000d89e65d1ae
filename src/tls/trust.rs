//! What the gateway's own HTTPS clients trust (a JWKS endpoint, an
//! external auth service, the OTLP collector): the system's roots, the
//! compiled-in Mozilla set only where the system has none, and the CA
//! certificates of a `ca_file`, which the policy builder decoded. It reads
//! the system's store when asked, never a config file, and makes no
//! client: each caller puts these into its own builder.

use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

/// The roots one client trusts.
pub struct ClientRoots {
    /// Whether reqwest's compiled-in (Mozilla) set is trusted too: only
    /// when the system has no roots at all (a scratch image), so a host
    /// that removed a root from its store is not overruled by the set
    /// compiled into the binary.
    pub built_in: bool,
    /// The system's roots, then `private`'s.
    pub certs: Vec<reqwest::Certificate>,
}

/// The system's roots and `private` (a `ca_file`'s, decoded). A
/// certificate rustls cannot use as a root is left out: reqwest would
/// refuse to build a client holding it, and one odd certificate in the
/// system's store must not cost every other root.
pub fn client_roots(private: &[CertificateDer<'static>]) -> ClientRoots {
    // Every HTTP client is built after this: reqwest has no provider of its
    // own (only the process default), whoever calls the library.
    super::install_provider();
    let system = rustls_native_certs::load_native_certs().unwrap_or_default();
    let certs = system
        .iter()
        .chain(private)
        .filter(|der| RootCertStore::empty().add((*der).clone()).is_ok())
        .filter_map(|der| reqwest::Certificate::from_der(der).ok())
        .collect();
    ClientRoots {
        built_in: system.is_empty(),
        certs,
    }
}
