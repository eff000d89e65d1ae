//! One policy from the base file and the cluster's objects: the Ingresses
//! of our classes, with the Services, EndpointSlices, Secrets and the
//! ConfigMap they rely on, go through the same translation as `fairgate
//! import ingress-nginx` (in its cluster mode: endpoints and Secret PEM
//! instead of DNS names and mounted files), are merged into the base
//! (`merge`) as trees, never text (`origins`), and read and loaded as a
//! file is (`build::checked`). What the reader refuses is traced to the
//! object its entry came from, which is withheld alone, and the rest built
//! again.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

mod search;

use super::gateway::{self, StatusWrite};
use super::merge;
use super::origins::{tls_secrets, Origins};
use crate::build::Checked;
use crate::config::{Config, Kubernetes, Problems};
use crate::import::manifests::At;
use crate::import::{self, Object, Verdict};
use crate::k8s::Kind;

/// Each route made from a served object gets that object as its origin
/// (the request metrics' `namespace`, `ingress` and `service` labels); the
/// Service is the one whose endpoints make the route's pool.
fn label_routes(config: &mut Config, served: &[Object], bindings: &[import::Binding]) {
    let served: Vec<&Object> = served.iter().collect();
    let owner = super::origins::Owner::new(&served);
    let services: HashMap<&str, &str> = bindings
        .iter()
        .filter_map(|b| Some((b.pool.as_deref()?, b.service.as_str())))
        .collect();
    for route in &mut config.routes {
        let Some(o) = owner.of(&route.name) else {
            continue;
        };
        let service = services.get(route.upstream.as_str()).copied();
        route.origin = Some(Arc::new(crate::config::RouteOrigin {
            namespace: o.namespace.clone(),
            object: o.name.clone(),
            service: service.unwrap_or_default().to_string(),
        }));
    }
}

/// What a build says about one Ingress, for its Events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// `namespace/name` of the Ingress.
    pub ingress: String,
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

/// A policy built from the base file and the cluster.
pub struct Composed {
    pub checked: Checked,
    /// The Ingresses and Gateway API routes served (ours, not withheld).
    pub served: Vec<Object>,
    pub notes: Vec<Note>,
    /// The Gateway API objects' status as it should be.
    pub statuses: Vec<StatusWrite>,
    /// Some changed objects wait (the build ran out of rounds, or a
    /// problem named no object): build again soon.
    pub retry: bool,
    /// Ours, not served (withheld or waiting).
    pub unserved: Vec<Object>,
    /// The pools made of endpoints: what an EndpointSlice change updates.
    pub bindings: Vec<import::Binding>,
}

/// Builds policies; remembers each Secret's last usable version, which is
/// served while a broken one is in the cluster.
pub struct Composer {
    pub settings: Kubernetes,
    pub base: PathBuf,
    good_secrets: HashMap<String, Object>,
    memo: search::Memo,
}

impl Composer {
    pub fn new(settings: Kubernetes, base: PathBuf) -> Composer {
        Composer {
            settings,
            base,
            good_secrets: HashMap::new(),
            memo: search::Memo::default(),
        }
    }

    /// The policy for `objects`, or why not even the base builds.
    pub fn compose(&mut self, objects: &[Object]) -> Result<Composed, Problems> {
        let shown = self.base.display().to_string();
        let text = std::fs::read_to_string(&self.base).map_err(|e| {
            let mut p = Problems::new(shown.clone());
            p.push(
                (1, 1),
                "config.unreadable",
                format!("cannot read file: {e}"),
            );
            p
        })?;
        let dir = self.base.parent().unwrap_or(Path::new(".")).to_path_buf();
        let (base, root) = Config::read_base(&shown, &text, &dir)?;
        let base_names = gateway::BaseNames::of(&base.config);
        let reserved = reserved_hosts(&base.config, objects, &self.settings);
        let mut ours = self.ours(objects);
        ours.extend(gateway::routes(objects, &self.settings));
        let mut notes = Vec::new();
        let inputs = self.inputs(objects, &ours, &mut notes);
        let inputs: Vec<&Object> = inputs.iter().map(|o| o.as_ref()).collect();
        // The Gateway API translation reads objects of its own (a copy,
        // only when a Gateway is served).
        let gateway_inputs: Vec<Object> = match self.settings.gateway {
            Some(_) => inputs.iter().map(|o| (*o).clone()).collect(),
            None => Vec::new(),
        };
        let build = Build {
            lines: text.lines().count() + 1,
            text: Arc::from(text),
            root,
            dir: &dir,
            inputs: &inputs,
            gateway_inputs: &gateway_inputs,
            base_methods: base_names.methods.clone(),
            tls_listen: base
                .config
                .server
                .tls
                .as_ref()
                .map(|t| t.listen.to_string())
                .unwrap_or_default(),
            base_client_ca: base
                .config
                .server
                .tls
                .as_ref()
                .is_some_and(|t| t.client_ca.is_some()),
            base_names,
            reserved,
            ours: &ours,
        };
        let found = self.search(&build, objects)?;
        Ok(self.finish(objects, &ours, found, notes))
    }

