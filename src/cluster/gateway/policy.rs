//! `RoutePolicy` (`fairgate.dev/v1alpha1`): what fairgate adds to a
//! Gateway API route, named by an `ExtensionRef` filter of a rule in the
//! route's namespace: the base policy's limits, concurrency policy and
//! auth for that rule, or its exemption. The CustomResourceDefinition the
//! deploy kit ships is generated from this type (`fairgate crd`).

use std::collections::BTreeMap;

use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::import::{json_node as node, yaml, Node};

/// fairgate's policy for the rules of a route that name it.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "fairgate.dev",
    version = "v1alpha1",
    kind = "RoutePolicy",
    namespaced,
    doc = "fairgate's tenant limits, concurrency slots and auth for the Gateway API route rules that name it in an ExtensionRef filter."
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RoutePolicySpec {
    /// Names of the base policy's limits, spent together in one atomic
    /// store call (a route's `limits`); `[]` spends none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Vec<String>>,
    /// The name of the base policy's concurrency policy held for the
    /// whole exchange.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<String>,
    /// `none`, `required` (the base policy's JWTs) or the name of a method
    /// of its `auth.methods`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<String>,
    /// Skip limits and concurrency entirely: no store call (health probes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exempt: Option<bool>,
    /// Client addresses (CIDRs) allowed; any other gets 403.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_cidrs: Option<Vec<String>>,
    /// Client addresses (CIDRs) refused with 403.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny_cidrs: Option<Vec<String>>,
    /// Client addresses (CIDRs) no limit counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_exempt_cidrs: Option<Vec<String>>,
    /// The largest request body (`1MiB`, `0` for no bound); more is 413.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_body: Option<String>,
    /// A request for `/` is redirected (302) here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_root: Option<String>,
    /// The path sent upstream, a template of the regular expression's
    /// named groups (`/{rest}`): what a URLRewrite filter cannot say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite_path: Option<String>,
    /// Request header edits whose values are templates (`{host}`,
    /// `{request_id}`); they replace the rule's RequestHeaderModifier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_headers: Option<HeaderEdits>,
    /// Response header edits, as `requestHeaders`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_headers: Option<HeaderEdits>,
    /// Upstream timeouts; they replace the rule's `timeouts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<Timeouts>,
    /// Retries of a failed upstream attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<Retries>,
    /// CORS: preflights answered by the gateway, headers on answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cors: Option<Cors>,
}

/// Header edits: names to set, add or remove.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HeaderEdits {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub set: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub add: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
}

/// Durations (`5s`, `500ms`) for connecting, and between reads and writes.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Timeouts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write: Option<String>,
}

/// How a failed upstream attempt is tried again.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Retries {
    pub attempts: u64,
    /// `connect_failure`, `reset`, `timeout` or a status code (`"503"`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retry_on: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
}

/// Cross-origin resource sharing.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Cors {
    pub origins: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expose: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<String>,
}

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

/// The CustomResourceDefinition, as YAML.
pub fn crd_yaml() -> String {
    let crd = serde_json::to_value(RoutePolicy::crd()).unwrap_or(Value::Null);
    let header = "# Generated by `fairgate crd` from src/cluster/gateway/policy.rs: do not edit.\n";
    format!("{header}{}", yaml(&node(&crd)))
}
