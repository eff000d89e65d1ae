//! Controller mode's pool targets: the addresses behind a Service, read
//! from its EndpointSlices as kube-proxy reads them (ready endpoints; only
//! when none is ready, the serving ones that are terminating), or an
//! `ExternalName` Service's name, resolved by DNS like any pool target.

use serde_json::Value;

use super::manifests::{text, Object};

/// The targets of Service `namespace/service` at its port `port` (a
/// number or a port name), or why there are none.
pub fn targets(
    objects: &[Object],
    ns: &str,
    service: &str,
    port: &str,
) -> Result<Vec<String>, String> {
    let svc = objects
        .iter()
        .find(|o| o.kind == "Service" && o.namespace == ns && o.name == service)
        .ok_or_else(|| format!("Service {ns}/{service} does not exist"))?;
    let svc_port = service_port(svc, port)
        .ok_or_else(|| format!("Service {ns}/{service} has no port {port}"))?;
    if text(&svc.value, &["spec", "type"]).as_deref() == Some("ExternalName") {
        let name = text(&svc.value, &["spec", "externalName"])
            .ok_or_else(|| format!("ExternalName Service {ns}/{service} names no host"))?;
        return Ok(vec![format!("{name}:{}", svc_port.number)]);
    }
    let slices = objects.iter().filter(|o| {
        o.kind == "EndpointSlice"
            && o.namespace == ns
            && text(
                &o.value,
                &["metadata", "labels", "kubernetes.io/service-name"],
            )
            .as_deref()
                == Some(service)
    });
    let (mut ready, mut serving) = (Vec::new(), Vec::new());
    for slice in slices {
        let Some(number) = slice_port(&slice.value, &svc_port.name) else {
            continue;
        };
        let Some(Value::Array(endpoints)) = slice.value.get("endpoints") else {
            continue;
        };
        for ep in endpoints {
            let condition = |key: &str| {
                ep.pointer(&format!("/conditions/{key}"))
                    .and_then(Value::as_bool)
            };
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
    match found.is_empty() {
        true => Err(format!("Service {ns}/{service} has no ready endpoints")),
        false => Ok(found),
    }
}

/// A Service port: its name (EndpointSlices name their ports after it)
/// and number.
struct ServicePort {
    name: String,
    number: String,
}

fn service_port(svc: &Object, port: &str) -> Option<ServicePort> {
    let Some(Value::Array(ports)) = svc.value.pointer("/spec/ports") else {
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
