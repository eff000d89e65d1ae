//! A Kubernetes API server stand-in, in process: plain HTTP/1.1 on a free
//! loopback port, no TLS, no authentication, objects in memory. The
//! ingress controller's watchers and the real `kubectl` talk to it as to a
//! cluster. It owns its tokio runtime (tests stay synchronous) and ends
//! everything it started when stopped or dropped. It is a model of the
//! API's behaviour that clients depend on, not of its validation: any
//! field of any served kind is accepted.
//!
//! What it implements, after <https://kubernetes.io/docs/reference/using-api/api-concepts/>:
//! - resource URIs, namespaced and cluster-scoped, and the
//!   all-namespaces collection paths;
//! - **resource versions**: one counter (a decimal string, as etcd's
//!   revision) bumped by every write, on each object and each list;
//!   optimistic concurrency (a stale `metadata.resourceVersion` in a PUT is
//!   a 409 Conflict);
//! - **efficient detection of changes**: `watch=1` streams ADDED,
//!   MODIFIED, DELETED (carrying the last state at a new resourceVersion)
//!   from a resourceVersion, replayed from the history; an object that
//!   enters or leaves a watch's selector is ADDED or DELETED for it;
//!   `sendInitialEvents=true` sends the current state first, ended by a
//!   BOOKMARK annotated `k8s.io/initial-events-end`;
//! - **410 Gone**: `restart(true)` compacts the history, after which a
//!   watch from an older resourceVersion gets an ERROR event with an
//!   `Expired` 410 Status, and a list or a continue token an HTTP 410;
//! - **watch bookmarks** (`allowWatchBookmarks`), every
//!   `set_bookmark_interval` (1 s unless set); `timeoutSeconds` ends a
//!   watch cleanly;
//! - **retrieving large results in chunks**: `limit` and an opaque
//!   `continue` token, items in a stable (namespace, name) order;
//! - label and field selectors (equality, inequality, set and existence);
//! - the **status subresource**
//!   (<https://kubernetes.io/docs/concepts/extend-kubernetes/api-extension/custom-resources/#status-subresource>):
//!   writes to `…/NAME/status` change only `.status`, writes to the main
//!   resource of such a kind keep the stored `.status`; `generation` moves
//!   when anything but metadata and status changes;
//! - merge, JSON (RFC 6902) and strategic merge PATCH (the last as a
//!   merge), and server-side apply approximated as a merge that creates a
//!   missing object (no field managers, no conflicts);
//! - legacy discovery (`/api`, `/apis`, APIResourceList with shortNames and
//!   `x/status`), which kubectl falls back to when the aggregated kind is
//!   not answered; `/version`; and a minimal `/openapi/v3` that declares
//!   the `fieldValidation` parameter, so kubectl's default `--validate`
//!   leaves validation to the server and fetches no schema (`protobuf`
//!   reads the Namespace, Secret and ConfigMap bodies kubectl's typed
//!   generators post; `kubectl` runs the real one against the stand-in).
//!
//! Not implemented: Table output (kubectl prints NAME and AGE), other
//! protobuf bodies, deletecollection, finalizers and graceful deletion
//! (a namespace goes at once, its objects stay), namespace existence
//! checks on writes, list snapshots at an older resourceVersion (a list
//! or a continued page shows the current objects), admission other than
//! validating webhooks called by URL (`admission.rs`), validation of
//! built-in kinds beyond a few checks (`store.rs`; custom resources are
//! held to their CRDs, `schema.rs`), authentication.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::task::{AbortHandle, JoinHandle};

mod admission;
mod cel;
mod http;
mod kubectl;
mod patch;
mod protobuf;
mod resources;
mod schema;
mod select;
mod store;
mod watch;

pub use kubectl::{kubectl_binary, line_with, Kubectl, Ran, Running};
pub use resources::{Resource, RESOURCES};
pub use schema::{crd_rule_functions, crd_rules_compiled, eval_cel};
pub use store::{now_rfc3339, WriteRequest};
use store::{Part, Store};

