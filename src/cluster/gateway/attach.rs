//! The Gateway this deployment serves, its listeners, and which routes
//! attach to which listener: by `parentRefs` (name, `sectionName`,
//! `port`), the listener's `allowedRoutes` (namespaces `Same`, `All` or a
//! label `Selector`; kinds), and hostnames, which intersect as the spec
//! says (`*.example.com` covers any name under it, not itself; of two
//! that overlap, the more specific one is served).

use std::collections::BTreeMap;

use serde_json::Value;

use super::spec::{GatewaySpec, GroupKind, Listener, ParentRef};
use crate::import::manifests::At;
use crate::import::Object;
use crate::k8s::{Condition, ConditionType, Kind, Reason, GATEWAY_GROUP};

/// A listener as served, with why it is not (its conditions).
#[derive(Debug, Clone)]
pub struct Served {
    pub listener: Listener,
    /// `Accepted` false: its reason and message.
    pub refused: Option<(Reason, String)>,
    /// `ResolvedRefs` false (a certificate): its reason and message.
    pub unresolved: Option<(Reason, String)>,
    /// The kinds of route it takes.
    pub kinds: Vec<&'static str>,
    /// Routes attached, for `status.listeners[].attachedRoutes`.
    pub attached: u32,
}

/// The route kinds an HTTP or HTTPS listener takes.
const HTTP_ROUTES: [&str; 2] = [Kind::HTTPRoute.name(), Kind::GRPCRoute.name()];

/// The route kinds a listener of `protocol` can take.
fn kinds_for(protocol: &str) -> &'static [&'static str] {
    match protocol {
        "HTTP" | "HTTPS" => &HTTP_ROUTES,
        _ => &[],
    }
}

/// The listeners of `spec`, with their kinds and conditions (certificates
/// are resolved by the caller, which holds the Secrets).
pub fn listeners(spec: &GatewaySpec) -> Vec<Served> {
    spec.listeners
        .iter()
        .map(|l| {
            let supported = kinds_for(&l.protocol);
            let mut refused = None;
            if supported.is_empty() {
                refused = Some((
                    Reason::UnsupportedProtocol,
                    format!(
                        "protocol {:?} is not served: HTTP and HTTPS are",
                        l.protocol
                    ),
                ));
            }
            let (kinds, unresolved) = allowed_kinds(l, supported);
            Served {
                listener: l.clone(),
                refused,
                unresolved,
                kinds,
                attached: 0,
            }
        })
        .collect()
}

/// The kinds `allowedRoutes.kinds` names that the protocol takes; one it
/// cannot take makes `ResolvedRefs` false (`InvalidRouteKinds`).
fn allowed_kinds(
    l: &Listener,
    supported: &'static [&'static str],
) -> (Vec<&'static str>, Option<(Reason, String)>) {
    let Some(named) = l.allowed_routes.as_ref().and_then(|a| a.kinds.as_ref()) else {
        return (supported.to_vec(), None);
    };
    let mut kinds = Vec::new();
    let mut invalid = Vec::new();
    for GroupKind { group, kind } in named {
        let ours = group.as_deref().unwrap_or(GATEWAY_GROUP) == GATEWAY_GROUP;
        match supported.iter().find(|k| **k == kind && ours) {
            Some(k) => kinds.push(*k),
            None => invalid.push(kind.clone()),
        }
    }
    let unresolved = (!invalid.is_empty()).then(|| {
        (
            Reason::InvalidRouteKinds,
            format!("route kinds not served: {}", invalid.join(", ")),
        )
    });
    (kinds, unresolved)
}

/// Where one parentRef of a route attaches: the listeners (by index) and
/// the hostnames served on each, or why it does not.
pub type Attachment = Result<Vec<(usize, Vec<Option<String>>)>, Condition>;

/// The namespaces' labels, for `allowedRoutes.namespaces.selector`.
pub type Labels = BTreeMap<String, BTreeMap<String, String>>;

pub fn namespace_labels(objects: &[Object]) -> Labels {
    objects
        .iter()
        .filter(|o| o.is(Kind::Namespace))
        .map(|ns| {
            let labels = match ns.value.at("/metadata/labels") {
                Some(Value::Object(m)) => m
                    .iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect(),
                _ => BTreeMap::new(),
            };
            (ns.name.clone(), labels)
        })
        .collect()
}

/// Whether `parent` names the Gateway `gateway` (`namespace/name`), seen
/// from a route in `route_ns`.
pub fn names_gateway(parent: &ParentRef, route_ns: &str, gateway: &str) -> bool {
    let group = parent.group.as_deref().unwrap_or(GATEWAY_GROUP);
    let gateway_kind = Kind::Gateway.name();
    let kind = parent.kind.as_deref().unwrap_or(gateway_kind);
    let ns = parent.namespace.as_deref().unwrap_or(route_ns);
    group == GATEWAY_GROUP && kind == gateway_kind && format!("{ns}/{}", parent.name) == gateway
}

