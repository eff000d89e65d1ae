//! The admin listener: `/healthz` (the process answers), `/readyz` (policy
//! loaded, listeners up, not shutting down) and `/metrics` (Prometheus text).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_trait::async_trait;
use http::Response;
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;

use crate::metrics::METRICS;
use crate::state::Shared;

pub struct Admin {
    pub shared: Arc<Shared>,
}

fn text(status: u16, content_type: &str, body: Vec<u8>) -> Response<Vec<u8>> {
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, content_type)
        .header(http::header::CONTENT_LENGTH, body.len())
        .body(body)
        .expect("valid response")
}

#[async_trait]
impl ServeHttp for Admin {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        match session.req_header().uri.path() {
            "/healthz" => text(200, "text/plain", b"ok\n".to_vec()),
            "/readyz" => {
                let generation = self.shared.policy.load().generation;
                let limiter = &self.shared.limiter;
                let denying = limiter.degraded()
                    && limiter.on_unavailable() == crate::config::OnUnavailable::Deny;
                if denying {
                    text(503, "text/plain", b"store unavailable\n".to_vec())
                } else if self.shared.ready.load(Ordering::Acquire) {
                    let body = format!("ready generation={generation}\n");
                    text(200, "text/plain", body.into_bytes())
                } else {
                    text(503, "text/plain", b"not ready\n".to_vec())
                }
            }
            "/metrics" => text(200, "text/plain; version=0.0.4", METRICS.render()),
            _ => text(404, "text/plain", b"not found\n".to_vec()),
        }
    }
}
