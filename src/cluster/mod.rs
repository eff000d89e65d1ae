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

mod admission;
pub mod compose;
mod endpoints;
mod events;
pub mod gateway;
mod gateway_status;
mod merge;
mod named;
mod origins;
mod pod;
mod status;
mod watch;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

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
    // Both results exist from the start, so `increase()` sees the first.
    for result in ["ok", "error"] {
        METRICS.kube_builds.with_label_values(&[result]);
    }
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
    let mut named = named::Named::start(
        client.clone(),
        cache.clone(),
        !settings.namespaces.is_empty(),
    );
    let (publisher, recorder) = writers(&client, pod, &settings);
    let latest = admission::start(&settings, &base, &client);
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
        quiet_spell(&cache, &controller, &mut in_place, &shared).await;
        if !cache.synced(names.iter().map(String::as_str)) {
            continue;
        }
        let begun = Instant::now();
        let (objects, others) = read_named(composer.as_ref(), &mut named, &cache).await;
        let objects = Arc::new(objects);
        latest.objects.store(Some(objects.clone()));
        let mut timing = Timing::new(begun);
        let Some(c) = composer.take() else {
            return;
        };
        let build = compose_apart(c, objects.clone());
        let Some((c, result)) = meanwhile(build, &cache, &mut in_place, &shared).await else {
            return;
        };
        composer = Some(c);
        timing.composed();
        let Ok(result) = result else {
            METRICS.kube_builds.with_label_values(&["error"]).inc();
            tracing::error!("kubernetes.build_panicked");
            continue;
        };
        match result {
            Ok(composed) => {
                in_place = endpoints_of(&composed, &objects, others, &cache);
                let served = composed.served.clone();
                let notes = composed.notes.clone();
                METRICS.kube_rejected.set(withheld_count(&notes) as i64);
                let applied = crate::state::put_in_force(&shared, composed.checked, &base).await;
                built(&shared, applied, timing, served.len());
                recorder.record(&objects, notes);
                latest.unserved(&composed.unserved);
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
/// ConfigMap they name is read: a snapshot that names one not read yet
/// has it read (up to 5 s) and is taken again (an Ingress that arrived
/// meanwhile is never built without what it names, and then left so by
/// endpoints applied in place).
async fn read_named(
    composer: Option<&Composer>,
    named: &mut named::Named,
    cache: &Arc<Cache>,
) -> (Vec<crate::import::Object>, u64) {
    loop {
        let (objects, others) = cache.snapshot();
        let referenced = composer.map(|c| c.referenced(&objects));
        let Some(generation) = named.want(referenced.unwrap_or_default()) else {
            return (objects, others);
        };
        named.settled(generation, Duration::from_secs(5)).await;
    }
}

/// The composer's build of `objects` on a blocking thread (seconds of CPU
/// at worst: rounds of builds of thousands of Ingresses), off the
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

/// What a build made of endpoints, to apply their changes in place. A
/// build that leaves objects waiting is followed by another, never by
/// endpoints applied in place.
fn endpoints_of(
    composed: &compose::Composed,
    objects: &[crate::import::Object],
    others: u64,
    cache: &Arc<Cache>,
) -> endpoints::Endpoints {
    if composed.retry {
        retry_soon(cache);
        return endpoints::Endpoints::default();
    }
    let guard = gateway::BaseNames::of(&composed.checked.config).guard;
    endpoints::Endpoints::built(objects, others, composed.bindings.clone(), guard)
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

/// Builds again after `MAX_WAIT`: changed objects wait, as the last build
/// ran out of rounds (or met a problem no object's origin names).
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

/// Waits for the burst a change started to end; endpoints that move
/// meanwhile are applied to the policy in force.
async fn quiet_spell(
    cache: &Cache,
    controller: &Controller,
    in_place: &mut endpoints::Endpoints,
    shared: &Shared,
) {
    let first = Instant::now();
    loop {
        let left = MAX_WAIT.saturating_sub(first.elapsed());
        if left.is_zero() {
            return;
        }
        tokio::select! {
            _ = cache.changed.notified() => in_place.apply_meanwhile(cache, shared),
            _ = controller.base_changed.notified() => {}
            _ = tokio::time::sleep(QUIET.min(left)) => return,
        }
    }
}

/// Awaits `build`, applying endpoints that move meanwhile to the policy
/// in force (a build at 10,000 Ingresses takes seconds, and a rolling
/// update stops its old pods in less); a change that came meanwhile wakes
/// the loop again, which applies it to the new policy or builds.
async fn meanwhile<T>(
    build: impl std::future::Future<Output = T>,
    cache: &Cache,
    in_place: &mut endpoints::Endpoints,
    shared: &Shared,
) -> T {
    tokio::pin!(build);
    let mut arrived = false;
    let out = loop {
        tokio::select! {
            out = &mut build => break out,
            _ = cache.changed.notified() => {
                arrived = true;
                in_place.apply_meanwhile(cache, shared);
            }
        }
    };
    if arrived {
        cache.changed.notify_one();
    }
    out
}

/// Where a build's time went: taking the snapshot (and reading what it
/// names), composing the policy, putting it in force.
struct Timing {
    begun: Instant,
    snapshot: Duration,
    compose: Duration,
}

impl Timing {
    fn new(begun: Instant) -> Timing {
        Timing {
            begun,
            snapshot: begun.elapsed(),
            compose: Duration::ZERO,
        }
    }

    fn composed(&mut self) {
        self.compose = self.begun.elapsed() - self.snapshot;
    }
}

/// Counts and logs a build put in force (or refused by the reload rules).
fn built(
    shared: &Shared,
    applied: Result<u64, crate::config::Problems>,
    timing: Timing,
    ingresses: usize,
) {
    match applied {
        Ok(generation) => {
            METRICS.kube_builds.with_label_values(&["ok"]).inc();
            METRICS.config_generation.set(generation as i64);
            METRICS.kube_last_sync.set(crate::metrics::unix_now());
            shared.synced.store(true, Ordering::Release);
            let ms = timing.begun.elapsed().as_millis() as u64;
            let snapshot_ms = timing.snapshot.as_millis() as u64;
            let compose_ms = timing.compose.as_millis() as u64;
            let in_force_ms = ms.saturating_sub(snapshot_ms + compose_ms);
            tracing::info!(
                generation,
                ingresses,
                ms,
                snapshot_ms,
                compose_ms,
                in_force_ms,
                "kubernetes.applied"
            );
        }
        Err(problems) => {
            METRICS.kube_builds.with_label_values(&["error"]).inc();
            for line in problems.render_errors() {
                tracing::error!(problem = %line, "kubernetes.build_failed");
            }
        }
    }
}
