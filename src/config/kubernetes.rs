//! `kubernetes`: the controller-mode section of the policy, and the
//! controller names fairgate answers to by default.

use std::time::Duration;

/// `kubernetes`: serve the Ingresses of a cluster (controller mode). The
/// rest of the file is the base their routes, pools and certificates are
/// added to. A change needs a restart: the watches are set up at start.
#[derive(Debug, Clone, PartialEq)]
pub struct Kubernetes {
    /// What `IngressClass.spec.controller` names to be served by us.
    pub controller: String,
    /// Namespaces watched; empty: all.
    pub namespaces: Vec<String>,
    /// Also serve Ingresses that name no class (always when one of our
    /// IngressClasses is the cluster's default).
    pub watch_without_class: bool,
    /// `namespace/name` of the Service whose load-balancer addresses are
    /// published in `status.loadBalancer`.
    pub publish_service: Option<String>,
    /// Addresses published instead (IPs or host names).
    pub publish_address: Vec<String>,
    /// `namespace/name` of the controller-wide settings (ingress-nginx keys).
    pub configmap: Option<String>,
    /// Services are named `NAME.NAMESPACE.svc.DOMAIN` (ExternalName aside).
    pub cluster_domain: String,
    /// The prefix of the ingress-nginx annotations read.
    pub annotation_prefix: String,
    /// The Lease whose holder writes Ingress status.
    pub lease_name: String,
    pub lease_duration: Duration,
    /// How often a Warning Event whose cause stands is written again.
    pub event_refresh: Duration,
    /// ingress-nginx pods that enforced the limit annotations, each on its
    /// own: the fleet-wide limits are that many times an annotation's.
    pub nginx_replicas: u64,
    /// `namespace/name` of the Gateway (Gateway API) this deployment
    /// serves, when its GatewayClass names `gateway_controller`.
    pub gateway: Option<String>,
    /// What `GatewayClass.spec.controllerName` names to be served by us.
    pub gateway_controller: String,
    /// Endpoints and ExternalName targets may be loopback, link-local or
    /// unspecified addresses (never the gateway's own listeners).
    pub allow_local_endpoints: bool,
    /// The validating admission webhook, when served.
    pub admission: Option<Admission>,
}

/// `kubernetes.admission`: where the validating webhook listens (HTTPS)
/// and the certificate it shows the API server.
#[derive(Debug, Clone, PartialEq)]
pub struct Admission {
    pub listen: std::net::SocketAddr,
    pub cert_file: std::path::PathBuf,
    pub key_file: std::path::PathBuf,
}

/// The controller name fairgate answers to unless told otherwise.
pub const CONTROLLER_NAME: &str = "fairgate.dev/ingress-controller";

/// The GatewayClass controller name fairgate answers to unless told otherwise.
pub const GATEWAY_CONTROLLER_NAME: &str = "fairgate.dev/gateway-controller";
