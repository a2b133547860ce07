//! [`Lease`]: at most one consolidator per namespace.
//!
//! [`LocalLease`] serializes consolidators inside one process. A multi-replica deployment
//! plugs in a lease backed by a shared store (e.g. Redis `SET NX PX` with fencing) through
//! [`Memory::with_lease`](crate::Memory::with_lease).

use async_trait::async_trait;
use harness_core::BoxError;
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Why a lease could not be checked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// The lease backend failed (network, store). The consolidation is skipped this time.
    #[error("lease backend failed")]
    Backend(#[source] BoxError),
}

/// Proof of holding a lease. Dropping it releases the lease.
pub struct LeaseGuard {
    _held: Box<dyn Any + Send + Sync>,
}

impl LeaseGuard {
    /// Wraps whatever keeps the lease held; dropping that value must release it.
    pub fn new(held: impl Any + Send + Sync) -> Self {
        Self { _held: Box::new(held) }
    }
}

impl std::fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LeaseGuard")
    }
}

/// Grants exclusive, non-blocking leases by name.
#[async_trait]
pub trait Lease: Send + Sync + 'static {
    /// The lease `name`, or `None` when someone else holds it.
    ///
    /// # Errors
    /// [`LeaseError`] when the backend cannot be asked.
    async fn try_acquire(&self, name: &str) -> Result<Option<LeaseGuard>, LeaseError>;
}

/// An in-process lease: one `tokio` mutex per name.
#[derive(Debug, Default)]
pub struct LocalLease {
    slots: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

#[async_trait]
impl Lease for LocalLease {
    async fn try_acquire(&self, name: &str) -> Result<Option<LeaseGuard>, LeaseError> {
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            // Forget slots nobody holds, so the map does not grow with every namespace ever seen.
            slots.retain(|_, slot| Arc::strong_count(slot) > 1);
            Arc::clone(slots.entry(name.to_owned()).or_default())
        };
        Ok(slot.try_lock_owned().ok().map(LeaseGuard::new))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn second_holder_is_refused_until_release() {
        let lease = LocalLease::default();
        let first = lease.try_acquire("ns").await.ok().flatten();
        assert!(first.is_some());
        assert!(lease.try_acquire("ns").await.ok().flatten().is_none());
        assert!(lease.try_acquire("other").await.ok().flatten().is_some());
        drop(first);
        assert!(lease.try_acquire("ns").await.ok().flatten().is_some());
    }
}
