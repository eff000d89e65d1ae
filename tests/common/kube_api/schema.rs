//! Custom resources checked against their CRDs, as the API server checks
//! them (<https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#validation>):
//! the structural schema of the version written, from the CRD files
//! themselves, the Gateway API's standard channel as vendored under
//! `tests/fixtures/gateway-api-crds/` (kubernetes-sigs/gateway-api at the
//! commit docs/gateway-api.md names) and fairgate's own RoutePolicy CRD from
//! `deploy/`.
//!
//! On every create and update, in the API server's order: a create's
//! `status` is dropped (for a kind with the status subresource); fields the
//! schema does not declare are pruned (and refused with
//! `fieldValidation=Strict`, which kubectl sends), as are nulls where the
//! schema is not `nullable`; `default`s fill what is missing; then the
//! name must be a DNS subdomain, and the value is checked: `type`
//! (`x-kubernetes-int-or-string` too; `80.0` is an integer), `enum`,
//! `required`, `pattern`, `minLength`/`maxLength`, `minimum`/`maximum`,
//! `minItems`/`maxItems`, `minProperties`/`maxProperties`, the `ipv4` and
//! `ipv6` formats, `oneOf`/`anyOf`/`allOf`/`not`, the uniqueness of
//! `x-kubernetes-list-type: set` and `map` lists; and, unless one of those
//! failures is one after which the API server runs none (an unsupported
//! value, a missing field, too long, too many, a wrong type), every
//! `x-kubernetes-validations` CEL rule (`cel.rs`, which reads a property
//! named by a CEL keyword as Kubernetes escapes it: `__namespace__`).
//! Every failure is reported at once, as a 422 `Invalid` naming each field.
//!
//! Not done: transition rules (`oldSelf`) inside lists (their items are
//! not correlated with the old ones, so such a rule is not evaluated
//! there; the only one these CRDs have is outside any list), validation
//! ratcheting, CEL cost limits, formats other than `ipv4` and `ipv6`
//! (`date-time` among them), `metadata` beyond the name, and defaulting
//! on read (a default is written when the object is).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use serde_json::{json, Map, Value};
use yaml_rust2::{Yaml, YamlLoader};

use super::resources::Resource;
use super::store::ApiError;

/// The CRD files whose schemas are enforced, from the crate's root.
const CRDS: &[&str] = &[
    "tests/fixtures/gateway-api-crds/gateway.networking.k8s.io_gatewayclasses.yaml",
    "tests/fixtures/gateway-api-crds/gateway.networking.k8s.io_gateways.yaml",
    "tests/fixtures/gateway-api-crds/gateway.networking.k8s.io_httproutes.yaml",
    "tests/fixtures/gateway-api-crds/gateway.networking.k8s.io_grpcroutes.yaml",
    "tests/fixtures/gateway-api-crds/gateway.networking.k8s.io_referencegrants.yaml",
    "deploy/kubernetes/gateway/routepolicy-crd.yaml",
];

/// `openAPIV3Schema` by group, version and kind.
type Schemas = HashMap<(String, String, String), Value>;

fn schemas() -> &'static Schemas {
    static SCHEMAS: OnceLock<Schemas> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut out = Schemas::new();
        for file in CRDS {
            let text = std::fs::read_to_string(root.join(file)).expect("a vendored CRD");
            for doc in YamlLoader::load_from_str(&text).expect("CRD YAML") {
                let crd = json_of(&doc);
                let spec = &crd["spec"];
                let (group, kind) = (&spec["group"], &spec["names"]["kind"]);
                for v in spec["versions"].as_array().into_iter().flatten() {
                    let key = (str_of(group), str_of(&v["name"]), str_of(kind));
                    out.insert(key, v["schema"]["openAPIV3Schema"].clone());
                }
            }
        }
        out
    })
}

