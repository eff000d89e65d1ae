//! The one circuit breaker, for every service a request may wait on: the
//! external auth services (`auth::external`) and the shared store
//! (`limit::fallback`). Closed, every call goes. After `failures` failures
//! in a row it opens for `open_for`: no calls; then one call probes while
//! the others still fail at once, and another probe goes only once
//! `probe_gap` has passed since the last (a probe whose client hung up
//! neither answers nor fails). An answer closes it; a failure while open
//! opens it again for `open_for`. It keeps no clock and logs nothing: the
//! caller passes the time and says what a change means.

use std::time::{Duration, Instant};

/// When a breaker opens and how often it probes.
#[derive(Debug, Clone, Copy)]
pub struct Trip {
    /// Failures in a row that open it (at least 1).
    pub failures: u32,
    pub open_for: Duration,
    pub probe_gap: Duration,
}

#[derive(Debug, Default)]
pub struct Breaker {
    failures: u32,
    open_until: Option<Instant>,
    probing: Option<Instant>,
}

impl Breaker {
    pub fn is_open(&self) -> bool {
        self.open_until.is_some()
    }

    /// Whether a call may go now.
    pub fn admit(&mut self, now: Instant, trip: &Trip) -> bool {
        let probe_due = self.probing.is_none_or(|p| now >= p + trip.probe_gap);
        match self.open_until {
            None => true,
            Some(until) if now >= until && probe_due => {
                self.probing = Some(now);
                true
            }
            Some(_) => false,
        }
    }

    /// A call failed. True when this failure opened a closed breaker.
    pub fn failed(&mut self, now: Instant, trip: &Trip) -> bool {
        self.failures = self.failures.saturating_add(1);
        let was_open = self.is_open();
        if was_open || self.failures >= trip.failures.max(1) {
            self.open_until = Some(now + trip.open_for);
            self.probing = None;
        }
        !was_open && self.is_open()
    }

    /// A call was answered: the service is up. True when it was open.
    pub fn answered(&mut self) -> bool {
        let was_open = self.is_open();
        *self = Breaker::default();
        was_open
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_millis(100);

    fn trip(failures: u32) -> Trip {
        Trip {
            failures,
            open_for: Duration::from_secs(5),
            probe_gap: 2 * T,
        }
    }

    #[test]
    fn a_probe_whose_client_left_is_replaced_after_the_probe_gap() {
        let trip = trip(1);
        let mut b = Breaker::default();
        let t = Instant::now();
        assert!(b.failed(t, &trip), "the first failure opens it");
        let due = t + Duration::from_secs(5);
        assert!(b.admit(due, &trip), "the probe");
        // Its request was dropped: neither answered nor failed.
        assert!(!b.admit(due + T, &trip));
        assert!(b.admit(due + 2 * T, &trip), "another probe");
    }

    #[test]
    fn it_opens_after_failures_in_a_row_and_probes_once_an_interval() {
        let trip = trip(2);
        let mut b = Breaker::default();
        let t = Instant::now();
        assert!(b.admit(t, &trip));
        assert!(!b.failed(t, &trip));
        assert!(b.admit(t, &trip), "one failure is not enough");
        assert!(b.failed(t, &trip), "the second opens it");
        assert!(!b.admit(t + Duration::from_secs(4), &trip), "open");
        let later = t + Duration::from_secs(5);
        assert!(b.admit(later, &trip), "one probe after the interval");
        assert!(!b.admit(later, &trip), "only one");
        assert!(!b.failed(later, &trip), "it was open already");
        let again = later + Duration::from_secs(4);
        assert!(!b.admit(again, &trip), "open again");
        assert!(b.admit(later + Duration::from_secs(5), &trip));
        assert!(b.answered(), "it was open");
        assert!(!b.answered(), "and is closed");
        let now = later + Duration::from_secs(5);
        assert!(b.admit(now, &trip) && b.admit(now, &trip));
    }
}
