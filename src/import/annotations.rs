//! What each ingress-nginx annotation becomes: a `Plan` of route keys per
//! Ingress (each annotation reported once), the routes of its paths, and
//! canaries folded into main routes. nginx units (sizes `8m`, timeouts in
//! seconds, comma lists) are read here.

use std::collections::BTreeMap;

use serde_json::Value;

use super::backend::Protocol;
use super::draft::Draft;
use super::emit::Node;
use super::manifests::{text, Object};
use super::names::policy_name;
use super::nginx::{statements, variables, words};
use super::plan::Plan;
use super::proxy_ssl;
use super::routes::{PathRule, Route};
use super::streaming;
use super::units::{cidrs, comma_list, duration, go_bool, nginx_size, seconds};
use super::Verdict;

/// Every annotation the import maps or approximates (without the prefix);
/// any other is reported `not supported`. docs/migrating-from-ingress-nginx.md
/// has a row for each (a test holds them together).
pub const KNOWN: &[&str] = &[
    "app-root",
    "backend-protocol",
    "canary",
    "canary-by-cookie",
    "canary-by-header",
    "canary-by-header-pattern",
    "canary-by-header-value",
    "canary-weight",
    "canary-weight-total",
    "client-body-buffer-size",
    "configuration-snippet",
    "cors-allow-credentials",
    "cors-allow-headers",
    "cors-allow-methods",
    "cors-allow-origin",
    "cors-expose-headers",
    "cors-max-age",
    "custom-headers",
    "denylist-source-range",
    "enable-cors",
    "force-ssl-redirect",
    "limit-burst-multiplier",
    "limit-connections",
    "limit-rpm",
    "limit-rps",
    "limit-whitelist",
    "permanent-redirect",
    "permanent-redirect-code",
    "proxy-body-size",
    "proxy-buffer-size",
    "proxy-buffering",
    "proxy-buffers-number",
    "proxy-busy-buffers-size",
    "proxy-connect-timeout",
    "proxy-max-temp-file-size",
    "proxy-next-upstream",
    "proxy-next-upstream-tries",
    "proxy-read-timeout",
    "proxy-request-buffering",
    "proxy-send-timeout",
    "proxy-ssl-name",
    "proxy-ssl-secret",
    "proxy-ssl-server-name",
    "proxy-ssl-verify",
    "rewrite-target",
    "service-upstream",
    "ssl-redirect",
    "temporal-redirect",
    "temporal-redirect-code",
    "upstream-vhost",
    "use-regex",
    "whitelist-source-range",
    "x-forwarded-prefix",
];

/// The Ingress's annotations under the controller's prefix, prefix removed.
fn annotations(ing: &Object, prefix: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Some(Value::Object(map)) = ing.value.pointer("/metadata/annotations") {
        for (k, v) in map {
            if let Some(short) = k.strip_prefix(prefix).and_then(|k| k.strip_prefix('/')) {
                out.insert(short.to_string(), text(v, &[]).unwrap_or_default());
            }
        }
    }
    out
}

/// One annotation's value.
pub fn get(ing: &Object, prefix: &str, key: &str) -> Option<String> {
    annotations(ing, prefix).remove(key)
}

/// `backend-protocol`, or HTTP.
pub fn protocol_of(draft: &Draft<'_>, ing: &Object) -> Protocol {
    match get(ing, &draft.options.annotation_prefix, "backend-protocol").as_deref() {
        Some("HTTPS") => Protocol::Https,
        Some("GRPC") => Protocol::Grpc,
        Some("GRPCS") => Protocol::Grpcs,
        _ => Protocol::Http,
    }
}

/// Reads every annotation of a main Ingress once, reporting each.
pub fn plan(draft: &mut Draft<'_>, ing: &Object) -> Plan {
    let ann = annotations(ing, &draft.options.annotation_prefix);
    let mut plan = Plan::default();
    let mut lines: Vec<(String, Verdict)> = Vec::new();
    rate_limits(draft, ing, &ann, &mut plan, &mut lines);
    cors(&ann, &mut plan, &mut lines);
    retries(draft, &ann, &mut plan, &mut lines);
    timeouts(draft, &ann, &mut plan, &mut lines);
    let protocol = protocol_of(draft, ing);
    proxy_ssl::read(draft, &ing.namespace, protocol, &ann, &mut plan, &mut lines);
    for (key, value) in &ann {
        if lines.iter().any(|(k, _)| k == key) {
            continue;
        }
        let verdict = single(draft, ing, key, value, &mut plan);
        lines.push((key.clone(), verdict));
    }
    if !plan.keys.contains_key("max_body") {
        if let Some(size) = &draft.globals.body_size {
            plan.keys.insert("max_body", Node::str(size.clone()));
        }
    }
    withhold(&lines, &mut plan);
    lines.sort_by(|a, b| a.0.cmp(&b.0));
    let prefix = draft.options.annotation_prefix.clone();
    for (key, verdict) in lines {
        draft.line(&ing.id(), &format!("{prefix}/{key}"), verdict);
    }
    plan
}

