//! Assembles the policy: the controller's ConfigMap and replica count, the
//! Services behind each backend, TLS Secrets, one route per Ingress path
//! (ordered as nginx picks locations), canaries folded into their main
//! routes, and the YAML text.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::annotations::{self, Protocol};
use super::emit::{self, Node};
use super::manifests::{text, Object};
use super::names;
use super::proxy_ssl::Verify;
use super::streaming;
use super::units;
use super::{Imported, Line, Options, Verdict};

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

    /// One ConfigMap key.
    fn key(&mut self, key: &str, value: &str) -> Verdict {
        let flag = match value {
            "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
            "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
            _ => None,
        };
        match (key, flag) {
            ("hsts", Some(on)) => self.on = on,
            ("hsts-include-subdomains", Some(on)) => self.include_subdomains = on,
            ("hsts-preload", Some(on)) => self.preload = on,
            ("hsts-max-age", _)
                if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) =>
            {
                self.max_age = value.to_string()
            }
            ("hsts-max-age", _) => {
                return Verdict::Unsupported(format!("{value:?} is not a number of seconds"))
            }
            _ => return Verdict::Unsupported(format!("{value:?} is not true or false")),
        }
        Verdict::Mapped(
            "the Strict-Transport-Security header of the routes of hosts with a TLS section".into(),
        )
    }
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
        }
    }
}

/// How a path is matched.
#[derive(Debug, Clone, PartialEq)]
pub enum PathRule {
    Any,
    Exact(String),
    Prefix(String),
    Regex(String),
}

/// One route of the policy.
#[derive(Debug, Clone)]
pub struct Route {
    pub name: String,
    pub host: Option<String>,
    pub path: PathRule,
    /// `match.headers`: a canary's header route.
    pub headers: Option<Node>,
    /// The route's keys after `name` and `match`, in the order written.
    pub keys: BTreeMap<&'static str, Node>,
    /// The Ingress path it came from: host, path and pathType, for canaries.
    pub origin: (String, String, String),
    /// Order among routes of the same host and path length: a main route
    /// after its canary's header route, a default backend last.
    pub rank: u8,
    /// On a host whose every path ingress-nginx made a regular expression.
    pub regex: bool,
}

/// The order keys are written in.
const KEY_ORDER: &[&str] = &[
    "upstream",
    "auth",
    "redirect",
    "https_redirect",
    "app_root",
    "limits",
    "concurrency",
    "limit_exempt_cidrs",
    "allow_cidrs",
    "deny_cidrs",
    "max_body",
    "rewrite",
    "request_headers",
    "response_headers",
    "timeouts",
    "retries",
    "cors",
    "canary",
];

pub struct Import<'a> {
    pub options: &'a Options,
    pub objects: &'a [Object],
    pub globals: Globals,
    pub replicas: u64,
    pub report: Vec<Line>,
    pub upstreams: BTreeMap<String, Node>,
    pub limits: Vec<(String, Node)>,
    pub concurrency: Vec<(String, Node)>,
    /// TLS Secrets (namespace/name) → the hosts they serve.
    pub certs: BTreeMap<String, Vec<String>>,
    pub tls_hosts: BTreeSet<String>,
    pub routes: Vec<Route>,
    pub server: Vec<(String, Node)>,
    /// Why no Ingress is imported: a server-wide access rule that did not
    /// carry over.
    pub withheld: Option<String>,
    /// Hosts (None: rules without one) where ingress-nginx made every path
    /// a regular expression, with the Ingress and annotation that did.
    pub regex_hosts: BTreeMap<Option<String>, (String, &'static str)>,
}

impl<'a> Import<'a> {
    pub fn new(objects: &'a [Object], options: &'a Options) -> Self {
        Import {
            options,
            objects,
            globals: Globals::default(),
            replicas: 1,
            report: Vec::new(),
            upstreams: BTreeMap::new(),
            limits: Vec::new(),
            concurrency: Vec::new(),
            certs: BTreeMap::new(),
            tls_hosts: BTreeSet::new(),
            routes: Vec::new(),
            server: Vec::new(),
            withheld: None,
            regex_hosts: BTreeMap::new(),
        }
    }

