//! Traces: a span per request, continued from a valid W3C `traceparent` or
//! started anew, with child spans for the store call and the upstream
//! exchange, exported over OTLP (HTTP/protobuf) in batches from a thread of
//! the SDK's own. Off unless `telemetry.otlp` is set, and then a request
//! costs one `Option` check (docs/benchmarks.md). An `https://` collector's
//! certificate is checked against the system's roots and `ca_file`'s,
//! which the policy builder loaded.

use std::time::Duration;

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{
    Span as _, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider, Span, SpanData,
    SpanExporter,
};
use opentelemetry_sdk::Resource;
use pingora::http::RequestHeader;
use rustls::pki_types::CertificateDer;

use crate::config::Otlp;
use crate::metrics::METRICS;

/// The exporter and tracer a process holds for its whole life.
pub struct Telemetry {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

/// Why the exporter could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("telemetry.otlp: the HTTP client could not be made")]
    ClientThread,
    #[error("telemetry.otlp: {0}")]
    Client(#[from] reqwest::Error),
    #[error("telemetry.otlp: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

impl Telemetry {
    /// Starts the batch exporter, trusting the system's roots and `roots`
    /// (`ca_file`'s). Nothing is sent until a span ends; an endpoint that
    /// is down costs failed exports, never a request.
    pub fn start(otlp: &Otlp, roots: &[CertificateDer<'static>]) -> Result<Telemetry, StartError> {
        // Never redirected: a redirect would carry the collector's
        // credentials (OTEL_EXPORTER_OTLP_HEADERS) to another host. The
        // blocking client is made off any runtime, as the exporter does.
        let timeout = otlp.timeout;
        let roots = crate::tls::trust::client_roots(roots);
        let client = std::thread::spawn(move || {
            let mut builder = reqwest::blocking::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(timeout)
                .tls_built_in_root_certs(roots.built_in);
            for cert in roots.certs {
                builder = builder.add_root_certificate(cert);
            }
            builder.build()
        })
        .join()
        .map_err(|_| StartError::ClientThread)??;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(otlp.endpoint.as_str())
            .with_timeout(otlp.timeout)
            .build()?;
        // A bounded queue: past it spans are dropped, never requests slowed.
        let batch = BatchConfigBuilder::default()
            .with_max_queue_size(8192)
            .with_max_export_batch_size(512)
            .with_scheduled_delay(Duration::from_secs(1))
            .build();
        let processor = BatchSpanProcessor::builder(Counted(exporter))
            .with_batch_config(batch)
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                otlp.ratio,
            ))))
            .with_resource(
                Resource::builder()
                    .with_service_name(otlp.service_name.clone())
                    .build(),
            )
            .build();
        let tracer = provider.tracer("fairgate");
        warn_plain_credentials(&otlp.endpoint);
        Ok(Telemetry { provider, tracer })
    }

    /// The request's span: a child of the client's valid `traceparent`
    /// (with its `tracestate`), else the root of a new trace.
    pub fn start_request(&self, req: &RequestHeader) -> RequestTrace {
        let parent = TraceContextPropagator::new().extract(&Headers::new(&req.headers));
        let span = self
            .tracer
            .span_builder(method_name(&req.method))
            .with_kind(SpanKind::Server)
            .start_with_context(&self.tracer, &parent);
        RequestTrace {
            cx: parent.with_span(span),
            tracer: self.tracer.clone(),
            upstream: None,
        }
    }

    /// Exports what is queued; at shutdown, after the last request.
    pub fn flush(&self) {
        if let Err(e) = self.provider.force_flush() {
            tracing::warn!(error = %e, "telemetry.flush_failed");
        }
    }
}

/// One request's spans. Each ends when its work does, or at the latest
/// when the request's context is dropped.
pub struct RequestTrace {
    cx: Context,
    tracer: SdkTracer,
    upstream: Option<Span>,
}

impl RequestTrace {
    /// Whether the request's trace is recorded. Children of a request that
    /// is not are never made: it costs span ids and sampler calls, and the
    /// upstream can have the request span as its parent.
    fn recording(&self) -> bool {
        self.cx.span().is_recording()
    }

    /// A child of the request span for one call to the store.
    pub fn store_span(&self, name: &'static str) -> Option<Span> {
        self.recording().then(|| {
            self.tracer
                .span_builder(name)
                .with_kind(SpanKind::Client)
                .start_with_context(&self.tracer, &self.cx)
        })
    }

    /// Opens the upstream exchange's span at the first attempt; it lasts to
    /// the end of the response, and the last attempt's target and answer
    /// are written when it ends.
    pub fn upstream_attempt(&mut self, method: &http::Method) {
        if self.upstream.is_none() && self.recording() {
            let span = self
                .tracer
                .span_builder(format!("{} upstream", method_name(method)))
                .with_kind(SpanKind::Client)
                .start_with_context(&self.tracer, &self.cx);
            self.upstream = Some(span);
        }
    }

