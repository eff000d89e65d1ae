//! `server.tls.client_certificates` (per-host client certificates) and
//! `server.tls.passthrough` (per-host TLS passed through).

use std::collections::BTreeSet;
use std::path::Path;

use super::super::place::Located;
use super::super::route::PathRegex;
use super::super::schema;
use super::super::tls_hosts::{HostClientCerts, Passthrough};
use super::super::yaml::{At, Reader};
use super::common::missing;

const CODE: &str = "server.tls_invalid";

/// The list's entries, with where each is written; a host in two entries
/// is an error (which roots would its handshake ask for?).
pub(super) fn client_certificates(
    r: &mut Reader<'_>,
    at: &At<'_>,
    base: &Path,
) -> Vec<Located<HostClientCerts>> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, node) in r.sequence(at).into_iter().enumerate() {
        let item = at.item(i, node);
        let Some(entry) = entry(r, &item, base) else {
            continue;
        };
        for host in &entry.hosts {
            if !seen.insert(host.clone()) {
                r.error(&item, CODE, format!("{host} is in two entries"));
            }
        }
        out.push(Located {
            value: entry,
            place: item.place(),
        });
    }
    out
}

fn entry(r: &mut Reader<'_>, item: &At<'_>, base: &Path) -> Option<HostClientCerts> {
    let c = r.mapping(item, schema::SERVER_TLS_CLIENTS)?;
    let hosts = match c.get("hosts") {
        Some(h) => hosts(r, &h),
        None => {
            missing(r, item, "hosts");
            Vec::new()
        }
    };
    let ca = super::server::pem_source(r, &c, "ca", base);
    let required = match c.get("verify") {
        None => true,
        Some(v) => match r.string(&v).as_deref() {
            Some("required") => true,
            Some("optional") => false,
            _ => {
                r.error_value(&v, CODE, "must be required or optional");
                true
            }
        },
    };
    let depth = match c.get("depth") {
        None => 1,
        Some(d) => match r.u64(&d, CODE) {
            Some(n @ 1..=8) => n as u8,
            Some(_) => {
                r.error_value(&d, CODE, "must be 1 to 8");
                1
            }
            None => 1,
        },
    };
    let pass_certificate = c.get("pass_certificate").and_then(|p| r.bool(&p));
    let match_subject = c.get("match_subject").and_then(|m| subject_regex(r, &m));
    let error_page = c.get("error_page").and_then(|e| error_page(r, &e));
    Some(HostClientCerts {
        hosts: (!hosts.is_empty()).then_some(hosts)?,
        ca: ca?,
        required,
        depth,
        pass_certificate: pass_certificate.unwrap_or(false),
        match_subject,
        error_page,
    })
}

/// Host names or `*.domain`, lower case, at least one.
pub(super) fn hosts(r: &mut Reader<'_>, at: &At<'_>) -> Vec<String> {
    let names = r.strings(at);
    if names.is_empty() {
        r.error(at, CODE, "needs at least one host");
    }
    let mut out = Vec::new();
    for name in names {
        let name = crate::host::normal_name(&name);
        let bare = name.strip_prefix("*.").unwrap_or(&name);
        let ok = !bare.is_empty()
            && bare.len() <= 253
            && bare.split('.').all(|l| {
                !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
        if ok {
            out.push(name);
        } else {
            r.error_value(at, CODE, format!("{name:?} is not a host name or *.domain"));
        }
    }
    out
}

/// Searched in the subject, as nginx's `~` (anchor it to match it whole).
fn subject_regex(r: &mut Reader<'_>, at: &At<'_>) -> Option<PathRegex> {
    let text = r.string(at)?;
    match regex::RegexBuilder::new(&text).size_limit(1 << 20).build() {
        Ok(re) => Some(PathRegex(re)),
        Err(e) => {
            let why = e.to_string().lines().last().unwrap_or("").to_string();
            r.error_value(at, CODE, format!("not a regular expression: {why}"));
            None
        }
    }
}

fn error_page(r: &mut Reader<'_>, at: &At<'_>) -> Option<String> {
    let text = r.string(at)?;
    let ok = text
        .parse::<http::Uri>()
        .is_ok_and(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some());
    if !ok {
        r.error_value(at, CODE, "must be an http:// or https:// URL");
        return None;
    }
    Some(text)
}

/// `server.tls.passthrough`: hosts and the pool each entry passes to (a
/// pool that exists and does not speak TLS itself: `check_passthrough`).
pub(super) fn passthrough(
    r: &mut Reader<'_>,
    at: &At<'_>,
    clients: &[Located<HostClientCerts>],
) -> Vec<Located<Passthrough>> {
    let mut out = Vec::new();
    let mut seen: BTreeSet<String> = clients
        .iter()
        .flat_map(|c| c.value.hosts.iter().cloned())
        .collect();
    for (i, node) in r.sequence(at).into_iter().enumerate() {
        let item = at.item(i, node);
        let Some(p) = r.mapping(&item, schema::SERVER_TLS_PASSTHROUGH) else {
            continue;
        };
        let hosts = match p.get("hosts") {
            Some(h) => hosts(r, &h),
            None => {
                missing(r, &item, "hosts");
                Vec::new()
            }
        };
        for host in &hosts {
            if !seen.insert(host.clone()) {
                let why =
                    format!("{host} is in two entries (of passthrough or client_certificates)");
                r.error(&item, CODE, why);
            }
        }
        let upstream = match p.get("upstream") {
            Some(u) => r.string(&u),
            None => {
                missing(r, &item, "upstream");
                None
            }
        };
        if let (false, Some(upstream)) = (hosts.is_empty(), upstream) {
            out.push(Located {
                value: Passthrough { hosts, upstream },
                place: item.place(),
            });
        }
    }
    out
}

/// Each passthrough entry's pool exists and does not speak TLS itself
/// (the client's TLS passes through it).
pub(super) fn check_passthrough(r: &mut Reader<'_>, config: &super::super::Config) {
    let entries = config.server.tls.iter().flat_map(|t| &t.passthrough);
    for entry in entries {
        let why = match config.upstreams.get(&entry.value.upstream) {
            None => format!(
                "upstream {:?}: no upstream with this name",
                entry.value.upstream
            ),
            Some(pool) if pool.tls => format!(
                "upstream {:?} has tls: true; a passthrough pool carries the client's own TLS",
                entry.value.upstream
            ),
            Some(_) => continue,
        };
        r.problems.push_at(&entry.place, CODE, why);
    }
}