    pub fn line(&mut self, subject: &str, item: &str, verdict: Verdict) {
        self.report.push(Line {
            subject: subject.to_string(),
            item: item.to_string(),
            verdict,
        });
    }

    pub fn run(mut self) -> Imported {
        self.configmap();
        self.count_replicas();
        self.admin();
        let ingresses: Vec<&Object> = self.ingresses();
        self.defaults_said();
        for ing in &ingresses {
            self.tls(ing);
        }
        self.hsts_said();
        let (canaries, mains): (Vec<&Object>, Vec<&Object>) =
            ingresses.into_iter().partition(|i| {
                annotations::get(i, &self.options.annotation_prefix, "canary")
                    == Some("true".into())
            });
        for ing in &mains {
            for (host, why) in self.regex_triggers(ing) {
                self.regex_hosts.entry(host).or_insert((ing.id(), why));
            }
        }
        for ing in mains {
            self.ingress(ing);
        }
        for ing in canaries {
            self.canary(ing);
        }
        self.routes.sort_by_key(order);
        Imported {
            policy: self.policy(),
            report: self.report,
        }
    }

    /// Ingresses of the class imported; others are reported as skipped.
    fn ingresses(&mut self) -> Vec<&'a Object> {
        let mut out = Vec::new();
        for ing in self.objects.iter().filter(|o| o.kind == "Ingress") {
            let class = ing
                .text(&["spec", "ingressClassName"])
                .or_else(|| ing.text(&["metadata", "annotations", "kubernetes.io/ingress.class"]));
            match class {
                Some(c) if c != self.options.ingress_class => self.line(
                    &ing.id(),
                    "ingressClassName",
                    Verdict::Approximated(format!(
                        "class {c}, not {}: not imported",
                        self.options.ingress_class
                    )),
                ),
                _ => match names::ingress_problem(ing) {
                    None => out.push(ing),
                    Some(why) => {
                        // The name itself may be what is wrong: quoted.
                        let subject = match names::dns1123_label(&ing.namespace)
                            && names::dns1123_subdomain(&ing.name)
                        {
                            true => ing.id(),
                            false => format!("{:?}", ing.id()),
                        };
                        let why = format!("not imported: {why}; it would become a file path, a host name or a key");
                        self.line(&subject, "paths", Verdict::Unsupported(why));
                    }
                },
            }
        }
        out
    }

    /// The controller's ConfigMap: its keys become defaults of every route.
    fn configmap(&mut self) {
        let named = |o: &&Object| match &self.options.configmap {
            Some(id) => &o.id() == id,
            None => matches!(
                o.name.as_str(),
                "ingress-nginx-controller" | "nginx-configuration" | "nginx-ingress-controller"
            ),
        };
        let Some(cm) = self
            .objects
            .iter()
            .filter(|o| o.kind == "ConfigMap")
            .find(named)
        else {
            let verdict = match &self.options.configmap {
                Some(id) => Verdict::Unsupported(format!(
                    "ConfigMap {id} is not among the inputs; its settings are not known"
                )),
                None => Verdict::Approximated(
                    "no controller ConfigMap among the inputs: ingress-nginx's defaults assumed \
                     (give it, or name it with --configmap NS/NAME)"
                        .into(),
                ),
            };
            self.line("controller", "configmap", verdict);
            return;
        };
        let subject = format!("configmap {}", cm.id());
        let Some(Value::Object(data)) = cm.value.get("data") else {
            return;
        };
        for (key, value) in data {
            let value = text(value, &[]).unwrap_or_default();
            let verdict = self.configmap_key(key, &value);
            self.line(&subject, key, verdict);
        }
    }

    fn configmap_key(&mut self, key: &str, value: &str) -> Verdict {
        let g = &mut self.globals;
        match key {
            "limit-req-status-code" | "limit-conn-status-code" => refusal_status(g, key, value),
            "proxy-body-size" => match units::nginx_size(value) {
                Some(size) => {
                    g.body_size = size;
                    Verdict::Mapped("the max_body of routes without their own".into())
                }
                None => Verdict::Unsupported(format!("{value:?} is not an nginx size")),
            },
            "ssl-redirect" | "force-ssl-redirect" => {
                let on = value == "true";
                if key == "ssl-redirect" {
                    g.ssl_redirect = on;
                } else {
                    g.force_ssl_redirect = on;
                }
                Verdict::Mapped("the https_redirect of routes without the annotation".into())
            }
            "proxy-connect-timeout" | "proxy-read-timeout" | "proxy-send-timeout" => {
                timeout(g, key, value)
            }
            "hsts" | "hsts-max-age" | "hsts-include-subdomains" | "hsts-preload" => {
                g.hsts.key(key, value)
            }
            k if streaming::KEYS.contains(&k) => streaming::verdict(k, value),
            "proxy-next-upstream" => {
                g.next_upstream = Some(value.to_string());
                Verdict::Mapped("the retries of routes without their own".into())
            }
            "proxy-next-upstream-tries" => {
                g.next_upstream_tries = Some(value.to_string());
                Verdict::Mapped("the retries of routes without their own".into())
            }
            "enable-underscores-in-headers" => {
                self.server
                    .push(("allow_underscores_in_headers".into(), Node::Bool(value == "true")));
                Verdict::Mapped("server.allow_underscores_in_headers".into())
            }
            "use-forwarded-headers" | "compute-full-forwarded-for" | "forwarded-for-header" => {
                Verdict::Approximated(
                    "list the load balancer's addresses in server.trusted_proxies: the manifests do not say them"
                        .into(),
                )
            }
            "whitelist-source-range" | "denylist-source-range" | "global-auth-url" | "block-cidrs"
            | "block-user-agents" | "block-referers" => self.configmap_access(key, value),
            k if k.ends_with("-snippet") => self.configmap_access(key, value),
            "use-proxy-protocol" if value == "true" => Verdict::Unsupported(
                "set server.proxy_protocol: true and list the load balancer in server.trusted_proxies \
                 (the only peers whose PROXY header is believed); the manifests do not say its addresses"
                    .into(),
            ),
            "allow-snippet-annotations" | "annotations-risk-level" => {
                Verdict::Mapped("nothing to do: fairgate runs no nginx snippets".into())
            }
            _ => Verdict::Unsupported("no fairgate equivalent".into()),
        }
    }

    /// The ConfigMap's rules for every Ingress: address lists, or what
    /// withholds them all.
    fn configmap_access(&mut self, key: &str, value: &str) -> Verdict {
        let lost = format!("the ConfigMap's {key} did not carry over");
        let target = match key {
            "whitelist-source-range" => "allow_cidrs",
            "denylist-source-range" => "deny_cidrs",
            k if k.ends_with("-snippet") => {
                self.withheld = Some(lost);
                return Verdict::Unsupported(
                    "nginx configuration for every Ingress; never translated".into(),
                );
            }
            _ => {
                self.withheld = Some(lost);
                return Verdict::Unsupported(
                    "a rule for every Ingress that fairgate cannot carry over".into(),
                );
            }
        };
        match units::cidrs(value) {
            Ok(list) => {
                self.server.push((target.into(), Node::strs(list)));
                Verdict::Mapped(format!("server.{target}"))
            }
            Err(why) => {
                self.withheld = Some(lost);
                Verdict::Unsupported(why)
            }
        }
    }

    /// `--replicas`, else the controller's HorizontalPodAutoscaler (its
    /// maximum) or Deployment, else 1.
    fn count_replicas(&mut self) {
        let subject = "controller";
        if let Some(n) = self.options.replicas {
            self.replicas = n.max(1);
            let why = format!("{n} pods, from --replicas");
            self.line(subject, "replicas", Verdict::Mapped(why));
            return;
        }
        let controller = self.objects.iter().find(|o| {
            o.kind == "Deployment"
                && (o.name.contains("ingress-nginx")
                    || o.value.to_string().contains("ingress-nginx/controller"))
        });
        let hpa = controller.and_then(|d| {
            self.objects.iter().find(|o| {
                o.kind == "HorizontalPodAutoscaler"
                    && o.text(&["spec", "scaleTargetRef", "name"]).as_deref() == Some(&d.name)
            })
        });
        let (n, verdict) = match (controller, hpa) {
            (_, Some(h)) => {
                let max = h
                    .text(&["spec", "maxReplicas"])
                    .and_then(|t| t.parse().ok())
                    .unwrap_or(1);
                let min = h
                    .text(&["spec", "minReplicas"])
                    .unwrap_or_else(|| "1".into());
                let why = format!(
                    "HorizontalPodAutoscaler {} scales {min} to {max} pods; the fleet limits admit what {max} pods did (give --replicas to choose)",
                    h.id()
                );
                (max, Verdict::Approximated(why))
            }
            (Some(d), None) => {
                let n = d
                    .text(&["spec", "replicas"])
                    .and_then(|t| t.parse().ok())
                    .unwrap_or(1);
                (
                    n,
                    Verdict::Mapped(format!("{n} pods, from Deployment {}", d.id())),
                )
            }
            (None, None) => (
                1,
                Verdict::Approximated(
                    "no --replicas and no controller Deployment among the inputs: 1 pod assumed"
                        .into(),
                ),
            ),
        };
        self.replicas = n.max(1);
        self.line(subject, "replicas", verdict);
    }

    /// The connect timeout ingress-nginx used when its ConfigMap did not say.
    fn defaults_said(&mut self) {
        if self.globals.timeouts[0].is_none() {
            let why =
                "connect_timeout: 5s on every pool, ingress-nginx's default (fairgate's own is 1s)";
            self.line(
                "controller",
                "proxy-connect-timeout",
                Verdict::Mapped(why.into()),
            );
        }
    }

    /// The HSTS header ingress-nginx sent on its TLS hosts, when there are any.
    fn hsts_said(&mut self) {
        let Some(value) = self
            .globals
            .hsts
            .value()
            .filter(|_| !self.tls_hosts.is_empty())
        else {
            return;
        };
        let why = format!(
            "response_headers.set Strict-Transport-Security: \"{value}\" on the routes of hosts with a TLS section, \
             as ingress-nginx sent it (ConfigMap hsts, hsts-max-age, hsts-include-subdomains, hsts-preload); \
             on the upstream's answers, over plain HTTP too (browsers ignore it there), and not on the gateway's \
             own answers (refusals, redirects)"
        );
        self.line("controller", "hsts", Verdict::Approximated(why));
    }

    /// `admin.listen`, said: its endpoints answer without authentication.
    fn admin(&mut self) {
        let listen = self.options.admin_listen.clone();
        let loopback = listen
            .parse::<std::net::SocketAddr>()
            .is_ok_and(|a| a.ip().is_loopback());
        let why = if loopback {
            format!(
                "{listen}: /healthz, /readyz and /metrics answer without authentication, on loopback only; \
                 for kubelet probes or a Prometheus scrape by pod IP give --admin-listen 0.0.0.0:9090 \
                 and reach that port only from inside the cluster \
                 (deploy/kubernetes publishes it by the ClusterIP Service fairgate-admin, never by the traffic Service)"
            )
        } else {
            format!(
                "{listen}, from --admin-listen: /healthz, /readyz and /metrics answer anyone who reaches it, \
                 without authentication; reach that port only from inside the cluster \
                 (deploy/kubernetes publishes it by the ClusterIP Service fairgate-admin, never by the traffic Service)"
            )
        };
        self.line("controller", "admin.listen", Verdict::Mapped(why));
    }

    /// TLS sections: certificate files where the Secret is mounted.
    fn tls(&mut self, ing: &Object) {
        let Some(Value::Array(sections)) = ing.value.pointer("/spec/tls") else {
            return;
        };
        for section in sections {
            let hosts: Vec<String> = match section.get("hosts") {
                Some(Value::Array(h)) => h.iter().filter_map(|v| text(v, &[])).collect(),
                _ => Vec::new(),
            };
            let Some(secret) = text(section, &["secretName"]) else {
                let why = "no secretName: ingress-nginx serves its default certificate, which is not in the manifests";
                self.line(&ing.id(), "tls", Verdict::Unsupported(why.into()));
                continue;
            };
            let id = format!("{}/{secret}", ing.namespace);
            let mut fresh = Vec::new();
            for h in hosts {
                let h = h.to_ascii_lowercase();
                if self.tls_hosts.insert(h.clone()) {
                    fresh.push(h);
                }
            }
            self.certs.entry(id.clone()).or_default().extend(fresh);
            let why = format!(
                "certificate {}/{id}/tls.crt and tls.key",
                self.options.tls_dir
            );
            self.line(&ing.id(), "tls", Verdict::Mapped(why));
        }
    }

    /// The hosts where an Ingress makes ingress-nginx read every path as a
    /// regular expression (its `enforceRegexModifier`): all of them with
    /// `use-regex`, those of the paths a `rewrite-target` changes.
    fn regex_triggers(&self, ing: &Object) -> Vec<(Option<String>, &'static str)> {
        let prefix = &self.options.annotation_prefix;
        let use_regex =
            annotations::get(ing, prefix, "use-regex").is_some_and(|v| units::go_bool(&v));
        let target = annotations::get(ing, prefix, "rewrite-target").filter(|t| !t.is_empty());
        let mut out = Vec::new();
        for (host, path, kind, _) in paths(ing) {
            let why = match () {
                _ if kind == "Default" => continue,
                _ if use_regex => "use-regex",
                _ if target.as_ref().is_some_and(|t| *t != path) => "rewrite-target",
                _ => continue,
            };
            if !out.iter().any(|(h, _)| *h == host) {
                out.push((host, why));
            }
        }
        out
    }

    /// Says, once per host, that this Ingress's paths there are regular
    /// expressions because another Ingress of the host made them so.
    fn regex_lines(&mut self, ing: &Object) {
        let own: Vec<Option<String>> = self
            .regex_triggers(ing)
            .into_iter()
            .map(|(h, _)| h)
            .collect();
        let mut said: Vec<Option<String>> = Vec::new();
        for (host, _, kind, _) in paths(ing) {
            if kind == "Default" || own.contains(&host) || said.contains(&host) {
                continue;
            }
            let Some((by, annotation)) = self.regex_hosts.get(&host).cloned() else {
                continue;
            };
            let why = format!(
                "{}: every path is a path_regex \"(?i)PATH.*\", case-insensitive and matched from the start \
                 as a prefix, Exact and Prefix alike, because {by} uses {annotation} there: ingress-nginx makes \
                 every path of such a host a ~* location, tried longest path first",
                host.as_deref().map_or("rules without a host".to_string(), |h| format!("host {h}"))
            );
            self.line(&ing.id(), "paths", Verdict::Mapped(why));
            said.push(host);
        }
    }

    /// One route per path of a main (not canary) Ingress.
    fn ingress(&mut self, ing: &Object) {
        let mut plan = annotations::plan(self, ing);
        if let Some(why) = plan.withheld.take().or_else(|| self.withheld.clone()) {
            self.line(
                &ing.id(),
                "paths",
                Verdict::Unsupported(format!("not imported: {why}")),
            );
            return;
        }
        self.regex_lines(ing);
        let paths = paths(ing);
        for (i, (host, path, kind, backend)) in paths.into_iter().enumerate() {
            let Some(upstream) = self.upstream(ing, &backend, plan.protocol, &plan.verify) else {
                continue;
            };
            let name = format!(
                "{}-{i}",
                names::policy_name(&format!("{}_{}", ing.namespace, ing.name))
            );
            if let Some(route) =
                annotations::route(self, ing, &mut plan, name, host, path, kind, upstream)
            {
                self.routes.push(route);
            }
        }
    }

    /// A canary Ingress: its paths send some requests of the main route of
    /// the same host and path to its backend.
    fn canary(&mut self, ing: &Object) {
        let mut targets = Vec::new();
        for (host, path, kind, backend) in paths(ing) {
            let origin = (host.clone().unwrap_or_default(), path.clone(), kind.clone());
            let Some(main) = self.routes.iter().position(|r| r.origin == origin) else {
                let why = format!(
                    "no main Ingress serves host {} path {path}",
                    host.as_deref().unwrap_or("*")
                );
                self.line(&ing.id(), "canary", Verdict::Unsupported(why));
                continue;
            };
            let protocol = annotations::protocol_of(self, ing);
            let verify = Verify::default();
            if let Some(upstream) = self.upstream(ing, &backend, protocol, &verify) {
                targets.push((main, upstream));
            }
        }
        annotations::canary(self, ing, &targets);
    }

    /// The upstream pool for a backend: the Service's cluster DNS name and port.
    pub fn upstream(
        &mut self,
        ing: &Object,
        backend: &Value,
        protocol: Protocol,
        verify: &Verify,
    ) -> Option<String> {
        let id = ing.id();
        // networking.k8s.io/v1 `service: {name, port}`, or v1beta1's
        // `serviceName` and `servicePort` (a number or a port name).
        let legacy_port = text(backend, &["servicePort"]);
        let legacy_number = legacy_port.clone().filter(|p| p.parse::<u16>().is_ok());
        let legacy_name = legacy_port.filter(|p| p.parse::<u16>().is_err());
        let service =
            text(backend, &["service", "name"]).or_else(|| text(backend, &["serviceName"]));
        let Some(service) = service else {
            let why = "a resource backend (not a Service) has no address to forward to";
            self.line(&id, "backend", Verdict::Unsupported(why.into()));
            return None;
        };
        let port = match (
            text(backend, &["service", "port", "number"]).or(legacy_number),
            text(backend, &["service", "port", "name"]).or(legacy_name),
        ) {
            (Some(n), _) => n,
            (None, Some(name)) => match self.service_port(&ing.namespace, &service, &name) {
                Some(n) => n,
                None => {
                    let why = format!(
                        "port {name:?} of Service {}/{service}: give the Service manifest",
                        ing.namespace
                    );
                    self.line(&id, "backend", Verdict::Unsupported(why));
                    return None;
                }
            },
            (None, None) => "80".into(),
        };
        let name = format!(
            "{}-{port}{}",
            names::policy_name(&format!("{}_{service}", ing.namespace)),
            protocol.suffix()
        );
        let target = format!(
            "{service}.{}.svc.{}:{port}",
            ing.namespace, self.options.cluster_domain
        );
        let mut node = Node::map([("targets", Node::strs([target]))]);
        protocol.apply(&mut node, verify);
        node.set("connect_timeout", Node::str(self.connect_timeout()));
        Some(self.pool(name, node))
    }

    /// ingress-nginx's `proxy-connect-timeout`: the ConfigMap's, else its
    /// default of 5 s (fairgate's own pools default to 1 s).
    fn connect_timeout(&self) -> String {
        self.globals.timeouts[0]
            .clone()
            .unwrap_or_else(|| "5s".into())
    }

    /// Adds a pool under `name`, or finds the same one there; a pool of
    /// the same Service checked otherwise (another CA, no verification)
    /// gets `name-2`, `name-3`...: one never takes another's place.
    fn pool(&mut self, name: String, node: Node) -> String {
        let mut candidate = name.clone();
        for n in 2.. {
            match self.upstreams.get(&candidate) {
                Some(existing) if *existing != node => candidate = format!("{name}-{n}"),
                Some(_) => return candidate,
                None => break,
            }
        }
        self.upstreams.insert(candidate.clone(), node);
        candidate
    }

    fn service_port(&self, namespace: &str, service: &str, port: &str) -> Option<String> {
        let svc = self
            .objects
            .iter()
            .find(|o| o.kind == "Service" && o.namespace == namespace && o.name == service)?;
        let Some(Value::Array(ports)) = svc.value.pointer("/spec/ports") else {
            return None;
        };
        ports
            .iter()
            .find(|p| text(p, &["name"]).as_deref() == Some(port))
            .and_then(|p| text(p, &["port"]))
    }

    /// A ConfigMap by `namespace/name`, or `name` in `namespace`.
    pub fn configmap_data(&self, namespace: &str, reference: &str) -> Option<&'a Value> {
        let (ns, name) = reference.split_once('/').unwrap_or((namespace, reference));
        self.objects
            .iter()
            .find(|o| o.kind == "ConfigMap" && o.namespace == ns && o.name == name)
            .and_then(|o| o.value.get("data"))
    }

    fn policy(&self) -> String {
        let mut server = vec![(
            "listen".to_string(),
            Node::strs([self.options.listen.clone()]),
        )];
        if !self.certs.is_empty() {
            let certificates = self.certs.iter().map(|(id, hosts)| {
                let dir = format!("{}/{id}", self.options.tls_dir);
                let mut cert = Node::map([
                    ("cert_file", Node::str(format!("{dir}/tls.crt"))),
                    ("key_file", Node::str(format!("{dir}/tls.key"))),
                ]);
                if !hosts.is_empty() {
                    cert.set("hosts", Node::strs(hosts.clone()));
                }
                cert
            });
            server.push((
                "tls".into(),
                Node::map([
                    ("listen", Node::str(self.options.tls_listen.clone())),
                    ("certificates", Node::Seq(certificates.collect())),
                ]),
            ));
        }
        server.extend(self.server.iter().cloned());
        let mut root = vec![
            ("server".to_string(), Node::Map(server)),
            (
                "admin".into(),
                Node::map([("listen", Node::str(self.options.admin_listen.clone()))]),
            ),
            (
                "store".into(),
                Node::map([
                    ("kind", Node::str("redis")),
                    ("url", Node::str(self.options.redis_url.clone())),
                ]),
            ),
            ("default_limits".into(), Node::str("none")),
            (
                "upstreams".into(),
                Node::Map(self.upstreams.clone().into_iter().collect()),
            ),
        ];
        if !self.limits.is_empty() {
            root.push(("limits".into(), Node::Map(self.limits.clone())));
        }
        if !self.concurrency.is_empty() {
            root.push(("concurrency".into(), Node::Map(self.concurrency.clone())));
        }
        root.push((
            "routes".into(),
            Node::Seq(self.routes.iter().map(route_node).collect()),
        ));
        let uncovered = !self.certs.is_empty()
            && self
                .routes
                .iter()
                .any(|r| r.host.as_ref().is_some_and(|h| !self.covered(h)));
        if uncovered {
            root.push((
                "acknowledge".into(),
                Node::strs(["server.tls_host_uncovered"]),
            ));
        }
        format!(
            "# Imported from ingress-nginx by `fairgate import ingress-nginx`; the\n\
             # report says what became of every annotation. Limits are sized for the\n\
             # whole fleet: ingress-nginx counted per controller pod ({} here).\n{}",
            self.replicas,
            emit::yaml(&Node::Map(root))
        )
    }

    /// Whether a TLS host (exact, or a one-label wildcard) names `host`.
    pub fn covered(&self, host: &str) -> bool {
        let wildcard = host.split_once('.').map(|(_, rest)| format!("*.{rest}"));
        self.tls_hosts.contains(host) || wildcard.is_some_and(|w| self.tls_hosts.contains(&w))
    }
}

