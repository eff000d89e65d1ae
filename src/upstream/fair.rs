//! Fair share of a saturated pool (SPEC §12): each pool with `fair_share`
//! lets at most its limit of requests be in flight from this process; the
//! others wait in their flow's queue (FIFO within a flow), and a freed
//! permit goes to the next flow in deficit round robin, weighted by plan.
//! Every step is O(1) in the number of flows; a client that hangs up
//! leaves its queue at once (its waiter is dropped).
//!
//! The queues outlive reloads (`FairShares` lives in `Shared`): a new
//! policy changes a pool's settings, and requests already waiting keep
//! their place under the new limit.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::sync::oneshot;

use super::gradient::Gradient;
use crate::config::{Config, FairLimit, FairShare, FlowBy};
use crate::metrics::METRICS;

/// Every pool's queue, by pool name; replaced whole on a reload.
#[derive(Default)]
pub struct FairShares {
    pools: ArcSwap<HashMap<String, Arc<Queue>>>,
}

impl FairShares {
    /// Puts `config`'s settings in force: a pool keeps its queue (and its
    /// waiting requests) across a change; a pool that loses `fair_share`
    /// lets its waiting requests through.
    pub fn apply(&self, config: &Config) {
        let old = self.pools.load();
        let mut pools = HashMap::new();
        for (name, up) in &config.upstreams {
            let Some(settings) = &up.fair_share else {
                continue;
            };
            let queue = match old.get(name) {
                Some(q) => q.clone(),
                None => Arc::new(Queue::new(name)),
            };
            // Every series at zero, so dashboards and rate() see them.
            METRICS.fair_share_wait.with_label_values(&[name]);
            for why in Refused::ALL {
                let labels = [name.as_str(), why.as_str()];
                METRICS.fair_share_refused.with_label_values(&labels);
            }
            queue.configure(Some(settings.clone()));
            pools.insert(name.clone(), queue);
        }
        for (name, queue) in old.iter() {
            if !pools.contains_key(name) {
                queue.configure(None);
                let m = &*METRICS;
                for gauge in [
                    &m.fair_share_in_flight,
                    &m.fair_share_limit,
                    &m.fair_share_queued,
                ] {
                    let _ = gauge.remove_label_values(&[name]);
                }
            }
        }
        self.pools.store(Arc::new(pools));
    }

    pub fn get(&self, pool: &str) -> Option<Arc<Queue>> {
        self.pools.load().get(pool).cloned()
    }
}

/// Why a request got no permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Its flow's queue was full.
    Full,
    /// It waited `queue.timeout`.
    Timeout,
}

impl Refused {
    pub const ALL: [Refused; 2] = [Refused::Full, Refused::Timeout];

    pub fn as_str(self) -> &'static str {
        match self {
            Refused::Full => "queue_full",
            Refused::Timeout => "queue_timeout",
        }
    }
}

/// One pool's permits and waiting flows.
pub struct Queue {
    pool: String,
    state: Mutex<State>,
}

struct State {
    settings: Option<FairShare>,
    /// The permits handed out now (`in_flight` ≤ `limit` but after a cut).
    in_flight: usize,
    limit: usize,
    /// Requests waiting, over every flow.
    queued: usize,
    flows: HashMap<Arc<str>, Flow>,
    /// Flows with waiting requests, in service order; a flow is here at
    /// most once (`Flow::ringed`), and one emptied by hang-ups leaves when
    /// it comes round.
    ring: VecDeque<Arc<str>>,
    next_id: u64,
    gradient: Option<Gradient>,
}

struct Flow {
    waiting: VecDeque<(u64, oneshot::Sender<()>)>,
    /// Requests it may still be served before the ring moves on.
    deficit: u32,
    weight: u32,
    ringed: bool,
}

