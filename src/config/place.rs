//! Where a policy value is written (`Place`, `Located`) and where PEM
//! material comes from (`PemSource`): what the model, the methods, the
//! routes and the reader's errors all name, in a file of its own so none
//! of them imports another for it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where a value is written: the position and what a problem line names
/// before its message (the field path, and a scalar's value as written:
/// `server.tls.client_ca "ca.pem"`). Problems found after reading (while
/// loading files, resolving targets) are reported here, as the reader would.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Place {
    pub line: usize,
    pub column: usize,
    pub field: String,
}

/// A value and where it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located<T> {
    pub value: T,
    pub place: Place,
}

/// Where PEM material (a certificate chain, a key, CA roots) comes from: a
/// file, or bytes handed over in memory (a Kubernetes Secret), named for
/// errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PemSource {
    File(PathBuf),
    Pem { name: String, bytes: Arc<[u8]> },
}

impl PemSource {
    /// The file, when it is one (files are watched for renewal).
    pub fn path(&self) -> Option<&Path> {
        match self {
            PemSource::File(path) => Some(path),
            PemSource::Pem { .. } => None,
        }
    }
}
