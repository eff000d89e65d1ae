//! The in-memory object store: objects by resource, namespace and name;
//! one resourceVersion counter for every write (as etcd's revision); the
//! history of changes that watches replay, forgotten up to a compaction
//! point; and what the tests count (lists, watches, writes). Speaks JSON
//! values and `ApiError`s; knows nothing of HTTP.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Value};

use super::resources::Resource;
use super::select::Selectors;

/// A refusal, as a metav1 `Status`.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// The Status's `details`.
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        let message = message.into();
        ApiError {
            code,
            reason,
            message,
            details: None,
        }
    }

    fn about(
        r: &'static Resource,
        name: &str,
        code: u16,
        reason: &'static str,
        what: &str,
    ) -> Self {
        let message = format!("{} {name:?} {what}", r.qualified());
        let details = json!({"name": name, "group": r.group, "kind": r.plural});
        ApiError {
            details: Some(details),
            ..ApiError::new(code, reason, message)
        }
    }

    pub fn not_found(r: &'static Resource, name: &str) -> ApiError {
        ApiError::about(r, name, 404, "NotFound", "not found")
    }

    /// 410 for a resourceVersion older than the compaction point.
    pub fn expired(rv: u64, oldest: u64) -> ApiError {
        let message = format!("too old resource version: {rv} ({oldest})");
        ApiError::new(410, "Expired", message)
    }

    pub fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

/// One change, as a watch sends it.
#[derive(Debug, Clone)]
pub struct Event {
    pub rv: u64,
    pub resource: &'static Resource,
    /// ADDED, MODIFIED or DELETED.
    pub kind: &'static str,
    pub object: Value,
    /// The state before a MODIFIED, for watches whose selector it enters
    /// or leaves.
    pub previous: Option<Value>,
}

/// One write request that reached the server over HTTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteRequest {
    pub method: String,
    /// The path without the query, e.g.
    /// `/apis/networking.k8s.io/v1/namespaces/ns/ingresses/web/status`.
    pub path: String,
    pub user_agent: String,
    pub content_type: String,
}

/// Which part of an object a write may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The main resource: `.status` is kept if the kind has a status subresource.
    Main,
    /// The `/status` subresource: only `.status` changes.
    Status,
    /// The tests' own helpers: everything as given.
    Whole,
}

type Key = (String, String, String);

#[derive(Default)]
pub struct Store {
    pub rv: u64,
    objects: BTreeMap<Key, Value>,
    history: Vec<Event>,
    /// Changes up to here are forgotten: older resourceVersions are 410.
    pub compacted: u64,
    pub lists: HashMap<String, u64>,
    pub watches: HashMap<String, u64>,
    /// GETs of one object, by resource.
    pub gets: HashMap<String, u64>,
    pub writes: Vec<WriteRequest>,
}

fn key(r: &Resource, ns: &str, name: &str) -> Key {
    let ns = if r.namespaced { ns } else { "" };
    (r.gvr(), ns.to_string(), name.to_string())
}

/// Now as RFC 3339 UTC, to the second, as metav1.Time is written.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (h, min, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}Z")
}

/// Everything but `metadata` and `status`: a change here is a new generation.
fn spec_of(object: &Value) -> Value {
    let mut spec = object.clone();
    if let Some(m) = spec.as_object_mut() {
        for k in ["metadata", "status", "kind", "apiVersion"] {
            m.remove(k);
        }
    }
    spec
}

/// A kubernetes.io/tls Secret must hold tls.crt and tls.key; a custom
/// resource must hold to its CRD's schema (`schema.rs`), which prunes and
/// defaults it as the API server does.
fn validate(r: &Resource, object: &mut Value, old: Option<&Value>) -> Result<(), ApiError> {
    super::schema::admit(r, object, old)?;
    if r.kind != "Secret" || object["type"] != "kubernetes.io/tls" {
        return Ok(());
    }
    let name = object["metadata"]["name"].as_str().unwrap_or("");
    for k in ["tls.crt", "tls.key"] {
        let data = &object["data"];
        if data.get(k).is_none() && object["stringData"].get(k).is_none() {
            let message = format!("Secret {name:?} is invalid: data[{k}]: Required value");
            let cause = json!({"reason": "FieldValueRequired", "message": "Required value",
                "field": format!("data[{k}]")});
            let details = json!({"name": name, "group": "", "kind": "Secret", "causes": [cause]});
            return Err(ApiError {
                details: Some(details),
                ..ApiError::new(422, "Invalid", message)
            });
        }
    }
    Ok(())
}

