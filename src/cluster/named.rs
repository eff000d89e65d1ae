//! The Secrets and ConfigMaps our objects name (TLS sections,
//! `auth-secret`, `proxy-ssl-secret`, `custom-headers`, a Gateway's
//! certificates): one metadata-only watch per kind (per namespace when
//! the controller watches a list of them), and a GET of each named object
//! when it is first named or its resourceVersion moves. One connection per
//! kind, however many names (one watch per name cost the API server a
//! watch and the gateway two file descriptors each: 500 TLS Ingresses
//! exhausted a 1,024 descriptor limit); and no unnamed Secret's data is
//! ever read or held, only its name and version.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{BoxStream, SelectAll};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::watch::{Cache, Retry};
use crate::k8s::Kind;
use crate::metrics::METRICS;

/// At most this many GETs at once.
const GETS: usize = 16;
/// A failed GET is tried again after this long.
const AGAIN: Duration = Duration::from_secs(1);

/// What is named, numbered so the caller can wait for it to be read.
#[derive(Default, Clone)]
struct Wanted {
    generation: u64,
    names: BTreeSet<(Kind, String)>,
}

/// The named objects' watches and reads, run by one task.
pub struct Named {
    wanted: watch::Sender<Wanted>,
    settled: watch::Receiver<u64>,
    task: JoinHandle<()>,
}

impl Drop for Named {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Named {
    /// `namespaced`: watch each named object's namespace apart (the
    /// controller watches a list of namespaces), else the whole cluster.
    pub fn start(client: kube::Client, cache: Arc<Cache>, namespaced: bool) -> Named {
        let (wanted, wanted_rx) = watch::channel(Wanted::default());
        let (settled_tx, settled) = watch::channel(0);
        for kind in [Kind::Secret, Kind::ConfigMap] {
            cache.apply(&held_as(kind), Event::Init, kind);
            cache.apply(&held_as(kind), Event::InitDone, kind);
        }
        let reader = Reader {
            client,
            cache,
            namespaced,
            scopes: Vec::new(),
            fetched: HashMap::new(),
            absent: HashSet::new(),
        };
        let task = tokio::spawn(reader.run(wanted_rx, settled_tx));
        Named {
            wanted,
            settled,
            task,
        }
    }

    /// Names these objects: the generation to wait for, None when that
    /// is what was named already.
    pub fn want(&mut self, names: BTreeSet<(Kind, String)>) -> Option<u64> {
        let mut generation = None;
        self.wanted.send_if_modified(|w| {
            if w.names == names {
                return false;
            }
            w.generation += 1;
            w.names = names;
            generation = Some(w.generation);
            true
        });
        generation
    }

    /// Waits until what `generation` names is in the cache (read, or
    /// known absent), at most `within`.
    pub async fn settled(&mut self, generation: u64, within: Duration) {
        let wait = self.settled.wait_for(|done| *done >= generation);
        let _ = tokio::time::timeout(within, wait).await;
    }
}

/// The cache's name for the objects read of a kind.
fn held_as(kind: Kind) -> String {
    format!("{}#named", kind.name())
}

/// One metadata watch: its kind and namespace, the versions it saw.
struct Scope {
    kind: Kind,
    namespace: Option<String>,
    /// `namespace/name` → resourceVersion.
    versions: HashMap<String, String>,
    relist: Option<HashMap<String, String>>,
    synced: bool,
}

type Seen = (usize, Result<Event<ObjectMeta>, watcher::Error>);

struct Reader {
    client: kube::Client,
    cache: Arc<Cache>,
    namespaced: bool,
    scopes: Vec<Scope>,
    /// What the cache holds: (kind, `namespace/name`) → resourceVersion.
    fetched: HashMap<(Kind, String), String>,
    /// Named, unseen by the watch, and read absent: not read again until
    /// the watch sees it.
    absent: HashSet<(Kind, String)>,
}

impl Reader {
    /// Reconciles when what is named changes, when a named object's
    /// version moves or a scope lists, and every `AGAIN` while something
    /// failed; never for the events of objects no one names.
    async fn run(mut self, mut wanted: watch::Receiver<Wanted>, settled: watch::Sender<u64>) {
        let mut streams: SelectAll<BoxStream<'static, Seen>> = SelectAll::new();
        let mut now = wanted.borrow_and_update().clone();
        let (mut due, mut again) = (true, false);
        loop {
            if due {
                for (kind, id) in &now.names {
                    if let Some(stream) = self.scope_for(*kind, id) {
                        streams.push(stream);
                    }
                }
                let (listed, failed) = self.reconcile(&now.names).await;
                // Settled once every scope has listed and every read was
                // tried: a read that failed is tried again, but does not
                // hold up the builds of every other change.
                if listed {
                    settled.send_replace(now.generation);
                }
                again = !listed || failed;
            }
            tokio::select! {
                Some((i, seen)) = streams.next() => due = self.seen(i, seen, &now.names),
                changed = wanted.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    now = wanted.borrow_and_update().clone();
                    due = true;
                }
                _ = tokio::time::sleep(AGAIN), if again => due = true,
            }
        }
    }

