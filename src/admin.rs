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
    /// The `/v1/` API's bearer token, from `admin.token_env` at start.
    pub token: Option<String>,
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
        let path = session.req_header().uri.path();
        if path.starts_with("/v1/") {
            let head = session.req_header().clone();
            return crate::admin_api::answer(&self.shared, self.token.as_deref(), &head).await;
        }
        match path {
            "/healthz" => text(200, "text/plain", b"ok\n".to_vec()),
            "/readyz" => {
                let generation = self.shared.policy.load().generation;
                let limiter = &self.shared.limiter;
                let denying = limiter.degraded()
                    && limiter.on_unavailable() == crate::config::OnUnavailable::Deny;
                if denying {
                    text(503, "text/plain", b"store unavailable\n".to_vec())
                } else if !self.shared.synced.load(Ordering::Acquire) {
                    text(
                        503,
                        "text/plain",
                        b"kubernetes: first sync not applied\n".to_vec(),
                    )
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
