//! The price of a failed authentication. Every 401 spends a token from a
//! bucket of the client's address, kept in this process (no store call);
//! while it is empty, that address's unverified tokens get 429 without a
//! signature check, so a flood of forged RS256/ES256 tokens cannot buy
//! unlimited CPU. It knows nothing of tokens or responses.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

use crate::config::Bucket;

/// Addresses tracked at once; past this, a new address takes the place of
/// the one whose bucket is fullest (earliest theoretical arrival), so a
/// failure is always recorded and no request scans the table.
const MAX_ADDRESSES: usize = 100_000;

/// GCRA over microseconds since `epoch`, one theoretical arrival time per address.
pub struct Failures {
    epoch: Instant,
    tat: Mutex<Table>,
}

/// Each address's theoretical arrival time, also ordered by it.
#[derive(Default)]
struct Table {
    tat: HashMap<IpAddr, u64>,
    by_tat: BTreeSet<(u64, IpAddr)>,
}

impl Table {
    fn set(&mut self, addr: IpAddr, tat: u64) {
        if let Some(old) = self.tat.insert(addr, tat) {
            self.by_tat.remove(&(old, addr));
        }
        self.by_tat.insert((tat, addr));
    }

    /// Forgets the address whose bucket is fullest.
    fn evict_fullest(&mut self) {
        if let Some((_, addr)) = self.by_tat.pop_first() {
            self.tat.remove(&addr);
        }
    }
}

impl Default for Failures {
    fn default() -> Self {
        Failures {
            epoch: Instant::now(),
            tat: Mutex::new(Table::default()),
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
        let table = self.tat.lock().unwrap_or_else(|e| e.into_inner());
        let tat = table.tat.get(&addr).copied().unwrap_or(0).max(now);
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
        let mut table = self.tat.lock().unwrap_or_else(|e| e.into_inner());
        let tat = table.tat.get(&addr).copied();
        if tat.is_none() && table.tat.len() >= MAX_ADDRESSES {
            table.evict_fullest();
        }
        // Never past one token beyond empty, so a long flood ends in one refill.
        let tat = (tat.unwrap_or(0).max(now) + interval).min(now + tau + interval);
        table.set(addr, tat);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Rate;
    use std::time::Duration;

    /// Finding 11 of the third attack: with the table full of live
    /// addresses, a new address's failures went unrecorded (fail open).
    #[test]
    fn finding_11_a_full_table_still_records_a_new_address() {
        let f = Failures::default();
        let bucket = Bucket {
            capacity: std::num::NonZeroU64::new(2).unwrap(),
            rate: Rate {
                count: std::num::NonZeroU64::MIN,
                period: Duration::from_secs(3600),
            },
        };
        for i in 0..MAX_ADDRESSES as u32 {
            f.spend(
                IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i)),
                &bucket,
            );
        }
        let new: IpAddr = "192.0.2.1".parse().unwrap();
        f.spend(new, &bucket);
        f.spend(new, &bucket);
        assert!(
            f.check(new, &bucket).is_err(),
            "the new address is throttled"
        );
        let table = f.tat.lock().unwrap();
        assert_eq!(table.tat.len(), MAX_ADDRESSES);
        assert_eq!(table.by_tat.len(), MAX_ADDRESSES);
        // The fullest bucket (the first spent) made room.
        assert!(!table
            .tat
            .contains_key(&IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000))));
    }

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