fn str_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// A YAML document as JSON (keys as strings).
fn json_of(y: &Yaml) -> Value {
    match y {
        Yaml::Hash(h) => {
            let map = h.iter().map(|(k, v)| (key_of(k), json_of(v)));
            Value::Object(map.collect())
        }
        Yaml::Array(a) => Value::Array(a.iter().map(json_of).collect()),
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Integer(i) => json!(i),
        Yaml::Real(r) => r.parse::<f64>().map_or(Value::Null, |f| json!(f)),
        Yaml::Boolean(b) => json!(b),
        _ => Value::Null,
    }
}

fn key_of(y: &Yaml) -> String {
    match y {
        Yaml::String(s) | Yaml::Real(s) => s.clone(),
        Yaml::Integer(i) => i.to_string(),
        Yaml::Boolean(b) => b.to_string(),
        _ => String::new(),
    }
}

/// `expr` evaluated with `self` bound to `this` (no schema), for the tests
/// of the CEL environment itself.
pub fn eval_cel(expr: &str, this: &Value) -> Result<bool, String> {
    super::cel::holds(expr, this, &Value::Null, None)
}

/// The functions and macros the CRDs' CEL rules call, by name.
pub fn crd_rule_functions() -> std::collections::BTreeSet<String> {
    let call = regex::Regex::new(r"([A-Za-z_][A-Za-z0-9_]*)\(").unwrap();
    let (_, _, rules) = rules_of_crds();
    rules
        .iter()
        .flat_map(|r| {
            call.captures_iter(r)
                .map(|c| c[1].to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// How many CEL rules (and message expressions) the CRDs hold, and each
/// that does not parse, with why.
pub fn crd_rules_compiled() -> (usize, Vec<(String, String)>) {
    let (count, broken, _) = rules_of_crds();
    (count, broken)
}

/// Every rule and message expression of the CRDs: their count, those that
/// do not parse, and their texts.
fn rules_of_crds() -> (usize, Vec<(String, String)>, Vec<&'static str>) {
    fn collect<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::Object(map) => {
                for rule in map
                    .get("x-kubernetes-validations")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    out.extend(
                        ["rule", "messageExpression"]
                            .iter()
                            .filter_map(|k| rule[k].as_str()),
                    );
                }
                map.values().for_each(|v| collect(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| collect(v, out)),
            _ => {}
        }
    }
    let mut rules = Vec::new();
    schemas().values().for_each(|s| collect(s, &mut rules));
    let broken = rules
        .iter()
        .filter_map(|r| super::cel::compile(r).err().map(|e| (r.to_string(), e)))
        .collect();
    (rules.len(), broken, rules)
}

fn schema_of(r: &Resource) -> Option<&'static Value> {
    let key = (
        r.group.to_string(),
        r.version.to_string(),
        r.kind.to_string(),
    );
    schemas().get(&key)
}

/// One field's failure, as a `StatusCause`.
struct Cause {
    field: String,
    reason: &'static str,
    message: String,
}

/// A node's CEL rules, waiting for the schema's own checks to pass: its
/// schema, its value, its old value, its path.
type Pending<'s> = (&'s Value, Value, Option<Value>, String);

/// What one pass over an object found.
#[derive(Default)]
struct Walk<'s> {
    causes: Vec<Cause>,
    unknown: Vec<String>,
    pending: Vec<Pending<'s>>,
}

/// The errors after which the API server runs no CEL rule
/// (`hasBlockingErr` of apiextensions' strategy).
const BLOCKING: &[&str] = &[
    "FieldValueNotSupported",
    "FieldValueRequired",
    "FieldValueTooLong",
    "FieldValueTooMany",
    "FieldValueTypeInvalid",
];

