//! An OTLP/HTTP traces receiver: takes `POST /v1/traces` bodies, decodes
//! them as `ExportTraceServiceRequest` protobuf (the `opentelemetry-proto`
//! types) and keeps every span, as a collector would receive it. Plain
//! HTTP, or HTTPS with a certificate of the test's own.

use std::collections::BTreeMap;
use std::sync::Mutex;

use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message;

use super::*;

/// One received span, ids as lowercase hex.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    /// 1 internal, 2 server, 3 client (OTLP's `SpanKind`).
    pub kind: i32,
    /// 0 unset, 1 ok, 2 error (OTLP's `Status.code`).
    pub status: i32,
    pub attributes: BTreeMap<String, String>,
    /// Every attribute key as sent, repeats included (OTLP wants none).
    pub keys: Vec<String>,
    /// The resource's `service.name`.
    pub service: String,
}

impl ReceivedSpan {
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

type Spans = Arc<Mutex<Vec<ReceivedSpan>>>;
type Posts = Arc<Mutex<Vec<(String, ::http::HeaderMap)>>>;

pub struct OtlpReceiver {
    pub addr: SocketAddr,
    /// `http://127.0.0.1:PORT`, or `https://localhost:PORT` over TLS.
    endpoint: String,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    /// Requests it answered, by path and headers, in order.
    pub posts: Arc<Mutex<Vec<(String, ::http::HeaderMap)>>>,
}

impl OtlpReceiver {
    /// Answers every export with `status` (200 takes the spans; another
    /// status refuses them, as a collector that is down or overloaded).
    pub async fn start(status: u16) -> OtlpReceiver {
        Self::start_with(status, None).await
    }

    /// As `start`, over HTTPS with `cert` and `key` (PEM files; a
    /// certificate for `localhost`, which the endpoint names).
    pub async fn start_tls(status: u16, cert: &Path, key: &Path) -> OtlpReceiver {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(key).unwrap();
        let config =
            rustls::ServerConfig::builder_with_provider(Arc::new(fairgate::tls::provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .unwrap();
        let acceptor = pingora::tls::TlsAcceptor::from(Arc::new(config));
        Self::start_with(status, Some(acceptor)).await
    }

    async fn start_with(status: u16, tls: Option<pingora::tls::TlsAcceptor>) -> OtlpReceiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let endpoint = match tls {
            Some(_) => format!("https://localhost:{}", addr.port()),
            None => format!("http://{addr}"),
        };
        let spans: Spans = Arc::default();
        let posts: Posts = Arc::default();
        let (kept, seen) = (spans.clone(), posts.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (kept, seen, tls) = (kept.clone(), seen.clone(), tls.clone());
                tokio::spawn(async move {
                    match tls {
                        Some(tls) => {
                            if let Ok(stream) = tls.accept(stream).await {
                                serve(stream, status, kept, seen).await;
                            }
                        }
                        None => serve(stream, status, kept, seen).await,
                    }
                });
            }
        });
        OtlpReceiver {
            addr,
            endpoint,
            spans,
            posts,
        }
    }

    pub fn endpoint(&self) -> String {
        self.endpoint.clone()
    }

    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().unwrap().clone()
    }

    /// The spans of `trace_id` once one of them is named `name` (spans
    /// arrive in batches, after their requests end).
    pub async fn trace_with(&self, trace_id: &str, name: &str) -> Vec<ReceivedSpan> {
        let arrived = eventually(Duration::from_secs(15), || async {
            self.spans()
                .iter()
                .any(|s| s.trace_id == trace_id && s.name == name)
        })
        .await;
        let spans = self.spans();
        assert!(
            arrived,
            "no span {name:?} of trace {trace_id} arrived; got {spans:#?}"
        );
        let spans: Vec<ReceivedSpan> = spans
            .into_iter()
            .filter(|s| s.trace_id == trace_id)
            .collect();
        for s in &spans {
            assert_eq!(s.keys.len(), s.attributes.len(), "repeated keys: {s:#?}");
        }
        spans
    }
}

/// Answers the exports of one connection with `status`, keeping their spans.
async fn serve<S>(stream: S, status: u16, kept: Spans, seen: Posts)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let (kept, seen) = (kept.clone(), seen.clone());
        async move {
            let path = req.uri().path().to_string();
            let headers = req.headers().clone();
            let body = req.into_body().collect().await?.to_bytes();
            seen.lock().unwrap().push((path, headers));
            if status == 200 {
                let request =
                    ExportTraceServiceRequest::decode(body).expect("an ExportTraceServiceRequest");
                kept.lock().unwrap().extend(flatten(request));
            }
            let reply = ExportTraceServiceResponse::default().encode_to_vec();
            Ok::<_, hyper::Error>(
                hyper::Response::builder()
                    .status(status)
                    .header("content-type", "application/x-protobuf")
                    .body(Full::new(bytes::Bytes::from(reply)))
                    .unwrap(),
            )
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

fn flatten(request: ExportTraceServiceRequest) -> Vec<ReceivedSpan> {
    let mut out = Vec::new();
    for rs in request.resource_spans {
        let service = rs
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .map(|kv| value(kv.value.as_ref()))
            .unwrap_or_default();
        for ss in rs.scope_spans {
            for span in ss.spans {
                out.push(ReceivedSpan {
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    kind: span.kind,
                    status: span.status.map_or(0, |s| s.code),
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), value(kv.value.as_ref())))
                        .collect(),
                    keys: span.attributes.iter().map(|kv| kv.key.clone()).collect(),
                    service: service.clone(),
                });
            }
        }
    }
    out
}

fn value(v: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(i)) => i.to_string(),
        Some(Any::BoolValue(b)) => b.to_string(),
        Some(Any::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
