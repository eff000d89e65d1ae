//! What every section's reader shares: required fields, addresses, files
//! and names, the names the file declares, and the headers the gateway
//! keeps for itself. The section readers use it; it uses none of them.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::super::place::{Located, PemSource};
use super::super::yaml::{self, join, At, Reader};

/// The names the file declares, which routes may use.
pub(super) struct Declared {
    pub(super) limits: BTreeSet<String>,
    pub(super) concurrency: BTreeSet<String>,
    /// `auth.methods`, valid or not (a broken one is reported once).
    pub(super) methods: BTreeSet<String>,
}

/// Headers identity headers may not name: the gateway sets or reads them.
pub(super) const RESERVED_HEADERS: &[&str] = &[
    "authorization",
    "host",
    "connection",
    "content-length",
    "transfer-encoding",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-request-id",
];

pub(super) fn missing(r: &mut Reader<'_>, parent: &At<'_>, key: &str) {
    r.problems.push(
        parent.pos(),
        "config.missing_field",
        format!("{}: required", join(&parent.path, key)),
    );
}

pub(super) fn socket_addr(
    r: &mut Reader<'_>,
    at: &At<'_>,
    code: &'static str,
) -> Option<SocketAddr> {
    let text = r.string(at)?;
    match text.parse() {
        Ok(addr) => Some(addr),
        Err(_) => {
            r.error_value(at, code, "expected IP:PORT, e.g. 0.0.0.0:8080");
            None
        }
    }
}

/// The `ca_file` of one of the gateway's own HTTPS clients (an external
/// auth service, the OTLP collector): an existing file, loaded by the
/// policy builder. Beside an `http://` URL it is `code`: nothing would be
/// verified, whatever the file says.
pub(super) fn ca_file(
    r: &mut Reader<'_>,
    f: &yaml::Fields<'_>,
    url: Option<&str>,
    code: &'static str,
    base: &Path,
) -> Option<Located<PemSource>> {
    let at = f.get("ca_file")?;
    let https = |u: &str| {
        u.get(..8)
            .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
    };
    if url.is_some_and(|u| !https(u)) {
        r.error(
            &at,
            code,
            "ca_file needs an https:// URL: over http:// nothing is verified",
        );
        return None;
    }
    let path = file_path(r, f, "ca_file", base)?;
    Some(Located {
        place: at.place_value(),
        value: PemSource::File(path),
    })
}

/// A file path that must exist, resolved against the config's directory.
pub(super) fn file_path(
    r: &mut Reader<'_>,
    f: &yaml::Fields<'_>,
    key: &str,
    base: &Path,
) -> Option<PathBuf> {
    let Some(at) = f.get(key) else {
        missing(r, &f.at, key);
        return None;
    };
    let text = r.string(&at)?;
    let path = base.join(&text);
    if !path.is_file() {
        r.error_value(
            &at,
            "config.file_missing",
            format!("no such file {}", path.display()),
        );
        return None;
    }
    Some(path)
}

/// A name of the policy (a limit, a concurrency policy, an auth method):
/// `A-Z a-z 0-9 _ -`, 1 to 64 bytes.
pub fn name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}