    /// The composition of what `search` found: what is served, its
    /// Events and status.
    fn finish(
        &self,
        objects: &[Object],
        ours: &[&Object],
        found: search::Found,
        mut notes: Vec<Note>,
    ) -> Composed {
        let search::Found {
            mut checked,
            report,
            mut statuses,
            withheld,
            retry,
            bindings,
        } = found;
        statuses.extend(ours.iter().filter_map(|o| {
            let why = withheld.get(&o.id())?;
            Some(gateway::withheld_parents(o, &self.settings, why))
        }));
        statuses.extend(gateway::orphans(objects, &self.settings));
        notes.extend(report_notes(&report, &withheld));
        // Not served: what the build or the translation withheld (no
        // load-balancer status for it).
        let unserved: BTreeSet<&str> = notes
            .iter()
            .filter(|n| n.reason == "Withheld")
            .map(|n| n.ingress.as_str())
            .collect();
        let (unserved, served): (Vec<Object>, Vec<Object>) = ours
            .iter()
            .map(|o| (*o).clone())
            .partition(|o| unserved.contains(o.id().as_str()));
        label_routes(&mut checked.config, &served, &bindings);
        if checked.config.server.tls.is_none() {
            notes.extend(
                served
                    .iter()
                    .filter(|o| tls_secrets(o).next().is_some())
                    .map(|o| Note {
                        ingress: o.id(),
                        warning: true,
                        reason: "NoTLSListener",
                        message: "tls: the gateway has no TLS listener (server.tls in its base \
                          policy): served over plain HTTP only"
                            .into(),
                    }),
            );
        }
        Composed {
            checked,
            served,
            notes,
            statuses,
            retry,
            unserved,
            bindings,
        }
    }

    /// One build of the base and the `served` Ingresses: the checked
    /// policy, which Ingresses the reader's problems came from, or the
    /// problems when they cannot be traced.
    fn attempt(&self, build: &Build<'_>, served: &[&Object]) -> Attempt {
        let (ingresses, routes): (Vec<&Object>, Vec<&Object>) =
            served.iter().copied().partition(|o| o.is(Kind::Ingress));
        let objects: Vec<&Object> = build.inputs.iter().copied().chain(ingresses).collect();
        let mut options = self.options(build);
        // The hosts of Ingresses left out are closed (`404`).
        let served_ids: HashSet<String> = served.iter().map(|o| o.id()).collect();
        let left_out = build.ours.iter().filter(|o| o.is(Kind::Ingress));
        let left_out = left_out.filter(|o| !served_ids.contains(&o.id()));
        options.closed_hosts = left_out.flat_map(|o| import::rule_hosts(o)).collect();
        options.named_elsewhere = routes
            .iter()
            .flat_map(|r| match r.value.at("/spec/hostnames") {
                Some(Value::Array(names)) => names.clone(),
                _ => Vec::new(),
            })
            .filter_map(|n| n.as_str().map(str::to_ascii_lowercase))
            .collect();
        let imported = import::convert_refs(&objects, &options);
        let gateway = gateway::translate(
            build.gateway_inputs,
            &routes,
            &self.settings,
            &build.base_names,
        );
        let parts = Arc::new([imported.policy, gateway.policy]);
        // The cluster's entries are numbered after the base file's lines,
        // the Gateway's after the Ingresses', so a problem's line tells
        // whose it is.
        let mut origins = Origins::new(build.lines);
        let mut root = build.root.clone();
        let mut clashes = merge::merge(&mut root, origins.locate(&parts[0]));
        clashes.extend(merge::merge(&mut root, origins.locate(&parts[1])));
        if !clashes.is_empty() {
            let owners = origins.clashing(&clashes, served, &imported.sources);
            if !owners.is_empty() {
                return Attempt::Refused(owners);
            }
        }
        // `GET /v1/policy` shows both: the file, and the cluster's part.
        let source = import::shown(build.text.clone(), imported.header, parts.clone());
        let file = self.base.display().to_string();
        crate::metrics::METRICS.kube_reads.inc();
        let reading = Config::read_node(&file, &root, source, build.dir);
        match crate::build::checked(reading) {
            Ok(checked) => {
                let mut bindings = imported.bindings;
                bindings.extend(gateway.bindings);
                Attempt::Built(
                    Box::new(checked),
                    imported.report,
                    gateway.statuses,
                    bindings,
                )
            }
            Err(mut problems) => {
                name_gateway_certificates(&mut problems, &origins, &gateway.certificates);
                let owners = origins.owners(&problems, served, &imported.sources);
                match owners.is_empty() {
                    true => Attempt::Untraced(problems),
                    false => Attempt::Refused(owners),
                }
            }
        }
    }