/// Access rules that did not carry over (authentication, a source range
/// that did not parse, a snippet not fully translated) and a backend
/// protocol fairgate does not speak withhold the Ingress: serving its paths
/// without them would open what was closed, or break it.
fn withhold(lines: &[(String, Verdict)], plan: &mut Plan) {
    // A snippet not fully translated may hold an access rule in any form
    // (`if (...) { return 403; }`, `limit_except`, `deny`): withheld too.
    let access = |key: &str| {
        key.starts_with("auth-") || key.ends_with("source-range") || key.ends_with("snippet")
    };
    let lost: Vec<&str> = lines
        .iter()
        .filter(|(k, v)| {
            matches!(v, Verdict::Unsupported(_))
                && (access(k) || k == "backend-protocol" || proxy_ssl::KEYS.contains(&k.as_str()))
        })
        .map(|(k, _)| k.as_str())
        .collect();
    if !lost.is_empty() {
        plan.withheld = Some(format!(
            "{} did not carry over; its paths served without them would be open or broken",
            lost.join(", ")
        ));
    }
}

/// Annotations that stand alone.
fn single(draft: &mut Draft<'_>, ing: &Object, key: &str, value: &str, plan: &mut Plan) -> Verdict {
    let mapped = |s: &str| Verdict::Mapped(s.to_string());
    match key {
        "use-regex" if go_bool(value) => mapped(
            "paths as path_regex: case-insensitive, matching from the start as nginx does; \
             every other path of its hosts too, whichever Ingress it comes from",
        ),
        "use-regex" => mapped("off"),
        "rewrite-target" => {
            if value.contains(['{', '}']) {
                return Verdict::Unsupported("a { or } in the target".into());
            }
            plan.rewrite_target = Some(value.to_string());
            mapped("rewrite.path, $N as the path's numbered groups; the paths become regular expressions as in ingress-nginx, \
                    and every other path of their hosts too")
        }
        "app-root" if value.starts_with('/') => {
            plan.keys.insert("app_root", Node::str(value));
            mapped("app_root: / answers 302 to it")
        }
        "ssl-redirect" => {
            plan.ssl_redirect = Some(value == "true");
            mapped("https_redirect on hosts with a TLS section")
        }
        "force-ssl-redirect" if value == "true" && draft.certs.is_empty() => Verdict::Unsupported(
            "no Ingress has a TLS section, and fairgate redirects only when it has a TLS listener; \
             behind a load balancer that ends TLS, redirect there"
                .into(),
        ),
        "force-ssl-redirect" => {
            plan.force_ssl_redirect = value == "true";
            mapped("https_redirect")
        }
        "permanent-redirect" | "temporal-redirect" => redirect(ing, draft, key, value, plan),
        "permanent-redirect-code" | "temporal-redirect-code" => mapped("redirect.code"),
        "proxy-body-size" => match nginx_size(value) {
            Some(Some(size)) => {
                plan.keys.insert("max_body", Node::str(size));
                mapped("max_body; bigger bodies get 413")
            }
            Some(None) => {
                plan.keys.insert("max_body", Node::str("1TiB"));
                mapped("0 is no limit: max_body 1TiB")
            }
            None => Verdict::Unsupported(format!("{value:?} is not an nginx size")),
        },
        "whitelist-source-range" | "denylist-source-range" => match cidrs(value) {
            Ok(list) => {
                let target = if key == "whitelist-source-range" { "allow_cidrs" } else { "deny_cidrs" };
                plan.keys.insert(target, Node::strs(list));
                Verdict::Mapped(format!("{target}; others get 403"))
            }
            Err(why) => Verdict::Unsupported(why),
        },
        "backend-protocol" => backend_protocol(draft, ing, value, plan),
        "upstream-vhost" => {
            plan.vhost = Some(value.to_string());
            mapped("rewrite.host")
        }
        "x-forwarded-prefix" if value.contains(['{', '}']) => Verdict::Unsupported("a { or } in the value".into()),
        "x-forwarded-prefix" => header_edit(plan, "request_headers", "set", "X-Forwarded-Prefix", value)
            .map_or_else(Verdict::Unsupported, |_| mapped("request_headers.set X-Forwarded-Prefix")),
        "custom-headers" => custom_headers(draft, ing, value, plan),
        "configuration-snippet" => snippet(value, plan),
        "service-upstream" => mapped("fairgate always forwards to the Service's address"),
        k if streaming::KEYS.contains(&k) => streaming::verdict(k, value),
        k if k.starts_with("canary") => mapped("no effect without canary: \"true\", as in ingress-nginx"),
        other => unsupported(other),
    }
}

/// `backend-protocol`, with the verification `proxy-ssl-*` gave.
fn backend_protocol(draft: &Draft<'_>, ing: &Object, value: &str, plan: &mut Plan) -> Verdict {
    if !matches!(value, "HTTP" | "HTTPS" | "GRPC" | "GRPCS") {
        return Verdict::Unsupported(format!("{value} backends"));
    }
    plan.protocol = protocol_of(draft, ing);
    let why = match (plan.protocol, plan.verify.on) {
        (Protocol::Http, _) => "protocol http1",
        (Protocol::Https, false) => {
            "tls: true, tls_verify: false, as ingress-nginx does without proxy-ssl-verify"
        }
        (Protocol::Https, true) => "tls: true, tls_verify: true as proxy-ssl-verify says",
        (Protocol::Grpc, _) => "protocol: h2c",
        (Protocol::Grpcs, false) => "protocol: h2, tls: true, tls_verify: false",
        (Protocol::Grpcs, true) => {
            "protocol: h2, tls: true, tls_verify: true as proxy-ssl-verify says"
        }
    };
    Verdict::Mapped(why.into())
}

