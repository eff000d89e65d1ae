//! The located YAML reader: a node tree with line and column (marked-yaml)
//! and a `Reader` that turns nodes into plain values while recording every
//! problem with its place. serde would stop at the first error; operators
//! want them all at once. This module knows YAML shapes, not policy: which
//! values are valid is decided in `read/`.

use std::num::NonZeroU64;
use std::time::Duration;

use marked_yaml::{LoaderOptions, Node};

use super::error::Problems;
use super::place::Place;

/// The longest key YAML lets a file write without the explicit `?` form.
const MAX_KEY: usize = 1024;

/// A node together with the dotted field path that reached it.
#[derive(Clone)]
pub struct At<'a> {
    pub node: &'a Node,
    pub path: String,
    /// Where the key naming this node starts (for mappings and lists, whose
    /// own span starts at their first child).
    pub key_pos: (usize, usize),
}

impl<'a> At<'a> {
    pub fn root(node: &'a Node) -> Self {
        At {
            node,
            path: String::new(),
            key_pos: (1, 1),
        }
    }

    /// A value under this mapping, at `key`, whose key starts at `key_pos`.
    pub fn child(&self, key: &str, node: &'a Node, key_pos: (usize, usize)) -> At<'a> {
        At {
            node,
            path: join(&self.path, key),
            key_pos,
        }
    }

    /// An item of this sequence, at `[index]`.
    pub fn item(&self, index: usize, node: &'a Node) -> At<'a> {
        At {
            node,
            path: format!("{}[{index}]", self.path),
            key_pos: position(node),
        }
    }

    /// Where this node is written, for a problem found after reading that
    /// names its field (as `Reader::error` does).
    pub fn place(&self) -> Place {
        self.place_as(self.path.clone())
    }

    /// Where this node is written, for a problem found after reading that
    /// names its field and value (as `Reader::error_value` does).
    pub fn place_value(&self) -> Place {
        self.place_as(self.shown())
    }

    fn place_as(&self, field: String) -> Place {
        let (line, column) = self.pos();
        Place {
            line,
            column,
            field,
        }
    }

    /// The field path, and a scalar's value as written.
    fn shown(&self) -> String {
        match self.node.as_scalar() {
            Some(s) => format!("{} \"{}\"", self.path, crate::redact::urls(s.as_str())),
            None => self.path.to_string(),
        }
    }

    /// Where to report a problem with this node as a whole: a scalar at its
    /// value, a mapping or list at the key that names it.
    pub fn pos(&self) -> (usize, usize) {
        match self.node {
            Node::Scalar(_) => position(self.node),
            _ => self.key_pos,
        }
    }
}

/// Where a mapping's key is written.
fn key_position(key: &marked_yaml::types::MarkedScalarNode) -> (usize, usize) {
    key.span()
        .start()
        .map(|m| (m.line(), m.column()))
        .unwrap_or((1, 1))
}

pub fn position(node: &Node) -> (usize, usize) {
    node.span()
        .start()
        .map(|m| (m.line(), m.column()))
        .unwrap_or((1, 1))
}

/// Parses YAML text into a located tree (a mapping at the top, no
/// duplicate keys), or says where and why not (`(line, column)`);
/// `duplicate` words a repeated key (a file of secrets may not echo it).
pub fn load(
    text: &str,
    duplicate: impl Fn(&str) -> String,
) -> Result<Node, ((usize, usize), String)> {
    let options = LoaderOptions::default()
        .error_on_duplicate_keys(true)
        .prevent_coercion(false)
        .toplevel_mapping();
    marked_yaml::parse_yaml_with_options(0, text, options).map_err(|e| {
        use marked_yaml::LoadError::*;
        let (marker, message) = match &e {
            TopLevelMustBeMapping(m) => (Some(*m), "the top level must be a mapping".into()),
            TopLevelMustBeSequence(m) => (Some(*m), "unexpected sequence".into()),
            UnexpectedAnchor(m) => (Some(*m), "anchors are not supported".into()),
            MappingKeyMustBeScalar(m) => (Some(*m), "mapping keys must be scalars".into()),
            UnexpectedTag(m) => (Some(*m), "YAML tags are not supported".into()),
            ScanError(m, s) => (Some(*m), s.info().to_string()),
            DuplicateKey(inner) => (
                inner.key.span().start().copied(),
                duplicate(inner.key.as_str()),
            ),
        };
        let at = marker.map(|m| (m.line(), m.column())).unwrap_or((1, 1));
        (at, message)
    })
}

/// Parses YAML text into a located tree, or reports `config.yaml_syntax`.
pub fn parse(text: &str, problems: &mut Problems) -> Option<Node> {
    load(text, |key| format!("duplicate key \"{key}\""))
        .map_err(|(at, message)| problems.push(at, "config.yaml_syntax", message))
        .ok()
}

/// The known fields of one mapping.
pub struct Fields<'a> {
    pub at: At<'a>,
    entries: Vec<(&'a str, &'a Node, (usize, usize))>,
}

impl<'a> Fields<'a> {
    pub fn get(&self, key: &str) -> Option<At<'a>> {
        self.entries
            .iter()
            .find(|(k, _, _)| *k == key)
            .map(|(k, node, pos)| self.at.child(k, node, *pos))
    }
}

