//! Tokens already verified, so that a token known to be valid skips the
//! signature check, and stays usable while its address is refused further
//! verifications (`failures`). Bounded by entries; an entry lives until the
//! token's `exp`, never longer, and only for the key set it was verified
//! with. Failures are never cached.

use std::collections::HashMap;
use std::sync::Mutex;

use super::Identity;

/// Entries at once; when full, expired ones are dropped, then the cache
/// starts over (a cold cache costs verifications, never correctness).
const MAX_ENTRIES: usize = 10_000;

struct Entry {
    identity: Identity,
    exp: u64,
    keys: u64,
}

#[derive(Default)]
pub struct Verified {
    // Keyed by the whole token: equality, not a hash, decides a hit.
    map: Mutex<HashMap<Box<str>, Entry>>,
}

impl Verified {
    /// The identity of `token` if it was verified with key set `keys` and
    /// `now` (Unix seconds) is before its `exp`.
    pub fn get(&self, token: &str, now: u64, keys: u64) -> Option<Identity> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let entry = map.get(token)?;
        if entry.exp > now && entry.keys == keys {
            return Some(entry.identity.clone());
        }
        map.remove(token);
        None
    }

    pub fn insert(&self, token: &str, identity: Identity, exp: u64, now: u64, keys: u64) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= MAX_ENTRIES {
            map.retain(|_, e| e.exp > now && e.keys == keys);
            if map.len() >= MAX_ENTRIES {
                map.clear();
            }
        }
        map.insert(
            token.into(),
            Entry {
                identity,
                exp,
                keys,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> Identity {
        Identity {
            tenant: "acme".into(),
            user: None,
            plan: "free".into(),
            token: None,
        }
    }

    #[test]
    fn an_entry_ends_at_exp_and_with_its_key_set() {
        let v = Verified::default();
        v.insert("t", id(), 100, 50, 1);
        assert_eq!(v.get("t", 99, 1), Some(id()));
        assert_eq!(v.get("t", 99, 2), None);
        v.insert("t", id(), 100, 50, 1);
        assert_eq!(v.get("t", 100, 1), None);
        assert_eq!(v.get("t", 10, 1), None, "removed once expired");
        assert_eq!(v.get("u", 10, 1), None);
    }

    #[test]
    fn bounded() {
        let v = Verified::default();
        for i in 0..(MAX_ENTRIES + 10) {
            v.insert(&format!("t{i}"), id(), 100, 50, 1);
        }
        assert!(v.map.lock().unwrap().len() <= MAX_ENTRIES);
    }
}
