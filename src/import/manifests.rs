//! Kubernetes manifests as files hold them and as `kubectl get -A -o yaml`
//! prints them: multi-document YAML, `kind: List`, JSON; the objects the
//! import reads, each as JSON with its kind, namespace and name.
//!
//! A manifest is bounded before it is loaded: its size, and (read as a
//! stream of events, holding nothing) its node count and nesting. Anchors
//! and aliases are refused as the policy reader refuses them: an alias is
//! a copy when loaded, so a few lines of them can stand for billions of
//! nodes, and `kubectl` never writes one.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value};
use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::scanner::Marker;
use yaml_rust2::{Yaml, YamlLoader};

use crate::k8s::Kind;

/// The largest manifest file read: 16 MiB, many times a large cluster's
/// `kubectl get ingress,service,configmap -A -o yaml`.
pub const MAX_FILE_BYTES: u64 = 16 << 20;
/// The most YAML nodes (scalars, lists, mappings) one file may hold.
pub const MAX_NODES: usize = 1_000_000;
/// The deepest nesting of lists and mappings in one file.
pub const MAX_DEPTH: usize = 128;

/// Why the inputs cannot be read; each names the file, and where in it.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// A path given, or found in a directory given, cannot be looked at
    /// or listed.
    #[error("{}: {source}", path.display())]
    Listing {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: cannot read: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{}: {size} bytes: a manifest file may have at most {} (16 MiB)",
        path.display(),
        MAX_FILE_BYTES
    )]
    TooLarge { path: PathBuf, size: u64 },
    /// Not YAML, or YAML refused before it is loaded (anchors, aliases,
    /// too many nodes, too deep), at a line and column.
    #[error("{}:{line}:{column}: {what}", path.display())]
    Refused {
        path: PathBuf,
        line: usize,
        column: usize,
        what: String,
    },
}

/// One Kubernetes object. Its JSON is shared: the controller's snapshot
/// of 30,000 objects copies none of them.
#[derive(Debug, Clone)]
pub struct Object {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub value: Arc<Value>,
}

impl Object {
    /// Whether it is of this kind.
    pub fn is(&self, kind: Kind) -> bool {
        self.kind == kind.name()
    }

    /// `namespace/name`, as the report names it.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// A string at a path of keys, e.g. `["spec", "replicas"]`; numbers
    /// and booleans as text.
    pub fn text(&self, path: &[&str]) -> Option<String> {
        text(&self.value, path)
    }

    /// A digest of its content but its status and what comes with any
    /// write (resource version, managed fields): the controller's own
    /// status writes do not change it.
    pub fn print(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        let Value::Object(map) = &*self.value else {
            hash_value(&self.value, &mut h);
            return h.finish();
        };
        for (k, v) in map.iter().filter(|(k, _)| *k != "status") {
            k.hash(&mut h);
            match (k.as_str(), v) {
                ("metadata", Value::Object(meta)) => {
                    let kept = meta.iter().filter(|(k, _)| {
                        !matches!(k.as_str(), "resourceVersion" | "managedFields")
                    });
                    for (k, v) in kept {
                        k.hash(&mut h);
                        hash_value(v, &mut h);
                    }
                }
                _ => hash_value(v, &mut h),
            }
        }
        h.finish()
    }
}

/// Hashes a JSON value's content, with no text made of it.
fn hash_value(v: &Value, h: &mut impl std::hash::Hasher) {
    use std::hash::Hash;
    match v {
        Value::Null => 0u8.hash(h),
        Value::Bool(b) => (1u8, b).hash(h),
        Value::Number(n) => (2u8, n.as_i64(), n.as_u64(), n.as_f64().map(f64::to_bits)).hash(h),
        Value::String(s) => (3u8, s).hash(h),
        Value::Array(items) => {
            (4u8, items.len()).hash(h);
            items.iter().for_each(|i| hash_value(i, h));
        }
        Value::Object(map) => {
            (5u8, map.len()).hash(h);
            for (k, v) in map {
                k.hash(h);
                hash_value(v, h);
            }
        }
    }
}

/// `Value::pointer` without its copies: serde_json's makes two `String`s
/// of every step (to unescape `~1` and `~0`), a tenth of the allocations
/// of a build at 10,000 Ingresses. The same steps, escapes included.
pub trait At {
    fn at(&self, pointer: &str) -> Option<&Value>;
}

impl At for Value {
    fn at(&self, pointer: &str) -> Option<&Value> {
        if pointer.is_empty() {
            return Some(self);
        }
        let mut steps = pointer.strip_prefix('/')?.split('/');
        steps.try_fold(self, |v, step| match v {
            Value::Object(map) if step.contains('~') => {
                map.get(&step.replace("~1", "/").replace("~0", "~"))
            }
            Value::Object(map) => map.get(step),
            // As serde_json reads an index: digits, no sign, no leading zero.
            Value::Array(_)
                if step.starts_with('+') || (step.len() > 1 && step.starts_with('0')) =>
            {
                None
            }
            Value::Array(items) => step.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        })
    }
}

