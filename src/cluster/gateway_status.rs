//! Writes the Gateway API objects' status (`gateway::status` says what it
//! should be): by the Lease holder only, through the status subresource,
//! read first and replaced with the resource version read, so of two
//! writers one gets `409 Conflict` and tries again on the next turn; only
//! where it differs (the transition times aside). A route's `parents`
//! entries of other Gateways and other controllers are kept as found.

use std::collections::HashMap;

use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{json, Value};

use super::gateway::{self, StatusWrite};
use crate::config::Kubernetes;
use crate::k8s::Kind;

/// Makes each object's status what `wanted` says; `written` remembers what
/// this holder wrote, so an unchanged status is not read again.
pub async fn write(
    client: &kube::Client,
    settings: &Kubernetes,
    wanted: &[StatusWrite],
    written: &mut HashMap<String, Value>,
) {
    if wanted.is_empty() {
        return;
    }
    let addresses = addresses(client, settings).await;
    for w in wanted {
        let key = format!("{}/{}/{}", w.kind, w.namespace, w.name);
        let mut want = w.status.clone();
        if w.kind == Kind::Gateway.name() {
            want["addresses"] = addresses.clone();
        }
        if written.get(&key) == Some(&timeless(&want)) {
            continue;
        }
        let Some(kind) = Kind::by_name(&w.kind) else {
            continue;
        };
        let resource = kind.resource();
        let api: Api<DynamicObject> = match kind.namespaced() {
            true => Api::namespaced_with(client.clone(), &w.namespace, &resource),
            false => Api::all_with(client.clone(), &resource),
        };
        let mut current = match api.get_status(&w.name).await {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(object = %key, error = %e, "kubernetes.status_failed");
                continue;
            }
        };
        let have = current.data.get("status").cloned().unwrap_or(Value::Null);
        if let Some((controller, gw)) = &w.parents_of {
            want = with_others(&have, want, controller, gw);
        }
        keep_transition_times(&have, &mut want);
        if timeless(&have) == timeless(&want) {
            written.insert(key, timeless(&w.status_with(&want)));
            continue;
        }
        current.data["status"] = want.clone();
        match api
            .replace_status(&w.name, &PostParams::default(), &current)
            .await
        {
            Ok(_) => {
                written.insert(key, timeless(&w.status_with(&want)));
            }
            Err(e) => tracing::warn!(object = %key, error = %e, "kubernetes.status_failed"),
        }
    }
}

trait Ours {
    /// What `written` compares with: ours, without others' entries.
    fn status_with(&self, merged: &Value) -> Value;
}

impl Ours for StatusWrite {
    fn status_with(&self, merged: &Value) -> Value {
        match self.parents_of {
            Some(_) => self.status.clone(),
            None => merged.clone(),
        }
    }
}

/// Our parents entries for the Gateway, after every entry that is not.
fn with_others(have: &Value, mut want: Value, controller: &str, gw: &str) -> Value {
    let mut parents: Vec<Value> = match have.get("parents") {
        Some(Value::Array(list)) => list
            .iter()
            .filter(|e| !gateway::is_ours(e, controller, gw))
            .cloned()
            .collect(),
        _ => Vec::new(),
    };
    if let Some(Value::Array(mine)) = want.get("parents") {
        parents.extend(mine.iter().cloned());
    }
    want["parents"] = Value::Array(parents);
    want
}

/// A condition whose status did not change keeps the time it last did:
/// conditions are matched by `type`, within the parent (`parentRef`) or
/// listener (`name`) they belong to.
fn keep_transition_times(have: &Value, want: &mut Value) {
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => {
            let same = w.contains_key("type")
                && w.get("type") == h.get("type")
                && w.get("status") == h.get("status");
            if let (true, Some(t)) = (same, h.get("lastTransitionTime")) {
                w.insert("lastTransitionTime".into(), t.clone());
            }
            for (k, wv) in w.iter_mut() {
                if let Some(hv) = h.get(k) {
                    keep_transition_times(hv, wv);
                }
            }
        }
        (Value::Array(h), Value::Array(w)) => {
            for wv in w.iter_mut() {
                let Some(id) = identity(wv) else { continue };
                if let Some(hv) = h.iter().find(|hv| identity(hv).as_ref() == Some(&id)) {
                    keep_transition_times(hv, wv);
                }
            }
        }
        _ => {}
    }
}

/// What names an entry of a status list: a parent, a listener, a condition.
fn identity(v: &Value) -> Option<Value> {
    ["parentRef", "name", "type"]
        .iter()
        .find_map(|k| v.get(*k).cloned())
}

/// A status without its conditions' transition times.
fn timeless(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| k.as_str() != "lastTransitionTime")
                .map(|(k, v)| (k.clone(), timeless(v)))
                .collect(),
        ),
        Value::Array(list) => Value::Array(list.iter().map(timeless).collect()),
        other => other.clone(),
    }
}

/// The Gateway's `status.addresses`: what is published for the Ingresses,
/// each with its type.
async fn addresses(client: &kube::Client, settings: &Kubernetes) -> Value {
    let published = super::pod::addresses(client, settings)
        .await
        .unwrap_or_default();
    Value::Array(
        published
            .iter()
            .filter_map(|a| {
                let (kind, value) = match (a.get("ip"), a.get("hostname")) {
                    (Some(ip), _) => ("IPAddress", ip),
                    (None, Some(h)) => ("Hostname", h),
                    _ => return None,
                };
                Some(json!({"type": kind, "value": value}))
            })
            .collect(),
    )
}
