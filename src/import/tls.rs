//! An Ingress's TLS sections: the certificate files where its Secrets are
//! mounted (`--tls-dir`), and the hosts they serve. How a TLS backend is
//! checked is `proxy_ssl.rs`'s.

use serde_json::Value;

use super::claims;
use super::draft::Draft;
use super::manifests::{text, At, Object};
use super::out::CertSource;
use super::Verdict;

/// TLS sections: certificate files where the Secret is mounted.
pub fn sections(draft: &mut Draft<'_>, ing: &Object) {
    let Some(Value::Array(sections)) = ing.value.at("/spec/tls") else {
        return;
    };
    for section in sections {
        let hosts: Vec<String> = match section.get("hosts") {
            // "" names no host, as in a rule.
            Some(Value::Array(h)) => h
                .iter()
                .filter_map(|v| text(v, &[]))
                .filter(|h| !h.is_empty())
                .collect(),
            _ => Vec::new(),
        };
        let Some(secret) = text(section, &["secretName"]) else {
            let why = "no secretName: ingress-nginx serves its default certificate, which is not in the manifests";
            draft.line(&ing.id(), "tls", Verdict::Unsupported(why.into()));
            continue;
        };
        let id = format!("{}/{secret}", ing.namespace);
        if draft.options.cluster && secret_cert(draft, &id).is_none() {
            let why = format!(
                "Secret {id} is missing or holds no usable tls.crt and tls.key: its hosts get the default certificate"
            );
            draft.line(&ing.id(), "tls", Verdict::Unsupported(why));
            continue;
        }
        let hosts = match hosts.is_empty() && draft.options.cluster {
            true => named_rule_hosts(draft, ing, &id),
            false => hosts,
        };
        let mut refused_any = false;
        let mut fresh = Vec::new();
        for h in hosts {
            let h = h.to_ascii_lowercase();
            if let Some(why) = refused(draft, ing, &h) {
                draft.line(&ing.id(), "tls", Verdict::Unsupported(why));
                refused_any = true;
            } else if draft.tls_hosts.insert(h.clone()) {
                draft.tls_owners.insert(h.clone(), ing.id());
                fresh.push(h);
            }
        }
        // Every host refused: the certificate serves none (an empty list
        // would serve its SANs' names, the hosts just refused among them).
        if fresh.is_empty() && refused_any {
            continue;
        }
        // In the cluster a certificate serves only hosts listed for it:
        // with none it would serve every name it has, another namespace's
        // hosts among them.
        if draft.options.cluster && fresh.is_empty() && !draft.certs.contains_key(&id) {
            let why = format!(
                "Secret {id}'s certificate is served for no host: it names none of the \
                 Ingress's hosts, or an earlier TLS section serves them (they get that one's, or \
                 the default certificate, as in ingress-nginx)"
            );
            draft.line(&ing.id(), "tls", Verdict::Unsupported(why));
            continue;
        }
        draft.certs.entry(id.clone()).or_default().extend(fresh);
        let why = match draft.options.cluster {
            true => format!("certificate of Secret {id}"),
            false => format!(
                "certificate {}/{id}/tls.crt and tls.key",
                draft.options.tls_dir
            ),
        };
        draft.line(&ing.id(), "tls", Verdict::Mapped(why));
    }
}

/// A TLS section without hosts, as ingress-nginx reads it: the Ingress's
/// rule hosts that the Secret's certificate names (a wildcard name covers
/// one label), never a name of the certificate the Ingress does not serve.
fn named_rule_hosts(draft: &Draft<'_>, ing: &Object, id: &str) -> Vec<String> {
    let names = id
        .split_once('/')
        .and_then(|(ns, name)| secret_pem(draft.secret(ns, name)?))
        .and_then(|(cert, key)| {
            let pem = |text: String| crate::tls::Pem::from_memory(id, text.as_bytes());
            crate::tls::pair(pem(cert).ok()?, pem(key).ok()?).ok()
        })
        .map(|served| served.names)
        .unwrap_or_default();
    super::paths::of(ing)
        .into_iter()
        .filter_map(|(host, ..)| host)
        .filter(|h| {
            let covered = |n: &String| n == h || crate::tls::served::covers(n, h);
            names.iter().any(covered)
        })
        .collect()
}

