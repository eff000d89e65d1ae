//! Where bucket state lives, behind one trait: `memory` (in-process),
//! `redis` (one server) and `redis_cluster`. Every implementation gives the
//! same answers for the same calls; one behaviour suite runs against all.

pub mod memory;
pub mod redis;

use async_trait::async_trait;

use super::bucket::{BucketState, Spend};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store unreachable: {0}")]
    Unreachable(String),
    #[error("store call failed: {0}")]
    Failed(String),
    #[error("store call timed out")]
    TimedOut,
}

impl StoreError {
    /// Bounded label for logs and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            StoreError::Unreachable(_) => "unreachable",
            StoreError::Failed(_) => "failed",
            StoreError::TimedOut => "timed_out",
        }
    }
}

#[async_trait]
pub trait Store: Send + Sync {
    /// Checks and spends `cost` from every bucket, all-or-nothing, in one call.
    async fn spend(&self, spends: &[Spend], cost: u64) -> Result<Vec<BucketState>, StoreError>;

    /// `memory`, `redis` or `redis_cluster`, for metrics.
    fn kind(&self) -> &'static str;
}
