//! [`InMemoryKv`]: a [`KvStore`] in process memory, for tests and single-process use.

use crate::kv::{KvEntry, KvItem, KvPage, KvStore, StoreError, clamp_limit, now_ms, validate_key};
use async_trait::async_trait;
use harness_core::Version;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, PoisonError};

#[derive(Debug)]
struct Item {
    value: Arc<[u8]>,
    version: Version,
    modified_ms: i64,
}

#[derive(Debug, Default)]
struct Inner {
    items: BTreeMap<String, Item>,
    last_version: Version,
}

impl Inner {
    fn next_version(&mut self) -> Version {
        self.last_version += 1;
        self.last_version
    }
}

/// A [`KvStore`] held in memory. Cheap to clone: clones share the data. Lost when the process
/// exits.
#[derive(Debug, Clone, Default)]
pub struct InMemoryKv {
    inner: Arc<Mutex<Inner>>,
}

impl InMemoryKv {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl KvStore for InMemoryKv {
    fn describe(&self) -> String {
        "memory".to_owned()
    }

    async fn get(&self, key: &str) -> Result<Option<KvItem>, StoreError> {
        validate_key(key)?;
        // Clone the Arc under the lock and copy the bytes outside it.
        let found = self
            .lock()
            .items
            .get(key)
            .map(|item| (Arc::clone(&item.value), item.version, item.modified_ms));
        Ok(found.map(|(value, version, modified_ms)| KvItem {
            value: value.to_vec(),
            version,
            modified_ms,
        }))
    }

    async fn head(&self, key: &str) -> Result<Option<KvEntry>, StoreError> {
        validate_key(key)?;
        Ok(self.lock().items.get(key).map(|item| KvEntry {
            key: key.to_owned(),
            version: item.version,
            size: item.value.len() as u64,
            modified_ms: item.modified_ms,
        }))
    }

    async fn put(&self, key: &str, value: &[u8], expected: Option<Version>) -> Result<Version, StoreError> {
        validate_key(key)?;
        let value: Arc<[u8]> = Arc::from(value);
        let mut inner = self.lock();
        if let Some(expected) = expected {
            let found = inner.items.get(key).map(|item| item.version);
            if found.unwrap_or(0) != expected {
                return Err(StoreError::Conflict {
                    key: key.to_owned(),
                    expected,
                    found,
                });
            }
        }
        let version = inner.next_version();
        inner.items.insert(
            key.to_owned(),
            Item {
                value,
                version,
                modified_ms: now_ms(),
            },
        );
        Ok(version)
    }

    async fn append(&self, key: &str, bytes: &[u8]) -> Result<Version, StoreError> {
        validate_key(key)?;
        let mut inner = self.lock();
        let version = inner.next_version();
        let value: Arc<[u8]> = match inner.items.get(key) {
            Some(item) => {
                let mut joined = Vec::with_capacity(item.value.len() + bytes.len());
                joined.extend_from_slice(&item.value);
                joined.extend_from_slice(bytes);
                joined.into()
            }
            None => Arc::from(bytes),
        };
        inner.items.insert(
            key.to_owned(),
            Item {
                value,
                version,
                modified_ms: now_ms(),
            },
        );
        Ok(version)
    }

    async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        validate_key(key)?;
        Ok(self.lock().items.remove(key).is_some())
    }

    async fn list(&self, prefix: &str, after: Option<&str>, limit: usize) -> Result<KvPage, StoreError> {
        let limit = clamp_limit(limit);
        let inner = self.lock();
        let start = match after {
            Some(after) if after >= prefix => Bound::Excluded(after.to_owned()),
            _ => Bound::Included(prefix.to_owned()),
        };
        let mut entries = Vec::new();
        let mut more = false;
        for (key, item) in inner.items.range((start, Bound::Unbounded)) {
            if !key.starts_with(prefix) {
                break;
            }
            if entries.len() == limit {
                more = true;
                break;
            }
            entries.push(KvEntry {
                key: key.clone(),
                version: item.version,
                size: item.value.len() as u64,
                modified_ms: item.modified_ms,
            });
        }
        let next_after = if more {
            entries.last().map(|entry| entry.key.clone())
        } else {
            None
        };
        Ok(KvPage { entries, next_after })
    }
}
