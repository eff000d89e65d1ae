//! Reads `upstreams.<name>.fair_share`.

use std::collections::BTreeMap;

use super::*;
use crate::config::fair_share::{FairLimit, FairShare, FlowBy};

const CODE: &str = "upstreams.fair_share_invalid";

/// `fair_share: {max_in_flight, adaptive: {min, max}, by, queue:
/// {per_tenant, timeout}, weights: {PLAN: W}}`.
pub(super) fn fair_share(r: &mut Reader<'_>, at: &At<'_>) -> Option<FairShare> {
    let f = r.mapping(at, schema::FAIR_SHARE)?;
    let Some(max) = f.get("max_in_flight") else {
        missing(r, at, "max_in_flight");
        return None;
    };
    let adaptive = f.get("adaptive");
    let limit = match max.node.as_scalar().map(|s| s.as_str()) {
        Some("adaptive") => {
            let (min, max) = match &adaptive {
                Some(a) => bounds(r, a)?,
                None => (FairLimit::ADAPTIVE_MIN, FairLimit::ADAPTIVE_MAX),
            };
            FairLimit::Adaptive { min, max }
        }
        _ => {
            let n = in_range(
                r,
                &max,
                1,
                FairShare::MAX_LIMIT,
                "adaptive or a whole number",
            )?;
            if let Some(a) = &adaptive {
                r.error(a, CODE, "adaptive needs max_in_flight: adaptive");
            }
            FairLimit::Fixed(n as usize)
        }
    };
    let by = match f.get("by") {
        Some(b) => flow_by(r, &b)?,
        None => FlowBy::Tenant,
    };
    let (mut per_tenant, mut timeout) = (FairShare::DEFAULT_PER_TENANT, FairShare::DEFAULT_TIMEOUT);
    if let Some(q) = f.get("queue") {
        let q_fields = r.mapping(&q, schema::FAIR_SHARE_QUEUE)?;
        let top = FairShare::MAX_PER_TENANT;
        let n = q_fields
            .get("per_tenant")
            .map(|n| in_range(r, &n, 0, top, "a whole number"));
        let t = q_fields.get("timeout").map(|t| r.positive_duration(&t));
        per_tenant = n.map_or(Some(per_tenant), |n| n.map(|n| n as usize))?;
        timeout = t.unwrap_or(Some(timeout))?;
    }
    let weights = match f.get("weights") {
        Some(w) => weights(r, &w)?,
        None => BTreeMap::new(),
    };
    Some(FairShare {
        limit,
        by,
        per_tenant,
        timeout,
        weights,
    })
}

/// A whole number in `[low, high]`, else an error saying what it must be.
fn in_range(r: &mut Reader<'_>, at: &At<'_>, low: u64, high: u64, what: &str) -> Option<u64> {
    let n = at
        .node
        .as_scalar()
        .and_then(|s| s.as_str().parse::<u64>().ok())
        .filter(|n| (low..=high).contains(n));
    if n.is_none() {
        r.error_value(at, CODE, format!("must be {what} from {low} to {high}"));
    }
    n
}

/// `adaptive: {min, max}`: 1 ≤ min ≤ max.
fn bounds(r: &mut Reader<'_>, at: &At<'_>) -> Option<(usize, usize)> {
    let f = r.mapping(at, schema::FAIR_SHARE_ADAPTIVE)?;
    let top = FairShare::MAX_LIMIT;
    let min = match f.get("min") {
        Some(n) => in_range(r, &n, 1, top, "a whole number")? as usize,
        None => FairLimit::ADAPTIVE_MIN,
    };
    let max = match f.get("max") {
        Some(n) => in_range(r, &n, 1, top, "a whole number")? as usize,
        None => FairLimit::ADAPTIVE_MAX.max(min),
    };
    if max < min {
        r.error(at, CODE, format!("max ({max}) is below min ({min})"));
        return None;
    }
    Some((min, max))
}

/// `by: tenant | tenant_user | client_ip | {header: NAME}`.
fn flow_by(r: &mut Reader<'_>, at: &At<'_>) -> Option<FlowBy> {
    const HELP: &str = "must be tenant, tenant_user, client_ip or {header: NAME}";
    if let Some(m) = at.node.as_mapping() {
        let header = match m.iter().next() {
            Some((k, v)) if m.len() == 1 && k.as_str() == "header" => v
                .as_scalar()
                .and_then(|v| HeaderName::from_bytes(v.as_str().as_bytes()).ok()),
            _ => None,
        };
        if header.is_none() {
            r.error(at, CODE, HELP);
        }
        return header.map(FlowBy::Header);
    }
    let by = match r.string(at)?.as_str() {
        "tenant" => FlowBy::Tenant,
        "tenant_user" => FlowBy::TenantUser,
        "client_ip" => FlowBy::ClientIp,
        _ => {
            r.error_value(at, CODE, HELP);
            return None;
        }
    };
    Some(by)
}

/// `weights: {PLAN: 1..=1000}`.
fn weights(r: &mut Reader<'_>, at: &At<'_>) -> Option<BTreeMap<String, u32>> {
    let mut out = BTreeMap::new();
    for (plan, w) in r.named(at) {
        if let Some(w) = in_range(r, &w, 1, FairShare::MAX_WEIGHT, "a whole number") {
            out.insert(plan.to_string(), w as u32);
        }
    }
    Some(out)
}
