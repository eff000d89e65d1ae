//! An Ingress backend as a pool: the Service's cluster DNS name and port,
//! how it is spoken to (`Protocol`, from `backend-protocol`) and how its
//! certificate is checked (`Verify`, from `proxy-ssl-*`). A Service
//! reached two ways gets two pools; one never takes another's place.

use serde_json::Value;

use super::draft::Draft;
use super::manifests::{text, At, Object};
use super::names;
use super::out::{Pool, PoolTls, Wire};
use super::plan::Plan;
use super::Verdict;
use crate::k8s::Kind;

/// `backend-protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    #[default]
    Http,
    Https,
    Grpc,
    Grpcs,
}

impl Protocol {
    pub fn suffix(self) -> &'static str {
        match self {
            Protocol::Http => "",
            Protocol::Https => "-https",
            Protocol::Grpc => "-grpc",
            Protocol::Grpcs => "-grpcs",
        }
    }

    /// A pool's TLS: ingress-nginx does not verify a backend's
    /// certificate unless told to (`proxy-ssl-verify`), and the import
    /// verifies as it was told.
    pub fn tls(self, verify: &Verify) -> Option<PoolTls> {
        matches!(self, Protocol::Https | Protocol::Grpcs).then(|| PoolTls {
            verify: verify.on,
            ca_file: verify.ca_file.clone(),
            ca_pem: verify.ca_pem.clone(),
            sni: verify.sni.clone(),
            client: verify.client.clone(),
        })
    }

    /// A pool's `protocol`, when not HTTP/1.1.
    pub fn wire(self) -> Option<Wire> {
        match self {
            Protocol::Grpc => Some(Wire::H2c),
            Protocol::Grpcs => Some(Wire::H2),
            _ => None,
        }
    }
}

/// How a TLS backend's certificate is checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verify {
    /// `tls_verify`.
    pub on: bool,
    /// `ca_file`: the Secret's `ca.crt` where it is mounted; None is the
    /// system's roots.
    pub ca_file: Option<String>,
    /// `ca_pem`: the Secret's `ca.crt` itself (controller mode).
    pub ca_pem: Option<String>,
    /// `sni`: the name sent and checked; None is the target's host.
    pub sni: Option<String>,
    /// `client_cert_pem`, `client_key_pem`: the Secret's `tls.crt` and
    /// `tls.key`, shown to the backend (controller mode).
    pub client: Option<(String, String)>,
}

/// Where a backend's requests go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Served {
    /// The upstream pool of this name.
    Pool(String),
    /// Nowhere for now: in the cluster, the Service has no ready endpoint,
    /// and its paths answer `503` (as ingress-nginx's do) until it has.
    Unavailable,
}

/// The upstream pool for a backend: the Service's cluster DNS name and
/// port, or in the cluster its ready endpoints (with none, the pool of the
/// plan's `default-backend` Service, if it has).
pub fn upstream(
    draft: &mut Draft<'_>,
    ing: &Object,
    backend: &Value,
    plan: &Plan,
) -> Option<Served> {
    let id = ing.id();
    let (service, port) = service_and_port(draft, ing, backend)?;
    let name = format!(
        "{}-{port}{}",
        names::policy_name(&format!("{}_{service}", ing.namespace)),
        plan.protocol.suffix()
    );
    let targets = match draft.options.cluster {
        true => match draft
            .services
            .targets(&ing.namespace, &service, &port, &draft.options.guard)
        {
            Ok(targets) => targets,
            Err(why) => {
                // Bound without a pool: its first endpoint makes a build.
                draft.bindings.push(binding(None, ing, &service, &port));
                if let Some(fallback) = plan.default_backend.as_deref().filter(|f| *f != service) {
                    let why = format!(
                        "{why}: the default-backend {fallback} serves its paths until it has one"
                    );
                    draft.line(&id, "backend", Verdict::Approximated(why));
                    let value = default_backend(draft, &ing.namespace, fallback);
                    let plan = Plan {
                        protocol: plan.protocol,
                        verify: plan.verify.clone(),
                        balance: plan.balance.clone(),
                        affinity: plan.affinity.clone(),
                        fair_share: plan.fair_share.clone(),
                        ..Plan::default()
                    };
                    return upstream(draft, ing, &value, &plan);
                }
                let why = format!("{why}: its paths answer 503, as ingress-nginx's do");
                draft.line(&id, "backend", Verdict::Approximated(why));
                return Some(Served::Unavailable);
            }
        },
        false => vec![format!(
            "{service}.{}.svc.{}:{port}",
            ing.namespace, draft.options.cluster_domain
        )],
    };
    let checked = !(draft.options.cluster && addresses(&targets));
    let node = Pool {
        targets,
        tls: plan.protocol.tls(&plan.verify),
        protocol: plan.protocol.wire(),
        connect_timeout: connect_timeout(draft),
        health_check: checked,
        balance: plan.balance.clone(),
        affinity: plan.affinity.clone(),
        fair_share: plan.fair_share.clone(),
    };
    let name = pool(draft, name, node);
    let made = draft.made.entry(("upstreams", name.clone()));
    made.or_insert_with(|| ing.id());
    if draft.options.cluster {
        draft
            .bindings
            .push(binding(Some(name.clone()), ing, &service, &port));
    }
    Some(Served::Pool(name))
}

