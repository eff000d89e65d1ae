//! Kubernetes Events on Ingresses: each annotation approximated or not
//! supported, each Ingress withheld, each broken Secret, where `kubectl
//! describe ingress` shows them. An Event is named after what it says
//! (the Ingress's uid, reason and message), so the same note is written
//! once however often it is built, by however many replicas (the second
//! create is a 409 Conflict); this process also remembers what it wrote,
//! and writes at most `PER_BUILD` Events a build. A Warning whose cause
//! stands (the last build said it again; the first `STANDING` of them) is
//! written again every `kubernetes.event_refresh` by the Lease holder, its
//! count raised, so the API server's Event TTL (an hour by default) never
//! hides why an Ingress is withheld.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};

use super::compose::Note;
use super::pod::Pod;
use crate::import::Object;
use crate::k8s::Kind;

/// The most Events written after one build.
const PER_BUILD: usize = 100;
/// The most Events remembered as written.
const REMEMBERED: usize = 100_000;
/// The most Warnings kept standing (and so written again), and written
/// again in one refresh.
const STANDING: usize = 1_000;

/// What this process wrote, by Event key: when, last, and how often.
type Written = Arc<Mutex<HashMap<u64, (Instant, i32)>>>;
/// The last build's Warnings: their keys and Events.
type Standing = Arc<Mutex<Vec<(u64, Event)>>>;

pub struct Recorder {
    client: kube::Client,
    pod: Pod,
    written: Written,
    standing: Standing,
}

impl Recorder {
    /// A recorder whose standing Warnings are written again every `refresh`
    /// while this replica holds the Lease (`leader`), as status is.
    pub fn new(client: kube::Client, pod: Pod, refresh: (Duration, Arc<AtomicBool>)) -> Recorder {
        let (refresh, leader) = refresh;
        let recorder = Recorder {
            client,
            pod,
            written: Default::default(),
            standing: Default::default(),
        };
        let (client, written) = (recorder.client.clone(), recorder.written.clone());
        let standing = recorder.standing.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval((refresh / 4).max(Duration::from_millis(250)));
            loop {
                tick.tick().await;
                if leader.load(Ordering::Relaxed) {
                    refresh_standing(&client, &written, &standing, refresh).await;
                }
            }
        });
        recorder
    }

    /// Writes the Events of a build's notes not written before, and keeps
    /// its Warnings as the standing ones.
    pub fn record(&self, objects: &[Object], notes: Vec<Note>) {
        let mut todo = Vec::new();
        let mut standing = Vec::new();
        {
            let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
            if written.len() > REMEMBERED {
                written.clear();
            }
            // By `namespace/name`: a note per Ingress, looked up at once (a
            // scan per note was seconds at 10,000 Ingresses, and held up the
            // endpoint changes waiting behind the build).
            let ingresses: HashMap<String, &Object> = objects
                .iter()
                .filter(|o| o.is(Kind::Ingress))
                .map(|o| (o.id(), o))
                .collect();
            for note in notes {
                let Some(ing) = ingresses.get(&note.ingress) else {
                    continue;
                };
                let uid = ing.text(&["metadata", "uid"]).unwrap_or_default();
                let key = digest(&(&uid, note.reason, &note.message));
                let stands = note.warning && standing.len() < STANDING;
                let new = todo.len() < PER_BUILD && !written.contains_key(&key);
                if !stands && !new {
                    continue;
                }
                // Made only for a note that is written or kept standing.
                let ev = event(ing, &uid, key, &note, &self.pod);
                if stands {
                    standing.push((key, ev.clone()));
                }
                if new {
                    written.insert(key, (Instant::now(), 1));
                    todo.push(ev);
                }
            }
        }
        *self.standing.lock().unwrap_or_else(|e| e.into_inner()) = standing;
        let client = self.client.clone();
        tokio::spawn(async move {
            for ev in todo {
                create(&client, &ev).await;
            }
        });
    }
}

/// Writes again each standing Warning last written `refresh` ago or more:
/// its count raised and its last time now (a merge patch: the controller
/// may create and patch Events, nothing more), or made anew where the API
/// server has let it expire.
async fn refresh_standing(
    client: &kube::Client,
    written: &Written,
    standing: &Standing,
    refresh: Duration,
) {
    let due: Vec<(Event, i32)> = {
        let standing = standing.lock().unwrap_or_else(|e| e.into_inner());
        let mut written = written.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let mut due = Vec::new();
        for (key, ev) in standing.iter() {
            let (at, count) = written.get(key).copied().unwrap_or((now, 0));
            if count == 0 || now.duration_since(at) >= refresh {
                let count = count.saturating_add(1);
                written.insert(*key, (now, count));
                due.push((ev.clone(), count));
            }
            if due.len() >= STANDING {
                break;
            }
        }
        due
    };
    for (ev, count) in due {
        let (Some(ns), Some(name)) = (&ev.metadata.namespace, &ev.metadata.name) else {
            continue;
        };
        let api: Api<Event> = Api::namespaced(client.clone(), ns);
        let raised = serde_json::json!({
            "count": count,
            "lastTimestamp": Time(Timestamp::now()),
        });
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&raised))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => create(client, &ev).await,
            Err(e) => tracing::warn!(error = %e, "kubernetes.event_failed"),
        }
    }
}

/// Creates `ev`; one that exists already (another replica's) is fine.
async fn create(client: &kube::Client, ev: &Event) {
    let Some(ns) = &ev.metadata.namespace else {
        return;
    };
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    if let Err(e) = api.create(&PostParams::default(), ev).await {
        if !matches!(&e, kube::Error::Api(s) if s.code == 409) {
            tracing::warn!(error = %e, "kubernetes.event_failed");
        }
    }
}

fn digest(value: &impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

fn event(ing: &Object, uid: &str, key: u64, note: &Note, pod: &Pod) -> Event {
    let now = Time(Timestamp::now());
    let base: String = ing.name.chars().take(200).collect();
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{base}.{key:016x}")),
            namespace: Some(ing.namespace.clone()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("networking.k8s.io/v1".into()),
            kind: Some(Kind::Ingress.name().into()),
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
    }
}
