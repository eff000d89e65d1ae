//! Endpoints in place (SPEC section 11, scale): when nothing but
//! EndpointSlices changed since the last build, each pool made of a
//! Service's endpoints takes the new addresses atomically, the way a look-up
//! of names replaces a pool's rotation, with no policy build. A Service
//! that gains its first usable endpoint or loses its last (its routes move
//! between a pool and `503`) builds, as does any other change.

use std::collections::HashMap;

use super::watch::Cache;
use crate::import::{Binding, Guard, NoTargets, Object, Services};
use crate::metrics::METRICS;
use crate::state::Shared;

/// What the last build made of endpoints.
#[derive(Default)]
pub struct Endpoints {
    /// The cache's `others` digest as last built.
    others: Option<u64>,
    bindings: Vec<Binding>,
    /// Each pool's targets, as last built or applied.
    targets: HashMap<String, Vec<String>>,
}

/// The targets of `b` among `group` (its Service and EndpointSlices), or
/// why it has none.
fn targets(group: &[&Object], b: &Binding, guard: &Guard) -> Result<Vec<String>, NoTargets> {
    crate::import::service_targets(group, &b.namespace, &b.service, &b.port, guard)
}

impl Endpoints {
    /// What the build of `objects` (whose `others` digest is `others`)
    /// made: its bindings and their targets.
    pub fn built(
        objects: &[Object],
        others: u64,
        bindings: Vec<Binding>,
        guard: &Guard,
    ) -> Endpoints {
        let services = Services::new(objects.iter());
        let targets = bindings
            .iter()
            .filter_map(|b| {
                let group = services.group(&b.namespace, &b.service);
                Some((b.pool.clone()?, targets(group, b, guard).ok()?))
            })
            .collect();
        Endpoints {
            others: Some(others),
            bindings,
            targets,
        }
    }

    /// Applies a change of EndpointSlices only to the pools in force:
    /// whether it did (no build is needed). Reads only the Services whose
    /// endpoints changed since the last call or build.
    pub fn apply(&mut self, cache: &Cache, shared: &Shared) -> bool {
        if self.others != Some(cache.others()) {
            return false;
        }
        let dirty = cache.take_dirty();
        let policy = shared.policy.load();
        let guard = crate::cluster::gateway::BaseNames::of(&policy.config).guard;
        let mut groups: HashMap<&(String, String), Vec<Object>> = HashMap::new();
        let mut moved = Vec::new();
        for b in &self.bindings {
            let Some(service) = dirty.get(&(b.namespace.clone(), b.service.clone())) else {
                continue;
            };
            let group = groups
                .entry(service)
                .or_insert_with(|| cache.service(&b.namespace, &b.service));
            let group: Vec<&Object> = group.iter().collect();
            match (&b.pool, targets(&group, b, &guard)) {
                (None, Err(_)) => {}
                (None, Ok(_)) | (Some(_), Err(_)) => return false,
                (Some(pool), Ok(now)) if self.targets.get(pool) != Some(&now) => {
                    moved.push((pool.clone(), now));
                }
                (Some(_), Ok(_)) => {}
            }
        }
        for (name, now) in moved {
            let Some(pool) = policy.pools.get(&name) else {
                return false;
            };
            if pool.set_targets(&now).is_err() {
                return false;
            }
            METRICS.kube_endpoint_updates.inc();
            tracing::info!(upstream = %name, targets = now.len(), "kubernetes.endpoints_applied");
            self.targets.insert(name, now);
        }
        true
    }
}