/// Why an annotation without a mapping has none.
fn unsupported(key: &str) -> Verdict {
    match key {
        "load-balance" | "upstream-hash-by" | "affinity" | "affinity-mode" => Verdict::Unsupported(
            "a pool's one target is the Service's address, which kube-proxy balances; \
             the choice of endpoint by algorithm, key or cookie is lost"
                .into(),
        ),
        "server-snippet" => Verdict::Unsupported("a server-block snippet is nginx configuration; it is never translated".into()),
        k if k.starts_with("auth-") => Verdict::Unsupported(
            "external or basic authentication: fairgate authenticates bearer JWTs itself (auth:); keep the auth service behind it".into(),
        ),
        _ => Verdict::Unsupported("no fairgate equivalent".into()),
    }
}

fn redirect(ing: &Object, draft: &Draft<'_>, key: &str, url: &str, plan: &mut Plan) -> Verdict {
    let permanent = key == "permanent-redirect";
    let code_key = format!("{key}-code");
    let code = get(ing, &draft.options.annotation_prefix, &code_key)
        .map(|c| c.parse::<u64>().unwrap_or(0))
        .unwrap_or(if permanent { 301 } else { 302 });
    if !matches!(code, 301 | 302 | 307 | 308) {
        return Verdict::Unsupported(format!(
            "code {code}: fairgate redirects with 301, 302, 307 or 308"
        ));
    }
    if url.contains(['{', '}']) {
        return Verdict::Unsupported("a { or } in the URL".into());
    }
    plan.keys.insert(
        "redirect",
        Node::map([("to", Node::str(url)), ("code", Node::Int(code))]),
    );
    Verdict::Mapped(format!(
        "redirect {code} to the URL as given (the path is not appended, as in ingress-nginx)"
    ))
}

/// `limit-rps`, `limit-rpm`, `limit-burst-multiplier`, `limit-connections`,
/// `limit-whitelist`: per controller pod in ingress-nginx, for the fleet here.
fn rate_limits(
    draft: &mut Draft<'_>,
    ing: &Object,
    ann: &BTreeMap<String, String>,
    plan: &mut Plan,
    lines: &mut Vec<(String, Verdict)>,
) {
    let n = draft.replicas;
    let multiplier = match ann.get("limit-burst-multiplier").map(|m| m.parse::<u64>()) {
        Some(Ok(m)) if m >= 1 => {
            lines.push((
                "limit-burst-multiplier".into(),
                Verdict::Mapped("the capacity of the rps/rpm limits".into()),
            ));
            m
        }
        Some(_) => {
            let why = "not a whole number of at least 1; 5 used".into();
            lines.push(("limit-burst-multiplier".into(), Verdict::Unsupported(why)));
            5
        }
        None => 5,
    };
    let base = policy_name(&format!("{}_{}", ing.namespace, ing.name));
    let mut limits = Vec::new();
    for (key, unit, suffix) in [("limit-rps", "s", "rps"), ("limit-rpm", "m", "rpm")] {
        let Some(value) = ann.get(key) else { continue };
        let Some(r) = value.parse::<u64>().ok().filter(|r| *r >= 1) else {
            lines.push((
                key.into(),
                Verdict::Unsupported(format!("{value:?} is not a whole number of at least 1")),
            ));
            continue;
        };
        let (capacity, rate) = (n * (r * multiplier + 1), n * r);
        let name = format!("{base}-{suffix}");
        let mut limit = Node::map([
            ("scope", Node::str("client_ip")),
            (
                "default",
                Node::map([
                    ("capacity", Node::Int(capacity)),
                    ("rate", Node::str(format!("{rate}/{unit}"))),
                ]),
            ),
        ]);
        if draft.globals.limit_req_status != 429 {
            limit.set("status", Node::Int(draft.globals.limit_req_status.into()));
        }
        if draft.options.shadow {
            limit.set("shadow", Node::Bool(true));
        }
        draft.limits.push((name.clone(), limit));
        limits.push(name.clone());
        let why = format!(
            "per pod {r}/{unit}, burst {} (x{multiplier}), nodelay, per client address, refused {}; \
             for {n} pods: limits.{name} capacity {n} x ({r} x {multiplier} + 1) = {capacity}, rate {rate}/{unit}{}; \
             one client may now use the whole fleet's burst",
            r * multiplier,
            draft.globals.limit_req_status,
            if draft.options.shadow { ", shadow" } else { "" }
        );
        lines.push((key.into(), Verdict::Approximated(why)));
    }
    if !limits.is_empty() {
        plan.keys.insert("limits", Node::strs(limits));
    }
    connections(draft, &base, ann, plan, lines);
}

/// `limit-connections` (a concurrency policy) and `limit-whitelist`.
fn connections(
    draft: &mut Draft<'_>,
    base: &str,
    ann: &BTreeMap<String, String>,
    plan: &mut Plan,
    lines: &mut Vec<(String, Verdict)>,
) {
    let n = draft.replicas;
    if let Some(value) = ann.get("limit-connections") {
        match value.parse::<u64>().ok().filter(|c| *c >= 1) {
            Some(c) => {
                let name = format!("{base}-conn");
                let mut policy = Node::map([
                    ("scope", Node::str("client_ip")),
                    ("slots", Node::Int(n * c)),
                ]);
                if draft.globals.limit_conn_status != 429 {
                    policy.set("status", Node::Int(draft.globals.limit_conn_status.into()));
                }
                draft.concurrency.push((name.clone(), policy));
                plan.keys.insert("concurrency", Node::str(name.clone()));
                let why = format!(
                    "ingress-nginx counted open connections per address per pod ({c}); fairgate counts requests in flight \
                     per address across the fleet: concurrency.{name} slots {n} x {c} = {}",
                    n * c
                );
                lines.push(("limit-connections".into(), Verdict::Approximated(why)));
            }
            None => lines.push((
                "limit-connections".into(),
                Verdict::Unsupported(format!("{value:?} is not a whole number of at least 1")),
            )),
        }
    }
    if let Some(value) = ann.get("limit-whitelist") {
        let verdict = match cidrs(value) {
            Ok(list) => {
                plan.keys.insert("limit_exempt_cidrs", Node::strs(list));
                match plan.keys.contains_key("concurrency") {
                    true => Verdict::Approximated(
                        "limit_exempt_cidrs: no tokens spent, but the concurrency slots are still taken".into(),
                    ),
                    false => Verdict::Mapped("limit_exempt_cidrs".into()),
                }
            }
            Err(why) => Verdict::Unsupported(why),
        };
        lines.push(("limit-whitelist".into(), verdict));
    }
}

