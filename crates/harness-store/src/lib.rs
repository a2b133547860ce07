//! Durable backends for Harness.
//!
//! This crate holds the storage that outlives a process: agent state as JSON files with
//! compare-and-set versions ([`FileStateStore`], the default), and a [`KvStore`] (binary values
//! under string keys with compare-and-set versions) in memory, on Redis or on PostgreSQL. It knows nothing of
//! the workspace layout: the filesystem on top of a [`KvStore`] lives in `harness-fs`.
//!
//! It also holds the session leases for one host: [`LocalLease`] (one process) and
//! [`FileLease`] (several processes sharing a lock directory).
//!
//! The default build needs no services. The Redis stores and lease are behind the cargo
//! feature `redis`, the PostgreSQL store and lease behind `postgres`. Every state store keeps
//! a bounded cache of the last state it saw per session, so a warm load reads only what
//! changed (see ARCHITECTURE.md, "Shared state, leases and fencing").
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
//! Where to start: [`FileStateStore`], [`KvStore`], then [`InMemoryKv`] or `RedisKv`; for
//! several replicas `RedisStateStore` + `RedisLease` or `PostgresStateStore` +
//! `PostgresLease`.

pub mod control;
#[cfg(any(feature = "redis", feature = "postgres"))]
mod expiring_lease;
mod fence;
mod file_state;
mod kv;
mod lease;
mod memory_kv;
#[cfg(feature = "postgres")]
mod pg_kv;
#[cfg(feature = "postgres")]
mod pg_lease;
#[cfg(feature = "postgres")]
mod pg_schema;
#[cfg(feature = "postgres")]
mod pg_state;
#[cfg(feature = "redis")]
mod redis_kv;
#[cfg(feature = "redis")]
mod redis_lease;
#[cfg(feature = "redis")]
mod redis_state;
mod state_cache;

pub use fence::{DEFAULT_LEASE_TTL, LeaseKeyOf, default_lease_key};
pub use file_state::{FileStateStore, StateLayout};
pub use kv::{KvEntry, KvFence, KvItem, KvPage, KvStore, MAX_KEY_LEN, StoreError, validate_key};
pub use lease::{DEFAULT_SWEEP_INTERVAL, FileLease, LocalLease};
pub use memory_kv::InMemoryKv;
#[cfg(feature = "postgres")]
pub use pg_kv::PostgresKv;
#[cfg(feature = "postgres")]
pub use pg_lease::PostgresLease;
#[cfg(feature = "postgres")]
pub use pg_schema::{PostgresBackend, PostgresConfig, PostgresSetupError, SCHEMA_VERSION};
#[cfg(feature = "postgres")]
pub use pg_state::PostgresStateStore;
#[cfg(feature = "redis")]
pub use redis_kv::{RedisKv, RedisKvConfig};
#[cfg(feature = "redis")]
pub use redis_lease::RedisLease;
#[cfg(feature = "redis")]
pub use redis_state::{REDIS_SCHEMA_VERSION, RedisStateConfig, RedisStateStore};
pub use state_cache::{DEFAULT_CACHE_BYTES, DEFAULT_CACHE_ENTRIES};
