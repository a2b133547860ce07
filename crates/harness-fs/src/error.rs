//! [`FsError`]: why a filesystem operation failed. A leaf: it imports only [`WsPath`].
//!
//! `error` and `path` form the crate's one circle of two modules, on purpose: an error names
//! the path it is about, and [`WsPath::parse`] refuses bad input with [`FsError::InvalidPath`].
//! Both are leaves (neither imports anything else of the crate).

use crate::path::WsPath;

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