    fn options(&self, build: &Build<'_>) -> import::Options {
        let s = &self.settings;
        import::Options {
            inputs: Vec::new(),
            output: None,
            report: None,
            to: import::Target::Policy,
            base: None,
            gateway: String::new(),
            gateway_class: String::new(),
            replicas: Some(s.nginx_replicas),
            shadow: false,
            tls_dir: String::new(),
            redis_url: String::new(),
            listen: String::new(),
            tls_listen: build.tls_listen.clone(),
            admin_listen: String::new(),
            cluster_domain: s.cluster_domain.clone(),
            ingress_class: String::new(),
            configmap: s.configmap.clone(),
            tcp_services_configmap: None,
            base_client_ca: build.base_client_ca,
            annotation_prefix: s.annotation_prefix.clone(),
            cluster: true,
            base_methods: Some(build.base_methods.clone()),
            reserved_hosts: build.reserved.clone(),
            base_limits: Some(build.base_names.limits.clone()),
            base_concurrency: Some(build.base_names.concurrency.clone()),
            closed_hosts: Vec::new(),
            named_elsewhere: BTreeSet::new(),
            guard: build.base_names.guard.clone(),
        }
    }

    /// What our Ingresses name besides Services: Secrets (TLS sections,
    /// `proxy-ssl-secret`, `auth-secret`, `auth-tls-secret`) and ConfigMaps (`custom-headers`), each
    /// `namespace/name`. Only these are watched.
    pub fn referenced(&self, objects: &[Object]) -> BTreeSet<(Kind, String)> {
        let ours = self.ours(objects);
        let over = search::over_bounds(&ours, |o| self.named(o));
        let mut out = BTreeSet::new();
        for ing in ours.iter().filter(|o| !over.contains_key(&o.id())) {
            out.extend(self.named(ing));
        }
        out.extend(
            gateway::secrets(objects, &self.settings)
                .into_iter()
                .map(|id| (Kind::Secret, id)),
        );
        out
    }

    /// The Secrets and ConfigMaps one Ingress names.
    fn named(&self, ing: &Object) -> BTreeSet<(Kind, String)> {
        let prefix = &self.settings.annotation_prefix;
        let mut out = BTreeSet::new();
        out.extend(tls_secrets(ing).map(|id| (Kind::Secret, id)));
        // Only in the Ingress's own namespace: a reference elsewhere is
        // refused by the translation, and never watched.
        let named = |key: &str| {
            let value = ing.text(&["metadata", "annotations", &format!("{prefix}/{key}")])?;
            let id = match value.split_once('/') {
                Some((ns, _)) if ns != ing.namespace => return None,
                Some(_) => value,
                None => format!("{}/{value}", ing.namespace),
            };
            Some(id)
        };
        out.extend(named("proxy-ssl-secret").map(|id| (Kind::Secret, id)));
        out.extend(named("auth-secret").map(|id| (Kind::Secret, id)));
        out.extend(named("auth-tls-secret").map(|id| (Kind::Secret, id)));
        out.extend(named("custom-headers").map(|id| (Kind::ConfigMap, id)));
        out
    }

