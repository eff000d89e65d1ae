//! Controller mode's pool targets: the addresses behind a Service, read
//! from its EndpointSlices as kube-proxy reads them (ready endpoints; only
//! when none is ready, the serving ones that are terminating), or an
//! `ExternalName` Service's name, resolved by DNS like any pool target.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use serde_json::Value;

use super::manifests::{text, At, Object};

use crate::k8s::Kind;

/// A pool made of a Service's endpoints (or the `503` route of one with
/// none: `pool` None): what an EndpointSlice change updates in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub pool: Option<String>,
    pub namespace: String,
    pub service: String,
    /// The Service port, a number or a name, as the route names it.
    pub port: String,
}

/// What a Service's endpoints may not point at (SPEC §11): the gateway's
/// own listeners always (one request would fan out into hundreds, or
/// reach the admin listener's `/metrics` from the public port), and
/// loopback, link-local (the cloud metadata address among them) and
/// unspecified addresses unless `kubernetes.allow_local_endpoints` (the
/// API server refuses such Endpoints itself; CVE-2021-25740's class).
#[derive(Debug, Clone, Default)]
pub struct Guard {
    pub allow_local: bool,
    /// The gateway's own listeners.
    pub own: Vec<SocketAddr>,
}

impl Guard {
    /// Why `ip:port` is refused, if it is.
    fn refuses(&self, ip: IpAddr, port: u16) -> Option<&'static str> {
        let ip = ip.to_canonical();
        let ours = self
            .own
            .iter()
            .any(|l| l.port() == port && (l.ip() == ip || l.ip().is_unspecified() && local(ip)));
        if ours {
            return Some("is the gateway's own listener");
        }
        if self.allow_local {
            return None;
        }
        local(ip).then_some("is a loopback, link-local or unspecified address")
    }

    /// Why an ExternalName target `name` is refused, if it is.
    fn refuses_name(&self, name: &str, port: u16) -> Option<&'static str> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        let bare = name.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return self.refuses(ip, port);
        }
        let loopback = name == "localhost" || name.ends_with(".localhost");
        match loopback {
            true => self.refuses(IpAddr::from([127, 0, 0, 1]), port),
            false => None,
        }
    }
}

/// Loopback, link-local (169.254.169.254 among them), unspecified, or
/// the AWS IPv6 metadata address.
fn local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback() || v4.is_link_local() || v4.is_unspecified(),
        IpAddr::V6(v6) => {
            let metadata = v6 == std::net::Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);
            v6.is_loopback()
                || v6.is_unspecified()
                || (v6.segments()[0] & 0xffc0) == 0xfe80
                || metadata
        }
    }
}

/// Each Service with its EndpointSlices, by namespace and name: what a
/// backend's targets are read from, without scanning every object; and
/// the targets read so far (an Ingress's paths name one Service each).
#[derive(Default)]
pub struct Services<'a> {
    by_name: HashMap<&'a str, HashMap<&'a str, Vec<&'a Object>>>,
    known: HashMap<(String, String, String), Result<Vec<String>, NoTargets>>,
}

impl<'a> Services<'a> {
    pub fn new(objects: impl IntoIterator<Item = &'a Object>) -> Self {
        let mut out: HashMap<&str, HashMap<&str, Vec<&Object>>> = HashMap::new();
        for o in objects {
            let service = match Kind::by_name(&o.kind) {
                Some(Kind::Service) => o.name.as_str(),
                Some(Kind::EndpointSlice) => {
                    let label = o.value.at("/metadata/labels/kubernetes.io~1service-name");
                    match label.and_then(serde_json::Value::as_str) {
                        Some(s) => s,
                        None => continue,
                    }
                }
                _ => continue,
            };
            let namespace = out.entry(o.namespace.as_str()).or_default();
            namespace.entry(service).or_default().push(o);
        }
        Services {
            by_name: out,
            known: HashMap::new(),
        }
    }

    /// The targets of Service `namespace/service` at `port` (`targets`),
    /// read once a build: within one `Draft` the objects and the guard
    /// (its options') never change.
    pub fn targets(
        &mut self,
        namespace: &str,
        service: &str,
        port: &str,
        guard: &Guard,
    ) -> Result<Vec<String>, NoTargets> {
        let key = (namespace.to_string(), service.to_string(), port.to_string());
        if let Some(known) = self.known.get(&key) {
            return known.clone();
        }
        let group = self.group(namespace, service);
        let found = targets(group, namespace, service, port, guard);
        self.known.insert(key, found.clone());
        found
    }

    /// Service `namespace/service` and its EndpointSlices.
    pub fn group(&self, namespace: &str, service: &str) -> &[&'a Object] {
        self.by_name
            .get(namespace)
            .and_then(|services| services.get(service))
            .map_or(&[], Vec::as_slice)
    }
}

