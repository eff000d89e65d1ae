//! The cluster's part of the policy as the reader's tree, with no text
//! between: the import's and the Gateway translation's trees become located
//! nodes, and each entry (a route, a pool, a limit, a concurrency policy,
//! an auth method, a certificate) is put on a line of its own past the base
//! file's. A problem the reader finds is at a line, so it names its entry,
//! and the entry the objects it came from: a route its Ingress or Gateway
//! API route (by name), anything else the objects whose routes use it.

use std::collections::{BTreeMap, HashMap};

use marked_yaml::types::{MarkedMappingNode, MarkedScalarNode, MarkedSequenceNode};
use marked_yaml::{Marker, Span};

use crate::config::Problems;
use crate::import::manifests::At;
use crate::import::Node;
use crate::import::{self, Object};
use crate::k8s::Kind;

/// The sections whose entries are named by their key.
const NAMED: [&str; 3] = ["upstreams", "limits", "concurrency"];

/// One entry of the cluster's part.
struct Entry<'a> {
    section: &'static str,
    /// A route's name, a mapping entry's key; a certificate's index.
    name: String,
    node: &'a Node,
    /// Which `locate` call it came from.
    part: usize,
}

/// The entries of the trees located so far, by line.
pub struct Origins<'a> {
    first: usize,
    entries: Vec<Entry<'a>>,
    parts: usize,
}

impl<'a> Origins<'a> {
    /// Entries will be numbered from `first_line` on (past the base file).
    pub fn new(first_line: usize) -> Self {
        Origins {
            first: first_line,
            entries: Vec::new(),
            parts: 0,
        }
    }

    /// `tree` as the reader's nodes, each entry on a line of its own; what
    /// is not in an entry has no place (a problem there is not traced).
    pub fn locate(&mut self, tree: &'a Node) -> marked_yaml::Node {
        let part = self.parts;
        self.parts += 1;
        let Node::Map(sections) = tree else {
            return located(tree, None);
        };
        let mut root = MarkedMappingNode::new_empty(Span::new_blank());
        for (key, value) in sections {
            let node = match (key.as_str(), value) {
                ("routes", Node::Seq(items)) => {
                    let items = items.iter().map(|r| {
                        let name = scalar(r, "name").unwrap_or_default();
                        self.entry("routes", name, r, part)
                    });
                    sequence(items.collect(), None)
                }
                (section, Node::Map(entries)) if NAMED.contains(&section) => {
                    let section = NAMED.into_iter().find(|s| *s == section).unwrap_or("");
                    self.named(section, entries, part)
                }
                ("auth", Node::Map(keys)) => self.auth(keys, part),
                ("server", Node::Map(keys)) => self.server(keys, part),
                _ => located(value, None),
            };
            root.insert(MarkedScalarNode::from(key.as_str()), node);
        }
        marked_yaml::Node::from(root)
    }

    fn entry(
        &mut self,
        section: &'static str,
        name: String,
        node: &'a Node,
        part: usize,
    ) -> marked_yaml::Node {
        let line = self.first + self.entries.len();
        self.entries.push(Entry {
            section,
            name,
            node,
            part,
        });
        located(node, Some(line))
    }

    fn named(
        &mut self,
        section: &'static str,
        entries: &'a [(String, Node)],
        part: usize,
    ) -> marked_yaml::Node {
        let mut map = MarkedMappingNode::new_empty(Span::new_blank());
        for (name, node) in entries {
            let line = self.first + self.entries.len();
            let value = self.entry(section, name.clone(), node, part);
            map.insert(scalar_node(name, Some(line)), value);
        }
        marked_yaml::Node::from(map)
    }

    /// `auth`, its `methods` entries each an entry.
    fn auth(&mut self, keys: &'a [(String, Node)], part: usize) -> marked_yaml::Node {
        let mut map = MarkedMappingNode::new_empty(Span::new_blank());
        for (key, value) in keys {
            let node = match (key.as_str(), value) {
                ("methods", Node::Map(methods)) => self.named("auth", methods, part),
                _ => located(value, None),
            };
            map.insert(MarkedScalarNode::from(key.as_str()), node);
        }
        marked_yaml::Node::from(map)
    }

