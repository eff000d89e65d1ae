//! Controller mode (`kubernetes:` in the policy file): the Ingresses of a
//! cluster served on top of the base policy, as ingress-nginx serves them.
//! `watch` keeps the objects (IngressClasses, Ingresses, Services,
//! EndpointSlices, the controller ConfigMap, and only the Secrets our
//! Ingresses name); on every change, after a short quiet spell (a burst of
//! changes is one build), `compose` builds a policy through the import's
//! translation and the file's reader and loader, and `state::put_in_force`
//! swaps it in as a reload would. A lost API server leaves the last policy
//! in force. `events` tells each Ingress what was approximated, not
//! supported or withheld; `status` (one replica, the Lease holder) writes
//! `status.loadBalancer`.

pub mod compose;
mod endpoints;
mod events;
pub mod gateway;
mod gateway_status;
mod merge;
mod origins;
mod pod;
mod status;
mod watch;

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::config::Kubernetes;
use crate::k8s::Kind;
use crate::metrics::METRICS;
use crate::state::Shared;
use compose::Composer;
use pod::Pod;
use watch::{Cache, Watch};

pub use compose::class_of;

/// A change is built after this long without another ...
const QUIET: Duration = Duration::from_millis(200);
/// ... or this long after the first, whichever comes first.
const MAX_WAIT: Duration = Duration::from_secs(1);

/// The running controller, as the supervisor sees it.
pub struct Controller {
    /// Set when the base file changed: the next build reads it again.
    pub base_changed: Notify,
}

