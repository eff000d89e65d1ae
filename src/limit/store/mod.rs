//! Where bucket state lives, behind one trait: `memory` (in-process),
//! `redis` (one server), `redis_cluster` and `redis_sentinel`. Every implementation gives the
//! same answers for the same calls; one behaviour suite runs against all.

pub mod memory;
pub mod redis;

use async_trait::async_trait;

/// Why the store's client could not be made at start (it connects
/// lazily: a store that is down is not this).
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("store.password_env: {0} is not set")]
    PasswordUnset(String),
    /// The key whose value the client refused (`url`, `nodes`, `sentinels`).
    #[error("store.{key}: {source}")]
    Client {
        key: &'static str,
        source: ::redis::RedisError,
    },
}

/// What `rediss://` connections trust and present, as the policy builder
/// loaded and checked it: PEM bytes, which the Redis client decodes itself.
#[derive(Debug, Clone)]
pub struct StoreTlsPem {
    /// `false` accepts any certificate for any name (`tls_verify: false`).
    pub verify: bool,
    /// CA roots trusted instead of the system's (`ca_file`).
    pub roots: Option<Vec<u8>>,
    /// A client certificate chain and its key (`cert_file`, `key_file`).
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

use crate::gcra::{BucketState, Spend};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store unreachable: {0}")]
    Unreachable(String),
    #[error("store call failed: {0}")]
    Failed(String),
    #[error("store call timed out")]
    TimedOut,
    /// `store.durability: replicated`: the write reached the master, but
    /// no replica acknowledged it in time, so it may not survive a failover.
    #[error("no replica acknowledged the write in time")]
    Unconfirmed,
}

#[async_trait]
pub trait Store: Send + Sync {
    /// Checks and spends `cost` from every bucket, all-or-nothing, in one call.
    async fn spend(&self, spends: &[Spend], cost: u64) -> Result<Vec<BucketState>, StoreError>;

    /// Takes a slot lease if fewer than `slots` are held: `(taken, held)`.
    async fn acquire(
        &self,
        key: &str,
        id: &str,
        slots: u64,
        lease_us: u64,
    ) -> Result<(bool, u64), StoreError>;

    /// Extends a lease; `false` when it is gone (expired or released).
    async fn renew(&self, key: &str, id: &str, lease_us: u64) -> Result<bool, StoreError>;

    /// Removes a lease; idempotent.
    async fn release(&self, key: &str, id: &str) -> Result<(), StoreError>;

    /// Deletes buckets, so each reads as full again (the admin API's reset).
    async fn forget(&self, keys: &[String]) -> Result<(), StoreError>;

    /// A cheap call that proves the store can decide again (background
    /// probe while decisions fall back), on the shard of `near` (a key
    /// whose call failed) when there are shards. `renew`: a failure also
    /// drops the shared connection, so the next call makes it afresh.
    async fn probe(&self, near: Option<&str>, renew: bool) -> Result<(), StoreError>;
}