    /// `server`, each of `tls.certificates` an entry.
    fn server(&mut self, keys: &'a [(String, Node)], part: usize) -> marked_yaml::Node {
        let mut map = MarkedMappingNode::new_empty(Span::new_blank());
        for (key, value) in keys {
            let node = match (key.as_str(), value) {
                ("tls", Node::Map(tls)) => {
                    let mut out = MarkedMappingNode::new_empty(Span::new_blank());
                    for (key, value) in tls {
                        let node = match (key.as_str(), value) {
                            ("certificates", Node::Seq(items)) => {
                                let items = items.iter().enumerate().map(|(i, c)| {
                                    self.entry("certificates", i.to_string(), c, part)
                                });
                                sequence(items.collect(), None)
                            }
                            _ => located(value, None),
                        };
                        out.insert(MarkedScalarNode::from(key.as_str()), node);
                    }
                    marked_yaml::Node::from(out)
                }
                _ => located(value, None),
            };
            map.insert(MarkedScalarNode::from(key.as_str()), node);
        }
        marked_yaml::Node::from(map)
    }

    fn at(&self, line: usize) -> Option<&Entry<'a>> {
        self.entries.get(line.checked_sub(self.first)?)
    }

    /// The certificate of `part` a problem is in: its index there.
    pub fn certificate(&self, line: usize, part: usize) -> Option<usize> {
        let entry = self.at(line)?;
        let mine = entry.section == "certificates" && entry.part == part;
        mine.then(|| entry.name.parse().ok()).flatten()
    }

    /// The objects to withhold, each with the reader's message (its field
    /// path named by the entry rather than by its place in the merged
    /// policy); empty when a problem is in the base or cannot be traced
    /// (then nothing is built).
    pub fn owners(&self, problems: &Problems, served: &[&Object]) -> BTreeMap<String, String> {
        let owner = Owner::new(served);
        let mut out = BTreeMap::new();
        for problem in problems.errors() {
            let Some(entry) = self.at(problem.line) else {
                return BTreeMap::new();
            };
            let why = format!("{}: {}", problem.code, named_field(&problem.message, entry));
            let blamed: Vec<(&Object, String)> = match entry.section {
                "routes" => owner
                    .of(&entry.name)
                    .map(|o| (o, why.clone()))
                    .into_iter()
                    .collect(),
                // An Ingress's certificate is of the Ingresses whose TLS
                // sections name its hosts (and the Secret); the Gateway's,
                // of its listeners.
                "certificates" if entry.part == 0 => tls_owners(entry.node, served)
                    .into_iter()
                    .map(|(o, secret)| {
                        let message = without_place(&problem.message);
                        (
                            o,
                            format!("{}: TLS Secret {secret}: {message}", problem.code),
                        )
                    })
                    .collect(),
                "certificates" => Vec::new(),
                _ => self
                    .users(&entry.name, &owner)
                    .into_iter()
                    .map(|o| (o, why.clone()))
                    .collect(),
            };
            if blamed.is_empty() {
                return BTreeMap::new();
            }
            for (o, why) in blamed {
                out.entry(o.id()).or_insert(why);
            }
        }
        out
    }

    /// The objects whose routes use a pool, limit, concurrency policy or
    /// auth method the base file already names: theirs would be the
    /// base's (an Ingress must never reach a pool the operator kept).
    pub fn clashing(&self, names: &[String], served: &[&Object]) -> BTreeMap<String, String> {
        let owner = Owner::new(served);
        let mut out = BTreeMap::new();
        for name in names {
            for o in self.users(name, &owner) {
                let why = format!("kubernetes.name_taken: {name:?} is a name of the base policy");
                out.entry(o.id()).or_insert(why);
            }
        }
        out
    }

    /// The owners of the routes that name `name` anywhere.
    fn users<'o>(&self, name: &str, owner: &Owner<'o>) -> Vec<&'o Object> {
        self.entries
            .iter()
            .filter(|e| e.section == "routes" && mentions(e.node, name))
            .filter_map(|e| owner.of(&e.name))
            .collect()
    }
}

/// Which served object a route is of: its name is the object's route
/// prefix, a dash and a number.
pub(crate) struct Owner<'o> {
    by_prefix: HashMap<String, &'o Object>,
}

impl<'o> Owner<'o> {
    pub(crate) fn new(served: &[&'o Object]) -> Self {
        let by_prefix = served
            .iter()
            .map(|o| {
                let prefix = match o.is(Kind::Ingress) {
                    true => import::route_prefix(&o.namespace, &o.name),
                    false => super::gateway::route_prefix(o),
                };
                (prefix, *o)
            })
            .collect();
        Owner { by_prefix }
    }

    pub(crate) fn of(&self, route: &str) -> Option<&'o Object> {
        let (prefix, n) = route.rsplit_once('-')?;
        let numbered = !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
        numbered
            .then(|| self.by_prefix.get(prefix).copied())
            .flatten()
    }
}

