//! What the Gateway API objects' status should say, as users read it with
//! `kubectl get -o yaml`: the GatewayClass Accepted; the Gateway Accepted
//! and Programmed, each listener's conditions, kinds and attached routes;
//! each route's `parents[]` entry for this Gateway with Accepted and
//! ResolvedRefs and the spec's reasons. Every condition carries the
//! object's `metadata.generation` as `observedGeneration`. The Lease
//! holder writes them (`cluster::status`), only where they differ.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::attach::{Attachment, Served};
use super::spec::ParentRef;
use crate::config::Kubernetes;
use crate::import::manifests::At;
use crate::import::Object;
use crate::k8s::{Condition, ConditionType, Kind, Reason, GATEWAY_GROUP};

/// One object's status as it should be.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusWrite {
    /// The object's kind (a watched kind's name), namespace and name.
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub status: Value,
    /// A route's: its `parents` entries are ours for this Gateway only;
    /// the writer keeps every other entry (other Gateways, other
    /// controllers) as it finds them. The controller name and Gateway.
    pub parents_of: Option<(String, String)>,
}

fn generation(o: &Object) -> i64 {
    o.value
        .at("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

fn conditions(list: &[Condition], generation: i64) -> Value {
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    Value::Array(
        list.iter()
            .map(|c| {
                json!({
                    "type": c.kind.name(),
                    "status": if c.status { "True" } else { "False" },
                    "reason": c.reason.name(),
                    "message": c.message,
                    "observedGeneration": generation,
                    "lastTransitionTime": now,
                })
            })
            .collect(),
    )
}

/// The conformance features fairgate passes (docs/conformance-report.yaml),
/// sorted by name as `GatewayClass.status.supportedFeatures` must be.
pub const SUPPORTED_FEATURES: [&str; 17] = [
    "GRPCRoute",
    "Gateway",
    "GatewayHTTPListenerIsolation",
    "HTTPRoute",
    "HTTPRoute307RedirectStatusCode",
    "HTTPRoute308RedirectStatusCode",
    "HTTPRouteHostRewrite",
    "HTTPRouteMethodMatching",
    "HTTPRoutePathRedirect",
    "HTTPRoutePathRewrite",
    "HTTPRoutePortRedirect",
    "HTTPRouteQueryParamMatching",
    "HTTPRouteRequestMirror",
    "HTTPRouteRequestTimeout",
    "HTTPRouteResponseHeaderModification",
    "HTTPRouteSchemeRedirect",
    "ReferenceGrant",
];

/// Each GatewayClass naming our controller: Accepted, and the features
/// supported.
pub fn classes(objects: &[Object], settings: &Kubernetes) -> Vec<StatusWrite> {
    let ours = our_classes(objects, settings);
    objects
        .iter()
        .filter(|o| o.is(Kind::GatewayClass) && ours.contains(o.name.as_str()))
        .map(|c| StatusWrite {
            kind: c.kind.clone(),
            namespace: String::new(),
            name: c.name.clone(),
            status: json!({
                "conditions": conditions(&[Condition::met(ConditionType::Accepted, "handled by fairgate")], generation(c)),
                "supportedFeatures": SUPPORTED_FEATURES.iter().map(|f| json!({"name": f})).collect::<Vec<_>>(),
            }),
            parents_of: None,
        })
        .collect()
}

/// The Gateway: Accepted (`ListenersNotValid`, true while one listener
/// is valid, false when none is; `InvalidParameters` false for a
/// `parametersRef`, which fairgate cannot honour), Programmed while it
/// is served, and each listener. `addresses` are added by the writer.
pub fn gateway(gw: &Object, listeners: &[Served], parameters: bool) -> StatusWrite {
    let g = generation(gw);
    let valid = listeners.iter().filter(|s| s.refused.is_none()).count();
    let accepted = match (parameters, valid) {
        (true, _) => Condition::no(
            ConditionType::Accepted,
            Reason::InvalidParameters,
            "fairgate takes no infrastructure.parametersRef",
        ),
        (false, 0) => Condition::no(
            ConditionType::Accepted,
            Reason::ListenersNotValid,
            "no listener is valid",
        ),
        (false, n) if n < listeners.len() => Condition::yes(
            ConditionType::Accepted,
            Reason::ListenersNotValid,
            "some listeners are not valid",
        ),
        _ => Condition::met(ConditionType::Accepted, "served by fairgate"),
    };
    let programmed = match accepted.status {
        true => Condition::met(ConditionType::Programmed, "the policy is in force"),
        false => Condition::no(ConditionType::Programmed, Reason::Invalid, "not accepted"),
    };
    let listeners: Vec<Value> = listeners
        .iter()
        .map(|s| listener(s, g, accepted.status))
        .collect();
    StatusWrite {
        kind: gw.kind.clone(),
        namespace: gw.namespace.clone(),
        name: gw.name.clone(),
        status: json!({"conditions": conditions(&[accepted, programmed], g), "listeners": listeners}),
        parents_of: None,
    }
}

/// A listener's status; none is programmed on a Gateway not accepted.
fn listener(s: &Served, generation: i64, gateway_accepted: bool) -> Value {
    let accepted = match &s.refused {
        None => Condition::met(ConditionType::Accepted, "listener accepted"),
        Some((reason, message)) => Condition::no(ConditionType::Accepted, *reason, message),
    };
    let resolved = match &s.unresolved {
        None => Condition::met(ConditionType::ResolvedRefs, "references resolved"),
        Some((reason, message)) => Condition::no(ConditionType::ResolvedRefs, *reason, message),
    };
    let served = s.refused.is_none() && s.unresolved.is_none() && gateway_accepted;
    let programmed = match served {
        true => Condition::met(ConditionType::Programmed, "listener served"),
        _ => Condition::no(
            ConditionType::Programmed,
            Reason::Invalid,
            "listener not served as written",
        ),
    };
    let kinds: Vec<Value> = s
        .kinds
        .iter()
        .map(|k| json!({"group": GATEWAY_GROUP, "kind": k}))
        .collect();
    json!({
        "name": s.listener.name,
        "supportedKinds": kinds,
        "attachedRoutes": s.attached,
        "conditions": conditions(&[accepted, resolved, programmed], generation),
    })
}

/// A route's parent entry, its parentRef written out in full (group, kind
/// and namespace included, as clients compare them).
fn parent_entry(
    route: &Object,
    settings: &Kubernetes,
    parent: &ParentRef,
    list: &[Condition],
) -> Value {
    let mut r = json!({
        "group": parent.group.as_deref().unwrap_or(GATEWAY_GROUP),
        "kind": parent.kind.as_deref().unwrap_or(Kind::Gateway.name()),
        "namespace": parent.namespace.as_deref().unwrap_or(&route.namespace),
        "name": parent.name,
    });
    if let Some(s) = &parent.section_name {
        r["sectionName"] = json!(s);
    }
    if let Some(p) = parent.port {
        r["port"] = json!(p);
    }
    json!({
        "parentRef": r,
        "controllerName": settings.gateway_controller,
        "conditions": conditions(list, generation(route)),
    })
}

/// A route's entries for the Gateway: Accepted from its attachment (or
/// the problem, when it is one of acceptance), ResolvedRefs from its
/// backends.
pub fn route(
    route: &Object,
    settings: &Kubernetes,
    parents: &[(ParentRef, Attachment)],
    unsupported: Option<Condition>,
    unresolved: Option<Condition>,
) -> StatusWrite {
    let entries: Vec<Value> = parents
        .iter()
        .map(|(parent, attached)| {
            let accepted = match (attached, &unsupported) {
                (Err(c), _) => c.clone(),
                (Ok(_), Some(p)) => p.clone(),
                (Ok(_), None) => Condition::met(ConditionType::Accepted, "attached"),
            };
            let resolved = unresolved.clone().unwrap_or_else(|| {
                Condition::met(ConditionType::ResolvedRefs, "references resolved")
            });
            parent_entry(route, settings, parent, &[accepted, resolved])
        })
        .collect();
    route_write(route, settings, entries)
}

/// A route the policy reader refused: not accepted on any parent, with
/// the reader's reason.
pub fn withheld_parents(route: &Object, settings: &Kubernetes, why: &str) -> StatusWrite {
    let gateway = settings.gateway.clone().unwrap_or_default();
    let parents: Vec<ParentRef> = route
        .value
        .at("/spec/parentRefs")
        .cloned()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    let entries: Vec<Value> = parents
        .iter()
        .filter(|p| super::attach::names_gateway(p, &route.namespace, &gateway))
        .map(|p| {
            let refused = Condition::no(ConditionType::Accepted, Reason::UnsupportedValue, why);
            let resolved = Condition::met(ConditionType::ResolvedRefs, "references resolved");
            parent_entry(route, settings, p, &[refused, resolved])
        })
        .collect();
    route_write(route, settings, entries)
}

/// Whether `route`'s status has an entry of ours for Gateway `gateway`.
pub fn has_our_entry(route: &Object, settings: &Kubernetes, gateway: &str) -> bool {
    let Some(Value::Array(parents)) = route.value.at("/status/parents") else {
        return false;
    };
    parents
        .iter()
        .any(|p| is_ours(p, &settings.gateway_controller, gateway))
}

/// Whether a `status.parents` entry is `controller`'s for Gateway
/// `gateway` (`namespace/name`).
pub fn is_ours(entry: &Value, controller: &str, gateway: &str) -> bool {
    let r = &entry["parentRef"];
    let id = format!(
        "{}/{}",
        r["namespace"].as_str().unwrap_or(""),
        r["name"].as_str().unwrap_or("")
    );
    entry["controllerName"] == controller
        && r["kind"].as_str().unwrap_or(Kind::Gateway.name()) == Kind::Gateway.name()
        && id == gateway
}

/// `route`'s status without our entry for the Gateway.
pub fn without_ours(route: &Object, settings: &Kubernetes) -> StatusWrite {
    route_write(route, settings, Vec::new())
}

fn route_write(route: &Object, settings: &Kubernetes, entries: Vec<Value>) -> StatusWrite {
    StatusWrite {
        kind: route.kind.clone(),
        namespace: route.namespace.clone(),
        name: route.name.clone(),
        status: json!({"parents": entries}),
        parents_of: Some((
            settings.gateway_controller.clone(),
            settings.gateway.clone().unwrap_or_default(),
        )),
    }
}

/// The GatewayClasses naming our controller.
pub fn our_classes<'a>(objects: &'a [Object], settings: &Kubernetes) -> BTreeSet<&'a str> {
    objects
        .iter()
        .filter(|o| o.is(Kind::GatewayClass))
        .filter(|o| {
            o.text(&["spec", "controllerName"]).as_deref() == Some(&settings.gateway_controller)
        })
        .map(|o| o.name.as_str())
        .collect()
}