/// Prunes, defaults and checks `object`, a write of `r` (`old` its stored
/// state on an update): the refusal the API server would give, if any.
pub fn admit(r: &Resource, object: &mut Value, old: Option<&Value>) -> Result<(), ApiError> {
    let Some(schema) = schema_of(r) else {
        return Ok(());
    };
    let mut walk = Walk::default();
    walk.name(object);
    walk.node(schema, object, old, "");
    walk.run_rules();
    if walk.causes.is_empty() {
        return Ok(());
    }
    let name = object["metadata"]["name"].as_str().unwrap_or("");
    let each: Vec<String> = walk
        .causes
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect();
    let listed = match each.as_slice() {
        [one] => one.clone(),
        all => format!("[{}]", all.join(", ")),
    };
    let message = format!("{}.{} {name:?} is invalid: {listed}", r.kind, r.group);
    let causes: Vec<Value> = walk
        .causes
        .iter()
        .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
        .collect();
    let details = json!({"name": name, "group": r.group, "kind": r.kind, "causes": causes});
    Err(ApiError {
        details: Some(details),
        ..ApiError::new(422, "Invalid", message)
    })
}

/// `fieldValidation=Strict`: a field the schema does not declare is a 400,
/// as the API server's strict decoding refuses it.
pub fn refuse_unknown(r: &Resource, object: &Value) -> Result<(), ApiError> {
    let Some(schema) = schema_of(r) else {
        return Ok(());
    };
    let mut walk = Walk::default();
    walk.node(schema, &mut object.clone(), None, "");
    if walk.unknown.is_empty() {
        return Ok(());
    }
    let fields: Vec<String> = walk
        .unknown
        .iter()
        .map(|f| format!("unknown field {f:?}"))
        .collect();
    let message = format!(
        "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {}",
        fields.join(", "),
        kind = r.kind,
        version = r.version,
    );
    Err(ApiError::new(400, "BadRequest", message))
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        // kube-openapi takes 80.0 for an integer.
        Value::Number(n) if n.as_f64().is_some_and(|f| f.fract() == 0.0) => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A value as the API server quotes it in a message.
fn quoted(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

impl<'s> Walk<'s> {
    fn fail(&mut self, field: &str, reason: &'static str, message: String) {
        let field = field.to_string();
        self.causes.push(Cause {
            field,
            reason,
            message,
        });
    }

    fn invalid(&mut self, field: &str, value: &Value, detail: String) {
        let message = format!("Invalid value: {}: {detail}", quoted(value));
        self.fail(field, "FieldValueInvalid", message);
    }

    /// One node: its children first (pruned, defaulted), then its own
    /// checks, then its CEL rules.
    fn node(&mut self, s: &'s Value, v: &mut Value, old: Option<&Value>, path: &str) {
        match v {
            Value::Object(map) if s["type"] == "object" => self.object(s, map, old, path),
            Value::Array(items) if s["type"] == "array" => {
                for (i, item) in items.iter_mut().enumerate() {
                    self.node(&s["items"], item, None, &format!("{path}[{i}]"));
                }
            }
            _ => {}
        }
        if self.check(s, v, path) && s.get("x-kubernetes-validations").is_some() {
            let pending = (s, v.clone(), old.cloned(), path.to_string());
            self.pending.push(pending);
        }
    }

    /// The CEL rules, unless a blocking error came first: then, as the API
    /// server says, none of them is checked.
    fn run_rules(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        if self.causes.iter().any(|c| BLOCKING.contains(&c.reason)) {
            if !pending.is_empty() {
                let message = "Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation";
                self.fail("<nil>", "FieldValueInvalid", message.to_string());
            }
            return;
        }
        for (s, v, old, path) in pending {
            self.rules(s, &v, old.as_ref(), &path);
        }
    }

    /// A custom resource's name is a DNS subdomain (RFC 1123), as the API
    /// server requires of every CRD's objects.
    fn name(&mut self, object: &Value) {
        let name = &object["metadata"]["name"];
        let text = name.as_str().unwrap_or("");
        let subdomain = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
        if text.len() > 253 {
            let detail = "must be no more than 253 characters".to_string();
            self.invalid("metadata.name", name, detail);
        } else if !pattern_matches(subdomain, text) {
            let detail = format!("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '{}')", &subdomain[1..subdomain.len() - 1]);
            self.invalid("metadata.name", name, detail);
        }
    }

    fn object(
        &mut self,
        s: &'s Value,
        map: &mut Map<String, Value>,
        old: Option<&Value>,
        path: &str,
    ) {
        let props = s["properties"].as_object();
        let extra = &s["additionalProperties"];
        let keep = s["x-kubernetes-preserve-unknown-fields"] == true || *extra == true;
        let child = |k: &str| {
            props
                .and_then(|p| p.get(k))
                .or(extra.is_object().then_some(extra))
        };
        let keys: Vec<String> = map.keys().cloned().collect();
        for k in keys {
            if path.is_empty() && ["apiVersion", "kind", "metadata"].contains(&k.as_str()) {
                continue;
            }
            match child(&k) {
                None if keep => {}
                None => {
                    self.unknown.push(join(path, &k));
                    map.remove(&k);
                }
                Some(cs) if map[&k].is_null() && cs["nullable"] != true => drop(map.remove(&k)),
                Some(_) => {}
            }
        }
        for (k, cs) in props.into_iter().flatten() {
            if let (false, Some(d)) = (map.contains_key(k), cs.get("default")) {
                map.insert(k.clone(), d.clone());
            }
        }
        for (k, v) in map.iter_mut() {
            let Some(cs) = child(k).filter(|_| !(path.is_empty() && k == "metadata")) else {
                continue;
            };
            let field = match props.is_some_and(|p| p.contains_key(k)) {
                true => join(path, k),
                false => format!("{path}[{k}]"),
            };
            self.node(cs, v, old.and_then(|o| o.get(k)), &field);
        }
    }

    /// The schema's own checks of `v`; false when its type is wrong (and
    /// nothing else is checked).
    fn check(&mut self, s: &Value, v: &Value, path: &str) -> bool {
        if v.is_null() && s["nullable"] == true {
            return false;
        }
        if !self.type_ok(s, v, path) {
            return false;
        }
        if let Some(allowed) = s["enum"].as_array().filter(|e| !e.contains(v)) {
            let list: Vec<String> = allowed.iter().map(quoted).collect();
            let message = format!(
                "Unsupported value: {}: supported values: {}",
                quoted(v),
                list.join(", ")
            );
            self.fail(path, "FieldValueNotSupported", message);
        }
        match v {
            Value::String(text) => self.string(s, v, text, path),
            Value::Number(n) => self.number(s, v, n.as_f64().unwrap_or(0.0), path),
            Value::Array(items) => self.array(s, v, items, path),
            Value::Object(map) => self.required(s, map, path),
            _ => {}
        }
        self.combinators(s, v, path);
        true
    }

    fn type_ok(&mut self, s: &Value, v: &Value, path: &str) -> bool {
        let got = type_name(v);
        let ok = match s["type"].as_str() {
            _ if s["x-kubernetes-int-or-string"] == true => matches!(got, "integer" | "string"),
            None => true,
            Some("number") => matches!(got, "number" | "integer"),
            Some(want) => want == got,
        };
        if !ok {
            let want = s["type"].as_str().unwrap_or("int-or-string");
            let message =
                format!("Invalid value: {got:?}: {path} in body must be of type {want}: {got:?}");
            self.fail(path, "FieldValueTypeInvalid", message);
        }
        ok
    }

    fn string(&mut self, s: &Value, v: &Value, text: &str, path: &str) {
        let chars = text.chars().count() as u64;
        if let Some(max) = s["maxLength"].as_u64().filter(|m| chars > *m) {
            let message = format!("Too long: may not be more than {max} bytes");
            self.fail(path, "FieldValueTooLong", message);
        }
        if let Some(min) = s["minLength"].as_u64().filter(|m| chars < *m) {
            self.invalid(
                path,
                v,
                format!("{path} in body should be at least {min} chars long"),
            );
        }
        if let Some(pattern) = s["pattern"].as_str() {
            if !pattern_matches(pattern, text) {
                self.invalid(path, v, format!("{path} in body should match '{pattern}'"));
            }
        }
        let format_ok = match s["format"].as_str() {
            Some("ipv4") => text.parse::<std::net::Ipv4Addr>().is_ok(),
            Some("ipv6") => text.parse::<std::net::Ipv6Addr>().is_ok(),
            _ => true,
        };
        if !format_ok {
            let format = s["format"].as_str().unwrap_or("");
            self.invalid(
                path,
                v,
                format!("{path} in body must be of type {format}: {text:?}"),
            );
        }
    }

    fn number(&mut self, s: &Value, v: &Value, n: f64, path: &str) {
        if let Some(min) = s["minimum"].as_f64().filter(|m| n < *m) {
            let detail = format!("{path} in body should be greater than or equal to {min}");
            self.invalid(path, v, detail);
        }
        if let Some(max) = s["maximum"].as_f64().filter(|m| n > *m) {
            let detail = format!("{path} in body should be less than or equal to {max}");
            self.invalid(path, v, detail);
        }
    }

    fn array(&mut self, s: &Value, v: &Value, items: &[Value], path: &str) {
        let n = items.len() as u64;
        if let Some(max) = s["maxItems"].as_u64().filter(|m| n > *m) {
            let message = format!("Too many: {n}: must have at most {max} items");
            self.fail(path, "FieldValueTooMany", message);
        }
        if let Some(min) = s["minItems"].as_u64().filter(|m| n < *m) {
            self.invalid(
                path,
                v,
                format!("{path} in body should have at least {min} items"),
            );
        }
        self.duplicates(s, items, path);
    }

    /// A `set` list's repeated values and a `map` list's repeated keys,
    /// each reported once, in the API server's words.
    fn duplicates(&mut self, s: &Value, items: &[Value], path: &str) {
        let keys: Vec<&str> = s["x-kubernetes-list-map-keys"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let identity = |item: &Value| match s["x-kubernetes-list-type"].as_str() {
            Some("set") => Some((item.clone(), quoted(item))),
            Some("map") => {
                let present = keys
                    .iter()
                    .filter_map(|k| item.get(*k).map(|v| (k.to_string(), v.clone())));
                let id: Map<String, Value> = present.collect();
                let shown: Vec<String> = id.iter().map(|(k, v)| format!("{k:?}:{v}")).collect();
                let go = format!("map[string]interface {{}}{{{}}}", shown.join(", "));
                Some((Value::Object(id), go))
            }
            _ => None,
        };
        let (mut seen, mut reported) = (Vec::new(), Vec::new());
        for (i, item) in items.iter().enumerate() {
            let Some((id, shown)) = identity(item) else {
                break;
            };
            if seen.contains(&id) && !reported.contains(&id) {
                let message = format!("Duplicate value: {shown}");
                self.fail(&format!("{path}[{i}]"), "FieldValueDuplicate", message);
                reported.push(id.clone());
            }
            seen.push(id);
        }
    }

    fn required(&mut self, s: &Value, map: &Map<String, Value>, path: &str) {
        for k in s["required"].as_array().into_iter().flatten() {
            let k = k.as_str().unwrap_or("");
            if !map.contains_key(k) {
                let message = "Required value".to_string();
                self.fail(&join(path, k), "FieldValueRequired", message);
            }
        }
        let n = map.len() as u64;
        if let Some(max) = s["maxProperties"].as_u64().filter(|m| n > *m) {
            let message = format!("Too many: {n}: must have at most {max} items");
            self.fail(path, "FieldValueTooMany", message);
        }
        if let Some(min) = s["minProperties"].as_u64().filter(|m| n < *m) {
            let detail = format!("{path} in body should have at least {min} properties");
            self.invalid(path, &Value::Object(map.clone()), detail);
        }
    }

    /// `oneOf`, `anyOf`, `allOf` and `not`: value checks only, as a
    /// structural schema allows there.
    fn combinators(&mut self, s: &Value, v: &Value, path: &str) {
        let holds = |branch: &Value| {
            let mut walk = Walk::default();
            walk.values(branch, v, path);
            walk.causes.is_empty()
        };
        let count = |key: &str| {
            s[key]
                .as_array()
                .map(|b| b.iter().filter(|b| holds(b)).count())
        };
        let ty = s["type"].as_str().unwrap_or("object");
        if count("oneOf").is_some_and(|n| n != 1) {
            self.invalid(
                path,
                &json!(ty),
                format!("{path} in body must validate one and only one schema (oneOf)"),
            );
        }
        if count("anyOf") == Some(0) {
            self.invalid(
                path,
                &json!(ty),
                format!("{path} in body must validate at least one schema (anyOf)"),
            );
        }
        let all = s["allOf"].as_array().into_iter().flatten();
        if all.clone().count() != all.filter(|b| holds(b)).count() {
            self.invalid(
                path,
                &json!(ty),
                format!("{path} in body must validate all the schemas (allOf)"),
            );
        }
        if s.get("not").is_some_and(holds) {
            self.invalid(
                path,
                &json!(ty),
                format!("{path} in body should not validate the schema (not)"),
            );
        }
    }

    /// A branch's checks of `v` and of the properties it names.
    fn values(&mut self, s: &Value, v: &Value, path: &str) {
        if !self.check(s, v, path) {
            return;
        }
        for (k, cs) in s["properties"].as_object().into_iter().flatten() {
            if let Some(child) = v.get(k) {
                self.values(cs, child, &join(path, k));
            }
        }
    }

    /// The node's `x-kubernetes-validations`; a transition rule only where
    /// there is an old value to compare with.
    fn rules(&mut self, s: &Value, v: &Value, old: Option<&Value>, path: &str) {
        for rule in s["x-kubernetes-validations"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let text = rule["rule"].as_str().unwrap_or("");
            if text.contains("oldSelf") && old.is_none() {
                continue;
            }
            let failure = match super::cel::holds(text, v, s, old) {
                Ok(true) => continue,
                Ok(false) => rule_message(rule, v, s, old),
                Err(e) => format!("{e} evaluating rule: {text}"),
            };
            let field = match rule["fieldPath"].as_str() {
                Some(extra) => format!("{path}{extra}"),
                None => path.to_string(),
            };
            let ty = s["type"].as_str().unwrap_or("object");
            let (reason, message) = match rule["reason"].as_str() {
                Some("FieldValueForbidden") => {
                    ("FieldValueForbidden", format!("Forbidden: {failure}"))
                }
                Some("FieldValueRequired") => {
                    ("FieldValueRequired", format!("Required value: {failure}"))
                }
                Some("FieldValueDuplicate") => {
                    ("FieldValueDuplicate", format!("Duplicate value: {failure}"))
                }
                _ => (
                    "FieldValueInvalid",
                    format!("Invalid value: {ty:?}: {failure}"),
                ),
            };
            self.fail(field.trim_start_matches('.'), reason, message);
        }
    }
}

/// A failed rule's message: its `messageExpression`, else its `message`,
/// else the API server's "failed rule".
fn rule_message(rule: &Value, v: &Value, s: &Value, old: Option<&Value>) -> String {
    if let Some(expr) = rule["messageExpression"].as_str() {
        if let Ok(text) = super::cel::message(expr, v, s, old) {
            return text;
        }
    }
    match rule["message"].as_str() {
        Some(m) => m.to_string(),
        None => format!("failed rule: {}", rule["rule"].as_str().unwrap_or("")),
    }
}

/// An OpenAPI `pattern`, compiled once.
fn pattern_matches(pattern: &str, text: &str) -> bool {
    static CACHE: OnceLock<Mutex<HashMap<String, regex::Regex>>> = OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap();
    let re = cache.entry(pattern.to_string()).or_insert_with(|| {
        regex::Regex::new(pattern).expect("a CRD pattern the regex crate reads")
    });
    re.is_match(text)
}