    /// The Ingresses of this controller: of a class whose IngressClass
    /// names it (by `spec.ingressClassName`, or the legacy annotation
    /// matched against the same names), or of none when told to serve
    /// those or when one of our classes is the cluster's default.
    pub fn ours<'o>(&self, objects: &'o [Object]) -> Vec<&'o Object> {
        let classes: Vec<&Object> = objects
            .iter()
            .filter(|o| o.is(Kind::IngressClass))
            .filter(|o| {
                o.text(&["spec", "controller"]).as_deref() == Some(&self.settings.controller)
            })
            .collect();
        let names: BTreeSet<&str> = classes.iter().map(|c| c.name.as_str()).collect();
        let default = classes.iter().any(|c| {
            c.text(&[
                "metadata",
                "annotations",
                "ingressclass.kubernetes.io/is-default-class",
            ])
            .as_deref()
                == Some("true")
        });
        let unclassed = self.settings.watch_without_class || default;
        let mut ours: Vec<&Object> = objects
            .iter()
            .filter(|o| o.is(Kind::Ingress))
            .filter(|o| match class_of(o) {
                Some(c) => names.contains(c.as_str()),
                None => unclassed,
            })
            .collect();
        // Mains before canaries, each oldest first: a host and path is the
        // oldest claim's, a canary is folded into a main, and past a
        // namespace's bound the newest pays.
        let canary = format!("{}/canary", self.settings.annotation_prefix);
        ours.sort_by_cached_key(|o| {
            let is = o.text(&["metadata", "annotations", &canary]).as_deref() == Some("true");
            (is, import::age(o))
        });
        ours
    }

    /// What the Ingresses rely on: Services, EndpointSlices, the
    /// controller's ConfigMap, and the usable version of each Secret.
    fn inputs<'o>(
        &mut self,
        objects: &'o [Object],
        ours: &[&Object],
        notes: &mut Vec<Note>,
    ) -> Vec<Cow<'o, Object>> {
        let mut out: Vec<Cow<Object>> = objects
            .iter()
            .filter(|o| {
                matches!(
                    Kind::by_name(&o.kind),
                    Some(
                        Kind::Service
                            | Kind::EndpointSlice
                            | Kind::ConfigMap
                            | Kind::Namespace
                            | Kind::GatewayClass
                            | Kind::Gateway
                            | Kind::ReferenceGrant
                            | Kind::RoutePolicy
                    )
                )
            })
            .map(Cow::Borrowed)
            .collect();
        let mut served: BTreeSet<String> = ours.iter().flat_map(|o| tls_secrets(o)).collect();
        served.extend(gateway::secrets(objects, &self.settings));
        for secret in objects.iter().filter(|o| o.is(Kind::Secret)) {
            let id = secret.id();
            // Only a served certificate is checked here: a backend's CA
            // (`proxy-ssl-secret`) is checked where the pool's roots load.
            let problem = served
                .contains(&id)
                .then(|| import::secret_problem(secret))
                .flatten();
            match problem {
                None => {
                    self.good_secrets.insert(id, secret.clone());
                    out.push(Cow::Borrowed(secret));
                }
                Some(why) => {
                    let kept = self.good_secrets.get(&id).cloned();
                    let what = match kept.is_some() {
                        true => "the previous certificate is served",
                        false => "its hosts get the default certificate",
                    };
                    for ing in ours.iter().filter(|i| names_secret(i, &id)) {
                        notes.push(Note {
                            ingress: ing.id(),
                            warning: true,
                            reason: "InvalidSecret",
                            message: format!("Secret {id}: {why}; {what}"),
                        });
                    }
                    out.extend(kept.map(Cow::Owned));
                }
            }
        }
        let secrets: HashSet<String> = objects
            .iter()
            .filter(|o| o.is(Kind::Secret))
            .map(Object::id)
            .collect();
        self.good_secrets.retain(|id, _| secrets.contains(id));
        out
    }
}

enum Attempt {
    Built(
        Box<Checked>,
        Vec<import::Line>,
        Vec<StatusWrite>,
        Vec<import::Binding>,
    ),
    Refused(BTreeMap<String, String>),
    /// Problems not traced to an Ingress.
    Untraced(Problems),
}

