//! What happens when the shared store fails: a breaker that stops waiting on
//! a store that is down, and one log line per outage, never one per request.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::metrics::METRICS;

/// While open, decisions skip the store; one call per `probe_every` is let
/// through to find out whether it is back.
pub struct Breaker {
    open: AtomicBool,
    next_probe: Mutex<Instant>,
    probe_every: Duration,
    episodes: AtomicU64,
}

impl Breaker {
    pub fn new(probe_every: Duration) -> Self {
        METRICS.store_up.set(1);
        Breaker {
            open: AtomicBool::new(false),
            next_probe: Mutex::new(Instant::now()),
            probe_every,
            episodes: AtomicU64::new(0),
        }
    }

    /// Whether this decision should ask the store.
    pub fn should_try(&self) -> bool {
        if !self.open.load(Ordering::Acquire) {
            return true;
        }
        let mut next = self.next_probe.lock().unwrap_or_else(|e| e.into_inner());
        if Instant::now() >= *next {
            *next = Instant::now() + self.probe_every;
            return true;
        }
        false
    }

    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    pub fn failure(&self, reason: super::Fallback, error: &dyn std::fmt::Display) {
        *self.next_probe.lock().unwrap_or_else(|e| e.into_inner()) =
            Instant::now() + self.probe_every;
        if !self.open.swap(true, Ordering::AcqRel) {
            let episode = self.episodes.fetch_add(1, Ordering::Relaxed) + 1;
            METRICS.store_up.set(0);
            tracing::warn!(reason = reason.as_str(), error = %error, episode, "rate_limits.fallback");
        }
    }

    pub fn success(&self) {
        if self.open.swap(false, Ordering::AcqRel) {
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
}
