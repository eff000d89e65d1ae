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
    for (host, path, _, backend) in super::paths::of(ing) {
        let Some(host) = host.filter(|_| path == "/") else {
            continue;
        };
        let host = host.to_ascii_lowercase();
        if let Some((_, by)) = draft.passthrough.get(&host) {
            let why = format!("{host} is passed through for Ingress {by}, the first that asked");
            draft.line(&ing.id(), &key, Verdict::Approximated(why));
            continue;
        }
        let Some(Served::Pool(pool)) = backend::upstream(draft, ing, backend, &plain) else {
            continue;
        };
        let entry = Passthrough {
            hosts: vec![host.clone()],
            upstream: pool,
        };
        draft.passthrough.insert(host, (entry, ing.id()));
    }
}
