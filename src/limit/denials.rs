//! The denial cache: when the shared store says a bucket cannot serve a
//! cost until time T, this process refuses that bucket at that cost (or
//! more) and that size locally until T, without asking the store. It is
//! exact: other gateways can only empty the bucket further, T is measured
//! from before the store call and rounded down, so a local refusal never
//! outlives the store's. A refusal holds only for the bucket size it was
//! made at (one key can be sized per caller's plan), and a reload (which may
//! raise capacities) invalidates every entry.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::gcra::{BucketState, Spend};

struct Denial {
    until: Instant,
    cost: u64,
    capacity: u64,
    interval_us: u64,
    generation: u64,
    state: BucketState,
}

#[derive(Default)]
pub struct Denials {
    entries: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    map: HashMap<String, Denial>,
    /// Size after the last sweep; the next runs when the map doubles.
    swept_len: usize,
}

/// Most entries held; past it new refusals are simply not cached (the cache
/// only saves store calls, so leaving one out is always safe).
const MAX_ENTRIES: usize = 100_000;

impl Denials {
    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drops the refusals of buckets that were reset.
    pub fn forget(&self, keys: &[String]) {
        let mut entries = self.lock();
        for key in keys {
            entries.map.remove(key);
        }
    }

    /// The cached refusal of this bucket at `cost`, with its remaining wait.
    pub fn check(
        &self,
        spend: &Spend,
        cost: u64,
        generation: u64,
        now: Instant,
    ) -> Option<BucketState> {
        let entries = self.lock();
        let d = entries.map.get(&spend.key)?;
        let same_size = d.capacity == spend.capacity && d.interval_us == spend.interval_us;
        if !same_size || d.generation != generation || cost < d.cost || now >= d.until {
            return None;
        }
        let wait = d.until - now;
        let waited = d
            .state
            .retry_after_ms
            .unwrap_or(0)
            .saturating_sub(wait.as_millis() as u64);
        Some(BucketState {
            retry_after_ms: Some((wait.as_micros() as u64).div_ceil(1000)),
            reset_after_ms: d.state.reset_after_ms.saturating_sub(waited),
            ..d.state
        })
    }

    /// Remembers a refusal the store made; `sent` is when the call started.
    pub fn remember(
        &self,
        spend: &Spend,
        cost: u64,
        generation: u64,
        sent: Instant,
        state: &BucketState,
    ) {
        // The store rounds its wait up to whole milliseconds: take one off so
        // the local refusal ends no later than the store's would.
        let Some(wait_ms) = state.retry_after_ms.filter(|ms| *ms > 1).map(|ms| ms - 1) else {
            return;
        };
        let mut entries = self.lock();
        if entries.map.len() >= (entries.swept_len * 2).max(4096) {
            let now = Instant::now();
            entries.map.retain(|_, d| d.until > now);
            entries.swept_len = entries.map.len();
        }
        if entries.map.len() >= MAX_ENTRIES && !entries.map.contains_key(&spend.key) {
            return;
        }
        entries.map.insert(
            spend.key.clone(),
            Denial {
                until: sent + Duration::from_millis(wait_ms),
                cost,
                capacity: spend.capacity,
                interval_us: spend.interval_us,
                generation,
                state: *state,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(retry_ms: u64) -> BucketState {
        BucketState {
            allowed: false,
            remaining: 0,
            retry_after_ms: Some(retry_ms),
            reset_after_ms: 50_000,
        }
    }

    fn spend(key: &str, capacity: u64) -> Spend {
        Spend {
            key: key.into(),
            capacity,
            interval_us: 1000,
            shadow: false,
        }
    }

    #[test]
    fn refuses_until_the_deadline_for_the_same_size_and_cost() {
        let d = Denials::default();
        let t0 = Instant::now();
        let k = spend("k", 20);
        d.remember(&k, 2, 1, t0, &refused(1001));
        let hit = d.check(&k, 2, 1, t0 + Duration::from_millis(400)).unwrap();
        assert_eq!(hit.retry_after_ms, Some(600));
        assert!(d.check(&k, 3, 1, t0).is_some());
        assert!(d.check(&k, 1, 1, t0).is_none(), "a smaller cost may fit");
        assert!(d.check(&k, 2, 2, t0).is_none(), "a reload invalidates");
        assert!(
            d.check(&spend("k", 500), 2, 1, t0).is_none(),
            "a bigger plan may fit"
        );
        assert!(d
            .check(&k, 2, 1, t0 + Duration::from_millis(1000))
            .is_none());
        assert!(d.check(&spend("other", 20), 2, 1, t0).is_none());
    }

    #[test]
    fn stays_bounded() {
        let d = Denials::default();
        let t0 = Instant::now();
        for i in 0..MAX_ENTRIES + 10 {
            d.remember(&spend(&format!("k{i}"), 1), 1, 1, t0, &refused(60_000));
        }
        assert_eq!(d.lock().map.len(), MAX_ENTRIES);
    }
}
