//! What the limiter decided for one request and who answered: the typed
//! vocabularies that logs, metrics and traces print with `as_str()`.

use super::plan::Planned;
use crate::config::StoreKind;
use crate::gcra::BucketState;

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
    /// What answered, for traces.
    pub via: Answered,
}

/// Who answered a limit decision: the trace attribute
/// `fairgate.store.source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answered {
    /// The shared store, of this kind.
    Store(StoreKind),
    /// A refusal this process remembers (the store was not asked).
    Cache,
    /// The store failed; the local fallback or `on_unavailable` decided.
    Local,
    /// The breaker is open: the store was not asked.
    Breaker,
}

impl Answered {
    pub fn as_str(self) -> &'static str {
        match self {
            Answered::Store(StoreKind::Memory) => "memory",
            Answered::Store(StoreKind::Redis) => "redis",
            Answered::Store(StoreKind::RedisCluster) => "redis_cluster",
            Answered::Store(StoreKind::RedisSentinel) => "redis_sentinel",
            Answered::Cache => "cache",
            Answered::Local => "local",
            Answered::Breaker => "breaker",
        }
    }
}

/// The access log's and the span's `decision`: who decided and what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Not decided (no route, refused before the limits).
    None,
    /// An exempt route: no store call.
    Exempt,
    Allowed,
    Limited,
    AllowedLocal,
    LimitedLocal,
    /// `on_unavailable: allow` while the store is down.
    AllowedUnchecked,
    /// `on_unavailable: deny` while the store is down.
    StoreUnavailable,
    /// Every slot of the route's concurrency policy is held.
    NoSlot,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::None => "-",
            Verdict::Exempt => "exempt",
            Verdict::Allowed => "allowed",
            Verdict::Limited => "limited",
            Verdict::AllowedLocal => "allowed_local",
            Verdict::LimitedLocal => "limited_local",
            Verdict::AllowedUnchecked => "allowed_unchecked",
            Verdict::StoreUnavailable => "store_unavailable",
            Verdict::NoSlot => "no_slot",
        }
    }
}

pub(super) fn decision(
    planned: Vec<Planned>,
    states: Vec<BucketState>,
    source: Source,
    via: Answered,
) -> Decision {
    let allowed = planned
        .iter()
        .zip(&states)
        .all(|(p, s)| s.allowed || p.shadow);
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
    /// Who decided and what.
    pub fn verdict(&self) -> Verdict {
        match (self.allowed, self.source) {
            (_, Source::Denied) => Verdict::StoreUnavailable,
            (true, Source::Allowed) => Verdict::AllowedUnchecked,
            (true, Source::Local) => Verdict::AllowedLocal,
            (false, Source::Local) => Verdict::LimitedLocal,
            (true, _) => Verdict::Allowed,
            (false, _) => Verdict::Limited,
        }
    }

    /// The bucket to report in quota headers: the one with the fewest tokens
    /// left (first in route order on ties), among non-shadow buckets if any.
    pub fn tightest(&self) -> Option<&(Planned, BucketState)> {
        let real: Vec<_> = self.buckets.iter().filter(|(p, _)| !p.shadow).collect();
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
            .filter(|(p, s)| !s.allowed && !p.shadow)
            .max_by_key(|(_, s)| s.retry_after_ms.unwrap_or(u64::MAX))
    }
}
