//! TLS: PEM loading (`pem`, a leaf), the served certificates chosen by SNI
//! and swapped on renewal (`served`), and client certificates (`client`).
//! Nothing here reads the config or decides when to load: the policy
//! builder reads each source once and hands the decoded material over.

pub mod client;
pub mod pem;
pub mod served;

pub use client::{client_verifier, ClientCaError, ClientSubject, ConnectionFacts, TlsFacts};
pub use pem::{Pem, PemError};
pub use served::{pair, BySni, CertError, Certs, Served};