    /// `traceparent` (and `tracestate`) for the upstream request: the same
    /// trace, the upstream span as parent. A client's own are replaced.
    pub fn propagate(&self, upstream: &mut RequestHeader) -> pingora::Result<()> {
        let cx = match &self.upstream {
            Some(span) => span.span_context().clone(),
            None => self.cx.span().span_context().clone(),
        };
        let flags = cx.trace_flags().to_u8();
        let parent = format!("00-{}-{}-{flags:02x}", cx.trace_id(), cx.span_id());
        upstream.insert_header("traceparent", parent)?;
        let state = cx.trace_state().header();
        if state.is_empty() {
            upstream.remove_header("tracestate");
        } else {
            upstream.insert_header("tracestate", state)?;
        }
        Ok(())
    }

    /// The trace id, 32 lowercase hex digits.
    pub fn trace_id(&self) -> String {
        self.cx.span().span_context().trace_id().to_string()
    }

    /// Ends the request's spans with what the request came to.
    pub fn end(mut self, outcome: Outcome<'_>) {
        if let Some(mut span) = self.upstream.take() {
            if let Some(addr) = outcome.upstream_addr {
                span.set_attribute(KeyValue::new("server.address", addr.to_string()));
            }
            span.set_attribute(KeyValue::new(
                "fairgate.upstream.attempts",
                outcome.attempts as i64,
            ));
            match outcome.upstream_status {
                Some(status) => {
                    span.set_attribute(KeyValue::new("http.response.status_code", status as i64))
                }
                None => span.set_status(Status::error("no answer from the upstream")),
            }
            span.end();
        }
        let span = self.cx.span();
        if !span.is_recording() {
            span.end();
            return;
        }
        let method = method_name(outcome.method);
        span.update_name(format!("{method} {}", outcome.route));
        let mut attributes = vec![
            KeyValue::new("http.request.method", method),
            KeyValue::new("fairgate.route", outcome.route.to_string()),
            KeyValue::new("fairgate.request_id", outcome.request_id.to_string()),
            KeyValue::new("fairgate.limit.decision", outcome.decision),
        ];
        if outcome.status != 0 {
            attributes.push(KeyValue::new(
                "http.response.status_code",
                outcome.status as i64,
            ));
        }
        if let Some(source) = outcome.store {
            attributes.push(KeyValue::new("fairgate.store.source", source));
        }
        if let Some(tenant) = outcome.tenant {
            attributes.push(KeyValue::new("fairgate.tenant", tenant.to_string()));
        }
        if let Some(addr) = outcome.upstream_addr {
            attributes.push(KeyValue::new("fairgate.upstream.address", addr.to_string()));
        }
        if let Some(status) = outcome.upstream_status {
            attributes.push(KeyValue::new(
                "fairgate.upstream.status_code",
                status as i64,
            ));
        }
        if let Some(error) = outcome.error {
            attributes.push(KeyValue::new("error.type", error));
        }
        span.set_attributes(attributes);
        // Server spans: 5xx and failures are errors, 4xx are the client's.
        if outcome.status == 0 || outcome.status >= 500 || outcome.error.is_some() {
            span.set_status(Status::error(outcome.error.unwrap_or("server error")));
        }
        span.end();
    }
}

/// Collector credentials sent in plain text off this host deserve a line.
fn warn_plain_credentials(endpoint: &str) {
    let credentials = [
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    ]
    .iter()
    .any(|k| std::env::var_os(k).is_some());
    let host = endpoint.parse::<http::Uri>().ok();
    let host = host.as_ref().and_then(|u| u.host()).unwrap_or("");
    let loopback = host == "localhost"
        || host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if credentials && endpoint.starts_with("http://") && !loopback {
        tracing::warn!(host, "telemetry.credentials_in_plain_text");
    }
}

/// What the request span records when the request ends.
pub struct Outcome<'a> {
    pub method: &'a http::Method,
    pub route: &'a str,
    pub request_id: &'a str,
    pub status: u16,
    pub decision: &'static str,
    pub store: Option<&'static str>,
    pub tenant: Option<&'a str>,
    pub upstream_addr: Option<std::net::SocketAddr>,
    pub upstream_status: Option<u16>,
    pub attempts: u32,
    pub error: Option<&'static str>,
}

/// The method as spans name it: one of HTTP's own, else `_OTHER` (as the
/// OpenTelemetry conventions say), so a client cannot mint span names.
fn method_name(method: &http::Method) -> &'static str {
    const KNOWN: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
    ];
    KNOWN
        .into_iter()
        .find(|m| *m == method.as_str())
        .unwrap_or("_OTHER")
}

/// Ends a store span with what the store call decided.
pub fn end_store_span(mut span: Span, source: &'static str, decision: &'static str) {
    span.set_attributes([
        KeyValue::new("fairgate.store.source", source),
        KeyValue::new("fairgate.limit.decision", decision),
    ]);
    span.end();
}

