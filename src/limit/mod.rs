//! Rate limiting: which buckets a request spends (`keys`, planned here from
//! the policy and the identity), the bucket arithmetic (`bucket`), the stores
//! (`store`) and what to do when the shared store fails (`fallback`).

pub mod bucket;
pub mod denials;
pub mod fallback;
pub mod keys;
pub mod slots;
pub mod store;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bucket::{BucketState, Spend};
use fallback::Breaker;
use store::memory::{MemoryStore, SystemClock};
use store::{Store, StoreError};

use crate::auth::Identity;
use crate::config::{Bucket, Concurrency, Config, Limit, OnUnavailable, Route, Scope, StoreKind};
use crate::metrics::METRICS;

/// One bucket a request will spend from, with the policy that sized it.
#[derive(Debug, Clone)]
pub struct Planned {
    pub limit: String,
    pub bucket: Bucket,
    pub spend: Spend,
}

/// What a request brings that scopes can key on.
pub struct Subject<'a> {
    pub identity: Option<&'a Identity>,
    pub captures: &'a [(String, String)],
    pub headers: &'a http::HeaderMap,
    pub client_ip: Option<IpAddr>,
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
pub const MAX_VALUE_BYTES: usize = 256;

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
            .get(&id.tenant)
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

/// Every bucket the route spends from, in the route's order.
pub fn plan(
    config: &Config,
    route: &Route,
    subject: &Subject<'_>,
) -> Result<Vec<Planned>, Unkeyable> {
    let prefix = config.store.key_prefix.as_str();
    let tid = subject.identity.map(|i| i.tenant.as_str());
    config
        .route_limits(route)
        .into_iter()
        .map(|limit| {
            let name = limit.name.as_str();
            let key = match &limit.scope {
                Scope::Tenant => keys::tenant(prefix, tid.ok_or(Unkeyable::MissingClaim)?, name),
                Scope::TenantUser => {
                    let id = subject.identity.ok_or(Unkeyable::MissingClaim)?;
                    let user = id.user.as_deref().ok_or(Unkeyable::MissingClaim)?;
                    keys::tenant_user(prefix, &id.tenant, user, name)
                }
                Scope::TenantToken => {
                    let id = subject.identity.ok_or(Unkeyable::MissingClaim)?;
                    let jti = id.token.as_deref().ok_or(Unkeyable::MissingClaim)?;
                    keys::tenant_token(prefix, &id.tenant, jti, name)
                }
                Scope::ClientIp => keys::client_ip(
                    prefix,
                    address_key(
                        subject
                            .client_ip
                            .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
                        config.server.ipv6_prefix,
                    ),
                    name,
                ),
                Scope::Global => keys::global(prefix, name),
                Scope::Path(_) | Scope::Header(_) => {
                    let value = subject.value(&limit.scope)?;
                    if let Some(listed) = &limit.values {
                        if !value.is_some_and(|v| listed.contains(v)) {
                            return Err(Unkeyable::NotListed);
                        }
                    }
                    keys::value(prefix, tid, name, value)
                }
            };
            let bucket = sizing(config, limit, subject.identity);
            Ok(Planned {
                limit: limit.name.clone(),
                bucket,
                spend: Spend {
                    key,
                    capacity: bucket.capacity,
                    interval_us: bucket.rate.interval_us(),
                    shadow: limit.shadow,
                },
            })
        })
        .collect()
}

/// Who decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Store,
    /// The in-process fallback bucket (`on_unavailable: local`).
    Local,
    /// `on_unavailable: allow`: passed without counting.
    Allowed,
    /// `on_unavailable: deny`.
    Denied,
}

pub struct Decision {
    pub allowed: bool,
    pub buckets: Vec<(Planned, BucketState)>,
    pub source: Source,
}

