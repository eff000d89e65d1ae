//! Reads `limits`, `default_limits`, `concurrency`, `tenants` and
//! `identity_headers`: buckets, rates and scopes.

use super::*;

/// `COUNT/PERIOD`: `5/s`, `600/m`, `1/10s`, `10000/h`, `100000/d`.
pub fn parse_rate(text: &str) -> Result<Rate, &'static str> {
    let (count, period) = text
        .split_once('/')
        .ok_or("expected COUNT/PERIOD such as 5/s, 600/m or 1/10s")?;
    let count: NonZeroU64 = count
        .trim()
        .parse()
        .ok()
        .and_then(NonZeroU64::new)
        .ok_or("count must be a whole number of at least 1")?;
    let period = period.trim();
    let split = period
        .find(|c: char| !c.is_ascii_digit())
        .ok_or("unit must be one of s, m, h, d")?;
    let (n, unit) = period.split_at(split);
    let n: u64 = if n.is_empty() {
        1
    } else {
        n.parse()
            .ok()
            .filter(|n| *n > 0)
            .ok_or("period must be at least 1")?
    };
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err("unit must be one of s, m, h, d"),
    };
    let period = n
        .checked_mul(secs)
        .filter(|s| *s <= 366 * 86_400)
        .map(Duration::from_secs)
        .ok_or("period must be at most a year")?;
    if period.as_micros() as u64 / count.get() == 0 {
        return Err("more than 1,000,000 per second is not supported");
    }
    Ok(Rate { count, period })
}

pub(super) fn bucket(r: &mut Reader<'_>, at: &At<'_>) -> Option<Bucket> {
    let f = r.mapping(at, schema::BUCKET)?;
    bucket_fields(r, at, &f)
}

/// `capacity` and `rate` of a mapping that may hold other fields too.
pub(super) fn bucket_fields(
    r: &mut Reader<'_>,
    at: &At<'_>,
    f: &yaml::Fields<'_>,
) -> Option<Bucket> {
    let capacity = match f.get("capacity") {
        Some(c) => r.count(&c, "limits.capacity_invalid"),
        None => {
            missing(r, at, "capacity");
            None
        }
    };
    let rate = match f.get("rate") {
        Some(at) => {
            let text = at.node.as_scalar().map(|s| s.as_str()).unwrap_or("");
            match parse_rate(text) {
                Ok(rate) => Some(rate),
                Err(why) => {
                    r.error_value(&at, "limits.rate_invalid", why);
                    None
                }
            }
        }
        None => {
            missing(r, at, "rate");
            None
        }
    };
    let bucket = Bucket {
        capacity: capacity?,
        rate: rate?,
    };
    // Bucket arithmetic runs in integer microseconds, also as Lua doubles
    // (exact below 2^53): keep capacity x interval far inside that.
    if bucket
        .capacity
        .get()
        .saturating_mul(bucket.rate.interval_us())
        > MAX_WINDOW_US
    {
        r.error(
            at,
            "limits.capacity_invalid",
            "capacity / rate must refill within 10 years",
        );
        return None;
    }
    Some(bucket)
}

pub(super) const MAX_WINDOW_US: u64 = 10 * 366 * 86_400 * 1_000_000;

pub(super) fn scope(r: &mut Reader<'_>, at: &At<'_>) -> Option<Scope> {
    const HELP: &str =
        "must be tenant, tenant_user, tenant_token, client_ip, client_cert, global, {path: NAME} or {header: NAME}";
    if let Some(s) = at.node.as_scalar() {
        return match s.as_str() {
            "tenant" => Some(Scope::Tenant),
            "tenant_user" => Some(Scope::TenantUser),
            "tenant_token" => Some(Scope::TenantToken),
            "client_ip" => Some(Scope::ClientIp),
            "client_cert" => Some(Scope::ClientCert),
            "global" => Some(Scope::Global),
            _ => {
                r.error_value(at, "limits.scope_invalid", HELP);
                None
            }
        };
    }
    let Some(map) = at.node.as_mapping() else {
        r.error(at, "limits.scope_invalid", HELP);
        return None;
    };
    let mut named = map.iter().filter(|(k, _)| k.as_str() != "values");
    let (Some((key, value)), None) = (named.next(), named.next()) else {
        r.error(at, "limits.scope_invalid", HELP);
        return None;
    };
    let value_at = at.child(key.as_str(), value, at.key_pos);
    let name = value
        .as_scalar()
        .map(|s| s.as_str().to_string())
        .unwrap_or_default();
    match key.as_str() {
        "path" if !name.is_empty() => Some(Scope::Path(name)),
        "header" => match HeaderName::from_bytes(name.as_bytes()) {
            Ok(h) if !name.is_empty() => Some(Scope::Header(h)),
            _ => {
                r.error_value(&value_at, "limits.scope_invalid", "not a valid header name");
                None
            }
        },
        _ => {
            r.error(at, "limits.scope_invalid", HELP);
            None
        }
    }
}

