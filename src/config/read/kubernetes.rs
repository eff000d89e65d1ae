//! Reads `kubernetes`: controller mode, what it answers to and watches.

use super::*;

pub(super) fn kubernetes(
    r: &mut Reader<'_>,
    at: &At<'_>,
    base: &std::path::Path,
) -> Option<Kubernetes> {
    let f = r.mapping(at, schema::KUBERNETES)?;
    let admission = f.get("admission").and_then(|at| admission(r, &at, base));
    let text = |r: &mut Reader<'_>, key: &str| f.get(key).and_then(|at| r.string(&at));
    let controller_name = |r: &mut Reader<'_>, key: &str, default: &str| {
        let name = text(r, key).unwrap_or_else(|| default.into());
        if let Some(at) = f.get(key).filter(|_| !controller_name_ok(&name)) {
            r.error_value(
                &at,
                "kubernetes.invalid",
                format!("expected a domain-prefixed path, e.g. {default}"),
            );
        }
        name
    };
    let controller = controller_name(r, "controller", CONTROLLER_NAME);
    let gateway_controller = controller_name(r, "gateway_controller", GATEWAY_CONTROLLER_NAME);
    let namespaces = namespaces(r, &f);
    // A Service's name is a DNS-1035 label; a ConfigMap's and a Gateway's
    // a subdomain.
    let service = |n: &str| label_ok(n) && n.starts_with(|c: char| c.is_ascii_lowercase());
    let publish_service = reference(r, &f, "publish_service", service);
    let configmap = reference(r, &f, "configmap", subdomain_ok);
    let gateway = reference(r, &f, "gateway", subdomain_ok);
    let publish_address = f
        .get("publish_address")
        .map(|a| r.strings(&a))
        .unwrap_or_default();
    if let (Some(at), Some(_)) = (f.get("publish_address"), &publish_service) {
        r.error(
            &at,
            "kubernetes.invalid",
            "give publish_service or publish_address, not both",
        );
    }
    let lease_name = text(r, "lease_name").unwrap_or_else(|| "fairgate-leader".into());
    let lease_duration = f
        .get("lease_duration")
        .and_then(|at| r.positive_duration(&at))
        .unwrap_or(Duration::from_secs(15));
    Some(Kubernetes {
        controller,
        namespaces,
        watch_without_class: f
            .get("watch_without_class")
            .and_then(|at| r.bool(&at))
            .unwrap_or(false),
        publish_service,
        publish_address,
        configmap,
        cluster_domain: text(r, "cluster_domain").unwrap_or_else(|| "cluster.local".into()),
        annotation_prefix: text(r, "annotation_prefix")
            .unwrap_or_else(|| "nginx.ingress.kubernetes.io".into()),
        lease_name,
        lease_duration,
        event_refresh: f
            .get("event_refresh")
            .and_then(|at| r.positive_duration(&at))
            .unwrap_or(Duration::from_secs(30 * 60)),
        nginx_replicas: f
            .get("nginx_replicas")
            .and_then(|at| r.count(&at, "kubernetes.invalid"))
            .map_or(1, |n| n.get()),
        gateway,
        gateway_controller,
        allow_local_endpoints: f
            .get("allow_local_endpoints")
            .and_then(|at| r.bool(&at))
            .unwrap_or(false),
        admission,
    })
}

/// A `NAMESPACE/NAME` reference, its name as `name_ok` says.
fn reference(
    r: &mut Reader<'_>,
    f: &yaml::Fields<'_>,
    key: &str,
    name_ok: impl Fn(&str) -> bool,
) -> Option<String> {
    let at = f.get(key)?;
    let text = r.string(&at)?;
    match text.split_once('/') {
        Some((ns, name)) if label_ok(ns) && name_ok(name) => Some(text),
        _ => {
            r.error_value(&at, "kubernetes.invalid", "expected NAMESPACE/NAME");
            None
        }
    }
}

/// `admission`: the validating webhook's HTTPS listener and its
/// certificate (the API server only calls webhooks over TLS).
fn admission(r: &mut Reader<'_>, at: &At<'_>, base: &std::path::Path) -> Option<Admission> {
    let f = r.mapping(at, schema::KUBERNETES_ADMISSION)?;
    let listen = match f.get("listen") {
        Some(l) => super::common::socket_addr(r, &l, "kubernetes.invalid"),
        None => {
            super::common::missing(r, at, "listen");
            None
        }
    };
    let file = |r: &mut Reader<'_>, key: &str| {
        let Some(at) = f.get(key) else {
            super::common::missing(r, at, key);
            return None;
        };
        let path = base.join(r.string(&at)?);
        if !path.is_file() {
            let message = format!("no such file {}", path.display());
            r.error_value(&at, "kubernetes.invalid", message);
            return None;
        }
        Some(path)
    };
    let (cert_file, key_file) = (file(r, "cert_file"), file(r, "key_file"));
    Some(Admission {
        listen: listen?,
        cert_file: cert_file?,
        key_file: key_file?,
    })
}

/// `namespaces`: each a namespace's name.
fn namespaces(r: &mut Reader<'_>, f: &yaml::Fields<'_>) -> Vec<String> {
    let Some(at) = f.get("namespaces") else {
        return Vec::new();
    };
    let namespaces = r.strings(&at);
    for (i, ns) in namespaces.iter().enumerate() {
        if !label_ok(ns) {
            let node = &at.node.as_sequence().expect("a list")[i];
            r.error_value(
                &at.item(i, node),
                "kubernetes.invalid",
                "not a namespace name",
            );
        }
    }
    namespaces
}

/// `IngressClass.spec.controller`: a domain-prefixed path of at most 250
/// characters, as the API server validates it.
fn controller_name_ok(name: &str) -> bool {
    match name.split_once('/') {
        Some((domain, path)) => {
            name.len() <= 250 && subdomain_ok(domain) && !path.is_empty() && !path.contains(' ')
        }
        None => false,
    }
}

/// An RFC 1123 label: a namespace's name.
fn label_ok(s: &str) -> bool {
    s.len() <= 63 && part_ok(s)
}

/// An RFC 1123 subdomain: most objects' names. As Kubernetes checks one
/// (`IsDNS1123Subdomain`), only the whole is bounded (253), not each
/// part: a Gateway may be named by 253 characters without a dot.
fn subdomain_ok(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(part_ok)
}

/// Lowercase letters, digits and `-`, neither first nor last.
fn part_ok(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}