/// The limiter a gateway process holds for its whole life (store settings
/// need a restart; limits come from each request's policy snapshot).
pub struct Limiter {
    store: Arc<dyn Store>,
    local: Arc<MemoryStore>,
    pub held: Arc<slots::Held>,
    /// Refusals the shared store made that still hold (not for `memory`).
    denials: Option<denials::Denials>,
    breaker: Breaker,
    timeout: Duration,
    on_unavailable: OnUnavailable,
    divisor: u64,
    /// `fairgate_store_duration_seconds` of this store, by result.
    latency_ok: prometheus::Histogram,
    latency_error: prometheus::Histogram,
}

impl Limiter {
    pub fn new(config: &Config) -> Result<Self, String> {
        let s = &config.store;
        let password = match &s.password_env {
            Some(env) => Some(
                std::env::var(env).map_err(|_| format!("store.password_env: {env} is not set"))?,
            ),
            None => None,
        };
        let store: Arc<dyn Store> = match s.kind {
            StoreKind::Memory => Arc::new(MemoryStore::new(Arc::new(SystemClock))),
            StoreKind::Redis => Arc::new(store::redis::RedisStore::single(
                &s.urls[0],
                password,
                s.timeout,
                &s.key_prefix,
            )?),
            StoreKind::RedisCluster => Arc::new(store::redis::RedisStore::cluster(
                &s.urls,
                password,
                s.timeout,
                &s.key_prefix,
            )?),
        };
        let latency = |result| {
            METRICS
                .store_duration
                .with_label_values(&[store.kind(), result])
        };
        let (latency_ok, latency_error) = (latency("ok"), latency("error"));
        Ok(Limiter {
            latency_ok,
            latency_error,
            store,
            local: Arc::new(MemoryStore::new(Arc::new(SystemClock))),
            held: Arc::default(),
            denials: (s.kind != StoreKind::Memory).then(denials::Denials::default),
            breaker: Breaker::new(Duration::from_millis(500)),
            timeout: s.timeout,
            on_unavailable: s.on_unavailable,
            divisor: s.local_divisor.get(),
        })
    }

    /// Whether decisions are currently made without the shared store.
    pub fn degraded(&self) -> bool {
        self.breaker.is_open()
    }

    pub fn on_unavailable(&self) -> OnUnavailable {
        self.on_unavailable
    }

    /// Checks and spends every planned bucket in one store call.
    /// `generation` is the policy's: cached refusals from older policies
    /// (which may have had smaller capacities) are ignored.
    pub async fn decide(&self, planned: Vec<Planned>, cost: u64, generation: u64) -> Decision {
        if let Some(d) = self.cached_refusal(&planned, cost, generation) {
            return d;
        }
        let spends: Vec<Spend> = planned.iter().map(|p| p.spend.clone()).collect();
        let sent = Instant::now();
        match self.guarded(self.store.spend(&spends, cost)).await {
            Ok(states) => {
                if let Some(denials) = &self.denials {
                    for (p, s) in planned.iter().zip(&states) {
                        if !s.allowed && !p.spend.shadow {
                            denials.remember(&p.spend, cost, generation, sent, s);
                        }
                    }
                }
                decision(planned, states, Source::Store)
            }
            Err(_) => self.fallback(planned, cost),
        }
    }

