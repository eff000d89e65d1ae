//! Rate limiting: which buckets a request spends (planned here from the
//! policy and the identity; every key shape is `keys`), the stores
//! (`store`), upload leases (`lease`), refusals known without asking
//! (`denials`) and what to do when the shared store fails (`fallback`).
//! The bucket arithmetic is `crate::gcra`, which `auth` uses too. It knows nothing of HTTP responses.

pub mod decision;
pub mod denials;
pub mod fallback;
pub mod keys;
pub mod lease;
pub mod plan;
pub mod store;

pub use decision::{outcome, Answered, Decision, Source, Verdict};
pub use plan::{
    address_key, plan, sizing, slot_key, tenant_buckets, Planned, Subject, Unkeyable,
    MAX_VALUE_BYTES,
};

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::clock::{Clock, SystemClock};
use crate::gcra::{BucketState, Spend};
use fallback::Breaker;
use store::memory::MemoryStore;
use store::{OpenError, Store, StoreError, StoreTlsPem};

use crate::config::{Concurrency, Config, Durability, OnUnavailable, StoreKind};
use crate::metrics::METRICS;

/// Why a decision was made without the shared store: the `reason` of
/// `fairgate_ratelimit_fallback_total` and of `rate_limits.fallback`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// The store could not be reached.
    Unreachable,
    /// The store answered with an error.
    Failed,
    /// The store did not answer within `store.timeout`.
    TimedOut,
    /// The breaker is open: the store was not asked.
    BreakerOpen,
    /// `store.durability: replicated`: no replica acknowledged the write.
    Unconfirmed,
}

impl Fallback {
    pub const ALL: [Fallback; 5] = [
        Fallback::Unreachable,
        Fallback::Failed,
        Fallback::TimedOut,
        Fallback::BreakerOpen,
        Fallback::Unconfirmed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Fallback::Unreachable => "unreachable",
            Fallback::Failed => "failed",
            Fallback::TimedOut => "timed_out",
            Fallback::BreakerOpen => "breaker_open",
            Fallback::Unconfirmed => "unconfirmed",
        }
    }

    pub fn of(error: &StoreError) -> Fallback {
        match error {
            StoreError::Unreachable(_) => Fallback::Unreachable,
            StoreError::Failed(_) => Fallback::Failed,
            StoreError::TimedOut => Fallback::TimedOut,
            StoreError::Unconfirmed => Fallback::Unconfirmed,
        }
    }
}

/// The limiter a gateway process holds for its whole life (store settings
/// need a restart; limits come from each request's policy snapshot).
pub struct Limiter {
    store: Arc<dyn Store>,
    kind: StoreKind,
    local: Arc<MemoryStore>,
    pub held: Arc<lease::Held>,
    /// Refusals the shared store made that still hold (not for `memory`).
    denials: Option<denials::Denials>,
    breaker: Breaker,
    /// The key of the last call that failed: the background probe asks its
    /// shard, so an outage of one Cluster shard ends when that shard is back.
    failed_near: std::sync::Mutex<Option<String>>,
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

    /// The store `config` names; `tls` is its `rediss://` material, as the
    /// policy builder loaded it.
    pub fn new(config: &Config, tls: &StoreTlsPem) -> Result<Self, OpenError> {
        Self::with_clock(config, tls, Arc::new(SystemClock))
    }

