//! The validating admission webhook (`kubernetes.admission`): the API
//! server asks before it stores an Ingress, and the answer comes from the
//! same translation and checks as a build: the Ingress is composed with the
//! cluster's objects as the controller last read them (its own earlier
//! version left out, and of the other Ingresses only those sharing one of
//! its hosts), and refused when that build would withhold it, with the
//! Event's words. What is served but changed (approximated, not supported)
//! comes back as warnings, which `kubectl` prints. The Secrets and
//! ConfigMaps it names are read first when the controller holds none of
//! them yet (the Secret is often created just before). An Ingress of
//! another class or of a namespace not watched, a deletion (or an update
//! of an object being deleted), an update of an Ingress the controller
//! does not serve now, or a request before the first sync is allowed: the
//! kit's `failurePolicy: Ignore` makes an unreachable webhook allow too,
//! so the webhook can never stop a cluster's writes. Any pod that reaches
//! the port may call it (restrict it with a NetworkPolicy), so what a
//! caller can cost is bounded: connections, review size and time, and two
//! compositions at once (a review that waits longer is allowed unchecked).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{json, Value};
use tokio::sync::Semaphore;

use super::compose::{Composer, Note};
use crate::config::{Admission, Kubernetes};
use crate::import::Object;
use crate::k8s::Kind;

/// What the webhook knows of the cluster: the objects the last build read,
/// and the Ingresses it did not serve.
#[derive(Default)]
pub struct Latest {
    pub objects: ArcSwapOption<Vec<Object>>,
    unserved: ArcSwapOption<BTreeSet<String>>,
}

impl Latest {
    /// The Ingresses a build withheld or left waiting.
    pub fn unserved(&self, objects: &[Object]) {
        let ids = objects.iter().map(Object::id).collect();
        self.unserved.store(Some(Arc::new(ids)));
    }
}

/// An AdmissionReview is at most this big (an object of 1.5 MiB, and its
/// old version).
const MAX_REVIEW: usize = 3 << 20;
/// Connections held at once: any pod that reaches the port may connect, so
/// what it can hold is bounded (the API server needs a handful).
const MAX_CONNECTIONS: usize = 64;
/// Reviews read at once (each up to `MAX_REVIEW`), and compositions at
/// once; a review that waits longer than `WAIT` for either is allowed
/// unchecked (as `failurePolicy: Ignore` would).
const MAX_READING: usize = 8;
const MAX_JUDGING: usize = 2;
const WAIT: Duration = Duration::from_secs(5);
/// How long a connection may take to send a request's head, and its body.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the Secrets and ConfigMaps a new Ingress names may take to read.
const NAMED_TIMEOUT: Duration = Duration::from_secs(3);

/// The webhook's view of the cluster, which the builds keep current, and
/// the webhook itself when `kubernetes.admission` asks for it.
pub fn start(settings: &Kubernetes, base: &std::path::Path, client: &kube::Client) -> Arc<Latest> {
    let latest = Arc::new(Latest::default());
    if let Some(a) = settings.admission.clone() {
        let judge = Judge::new(
            settings.clone(),
            base.to_path_buf(),
            latest.clone(),
            client.clone(),
        );
        serve(a, judge);
    }
    latest
}

/// Serves the webhook until the process ends; a listener that cannot be
/// bound is logged and leaves the controller serving.
pub fn serve(admission: Admission, judge: Judge) {
    tokio::spawn(async move {
        let listener = match tokio::net::TcpListener::bind(admission.listen).await {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(listen = %admission.listen, error = %e, "kubernetes.admission_unavailable");
                return;
            }
        };
        tracing::info!(listen = %admission.listen, "kubernetes.admission_listening");
        let judge = Arc::new(judge);
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(_) => {
                    // Out of file descriptors, say: never spin.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                continue; // dropped: the cap is reached
            };
            let (admission, judge) = (admission.clone(), judge.clone());
            tokio::spawn(async move {
                let held = connection(stream, admission, judge);
                let _ = tokio::time::timeout(Duration::from_secs(60), held).await;
                drop(slot);
            });
        }
    });
}