/// A route of `kind` in `route_ns` with `hostnames`, through `parent`.
pub fn attach(
    listeners: &[Served],
    gateway_ns: &str,
    labels: &Labels,
    parent: &ParentRef,
    route: (&str, &str, &[String]),
) -> Attachment {
    let (kind, route_ns, hostnames) = route;
    let named: Vec<(usize, &Served)> = listeners
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            parent
                .section_name
                .as_ref()
                .is_none_or(|n| *n == s.listener.name)
        })
        .filter(|(_, s)| parent.port.is_none_or(|p| p == s.listener.port))
        .collect();
    if named.is_empty() {
        return Err(Condition::no(
            ConditionType::Accepted,
            Reason::NoMatchingParent,
            "no listener of the Gateway matches the parentRef's sectionName and port",
        ));
    }
    let allowed: Vec<(usize, &Served)> = named
        .into_iter()
        .filter(|(_, s)| s.refused.is_none())
        .filter(|(_, s)| s.kinds.contains(&kind))
        .filter(|(_, s)| namespace_allowed(&s.listener, gateway_ns, route_ns, labels))
        .collect();
    if allowed.is_empty() {
        return Err(Condition::no(
            ConditionType::Accepted,
            Reason::NotAllowedByListeners,
            "no listener the parentRef names allows this route's kind and namespace",
        ));
    }
    let attached: Vec<(usize, Vec<Option<String>>)> = allowed
        .into_iter()
        .filter_map(|(i, s)| {
            let hosts = intersect(s.listener.hostname.as_deref(), hostnames);
            // Attached (and Accepted) even when a more specific listener
            // takes every hostname: it serves none of them.
            (!hosts.is_empty()).then(|| (i, isolated(listeners, i, hosts)))
        })
        .collect();
    match attached.is_empty() {
        true => Err(Condition::no(
            ConditionType::Accepted,
            Reason::NoMatchingListenerHostname,
            "no hostname of the route matches a listener's hostname",
        )),
        false => Ok(attached),
    }
}

/// Listener isolation (`GatewayHTTPListenerIsolation`): of the hostnames
/// a route serves on listener `i`, not those a more specific listener of
/// the same port matches, exact or wildcard (its routes alone answer
/// them, whichever namespaces it admits). Host-less entries stay: they
/// are fallbacks, which never answer a host some route names.
fn isolated(listeners: &[Served], i: usize, hosts: Vec<Option<String>>) -> Vec<Option<String>> {
    let own = &listeners[i].listener;
    let rank = |h: Option<&str>| match h {
        None => (0, 0),
        Some(w) if w.starts_with('*') => (1, w.len()),
        Some(e) => (2, e.len()),
    };
    let taken = |host: &str| {
        listeners.iter().enumerate().any(|(j, t)| {
            let theirs = t.listener.hostname.as_deref();
            j != i
                && t.listener.port == own.port
                && rank(theirs) > rank(own.hostname.as_deref())
                && theirs.is_some_and(|h| h == host || covers(h, host))
        })
    };
    hosts
        .into_iter()
        .filter(|h| h.as_deref().is_none_or(|h| !taken(h)))
        .collect()
}

fn namespace_allowed(l: &Listener, gateway_ns: &str, route_ns: &str, labels: &Labels) -> bool {
    let namespaces = l
        .allowed_routes
        .as_ref()
        .and_then(|a| a.namespaces.as_ref());
    match namespaces.and_then(|n| n.from.as_deref()).unwrap_or("Same") {
        "All" => true,
        "Same" => route_ns == gateway_ns,
        "Selector" => {
            let selector = namespaces.and_then(|n| n.selector.as_ref());
            let empty = BTreeMap::new();
            let route_labels = labels.get(route_ns).unwrap_or(&empty);
            selector.is_some_and(|s| s.matches(route_labels))
        }
        _ => false,
    }
}

/// The hostnames a route serves on a listener: None for any host.
pub fn intersect(listener: Option<&str>, route: &[String]) -> Vec<Option<String>> {
    let route: Vec<String> = route.iter().map(|h| h.to_ascii_lowercase()).collect();
    let listener = listener.map(str::to_ascii_lowercase);
    match (listener, route.is_empty()) {
        (None, true) => vec![None],
        (None, false) => route.into_iter().map(Some).collect(),
        (Some(l), true) => vec![Some(l)],
        (Some(l), false) => {
            let mut out: Vec<Option<String>> = route
                .iter()
                .filter_map(|r| narrower(&l, r).map(Some))
                .collect();
            out.dedup();
            out
        }
    }
}

/// Of two hostnames, the one both match when one covers the other.
fn narrower(a: &str, b: &str) -> Option<String> {
    if a == b {
        return Some(a.to_string());
    }
    if covers(a, b) {
        return Some(b.to_string());
    }
    covers(b, a).then(|| a.to_string())
}

/// Whether wildcard `pattern` (`*.example.com`) covers `name`.
fn covers(pattern: &str, name: &str) -> bool {
    let Some(suffix) = pattern.strip_prefix('*') else {
        return false;
    };
    let name = name.strip_prefix('*').unwrap_or(name);
    name.len() > suffix.len() && name.ends_with(suffix)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(l: Option<&str>, r: &[&str]) -> Vec<Option<String>> {
        let r: Vec<String> = r.iter().map(|s| s.to_string()).collect();
        intersect(l, &r)
    }

    #[test]
    fn hostnames_intersect_as_the_spec_says() {
        let some = |s: &str| Some(s.to_string());
        assert_eq!(hosts(None, &[]), vec![None]);
        assert_eq!(hosts(Some("a.example"), &[]), vec![some("a.example")]);
        assert_eq!(
            hosts(
                Some("*.example"),
                &["a.example", "b.c.example", "example", "x.other"]
            ),
            vec![some("a.example"), some("b.c.example")]
        );
        assert_eq!(
            hosts(Some("a.example"), &["*.example"]),
            vec![some("a.example")]
        );
        assert_eq!(
            hosts(Some("*.example"), &["*.a.example"]),
            vec![some("*.a.example")]
        );
        assert_eq!(
            hosts(Some("*.a.example"), &["*.example"]),
            vec![some("*.a.example")]
        );
        assert!(hosts(Some("a.example"), &["b.example"]).is_empty());
        assert!(hosts(Some("*.example"), &["example"]).is_empty());
    }
}
