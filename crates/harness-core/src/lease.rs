//! [`SessionLease`]: who may run a turn of a session now.
//!
//! A turn holds its session's lease from before the state is loaded until after it is saved.
//! Implementations range from an in-process FIFO (one process) through lock files (several
//! processes on one host) to leases in a shared store (several replicas). A lease in a shared
//! store can expire while its holder is paused; such leases hand out a [`FencingToken`] that
//! grows with every acquisition, and every shared write of the turn carries it, so a store can
//! refuse the writes of a holder that is no longer the newest.

use crate::model::BoxError;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::fmt;
use tokio_util::sync::CancellationToken;

/// A number that grows with every acquisition of one lease key. A write that carries a token
/// older than the newest one issued for its key comes from a holder whose lease expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FencingToken(u64);

impl FencingToken {
    /// The token `value`.
    pub const fn new(value: u64) -> Self {
        Self(value)
    }

    /// The token's value.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Names one session for a [`SessionLease`]: its parts (already validated ids), escaped and
/// joined with `/`, so distinct part lists never give the same key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LeaseKey(String);

impl LeaseKey {
    /// The key for `parts`. `%` and `/` inside a part are escaped (`%25`, `%2F`); an empty
    /// part is kept as an empty segment, so `["a", ""]` and `["a"]` differ.
    pub fn new(parts: &[&str]) -> Self {
        let mut key = String::new();
        for (i, part) in parts.iter().enumerate() {
            if i > 0 {
                key.push('/');
            }
            for ch in part.chars() {
                match ch {
                    '%' => key.push_str("%25"),
                    '/' => key.push_str("%2F"),
                    other => key.push(other),
                }
            }
        }
        if parts.is_empty() {
            key.push('%');
        }
        Self(key)
    }

    /// The key as a string (escaped parts joined with `/`).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LeaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a lease could not be acquired.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// The call was cancelled while it waited.
    #[error("cancelled while waiting for the session lease")]
    Cancelled,
    /// The backend (lock file, Redis, PostgreSQL) failed.
    #[error("session lease backend failed")]
    Backend(#[source] BoxError),
}

/// Releases a held lease. Implemented by each [`SessionLease`] backend.
#[async_trait]
pub trait LeaseRelease: Send + Sync + 'static {
    /// Gives the lease up in an orderly way (called at most once, by [`LeaseGuard::release`]).
    async fn release(self: Box<Self>);

    /// Gives the lease up without waiting (called from `Drop` when `release` was not called);
    /// a backend that needs IO spawns it or lets the lease expire.
    fn release_now(self: Box<Self>);
}

/// A held lease: the turn runs while it is alive. Dropping it releases the lease.
#[must_use = "the lease is released when the guard is dropped"]
pub struct LeaseGuard {
    token: Option<FencingToken>,
    lost: CancellationToken,
    release: Option<Box<dyn LeaseRelease>>,
}

impl fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseGuard")
            .field("token", &self.token)
            .field("lost", &self.lost.is_cancelled())
            .finish()
    }
}

impl LeaseGuard {
    /// A guard. `token` is `None` for leases whose holder cannot go stale (in-process, OS file
    /// locks); `lost` is cancelled by the backend when the lease could not be kept.
    pub fn new(token: Option<FencingToken>, lost: CancellationToken, release: Box<dyn LeaseRelease>) -> Self {
        Self {
            token,
            lost,
            release: Some(release),
        }
    }

    /// The fencing token every shared write of the turn carries, when the lease has one.
    pub fn token(&self) -> Option<FencingToken> {
        self.token
    }

    /// Cancelled when the lease was lost (it could not be renewed, or another holder took it
    /// after it expired): the turn must stop, and its writes will be refused.
    pub fn lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Releases the lease and waits until the backend has done so.
    pub async fn release(mut self) {
        if let Some(release) = self.release.take() {
            release.release().await;
        }
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            release.release_now();
        }
    }
}

/// Who may run a turn of a session now. At most one [`LeaseGuard`] per key is alive at a time
/// (for backends with expiry: per key and lease period, with fencing for the rest).
#[async_trait]
pub trait SessionLease: Send + Sync + 'static {
    /// Waits until the session's lease is free, then holds it. Waiting ends with
    /// [`LeaseError::Cancelled`] when `cancel` fires.
    ///
    /// # Errors
    /// [`LeaseError::Cancelled`], or [`LeaseError::Backend`] when the backend failed.
    async fn acquire(&self, key: &LeaseKey, cancel: &CancellationToken) -> Result<LeaseGuard, LeaseError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_keys_do_not_collide() {
        let keys = [
            LeaseKey::new(&["a", "b/c"]),
            LeaseKey::new(&["a/b", "c"]),
            LeaseKey::new(&["a", "b", "c"]),
            LeaseKey::new(&["a", "b%2Fc"]),
            LeaseKey::new(&["a", ""]),
            LeaseKey::new(&["a"]),
            LeaseKey::new(&[]),
            LeaseKey::new(&[""]),
            LeaseKey::new(&["v1.2"]),
            LeaseKey::new(&["v1"]),
        ];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }
}