/// Why a Service gives no targets. `NoReadyEndpoints` is a state a
/// rollout passes through (its routes answer 503 until one is ready);
/// the others are the object's mistakes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoTargets {
    #[error("Service {0} does not exist")]
    NoService(String),
    #[error("Service {0} has no port {1}")]
    NoPort(String, String),
    #[error("Service {0} has no ready endpoints")]
    NoReadyEndpoints(String),
    #[error(
        "Service {0} has no endpoint the gateway may reach: {1} (kubernetes.allow_local_endpoints)"
    )]
    Unreachable(String, String),
    #[error("ExternalName Service {0} names no host")]
    NoExternalName(String),
    #[error("ExternalName Service {0}: {1}")]
    ExternalNameRefused(String, String),
}

/// The targets of Service `namespace/service` at its port `port` (a
/// number or a port name) among `objects` (which `Services::group` gives),
/// or why there are none.
pub fn targets(
    objects: &[&Object],
    ns: &str,
    service: &str,
    port: &str,
    guard: &Guard,
) -> Result<Vec<String>, NoTargets> {
    let id = || format!("{ns}/{service}");
    let svc = objects
        .iter()
        .find(|o| o.is(Kind::Service) && o.namespace == ns && o.name == service)
        .ok_or_else(|| NoTargets::NoService(id()))?;
    let svc_port = service_port(svc, port).ok_or_else(|| NoTargets::NoPort(id(), port.into()))?;
    if text(&svc.value, &["spec", "type"]).as_deref() == Some("ExternalName") {
        return external_name(svc, &svc_port, guard);
    }
    let slices = objects.iter().filter(|o| {
        o.is(Kind::EndpointSlice)
            && o.namespace == ns
            && text(
                &o.value,
                &["metadata", "labels", "kubernetes.io/service-name"],
            )
            .as_deref()
                == Some(service)
    });
    let (mut ready, mut serving) = (Vec::new(), Vec::new());
    let mut refused: Option<String> = None;
    for slice in slices {
        let Some(number) = slice_port(&slice.value, &svc_port.name) else {
            continue;
        };
        let Some(Value::Array(endpoints)) = slice.value.get("endpoints") else {
            continue;
        };
        for ep in endpoints {
            let condition = |key: &str| ep.get("conditions")?.get(key)?.as_bool();
            // The API's rule: an unset `ready` or `serving` means true.
            let is_ready = condition("ready").unwrap_or(true);
            let is_serving = condition("serving").unwrap_or(is_ready);
            let list = match (is_ready, is_serving) {
                (true, _) => &mut ready,
                (false, true) => &mut serving,
                (false, false) => continue,
            };
            if let Some(Value::Array(addresses)) = ep.get("addresses") {
                for a in addresses.iter().filter_map(Value::as_str) {
                    let ip = a.parse::<IpAddr>().ok();
                    let port = number.parse().unwrap_or(0);
                    if let Some(why) = ip.and_then(|ip| guard.refuses(ip, port)) {
                        refused.get_or_insert(format!("{a}:{number} {why}"));
                        continue;
                    }
                    list.push(match a.contains(':') {
                        true => format!("[{a}]:{number}"),
                        false => format!("{a}:{number}"),
                    });
                }
            }
        }
    }
    let mut found = if ready.is_empty() { serving } else { ready };
    found.sort();
    found.dedup();
    match (found.is_empty(), refused) {
        (true, Some(why)) => Err(NoTargets::Unreachable(id(), why)),
        (true, None) => Err(NoTargets::NoReadyEndpoints(id())),
        (false, _) => Ok(found),
    }
}

/// An `ExternalName` Service's one target, if the guard lets it.
fn external_name(
    svc: &Object,
    port: &ServicePort,
    guard: &Guard,
) -> Result<Vec<String>, NoTargets> {
    let name = text(&svc.value, &["spec", "externalName"])
        .ok_or_else(|| NoTargets::NoExternalName(svc.id()))?;
    if let Some(why) = guard.refuses_name(&name, port.number.parse().unwrap_or(0)) {
        return Err(NoTargets::ExternalNameRefused(
            svc.id(),
            format!("{name} {why}"),
        ));
    }
    Ok(vec![format!("{name}:{}", port.number)])
}

/// A Service port: its name (EndpointSlices name their ports after it)
/// and number.
struct ServicePort {
    name: String,
    number: String,
}

fn service_port(svc: &Object, port: &str) -> Option<ServicePort> {
    let Some(Value::Array(ports)) = svc.value.at("/spec/ports") else {
        return None;
    };
    ports
        .iter()
        .find(|p| {
            text(p, &["port"]).as_deref() == Some(port)
                || text(p, &["name"]).as_deref() == Some(port)
        })
        .map(|p| ServicePort {
            name: text(p, &["name"]).unwrap_or_default(),
            number: text(p, &["port"]).unwrap_or_default(),
        })
}

/// The port number an EndpointSlice gives for the Service port `name`
/// (unnamed: the empty name).
fn slice_port(slice: &Value, name: &str) -> Option<String> {
    let Some(Value::Array(ports)) = slice.get("ports") else {
        return None;
    };
    ports
        .iter()
        .find(|p| text(p, &["name"]).unwrap_or_default() == name)
        .and_then(|p| text(p, &["port"]))
}
