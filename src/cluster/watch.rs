//! The cluster's objects as the watches last saw them: one kube-runtime
//! watcher per kind (and namespace watched), each relisting on its own
//! after `410 Gone` or a lost connection, with a backoff bounded at 2 s
//! so a returning API server is listed again within seconds. Objects are
//! kept as JSON (`DynamicObject`): one the typed API would refuse is kept
//! too, and the translation withholds it alone. A relist replaces a kind's
//! objects at once, when it is complete, never leaving half a list.
//! Of Secrets and ConfigMaps only those our objects name are held
//! (`named`), so no unrelated Secret is ever held.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use serde_json::Value;
use tokio::sync::Notify;

use crate::import::Object;
use crate::k8s::Kind;
use crate::metrics::METRICS;

/// One watch's objects and whether its first list is complete.
#[derive(Default)]
struct Held {
    objects: BTreeMap<(String, String), Object>,
    /// Objects of a relist under way, put in force when it completes.
    relist: Option<BTreeMap<(String, String), Object>>,
    synced: bool,
    /// The wrapping sum of its objects' `entry` digests: what one change
    /// updates, so the content of every watch is compared in O(1).
    digest: u64,
}

/// Every watch's objects; `changed` wakes the builder.
#[derive(Default)]
pub struct Cache {
    held: Mutex<HashMap<String, Held>>,
    /// The Services (namespace, name) whose EndpointSlices changed since
    /// the last `snapshot`.
    dirty: Mutex<HashSet<(String, String)>>,
    pub changed: Notify,
}

/// The watches of EndpointSlices, which `others` leaves out.
const SLICES: &str = "EndpointSlice/";

impl Cache {
    /// Every object held and the `others` digest of them, taken together;
    /// the Services whose endpoints changed are forgotten (a build reads
    /// them all).
    pub fn snapshot(&self) -> (Vec<Object>, u64) {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        self.dirty.lock().unwrap_or_else(|e| e.into_inner()).clear();
        let objects = held
            .values()
            .flat_map(|h| h.objects.values().cloned())
            .collect();
        (objects, others(&held))
    }

