//! ingress-nginx's `tcp-services` ConfigMap (`--tcp-services-configmap`):
//! each `PORT: "NAMESPACE/SERVICE:PORT[:PROXY[:PROXY]]"` entry as a
//! `server.tcp_services` listener on that port passing bytes to the
//! Service. From the command line only: a controller's listeners are fixed
//! when it starts (the operator writes them in its base policy).

use super::draft::Draft;
use super::out::{Pool, ServerSetting, TcpService};
use super::{Refusal, Verdict};
use crate::k8s::Kind;

/// Adds an entry, and a line, for each of the ConfigMap's ports.
pub fn read(draft: &mut Draft<'_>) {
    let Some(id) = draft.options.tcp_services_configmap.clone() else {
        return;
    };
    let subject = format!("tcp-services {id}");
    let map = id
        .split_once('/')
        .and_then(|(ns, name)| draft.object(Kind::ConfigMap, ns, name));
    let Some(map) = map else {
        let why = "not among the inputs: no TCP service is imported".to_string();
        draft.line(&subject, "configmap", Verdict::Unsupported(why));
        return;
    };
    let data: Vec<(String, String)> = match map.value.get("data").and_then(|d| d.as_object()) {
        Some(d) => d
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect(),
        None => Vec::new(),
    };
    let mut services = Vec::new();
    for (port, value) in data {
        let verdict = match one(draft, &port, &value) {
            Ok((service, verdict)) => {
                services.push(service);
                verdict
            }
            Err(why) => Verdict::from(why),
        };
        draft.line(&subject, &port, verdict);
    }
    if !services.is_empty() {
        draft.server.push(ServerSetting::TcpServices(services));
    }
}

/// One entry: its listener and pool, or why not.
fn one(draft: &mut Draft<'_>, port: &str, value: &str) -> Result<(TcpService, Verdict), Refusal> {
    let listen_port = port
        .parse::<u16>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| Refusal::from(format!("{port:?} is not a port")))?;
    let mut parts = value.split(':');
    let service = parts.next().unwrap_or_default();
    let target_port = parts.next().unwrap_or_default();
    let (decode, encode) = (parts.next(), parts.next());
    let (ns, name) = service
        .split_once('/')
        .filter(|(ns, name)| super::names::dns1123_label(ns) && super::names::dns1123_label(name))
        .ok_or_else(|| Refusal::from(format!("{value:?}: NAMESPACE/SERVICE:PORT")))?;
    if target_port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(Refusal::from(format!(
            "{value:?}: the Service's port must be a number"
        )));
    }
    if encode == Some("PROXY") {
        return Err("fairgate sends no PROXY header to a TCP service".into());
    }
    let pool = format!("tcp_{ns}_{name}-{target_port}");
    let node = Pool {
        targets: vec![format!(
            "{name}.{ns}.svc.{}:{target_port}",
            draft.options.cluster_domain
        )],
        tls: None,
        protocol: None,
        connect_timeout: "5s".into(),
        health_check: true,
        balance: None,
        affinity: None,
        fair_share: None,
    };
    draft.upstreams.insert(pool.clone(), node);
    let mut why = format!(
        "server.tcp_services: 0.0.0.0:{listen_port} passes bytes to Service {ns}/{name} port {target_port} \
         (closed after 600s idle, ingress-nginx's proxy-stream-timeout)"
    );
    if decode == Some("PROXY") {
        why.push_str(
            "; its PROXY header is read only with server.proxy_protocol, on every listener",
        );
    }
    let verdict = match decode {
        Some("PROXY") => Verdict::Approximated(why),
        _ => Verdict::Mapped(why),
    };
    let service = TcpService {
        listen: format!("0.0.0.0:{listen_port}"),
        upstream: pool,
    };
    Ok((service, verdict))
}
