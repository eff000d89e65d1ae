//! What the configuration reference says of each key, as JSON Schema: the
//! type column of `docs/configuration.md` ("duration", "integer 1–9",
//! "`reject`, `decode` or `keep`", "list of CIDRs or IPs"...) read into
//! types, ranges and enums, the default column into `default`, the last
//! column into `description`. The reader's own checks stay the authority
//! (`fairgate check` says what is wrong and where); the schema lets editors
//! and CI catch a wrong type or value before it. The reader is written by
//! hand for its located errors, so the reference, which a test holds to
//! the reader's keys, is where the types are written once.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

/// One row of the reference: the type, the default and the description.
pub struct Documented {
    pub kind: String,
    pub default: String,
    pub description: String,
}

/// The reference's rows by key (`server.listen`, `routes[].match.host`).
pub fn rows(markdown: &str) -> HashMap<String, Documented> {
    let mut out = HashMap::new();
    for line in markdown.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_end_matches('|').split(" | ").collect();
        let [key, kind, default, description] = cells[..] else {
            continue;
        };
        let key = key.trim_start_matches("| ").trim_matches('`');
        out.insert(
            key.to_string(),
            Documented {
                kind: unlink(kind.trim()),
                default: default.trim().to_string(),
                description: unlink(description.trim()),
            },
        );
    }
    out
}

/// Markdown links as their text: `[templates](#templates)` is `templates`.
fn unlink(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](").map(|c| open + c) else {
            break;
        };
        let Some(end) = rest[close..].find(')').map(|e| close + e) else {
            break;
        };
        out.push_str(&rest[..open]);
        out.push_str(&rest[open + 1..close]);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// The keywords of a key's type, from the reference's type column.
pub fn typed(kind: &str) -> Value {
    let kind = kind.trim();
    if let Some(item) = kind.strip_prefix("list of ") {
        return json!({"type": "array", "items": item_type(item)});
    }
    if kind.starts_with("mapping") {
        return mapping(kind);
    }
    if let Some(v) = special(kind) {
        return v;
    }
    if let Some(values) = enumerated(kind) {
        return values;
    }
    if let Some(v) = numeric(kind) {
        return v;
    }
    scalar(kind)
}

/// The reference's words for a mapping: its values' type after the arrow.
fn mapping(kind: &str) -> Value {
    if kind.ends_with("or `none`") {
        return json!({"anyOf": [{"const": "none"}, {"type": "object"}]});
    }
    let values = kind.split_once('→').map(|(_, v)| v.trim());
    match values {
        Some(v) if v.ends_with("or `true`") => json!({"type": "object",
            "additionalProperties": {"type": ["string", "boolean"]}}),
        Some("template") | Some("value") => {
            json!({"type": "object", "additionalProperties": {"type": "string"}})
        }
        _ if kind.contains("header to value") => {
            json!({"type": "object", "additionalProperties": {"type": "string"}})
        }
        _ => json!({"type": "object"}),
    }
}

/// A list's items.
fn item_type(item: &str) -> Value {
    let item = item.trim();
    if item.contains("entries") || item == "routes" || item.starts_with("`{") {
        return json!({"type": "object"});
    }
    if item.starts_with("statuses") {
        return numeric(&format!("integer {}", item.trim_start_matches("statuses ")))
            .expect("a range");
    }
    if let Some(values) = enumerated(item) {
        return values;
    }
    json!({"type": "string"})
}

/// Types the general rules do not cover, by their exact words.
fn special(kind: &str) -> Option<Value> {
    let duration = json!({"type": "string", "pattern": DURATION});
    let v = match kind {
        "boolean" | "bool" | "`true` or `false`" => json!({"type": "boolean"}),
        "`true`, `false` or a path" => json!({"type": ["boolean", "string"]}),
        "string or list of strings" => json!({"anyOf": [{"type": "string"},
            {"type": "array", "items": {"type": "string"}}]}),
        "number from 0 to 1" => json!({"type": "number", "minimum": 0, "maximum": 1}),
        "rate" => json!({"type": "string", "pattern": RATE}),
        "bucket" => json!({"type": "object"}),
        "identity source" => json!({"anyOf": [{"type": "string"}, {"type": "object",
            "minProperties": 1, "maxProperties": 1}]}),
        "scope" => json!({"anyOf": [
            {"enum": ["tenant", "tenant_user", "tenant_token", "client_ip", "client_cert", "global"]},
            {"type": "object", "properties": {"path": {"type": "string"},
                "header": {"type": "string"}, "values": {"type": "array"}},
             "minProperties": 1, "additionalProperties": false}]}),
        "integer 1–1000000 or `adaptive`" => json!({"anyOf": [
            {"type": "integer", "minimum": 1, "maximum": 1_000_000}, {"const": "adaptive"}]}),
        "`tenant`, `tenant_user`, `client_ip` or `{header: NAME}`" => json!({"anyOf": [
            {"enum": ["tenant", "tenant_user", "client_ip"]},
            {"type": "object", "properties": {"header": {"type": "string"}},
             "required": ["header"], "additionalProperties": false}]}),
        "as `retry_on`" => typed("list of `connect_failure`, `reset`, `502`, `503`, `504`"),
        _ if kind.starts_with("duration") => duration,
        _ if kind.starts_with("size") => {
            json!({"anyOf": [{"type": "integer", "minimum": 0},
                {"type": "string", "pattern": SIZE}]})
        }
        _ if kind.contains("`{hash_header: NAME}`") => json!({"anyOf": [
            {"enum": ["round_robin", "least_requests", "hash_tenant", "hash_client_ip", "hash_uri"]},
            {"type": "object", "properties": {"hash_header": {"type": "string"},
                "hash_cookie": {"type": "string"}},
             "minProperties": 1, "maxProperties": 1, "additionalProperties": false}]}),
        _ => return None,
    };
    Some(v)
}

