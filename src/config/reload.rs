//! Reload: read and validate the file off the request path, refuse changes
//! that need a restart, then swap the policy atomically. A failed reload
//! leaves the running policy untouched and logs every problem.

use std::path::Path;
use std::sync::Arc;

use super::{Config, Problems};
use crate::metrics::METRICS;
use crate::proxy::{Policy, Shared};

/// Fields whose change only a restart can apply: listeners, threads and
/// grace are fixed when the process starts, and the store connection (and
/// its fallback settings) lives as long as the process.
fn restart_required(old: &Config, new: &Config) -> Vec<&'static str> {
    let (s, t) = (&old.server, &new.server);
    let (o, n) = (&old.store, &new.store);
    [
        ("server.listen", s.listen != t.listen),
        ("server.tls", s.tls != t.tls),
        ("server.threads", s.threads != t.threads),
        (
            "server.shutdown_grace",
            s.shutdown_grace != t.shutdown_grace,
        ),
        (
            "server.trusted_proxies",
            s.trusted_proxies != t.trusted_proxies,
        ),
        ("admin.listen", old.admin != new.admin),
        ("store.kind", o.kind != n.kind),
        ("store.url", o.urls != n.urls),
        ("store.password_env", o.password_env != n.password_env),
        ("store.key_prefix", o.key_prefix != n.key_prefix),
        ("store.timeout", o.timeout != n.timeout),
        ("store.on_unavailable", o.on_unavailable != n.on_unavailable),
        ("store.local_divisor", o.local_divisor != n.local_divisor),
    ]
    .into_iter()
    .filter_map(|(field, changed)| changed.then_some(field))
    .collect()
}

/// Notices changes to the config file: in-place writes, editors' write-and-
/// rename, and the atomic `..data` symlink swap of a Kubernetes ConfigMap
/// volume. It watches the file's directory (the file itself may be replaced)
/// and says only "something changed"; the caller debounces and compares
/// contents.
pub struct Watch {
    _watcher: notify::RecommendedWatcher,
    pub events: tokio::sync::mpsc::UnboundedReceiver<()>,
}

pub fn watch(path: &Path) -> Result<Watch, String> {
    use notify::Watcher;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let (tx, events) = tokio::sync::mpsc::unbounded_channel();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok() {
            let _ = tx.send(());
        }
    })
    .map_err(|e| format!("cannot watch {}: {e}", dir.display()))?;
    watcher
        .watch(&dir, notify::RecursiveMode::NonRecursive)
        .map_err(|e| format!("cannot watch {}: {e}", dir.display()))?;
    Ok(Watch {
        _watcher: watcher,
        events,
    })
}

/// A digest of the file as it reads now (through any symlinks).
pub fn digest(path: &Path) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let bytes = std::fs::read(path).ok()?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    Some(h.finish())
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
    let fields = restart_required(&current.config, &loaded.config);
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
    let policy = Policy::build(loaded.config, generation).map_err(|e| {
        let mut p = Problems::new(path.display().to_string());
        p.push((1, 1), "upstreams.target_invalid", e);
        p
    })?;
    if let Some(verifier) = &policy.verifier {
        verifier.refresh_remote(true).await;
    }
    METRICS.init_series(&policy.config);
    shared.policy.store(Arc::new(policy));
    Ok(generation)
}
