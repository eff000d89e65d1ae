//! The price of a failed authentication. Every 401 spends a token from a
//! bucket of the client's address, kept in this process (no store call);
//! while it is empty, that address's unverified tokens get 429 without a
//! signature check, so a flood of forged RS256/ES256 tokens cannot buy
//! unlimited CPU. It knows nothing of tokens or responses.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

use crate::config::Bucket;

/// Addresses tracked at once; past this, full buckets are dropped first,
/// and a new address is not tracked until there is room.
const MAX_ADDRESSES: usize = 100_000;

/// GCRA over microseconds since `epoch`, one theoretical arrival time per address.
pub struct Failures {
    epoch: Instant,
    tat: Mutex<HashMap<IpAddr, u64>>,
}

impl Default for Failures {
    fn default() -> Self {
        Failures {
            epoch: Instant::now(),
            tat: Mutex::new(HashMap::new()),
        }
    }
}

impl Failures {
    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    /// `Ok` while `addr` may still fail once more; else the wait in
    /// milliseconds until it may.
    pub fn check(&self, addr: IpAddr, bucket: &Bucket) -> Result<(), u64> {
        let now = self.now_us();
        let interval = bucket.rate.interval_us();
        let tau = bucket.capacity.get().saturating_mul(interval);
        let map = self.tat.lock().unwrap_or_else(|e| e.into_inner());
        let tat = map.get(&addr).copied().unwrap_or(0).max(now);
        let next = tat + interval;
        if next - now <= tau {
            Ok(())
        } else {
            Err((next - now - tau).div_ceil(1000))
        }
    }

    /// Spends one token for a failed authentication from `addr`.
    pub fn spend(&self, addr: IpAddr, bucket: &Bucket) {
        let now = self.now_us();
        let interval = bucket.rate.interval_us();
        let tau = bucket.capacity.get().saturating_mul(interval);
        let mut map = self.tat.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_ADDRESSES && !map.contains_key(&addr) {
            map.retain(|_, tat| *tat > now);
            if map.len() >= MAX_ADDRESSES {
                return;
            }
        }
        let tat = map.entry(addr).or_insert(0);
        // Never past one token beyond empty, so a long flood ends in one refill.
        *tat = ((*tat).max(now) + interval).min(now + tau + interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Rate;
    use std::time::Duration;

    #[test]
    fn capacity_failures_then_refused() {
        let f = Failures::default();
        let bucket = Bucket {
            capacity: std::num::NonZeroU64::new(3).unwrap(),
            rate: Rate {
                count: std::num::NonZeroU64::MIN,
                period: Duration::from_secs(60),
            },
        };
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        for _ in 0..3 {
            assert!(f.check(a, &bucket).is_ok());
            f.spend(a, &bucket);
        }
        let wait = f.check(a, &bucket).unwrap_err();
        assert!((59_000..=60_000).contains(&wait), "{wait}");
        assert!(f.check(b, &bucket).is_ok());
    }
}