/// `limit-req-status-code`, `limit-conn-status-code`.
fn refusal_status(g: &mut Globals, key: &str, value: &str) -> Verdict {
    match value.parse::<u16>() {
        Ok(s @ 400..=599) => {
            let (slot, target) = if key == "limit-req-status-code" {
                (&mut g.limit_req_status, "limits")
            } else {
                (&mut g.limit_conn_status, "concurrency")
            };
            *slot = s;
            Verdict::Mapped(format!("status: {s} on every imported {target} policy"))
        }
        _ => Verdict::Unsupported(format!("{value:?} is not a status from 400 to 599")),
    }
}

/// `proxy-connect-timeout`, `proxy-read-timeout`, `proxy-send-timeout`.
fn timeout(g: &mut Globals, key: &str, value: &str) -> Verdict {
    let i = [
        "proxy-connect-timeout",
        "proxy-read-timeout",
        "proxy-send-timeout",
    ]
    .iter()
    .position(|k| *k == key)
    .unwrap_or(0);
    match units::seconds(value) {
        Some(d) => {
            g.timeouts[i] = Some(d);
            Verdict::Mapped(match i {
                0 => "the connect_timeout of every pool".into(),
                _ => "the timeouts of routes without their own".into(),
            })
        }
        None => Verdict::Unsupported(format!("{value:?} is not a number of seconds")),
    }
}

