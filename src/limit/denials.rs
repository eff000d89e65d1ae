//! The denial cache: when the shared store says a bucket cannot serve a
//! cost until time T, this process refuses that bucket at that cost (or
//! more) locally until T, without asking the store. It is exact: other
//! gateways can only empty the bucket further, and T is measured from
//! before the store call, so a local refusal never outlives the store's.
//! A reload (which may raise capacities) invalidates every entry.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::bucket::BucketState;

struct Denial {
    until: Instant,
    cost: u64,
    generation: u64,
    state: BucketState,
}

#[derive(Default)]
pub struct Denials {
    entries: Mutex<HashMap<String, Denial>>,
}

/// Above this many entries, expired ones are swept on insert.
const SWEEP_AT: usize = 4096;

impl Denials {
    /// The cached refusal of `key` at `cost`, with its remaining wait.
    pub fn check(
        &self,
        key: &str,
        cost: u64,
        generation: u64,
        now: Instant,
    ) -> Option<BucketState> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let d = entries.get(key)?;
        if d.generation != generation || cost < d.cost || now >= d.until {
            return None;
        }
        let wait = d.until - now;
        Some(BucketState {
            retry_after_ms: Some((wait.as_micros() as u64).div_ceil(1000)),
            reset_after_ms: d.state.reset_after_ms.saturating_sub(
                d.state
                    .retry_after_ms
                    .unwrap_or(0)
                    .saturating_sub(wait.as_millis() as u64),
            ),
            ..d.state
        })
    }

    /// Remembers a refusal the store made; `sent` is when the call started.
    pub fn remember(
        &self,
        key: &str,
        cost: u64,
        generation: u64,
        sent: Instant,
        state: &BucketState,
    ) {
        let Some(retry) = state.retry_after_ms.filter(|ms| *ms > 0) else {
            return;
        };
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= SWEEP_AT {
            let now = Instant::now();
            entries.retain(|_, d| d.until > now);
        }
        entries.insert(
            key.to_string(),
            Denial {
                until: sent + Duration::from_millis(retry),
                cost,
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

    #[test]
    fn refuses_until_the_deadline_for_the_same_or_larger_cost() {
        let d = Denials::default();
        let t0 = Instant::now();
        d.remember("k", 2, 1, t0, &refused(1000));
        let hit = d.check("k", 2, 1, t0 + Duration::from_millis(400)).unwrap();
        assert_eq!(hit.retry_after_ms, Some(600));
        assert!(d.check("k", 3, 1, t0).is_some());
        assert!(d.check("k", 1, 1, t0).is_none(), "a smaller cost may fit");
        assert!(d.check("k", 2, 2, t0).is_none(), "a reload invalidates");
        assert!(d
            .check("k", 2, 1, t0 + Duration::from_millis(1000))
            .is_none());
        assert!(d.check("other", 2, 1, t0).is_none());
    }
}
