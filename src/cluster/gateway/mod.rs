//! The Gateway API (`gateway.networking.k8s.io`): the one Gateway a
//! deployment serves (`kubernetes.gateway`), when its GatewayClass names
//! our controller (`kubernetes.gateway_controller`), and the HTTPRoutes
//! and GRPCRoutes attached to it, as fairgate routes, pools and
//! certificates added to the base policy by the same merge, reading and
//! swap as the Ingresses (`compose`). `attach` decides which listener
//! takes which route, `rules` what each rule does; this module puts them
//! together and says what the objects' status should be.

mod attach;
mod backends;
mod context;
mod filters;
pub mod policy;
mod rules;
pub mod spec;
mod status;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::config::Kubernetes;
use crate::import::manifests::At;
use crate::import::{secret_pem, secret_problem, Node, Object};
use crate::k8s::{Kind, Reason};
use attach::Served;
use spec::{GatewaySpec, ListenerTls, RouteSpec};

pub use context::{parse, route_prefix, BaseNames, Grants};
pub use status::{is_ours, our_classes, withheld_parents, StatusWrite};

/// The Gateway served, when it exists and its class is ours.
pub fn gateway<'a>(
    objects: &'a [Object],
    settings: &Kubernetes,
) -> Option<(&'a Object, GatewaySpec)> {
    let id = settings.gateway.as_deref()?;
    let gw = objects
        .iter()
        .find(|o| o.is(Kind::Gateway) && o.id() == id)?;
    let spec: GatewaySpec = parse(gw)?;
    our_classes(objects, settings)
        .contains(spec.gateway_class_name.as_str())
        .then_some((gw, spec))
}

/// The HTTPRoutes and GRPCRoutes with a parentRef to the Gateway served,
/// oldest first (the order the spec breaks ties in).
pub fn routes<'o>(objects: &'o [Object], settings: &Kubernetes) -> Vec<&'o Object> {
    let Some(id) = settings.gateway.as_deref() else {
        return Vec::new();
    };
    let mut out: Vec<&Object> = objects
        .iter()
        .filter(|o| o.is(Kind::HTTPRoute) || o.is(Kind::GRPCRoute))
        .filter(|o| {
            let parents = o
                .value
                .at("/spec/parentRefs")
                .cloned()
                .unwrap_or(Value::Null);
            let parents: Vec<spec::ParentRef> = serde_json::from_value(parents).unwrap_or_default();
            parents
                .iter()
                .any(|p| attach::names_gateway(p, &o.namespace, id))
        })
        .collect();
    out.sort_by_cached_key(|o| {
        (
            o.text(&["metadata", "creationTimestamp"])
                .unwrap_or_default(),
            o.id(),
        )
    });
    out
}

/// The routes whose status still has our entry for the Gateway although
/// they no longer name it: that entry goes (others' stay).
pub fn orphans(objects: &[Object], settings: &Kubernetes) -> Vec<StatusWrite> {
    let Some(id) = settings.gateway.as_deref() else {
        return Vec::new();
    };
    let attached: BTreeSet<(String, String)> = routes(objects, settings)
        .iter()
        .map(|o| (o.kind.clone(), o.id()))
        .collect();
    objects
        .iter()
        .filter(|o| o.is(Kind::HTTPRoute) || o.is(Kind::GRPCRoute))
        .filter(|o| !attached.contains(&(o.kind.clone(), o.id())))
        .filter(|o| status::has_our_entry(o, settings, id))
        .map(|o| status::without_ours(o, settings))
        .collect()
}

/// The Secrets the Gateway's listeners name (`namespace/name`).
pub fn secrets(objects: &[Object], settings: &Kubernetes) -> BTreeSet<String> {
    let Some((gw, spec)) = gateway(objects, settings) else {
        return BTreeSet::new();
    };
    spec.listeners
        .iter()
        .filter_map(|l| l.tls.as_ref())
        .flat_map(|t| t.certificate_refs.iter())
        .filter(|r| {
            r.group.as_deref().unwrap_or("").is_empty()
                && r.kind.as_deref().unwrap_or(Kind::Secret.name()) == Kind::Secret.name()
        })
        .map(|r| {
            format!(
                "{}/{}",
                r.namespace.as_deref().unwrap_or(&gw.namespace),
                r.name
            )
        })
        .collect()
}

