//! The policy the import writes, as an ordered tree and its YAML text:
//! block style, with small mappings and lists on one line as in
//! `config/example.yaml`, and every string quoted unless it is plainly one.

/// A YAML value whose mappings keep the order they were built in.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Str(String),
    Int(u64),
    Bool(bool),
    Seq(Vec<Node>),
    Map(Vec<(String, Node)>),
}

impl Node {
    pub fn str(s: impl Into<String>) -> Node {
        Node::Str(s.into())
    }

    pub fn strs<S: Into<String>>(items: impl IntoIterator<Item = S>) -> Node {
        Node::Seq(items.into_iter().map(Node::str).collect())
    }

    pub fn map<K: Into<String>>(entries: impl IntoIterator<Item = (K, Node)>) -> Node {
        Node::Map(entries.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }
}

impl From<String> for Node {
    fn from(s: String) -> Node {
        Node::Str(s)
    }
}

impl From<&str> for Node {
    fn from(s: &str) -> Node {
        Node::Str(s.to_string())
    }
}

impl From<u64> for Node {
    fn from(n: u64) -> Node {
        Node::Int(n)
    }
}

impl From<bool> for Node {
    fn from(b: bool) -> Node {
        Node::Bool(b)
    }
}

impl From<Vec<String>> for Node {
    fn from(items: Vec<String>) -> Node {
        Node::strs(items)
    }
}

impl From<Vec<Node>> for Node {
    fn from(items: Vec<Node>) -> Node {
        Node::Seq(items)
    }
}

/// A key of one mapping of the policy, from that mapping's vocabulary
/// (`out.rs`): the only way a key's text reaches `Fields`.
pub trait Key: Copy {
    fn as_str(self) -> &'static str;
}

/// A mapping being written, its keys in the order they are put.
#[derive(Debug, Default)]
pub struct Fields(Vec<(String, Node)>);

impl Fields {
    pub fn put(&mut self, key: impl Key, value: impl Into<Node>) {
        self.0.push((key.as_str().to_string(), value.into()));
    }

    /// Puts `key` when there is a value.
    pub fn maybe<V: Into<Node>>(&mut self, key: impl Key, value: Option<V>) {
        if let Some(v) = value {
            self.put(key, v);
        }
    }

    /// An entry under a name the policy chooses (a pool, a limit, a header).
    pub fn named(&mut self, name: &str, value: impl Into<Node>) {
        self.0.push((name.to_string(), value.into()));
    }

    pub fn node(self) -> Node {
        Node::Map(self.0)
    }
}

/// Lines up to this many columns keep a mapping or list on one line.
const WIDTH: usize = 100;

/// The YAML text of a top-level mapping.
/// A JSON value as a node (`null` as an empty string; a mapping's keys in
/// the order the value holds them).
pub fn json_node(v: &serde_json::Value) -> Node {
    use serde_json::Value;
    match v {
        Value::Null => Node::str(""),
        Value::Bool(b) => Node::Bool(*b),
        // Whole numbers as integers (schemars writes `minimum: 0.0`).
        Value::Number(n) => n
            .as_u64()
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                    .map(|f| f as u64)
            })
            .map_or_else(|| Node::str(n.to_string()), Node::Int),
        Value::String(s) => Node::str(s.clone()),
        Value::Array(a) => Node::Seq(a.iter().map(json_node).collect()),
        Value::Object(m) => Node::Map(m.iter().map(|(k, v)| (k.clone(), json_node(v))).collect()),
    }
}

pub fn yaml(root: &Node) -> String {
    let mut out = String::new();
    if let Node::Map(entries) = root {
        block_map(&mut out, entries, 0);
    }
    out
}

fn block_map(out: &mut String, entries: &[(String, Node)], indent: usize) {
    for (key, value) in entries {
        let lead = format!("{}{}:", " ".repeat(indent), scalar(key));
        match one_line(value) {
            Some(text) if lead.len() + 1 + text.len() <= WIDTH => {
                out.push_str(&format!("{lead} {text}\n"));
            }
            _ => {
                out.push_str(&lead);
                out.push('\n');
                match value {
                    Node::Map(inner) => block_map(out, inner, indent + 2),
                    Node::Seq(items) => block_seq(out, items, indent + 2),
                    scalar_value => {
                        let text = one_line(scalar_value).unwrap_or_default();
                        out.push_str(&format!("{}{text}\n", " ".repeat(indent + 2)));
                    }
                }
            }
        }
    }
}

fn block_seq(out: &mut String, items: &[Node], indent: usize) {
    let pad = " ".repeat(indent);
    for item in items {
        match (one_line(item), item) {
            (Some(text), _) if indent + 2 + text.len() <= WIDTH => {
                out.push_str(&format!("{pad}- {text}\n"));
            }
            (_, Node::Map(entries)) => {
                // The first key goes on the dash's line.
                let mut inner = String::new();
                block_map(&mut inner, entries, indent + 2);
                out.push_str(&pad);
                out.push_str("- ");
                out.push_str(&inner[indent + 2..]);
            }
            (_, Node::Seq(inner)) => {
                out.push_str(&format!("{pad}-\n"));
                block_seq(out, inner, indent + 2);
            }
            (text, _) => out.push_str(&format!("{pad}- {}\n", text.unwrap_or_default())),
        }
    }
}

