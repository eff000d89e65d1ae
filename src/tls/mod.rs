//! TLS: PEM loading (`pem`, a leaf), the served certificates chosen by SNI
//! and swapped on renewal (`served`), client certificates (`client`), and
//! the roots the gateway's own HTTPS clients trust (`trust`).
//! Nothing here reads the config or decides when to load: the policy
//! builder reads each source once and hands the decoded material over.

pub mod client;
pub mod hosts;
pub mod pem;
pub mod served;
pub mod trust;

pub use client::{client_verifier, ClientCaError, ClientSubject, ConnectionFacts, TlsFacts};
pub use hosts::{HostClients, TlsHosts};
pub use pem::{Pem, PemError};
pub use served::{pair, BySni, CertError, Certs, Served};

/// The crypto every rustls config of the process uses: aws-lc-rs, whose
/// RSA signatures and key agreement cost least per handshake
/// (docs/benchmarks.md, "At the edge").
pub fn provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::aws_lc_rs::default_provider()
}

/// Makes `provider()` the process default before anything (Pingora's
/// listeners, the Redis and Kubernetes clients) installs another; a no-op
/// when it is installed already.
pub fn install_provider() {
    let _ = provider().install_default();
}
