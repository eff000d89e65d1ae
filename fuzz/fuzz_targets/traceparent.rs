//! The trace header gate (`telemetry::Headers`, `telemetry::trace_id`): what
//! it passes to the OpenTelemetry propagator is a W3C `traceparent` the SDK
//! reads as the same trace, and a `tracestate` within W3C's bounds.
//!
//! Input: header lines `traceparent: ...` / `tracestate: ...` (other names
//! are `tracestate`), one a line.

#![no_main]

use fairgate::telemetry::{trace_id, Headers};
use libfuzzer_sys::fuzz_target;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;

fuzz_target!(|data: &[u8]| {
    let mut map = http::HeaderMap::new();
    for line in data.split(|b| *b == b'\n') {
        let (name, value) = match line.strip_prefix(b"traceparent:") {
            Some(v) => ("traceparent", v),
            None => (
                "tracestate",
                line.strip_prefix(b"tracestate:").unwrap_or(line),
            ),
        };
        let value = value.strip_prefix(b" ").unwrap_or(value);
        if let Ok(value) = http::HeaderValue::from_bytes(value) {
            map.append(name, value);
        }
    }
    for value in map.get_all("traceparent") {
        if let Some(id) = value.to_str().ok().and_then(trace_id) {
            assert_eq!(id.len(), 32, "{value:?}");
            assert!(
                id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
                "{value:?}"
            );
            assert!(id.bytes().any(|b| b != b'0'), "{value:?}");
        }
    }
    let gate = Headers::new(&map);
    let parents: Vec<_> = map.get_all("traceparent").iter().collect();
    let expected = match parents[..] {
        [one] => one.to_str().ok().and_then(trace_id),
        _ => None,
    };
    match gate.get("traceparent") {
        Some(parent) => {
            assert_eq!(parent.len(), 55, "{parent:?}");
            assert!(
                parent.starts_with("00-") && (parent.ends_with("-00") || parent.ends_with("-01")),
                "{parent:?}"
            );
            assert_eq!(trace_id(parent), expected, "{parent:?} from {parents:?}");
            let cx = TraceContextPropagator::new().extract(&gate);
            let span = cx.span();
            let context = span.span_context();
            assert!(
                context.is_valid() && context.is_remote(),
                "the SDK refused {parent:?}"
            );
            assert_eq!(
                Some(context.trace_id().to_string()).as_deref(),
                expected,
                "{parent:?}"
            );
            assert_eq!(context.is_sampled(), parent.ends_with("-01"), "{parent:?}");
        }
        None => assert_eq!(expected, None, "{parents:?} was valid yet dropped"),
    }
    if let Some(state) = gate.get("tracestate") {
        assert!(
            !state.is_empty() && state.len() <= 512,
            "{} bytes",
            state.len()
        );
        let members = state.split(',').filter(|m| !m.trim().is_empty()).count();
        assert!(members <= 32, "{members} members");
    }
    // Whatever it passes, the SDK reads without panicking.
    let _ = TraceContextPropagator::new().extract(&gate);
});