/// The request's trace headers as the propagator reads them, checked
/// first: the SDK's parser takes short ids and a `+` sign, and refuses the
/// flags of W3C Trace Context Level 2 (`03`). Public only for the fuzz
/// target.
#[doc(hidden)]
pub struct Headers {
    /// A valid `traceparent` rewritten as version 00 with only the sampled
    /// flag; two lines are no valid parent.
    traceparent: Option<String>,
    /// The `tracestate` lines joined, if within W3C's bounds (32 members,
    /// 512 characters); a larger one is dropped, not truncated.
    tracestate: Option<String>,
}

impl Headers {
    pub fn new(headers: &http::HeaderMap) -> Self {
        let mut parents = headers.get_all("traceparent").iter();
        let traceparent = match (parents.next(), parents.next()) {
            (Some(v), None) => v.to_str().ok().and_then(|v| {
                let trace = trace_id(v)?;
                let sampled = u8::from_str_radix(&v[53..55], 16).ok()? & 1;
                Some(format!("00-{trace}-{}-0{sampled}", &v[36..52]))
            }),
            _ => None,
        };
        let mut tracestate = String::new();
        for line in headers.get_all("tracestate") {
            let Ok(line) = line.to_str() else {
                return Headers {
                    traceparent,
                    tracestate: None,
                };
            };
            if !tracestate.is_empty() {
                tracestate.push(',');
            }
            tracestate.push_str(line);
            if tracestate.len() > 512 {
                return Headers {
                    traceparent,
                    tracestate: None,
                };
            }
        }
        let within = tracestate
            .split(',')
            .filter(|m| !m.trim().is_empty())
            .count()
            <= 32;
        Headers {
            traceparent,
            tracestate: (within && !tracestate.is_empty()).then_some(tracestate),
        }
    }
}

impl Extractor for Headers {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" => self.traceparent.as_deref(),
            "tracestate" => self.tracestate.as_deref(),
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

/// The trace id of a valid W3C `traceparent`: `VV-<32 hex>-<16 hex>-<2 hex>`,
/// lower case, version not `ff`, neither id all zeros, and for version 00
/// nothing after (a later version may add `-...`). Anything else is none.
pub fn trace_id(value: &str) -> Option<&str> {
    let b = value.as_bytes();
    let hex =
        |r: std::ops::Range<usize>| b[r].iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
    let zero = |r: std::ops::Range<usize>| b[r].iter().all(|c| *c == b'0');
    let shape = b.len() >= 55
        && hex(0..2)
        && &b[0..2] != b"ff"
        && [2, 35, 52].iter().all(|&i| b[i] == b'-')
        && hex(3..35)
        && hex(36..52)
        && hex(53..55)
        && !zero(3..35)
        && !zero(36..52);
    let rest_ok = || match &b[0..2] {
        b"00" => b.len() == 55,
        _ => b.len() == 55 || b[55] == b'-',
    };
    (shape && rest_ok()).then(|| &value[3..35])
}

/// Counts what the OTLP exporter sent and what it failed to.
#[derive(Debug)]
struct Counted(opentelemetry_otlp::SpanExporter);

impl SpanExporter for Counted {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len() as u64;
        let result = self.0.export(batch).await;
        let label = if result.is_ok() { "exported" } else { "failed" };
        METRICS
            .trace_spans
            .with_label_values(&[label])
            .inc_by(spans);
        if let Err(e) = &result {
            // The error may quote the collector's answer: its start is enough.
            let error: String = e.to_string().chars().take(300).collect();
            tracing::warn!(spans, error, "telemetry.export_failed");
        }
        result
    }

    fn shutdown_with_timeout(&mut self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn force_flush(&mut self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::trace_id;

    const ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

    #[test]
    fn only_a_well_formed_traceparent_has_a_trace_id() {
        assert_eq!(trace_id(&format!("00-{ID}-00f067aa0ba902b7-01")), Some(ID));
        assert_eq!(trace_id(&format!("00-{ID}-00f067aa0ba902b7-00")), Some(ID));
        // A later version may carry more after a dash.
        assert_eq!(
            trace_id(&format!("01-{ID}-00f067aa0ba902b7-01-x")),
            Some(ID)
        );
        for bad in [
            String::new(),
            "hello".into(),
            format!("00-{ID}-00f067aa-01"),
            format!("00-{ID}-00f067aa0ba902b7-01-x"),
            format!("00-{ID}-00f067aa0ba902b7-1"),
            format!("00-{ID}-00f067aa0ba902b7-012"),
            format!("01-{ID}-00f067aa0ba902b7-01x"),
            format!("ff-{ID}-00f067aa0ba902b7-01"),
            format!("00-{}-00f067aa0ba902b7-01", ID.to_uppercase()),
            format!("00-{ID}-0000000000000000-01"),
            format!("00-{}-00f067aa0ba902b7-01", "0".repeat(32)),
            format!("00-+{}-00f067aa0ba902b7-01", &ID[1..]),
            format!("00_{ID}-00f067aa0ba902b7-01"),
            format!(" 00-{ID}-00f067aa0ba902b7-01"),
        ] {
            assert_eq!(trace_id(&bad), None, "{bad:?}");
        }
    }
}
