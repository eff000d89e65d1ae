//! Kubernetes Events on Ingresses: each annotation approximated or not
//! supported, each Ingress withheld, each broken Secret, where `kubectl
//! describe ingress` shows them. An Event is named after what it says
//! (the Ingress's uid, reason and message), so the same note is written
//! once however often it is built, by however many replicas (the second
//! create is a 409 Conflict); this process also remembers what it wrote,
//! and writes at most `PER_BUILD` Events a build.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};

use super::compose::Note;
use super::Pod;
use crate::import::Object;

/// The most Events written after one build.
const PER_BUILD: usize = 100;
/// The most Events remembered as written.
const REMEMBERED: usize = 100_000;

pub struct Recorder {
    client: kube::Client,
    pod: Pod,
    written: Arc<Mutex<HashSet<u64>>>,
}

impl Recorder {
    pub fn new(client: kube::Client, pod: Pod) -> Recorder {
        Recorder {
            client,
            pod,
            written: Default::default(),
        }
    }

    /// Writes the Events of a build's notes not written before.
    pub fn record(&self, objects: &[Object], notes: Vec<Note>) {
        let mut todo = Vec::new();
        {
            let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
            if written.len() > REMEMBERED {
                written.clear();
            }
            for note in notes {
                let Some(ing) = objects
                    .iter()
                    .find(|o| o.kind == "Ingress" && o.id() == note.ingress)
                else {
                    continue;
                };
                let uid = ing.text(&["metadata", "uid"]).unwrap_or_default();
                let key = digest(&(&uid, note.reason, &note.message));
                if todo.len() < PER_BUILD && written.insert(key) {
                    todo.push(event(ing, &uid, key, &note, &self.pod));
                }
            }
        }
        let client = self.client.clone();
        tokio::spawn(async move {
            for (ns, ev) in todo {
                let api: Api<Event> = Api::namespaced(client.clone(), &ns);
                if let Err(e) = api.create(&PostParams::default(), &ev).await {
                    if !matches!(&e, kube::Error::Api(s) if s.code == 409) {
                        tracing::warn!(error = %e, "kubernetes.event_failed");
                    }
                }
            }
        });
    }
}

fn digest(value: &impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

fn event(ing: &Object, uid: &str, key: u64, note: &Note, pod: &Pod) -> (String, Event) {
    let now = Time(Timestamp::now());
    let base: String = ing.name.chars().take(200).collect();
    let ev = Event {
        metadata: ObjectMeta {
            name: Some(format!("{base}.{key:016x}")),
            namespace: Some(ing.namespace.clone()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("networking.k8s.io/v1".into()),
            kind: Some("Ingress".into()),
            name: Some(ing.name.clone()),
            namespace: Some(ing.namespace.clone()),
            uid: Some(uid.to_string()).filter(|u| !u.is_empty()),
            resource_version: ing.text(&["metadata", "resourceVersion"]),
            ..Default::default()
        },
        reason: Some(note.reason.to_string()),
        message: Some(note.message.chars().take(1024).collect()),
        type_: Some(if note.warning { "Warning" } else { "Normal" }.into()),
        source: Some(EventSource {
            component: Some("fairgate".into()),
            host: Some(pod.name.clone()),
        }),
        reporting_component: Some("fairgate.dev/ingress-controller".into()),
        reporting_instance: Some(pod.name.clone()),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        ..Default::default()
    };
    (ing.namespace.clone(), ev)
}
