//! The in-process store: the same GCRA as the Lua script, with an injected
//! clock. Memory stays bounded: a bucket whose TAT has passed is full, which
//! is exactly what an absent entry means, so sweeping it never refills a
//! bucket early.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::{Store, StoreError};
use crate::gcra::{decide, BucketState, Spend};

pub use crate::clock::{Clock, ManualClock, SystemClock};

pub struct MemoryStore {
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    tats: HashMap<String, u64>,
    /// Slot sets: lease id -> expiry.
    slots: HashMap<String, HashMap<String, u64>>,
    /// Size after the last sweep; the next sweep runs when the map doubles.
    swept_len: usize,
}

impl MemoryStore {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        MemoryStore {
            clock,
            state: Mutex::new(State::default()),
        }
    }

    /// Entries currently held (full buckets may linger until the next sweep).
    pub fn len(&self) -> usize {
        self.lock().tats.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Spends synchronously; also what the fallback path calls.
    pub fn spend_now(&self, spends: &[Spend], cost: u64) -> Vec<BucketState> {
        let now = self.clock.now_us();
        let mut state = self.lock();
        let tats: Vec<Option<u64>> = spends
            .iter()
            .map(|s| state.tats.get(&s.key).copied())
            .collect();
        let (states, writes) = decide(now, spends, &tats, cost);
        if let Some(writes) = writes {
            for (spend, write) in spends.iter().zip(writes) {
                if let Some(tat) = write {
                    state.tats.insert(spend.key.clone(), tat);
                }
            }
        }
        if state.tats.len() >= (state.swept_len * 2).max(1024) {
            state.tats.retain(|_, tat| *tat > now);
            state.swept_len = state.tats.len();
        }
        states
    }
}

impl MemoryStore {
    pub fn acquire_now(&self, key: &str, id: &str, slots: u64, lease_us: u64) -> (bool, u64) {
        let now = self.clock.now_us();
        let mut state = self.lock();
        let set = state.slots.entry(key.to_string()).or_default();
        set.retain(|_, expiry| *expiry > now);
        let held = set.len() as u64;
        if held >= slots {
            return (false, held);
        }
        set.insert(id.to_string(), now + lease_us);
        (true, held + 1)
    }

    pub fn renew_now(&self, key: &str, id: &str, lease_us: u64) -> bool {
        let now = self.clock.now_us();
        let mut state = self.lock();
        let Some(set) = state.slots.get_mut(key) else {
            return false;
        };
        match set.get_mut(id) {
            Some(expiry) if *expiry > now => {
                *expiry = now + lease_us;
                true
            }
            _ => {
                set.remove(id);
                false
            }
        }
    }

    pub fn release_now(&self, key: &str, id: &str) {
        let mut state = self.lock();
        if let Some(set) = state.slots.get_mut(key) {
            set.remove(id);
            if set.is_empty() {
                state.slots.remove(key);
            }
        }
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn spend(&self, spends: &[Spend], cost: u64) -> Result<Vec<BucketState>, StoreError> {
        Ok(self.spend_now(spends, cost))
    }

    async fn acquire(
        &self,
        key: &str,
        id: &str,
        slots: u64,
        lease_us: u64,
    ) -> Result<(bool, u64), StoreError> {
        Ok(self.acquire_now(key, id, slots, lease_us))
    }

    async fn renew(&self, key: &str, id: &str, lease_us: u64) -> Result<bool, StoreError> {
        Ok(self.renew_now(key, id, lease_us))
    }

    async fn release(&self, key: &str, id: &str) -> Result<(), StoreError> {
        self.release_now(key, id);
        Ok(())
    }

    async fn forget(&self, keys: &[String]) -> Result<(), StoreError> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for key in keys {
            state.tats.remove(key);
        }
        Ok(())
    }

    async fn probe(&self, _near: Option<&str>, _renew: bool) -> Result<(), StoreError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spend(key: &str) -> Spend {
        Spend {
            key: key.into(),
            capacity: 2,
            interval_us: 1_000_000,
            shadow: false,
        }
    }

    #[test]
    fn sweeping_never_refills_early() {
        let clock = Arc::new(ManualClock::default());
        let store = MemoryStore::new(clock.clone());
        let hot = spend("hot");
        assert!(store.spend_now(std::slice::from_ref(&hot), 2)[0].allowed);
        // Enough idle buckets to force sweeps while `hot` is still empty.
        for i in 0..5000 {
            store.spend_now(&[spend(&format!("idle{i}"))], 1);
        }
        assert!(
            !store.spend_now(std::slice::from_ref(&hot), 1)[0].allowed,
            "hot was refilled by a sweep"
        );
        // Once every bucket is full again, a sweep drops them all.
        clock.advance_us(3_000_000);
        for i in 0..4000 {
            store.spend_now(&[spend(&format!("new{i}"))], 1);
        }
        assert!(
            store.len() <= 4001,
            "idle full buckets were not evicted: {}",
            store.len()
        );
        assert!(store.spend_now(&[hot], 1)[0].allowed);
    }
}
