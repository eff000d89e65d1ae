//! Process state: the policy in force (`Policy`, one immutable snapshot per
//! generation, built off the request path from what `build` loaded) and
//! what outlives it (`Shared`: the limiter, the failed-authentication
//! buckets, readiness). It sits above build, config, auth, limit, metrics
//! and the upstream pools, and below the proxy and the server that use it.
//! It opens no file: certificates, keys and roots come from `build`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, LazyLock, OnceLock};

use arc_swap::ArcSwap;

use crate::build::Checked;
use crate::config::{Config, Place, Problems};
use crate::metrics::{EdgeReason, RouteMetrics, METRICS, OUTCOMES};
use crate::upstream;

/// Why a checked config could not be put in force: a pool's targets do
/// not resolve (its files loaded already, in `build`).
#[derive(Debug, thiserror::Error)]
#[error("upstreams.{pool}: {source}")]
pub struct BuildError {
    pub pool: String,
    /// Where the pool is written.
    pub place: Place,
    pub source: upstream::PoolError,
}

impl BuildError {
    /// As a problem of the file at `path`, placed where the pool is
    /// written, with its section's code.
    pub fn problems(self, path: &Path) -> Problems {
        let mut p = Problems::new(path.display().to_string());
        p.push_at(&self.place, "upstreams.target_invalid", &self.source);
        p
    }
}

/// One immutable policy: a validated config and what was built from it.
pub struct Policy {
    pub config: Config,
    pub verifier: Option<Arc<crate::auth::Verifier>>,
    /// `auth.methods`, ready to serve.
    pub methods: Arc<crate::auth::methods::Authenticators>,
    pub pools: HashMap<String, Arc<upstream::Pool>>,
    /// The certificates TLS handshakes choose from.
    pub certs: Option<Arc<crate::tls::Certs>>,
    /// Verifies client certificates (`server.tls.client_ca`); a restart
    /// applies a change, so the listener keeps the first policy's.
    pub client_verifier: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
    /// Client certificates per host (`server.tls.client_certificates`).
    pub tls_hosts: Arc<crate::tls::TlsHosts>,
    /// The routes, indexed for matching.
    pub routes: crate::routing::Table,
    pub generation: u64,
    /// Each route's metric series, by route index, made at its first
    /// request (20,000 routes' series cost more than the rest of a build).
    metrics: Vec<OnceLock<RouteMetrics>>,
    /// The text of the file this policy was read from.
    pub source: crate::config::Source,
}

impl Policy {
    /// Puts together what `build` checked and loaded: the pools (their
    /// targets resolved), the route table and the metric series.
    pub fn build(checked: Checked, generation: u64) -> Result<Self, BuildError> {
        let Checked {
            config,
            material,
            text,
            ..
        } = checked;
        let pools = upstream::build_pools(
            &config,
            &material.upstream_roots,
            &material.upstream_clients,
        )
        .map_err(|(pool, source)| BuildError {
            place: config.upstreams[&pool].place.clone(),
            pool,
            source,
        })?;
        let routes = crate::routing::Table::new(&config.routes);
        let metrics = config.routes.iter().map(|_| OnceLock::new()).collect();
        Ok(Policy {
            config,
            verifier: material.verifier,
            methods: material.methods,
            pools,
            certs: material.certs,
            client_verifier: material.client_verifier,
            tls_hosts: material.tls_hosts,
            routes,
            generation,
            metrics,
            source: text,
        })
    }
}

impl Policy {
    /// The metric series of a route (`None`: no route matched).
    pub fn route_metrics(&self, route: Option<usize>) -> &RouteMetrics {
        static NONE: LazyLock<RouteMetrics> =
            LazyLock::new(|| RouteMetrics::new("none", &[], NO_ROUTE.map(String::from)));
        let Some((series, route)) =
            route.and_then(|i| Some((self.metrics.get(i)?, &self.config.routes[i])))
        else {
            return &NONE;
        };
        series.get_or_init(|| {
            let limits = self.config.route_limits(route);
            let limits: Vec<&str> = limits.iter().map(|l| l.name.as_str()).collect();
            RouteMetrics::new(&route.name, &limits, http_labels(route))
        })
    }
}

/// The `HTTP_LABELS` values of requests no route matched.
const NO_ROUTE: [&str; 5] = ["", "", "", "none", ""];

/// A route's `HTTP_LABELS` values: its origin's namespace, object and
/// Service (empty for a file's routes), its name, and its host as written.
fn http_labels(route: &crate::config::Route) -> [String; 5] {
    let host = match &route.host {
        Some(crate::config::HostMatch::Exact(h)) => h.clone(),
        Some(crate::config::HostMatch::Suffix(s)) => format!("*{s}"),
        None => String::new(),
    };
    let origin = route.origin.as_deref().cloned().unwrap_or_default();
    [
        origin.namespace,
        origin.object,
        origin.service,
        route.name.clone(),
        host,
    ]
}

/// State shared by the proxy, the admin listener and background tasks.
pub struct Shared {
    pub policy: ArcSwap<Policy>,
    pub limiter: crate::limit::Limiter,
    /// Failed authentications per client address; outlives reloads.
    pub auth_failures: crate::auth::failures::Failures,
    /// Failed basic-auth checks per method and user name; outlives reloads.
    pub user_failures: crate::auth::failures::Failures<crate::auth::failures::UserKey>,
    /// The queue of basic-auth checks (bcrypt), one place an address.
    pub basic_checks: crate::auth::checks::CheckQueue,
    /// Listeners are up and the process is not shutting down.
    pub ready: AtomicBool,
    /// Controller mode: the first full list of the cluster's objects has
    /// been applied (true from the start otherwise).
    pub synced: AtomicBool,
    /// Traces, when `telemetry.otlp` is set (a restart applies a change).
    pub telemetry: Option<crate::telemetry::Telemetry>,
    /// The `fair_share` pools' permits and queues; outlive reloads.
    pub fair: upstream::fair::FairShares,
}

/// Creates every series the config implies at zero, so dashboards and
/// alerts see them (and `rate()` works) before the first event.
pub fn init_series(config: &Config) {
    let m = &*METRICS;
    for e in crate::auth::AuthError::ALL {
        m.auth_failures.with_label_values(&[e.reason()]);
    }
    for throttle in crate::auth::failures::Throttle::BASIC {
        m.basic_throttled.with_label_values(&[throttle.as_str()]);
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
    let loaded = crate::build::load(path)?;
    for line in &loaded.warnings {
        tracing::warn!(problem = %line, "config.warning");
    }
    put_in_force(shared, loaded, path).await
}

/// Puts a checked policy in force, as its next generation, unless it
/// changes what only a restart applies (`path` names it in problems).
pub async fn put_in_force(shared: &Shared, loaded: Checked, path: &Path) -> Result<u64, Problems> {
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
    let policy = Policy::build(loaded, generation).map_err(|e| e.problems(path))?;
    if let Some(verifier) = &policy.verifier {
        verifier.refresh_remote(true).await;
    }
    init_series(&policy.config);
    log_new_certificates(current.certs.as_deref(), policy.certs.as_deref());
    let mut live: std::collections::HashSet<[String; 5]> =
        policy.config.routes.iter().map(http_labels).collect();
    live.insert(NO_ROUTE.map(String::from));
    shared.fair.apply(&policy.config);
    shared.policy.store(Arc::new(policy));
    crate::metrics::prune_http(&live);
    // The old policy is freed off the runtime (at 10,000 Ingresses, tens
    // of milliseconds of its pools and routes), unless requests in flight
    // still hold it: then the last of them frees it.
    tokio::task::spawn_blocking(move || drop(current));
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