    /// As `new`, with the clock of the in-process buckets (the memory store
    /// and the local fallback) given: tests hold it still.
    pub fn with_clock(
        config: &Config,
        tls: &StoreTlsPem,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, OpenError> {
        let s = &config.store;
        let password = match &s.password_env {
            Some(env) => {
                Some(std::env::var(env).map_err(|_| OpenError::PasswordUnset(env.clone()))?)
            }
            None => None,
        };
        let redis = match s.kind {
            StoreKind::Memory => None,
            StoreKind::Redis => Some(store::redis::RedisStore::single(
                &s.urls[0],
                password,
                tls,
                s.timeout,
                &s.key_prefix,
            )?),
            StoreKind::RedisCluster => Some(store::redis::RedisStore::cluster(
                &s.urls,
                password,
                tls,
                s.timeout,
                &s.key_prefix,
            )?),
            StoreKind::RedisSentinel => Some(store::redis::RedisStore::sentinel(
                &s.urls,
                s.master_name.as_deref().unwrap_or_default(),
                password,
                s.timeout,
                &s.key_prefix,
            )?),
        };
        let store: Arc<dyn Store> = match (redis, s.durability) {
            // WAIT gives up at half the timeout, so an unconfirmed write is
            // told apart from a store too slow to answer at all.
            (Some(r), Durability::Replicated) => Arc::new(r.replicated(s.timeout / 2)),
            (Some(r), Durability::Fast) => Arc::new(r),
            (None, _) => Arc::new(MemoryStore::new(clock.clone())),
        };
        let latency = |result| {
            METRICS
                .store_duration
                .with_label_values(&[Answered::Store(s.kind).as_str(), result])
        };
        let (latency_ok, latency_error) = (latency("ok"), latency("error"));
        Ok(Limiter {
            latency_ok,
            latency_error,
            store,
            kind: s.kind,
            local: Arc::new(MemoryStore::new(clock)),
            held: Arc::default(),
            denials: (s.kind != StoreKind::Memory).then(denials::Denials::default),
            breaker: Breaker::new(Duration::from_millis(500)),
            failed_near: std::sync::Mutex::default(),
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
        let spends: Vec<Spend> = planned.iter().map(Planned::spend).collect();
        let sent = Instant::now();
        let near = spends.first().map_or("", |s| s.key.as_str());
        match self.guarded(near, self.store.spend(&spends, cost)).await {
            Ok(states) => {
                if let Some(denials) = &self.denials {
                    for (p, s) in planned.iter().zip(&states) {
                        if !s.allowed && !p.shadow {
                            denials.remember(&p.spend(), cost, generation, sent, s);
                        }
                    }
                }
                decision::decision(planned, states, Source::Store, Answered::Store(self.kind))
            }
            Err(why) => self.fallback(planned, cost, why),
        }
    }

    /// One call to the shared store, on `key`'s shard, under the breaker
    /// and `store.timeout`. An `Err` says why the decision falls back
    /// (already counted).
    async fn guarded<T>(
        &self,
        key: &str,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, Fallback> {
        if !self.breaker.should_try() {
            let why = Fallback::BreakerOpen;
            METRICS.fallback.with_label_values(&[why.as_str()]).inc();
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
                let why = Fallback::of(&e);
                *self.failed_near.lock().unwrap_or_else(|e| e.into_inner()) = Some(key.to_string());
                self.breaker.failure(why, &e);
                METRICS.fallback.with_label_values(&[why.as_str()]).inc();
                Err(why)
            }
        }
    }

    /// A refusal decided without the store: some non-shadow bucket is
    /// known to be short of `cost` until a time not yet reached.
    fn cached_refusal(&self, planned: &[Planned], cost: u64, generation: u64) -> Option<Decision> {
        let denials = self.denials.as_ref()?;
        let now = Instant::now();
        let (index, state) = planned.iter().enumerate().find_map(|(i, p)| {
            let hit = (!p.shadow).then(|| denials.check(&p.spend(), cost, generation, now))??;
            Some((i, hit))
        })?;
        METRICS.denials_cached.inc();
        // Only the bucket known to be short is reported; the others were not asked.
        Some(Decision {
            allowed: false,
            buckets: vec![(planned[index].clone(), state)],
            source: Source::Store,
            via: Answered::Cache,
        })
    }

    fn fallback(&self, planned: Vec<Planned>, cost: u64, why: Fallback) -> Decision {
        let via = match why {
            Fallback::BreakerOpen => Answered::Breaker,
            _ => Answered::Local,
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
                        p.bucket.rate.period *= self.divisor as u32;
                        p
                    })
                    .collect();
                let spends: Vec<Spend> = planned.iter().map(Planned::spend).collect();
                let states = self.local.spend_now(&spends, cost);
                decision::decision(planned, states, Source::Local, via)
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
        match self.guarded(&key, call).await {
            Ok((taken, _)) => return self.answer(policy, key, id, taken, self.store.clone()),
            Err(Fallback::BreakerOpen) => {}
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
    /// and, while decisions fall back or an outage is not over, until it
    /// is back. In an outage with the breaker closed (decisions get
    /// answers: on a Cluster, from the other shards), a failure only keeps
    /// the outage going: it neither opens the breaker nor remakes the
    /// shared connection.
    pub async fn probe(&self) {
        let near = self
            .failed_near
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let renew = self.breaker.is_open() || !self.breaker.in_outage();
        let answer = tokio::time::timeout(
            self.timeout.max(Duration::from_millis(200)),
            self.store.probe(near.as_deref(), renew),
        );
        let failed = match answer.await {
            Ok(Ok(())) => return self.breaker.success(),
            Ok(Err(e)) => (Fallback::of(&e), e.to_string()),
            Err(_) => (Fallback::TimedOut, "store ping timed out".to_string()),
        };
        if renew {
            self.breaker.failure(failed.0, &failed.1);
        } else {
            self.breaker.still_failing();
        }
    }

    /// Whether the background probe should run: decisions fall back, or an
    /// outage has not been logged over yet.
    pub fn needs_probe(&self) -> bool {
        self.breaker.is_open() || self.breaker.in_outage()
    }

    /// Releases every lease this process still holds (shutdown).
    pub async fn release_all(&self) -> usize {
        self.held.release_all(self.timeout).await
    }
}

/// The slot set a request competes in.
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
        let tls = StoreTlsPem {
            verify: true,
            roots: None,
            client: None,
        };
        (Limiter::with_clock(&config, &tls, clock).unwrap(), config)
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
