//! What every file of the import speaks: its options, what became of each
//! annotation or setting (`Verdict`, a report `Line`), and its result
//! (`Imported`). It uses none of them.

use std::fmt;
use std::path::PathBuf;

use super::emit::{yaml, Node};
use super::endpoints::{Binding, Guard};

/// The options of `fairgate import ingress-nginx`.
#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    /// Manifest files or directories: Ingresses, and the Services,
    /// ConfigMaps, Deployment and HorizontalPodAutoscaler they rely on.
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Write the policy here instead of standard output.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Write the report here instead of standard error.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// What to write: a fairgate policy, or Gateway API objects (Gateway,
    /// HTTPRoutes, GRPCRoutes, ReferenceGrants, fairgate RoutePolicies)
    /// with the base policy they name written to --base.
    #[arg(long, value_enum, default_value = "policy")]
    pub to: Target,
    /// With `--to gateway-api`: where the base policy goes (server, store,
    /// auth methods, limits, concurrency policies; the controller's
    /// ConfigMap). When the Gateway's listeners are shared among Gateways
    /// NAME-2, ... (the Gateway API allows 64 a Gateway), theirs go beside
    /// it: BASE-2.yaml, ...
    #[arg(long, required_if_eq("to", "gateway-api"))]
    pub base: Option<PathBuf>,
    /// With `--to gateway-api`: the Gateway written, as NAMESPACE/NAME.
    #[arg(long, default_value = "ingress/edge")]
    pub gateway: String,
    /// With `--to gateway-api`: the Gateway's class.
    #[arg(long, default_value = "fairgate")]
    pub gateway_class: String,
    /// Controller pods that enforced the limits (default: a Deployment or
    /// HorizontalPodAutoscaler of the controller among the inputs, else 1).
    #[arg(long)]
    pub replicas: Option<u64>,
    /// Mark every imported limit `shadow: true` (count, never refuse).
    #[arg(long)]
    pub shadow: bool,
    /// Where the TLS Secrets are mounted: DIR/NAMESPACE/SECRET/tls.crt and tls.key.
    #[arg(long, default_value = "/etc/fairgate/tls")]
    pub tls_dir: String,
    /// The shared Redis the fleet's buckets live in.
    #[arg(long, default_value = "redis://fairgate-redis:6379/0")]
    pub redis_url: String,
    /// The plain HTTP listener.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub listen: String,
    /// The TLS listener (when any Ingress has a TLS section).
    #[arg(long, default_value = "0.0.0.0:8443")]
    pub tls_listen: String,
    /// The admin listener (/healthz, /readyz, /metrics): loopback unless
    /// told otherwise, since it answers anyone who reaches it.
    #[arg(long, default_value = "127.0.0.1:9090")]
    pub admin_listen: String,
    /// Services are reached as NAME.NAMESPACE.svc.DOMAIN:PORT.
    #[arg(long, default_value = "cluster.local")]
    pub cluster_domain: String,
    /// Import Ingresses of this class (and those naming none).
    #[arg(long, default_value = "nginx")]
    pub ingress_class: String,
    /// The controller's ConfigMap as NAMESPACE/NAME (default: one named
    /// ingress-nginx-controller, nginx-configuration or nginx-ingress-controller).
    #[arg(long)]
    pub configmap: Option<String>,
    /// ingress-nginx's `--tcp-services-configmap` as NAMESPACE/NAME: each
    /// port a `server.tcp_services` listener.
    #[arg(long)]
    pub tcp_services_configmap: Option<String>,
    /// The controller's annotation prefix.
    #[arg(long, default_value = "nginx.ingress.kubernetes.io")]
    pub annotation_prefix: String,
    /// Controller mode (`fairgate serve` with `kubernetes:`): pools are
    /// the ready addresses of the Services' EndpointSlices and certificates
    /// the Secrets' PEM, both among the objects.
    #[arg(skip)]
    pub cluster: bool,
    /// In controller mode, the base policy's `auth.methods`: the only
    /// names `fairgate.dev/auth` may give (never a method another
    /// Ingress's annotations made, which would let one namespace put its
    /// hosts behind another's users).
    #[arg(skip)]
    pub base_methods: Option<std::collections::BTreeSet<String>>,
    /// In controller mode, the operator's hosts (the base policy's and
    /// the Gateway's listener hostnames, `*.d` for a wildcard), which no
    /// Ingress rule or certificate may take.
    #[arg(skip)]
    pub reserved_hosts: Vec<String>,
    /// In controller mode, the base policy's `limits` and `concurrency`
    /// names: the only ones `fairgate.dev/limits` and `/concurrency` may
    /// give (never one another namespace's Ingress made).
    #[arg(skip)]
    pub base_limits: Option<std::collections::BTreeSet<String>>,
    #[arg(skip)]
    pub base_concurrency: Option<std::collections::BTreeSet<String>>,
    /// In controller mode, the hosts of Ingresses withheld before the
    /// import (the build refused them): each answers `404` from a route of
    /// its own unless another Ingress serves it.
    #[arg(skip)]
    pub closed_hosts: Vec<String>,
    /// In controller mode, the hostnames the Gateway's routes name.
    #[arg(skip)]
    pub named_elsewhere: std::collections::BTreeSet<String>,
    /// In controller mode, whether the base asks every client for a
    /// certificate (`server.tls.client_ca`), which passthrough would skip.
    #[arg(skip)]
    pub base_client_ca: bool,
    /// In controller mode, what endpoints may not point at.
    #[arg(skip)]
    pub guard: Guard,
}

