//! [`LocalLease`]: the in-process session lease, first come first served.

use async_trait::async_trait;
use harness_core::{CancellationToken, LeaseError, LeaseGuard, LeaseKey, LeaseRelease, SessionLease};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Serialises the turns of each session inside one process, in arrival order.
///
/// One fair async mutex per key. A key's entry lives only while someone holds or waits for
/// it: a waiter that gives up (its call was cancelled, or its future dropped) leaves nothing
/// behind, and the last one out removes the entry, so idle keys cost no memory.
/// Holders cannot go stale, so guards carry no fencing token and are never lost.
#[derive(Debug, Clone, Default)]
pub struct LocalLease {
    slots: Arc<Mutex<HashMap<LeaseKey, Slot>>>,
}

#[derive(Debug)]
struct Slot {
    gate: Arc<tokio::sync::Mutex<()>>,
    /// Holders plus waiters; the entry is removed when it drops to zero.
    users: usize,
}

/// One holder's or waiter's share of a slot; leaving (release, cancellation, drop) gives it
/// back and removes the slot when nobody else is in it.
struct SlotRef {
    slots: Arc<Mutex<HashMap<LeaseKey, Slot>>>,
    key: LeaseKey,
}

impl Drop for SlotRef {
    fn drop(&mut self) {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = slots.get_mut(&self.key) {
            slot.users -= 1;
            if slot.users == 0 {
                slots.remove(&self.key);
            }
        }
    }
}

/// A held local lease: the mutex guard, then the slot share (fields drop in this order, so
/// the slot is never removed while its mutex is still held).
pub(crate) struct LocalHold {
    _guard: tokio::sync::OwnedMutexGuard<()>,
    _slot: SlotRef,
}

#[async_trait]
impl LeaseRelease for LocalHold {
    async fn release(self: Box<Self>) {}

    fn release_now(self: Box<Self>) {}
}

impl LocalLease {
    /// Keys currently held or waited for (idle keys are not kept).
    pub fn active_keys(&self) -> usize {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Waits for `key` in arrival order; see [`SessionLease::acquire`].
    pub(crate) async fn hold(&self, key: &LeaseKey, cancel: &CancellationToken) -> Result<LocalHold, LeaseError> {
        if cancel.is_cancelled() {
            return Err(LeaseError::Cancelled);
        }
        let (gate, slot) = {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            let slot = slots.entry(key.clone()).or_insert_with(|| Slot {
                gate: Arc::new(tokio::sync::Mutex::new(())),
                users: 0,
            });
            slot.users += 1;
            (
                Arc::clone(&slot.gate),
                SlotRef {
                    slots: Arc::clone(&self.slots),
                    key: key.clone(),
                },
            )
        };
        // The tokio mutex queues waiters FIFO; dropping the `lock_owned` future on
        // cancellation takes the waiter out of the queue, and `slot` is given back on return.
        tokio::select! {
            biased;
            () = cancel.cancelled() => Err(LeaseError::Cancelled),
            guard = gate.lock_owned() => Ok(LocalHold { _guard: guard, _slot: slot }),
        }
    }
}

#[async_trait]
impl SessionLease for LocalLease {
    async fn acquire(&self, key: &LeaseKey, cancel: &CancellationToken) -> Result<LeaseGuard, LeaseError> {
        let hold = self.hold(key, cancel).await?;
        Ok(LeaseGuard::new(None, CancellationToken::new(), Box::new(hold)))
    }
}
