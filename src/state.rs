//! Process state: the policy in force (`Policy`, one immutable snapshot per
//! generation, built off the request path) and what outlives it (`Shared`:
//! the limiter, the failed-authentication buckets, readiness). It sits
//! above config, auth, limit, metrics and the upstream pools, and below the
//! proxy and the server that use it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::config::{Config, Problems};
use crate::metrics::{EdgeReason, RouteMetrics, METRICS, OUTCOMES};
use crate::upstream;

/// Why a validated config could not be put in force.
#[derive(Debug)]
pub enum BuildError {
    /// A target of this upstream pool does not resolve.
    Upstreams { pool: String, message: String },
    /// Key material that loaded at validation no longer does.
    Auth(String),
    /// A certificate pair that loaded at validation no longer does.
    Tls(String),
}

impl BuildError {
    /// As a problem of the file at `path`, with its section's code, placed
    /// where the pool (or the `auth` section) is written.
    pub fn problems(self, path: &Path) -> Problems {
        let (code, field, at, message) = match self {
            BuildError::Upstreams { pool, message } => (
                "upstreams.target_invalid",
                format!("upstreams.{pool}"),
                locate(path, "upstreams", Some(&pool)),
                message,
            ),
            BuildError::Auth(message) => (
                "auth.key_invalid",
                "auth.keys".to_string(),
                locate(path, "auth", Some("keys")),
                message,
            ),
            BuildError::Tls(message) => (
                "server.tls_invalid",
                "server.tls".to_string(),
                locate(path, "server", Some("tls")),
                message,
            ),
        };
        let mut p = Problems::new(path.display().to_string());
        p.push(at, code, format!("{field}: {message}"));
        p
    }
}

/// Where `section` (and within it the key `name`) is written in the file,
/// as line and column; 1:1 when it cannot be found.
fn locate(path: &Path, section: &str, name: Option<&str>) -> (usize, usize) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return (1, 1);
    };
    let mut scratch = Problems::new(String::new());
    let Some(root) = crate::config::yaml::parse(&text, &mut scratch) else {
        return (1, 1);
    };
    let start = |key: &marked_yaml::types::MarkedScalarNode| {
        key.span()
            .start()
            .map_or((1, 1), |m| (m.line(), m.column()))
    };
    let Some((key, node)) = root
        .as_mapping()
        .and_then(|top| top.iter().find(|(k, _)| k.as_str() == section))
    else {
        return (1, 1);
    };
    let inner = name.and_then(|n| node.as_mapping()?.iter().find(|(k, _)| k.as_str() == n));
    inner.map_or(start(key), |(k, _)| start(k))
}

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BuildError::Upstreams { pool, message } => write!(f, "upstreams.{pool}: {message}"),
            BuildError::Auth(m) => write!(f, "auth.keys: {m}"),
            BuildError::Tls(m) => write!(f, "server.tls: {m}"),
        }
    }
}

/// One immutable policy: a validated config and what was built from it.
pub struct Policy {
    pub config: Config,
    pub verifier: Option<Arc<crate::auth::Verifier>>,
    pub pools: HashMap<String, Arc<upstream::Pool>>,
    /// The certificates TLS handshakes choose from.
    pub certs: Option<Arc<crate::tls::Certs>>,
    /// The routes, indexed for matching.
    pub routes: crate::routing::Table,
    pub generation: u64,
    /// Each route's metric series, by route index; one more, last, for
    /// requests no route matched.
    pub metrics: Vec<RouteMetrics>,
    /// The text of the file this policy was read from.
    pub source: String,
}

