//! The token bucket's arithmetic (GCRA over integer microseconds) and the
//! shape of one decision. `lua/token_bucket.lua` is the same algorithm run
//! inside Redis; the memory store runs this one. Change both together.
//! It depends on nothing in the crate: the limiter (`limit`) and the
//! failed-credential buckets of `auth` both use it.

/// One bucket a request must spend from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spend {
    /// Full store key, prefix included.
    pub key: String,
    pub capacity: u64,
    /// Microseconds per token.
    pub interval_us: u64,
    /// Counts and reports, never refuses.
    pub shadow: bool,
}

/// One bucket's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketState {
    /// The bucket held the tokens (the request is refused when any
    /// non-shadow bucket did not).
    pub allowed: bool,
    /// Tokens left: after the request when it was allowed, before it when not.
    pub remaining: u64,
    /// Until the bucket holds the cost; `None` when the cost exceeds capacity.
    pub retry_after_ms: Option<u64>,
    /// Until the bucket is full again.
    pub reset_after_ms: u64,
}

fn ceil_ms(us: u64) -> u64 {
    us.div_ceil(1000)
}

fn tokens(tau: u64, tat: u64, now: u64, interval: u64) -> u64 {
    tau.saturating_sub(tat.saturating_sub(now)) / interval
}

/// Decides every bucket for one request against stored TATs (`None` = full).
/// Returns the states and, when the request is allowed, the new TAT of each
/// bucket to write (`None` = leave it).
pub fn decide(
    now: u64,
    spends: &[Spend],
    tats: &[Option<u64>],
    cost: u64,
) -> (Vec<BucketState>, Option<Vec<Option<u64>>>) {
    let mut states = Vec::with_capacity(spends.len());
    let mut writes = Vec::with_capacity(spends.len());
    let mut refused = false;
    for (spend, stored) in spends.iter().zip(tats) {
        let interval = spend.interval_us.max(1);
        let tau = spend.capacity * interval;
        let tat = stored.unwrap_or(now).max(now);
        let mut state = BucketState {
            allowed: false,
            remaining: tokens(tau, tat, now, interval),
            retry_after_ms: None,
            reset_after_ms: ceil_ms(tat - now),
        };
        let mut write = None;
        if cost <= spend.capacity {
            let new_tat = tat + cost * interval;
            let allow_at = new_tat.saturating_sub(tau);
            if now >= allow_at {
                state.allowed = true;
                state.retry_after_ms = Some(0);
                write = Some(new_tat);
            } else {
                state.retry_after_ms = Some(ceil_ms(allow_at - now));
            }
        }
        if !state.allowed && !spend.shadow {
            refused = true;
        }
        states.push(state);
        writes.push(write);
    }
    if refused {
        return (states, None);
    }
    for ((state, spend), write) in states.iter_mut().zip(spends).zip(&writes) {
        if let Some(new_tat) = write {
            let interval = spend.interval_us.max(1);
            state.remaining = tokens(spend.capacity * interval, *new_tat, now, interval);
            state.reset_after_ms = ceil_ms(new_tat - now);
        }
    }
    (states, Some(writes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spend(capacity: u64, interval_us: u64) -> Spend {
        Spend {
            key: "k".into(),
            capacity,
            interval_us,
            shadow: false,
        }
    }

    #[test]
    fn burst_then_refill() {
        let s = [spend(5, 10_000_000)];
        let mut tat = None;
        for i in 0..5 {
            let (st, w) = decide(0, &s, &[tat], 1);
            assert!(st[0].allowed, "request {i}");
            assert_eq!(st[0].remaining, 4 - i);
            tat = w.unwrap()[0];
        }
        let (st, w) = decide(0, &s, &[tat], 1);
        assert!(!st[0].allowed && w.is_none());
        assert_eq!(st[0].retry_after_ms, Some(10_000));
        assert_eq!(st[0].reset_after_ms, 50_000);
        // One interval later exactly one token is back.
        let (st, w) = decide(10_000_000, &s, &[tat], 1);
        assert!(st[0].allowed);
        assert_eq!(st[0].remaining, 0);
        let (st, _) = decide(10_000_000, &s, &[w.unwrap()[0]], 1);
        assert!(!st[0].allowed);
    }

    #[test]
    fn costs_and_oversized_requests() {
        let s = [spend(10, 1_000_000)];
        let (st, w) = decide(0, &s, &[None], 4);
        assert_eq!(st[0].remaining, 6);
        let tat = w.unwrap()[0];
        let (st, w) = decide(0, &s, &[tat], 7);
        assert!(!st[0].allowed && w.is_none());
        assert_eq!(st[0].remaining, 6);
        let (st, w) = decide(0, &s, &[tat], 6);
        assert_eq!(st[0].remaining, 0);
        assert!(w.is_some());
        let (st, w) = decide(0, &s, &[None], 11);
        assert!(!st[0].allowed && w.is_none());
        assert_eq!(st[0].retry_after_ms, None);
    }

    #[test]
    fn all_or_nothing_and_shadow() {
        let full = spend(10, 1_000_000);
        let empty = spend(1, 1_000_000);
        // `empty` already spent: its TAT is one interval ahead.
        let (st, w) = decide(
            0,
            &[full.clone(), empty.clone()],
            &[None, Some(1_000_000)],
            1,
        );
        assert!(st[0].allowed && !st[1].allowed);
        assert!(w.is_none(), "nothing written when one bucket refuses");
        assert_eq!(st[0].remaining, 10, "the refused request spent nothing");
        let shadow = Spend {
            shadow: true,
            ..empty
        };
        let (st, w) = decide(0, &[full, shadow], &[None, Some(1_000_000)], 1);
        let w = w.expect("a shadow bucket never refuses");
        assert!(!st[1].allowed);
        assert_eq!(w, vec![Some(1_000_000), None]);
        assert_eq!(st[0].remaining, 9);
    }

    #[test]
    fn headers_example_from_the_spec() {
        // capacity 100, 100/m (600 ms a token), 40 spent.
        let s = [spend(100, 600_000)];
        let (st, _) = decide(0, &s, &[Some(24_000_000)], 1);
        assert_eq!(st[0].remaining, 59);
        let (st, _) = decide(0, &s, &[None], 40);
        assert_eq!((st[0].remaining, st[0].reset_after_ms), (60, 24_000));
    }
}
