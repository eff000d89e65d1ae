//! The adaptive in-flight limit of a `fair_share` pool (`max_in_flight:
//! adaptive`), a gradient controller as Envoy's adaptive concurrency
//! filter and Netflix's concurrency-limits have it:
//!
//! - the pool's unloaded latency (`min_rtt`) is measured at the lowest
//!   limit (`min`): at the start and every `PROBE_EVERY`, the limit drops
//!   to `min` until `PROBE_SAMPLES` requests granted since have ended, and
//!   their p90 is the new `min_rtt` (the percentile the windows are read
//!   at: a pool of fast and slow requests compares like with like);
//! - between probes, every `WINDOW` the p90 latency of the requests that
//!   ended (`sample_rtt`) gives the gradient `(1 + BUFFER) · min_rtt /
//!   sample_rtt`, within [0.5, 2]; the limit becomes `limit · gradient +
//!   √(limit · gradient)`, within `[min, max]`. A window ends with the
//!   first answer after its 100 ms (no timer). Latency near `min_rtt` lets it grow;
//!   latency rising with load (requests queued inside the upstream)
//!   brings it back.
//!
//! A pool used far below its limit does not raise it. A sample is the
//! upstream's time to answer (from the first attempt to the answer's
//! head, under 500), never a client's upload or download time.

use std::time::{Duration, Instant};

/// How long a sampling window lasts.
const WINDOW: Duration = Duration::from_millis(100);
/// Latency within this share over `min_rtt` counts as unloaded.
const BUFFER: f64 = 0.25;
/// Requests whose p90 latency at the lowest limit is `min_rtt`.
const PROBE_SAMPLES: usize = 25;
/// How often `min_rtt` is measured again.
const PROBE_EVERY: Duration = Duration::from_secs(30);
/// Latencies kept per window (the first ones of a busy window).
const MAX_SAMPLES: usize = 1024;

pub struct Gradient {
    min: usize,
    max: usize,
    limit: f64,
    min_rtt: Option<Duration>,
    /// While `Some`: measuring `min_rtt` since then, at the limit `min`;
    /// the limit to go back to after.
    probe: Option<(Instant, f64)>,
    next_probe: Instant,
    window_start: Instant,
    samples: Vec<Duration>,
}

impl Gradient {
    pub fn new(min: usize, max: usize) -> Self {
        let now = Instant::now();
        Gradient {
            min,
            max,
            limit: min as f64,
            min_rtt: None,
            probe: Some((now, min as f64)),
            next_probe: now + PROBE_EVERY,
            window_start: now,
            samples: Vec::new(),
        }
    }

    /// A request granted at `granted` ended after `rtt`, with `in_flight`
    /// permits out; returns the new limit when it changes.
    pub fn sample(
        &mut self,
        granted: Instant,
        rtt: Duration,
        in_flight: usize,
        now: Instant,
    ) -> Option<usize> {
        if let Some((since, back_to)) = self.probe {
            // Only requests sent at the lowest limit say what it costs.
            if granted < since {
                return None;
            }
            self.samples.push(rtt);
            if self.samples.len() < PROBE_SAMPLES {
                return None;
            }
            self.min_rtt = Some(p90(&mut self.samples));
            self.samples.clear();
            self.probe = None;
            self.limit = back_to;
            self.window_start = now;
            self.next_probe = now + PROBE_EVERY;
            return Some(self.current());
        }
        if self.samples.len() < MAX_SAMPLES {
            self.samples.push(rtt);
        }
        if now.duration_since(self.window_start) < WINDOW {
            return None;
        }
        let before = self.current();
        self.adjust(in_flight);
        self.samples.clear();
        self.window_start = now;
        if now >= self.next_probe {
            self.probe = Some((now, self.limit));
            return Some(self.min);
        }
        (self.current() != before).then(|| self.current())
    }

    /// One window's step.
    fn adjust(&mut self, in_flight: usize) {
        let (Some(min_rtt), false) = (self.min_rtt, self.samples.is_empty()) else {
            return;
        };
        let sample_rtt = p90(&mut self.samples).as_secs_f64().max(1e-6);
        let gradient = ((1.0 + BUFFER) * min_rtt.as_secs_f64() / sample_rtt).clamp(0.5, 2.0);
        // A pool used far below its limit says nothing about more.
        if gradient >= 1.0 && (in_flight as f64) * 2.0 < self.limit {
            return;
        }
        let next = self.limit * gradient;
        let next = next + next.sqrt();
        self.limit = next.clamp(self.min as f64, self.max as f64);
    }

    /// The limit in force: `min` while probing.
    pub fn current(&self) -> usize {
        match self.probe {
            Some(_) => self.min,
            None => self.limit.round() as usize,
        }
    }
}

/// The 90th percentile of non-empty `samples` (sorted in place).
fn p90(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples[(samples.len() * 9 / 10).min(samples.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upstream that serves 16 at once in 20 ms and queues the rest:
    /// its latency at `n` in flight.
    fn latency(n: usize) -> Duration {
        Duration::from_micros(20_000 * (n.max(16) as u64) / 16)
    }

    #[test]
    fn settles_near_the_upstreams_capacity_and_stays_in_bounds() {
        let mut g = Gradient::new(8, 64);
        let start = Instant::now();
        let mut now = start;
        let mut limit = g.current();
        // Ten simulated seconds of a saturated pool, a request ending
        // every millisecond, each sent `latency` before.
        for _ in 0..10_000 {
            now += Duration::from_millis(1);
            let rtt = latency(limit);
            if let Some(l) = g.sample(now - rtt, rtt, limit, now) {
                limit = l;
            }
            assert!((8..=64).contains(&limit), "limit {limit}");
        }
        assert!((16..=32).contains(&limit), "settled at {limit}");
        assert_eq!(g.min_rtt, Some(Duration::from_millis(20)));
    }

    /// Finding 2 of the review: fast and slow requests mixed (70% 2 ms,
    /// 30% 50 ms, whatever the load) once pinned the limit at `min`,
    /// the probe's median against the windows' p90.
    #[test]
    fn a_pool_of_fast_and_slow_requests_is_not_pinned_at_min() {
        let mut g = Gradient::new(2, 50);
        let mut now = Instant::now();
        for i in 0..5_000u32 {
            now += Duration::from_millis(1);
            let rtt = Duration::from_millis(if i % 10 < 7 { 2 } else { 50 });
            let l = g.current();
            g.sample(now, rtt, l, now);
        }
        assert_eq!(g.current(), 50);
    }

    #[test]
    fn an_idle_pool_does_not_grow_its_limit() {
        let mut g = Gradient::new(4, 512);
        let mut now = Instant::now();
        for _ in 0..5_000 {
            now += Duration::from_millis(1);
            g.sample(now, Duration::from_millis(5), 1, now);
        }
        assert_eq!(g.current(), 4);
    }

    #[test]
    fn latency_rising_brings_the_limit_down() {
        let mut g = Gradient::new(4, 512);
        let mut now = Instant::now();
        for _ in 0..3_000 {
            now += Duration::from_millis(1);
            let l = g.current();
            g.sample(now, Duration::from_millis(10), l, now);
        }
        let high = g.current();
        assert!(high > 100, "grew to {high}");
        for _ in 0..2_000 {
            now += Duration::from_millis(1);
            let l = g.current();
            g.sample(now, Duration::from_millis(200), l, now);
        }
        assert_eq!(g.current(), 4);
    }
}