/// `enable-cors` and `cors-*`, with ingress-nginx's defaults.
fn cors(ann: &BTreeMap<String, String>, plan: &mut Plan, lines: &mut Vec<(String, Verdict)>) {
    let keys = [
        "cors-allow-origin",
        "cors-allow-methods",
        "cors-allow-headers",
        "cors-expose-headers",
        "cors-allow-credentials",
        "cors-max-age",
    ];
    if ann.get("enable-cors").map(String::as_str) != Some("true") {
        return cors_off(ann, &keys, lines);
    }
    let list = |key: &str, default: &str| comma_list(ann.get(key).map_or(default, String::as_str));
    let mut origins = list("cors-allow-origin", "*");
    let wildcards: Vec<String> = origins
        .iter()
        .filter(|o| *o != "*" && o.contains('*'))
        .cloned()
        .collect();
    origins.retain(|o| o == "*" || !o.contains('*'));
    let mut credentials = ann.get("cors-allow-credentials").map(String::as_str) != Some("false");
    let mut node = Node::map([("origins", Node::strs(origins.clone()))]);
    node.set(
        "methods",
        Node::strs(list(
            "cors-allow-methods",
            "GET, PUT, POST, DELETE, PATCH, OPTIONS",
        )),
    );
    node.set(
        "headers",
        Node::strs(list(
            "cors-allow-headers",
            "DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,Content-Type,Range,Authorization",
        )),
    );
    let expose = list("cors-expose-headers", "");
    if !expose.is_empty() {
        node.set("expose", Node::strs(expose));
    }
    let mut enable = Verdict::Mapped("cors: preflights answered by the gateway".into());
    if credentials && origins.iter().any(|o| o == "*") {
        credentials = false;
        enable = Verdict::Approximated(
            "credentials off: ingress-nginx sent Allow-Credentials with *, which browsers refuse; list the origins to allow them".into(),
        );
    }
    node.set("credentials", Node::Bool(credentials));
    let age = ann
        .get("cors-max-age")
        .map(String::as_str)
        .unwrap_or("1728000");
    match age.parse::<u64>() {
        Ok(s) => node.set("max_age", Node::str(duration(s))),
        Err(_) => lines.push((
            "cors-max-age".into(),
            Verdict::Unsupported(format!("{age:?} is not seconds")),
        )),
    }
    plan.keys.insert("cors", node);
    lines.push(("enable-cors".into(), enable));
    for key in keys.iter().filter(|k| ann.contains_key(**k)) {
        if !lines.iter().any(|(k, _)| k == key) {
            lines.push((key.to_string(), cors_line(key, &wildcards)));
        }
    }
}

fn cors_line(key: &str, wildcards: &[String]) -> Verdict {
    match key {
        "cors-allow-origin" if !wildcards.is_empty() => Verdict::Unsupported(format!(
            "wildcard origins {} are not matched by fairgate; list each origin",
            wildcards.join(", ")
        )),
        _ => Verdict::Mapped(format!("cors.{}", cors_key(key))),
    }
}

/// `cors-*` without `enable-cors: "true"` do nothing, in ingress-nginx too.
fn cors_off(ann: &BTreeMap<String, String>, keys: &[&str], lines: &mut Vec<(String, Verdict)>) {
    for key in keys.iter().filter(|k| ann.contains_key(**k)) {
        lines.push((
            key.to_string(),
            Verdict::Mapped("no effect without enable-cors, as in ingress-nginx".into()),
        ));
    }
    if ann.contains_key("enable-cors") {
        lines.push(("enable-cors".into(), Verdict::Mapped("off".into())));
    }
}

fn cors_key(annotation: &str) -> &'static str {
    match annotation {
        "cors-allow-origin" => "origins",
        "cors-allow-methods" => "methods",
        "cors-allow-headers" => "headers",
        "cors-expose-headers" => "expose",
        "cors-allow-credentials" => "credentials",
        _ => "max_age",
    }
}