/// `` `a`, `b` or `c` `` (or `` `a` `b` ``): the values, numbers both as
/// numbers and as strings.
fn enumerated(kind: &str) -> Option<Value> {
    let mut values = Vec::new();
    let mut rest = kind;
    while let Some(open) = rest.find('`') {
        let between = &rest[..open];
        let glue = between.trim().trim_end_matches(',').trim();
        if !(glue.is_empty() || glue == "or" || glue == ",") {
            return None;
        }
        let close = rest[open + 1..].find('`')? + open + 1;
        let value = &rest[open + 1..close];
        // `NAME`, `NAME:PORT`, `scheme://host[:port]`: a placeholder, not a value.
        let placeholder =
            value.bytes().all(|b| b.is_ascii_uppercase() || b == b':') || value.contains('[');
        if placeholder {
            return None;
        }
        // A number is taken written either way (`503` or `"503"`).
        if let Ok(n) = value.parse::<i64>() {
            values.push(json!(n));
        }
        values.push(json!(value));
        rest = &rest[close + 1..];
    }
    let tail = rest.trim();
    (values.len() >= 2 && tail.is_empty()).then(|| json!({"enum": values}))
}

/// Integers with their bounds: "integer ≥ 1", "integer 1–9", "1 to 8",
/// "HTTP status 400–599".
fn numeric(kind: &str) -> Option<Value> {
    let (min, max) = if let Some(n) = kind.strip_prefix("integer ≥ ") {
        (n.trim().parse::<i64>().ok()?, None)
    } else {
        let range = kind
            .strip_prefix("integer ")
            .or_else(|| kind.strip_prefix("HTTP status "))
            .unwrap_or(kind);
        let (a, b) = range.split_once('–').or_else(|| range.split_once(" to "))?;
        (a.trim().parse().ok()?, Some(b.trim().parse::<i64>().ok()?))
    };
    let mut v = json!({"type": "integer", "minimum": min});
    if let Some(max) = max {
        v["maximum"] = json!(max);
    }
    Some(v)
}

/// Anything else is a string of some form (a name, a path, a URL, PEM).
fn scalar(kind: &str) -> Value {
    match kind {
        "`IP:PORT`" => json!({"type": "string", "pattern": "^\\[?[0-9A-Fa-f:.]+\\]?:[0-9]+$"}),
        _ => json!({"type": "string"}),
    }
}

/// A duration (the reference's "Value formats"): a whole number and one
/// unit, `250ms`, `30s`, `5m`, `1h`, `1d`.
const DURATION: &str = "^[0-9]+(ms|s|m|h|d)$";
/// A rate: `COUNT/PERIOD`, `5/s`, `600/m`, `1/10s`, `100000/d`.
const RATE: &str = "^[0-9]+/[0-9]*(s|m|h|d)$";
/// A size: `1048576`, `512KiB`, `10MiB`, `2MB`.
const SIZE: &str = "^[0-9]+(B|KiB|MiB|GiB|TiB|kB|KB|MB|GB|TB)?$";

/// The default column as a value when it is one backticked scalar.
pub fn default(text: &str) -> Option<Value> {
    let inner = text.strip_prefix('`')?.strip_suffix('`')?;
    if inner.contains('`') {
        return None;
    }
    Some(match inner {
        "true" => json!(true),
        "false" => json!(false),
        "[]" => json!([]),
        _ => match inner.parse::<i64>() {
            Ok(n) => json!(n),
            Err(_) => match inner.parse::<f64>() {
                Ok(f) => json!(f),
                Err(_) => json!(inner),
            },
        },
    })
}

/// `schema` with the reference's type (for a leaf), default and
/// description of `doc`.
pub fn annotate(schema: &mut Map<String, Value>, doc: &Documented, leaf: bool) {
    if leaf {
        if let Value::Object(keywords) = typed(&doc.kind) {
            schema.extend(keywords);
        }
    }
    if let Some(d) = default(&doc.default) {
        schema.insert("default".into(), d);
    }
    schema.insert("description".into(), json!(doc.description));
}
