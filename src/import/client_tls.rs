//! `auth-tls-*`: client certificates for the Ingress's hosts, as
//! `server.tls.client_certificates`. ingress-nginx sets them per server
//! (host), from the first Ingress of the host that asks; so does the
//! import, and only an Ingress of the namespace whose Ingress is the
//! host's oldest may set them (another namespace's must never change how
//! a host authenticates), never on the operator's hosts nor on a wildcard.
//! An Ingress whose settings cannot cover every path it serves (or whose
//! Secret cannot be carried over whole) is withheld.

use std::collections::BTreeMap;

use super::draft::Draft;
use super::manifests::{At, Object};
use super::names;
use super::out::{CaSource, ClientCerts};
use super::plan::Plan;
use super::units::go_bool;
use super::{Refusal, Verdict};

/// The annotations this module reads (without the prefix).
pub const KEYS: &[&str] = &[
    "auth-tls-error-page",
    "auth-tls-match-cn",
    "auth-tls-pass-certificate-to-upstream",
    "auth-tls-secret",
    "auth-tls-verify-client",
    "auth-tls-verify-depth",
];

/// Reads the `auth-tls-*` annotations into `plan.client_certs`, a line each.
pub fn read(
    draft: &mut Draft<'_>,
    ing: &Object,
    ann: &BTreeMap<String, String>,
    plan: &mut Plan,
    lines: &mut Vec<(String, Verdict)>,
) {
    let given = super::annotations::present(KEYS, ann);
    if given.is_empty() {
        return;
    }
    let mapped = |why: &str| Verdict::Mapped(why.to_string());
    let verify = ann.get("auth-tls-verify-client").map(String::as_str);
    let off = match (ann.get("auth-tls-secret"), verify) {
        (None, _) => Some("no effect without auth-tls-secret, as in ingress-nginx"),
        (_, Some("off")) => {
            Some("auth-tls-verify-client: off: no certificate is asked for, as in ingress-nginx")
        }
        _ => None,
    };
    if let Some(why) = off {
        lines.extend(given.iter().map(|k| (k.to_string(), mapped(why))));
        return;
    }
    let ca = refused(draft, ing, "client certificates").map_or_else(
        || ca(draft, &ing.namespace, &ann["auth-tls-secret"]),
        |why| Err(why.into()),
    );
    let ca = match ca {
        Ok(ca) => ca,
        Err(why) => {
            lines.extend(
                given
                    .iter()
                    .map(|k| (k.to_string(), Verdict::from(why.clone()))),
            );
            return;
        }
    };
    let mut entry = ClientCerts {
        hosts: Vec::new(),
        ca,
        optional: false,
        depth: 1,
        pass_certificate: false,
        match_subject: None,
        error_page: None,
    };
    for key in given {
        let verdict = one(&mut entry, key, &ann[key]);
        lines.push((key.to_string(), verdict));
    }
    if !lines
        .iter()
        .any(|(_, v)| matches!(v, Verdict::Unsupported(_)))
    {
        plan.client_certs = Some(entry);
    }
}

/// What one annotation sets.
fn one(entry: &mut ClientCerts, key: &str, value: &str) -> Verdict {
    let mapped = |why: &str| Verdict::Mapped(why.to_string());
    match key {
        "auth-tls-secret" => mapped(
            "server.tls.client_certificates for the Ingress's hosts: the Secret's ca.crt; a request \
             without a certificate gets 400, one for the host on a connection whose handshake named \
             another host 421, as in ingress-nginx; ssl-client-verify, -subject-dn and -issuer-dn go upstream",
        ),
        "auth-tls-verify-client" => match value {
            "on" => mapped("verify: required"),
            "optional" => {
                entry.optional = true;
                Verdict::Approximated(
                "verify: optional; a certificate the CA did not sign fails the handshake (ingress-nginx \
                 answered 400)"
                        .into(),
                )
            }
            "optional_no_ca" => Verdict::Unsupported(
                "fairgate verifies every client certificate it takes: one no CA signed would reach the \
                 backend as if verified"
                    .into(),
            ),
            other => Verdict::Unsupported(format!("{other:?}: on, off, optional or optional_no_ca")),
        },
        "auth-tls-verify-depth" => match value.trim().parse::<u8>() {
            Ok(n @ 1..=8) => {
                entry.depth = n;
                Verdict::Approximated(
                    "depth: the most intermediate certificates counted on what the client sends".into(),
                )
            }
            _ => Verdict::Unsupported(format!("{value:?}: a depth from 1 to 8")),
        },
        "auth-tls-pass-certificate-to-upstream" => {
            entry.pass_certificate = go_bool(value);
            mapped("pass_certificate: ssl-client-cert, URL-encoded PEM as nginx sends it")
        }
        "auth-tls-match-cn" => match regex::RegexBuilder::new(value).size_limit(1 << 16).build() {
            Ok(_) => {
                entry.match_subject = Some(value.to_string());
                mapped("match_subject: searched in the subject (RFC 4514, as nginx's $ssl_client_s_dn); 403 when it does not match")
            }
            Err(_) => Verdict::Unsupported(format!("{value:?} is not a regular expression")),
        },
        "auth-tls-error-page" => {
            let url = value.parse::<http::Uri>().is_ok_and(|u| {
                matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some()
            });
            match url {
                true => {
                    entry.error_page = Some(value.to_string());
                    mapped("error_page: a request without a certificate is redirected there (302)")
                }
                false => Verdict::Approximated(format!(
                    "{value:?} is not an http(s) URL: a request without a certificate gets 400"
                )),
            }
        }
        _ => Verdict::Unsupported("no fairgate equivalent".into()),
    }
}

