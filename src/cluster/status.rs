//! `status.loadBalancer` of the Ingresses served, written by one replica
//! at a time: the holder of a `coordination.k8s.io/v1` Lease in the pod's
//! namespace. Every replica serves; each tries to take the Lease every
//! third of its duration, and takes it only when its holder has not
//! renewed it for a whole duration, so a replica that dies is replaced
//! within one duration (plus one try). Writes go through the status
//! subresource, only where the addresses differ, and only on Ingresses of
//! our classes (never another controller's).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{json, Value};
use tokio::sync::watch;

use super::gateway::StatusWrite;
use super::pod::{addresses, Pod};
use crate::config::Kubernetes;
use crate::import::manifests::At;
use crate::import::Object;
use crate::k8s::Kind;
use crate::metrics::METRICS;

/// What the status task writes: the served Ingresses' addresses, none for
/// ours not served (withheld), and the Gateway API objects' status.
type Wanted = Arc<(Vec<Object>, Vec<Object>, Vec<StatusWrite>)>;

/// Hands the served Ingresses and the Gateway API statuses to the status
/// task.
pub struct Publisher {
    served: watch::Sender<Wanted>,
    /// Whether this replica holds the Lease now.
    pub leader: Arc<AtomicBool>,
}

impl Publisher {
    pub fn start(client: kube::Client, pod: Pod, settings: Kubernetes) -> Publisher {
        let (tx, rx) = watch::channel(Arc::new((Vec::new(), Vec::new(), Vec::new())));
        let leader = Arc::new(AtomicBool::new(false));
        tokio::spawn(lead(client, pod, settings, rx, leader.clone()));
        Publisher { served: tx, leader }
    }

    /// The served objects (the Ingresses among them get an address), ours
    /// not served (their address is taken back: external-dns must not
    /// publish a withheld Ingress) and the Gateway API objects' status.
    pub fn publish(&self, served: Vec<Object>, unserved: Vec<Object>, statuses: Vec<StatusWrite>) {
        let ingresses =
            |list: Vec<Object>| list.into_iter().filter(|o| o.is(Kind::Ingress)).collect();
        let wanted = (ingresses(served), ingresses(unserved), statuses);
        self.served.send_replace(Arc::new(wanted));
    }
}

/// The Lease loop: while held, every served Ingress's status is made right.
async fn lead(
    client: kube::Client,
    pod: Pod,
    settings: Kubernetes,
    mut served: watch::Receiver<Wanted>,
    holds: Arc<AtomicBool>,
) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), &pod.namespace);
    let every = (settings.lease_duration / 3).max(Duration::from_millis(200));
    let mut leader = false;
    // What this holder wrote, by Ingress: its own writes build nothing, so
    // the objects it is handed may not show them yet.
    let mut written = HashMap::new();
    let mut written_gateway = HashMap::new();
    loop {
        let (now_leader, expires) = try_hold(&leases, &pod, &settings).await;
        if now_leader != leader {
            tracing::info!(leader = now_leader, pod = %pod.name, "kubernetes.lease");
            METRICS.kube_leader.set(now_leader as i64);
            holds.store(now_leader, Ordering::Relaxed);
            leader = now_leader;
            written.clear();
            written_gateway.clear();
        }
        if leader {
            let wanted = served.borrow_and_update().clone();
            write_status(&client, &settings, &wanted.0, &mut written).await;
            take_back(&client, &settings, &wanted.1).await;
            super::gateway_status::write(&client, &settings, &wanted.2, &mut written_gateway).await;
        }
        // A standby tries again just after the holder's Lease would lapse,
        // so a dead holder is replaced within one Lease duration of its
        // last renewal.
        let wait = match expires {
            Some(left) => (left + Duration::from_millis(50)).min(every),
            None => every,
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = served.changed(), if leader => {}
        }
    }
}

