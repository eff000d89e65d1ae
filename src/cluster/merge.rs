//! The base policy file with the cluster's part merged in, as one YAML
//! tree for the config reader: the cluster's pools, limits, concurrency
//! policies and authentication methods added to the base's mappings, the
//! server-wide settings of the controller ConfigMap where the base has
//! none, its routes after the base's (with `limits: []` where they name
//! none; first match wins: an Ingress, which anyone allowed to create one
//! in any namespace may write, never takes a host or path from the
//! operator's own routes), its certificates after the base's (whose first
//! stays the default; a base's one `cert` and `key` become that list's
//! first). Every node keeps its place: the base's in the file, the
//! cluster's the line `origins` gave its entry, past the file's, so a
//! problem tells which side it is in and whose entry.

use marked_yaml::types::{MarkedMappingNode, MarkedScalarNode, MarkedSequenceNode};
use marked_yaml::{Node, Span};

/// Merges `cluster` (the import's policy tree) into `base`: the names of
/// pools, limits, concurrency policies and auth methods the base has
/// already, which are left as the base's. Certificates are added only where the base has a
/// TLS listener. The cluster's entries are moved, not copied: at 10,000
/// Ingresses a copy of the tree was a tenth of a build.
pub fn merge(base: &mut Node, mut cluster: Node) -> Vec<String> {
    let mut clashes = Vec::new();
    let (Some(base), Some(cluster)) = (base.as_mapping_mut(), cluster.as_mapping_mut()) else {
        return clashes;
    };
    for section in ["upstreams", "limits", "concurrency"] {
        let Some(theirs) = taken_mapping(cluster, section) else {
            continue;
        };
        // A base section that is not a mapping was refused with the base.
        let Some(ours) = mapping_at(base, section) else {
            continue;
        };
        for (name, node) in theirs {
            match ours.contains_key(name.as_str()) {
                true => clashes.push(name.as_str().to_string()),
                false => {
                    ours.insert(name, node);
                }
            }
        }
    }
    methods(base, cluster, &mut clashes);
    let routes = cluster.get_mut("routes").and_then(Node::as_sequence_mut);
    let routes = routes.map(|r| std::mem::take(&mut **r));
    if let Some((theirs, ours)) = routes.zip(sequence_at(base, "routes")) {
        ours.extend(theirs.into_iter().map(unlimited_unless_asked));
    }
    server_settings(base, cluster);
    let theirs = cluster
        .get_mapping("server")
        .and_then(|s| s.get_mapping("tls"));
    let base_tls = base
        .get_mut("server")
        .and_then(Node::as_mapping_mut)
        .and_then(|s| s.get_mut("tls"))
        .and_then(Node::as_mapping_mut);
    if let Some((theirs, tls)) = theirs.zip(base_tls) {
        one_certificate_as_list(tls);
        // Their client certificates and passthrough never name the base's
        // hosts (the import leaves the operator's hosts alone).
        for list in ["certificates", "client_certificates", "passthrough"] {
            let Some(items) = theirs.get_sequence(list) else {
                continue;
            };
            if let Some(ours) = sequence_at(tls, list) {
                ours.extend(items.iter().cloned());
            }
        }
    }
    clashes
}

/// The base's `server.tls: {cert, key}` shorthand as the first item of a
/// `certificates` list, its nodes (and so their places in the file) kept,
/// so that the Secrets' certificates can follow it.
fn one_certificate_as_list(tls: &mut MarkedMappingNode) {
    if tls.contains_key("certificates") {
        return;
    }
    let (Some(cert), Some(key)) = (tls.get("cert").cloned(), tls.get("key").cloned()) else {
        return;
    };
    tls.remove("cert");
    tls.remove("key");
    let mut item = MarkedMappingNode::new_empty(Span::new_blank());
    item.insert(MarkedScalarNode::from("cert_file"), cert);
    item.insert(MarkedScalarNode::from("key_file"), key);
    let mut list = MarkedSequenceNode::new_empty(Span::new_blank());
    list.push(Node::from(item));
    tls.insert(MarkedScalarNode::from("certificates"), Node::from(list));
}

