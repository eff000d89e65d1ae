//! The import corpus's cases as a cluster holds them: the Services,
//! endpoints, IngressClass and Secrets its Ingresses rely on besides the
//! manifests (`kube_doors.rs`, `import_gateway_api.rs`).

use std::collections::BTreeSet;
use std::net::SocketAddr;

use serde_json::{json, Value};

use super::cluster::{ingress_class, tls_secret, CONTROLLER};
use super::kube_api::KubeApi;
use super::Pki;

/// Every Service an Ingress backend names, with the ports it names.
pub fn backends(api: &KubeApi) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for ing in api.list("networking.k8s.io/v1/ingresses", "") {
        let ns = ing["metadata"]["namespace"].as_str().unwrap().to_string();
        let text = ing["spec"].to_string();
        let spec: Value = serde_json::from_str(&text).unwrap();
        collect_backends(&spec, &ns, &mut out);
    }
    out
}

fn collect_backends(v: &Value, ns: &str, out: &mut BTreeSet<(String, String, String)>) {
    match v {
        Value::Object(map) => {
            if let Some(svc) = map.get("service") {
                let port = &svc["port"];
                let port = port["number"]
                    .as_u64()
                    .map(|n| n.to_string())
                    .or_else(|| port["name"].as_str().map(String::from))
                    .unwrap_or_else(|| "80".into());
                let name = svc["name"].as_str().unwrap_or_default().to_string();
                out.insert((ns.to_string(), name, port));
            }
            map.values().for_each(|x| collect_backends(x, ns, out));
        }
        Value::Array(items) => items.iter().for_each(|x| collect_backends(x, ns, out)),
        _ => {}
    }
}

/// What a cluster has besides the manifests: our class named `nginx`, a
/// Service for each backend without one, a ready endpoint behind each (at
/// the address `endpoint` gives for a Service's port: one IP for all of a
/// Service's ports), and the TLS Secrets the Ingresses name.
pub fn complete_cluster(
    api: &KubeApi,
    pki: &Pki,
    endpoint: &mut dyn FnMut(&str, &str, u16) -> SocketAddr,
) {
    api.apply(ingress_class("nginx", CONTROLLER, false));
    for (ns, name, port) in backends(api) {
        let number: u16 = port.parse().unwrap_or(80);
        let svc = match api.get("v1/services", &ns, &name) {
            Some(svc) => svc,
            None => api.apply(json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"ports": [{"port": number}]}
            })),
        };
        let mut ip = None;
        let ports: Vec<Value> = svc["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let port = p["port"].as_u64().unwrap() as u16;
                let addr = endpoint(&ns, &name, port);
                ip = Some(addr.ip());
                json!({"name": p["name"].as_str().unwrap_or(""), "port": addr.port()})
            })
            .collect();
        let ip = ip.expect("a Service with ports").to_string();
        api.apply(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{name}-x"), "namespace": ns,
                         "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4", "ports": ports,
            "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}]
        }));
    }
    for ing in api.list("networking.k8s.io/v1/ingresses", "") {
        let ns = ing["metadata"]["namespace"].as_str().unwrap();
        let annotation =
            &ing["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-ssl-secret"];
        if let Some(reference) = annotation.as_str() {
            let (ns, name) = reference.split_once('/').unwrap_or((ns, reference));
            use base64::Engine;
            let ca = std::fs::read(pki.ca()).unwrap();
            let ca = base64::engine::general_purpose::STANDARD.encode(ca);
            api.apply(json!({
                "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": name, "namespace": ns},
                "data": {"ca.crt": ca}
            }));
        }
        for section in ing["spec"]["tls"].as_array().into_iter().flatten() {
            let Some(secret) = section["secretName"].as_str() else {
                continue;
            };
            let hosts: Vec<&str> = section["hosts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let (cert, key) = pki.leaf(secret, secret, &hosts, "02");
            let (cert, key) = (std::fs::read(cert).unwrap(), std::fs::read(key).unwrap());
            api.apply(tls_secret(ns, secret, &cert, &key));
        }
    }
}

/// The ingress-nginx controller's ConfigMap among a cluster's objects, by
/// the names the import looks for, as `NAMESPACE/NAME`.
pub fn controller_configmap(api: &KubeApi) -> Option<String> {
    let names = [
        "ingress-nginx-controller",
        "nginx-configuration",
        "nginx-ingress-controller",
    ];
    api.list("v1/configmaps", "")
        .into_iter()
        .find(|c| names.contains(&c["metadata"]["name"].as_str().unwrap_or_default()))
        .map(|c| {
            format!(
                "{}/{}",
                c["metadata"]["namespace"].as_str().unwrap_or_default(),
                c["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
}
