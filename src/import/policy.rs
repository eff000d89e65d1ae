//! Assembles the policy: the controller's ConfigMap and replica count,
//! TLS Secrets, the Ingresses imported (their class, their names), one
//! route per path of each main Ingress (ordered as nginx picks
//! locations), canaries folded into their main routes, and the YAML text.
//! It drives the families in that order; what they build is held in
//! `draft.rs`, and none of them calls back here.

use super::annotations;
use super::backend;
use super::canary;
use super::claims;
use super::configmap;
use super::controller;
use super::draft::Draft;
use super::emit::Node;
use super::manifests::Object;
use super::names;
use super::out::{CertSource, Certificate, ClientCerts, Passthrough, Policy, Server, ServerTls};
use super::paths;
use super::plan::Plan;
use super::routes::{order, route_node};
use super::tls;
use super::{Imported, Sources, Verdict};

use crate::k8s::Kind;

/// Converts the objects: the controller's settings first, then the TLS
/// sections, the main Ingresses' routes, and the canaries folded into them.
pub fn run(mut draft: Draft<'_>) -> Imported {
    configmap::read(&mut draft);
    super::tcp_services::read(&mut draft);
    controller::replicas(&mut draft);
    controller::admin(&mut draft);
    let mut ingresses: Vec<&Object> = ingresses(&mut draft);
    // Oldest first: a host and path, or a certificate, is the first
    // claim's. Ties keep their order (a file's, or the controller's, which
    // breaks them by namespace/name).
    ingresses.sort_by_cached_key(|i| claims::age(i).0);
    controller::defaults_said(&mut draft);
    for ing in &ingresses {
        tls::sections(&mut draft, ing);
    }
    controller::hsts_said(&mut draft);
    let (canaries, mains): (Vec<&Object>, Vec<&Object>) = ingresses.into_iter().partition(|i| {
        annotations::get(i, &draft.options.annotation_prefix, "canary") == Some("true".into())
    });
    for ing in &mains {
        for (host, why) in paths::regex_triggers(&draft, ing) {
            draft.regex_hosts.entry(host).or_insert((ing.id(), why));
        }
    }
    for ing in mains {
        ingress(&mut draft, ing);
    }
    // Before the canaries fold in: they are recorded by their mains' names.
    unique_names(&mut draft);
    for ing in canaries {
        canary::fold(&mut draft, ing);
    }
    www_redirects(&mut draft);
    close_withheld_hosts(&mut draft);
    unique_names(&mut draft);
    draft.routes.sort_by_key(order);
    // By name: the same whichever order the Ingresses came in (a file's,
    // or the controller's).
    draft.methods.sort_by(|a, b| a.0.cmp(&b.0));
    let (policy, certificates) = policy_tree(&draft);
    Imported {
        policy,
        sources: Sources {
            certificates,
            canaries: draft.canaries,
            routes: draft.routes.iter().map(|r| r.ingress.clone()).collect(),
            made: draft.made,
        },
        header: format!(
            "# Imported from ingress-nginx by `fairgate import ingress-nginx`; the\n\
             # report says what became of every annotation. Limits are sized for the\n\
             # whole fleet: ingress-nginx counted per controller pod ({} here).\n",
            draft.replicas
        ),
        report: draft.report,
        bindings: draft.bindings,
    }
}

/// Ingresses of the class imported; others are reported as skipped.
fn ingresses<'a>(draft: &mut Draft<'a>) -> Vec<&'a Object> {
    let mut out = Vec::new();
    for ing in draft
        .objects
        .iter()
        .copied()
        .filter(|o| o.is(Kind::Ingress))
    {
        // The controller matched the class already (`cluster::class_of`).
        let class = match draft.options.cluster {
            true => None,
            false => ing
                .text(&["spec", "ingressClassName"])
                .or_else(|| ing.text(&["metadata", "annotations", "kubernetes.io/ingress.class"])),
        };
        match class {
            Some(c) if c != draft.options.ingress_class => draft.line(
                &ing.id(),
                "ingressClassName",
                Verdict::Approximated(format!(
                    "class {c}, not {}: not imported",
                    draft.options.ingress_class
                )),
            ),
            _ => {
                match names::ingress_problem(ing) {
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
                        draft.line(&subject, "paths", Verdict::Unsupported(why));
                    }
                }
            }
        }
    }
    out
}