/// A route made from an Ingress or a Gateway API route spends the limits
/// its annotations or RoutePolicy name, and no others: the base's
/// `default_limits` are for the base's own routes, as ingress-nginx limits
/// an Ingress only when an annotation asks (SPEC §11).
fn unlimited_unless_asked(mut route: Node) -> Node {
    if let Some(map) = route.as_mapping_mut() {
        if !map.contains_key("limits") {
            let none = MarkedSequenceNode::new_empty(Span::new_blank());
            map.insert(MarkedScalarNode::from("limits"), Node::from(none));
        }
    }
    route
}

/// The Ingresses' `auth.methods` (their `auth-url`, `auth-type`) added
/// to the base's, made when the base has none; a name the base has is
/// a clash, as for pools.
fn methods(
    base: &mut MarkedMappingNode,
    cluster: &mut MarkedMappingNode,
    clashes: &mut Vec<String>,
) {
    let auth = cluster.get_mut("auth").and_then(Node::as_mapping_mut);
    let Some(theirs) = auth.and_then(|a| taken_mapping(a, "methods")) else {
        return;
    };
    let Some(ours) = mapping_at(base, "auth").and_then(|a| mapping_at(a, "methods")) else {
        return;
    };
    for (name, node) in theirs {
        match ours.contains_key(name.as_str()) {
            true => clashes.push(name.as_str().to_string()),
            false => {
                ours.insert(name, node);
            }
        }
    }
}

/// The entries of the mapping under `key`, moved out (left empty).
fn taken_mapping(
    map: &mut MarkedMappingNode,
    key: &str,
) -> Option<impl IntoIterator<Item = (MarkedScalarNode, Node)>> {
    let section = map.get_mut(key).and_then(Node::as_mapping_mut)?;
    Some(std::mem::take(&mut **section))
}

/// The controller ConfigMap's server-wide settings the import makes (the
/// address allow and deny lists, underscores in header names, compression), each where
/// the base does not set its own: the base's value wins.
fn server_settings(base: &mut MarkedMappingNode, cluster: &MarkedMappingNode) {
    const KEYS: [&str; 4] = [
        "allow_cidrs",
        "deny_cidrs",
        "allow_underscores_in_headers",
        "compression",
    ];
    let Some(theirs) = cluster.get_mapping("server") else {
        return;
    };
    let Some(ours) = mapping_at(base, "server") else {
        return;
    };
    for key in KEYS {
        if let (Some(value), false) = (theirs.get_node(key), ours.contains_key(key)) {
            ours.insert(MarkedScalarNode::from(key), value.clone());
        }
    }
}

/// The mapping under `key`, made empty when absent or null; None when
/// the base's value is something else (the reader refuses that base).
fn mapping_at<'a>(map: &'a mut MarkedMappingNode, key: &str) -> Option<&'a mut MarkedMappingNode> {
    if map.get(key).is_none_or(is_empty) {
        let empty = MarkedMappingNode::new_empty(Span::new_blank());
        map.insert(MarkedScalarNode::from(key), Node::from(empty));
    }
    map.get_mut(key).and_then(Node::as_mapping_mut)
}

/// The list under `key`, as `mapping_at`.
fn sequence_at<'a>(
    map: &'a mut MarkedMappingNode,
    key: &str,
) -> Option<&'a mut MarkedSequenceNode> {
    if map.get(key).is_none_or(is_empty) {
        let empty = MarkedSequenceNode::new_empty(Span::new_blank());
        map.insert(MarkedScalarNode::from(key), Node::from(empty));
    }
    map.get_mut(key).and_then(Node::as_sequence_mut)
}

/// A null or empty scalar (`routes:` with nothing after it).
fn is_empty(node: &Node) -> bool {
    node.as_scalar()
        .is_some_and(|s| matches!(s.as_str(), "" | "~" | "null"))
}