    /// One call to the shared store under the breaker and `store.timeout`.
    /// An `Err` is the reason the decision falls back (already counted).
    async fn guarded<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, &'static str> {
        if !self.breaker.should_try() {
            METRICS.fallback.with_label_values(&["breaker_open"]).inc();
            return Err("breaker_open");
        }
        let started = Instant::now();
        let result = tokio::time::timeout(self.timeout, call)
            .await
            .unwrap_or(Err(StoreError::TimedOut));
        let latency = if result.is_ok() {
            &self.latency_ok
        } else {
            &self.latency_error
        };
        latency.observe(started.elapsed().as_secs_f64());
        match result {
            Ok(v) => {
                self.breaker.success();
                Ok(v)
            }
            Err(e) => {
                self.breaker.failure(e.reason(), &e);
                METRICS.fallback.with_label_values(&[e.reason()]).inc();
                Err(e.reason())
            }
        }
    }

    /// A refusal decided without the store: some non-shadow bucket is
    /// known to be short of `cost` until a time not yet reached.
    fn cached_refusal(&self, planned: &[Planned], cost: u64, generation: u64) -> Option<Decision> {
        let denials = self.denials.as_ref()?;
        let now = Instant::now();
        let (index, state) = planned.iter().enumerate().find_map(|(i, p)| {
            let hit =
                (!p.spend.shadow).then(|| denials.check(&p.spend, cost, generation, now))??;
            Some((i, hit))
        })?;
        METRICS.denials_cached.inc();
        // Only the bucket known to be short is reported; the others were not asked.
        Some(Decision {
            allowed: false,
            buckets: vec![(planned[index].clone(), state)],
            source: Source::Store,
        })
    }

    fn fallback(&self, planned: Vec<Planned>, cost: u64) -> Decision {
        match self.on_unavailable {
            OnUnavailable::Allow => Decision {
                allowed: true,
                buckets: Vec::new(),
                source: Source::Allowed,
            },
            OnUnavailable::Deny => Decision {
                allowed: false,
                buckets: Vec::new(),
                source: Source::Denied,
            },
            OnUnavailable::Local => {
                // Each of N replicas gets 1/N of the capacity and rate.
                let planned: Vec<Planned> = planned
                    .into_iter()
                    .map(|mut p| {
                        p.bucket.capacity = (p.bucket.capacity / self.divisor).max(1);
                        p.spend.capacity = p.bucket.capacity;
                        p.spend.interval_us = p.spend.interval_us.saturating_mul(self.divisor);
                        p.bucket.rate.period *= self.divisor as u32;
                        p
                    })
                    .collect();
                let spends: Vec<Spend> = planned.iter().map(|p| p.spend.clone()).collect();
                let states = self.local.spend_now(&spends, cost);
                decision(planned, states, Source::Local)
            }
        }
    }
}

/// The outcome of asking for a slot.
pub enum SlotAnswer {
    Granted(slots::Lease),
    /// Every slot is held.
    Full,
    /// The store is down and `on_unavailable: allow`: no lease, no limit.
    Unchecked,
    /// The store is down and `on_unavailable: deny`.
    Denied,
}

impl Limiter {
    /// Asks for a slot of `policy` under `key`.
    pub async fn acquire(&self, policy: &Concurrency, key: String) -> SlotAnswer {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let lease_us = policy.lease.as_micros() as u64;
        let call = self.store.acquire(&key, &id, policy.slots, lease_us);
        match self.guarded(call).await {
            Ok((taken, _)) => return self.answer(policy, key, id, taken, self.store.clone()),
            Err("breaker_open") => {}
            Err(_) => {
                // The call may have reached Redis and taken a slot after we
                // stopped waiting: give it back (release is idempotent).
                let (store, key, id) = (self.store.clone(), key.clone(), id.clone());
                tokio::spawn(async move {
                    let release = store.release(&key, &id);
                    let _ = tokio::time::timeout(Duration::from_secs(5), release).await;
                });
            }
        }
        match self.on_unavailable {
            OnUnavailable::Allow => SlotAnswer::Unchecked,
            OnUnavailable::Deny => SlotAnswer::Denied,
            OnUnavailable::Local => {
                let slots = (policy.slots / self.divisor).max(1);
                let (taken, _) = self.local.acquire_now(&key, &id, slots, lease_us);
                let local: Arc<dyn Store> = self.local.clone();
                self.answer(policy, key, id, taken, local)
            }
        }
    }

    fn answer(
        &self,
        policy: &Concurrency,
        key: String,
        id: String,
        taken: bool,
        store: Arc<dyn Store>,
    ) -> SlotAnswer {
        if !taken {
            METRICS
                .slots_refused
                .with_label_values(&[&policy.name])
                .inc();
            return SlotAnswer::Full;
        }
        SlotAnswer::Granted(slots::Lease::start(
            policy,
            key,
            id,
            store,
            self.held.clone(),
            self.timeout,
        ))
    }