/// The reader's message with the merged policy's place of the entry
/// (`routes[12]`, `upstreams.x`) replaced by the entry's own name.
fn named_field(message: &str, entry: &Entry<'_>) -> String {
    let rest = match entry.section {
        "routes" | "certificates" => message
            .strip_prefix(if entry.section == "routes" {
                "routes["
            } else {
                "server.tls.certificates["
            })
            .and_then(|m| m.split_once(']'))
            .map(|(_, rest)| rest),
        "auth" => message
            .strip_prefix("auth.methods.")
            .and_then(|m| m.strip_prefix(entry.name.as_str())),
        section => message
            .strip_prefix(section)
            .and_then(|m| m.strip_prefix('.'))
            .and_then(|m| m.strip_prefix(entry.name.as_str())),
    };
    let what = match entry.section {
        "routes" => "route",
        "upstreams" => "pool",
        "limits" => "limit",
        "concurrency" => "concurrency policy",
        "auth" => "auth method",
        _ => "certificate",
    };
    match rest {
        Some(rest) => format!("{what} {}{rest}", entry.name),
        None => message.to_string(),
    }
}

/// The served Ingress whose TLS section names a host of the certificate
/// `node`, with the section's Secret (`namespace/name`): the oldest, whose
/// claim the import kept (`import::age`), so a later section of
/// another namespace naming the same host is never blamed for it, nor
/// makes its owner blamed for another's certificate.
fn tls_owners<'o>(node: &Node, served: &[&'o Object]) -> Vec<(&'o Object, String)> {
    let hosts: Vec<String> = match node {
        Node::Map(keys) => keys
            .iter()
            .filter(|(k, _)| k == "hosts")
            .flat_map(|(_, v)| match v {
                Node::Seq(items) => items.as_slice(),
                _ => &[],
            })
            .filter_map(|h| match h {
                Node::Str(s) => Some(s.to_ascii_lowercase()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    let mut out = Vec::new();
    for o in served.iter().copied().filter(|o| o.is(Kind::Ingress)) {
        let sections = match o.value.at("/spec/tls") {
            Some(serde_json::Value::Array(s)) => s.as_slice(),
            _ => &[],
        };
        let named = sections.iter().find(|s| {
            let names = s.get("hosts").and_then(|h| h.as_array());
            names
                .into_iter()
                .flatten()
                .filter_map(|h| h.as_str())
                .any(|h| hosts.contains(&h.to_ascii_lowercase()))
        });
        if let Some(secret) = named.and_then(|s| s.get("secretName")?.as_str()) {
            out.push((o, format!("{}/{secret}", o.namespace)));
        }
    }
    out.sort_by_cached_key(|(o, _)| import::age(o));
    out.truncate(1);
    out
}

/// `message` without the merged policy's places of certificates, which
/// the object's author does not know: a leading one dropped, any other
/// said as "its certificate".
fn without_place(message: &str) -> String {
    const AT: &str = "server.tls.certificates[";
    let mut out = message.to_string();
    while let Some(at) = out.find(AT) {
        let mut end = out[at..].find(']').map_or(out.len(), |e| at + e + 1);
        let field = [".cert_pem", ".key_pem"]
            .into_iter()
            .find(|f| out[end..].starts_with(f));
        end += field.map_or(0, str::len);
        let said = match at {
            0 => {
                end += usize::from(out[end..].starts_with(": ")) * 2;
                ""
            }
            _ => "its certificate",
        };
        out.replace_range(at..end, said);
    }
    out
}

/// Whether any scalar under `node` is `name`.
fn mentions(node: &Node, name: &str) -> bool {
    match node {
        Node::Str(s) => s == name,
        Node::Int(_) | Node::Bool(_) => false,
        Node::Seq(items) => items.iter().any(|n| mentions(n, name)),
        Node::Map(entries) => entries.iter().any(|(_, n)| mentions(n, name)),
    }
}

fn scalar(node: &Node, key: &str) -> Option<String> {
    match node {
        Node::Map(entries) => entries.iter().find_map(|(k, v)| match v {
            Node::Str(s) if k == key => Some(s.clone()),
            _ => None,
        }),
        _ => None,
    }
}

fn span(line: Option<usize>) -> Span {
    match line {
        Some(line) => Span::new_start(Marker::new(0, 0, line, 1)),
        None => Span::new_blank(),
    }
}

/// A string as the reader sees a quoted one (never a boolean or null).
fn scalar_node(text: &str, line: Option<usize>) -> MarkedScalarNode {
    let mut node = MarkedScalarNode::new(span(line), text);
    node.set_coerce(false);
    node
}

fn sequence(items: Vec<marked_yaml::Node>, line: Option<usize>) -> marked_yaml::Node {
    marked_yaml::Node::from(MarkedSequenceNode::new(span(line), items))
}

/// `node` as the reader's nodes, all at `line`.
fn located(node: &Node, line: Option<usize>) -> marked_yaml::Node {
    match node {
        Node::Str(s) => marked_yaml::Node::from(scalar_node(s, line)),
        Node::Int(n) => marked_yaml::Node::from(MarkedScalarNode::new(span(line), n.to_string())),
        Node::Bool(b) => marked_yaml::Node::from(MarkedScalarNode::new(span(line), b.to_string())),
        Node::Seq(items) => sequence(items.iter().map(|n| located(n, line)).collect(), line),
        Node::Map(entries) => {
            let mut map = MarkedMappingNode::new_empty(span(line));
            for (key, value) in entries {
                map.insert(scalar_node(key, line), located(value, line));
            }
            marked_yaml::Node::from(map)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_entry_is_on_a_line_of_its_own_and_names_its_field() {
        let tree = Node::map([
            (
                "auth",
                Node::map([(
                    "methods",
                    Node::map([("apps_private-auth", Node::map([("basic", Node::str("x"))]))]),
                )]),
            ),
            (
                "upstreams",
                Node::map([("apps_web-80", Node::map([("targets", Node::strs(["a:1"]))]))]),
            ),
            (
                "routes",
                Node::Seq(vec![Node::map([
                    ("name", Node::str("apps_private-0")),
                    ("auth", Node::str("apps_private-auth")),
                ])]),
            ),
        ]);
        let mut origins = Origins::new(10);
        let located = origins.locate(&tree);
        let at = |line| origins.at(line).map(|e| (e.section, e.name.as_str()));
        assert_eq!(at(9), None);
        assert_eq!(at(10), Some(("auth", "apps_private-auth")));
        assert_eq!(at(11), Some(("upstreams", "apps_web-80")));
        assert_eq!(at(12), Some(("routes", "apps_private-0")));
        assert_eq!(at(13), None);
        let route = &located
            .as_mapping()
            .unwrap()
            .get_sequence("routes")
            .unwrap()[0];
        assert_eq!(super::super::super::config::yaml::position(route), (12, 1));
        let entry = origins.at(12).unwrap();
        assert!(mentions(entry.node, "apps_private-auth"));
        assert_eq!(
            named_field("routes[3].timeout \"x\": not a duration", entry),
            "route apps_private-0.timeout \"x\": not a duration"
        );
        assert_eq!(
            without_place(
                "server.tls.certificates[1]: hosts: a.example is not a name of \
                 server.tls.certificates[1].cert_pem (its names: localhost)"
            ),
            "hosts: a.example is not a name of its certificate (its names: localhost)"
        );
    }

    #[test]
    fn a_certificate_is_blamed_on_its_oldest_claimant_only() {
        let ingress = |ns: &str, created: &str| Object {
            kind: Kind::Ingress.name().into(),
            namespace: ns.into(),
            name: "web".into(),
            value: std::sync::Arc::new(serde_json::json!({
                "metadata": {"creationTimestamp": created},
                "spec": {"tls": [{"hosts": ["A.example"], "secretName": "tls"}]}
            })),
        };
        let (owner, later) = (
            ingress("shop", "2026-01-01T00:00:00Z"),
            ingress("evil", "2026-06-01T00:00:00Z"),
        );
        let cert = Node::map([("hosts", Node::strs(["a.example"]))]);
        for served in [[&owner, &later], [&later, &owner]] {
            let blamed = tls_owners(&cert, &served);
            let ids: Vec<(String, String)> =
                blamed.iter().map(|(o, s)| (o.id(), s.clone())).collect();
            assert_eq!(ids, [("shop/web".to_string(), "shop/tls".to_string())]);
        }
    }
}