/// What `fairgate import ingress-nginx` writes.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Target {
    /// A fairgate policy file.
    #[default]
    Policy,
    /// Gateway API objects and a base policy.
    GatewayApi,
}

/// Why the import does not carry an input over, said to its author: in
/// the report and, in controller mode, in the object's Event. Read by
/// people only: no code branches on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(String);

impl Refusal {
    /// An error's message as the refusal.
    pub fn of(error: impl fmt::Display) -> Self {
        Refusal(error.to_string())
    }
}

impl From<String> for Refusal {
    fn from(why: String) -> Self {
        Refusal(why)
    }
}

impl From<&str> for Refusal {
    fn from(why: &str) -> Self {
        Refusal(why.to_string())
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<Refusal> for Verdict {
    fn from(why: Refusal) -> Self {
        Verdict::Unsupported(why.0)
    }
}

/// The objects that made the policy's entries whose names do not say
/// whose they are.
#[derive(Debug, Default, Clone)]
pub struct Sources {
    /// The Secret (`namespace/name`) of each of the policy's
    /// certificates, in its order.
    pub certificates: Vec<String>,
    /// A main route's name → the canary Ingress (`namespace/name`) folded
    /// into it (one a route, as in ingress-nginx): its `canary` key and
    /// its `-canary` route's header match and pool are the canary's.
    pub canaries: std::collections::BTreeMap<String, String>,
    /// The Ingress (`namespace/name`; empty: none) of each of the policy's
    /// routes, in its order.
    pub routes: Vec<String>,
    /// (section, name) → the Ingress that made the pool, limit,
    /// concurrency policy or auth method first.
    pub made: std::collections::BTreeMap<(&'static str, String), String>,
}

/// What became of one annotation or setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Mapped(String),
    Approximated(String),
    Unsupported(String),
}

/// One line of the report: whose (`namespace/name` of an Ingress, or
/// `configmap ns/name`), which annotation or key, and what became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub subject: String,
    pub item: String,
    pub verdict: Verdict,
}

impl fmt::Display for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (word, why) = match &self.verdict {
            Verdict::Mapped(why) => ("mapped", why),
            Verdict::Approximated(why) => ("approximated", why),
            Verdict::Unsupported(why) => ("not supported", why),
        };
        write!(f, "{}: {}: {word}", self.subject, self.item)?;
        if !why.is_empty() {
            write!(f, " ({why})")?;
        }
        Ok(())
    }
}

/// The import's result: the policy and the report.
pub struct Imported {
    /// The policy, written as text only by the command (`text`).
    pub policy: Node,
    /// The comment the text starts with.
    pub header: String,
    /// Whose the entries are that no name of theirs tells.
    pub sources: Sources,
    pub report: Vec<Line>,
    /// In controller mode, the pools made of endpoints.
    pub bindings: Vec<Binding>,
}

impl Imported {
    /// The policy as the command writes it.
    pub fn text(&self) -> String {
        format!("{}{}", self.header, yaml(&self.policy))
    }

    pub fn unsupported(&self) -> usize {
        self.report
            .iter()
            .filter(|l| matches!(l.verdict, Verdict::Unsupported(_)))
            .count()
    }
}