/// Why an Ingress's TLS section may not serve `host`'s certificate: the
/// host (or one its wildcard covers) is the operator's, or an older
/// Ingress of another namespace serves one for it; in the cluster also
/// when no rule of the Ingress names the host (ingress-nginx serves a
/// section's certificate for its own Ingress's rule hosts only), when the
/// host's oldest Ingress is another namespace's, or when a Gateway API
/// route names it.
fn refused(draft: &mut Draft<'_>, ing: &Object, host: &str) -> Option<String> {
    let what = format!("the certificate of {host}");
    if let Some(r) = claims::reserved(&draft.options.reserved_hosts, host, true) {
        return Some(claims::operators(&what, r));
    }
    if let Some(owner) = draft.tls_owners.get(host) {
        let theirs = owner.split_once('/').map(|(ns, _)| ns) != Some(&ing.namespace);
        return theirs.then(|| claims::taken(&what, owner));
    }
    if !draft.options.cluster {
        return None;
    }
    let own = super::paths::of(ing)
        .into_iter()
        .any(|(h, ..)| h.as_deref() == Some(host));
    if !own {
        return Some(format!(
            "{what}: no rule of this Ingress names {host}, and ingress-nginx serves a TLS \
             section's certificate only for its own Ingress's rule hosts"
        ));
    }
    let owners = super::policy::host_owners(draft);
    if let Some((_, owner)) = owners.get(host) {
        if owner.split_once('/').map(|(ns, _)| ns) != Some(&ing.namespace) {
            return Some(claims::taken(&what, owner));
        }
    }
    draft.options.named_elsewhere.contains(host).then(|| {
        format!(
            "{what}: {host} is a Gateway API route's, and only its owner may set its certificate"
        )
    })
}

/// The certificate of the `kubernetes.io/tls` Secret `namespace/name`
/// among the objects, as PEM for the policy.
pub fn secret_cert(draft: &Draft<'_>, id: &str) -> Option<CertSource> {
    let (ns, name) = id.split_once('/')?;
    let secret = draft.secret(ns, name)?;
    let (cert, key) = secret_pem(secret)?;
    Some(CertSource::Pem { cert, key })
}

/// A TLS Secret's `tls.crt` and `tls.key` as text.
pub fn secret_pem(secret: &Object) -> Option<(String, String)> {
    Some((
        secret_field(secret, "tls.crt")?,
        secret_field(secret, "tls.key")?,
    ))
}

/// Why a Secret's certificate cannot be served, checked as a file's is
/// (each certificate parsed, the key the leaf's and usable): an Ingress's
/// and a Gateway listener's alike, so that none reaches the build.
pub fn secret_problem(secret: &Object) -> Option<String> {
    let Some((cert, key)) = secret_pem(secret) else {
        return Some("no tls.crt and tls.key".into());
    };
    let name = format!("Secret {}", secret.id());
    let pem = |text: String| crate::tls::Pem::from_memory(&name, text.as_bytes());
    let checked = pem(cert).and_then(|c| Ok((c, pem(key)?)));
    match checked {
        Ok((cert, key)) => crate::tls::pair(cert, key).err().map(|e| e.to_string()),
        Err(e) => Some(e.to_string()),
    }
}

/// One key of a Secret as text: `data` base64-encoded, as the API gives
/// it (or `stringData`, as a manifest may hold it).
pub fn secret_field(secret: &Object, key: &str) -> Option<String> {
    use base64::Engine;
    if let Some(s) = text(&secret.value, &["stringData", key]) {
        return Some(s);
    }
    let b64 = text(&secret.value, &["data", key])?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    String::from_utf8(bytes).ok()
}