/// The `default-backend` Service `name` of `namespace` as a backend: its
/// first port, as ingress-nginx takes (80 when the Service is not known).
pub fn default_backend(draft: &Draft<'_>, namespace: &str, name: &str) -> Value {
    let svc = draft.object(Kind::Service, namespace, name);
    let first = svc
        .and_then(|s| s.value.at("/spec/ports/0/port"))
        .and_then(Value::as_u64);
    serde_json::json!({"service": {"name": name, "port": {"number": first.unwrap_or(80)}}})
}

/// The backend's Service and port (a number; a port name looked up in the
/// Service), or None with a report line.
fn service_and_port(
    draft: &mut Draft<'_>,
    ing: &Object,
    backend: &Value,
) -> Option<(String, String)> {
    let id = ing.id();
    // networking.k8s.io/v1 `service: {name, port}`, or v1beta1's
    // `serviceName` and `servicePort` (a number or a port name).
    let legacy_port = text(backend, &["servicePort"]);
    let legacy_number = legacy_port.clone().filter(|p| p.parse::<u16>().is_ok());
    let legacy_name = legacy_port.filter(|p| p.parse::<u16>().is_err());
    let service = text(backend, &["service", "name"]).or_else(|| text(backend, &["serviceName"]));
    let Some(service) = service else {
        let why = "a resource backend (not a Service) has no address to forward to";
        draft.line(&id, "backend", Verdict::Unsupported(why.into()));
        return None;
    };
    let port = match (
        text(backend, &["service", "port", "number"]).or(legacy_number),
        text(backend, &["service", "port", "name"]).or(legacy_name),
    ) {
        (Some(n), _) => n,
        (None, Some(name)) => match service_port(draft, &ing.namespace, &service, &name) {
            Some(n) => n,
            None => {
                let why = format!(
                    "port {name:?} of Service {}/{service}: give the Service manifest",
                    ing.namespace
                );
                draft.line(&id, "backend", Verdict::Unsupported(why));
                return None;
            }
        },
        (None, None) => "80".into(),
    };
    Some((service, port))
}

/// Whether every target is an address (a Service's endpoints), not a name:
/// endpoints come and go with their readiness, and a TCP check of each
/// (10,000 pools in a large cluster) would only add load. An ExternalName
/// Service's name is checked as a file's pool is.
fn addresses(targets: &[String]) -> bool {
    targets
        .iter()
        .all(|t| t.parse::<std::net::SocketAddr>().is_ok())
}

fn binding(pool: Option<String>, ing: &Object, service: &str, port: &str) -> super::Binding {
    super::Binding {
        pool,
        namespace: ing.namespace.clone(),
        service: service.to_string(),
        port: port.to_string(),
    }
}

/// ingress-nginx's `proxy-connect-timeout`: the ConfigMap's, else its
/// default of 5 s (fairgate's own pools default to 1 s).
fn connect_timeout(draft: &Draft<'_>) -> String {
    draft.globals.timeouts[0]
        .clone()
        .unwrap_or_else(|| "5s".into())
}

/// Adds a pool under `name`, or finds the same one there; a pool of
/// the same Service checked otherwise (another CA, no verification)
/// gets `name-2`, `name-3`...: one never takes another's place.
fn pool(draft: &mut Draft<'_>, name: String, node: Pool) -> String {
    let mut candidate = name.clone();
    for n in 2.. {
        match draft.upstreams.get(&candidate) {
            Some(existing) if *existing != node => candidate = format!("{name}-{n}"),
            Some(_) => return candidate,
            None => break,
        }
    }
    draft.upstreams.insert(candidate.clone(), node);
    candidate
}

fn service_port(draft: &Draft<'_>, namespace: &str, service: &str, port: &str) -> Option<String> {
    let svc = draft.object(Kind::Service, namespace, service)?;
    let Some(Value::Array(ports)) = svc.value.at("/spec/ports") else {
        return None;
    };
    ports
        .iter()
        .find(|p| text(p, &["name"]).as_deref() == Some(port))
        .and_then(|p| text(p, &["port"]))
}
