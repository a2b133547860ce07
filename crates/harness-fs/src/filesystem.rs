//! The [`Filesystem`] trait and its data types.

use crate::edit::EditOutcome;
use crate::error::FsError;
use crate::path::WsPath;
use crate::shell::Shell;
use crate::text::TextPage;
use async_trait::async_trait;
use std::sync::Arc;

/// How many times [`Filesystem::edit`] re-reads and retries after another writer changed the
/// file between its read and its conditional write.
pub const EDIT_CAS_RETRIES: usize = 5;

/// Metadata of one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileInfo {
    /// Path from the filesystem's root.
    pub path: WsPath,
    /// Whether it is a directory.
    pub is_dir: bool,
    /// Size in bytes (0 for directories).
    pub size: u64,
    /// Last modification, when known.
    pub modified: Option<jiff::Timestamp>,
}

/// An opaque version of a file's content, for compare-and-set writes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FileVersion(pub String);

/// How [`Filesystem::write`] treats an existing file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteMode {
    /// Fail with [`FsError::AlreadyExists`] if the file exists.
    CreateNew,
    /// Replace any existing file.
    Overwrite,
    /// Replace the file only if its version is still this one; else [`FsError::Conflict`].
    IfMatch(FileVersion),
}

/// Options of [`Filesystem::grep`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrepOptions {
    /// The pattern.
    pub pattern: String,
    /// Treat the pattern as literal text (default) rather than a regex.
    pub literal: bool,
    /// Ignore case.
    pub case_insensitive: bool,
    /// Only files matching this glob. A glob without `/` (e.g. `*.md`) matches the file name;
    /// one with `/` (e.g. `src/**/*.rs`) matches the path relative to the search base.
    pub glob: Option<String>,
    /// Lines of context before and after each match.
    pub context: usize,
    /// Stop after this many matches.
    pub max_matches: usize,
}

impl GrepOptions {
    /// Literal search for `pattern` with the default cap (200 matches).
    pub fn literal(pattern: impl Into<String>) -> Self {
        Self {
            pattern: pattern.into(),
            literal: true,
            case_insensitive: false,
            glob: None,
            context: 0,
            max_matches: 200,
        }
    }
}

/// One grep hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrepMatch {
    /// The file.
    pub path: WsPath,
    /// 1-based line number.
    pub line: usize,
    /// The line's text.
    pub text: String,
    /// Context lines before, oldest first.
    pub before: Vec<String>,
    /// Context lines after.
    pub after: Vec<String>,
}

