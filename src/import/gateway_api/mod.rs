//! `fairgate import ingress-nginx --to gateway-api`: the policy the import
//! writes, turned into Gateway API objects for a team leaving its Ingress
//! objects behind. One fairgate route becomes one HTTPRoute (a GRPCRoute
//! for an h2c pool) in its Ingress's namespace, with what the Gateway API
//! says itself (hostnames, matches, backendRefs, redirects, plain
//! rewrites, literal header edits) in the route and the rest (auth,
//! limits, concurrency, CIDRs, body size, CORS, retries, timeouts, app
//! root, template rewrites and header edits) in a fairgate RoutePolicy its
//! rule names by an ExtensionRef. The Gateway has an HTTP listener, an
//! HTTPS listener for any host and one per TLS host, naming the Secret
//! (with a ReferenceGrant where it lives in another namespace); past the
//! 64 listeners the Gateway API allows, the hosts are shared among
//! Gateways `NAME`, `NAME-2`, ..., each with listeners of its own and its
//! routes attached to it. The base policy (server, store, auth methods,
//! limits and concurrency policies the RoutePolicies name) is written
//! apart, one per Gateway, for the ConfigMap of the controller serving it.
//! Whatever cannot be carried is a `not supported` line of the report and
//! its route is left out, never served differently.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::{json_node, yaml, Line, Object, Options, Verdict};

mod filters;
mod matches;
mod report;

use matches::{grpc_match, http_match, regex_escape};

use filters::carry;
use report::{Inexpressible, Note};

use crate::k8s::Kind;

/// The manifests, the base policy of each Gateway (the first's for
/// `--base`, then `NAME-2`'s, ...) and what became of each route.
pub struct Converted {
    pub manifests: String,
    pub bases: Vec<String>,
    pub report: Vec<Line>,
}

/// The most listeners the Gateway API's CRD lets one Gateway have.
pub const MAX_LISTENERS: usize = 64;

/// What every route's conversion reads.
struct Cx<'a> {
    options: &'a Options,
    /// The Gateways' namespace.
    namespace: String,
    pools: &'a Map<String, Value>,
    gateways: Vec<Part>,
}

/// One Gateway written.
struct Part {
    name: String,
    /// HTTPS listeners by name, with the host each covers (None: any).
    https: Vec<(String, Option<String>)>,
    /// The certificate (of the policy's) its listener for any host names,
    /// which its base policy keeps as the default.
    default: usize,
    /// The hosts of its HTTPS listeners, for the report.
    hosts: Vec<String>,
}

/// One HTTPS listener to write: the host it covers (None: any), its
/// Secret, and the policy's certificate that is the Secret's mount.
#[derive(Clone)]
struct Tls {
    host: Option<String>,
    namespace: String,
    secret: String,
    cert: usize,
}

impl Cx<'_> {
    /// The Gateway a route of `host` attaches to: the one with the HTTPS
    /// listener of its host (exact, else a wildcard covering it), else
    /// the first.
    fn home(&self, host: Option<&str>) -> usize {
        let Some(h) = host else { return 0 };
        let with = |fits: &dyn Fn(&str) -> bool| {
            self.gateways
                .iter()
                .position(|g| g.https.iter().any(|(_, l)| l.as_deref().is_some_and(fits)))
        };
        with(&|l| l == h)
            .or_else(|| with(&|l| covers(l, h)))
            .unwrap_or(0)
    }
}

/// Whether listener hostname `listener` (maybe `*.example.com`) covers `host`.
fn covers(listener: &str, host: &str) -> bool {
    listener == host
        || listener
            .strip_prefix('*')
            .is_some_and(|s| host.ends_with(s))
}