/// `proxy-next-upstream`, `-tries`, `-timeout` (or the ConfigMap's).
fn retries(
    draft: &Draft<'_>,
    ann: &BTreeMap<String, String>,
    plan: &mut Plan,
    lines: &mut Vec<(String, Verdict)>,
) {
    let spec = ann
        .get("proxy-next-upstream")
        .or(draft.globals.next_upstream.as_ref());
    let tries = ann
        .get("proxy-next-upstream-tries")
        .or(draft.globals.next_upstream_tries.as_ref());
    if let Some(t) = ann.get("proxy-next-upstream-timeout") {
        let why = format!("{t}s: fairgate bounds retries by count only (and timeouts.total)");
        lines.push((
            "proxy-next-upstream-timeout".into(),
            Verdict::Unsupported(why),
        ));
    }
    if spec.is_none() && tries.is_none() {
        return;
    }
    let spec = spec.map(String::as_str).unwrap_or("error timeout");
    let tries: u64 = tries.and_then(|t| t.parse().ok()).unwrap_or(3);
    let mut on: Vec<&str> = Vec::new();
    let mut dropped: Vec<&str> = Vec::new();
    let mut post = false;
    for token in spec.split_whitespace() {
        match token {
            "error" => on.extend(["connect_failure", "reset"]),
            "timeout" => on.push("connect_failure"),
            "http_502" | "http_503" | "http_504" => on.push(&token[5..]),
            "non_idempotent" => post = true,
            "off" => on.clear(),
            other => dropped.push(other),
        }
    }
    let mut seen = Vec::new();
    on.retain(|o| {
        let fresh = !seen.contains(o);
        seen.push(*o);
        fresh
    });
    let mut notes = Vec::new();
    if spec.contains("timeout") {
        notes.push("a read timeout is not retried, a connect timeout is".to_string());
    }
    if !dropped.is_empty() {
        notes.push(format!("{} not retried", dropped.join(", ")));
    }
    let verdict = if on.is_empty() || tries == 1 || spec.split_whitespace().any(|t| t == "off") {
        Verdict::Mapped("no retries".into())
    } else {
        let attempts = if tries == 0 { 10 } else { tries.clamp(2, 10) };
        let mut node = Node::map([
            ("attempts", Node::Int(attempts)),
            ("retry_on", Node::strs(on.iter().copied())),
        ]);
        if post {
            node.set(
                "methods",
                Node::strs(["GET", "HEAD", "OPTIONS", "PUT", "DELETE", "POST", "PATCH"]),
            );
        }
        plan.keys.insert("retries", node);
        match notes.is_empty() {
            true => Verdict::Mapped(format!("retries: {attempts} attempts")),
            false => Verdict::Approximated(format!(
                "retries: {attempts} attempts; {}",
                notes.join("; ")
            )),
        }
    };
    for key in ["proxy-next-upstream", "proxy-next-upstream-tries"] {
        if ann.contains_key(key) {
            lines.push((key.into(), verdict.clone()));
        }
    }
}

/// `proxy-connect-timeout`, `proxy-read-timeout`, `proxy-send-timeout`.
fn timeouts(
    draft: &Draft<'_>,
    ann: &BTreeMap<String, String>,
    plan: &mut Plan,
    lines: &mut Vec<(String, Verdict)>,
) {
    let mut node = Node::Map(Vec::new());
    for (i, (key, target)) in [
        ("proxy-connect-timeout", "connect"),
        ("proxy-read-timeout", "read"),
        ("proxy-send-timeout", "write"),
    ]
    .into_iter()
    .enumerate()
    {
        let value = match ann.get(key) {
            Some(v) => match seconds(v) {
                Some(d) => {
                    lines.push((key.into(), Verdict::Mapped(format!("timeouts.{target}"))));
                    Some(d)
                }
                None => {
                    lines.push((
                        key.into(),
                        Verdict::Unsupported(format!("{v:?} is not a number of seconds")),
                    ));
                    None
                }
            },
            // The ConfigMap's connect timeout is every pool's connect_timeout.
            None if i == 0 => None,
            None => draft.globals.timeouts[i].clone(),
        };
        if let Some(d) = value {
            node.set(target, Node::str(d));
        }
    }
    if node != Node::Map(Vec::new()) {
        plan.keys.insert("timeouts", node);
    }
}

/// Adds a header edit to `request_headers` or `response_headers`.
fn header_edit(
    plan: &mut Plan,
    side: &'static str,
    op: &str,
    name: &str,
    value: &str,
) -> Result<(), String> {
    if crate::config::edit_reserved(name) {
        return Err(format!("{name} is set by the gateway itself"));
    }
    let edits = plan
        .keys
        .entry(side)
        .or_insert_with(|| Node::Map(Vec::new()));
    match op {
        "remove" => match edits.get_mut("remove") {
            Some(Node::Seq(items)) => items.push(Node::str(name)),
            _ => edits.set("remove", Node::strs([name])),
        },
        _ => {
            if edits.get_mut(op).is_none() {
                edits.set(op, Node::Map(Vec::new()));
            }
            if let Some(m) = edits.get_mut(op) {
                m.set(name, Node::str(value));
            }
        }
    }
    Ok(())
}

/// `custom-headers`: a ConfigMap of response headers.
fn custom_headers(draft: &Draft<'_>, ing: &Object, reference: &str, plan: &mut Plan) -> Verdict {
    let Some(Value::Object(data)) = draft.configmap_data(&ing.namespace, reference) else {
        return Verdict::Unsupported(format!("ConfigMap {reference} is not among the inputs"));
    };
    for (name, value) in data {
        let value = text(value, &[]).unwrap_or_default();
        if value.contains(['{', '}']) {
            return Verdict::Unsupported(format!("a {{ or }} in the value of {name}"));
        }
        if let Err(why) = header_edit(plan, "response_headers", "set", name, &value) {
            return Verdict::Unsupported(why);
        }
    }
    Verdict::Mapped(format!("response_headers.set from ConfigMap {reference}"))
}

