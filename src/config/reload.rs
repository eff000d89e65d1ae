//! Reload: read and validate the file off the request path, refuse changes
//! that need a restart, then swap the policy atomically. A failed reload
//! leaves the running policy untouched and logs every problem.

use std::path::Path;
use std::sync::Arc;

use super::{Config, Problems};
use crate::metrics::METRICS;
use crate::proxy::{Policy, Shared};

/// Fields whose change only a restart can apply.
fn restart_required(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut fields = Vec::new();
    if old.server != new.server {
        fields.push("server");
    }
    if old.admin != new.admin {
        fields.push("admin.listen");
    }
    let (o, n) = (&old.store, &new.store);
    if o.kind != n.kind
        || o.urls != n.urls
        || o.password_env != n.password_env
        || o.key_prefix != n.key_prefix
    {
        fields.push("store");
    }
    fields
}

/// Loads `path` and, if it is valid, makes it the policy in force.
pub async fn reload(shared: &Shared, path: &Path) -> Result<u64, Problems> {
    let result = try_reload(shared, path).await;
    match &result {
        Ok(generation) => {
            METRICS.config_reloads.with_label_values(&["ok"]).inc();
            METRICS.config_generation.set(*generation as i64);
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
    shared.policy.store(Arc::new(policy));
    Ok(generation)
}
