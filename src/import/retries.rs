//! `proxy-next-upstream` and `proxy-next-upstream-tries` (or the
//! controller ConfigMap's): the route's `retries`, what nginx retried on
//! as fairgate's `retry_on`; `proxy-next-upstream-timeout` is approximated
//! by the attempts' own timeouts.

use std::collections::BTreeMap;

use super::draft::Draft;
use super::out::Retries;
use super::plan::Plan;
use super::Verdict;

/// `proxy-next-upstream`, `-tries`, `-timeout` (or the ConfigMap's).
pub fn read(
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
        let why = format!(
            "{t}s: retries stop after proxy-next-upstream-tries; the time they take is bounded by each \
             attempt's connect and read timeouts (and timeouts.total), not by this"
        );
        lines.push((
            "proxy-next-upstream-timeout".into(),
            Verdict::Approximated(why),
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
        let methods = ["GET", "HEAD", "OPTIONS", "PUT", "DELETE", "POST", "PATCH"];
        plan.keys.retries = Some(Retries {
            attempts,
            retry_on: on.iter().map(|o| o.to_string()).collect(),
            methods: post.then(|| methods.iter().map(|m| m.to_string()).collect()),
        });
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
