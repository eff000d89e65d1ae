//! The policy as the import has drafted it so far, and its report:
//! `Draft`, which every annotation family reads the inputs from and writes
//! its pools, limits and routes and its report lines into, and `Globals`,
//! the controller's settings with ingress-nginx's defaults. It holds
//! state; what an annotation or a key becomes is decided in the families.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::Value;

use super::manifests::Object;
use super::out::{AuthMethod, Concurrency, ExternalAuth, Limit, Pool, ServerSetting};
use super::routes::Route;
use super::{Line, Options, Verdict};
use crate::k8s::Kind;

/// The controller's ConfigMap keys the import reads, with ingress-nginx's defaults.
pub struct Globals {
    pub limit_req_status: u16,
    pub limit_conn_status: u16,
    /// `proxy-body-size`: None is no limit (`0`).
    pub body_size: Option<String>,
    pub ssl_redirect: bool,
    pub force_ssl_redirect: bool,
    /// `proxy-connect-timeout`, `proxy-read-timeout`, `proxy-send-timeout`.
    pub timeouts: [Option<String>; 3],
    pub next_upstream: Option<String>,
    pub next_upstream_tries: Option<String>,
    pub hsts: Hsts,
    /// `global-auth-url` and its companions, when they carried over: the
    /// external method of every Ingress without its own.
    pub global_auth: Option<ExternalAuth>,
    /// `allow-snippet-annotations: "true"`: snippet annotations are read
    /// (off by default, as in ingress-nginx since 1.9).
    pub snippets: bool,
}

impl Default for Globals {
    fn default() -> Self {
        Globals {
            limit_req_status: 503,
            limit_conn_status: 503,
            body_size: Some("1MiB".into()),
            ssl_redirect: true,
            force_ssl_redirect: false,
            timeouts: [None, None, None],
            next_upstream: None,
            next_upstream_tries: None,
            hsts: Hsts::default(),
            global_auth: None,
            snippets: false,
        }
    }
}

/// `hsts`, `hsts-max-age`, `hsts-include-subdomains`, `hsts-preload`:
/// the header ingress-nginx sends on the HTTPS answers of hosts it has a
/// certificate for.
pub struct Hsts {
    pub on: bool,
    pub max_age: String,
    pub include_subdomains: bool,
    pub preload: bool,
}

impl Default for Hsts {
    fn default() -> Self {
        Hsts {
            on: true,
            max_age: "31536000".into(),
            include_subdomains: true,
            preload: false,
        }
    }
}

impl Hsts {
    /// The `Strict-Transport-Security` value, when it is sent.
    pub fn value(&self) -> Option<String> {
        let mut value = format!("max-age={}", self.max_age);
        if self.include_subdomains {
            value.push_str("; includeSubDomains");
        }
        if self.preload {
            value.push_str("; preload");
        }
        self.on.then_some(value)
    }
}

