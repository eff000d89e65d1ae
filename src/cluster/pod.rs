//! This replica: where it runs (the Lease and Events are written in its
//! namespace, under its name) and the addresses it publishes in the status
//! of what it serves. Ingress and Gateway status both read it.

use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use serde_json::{json, Value};

use crate::config::Kubernetes;

/// Where this replica runs: the downward API's `POD_NAME` and
/// `POD_NAMESPACE` (the Lease and Events are written there).
#[derive(Debug, Clone)]
pub struct Pod {
    pub name: String,
    pub namespace: String,
}

impl Pod {
    pub fn from_env() -> Pod {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "fairgate".into());
        Pod {
            name: std::env::var("POD_NAME").unwrap_or(host),
            namespace: std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "default".into()),
        }
    }
}

/// What is published: `publish_address`, or the published Service's
/// load-balancer addresses (else its external IPs, else its cluster IP).
pub async fn addresses(client: &kube::Client, settings: &Kubernetes) -> Option<Vec<Value>> {
    let entry = |a: &str| match a.parse::<std::net::IpAddr>() {
        Ok(_) => json!({"ip": a}),
        Err(_) => json!({"hostname": a}),
    };
    if !settings.publish_address.is_empty() {
        return Some(settings.publish_address.iter().map(|a| entry(a)).collect());
    }
    let (ns, name) = settings.publish_service.as_ref()?.split_once('/')?;
    let svc = Api::<Service>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .ok()?;
    let lb = svc
        .status
        .and_then(|s| s.load_balancer)
        .and_then(|l| l.ingress)
        .unwrap_or_default();
    if !lb.is_empty() {
        return Some(
            lb.into_iter()
                .map(|i| serde_json::to_value(i).unwrap_or(Value::Null))
                .collect(),
        );
    }
    let spec = svc.spec?;
    let ips = spec
        .external_ips
        .filter(|v| !v.is_empty())
        .or_else(|| spec.cluster_ip.map(|ip| vec![ip]))?;
    Some(ips.iter().map(|a| entry(a)).collect())
}