impl Queue {
    fn new(pool: &str) -> Self {
        Queue {
            pool: pool.to_string(),
            state: Mutex::new(State {
                settings: None,
                in_flight: 0,
                limit: usize::MAX,
                queued: 0,
                flows: HashMap::new(),
                ring: VecDeque::new(),
                next_id: 0,
                gradient: None,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// New settings (none: no limit): the limit is applied at once, and
    /// requests waiting are let through up to it.
    fn configure(&self, settings: Option<FairShare>) {
        let mut s = self.lock();
        let limit = settings.as_ref().map(|f| f.limit);
        let kept = match (&s.settings, limit) {
            (Some(old), Some(new)) => old.limit == new,
            _ => false,
        };
        if !kept {
            s.gradient = match limit {
                Some(FairLimit::Adaptive { min, max }) => Some(Gradient::new(min, max)),
                _ => None,
            };
            s.limit = match limit {
                Some(FairLimit::Fixed(n)) => n,
                Some(FairLimit::Adaptive { min, .. }) => min,
                None => usize::MAX,
            };
        }
        s.settings = settings;
        self.admit_waiting(&mut s);
        self.publish(&s);
    }

    /// The settings in force, for the caller to key and weigh its request.
    pub fn settings(&self) -> Option<FairShare> {
        self.lock().settings.clone()
    }

    /// A permit for a request of `flow` (weighed `weight`), at once while
    /// the pool is under its limit and no one waits, else after its turn.
    /// Dropping the future (the client hung up) leaves the queue.
    pub async fn acquire(self: &Arc<Self>, flow: &str, weight: u32) -> Result<Permit, Refused> {
        let (id, rx, flow, timeout) = {
            let mut s = self.lock();
            let Some(settings) = &s.settings else {
                return Ok(Permit::untracked());
            };
            let (per_flow, timeout) = (settings.per_tenant, settings.timeout);
            if s.queued == 0 && s.in_flight < s.limit {
                s.in_flight += 1;
                self.publish(&s);
                return Ok(Permit::new(self.clone(), Duration::ZERO));
            }
            let flow: Arc<str> = Arc::from(flow);
            let waiting = s.flows.get(&flow).map_or(0, |f| f.waiting.len());
            if waiting >= per_flow {
                drop(s);
                self.refused(Refused::Full);
                return Err(Refused::Full);
            }
            let (id, rx) = s.enqueue(flow.clone(), weight);
            self.publish(&s);
            (id, rx, flow, timeout)
        };
        let since = Instant::now();
        let mut waiter = Waiter {
            queue: self,
            flow,
            id,
            done: false,
        };
        let granted = match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(())) => true,
            // Timed out, or granted at the deadline: then the permit is ours.
            _ => !waiter.leave(),
        };
        waiter.done = true;
        let waited = since.elapsed();
        METRICS
            .fair_share_wait
            .with_label_values(&[self.pool.as_str()])
            .observe(waited.as_secs_f64());
        if granted {
            return Ok(Permit::new(self.clone(), waited));
        }
        self.refused(Refused::Timeout);
        Err(Refused::Timeout)
    }

    fn refused(&self, why: Refused) {
        METRICS
            .fair_share_refused
            .with_label_values(&[self.pool.as_str(), why.as_str()])
            .inc();
    }

    /// A permit comes back: it goes to the next waiting request while the
    /// pool is at or under its limit; else it is returned.
    fn release(&self, sample: Option<(Instant, Duration)>) {
        let mut s = self.lock();
        let in_flight = s.in_flight;
        if let (Some(g), Some((granted, rtt))) = (s.gradient.as_mut(), sample) {
            if let Some(limit) = g.sample(granted, rtt, in_flight, Instant::now()) {
                s.limit = limit;
            }
        }
        if s.in_flight <= s.limit {
            if let Some(tx) = s.next() {
                // A waiter gone meanwhile finds itself out of the queue
                // and hands the permit on (`Waiter::drop`).
                let _ = tx.send(());
                self.admit_waiting(&mut s);
                self.publish(&s);
                return;
            }
        }
        s.in_flight = s.in_flight.saturating_sub(1);
        self.admit_waiting(&mut s);
        self.publish(&s);
    }

    /// Hands out permits while the pool is under its limit and someone
    /// waits (after a raised limit, or a permit returned over a cut one).
    fn admit_waiting(&self, s: &mut State) {
        while s.in_flight < s.limit {
            let Some(tx) = s.next() else { break };
            s.in_flight += 1;
            let _ = tx.send(());
        }
    }

    fn publish(&self, s: &State) {
        // A pool without `fair_share` any more has no series.
        if s.settings.is_none() {
            return;
        }
        let pool = [self.pool.as_str()];
        let limit = s.limit.min(i64::MAX as usize) as i64;
        METRICS.fair_share_limit.with_label_values(&pool).set(limit);
        let in_flight = s.in_flight as i64;
        METRICS
            .fair_share_in_flight
            .with_label_values(&pool)
            .set(in_flight);
        let queued = s.queued as i64;
        METRICS
            .fair_share_queued
            .with_label_values(&pool)
            .set(queued);
    }

    /// The pool's limit now (for tests and the admin view).
    pub fn limit(&self) -> usize {
        self.lock().limit
    }
}

impl State {
    fn enqueue(&mut self, flow: Arc<str>, weight: u32) -> (u64, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        let id = self.next_id;
        self.next_id += 1;
        let entry = self.flows.entry(flow.clone()).or_insert_with(|| Flow {
            waiting: VecDeque::new(),
            deficit: 0,
            weight,
            ringed: false,
        });
        entry.weight = weight.max(1);
        entry.waiting.push_back((id, tx));
        if !entry.ringed {
            entry.ringed = true;
            self.ring.push_back(flow);
        }
        self.queued += 1;
        (id, rx)
    }

    /// The next waiting request in weighted round-robin order: the flow
    /// at the ring's head is served up to its weight, then goes to the
    /// back; a flow without waiting requests leaves the ring.
    fn next(&mut self) -> Option<oneshot::Sender<()>> {
        loop {
            let key = self.ring.front()?.clone();
            let Some(flow) = self.flows.get_mut(&key) else {
                self.ring.pop_front();
                continue;
            };
            let Some((_, tx)) = flow.waiting.pop_front() else {
                self.ring.pop_front();
                self.flows.remove(&key);
                continue;
            };
            self.queued -= 1;
            if flow.deficit == 0 {
                flow.deficit = flow.weight;
            }
            flow.deficit -= 1;
            if flow.waiting.is_empty() {
                self.ring.pop_front();
                self.flows.remove(&key);
            } else if flow.deficit == 0 {
                self.ring.pop_front();
                self.ring.push_back(key);
            }
            return Some(tx);
        }
    }

    /// Takes a waiting request out of its flow's queue; false when it is
    /// not there (it was given a permit).
    fn remove(&mut self, flow: &str, id: u64) -> bool {
        let Some(f) = self.flows.get_mut(flow) else {
            return false;
        };
        let Some(at) = f.waiting.iter().position(|(i, _)| *i == id) else {
            return false;
        };
        f.waiting.remove(at);
        self.queued -= 1;
        true
    }
}

/// A request waiting in its flow's queue; leaves it when dropped.
struct Waiter<'q> {
    queue: &'q Arc<Queue>,
    flow: Arc<str>,
    id: u64,
    /// Its permit was taken (or its refusal counted).
    done: bool,
}

impl Waiter<'_> {
    /// Leaves the queue; false when a permit was handed to it first.
    fn leave(&self) -> bool {
        let mut s = self.queue.lock();
        let left = s.remove(&self.flow, self.id);
        self.queue.publish(&s);
        left
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        if !self.done && !self.leave() {
            // Given a permit as the client hung up: hand it on.
            self.queue.release(None);
        }
    }
}