/// The Gateway's part of the policy, and what the objects' status says.
pub struct Translation {
    /// The policy (routes, pools, certificates), merged like the
    /// Ingresses'.
    pub policy: Node,
    pub statuses: Vec<StatusWrite>,
    /// Where each of the policy's certificates comes from, in its order
    /// (`Gateway NS/NAME, listener https (Secret NS/NAME)`): what a
    /// problem the reader finds in one names.
    pub certificates: Vec<String>,
    /// The pools made of endpoints, and Services without one ready.
    pub bindings: Vec<crate::import::Binding>,
}

impl Translation {
    /// Nothing served; only `statuses` written.
    fn nothing(statuses: Vec<StatusWrite>) -> Translation {
        Translation {
            policy: Node::Map(Vec::new()),
            statuses,
            certificates: Vec::new(),
            bindings: Vec::new(),
        }
    }
}

/// Translates the Gateway served and `routes` (some of `routes(..)`;
/// the others are withheld by the caller).
pub fn translate(
    objects: &[Object],
    routes: &[&Object],
    settings: &Kubernetes,
    base: &BaseNames,
) -> Translation {
    let mut statuses = status::classes(objects, settings);
    let Some((gw, spec)) = gateway(objects, settings) else {
        return Translation::nothing(statuses);
    };
    let grants = Grants::new(objects);
    let labels = attach::namespace_labels(objects);
    let mut listeners = attach::listeners(&spec);
    // A `parametersRef` fairgate cannot honour: not accepted, nothing served.
    let parameters = spec
        .infrastructure
        .is_some_and(|i| i.parameters_ref.is_some());
    if parameters {
        // Its routes say so too, rather than keep what they said before.
        let why = "the Gateway is not accepted: fairgate takes no infrastructure.parametersRef";
        statuses.extend(routes.iter().map(|r| withheld_parents(r, settings, why)));
        statuses.push(status::gateway(gw, &listeners, true));
        return Translation::nothing(statuses);
    }
    let (certificates, origins) = certificates(objects, gw, &mut listeners, &grants);
    let policies = policies(objects);
    let mut entries = Vec::new();
    let mut pools = BTreeMap::new();
    let mut bindings = Vec::new();
    let shared = Shared {
        services: crate::import::Services::new(objects.iter()),
        settings,
        gw,
        labels: &labels,
        grants: &grants,
        policies: &policies,
        base,
    };
    for route in routes {
        let (out, status) = one_route(&shared, &mut listeners, route);
        if let Some(out) = out {
            entries.extend(out.entries);
            pools.extend(out.pools);
            bindings.extend(out.bindings);
        }
        statuses.push(status);
    }
    entries.sort_by(|a, b| a.precedence.cmp(&b.precedence));
    let hostnames: Vec<String> = listeners
        .iter()
        .filter_map(|s| s.listener.hostname.clone())
        .collect();
    let entries = rules::fenced(entries, &hostnames);
    statuses.push(status::gateway(gw, &listeners, false));
    let mut root = Vec::new();
    if !pools.is_empty() {
        root.push((
            "upstreams".to_string(),
            Node::Map(pools.into_iter().collect()),
        ));
    }
    if !certificates.is_empty() {
        let tls = Node::map([("certificates", Node::Seq(certificates))]);
        root.push(("server".into(), Node::map([("tls", tls)])));
    }
    if !entries.is_empty() {
        root.push(("routes".into(), Node::Seq(entries)));
    }
    Translation {
        policy: Node::Map(root),
        statuses,
        certificates: origins,
        bindings,
    }
}

