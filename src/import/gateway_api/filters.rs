//! A fairgate route's keys besides its match and pool, as Gateway API
//! filters where they say the same, else as its RoutePolicy's fields.

use serde_json::{json, Map, Value};

use super::report::{Inexpressible, Note};
use crate::import::Verdict;

/// The route's keys other than its match and pool: into Gateway API
/// filters where they say the same, else into its RoutePolicy.
pub(super) fn carry(
    route: &Value,
    policy: &mut Map<String, Value>,
    filters: &mut Vec<Value>,
    notes: &mut Vec<Note>,
) -> Result<(), Inexpressible> {
    let empty = Map::new();
    for (key, v) in route.as_object().unwrap_or(&empty) {
        match key.as_str() {
            "name" | "match" | "upstream" | "canary" | "https_redirect" => {}
            "auth" if v.as_str() == Some("none") => {}
            "auth" | "limits" | "concurrency" | "exempt" | "allow_cidrs" | "deny_cidrs"
            | "limit_exempt_cidrs" | "max_body" | "app_root" => {
                policy.insert(camel(key), v.clone());
            }
            // Settings objects: their keys in camelCase, and a status a
            // retry is on as text (`"503"`), as the CRD's schema has it.
            "timeouts" | "cors" | "retries" => {
                let mut obj: Map<String, Value> = v
                    .as_object()
                    .unwrap_or(&empty)
                    .iter()
                    .map(|(k, v)| (camel(k), v.clone()))
                    .collect();
                for x in obj
                    .get_mut("retryOn")
                    .and_then(Value::as_array_mut)
                    .into_iter()
                    .flatten()
                {
                    *x = json!(x.as_str().map_or_else(|| x.to_string(), String::from));
                }
                policy.insert(key.clone(), Value::Object(obj));
            }
            "request_headers" | "response_headers" => header_edits(key, v, policy, filters),
            "rewrite" => rewrite(v, policy, filters),
            "redirect" => {
                filters.push(redirect(v)?);
                notes.push((
                    "redirect".into(),
                    Verdict::Approximated(
                        "a RequestRedirect keeps the request's query string".into(),
                    ),
                ));
            }
            other => {
                return Err(Inexpressible(format!(
                    "its key {other} has no Gateway API or RoutePolicy form"
                )))
            }
        }
    }
    Ok(())
}

/// What a route's one pool says that a RoutePolicy carries: its connect
/// timeout (unless the route gives one) and its `fair_share`.
pub(super) fn pool_keys(pool: &Value, policy: &mut Map<String, Value>) {
    if let Some(c) = pool["connect_timeout"].as_str() {
        let timeouts = policy.entry("timeouts").or_insert_with(|| json!({}));
        if timeouts.get("connect").is_none() {
            timeouts["connect"] = json!(c);
        }
    }
    let fair = &pool["fair_share"];
    if fair.is_null() {
        return;
    }
    let mut out = Map::new();
    for (key, v) in fair.as_object().into_iter().flatten() {
        match (key.as_str(), &v["header"]) {
            ("by", Value::String(h)) => out.insert("byHeader".into(), json!(h)),
            ("queue", _) => {
                for (k, v) in v.as_object().into_iter().flatten() {
                    out.insert(camel(k), v.clone());
                }
                None
            }
            _ => out.insert(camel(key), v.clone()),
        };
    }
    policy.insert("fairShare".into(), Value::Object(out));
}

/// A pool the RoutePolicy of the route cannot give a queue (`what`, a
/// canary's): refused when it has one, rather than served without it.
pub(super) fn one_queue(pool: &Value, what: &str) -> Result<(), Inexpressible> {
    match pool["fair_share"].is_null() {
        true => Ok(()),
        false => Err(Inexpressible(format!(
            "{what}'s pool has a fair_share, which a RoutePolicy gives every backend of its rules alike"
        ))),
    }
}

/// A route key in the RoutePolicy's spelling: `max_body` → `maxBody`.
fn camel(key: &str) -> String {
    let mut out = String::new();
    for (i, word) in key.split('_').enumerate() {
        let mut chars = word.chars();
        if i > 0 {
            out.extend(chars.next().map(|c| c.to_ascii_uppercase()));
        }
        out.push_str(chars.as_str());
    }
    out
}

