//! `RoutePolicy` (`fairgate.dev/v1alpha1`): what fairgate adds to a
//! Gateway API route, named by an `ExtensionRef` filter of a rule in the
//! route's namespace: the base policy's limits, concurrency policy and
//! auth for that rule, or its exemption. The CustomResourceDefinition the
//! deploy kit ships is generated from this type (`fairgate crd`); the
//! controller turns it into route keys (`cluster/gateway/policy.rs`).

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
    /// A fair share of the rule's backends when they are saturated (SPEC
    /// §12): their pools get `fair_share`, shared by the rules naming this
    /// policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_share: Option<FairShare>,
}

/// `upstreams.<name>.fair_share` of the rule's pools.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FairShare {
    /// Requests in flight at once from each gateway process: a number
    /// (1 to 1000000) or `adaptive`.
    #[schemars(schema_with = "int_or_string")]
    pub max_in_flight: IntOrString,
    /// The bounds of an `adaptive` limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveBounds>,
    /// What one queue is: `tenant` (the default), `tenant_user` or
    /// `client_ip`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// A request header whose value is the queue, instead of `by`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_header: Option<String>,
    /// Requests one queue may hold waiting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_tenant: Option<u64>,
    /// The longest a request waits (`2s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Weights by plan (default 1).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub weights: BTreeMap<String, u64>,
}

/// A number or a word (`16`, `adaptive`), as Kubernetes' own int-or-string
/// fields are.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum IntOrString {
    Int(u64),
    String(String),
}

impl Default for IntOrString {
    fn default() -> Self {
        IntOrString::Int(1)
    }
}

fn int_or_string(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"x-kubernetes-int-or-string": true})
}

/// `min` and `max` of an adaptive limit.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveBounds {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u64>,
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