/// Converts the policy text `policy::run` wrote from `objects`.
pub fn convert(objects: &[Object], options: &Options, policy: &str) -> Converted {
    let docs = yaml_rust2::YamlLoader::load_from_str(policy).unwrap_or_default();
    let policy = docs.first().map(super::manifests::json).unwrap_or_default();
    let gateway = match options.gateway.split_once('/') {
        Some((ns, name)) => (ns.to_string(), name.to_string()),
        None => ("default".to_string(), options.gateway.clone()),
    };
    let empty = Map::new();
    let pools = policy["upstreams"].as_object().unwrap_or(&empty);
    let (gateway_docs, grants, gateways) = gateway_objects(&policy, options, &gateway);
    let cx = Cx {
        options,
        namespace: gateway.0,
        pools,
        gateways,
    };
    let mut docs = gateway_docs;
    docs.extend(grants);
    let mut report = split_lines(&cx);
    let passed = policy["server"]["tls"]["passthrough"].as_array();
    for entry in passed.into_iter().flatten() {
        let hosts: Vec<&str> = entry["hosts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        report.push(Line {
            subject: "gateway-api".into(),
            item: format!("passthrough {}", hosts.join(", ")),
            verdict: Verdict::Unsupported(
                "a TLSRoute is not written yet: its TLS would be ended by the Gateway's listener"
                    .into(),
            ),
        });
    }
    let owners = owners(objects);
    for route in policy["routes"].as_array().into_iter().flatten() {
        let name = route["name"].as_str().unwrap_or_default();
        let Some((ns, ingress, rest)) = owner(&owners, name) else {
            report.push(Line {
                subject: "gateway-api".into(),
                item: format!("route {name}"),
                verdict: Verdict::Unsupported("no Ingress's route: not written".into()),
            });
            continue;
        };
        let subject = format!("{ns}/{ingress}");
        let object = format!("{ingress}-{rest}");
        match one_route(route, ns, &object, &cx) {
            Ok((objects, notes)) => {
                docs.extend(objects);
                for (item, verdict) in notes {
                    report.push(line(&subject, &item, verdict));
                }
            }
            Err(why) => report.push(line(
                &subject,
                &format!("route {name}"),
                Verdict::Unsupported(format!("not written as a Gateway API route: {why}")),
            )),
        }
    }
    let manifests = docs
        .iter()
        .map(|d| yaml(&json_node(d)))
        .collect::<Vec<_>>()
        .join("---\n");
    let split = cx.gateways.len() > 1;
    Converted {
        manifests: format!("{HEADER}{manifests}"),
        bases: cx
            .gateways
            .iter()
            .map(|g| base(&policy, &cx.namespace, g, split))
            .collect(),
        report,
    }
}

/// A line for each Gateway past the first: where its hosts now are.
fn split_lines(cx: &Cx<'_>) -> Vec<Line> {
    let Some(first) = cx.gateways.first() else {
        return Vec::new();
    };
    cx.gateways
        .iter()
        .enumerate()
        .skip(1)
        .map(|(k, g)| {
            let why = format!(
                "the Gateway API allows a Gateway {MAX_LISTENERS} listeners: the HTTPS listeners of {} hosts \
                 ({} ... {}) are on Gateway {ns}/{name}, with an http listener and an https one for any host \
                 of its own, and their routes attach to it; one fairgate deployment serves one Gateway: serve it \
                 with the base policy written next to --base with -{n} (kubernetes.gateway {ns}/{name}, \
                 lease_name fairgate-{name}) and a Service of its own, and point these hosts at its address, not \
                 {ns}/{}'s",
                g.hosts.len(),
                g.hosts.first().map_or("", String::as_str),
                g.hosts.last().map_or("", String::as_str),
                first.name,
                ns = cx.namespace,
                name = g.name,
                n = k + 1,
            );
            Line {
                subject: "gateway-api".into(),
                item: format!("gateway {}/{}", cx.namespace, g.name),
                verdict: Verdict::Approximated(why),
            }
        })
        .collect()
}

const HEADER: &str =
    "# Gateway API objects written by `fairgate import ingress-nginx --to gateway-api`;\n\
# the report says what became of every annotation and route. The base policy\n\
# their RoutePolicies name is written apart (--base).\n";

fn line(subject: &str, item: &str, verdict: Verdict) -> Line {
    Line {
        subject: subject.to_string(),
        item: format!("gateway-api: {item}"),
        verdict,
    }
}

