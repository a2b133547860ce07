//! Sandbox snapshots for Harness: a sandbox's work tree saved and restored across processes
//! and replicas.
//!
//! - **Format** ([`pack`], [`Manifest`]): a streamed tar + zstd archive of the work tree with a
//!   versioned JSON manifest (per-file SHA-256, modes, symlinks, hardlinks within the archive;
//!   never device nodes, FIFOs, sockets or setuid/setgid bits), deltas against a base with
//!   whiteouts, declared excludes ([`DEFAULT_EXCLUDES`]).
//! - **Storage** ([`BlobStore`], [`StoreConfig`]): immutable objects on `object_store` (a
//!   local directory by default, S3-compatible by config), the manifest written with
//!   conditional create; the head pointer ([`Heads`]) in the fenced state store, never an
//!   object overwrite.
//! - **Restore** ([`Snapshots::fetch`], [`unpack`]): archives verified against their hash while
//!   read; the hardened unpacker with limits is meant to run inside the sandbox as its uid
//!   (`harness-sandbox-init unpack`).
//! - **Retention** ([`Snapshots::collect`]): keep N heads and everything they reach; one
//!   process at a time per store ([`Snapshots::collect_all`], under the store's retention lease).
//!
//! ```
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
//! use harness_snapshot::{BlobStore, Heads, Persisted, SnapshotOptions, Snapshots, StoreConfig, WriterFence};
//! use std::sync::Arc;
//! let dir = tempfile::tempdir()?;
//! let tree = dir.path().join("tree");
//! std::fs::create_dir_all(tree.join("src"))?;
//! std::fs::write(tree.join("src/main.rs"), "fn main() {}")?;
//! let objects = StoreConfig::Local { dir: dir.path().join("objects") }.open()?;
//! let heads = Heads::new(Arc::new(harness_store::InMemoryKv::default()));
//! let snapshots = Snapshots::new(BlobStore::new(objects, "snapshots"), heads, dir.path().join("spool"), SnapshotOptions::default());
//! let persisted = snapshots.persist("scope-a", &tree, &WriterFence::token(1)).await?;
//! assert!(matches!(persisted, Persisted::Written { .. }));
//! let restore = snapshots.fetch("scope-a").await?.expect("a head");
//! assert!(restore.view().entries.contains_key("src/main.rs"));
//! # Ok::<_, Box<dyn std::error::Error>>(()) }).unwrap();
//! ```

mod head;
mod manifest;
mod pack;
mod snapshots;
mod store;
mod unpack;

pub use head::{Head, Heads, WriterFence};
pub use manifest::{ArchiveInfo, Comparable, Entry, EntryKind, FORMAT, Manifest, TreeView};
pub use pack::{DEFAULT_EXCLUDES, MODE_MASK, PackOptions, PackRequest, pack};
pub use snapshots::{Layer, Persisted, Restore, Retention, SnapshotOptions, Snapshots, scope_name};
#[cfg(feature = "s3")]
pub use store::S3Config;
pub use store::{BlobStore, StoreConfig};

/// An opened object store ([`StoreConfig::open`]).
pub type ObjectStoreHandle = std::sync::Arc<dyn object_store::ObjectStore>;
pub use unpack::{PROGRESS_EVERY, PROGRESS_PREFIX, UnpackLimits, UnpackPlan, UnpackReport, unpack, unpack_main};

/// Why a snapshot operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// Reading or writing a host file failed.
    #[error("snapshot: {operation} {path}")]
    Io {
        /// What failed.
        operation: &'static str,
        /// The path (relative to the work tree, or a host path).
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The object store failed.
    #[error("snapshot store: {operation} failed")]
    Objects {
        /// What failed.
        operation: &'static str,
        /// The cause.
        #[source]
        source: object_store::Error,
    },
    /// The state store (heads) failed, or refused a stale writer (`Fenced`).
    #[error("snapshot head")]
    Store(#[source] harness_store::StoreError),
    /// An object that must be new exists already (snapshot objects are never overwritten).
    #[error("snapshot object {path} exists already: snapshot objects are immutable")]
    Exists {
        /// The object.
        path: String,
    },
    /// A referenced object is missing.
    #[error("snapshot object {path} is missing: the store lost it or retention removed it")]
    Missing {
        /// The object.
        path: String,
    },
    /// An object does not match what references it.
    #[error("snapshot object {path} is corrupt: {reason}")]
    Corrupt {
        /// The object.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The retention lease could not be taken (its backend failed).
    #[error("snapshot retention lease")]
    Lease(#[source] harness_core::LeaseError),
    /// The configuration is unusable.
    #[error("snapshot configuration: {0}")]
    Config(String),
    /// A restore stopped (a limit, a malformed or mismatching archive).
    #[error("snapshot restore failed: {0}")]
    Restore(String),
}

impl SnapshotError {
    /// Whether the error is a stale writer's refused head move.
    pub fn is_fenced(&self) -> bool {
        matches!(self, Self::Store(harness_store::StoreError::Fenced { .. }))
    }
}
