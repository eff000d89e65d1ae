//! The proxy: Pingora phases (`gateway`), route choice (`route`), the request
//! context (`ctx`), upstream pools (`upstream`) and error responses
//! (`respond`).

pub mod ctx;
pub mod edge;
pub mod gateway;
pub mod respond;
pub mod route;
pub mod upstream;

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::config::Config;
use crate::metrics::RouteMetrics;

/// One immutable policy: a validated config and what was built from it.
pub struct Policy {
    pub config: Config,
    pub verifier: Option<Arc<crate::auth::Verifier>>,
    pub pools: HashMap<String, Arc<upstream::Pool>>,
    pub generation: u64,
    /// Each route's metric series, by route index; one more, last, for
    /// requests no route matched.
    pub metrics: Vec<RouteMetrics>,
}

impl Policy {
    pub fn build(config: Config, generation: u64) -> Result<Self, String> {
        let pools = upstream::build_pools(&config)?;
        let verifier = match &config.auth {
            Some(auth) => Some(Arc::new(crate::auth::Verifier::new(auth, &config.tenants)?)),
            None => None,
        };
        let mut metrics: Vec<RouteMetrics> = config
            .routes
            .iter()
            .map(|route| {
                let limits: Vec<&str> = config
                    .route_limits(route)
                    .iter()
                    .map(|l| l.name.as_str())
                    .collect();
                RouteMetrics::new(&route.name, &limits)
            })
            .collect();
        metrics.push(RouteMetrics::new("none", &[]));
        Ok(Policy {
            config,
            verifier,
            pools,
            generation,
            metrics,
        })
    }
}

impl Policy {
    /// The metric series of a route (`None`: no route matched).
    pub fn route_metrics(&self, route: Option<usize>) -> &RouteMetrics {
        let none = self.metrics.len() - 1;
        &self.metrics[route.unwrap_or(none).min(none)]
    }
}

/// State shared by the proxy, the admin listener and background tasks.
pub struct Shared {
    pub policy: ArcSwap<Policy>,
    pub limiter: crate::limit::Limiter,
    /// Failed authentications per client address; outlives reloads.
    pub auth_failures: crate::auth::failures::Failures,
    /// Listeners are up and the process is not shutting down.
    pub ready: AtomicBool,
}