/// The import's policy without what the Gateway API objects now say
/// (routes, pools, all certificates but the one of the Gateway's listener
/// for any host, which the reader needs as the default), serving Gateway
/// `gateway` (with a Lease of its own when there are several).
fn base(policy: &Value, namespace: &str, gateway: &Part, split: bool) -> String {
    let mut base = policy.clone();
    if let Some(top) = base.as_object_mut() {
        top.remove("routes");
        top.remove("upstreams");
        let mut kubernetes = json!({"gateway": format!("{namespace}/{}", gateway.name)});
        if split {
            kubernetes["lease_name"] = json!(format!("fairgate-{}", gateway.name));
        }
        top.insert("kubernetes".into(), kubernetes);
    }
    // Its pools are gone with `upstreams` (reported: no TLSRoute yet).
    if let Some(server) = base.get_mut("server").and_then(Value::as_object_mut) {
        let tls = server.get_mut("tls").and_then(Value::as_object_mut);
        let bare = tls.is_some_and(|tls| {
            tls.remove("passthrough");
            !tls.contains_key("certificates") && !tls.contains_key("client_certificates")
        });
        if bare {
            server.remove("tls");
        }
    }
    // `get_mut`, not indexing, which would write `tls: {certificates:
    // null}` into a policy without TLS.
    let certs = base
        .get_mut("server")
        .and_then(|s| s.get_mut("tls"))
        .and_then(|t| t.get_mut("certificates"))
        .and_then(Value::as_array_mut);
    if let Some(certs) = certs {
        let default = certs.get(gateway.default).cloned();
        certs.clear();
        certs.extend(default);
        if let Some(first) = certs.first_mut().and_then(Value::as_object_mut) {
            first.remove("hosts");
        }
    }
    let head = match split {
        false => "# The base policy of `fairgate import ingress-nginx --to gateway-api`: the\n\
# controller's ConfigMap. Its auth methods, limits and concurrency policies\n\
# are the ones the RoutePolicies name.\n"
            .to_string(),
        true => format!(
            "# The base policy of `fairgate import ingress-nginx --to gateway-api` for\n\
# Gateway {namespace}/{}: the ConfigMap of the controller serving it. Its auth\n\
# methods, limits and concurrency policies are the ones the RoutePolicies name.\n",
            gateway.name
        ),
    };
    format!("{head}{}", yaml(&json_node(&base)))
}

/// The Ingresses by the prefix their routes' names start with.
fn owners(objects: &[Object]) -> BTreeMap<String, (String, String)> {
    objects
        .iter()
        .filter(|o| o.is(Kind::Ingress))
        .map(|o| {
            let prefix = super::route_prefix(&o.namespace, &o.name);
            (prefix, (o.namespace.clone(), o.name.clone()))
        })
        .collect()
}

/// The Ingress a route came from, and what its name adds (`0`, `1-canary`).
fn owner<'a>(
    owners: &'a BTreeMap<String, (String, String)>,
    route: &'a str,
) -> Option<(&'a str, &'a str, &'a str)> {
    // The longest prefix that fits: `shop_a-1-0` is Ingress `a-1`'s first
    // route, not `a`'s.
    owners
        .iter()
        .filter_map(|(prefix, (ns, name))| {
            let rest = route.strip_prefix(prefix.as_str())?.strip_prefix('-')?;
            let index = rest.split('-').next()?;
            let ok = !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit());
            ok.then_some((prefix.len(), (ns.as_str(), name.as_str(), rest)))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, owner)| owner)
}

/// The Gateways (an HTTP listener, an HTTPS listener for any host and one
/// for each host of each certificate, shared among Gateways of at most
/// `MAX_LISTENERS`), the ReferenceGrants their Secrets need, and what
/// each holds.
fn gateway_objects(
    policy: &Value,
    options: &Options,
    (gw_ns, gw_name): &(String, String),
) -> (Vec<Value>, Vec<Value>, Vec<Part>) {
    let tls = tls_listeners(policy, options);
    let (any, hosts): (Vec<&Tls>, Vec<&Tls>) = tls.iter().partition(|t| t.host.is_none());
    // Each Gateway's own `http` and `https` (any host) come first.
    let chunks: Vec<&[&Tls]> = match hosts.is_empty() {
        true => vec![&[]],
        false => hosts.chunks(MAX_LISTENERS - 2).collect(),
    };
    let mut grants: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let (mut docs, mut parts) = (Vec::new(), Vec::new());
    for (k, chunk) in chunks.into_iter().enumerate() {
        // The first Gateway's listener for any host has the first
        // certificate, as the import's policy's default; another's, the
        // certificate of its first host.
        let default = match k {
            0 => any.first().map(|t| (*t).clone()),
            _ => chunk.first().map(|t| Tls {
                host: None,
                ..(*t).clone()
            }),
        };
        let name = match k {
            0 => gw_name.clone(),
            k => format!("{gw_name}-{}", k + 1),
        };
        let mine: Vec<&Tls> = default.iter().chain(chunk.iter().copied()).collect();
        for t in mine.iter().filter(|t| t.namespace != *gw_ns) {
            grants
                .entry(t.namespace.clone())
                .or_default()
                .push(t.secret.clone());
        }
        let (doc, part) = one_gateway(&name, gw_ns, options, &mine);
        docs.push(doc);
        parts.push(part);
    }
    let grants = reference_grants(grants, gw_ns, gw_name);
    (docs, grants, parts)
}

