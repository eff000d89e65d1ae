//! The validating admission webhook (`kubernetes.admission`): the API
//! server asks before it stores an Ingress, and the answer comes from the
//! same translation and checks as a build: the Ingress is composed with the
//! cluster's objects as the controller last read them (its own earlier
//! version left out, and of the other Ingresses only those sharing one of
//! its hosts), and refused when that build would withhold it, with the
//! Event's words. What is served but changed (approximated, not supported)
//! comes back as warnings, which `kubectl` prints. An Ingress of another
//! class, a deletion, or a request before the first sync is allowed: the
//! kit's `failurePolicy: Ignore` makes an unreachable webhook allow too,
//! so the webhook can never stop a cluster's writes. Any pod that reaches
//! the port may call it (restrict it with a NetworkPolicy), so what a
//! caller can cost is bounded: connections, review size and time, and two
//! compositions at once (a review that waits longer is allowed unchecked).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

use super::compose::Composer;
use crate::config::{Admission, Kubernetes};
use crate::import::{rule_hosts, Object};
use crate::k8s::Kind;

/// The cluster's objects as the last build read them.
pub type Latest = Arc<ArcSwapOption<Vec<Object>>>;

/// An AdmissionReview is at most this big (an object of 1.5 MiB, twice).
const MAX_REVIEW: usize = 4 << 20;
/// Connections held at once: any pod that reaches the port may connect, so
/// what it can hold is bounded (the API server needs a handful).
const MAX_CONNECTIONS: usize = 64;
/// Compositions at once, and how long a review waits for its turn before
/// it is allowed unchecked (as `failurePolicy: Ignore` would): a flood of
/// reviews costs the controller at most this much CPU.
const MAX_JUDGING: usize = 2;
const JUDGING_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
/// How long a connection may take to send its review.
const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves the webhook until the process ends; a listener that cannot be
/// bound is logged and leaves the controller serving.
pub fn serve(admission: Admission, settings: Kubernetes, base: PathBuf, latest: Latest) {
    tokio::spawn(async move {
        let listener = match tokio::net::TcpListener::bind(admission.listen).await {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(listen = %admission.listen, error = %e, "kubernetes.admission_unavailable");
                return;
            }
        };
        tracing::info!(listen = %admission.listen, "kubernetes.admission_listening");
        let judge = Arc::new(Judge {
            settings,
            base,
            latest,
            turns: tokio::sync::Semaphore::new(MAX_JUDGING),
        });
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        loop {
            let Ok((stream, peer)) = listener.accept().await else {
                continue;
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                continue; // dropped: the cap is reached
            };
            let (admission, judge) = (admission.clone(), judge.clone());
            tokio::spawn(async move {
                let held = connection(stream, peer, admission, judge);
                let _ = tokio::time::timeout(std::time::Duration::from_secs(60), held).await;
                drop(slot);
            });
        }
    });
}

/// One connection: its TLS handshake with the certificate as it is on disk
/// now (a renewal is picked up by the next connection), then HTTP/1.1.
async fn connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    admission: Admission,
    judge: Arc<Judge>,
) {
    let acceptor = match acceptor(&admission) {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(error = %e, "kubernetes.admission_certificate");
            return;
        }
    };
    let handshake =
        tokio::time::timeout(std::time::Duration::from_secs(10), acceptor.accept(stream));
    let Ok(Ok(tls)) = handshake.await else {
        tracing::debug!(%peer, "kubernetes.admission_handshake_failed");
        return;
    };
    let service = hyper::service::service_fn(move |req| {
        let judge = judge.clone();
        async move { Ok::<_, std::convert::Infallible>(answer(req, judge).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
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

/// A review in, a review out; anything but a readable review is `400`.
async fn answer(req: Request<hyper::body::Incoming>, judge: Arc<Judge>) -> Response<Full<Bytes>> {
    let reply = |status: u16, body: Value| {
        Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .expect("a response")
    };
    if req.method() != hyper::Method::POST {
        return reply(405, json!({"error": "POST an AdmissionReview"}));
    }
    let read = tokio::time::timeout(
        READ_TIMEOUT,
        Limited::new(req.into_body(), MAX_REVIEW).collect(),
    );
    let body = match read.await {
        Ok(Ok(b)) => b.to_bytes(),
        _ => return reply(413, json!({"error": "the review is too large or too slow"})),
    };
    let Ok(review) = serde_json::from_slice::<Value>(&body) else {
        return reply(400, json!({"error": "not an AdmissionReview"}));
    };
    let request = review["request"].clone();
    let turn = tokio::time::timeout(JUDGING_WAIT, judge.turns.acquire()).await;
    let verdict = match turn {
        Ok(Ok(_turn)) => {
            let judge = judge.clone();
            tokio::task::spawn_blocking(move || judge.judge(&request))
                .await
                .unwrap_or_else(|_| {
                    Verdict::allow(vec!["fairgate: the check failed; not checked".into()])
                })
        }
        _ => Verdict::allow(vec![
            "fairgate: too many reviews at once; not checked".into()
        ]),
    };
    let mut response =
        json!({"uid": review["request"]["uid"], "allowed": verdict.refusal.is_none()});
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

struct Judge {
    settings: Kubernetes,
    base: PathBuf,
    latest: Latest,
    turns: tokio::sync::Semaphore,
}

impl Judge {
    fn judge(&self, request: &Value) -> Verdict {
        let object = &request["object"];
        if request["kind"]["kind"] != "Ingress" || request["operation"] == "DELETE" {
            return Verdict::allow(Vec::new());
        }
        let Some(objects) = self.latest.load_full() else {
            return Verdict::allow(vec![
                "fairgate: the controller has not read the cluster yet; not checked".into(),
            ]);
        };
        let meta = &object["metadata"];
        let namespace = request["namespace"]
            .as_str()
            .or_else(|| meta["namespace"].as_str())
            .unwrap_or("default");
        let name = meta["name"].as_str().unwrap_or("");
        let mut value = object.clone();
        value["metadata"]["namespace"] = json!(namespace);
        let candidate = Object {
            kind: "Ingress".into(),
            namespace: namespace.into(),
            name: name.into(),
            value: Arc::new(value),
        };
        let id = candidate.id();
        let hosts: BTreeSet<String> = rule_hosts(&candidate).into_iter().collect();
        let mut set: Vec<Object> = objects
            .iter()
            .filter(|o| {
                !o.is(Kind::Ingress)
                    || (o.id() != id && rule_hosts(o).iter().any(|h| hosts.contains(h)))
            })
            .cloned()
            .collect();
        set.push(candidate);
        let mut composer = Composer::new(self.settings.clone(), self.base.clone());
        let Ok(composed) = composer.compose(&set) else {
            // The base does not build: not this Ingress's doing.
            return Verdict::allow(Vec::new());
        };
        let notes: Vec<_> = composed.notes.iter().filter(|n| n.ingress == id).collect();
        let said = |n: &&super::compose::Note| format!("{}: {}", n.reason, n.message);
        let warnings: Vec<String> = notes
            .iter()
            .filter(|n| n.warning && n.reason != "Withheld")
            .map(said)
            .collect();
        if notes.iter().any(|n| n.reason == "Withheld") {
            let reasons: Vec<String> = notes.iter().filter(|n| n.warning).map(said).collect();
            return Verdict {
                refusal: Some(format!(
                    "fairgate would not serve Ingress {id}: {}",
                    reasons.join("; ")
                )),
                warnings: Vec::new(),
            };
        }
        Verdict::allow(warnings)
    }
}