/// The import under way: its inputs, the controller's settings, what the
/// policy has so far (pools, limits, concurrency policies, certificates,
/// routes, server keys) and the report.
pub struct Draft<'a> {
    pub options: &'a Options,
    pub objects: &'a [&'a Object],
    /// The Services and EndpointSlices of `objects`, by Service.
    pub services: super::Services<'a>,
    /// `objects` by kind, namespace and name (`object`).
    index: HashMap<(&'a str, &'a str, &'a str), &'a Object>,
    pub globals: Globals,
    pub replicas: u64,
    pub report: Vec<Line>,
    pub upstreams: BTreeMap<String, Pool>,
    pub limits: Vec<(String, Limit)>,
    pub concurrency: Vec<(String, Concurrency)>,
    /// `auth.methods` of the Ingresses imported.
    pub methods: Vec<(String, AuthMethod)>,
    /// TLS Secrets (namespace/name) → the hosts they serve.
    pub certs: BTreeMap<String, Vec<String>>,
    pub tls_hosts: BTreeSet<String>,
    /// The Ingress (`namespace/name`) whose TLS section serves each host.
    pub tls_owners: BTreeMap<String, String>,
    /// `auth-tls-*`: each host's client certificates and the Ingress that set them.
    pub client_certs: BTreeMap<String, (super::out::ClientCerts, String)>,
    /// `ssl-passthrough`: each host's pool and the Ingress that asked.
    pub passthrough: BTreeMap<String, (super::out::Passthrough, String)>,
    pub routes: Vec<Route>,
    /// A main route's name → the canary Ingress (`namespace/name`) folded
    /// into it (one a route).
    pub canaries: BTreeMap<String, String>,
    /// (section, name) → the Ingress that made the entry first.
    pub made: BTreeMap<(&'static str, String), String>,
    /// Each host, path and path type served, and the Ingress
    /// (`namespace/name`) whose it is: the first served.
    pub claimed: HashMap<(String, String, String), String>,
    /// The hosts of Ingresses not imported.
    pub closed: BTreeSet<String>,
    /// `from-to-www-redirect`: the other name of each host (with or
    /// without `www.`), the URL its requests are sent to (scheme and host)
    /// and the Ingress that asks.
    pub www: Vec<(String, String, String)>,
    /// The oldest Ingress's age for each rule host (`server-alias`), made
    /// when first asked for.
    pub host_ages: Option<std::sync::Arc<std::collections::HashMap<String, (String, String)>>>,
    /// Compiled regular-expression bytes imported, by namespace.
    pub regex_bytes: BTreeMap<String, usize>,
    /// In controller mode, the pools made of endpoints.
    pub bindings: Vec<super::Binding>,
    pub server: Vec<ServerSetting>,
    /// Why no Ingress is imported: a server-wide access rule that did not
    /// carry over.
    pub withheld: Option<String>,
    /// Hosts (None: rules without one) where ingress-nginx made every path
    /// a regular expression, with the Ingress and annotation that did.
    pub regex_hosts: BTreeMap<Option<String>, (String, &'static str)>,
}

impl<'a> Draft<'a> {
    pub fn new(objects: &'a [&'a Object], options: &'a Options) -> Self {
        Draft {
            options,
            objects,
            services: super::Services::new(objects.iter().copied()),
            index: objects
                .iter()
                .rev()
                .copied()
                .map(|o| ((o.kind.as_str(), o.namespace.as_str(), o.name.as_str()), o))
                .collect(),
            globals: Globals::default(),
            replicas: 1,
            report: Vec::new(),
            upstreams: BTreeMap::new(),
            limits: Vec::new(),
            concurrency: Vec::new(),
            methods: Vec::new(),
            certs: BTreeMap::new(),
            tls_hosts: BTreeSet::new(),
            tls_owners: BTreeMap::new(),
            client_certs: BTreeMap::new(),
            canaries: BTreeMap::new(),
            made: BTreeMap::new(),
            passthrough: BTreeMap::new(),
            routes: Vec::new(),
            claimed: HashMap::new(),
            closed: BTreeSet::new(),
            www: Vec::new(),
            host_ages: None,
            regex_bytes: BTreeMap::new(),
            bindings: Vec::new(),
            server: Vec::new(),
            withheld: None,
            regex_hosts: BTreeMap::new(),
        }
    }

    /// Adds a line to the report.
    pub fn line(&mut self, subject: &str, item: &str, verdict: Verdict) {
        self.report.push(Line {
            subject: subject.to_string(),
            item: item.to_string(),
            verdict,
        });
    }

    /// Whether a TLS host (exact, or a one-label wildcard) names `host`.
    pub fn covered(&self, host: &str) -> bool {
        let wildcard = host.split_once('.').map(|(_, rest)| format!("*.{rest}"));
        self.tls_hosts.contains(host) || wildcard.is_some_and(|w| self.tls_hosts.contains(&w))
    }

    /// A ConfigMap by `namespace/name`, or `name` in `namespace`.
    pub fn configmap_data(&self, namespace: &str, reference: &str) -> Option<&'a Value> {
        let (ns, name) = reference.split_once('/').unwrap_or((namespace, reference));
        self.object(Kind::ConfigMap, ns, name)
            .and_then(|o| o.value.get("data"))
    }

    /// The object of `kind` at `namespace/name`; the first of a name
    /// given twice.
    pub fn object(&self, kind: Kind, namespace: &str, name: &str) -> Option<&'a Object> {
        self.index.get(&(kind.name(), namespace, name)).copied()
    }

    /// A Secret of `namespace`.
    pub fn secret(&self, namespace: &str, name: &str) -> Option<&'a Object> {
        self.object(Kind::Secret, namespace, name)
    }
}
