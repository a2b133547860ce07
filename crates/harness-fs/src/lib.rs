//! Pluggable filesystems for Harness.
//!
//! Every file an agent touches goes through a [`Filesystem`]: the local disk ([`LocalFs`],
//! rooted and symlink-safe), a KV store ([`KvFs`] over a `harness_store::KvStore`, e.g. Redis
//! for many replicas), a [`CompositeFs`] that routes by path prefix, or an [`OverlayFs`] of two
//! layers. Paths are [`WsPath`]s — relative, normalised, with no `..` — so an absolute path or
//! a traversal can never reach past a backend's root or a user's namespace ([`Namespaced`],
//! derived from a call's [`CallScope`]); the shared files show through under every caller's
//! own layer ([`CallWorkspace::layered`], read-only [`SharedLayer`]). A [`Shell`] is a separate capability that only some
//! backends have ([`LocalFs::with_shell`]); it is never there unless asked for.
//!
//! Every backend passes one conformance suite (`tests/it/conformance.rs`).
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use harness_fs::{Filesystem, KvFs, Namespaced, WriteMode, WsPath};
//! use harness_store::InMemoryKv;
//! use std::sync::Arc;
//! let fs: Arc<dyn Filesystem> = Arc::new(KvFs::new(Arc::new(InMemoryKv::default()), WsPath::root()));
//! let alice = Namespaced::new(fs.clone(), WsPath::parse("alice")?);
//! // A leading `/` means alice's own root, never the host's or the workspace's.
//! alice.write(&WsPath::parse("/notes.md")?, b"hello\nworld\n", WriteMode::CreateNew).await?;
//! assert_eq!(fs.read(&WsPath::parse("alice/notes.md")?).await?, b"hello\nworld\n");
//! let outcome = alice.edit(&WsPath::parse("notes.md")?, "world", "there", false).await?;
//! assert_eq!(outcome.replacements, 1);
//! assert_eq!(alice.read_text(&WsPath::parse("notes.md")?, 1, 10).await?.lines, ["there"]);
//! # Ok::<_, harness_fs::FsError>(()) }).unwrap();
//! ```
//!
//! Where to start: [`Filesystem`], [`WsPath`], [`CallScope`], [`CallWorkspace`], [`Shell`].

mod composite;
mod edit;
mod error;
mod filesystem;
mod jail;
mod kv_fs;
pub mod kv_layout;
mod local;
mod namespace;
mod overlay;
mod path;
mod read_only;
mod scope;
mod search;
mod shared;
mod shell;
mod text;
mod workspace;

pub use composite::CompositeFs;
pub use edit::EditOutcome;
pub use error::FsError;
pub use filesystem::{EDIT_CAS_RETRIES, FileInfo, FileVersion, Filesystem, GrepMatch, GrepOptions, WriteMode};
pub use kv_fs::KvFs;
pub use local::LocalFs;
pub use namespace::{IsolationScope, Namespaced, RESERVED_NAMES};
pub use overlay::OverlayFs;
pub use path::{MAX_PATH_LEN, WsPath};
pub use read_only::ReadOnlyFs;
pub use scope::{CallScope, DEFAULT_EVICTED_DIR, SHARED_MEMORY_KEY, SHARED_NAMESPACE_ID, ScopeError, state_layout};
pub use shared::{SHARED_ENTRIES, SharedLayer, is_shared_path};
pub use shell::{
    CallReadOnlyShell, CallShell, DEFAULT_ENV_ALLOWLIST, LocalShell, LocalShellConfig, OutputCapture, Shell,
    ShellError, ShellOutput, ShellRequest,
};
pub use text::{TextPage, looks_binary, truncate_chars};
pub use workspace::{CallWorkTree, CallWorkspace};