/// The Ingress's annotations under the controller's prefix, prefix removed.
pub fn annotations(ing: &Object, prefix: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Some(Value::Object(map)) = ing.value.at("/metadata/annotations") {
        for (k, v) in map {
            if let Some(short) = k.strip_prefix(prefix).and_then(|k| k.strip_prefix('/')) {
                out.insert(short.to_string(), text(v, &[]).unwrap_or_default());
            }
        }
    }
    out
}

/// One annotation's value.
pub fn annotation(ing: &Object, prefix: &str, key: &str) -> Option<String> {
    let Some(Value::Object(map)) = ing.value.at("/metadata/annotations") else {
        return None;
    };
    let named = |k: &str| k.strip_prefix(prefix).and_then(|k| k.strip_prefix('/')) == Some(key);
    let (_, v) = map.iter().find(|(k, _)| named(k))?;
    Some(text(v, &[]).unwrap_or_default())
}

/// A scalar at `path` under `value`, as text.
pub fn text(value: &Value, path: &[&str]) -> Option<String> {
    let v = path.iter().try_fold(value, |v, k| v.get(*k))?;
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Every object in `paths` (files, or directories read recursively for
/// `*.yaml`, `*.yml` and `*.json`, in name order).
pub fn read(paths: &[PathBuf]) -> Result<Vec<Object>, ReadError> {
    let mut files = Vec::new();
    for path in paths {
        collect(path, &mut files)?;
    }
    let mut objects = Vec::new();
    for file in files {
        let text = read_bounded(&file)?;
        let at = |m: &Marker, what: &str| ReadError::Refused {
            path: file.clone(),
            line: m.line(),
            column: m.col() + 1,
            what: what.to_string(),
        };
        screen(&text).map_err(|(m, what)| at(&m, &what))?;
        let docs = YamlLoader::load_from_str(&text)
            .map_err(|e| at(e.marker(), &format!("not YAML: {}", e.info())))?;
        for doc in &docs {
            unpack(json(doc), &mut objects);
        }
    }
    // Applied in this order, a later object of the same kind, namespace and
    // name replaces an earlier one: the import reads what a cluster would
    // hold (two copies made each route and limit twice, a policy no reader
    // takes).
    let mut seen = std::collections::HashSet::new();
    let mut kept: Vec<Object> = (objects.into_iter().rev())
        .filter(|o| seen.insert((o.kind.clone(), o.namespace.clone(), o.name.clone())))
        .collect();
    kept.reverse();
    Ok(kept)
}

/// A file's text, refused beyond `MAX_FILE_BYTES` (read no further than
/// that, should it grow meanwhile).
fn read_bounded(file: &Path) -> Result<String, ReadError> {
    let refuse = |size: u64| ReadError::TooLarge {
        path: file.to_path_buf(),
        size,
    };
    let cannot = |source: std::io::Error| ReadError::Unreadable {
        path: file.to_path_buf(),
        source,
    };
    let f = std::fs::File::open(file).map_err(cannot)?;
    let size = f.metadata().map_err(cannot)?.len();
    if size > MAX_FILE_BYTES {
        return Err(refuse(size));
    }
    let mut text = String::new();
    f.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(cannot)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(refuse(text.len() as u64));
    }
    Ok(text)
}

/// Reads the file as events, holding none of them, and refuses anchors,
/// aliases, more than `MAX_NODES` nodes and nesting deeper than
/// `MAX_DEPTH`, before anything is loaded.
fn screen(text: &str) -> Result<(), (Marker, String)> {
    let mut parser = Parser::new_from_str(text);
    let (mut nodes, mut depth) = (0usize, 0usize);
    loop {
        let (event, mark) = parser
            .next_token()
            .map_err(|e| (*e.marker(), format!("not YAML: {}", e.info())))?;
        let anchor = match &event {
            Event::Alias(_) => {
                return Err((
                    mark,
                    "a YAML alias (*name): anchors and aliases are refused in manifests".into(),
                ))
            }
            Event::StreamEnd => return Ok(()),
            Event::SequenceEnd | Event::MappingEnd => {
                depth = depth.saturating_sub(1);
                continue;
            }
            Event::Scalar(_, _, anchor, _) => *anchor,
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                depth += 1;
                if depth > MAX_DEPTH {
                    let why = format!("nested deeper than {MAX_DEPTH} lists and mappings");
                    return Err((mark, why));
                }
                *anchor
            }
            _ => continue,
        };
        if anchor != 0 {
            return Err((
                mark,
                "a YAML anchor (&name): anchors and aliases are refused in manifests".into(),
            ));
        }
        nodes += 1;
        if nodes > MAX_NODES {
            let why = format!(
                "more than {MAX_NODES} YAML nodes: a manifest file may have at most that many"
            );
            return Err((mark, why));
        }
    }
}

