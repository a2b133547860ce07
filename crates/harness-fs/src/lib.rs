//! Pluggable filesystems for Harness.
//!
//! Every file an agent touches goes through a [`Filesystem`]: the local disk (rooted and
//! symlink-safe), a KV store (Redis, for many replicas), a composite that routes by path
//! prefix, or an overlay of two layers. Paths are [`WsPath`]s — relative, normalised, with no
//! `..` — so an absolute path or a traversal can never reach past a backend's root or a
//! user's namespace. A [`Shell`] is a separate capability that only some backends have.
//!
//! Where to start: [`Filesystem`], [`WsPath`], [`NamespaceFactory`].

mod filesystem;
mod namespace;
mod path;

pub use filesystem::{
    CallWorkspace, EditOutcome, FileInfo, FileVersion, Filesystem, FsError, GrepMatch, GrepOptions, WriteMode,
};
pub use namespace::{IsolationScope, NamespaceFactory, RESERVED_NAMES};
pub use path::{MAX_PATH_LEN, WsPath};
mod scratch;
pub use scratch::{LocalFs, Namespaced};