/// What every build of one composition shares: the base file's text and
/// directory, and the objects the Ingresses rely on.
struct Build<'a> {
    /// The base file's text and its lines (and one more).
    text: Arc<str>,
    lines: usize,
    /// The base file as read.
    root: marked_yaml::Node,
    dir: &'a Path,
    inputs: &'a [&'a Object],
    /// The same, owned, for the Gateway API translation.
    gateway_inputs: &'a [Object],
    /// The base's `auth.methods` names.
    base_methods: BTreeSet<String>,
    /// The names a RoutePolicy may use: the base file's own.
    base_names: gateway::BaseNames,
    /// The operator's hosts, which no Ingress takes.
    reserved: Vec<String>,
    /// The base's TLS listener (empty: none), which client certificates need.
    tls_listen: String,
    /// The base asks every client for a certificate (`server.tls.client_ca`).
    base_client_ca: bool,
    /// Our Ingresses and routes, served or not.
    ours: &'a [&'a Object],
}

/// The operator's hosts: the base policy's routes', certificates',
/// client certificates' and passthrough's
/// (`*.d` for a wildcard), and the Gateway's listener hostnames.
fn reserved_hosts(base: &Config, objects: &[Object], settings: &Kubernetes) -> Vec<String> {
    use crate::config::HostMatch;
    let mut out: BTreeSet<String> = base
        .routes
        .iter()
        .filter_map(|r| match r.host.as_ref()? {
            HostMatch::Exact(h) => Some(h.clone()),
            HostMatch::Suffix(s) => Some(format!("*{s}")),
        })
        .collect();
    let certificates = base.server.tls.iter().flat_map(|t| t.certificates.iter());
    out.extend(certificates.flat_map(|c| c.value.hosts.iter().map(|h| h.to_ascii_lowercase())));
    let clients = base.server.tls.iter().flat_map(|t| t.clients.iter());
    out.extend(clients.flat_map(|c| c.value.hosts.iter().cloned()));
    let passed = base.server.tls.iter().flat_map(|t| t.passthrough.iter());
    out.extend(passed.flat_map(|p| p.value.hosts.iter().cloned()));
    if let Some((_, spec)) = gateway::gateway(objects, settings) {
        out.extend(spec.listeners.into_iter().filter_map(|l| l.hostname));
    }
    out.into_iter().collect()
}

/// Prefixes the reader's problems at the Gateway's certificates (the
/// second part located) with the listeners and Secret each came from: the
/// merged policy's places name only `server.tls.certificates[N]`.
fn name_gateway_certificates(problems: &mut Problems, origins: &Origins<'_>, named: &[String]) {
    for p in &mut problems.list {
        let at = origins.certificate(p.line, 1);
        if let Some(origin) = at.and_then(|i| named.get(i)) {
            p.message = format!("{origin}: {}", p.message);
        }
    }
}

/// The class an Ingress names: `spec.ingressClassName`, else the legacy
/// `kubernetes.io/ingress.class` annotation.
pub fn class_of(ing: &Object) -> Option<String> {
    ing.text(&["spec", "ingressClassName"])
        .or_else(|| ing.text(&["metadata", "annotations", "kubernetes.io/ingress.class"]))
}

fn names_secret(ing: &Object, id: &str) -> bool {
    tls_secrets(ing).any(|s| s == id)
}

/// Events for the report's lines that are not plainly mapped, and for
/// each Ingress withheld.
fn report_notes(report: &[import::Line], withheld: &BTreeMap<String, String>) -> Vec<Note> {
    let mut notes: Vec<Note> = report
        .iter()
        .filter_map(|line| {
            let (warning, reason, why) = match &line.verdict {
                Verdict::Mapped(_) => return None,
                Verdict::Unsupported(why) if line.item == "paths" => (true, "Withheld", why),
                // A Service with nothing to forward to: served, answering 503.
                Verdict::Approximated(why) if line.item == "backend" => (true, "Unavailable", why),
                Verdict::Approximated(why) => (false, "Approximated", why),
                Verdict::Unsupported(why) => (true, "NotSupported", why),
            };
            Some(Note {
                ingress: line.subject.clone(),
                warning,
                reason,
                message: format!("{}: {why}", line.item),
            })
        })
        .collect();
    notes.extend(withheld.iter().map(|(id, why)| Note {
        ingress: id.clone(),
        warning: true,
        reason: "Withheld",
        message: format!("not served: {why}"),
    }));
    notes
}