/// One Gateway of an `http` listener and the HTTPS listeners of `tls`
/// (its listener for any host first).
fn one_gateway(name: &str, ns: &str, options: &Options, tls: &[&Tls]) -> (Value, Part) {
    let all = json!({"namespaces": {"from": "All"}});
    let mut listeners =
        vec![json!({"name": "http", "port": 80, "protocol": "HTTP", "allowedRoutes": all})];
    let mut https = Vec::new();
    for (n, t) in tls.iter().enumerate() {
        let listener_name = match n {
            0 => "https".to_string(),
            n => format!("https-{n}"),
        };
        let mut listener = json!({
            "name": listener_name, "port": 443, "protocol": "HTTPS", "allowedRoutes": all,
            "tls": {"mode": "Terminate", "certificateRefs": [
                {"group": "", "kind": "Secret", "name": t.secret, "namespace": t.namespace}]}
        });
        if let Some(h) = &t.host {
            listener["hostname"] = json!(h);
        }
        listeners.push(listener);
        https.push((listener_name, t.host.clone()));
    }
    let gateway = json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"gatewayClassName": options.gateway_class, "listeners": listeners}
    });
    let part = Part {
        name: name.to_string(),
        default: tls.first().map_or(0, |t| t.cert),
        hosts: tls.iter().filter_map(|t| t.host.clone()).collect(),
        https,
    };
    (gateway, part)
}

/// The HTTPS listeners the policy's certificates ask for: one for any host
/// with the first certificate (as the base policy's default does), then
/// one for each host of each certificate, each host once; only
/// certificates mounted from a Secret (`--tls-dir/NAMESPACE/SECRET/`).
fn tls_listeners(policy: &Value, options: &Options) -> Vec<Tls> {
    let prefix = format!("{}/", options.tls_dir.trim_end_matches('/'));
    let certs = policy["server"]["tls"]["certificates"].as_array();
    let mut out: Vec<Tls> = Vec::new();
    for (i, cert) in certs.into_iter().flatten().enumerate() {
        let path = cert["cert_file"].as_str().unwrap_or_default();
        let Some(rest) = path.strip_prefix(&prefix) else {
            continue;
        };
        let parts: Vec<&str> = rest.split('/').collect();
        let [ns, secret, _] = parts[..] else {
            continue;
        };
        let mut hosts: Vec<Option<String>> = match cert["hosts"].as_array() {
            Some(h) if !h.is_empty() => h.iter().map(|h| h.as_str().map(String::from)).collect(),
            _ => vec![None],
        };
        if i == 0 {
            hosts.insert(0, None);
        }
        for host in hosts {
            if out.iter().any(|t| t.host == host) {
                continue;
            }
            out.push(Tls {
                host,
                namespace: ns.to_string(),
                secret: secret.to_string(),
                cert: i,
            });
        }
    }
    out
}

/// The Secrets one ReferenceGrant may name (the CRD's `maxItems` of `to`).
const GRANT_TARGETS: usize = 16;

/// The ReferenceGrants of each namespace whose Secrets the Gateway names,
/// one per `GRANT_TARGETS` (`NAME-certificates`, `-2`…), never of them all.
fn reference_grants(
    by_namespace: BTreeMap<String, Vec<String>>,
    gw_ns: &str,
    gw_name: &str,
) -> Vec<Value> {
    let mut grants = Vec::new();
    for (ns, mut secrets) in by_namespace {
        secrets.sort();
        secrets.dedup();
        for (i, chunk) in secrets.chunks(GRANT_TARGETS).enumerate() {
            let to: Vec<Value> = chunk
                .iter()
                .map(|s| json!({"group": "", "kind": "Secret", "name": s}))
                .collect();
            let name = match i {
                0 => format!("{gw_name}-certificates"),
                i => format!("{gw_name}-certificates-{}", i + 1),
            };
            grants.push(json!({
                "apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": gw_ns}],
                         "to": to}
            }));
        }
    }
    grants
}

