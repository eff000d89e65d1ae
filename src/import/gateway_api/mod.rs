//! `fairgate import ingress-nginx --to gateway-api`: the policy the import
//! writes, turned into Gateway API objects for a team leaving its Ingress
//! objects behind. One fairgate route becomes one HTTPRoute (a GRPCRoute
//! for an h2c pool) in its Ingress's namespace, with what the Gateway API
//! says itself (hostnames, matches, backendRefs, redirects, plain
//! rewrites, literal header edits) in the route and the rest (auth,
//! limits, concurrency, CIDRs, body size, CORS, retries, timeouts, app
//! root, template rewrites and header edits) in a fairgate RoutePolicy its
//! rule names by an ExtensionRef. The Gateway has an HTTP listener and an
//! HTTPS listener per TLS host, naming the Secret (with a ReferenceGrant
//! where it lives in another namespace). The base policy (server, store,
//! auth methods, limits and concurrency policies the RoutePolicies name)
//! is written apart, for the controller's ConfigMap. Whatever cannot be
//! carried is a `not supported` line of the report and its route is left
//! out, never served differently.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::{json_node, yaml, Line, Object, Options, Verdict};

mod filters;

use filters::carry;

/// The manifests, the base policy and what became of each route.
pub struct Converted {
    pub manifests: String,
    pub base: String,
    pub report: Vec<Line>,
}

/// What every route's conversion reads.
struct Cx<'a> {
    options: &'a Options,
    gateway: (String, String),
    pools: &'a Map<String, Value>,
    /// HTTPS listeners by name, with the host each covers (None: any).
    https: Vec<(String, Option<String>)>,
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
    let (gateway_doc, grants, https) = gateway_objects(&policy, options, &gateway);
    let cx = Cx {
        options,
        gateway,
        pools,
        https,
    };
    let mut docs = vec![gateway_doc];
    docs.extend(grants);
    let mut report = Vec::new();
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
    Converted {
        manifests: format!("{HEADER}{manifests}"),
        base: base(&policy, options),
        report,
    }
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
/// (routes, pools, all certificates but the first, which the reader needs
/// as the default), serving the Gateway.
fn base(policy: &Value, options: &Options) -> String {
    let mut base = policy.clone();
    if let Some(top) = base.as_object_mut() {
        top.remove("routes");
        top.remove("upstreams");
        top.insert("kubernetes".into(), json!({"gateway": options.gateway}));
    }
    // `get_mut`, not indexing, which would write `tls: {certificates:
    // null}` into a policy without TLS.
    let certs = base
        .get_mut("server")
        .and_then(|s| s.get_mut("tls"))
        .and_then(|t| t.get_mut("certificates"))
        .and_then(Value::as_array_mut);
    if let Some(certs) = certs {
        certs.truncate(1);
        if let Some(first) = certs.first_mut().and_then(Value::as_object_mut) {
            first.remove("hosts");
        }
    }
    let head = "# The base policy of `fairgate import ingress-nginx --to gateway-api`: the\n\
# controller's ConfigMap. Its auth methods, limits and concurrency policies\n\
# are the ones the RoutePolicies name.\n";
    format!("{head}{}", yaml(&json_node(&base)))
}

