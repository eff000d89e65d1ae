//! Concurrency slot leases (uploads). A `Lease` is a guard: while it lives a
//! task renews it every lease/3; it is released when the exchange ends, on
//! every path, and the store's expiry is the backstop when a process dies.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::store::Store;
use crate::config::Concurrency;
use crate::metrics::METRICS;

/// Lease id -> (the store holding it, its slot-set key).
type LeaseMap = HashMap<String, (Arc<dyn Store>, String)>;

/// Why a lease ended: the `reason` of `fairgate_slots_released_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseEnd {
    Complete,
    Error,
    ClientAbort,
    /// The store no longer had it at a renewal: the slot may have been reissued.
    ExpiredRenewal,
}

impl LeaseEnd {
    pub const ALL: [LeaseEnd; 4] = [
        LeaseEnd::Complete,
        LeaseEnd::Error,
        LeaseEnd::ClientAbort,
        LeaseEnd::ExpiredRenewal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LeaseEnd::Complete => "complete",
            LeaseEnd::Error => "error",
            LeaseEnd::ClientAbort => "client_abort",
            LeaseEnd::ExpiredRenewal => "expired_renewal",
        }
    }
}

/// Every lease this process holds, so shutdown can release them all.
#[derive(Default)]
pub struct Held {
    leases: Mutex<LeaseMap>,
}

impl Held {
    fn insert(&self, id: &str, store: Arc<dyn Store>, key: &str) {
        self.lock().insert(id.to_string(), (store, key.to_string()));
    }

    fn remove(&self, id: &str) {
        self.lock().remove(id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LeaseMap> {
        self.leases.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Releases every lease still held, all at once, within `timeout`;
    /// called once, at shutdown.
    pub async fn release_all(&self, timeout: Duration) -> usize {
        let leases: Vec<_> = self.lock().drain().collect();
        let count = leases.len();
        let releases = leases
            .iter()
            .map(|(id, (store, key))| store.release(key, id));
        let _ = tokio::time::timeout(timeout, futures_util::future::join_all(releases)).await;
        count
    }
}

pub struct Lease {
    pub policy: String,
    key: String,
    id: String,
    store: Arc<dyn Store>,
    held: Arc<Held>,
    lost: Arc<AtomicBool>,
    renewer: tokio::task::JoinHandle<()>,
    timeout: Duration,
    released: bool,
}

impl Lease {
    /// Starts renewing a lease just acquired in `store`.
    pub fn start(
        concurrency: &Concurrency,
        key: String,
        id: String,
        store: Arc<dyn Store>,
        held: Arc<Held>,
        timeout: Duration,
    ) -> Lease {
        let (policy, lease, slots) = (
            concurrency.name.as_str(),
            concurrency.lease,
            concurrency.slots.get(),
        );
        held.insert(&id, store.clone(), &key);
        METRICS.slots_acquired.with_label_values(&[policy]).inc();
        METRICS.slots_held.with_label_values(&[policy]).inc();
        let lost = Arc::new(AtomicBool::new(false));
        let renewer = {
            let (store, key, id, lost) = (store.clone(), key.clone(), id.clone(), lost.clone());
            let policy = policy.to_string();
            let lease_us = lease.as_micros() as u64;
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(lease / 3);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    match tokio::time::timeout(timeout, store.renew(&key, &id, lease_us)).await {
                        Ok(Ok(true)) => {}
                        Ok(Ok(false)) => {
                            // Gone (e.g. it expired during a store outage):
                            // take a slot again if one is free, else stop.
                            let again = store.acquire(&key, &id, slots, lease_us);
                            if let Ok(Ok((true, _))) = tokio::time::timeout(timeout, again).await {
                                continue;
                            }
                            lost.store(true, Ordering::Release);
                            tracing::warn!(policy = %policy, "slots.lease_lost");
                            return;
                        }
                        // A store hiccup: try again next tick; the lease
                        // outlives two missed renewals.
                        _ => {}
                    }
                }
            })
        };
        Lease {
            policy: policy.to_string(),
            key,
            id,
            store,
            held,
            lost,
            renewer,
            timeout,
            released: false,
        }
    }