    /// Asks the store whether it answers, outside any request: at start-up
    /// and, while decisions fall back, until it is back.
    pub async fn probe(&self) {
        match tokio::time::timeout(
            self.timeout.max(Duration::from_millis(200)),
            self.store.probe(),
        )
        .await
        {
            Ok(Ok(())) => self.breaker.success(),
            Ok(Err(e)) => self.breaker.failure(e.reason(), &e),
            Err(_) => self.breaker.failure("timed_out", &"store ping timed out"),
        }
    }

    /// Releases every lease this process still holds (shutdown).
    pub async fn release_all(&self) -> usize {
        self.held.release_all(self.timeout).await
    }
}

/// The slot set a request competes in.
pub fn slot_key(
    config: &Config,
    policy: &Concurrency,
    subject: &Subject<'_>,
) -> Result<String, Unkeyable> {
    let prefix = config.store.key_prefix.as_str();
    let name = policy.name.as_str();
    let id = subject.identity;
    Ok(match &policy.scope {
        Scope::Tenant => keys::slots(prefix, &id.ok_or(Unkeyable::MissingClaim)?.tenant, name),
        Scope::TenantUser => {
            let id = id.ok_or(Unkeyable::MissingClaim)?;
            let user = keys::encode(id.user.as_deref().ok_or(Unkeyable::MissingClaim)?);
            format!("{prefix}tenant:{{{}}}:user:{user}:slots:{name}", id.tenant)
        }
        Scope::TenantToken => {
            let id = id.ok_or(Unkeyable::MissingClaim)?;
            let jti = keys::encode(id.token.as_deref().ok_or(Unkeyable::MissingClaim)?);
            format!("{prefix}tenant:{{{}}}:token:{jti}:slots:{name}", id.tenant)
        }
        Scope::ClientIp => format!(
            "{prefix}ip:{{{}}}:slots:{name}",
            subject
                .client_ip
                .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
        ),
        Scope::Global => format!("{prefix}global:{{{name}}}:slots"),
        Scope::Path(_) | Scope::Header(_) => {
            let v = subject
                .value(&policy.scope)?
                .map(keys::encode)
                .unwrap_or_else(|| keys::ABSENT.to_string());
            match id {
                Some(id) => format!("{prefix}tenant:{{{}}}:{name}:{{{v}}}:slots", id.tenant),
                None => format!("{prefix}{name}:{{{v}}}:slots"),
            }
        }
    })
}

fn decision(planned: Vec<Planned>, states: Vec<BucketState>, source: Source) -> Decision {
    let allowed = planned
        .iter()
        .zip(&states)
        .all(|(p, s)| s.allowed || p.spend.shadow);
    Decision {
        allowed,
        buckets: planned.into_iter().zip(states).collect(),
        source,
    }
}

impl Decision {
    /// The bucket to report in quota headers: the one with the fewest tokens
    /// left (first in route order on ties), among non-shadow buckets if any.
    pub fn tightest(&self) -> Option<&(Planned, BucketState)> {
        let real: Vec<_> = self
            .buckets
            .iter()
            .filter(|(p, _)| !p.spend.shadow)
            .collect();
        let pool = if real.is_empty() {
            self.buckets.iter().collect()
        } else {
            real
        };
        pool.into_iter().min_by_key(|(_, s)| s.remaining)
    }

    /// The refusing bucket that takes longest to allow the request.
    pub fn refusing(&self) -> Option<&(Planned, BucketState)> {
        self.buckets
            .iter()
            .filter(|(p, s)| !s.allowed && !p.spend.shadow)
            .max_by_key(|(_, s)| s.retry_after_ms.unwrap_or(u64::MAX))
    }
}