/// One route per path of a main (not canary) Ingress.
fn ingress(draft: &mut Draft<'_>, ing: &Object) {
    let mut plan = annotations::plan(draft, ing);
    if let Some(why) = plan.withheld.take().or_else(|| draft.withheld.clone()) {
        draft.closed.extend(super::rule_hosts(ing));
        draft.line(
            &ing.id(),
            "paths",
            Verdict::Unsupported(format!("not imported: {why}")),
        );
        return;
    }
    if let Some((name, method)) = plan.method.take() {
        draft.made.insert(("auth", name.clone()), ing.id());
        draft.methods.push((name, method));
    }
    error_pages(draft, ing, &mut plan);
    super::mirror::apply(draft, ing, &mut plan);
    paths::regex_lines(draft, ing);
    let first = draft.routes.len();
    let mut all = paths::of(ing);
    all.extend(aliased(draft, ing, &plan, &all));
    for (i, (host, path, kind, backend)) in all.into_iter().enumerate() {
        let Some(upstream) = backend::upstream(draft, ing, backend, &plan) else {
            continue;
        };
        let name = format!(
            "{}-{i}",
            names::policy_name(&format!("{}_{}", ing.namespace, ing.name))
        );
        if let Some(why) = refused_claim(draft, host.as_deref(), &path, &kind) {
            let item = format!("{}{path}", host.as_deref().unwrap_or("*"));
            draft.line(&ing.id(), &item, Verdict::Unsupported(why));
            continue;
        }
        if let Some(route) = paths::route(draft, ing, &mut plan, name, host, path, kind, upstream) {
            draft.routes.push(route);
        }
    }
    let why = match paths::regex_cost(draft, ing, first) {
        Some(why) => why,
        None if draft.routes.len() == first && !paths::of(ing).is_empty() => {
            "none of its paths could be served".into()
        }
        None => {
            // Its hosts and paths are its claims now.
            for r in &draft.routes[first..] {
                let owner = || r.ingress.clone();
                draft.claimed.entry(r.origin.clone()).or_insert_with(owner);
            }
            if plan.www_redirect {
                www_names(draft, ing, first);
            }
            super::client_tls::apply(draft, ing, &plan, first);
            super::passthrough::apply(draft, ing, &plan);
            return;
        }
    };
    draft.routes.truncate(first);
    draft.closed.extend(super::rule_hosts(ing));
    draft.line(
        &ing.id(),
        "paths",
        Verdict::Unsupported(format!("not imported: {why}")),
    );
}

/// `custom-http-errors` with `default-backend`: the routes' `error_pages`,
/// the default backend's pool (none while it has no ready endpoint).
fn error_pages(draft: &mut Draft<'_>, ing: &Object, plan: &mut Plan) {
    let (Some(service), false) = (plan.default_backend.clone(), plan.error_codes.is_empty()) else {
        return;
    };
    let value = backend::default_backend(draft, &ing.namespace, &service);
    let fallback = Plan {
        protocol: plan.protocol,
        verify: plan.verify.clone(),
        ..Plan::default()
    };
    let Some(backend::Served::Pool(upstream)) = backend::upstream(draft, ing, &value, &fallback)
    else {
        return;
    };
    let headers = vec![
        ("X-Namespace".to_string(), ing.namespace.clone()),
        ("X-Ingress-Name".to_string(), ing.name.clone()),
    ];
    plan.keys.error_pages = Some(super::out::ErrorPages {
        codes: std::mem::take(&mut plan.error_codes),
        upstream,
        headers,
    });
}

/// Aliases one Ingress may add: each multiplies its routes.
const MAX_ALIASES: usize = 16;

/// The oldest Ingress's age (creation time, `namespace/name`) for each
/// rule host, made once per import.
pub(super) fn host_owners(
    draft: &mut Draft<'_>,
) -> std::sync::Arc<std::collections::HashMap<String, (String, String)>> {
    if let Some(made) = &draft.host_ages {
        return made.clone();
    }
    let mut ages: std::collections::HashMap<String, (String, String)> =
        std::collections::HashMap::new();
    for o in draft.objects.iter().filter(|o| o.is(Kind::Ingress)) {
        let age = claims::age(o);
        for host in super::rule_hosts(o) {
            let oldest = ages.entry(host).or_insert_with(|| age.clone());
            if age < *oldest {
                *oldest = age.clone();
            }
        }
    }
    let made = std::sync::Arc::new(ages);
    draft.host_ages = Some(made.clone());
    made
}