    /// The store no longer has this lease: the slot may have been reissued.
    pub fn lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// Why the exchange holding this lease ended: `client_gone` is `Some`
    /// when it failed (`true` when the client went away); `status` is the
    /// response's, 0 when none was sent.
    pub fn end_reason(&self, client_gone: Option<bool>, status: u16) -> LeaseEnd {
        match client_gone {
            _ if self.lost() => LeaseEnd::ExpiredRenewal,
            Some(true) => LeaseEnd::ClientAbort,
            Some(false) => LeaseEnd::Error,
            None if status >= 500 || status == 0 => LeaseEnd::Error,
            None => LeaseEnd::Complete,
        }
    }

    /// Ends the lease, counting why.
    pub async fn release(mut self, reason: LeaseEnd) {
        self.finish(reason);
        let _ = tokio::time::timeout(self.timeout, self.store.release(&self.key, &self.id)).await;
    }

    fn finish(&mut self, reason: LeaseEnd) {
        self.released = true;
        self.renewer.abort();
        self.held.remove(&self.id);
        METRICS.slots_held.with_label_values(&[&self.policy]).dec();
        METRICS
            .slots_released
            .with_label_values(&[&self.policy, reason.as_str()])
            .inc();
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        // Not released by the logging phase (it always runs, so this is a
        // backstop): release in the background.
        self.finish(LeaseEnd::Error);
        let (store, key, id, timeout) = (
            self.store.clone(),
            self.key.clone(),
            self.id.clone(),
            self.timeout,
        );
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = tokio::time::timeout(timeout, store.release(&key, &id)).await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::config::Scope;
    use crate::limit::store::memory::MemoryStore;

    const LEASE: Duration = Duration::from_secs(3);
    const LEASE_US: u64 = 3_000_000;

    /// A store on a hand-moved clock in which lease `a` holds the only slot of `k`.
    async fn held_slot() -> (Arc<ManualClock>, Arc<dyn Store>) {
        let clock = Arc::new(ManualClock::default());
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new(clock.clone()));
        assert!(store.acquire("k", "a", 1, LEASE_US).await.unwrap().0);
        (clock, store)
    }

    fn policy() -> Concurrency {
        Concurrency {
            name: "uploads".into(),
            scope: Scope::Tenant,
            slots: std::num::NonZeroU64::MIN,
            lease: LEASE,
            status: 429,
        }
    }

    /// Moves the store's clock and tokio's paused clock together, one
    /// second at a time, letting the renewal task run after each step.
    async fn pass(clock: &ManualClock, seconds: u64) {
        for _ in 0..seconds {
            clock.advance_us(1_000_000);
            tokio::time::advance(Duration::from_secs(1)).await;
            settle().await;
        }
    }

    /// Lets spawned tasks (the renewer) run until they wait again.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_is_renewed_every_third_and_lost_when_its_slot_is_taken() {
        let (clock, store) = held_slot().await;
        let held = Arc::new(Held::default());
        let lease = Lease::start(
            &policy(),
            "k".into(),
            "a".into(),
            store.clone(),
            held.clone(),
            Duration::from_secs(1),
        );
        settle().await;
        // Ten seconds of store time, more than three leases: renewed every
        // second, the slot is still held and nobody else gets it.
        pass(&clock, 10).await;
        assert!(!store.acquire("k", "b", 1, LEASE_US).await.unwrap().0);
        assert!(!lease.lost());
        // The member vanishes (it expired during a store outage) and another
        // request takes the only slot: the next renewal finds it lost.
        store.release("k", "a").await.unwrap();
        assert!(store.acquire("k", "b", 1, LEASE_US).await.unwrap().0);
        pass(&clock, 1).await;
        assert!(lease.lost());
        lease.release(LeaseEnd::ExpiredRenewal).await;
        assert_eq!(held.release_all(Duration::from_secs(1)).await, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_vanished_lease_takes_a_free_slot_again() {
        let (clock, store) = held_slot().await;
        let lease = Lease::start(
            &policy(),
            "k".into(),
            "a".into(),
            store.clone(),
            Arc::default(),
            Duration::from_secs(1),
        );
        settle().await;
        store.release("k", "a").await.unwrap();
        pass(&clock, 1).await;
        assert!(!lease.lost(), "re-acquired");
        assert!(!store.acquire("k", "b", 1, LEASE_US).await.unwrap().0);
        lease.release(LeaseEnd::Complete).await;
        assert!(store.acquire("k", "b", 1, LEASE_US).await.unwrap().0);
    }
}