/// A `configuration-snippet` that only sets headers; anything else in it
/// makes the whole snippet unsupported.
fn snippet(text: &str, plan: &mut Plan) -> Verdict {
    let mut edits: Vec<(&'static str, &'static str, String, String)> = Vec::new();
    let mut partial = false;
    for statement in statements(text) {
        let words = words(&statement);
        let Some(directive) = words.first() else {
            continue;
        };
        let edit = match directive.as_str() {
            "more_set_headers"
                if words.len() >= 2 && words[1..].iter().all(|w| !w.starts_with('-')) =>
            {
                words[1..]
                    .iter()
                    .map(|h| match h.split_once(':') {
                        Some((n, v)) => Ok((
                            "response_headers",
                            "set",
                            n.trim().to_string(),
                            v.trim().to_string(),
                        )),
                        None => Err(format!("more_set_headers {h:?}")),
                    })
                    .collect::<Result<Vec<_>, _>>()
            }
            "more_clear_headers" if words.len() >= 2 => Ok(words[1..]
                .iter()
                .map(|h| ("response_headers", "remove", h.clone(), String::new()))
                .collect()),
            "add_header" if words.len() == 3 || (words.len() == 4 && words[3] == "always") => {
                partial |= words.len() == 3;
                Ok(vec![(
                    "response_headers",
                    "add",
                    words[1].clone(),
                    words[2].clone(),
                )])
            }
            "proxy_set_header" if words.len() == 3 => Ok(vec![(
                "request_headers",
                "set",
                words[1].clone(),
                words[2].clone(),
            )]),
            other => Err(format!("`{other}` does more than set a header")),
        };
        match edit {
            Ok(list) => edits.extend(list),
            Err(why) => {
                return Verdict::Unsupported(format!("{why}; the snippet is not translated"))
            }
        }
    }
    for (side, op, name, value) in &edits {
        if value.contains(['{', '}']) {
            return Verdict::Unsupported(format!("a {{ or }} in the value of {name}"));
        }
        let value = match variables(value) {
            Ok(v) => v,
            Err(why) => return Verdict::Unsupported(why),
        };
        if let Err(why) = header_edit(plan, side, op, name, &value) {
            return Verdict::Unsupported(why);
        }
    }
    match partial {
        true => Verdict::Approximated(
            "header edits; add_header without `always` set headers on 2xx/3xx answers only, fairgate on every upstream answer".into(),
        ),
        false => Verdict::Mapped("header edits (request_headers, response_headers)".into()),
    }
}

/// The route of one Ingress path, with the plan's keys.
#[allow(clippy::too_many_arguments)]
pub fn route(
    draft: &mut Draft<'_>,
    ing: &Object,
    plan: &mut Plan,
    name: String,
    host: Option<String>,
    path: String,
    kind: String,
    upstream: String,
) -> Option<Route> {
    let id = ing.id();
    let regex = draft.regex_hosts.contains_key(&host);
    let (rule, groups) = match path_rule(draft, &id, plan, &path, &kind, regex) {
        Ok(found) => found,
        Err(why) => {
            let why = format!("path {path}: {why}; the path is not imported");
            draft.line(&id, "paths", super::Verdict::Unsupported(why));
            return None;
        }
    };
    let mut keys = plan.keys.clone();
    let mut rewrite = Node::Map(Vec::new());
    // ingress-nginx rewrites only where the target differs from the path.
    if let Some(target) = plan.rewrite_target.as_ref().filter(|t| **t != path) {
        match rewrite_template(target, &groups) {
            Ok(t) => rewrite.set("path", Node::str(t)),
            Err(why) => {
                let why = format!("path {path}: {why}; the path is not imported");
                let item = format!("{}/rewrite-target", draft.options.annotation_prefix);
                draft.line(&id, &item, super::Verdict::Unsupported(why));
                return None;
            }
        }
    }
    if let Some(vhost) = &plan.vhost {
        rewrite.set("host", Node::str(vhost.clone()));
    }
    if rewrite != Node::Map(Vec::new()) {
        keys.insert("rewrite", rewrite);
    }
    if keys.contains_key("redirect") {
        keys.remove("rewrite");
        keys.remove("max_body");
    } else {
        keys.insert("upstream", Node::str(upstream));
    }
    keys.insert("auth", Node::str("none"));
    let tls = host.as_deref().is_some_and(|h| draft.covered(h));
    if let Some(value) = draft.globals.hsts.value().filter(|_| tls) {
        if !keys.contains_key("redirect") {
            hsts(&mut keys, &value);
        }
    }
    let https =
        plan.force_ssl_redirect || (tls && plan.ssl_redirect.unwrap_or(draft.globals.ssl_redirect));
    if https {
        keys.insert("https_redirect", Node::Bool(true));
    }
    let rank = if kind == "Default" { 2 } else { 1 };
    Some(Route {
        name,
        origin: (host.clone().unwrap_or_default(), path, kind),
        host,
        path: rule,
        headers: None,
        keys,
        rank,
        regex,
    })
}

/// `Strict-Transport-Security` on the answers of a TLS host's route, as
/// ingress-nginx sends it, unless the Ingress sets it itself.
fn hsts(keys: &mut BTreeMap<&'static str, Node>, value: &str) {
    let edits = keys
        .entry("response_headers")
        .or_insert_with(|| Node::Map(Vec::new()));
    if edits.get_mut("set").is_none() {
        edits.set("set", Node::Map(Vec::new()));
    }
    if let Some(Node::Map(set)) = edits.get_mut("set") {
        let name = "Strict-Transport-Security";
        if !set.iter().any(|(k, _)| k.eq_ignore_ascii_case(name)) {
            set.push((name.to_string(), Node::str(value)));
        }
    }
}