fn collect(path: &Path, files: &mut Vec<PathBuf>) -> Result<(), ReadError> {
    let listing = |source: std::io::Error| ReadError::Listing {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(listing)?;
    if meta.is_file() {
        files.push(path.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(listing)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for entry in entries {
        let manifest = entry
            .extension()
            .is_some_and(|x| x == "yaml" || x == "yml" || x == "json");
        if entry.is_dir() || manifest {
            collect(&entry, files)?;
        }
    }
    Ok(())
}

/// An object, or the items of a `List`.
fn unpack(value: Value, out: &mut Vec<Object>) {
    let Some(kind) = text(&value, &["kind"]) else {
        return;
    };
    if kind.ends_with("List") {
        if let Some(Value::Array(items)) = value.get("items") {
            for item in items {
                unpack(item.clone(), out);
            }
        }
        return;
    }
    out.push(Object {
        namespace: text(&value, &["metadata", "namespace"]).unwrap_or_else(|| "default".into()),
        name: text(&value, &["metadata", "name"]).unwrap_or_default(),
        kind,
        value: Arc::new(value),
    });
}

pub(super) fn json(doc: &Yaml) -> Value {
    match doc {
        Yaml::String(s) | Yaml::Real(s) => Value::String(s.clone()),
        Yaml::Integer(i) => Value::from(*i),
        Yaml::Boolean(b) => Value::Bool(*b),
        Yaml::Array(items) => Value::Array(items.iter().map(json).collect()),
        Yaml::Hash(h) => {
            let mut map = Map::new();
            for (k, v) in h {
                let key = match json(k) {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                map.insert(key, json(v));
            }
            Value::Object(map)
        }
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_reads_what_a_json_pointer_reads() {
        let v = serde_json::json!({"a": {"b/c": [1, {"d~e": 2}], "": 3}});
        let pointers = [
            "",
            "a",
            "/a",
            "/a/",
            "/a/b~1c",
            "/a/b~1c/0",
            "/a/b~1c/1/d~0e",
            "/a/b~1c/01",
            "/a/b~1c/+1",
            "/a/b~1c/-1",
            "/a/b~1c/2",
            "/a/b/c",
            "/x/y",
        ];
        for p in pointers {
            assert_eq!(v.at(p), v.pointer(p), "{p}");
        }
        assert_eq!(v.at("/a/b~1c/1/d~0e"), Some(&serde_json::json!(2)));
    }

    #[test]
    fn lists_and_documents_are_unpacked() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("a.yaml"),
            "apiVersion: v1\nkind: List\nitems:\n- {kind: Ingress, metadata: {name: a, namespace: shop}}\n\
             - {kind: Service, metadata: {name: web}, spec: {ports: [{port: 80}]}}\n---\n\
             kind: ConfigMap\nmetadata: {name: c}\ndata: {limit-req-status-code: \"429\"}\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not: read").unwrap();
        let objects = read(&[dir.path().to_path_buf()]).unwrap();
        let ids: Vec<String> = objects
            .iter()
            .map(|o| format!("{} {}", o.kind, o.id()))
            .collect();
        assert_eq!(
            ids,
            [
                "Ingress shop/a",
                "Service default/web",
                "ConfigMap default/c"
            ]
        );
        assert_eq!(
            objects[1].text(&["spec", "ports"]).as_deref(),
            None,
            "not a scalar"
        );
        assert_eq!(
            objects[2]
                .text(&["data", "limit-req-status-code"])
                .as_deref(),
            Some("429")
        );
    }

    #[test]
    fn bad_yaml_names_the_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bad.yaml");
        std::fs::write(&file, "kind: Ingress\nmetadata: {name: [\n").unwrap();
        let err = read(&[file]).unwrap_err().to_string();
        assert!(err.contains("bad.yaml:3:"), "{err}");
    }

    #[test]
    fn nesting_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("deep.yaml");
        let deep = |n: usize| format!("kind: List\nitems: {}{}\n", "[".repeat(n), "]".repeat(n));
        std::fs::write(&file, deep(MAX_DEPTH - 1)).unwrap();
        assert!(read(std::slice::from_ref(&file)).is_ok());
        std::fs::write(&file, deep(MAX_DEPTH)).unwrap();
        let err = read(&[file]).unwrap_err().to_string();
        assert!(
            err.ends_with("deep.yaml:2:135: nested deeper than 128 lists and mappings"),
            "{err}"
        );
    }
}
