//! The matches of an Ingress path as Gateway API route matches: HTTP
//! paths and headers, gRPC services and methods.

use super::report::Inexpressible;
use super::*;

pub(super) fn regex_escape(s: &str) -> String {
    s.chars()
        .flat_map(
            |c| match c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                true => vec![c],
                false => vec!['\\', c],
            },
        )
        .collect()
}

/// An HTTPRoute match: the path and the headers.
pub(super) fn http_match(m: &Value) -> Result<Value, Inexpressible> {
    let mut out = json!({});
    let path = [
        ("path", "Exact"),
        ("path_prefix", "PathPrefix"),
        ("path_regex", "RegularExpression"),
    ]
    .into_iter()
    .find_map(|(key, kind)| m[key].as_str().map(|v| json!({"type": kind, "value": v})));
    if let Some(p) = path {
        out["path"] = p;
    }
    let headers = headers(m)?;
    if !headers.is_empty() {
        out["headers"] = json!(headers);
    }
    Ok(out)
}

/// A GRPCRoute match: a service (the path `/NAME`), any (`/`), headers.
pub(super) fn grpc_match(m: &Value) -> Result<Value, Inexpressible> {
    let mut out = json!({});
    match m["path_prefix"].as_str() {
        Some("/") => {}
        Some(p) if !p[1..].contains('/') => {
            out["method"] = json!({"type": "Exact", "service": &p[1..]});
        }
        _ => {
            return Err(Inexpressible(
                "an h2c (gRPC) route's path is / or /SERVICE".into(),
            ))
        }
    }
    let headers = headers(m)?;
    if !headers.is_empty() {
        out["headers"] = json!(headers);
    }
    Ok(out)
}

fn headers(m: &Value) -> Result<Vec<Value>, Inexpressible> {
    let mut out = Vec::new();
    for (name, v) in m["headers"].as_object().into_iter().flatten() {
        let (kind, value) = match (v.as_str(), v["regex"].as_str()) {
            (Some(s), _) => ("Exact", s),
            (None, Some(r)) => ("RegularExpression", r),
            _ => {
                return Err(Inexpressible(format!(
                    "header match {name} is neither a value nor a regex"
                )))
            }
        };
        out.push(json!({"type": kind, "name": name, "value": value}));
    }
    Ok(out)
}