/// Why the Ingress cannot have client certificates for all it serves: its
/// paths served without them would be open. They are per host: a rule
/// without one cannot have them; a wildcard would cover other owners'
/// hosts; the operator's and another namespace's hosts are not its to set;
/// and the listener must exist.
pub(super) fn refused(draft: &mut Draft<'_>, ing: &Object, what: &str) -> Option<String> {
    if draft.options.cluster && draft.options.tls_listen.is_empty() {
        return Some(format!(
            "the base policy has no server.tls listener for {what}"
        ));
    }
    let hosts: std::collections::BTreeSet<Option<String>> =
        super::paths::of(ing).into_iter().map(|p| p.0).collect();
    if hosts.contains(&None) || ing.value.at("/spec/defaultBackend").is_some() {
        return Some(format!(
            "a rule without a host (or a defaultBackend): {what} can only be set per host"
        ));
    }
    let owners = super::policy::host_owners(draft);
    for host in hosts.into_iter().flatten() {
        let host = host.to_ascii_lowercase();
        if host.starts_with("*.") {
            return Some(format!(
                "{host} is a wildcard: {what} for it would cover other owners' hosts \
                 (the operator may set that in the base policy)"
            ));
        }
        if super::claims::reserved(&draft.options.reserved_hosts, &host, true).is_some() {
            return Some(format!(
                "{host} is the operator's: only the base policy sets {what} for it"
            ));
        }
        let theirs = owners
            .get(&host)
            .and_then(|(_, id)| id.split_once('/'))
            .is_some_and(|(ns, _)| ns != ing.namespace);
        if theirs {
            return Some(format!(
                "{host} is another namespace's: only that namespace may set {what} for it"
            ));
        }
        if draft.options.named_elsewhere.contains(&host) {
            return Some(format!(
                "{host} is a Gateway API route's: only its owner may set {what} for it"
            ));
        }
    }
    None
}

/// `auth-tls-secret: NAMESPACE/NAME`: its `ca.crt`, checked to hold CA
/// certificates the verifier can use (else the Ingress is withheld).
fn ca(draft: &Draft<'_>, namespace: &str, reference: &str) -> Result<CaSource, Refusal> {
    let (ns, name) = names::secret_reference(reference).map_err(Refusal::of)?;
    if ns != namespace {
        return Err(format!(
            "a Secret of namespace {ns}, not the Ingress's {namespace}: a namespace names only its own"
        )
        .into());
    }
    if !draft.options.cluster {
        return Ok(CaSource::File(format!(
            "{}/{ns}/{name}/ca.crt",
            draft.options.tls_dir
        )));
    }
    let missing = || Refusal::from(format!("Secret {ns}/{name} is missing or has no ca.crt"));
    let secret = draft.secret(&ns, &name).ok_or_else(missing)?;
    if super::tls::secret_field(secret, "ca.crl").is_some() {
        return Err(format!(
            "Secret {ns}/{name} has a ca.crl: fairgate does not check revocation lists, so a revoked \
             certificate would pass"
        )
        .into());
    }
    let pem = super::tls::secret_field(secret, "ca.crt").ok_or_else(missing)?;
    let source = format!("Secret {ns}/{name} ca.crt");
    let roots = crate::tls::Pem::from_memory(&source, pem.as_bytes())
        .and_then(crate::tls::Pem::roots)
        .map_err(Refusal::of)?;
    crate::tls::client_verifier(&source, roots, false).map_err(Refusal::of)?;
    Ok(CaSource::Pem(pem))
}

/// Gives the Ingress's served hosts its entry, each not set already by an
/// earlier Ingress (reported on this one: that one's apply, as in
/// ingress-nginx).
pub fn apply(draft: &mut Draft<'_>, ing: &Object, plan: &Plan, first: usize) {
    let Some(entry) = &plan.client_certs else {
        return;
    };
    let hosts: std::collections::BTreeSet<String> = draft.routes[first..]
        .iter()
        .filter_map(|r| r.host.clone())
        .collect();
    let key = format!("{}/auth-tls-secret", draft.options.annotation_prefix);
    for host in hosts {
        let why = match draft.client_certs.get(&host) {
            _ if draft.passthrough.contains_key(&host) => Some(format!(
                "{host}'s TLS is passed through (ssl-passthrough): the gateway sees no certificate"
            )),
            Some((_, by)) if by != &ing.id() => Some(format!(
                "{host}'s client certificates are Ingress {by}'s, the first that set them (as in ingress-nginx)"
            )),
            _ => None,
        };
        match why {
            Some(why) => draft.line(&ing.id(), &key, Verdict::Approximated(why)),
            None => {
                let mut mine = entry.clone();
                mine.hosts = vec![host.clone()];
                draft.client_certs.insert(host, (mine, ing.id()));
            }
        }
    }
}
