//! The [`Filesystem`] trait and its data types.

use crate::path::WsPath;
use crate::shell::Shell;
use crate::text::TextPage;
use async_trait::async_trait;
use std::sync::Arc;

/// How many times [`Filesystem::edit`] re-reads and retries after another writer changed the
/// file between its read and its conditional write.
pub const EDIT_CAS_RETRIES: usize = 5;

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
    /// The arguments make no sense (e.g. an empty `old_string`). Fix the call.
    #[error("{reason}")]
    InvalidArgument {
        /// What is wrong and what to do instead.
        reason: String,
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

impl FsError {
    /// The same error with its path rewritten by `map` (used by wrappers that present a
    /// backend's paths under another root, so messages show the caller's paths).
    #[must_use]
    pub fn map_path(self, map: impl Fn(&WsPath) -> WsPath) -> Self {
        match self {
            Self::NotFound { path } => Self::NotFound { path: map(&path) },
            Self::AlreadyExists { path } => Self::AlreadyExists { path: map(&path) },
            Self::IsDirectory { path } => Self::IsDirectory { path: map(&path) },
            Self::NotDirectory { path } => Self::NotDirectory { path: map(&path) },
            Self::PermissionDenied { path, reason } => Self::PermissionDenied {
                path: map(&path),
                reason,
            },
            Self::Binary { path, size } => Self::Binary { path: map(&path), size },
            Self::Conflict { path } => Self::Conflict { path: map(&path) },
            Self::NoMatch { path, hint } => Self::NoMatch { path: map(&path), hint },
            Self::NotUnique { path, count, lines } => Self::NotUnique {
                path: map(&path),
                count,
                lines,
            },
            Self::Io {
                path,
                operation,
                source,
            } => Self::Io {
                path: map(&path),
                operation,
                source,
            },
            other @ (Self::InvalidPath { .. } | Self::InvalidArgument { .. } | Self::Unsupported { .. }) => other,
        }
    }

    /// Whether nothing exists at the path.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound { .. })
    }
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

/// What an edit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditOutcome {
    /// How many replacements were made.
    pub replacements: usize,
    /// When the exact text was not found and a whitespace-tolerant match was used: a
    /// description of what was matched (lines and similarity).
    pub fuzzy: Option<String>,
    /// 1-based line of the first replacement.
    pub line: usize,
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
/// [`RuntimeContext`](harness_core::RuntimeContext) by the harness when the call is bound,
/// next to its [`CallScope`](crate::CallScope). Tools and middlewares read it with
/// `ctx.get::<CallWorkspace>()`; build it only with [`CallWorkspace::new`].
#[derive(Clone)]
pub struct CallWorkspace {
    /// The caller's own layer (its namespace): runtime data (sessions, memory, large tool
    /// results, the caller's files) is written here and only here.
    pub user: Arc<dyn Filesystem>,
    /// What the model reads and writes through: under scopes `user` and `session` the
    /// caller's layer over the read-only shared layer (a shared file shows through unless
    /// the caller has its own copy; a write creates the caller's copy, the shared file is
    /// never changed); under `agent` and `global` the workspace root with its shared files
    /// read-only. Every read path the model has (file tools, memory tools, the prompt) uses it.
    pub layered: Arc<dyn Filesystem>,
    /// The shared layer: only the shared entries of the workspace root
    /// ([`SHARED_ENTRIES`](crate::SHARED_ENTRIES)), read-only.
    pub shared: Arc<dyn Filesystem>,
    /// The caller's layer without the turn's fence, for writes that may happen after the
    /// turn's lease is released. The same `Arc` as [`user`](Self::user) when the call is
    /// not fenced, so `Arc::ptr_eq(&user, &unfenced)` says whether it is. (The harness
    /// writes a fenced call's session index under the lease, through `user`.)
    pub unfenced: Arc<dyn Filesystem>,
}

impl CallWorkspace {
    /// The view of `root` (the whole workspace) for the call `scope`. `template`, when the
    /// workspace filesystem is not the local disk, is the local workspace directory: its
    /// shared files show through under the workspace's own.
    pub fn new(root: &Arc<dyn Filesystem>, scope: &crate::CallScope, template: Option<&Arc<dyn Filesystem>>) -> Self {
        let mut shared: Arc<dyn Filesystem> = Arc::new(crate::SharedLayer::read_only(Arc::clone(root)));
        if let Some(template) = template {
            let below: Arc<dyn Filesystem> = Arc::new(crate::SharedLayer::read_only(Arc::clone(template)));
            shared = Arc::new(crate::OverlayFs::new(shared, below));
        }
        if scope.is_shared_namespace() {
            let own: Arc<dyn Filesystem> = Arc::new(crate::SharedLayer::protected(Arc::clone(root)));
            let layered: Arc<dyn Filesystem> = match template {
                Some(_) => Arc::new(crate::OverlayFs::new(own, Arc::clone(&shared))),
                None => own,
            };
            return Self {
                user: Arc::clone(root),
                unfenced: Arc::clone(root),
                layered,
                shared,
            };
        }
        let user: Arc<dyn Filesystem> = Arc::new(crate::Namespaced::new(Arc::clone(root), scope.namespace().clone()));
        Self {
            layered: Arc::new(crate::OverlayFs::new(Arc::clone(&user), Arc::clone(&shared))),
            unfenced: Arc::clone(&user),
            user,
            shared,
        }
    }

    /// [`new`](Self::new) with every write of the caller's layer (and of the model's view of
    /// it) carrying `fence`, when `root` can check fences ([`Filesystem::fenced`]); else the
    /// same as `new`. [`unfenced`](Self::unfenced) stays without the fence.
    pub fn fenced(
        root: &Arc<dyn Filesystem>,
        scope: &crate::CallScope,
        template: Option<&Arc<dyn Filesystem>>,
        fence: &harness_store::KvFence,
    ) -> Self {
        let Some(fenced_root) = root.fenced(fence) else {
            return Self::new(root, scope, template);
        };
        let plain = Self::new(root, scope, template);
        Self {
            unfenced: plain.user,
            ..Self::new(&fenced_root, scope, template)
        }
    }
}

impl std::fmt::Debug for CallWorkspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallWorkspace")
            .field("user", &self.user.describe())
            .field("layered", &self.layered.describe())
            .field("shared", &self.shared.describe())
            .field("unfenced", &self.unfenced.describe())
            .finish()
    }
}
