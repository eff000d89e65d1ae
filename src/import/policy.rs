//! Assembles the policy: the controller's ConfigMap and replica count, the
//! Services behind each backend, TLS Secrets, one route per Ingress path
//! (ordered as nginx picks locations), canaries folded into their main
//! routes, and the YAML text. It drives the import; what it builds is held
//! in `draft.rs`, and nothing below calls back here.

use serde_json::Value;

use super::annotations;
use super::backend::{self, Verify};
use super::draft::{Draft, Globals, Hsts};
use super::emit::{self, Node};
use super::manifests::{text, Object};
use super::names;
use super::routes::{order, route_node};
use super::streaming;
use super::units;
use super::{Imported, Verdict};

impl<'a> Draft<'a> {
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
                hsts_key(&mut g.hsts, key, value)
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
            let Some(upstream) =
                backend::upstream(self, ing, &backend, plan.protocol, &plan.verify)
            else {
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
            if let Some(upstream) = backend::upstream(self, ing, &backend, protocol, &verify) {
                targets.push((main, upstream));
            }
        }
        annotations::canary(self, ing, &targets);
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

/// One of the ConfigMap's `hsts*` keys.
fn hsts_key(hsts: &mut Hsts, key: &str, value: &str) -> Verdict {
    let flag = match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    };
    match (key, flag) {
        ("hsts", Some(on)) => hsts.on = on,
        ("hsts-include-subdomains", Some(on)) => hsts.include_subdomains = on,
        ("hsts-preload", Some(on)) => hsts.preload = on,
        ("hsts-max-age", _) if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
            hsts.max_age = value.to_string()
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
