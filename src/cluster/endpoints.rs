//! Endpoints in place (SPEC section 11, scale): when nothing but
//! EndpointSlices changed since the last build, each pool made of a
//! Service's endpoints takes the new addresses atomically, the way a look-up
//! of names replaces a pool's rotation, with no policy build. A Service
//! that gains its first usable endpoint or loses its last (its routes move
//! between a pool and `503`) builds, as does any other change.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use crate::import::{Binding, Guard, Object};
use crate::metrics::METRICS;
use crate::state::Shared;

/// What the last build made of endpoints.
#[derive(Default)]
pub struct Endpoints {
    /// A digest of every object but the EndpointSlices, as last built.
    others: Option<u64>,
    bindings: Vec<Binding>,
    /// Each pool's targets, as last built or applied.
    targets: HashMap<String, Vec<String>>,
}

/// A digest of the objects but the EndpointSlices, each without its status
/// and what comes with any write (resource version, managed fields): the
/// controller's own status writes are no change.
fn others(objects: &[Object]) -> u64 {
    let mut keys: Vec<(&str, String, u64)> = objects
        .iter()
        .filter(|o| o.kind != "EndpointSlice")
        .map(|o| {
            let mut v = o.value.clone();
            if let serde_json::Value::Object(map) = &mut v {
                map.remove("status");
                if let Some(serde_json::Value::Object(meta)) = map.get_mut("metadata") {
                    meta.remove("resourceVersion");
                    meta.remove("managedFields");
                }
            }
            let mut h = std::collections::hash_map::DefaultHasher::new();
            v.to_string().hash(&mut h);
            (o.kind.as_str(), o.id(), h.finish())
        })
        .collect();
    keys.sort_unstable();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    keys.hash(&mut h);
    h.finish()
}

/// Each Service with its EndpointSlices, by namespace and name: what one
/// Service's targets are read from, without scanning every object.
fn by_service(objects: &[Object]) -> HashMap<(&str, String), Vec<Object>> {
    let mut out: HashMap<(&str, String), Vec<Object>> = HashMap::new();
    for o in objects {
        let service = match o.kind.as_str() {
            "Service" => o.name.clone(),
            "EndpointSlice" => {
                match o.text(&["metadata", "labels", "kubernetes.io/service-name"]) {
                    Some(s) => s,
                    None => continue,
                }
            }
            _ => continue,
        };
        out.entry((o.namespace.as_str(), service))
            .or_default()
            .push(o.clone());
    }
    out
}

/// The targets of `b` now, or why it has none.
fn targets(
    services: &HashMap<(&str, String), Vec<Object>>,
    b: &Binding,
    guard: &Guard,
) -> Result<Vec<String>, String> {
    let group = services
        .get(&(b.namespace.as_str(), b.service.clone()))
        .map_or(&[][..], Vec::as_slice);
    crate::import::service_targets(group, &b.namespace, &b.service, &b.port, guard)
}

impl Endpoints {
    /// What the build of `objects` made: its bindings and their targets.
    pub fn built(objects: &[Object], bindings: Vec<Binding>, guard: &Guard) -> Endpoints {
        let services = by_service(objects);
        let targets = bindings
            .iter()
            .filter_map(|b| Some((b.pool.clone()?, targets(&services, b, guard).ok()?)))
            .collect();
        Endpoints {
            others: Some(others(objects)),
            bindings,
            targets,
        }
    }

    /// Applies a change of EndpointSlices only to the pools in force:
    /// whether it did (no build is needed).
    pub fn apply(&mut self, objects: &[Object], shared: &Shared) -> bool {
        if self.others != Some(others(objects)) {
            return false;
        }
        let policy = shared.policy.load();
        let guard = crate::cluster::gateway::BaseNames::of(&policy.config).guard;
        let services = by_service(objects);
        let mut moved = Vec::new();
        for b in &self.bindings {
            match (&b.pool, targets(&services, b, &guard)) {
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