impl Store {
    /// A store holding the namespaces every cluster has.
    pub fn seeded() -> Store {
        let mut store = Store::default();
        let ns = super::resources::by_gvr("v1/namespaces");
        for name in ["default", "kube-system"] {
            let object = json!({"metadata": {"name": name}, "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"}});
            store.create(ns, "", object, Part::Whole).expect("seed");
        }
        store
    }

    pub fn get(&self, r: &Resource, ns: &str, name: &str) -> Option<&Value> {
        self.objects.get(&key(r, ns, name))
    }

    /// The objects of `r` in `ns` ("" for every namespace) matching
    /// `selectors`, in key order, with their keys.
    pub fn items(&self, r: &Resource, ns: &str, selectors: &Selectors) -> Vec<(Key, Value)> {
        let gvr = r.gvr();
        self.objects
            .range((gvr.clone(), String::new(), String::new())..)
            .take_while(|((g, _, _), _)| *g == gvr)
            .filter(|((_, n, _), _)| ns.is_empty() || !r.namespaced || n == ns)
            .filter(|(_, o)| selectors.matches(o))
            .map(|(k, o)| (k.clone(), o.clone()))
            .collect()
    }

    /// The changes after `rv` to objects of `r`, oldest first.
    pub fn events_after(&self, rv: u64, r: &Resource) -> Vec<Event> {
        let start = self.history.partition_point(|e| e.rv <= rv);
        self.history[start..]
            .iter()
            .filter(|e| std::ptr::eq(e.resource, r))
            .cloned()
            .collect()
    }

    /// Forgets the history: watches and lists from an older
    /// resourceVersion get 410 Gone.
    pub fn compact(&mut self) {
        self.compacted = self.rv;
        self.history.clear();
    }

    /// 410 when `rv` is older than the compaction point.
    pub fn check_fresh(&self, rv: u64) -> Result<(), ApiError> {
        if rv < self.compacted {
            return Err(ApiError::expired(rv, self.compacted));
        }
        Ok(())
    }

    fn record(
        &mut self,
        r: &'static Resource,
        kind: &'static str,
        object: &mut Value,
        previous: Option<Value>,
    ) {
        self.rv += 1;
        object["metadata"]["resourceVersion"] = self.rv.to_string().into();
        let event = Event {
            rv: self.rv,
            resource: r,
            kind,
            object: object.clone(),
            previous,
        };
        self.history.push(event);
    }

    /// POST: a new object in `ns`, named by its metadata (or generateName).
    pub fn create(
        &mut self,
        r: &'static Resource,
        ns: &str,
        mut object: Value,
        part: Part,
    ) -> Result<Value, ApiError> {
        let name = name_for_create(&object)?;
        let ns = namespace_for(r, ns, &object)?;
        if self.get(r, &ns, &name).is_some() {
            return Err(ApiError::about(
                r,
                &name,
                409,
                "AlreadyExists",
                "already exists",
            ));
        }
        // The status a create carries is dropped before it is checked, and
        // a generated name is given first.
        if part != Part::Whole && r.status {
            object.as_object_mut().map(|o| o.remove("status"));
        }
        fill_identity(r, &mut object, &name, &ns);
        validate(r, &mut object, None)?;
        let meta = &mut object["metadata"];
        meta["uid"] = uuid::Uuid::new_v4().to_string().into();
        meta["creationTimestamp"] = now_rfc3339().into();
        meta["generation"] = 1.into();
        self.record(r, "ADDED", &mut object, None);
        self.objects.insert(key(r, &ns, &name), object.clone());
        Ok(object)
    }

    /// PUT (and PATCH, once patched): replaces the object `name`, with a
    /// 409 Conflict when the body's resourceVersion is set and stale.
    pub fn update(
        &mut self,
        r: &'static Resource,
        ns: &str,
        name: &str,
        object: Value,
        part: Part,
    ) -> Result<Value, ApiError> {
        let ns = namespace_for(r, ns, &object)?;
        let old = self
            .get(r, &ns, name)
            .ok_or_else(|| ApiError::not_found(r, name))?;
        check_precondition(r, name, old, &object)?;
        let mut new = updated(r, old, object, part);
        validate(r, &mut new, Some(old))?;
        fill_identity(r, &mut new, name, &ns);
        for k in ["uid", "creationTimestamp", "resourceVersion"] {
            new["metadata"][k] = old["metadata"][k].clone();
        }
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
        let changed = spec_of(old) != spec_of(&new);
        new["metadata"]["generation"] = (generation + i64::from(changed)).into();
        if new == *old {
            // A no-op write changes nothing, not even the resourceVersion.
            return Ok(new);
        }
        let previous = Some(old.clone());
        self.record(r, "MODIFIED", &mut new, previous);
        self.objects.insert(key(r, &ns, name), new.clone());
        Ok(new)
    }

    /// DELETE: the last state, with the resourceVersion of the deletion.
    pub fn delete(
        &mut self,
        r: &'static Resource,
        ns: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        let mut object = self
            .objects
            .remove(&key(r, ns, name))
            .ok_or_else(|| ApiError::not_found(r, name))?;
        self.record(r, "DELETED", &mut object, None);
        Ok(object)
    }
}