/// Every rule path of an Ingress as (host, path, pathType, backend), and
/// its defaultBackend as a catch-all (path "", pathType "Default").
fn paths(ing: &Object) -> Vec<(Option<String>, String, String, Value)> {
    let mut out = Vec::new();
    if let Some(Value::Array(rules)) = ing.value.pointer("/spec/rules") {
        for rule in rules {
            let host = text(rule, &["host"]).map(|h| h.to_ascii_lowercase());
            let Some(Value::Array(items)) = rule.pointer("/http/paths") else {
                continue;
            };
            for p in items {
                let path = text(p, &["path"]).unwrap_or_else(|| "/".into());
                let kind =
                    text(p, &["pathType"]).unwrap_or_else(|| "ImplementationSpecific".into());
                let backend = p.get("backend").cloned().unwrap_or(Value::Null);
                out.push((host.clone(), path, kind, backend));
            }
        }
    }
    // An Ingress's defaultBackend serves the unmatched paths of its own
    // hosts; only an Ingress without rules (or a rule without a host)
    // makes it a catch-all.
    if let Some(backend) = ing.value.pointer("/spec/defaultBackend") {
        let mut hosts: Vec<Option<String>> = Vec::new();
        for (host, ..) in &out {
            if !hosts.contains(host) {
                hosts.push(host.clone());
            }
        }
        if hosts.is_empty() {
            hosts.push(None);
        }
        for host in hosts {
            out.push((host, String::new(), "Default".into(), backend.clone()));
        }
    }
    out
}