impl Policy {
    pub fn build(config: Config, generation: u64) -> Result<Self, BuildError> {
        let pools = upstream::build_pools(&config)
            .map_err(|(pool, message)| BuildError::Upstreams { pool, message })?;
        let verifier = match &config.auth {
            Some(auth) => Some(Arc::new(
                crate::auth::Verifier::new(auth, &config.tenants).map_err(BuildError::Auth)?,
            )),
            None => None,
        };
        let certs = match &config.server.tls {
            Some(tls) => Some(Arc::new(
                crate::tls::Certs::build(&tls.certificates)
                    .map_err(|(_, _, e)| BuildError::Tls(e))?,
            )),
            None => None,
        };
        let routes = crate::routing::Table::new(&config.routes);
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
            certs,
            routes,
            generation,
            metrics,
            source: String::new(),
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
    /// Traces, when `telemetry.otlp` is set (a restart applies a change).
    pub telemetry: Option<crate::telemetry::Telemetry>,
}

/// Creates every series the config implies at zero, so dashboards and
/// alerts see them (and `rate()` works) before the first event.
pub fn init_series(config: &Config) {
    let m = &*METRICS;
    for e in crate::auth::AuthError::ALL {
        m.auth_failures.with_label_values(&[e.reason()]);
    }
    for result in ["ok", "error"] {
        m.config_reloads.with_label_values(&[result]);
    }
    for cap in crate::metrics::ConnectionCap::ALL {
        m.connections_refused.with_label_values(&[cap.as_str()]);
    }
    for reason in EdgeReason::ALL {
        m.edge_refusals.with_label_values(&[reason.as_str()]);
    }
    for reason in crate::limit::Fallback::ALL {
        m.fallback.with_label_values(&[reason.as_str()]);
    }
    for route in &config.routes {
        for limit in config.route_limits(route) {
            for decision in OUTCOMES {
                m.decisions.with_label_values(&[
                    route.name.as_str(),
                    limit.name.as_str(),
                    decision,
                ]);
            }
        }
    }
    for policy in config.concurrency.keys() {
        m.slots_acquired.with_label_values(&[policy]);
        m.slots_refused.with_label_values(&[policy]);
        m.slots_held.with_label_values(&[policy]);
        for reason in crate::limit::lease::LeaseEnd::ALL {
            m.slots_released
                .with_label_values(&[policy, reason.as_str()]);
        }
    }
}

/// Loads `path` and, if it is valid, makes it the policy in force.
pub async fn reload(shared: &Shared, path: &Path) -> Result<u64, Problems> {
    let result = try_reload(shared, path).await;
    match &result {
        Ok(generation) => {
            METRICS.config_reloads.with_label_values(&["ok"]).inc();
            METRICS.config_generation.set(*generation as i64);
            METRICS.config_last_success.set(crate::metrics::unix_now());
            tracing::info!(generation, "config.reloaded");
        }
        Err(problems) => {
            METRICS.config_reloads.with_label_values(&["error"]).inc();
            for line in problems.render_errors() {
                tracing::error!(problem = %line, "config.reload_failed");
            }
        }
    }
    result
}

async fn try_reload(shared: &Shared, path: &Path) -> Result<u64, Problems> {
    let loaded = Config::load(path)?;
    for line in &loaded.warnings {
        tracing::warn!(problem = %line, "config.warning");
    }
    let current = shared.policy.load_full();
    let fields = crate::config::reload::restart_required(&current.config, &loaded.config);
    if !fields.is_empty() {
        let mut problems = Problems::new(path.display().to_string());
        for field in fields {
            problems.push(
                (1, 1),
                "reload.restart_required",
                format!("{field}: changed; this takes effect only after a restart"),
            );
        }
        return Err(problems);
    }
    let generation = current.generation + 1;
    let mut policy = Policy::build(loaded.config, generation).map_err(|e| e.problems(path))?;
    policy.source = loaded.text;
    if let Some(verifier) = &policy.verifier {
        verifier.refresh_remote(true).await;
    }
    init_series(&policy.config);
    log_new_certificates(current.certs.as_deref(), policy.certs.as_deref());
    shared.policy.store(Arc::new(policy));
    Ok(generation)
}

/// One line per certificate a reload (or a renewal on disk) put in force,
/// and the expiry gauge of the ones in force now.
pub fn log_new_certificates(old: Option<&crate::tls::Certs>, new: Option<&crate::tls::Certs>) {
    let Some(new) = new else {
        crate::metrics::METRICS.tls_expiry.reset();
        return;
    };
    let known = |serial: &str| old.is_some_and(|o| o.served().iter().any(|s| s.serial == serial));
    for served in new.served().iter().filter(|s| !known(&s.serial)) {
        tracing::info!(
            names = ?served.names,
            serial = %served.serial,
            not_after = served.not_after,
            "tls.certificate_loaded"
        );
    }
    new.publish_expiry();
}
