//! `enable-cors` and `cors-*`: the route's `cors` (preflights answered by
//! the gateway), with ingress-nginx's defaults for what is not said.

use std::collections::BTreeMap;

use super::out::Cors;
use super::plan::Plan;
use super::units::{comma_list, duration};
use super::Verdict;

/// `enable-cors` and `cors-*`, with ingress-nginx's defaults.
pub fn read(ann: &BTreeMap<String, String>, plan: &mut Plan, lines: &mut Vec<(String, Verdict)>) {
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
    let mut node = Cors {
        origins: origins.clone(),
        methods: list(
            "cors-allow-methods",
            "GET, PUT, POST, DELETE, PATCH, OPTIONS",
        ),
        headers: list(
            "cors-allow-headers",
            "DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,Content-Type,Range,Authorization",
        ),
        expose: list("cors-expose-headers", ""),
        credentials: false,
        max_age: None,
    };
    let mut enable = Verdict::Mapped("cors: preflights answered by the gateway".into());
    if credentials && origins.iter().any(|o| o == "*") {
        credentials = false;
        enable = Verdict::Approximated(
            "credentials off: ingress-nginx sent Allow-Credentials with *, which browsers refuse; list the origins to allow them".into(),
        );
    }
    node.credentials = credentials;
    let age = ann
        .get("cors-max-age")
        .map(String::as_str)
        .unwrap_or("1728000");
    match age.parse::<u64>() {
        Ok(s) => node.max_age = Some(duration(s)),
        Err(_) => lines.push((
            "cors-max-age".into(),
            Verdict::Unsupported(format!("{age:?} is not seconds")),
        )),
    }
    plan.keys.cors = Some(node);
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