/// Header edits with literal values as a header modifier filter; with
/// templates (`{host}`) in the RoutePolicy, which then holds them all.
fn header_edits(key: &str, v: &Value, policy: &mut Map<String, Value>, filters: &mut Vec<Value>) {
    let templated = ["set", "add"]
        .iter()
        .flat_map(|k| v[*k].as_object().into_iter().flatten())
        .any(|(_, value)| value.as_str().is_none_or(|s| s.contains(['{', '}'])));
    if templated {
        let field = if key == "request_headers" {
            "requestHeaders"
        } else {
            "responseHeaders"
        };
        policy.insert(field.into(), v.clone());
        return;
    }
    let pairs = |k: &str| -> Vec<Value> {
        v[k].as_object()
            .into_iter()
            .flatten()
            .map(|(name, value)| json!({"name": name, "value": value}))
            .collect()
    };
    let mut modifier = json!({});
    for k in ["set", "add"] {
        let list = pairs(k);
        if !list.is_empty() {
            modifier[k] = json!(list);
        }
    }
    if let Some(remove) = v["remove"].as_array() {
        modifier["remove"] = json!(remove);
    }
    let (kind, field) = match key {
        "request_headers" => ("RequestHeaderModifier", "requestHeaderModifier"),
        _ => ("ResponseHeaderModifier", "responseHeaderModifier"),
    };
    filters.push(json!({"type": kind, field: modifier}));
}

/// A literal rewrite as a URLRewrite filter; a path template of the
/// regular expression's groups in the RoutePolicy.
fn rewrite(v: &Value, policy: &mut Map<String, Value>, filters: &mut Vec<Value>) {
    let mut url = json!({});
    match v["path"].as_str() {
        Some(p) if p.contains(['{', '}']) => {
            policy.insert("rewritePath".into(), json!(p));
        }
        Some(p) => url["path"] = json!({"type": "ReplaceFullPath", "replaceFullPath": p}),
        None => {}
    }
    if let Some(h) = v["host"].as_str() {
        url["hostname"] = json!(h);
    }
    if url.as_object().is_some_and(|m| !m.is_empty()) {
        filters.push(json!({"type": "URLRewrite", "urlRewrite": url}));
    }
}

fn bad_port(to: &str) -> Inexpressible {
    Inexpressible(format!("a redirect to {to:?}, whose port is not a number"))
}

/// `redirect: {to, code}` as a RequestRedirect: the URL's scheme, host,
/// port and whole path.
fn redirect(v: &Value) -> Result<Value, Inexpressible> {
    let to = v["to"].as_str().unwrap_or_default();
    let code = v["code"].as_u64().unwrap_or(302);
    if ![301, 302, 307, 308].contains(&code) {
        return Err(Inexpressible(format!(
            "a redirect with status {code} (the Gateway API has 301, 302, 307 and 308)"
        )));
    }
    let parsed = to.split_once("://").and_then(|(scheme, rest)| {
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let ok = matches!(scheme, "http" | "https") && !to.contains(['{', '}', '?', '#']);
        ok.then_some((scheme, authority, path))
    });
    let Some((scheme, authority, path)) = parsed else {
        return Err(Inexpressible(format!(
            "a redirect to {to:?}, which is not a plain http(s) URL"
        )));
    };
    let mut r = json!({"scheme": scheme, "statusCode": code,
                       "path": {"type": "ReplaceFullPath", "replaceFullPath": if path.is_empty() { "/" } else { path }}});
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) => (host, Some(port.parse::<u16>().map_err(|_| bad_port(to))?)),
        None => (authority, None),
    };
    // A DNS name, as the Gateway API's hostname is: never `user@host`,
    // an IP literal in brackets, or an empty name.
    let dns = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    if !dns {
        return Err(Inexpressible(format!(
            "a redirect to {to:?}, whose host is not a DNS name"
        )));
    }
    r["hostname"] = json!(host);
    if let Some(port) = port {
        r["port"] = json!(port);
    }
    Ok(json!({"type": "RequestRedirect", "requestRedirect": r}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redirect_is_its_url_in_parts() {
        let r =
            redirect(&json!({"to": "https://www.example.com:8443/new-home", "code": 301})).unwrap();
        assert_eq!(
            r["requestRedirect"],
            json!({"scheme": "https", "hostname": "www.example.com", "port": 8443, "statusCode": 301,
                   "path": {"type": "ReplaceFullPath", "replaceFullPath": "/new-home"}})
        );
        assert!(redirect(&json!({"to": "https://x.example/{path}", "code": 301})).is_err());
        assert!(redirect(&json!({"to": "https://x.example/", "code": 303})).is_err());
        for hostile in [
            "https://evil.example@good.example/",
            "https://[::1]:8443/",
            "https://x.example:port/",
            "https:///path",
        ] {
            assert!(
                redirect(&json!({"to": hostile, "code": 301})).is_err(),
                "{hostile}"
            );
        }
        assert_eq!(camel("limit_exempt_cidrs"), "limitExemptCidrs");
    }
}