/// The Ingresses by the prefix their routes' names start with.
fn owners(objects: &[Object]) -> BTreeMap<String, (String, String)> {
    objects
        .iter()
        .filter(|o| o.kind == "Ingress")
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

/// The Gateway (an HTTP listener, an HTTPS listener for each host of each
/// certificate), the ReferenceGrants its Secrets need, and its HTTPS
/// listeners with their hosts.
#[allow(clippy::type_complexity)]
fn gateway_objects(
    policy: &Value,
    options: &Options,
    (gw_ns, gw_name): &(String, String),
) -> (Value, Vec<Value>, Vec<(String, Option<String>)>) {
    let all = json!({"namespaces": {"from": "All"}});
    let mut listeners =
        vec![json!({"name": "http", "port": 80, "protocol": "HTTP", "allowedRoutes": all})];
    let mut https = Vec::new();
    let mut grants: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let prefix = format!("{}/", options.tls_dir.trim_end_matches('/'));
    let certs = policy["server"]["tls"]["certificates"].as_array();
    // The first certificate also answers any host on a listener of its
    // own, as the base policy's default does.
    let first = certs.and_then(|c| c.first()).map(|c| {
        let mut any = c.clone();
        any["hosts"] = json!([]);
        any
    });
    for cert in first.iter().chain(certs.into_iter().flatten()) {
        let path = cert["cert_file"].as_str().unwrap_or_default();
        let Some(rest) = path.strip_prefix(&prefix) else {
            continue;
        };
        let parts: Vec<&str> = rest.split('/').collect();
        let [ns, secret, _] = parts[..] else {
            continue;
        };
        let hosts: Vec<Option<String>> = match cert["hosts"].as_array() {
            Some(h) if !h.is_empty() => h.iter().map(|h| h.as_str().map(String::from)).collect(),
            _ => vec![None],
        };
        for host in hosts {
            if https.iter().any(|(_, h)| *h == host) {
                continue;
            }
            let name = match https.len() {
                0 => "https".to_string(),
                n => format!("https-{n}"),
            };
            let mut listener = json!({
                "name": name, "port": 443, "protocol": "HTTPS", "allowedRoutes": all,
                "tls": {"mode": "Terminate", "certificateRefs": [
                    {"group": "", "kind": "Secret", "name": secret, "namespace": ns}]}
            });
            if let Some(h) = &host {
                listener["hostname"] = json!(h);
            }
            listeners.push(listener);
            https.push((name, host));
            if ns != gw_ns {
                grants
                    .entry(ns.to_string())
                    .or_default()
                    .push(secret.to_string());
            }
        }
    }
    let gateway = json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": gw_name, "namespace": gw_ns},
        "spec": {"gatewayClassName": options.gateway_class, "listeners": listeners}
    });
    let grants = reference_grants(grants, gw_ns, gw_name);
    (gateway, grants, https)
}

/// A ReferenceGrant in each namespace whose Secrets the Gateway names.
fn reference_grants(
    by_namespace: BTreeMap<String, Vec<String>>,
    gw_ns: &str,
    gw_name: &str,
) -> Vec<Value> {
    by_namespace
        .into_iter()
        .map(|(ns, mut secrets)| {
            secrets.sort();
            secrets.dedup();
            let to: Vec<Value> = secrets
                .iter()
                .map(|s| json!({"group": "", "kind": "Secret", "name": s}))
                .collect();
            json!({
                "apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant",
                "metadata": {"name": format!("{gw_name}-certificates"), "namespace": ns},
                "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": gw_ns}],
                         "to": to}
            })
        })
        .collect()
}

/// A report note: the item and what became of it.
pub(super) type Note = (String, Verdict);

