//! Durable backends for Harness.
//!
//! This crate holds the storage that outlives a process: agent state as JSON files with
//! compare-and-set versions ([`FileStateStore`], the default), and a [`KvStore`] (binary values
//! under string keys with compare-and-set versions) in memory or on Redis. It knows nothing of
//! the workspace layout: the filesystem on top of a [`KvStore`] lives in `harness-fs`.
//!
//! It also holds the session leases for one host: [`LocalLease`] (one process) and
//! [`FileLease`] (several processes sharing a lock directory).
//!
//! The default build needs no services. The Redis store is behind the cargo feature `redis`.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! use harness_store::{InMemoryKv, KvStore};
//! let kv = InMemoryKv::default();
//! let version = kv.put("a/1", &[0, 255], None).await?;
//! let item = kv.get("a/1").await?.expect("just written");
//! assert_eq!((item.value, item.version), (vec![0, 255], version));
//! assert_eq!(kv.list("a/", None, 100).await?.entries.len(), 1);
//! # Ok::<_, harness_store::StoreError>(()) }).unwrap();
//! ```
//!
//! Where to start: [`FileStateStore`], [`KvStore`], then [`InMemoryKv`] or `RedisKv`.

mod file_state;
mod kv;
mod lease;
mod memory_kv;
#[cfg(feature = "redis")]
mod redis_kv;

pub use file_state::{FileStateStore, StateLayout};
pub use kv::{KvEntry, KvItem, KvPage, KvStore, MAX_KEY_LEN, StoreError, validate_key};
pub use lease::{DEFAULT_SWEEP_INTERVAL, FileLease, LocalLease};
pub use memory_kv::InMemoryKv;
#[cfg(feature = "redis")]
pub use redis_kv::{RedisKv, RedisKvConfig};