    /// A digest of every object but the EndpointSlices, each without its
    /// status and what comes with any write: whether anything a build
    /// reads, endpoints apart, changed.
    pub fn others(&self) -> u64 {
        others(&self.held.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The Services whose EndpointSlices changed since last taken, kept.
    pub fn dirty(&self) -> HashSet<(String, String)> {
        self.dirty.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The Services whose EndpointSlices changed since last asked.
    pub fn take_dirty(&self) -> HashSet<(String, String)> {
        std::mem::take(&mut *self.dirty.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Service `namespace/name` and its EndpointSlices.
    pub fn service(&self, namespace: &str, name: &str) -> Vec<Object> {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let label = ["metadata", "labels", "kubernetes.io/service-name"];
        // Only the Service and EndpointSlice watches: the named Secret
        // and ConfigMap watches may be many, and hold neither.
        held.iter()
            .filter(|(watch, _)| watch.starts_with(SLICES) || watch.starts_with("Service/"))
            .flat_map(|(watch, h)| {
                let slices = watch.starts_with(SLICES);
                let services = watch.starts_with("Service/");
                let from = (namespace.to_string(), String::new());
                h.objects
                    .range(from..)
                    .take_while(move |((ns, _), _)| ns == namespace)
                    .filter(move |((_, n), o)| {
                        (services && n == name)
                            || (slices && o.text(&label).as_deref() == Some(name))
                    })
                    .map(|(_, o)| o.clone())
            })
            .collect()
    }

    /// Whether these watches have each completed a first list.
    pub fn synced<'a>(&self, mut watches: impl Iterator<Item = &'a str>) -> bool {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        watches.all(|w| held.get(w).is_some_and(|h| h.synced))
    }

    pub fn apply(&self, watch: &str, event: Event<DynamicObject>, kind: Kind) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let h = held.entry(watch.to_string()).or_default();
        let changed = match event {
            Event::Apply(o) => object(o, kind).is_some_and(|o| {
                let new = o.print();
                h.digest = h.digest.wrapping_add(entry(&o, new));
                self.moved(&o);
                match h.objects.insert(key(&o), o) {
                    None => true,
                    Some(old) => {
                        let was = old.print();
                        h.digest = h.digest.wrapping_sub(entry(&old, was));
                        self.moved(&old);
                        was != new
                    }
                }
            }),
            Event::Delete(o) => object(o, kind).is_some_and(|o| {
                let Some(old) = h.objects.remove(&key(&o)) else {
                    return false;
                };
                h.digest = h.digest.wrapping_sub(entry(&old, old.print()));
                self.moved(&old);
                true
            }),
            Event::Init => {
                h.relist = Some(BTreeMap::new());
                false
            }
            Event::InitApply(o) => {
                if let (Some(o), Some(list)) = (object(o, kind), h.relist.as_mut()) {
                    list.insert(key(&o), o);
                }
                false
            }
            Event::InitDone => {
                let old = std::mem::replace(&mut h.objects, h.relist.take().unwrap_or_default());
                h.digest = h
                    .objects
                    .values()
                    .fold(0, |d, o| d.wrapping_add(entry(o, o.print())));
                h.synced = true;
                // A slice gone while the watch was away moves its Service too.
                for o in old.values().chain(h.objects.values()) {
                    self.moved(o);
                }
                true
            }
        };
        let count = held
            .iter()
            .filter(|(w, _)| w.starts_with(kind.name()))
            .map(|(_, h)| h.objects.len())
            .sum::<usize>();
        METRICS
            .kube_objects
            .with_label_values(&[kind.name()])
            .set(count as i64);
        drop(held);
        if changed {
            self.changed.notify_one();
        }
    }
}

impl Cache {
    /// Marks the Service an EndpointSlice belongs to as changed.
    fn moved(&self, o: &Object) {
        if !o.is(Kind::EndpointSlice) {
            return;
        }
        if let Some(service) = o.text(&["metadata", "labels", "kubernetes.io/service-name"]) {
            let mut dirty = self.dirty.lock().unwrap_or_else(|e| e.into_inner());
            dirty.insert((o.namespace.clone(), service));
        }
    }
}

fn others(held: &HashMap<String, Held>) -> u64 {
    held.iter()
        .filter(|(watch, _)| !watch.starts_with(SLICES))
        .fold(0, |d, (_, h)| d.wrapping_add(h.digest))
}

/// One object's part of its watch's digest: its kind, place and `print`.
fn entry(o: &Object, print: u64) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (&o.kind, &o.namespace, &o.name, print).hash(&mut h);
    h.finish()
}

fn key(o: &Object) -> (String, String) {
    (o.namespace.clone(), o.name.clone())
}

/// A watched object as the importer reads it: JSON with its kind.
///
/// What no build reads and a real API server sends with every object is
/// not kept: its field managers (as controller-runtime's
/// `TransformStripManagedFields` drops them), its owners, `kubectl
/// apply`'s copy of the last manifest (often more than the rest of the
/// object), and each endpoint's pod, node, zone and hints (50,000
/// endpoints hold them 50,000 times).
pub(super) fn object(mut o: DynamicObject, kind: Kind) -> Option<Object> {
    o.metadata.managed_fields = None;
    o.metadata.owner_references = None;
    if let Some(annotations) = &mut o.metadata.annotations {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
    if let (Kind::EndpointSlice, Some(Value::Array(endpoints))) =
        (kind, o.data.get_mut("endpoints"))
    {
        for endpoint in endpoints.iter_mut().filter_map(Value::as_object_mut) {
            for unread in [
                "targetRef",
                "nodeName",
                "zone",
                "hints",
                "deprecatedTopology",
            ] {
                endpoint.remove(unread);
            }
        }
    }
    let name = o.metadata.name.clone()?;
    let namespace = o.metadata.namespace.clone().unwrap_or_default();
    let mut value = serde_json::to_value(&o).ok()?;
    if let Value::Object(map) = &mut value {
        map.insert("kind".into(), Value::String(kind.name().into()));
    }
    Some(Object {
        kind: kind.name().to_string(),
        namespace,
        name,
        value: value.into(),
    })
}

/// Retries a lost watch after 250 ms, doubling to at most 2 s; reset once
/// a watch works again.
#[derive(Debug, Clone)]
pub struct Retry(Duration);

impl Default for Retry {
    fn default() -> Self {
        Retry(Duration::from_millis(250))
    }
}

impl Iterator for Retry {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        let now = self.0;
        self.0 = (self.0 * 2).min(Duration::from_secs(2));
        Some(now)
    }
}

impl Backoff for Retry {
    fn reset(&mut self) {
        self.0 = Duration::from_millis(250);
    }
}

/// What one watch looks at.
pub struct Watch {
    /// Its name in the cache: kind, then namespace and selector.
    pub name: String,
    pub kind: Kind,
    pub namespace: Option<String>,
    pub field_selector: Option<String>,
}

impl Watch {
    pub fn new(kind: Kind, namespace: Option<&str>, field_selector: Option<String>) -> Watch {
        let name = format!(
            "{}/{}/{}",
            kind.name(),
            namespace.unwrap_or(""),
            field_selector.as_deref().unwrap_or("")
        );
        Watch {
            name,
            kind,
            namespace: namespace.map(String::from),
            field_selector,
        }
    }

    /// Runs the watch until the task is aborted: every event into `cache`.
    pub async fn run(self, client: kube::Client, cache: Arc<Cache>) {
        let resource = self.kind.resource();
        let api: Api<DynamicObject> = match &self.namespace {
            Some(ns) => Api::namespaced_with(client, ns, &resource),
            None => Api::all_with(client, &resource),
        };
        let mut config = watcher::Config::default().timeout(290);
        if let Some(selector) = &self.field_selector {
            config = config.fields(selector);
        }
        let mut events = watcher(api, config).backoff(Retry::default()).boxed();
        // At 0 from the start, so `increase()` sees the first error.
        let errors = METRICS
            .kube_watch_errors
            .with_label_values(&[self.kind.name()]);
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => cache.apply(&self.name, event, self.kind),
                Err(e) => {
                    errors.inc();
                    tracing::warn!(kind = self.kind.name(), error = %e, "kubernetes.watch_error");
                }
            }
        }
    }
}

