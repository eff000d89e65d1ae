//! Endpoints in place (SPEC section 11, scale): when nothing but
//! EndpointSlices changed since the last build, each pool made of a
//! Service's endpoints takes the new addresses atomically, the way a look-up
//! of names replaces a pool's rotation, with no policy build. A Service
//! that gains its first usable endpoint or loses its last (its routes move
//! between a pool and `503`) builds, as does any other change.

use std::collections::{HashMap, HashSet};

use super::watch::Cache;
use crate::import::{Binding, Guard, NoTargets, Object, Services};
use crate::metrics::METRICS;
use crate::state::Shared;

/// What the last build made of endpoints.
#[derive(Default)]
pub struct Endpoints {
    /// The cache's `others` digest as last built.
    others: Option<u64>,
    /// What endpoints may not point at, as the build's policy says.
    guard: Guard,
    /// The bindings by Service (namespace, name), each pool once: a change
    /// reads only the bindings of the Services it touched.
    by_service: HashMap<(String, String), Vec<Binding>>,
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
        guard: Guard,
    ) -> Endpoints {
        let services = Services::new(objects.iter());
        let mut by_service: HashMap<(String, String), Vec<Binding>> = HashMap::new();
        for b in bindings {
            let listed = by_service
                .entry((b.namespace.clone(), b.service.clone()))
                .or_default();
            if !listed.iter().any(|l| l.pool == b.pool && l.port == b.port) {
                listed.push(b);
            }
        }
        let targets = by_service
            .values()
            .flatten()
            .filter_map(|b| {
                let group = services.group(&b.namespace, &b.service);
                Some((b.pool.clone()?, targets(group, b, &guard).ok()?))
            })
            .collect();
        Endpoints {
            others: Some(others),
            guard,
            by_service,
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
        self.apply_to(&dirty, cache, shared)
    }

    /// The same while a build is under way (its snapshot taken): the
    /// policy in force follows its endpoints meanwhile, and the changed
    /// Services stay marked, to be applied to the new policy when it is
    /// in force (it was built from the older snapshot). Whatever else
    /// changed (an Ingress: the build's very cause), these bindings are
    /// those of the pools in force.
    pub fn apply_meanwhile(&mut self, cache: &Cache, shared: &Shared) {
        if self.others.is_some() {
            self.apply_to(&cache.dirty(), cache, shared);
        }
    }

    fn apply_to(
        &mut self,
        dirty: &HashSet<(String, String)>,
        cache: &Cache,
        shared: &Shared,
    ) -> bool {
        let policy = shared.policy.load();
        // A Service that needs a build does not hold up the others' moves.
        let mut applied = true;
        let mut moved = Vec::new();
        for service in dirty {
            let Some(bindings) = self.by_service.get(service) else {
                continue;
            };
            let held = cache.service(&service.0, &service.1);
            let group: Vec<&Object> = held.iter().collect();
            for b in bindings {
                match (&b.pool, targets(&group, b, &self.guard)) {
                    (None, Err(_)) => {}
                    (None, Ok(_)) | (Some(_), Err(_)) => applied = false,
                    (Some(pool), Ok(now)) if self.targets.get(pool) != Some(&now) => {
                        moved.push((pool.clone(), now));
                    }
                    (Some(_), Ok(_)) => {}
                }
            }
        }
        for (name, now) in moved {
            let Some(pool) = policy.pools.get(&name) else {
                applied = false;
                continue;
            };
            if pool.set_targets(&now).is_err() {
                applied = false;
                continue;
            }
            METRICS.kube_endpoint_updates.inc();
            tracing::info!(upstream = %name, targets = now.len(), "kubernetes.endpoints_applied");
            self.targets.insert(name, now);
        }
        applied
    }
}