/// One fairgate route as a route object (two when it redirects plain HTTP
/// to HTTPS) and its RoutePolicy.
fn one_route(
    route: &Value,
    ns: &str,
    name: &str,
    cx: &Cx<'_>,
) -> Result<(Vec<Value>, Vec<Note>), Inexpressible> {
    let mut notes = Vec::new();
    let mut policy = Map::new();
    let mut filters = Vec::new();
    carry(route, &mut policy, &mut filters, &mut notes)?;
    let (backends, grpc) = match route["upstream"].as_str() {
        Some(pool) => {
            let (backend, grpc, pool) = backend(pool, ns, cx)?;
            filters::pool_keys(pool, &mut policy);
            (vec![backend], grpc)
        }
        None => (Vec::new(), false),
    };
    let m = &route["match"];
    let hostnames: Vec<Value> = m["host"].as_str().map(|h| json!(h)).into_iter().collect();
    let matched = if grpc { grpc_match(m)? } else { http_match(m)? };
    if !policy.is_empty() {
        filters.push(json!({"type": "ExtensionRef", "extensionRef":
            {"group": "fairgate.dev", "kind": "RoutePolicy", "name": name}}));
    }
    let rules = rules(route, ns, &matched, &filters, backends, cx, &mut notes)?;
    let https_redirect = route["https_redirect"].as_bool() == Some(true);
    let home = cx.home(m["host"].as_str());
    let parents = parents(m["host"].as_str(), https_redirect, cx, home)?;
    let kind = if grpc { "GRPCRoute" } else { "HTTPRoute" };
    let object = |name: &str, parents: Vec<Value>, rules: Vec<Value>| {
        let mut spec = json!({"parentRefs": parents, "rules": rules});
        if !hostnames.is_empty() {
            spec["hostnames"] = json!(hostnames);
        }
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": kind,
               "metadata": {"name": name, "namespace": ns}, "spec": spec})
    };
    let mut out = vec![object(name, parents, rules)];
    if https_redirect {
        // An HTTPRoute even for gRPC: a GRPCRoute has no redirect.
        let to_https = json!({"type": "RequestRedirect", "requestRedirect": {"scheme": "https", "statusCode": 308}});
        let rule = json!({"matches": [http_match(m)?], "filters": [to_https]});
        let mut plain = object(
            &format!("{name}-to-https"),
            vec![parent_ref(cx, home, Some("http"))],
            vec![rule],
        );
        plain["kind"] = json!("HTTPRoute");
        out.push(plain);
    }
    if !policy.is_empty() {
        out.push(
            json!({"apiVersion": "fairgate.dev/v1alpha1", "kind": "RoutePolicy",
                        "metadata": {"name": name, "namespace": ns}, "spec": policy}),
        );
    }
    Ok((out, notes))
}

/// Gateway `home` (of `cx.gateways`), or its listener `section`.
fn parent_ref(cx: &Cx<'_>, home: usize, section: Option<&str>) -> Value {
    let mut p = json!({"name": cx.gateways[home].name, "namespace": cx.namespace});
    if let Some(s) = section {
        p["sectionName"] = json!(s);
    }
    p
}

/// Where the route attaches: the whole of Gateway `home`, or (when plain
/// HTTP is redirected) only its HTTPS listeners that cover its host.
fn parents(
    host: Option<&str>,
    https_redirect: bool,
    cx: &Cx<'_>,
    home: usize,
) -> Result<Vec<Value>, Inexpressible> {
    if !https_redirect {
        return Ok(vec![parent_ref(cx, home, None)]);
    }
    let fits = |listener: &Option<String>| match (listener, host) {
        (None, _) => true,
        (Some(l), Some(h)) => covers(l, h),
        (Some(_), None) => false,
    };
    let parents: Vec<Value> = cx.gateways[home]
        .https
        .iter()
        .filter(|(_, l)| fits(l))
        .map(|(name, _)| parent_ref(cx, home, Some(name)))
        .collect();
    if parents.is_empty() {
        return Err(Inexpressible(
            "it redirects plain HTTP to HTTPS, but no HTTPS listener covers its host".into(),
        ));
    }
    Ok(parents)
}

