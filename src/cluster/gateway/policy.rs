//! A `RoutePolicy` (`crate::k8s::route_policy`) as the route keys it
//! sets in the policy the controller builds.

use serde_json::Value;

use crate::import::{json_node as node, Node};
use crate::k8s::route_policy::RoutePolicySpec;

/// The reserved key under which a policy's `fair_share` travels with its
/// route keys, taken off before they reach a route (`filters.rs`).
pub(super) const FAIR_SHARE: &str = "fair_share";

impl RoutePolicySpec {
    /// Its `fairShare` as the pools' `fair_share`; the reader checks the
    /// values as a file's.
    pub fn fair_share(&self) -> Option<Node> {
        use crate::k8s::route_policy::IntOrString;
        let f = self.fair_share.as_ref()?;
        let mut fields = vec![(
            "max_in_flight".to_string(),
            match &f.max_in_flight {
                IntOrString::Int(n) => Node::Int(*n),
                IntOrString::String(s) => Node::str(s.clone()),
            },
        )];
        if let Some(a) = &f.adaptive {
            let bounds = [("min", a.min), ("max", a.max)];
            let bounds = bounds
                .into_iter()
                .filter_map(|(k, v)| Some((k, Node::Int(v?))));
            fields.push(("adaptive".into(), Node::map(bounds)));
        }
        match (&f.by_header, &f.by) {
            // Refused where the policy is read, naming both.
            (Some(_), Some(_)) => fields.push(("by".into(), Node::str("by and byHeader both"))),
            (Some(h), None) => {
                fields.push(("by".into(), Node::map([("header", Node::str(h.clone()))])))
            }
            (None, Some(by)) => fields.push(("by".into(), Node::str(by.clone()))),
            (None, None) => {}
        }
        let queue = [
            ("per_tenant", f.per_tenant.map(Node::Int)),
            ("timeout", f.timeout.clone().map(Node::str)),
        ];
        let queue: Vec<_> = queue
            .into_iter()
            .filter_map(|(k, v)| Some((k, v?)))
            .collect();
        if !queue.is_empty() {
            fields.push(("queue".into(), Node::map(queue)));
        }
        if !f.weights.is_empty() {
            let weights = f.weights.iter().map(|(k, v)| (k.clone(), Node::Int(*v)));
            fields.push(("weights".into(), Node::map(weights)));
        }
        Some(Node::Map(fields))
    }

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
