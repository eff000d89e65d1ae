//! Fair share of a saturated pool (SPEC §12): each pool with `fair_share`
//! lets at most its limit of requests be in flight from this process; the
//! others wait in their flow's queue (FIFO within a flow), and a freed
//! permit goes to the next flow in deficit round robin, weighted by plan.
//! Every step is O(1) in the number of flows (amortised: what hang-ups
//! leave behind is swept when it outnumbers what lives); a client that
//! hangs up leaves its queue's count at once (its waiter is dropped).
//!
//! The queues outlive reloads (`FairShares` lives in `Shared`): a new
//! policy changes a pool's settings, and requests already waiting keep
//! their place under the new limit.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// lets its waiting requests through; a pool gone from the policy (or
    /// renamed) drains at its last limit, its series removed.
    pub fn apply(&self, config: &Config) {
        let old = self.pools.load();
        let mut pools = HashMap::new();
        for (name, up) in &config.upstreams {
            let queue = old.get(name).cloned();
            let Some(settings) = &up.fair_share else {
                if let Some(q) = queue {
                    q.configure(None);
                    q.retire();
                }
                continue;
            };
            let queue = queue.unwrap_or_else(|| Arc::new(Queue::new(name)));
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
                queue.retire();
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
    /// Flows are keyed by a keyed hash of their name: a fixed size however
    /// long a header value is, and not to be collided from outside.
    hasher: RandomState,
    /// Gone from the policy: drains, and has no series any more.
    retired: AtomicBool,
    state: Mutex<State>,
}

struct State {
    settings: Option<FairShare>,
    /// The permits handed out now (`in_flight` ≤ `limit` but after a cut).
    in_flight: usize,
    limit: usize,
    /// Requests waiting, over every flow (hang-ups not counted).
    queued: usize,
    flows: HashMap<u64, Flow>,
    /// Flows with waiting requests, in service order, as (flow, its
    /// generation): a flow is here once with its own generation; entries
    /// of flows gone (emptied by hang-ups) are skipped when they come
    /// round, or swept when they outnumber the live ones.
    ring: VecDeque<(u64, u64)>,
    next_generation: u64,
    gradient: Option<Gradient>,
}

struct Flow {
    /// Its requests in order; those whose client hung up (their receiver
    /// closed) stay until they come round or the queue is compacted.
    waiting: VecDeque<oneshot::Sender<()>>,
    /// How many of `waiting` hung up.
    gone: usize,
    /// Requests it may still be served before the ring moves on.
    deficit: u32,
    weight: u32,
    generation: u64,
}

impl Flow {
    fn live(&self) -> usize {
        self.waiting.len() - self.gone
    }
}

impl Queue {
    fn new(pool: &str) -> Self {
        Queue {
            pool: pool.to_string(),
            hasher: RandomState::new(),
            retired: AtomicBool::new(false),
            state: Mutex::new(State {
                settings: None,
                in_flight: 0,
                limit: usize::MAX,
                queued: 0,
                flows: HashMap::new(),
                ring: VecDeque::new(),
                next_generation: 0,
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
        admit_waiting(&mut s);
        self.publish(&s);
    }

    /// Out of the policy: the requests it holds and queues keep its last
    /// limit until they end; its series go now.
    fn retire(&self) {
        self.retired.store(true, Ordering::Relaxed);
        let (m, pool) = (&*METRICS, [self.pool.as_str()]);
        for gauge in [
            &m.fair_share_in_flight,
            &m.fair_share_limit,
            &m.fair_share_queued,
        ] {
            let _ = gauge.remove_label_values(&pool);
        }
        let _ = m.fair_share_wait.remove_label_values(&pool);
        for why in Refused::ALL {
            let _ = m
                .fair_share_refused
                .remove_label_values(&[&self.pool, why.as_str()]);
        }
    }

    /// A permit for a request of `flow` (weighed `weight`), at once while
    /// the pool is under its limit and no one waits, else after its turn.
    /// Dropping the future (the client hung up) leaves the queue.
    pub async fn acquire(self: &Arc<Self>, flow: &str, weight: u32) -> Result<Permit, Refused> {
        let flow = self.hasher.hash_one(flow);
        let (rx, timeout) = {
            let mut s = self.lock();
            let Some(settings) = &s.settings else {
                return Ok(Permit::untracked());
            };
            let (per_flow, timeout) = (settings.per_tenant, settings.timeout);
            if s.queued == 0 && s.in_flight < s.limit {
                s.in_flight += 1;
                self.publish(&s);
                return Ok(Permit::new(self.clone()));
            }
            if s.flows.get(&flow).map_or(0, Flow::live) >= per_flow {
                drop(s);
                self.refused(Refused::Full);
                return Err(Refused::Full);
            }
            let rx = s.enqueue(flow, weight);
            self.publish(&s);
            (rx, timeout)
        };
        let since = Instant::now();
        let mut waiter = Waiter {
            queue: self,
            flow,
            rx,
            done: false,
        };
        let granted = match tokio::time::timeout(timeout, &mut waiter.rx).await {
            Ok(Ok(())) => true,
            // Timed out, or granted at the deadline: then the permit is ours.
            _ => !waiter.leave(),
        };
        waiter.done = true;
        if !self.retired.load(Ordering::Relaxed) {
            let waited = since.elapsed().as_secs_f64();
            METRICS
                .fair_share_wait
                .with_label_values(&[&self.pool])
                .observe(waited);
        }
        if granted {
            return Ok(Permit::new(self.clone()));
        }
        self.refused(Refused::Timeout);
        Err(Refused::Timeout)
    }

    fn refused(&self, why: Refused) {
        if self.retired.load(Ordering::Relaxed) {
            return;
        }
        METRICS
            .fair_share_refused
            .with_label_values(&[self.pool.as_str(), why.as_str()])
            .inc();
    }

    /// A permit comes back (with the time its upstream took to answer,
    /// when that says how loaded the pool is).
    fn release(&self, sample: Option<(Instant, Duration)>) {
        let mut s = self.lock();
        let in_flight = s.in_flight;
        if let (Some(g), Some((granted, rtt))) = (s.gradient.as_mut(), sample) {
            if let Some(limit) = g.sample(granted, rtt, in_flight, Instant::now()) {
                s.limit = limit;
            }
        }
        hand_on(&mut s);
        self.publish(&s);
    }

    fn publish(&self, s: &State) {
        // A pool without `fair_share` (or out of the policy) has no series.
        if s.settings.is_none() || self.retired.load(Ordering::Relaxed) {
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

/// A permit is back: it goes to the next waiting request while the pool is
/// at or under its limit; else it is returned.
fn hand_on(s: &mut State) {
    if s.in_flight <= s.limit {
        if let Some(tx) = s.next() {
            let _ = tx.send(());
            admit_waiting(s);
            return;
        }
    }
    s.in_flight = s.in_flight.saturating_sub(1);
    admit_waiting(s);
}

/// Hands out permits while the pool is under its limit and someone waits
/// (after a raised limit, or a permit returned over a cut one).
fn admit_waiting(s: &mut State) {
    while s.in_flight < s.limit {
        let Some(tx) = s.next() else { break };
        s.in_flight += 1;
        let _ = tx.send(());
    }
}

impl State {
    fn enqueue(&mut self, key: u64, weight: u32) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        if !self.flows.contains_key(&key) {
            let generation = self.next_generation;
            self.next_generation += 1;
            self.ring.push_back((key, generation));
            let flow = Flow {
                waiting: VecDeque::new(),
                gone: 0,
                deficit: 0,
                weight: 1,
                generation,
            };
            self.flows.insert(key, flow);
            // Entries of flows gone outnumber the live ones: sweep them.
            if self.ring.len() > 2 * self.flows.len() + 64 {
                let flows = &self.flows;
                self.ring
                    .retain(|(k, g)| flows.get(k).is_some_and(|f| f.generation == *g));
            }
        }
        let flow = self.flows.get_mut(&key).expect("inserted above");
        flow.weight = weight.max(1);
        flow.waiting.push_back(tx);
        self.queued += 1;
        rx
    }

    /// The next waiting request in weighted round-robin order: the flow
    /// at the ring's head is served up to its weight, then goes to the
    /// back; a flow without waiting requests leaves the ring.
    fn next(&mut self) -> Option<oneshot::Sender<()>> {
        loop {
            let (key, generation) = *self.ring.front()?;
            let flow = match self.flows.get_mut(&key) {
                Some(f) if f.generation == generation => f,
                _ => {
                    self.ring.pop_front();
                    continue;
                }
            };
            let mut tx = None;
            while let Some(t) = flow.waiting.pop_front() {
                if !t.is_closed() {
                    tx = Some(t);
                    break;
                }
                flow.gone -= 1;
            }
            let Some(tx) = tx else {
                self.ring.pop_front();
                self.flows.remove(&key);
                continue;
            };
            self.queued -= 1;
            if flow.deficit == 0 {
                flow.deficit = flow.weight;
            }
            flow.deficit -= 1;
            if flow.live() == 0 {
                self.ring.pop_front();
                self.flows.remove(&key);
            } else if flow.deficit == 0 {
                self.ring.pop_front();
                self.ring.push_back((key, generation));
            }
            return Some(tx);
        }
    }

    /// A waiting request of `key` whose client hung up: out of the count
    /// at once; a flow left without live requests goes (its ring entry
    /// with it, when it comes round), and a queue mostly of hang-ups is
    /// compacted.
    fn gone(&mut self, key: u64) {
        self.queued -= 1;
        let Some(flow) = self.flows.get_mut(&key) else {
            return;
        };
        flow.gone += 1;
        if flow.live() == 0 {
            self.flows.remove(&key);
        } else if flow.gone > flow.live() + 16 {
            flow.waiting.retain(|t| !t.is_closed());
            flow.gone = 0;
        }
    }
}

/// A request waiting in its flow's queue; leaves it when dropped.
struct Waiter<'q> {
    queue: &'q Arc<Queue>,
    flow: u64,
    rx: oneshot::Receiver<()>,
    /// Its permit was taken (or its refusal counted).
    done: bool,
}

impl Waiter<'_> {
    /// Leaves the queue; false when a permit was handed to it first.
    fn leave(&mut self) -> bool {
        let mut s = self.queue.lock();
        // Under the lock no permit can be handed to it meanwhile.
        if self.rx.try_recv().is_ok() {
            return false;
        }
        self.rx.close();
        s.gone(self.flow);
        self.queue.publish(&s);
        true
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
    /// How long the upstream took to answer, when that says how loaded
    /// the pool is (an answer under 500; not a WebSocket's life): the
    /// adaptive limit's sample.
    pub sample: Option<Duration>,
}

impl Permit {
    fn new(queue: Arc<Queue>) -> Self {
        Permit {
            queue: Some(queue),
            granted: Instant::now(),
            sample: None,
        }
    }

    fn untracked() -> Self {
        Permit {
            queue: None,
            granted: Instant::now(),
            sample: None,
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(q) = self.queue.take() {
            q.release(self.sample.map(|rtt| (self.granted, rtt)));
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
