//! Tokens already verified, so that a token known to be valid skips the
//! signature check, and stays usable while its address is refused further
//! verifications (`failures`). Bounded by entries; an entry lives until the
//! token's `exp`, never longer, and only for the key set it was verified
//! with. Failures are never cached.

use std::collections::HashMap;
use std::sync::Mutex;

use super::Identity;

/// Entries and token bytes at once; when either is reached, expired
/// entries are dropped, then the cache starts over (a cold cache costs
/// verifications, never correctness).
const MAX_ENTRIES: usize = 10_000;
const MAX_BYTES: usize = 8 << 20;

struct Entry {
    identity: Identity,
    exp: u64,
    keys: u64,
}

#[derive(Default)]
pub struct Verified {
    map: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    // Keyed by the whole token: equality, not a hash, decides a hit.
    by_token: HashMap<Box<str>, Entry>,
    /// Bytes of the tokens held.
    bytes: usize,
}

impl Entries {
    fn remove(&mut self, token: &str) {
        if self.by_token.remove(token).is_some() {
            self.bytes -= token.len();
        }
    }
}

impl Verified {
    /// The identity of `token` if it was verified with key set `keys` and
    /// `now` (Unix seconds) is before its `exp`.
    pub fn get(&self, token: &str, now: u64, keys: u64) -> Option<Identity> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let entry = map.by_token.get(token)?;
        if entry.exp > now && entry.keys == keys {
            return Some(entry.identity.clone());
        }
        map.remove(token);
        None
    }

    pub fn insert(&self, token: &str, identity: Identity, exp: u64, now: u64, keys: u64) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(token);
        let full =
            |m: &Entries| m.by_token.len() >= MAX_ENTRIES || m.bytes + token.len() > MAX_BYTES;
        if full(&map) {
            map.by_token.retain(|_, e| e.exp > now && e.keys == keys);
            map.bytes = map.by_token.keys().map(|t| t.len()).sum();
            if full(&map) {
                map.by_token.clear();
                map.bytes = 0;
            }
        }
        map.bytes += token.len();
        map.by_token.insert(
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
            tenant: crate::auth::TenantId::new("acme").unwrap(),
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
        assert!(v.map.lock().unwrap().by_token.len() <= MAX_ENTRIES);
        let big = "x".repeat(MAX_BYTES / 4);
        for i in 0..10 {
            v.insert(&format!("{big}{i}"), id(), 100, 50, 1);
        }
        let map = v.map.lock().unwrap();
        assert!(map.bytes <= MAX_BYTES);
        assert_eq!(
            map.bytes,
            map.by_token.keys().map(|t| t.len()).sum::<usize>()
        );
    }
}
