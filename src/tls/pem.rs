//! PEM loading: reads a certificate, key or CA file (at most 1 MiB), or
//! takes PEM bytes handed over in memory (a Kubernetes Secret), and decodes
//! it. A `Pem` is not `Clone` and each decoding consumes it, so one read
//! is decoded at most once. Only the policy builder reads through here.
//! A leaf: it imports nothing from the crate, knows no config, names no
//! host and serves nothing.

use std::io::Read;
use std::path::Path;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;

/// Certificate chains and keys are small; a bigger file is a mistake.
pub const MAX_PEM_BYTES: u64 = 1 << 20;

/// Why PEM material could not be read or decoded; each names its source.
#[derive(Debug, thiserror::Error)]
pub enum PemError {
    #[error("{name}: {bytes} bytes, over the 1 MiB a PEM chain or key may hold")]
    TooBig { name: String, bytes: u64 },
    #[error("{name}: {source}")]
    Unreadable {
        name: String,
        source: std::io::Error,
    },
    #[error("{name}: not a PEM certificate chain: {source}")]
    NotChain {
        name: String,
        source: rustls::pki_types::pem::Error,
    },
    #[error("{name}: holds no certificate")]
    NoCertificate { name: String },
    #[error("{name}: not a PEM private key: {source}")]
    NotKey {
        name: String,
        source: rustls::pki_types::pem::Error,
    },
    #[error("{name}: not PEM certificates: {source}")]
    NotCertificates {
        name: String,
        source: rustls::pki_types::pem::Error,
    },
    #[error("{name}: holds no usable CA certificate")]
    NoRoots { name: String },
}

/// The bytes of one PEM source and the name its errors show (the path, or
/// the Secret's name), read once, to be decoded once.
#[derive(Debug)]
pub struct Pem {
    name: String,
    bytes: Vec<u8>,
}

impl Pem {
    /// Reads a file, refusing one over `MAX_PEM_BYTES`.
    pub fn read(path: &Path) -> Result<Pem, PemError> {
        let name = path.display().to_string();
        let unreadable = |source| PemError::Unreadable {
            name: name.clone(),
            source,
        };
        let file = std::fs::File::open(path).map_err(unreadable)?;
        let size = file.metadata().map_err(unreadable)?.len();
        if size > MAX_PEM_BYTES {
            return Err(PemError::TooBig { name, bytes: size });
        }
        let mut bytes = Vec::new();
        // A file that grows while it is read is still cut at the bound.
        file.take(MAX_PEM_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(unreadable)?;
        if bytes.len() as u64 > MAX_PEM_BYTES {
            let bytes = bytes.len() as u64;
            return Err(PemError::TooBig { name, bytes });
        }
        loads::count(&name);
        Ok(Pem { name, bytes })
    }

    /// PEM handed over in memory, under the bound a file has.
    pub fn from_memory(name: &str, bytes: &[u8]) -> Result<Pem, PemError> {
        let name = name.to_string();
        if bytes.len() as u64 > MAX_PEM_BYTES {
            let bytes = bytes.len() as u64;
            return Err(PemError::TooBig { name, bytes });
        }
        loads::count(&name);
        Ok(Pem {
            name,
            bytes: bytes.to_vec(),
        })
    }

    /// The name errors show: the path, or the Secret's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The undecoded bytes, for a client that takes PEM itself (the Redis
    /// client) once this source's decoding has checked them.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The bytes, for material decoded elsewhere (JWT keys, JWKS).
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// A certificate chain, leaf first; at least one certificate.
    pub fn chain(self) -> Result<Vec<CertificateDer<'static>>, PemError> {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&self.bytes)
            .collect::<Result<_, _>>()
            .map_err(|source| PemError::NotChain {
                name: self.name.clone(),
                source,
            })?;
        if chain.is_empty() {
            return Err(PemError::NoCertificate { name: self.name });
        }
        Ok(chain)
    }

    /// The first private key.
    pub fn private_key(self) -> Result<PrivateKeyDer<'static>, PemError> {
        PrivateKeyDer::from_pem_slice(&self.bytes).map_err(|source| PemError::NotKey {
            name: self.name,
            source,
        })
    }

    /// Root certificates (client CA, upstream CA): at least one usable.
    pub fn roots(self) -> Result<Vec<CertificateDer<'static>>, PemError> {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&self.bytes)
            .collect::<Result<_, _>>()
            .map_err(|source| PemError::NotCertificates {
                name: self.name.clone(),
                source,
            })?;
        let mut store = RootCertStore::empty();
        let (added, _) = store.add_parsable_certificates(certs.clone());
        if added == 0 {
            return Err(PemError::NoRoots { name: self.name });
        }
        Ok(certs)
    }
}

/// How often each source was read, for the tests that prove one load per
/// policy build. Compiled into test builds only.
pub mod loads {
    #[cfg(test)]
    static LOADS: std::sync::Mutex<Vec<(String, usize)>> = std::sync::Mutex::new(Vec::new());

    #[cfg(test)]
    pub(super) fn count(name: &str) {
        let mut loads = LOADS.lock().unwrap_or_else(|e| e.into_inner());
        match loads.iter_mut().find(|(n, _)| n == name) {
            Some((_, n)) => *n += 1,
            None => loads.push((name.to_string(), 1)),
        }
    }

    #[cfg(not(test))]
    pub(super) fn count(_: &str) {}

    /// Reads of sources whose name starts with `prefix` (a test's own
    /// directory), by name, sorted.
    #[cfg(test)]
    pub fn under(prefix: &str) -> Vec<(String, usize)> {
        let loads = LOADS.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<_> = loads
            .iter()
            .filter(|(n, _)| n.starts_with(prefix))
            .cloned()
            .collect();
        out.sort();
        out
    }
}
