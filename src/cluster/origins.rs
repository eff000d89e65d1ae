//! The cluster's part of the policy as the reader's tree, with no text
//! between: the import's and the Gateway translation's trees become located
//! nodes, and each entry (a route, a pool, a limit, a concurrency policy,
//! an auth method, a certificate) is put on a line of its own past the base
//! file's. A problem the reader finds is at a line, so it names its entry,
//! and the entry the objects it came from (`import::Sources` says whose):
//! an Ingress's route its Ingress as the import recorded it (a canary's
//! part the canary's), a Gateway API route's by its name, a certificate
//! the Ingresses naming its Secret, anything else the objects whose routes
//! use it, else the Ingress that made it.

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
    /// A route's index among its part's routes.
    index: usize,
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
                    let items = items.iter().enumerate().map(|(index, r)| {
                        let name = scalar(r, "name").unwrap_or_default();
                        let at = self.entries.len();
                        let located = self.entry("routes", name, r, part);
                        self.entries[at].index = index;
                        located
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
            index: 0,
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
    /// policy). A problem in the base, or in the Gateway's listeners, is
    /// of no object: the caller builds without the cluster's objects to
    /// tell whose it is. `sources` say whose the Ingresses' certificates
    /// and canaries are.
    pub fn owners(
        &self,
        problems: &Problems,
        served: &[&Object],
        sources: &import::Sources,
    ) -> BTreeMap<String, String> {
        let owner = Owner::new(served).with_sources(sources);
        let mut out = BTreeMap::new();
        for problem in problems.errors() {
            let Some(entry) = self.at(problem.line) else {
                continue;
            };
            let why = format!("{}: {}", problem.code, named_field(&problem.message, entry));
            let blamed: Vec<(&Object, String)> = match entry.section {
                "routes" => {
                    let field = problem.message.strip_prefix("routes[");
                    let field = field.and_then(|m| m.split_once(']')).map_or("", |(_, f)| f);
                    owner
                        .of_field(entry, field)
                        .map(|o| (o, why.clone()))
                        .into_iter()
                        .collect()
                }
                // An Ingress's certificate is of the Ingresses whose TLS
                // sections name its Secret; the Gateway's, of its
                // listeners.
                "certificates" if entry.part == 0 => {
                    let index = entry.name.parse::<usize>().ok();
                    let Some(secret) = index.and_then(|i| sources.certificates.get(i)) else {
                        continue;
                    };
                    let message = without_place(&problem.message);
                    let why = format!("{}: TLS Secret {secret}: {message}", problem.code);
                    tls_users(secret, served)
                        .into_iter()
                        .map(|o| (o, why.clone()))
                        .collect()
                }
                "certificates" => Vec::new(),
                // What no route names is its maker's.
                section => {
                    let mut users = self.users(&entry.name, &owner);
                    if users.is_empty() {
                        let made = sources.made.get(&(section, entry.name.clone()));
                        users.extend(made.and_then(|id| owner.by_id.get(id).copied()));
                    }
                    users.into_iter().map(|o| (o, why.clone())).collect()
                }
            };
            for (o, why) in blamed {
                out.entry(o.id()).or_insert(why);
            }
        }
        out
    }

    /// The objects that made a pool, limit, concurrency policy or auth
    /// method the base file already names (else the routes that use it):
    /// theirs would be the base's (an Ingress must never reach a pool the
    /// operator kept).
    pub fn clashing(
        &self,
        names: &[String],
        served: &[&Object],
        sources: &import::Sources,
    ) -> BTreeMap<String, String> {
        let owner = Owner::new(served).with_sources(sources);
        let mut out = BTreeMap::new();
        for name in names {
            // The Ingress that made the cluster's entry of that name, and
            // the routes of its namespace that use it (a pool of one
            // Service is every such Ingress's), not another namespace's
            // routes, which may name the base's own.
            let makers: Vec<&Object> = sources
                .made
                .iter()
                .filter(|((_, made), _)| made == name)
                .filter_map(|(_, id)| owner.by_id.get(id).copied())
                .collect();
            let mut blamed = self.users(name, &owner);
            if !makers.is_empty() {
                blamed.retain(|o| makers.iter().any(|m| m.namespace == o.namespace));
                blamed.extend(makers);
            }
            for o in blamed {
                let why = format!("kubernetes.name_taken: {name:?} is a name of the base policy");
                out.entry(o.id()).or_insert(why);
            }
        }
        out
    }

    /// The objects whose routes name `name`: a canary's pool is the
    /// canary's, a main route's other names its Ingress's.
    fn users<'o>(&self, name: &str, owner: &Owner<'o>) -> Vec<&'o Object> {
        let routes = self.entries.iter().filter(|e| e.section == "routes");
        routes.flat_map(|e| owner.naming(e, name)).collect()
    }
}

