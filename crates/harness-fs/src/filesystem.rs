//! The [`Filesystem`] trait and its data types.

use crate::path::WsPath;
use async_trait::async_trait;
use std::sync::Arc;

/// Why a filesystem operation failed. Messages are written for the model: they say what to
/// do differently.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FsError {
    /// The path was refused before any IO.
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath {
        /// The path as given (cut to 200 characters).
        path: String,
        /// Why.
        reason: String,
    },
    /// Nothing exists at the path.
    #[error("{path}: not found")]
    NotFound {
        /// The path.
        path: WsPath,
    },
    /// Something already exists where a new file was to be created.
    #[error("{path}: already exists; use edit_file to change it, or choose another path")]
    AlreadyExists {
        /// The path.
        path: WsPath,
    },
    /// A file operation was given a directory.
    #[error("{path}: is a directory")]
    IsDirectory {
        /// The path.
        path: WsPath,
    },
    /// A directory operation was given a file.
    #[error("{path}: is not a directory")]
    NotDirectory {
        /// The path.
        path: WsPath,
    },
    /// The path resolves (through a symlink or a namespace rule) outside what this caller may
    /// touch, or the backend refused it.
    #[error("{path}: permission denied ({reason})")]
    PermissionDenied {
        /// The path.
        path: WsPath,
        /// Why.
        reason: String,
    },
    /// Text was expected but the file is binary.
    #[error("{path}: is a binary file ({size} bytes); it cannot be shown as text")]
    Binary {
        /// The path.
        path: WsPath,
        /// Its size.
        size: u64,
    },
    /// A conditional write found a different version (another writer was first).
    #[error("{path}: changed by another writer; read it again and retry")]
    Conflict {
        /// The path.
        path: WsPath,
    },
    /// `edit` found no match for the old text.
    #[error("{path}: old_string not found{hint}")]
    NoMatch {
        /// The path.
        path: WsPath,
        /// Extra guidance (e.g. the closest line), starting with `; ` when present.
        hint: String,
    },
    /// `edit` found the old text more than once without `replace_all`.
    #[error(
        "{path}: old_string occurs {count} times (at lines {lines:?}); add surrounding lines to make it unique, or set replace_all"
    )]
    NotUnique {
        /// The path.
        path: WsPath,
        /// How many matches.
        count: usize,
        /// 1-based line numbers of the matches.
        lines: Vec<usize>,
    },
    /// The backend cannot do this (e.g. a shell on a KV store).
    #[error("{operation} is not supported by this filesystem")]
    Unsupported {
        /// The operation.
        operation: &'static str,
    },
    /// An IO or network failure.
    #[error("{path}: {operation} failed")]
    Io {
        /// The path.
        path: WsPath,
        /// The operation.
        operation: &'static str,
        /// The cause.
        #[source]
        source: harness_core::BoxError,
    },
}

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
    /// Only files whose path matches this glob (e.g. `*.md`, `**/*.rs`).
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

/// What an edit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditOutcome {
    /// How many replacements were made.
    pub replacements: usize,
    /// When the exact text was not found and a whitespace-tolerant match was used: a
    /// description of what was matched (lines and similarity).
    pub fuzzy: Option<String>,
}

/// A filesystem rooted somewhere. All paths are relative to that root.
///
/// Implementations: `LocalFs` (a host directory, symlink-safe), `KvFs` (items in a
/// `KvStore`), `CompositeFs` (longest-prefix routing), `OverlayFs` (two-layer read), and
/// `Namespaced` (a fixed prefix, from a [`NamespaceFactory`](crate::NamespaceFactory)).
/// Every backend passes the same conformance suite.
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
    /// [`FsError::InvalidPath`] for a bad pattern, IO.
    async fn glob(&self, base: &WsPath, pattern: &str, limit: usize) -> Result<Vec<FileInfo>, FsError>;

    /// Lines matching `options` in the files under `base` (binary files skipped), in path
    /// and line order, at most `options.max_matches`.
    ///
    /// # Errors
    /// [`FsError::InvalidPath`] for a bad regex or glob, IO.
    async fn grep(&self, base: &WsPath, options: &GrepOptions) -> Result<Vec<GrepMatch>, FsError>;

    /// Removes a file, or a directory with everything in it. Removing nothing is not an error.
    ///
    /// # Errors
    /// [`FsError::PermissionDenied`], IO.
    async fn delete(&self, path: &WsPath) -> Result<(), FsError>;

    /// Creates a directory and its parents. Backends without directories accept it as a no-op.
    ///
    /// # Errors
    /// [`FsError::NotDirectory`] when a file is in the way, IO.
    async fn mkdir(&self, path: &WsPath) -> Result<(), FsError>;

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

/// The filesystems of one call, put into the call's
/// [`RuntimeContext`](harness_core::RuntimeContext) by the harness when the call is bound.
/// Tools and middlewares read it with `ctx.get::<CallWorkspace>()`.
#[derive(Clone)]
pub struct CallWorkspace {
    /// The caller's namespace: runtime data (sessions, memory, large tool results, the
    /// caller's files) lives here.
    pub user: Arc<dyn Filesystem>,
    /// The workspace root, shared by every caller: AGENTS.md, knowledge/, skills/. Read it;
    /// writes to it are an operator's business.
    pub shared: Arc<dyn Filesystem>,
}

impl std::fmt::Debug for CallWorkspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallWorkspace")
            .field("user", &self.user.describe())
            .field("shared", &self.shared.describe())
            .finish()
    }
}
