//! Rate limiting: which buckets a request spends (planned here from the
//! policy and the identity; every key shape is `keys`), the bucket
//! arithmetic (`bucket`), the stores (`store`), upload leases (`lease`),
//! refusals known without asking (`denials`) and what to do when the shared
//! store fails (`fallback`). It knows nothing of HTTP responses.

pub mod bucket;
pub mod denials;
pub mod fallback;
pub mod keys;
pub mod lease;
pub mod store;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::clock::{Clock, SystemClock};
use bucket::{BucketState, Spend};
use fallback::Breaker;
use store::memory::MemoryStore;
use store::{Store, StoreError};

use crate::auth::Identity;
use crate::config::{Bucket, Concurrency, Config, Limit, OnUnavailable, Route, Scope, StoreKind};
use crate::metrics::METRICS;
use keys::{Kind, Scoped};

/// One bucket a request will spend from, with the policy that sized it.
#[derive(Debug, Clone)]
pub struct Planned {
    pub limit: String,
    /// The status of a refusal by this bucket.
    pub status: u16,
    pub bucket: Bucket,
    pub spend: Spend,
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
    config
        .route_limits(route)
        .into_iter()
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
        spend: Spend {
            key,
            capacity: bucket.capacity.get(),
            interval_us: bucket.rate.interval_us(),
            shadow: limit.shadow,
        },
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

/// Why a decision was made without the shared store.
#[derive(Debug)]
enum Fallback {
    /// The breaker is open: the store was not asked.
    BreakerOpen,
    /// The store was asked and failed (unreachable, failed, timed out;
    /// already logged and counted by its reason).
    Store,
}

/// The `reason` of `fairgate_ratelimit_fallback_total` when the breaker
/// kept a decision from the store; the others are `StoreError::reason`s.
pub const BREAKER_OPEN: &str = "breaker_open";

/// Every `reason` of `fairgate_ratelimit_fallback_total`.
pub const FALLBACK_REASONS: [&str; 4] = [
    StoreError::REASONS[0],
    StoreError::REASONS[1],
    StoreError::REASONS[2],
    BREAKER_OPEN,
];

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
    /// What answered, for traces: the store's kind (`redis`, `memory`, ...),
    /// `cache` (a refusal remembered), `local` (the store failed) or
    /// `breaker` (the store was not asked).
    pub via: &'static str,
}

/// The limiter a gateway process holds for its whole life (store settings
/// need a restart; limits come from each request's policy snapshot).
pub struct Limiter {
    store: Arc<dyn Store>,
    local: Arc<MemoryStore>,
    pub held: Arc<lease::Held>,
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
    /// Buckets as the shared store holds them, without spending: a call of
    /// cost 0, which changes nothing a request would see.
    pub async fn peek(&self, spends: &[Spend]) -> Result<Vec<BucketState>, StoreError> {
        let bound = self.timeout.max(Duration::from_millis(500));
        tokio::time::timeout(bound, self.store.spend(spends, 0))
            .await
            .unwrap_or(Err(StoreError::TimedOut))
    }

    /// Resets buckets to full: in the shared store, in the local fallback
    /// and in this process's denial cache.
    pub async fn forget(&self, keys: &[String]) -> Result<(), StoreError> {
        if let Some(denials) = &self.denials {
            denials.forget(keys);
        }
        self.local.forget(keys).await?;
        let bound = self.timeout.max(Duration::from_millis(500));
        tokio::time::timeout(bound, self.store.forget(keys))
            .await
            .unwrap_or(Err(StoreError::TimedOut))
    }

    pub fn new(config: &Config) -> Result<Self, String> {
        Self::with_clock(config, Arc::new(SystemClock))
    }

    /// As `new`, with the clock of the in-process buckets (the memory store
    /// and the local fallback) given: tests hold it still.
    pub fn with_clock(config: &Config, clock: Arc<dyn Clock>) -> Result<Self, String> {
        let s = &config.store;
        let password = match &s.password_env {
            Some(env) => Some(
                std::env::var(env).map_err(|_| format!("store.password_env: {env} is not set"))?,
            ),
            None => None,
        };
        let store: Arc<dyn Store> = match s.kind {
            StoreKind::Memory => Arc::new(MemoryStore::new(clock.clone())),
            StoreKind::Redis => Arc::new(store::redis::RedisStore::single(
                &s.urls[0],
                password,
                &s.tls,
                s.timeout,
                &s.key_prefix,
            )?),
            StoreKind::RedisCluster => Arc::new(store::redis::RedisStore::cluster(
                &s.urls,
                password,
                &s.tls,
                s.timeout,
                &s.key_prefix,
            )?),
            StoreKind::RedisSentinel => Arc::new(store::redis::RedisStore::sentinel(
                &s.urls,
                s.master_name.as_deref().unwrap_or_default(),
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
            local: Arc::new(MemoryStore::new(clock)),
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
                decision(planned, states, Source::Store, self.store.kind())
            }
            Err(why) => self.fallback(planned, cost, why),
        }
    }

    /// One call to the shared store under the breaker and `store.timeout`.
    /// An `Err` says why the decision falls back (already counted).
    async fn guarded<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, Fallback> {
        if !self.breaker.should_try() {
            METRICS.fallback.with_label_values(&[BREAKER_OPEN]).inc();
            return Err(Fallback::BreakerOpen);
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
                Err(Fallback::Store)
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
            via: "cache",
        })
    }

