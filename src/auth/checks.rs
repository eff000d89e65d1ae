//! The queue of slow credential checks (bcrypt): at most two a CPU run at
//! once, first come first served, and each client address holds at most
//! one place, running or waiting. An address's second check while its
//! first is queued is refused at once instead of queueing, so however many
//! requests each address sends, a check waits behind at most one check of
//! each other address. Knows nothing of credentials, responses or
//! metrics; the check itself runs on the caller's blocking thread.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The queue: the checks that may run at once, and the addresses holding
/// a place (at most one each, so never more than the addresses connected).
pub struct CheckQueue {
    running: Arc<Semaphore>,
    holders: Arc<Mutex<HashSet<IpAddr>>>,
}

/// An address's one place in the queue, given back when dropped, wherever
/// the check ends (its blocking thread, or a request that gave up).
pub struct Place {
    addr: IpAddr,
    holders: Arc<Mutex<HashSet<IpAddr>>>,
}

/// A place whose check may run now; both are given back when dropped.
pub struct Turn {
    _permit: OwnedSemaphorePermit,
    _place: Place,
}

impl Default for CheckQueue {
    /// Two checks a CPU at once: the blocking threads stay free for
    /// everything else, and a CPU is never idle while checks wait.
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        CheckQueue::new(2 * cpus)
    }
}

impl CheckQueue {
    /// A queue running at most `running` checks at once.
    pub fn new(running: usize) -> Self {
        CheckQueue {
            running: Arc::new(Semaphore::new(running)),
            holders: Default::default(),
        }
    }

    /// A place for `addr`, or None while it holds one already.
    pub fn enter(&self, addr: IpAddr) -> Option<Place> {
        let mut holders = self.holders.lock().unwrap_or_else(|e| e.into_inner());
        holders.insert(addr).then(|| Place {
            addr,
            holders: self.holders.clone(),
        })
    }

    /// Waits for `place`'s turn, behind every place entered before it.
    pub async fn turn(&self, place: Place) -> Turn {
        let permit = self.running.clone().acquire_owned().await;
        Turn {
            // The semaphore lives as long as the queue and is never closed.
            _permit: permit.expect("the check queue's semaphore is never closed"),
            _place: place,
        }
    }

    /// Addresses holding a place now (running or waiting).
    pub fn held(&self) -> usize {
        self.holders.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut holders = self.holders.lock().unwrap_or_else(|e| e.into_inner());
        holders.remove(&self.addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[test]
    fn an_address_holds_one_place_until_it_is_given_back() {
        let queue = CheckQueue::new(1);
        let first = queue.enter(ip(2)).expect("a place");
        assert!(queue.enter(ip(2)).is_none(), "a second place");
        let other = queue.enter(ip(3)).expect("another address's place");
        assert_eq!(queue.held(), 2);
        drop(first);
        assert!(queue.enter(ip(2)).is_some(), "given back on drop");
        drop(other);
        assert_eq!(queue.held(), 0);
    }

    #[tokio::test]
    async fn a_turn_keeps_its_place_and_the_next_waits_for_it() {
        use futures_util::FutureExt;
        let queue = CheckQueue::new(1);
        let running = queue.turn(queue.enter(ip(2)).unwrap()).await;
        assert!(queue.enter(ip(2)).is_none(), "its turn holds the place");
        let mut waiting = Box::pin(queue.turn(queue.enter(ip(3)).unwrap()));
        assert!((&mut waiting).now_or_never().is_none(), "one runs at once");
        drop(running);
        let next = waiting.await;
        assert_eq!(queue.held(), 1);
        assert!(queue.enter(ip(2)).is_some(), "given back with its turn");
        drop(next);
        assert_eq!(queue.held(), 0);
    }
}
