//! A rule's backends: Services by their EndpointSlices' ready addresses,
//! weighted; what does not resolve answers 500 for its share (and says why
//! in `ResolvedRefs`), a Service without a ready endpoint 503. Only
//! Services of the route's namespace, or of one whose ReferenceGrant lets
//! the route in; never ExternalName Services (CVE-2021-25740).

use super::context::{direct, Context, Translated};
use super::spec::BackendRef;
use crate::import::{policy_name, service_targets, NoTargets, Node, Object};
use crate::k8s::{Kind, Reason};

/// A rule's backends: one pool, a weighted split, or `500` for what does
/// not resolve (its share of the weights, or all of it).
pub(super) fn backends(
    route: &Object,
    refs: &[BackendRef],
    grpc: bool,
    fair: &Option<(String, Node)>,
    cx: &Context<'_>,
    out: &mut Translated,
) -> Vec<(String, Node)> {
    let mut split = Vec::new();
    let (mut invalid, mut unavailable) = (0u64, 0u64);
    for b in refs {
        // At most 1,000,000 by the CRD's validation; what no API server
        // checked is bounded here.
        let weight = u64::from(b.weight.unwrap_or(1).min(1_000_000));
        match pool(route, b, grpc, cx, out) {
            Backend::Pool(name, node) => {
                let (name, node) = with_fair_share(&route.namespace, name, node, fair);
                out.pools.insert(name.clone(), node);
                split.push((name, weight));
            }
            Backend::Unavailable => unavailable += weight,
            Backend::Invalid => invalid += weight,
        }
        if !b.filters.is_empty() {
            out.unsupported("filters on a backendRef are not served".into());
        }
    }
    let valid: u64 = split.iter().map(|(_, w)| *w).sum();
    if valid == 0 {
        // Nothing to forward to: 500 for references that do not resolve
        // (or none at all), 503 for Services without a ready endpoint.
        let status = if invalid == 0 && unavailable > 0 {
            503
        } else {
            500
        };
        return vec![direct(status, None)];
    }
    // Beside pools, a Service without endpoints counts as unresolved.
    let invalid = invalid + unavailable;
    let mut fields = Vec::new();
    if split.len() == 1 && invalid == 0 {
        fields.push(("upstream".to_string(), Node::str(split[0].0.clone())));
        return fields;
    }
    let entries = split
        .into_iter()
        .map(|(n, w)| Node::map([("name", Node::str(n)), ("weight", Node::Int(w))]))
        .collect::<Vec<_>>();
    fields.push(("upstreams".into(), Node::Seq(entries)));
    if invalid > 0 {
        fields.push(direct(500, Some(invalid)));
    }
    fields
}

/// A pool with a RoutePolicy's `fair_share`: a pool of its own, named by
/// the route's namespace and the policy (first, so that a name cut short
/// and hashed still starts with them), so rules without it, with another
/// policy's, or of another namespace reaching the same Service never share
/// its queue or its settings.
fn with_fair_share(
    route_ns: &str,
    name: String,
    node: Node,
    fair: &Option<(String, Node)>,
) -> (String, Node) {
    let (Some((policy, fair)), Node::Map(mut fields)) = (fair, node.clone()) else {
        return (name, node);
    };
    fields.push(("fair_share".into(), fair.clone()));
    let named = policy_name(&format!("{route_ns}_{policy}_fs_{name}"));
    (named, Node::Map(fields))
}

/// A `RequestMirror`'s backend as the rule's `mirror` (its pool added);
/// nothing when it does not resolve (why, in `ResolvedRefs`) or has no
/// ready endpoint: the rule is served without copies.
pub(super) fn mirror(
    route: &Object,
    b: &super::spec::BackendRef,
    cx: &Context<'_>,
    out: &mut Translated,
) -> Option<(String, Node)> {
    let Backend::Pool(name, node) = pool(route, b, false, cx, out) else {
        return None;
    };
    out.pools.insert(name.clone(), node);
    Some(("mirror".into(), Node::map([("upstream", Node::str(name))])))
}

/// What one backendRef gives.
enum Backend {
    Pool(String, Node),
    /// A Service without a ready endpoint.
    Unavailable,
    /// A reference that does not resolve (why, in `Translated`).
    Invalid,
}