/// Takes or renews the Lease: whether this replica holds it now, and when
/// another holds it, how long until it lapses unrenewed.
async fn try_hold(
    leases: &Api<Lease>,
    pod: &Pod,
    settings: &Kubernetes,
) -> (bool, Option<Duration>) {
    let now = MicroTime(Timestamp::now());
    let seconds = settings.lease_duration.as_secs().max(1) as i32;
    let current = match leases.get_opt(&settings.lease_name).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "kubernetes.lease_unavailable");
            return (false, None);
        }
    };
    let Some(mut lease) = current else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(settings.lease_name.clone()),
                namespace: Some(pod.namespace.clone()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(pod.name.clone()),
                lease_duration_seconds: Some(seconds),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        };
        return (
            leases.create(&PostParams::default(), &lease).await.is_ok(),
            None,
        );
    };
    let spec = lease.spec.get_or_insert_with(Default::default);
    let mine = spec.holder_identity.as_deref() == Some(pod.name.as_str());
    if !mine {
        let renewed = spec.renew_time.as_ref().map(|t| t.0);
        let lasts =
            Duration::from_secs(spec.lease_duration_seconds.unwrap_or(seconds).max(1) as u64);
        let age = renewed.map(|t| {
            let age = Timestamp::now().duration_since(t);
            Duration::from_secs_f64(
                (age.as_secs() as f64 + age.subsec_nanos() as f64 / 1e9).max(0.0),
            )
        });
        if let Some(left) = age
            .and_then(|age| lasts.checked_sub(age))
            .filter(|l| !l.is_zero())
        {
            return (false, Some(left));
        }
        spec.holder_identity = Some(pod.name.clone());
        spec.acquire_time = Some(now.clone());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    spec.renew_time = Some(now);
    spec.lease_duration_seconds = Some(seconds);
    // The resourceVersion read makes this a compare-and-swap: of two
    // replicas taking an expired Lease, one gets 409 Conflict.
    let held = leases
        .replace(&settings.lease_name, &PostParams::default(), &lease)
        .await
        .is_ok();
    (held, None)
}

/// Writes `status.loadBalancer.ingress` where it differs from ours.
async fn write_status(
    client: &kube::Client,
    settings: &Kubernetes,
    served: &[Object],
    written: &mut HashMap<String, Value>,
) {
    let Some(addresses) = addresses(client, settings).await else {
        return;
    };
    let want = Value::Array(addresses);
    let id = |ing: &Object| {
        format!(
            "{}/{}",
            ing.id(),
            ing.text(&["metadata", "uid"]).unwrap_or_default()
        )
    };
    let ids: std::collections::HashSet<String> = served.iter().map(id).collect();
    written.retain(|k, _| ids.contains(k));
    for ing in served {
        let have = ing
            .value
            .at("/status/loadBalancer/ingress")
            .cloned()
            .unwrap_or(Value::Null);
        let id = id(ing);
        if have == want || written.get(&id) == Some(&want) {
            continue;
        }
        let api: Api<Ingress> = Api::namespaced(client.clone(), &ing.namespace);
        let patch = json!({"status": {"loadBalancer": {"ingress": want}}});
        match api
            .patch_status(&ing.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                written.insert(id, want.clone());
            }
            Err(e) => tracing::warn!(ingress = %ing.id(), error = %e, "kubernetes.status_failed"),
        }
    }
}

/// Removes our address from the status of Ingresses of ours not served.
async fn take_back(client: &kube::Client, settings: &Kubernetes, unserved: &[Object]) {
    if unserved.is_empty() {
        return;
    }
    let Some(addresses) = addresses(client, settings).await else {
        return;
    };
    let ours = Value::Array(addresses);
    for ing in unserved {
        if ing.value.at("/status/loadBalancer/ingress") != Some(&ours) {
            continue;
        }
        let api: Api<Ingress> = Api::namespaced(client.clone(), &ing.namespace);
        let patch = json!({"status": {"loadBalancer": {"ingress": null}}});
        let taken = api
            .patch_status(&ing.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
        if let Err(e) = taken {
            tracing::warn!(ingress = %ing.id(), error = %e, "kubernetes.status_failed");
        }
    }
}