/// Names a limit or concurrency policy cannot take: `default` is what
/// `default_limits` spend under, and the others begin key shapes of their
/// own (`global:{...}`, `tenant:{...}`, `ip:{...}`), which a value-scoped
/// key named alike could otherwise reach.
pub(super) const RESERVED_NAMES: &[&str] = &["default", "global", "tenant", "ip"];

pub(super) fn limit(r: &mut Reader<'_>, at: &At<'_>, name: &str) -> Option<Limit> {
    if RESERVED_NAMES.contains(&name) {
        r.error(
            at,
            "limits.name_invalid",
            format!("\"{name}\" is reserved (default, global, tenant, ip)"),
        );
    } else if !name_ok(name) {
        r.error(
            at,
            "limits.name_invalid",
            "limit names use A-Z a-z 0-9 _ - only",
        );
    }
    let f = r.mapping(at, schema::LIMIT)?;
    let scope = match f.get("scope") {
        Some(s) => scope(r, &s),
        None => Some(Scope::Tenant),
    };
    let default = match f.get("default") {
        Some(d) => bucket(r, &d),
        None => {
            missing(r, at, "default");
            None
        }
    };
    let mut plans = BTreeMap::new();
    if let Some(p) = f.get("plans") {
        for (plan, item) in r.named(&p) {
            if let Some(b) = bucket(r, &item) {
                plans.insert(plan.to_string(), b);
            }
        }
    }
    let shadow = f.get("shadow").and_then(|s| r.bool(&s)).unwrap_or(false);
    let status = refusal_status(r, &f, "limits.status_invalid");
    let values = f
        .get("scope")
        .and_then(|s| scope_values(r, &s, scope.as_ref()?));
    let mut exempt = Vec::new();
    if let Some(at) = f.get("exempt_cidrs") {
        for (i, node) in r.sequence(&at).into_iter().enumerate() {
            exempt.extend(super::actions::cidr(r, &at.item(i, node)));
        }
    }
    Some(Limit {
        name: name.to_string(),
        scope: scope?,
        default: default?,
        plans,
        shadow,
        status,
        values,
        exempt,
    })
}

/// `status`: what a refusal answers, 429 by default; any 4xx or 5xx, so an
/// API that answered 503 before (ingress-nginx) keeps answering it.
fn refusal_status(r: &mut Reader<'_>, f: &yaml::Fields<'_>, code: &'static str) -> u16 {
    let Some(at) = f.get("status") else {
        return 429;
    };
    match r.u64(&at, code) {
        Some(n @ 400..=599) => n as u16,
        Some(_) => {
            r.error_value(&at, code, "must be an HTTP status from 400 to 599");
            429
        }
        None => 429,
    }
}

/// `values: [stripe, github]` inside a `{path}` or `{header}` scope.
pub(super) fn scope_values(
    r: &mut Reader<'_>,
    at: &At<'_>,
    scope: &Scope,
) -> Option<BTreeSet<String>> {
    let map = at.node.as_mapping()?;
    let (key, node) = map.iter().find(|(k, _)| k.as_str() == "values")?;
    let values_at = at.child(key.as_str(), node, yaml::position(node));
    if !matches!(scope, Scope::Path(_) | Scope::Header(_)) {
        r.error(
            &values_at,
            "limits.scope_invalid",
            "values need a {path} or {header} scope",
        );
        return None;
    }
    let values: BTreeSet<String> = r.strings(&values_at).into_iter().collect();
    if values.is_empty() {
        r.error(
            &values_at,
            "limits.scope_invalid",
            "values needs at least one value",
        );
        return None;
    }
    Some(values)
}

pub(super) fn default_limits(r: &mut Reader<'_>, at: Option<At<'_>>) -> DefaultLimits {
    let builtin = |name: &str, scope: Scope, count: NonZeroU64| Limit {
        name: name.to_string(),
        scope,
        default: Bucket {
            capacity: count,
            rate: Rate {
                count,
                period: Duration::from_secs(60),
            },
        },
        plans: BTreeMap::new(),
        shadow: false,
        status: 429,
        values: None,
        exempt: Vec::new(),
    };
    let mut out = DefaultLimits {
        authenticated: Some(builtin(
            "default",
            Scope::Tenant,
            NonZeroU64::new(600).unwrap(),
        )),
        unauthenticated: Some(builtin(
            "default",
            Scope::ClientIp,
            NonZeroU64::new(120).unwrap(),
        )),
    };
    let Some(at) = at else { return out };
    if at.node.as_scalar().is_some_and(|s| s.as_str() == "none") {
        return DefaultLimits {
            authenticated: None,
            unauthenticated: None,
        };
    }
    let Some(f) = r.mapping(&at, schema::DEFAULT_LIMITS) else {
        return out;
    };
    for (key, slot) in [
        ("authenticated", &mut out.authenticated),
        ("unauthenticated", &mut out.unauthenticated),
    ] {
        let Some(at) = f.get(key) else { continue };
        if at.node.as_scalar().is_some_and(|s| s.as_str() == "none") {
            *slot = None;
            continue;
        }
        let Some(m) = r.mapping(&at, schema::DEFAULT_LIMIT) else {
            continue;
        };
        let scope = m.get("scope").and_then(|s| scope(r, &s));
        if let Some(bucket) = bucket_fields(r, &at, &m) {
            let default_scope = if key == "authenticated" {
                Scope::Tenant
            } else {
                Scope::ClientIp
            };
            *slot = Some(Limit {
                name: "default".into(),
                scope: scope.unwrap_or(default_scope),
                default: bucket,
                plans: BTreeMap::new(),
                shadow: m.get("shadow").and_then(|s| r.bool(&s)).unwrap_or(false),
                status: 429,
                values: None,
                exempt: Vec::new(),
            });
        }
    }
    out
}

