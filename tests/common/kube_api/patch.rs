//! The PATCH bodies the API server accepts: JSON merge patch (RFC 7386),
//! JSON patch (RFC 6902: add, remove, replace, move, copy, test), and
//! strategic merge patch, served here as a merge patch (lists are replaced
//! whole, not merged by key). Server-side apply (a JSON body) is
//! approximated the same way: no field managers, no conflicts.

use serde_json::Value;

/// How a PATCH body is to be read, from its Content-Type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Json,
    Strategic,
    Apply,
}

impl PatchType {
    pub fn from_content_type(ct: &str) -> Option<PatchType> {
        match ct.split(';').next().unwrap_or("").trim() {
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/json-patch+json" => Some(PatchType::Json),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" => Some(PatchType::Apply),
            _ => None,
        }
    }
}

/// `target` with `patch` applied; the error is the message of a 422.
pub fn apply(kind: PatchType, target: &Value, patch: &Value) -> Result<Value, String> {
    match kind {
        PatchType::Merge | PatchType::Strategic | PatchType::Apply => Ok(merge(target, patch)),
        PatchType::Json => {
            let ops = patch.as_array().ok_or("a JSON patch must be an array")?;
            let mut doc = target.clone();
            for op in ops {
                json_op(&mut doc, op)?;
            }
            Ok(doc)
        }
    }
}

/// RFC 7386: objects merge key by key, `null` removes, anything else
/// replaces.
pub fn merge(target: &Value, patch: &Value) -> Value {
    let Value::Object(fields) = patch else {
        return patch.clone();
    };
    let mut out = match target {
        Value::Object(t) => t.clone(),
        _ => serde_json::Map::new(),
    };
    for (k, v) in fields {
        if v.is_null() {
            out.remove(k);
        } else {
            let merged = merge(out.get(k).unwrap_or(&Value::Null), v);
            out.insert(k.clone(), merged);
        }
    }
    Value::Object(out)
}

/// A JSON pointer's parent pointer and its last token, unescaped.
fn split_pointer(pointer: &str) -> Result<(&str, String), String> {
    let at = pointer
        .rfind('/')
        .ok_or_else(|| format!("invalid JSON pointer {pointer:?}"))?;
    let last = pointer[at + 1..].replace("~1", "/").replace("~0", "~");
    Ok((&pointer[..at], last))
}

fn remove(doc: &mut Value, pointer: &str) -> Result<Value, String> {
    let (parent, last) = split_pointer(pointer)?;
    let missing = || format!("path {pointer:?} does not exist");
    match doc.pointer_mut(parent).ok_or_else(missing)? {
        Value::Object(m) => m.remove(&last).ok_or_else(missing),
        Value::Array(a) => {
            let i: usize = last.parse().map_err(|_| missing())?;
            (i < a.len()).then(|| a.remove(i)).ok_or_else(missing)
        }
        _ => Err(missing()),
    }
}

fn add(doc: &mut Value, pointer: &str, value: Value) -> Result<(), String> {
    if pointer.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, last) = split_pointer(pointer)?;
    let missing = || format!("path {pointer:?} does not exist");
    match doc.pointer_mut(parent).ok_or_else(missing)? {
        Value::Object(m) => {
            m.insert(last, value);
        }
        Value::Array(a) if last == "-" => a.push(value),
        Value::Array(a) => {
            let i: usize = last.parse().map_err(|_| missing())?;
            if i > a.len() {
                return Err(missing());
            }
            a.insert(i, value);
        }
        _ => return Err(missing()),
    }
    Ok(())
}

fn json_op(doc: &mut Value, op: &Value) -> Result<(), String> {
    let path = op["path"].as_str().ok_or("an operation without a path")?;
    let value = || {
        op.get("value")
            .cloned()
            .ok_or("an operation without a value")
    };
    let from = || op["from"].as_str().ok_or("an operation without from");
    match op["op"].as_str().unwrap_or("") {
        "add" => add(doc, path, value()?),
        "remove" => remove(doc, path).map(drop),
        "replace" => {
            remove(doc, path)?;
            add(doc, path, value()?)
        }
        "move" => {
            let moved = remove(doc, from()?)?;
            add(doc, path, moved)
        }
        "copy" => {
            let copied = doc.pointer(from()?).cloned().ok_or("copy from nowhere")?;
            add(doc, path, copied)
        }
        "test" if doc.pointer(path) == Some(&value()?) => Ok(()),
        "test" => Err(format!("testing value {path} failed")),
        other => Err(format!("unknown JSON patch operation {other:?}")),
    }
}
