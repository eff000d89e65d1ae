//! An Ingress's TLS sections: the certificate files where its Secrets are
//! mounted (`--tls-dir`), and the hosts they serve. How a TLS backend is
//! checked is `proxy_ssl.rs`'s.

use serde_json::Value;

use super::draft::Draft;
use super::manifests::{text, Object};
use super::Verdict;

/// TLS sections: certificate files where the Secret is mounted.
pub fn sections(draft: &mut Draft<'_>, ing: &Object) {
    let Some(Value::Array(sections)) = ing.value.pointer("/spec/tls") else {
        return;
    };
    for section in sections {
        let hosts: Vec<String> = match section.get("hosts") {
            Some(Value::Array(h)) => h.iter().filter_map(|v| text(v, &[])).collect(),
            _ => Vec::new(),
        };
        let Some(secret) = text(section, &["secretName"]) else {
            let why = "no secretName: ingress-nginx serves its default certificate, which is not in the manifests";
            draft.line(&ing.id(), "tls", Verdict::Unsupported(why.into()));
            continue;
        };
        let id = format!("{}/{secret}", ing.namespace);
        let mut fresh = Vec::new();
        for h in hosts {
            let h = h.to_ascii_lowercase();
            if draft.tls_hosts.insert(h.clone()) {
                fresh.push(h);
            }
        }
        draft.certs.entry(id.clone()).or_default().extend(fresh);
        let why = format!(
            "certificate {}/{id}/tls.crt and tls.key",
            draft.options.tls_dir
        );
        draft.line(&ing.id(), "tls", Verdict::Mapped(why));
    }
}
