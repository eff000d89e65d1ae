//! What the translation of one Gateway API route works with and gives:
//! the base's names and the ReferenceGrants (`BaseNames`, `Grants`), its
//! context, its entries with their precedence, and what it made
//! (`Translated`). The translation's files (`mod.rs`, `rules.rs`,
//! `backends.rs`, `filters.rs`) all use it; it uses none of them.

use std::collections::{BTreeMap, BTreeSet};

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::spec::ReferenceGrantSpec;
use crate::import::{Node, Object};
use crate::k8s::{Condition, ConditionType, Kind, Reason, GATEWAY_GROUP};

/// The base policy file's own names, which a RoutePolicy may use (never
/// those the cluster's Ingresses bring, which other namespaces own).
#[derive(Debug, Clone, Default)]
pub struct BaseNames {
    pub limits: BTreeSet<String>,
    pub concurrency: BTreeSet<String>,
    pub methods: BTreeSet<String>,
    /// What endpoints may not point at: the base's listeners among them.
    pub guard: crate::import::Guard,
}

impl BaseNames {
    pub fn of(config: &crate::config::Config) -> BaseNames {
        let server = &config.server;
        let mut own = server.listen.clone();
        own.extend(server.tls.as_ref().map(|t| t.listen));
        own.extend(server.tcp_services.iter().map(|t| t.value.listen));
        own.extend(config.admin.listen);
        let guard = crate::import::Guard {
            allow_local: config
                .kubernetes
                .as_ref()
                .is_some_and(|k| k.allow_local_endpoints),
            own,
        };
        BaseNames {
            guard,
            limits: config.limits.keys().cloned().collect(),
            concurrency: config.concurrency.keys().cloned().collect(),
            methods: config
                .auth
                .as_ref()
                .map(|a| a.methods.keys().cloned().collect())
                .unwrap_or_default(),
        }
    }
}

/// The ReferenceGrants: which kinds of which namespaces may name objects
/// of another.
#[derive(Default)]
pub struct Grants(Vec<(String, ReferenceGrantSpec)>);

impl Grants {
    pub fn new(objects: &[Object]) -> Grants {
        Grants(
            objects
                .iter()
                .filter(|o| o.is(Kind::ReferenceGrant))
                .filter_map(|o| Some((o.namespace.clone(), parse::<ReferenceGrantSpec>(o)?)))
                .collect(),
        )
    }

    /// Whether a `from` (kind of our group, namespace) may name `to`
    /// (group, kind, namespace, name): a grant in `to`'s namespace says so.
    pub fn allows(&self, from: (&str, &str), to: (&str, &str, &str, &str)) -> bool {
        let (group, kind, ns, name) = to;
        self.0.iter().filter(|(at, _)| at == ns).any(|(_, g)| {
            g.from
                .iter()
                .any(|f| f.group == GATEWAY_GROUP && f.kind == from.0 && f.namespace == from.1)
                && g.to.iter().any(|t| {
                    t.group == group
                        && t.kind == kind
                        && t.name.as_deref().is_none_or(|n| n == name)
                })
        })
    }
}

/// The name the fairgate routes of an HTTPRoute or GRPCRoute start with
/// (then `-N`); never an Ingress's (`NAMESPACE_NAME`, its dots made `_`),
/// which holds no `__`: a name's dots are never next to each other.
pub fn route_prefix(route: &Object) -> String {
    crate::import::policy_name(&format!(
        "{}__{}__{}",
        route.namespace,
        route.name,
        route.kind.to_ascii_lowercase()
    ))
}

/// The spec of an object, or None when it does not parse as one.
pub fn parse<T: DeserializeOwned>(o: &Object) -> Option<T> {
    serde_json::from_value(o.value.get("spec").cloned().unwrap_or(Value::Null)).ok()
}

/// Where a route sorts among the Gateway's: first match wins, so the
/// spec's precedence is the order of the list. Exact hosts, then
/// wildcards (longest first), then any host; within one, exact paths,
/// then regular expressions, then prefixes (longest first); then a method
/// match, more header matches, more query matches; then the oldest route,
/// its `namespace/name`, the rule and match order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Precedence {
    /// Exact, wildcard or any; longer first; then the name itself, so one
    /// hostname's routes are together (its fence closes them).
    pub(super) host: (u8, std::cmp::Reverse<usize>, String),
    pub(super) path: (u8, std::cmp::Reverse<usize>),
    pub(super) method: u8,
    pub(super) headers: std::cmp::Reverse<usize>,
    pub(super) query: std::cmp::Reverse<usize>,
    pub(super) created: String,
    pub(super) id: String,
    pub(super) order: (usize, usize, usize),
}

/// One fairgate route of a Gateway API route.
pub struct Entry {
    pub precedence: Precedence,
    /// The hostname it serves (None: any).
    pub host: Option<String>,
    pub route: Node,
}

/// What a route's translation gives: its fairgate routes, the pools they
/// use, and why a reference did not resolve or a value is not served.
#[derive(Default)]
pub struct Translated {
    pub entries: Vec<Entry>,
    pub pools: BTreeMap<String, Node>,
    /// The pools made of endpoints, and Services without one ready.
    pub bindings: Vec<crate::import::Binding>,
    pub unresolved: Option<Condition>,
    pub unsupported: Option<Condition>,
}

/// What a route is translated with.
pub struct Context<'a> {
    /// `plain` or `tls` when every listener the route attached to is of
    /// one protocol (`match.listener`).
    pub only: Option<&'static str>,
    /// The Services and EndpointSlices of `objects`, by Service.
    pub services: &'a crate::import::Services<'a>,
    pub grants: &'a Grants,
    /// `http` or `https`: the scheme of the listeners it attached to.
    pub scheme: &'static str,
    /// The listener port, for redirects that keep the scheme.
    pub port: u32,
    /// The RoutePolicies, by namespace and name, as route keys.
    pub policies: &'a BTreeMap<(String, String), Node>,
    /// The route's namespace, where its `ExtensionRef`s point.
    pub namespace: &'a str,
    /// The names a RoutePolicy may use.
    pub base: &'a BaseNames,
}

impl Translated {
    pub(super) fn unsupported(&mut self, message: String) {
        self.unsupported.get_or_insert(Condition::no(
            ConditionType::Accepted,
            Reason::UnsupportedValue,
            &message,
        ));
    }

    pub(super) fn unresolved(&mut self, reason: Reason, message: String) {
        self.unresolved
            .get_or_insert(Condition::no(ConditionType::ResolvedRefs, reason, &message));
    }
}

/// What a rule does, whatever its match: answer itself, or forward with
/// its edits.
pub(super) struct Action {
    pub(super) fields: Vec<(String, Node)>,
    pub(super) redirect: Option<(super::spec::Redirect, u16)>,
    pub(super) rewrite: Option<super::spec::Rewrite>,
    /// A `RequestMirror`'s backend, resolved with the rule's backends.
    pub(super) mirror: Option<super::spec::BackendRef>,
    pub(super) scheme: &'static str,
    pub(super) port: u32,
    /// The `fair_share` of the rule's pools (a RoutePolicy's `fairShare`),
    /// with that policy's name, which names the pools apart.
    pub(super) fair_share: Option<(String, Node)>,
}

pub(super) fn direct(status: u16, weight: Option<u64>) -> (String, Node) {
    let mut fields = vec![("status".to_string(), Node::Int(u64::from(status)))];
    if let Some(w) = weight {
        fields.push(("weight".into(), Node::Int(w)));
    }
    ("direct_response".into(), Node::Map(fields))
}