/// Starts the controller on the current runtime: the client from the usual
/// places (in-cluster service account, else `KUBECONFIG`), the watches,
/// the builder, the Lease and the status writer.
pub async fn start(shared: Arc<Shared>, base: PathBuf, settings: Kubernetes) -> Arc<Controller> {
    shared.synced.store(false, Ordering::Release);
    let controller = Arc::new(Controller {
        base_changed: Notify::new(),
    });
    let task = controller.clone();
    tokio::spawn(async move {
        let client = loop {
            match client().await {
                Ok(c) => break c,
                Err(e) => {
                    tracing::error!(error = %e, "kubernetes.client_unavailable");
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
            }
        };
        run(shared, base, settings, client, task).await;
    });
    controller
}

/// The API client: the pod's service account when in a cluster, else the
/// kubeconfig (`KUBECONFIG`, or `~/.kube/config`).
async fn client() -> Result<kube::Client, kube::Error> {
    let config = match kube::Config::incluster() {
        Ok(config) => config,
        Err(_) => kube::Config::infer()
            .await
            .map_err(kube::Error::InferConfig)?,
    };
    kube::Client::try_from(config)
}

/// The watches that must have listed once before the first build.
fn static_watches(settings: &Kubernetes) -> Vec<Watch> {
    let mut out = vec![Watch::new(Kind::IngressClass, None, None)];
    let namespaces: Vec<Option<&str>> = match settings.namespaces.is_empty() {
        true => vec![None],
        false => settings
            .namespaces
            .iter()
            .map(|n| Some(n.as_str()))
            .collect(),
    };
    let gateway = settings.gateway.as_ref().and_then(|g| g.split_once('/'));
    for ns in namespaces {
        for kind in [Kind::Ingress, Kind::Service, Kind::EndpointSlice] {
            out.push(Watch::new(kind, ns, None));
        }
        // The Gateway API's kinds only when a Gateway is served: a cluster
        // without its CRDs would answer these watches 404.
        if gateway.is_some() {
            for kind in [
                Kind::HTTPRoute,
                Kind::GRPCRoute,
                Kind::ReferenceGrant,
                Kind::RoutePolicy,
            ] {
                out.push(Watch::new(kind, ns, None));
            }
        }
    }
    if let Some((ns, name)) = gateway {
        out.push(Watch::new(Kind::GatewayClass, None, None));
        out.push(Watch::new(Kind::Namespace, None, None));
        out.push(Watch::new(
            Kind::Gateway,
            Some(ns),
            Some(format!("metadata.name={name}")),
        ));
    }
    if let Some((ns, name)) = settings.configmap.as_ref().and_then(|c| c.split_once('/')) {
        out.push(Watch::new(
            Kind::ConfigMap,
            Some(ns),
            Some(format!("metadata.name={name}")),
        ));
    }
    out
}

async fn run(
    shared: Arc<Shared>,
    base: PathBuf,
    settings: Kubernetes,
    client: kube::Client,
    controller: Arc<Controller>,
) {
    let cache = Arc::new(Cache::default());
    let pod = Pod::from_env();
    let watches = static_watches(&settings);
    let names: Vec<String> = watches.iter().map(|w| w.name.clone()).collect();
    for w in watches {
        tokio::spawn(w.run(client.clone(), cache.clone()));
    }
    let mut named = NamedWatches::default();
    let (publisher, recorder) = writers(&client, pod, &settings);
    let mut composer = Some(Composer::new(settings, base.clone()));
    let mut in_place = endpoints::Endpoints::default();
    loop {
        let base_changed = changed(&cache, &controller).await;
        // Endpoints are applied at once (no quiet spell: a rolling update
        // moves them every few seconds, and each waits for nothing else).
        let synced = cache.synced(names.iter().map(String::as_str));
        if !base_changed && synced && in_place.apply(&cache, &shared) {
            continue;
        }
        quiet_spell(&cache, &controller).await;
        if !cache.synced(names.iter().map(String::as_str)) {
            continue;
        }
        let (objects, others) = watch_named(composer.as_ref(), &mut named, &client, &cache).await;
        let objects = Arc::new(objects);
        let started = Instant::now();
        let Some(c) = composer.take() else {
            return;
        };
        let Some((c, result)) = compose_apart(c, objects.clone()).await else {
            return;
        };
        composer = Some(c);
        let Ok(result) = result else {
            METRICS.kube_builds.with_label_values(&["error"]).inc();
            tracing::error!("kubernetes.build_panicked");
            continue;
        };
        match result {
            Ok(composed) => {
                // A build that leaves objects waiting is followed by another,
                // never by endpoints applied in place.
                in_place = match composed.retry {
                    true => {
                        retry_soon(&cache);
                        endpoints::Endpoints::default()
                    }
                    false => {
                        let guard = gateway::BaseNames::of(&composed.checked.config).guard;
                        endpoints::Endpoints::built(&objects, others, composed.bindings, guard)
                    }
                };
                let served = composed.served.clone();
                let notes = composed.notes.clone();
                METRICS.kube_rejected.set(withheld_count(&notes) as i64);
                let applied = crate::state::put_in_force(&shared, composed.checked, &base).await;
                built(&shared, applied, started, served.len());
                recorder.record(&objects, notes);
                publisher.publish(served, composed.unserved, composed.statuses);
            }
            Err(problems) => {
                METRICS.kube_builds.with_label_values(&["error"]).inc();
                for line in problems.render_errors() {
                    tracing::error!(problem = %line, "kubernetes.build_failed");
                }
            }
        }
    }
}

/// The objects to build, and their `others` digest, once every Secret and
/// ConfigMap they name is watched: a snapshot that names one not watched
/// yet starts its watch, waits for its first list (up to 5 s) and is taken
/// again (an Ingress that arrived meanwhile is never built without what it
/// names, and then left so by endpoints applied in place).
async fn watch_named(
    composer: Option<&Composer>,
    named: &mut NamedWatches,
    client: &kube::Client,
    cache: &Arc<Cache>,
) -> (Vec<crate::import::Object>, u64) {
    loop {
        let (objects, others) = cache.snapshot();
        let referenced = composer.map(|c| c.referenced(&objects));
        if !named.update(&referenced.unwrap_or_default(), client, cache) {
            return (objects, others);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while !cache.synced(named.names()) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The composer's build of `objects` on a blocking thread (seconds of CPU
/// at worst: a culprit searched among thousands of Ingresses), off the
/// runtime the watches run on; a bug that panics costs that build, not the
/// controller. None when the thread could not run.
async fn compose_apart(
    mut c: Composer,
    objects: Arc<Vec<crate::import::Object>>,
) -> Option<(
    Composer,
    std::thread::Result<Result<compose::Composed, crate::config::Problems>>,
)> {
    tokio::task::spawn_blocking(move || {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.compose(&objects)));
        (c, result)
    })
    .await
    .ok()
}

/// How many objects a build withheld.
fn withheld_count(notes: &[compose::Note]) -> usize {
    let withheld: BTreeSet<&str> = notes
        .iter()
        .filter(|n| n.reason == "Withheld")
        .map(|n| n.ingress.as_str())
        .collect();
    withheld.len()
}

/// Builds again after `MAX_WAIT`: objects wait for a search the last build
/// had no budget for, and the next build goes on with it.
fn retry_soon(cache: &Arc<Cache>) {
    let cache = cache.clone();
    tokio::spawn(async move {
        tokio::time::sleep(MAX_WAIT).await;
        cache.changed.notify_one();
    });
}

/// What writes to the API: status (the Lease holder's) and Events (whose
/// standing Warnings the Lease holder writes again).
fn writers(
    client: &kube::Client,
    pod: Pod,
    settings: &Kubernetes,
) -> (status::Publisher, events::Recorder) {
    let publisher = status::Publisher::start(client.clone(), pod.clone(), settings.clone());
    let refresh = (settings.event_refresh, publisher.leader.clone());
    let recorder = events::Recorder::new(client.clone(), pod, refresh);
    (publisher, recorder)
}

/// Waits for a change: whether it is the base file's.
async fn changed(cache: &Cache, controller: &Controller) -> bool {
    tokio::select! {
        _ = cache.changed.notified() => false,
        _ = controller.base_changed.notified() => true,
    }
}

/// Waits for the burst a change started to end.
async fn quiet_spell(cache: &Cache, controller: &Controller) {
    let first = Instant::now();
    loop {
        let left = MAX_WAIT.saturating_sub(first.elapsed());
        if left.is_zero() {
            return;
        }
        tokio::select! {
            _ = cache.changed.notified() => {}
            _ = controller.base_changed.notified() => {}
            _ = tokio::time::sleep(QUIET.min(left)) => return,
        }
    }
}

/// Counts and logs a build put in force (or refused by the reload rules).
fn built(
    shared: &Shared,
    applied: Result<u64, crate::config::Problems>,
    started: Instant,
    ingresses: usize,
) {
    match applied {
        Ok(generation) => {
            METRICS.kube_builds.with_label_values(&["ok"]).inc();
            METRICS.config_generation.set(generation as i64);
            METRICS.kube_last_sync.set(crate::metrics::unix_now());
            shared.synced.store(true, Ordering::Release);
            let ms = started.elapsed().as_millis() as u64;
            tracing::info!(generation, ingresses, ms, "kubernetes.applied");
        }
        Err(problems) => {
            METRICS.kube_builds.with_label_values(&["error"]).inc();
            for line in problems.render_errors() {
                tracing::error!(problem = %line, "kubernetes.build_failed");
            }
        }
    }
}

/// One watch per Secret or ConfigMap a served Ingress names, and no other.
#[derive(Default)]
struct NamedWatches {
    running: HashMap<(Kind, String), (String, JoinHandle<()>)>,
}

impl NamedWatches {
    /// Starts the watches of newly named objects and ends those of objects
    /// no longer named; whether any was started.
    fn update(
        &mut self,
        named: &BTreeSet<(Kind, String)>,
        client: &kube::Client,
        cache: &Arc<Cache>,
    ) -> bool {
        let gone: Vec<(Kind, String)> = self
            .running
            .keys()
            .filter(|key| !named.contains(*key))
            .cloned()
            .collect();
        for key in gone {
            if let Some((watch, task)) = self.running.remove(&key) {
                task.abort();
                cache.forget(&watch);
            }
        }
        let new: Vec<&(Kind, String)> = named
            .iter()
            .filter(|key| !self.running.contains_key(*key))
            .collect();
        for (kind, id) in &new {
            let Some((ns, name)) = id.split_once('/') else {
                continue;
            };
            let selector = format!("metadata.name={name}");
            let mut w = Watch::new(*kind, Some(ns), Some(selector));
            // Apart from the controller ConfigMap's own watch, even if named.
            w.name.push_str("#named");
            let watch = w.name.clone();
            let task = tokio::spawn(w.run(client.clone(), cache.clone()));
            self.running.insert((*kind, id.clone()), (watch, task));
        }
        !new.is_empty()
    }

    fn names(&self) -> impl Iterator<Item = &str> {
        self.running.values().map(|(w, _)| w.as_str())
    }
}