/// Reads values out of located nodes, recording problems instead of failing.
pub struct Reader<'p> {
    pub problems: &'p mut Problems,
}

pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

impl Reader<'_> {
    pub fn error(&mut self, at: &At<'_>, code: &'static str, message: impl std::fmt::Display) {
        self.problems
            .push(at.pos(), code, format!("{}: {message}", at.path));
    }

    pub fn error_value(
        &mut self,
        at: &At<'_>,
        code: &'static str,
        message: impl std::fmt::Display,
    ) {
        self.problems.push_at(&at.place_value(), code, message);
    }

    /// The entries of a mapping, after reporting every key not in `allowed`.
    pub fn mapping<'a>(&mut self, at: &At<'a>, allowed: &[&str]) -> Option<Fields<'a>> {
        if is_null(at.node) {
            return Some(Fields {
                at: at.clone(),
                entries: Vec::new(),
            });
        }
        let Some(map) = at.node.as_mapping() else {
            self.error(at, "config.type_invalid", "expected a mapping");
            return None;
        };
        let mut entries = Vec::new();
        for (key, value) in map.iter() {
            let key_pos = key_position(key);
            if allowed.contains(&key.as_str()) {
                entries.push((key.as_str(), value, key_pos));
            } else {
                let path = join(&at.path, key.as_str());
                self.problems.push(
                    key_pos,
                    "config.unknown_field",
                    format!(
                        "{path}: unknown field; expected one of {}",
                        allowed.join(", ")
                    ),
                );
            }
        }
        Some(Fields {
            at: at.clone(),
            entries,
        })
    }

    /// Every entry of a mapping whose keys are names chosen by the operator;
    /// a key longer than YAML allows one to be written (1,024 characters)
    /// is refused, so a policy made as a tree (the controller's) holds no
    /// more than a file could.
    pub fn named<'a>(&mut self, at: &At<'a>) -> Vec<(&'a str, At<'a>)> {
        let Some(map) = at.node.as_mapping() else {
            if !is_null(at.node) {
                self.error(at, "config.type_invalid", "expected a mapping");
            }
            return Vec::new();
        };
        let mut out = Vec::new();
        for (k, v) in map.iter() {
            let pos = key_position(k);
            let chars = k.as_str().chars().count();
            if chars > MAX_KEY {
                let shown: String = k.as_str().chars().take(40).collect();
                self.problems.push(
                    pos,
                    "config.key_too_long",
                    format!(
                        "{}.{shown}...: a key of {chars} characters; YAML allows {MAX_KEY}",
                        at.path
                    ),
                );
                continue;
            }
            out.push((k.as_str(), at.child(k.as_str(), v, pos)));
        }
        out
    }

    pub fn sequence<'a>(&mut self, at: &At<'a>) -> Vec<&'a Node> {
        match at.node {
            Node::Sequence(seq) => seq.iter().collect(),
            _ if is_null(at.node) => Vec::new(),
            _ => {
                self.error(at, "config.type_invalid", "expected a list");
                Vec::new()
            }
        }
    }

    pub fn string(&mut self, at: &At<'_>) -> Option<String> {
        match at.node.as_scalar() {
            Some(s) if !s.as_str().is_empty() => Some(s.as_str().to_string()),
            Some(_) => {
                self.error(at, "config.type_invalid", "must not be empty");
                None
            }
            None => {
                self.error(at, "config.type_invalid", "expected a string");
                None
            }
        }
    }

    pub fn strings(&mut self, at: &At<'_>) -> Vec<String> {
        let items = self.sequence(at);
        let mut out = Vec::new();
        for (i, node) in items.into_iter().enumerate() {
            if let Some(s) = self.string(&at.item(i, node)) {
                out.push(s);
            }
        }
        out
    }

    pub fn bool(&mut self, at: &At<'_>) -> Option<bool> {
        match at.node.as_scalar().and_then(|s| s.as_bool()) {
            Some(b) => Some(b),
            None => {
                self.error_value(at, "config.type_invalid", "expected true or false");
                None
            }
        }
    }

    pub fn u64(&mut self, at: &At<'_>, code: &'static str) -> Option<u64> {
        match at
            .node
            .as_scalar()
            .and_then(|s| s.as_str().parse::<u64>().ok())
        {
            Some(n) => Some(n),
            None => {
                self.error_value(at, code, "expected a whole number");
                None
            }
        }
    }

    /// A whole number of at least 1 (capacities, slots, costs).
    /// A whole number of at least 1.
    pub fn count(&mut self, at: &At<'_>, code: &'static str) -> Option<NonZeroU64> {
        let n = NonZeroU64::new(self.u64(at, code)?);
        if n.is_none() {
            self.error_value(at, code, "must be at least 1");
        }
        n
    }

    pub fn duration(&mut self, at: &At<'_>) -> Option<Duration> {
        let text = at.node.as_scalar().map(|s| s.as_str()).unwrap_or("");
        match parse_duration(text) {
            Ok(d) => Some(d),
            Err(why) => {
                self.error_value(at, "config.duration_invalid", why);
                None
            }
        }
    }

    /// A duration that must be more than zero (timeouts, intervals).
    pub fn positive_duration(&mut self, at: &At<'_>) -> Option<Duration> {
        let d = self.duration(at)?;
        if d.is_zero() {
            self.error_value(at, "config.duration_invalid", "must be more than 0");
            return None;
        }
        Some(d)
    }

    pub fn size(&mut self, at: &At<'_>) -> Option<u64> {
        let text = at.node.as_scalar().map(|s| s.as_str()).unwrap_or("");
        match parse_size(text) {
            Ok(n) => Some(n),
            Err(why) => {
                self.error_value(at, "config.size_invalid", why);
                None
            }
        }
    }
}