/// The route's rules: one, or (for a canary) the header and cookie rules
/// that pick a side before the weighted one.
fn rules(
    route: &Value,
    ns: &str,
    matched: &Value,
    filters: &[Value],
    backends: Vec<Value>,
    cx: &Cx<'_>,
    notes: &mut Vec<Note>,
) -> Result<Vec<Value>, Inexpressible> {
    let rule = |matched: &Value, backends: Vec<Value>| {
        let mut r = json!({"matches": [matched]});
        if !filters.is_empty() {
            r["filters"] = json!(filters);
        }
        if !backends.is_empty() {
            r["backendRefs"] = json!(backends);
        }
        r
    };
    let canary = &route["canary"];
    if canary.is_null() {
        return Ok(vec![rule(matched, backends)]);
    }
    let pool = canary["upstream"]
        .as_str()
        .ok_or_else(|| Inexpressible("a canary without its pool".into()))?;
    let (canary_ref, _, canary_pool) = backend(pool, ns, cx)?;
    filters::one_queue(canary_pool, "a canary")?;
    let main = backends;
    let with_header = |name: &str, kind: &str, value: String| {
        let mut m = matched.clone();
        let header = json!({"type": kind, "name": name, "value": value});
        match m["headers"].as_array_mut() {
            Some(list) => list.push(header),
            None => m["headers"] = json!([header]),
        }
        m
    };
    let mut rules = Vec::new();
    if let Some(h) = canary["header"].as_str() {
        rules.push(rule(
            &with_header(h, "Exact", "always".into()),
            vec![canary_ref.clone()],
        ));
        rules.push(rule(&with_header(h, "Exact", "never".into()), main.clone()));
    }
    if let Some(c) = canary["cookie"].as_str() {
        let cookie = |v: &str| format!("(^|.*;\\s*){}={v}(;.*|$)", regex_escape(c));
        rules.push(rule(
            &with_header("Cookie", "RegularExpression", cookie("always")),
            vec![canary_ref.clone()],
        ));
        rules.push(rule(
            &with_header("Cookie", "RegularExpression", cookie("never")),
            main.clone(),
        ));
    }
    let percent = canary["percent"].as_u64().unwrap_or(0).min(100);
    let mut weighted = Vec::new();
    for (mut b, w) in [
        (main.into_iter().next().unwrap_or_default(), 100 - percent),
        (canary_ref, percent),
    ] {
        if w > 0 {
            b["weight"] = json!(w);
            weighted.push(b);
        }
    }
    if percent > 0 {
        notes.push((
            "canary".into(),
            Verdict::Approximated(format!("{percent}% by backendRef weight, drawn per request: a client is not kept on one side")),
        ));
    }
    rules.push(rule(matched, weighted));
    Ok(rules)
}

/// A pool as a backendRef: its one target must be a Service of the
/// cluster by name (`NAME.NS.svc.DOMAIN:PORT`) reached over plain HTTP or
/// h2c; with whether it is h2c and the pool.
fn backend<'c>(
    pool: &str,
    route_ns: &str,
    cx: &Cx<'c>,
) -> Result<(Value, bool, &'c Value), Inexpressible> {
    let p = cx
        .pools
        .get(pool)
        .ok_or_else(|| Inexpressible(format!("pool {pool} is not written")))?;
    if p["tls"].as_bool() == Some(true) {
        return Err(Inexpressible(format!(
            "pool {pool} reaches its upstream over TLS, and fairgate does not serve the Gateway API's BackendTLSPolicy"
        )));
    }
    let grpc = p["protocol"].as_str() == Some("h2c");
    let targets: Vec<&str> = p["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let suffix = format!(".svc.{}", cx.options.cluster_domain);
    let service = match targets[..] {
        [one] => one.rsplit_once(':').and_then(|(host, port)| {
            let (name, ns) = host.strip_suffix(&suffix)?.split_once('.')?;
            let port: u16 = port.parse().ok()?;
            (!ns.contains('.')).then(|| (name.to_string(), ns.to_string(), port))
        }),
        _ => None,
    };
    let Some((name, _, port)) = service.filter(|(_, ns, _)| ns == route_ns) else {
        return Err(Inexpressible(format!(
            "pool {pool} reaches {targets:?}, not one Service of namespace {route_ns} by name (Gateway API routes do not follow ExternalName Services)"
        )));
    };
    Ok((json!({"name": name, "port": port}), grpc, p))
}

#[cfg(test)]
mod tests;