    fn fallback(&self, planned: Vec<Planned>, cost: u64, why: Fallback) -> Decision {
        let via = match why {
            Fallback::BreakerOpen => "breaker",
            Fallback::Store => "local",
        };
        match self.on_unavailable {
            OnUnavailable::Allow => Decision {
                allowed: true,
                buckets: Vec::new(),
                source: Source::Allowed,
                via,
            },
            OnUnavailable::Deny => Decision {
                allowed: false,
                buckets: Vec::new(),
                source: Source::Denied,
                via,
            },
            OnUnavailable::Local => {
                // Each of N replicas gets 1/N of the capacity and rate.
                let planned: Vec<Planned> = planned
                    .into_iter()
                    .map(|mut p| {
                        let capacity = (p.bucket.capacity.get() / self.divisor).max(1);
                        p.bucket.capacity = NonZeroU64::new(capacity).unwrap_or(NonZeroU64::MIN);
                        p.spend.capacity = capacity;
                        p.spend.interval_us = p.spend.interval_us.saturating_mul(self.divisor);
                        p.bucket.rate.period *= self.divisor as u32;
                        p
                    })
                    .collect();
                let spends: Vec<Spend> = planned.iter().map(|p| p.spend.clone()).collect();
                let states = self.local.spend_now(&spends, cost);
                decision(planned, states, Source::Local, via)
            }
        }
    }
}

/// The outcome of asking for a slot.
pub enum SlotAnswer {
    Granted(lease::Lease),
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
        let call = self.store.acquire(&key, &id, policy.slots.get(), lease_us);
        match self.guarded(call).await {
            Ok((taken, _)) => return self.answer(policy, key, id, taken, self.store.clone()),
            Err(Fallback::BreakerOpen) => {}
            Err(Fallback::Store) => {
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
                let slots = (policy.slots.get() / self.divisor).max(1);
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
        SlotAnswer::Granted(lease::Lease::start(
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
    let scoped = scoped(&policy.scope, None, subject, config.server.ipv6_prefix)?;
    Ok(keys::key(
        &config.store.key_prefix,
        scoped,
        &policy.name,
        Kind::Slots,
    ))
}

fn decision(
    planned: Vec<Planned>,
    states: Vec<BucketState>,
    source: Source,
    via: &'static str,
) -> Decision {
    let allowed = planned
        .iter()
        .zip(&states)
        .all(|(p, s)| s.allowed || p.spend.shadow);
    Decision {
        allowed,
        buckets: planned.into_iter().zip(states).collect(),
        source,
        via,
    }
}

/// Index into `metrics::OUTCOMES` (allowed, limited, shadow_limited) of
/// one bucket's answer.
pub fn outcome(allowed: bool, shadow: bool) -> usize {
    match (allowed, shadow) {
        (true, _) => 0,
        (false, false) => 1,
        (false, true) => 2,
    }
}

impl Decision {
    /// The access log's `decision`: who decided and what.
    pub fn label(&self) -> &'static str {
        match (self.allowed, self.source) {
            (_, Source::Denied) => "store_unavailable",
            (true, Source::Allowed) => "allowed_unchecked",
            (true, Source::Local) => "allowed_local",
            (false, Source::Local) => "limited_local",
            (true, _) => "allowed",
            (false, _) => "limited",
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    /// A limiter whose store never answers (a closed loopback port), with
    /// the local fallback on a clock the test moves.
    fn unreachable(divisor: u64, clock: Arc<ManualClock>) -> (Limiter, Config) {
        let yaml = format!(
            r#"
store: {{kind: redis, url: "redis://127.0.0.1:1/0", timeout: 50ms, local_divisor: {divisor}}}
upstreams: {{api: {{targets: ["127.0.0.1:3000"]}}}}
limits: {{api: {{scope: global, default: {{capacity: 4, rate: 4/s}}}}}}
routes: [{{name: api, match: {{path_prefix: /}}, upstream: api, auth: none, limits: [api]}}]
"#
        );
        let config = Config::from_text("t.yaml", &yaml, std::path::Path::new("."))
            .unwrap_or_else(|p| panic!("{p}"))
            .config;
        (Limiter::with_clock(&config, clock).unwrap(), config)
    }

    async fn allowed(limiter: &Limiter, config: &Config) -> (bool, Source) {
        let subject = Subject {
            identity: None,
            captures: &[],
            headers: &http::HeaderMap::new(),
            client_ip: None,
            client_cert: None,
        };
        let planned = plan(config, &config.routes[0], &subject).unwrap();
        let d = limiter.decide(planned, 1, 1).await;
        (d.allowed, d.source)
    }

    #[tokio::test]
    async fn the_local_fallback_divides_capacity_and_rate_by_the_replicas() {
        let clock = Arc::new(ManualClock::default());
        let (limiter, config) = unreachable(2, clock.clone());
        // Capacity 4 and 4/s over 2 replicas: 2 back to back, then one per 500 ms.
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(allowed(&limiter, &config).await);
        }
        let local = |allowed| (allowed, Source::Local);
        assert_eq!(got, [local(true), local(true), local(false)]);
        clock.advance_us(499_999);
        assert_eq!(allowed(&limiter, &config).await, local(false));
        clock.advance_us(1);
        assert_eq!(allowed(&limiter, &config).await, local(true));
        assert_eq!(allowed(&limiter, &config).await, local(false));
        assert!(limiter.degraded(), "the breaker is open");
    }
}