pub fn is_null(node: &Node) -> bool {
    node.as_scalar()
        .is_some_and(|s| s.as_str().is_empty() || s.as_str() == "~" || s.as_str() == "null")
}

/// `250ms`, `30s`, `5m`, `1h`, `1d`.
pub fn parse_duration(text: &str) -> Result<Duration, &'static str> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or("needs a unit: ms, s, m, h or d (e.g. 250ms, 30s)")?;
    let (num, unit) = text.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| "expected a number followed by ms, s, m, h or d")?;
    let ms = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err("unit must be one of ms, s, m, h, d"),
    };
    n.checked_mul(ms)
        .map(Duration::from_millis)
        .ok_or("too large")
}

/// `1024`, `512KiB`, `10MiB`, `5GiB`, `1KB`, `1MB`, `1GB`.
pub fn parse_size(text: &str) -> Result<u64, &'static str> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (num, unit) = text.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| "expected a byte count such as 1048576, 512KiB, 10MiB or 5GiB")?;
    let mult: u64 = match unit {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        _ => return Err("unit must be one of B, KiB, MiB, GiB, TiB, KB, MB, GB, TB"),
    };
    n.checked_mul(mult).ok_or("too large")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("5GiB"), Ok(5 << 30));
        assert_eq!(parse_size("1024"), Ok(1024));
        assert_eq!(parse_size("2MB"), Ok(2_000_000));
        assert!(parse_size("5 GiB").is_err());
        assert!(parse_size("GiB").is_err());
    }
}
