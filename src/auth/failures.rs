//! The price of a failed authentication. Every 401 spends a token from a
//! bucket of the client's address, kept in this process (no store call);
//! while it is empty, that address's unverified tokens get 429 without a
//! signature check, so a flood of forged RS256/ES256 tokens cannot buy
//! unlimited CPU. A failed basic-auth check also spends a bucket of the
//! user name it claimed (by a digest, `UserKey`), so guesses at one user
//! spread over many addresses run dry too. It knows nothing of tokens or
//! responses.

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use crate::clock::{Clock, SystemClock};
use crate::config::Bucket;
use crate::gcra::{decide, Spend};

/// Keys (addresses, user names) tracked at once; past this, a new key
/// takes the place of the one whose bucket is fullest (earliest
/// theoretical arrival), so a failure is always recorded and no request
/// scans the table.
const MAX_KEYS: usize = 100_000;

/// One GCRA bucket (`crate::gcra`, the limiter's own arithmetic) per
/// key (by default the client's address), on the injected clock.
pub struct Failures<K = IpAddr> {
    clock: Arc<dyn Clock>,
    tat: Mutex<Table<K>>,
}

/// Whose failed basic-auth checks a bucket counts: a SHA-256 digest of
/// the method's name and the user name claimed, so neither the table nor
/// anything printing it holds a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UserKey([u8; 32]);

impl UserKey {
    pub fn new(method: &str, user: &str) -> Self {
        let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
        ctx.update(method.as_bytes());
        ctx.update(b"\0");
        ctx.update(user.as_bytes());
        let mut key = [0u8; 32];
        key.copy_from_slice(ctx.finish().as_ref());
        UserKey(key)
    }
}

/// Why a request is refused (429) before its credentials are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Throttle {
    /// Its address's failure bucket is empty.
    Address,
    /// The bucket of the basic-auth user name it claims is empty.
    User,
    /// Its address has a basic-auth check running or waiting already.
    Queued,
}

impl Throttle {
    /// The reasons of basic auth alone (`fairgate_basic_auth_throttled_total`).
    pub const BASIC: [Throttle; 2] = [Throttle::User, Throttle::Queued];

    /// A bounded metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Throttle::Address => "address",
            Throttle::User => "user",
            Throttle::Queued => "queued",
        }
    }
}

/// Each key's theoretical arrival time, also ordered by it.
struct Table<K> {
    tat: HashMap<K, u64>,
    by_tat: BTreeSet<(u64, K)>,
}

impl<K> Default for Table<K> {
    fn default() -> Self {
        Table {
            tat: HashMap::new(),
            by_tat: BTreeSet::new(),
        }
    }
}

impl<K: Copy + Eq + Hash + Ord> Table<K> {
    fn set(&mut self, key: K, tat: u64) {
        if let Some(old) = self.tat.insert(key, tat) {
            self.by_tat.remove(&(old, key));
        }
        self.by_tat.insert((tat, key));
    }

    /// Forgets the key whose bucket is fullest.
    fn evict_fullest(&mut self) {
        if let Some((_, key)) = self.by_tat.pop_first() {
            self.tat.remove(&key);
        }
    }
}

impl<K> Default for Failures<K> {
    fn default() -> Self {
        Failures::with_clock(Arc::new(SystemClock))
    }
}

impl<K> Failures<K> {
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Failures {
            clock,
            tat: Mutex::new(Table::default()),
        }
    }
}

impl<K: Copy + Eq + Hash + Ord> Failures<K> {
    /// The bucket of `bucket`'s policy for one failure (cost 1).
    fn spend(bucket: &Bucket) -> [Spend; 1] {
        [Spend {
            key: String::new(),
            capacity: bucket.capacity.get(),
            interval_us: bucket.rate.interval_us(),
            shadow: false,
        }]
    }

    /// `Ok` while `key` may still fail once more; else the wait in
    /// milliseconds until it may.
    pub fn check(&self, key: K, bucket: &Bucket) -> Result<(), u64> {
        let now = self.clock.now_us();
        let tat = self
            .tat
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .tat
            .get(&key)
            .copied();
        let (states, _) = decide(now, &Self::spend(bucket), &[tat], 1);
        match states[0].allowed {
            true => Ok(()),
            false => Err(states[0].retry_after_ms.unwrap_or(states[0].reset_after_ms)),
        }
    }

    /// Spends one token for a failed authentication of `key`; an empty
    /// bucket stays empty (the key waits one refill after the flood).
    pub fn record(&self, key: K, bucket: &Bucket) {
        let now = self.clock.now_us();
        let mut table = self.tat.lock().unwrap_or_else(|e| e.into_inner());
        let tat = table.tat.get(&key).copied();
        if tat.is_none() && table.tat.len() >= MAX_KEYS {
            table.evict_fullest();
        }
        let (_, writes) = decide(now, &Self::spend(bucket), &[tat], 1);
        let written = writes.and_then(|w| w[0]);
        if let Some(tat) = written.or(tat) {
            table.set(key, tat);
        }
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
        for i in 0..MAX_KEYS as u32 {
            f.record(
                IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i)),
                &bucket,
            );
        }
        let new: IpAddr = "192.0.2.1".parse().unwrap();
        f.record(new, &bucket);
        f.record(new, &bucket);
        assert!(
            f.check(new, &bucket).is_err(),
            "the new address is throttled"
        );
        let table = f.tat.lock().unwrap();
        assert_eq!(table.tat.len(), MAX_KEYS);
        assert_eq!(table.by_tat.len(), MAX_KEYS);
        // The fullest bucket (the first spent) made room.
        assert!(!table
            .tat
            .contains_key(&IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000))));
    }

    #[test]
    fn capacity_failures_then_refused_until_one_refill_exactly() {
        let clock = Arc::new(crate::clock::ManualClock::default());
        let f = Failures::with_clock(clock.clone());
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
            f.record(a, &bucket);
        }
        assert_eq!(f.check(a, &bucket), Err(60_000));
        // A flood while empty does not push the refill further.
        f.record(a, &bucket);
        clock.advance_us(59_999_999);
        assert_eq!(f.check(a, &bucket), Err(1));
        clock.advance_us(1);
        assert_eq!(f.check(a, &bucket), Ok(()));
        assert!(f.check(b, &bucket).is_ok());
    }
}
