//! Which buckets and which slot a request spends: planned from the policy
//! snapshot and what the request brings (identity, captures, headers,
//! address, client certificate). Every key shape is in `keys`; nothing here
//! asks a store.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

use super::keys::{self, Kind, Scoped};
use crate::auth::Identity;
use crate::config::{Bucket, Concurrency, Config, Limit, Route, Scope};
use crate::gcra::Spend;

/// One bucket a request will spend from, with the policy that sized it.
#[derive(Debug, Clone)]
pub struct Planned {
    pub limit: String,
    /// The status of a refusal by this bucket.
    pub status: u16,
    pub bucket: Bucket,
    /// Full store key, prefix included.
    pub key: String,
    /// Counts and reports, never refuses.
    pub shadow: bool,
}

impl Planned {
    /// What the store is asked to spend: the bucket in the store's terms.
    pub fn spend(&self) -> Spend {
        Spend {
            key: self.key.clone(),
            capacity: self.bucket.capacity.get(),
            interval_us: self.bucket.rate.interval_us(),
            shadow: self.shadow,
        }
    }
}

/// What a request brings that scopes can key on.
pub struct Subject<'a> {
    pub identity: Option<&'a Identity>,
    pub captures: &'a [(String, String)],
    pub headers: &'a http::HeaderMap,
    pub client_ip: Option<IpAddr>,
    /// The subject of the client's verified TLS certificate.
    pub client_cert: Option<&'a str>,
}

/// Why a request cannot be keyed into a scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unkeyable {
    /// The scope needs a claim (user, token id) the token lacks.
    MissingClaim,
    /// A path or header value over `MAX_VALUE_BYTES`.
    ValueTooLong,
    /// A value outside the scope's `values` list.
    NotListed,
    /// A `client_cert` scope, and the client sent no certificate.
    NoClientCert,
}

/// The address a client is counted under: itself for IPv4, its network of
/// `ipv6_prefix` bits for IPv6 (one host usually holds a whole /64).
pub fn address_key(ip: IpAddr, ipv6_prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V6(v6) if ipv6_prefix < 128 => {
            let mask = u128::MAX << (128 - u32::from(ipv6_prefix));
            IpAddr::V6((u128::from(v6) & mask).into())
        }
        other => other,
    }
}

/// Longest path capture or header value a key is built from (SPEC section 4).
pub const MAX_VALUE_BYTES: usize = crate::auth::MAX_ID_BYTES;

impl Subject<'_> {
    /// The value a `{path: NAME}` or `{header: NAME}` scope keys on.
    fn value(&self, scope: &Scope) -> Result<Option<&str>, Unkeyable> {
        let value = match scope {
            Scope::Path(capture) => self
                .captures
                .iter()
                .find(|(k, _)| k == capture)
                .map(|(_, v)| v.as_str()),
            Scope::Header(h) => self.headers.get(h).and_then(|v| v.to_str().ok()),
            _ => None,
        };
        match value {
            Some(v) if v.len() > MAX_VALUE_BYTES => Err(Unkeyable::ValueTooLong),
            v => Ok(v),
        }
    }
}

/// The bucket size for this limit and identity: tenant override, then plan, then default.
pub fn sizing(config: &Config, limit: &Limit, identity: Option<&Identity>) -> Bucket {
    if let Some(id) = identity {
        if let Some(b) = config
            .tenants
            .get(id.tenant.as_str())
            .and_then(|t| t.limits.get(&limit.name))
        {
            return *b;
        }
        if let Some(b) = limit.plans.get(&id.plan) {
            return *b;
        }
    }
    limit.default
}

/// What `scope` keys on for this request; `ipv6_prefix` groups IPv6 clients.
fn scoped<'a>(
    scope: &Scope,
    values: Option<&BTreeSet<String>>,
    subject: &'a Subject<'_>,
    ipv6_prefix: u8,
) -> Result<Scoped<'a>, Unkeyable> {
    let identity = subject.identity;
    let id = || identity.ok_or(Unkeyable::MissingClaim);
    let claim = |c: Option<&'a String>| c.map(String::as_str).ok_or(Unkeyable::MissingClaim);
    Ok(match scope {
        Scope::Tenant => Scoped::Tenant(&id()?.tenant),
        Scope::TenantUser => Scoped::TenantUser(&id()?.tenant, claim(id()?.user.as_ref())?),
        Scope::TenantToken => Scoped::TenantToken(&id()?.tenant, claim(id()?.token.as_ref())?),
        Scope::ClientIp => Scoped::ClientIp(address_key(
            subject
                .client_ip
                .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            ipv6_prefix,
        )),
        Scope::ClientCert => {
            Scoped::ClientCert(subject.client_cert.ok_or(Unkeyable::NoClientCert)?)
        }
        Scope::Global => Scoped::Global,
        Scope::Path(_) | Scope::Header(_) => {
            let value = subject.value(scope)?;
            if let Some(listed) = values {
                if !value.is_some_and(|v| listed.contains(v)) {
                    return Err(Unkeyable::NotListed);
                }
            }
            Scoped::Value {
                tenant: identity.map(|i| &i.tenant),
                value,
            }
        }
    })
}

/// Every bucket the route spends from, in the route's order.
pub fn plan(
    config: &Config,
    route: &Route,
    subject: &Subject<'_>,
) -> Result<Vec<Planned>, Unkeyable> {
    let exempt = |limit: &&Limit| {
        let ip = subject.client_ip;
        ip.is_some_and(|ip| limit.exempt.iter().any(|net| net.contains(&ip)))
    };
    config
        .route_limits(route)
        .into_iter()
        .filter(|limit| !exempt(limit))
        .map(|limit| planned(config, limit, subject))
        .collect()
}

/// One limit's bucket for this subject: its key and size.
fn planned(config: &Config, limit: &Limit, subject: &Subject<'_>) -> Result<Planned, Unkeyable> {
    let scoped = scoped(
        &limit.scope,
        limit.values.as_ref(),
        subject,
        config.server.ipv6_prefix,
    )?;
    let key = keys::key(&config.store.key_prefix, scoped, &limit.name, Kind::Rate);
    let bucket = sizing(config, limit, subject.identity);
    Ok(Planned {
        limit: limit.name.clone(),
        status: limit.status,
        bucket,
        key,
        shadow: limit.shadow,
    })
}

/// Every bucket a tenant alone owns: the limits keyed `scope: tenant`
/// (`default_limits.authenticated` among them), sized for `identity`'s plan.
/// Buckets of a tenant's users or tokens are one per user or token, and
/// not listed.
pub fn tenant_buckets(config: &Config, identity: &Identity) -> Vec<Planned> {
    let headers = http::HeaderMap::new();
    let subject = Subject {
        identity: Some(identity),
        captures: &[],
        headers: &headers,
        client_ip: None,
        client_cert: None,
    };
    config
        .limits
        .values()
        .chain(config.default_limits.authenticated.as_ref())
        .filter(|l| l.scope == Scope::Tenant)
        .filter_map(|l| planned(config, l, &subject).ok())
        .collect()
}

pub fn slot_key(
    config: &Config,
    policy: &Concurrency,
    subject: &Subject<'_>,
) -> Result<String, Unkeyable> {
    let scoped = scoped(&policy.scope, None, subject, config.server.ipv6_prefix)?;
    Ok(keys::key(
        &config.store.key_prefix,
        scoped,
        &policy.name,
        Kind::Slots,
    ))
}
