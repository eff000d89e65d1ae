//! `limit-rps`, `limit-rpm`, `limit-burst-multiplier`, `limit-connections`
//! and `limit-allowlist` (or its alias `limit-whitelist`): ingress-nginx's
//! per-pod rate and connection limits as fleet-wide `limits` and
//! `concurrency` policies, sized by the controller's replica count.

use std::collections::BTreeMap;

use super::draft::Draft;
use super::manifests::Object;
use super::names::policy_name;
use super::out::{Concurrency, Limit, Scope};
use super::plan::Plan;
use super::units::cidrs;
use super::Verdict;

/// `limit-rps`, `limit-rpm`, `limit-burst-multiplier`, `limit-connections`,
/// `limit-allowlist`: per controller pod in ingress-nginx, for the fleet here.
pub fn read(
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
        let status = draft.globals.limit_req_status;
        let limit = Limit {
            scope: Scope::ClientIp,
            capacity,
            rate: format!("{rate}/{unit}"),
            status: (status != 429).then_some(status),
            shadow: draft.options.shadow,
            exempt_cidrs: None,
        };
        draft.limits.push((name.clone(), limit));
        draft.made.insert(("limits", name.clone()), ing.id());
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
    plan.keys.limits = limits;
    connections(draft, &base, ann, plan, lines);
    if let Some(name) = &plan.keys.concurrency {
        draft.made.insert(("concurrency", name.clone()), ing.id());
    }
}

/// `limit-connections` (a concurrency policy) and `limit-allowlist` (or
/// `limit-whitelist`: `annotations::plan` left at most one of them).
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
                let status = draft.globals.limit_conn_status;
                let policy = Concurrency {
                    scope: Scope::ClientIp,
                    slots: n * c,
                    status: (status != 429).then_some(status),
                };
                draft.concurrency.push((name.clone(), policy));
                plan.keys.concurrency = Some(name.clone());
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
    for key in ["limit-allowlist", "limit-whitelist"] {
        let Some(value) = ann.get(key) else { continue };
        let verdict = match cidrs(value) {
            // The Ingress's own limits only, as in ingress-nginx: never the
            // base policy's (`fairgate.dev/limits`) nor anyone else's.
            Ok(list) => {
                let own = draft
                    .limits
                    .iter_mut()
                    .filter(|(name, _)| plan.keys.limits.contains(name));
                for (_, limit) in own {
                    limit.exempt_cidrs = Some(list.clone());
                }
                match plan.keys.concurrency.is_some() {
                    true => Verdict::Approximated(
                        "exempt_cidrs of its own limits: no tokens spent, but the concurrency slots are still taken".into(),
                    ),
                    false => Verdict::Mapped("exempt_cidrs of its own limits".into()),
                }
            }
            Err(why) => Verdict::Unsupported(why.to_string()),
        };
        lines.push((key.into(), verdict));
    }
}