/// The pool of one backendRef.
fn pool(
    route: &Object,
    b: &BackendRef,
    grpc: bool,
    cx: &Context<'_>,
    out: &mut Translated,
) -> Backend {
    match resolve(route, b, grpc, cx, out) {
        Ok(Some((name, node))) => Backend::Pool(name, node),
        Ok(None) => Backend::Unavailable,
        Err(()) => Backend::Invalid,
    }
}

/// The pool of one backendRef, None for a Service without a ready
/// endpoint, or why not (in `out`).
fn resolve(
    route: &Object,
    b: &BackendRef,
    grpc: bool,
    cx: &Context<'_>,
    out: &mut Translated,
) -> Result<Option<(String, Node)>, ()> {
    let group = b.group.as_deref().unwrap_or("");
    let service = Kind::Service.name();
    let kind = b.kind.as_deref().unwrap_or(service);
    if !group.is_empty() || kind != service {
        out.unresolved(
            Reason::InvalidKind,
            format!("backendRef kind {kind:?} of group {group:?} is not served: Services are"),
        );
        return Err(());
    }
    let ns = b.namespace.clone().unwrap_or(route.namespace.clone());
    if ns != route.namespace
        && !cx
            .grants
            .allows((&route.kind, &route.namespace), ("", service, &ns, &b.name))
    {
        out.unresolved(
            Reason::RefNotPermitted,
            format!(
                "no ReferenceGrant in {ns} lets {} {} reach Service {}",
                route.kind, route.namespace, b.name
            ),
        );
        return Err(());
    }
    let Some(port) = b.port else {
        out.unresolved(
            Reason::BackendNotFound,
            format!("backendRef to Service {ns}/{} names no port", b.name),
        );
        return Err(());
    };
    if external_name(cx, &ns, &b.name) {
        out.unresolved(
            Reason::UnsupportedValue,
            format!(
                "Service {ns}/{} is an ExternalName Service, which Gateway API routes do not reach",
                b.name
            ),
        );
        return Err(());
    }
    let group = cx.services.group(&ns, &b.name);
    let found = service_targets(group, &ns, &b.name, &port.to_string(), &cx.base.guard);
    let binding = |pool| crate::import::Binding {
        pool,
        namespace: ns.clone(),
        service: b.name.clone(),
        port: port.to_string(),
    };
    let targets = match found {
        Ok(t) => t,
        Err(NoTargets::NoReadyEndpoints(_)) => {
            out.bindings.push(binding(None));
            return Ok(None);
        }
        Err(why) => {
            out.unresolved(Reason::BackendNotFound, why.to_string());
            return Err(());
        }
    };
    let name = policy_name(&format!(
        "{ns}_{}-{port}{}",
        b.name,
        if grpc { "_gw_h2c" } else { "_gw" }
    ));
    out.bindings.push(binding(Some(name.clone())));
    Ok(Some((name, endpoints_pool(targets, grpc))))
}

/// The pool of a Service's endpoints.
fn endpoints_pool(targets: Vec<String>, grpc: bool) -> Node {
    // Endpoints come and go with their readiness: no TCP check of each.
    let mut fields = vec![
        ("targets".to_string(), Node::strs(targets)),
        ("health_check".to_string(), Node::Bool(false)),
    ];
    if grpc {
        fields.push(("protocol".into(), Node::str("h2c")));
    }
    Node::Map(fields)
}

/// Whether Service `ns/name` is an ExternalName Service, which would send
/// a route's traffic wherever its author names, around ReferenceGrants
/// (CVE-2021-25740): the Gateway API asks implementations not to follow
/// them.
fn external_name(cx: &Context<'_>, ns: &str, name: &str) -> bool {
    cx.services.group(ns, name).iter().any(|o| {
        o.is(Kind::Service) && o.text(&["spec", "type"]).as_deref() == Some("ExternalName")
    })
}

/// A Gateway API duration (`1h`, `30s`, `500ms`, `1m30s`) in
/// milliseconds; None when it is not one.
pub fn gateway_duration(text: &str) -> Option<u64> {
    let mut total = 0u64;
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 5 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, len) = match rest {
            r if r.starts_with("ms") => (1, 2),
            r if r.starts_with('h') => (3_600_000, 1),
            r if r.starts_with('m') => (60_000, 1),
            r if r.starts_with('s') => (1_000, 1),
            _ => return None,
        };
        total += n * unit;
        rest = &rest[len..];
    }
    Some(total)
}