/// One fairgate route as a route object (two when it redirects plain HTTP
/// to HTTPS) and its RoutePolicy.
fn one_route(
    route: &Value,
    ns: &str,
    name: &str,
    cx: &Cx<'_>,
) -> Result<(Vec<Value>, Vec<Note>), String> {
    let mut notes = Vec::new();
    let mut policy = Map::new();
    let mut filters = Vec::new();
    carry(route, &mut policy, &mut filters, &mut notes)?;
    let (backends, grpc) = match route["upstream"].as_str() {
        Some(pool) => {
            let (backend, grpc, connect) = backend(pool, ns, cx)?;
            if let Some(c) = connect {
                let timeouts = policy.entry("timeouts").or_insert_with(|| json!({}));
                if timeouts.get("connect").is_none() {
                    timeouts["connect"] = json!(c);
                }
            }
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
    let parents = parents(m["host"].as_str(), https_redirect, cx)?;
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
            vec![parent_ref(cx, Some("http"))],
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

fn parent_ref(cx: &Cx<'_>, section: Option<&str>) -> Value {
    let mut p = json!({"name": cx.gateway.1, "namespace": cx.gateway.0});
    if let Some(s) = section {
        p["sectionName"] = json!(s);
    }
    p
}

/// Where the route attaches: the whole Gateway, or (when plain HTTP is
/// redirected) only the HTTPS listeners that cover its host.
fn parents(host: Option<&str>, https_redirect: bool, cx: &Cx<'_>) -> Result<Vec<Value>, String> {
    if !https_redirect {
        return Ok(vec![parent_ref(cx, None)]);
    }
    let covers = |listener: &Option<String>| match (listener, host) {
        (None, _) => true,
        (Some(l), Some(h)) => l == h || l.strip_prefix('*').is_some_and(|s| h.ends_with(s)),
        (Some(_), None) => false,
    };
    let parents: Vec<Value> = cx
        .https
        .iter()
        .filter(|(_, l)| covers(l))
        .map(|(name, _)| parent_ref(cx, Some(name)))
        .collect();
    if parents.is_empty() {
        return Err(
            "it redirects plain HTTP to HTTPS, but no HTTPS listener covers its host".into(),
        );
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
) -> Result<Vec<Value>, String> {
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
        .ok_or("a canary without its pool")?;
    let (canary_ref, _, _) = backend(pool, ns, cx)?;
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

fn regex_escape(s: &str) -> String {
    s.chars()
        .flat_map(
            |c| match c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                true => vec![c],
                false => vec!['\\', c],
            },
        )
        .collect()
}

/// A pool as a backendRef: its one target must be a Service of the
/// cluster by name (`NAME.NS.svc.DOMAIN:PORT`) reached over plain HTTP or
/// h2c; with whether it is h2c and its connect timeout.
fn backend(
    pool: &str,
    route_ns: &str,
    cx: &Cx<'_>,
) -> Result<(Value, bool, Option<String>), String> {
    let p = cx
        .pools
        .get(pool)
        .ok_or_else(|| format!("pool {pool} is not written"))?;
    if p["tls"].as_bool() == Some(true) {
        return Err(format!(
            "pool {pool} reaches its upstream over TLS, and fairgate does not serve the Gateway API's BackendTLSPolicy"
        ));
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
        return Err(format!(
            "pool {pool} reaches {targets:?}, not one Service of namespace {route_ns} by name (Gateway API routes do not follow ExternalName Services)"
        ));
    };
    let backend = json!({"name": name, "port": port});
    Ok((
        backend,
        grpc,
        p["connect_timeout"].as_str().map(String::from),
    ))
}

/// An HTTPRoute match: the path and the headers.
fn http_match(m: &Value) -> Result<Value, String> {
    let mut out = json!({});
    let path = [
        ("path", "Exact"),
        ("path_prefix", "PathPrefix"),
        ("path_regex", "RegularExpression"),
    ]
    .into_iter()
    .find_map(|(key, kind)| m[key].as_str().map(|v| json!({"type": kind, "value": v})));
    if let Some(p) = path {
        out["path"] = p;
    }
    let headers = headers(m)?;
    if !headers.is_empty() {
        out["headers"] = json!(headers);
    }
    Ok(out)
}

/// A GRPCRoute match: a service (the path `/NAME`), any (`/`), headers.
fn grpc_match(m: &Value) -> Result<Value, String> {
    let mut out = json!({});
    match m["path_prefix"].as_str() {
        Some("/") => {}
        Some(p) if !p[1..].contains('/') => {
            out["method"] = json!({"type": "Exact", "service": &p[1..]});
        }
        _ => return Err("an h2c (gRPC) route's path is / or /SERVICE".into()),
    }
    let headers = headers(m)?;
    if !headers.is_empty() {
        out["headers"] = json!(headers);
    }
    Ok(out)
}

fn headers(m: &Value) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for (name, v) in m["headers"].as_object().into_iter().flatten() {
        let (kind, value) = match (v.as_str(), v["regex"].as_str()) {
            (Some(s), _) => ("Exact", s),
            (None, Some(r)) => ("RegularExpression", r),
            _ => {
                return Err(format!(
                    "header match {name} is neither a value nor a regex"
                ))
            }
        };
        out.push(json!({"type": kind, "name": name, "value": value}));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_belongs_to_the_ingress_of_the_longest_prefix() {
        let owners = BTreeMap::from([
            ("shop_a".to_string(), ("shop".to_string(), "a".to_string())),
            (
                "shop_a-1".to_string(),
                ("shop".to_string(), "a-1".to_string()),
            ),
        ]);
        assert_eq!(owner(&owners, "shop_a-1-0"), Some(("shop", "a-1", "0")));
        assert_eq!(owner(&owners, "shop_a-1"), Some(("shop", "a", "1")));
        assert_eq!(
            owner(&owners, "shop_a-0-canary"),
            Some(("shop", "a", "0-canary"))
        );
        assert_eq!(owner(&owners, "shop_b-0"), None);
    }
}
