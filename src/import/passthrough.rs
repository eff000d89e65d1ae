//! `ssl-passthrough: "true"`: the Ingress's hosts as
//! `server.tls.passthrough`, their TLS passed unterminated to the Service
//! of the host's `/` path (as ingress-nginx's passthrough proxy does; its
//! other annotations do not apply to that TLS, as in ingress-nginx). The
//! pool is the Service's without TLS of the gateway's own. Only exact
//! hosts of the Ingress's own namespace, never the operator's; the first
//! Ingress to pass a host through keeps it.

use super::backend::{self, Protocol, Served};
use super::draft::Draft;
use super::manifests::Object;
use super::out::Passthrough;
use super::plan::Plan;
use super::Verdict;

/// What `ssl-passthrough: "true"` is reported as: mapped, or why the
/// Ingress is withheld (its backend expects its own TLS: ending it here
/// would break it).
pub fn verdict(draft: &mut Draft<'_>, ing: &Object, plan: &mut Plan) -> Verdict {
    if let Some(why) = super::client_tls::refused(draft, ing, "TLS passthrough") {
        return Verdict::Unsupported(why);
    }
    if draft.options.base_client_ca {
        return Verdict::Unsupported(
            "the base policy asks every client for a certificate (server.tls.client_ca): a \
             passed-through connection would skip it"
                .into(),
        );
    }
    let prefix = &draft.options.annotation_prefix;
    if super::annotations::get(ing, prefix, "auth-tls-secret").is_some() {
        return Verdict::Unsupported(
            "with auth-tls-*: the gateway sees no client certificate in TLS it passes through"
                .into(),
        );
    }
    let paths = super::paths::of(ing);
    let hosts: std::collections::BTreeSet<&String> =
        paths.iter().filter_map(|p| p.0.as_ref()).collect();
    for host in hosts {
        if !paths
            .iter()
            .any(|p| p.0.as_ref() == Some(host) && p.1 == "/")
        {
            return Verdict::Unsupported(format!(
                "{host} has no path /: ingress-nginx passes through the Service of a host's / path only"
            ));
        }
    }
    plan.passthrough = true;
    Verdict::Mapped(
        "server.tls.passthrough: a handshake naming its hosts goes unterminated to the Service of the \
         host's / path (its endpoints); its other annotations apply only to plain HTTP, as in ingress-nginx"
            .into(),
    )
}

/// The Ingress's hosts and the pool of each one's `/` path, when
/// `verdict` mapped it; a host an earlier Ingress passes through stays
/// that one's (reported).
pub fn apply(draft: &mut Draft<'_>, ing: &Object, plan: &Plan) {
    if !plan.passthrough {
        return;
    }
    let key = format!("{}/ssl-passthrough", draft.options.annotation_prefix);
    let plain = Plan {
        protocol: Protocol::Http,
        ..Plan::default()
    };
    for (host, path, kind, backend) in super::paths::of(ing) {
        let Some(host) = host.filter(|_| path == "/") else {
            continue;
        };
        let host = host.to_ascii_lowercase();
        // Its `/` may have been refused (taken by an older Ingress).
        let origin = (host.clone(), path.clone(), kind.clone());
        let mine = draft.claimed.get(&origin) == Some(&ing.id());
        let why = match draft.passthrough.get(&host) {
            _ if !mine => Some(format!("{host}/ is another Ingress's: not passed through")),
            _ if draft.client_certs.contains_key(&host) => Some(format!(
                "{host} has client certificates (auth-tls-*) from another Ingress: not passed through"
            )),
            Some((_, by)) => Some(format!(
                "{host} is passed through for Ingress {by}, the first that asked"
            )),
            None => None,
        };
        if let Some(why) = why {
            draft.line(&ing.id(), &key, Verdict::Approximated(why));
            continue;
        }
        let pool = match backend::upstream(draft, ing, backend, &plain) {
            Some(Served::Pool(pool)) => pool,
            _ => {
                let why = format!(
                    "{host}: its Service has no ready endpoint: passed through once it has"
                );
                draft.line(&ing.id(), &key, Verdict::Approximated(why));
                continue;
            }
        };
        let entry = Passthrough {
            hosts: vec![host.clone()],
            upstream: pool,
        };
        draft.passthrough.insert(host, (entry, ing.id()));
    }
}