/// `server-alias`: the Ingress's paths again under each alias, when all
/// its rules name one host and its paths are not regular expressions; an
/// alias that an Ingress names as its host is that Ingress's (ingress-nginx
/// serves a host's own server before an alias).
fn aliased<'a>(
    draft: &mut Draft<'_>,
    ing: &Object,
    plan: &Plan,
    paths: &[(Option<String>, String, String, &'a serde_json::Value)],
) -> Vec<(Option<String>, String, String, &'a serde_json::Value)> {
    if plan.aliases.is_empty() {
        return Vec::new();
    }
    let hosts: std::collections::BTreeSet<&Option<String>> = paths.iter().map(|p| &p.0).collect();
    let why = match hosts.into_iter().collect::<Vec<_>>().as_slice() {
        [Some(host)] if draft.regex_hosts.contains_key(&Some(host.clone())) => {
            Some("its paths are regular expressions")
        }
        [Some(_)] => None,
        _ => Some("its rules name several hosts, or none"),
    };
    if let Some(why) = why {
        let prefix = draft.options.annotation_prefix.clone();
        let verdict = Verdict::Unsupported(format!("{why}: the aliases serve nothing"));
        draft.line(&ing.id(), &format!("{prefix}/server-alias"), verdict);
        return Vec::new();
    }
    // An alias an older Ingress names as its host is that one's (a newer
    // one's path there is refused as any taken path is); a host closed (an
    // Ingress withheld or left out) stays closed.
    let mine = claims::age(ing);
    let owners = host_owners(draft);
    let taken = |alias: &String| {
        owners.get(alias).is_some_and(|age| *age < mine)
            || draft.closed.contains(alias)
            || draft.options.closed_hosts.contains(alias)
            || draft.options.named_elsewhere.contains(alias)
    };
    let kept: Vec<&String> = plan
        .aliases
        .iter()
        .filter(|a| !taken(a))
        .take(MAX_ALIASES)
        .collect();
    let mut out = Vec::new();
    for alias in kept {
        for (_, path, kind, backend) in paths {
            out.push((Some(alias.clone()), path.clone(), kind.clone(), *backend));
        }
    }
    out
}

/// `from-to-www-redirect`: each exact host of the Ingress, its other name
/// (`www.` added or taken off) and where that name sends requests: the
/// host, over HTTPS when a TLS section serves it (nginx keeps the
/// request's scheme; a TLS listener for the other name needs a
/// certificate for it too).
fn www_names(draft: &mut Draft<'_>, ing: &Object, first: usize) {
    // The hosts it serves: not one its paths were refused on.
    let hosts: std::collections::BTreeSet<String> = draft.routes[first..]
        .iter()
        .filter_map(|r| r.host.clone())
        .collect();
    for host in hosts {
        if host.starts_with("*.") {
            continue;
        }
        let other = match host.strip_prefix("www.") {
            Some(bare) => bare.to_string(),
            None => format!("www.{host}"),
        };
        let scheme = if draft.covered(&host) {
            "https"
        } else {
            "http"
        };
        draft
            .www
            .push((other, format!("{scheme}://{host}"), ing.id()));
    }
}

/// The other names of `from-to-www-redirect` hosts that no route serves
/// (and that are not the operator's): a route each, answering `308` to
/// the named host with the path and query kept; one however many
/// Ingresses of the host ask (the oldest's).
fn www_redirects(draft: &mut Draft<'_>) {
    let mut served: std::collections::HashSet<String> =
        draft.routes.iter().filter_map(|r| r.host.clone()).collect();
    for (other, target, ingress) in std::mem::take(&mut draft.www) {
        let elsewhere = claims::reserved(&draft.options.reserved_hosts, &other, false).is_some()
            || draft.options.named_elsewhere.contains(&other);
        // A host closed (an Ingress withheld or left out) stays closed.
        let closed = draft.closed.contains(&other) || draft.options.closed_hosts.contains(&other);
        if !served.insert(other.clone()) || elsewhere || closed {
            continue;
        }
        let keys = super::out::RouteKeys {
            auth: Some(super::out::Auth::Off),
            redirect: Some(super::out::Redirect {
                to: format!("{target}{{path}}{{query}}"),
                code: 308,
            }),
            ..Default::default()
        };
        draft.routes.push(super::routes::Route {
            name: names::policy_name(&format!("www_{other}")),
            ingress,
            host: Some(other.clone()),
            path: super::routes::PathRule::Any,
            headers: None,
            keys,
            origin: (other, "/".into(), super::routes::DEFAULT_BACKEND.into()),
            rank: 2,
            regex: false,
        });
    }
}

/// The hosts of Ingresses not served, which no route serves either,
/// answer `404` from a route of their own (as nginx's default server
/// would): closed (SPEC §11), their requests (and cookies) never reach
/// another namespace's catch-all.
fn close_withheld_hosts(draft: &mut Draft<'_>) {
    let mut closed = std::mem::take(&mut draft.closed);
    closed.extend(draft.options.closed_hosts.iter().cloned());
    for host in closed {
        // Served elsewhere (a route of the base or of the Gateway): closed.
        let elsewhere = claims::reserved(&draft.options.reserved_hosts, &host, false).is_some()
            || draft.options.named_elsewhere.contains(&host);
        let served = draft
            .routes
            .iter()
            .any(|r| r.host.as_deref() == Some(&host));
        if elsewhere || served {
            continue;
        }
        let keys = super::out::RouteKeys {
            auth: Some(super::out::Auth::Off),
            direct: Some(404),
            ..Default::default()
        };
        draft.routes.push(super::routes::Route {
            name: names::policy_name(&format!("withheld_{host}")),
            ingress: String::new(),
            host: Some(host.clone()),
            path: super::routes::PathRule::Any,
            headers: None,
            keys,
            origin: (host, "/".into(), super::routes::DEFAULT_BACKEND.into()),
            rank: 2,
            regex: false,
        });
    }
}

/// Every route's name its own: a route whose name an earlier one has (a
/// generated `www_` or `withheld_` route, or an Ingress whose long name
/// hashes as another's) takes `_2`, `_3`...; the earlier keeps its name,
/// so a newer object never makes an older one's routes fail.
fn unique_names(draft: &mut Draft<'_>) {
    let mut seen = std::collections::HashSet::new();
    for i in 0..draft.routes.len() {
        let name = draft.routes[i].name.clone();
        if seen.insert(name.clone()) {
            continue;
        }
        let free = (2..).map(|n| names::policy_name(&format!("{name}_{n}")));
        let free = free.into_iter().find(|n| !seen.contains(n));
        let name = free.unwrap_or(name);
        seen.insert(name.clone());
        draft.routes[i].name = name;
    }
}

/// Why an Ingress may not serve `host` and `path`: the host is the
/// operator's, or an older Ingress serves the same path there.
fn refused_claim(draft: &Draft<'_>, host: Option<&str>, path: &str, kind: &str) -> Option<String> {
    if let Some(h) = host {
        if let Some(r) = claims::reserved(&draft.options.reserved_hosts, h, false) {
            return Some(claims::operators(&format!("host {h}"), r));
        }
    }
    let origin = (
        host.unwrap_or_default().to_string(),
        path.to_string(),
        kind.to_string(),
    );
    let owner = draft.claimed.get(&origin)?;
    let what = format!("{}{path}", host.unwrap_or("*"));
    Some(claims::taken(&what, owner))
}

/// `server.tls.client_certificates`: hosts with the same settings in one entry.
fn client_certificates(draft: &Draft<'_>) -> Vec<ClientCerts> {
    let mut out: Vec<ClientCerts> = Vec::new();
    for (host, (entry, _)) in &draft.client_certs {
        let same = |e: &&mut ClientCerts| {
            ClientCerts {
                hosts: Vec::new(),
                ..(*e).clone()
            } == ClientCerts {
                hosts: Vec::new(),
                ..entry.clone()
            }
        };
        match out.iter_mut().find(same) {
            Some(e) => e.hosts.push(host.clone()),
            None => out.push(entry.clone()),
        }
    }
    out
}

/// `server.tls.passthrough`: the hosts of one pool in one entry.
fn passthrough(draft: &Draft<'_>) -> Vec<Passthrough> {
    let mut out: Vec<Passthrough> = Vec::new();
    for (host, (entry, _)) in &draft.passthrough {
        match out.iter_mut().find(|e| e.upstream == entry.upstream) {
            Some(e) => e.hosts.push(host.clone()),
            None => out.push(entry.clone()),
        }
    }
    out
}

/// The policy, and the Secret (`namespace/name`) of each of its
/// certificates.
fn policy_tree(draft: &Draft<'_>) -> (Node, Vec<String>) {
    let options = draft.options;
    let clients = client_certificates(draft);
    let passthrough = passthrough(draft);
    let wanted = !draft.certs.is_empty() || !clients.is_empty() || !passthrough.is_empty();
    let (certificates, sources): (Vec<Certificate>, Vec<String>) = draft
        .certs
        .iter()
        .filter_map(|(id, hosts)| {
            let cert = match options.cluster {
                true => tls::secret_cert(draft, id)?,
                false => {
                    let dir = format!("{}/{id}", options.tls_dir);
                    CertSource::Files {
                        cert: format!("{dir}/tls.crt"),
                        key: format!("{dir}/tls.key"),
                    }
                }
            };
            let hosts = hosts.clone();
            Some((Certificate { cert, hosts }, id.clone()))
        })
        .unzip();
    let tls = wanted.then(|| ServerTls {
        listen: options.tls_listen.clone(),
        client_certificates: clients,
        passthrough,
        certificates,
    });
    let uncovered = !draft.certs.is_empty()
        && draft
            .routes
            .iter()
            .any(|r| r.host.as_ref().is_some_and(|h| !draft.covered(h)));
    let policy = Policy {
        server: Server {
            listen: options.listen.clone(),
            tls,
            settings: &draft.server,
        },
        admin_listen: &options.admin_listen,
        redis_url: &options.redis_url,
        upstreams: &draft.upstreams,
        limits: &draft.limits,
        concurrency: &draft.concurrency,
        methods: &draft.methods,
        routes: draft.routes.iter().map(route_node).collect(),
        tls_host_uncovered: uncovered,
    };
    (policy.node(), sources)
}