/// One connection: its TLS handshake with the certificate as it is on disk
/// now (a renewal is picked up by the next connection), then HTTP/1.1.
async fn connection(stream: tokio::net::TcpStream, admission: Admission, judge: Arc<Judge>) {
    let Ok(Ok(acceptor)) = tokio::task::spawn_blocking(move || acceptor(&admission)).await else {
        tracing::warn!("kubernetes.admission_certificate_unreadable");
        return;
    };
    let handshake = tokio::time::timeout(READ_TIMEOUT, acceptor.accept(stream));
    let Ok(Ok(tls)) = handshake.await else {
        return;
    };
    let service = hyper::service::service_fn(move |req| {
        let judge = judge.clone();
        async move { Ok::<_, std::convert::Infallible>(answer(req, judge).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(READ_TIMEOUT)
        .serve_connection(TokioIo::new(tls), service)
        .await;
}

fn acceptor(admission: &Admission) -> Result<pingora::tls::TlsAcceptor, String> {
    use crate::tls::pem::Pem;
    let chain = Pem::read(&admission.cert_file)
        .and_then(Pem::chain)
        .map_err(|e| e.to_string())?;
    let key = Pem::read(&admission.key_file)
        .and_then(Pem::private_key)
        .map_err(|e| e.to_string())?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(crate::tls::provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| e.to_string())?;
    Ok(pingora::tls::TlsAcceptor::from(Arc::new(config)))
}

fn reply(status: u16, body: Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("a response")
}

/// A review in, a review out; anything but a readable review is `4xx`.
async fn answer(req: Request<hyper::body::Incoming>, judge: Arc<Judge>) -> Response<Full<Bytes>> {
    if req.method() != hyper::Method::POST {
        return reply(405, json!({"error": "POST an AdmissionReview"}));
    }
    let busy = || {
        Verdict::allow(vec![
            "fairgate: too many reviews at once; not checked".into()
        ])
    };
    let Ok(Ok(reading)) = tokio::time::timeout(WAIT, judge.reading.acquire()).await else {
        return review_answer(&Value::Null, busy());
    };
    let read = Limited::new(req.into_body(), MAX_REVIEW).collect();
    let body = match tokio::time::timeout(READ_TIMEOUT, read).await {
        Ok(Ok(b)) => b.to_bytes(),
        _ => return reply(413, json!({"error": "the review is too large or too slow"})),
    };
    let Ok(review) = serde_json::from_slice::<Value>(&body) else {
        return reply(400, json!({"error": "not an AdmissionReview"}));
    };
    drop((body, reading));
    let uid = review["request"]["uid"].clone();
    let verdict = match judge.clone().judge(review).await {
        Some(v) => v,
        None => busy(),
    };
    review_answer(&uid, verdict)
}

fn review_answer(uid: &Value, verdict: Verdict) -> Response<Full<Bytes>> {
    let mut response = json!({"uid": uid, "allowed": verdict.refusal.is_none()});
    if let Some(message) = verdict.refusal {
        response["status"] = json!({"code": 400, "reason": "BadRequest", "message": message});
    }
    if !verdict.warnings.is_empty() {
        response["warnings"] = json!(verdict.warnings);
    }
    reply(
        200,
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}),
    )
}

struct Verdict {
    refusal: Option<String>,
    warnings: Vec<String>,
}

impl Verdict {
    fn allow(warnings: Vec<String>) -> Self {
        Verdict {
            refusal: None,
            warnings,
        }
    }
}

/// Judges reviews with the controller's settings, base and last view.
pub struct Judge {
    settings: Kubernetes,
    base: PathBuf,
    latest: Arc<Latest>,
    client: kube::Client,
    reading: Semaphore,
    judging: Arc<Semaphore>,
}

impl Judge {
    pub fn new(
        settings: Kubernetes,
        base: PathBuf,
        latest: Arc<Latest>,
        client: kube::Client,
    ) -> Self {
        Judge {
            settings,
            base,
            latest,
            client,
            reading: Semaphore::new(MAX_READING),
            judging: Arc::new(Semaphore::new(MAX_JUDGING)),
        }
    }

    /// The verdict on one review; `None` when no turn came within `WAIT`.
    async fn judge(self: Arc<Self>, mut review: Value) -> Option<Verdict> {
        let request = review["request"].take();
        let Some(candidate) = self.candidate(&request) else {
            return Some(Verdict::allow(Vec::new()));
        };
        let Some(objects) = self.latest.objects.load_full() else {
            let why = "fairgate: the controller has not read the cluster yet; not checked";
            return Some(Verdict::allow(vec![why.into()]));
        };
        let id = candidate.id();
        let unserved = self.latest.unserved.load_full().unwrap_or_default();
        if request["operation"] == "UPDATE" && unserved.contains(&id) {
            let why =
                format!("fairgate: Ingress {id} is not served now; this change is not checked");
            return Some(Verdict::allow(vec![why]));
        }
        // The turn first: the copies of the cluster's objects and the reads
        // of what the Ingress names are as bounded as the composition.
        let turn = tokio::time::timeout(WAIT, self.judging.clone().acquire_owned());
        let Ok(Ok(turn)) = turn.await else {
            return None;
        };
        let mut set = neighbours(&objects, &candidate);
        let unread = self.read_named(&mut set, &candidate).await;
        set.push(candidate);
        let judge = self.clone();
        let verdict = tokio::task::spawn_blocking(move || {
            let verdict = judge.compose(&set, &id, unread);
            drop(turn);
            verdict
        });
        let failed = || Verdict::allow(vec!["fairgate: the check failed; not checked".into()]);
        Some(verdict.await.unwrap_or_else(|_| failed()))
    }

    /// The Ingress under review, when it is one this controller would
    /// judge: not deleted nor being deleted, of a namespace it watches.
    fn candidate(&self, request: &Value) -> Option<Object> {
        let object = &request["object"];
        let deleting = !object["metadata"]["deletionTimestamp"].is_null();
        let ingress = request["kind"]["kind"] == "Ingress" && object["metadata"].is_object();
        if !ingress || request["operation"] == "DELETE" || deleting {
            return None;
        }
        let meta = &object["metadata"];
        let namespace = request["namespace"]
            .as_str()
            .or_else(|| meta["namespace"].as_str())
            .unwrap_or("default")
            .to_string();
        let watched = &self.settings.namespaces;
        if !watched.is_empty() && !watched.contains(&namespace) {
            return None;
        }
        let mut value = object.clone();
        value["metadata"]["namespace"] = json!(namespace);
        Some(Object {
            kind: "Ingress".into(),
            name: meta["name"].as_str().unwrap_or("").into(),
            namespace,
            value: Arc::new(value),
        })
    }

    /// Adds the Secrets and ConfigMaps `candidate` names that `set` lacks,
    /// read from the API (at most `NAMED_TIMEOUT`); those that could not be
    /// read, for a warning.
    async fn read_named(&self, set: &mut Vec<Object>, candidate: &Object) -> Vec<String> {
        let composer = Composer::new(self.settings.clone(), self.base.clone());
        let mut probe: Vec<Object> = set
            .iter()
            .filter(|o| o.is(Kind::IngressClass))
            .cloned()
            .collect();
        probe.push(candidate.clone());
        let held: BTreeSet<(String, String)> =
            set.iter().map(|o| (o.kind.clone(), o.id())).collect();
        let wanted: Vec<(Kind, String)> = composer
            .referenced(&probe)
            .into_iter()
            .filter(|(k, id)| !held.contains(&(k.name().to_string(), id.clone())))
            .collect();
        let mut unread = Vec::new();
        for (kind, id) in wanted {
            let got =
                tokio::time::timeout(NAMED_TIMEOUT, super::named::read(&self.client, kind, &id));
            match got.await {
                Ok(Ok(Some(o))) => set.extend(super::watch::object(o, kind)),
                Ok(Ok(None)) => {}
                _ => unread.push(format!("{} {id}", kind.name())),
            }
        }
        unread
    }

    fn compose(&self, set: &[Object], id: &str, unread: Vec<String>) -> Verdict {
        let mut composer = Composer::new(self.settings.clone(), self.base.clone());
        let Ok(composed) = composer.compose(set) else {
            // The base does not build: not this Ingress's doing.
            return Verdict::allow(Vec::new());
        };
        let namespace = id.split_once('/').map_or("", |(ns, _)| ns);
        let notes: Vec<&Note> = composed.notes.iter().filter(|n| n.ingress == id).collect();
        let said = |n: &&Note| redact(&format!("{}: {}", n.reason, n.message), namespace);
        let mut warnings: Vec<String> = notes
            .iter()
            .filter(|n| n.warning && n.reason != "Withheld")
            .map(said)
            .collect();
        let withheld = notes.iter().any(|n| n.reason == "Withheld");
        if withheld && unread.is_empty() {
            let reasons: Vec<String> = notes.iter().filter(|n| n.warning).map(said).collect();
            let message = format!(
                "fairgate would not serve Ingress {id}: {}",
                reasons.join("; ")
            );
            return Verdict {
                refusal: Some(message),
                warnings: Vec::new(),
            };
        }
        if withheld {
            warnings.push(format!(
                "fairgate: could not read {}; the Ingress may not be served",
                unread.join(", ")
            ));
        }
        Verdict::allow(warnings)
    }
}

/// The objects a build of `candidate` reads: all but Ingresses, and of the
/// Ingresses (its own earlier version left out) those of its namespace
/// (per-namespace budgets), those sharing one of its hosts (claims), and
/// those with a wildcard host or none (which yield to, or claim, any host).
fn neighbours(objects: &[Object], candidate: &Object) -> Vec<Object> {
    let id = candidate.id();
    let hosts = raw_hosts(candidate);
    objects
        .iter()
        .filter(|o| {
            if !o.is(Kind::Ingress) {
                return true;
            }
            if o.id() == id {
                return false;
            }
            let theirs = raw_hosts(o);
            o.namespace == candidate.namespace
                || theirs
                    .iter()
                    .any(|h| h.is_empty() || h.starts_with('*') || hosts.contains(h))
        })
        .cloned()
        .collect()
}

/// The hosts an Ingress's rules name as written ("" for a rule without).
fn raw_hosts(ing: &Object) -> BTreeSet<String> {
    let rules = ing.value["spec"]["rules"].as_array();
    rules
        .into_iter()
        .flatten()
        .map(|r| r["host"].as_str().unwrap_or("").to_ascii_lowercase())
        .collect()
}

/// `message` with every other namespace's Ingress named only as such: a
/// tenant asking about its own Ingress learns that a host is taken, not
/// by whom.
fn redact(message: &str, namespace: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find("Ingress ") {
        let (before, after) = rest.split_at(at + "Ingress ".len());
        let end = after
            .find(|c: char| c.is_whitespace() || c == ',' || c == ';' || c == ')')
            .unwrap_or(after.len());
        let token = &after[..end];
        match token.split_once('/') {
            Some((ns, _)) if ns != namespace => {
                out.push_str(&before[..at]);
                out.push_str("an Ingress of another namespace");
            }
            _ => {
                out.push_str(before);
                out.push_str(token);
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn another_namespaces_ingress_is_not_named() {
        let said = "host shop.lab belongs to Ingress shop/web, which claimed it first; see Ingress evil/own";
        assert_eq!(
            super::redact(said, "evil"),
            "host shop.lab belongs to an Ingress of another namespace, which claimed it first; see Ingress evil/own"
        );
    }
}
