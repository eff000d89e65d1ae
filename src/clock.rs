//! Time that tests can hold still. Wall-clock microseconds (`Clock`) for
//! the memory store's buckets and the local fallback, which model Redis
//! `TIME`; `SystemClock` in production, `ManualClock` in tests. Durations
//! between events (the breaker's probes, lease renewal) use
//! `tokio::time::Instant`, which tests pause and advance.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Microseconds since some fixed origin.
pub trait Clock: Send + Sync {
    fn now_us(&self) -> u64;
}

pub struct SystemClock;

impl Clock for SystemClock {
    fn now_us(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64)
    }
}

/// A clock tests move by hand.
#[derive(Default)]
pub struct ManualClock(pub AtomicU64);

impl Clock for ManualClock {
    fn now_us(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl ManualClock {
    pub fn advance_us(&self, us: u64) {
        self.0.fetch_add(us, Ordering::SeqCst);
    }
}