/// How a path is matched, and its regex groups' names (for `$N`). On a
/// host where ingress-nginx enforces regular expressions, every path is
/// its `~* "^PATH"` location: case-insensitive, from the start, and a
/// prefix whatever its pathType (an Exact one too).
fn path_rule(
    draft: &mut Draft<'_>,
    id: &str,
    plan: &mut Plan,
    path: &str,
    kind: &str,
    regex: bool,
) -> Result<(PathRule, Vec<String>), String> {
    let rule = match kind {
        "Default" => PathRule::Any,
        _ if regex => {
            let (re, names) = named_groups(path);
            // A top-level `|` would leave the alternatives after the first
            // unanchored in nginx and unbounded here: grouped.
            let re = match top_level_alternation(&re) {
                true => format!("(?:{re})"),
                false => re,
            };
            let re = format!("(?i){re}.*");
            regex::RegexBuilder::new(&format!("^(?:{re})$"))
                .size_limit(1 << 20)
                .build()
                .map_err(|e| {
                    let why = e
                        .to_string()
                        .lines()
                        .last()
                        .unwrap_or("")
                        .trim()
                        .to_string();
                    format!("not a regular expression fairgate reads ({why})")
                })?;
            return Ok((PathRule::Regex(re), names));
        }
        "Exact" if !path.contains(['{', '}']) => PathRule::Exact(path.to_string()),
        "Exact" => PathRule::Regex(regex_escape(path)),
        "Prefix" => PathRule::Prefix(path.to_string()),
        _ => {
            if !plan.loose_prefix_reported {
                plan.loose_prefix_reported = true;
                let why = "read as a Prefix path: whole segments match (/foo no longer matches /foobar); use use-regex for more";
                draft.line(
                    id,
                    "pathType ImplementationSpecific",
                    Verdict::Approximated(why.into()),
                );
            }
            PathRule::Prefix(path.to_string())
        }
    };
    Ok((rule, Vec::new()))
}

/// Whether a regular expression has a `|` outside every group and class.
fn top_level_alternation(re: &str) -> bool {
    let (mut depth, mut class, mut escaped) = (0usize, false, false);
    for c in re.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '[' if !class => class = true,
            ']' if class => class = false,
            '(' if !class => depth += 1,
            ')' if !class => depth = depth.saturating_sub(1),
            '|' if !class && depth == 0 => return true,
            _ => {}
        }
    }
    false
}

/// Numbered groups named `gN` (named ones keep their names), so `$N` in a
/// rewrite can name them; the names, in group order.
fn named_groups(re: &str) -> (String, Vec<String>) {
    let chars: Vec<char> = re.chars().collect();
    let (mut out, mut names) = (String::new(), Vec::new());
    let (mut i, mut class) = (0, false);
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' => {
                out.push(c);
                if let Some(n) = chars.get(i + 1) {
                    out.push(*n);
                }
                i += 2;
                continue;
            }
            '[' if !class => class = true,
            ']' if class => class = false,
            '(' if !class => {
                let rest: String = chars[i + 1..].iter().collect();
                let named = rest.strip_prefix("?P<").or_else(|| {
                    rest.strip_prefix("?<")
                        .filter(|r| !r.starts_with(['=', '!']))
                });
                if let Some(name) = named
                    .and_then(|r| r.split_once('>'))
                    .map(|(n, _)| n.to_string())
                {
                    names.push(name);
                } else if !rest.starts_with('?') {
                    let name = format!("g{}", names.len() + 1);
                    out.push_str(&format!("(?<{name}>"));
                    names.push(name);
                    i += 1;
                    continue;
                }
            }
            _ => {}
        }
        out.push(c);
        i += 1;
    }
    (out, names)
}

/// `/$2` with the path's groups as `/{g2}`.
fn rewrite_template(target: &str, groups: &[String]) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = target;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = rest[i + 1..].trim_start_matches('{');
        let digits = after
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(after.len());
        if digits == 0 {
            let end = after
                .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                .unwrap_or(after.len());
            out.push_str(&variables(&format!("${}", &after[..end]))?);
            rest = &after[end..];
            continue;
        }
        let n: usize = after[..digits].parse().unwrap_or(0);
        let name = groups
            .get(n.wrapping_sub(1))
            .ok_or_else(|| format!("${n} names no group of the path"))?;
        out.push_str(&format!("{{{name}}}"));
        rest = after[digits..].trim_start_matches('}');
    }
    out.push_str(rest);
    if !out.starts_with('/') {
        return Err("the target does not start with /".into());
    }
    Ok(out)
}

fn regex_escape(path: &str) -> String {
    path.chars()
        .map(|c| match c {
            '\\' | '.' | '+' | '*' | '?' | '(' | ')' | '|' | '[' | ']' | '{' | '}' | '^' | '$' => {
                format!("\\{c}")
            }
            c => c.to_string(),
        })
        .collect()
}

