//! Reads the few protobuf bodies kubectl's typed generators send
//! (`kubectl create namespace|secret|configmap` post
//! `application/vnd.kubernetes.protobuf`): the `k8s\0` envelope, a
//! `runtime.Unknown` holding the object, and Namespace, Secret and
//! ConfigMap with the ObjectMeta fields a new object carries, turned into
//! the JSON the store keeps. Field numbers are those of the Kubernetes
//! `generated.proto` files. Any other kind is refused.

use base64::Engine as _;
use serde_json::{json, Map, Value};

/// One field of a message: its number and its varint or bytes.
#[derive(Clone, Copy)]
enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

fn varint(data: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *data.get(*at)?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(value);
        }
    }
    None
}

/// The fields of one message, in order; None when it is malformed.
fn fields(data: &[u8]) -> Option<Vec<(u64, Wire<'_>)>> {
    let (mut out, mut at) = (Vec::new(), 0);
    while at < data.len() {
        let tag = varint(data, &mut at)?;
        let wire = match tag & 7 {
            0 => Wire::Varint(varint(data, &mut at)?),
            2 => {
                let len = usize::try_from(varint(data, &mut at)?).ok()?;
                let bytes = data.get(at..at.checked_add(len)?)?;
                at += len;
                Wire::Bytes(bytes)
            }
            1 => {
                at += 8;
                continue;
            }
            5 => {
                at += 4;
                continue;
            }
            _ => return None,
        };
        out.push((tag >> 3, wire));
    }
    Some(out)
}

fn text(bytes: &[u8]) -> Value {
    String::from_utf8_lossy(bytes).into_owned().into()
}

/// A `map<string, string|bytes>` entry's key and value (bytes as base64,
/// as JSON carries them).
fn entry(bytes: &[u8], base64: bool) -> Option<(String, Value)> {
    let (mut key, mut value) = (String::new(), Value::String(String::new()));
    for (n, w) in fields(bytes)? {
        match (n, w) {
            (1, Wire::Bytes(b)) => key = String::from_utf8_lossy(b).into_owned(),
            (2, Wire::Bytes(b)) if base64 => {
                value = base64::engine::general_purpose::STANDARD.encode(b).into()
            }
            (2, Wire::Bytes(b)) => value = text(b),
            _ => {}
        }
    }
    Some((key, value))
}

fn put_entry(object: &mut Value, field: &str, bytes: &[u8], base64: bool) -> Option<()> {
    let (k, v) = entry(bytes, base64)?;
    let map = object[field].as_object_mut();
    match map {
        Some(m) => drop(m.insert(k, v)),
        None => object[field] = Value::Object(Map::from_iter([(k, v)])),
    }
    Some(())
}

fn object_meta(bytes: &[u8]) -> Option<Value> {
    let mut meta = json!({});
    for (n, w) in fields(bytes)? {
        match (n, w) {
            (1, Wire::Bytes(b)) => meta["name"] = text(b),
            (2, Wire::Bytes(b)) => meta["generateName"] = text(b),
            (3, Wire::Bytes(b)) => meta["namespace"] = text(b),
            (11, Wire::Bytes(b)) => put_entry(&mut meta, "labels", b, false)?,
            (12, Wire::Bytes(b)) => put_entry(&mut meta, "annotations", b, false)?,
            _ => {}
        }
    }
    Some(meta)
}

/// The body of a Namespace, Secret or ConfigMap (metadata is field 1 of each).
fn typed(kind: &str, raw: &[u8]) -> Option<Value> {
    let mut object = json!({});
    for (n, w) in fields(raw)? {
        let Wire::Bytes(b) = w else {
            if let (("Secret", 5) | ("ConfigMap", 4), Wire::Varint(v)) = ((kind, n), w) {
                object["immutable"] = (v != 0).into();
            }
            continue;
        };
        match (kind, n) {
            (_, 1) => object["metadata"] = object_meta(b)?,
            ("Secret", 2) | ("ConfigMap", 3) => {
                let field = if kind == "Secret" {
                    "data"
                } else {
                    "binaryData"
                };
                put_entry(&mut object, field, b, true)?
            }
            ("Secret", 3) => object["type"] = text(b),
            ("Secret", 4) => put_entry(&mut object, "stringData", b, false)?,
            ("ConfigMap", 2) => put_entry(&mut object, "data", b, false)?,
            _ => {}
        }
    }
    Some(object)
}

/// The object of a `k8s\0`-enveloped body, as JSON; Err names what is
/// not understood.
pub fn decode(body: &[u8]) -> Result<Value, String> {
    let unknown = body
        .strip_prefix(b"k8s\0")
        .ok_or("no k8s protobuf envelope")?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    for (n, w) in fields(unknown).ok_or("a malformed envelope")? {
        match (n, w) {
            (1, Wire::Bytes(type_meta)) => {
                for (m, v) in fields(type_meta).ok_or("malformed TypeMeta")? {
                    match (m, v) {
                        (1, Wire::Bytes(b)) => api_version = String::from_utf8_lossy(b).into(),
                        (2, Wire::Bytes(b)) => kind = String::from_utf8_lossy(b).into(),
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    if api_version != "v1" || !["Namespace", "Secret", "ConfigMap"].contains(&kind.as_str()) {
        return Err(format!(
            "protobuf bodies of {api_version} {kind} are not read here; send JSON"
        ));
    }
    let mut object = typed(&kind, raw).ok_or(format!("a malformed {kind}"))?;
    object["apiVersion"] = api_version.into();
    object["kind"] = kind.into();
    Ok(object)
}