/// What the server's tasks share.
pub struct Shared {
    store: Mutex<Store>,
    /// The resourceVersion after each write, to wake watches.
    changed: tokio::sync::watch::Sender<u64>,
    bookmark_every: Mutex<Duration>,
    /// `127.0.0.1:PORT`, as `/api` advertises it.
    server: String,
}

impl Shared {
    fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs a change and wakes the watches.
    fn write<T>(&self, change: impl FnOnce(&mut Store) -> T) -> T {
        let mut store = self.store();
        let out = change(&mut store);
        self.changed.send_replace(store.rv);
        out
    }

    fn bookmark_interval(&self) -> Duration {
        *self.bookmark_every.lock().unwrap()
    }
}

/// The listener's task and every connection's, to end them all on `stop`.
struct Serving {
    accept: JoinHandle<()>,
    connections: Arc<Mutex<Vec<AbortHandle>>>,
    /// One clone per live task: all gone once they have ended.
    alive: Arc<()>,
}

/// The API server stand-in; see the module documentation.
pub struct KubeApi {
    runtime: Option<tokio::runtime::Runtime>,
    addr: SocketAddr,
    shared: Arc<Shared>,
    serving: Option<Serving>,
}

impl KubeApi {
    /// Serves on a free loopback port, with the `default` and
    /// `kube-system` namespaces.
    pub fn start() -> KubeApi {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("kube-api")
            .enable_all()
            .build()
            .expect("the API stand-in's runtime");
        // Bound at once and kept: a port found free and bound later can be
        // taken in between by a process another test starts.
        let (addr, listener) = (0..20)
            .find_map(|_| {
                let addr = super::free_addr();
                Some((addr, std::net::TcpListener::bind(addr).ok()?))
            })
            .expect("a free loopback port for the API stand-in");
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::seeded()),
            changed: tokio::sync::watch::channel(0).0,
            bookmark_every: Mutex::new(Duration::from_secs(1)),
            server: addr.to_string(),
        });
        let mut api = KubeApi {
            runtime: Some(runtime),
            addr,
            shared,
            serving: None,
        };
        api.listen(Some(listener));
        api
    }

    /// Serves on `listener`, or binds its address again (a restart).
    fn listen(&mut self, listener: Option<std::net::TcpListener>) {
        let listener = listener.unwrap_or_else(|| {
            std::net::TcpListener::bind(self.addr)
                .unwrap_or_else(|e| panic!("the API stand-in cannot listen on {}: {e}", self.addr))
        });
        listener.set_nonblocking(true).unwrap();
        let connections: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let alive = Arc::new(());
        let runtime = self.runtime.as_ref().unwrap();
        let accept = runtime.spawn(accept(
            listener,
            self.shared.clone(),
            connections.clone(),
            alive.clone(),
        ));
        self.serving = Some(Serving {
            accept,
            connections,
            alive,
        });
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Writes `dir/kubeconfig`: this server, no credentials, namespace
    /// `default`, for `kubectl --kubeconfig` and a controller's KUBECONFIG.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: stand-in\n  cluster:\n    server: {}\n\
             users:\n- name: stand-in\n  user: {{}}\ncontexts:\n- name: stand-in\n  context:\n    \
             cluster: stand-in\n    user: stand-in\n    namespace: default\n\
             current-context: stand-in\n",
            self.url()
        );
        std::fs::write(&path, text).expect("write the kubeconfig");
        path
    }

    /// kubectl for this server, its kubeconfig and cache in `dir`.
    pub fn kubectl(&self, dir: &Path) -> Kubectl {
        Kubectl::new(self.kubeconfig(dir), dir)
    }

    /// Closes the listener and every open connection (watches included):
    /// clients then find the port refusing connections.
    pub fn stop(&mut self) {
        let Some(serving) = self.serving.take() else {
            return;
        };
        serving.accept.abort();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !serving.accept.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        for connection in serving.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
        while Arc::strong_count(&serving.alive) > 1 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            Arc::strong_count(&serving.alive),
            1,
            "connections outlived stop"
        );
    }

    /// Serves again on the same port with the same objects; `compact`
    /// forgets the history first, so older resourceVersions get 410 Gone.
    pub fn restart(&mut self, compact: bool) {
        self.stop();
        if compact {
            self.shared.store().compact();
        }
        self.listen(None);
    }

    /// How often watches that allow them get a BOOKMARK.
    pub fn set_bookmark_interval(&self, every: Duration) {
        *self.shared.bookmark_every.lock().unwrap() = every;
    }

    /// Creates or replaces `object` (by its apiVersion, kind, namespace
    /// and name), `.status` included; returns it as stored.
    pub fn apply(&self, object: Value) -> Value {
        let api_version = object["apiVersion"].as_str().unwrap_or("");
        let kind = object["kind"].as_str().unwrap_or("");
        let r = resources::by_kind(api_version, kind)
            .unwrap_or_else(|| panic!("the API stand-in serves no {api_version} {kind}"));
        let meta = &object["metadata"];
        let ns = meta["namespace"].as_str().unwrap_or("default").to_string();
        let name = meta["name"].as_str().expect("metadata.name").to_string();
        let stored = self.shared.write(|s| match s.get(r, &ns, &name) {
            Some(_) => s.update(r, &ns, &name, object, Part::Whole),
            None => s.create(r, &ns, object, Part::Whole),
        });
        stored.unwrap_or_else(|e| panic!("apply refused: {}", e.message))
    }

    /// Deletes an object of `gvr` (`networking.k8s.io/v1/ingresses`,
    /// `v1/secrets`); `ns` is ignored for cluster-scoped kinds.
    pub fn delete(&self, gvr: &str, ns: &str, name: &str) -> Option<Value> {
        let r = resources::by_gvr(gvr);
        self.shared.write(|s| s.delete(r, ns, name)).ok()
    }

    pub fn get(&self, gvr: &str, ns: &str, name: &str) -> Option<Value> {
        let r = resources::by_gvr(gvr);
        self.shared.store().get(r, ns, name).cloned()
    }

    /// The objects of `gvr` in `ns` ("" for all), by namespace and name.
    pub fn list(&self, gvr: &str, ns: &str) -> Vec<Value> {
        let r = resources::by_gvr(gvr);
        let items = self.shared.store().items(r, ns, &Default::default());
        items.into_iter().map(|(_, o)| o).collect()
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.store().rv
    }

    /// How many list requests `gvr` has had (pages each count).
    pub fn list_requests(&self, gvr: &str) -> u64 {
        count(&self.shared.store().lists, gvr)
    }

    /// How many watch requests `gvr` has had.
    pub fn watch_requests(&self, gvr: &str) -> u64 {
        count(&self.shared.store().watches, gvr)
    }

    /// How many GETs of one object of a resource were answered or refused.
    pub fn get_requests(&self, gvr: &str) -> u64 {
        count(&self.shared.store().gets, gvr)
    }

    /// Every write request received over HTTP, in order.
    pub fn writes(&self) -> Vec<WriteRequest> {
        self.shared.store().writes.clone()
    }

    /// Polls `cond` every 20 ms until it holds or `within` passes.
    pub fn wait_for(&self, within: Duration, mut cond: impl FnMut(&KubeApi) -> bool) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if cond(self) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for KubeApi {
    fn drop(&mut self) {
        self.stop();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

async fn accept(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    connections: Arc<Mutex<Vec<AbortHandle>>>,
    alive: Arc<()>,
) {
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let (shared, alive) = (shared.clone(), alive.clone());
        let task = tokio::spawn(async move {
            let _alive = alive;
            let service = hyper::service::service_fn(move |req| http::serve(shared.clone(), req));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
        let mut open = connections.lock().unwrap();
        open.retain(|c| !c.is_finished());
        open.push(task.abort_handle());
    }
}

/// The requests of `gvr` among `counts` (by resource).
fn count(counts: &std::collections::HashMap<String, u64>, gvr: &str) -> u64 {
    let gvr = resources::by_gvr(gvr).gvr();
    counts.get(&gvr).copied().unwrap_or(0)
}