pub(super) fn concurrency(r: &mut Reader<'_>, at: &At<'_>, name: &str) -> Option<Concurrency> {
    if RESERVED_NAMES.contains(&name) {
        r.error(
            at,
            "concurrency.name_invalid",
            format!("\"{name}\" is reserved (default, global, tenant, ip)"),
        );
    } else if !name_ok(name) {
        r.error(
            at,
            "concurrency.name_invalid",
            "names use A-Z a-z 0-9 _ - only",
        );
    }
    let f = r.mapping(at, schema::CONCURRENCY)?;
    let scope = match f.get("scope") {
        Some(s) => scope(r, &s),
        None => Some(Scope::Tenant),
    };
    let slots = match f.get("slots") {
        Some(s) => r.count(&s, "concurrency.slots_invalid"),
        None => {
            missing(r, at, "slots");
            None
        }
    };
    let lease = match f.get("lease") {
        Some(l) => r.duration(&l).filter(|d| {
            let ok = *d >= Duration::from_secs(1);
            if !ok {
                r.error_value(&l, "concurrency.lease_invalid", "must be at least 1s");
            }
            ok
        }),
        None => Some(Duration::from_secs(30)),
    };
    let status = refusal_status(r, &f, "concurrency.status_invalid");
    Some(Concurrency {
        name: name.to_string(),
        scope: scope?,
        slots: slots?,
        lease: lease?,
        status,
    })
}

pub(super) fn tenants(
    r: &mut Reader<'_>,
    at: Option<At<'_>>,
    declared: &Declared,
) -> BTreeMap<String, TenantOverride> {
    let mut out = BTreeMap::new();
    let Some(at) = at else { return out };
    for (tenant, at) in r.named(&at) {
        if !crate::tenant::tenant_id_ok(tenant) {
            r.error(
                &at,
                "tenants.id_invalid",
                "tenant ids match [A-Za-z0-9._@-]{1,128}",
            );
        }
        let Some(f) = r.mapping(&at, schema::TENANT) else {
            continue;
        };
        let mut o = TenantOverride {
            plan: f.get("plan").and_then(|p| r.string(&p)),
            ..Default::default()
        };
        if let Some(l) = f.get("limits") {
            for (name, item) in r.named(&l) {
                if !declared.limits.contains(name) {
                    r.error(
                        &item,
                        "tenants.limit_unknown",
                        format!("no limit named \"{name}\""),
                    );
                    continue;
                }
                if let Some(b) = bucket(r, &item) {
                    o.limits.insert(name.to_string(), b);
                }
            }
        }
        out.insert(tenant.to_string(), o);
    }
    out
}

pub(super) fn identity_headers(r: &mut Reader<'_>, at: Option<At<'_>>) -> IdentityHeaders {
    let mut out = IdentityHeaders::default();
    let Some(at) = at else { return out };
    let Some(f) = r.mapping(&at, schema::IDENTITY_HEADERS) else {
        return out;
    };
    for (key, slot) in [
        ("tenant", &mut out.tenant),
        ("user", &mut out.user),
        ("plan", &mut out.plan),
        ("client_cert", &mut out.client_cert),
    ] {
        let Some(at) = f.get(key) else { continue };
        let Some(text) = r.string(&at) else { continue };
        match HeaderName::from_bytes(text.as_bytes()) {
            Ok(h) if RESERVED_HEADERS.contains(&h.as_str()) => r.error_value(
                &at,
                "config.header_invalid",
                "the gateway sets or reads this header itself",
            ),
            Ok(h) => *slot = h,
            Err(_) => r.error_value(&at, "config.header_invalid", "not a valid header name"),
        }
    }
    let all = out.all();
    if (1..all.len()).any(|i| all[..i].contains(&all[i])) {
        r.error(
            &at,
            "config.header_invalid",
            "tenant, user, plan and client_cert need four different headers",
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        let r = parse_rate("1/10s").unwrap();
        assert_eq!((r.count.get(), r.period), (1, Duration::from_secs(10)));
        assert_eq!(r.interval_us(), 10_000_000);
        assert_eq!(parse_rate("600/m").unwrap().interval_us(), 100_000);
        assert_eq!(
            parse_rate("5/x").unwrap_err(),
            "unit must be one of s, m, h, d"
        );
        assert!(parse_rate("0/s").is_err());
        assert!(parse_rate("5").is_err());
    }
}
