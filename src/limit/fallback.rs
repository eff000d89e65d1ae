//! What happens when the shared store fails: a breaker that stops waiting on
//! a store that is down, and one log line per outage, never one per request.
//!
//! The breaker closes at the first answer, but the outage it logged ends only
//! once the store has answered for `SETTLE` with no failure: on a Redis
//! Cluster with one shard failing over, an answer from a healthy shard
//! closes the breaker and the next call to the failed one opens it again,
//! which is one outage, not one per answer.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::breaker::{self, Trip};
use crate::metrics::METRICS;

/// The breaker's time: tokio's, so that tests with paused time move it.
fn now() -> std::time::Instant {
    Instant::now().into_std()
}

/// How long the store must answer without a failure before the outage
/// logged by `rate_limits.fallback` is over (`rate_limits.recovered`).
pub const SETTLE: Duration = Duration::from_secs(2);

/// While open, decisions skip the store; one call per `probe_every` is let
/// through to find out whether it is back (`crate::breaker`, opened by one
/// failure).
pub struct Breaker {
    /// Whether `state` is open, read without its lock on the hot path.
    open: AtomicBool,
    state: Mutex<breaker::Breaker>,
    trip: Trip,
    /// An outage is logged and not yet over (read without the lock on the
    /// hot path; changed only under it).
    outage: AtomicBool,
    /// The time of the outage's last failure. Its lock orders every change
    /// of `outage`, its log line and `fairgate_store_up`.
    last_failure: Mutex<Instant>,
    episodes: AtomicU64,
}

impl Breaker {
    pub fn new(probe_every: Duration) -> Self {
        METRICS.store_up.set(1);
        Breaker {
            open: AtomicBool::new(false),
            state: Mutex::new(breaker::Breaker::default()),
            trip: Trip {
                failures: 1,
                open_for: probe_every,
                probe_gap: probe_every,
            },
            outage: AtomicBool::new(false),
            last_failure: Mutex::new(Instant::now()),
            episodes: AtomicU64::new(0),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, breaker::Breaker> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this decision should ask the store.
    pub fn should_try(&self) -> bool {
        !self.open.load(Ordering::Acquire) || self.state().admit(now(), &self.trip)
    }

    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// An outage was logged and has not been logged over yet.
    pub fn in_outage(&self) -> bool {
        self.outage.load(Ordering::Acquire)
    }

    /// A decision's call failed: the breaker opens, and an outage begins
    /// unless one is going on.
    pub fn failure(&self, reason: super::Fallback, error: &dyn std::fmt::Display) {
        let now = Instant::now();
        self.state().failed(now.into_std(), &self.trip);
        let mut last = self.last_failure.lock().unwrap_or_else(|e| e.into_inner());
        *last = now;
        self.open.store(true, Ordering::Release);
        if !self.outage.swap(true, Ordering::AcqRel) {
            let episode = self.episodes.fetch_add(1, Ordering::Relaxed) + 1;
            METRICS.store_up.set(0);
            tracing::warn!(reason = reason.as_str(), error = %error, episode, "rate_limits.fallback");
        }
    }

    /// The background probe failed while decisions get answers (on a
    /// Cluster, the failed shard is still down and the others answer): the
    /// outage goes on, and the breaker stays closed for the others.
    pub fn still_failing(&self) {
        if self.in_outage() {
            *self.last_failure.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        }
    }

    pub fn success(&self) {
        // Loads first: the hot path, with a healthy store, writes nothing
        // and takes no lock.
        if self.open.load(Ordering::Acquire) {
            self.state().answered();
            self.open.store(false, Ordering::Release);
        }
        if !self.outage.load(Ordering::Acquire) {
            return;
        }
        let last = self.last_failure.lock().unwrap_or_else(|e| e.into_inner());
        if last.elapsed() >= SETTLE && self.outage.swap(false, Ordering::AcqRel) {
            METRICS.store_up.set(1);
            tracing::info!(
                episode = self.episodes.load(Ordering::Relaxed),
                "rate_limits.recovered"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn opens_on_failure_probes_once_per_interval_and_closes_on_success() {
        let b = Breaker::new(Duration::from_millis(500));
        assert!(b.should_try() && !b.is_open());
        b.failure(super::super::Fallback::Unreachable, &"refused");
        assert!(b.is_open());
        assert!(!b.should_try(), "open: no store call");
        tokio::time::advance(Duration::from_millis(499)).await;
        assert!(!b.should_try());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(b.should_try(), "one probe after the interval");
        assert!(!b.should_try(), "and only one");
        b.failure(super::super::Fallback::TimedOut, &"slow");
        tokio::time::advance(Duration::from_millis(499)).await;
        assert!(!b.should_try(), "a failed probe restarts the interval");
        b.success();
        assert!(!b.is_open());
        assert!(b.should_try() && b.should_try(), "closed: every call");
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_ends_once_the_store_answered_for_settle_without_a_failure() {
        let b = Breaker::new(Duration::from_millis(500));
        let why = super::super::Fallback::Unreachable;
        b.failure(why, &"refused");
        assert!(b.in_outage());
        // A healthy shard answers, the failed one fails again: one outage.
        for _ in 0..5 {
            tokio::time::advance(Duration::from_millis(500)).await;
            b.success();
            assert!(!b.is_open() && b.in_outage());
            b.failure(why, &"refused");
        }
        assert_eq!(b.episodes.load(Ordering::Relaxed), 1);
        tokio::time::advance(SETTLE - Duration::from_millis(1)).await;
        b.success();
        assert!(b.in_outage(), "not yet {SETTLE:?} without a failure");
        tokio::time::advance(Duration::from_millis(1)).await;
        b.success();
        assert!(!b.in_outage());
        b.failure(why, &"refused");
        assert_eq!(b.episodes.load(Ordering::Relaxed), 2, "a new outage");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_background_probe_keeps_the_outage_without_opening_the_breaker() {
        let b = Breaker::new(Duration::from_millis(500));
        b.still_failing();
        assert!(!b.in_outage(), "no outage, nothing to keep");
        b.failure(super::super::Fallback::Unreachable, &"refused");
        b.success();
        assert!(!b.is_open() && b.in_outage());
        tokio::time::advance(SETTLE).await;
        b.still_failing();
        assert!(!b.is_open(), "the other shards are still asked");
        b.success();
        assert!(b.in_outage(), "the probe failed less than SETTLE ago");
        tokio::time::advance(SETTLE).await;
        b.success();
        assert!(!b.in_outage());
    }
}
