//! A `RoutePolicy` (`crate::k8s::route_policy`) as the route keys it
//! sets in the policy the controller builds.

use serde_json::Value;

use crate::import::{json_node as node, Node};
use crate::k8s::route_policy::RoutePolicySpec;

impl RoutePolicySpec {
    /// The route keys it sets; the names are checked where the policy is
    /// read, as the file's are.
    pub fn keys(&self) -> Vec<(String, Node)> {
        let mut fields = Vec::new();
        if let Some(limits) = &self.limits {
            fields.push(("limits".to_string(), Node::strs(limits.clone())));
        }
        if let Some(c) = &self.concurrency {
            fields.push(("concurrency".into(), Node::str(c.clone())));
        }
        if let Some(a) = &self.auth {
            fields.push(("auth".into(), Node::str(a.clone())));
        }
        if let Some(e) = self.exempt {
            fields.push(("exempt".into(), Node::Bool(e)));
        }
        let lists = [
            ("allow_cidrs", &self.allow_cidrs),
            ("deny_cidrs", &self.deny_cidrs),
            ("limit_exempt_cidrs", &self.limit_exempt_cidrs),
        ];
        for (key, list) in lists {
            if let Some(list) = list {
                fields.push((key.into(), Node::strs(list.clone())));
            }
        }
        for (key, text) in [("max_body", &self.max_body), ("app_root", &self.app_root)] {
            if let Some(text) = text {
                fields.push((key.into(), Node::str(text.clone())));
            }
        }
        if let Some(path) = &self.rewrite_path {
            fields.push((
                "rewrite".into(),
                Node::map([("path", Node::str(path.clone()))]),
            ));
        }
        let edits = [
            ("request_headers", &self.request_headers),
            ("response_headers", &self.response_headers),
        ];
        for (key, edits) in edits {
            if let Some(e) = edits {
                fields.push((
                    key.into(),
                    snake(&serde_json::to_value(e).unwrap_or_default()),
                ));
            }
        }
        if let Some(t) = &self.timeouts {
            fields.push((
                "timeouts".into(),
                snake(&serde_json::to_value(t).unwrap_or_default()),
            ));
        }
        if let Some(r) = &self.retries {
            fields.push((
                "retries".into(),
                snake(&serde_json::to_value(r).unwrap_or_default()),
            ));
        }
        if let Some(c) = &self.cors {
            fields.push((
                "cors".into(),
                snake(&serde_json::to_value(c).unwrap_or_default()),
            ));
        }
        fields
    }
}

/// A settings object as route keys: its camelCase keys in snake_case
/// (header names, the keys of `set` and `add`, are kept as written).
fn snake(v: &Value) -> Node {
    let Value::Object(m) = v else {
        return node(v);
    };
    let key = |k: &str| {
        let mut out = String::new();
        for c in k.chars() {
            if c.is_ascii_uppercase() {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        }
        out
    };
    let value = |k: &str, v: &Value| match k {
        "set" | "add" => node(v),
        _ => snake(v),
    };
    Node::Map(m.iter().map(|(k, v)| (key(k), value(k, v))).collect())
}