/// The order routes are written in, as nginx picks among ingress-nginx's
/// locations: per host (exact hosts, then wildcards, then none), then by
/// the Ingress path, a default backend last. On a host of plain paths an
/// Exact path wins whatever its length (nginx's `= ` location), then the
/// longest prefix. On a host ingress-nginx made all regular expressions,
/// the first match wins, so the locations' order is its "Path Priority":
/// the longest Ingress path first (ties: the greater path), and Exact
/// before Prefix for one path.
fn order(r: &Route) -> impl Ord {
    use std::cmp::Reverse;
    let host_rank = match &r.host {
        Some(h) if !h.starts_with('*') => 0,
        Some(_) => 1,
        None => 2,
    };
    let (_, path, kind) = &r.origin;
    let exact = u8::from(kind != "Exact");
    let class = match kind.as_str() {
        "Default" => 2,
        _ if r.regex => 0,
        _ => exact,
    };
    let tie = if r.regex { path.clone() } else { String::new() };
    (
        (host_rank, r.host.clone().unwrap_or_default(), class),
        (Reverse(path.len()), Reverse(tie), exact, r.rank),
    )
}

fn route_node(r: &Route) -> Node {
    let mut matches = Vec::new();
    if let Some(h) = &r.host {
        matches.push(("host", Node::str(h.clone())));
    }
    match &r.path {
        PathRule::Any => {}
        PathRule::Exact(p) => matches.push(("path", Node::str(p.clone()))),
        PathRule::Prefix(p) => matches.push(("path_prefix", Node::str(p.clone()))),
        PathRule::Regex(p) => matches.push(("path_regex", Node::str(p.clone()))),
    }
    if let Some(h) = &r.headers {
        matches.push(("headers", h.clone()));
    }
    let mut entries = vec![
        ("name".to_string(), Node::str(r.name.clone())),
        ("match".into(), Node::map(matches)),
    ];
    for key in KEY_ORDER {
        if let Some(v) = r.keys.get(key) {
            entries.push((key.to_string(), v.clone()));
        }
    }
    Node::Map(entries)
}