/// Which served object a route is of: an Ingress's as the import
/// recorded it; a Gateway API route's by its name (the object's route
/// prefix, a dash and a number); a canary's part of a main route is the
/// canary Ingress's folded into it.
pub(crate) struct Owner<'o> {
    by_prefix: HashMap<String, &'o Object>,
    by_id: HashMap<String, &'o Object>,
    /// The served object of each of the Ingresses' routes, by index.
    routes: Vec<Option<&'o Object>>,
    /// A main route's name → its canary Ingress.
    canaries: HashMap<String, &'o Object>,
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
        let ingresses = served.iter().filter(|o| o.is(Kind::Ingress));
        Owner {
            by_prefix,
            by_id: ingresses.map(|o| (o.id(), *o)).collect(),
            routes: Vec::new(),
            canaries: HashMap::new(),
        }
    }

    /// With what the import recorded: each route's Ingress, and the
    /// canaries folded into main routes.
    fn with_sources(mut self, sources: &import::Sources) -> Self {
        let by_id = &self.by_id;
        self.routes = sources
            .routes
            .iter()
            .map(|id| by_id.get(id).copied())
            .collect();
        self.canaries = sources
            .canaries
            .iter()
            .filter_map(|(main, id)| Some((main.clone(), *by_id.get(id)?)))
            .collect();
        self
    }

    /// The object route `entry` is of.
    fn route(&self, entry: &Entry<'_>) -> Option<&'o Object> {
        match entry.part {
            0 => self.routes.get(entry.index).copied().flatten(),
            _ => self.of(&entry.name),
        }
    }

    /// The object a problem at `field` of route `entry` is of (`.upstream`,
    /// `.canary.cookie`): an Ingress's `-canary` route's header match and
    /// pool are its canary's, its other keys its main's (a copy of them);
    /// a main route's `canary` key is its canary's.
    fn of_field(&self, entry: &Entry<'_>, field: &str) -> Option<&'o Object> {
        let under = |key: &str| {
            let rest = field.strip_prefix(key);
            rest.is_some_and(|r| r.is_empty() || r.starts_with(['.', ' ', ':', '[']))
        };
        let canary_route = entry
            .name
            .strip_suffix("-canary")
            .filter(|_| entry.part == 0);
        match canary_route {
            Some(main) if under(".match.headers") || under(".upstream") => {
                self.canaries.get(main).copied()
            }
            None if entry.part == 0 && under(".canary") => self.canaries.get(&entry.name).copied(),
            _ => self.route(entry),
        }
    }

    /// The objects of route `entry` that name `name`.
    fn naming(&self, entry: &Entry<'_>, name: &str) -> Vec<&'o Object> {
        let node = entry.node;
        let keys = match node {
            Node::Map(keys) => keys.as_slice(),
            _ => &[],
        };
        let canary_route = entry
            .name
            .strip_suffix("-canary")
            .filter(|_| entry.part == 0);
        let (main, canarys, mains) = match canary_route {
            Some(main) => (
                main,
                scalar(node, "upstream").as_deref() == Some(name),
                mentions_but(node, name, "upstream"),
            ),
            None => (
                entry.name.as_str(),
                keys.iter().any(|(k, v)| k == "canary" && mentions(v, name)),
                keys.iter().any(|(k, v)| k != "canary" && mentions(v, name)),
            ),
        };
        let mut out = Vec::new();
        if canarys {
            out.extend(self.canaries.get(main).copied());
        }
        if mains {
            out.extend(self.route(entry));
        }
        out
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

/// The served Ingresses whose TLS sections name `secret`
/// (`namespace/name`), which the import made a certificate of: one
/// namespace's, as a section names only its own namespace's Secrets.
fn tls_users<'o>(secret: &str, served: &[&'o Object]) -> Vec<&'o Object> {
    served
        .iter()
        .copied()
        .filter(|o| o.is(Kind::Ingress) && tls_secrets(o).any(|s| s == secret))
        .collect()
}

/// The Secrets an Ingress's TLS sections name, each `namespace/name`.
pub fn tls_secrets(ing: &Object) -> impl Iterator<Item = String> + '_ {
    let sections = match ing.value.at("/spec/tls") {
        Some(serde_json::Value::Array(s)) => s.as_slice(),
        _ => &[],
    };
    sections
        .iter()
        .filter_map(|s| s.get("secretName").and_then(serde_json::Value::as_str))
        .map(|name| format!("{}/{name}", ing.namespace))
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

/// Whether a scalar under `node` is `name`, its key `except` left out.
fn mentions_but(node: &Node, name: &str, except: &str) -> bool {
    match node {
        Node::Map(entries) => entries
            .iter()
            .any(|(k, n)| k != except && mentions(n, name)),
        other => mentions(other, name),
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
mod tests;