/// The flow form of a node (`{a: 1, b: [x, y]}`), if it has no nested
/// mapping deeper than one level; scalars always have one.
fn one_line(node: &Node) -> Option<String> {
    Some(match node {
        Node::Str(s) => scalar(s),
        Node::Int(n) => n.to_string(),
        Node::Bool(b) => b.to_string(),
        Node::Seq(items) => {
            let parts: Option<Vec<String>> = items.iter().map(flat).collect();
            format!("[{}]", parts?.join(", "))
        }
        Node::Map(entries) => {
            let parts: Option<Vec<String>> = entries
                .iter()
                .map(|(k, v)| Some(format!("{}: {}", scalar(k), one_line_inner(v)?)))
                .collect();
            format!("{{{}}}", parts?.join(", "))
        }
    })
}

/// Inside a flow mapping: scalars, lists of scalars, or one more mapping of those.
fn one_line_inner(node: &Node) -> Option<String> {
    match node {
        Node::Map(entries) => {
            let parts: Option<Vec<String>> = entries
                .iter()
                .map(|(k, v)| Some(format!("{}: {}", scalar(k), flat(v)?)))
                .collect();
            Some(format!("{{{}}}", parts?.join(", ")))
        }
        other => flat(other),
    }
}

/// Scalars and lists of scalars.
fn flat(node: &Node) -> Option<String> {
    match node {
        Node::Map(_) => None,
        Node::Seq(items) => {
            let parts: Option<Vec<String>> = items
                .iter()
                .map(|i| match i {
                    Node::Map(_) | Node::Seq(_) => None,
                    scalar_item => one_line(scalar_item),
                })
                .collect();
            Some(format!("[{}]", parts?.join(", ")))
        }
        scalar_node => one_line(scalar_node),
    }
}

/// A string as it is, when YAML reads it back as that string in block and
/// flow context alike; else double-quoted (JSON's escapes are YAML's).
fn scalar(s: &str) -> String {
    let plain = s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '/')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-'))
        && !matches!(
            s.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "on" | "off" | "null" | "y" | "n"
        );
    if plain {
        s.to_string()
    } else {
        serde_json::Value::String(s.to_string()).to_string()
    }
}

/// The policy the controller built, as `GET /v1/policy` shows it: the base
/// file's text, then the cluster's part (the Ingresses', then the
/// Gateway's) written as YAML the first time it is asked for, never on
/// the build's path.
pub fn shown(
    base: std::sync::Arc<str>,
    header: String,
    parts: std::sync::Arc<[Node; 2]>,
) -> crate::config::Source {
    crate::config::Source::made(move || {
        let (ingresses, gateway) = (yaml(&parts[0]), yaml(&parts[1]));
        format!("{base}\n---\n{header}{ingresses}{gateway}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_quoted_only_when_yaml_would_read_them_otherwise() {
        for (s, want) in [
            ("api", "api"),
            ("/v1/x", "/v1/x"),
            ("true", "\"true\""),
            ("10s", "\"10s\""),
            ("*.example.com", "\"*.example.com\""),
            ("a: b", "\"a: b\""),
            ("127.0.0.1:80", "\"127.0.0.1:80\""),
            ("say \"hi\"", "\"say \\\"hi\\\"\""),
            ("", "\"\""),
        ] {
            assert_eq!(scalar(s), want, "{s}");
        }
    }

    #[test]
    fn small_mappings_stay_on_one_line_and_lists_of_mappings_nest() {
        let root = Node::map([
            (
                "server",
                Node::map([("listen", Node::strs(["0.0.0.0:8080"]))]),
            ),
            (
                "routes",
                Node::Seq(vec![Node::map([
                    ("name", Node::str("a")),
                    ("match", Node::map([("path_prefix", Node::str("/"))])),
                    ("limits", Node::strs(["x", "y"])),
                    (
                        "cors",
                        Node::map([("origins", Node::strs(["https://a.example.com"; 4]))]),
                    ),
                ])]),
            ),
        ]);
        let text = yaml(&root);
        // "y" is a boolean to YAML 1.1 readers; a list over the width goes
        // one item a line.
        assert_eq!(
            text,
            "server: {listen: [\"0.0.0.0:8080\"]}\n\
             routes:\n  \
             - name: a\n    \
             match: {path_prefix: /}\n    \
             limits: [x, \"y\"]\n    \
             cors:\n      \
             origins:\n        \
             - \"https://a.example.com\"\n        \
             - \"https://a.example.com\"\n        \
             - \"https://a.example.com\"\n        \
             - \"https://a.example.com\"\n"
        );
        let parsed = yaml_rust2::YamlLoader::load_from_str(&text).unwrap();
        assert_eq!(parsed[0]["routes"][0]["limits"][1].as_str(), Some("y"));
    }
}