/// A canary Ingress's annotations, applied to the main routes it shadows
/// (by index, with the canary's pool).
/// The main route's `canary` settings, a header route's match, and the
/// report of every annotation of a canary Ingress.
fn canary_settings(ann: &BTreeMap<String, String>) -> (Vec<(String, Verdict)>, Node, Option<Node>) {
    let mut lines: Vec<(String, Verdict)> = Vec::new();
    let mut settings = Node::Map(Vec::new());
    let header = ann.get("canary-by-header");
    let value = ann.get("canary-by-header-value");
    let pattern = ann.get("canary-by-header-pattern");
    let mut header_match: Option<Node> = None;
    for (key, v) in ann {
        let verdict = match key.as_str() {
            "canary" => Verdict::Mapped("folded into the main route's canary".into()),
            "canary-by-header" if value.is_none() && pattern.is_none() => {
                settings.set("header", Node::str(v.clone()));
                Verdict::Mapped("canary.header (always / never)".into())
            }
            "canary-by-header" => {
                Verdict::Mapped("a route before the main one matching the header's value".into())
            }
            "canary-by-header-value" => {
                if let Some(h) = header {
                    header_match = Some(Node::map([(h.clone(), Node::str(v.clone()))]));
                }
                Verdict::Mapped("match.headers on a route to the canary pool".into())
            }
            "canary-by-header-pattern" if value.is_none() => {
                if let Some(h) = header {
                    header_match = Some(Node::map([(
                        h.clone(),
                        Node::map([("regex", Node::str(v.clone()))]),
                    )]));
                }
                Verdict::Mapped("match.headers regex on a route to the canary pool".into())
            }
            "canary-by-header-pattern" => Verdict::Mapped(
                "no effect: canary-by-header-value wins, as in ingress-nginx".into(),
            ),
            "canary-by-cookie" => {
                settings.set("cookie", Node::str(v.clone()));
                Verdict::Mapped("canary.cookie (always / never)".into())
            }
            "canary-weight" => {
                let total: f64 = ann
                    .get("canary-weight-total")
                    .and_then(|t| t.parse().ok())
                    .unwrap_or(100.0);
                let weight: f64 = v.parse().unwrap_or(0.0);
                let percent = (weight * 100.0 / total.max(1.0)).round().clamp(0.0, 100.0) as u64;
                settings.set("percent", Node::Int(percent));
                Verdict::Approximated(format!(
                    "canary.percent {percent}: ingress-nginx drew per request; fairgate picks per client (tenant, else address), so a client stays on one side"
                ))
            }
            "canary-weight-total" => Verdict::Mapped("the denominator of canary.percent".into()),
            _ => Verdict::Unsupported(
                "on a canary Ingress only canary-* annotations are imported".into(),
            ),
        };
        lines.push((key.clone(), verdict));
    }
    (lines, settings, header_match)
}

pub fn canary(draft: &mut Draft<'_>, ing: &Object, targets: &[(usize, String)]) {
    let ann = annotations(ing, &draft.options.annotation_prefix);
    let (lines, settings, header_match) = canary_settings(&ann);
    let prefix = draft.options.annotation_prefix.clone();
    for (key, verdict) in lines {
        draft.line(&ing.id(), &format!("{prefix}/{key}"), verdict);
    }
    for (main, upstream) in targets {
        if settings != Node::Map(Vec::new()) {
            let mut c = Node::map([("upstream", Node::str(upstream.clone()))]);
            if let Node::Map(entries) = &settings {
                for (k, v) in entries {
                    c.set(k, v.clone());
                }
            }
            draft.routes[*main].keys.insert("canary", c);
        }
        if let Some(h) = &header_match {
            let mut r = draft.routes[*main].clone();
            r.name = format!("{}-canary", r.name);
            r.headers = Some(h.clone());
            r.rank = 0;
            r.keys.remove("canary");
            r.keys.insert("upstream", Node::str(upstream.clone()));
            draft.routes.push(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_groups_get_names_and_rewrites_use_them() {
        let (re, names) = named_groups(r"/api(/|$)(?:v1)(?P<rest>.*)[(]\(x\)");
        assert_eq!(re, r"/api(?<g1>/|$)(?:v1)(?P<rest>.*)[(]\(x\)");
        assert_eq!(names, ["g1", "rest"]);
        assert_eq!(rewrite_template("/$2", &names).as_deref(), Ok("/{rest}"));
        assert_eq!(
            rewrite_template("/x/${1}y", &names).as_deref(),
            Ok("/x/{g1}y")
        );
        assert!(rewrite_template("/$3", &names).is_err());
        assert!(rewrite_template("$1", &names).is_err());
    }

    #[test]
    fn only_a_bar_outside_groups_and_classes_is_an_alternation() {
        assert!(top_level_alternation("/a|/b"));
        for re in [r"/a(/|$)", r"/a[|]", r"/a\|b", "/a"] {
            assert!(!top_level_alternation(re), "{re}");
        }
    }

    #[test]
    fn snippets_that_only_set_headers_are_read() {
        let mut plan = Plan::default();
        let v = snippet(
            "more_set_headers \"X-Frame-Options: DENY\";\n# a comment; with a semicolon\nproxy_set_header X-Real-Host $host;",
            &mut plan,
        );
        assert_eq!(
            v,
            Verdict::Mapped("header edits (request_headers, response_headers)".into())
        );
        assert_eq!(
            plan.keys["request_headers"],
            Node::map([("set", Node::map([("X-Real-Host", Node::str("{host}"))]))])
        );
        let v = snippet(
            "more_set_headers \"X-A: 1\"; rewrite ^ /x;",
            &mut Plan::default(),
        );
        assert!(matches!(v, Verdict::Unsupported(w) if w.contains("`rewrite`")));
        let v = snippet(
            "proxy_set_header X-Forwarded-For $remote_addr;",
            &mut Plan::default(),
        );
        assert!(matches!(v, Verdict::Unsupported(w) if w.contains("set by the gateway")));
    }
}