/// What every route of one translation is read with.
struct Shared<'a> {
    services: crate::import::Services<'a>,
    settings: &'a Kubernetes,
    gw: &'a Object,
    labels: &'a attach::Labels,
    grants: &'a Grants,
    policies: &'a BTreeMap<(String, String), Node>,
    base: &'a BaseNames,
}

/// One route: its fairgate routes and pools when it is served, and its
/// status; each listener it attaches to counts it once.
fn one_route(
    cx: &Shared<'_>,
    listeners: &mut [Served],
    route: &Object,
) -> (Option<context::Translated>, StatusWrite) {
    let Some(route_spec) = parse::<RouteSpec>(route) else {
        let why = "the route's spec does not parse as the Gateway API's";
        return (None, status::withheld_parents(route, cx.settings, why));
    };
    let gw_id = cx.gw.id();
    let mut parents = Vec::new();
    let mut on = BTreeSet::new();
    let mut hosts: Vec<Option<String>> = Vec::new();
    for parent in route_spec
        .parent_refs
        .iter()
        .filter(|p| attach::names_gateway(p, &route.namespace, &gw_id))
    {
        let attached = attach::attach(
            listeners,
            &cx.gw.namespace,
            cx.labels,
            parent,
            (&route.kind, &route.namespace, &route_spec.hostnames),
        );
        for (i, h) in attached.iter().flatten() {
            on.insert(*i);
            hosts.extend(h.iter().cloned());
        }
        parents.push((parent.clone(), attached));
    }
    let mut seen = BTreeSet::new();
    hosts.retain(|h| seen.insert(h.clone()));
    // The scheme and port redirects keep: the listeners' (HTTP first).
    let listener = on
        .iter()
        .map(|i| &listeners[*i].listener)
        .min_by_key(|l| l.protocol == "HTTPS");
    let scheme = match listener.is_some_and(|l| l.protocol == "HTTPS") {
        true => "https",
        false => "http",
    };
    let port = listener.map_or(80, |l| l.port);
    // A route of the HTTPS listeners only is not served on the plain one,
    // nor the reverse.
    let protocols: BTreeSet<&str> = on
        .iter()
        .map(|i| listeners[*i].listener.protocol.as_str())
        .collect();
    let only = match (protocols.contains("HTTP"), protocols.contains("HTTPS")) {
        (true, false) => Some("plain"),
        (false, true) => Some("tls"),
        _ => None,
    };
    let rules_cx = context::Context {
        only,
        services: &cx.services,
        grants: cx.grants,
        scheme,
        port,
        policies: cx.policies,
        namespace: &route.namespace,
        base: cx.base,
    };
    let out = rules::translate(route, &route_spec, &hosts, &rules_cx);
    let status = status::route(
        route,
        cx.settings,
        &parents,
        out.unsupported.clone(),
        out.unresolved.clone(),
    );
    if out.unsupported.is_some() {
        return (None, status);
    }
    for i in on {
        listeners[i].attached += 1;
    }
    (Some(out), status)
}

/// One Secret's certificate as the HTTPS listeners naming it use it.
struct ListenerCert {
    cert: String,
    key: String,
    /// The listeners' hostnames; any host when one has none.
    hosts: BTreeSet<String>,
    any: bool,
    listeners: Vec<String>,
}

