//! [`StateCache`]: the last state each store loaded or saved, keyed by session and version,
//! so a warm process reads only what changed since.
//!
//! Every store keeps one. An entry holds the state, its version and a backend-specific
//! cursor (for files: the identity and length of the snapshot and the log; for Redis and
//! PostgreSQL: the rewrite generation and the message count). A load first probes the
//! backend cheaply (two `stat`s, or one small query); when the probe matches the cursor the
//! cached state is returned without parsing anything, when only messages were appended it
//! reads just those, and anything else is a full load.
//!
//! The cache is bounded by entries and by an estimate of the bytes it holds; the least
//! recently used entry goes first.

use harness_core::{AgentState, Version};
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};

/// Default bound on the number of cached sessions.
pub const DEFAULT_CACHE_ENTRIES: usize = 256;
/// Default bound on the estimated bytes of cached states (16 MiB of serialized state; the
/// parsed messages take a small multiple of that in memory).
pub const DEFAULT_CACHE_BYTES: u64 = 16 * 1024 * 1024;

/// One cached session.
#[derive(Debug, Clone)]
pub(crate) struct CacheEntry<C> {
    pub(crate) state: AgentState,
    pub(crate) version: Version,
    pub(crate) cursor: C,
    /// Estimated size in bytes (of the serialized state).
    pub(crate) bytes: u64,
}

struct Slot<C> {
    entry: CacheEntry<C>,
    used: u64,
}

struct Inner<K, C> {
    slots: HashMap<K, Slot<C>>,
    bytes: u64,
    tick: u64,
}

/// A bounded least-recently-used cache of session states.
pub(crate) struct StateCache<K, C> {
    inner: Mutex<Inner<K, C>>,
    max_entries: usize,
    max_bytes: u64,
}

impl<K, C> std::fmt::Debug for StateCache<K, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateCache")
            .field("max_entries", &self.max_entries)
            .field("max_bytes", &self.max_bytes)
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq + Clone, C: Clone> StateCache<K, C> {
    /// A cache of at most `max_entries` sessions and about `max_bytes` bytes. A bound of 0
    /// disables caching.
    pub(crate) fn new(max_entries: usize, max_bytes: u64) -> Self {
        Self {
            inner: Mutex::new(Inner {
                slots: HashMap::new(),
                bytes: 0,
                tick: 0,
            }),
            max_entries,
            max_bytes,
        }
    }

    /// The cached entry of `key` (a copy: messages are shared `Arc`s, so this is cheap).
    pub(crate) fn get(&self, key: &K) -> Option<CacheEntry<C>> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.tick += 1;
        let tick = inner.tick;
        let slot = inner.slots.get_mut(key)?;
        slot.used = tick;
        Some(slot.entry.clone())
    }

    /// Remembers `entry` for `key`, evicting the least recently used entries beyond the bounds.
    pub(crate) fn put(&self, key: K, entry: CacheEntry<C>) {
        if self.max_entries == 0 || entry.bytes > self.max_bytes {
            self.remove(&key);
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.tick += 1;
        let used = inner.tick;
        let bytes = entry.bytes;
        if let Some(old) = inner.slots.insert(key, Slot { entry, used }) {
            inner.bytes -= old.entry.bytes;
        }
        inner.bytes += bytes;
        while inner.slots.len() > self.max_entries || inner.bytes > self.max_bytes {
            // Bounded by `max_entries`, so a linear scan is cheap next to the IO it saves.
            let Some(oldest) = inner
                .slots
                .iter()
                .min_by_key(|(_, slot)| slot.used)
                .map(|(key, _)| key.clone())
            else {
                break;
            };
            if let Some(slot) = inner.slots.remove(&oldest) {
                inner.bytes -= slot.entry.bytes;
            }
        }
    }

    /// The cached entry a save of `state` at `expected` can append to: the one saved at
    /// `expected` whose messages `state` keeps, in order, as its prefix. `None` means the save
    /// must write the whole state.
    #[cfg(any(feature = "redis", feature = "postgres"))]
    pub(crate) fn append_base(&self, key: &K, state: &AgentState, expected: Version) -> Option<CacheEntry<C>> {
        if expected == 0 {
            return None;
        }
        self.get(key).filter(|cached| {
            let old = &cached.state.messages;
            cached.version == expected
                && state.messages.len() >= old.len()
                && old
                    .iter()
                    .zip(&state.messages)
                    .all(|(a, b)| std::sync::Arc::ptr_eq(a, b) || a == b)
        })
    }

    /// Forgets `key`.
    pub(crate) fn remove(&self, key: &K) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = inner.slots.remove(key) {
            inner.bytes -= slot.entry.bytes;
        }
    }

    /// How many sessions are cached.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(bytes: u64) -> CacheEntry<()> {
        CacheEntry {
            state: AgentState::default(),
            version: 1,
            cursor: (),
            bytes,
        }
    }

    #[test]
    fn evicts_the_least_recently_used_beyond_the_bounds() {
        let cache = StateCache::new(2, 100);
        cache.put("a", entry(10));
        cache.put("b", entry(10));
        assert!(cache.get(&"a").is_some());
        cache.put("c", entry(10));
        assert!(cache.get(&"b").is_none(), "b was least recently used");
        assert!(cache.get(&"a").is_some() && cache.get(&"c").is_some());
        cache.put("d", entry(95));
        assert_eq!(cache.len(), 1, "the byte bound evicts the rest");
        cache.put("e", entry(101));
        assert!(cache.get(&"e").is_none(), "an entry beyond the byte bound is not kept");
        let off = StateCache::new(0, 100);
        off.put("a", entry(1));
        assert!(off.get(&"a").is_none());
    }
}