/// A filesystem rooted somewhere. All paths are relative to that root.
///
/// Implementations: `LocalFs` (a host directory, symlink-safe), `KvFs` (items in a
/// `KvStore`), `CompositeFs` (longest-prefix routing), `OverlayFs` (two-layer read), and
/// `Namespaced` (a fixed prefix, from a call's [`CallScope`](crate::CallScope)).
/// Every backend passes the same conformance suite.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use harness_fs::{Filesystem, FsError, GrepOptions, KvFs, WriteMode, WsPath};
/// use harness_store::InMemoryKv;
/// let fs = KvFs::new(std::sync::Arc::new(InMemoryKv::default()), WsPath::root());
/// let path = WsPath::parse("notes/todo.md")?;
/// fs.write(&path, b"- buy milk\n", WriteMode::CreateNew).await?;
/// assert!(matches!(fs.write(&path, b"", WriteMode::CreateNew).await, Err(FsError::AlreadyExists { .. })));
/// // Compare-and-set: the write succeeds only if nobody changed the file since the read.
/// let (bytes, version) = fs.read_versioned(&path).await?;
/// fs.write(&path, &[bytes, b"- call mom\n".to_vec()].concat(), WriteMode::IfMatch(version)).await?;
/// let hits = fs.grep(&WsPath::root(), &GrepOptions::literal("mom")).await?;
/// assert_eq!((hits[0].path.as_str(), hits[0].line), ("notes/todo.md", 2));
/// # Ok::<_, FsError>(()) }).unwrap();
/// ```
#[async_trait]
pub trait Filesystem: Send + Sync + 'static {
    /// A short description for prompts and logs (e.g. `local:/srv/ws`).
    fn describe(&self) -> String;

    /// The whole file.
    ///
    /// # Errors
    /// [`FsError::NotFound`], [`FsError::IsDirectory`], [`FsError::PermissionDenied`], IO.
    async fn read(&self, path: &WsPath) -> Result<Vec<u8>, FsError>;

    /// The whole file and its version, for a later [`WriteMode::IfMatch`].
    ///
    /// # Errors
    /// As [`read`](Self::read).
    async fn read_versioned(&self, path: &WsPath) -> Result<(Vec<u8>, FileVersion), FsError>;

    /// Writes a whole file, creating parent directories.
    ///
    /// # Errors
    /// [`FsError::AlreadyExists`] (CreateNew), [`FsError::Conflict`] (IfMatch),
    /// [`FsError::IsDirectory`], [`FsError::PermissionDenied`], IO.
    async fn write(&self, path: &WsPath, bytes: &[u8], mode: WriteMode) -> Result<(), FsError>;

    /// Appends to a file, creating it (and its parents) when missing. Appends of one caller
    /// are never interleaved with another's inside one call.
    ///
    /// # Errors
    /// [`FsError::IsDirectory`], [`FsError::PermissionDenied`], IO.
    async fn append(&self, path: &WsPath, bytes: &[u8]) -> Result<(), FsError>;

    /// Metadata of one entry.
    ///
    /// # Errors
    /// [`FsError::NotFound`], IO.
    async fn stat(&self, path: &WsPath) -> Result<FileInfo, FsError>;

    /// The entries directly inside a directory, sorted by path. A missing directory is an
    /// empty list.
    ///
    /// # Errors
    /// [`FsError::NotDirectory`], IO.
    async fn list(&self, path: &WsPath) -> Result<Vec<FileInfo>, FsError>;

    /// Files under `base` whose path relative to `base` matches `pattern` (`*`, `**`, `?`,
    /// `[..]`, `{a,b}`), sorted by path, at most `limit`.
    ///
    /// # Errors
    /// [`FsError::InvalidArgument`] for a bad pattern, [`FsError::NotDirectory`] when `base`
    /// is a file, IO.
    async fn glob(&self, base: &WsPath, pattern: &str, limit: usize) -> Result<Vec<FileInfo>, FsError>;

    /// Lines matching `options` in the files under `base` (binary files skipped), in path
    /// and line order, at most `options.max_matches`.
    ///
    /// `base` may also be a single file.
    ///
    /// # Errors
    /// [`FsError::InvalidArgument`] for an empty pattern or a bad regex or glob, IO.
    async fn grep(&self, base: &WsPath, options: &GrepOptions) -> Result<Vec<GrepMatch>, FsError>;

    /// Removes a file, or a directory with everything in it. Removing nothing is not an error.
    /// The root cannot be removed.
    ///
    /// # Errors
    /// [`FsError::PermissionDenied`] (also for the root), IO.
    async fn delete(&self, path: &WsPath) -> Result<(), FsError>;

    /// Creates a directory and its parents. Backends without directories accept it as a no-op.
    ///
    /// # Errors
    /// [`FsError::NotDirectory`] when a file is in the way, IO.
    async fn mkdir(&self, path: &WsPath) -> Result<(), FsError>;

    /// Lines `offset..offset + limit` (0-based) of a text file, and its line count.
    ///
    /// The default reads the whole file; backends that can stream (the local disk) override it.
    ///
    /// # Errors
    /// As [`read`](Self::read), plus [`FsError::Binary`] when the file looks binary (a NUL byte
    /// in its first 8 KiB).
    async fn read_text(&self, path: &WsPath, offset: usize, limit: usize) -> Result<TextPage, FsError> {
        let bytes = self.read(path).await?;
        if crate::text::looks_binary(&bytes) {
            return Err(FsError::Binary {
                path: path.clone(),
                size: bytes.len() as u64,
            });
        }
        Ok(crate::text::page(&bytes, offset, limit))
    }

    /// Replaces `old` with `new` in a text file: `old` must occur exactly once unless
    /// `replace_all`. Without an exact match, a match that ignores whitespace and indentation
    /// (or, failing that, one at least 92% similar) is used and described in
    /// [`EditOutcome::fuzzy`]. Line endings (LF or CRLF) are kept.
    ///
    /// Built on [`read_versioned`](Self::read_versioned) and a [`WriteMode::IfMatch`] write:
    /// when another writer changes the file in between, the edit is re-applied to the new
    /// content, up to [`EDIT_CAS_RETRIES`] times. Nothing is lost and nothing is applied twice.
    ///
    /// # Errors
    /// [`FsError::NoMatch`], [`FsError::NotUnique`] (with candidate line numbers),
    /// [`FsError::InvalidArgument`] (empty or identical strings), [`FsError::Binary`],
    /// [`FsError::Conflict`] after too many lost races, and the errors of
    /// [`read`](Self::read) and [`write`](Self::write).
    async fn edit(&self, path: &WsPath, old: &str, new: &str, replace_all: bool) -> Result<EditOutcome, FsError> {
        for _ in 0..=EDIT_CAS_RETRIES {
            let (bytes, version) = self.read_versioned(path).await?;
            let size = bytes.len() as u64;
            let text = match String::from_utf8(bytes) {
                Ok(text) if !text.as_bytes()[..text.len().min(crate::text::BINARY_SNIFF_LEN)].contains(&0) => text,
                _ => {
                    return Err(FsError::Binary {
                        path: path.clone(),
                        size,
                    });
                }
            };
            let plan = crate::edit::plan(&text, old, new, replace_all).map_err(|failure| match failure {
                crate::edit::EditFailure::Invalid(reason) => FsError::InvalidArgument { reason },
                crate::edit::EditFailure::NoMatch { hint } => FsError::NoMatch {
                    path: path.clone(),
                    hint,
                },
                crate::edit::EditFailure::NotUnique { count, lines } => FsError::NotUnique {
                    path: path.clone(),
                    count,
                    lines,
                },
            })?;
            match self
                .write(path, plan.text.as_bytes(), WriteMode::IfMatch(version))
                .await
            {
                Ok(()) => return Ok(plan.outcome),
                Err(FsError::Conflict { .. }) => {}
                Err(other) => return Err(other),
            }
        }
        Err(FsError::Conflict { path: path.clone() })
    }

    /// Whether some of its files live in a store that other hosts share (a KV store, a
    /// composite's shared prefixes). An agent on such a filesystem needs a shared state
    /// store too, or its state and session lease stay on one replica's disk.
    fn spans_replicas(&self) -> bool {
        false
    }

    /// The shell that runs commands in this filesystem's root, if it has one. Most backends
    /// have none; a local filesystem has one only when built
    /// [`with_shell`](crate::LocalFs::with_shell).
    fn shell(&self) -> Option<Arc<dyn Shell>> {
        None
    }

    /// This filesystem seen from `prefix` (which becomes the root), when the backend can do
    /// that more safely or cheaply than the generic [`Namespaced`](crate::Namespaced) wrapper
    /// (the local disk checks symlinks against the narrower root; a KV store extends its key
    /// prefix). Use [`Namespaced::new`](crate::Namespaced::new), which calls this.
    fn scoped(&self, prefix: &WsPath) -> Option<Arc<dyn Filesystem>> {
        let _ = prefix;
        None
    }

    /// This filesystem with every write and append carrying `fence` (a session lease's
    /// fencing token and counter), when some backend below it is shared by several replicas
    /// and can check the fence atomically with the write ([`KvFs`](crate::KvFs) over a store
    /// that implements `put_fenced`). A refused write fails with an [`FsError::Io`] whose
    /// source is `harness_store::StoreError::Fenced`; nothing of it is written. `None` (the
    /// default) means no backend below checks fences, so the filesystem is used as it is.
    /// Wrappers ([`CompositeFs`](crate::CompositeFs), [`Namespaced`](crate::Namespaced),
    /// [`OverlayFs`](crate::OverlayFs), [`SharedLayer`](crate::SharedLayer)) forward it.
    fn fenced(&self, fence: &harness_store::KvFence) -> Option<Arc<dyn Filesystem>> {
        let _ = fence;
        None
    }

    /// This filesystem with the directories `dirs` (and, when `dirs` holds the root, all of
    /// it) kept in the store that every replica of a deployment shares, when it has one (a
    /// [`CompositeFs`](crate::CompositeFs) given [`replicate_to`](crate::CompositeFs::replicate_to)).
    /// A directory some mount already serves keeps that mount. [`CallWorkspace::new`](crate::CallWorkspace::new)
    /// calls it with [`CallScope::replicated_dirs`](crate::CallScope::replicated_dirs), so what
    /// a later turn or task reads back never stays on one replica's disk. `None` (the default):
    /// nothing is shared across replicas, the filesystem is used as it is.
    fn replicated(&self, dirs: &[WsPath]) -> Option<Arc<dyn Filesystem>> {
        let _ = dirs;
        None
    }

    /// Whether anything exists at `path`.
    ///
    /// # Errors
    /// IO.
    async fn exists(&self, path: &WsPath) -> Result<bool, FsError> {
        match self.stat(path).await {
            Ok(_) => Ok(true),
            Err(FsError::NotFound { .. }) => Ok(false),
            Err(other) => Err(other),
        }
    }
}