fn name_for_create(object: &Value) -> Result<String, ApiError> {
    let meta = &object["metadata"];
    if let Some(name) = meta["name"].as_str().filter(|n| !n.is_empty()) {
        return Ok(name.to_string());
    }
    if let Some(prefix) = meta["generateName"].as_str() {
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        return Ok(format!("{prefix}{}", &suffix[..5]));
    }
    let message = "resource name may not be empty";
    Err(ApiError::new(422, "Invalid", message))
}

/// The namespace of a write: the path's, which the body may repeat but not
/// contradict; "" for a cluster-scoped resource.
fn namespace_for(r: &Resource, path_ns: &str, object: &Value) -> Result<String, ApiError> {
    if !r.namespaced {
        return Ok(String::new());
    }
    let body_ns = object["metadata"]["namespace"].as_str().unwrap_or("");
    if !body_ns.is_empty() && !path_ns.is_empty() && body_ns != path_ns {
        let message =
            "the namespace of the provided object does not match the namespace sent on the request";
        return Err(ApiError::new(400, "BadRequest", message));
    }
    let ns = if path_ns.is_empty() { body_ns } else { path_ns };
    if ns.is_empty() {
        return Err(ApiError::new(400, "BadRequest", "a namespace is required"));
    }
    Ok(ns.to_string())
}

fn fill_identity(r: &Resource, object: &mut Value, name: &str, ns: &str) {
    object["apiVersion"] = r.api_version().into();
    object["kind"] = r.kind.into();
    let meta = &mut object["metadata"];
    meta["name"] = name.into();
    if r.namespaced {
        meta["namespace"] = ns.into();
    }
}

fn check_precondition(
    r: &'static Resource,
    name: &str,
    old: &Value,
    new: &Value,
) -> Result<(), ApiError> {
    let wanted = new["metadata"]["resourceVersion"].as_str().unwrap_or("");
    if !wanted.is_empty() && wanted != old["metadata"]["resourceVersion"] {
        let what = "the object has been modified; please apply your changes to the latest version and try again";
        let mut e = ApiError::about(r, name, 409, "Conflict", what);
        e.message = format!("Operation cannot be fulfilled on {}", e.message);
        return Err(e);
    }
    Ok(())
}

/// The object a write leaves, before identity and versions are set.
fn updated(r: &Resource, old: &Value, mut new: Value, part: Part) -> Value {
    match part {
        Part::Whole => new,
        Part::Main if r.status => {
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => drop(new.as_object_mut().map(|o| o.remove("status"))),
            }
            new
        }
        Part::Main => new,
        Part::Status => {
            let mut out = old.clone();
            match new.as_object_mut().and_then(|o| o.remove("status")) {
                Some(s) => out["status"] = s,
                None => drop(out.as_object_mut().map(|o| o.remove("status"))),
            }
            out
        }
    }
}