    /// The scope watching `kind` at `id`: None when one runs already,
    /// else its new stream.
    fn scope_for(&mut self, kind: Kind, id: &str) -> Option<BoxStream<'static, Seen>> {
        let namespace = self.namespaced.then(|| namespace_of(id).to_string());
        let known = self.scopes.iter();
        if known
            .into_iter()
            .any(|s| s.kind == kind && s.namespace == namespace)
        {
            return None;
        }
        let index = self.scopes.len();
        let stream = match kind {
            Kind::Secret => metadata::<Secret>(&self.client, namespace.as_deref()),
            _ => metadata::<ConfigMap>(&self.client, namespace.as_deref()),
        };
        self.scopes.push(Scope {
            kind,
            namespace,
            versions: HashMap::new(),
            relist: None,
            synced: false,
        });
        Some(stream.map(move |seen| (index, seen)).boxed())
    }

    /// One metadata event into its scope's versions: whether it calls for
    /// a reconcile (a named object moved, or the scope listed).
    fn seen(
        &mut self,
        index: usize,
        seen: Result<Event<ObjectMeta>, watcher::Error>,
        names: &BTreeSet<(Kind, String)>,
    ) -> bool {
        let scope = &mut self.scopes[index];
        let event = match seen {
            Ok(event) => event,
            Err(e) => {
                let kind = scope.kind.name();
                METRICS.kube_watch_errors.with_label_values(&[kind]).inc();
                tracing::warn!(kind, error = %e, "kubernetes.watch_error");
                return false;
            }
        };
        let entry = |m: &ObjectMeta| {
            let id = format!("{}/{}", m.namespace.as_deref()?, m.name.as_deref()?);
            Some((id, m.resource_version.clone().unwrap_or_default()))
        };
        let named = |id: &String| names.contains(&(scope.kind, id.clone()));
        match event {
            Event::Apply(m) => entry(&m).is_some_and(|(id, rv)| {
                let named = named(&id);
                scope.versions.insert(id, rv);
                named
            }),
            Event::Delete(m) => entry(&m).is_some_and(|(id, _)| {
                scope.versions.remove(&id);
                named(&id)
            }),
            Event::Init => {
                scope.relist = Some(HashMap::new());
                false
            }
            Event::InitApply(m) => {
                if let Some(list) = scope.relist.as_mut() {
                    list.extend(entry(&m));
                }
                false
            }
            Event::InitDone => {
                scope.versions = scope.relist.take().unwrap_or_default();
                scope.synced = true;
                true
            }
        }
    }

    /// The version of a named object the watches saw: Err when its scope
    /// has not listed yet, Ok(None) when it does not exist.
    fn version(&self, kind: Kind, id: &str) -> Result<Option<&String>, ()> {
        let namespace = self.namespaced.then(|| namespace_of(id));
        let scope = self
            .scopes
            .iter()
            .find(|s| s.kind == kind && s.namespace.as_deref() == namespace);
        match scope {
            Some(s) if s.synced => Ok(s.versions.get(id)),
            _ => Err(()),
        }
    }

    /// Brings the cache to what is named: reads what is new or moved,
    /// drops what is gone or no longer named. Whether every scope it
    /// needs has listed, and whether a read failed (or its version is not
    /// yet the watch's).
    async fn reconcile(&mut self, names: &BTreeSet<(Kind, String)>) -> (bool, bool) {
        let mut listed = true;
        let gone: Vec<(Kind, String)> = self
            .fetched
            .keys()
            .filter(|key| !names.contains(*key))
            .cloned()
            .collect();
        for (kind, id) in gone {
            self.drop_held(kind, &id);
        }
        self.absent.retain(|key| names.contains(key));
        let mut reads = Vec::new();
        for key in names {
            let (kind, id) = key;
            match self.version(*kind, id) {
                Err(()) => listed = false,
                // Not seen by the watch (gone, or not yet seen: the watch
                // may lag the Ingress that names it): a read says which.
                Ok(None) if self.absent.contains(key) => {}
                Ok(None) => reads.push(key.clone()),
                Ok(Some(rv)) if self.fetched.get(key) == Some(rv) => {}
                Ok(Some(_)) => reads.push(key.clone()),
            }
        }
        let failed = self.read_all(reads).await;
        (listed, failed)
    }

    /// Reads `keys` (a few at once) into the cache: whether any failed, or
    /// came back at another version than the watch's (read again later).
    async fn read_all(&mut self, keys: Vec<(Kind, String)>) -> bool {
        let client = &self.client;
        let read = futures_util::stream::iter(keys)
            .map(|(kind, id)| async move {
                let got = read(client, kind, &id).await;
                (kind, id, got)
            })
            .buffer_unordered(GETS)
            .collect::<Vec<_>>()
            .await;
        let mut failed = false;
        for (kind, id, got) in read {
            match got {
                Ok(Some(object)) => {
                    let rv = object.metadata.resource_version.clone().unwrap_or_default();
                    failed |= self.version(kind, &id) != Ok(Some(&rv));
                    self.cache.apply(&held_as(kind), Event::Apply(object), kind);
                    self.absent.remove(&(kind, id.clone()));
                    self.fetched.insert((kind, id), rv);
                }
                Ok(None) => {
                    self.drop_held(kind, &id);
                    self.absent.insert((kind, id));
                }
                Err(e) => {
                    failed = true;
                    METRICS
                        .kube_watch_errors
                        .with_label_values(&[kind.name()])
                        .inc();
                    tracing::warn!(kind = kind.name(), error = %e, "kubernetes.read_failed");
                }
            }
        }
        failed
    }

    fn drop_held(&mut self, kind: Kind, id: &str) {
        self.fetched.remove(&(kind, id.to_string()));
        let (namespace, name) = id.split_once('/').unwrap_or(("", id));
        let gone = DynamicObject::new(name, &kind.resource()).within(namespace);
        self.cache.apply(&held_as(kind), Event::Delete(gone), kind);
    }
}

fn namespace_of(id: &str) -> &str {
    id.split_once('/').map_or("", |(ns, _)| ns)
}

/// One named object, None when it does not exist.
pub(super) async fn read(
    client: &kube::Client,
    kind: Kind,
    id: &str,
) -> Result<Option<DynamicObject>, kube::Error> {
    let (namespace, name) = id.split_once('/').unwrap_or(("", id));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &kind.resource());
    api.get_opt(name).await
}

/// The metadata-only watch of one kind, in one namespace or all.
fn metadata<K>(
    client: &kube::Client,
    namespace: Option<&str>,
) -> BoxStream<'static, Result<Event<ObjectMeta>, watcher::Error>>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let api: Api<PartialObjectMeta<K>> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let config = watcher::Config::default().timeout(290);
    watcher::watcher(api, config)
        .backoff(Retry::default())
        .map(|seen| seen.map(metadata_of))
        .boxed()
}

fn metadata_of<K>(event: Event<PartialObjectMeta<K>>) -> Event<ObjectMeta> {
    match event {
        Event::Apply(o) => Event::Apply(o.metadata),
        Event::Delete(o) => Event::Delete(o.metadata),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(o.metadata),
        Event::InitDone => Event::InitDone,
    }
}