/// The certificates of the HTTPS listeners, from their Secrets, and where
/// each comes from; a listener whose Secret is missing, not granted or
/// broken is told so.
fn certificates(
    objects: &[Object],
    gw: &Object,
    listeners: &mut [Served],
    grants: &Grants,
) -> (Vec<Node>, Vec<String>) {
    let mut out: BTreeMap<String, ListenerCert> = BTreeMap::new();
    for s in listeners
        .iter_mut()
        .filter(|s| s.listener.protocol == "HTTPS")
    {
        let tls = s.listener.tls.clone().unwrap_or_default();
        match listener_secret(objects, gw, &tls, grants) {
            Ok((id, cert, key)) => {
                let entry = out.entry(id).or_insert(ListenerCert {
                    cert,
                    key,
                    hosts: BTreeSet::new(),
                    any: false,
                    listeners: Vec::new(),
                });
                entry.listeners.push(s.listener.name.clone());
                match &s.listener.hostname {
                    Some(h) => {
                        entry.hosts.insert(h.clone());
                    }
                    None => entry.any = true,
                }
            }
            Err((reason, message)) => s.unresolved = Some((reason, message)),
        }
    }
    out.into_iter()
        .map(|(id, c)| {
            let mut fields = vec![
                ("cert_pem".to_string(), Node::str(c.cert)),
                ("key_pem".to_string(), Node::str(c.key)),
            ];
            if !c.any && !c.hosts.is_empty() {
                fields.push(("hosts".into(), Node::strs(c.hosts)));
            }
            let s = if c.listeners.len() == 1 { "" } else { "s" };
            let origin = format!(
                "Gateway {}, listener{s} {} (Secret {id})",
                gw.id(),
                c.listeners.join(", ")
            );
            (Node::Map(fields), origin)
        })
        .unzip()
}

fn listener_secret(
    objects: &[Object],
    gw: &Object,
    tls: &ListenerTls,
    grants: &Grants,
) -> Result<(String, String, String), (Reason, String)> {
    if tls.mode.as_deref().is_some_and(|m| m != "Terminate") {
        return Err((
            Reason::InvalidCertificateRef,
            "only tls.mode Terminate is served".into(),
        ));
    }
    let Some(r) = tls.certificate_refs.first() else {
        return Err((
            Reason::InvalidCertificateRef,
            "an HTTPS listener needs a certificateRef".into(),
        ));
    };
    if !r.group.as_deref().unwrap_or("").is_empty()
        || r.kind.as_deref().unwrap_or(Kind::Secret.name()) != Kind::Secret.name()
    {
        return Err((
            Reason::InvalidCertificateRef,
            "certificateRefs name Secrets".into(),
        ));
    }
    let ns = r.namespace.clone().unwrap_or_else(|| gw.namespace.clone());
    if ns != gw.namespace
        && !grants.allows(
            (Kind::Gateway.name(), &gw.namespace),
            ("", Kind::Secret.name(), &ns, &r.name),
        )
    {
        return Err((
            Reason::RefNotPermitted,
            format!(
                "no ReferenceGrant in {ns} lets the Gateway use Secret {}",
                r.name
            ),
        ));
    }
    let id = format!("{ns}/{}", r.name);
    let secret = objects.iter().find(|o| o.is(Kind::Secret) && o.id() == id);
    // Checked as the build will, so a Secret it would refuse is refused on
    // its listener, never in the build (which would stop every object's).
    let checked = secret.map(|s| (secret_problem(s), secret_pem(s)));
    match checked {
        Some((None, Some((cert, key)))) => Ok((id, cert, key)),
        Some((Some(why), _)) => Err((Reason::InvalidCertificateRef, format!("Secret {id}: {why}"))),
        _ => Err((
            Reason::InvalidCertificateRef,
            format!("Secret {id} is missing or holds no tls.crt and tls.key"),
        )),
    }
}

/// The RoutePolicies that parse, by `namespace` and name, as the route
/// keys they set (one that does not parse is as one that is missing).
fn policies(objects: &[Object]) -> BTreeMap<(String, String), Node> {
    objects
        .iter()
        .filter(|o| o.is(Kind::RoutePolicy))
        .filter_map(|o| {
            let spec: crate::k8s::route_policy::RoutePolicySpec = parse(o)?;
            let mut keys = spec.keys();
            if let Some(fair) = spec.fair_share() {
                keys.push((policy::FAIR_SHARE.into(), fair));
            }
            Some(((o.namespace.clone(), o.name.clone()), Node::Map(keys)))
        })
        .collect()
}