/// An in-flight permit of a pool; returned when dropped, however the
/// exchange ended.
pub struct Permit {
    queue: Option<Arc<Queue>>,
    granted: Instant,
    /// How long the request waited for it.
    pub waited: Duration,
    /// Whether its exchange's time says how loaded the pool is (not a
    /// WebSocket's or a stream's lifetime).
    pub sampled: bool,
}

impl Permit {
    fn new(queue: Arc<Queue>, waited: Duration) -> Self {
        Permit {
            queue: Some(queue),
            granted: Instant::now(),
            waited,
            sampled: true,
        }
    }

    fn untracked() -> Self {
        Permit {
            queue: None,
            granted: Instant::now(),
            waited: Duration::ZERO,
            sampled: false,
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(q) = self.queue.take() {
            let sample = self.sampled.then(|| (self.granted, self.granted.elapsed()));
            q.release(sample);
        }
    }
}

/// The flow a request waits in: its tenant (and user), its client
/// address (an IPv6 one by its `ipv6_prefix`, as limits count it), or a
/// header's value; the client address when the request lacks what `by`
/// names.
pub fn flow_key(
    by: &FlowBy,
    identity: Option<&crate::auth::Identity>,
    (client_ip, ipv6_prefix): (Option<std::net::IpAddr>, u8),
    headers: &http::HeaderMap,
) -> String {
    let address = client_ip.map(|a| crate::limit::plan::address_key(a, ipv6_prefix));
    let ip = || format!("ip:{}", address.map(|a| a.to_string()).unwrap_or_default());
    match by {
        FlowBy::Tenant => identity.map_or_else(ip, |i| format!("t:{}", i.tenant.as_str())),
        FlowBy::TenantUser => identity.map_or_else(ip, |i| {
            let user = i.user.as_deref().unwrap_or("");
            format!("u:{}\u{0}{user}", i.tenant.as_str())
        }),
        FlowBy::ClientIp => ip(),
        FlowBy::Header(name) => match headers.get(name) {
            Some(v) => format!("h:{}", String::from_utf8_lossy(v.as_bytes())),
            None => ip(),
        },
    }
}

#[cfg(test)]
#[path = "fair_tests.rs"]
mod tests;
