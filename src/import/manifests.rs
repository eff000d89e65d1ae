//! Kubernetes manifests as files hold them and as `kubectl get -A -o yaml`
//! prints them: multi-document YAML, `kind: List`, JSON; the objects the
//! import reads, each as JSON with its kind, namespace and name.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use yaml_rust2::{Yaml, YamlLoader};

/// One Kubernetes object.
#[derive(Debug, Clone)]
pub struct Object {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub value: Value,
}

impl Object {
    /// `namespace/name`, as the report names it.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// A string at a path of keys, e.g. `["spec", "replicas"]`; numbers
    /// and booleans as text.
    pub fn text(&self, path: &[&str]) -> Option<String> {
        text(&self.value, path)
    }
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
pub fn read(paths: &[PathBuf]) -> Result<Vec<Object>, String> {
    let mut files = Vec::new();
    for path in paths {
        collect(path, &mut files)?;
    }
    let mut objects = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("{}: cannot read: {e}", file.display()))?;
        let docs = YamlLoader::load_from_str(&text).map_err(|e| {
            format!(
                "{}:{}:{}: not YAML: {}",
                file.display(),
                e.marker().line(),
                e.marker().col() + 1,
                e.info()
            )
        })?;
        for doc in &docs {
            unpack(json(doc), &mut objects);
        }
    }
    Ok(objects)
}

fn collect(path: &Path, files: &mut Vec<PathBuf>) -> Result<(), String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.is_file() {
        files.push(path.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
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
    if kind == "List" || kind.ends_with("List") {
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
        value,
    });
}

fn json(doc: &Yaml) -> Value {
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
        let err = read(&[file]).unwrap_err();
        assert!(err.contains("bad.yaml:3:"), "{err}");
    }
}