fn watcher(
    api: Api<DynamicObject>,
    config: watcher::Config,
) -> impl futures_util::Stream<Item = Result<Event<DynamicObject>, watcher::Error>> + Send {
    watcher::watcher(api, config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn field_managers_and_the_last_applied_copy_are_not_kept() {
        let o: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {
                "name": "a", "namespace": "team-a",
                "managedFields": [{"manager": "kubectl", "operation": "Update",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{}}",
                    "nginx.ingress.kubernetes.io/limit-rps": "5"
                }
            },
            "spec": {"rules": []}
        }))
        .unwrap();
        let kept = object(o, Kind::Ingress).unwrap();
        let metadata = json!({"name": "a", "namespace": "team-a",
            "annotations": {"nginx.ingress.kubernetes.io/limit-rps": "5"}});
        assert_eq!(kept.value["metadata"], metadata);
        assert_eq!(kept.value["spec"], json!({"rules": []}));
        assert_eq!(kept.value["kind"], "Ingress");
    }

    #[test]
    fn an_endpoint_keeps_its_addresses_and_conditions_only() {
        let o: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {
                "name": "web-x", "namespace": "team-a",
                "labels": {"kubernetes.io/service-name": "web"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": "web",
                    "uid": "u-1", "controller": true, "blockOwnerDeletion": true}]
            },
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080}],
            "endpoints": [{
                "addresses": ["10.0.0.7"],
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "targetRef": {"kind": "Pod", "namespace": "team-a", "name": "web-1", "uid": "u-2"},
                "nodeName": "node-1", "zone": "a", "hints": {"forZones": [{"name": "a"}]}
            }]
        }))
        .unwrap();
        let kept = object(o, Kind::EndpointSlice).unwrap();
        let endpoint = json!({"addresses": ["10.0.0.7"],
            "conditions": {"ready": true, "serving": true, "terminating": false}});
        assert_eq!(kept.value["endpoints"], json!([endpoint]));
        assert_eq!(kept.value["ports"], json!([{"name": "http", "port": 8080}]));
        let metadata = json!({"name": "web-x", "namespace": "team-a",
            "labels": {"kubernetes.io/service-name": "web"}});
        assert_eq!(kept.value["metadata"], metadata);
    }
}
