//! [`Jail`]: maps a [`WsPath`] to a real host path after resolving every symlink, and refuses
//! any result outside the jail's root.

use crate::error::FsError;
use crate::path::WsPath;
use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

/// Symlinks followed while resolving one path before giving up (Linux's own limit).
const MAX_SYMLINK_HOPS: usize = 40;

/// A root directory on the host that paths may not leave.
///
/// `base` is the canonical directory the filesystem was created on; `jail` a sub-path of it
/// (a namespace). The root is `base/jail` taken literally: if any component of `jail` is itself
/// a symlink, everything below it resolves elsewhere and is refused.
#[derive(Debug, Clone)]
pub(crate) struct Jail {
    base: PathBuf,
    jail: WsPath,
    root: PathBuf,
}

impl Jail {
    /// A jail at `base` (canonicalised by the caller).
    pub(crate) fn new(base: PathBuf) -> Self {
        Self {
            root: base.clone(),
            base,
            jail: WsPath::root(),
        }
    }

    /// The same base, narrowed to `prefix` below the current root.
    pub(crate) fn narrowed(&self, prefix: &WsPath) -> Self {
        let jail = self.jail.join_path(prefix);
        let mut root = self.base.clone();
        root.extend(jail.segments());
        Self {
            base: self.base.clone(),
            jail,
            root,
        }
    }

    /// The root as a host path (for descriptions; never shown to a model).
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The real location of `path`, every symlink resolved (the last one too).
    ///
    /// # Errors
    /// [`FsError::PermissionDenied`] when the location is outside the root or a symlink loop
    /// is found; IO failures while inspecting symlinks.
    pub(crate) fn resolve(&self, path: &WsPath) -> Result<PathBuf, FsError> {
        self.resolve_with(path, true).map(|(real, _)| real)
    }

    /// As [`resolve`](Self::resolve), also returning what the walk learnt about the final
    /// entry, so a `stat` need not look it up again.
    ///
    /// # Errors
    /// As [`resolve`](Self::resolve).
    pub(crate) fn resolve_known(&self, path: &WsPath) -> Result<(PathBuf, Known), FsError> {
        self.resolve_with(path, true)
    }

    /// The real location of `path` with its parents resolved but the last component kept as
    /// is (for removing a symlink rather than what it points to).
    ///
    /// # Errors
    /// As [`resolve`](Self::resolve).
    pub(crate) fn resolve_no_follow(&self, path: &WsPath) -> Result<PathBuf, FsError> {
        self.resolve_with(path, false).map(|(real, _)| real)
    }

    fn resolve_with(&self, path: &WsPath, follow_last: bool) -> Result<(PathBuf, Known), FsError> {
        let denied = |reason: &str| FsError::PermissionDenied {
            path: path.clone(),
            reason: reason.to_owned(),
        };
        let mut real = self.base.clone();
        let mut pending: VecDeque<OsString> = self
            .jail
            .segments()
            .chain(path.segments())
            .map(OsString::from)
            .collect();
        let mut hops = 0;
        let mut known = Known::Unknown;
        while let Some(segment) = pending.pop_front() {
            known = Known::Unknown;
            if segment == ".." {
                real.pop();
                continue;
            }
            if segment == "." || segment.is_empty() {
                continue;
            }
            let candidate = real.join(&segment);
            let is_last = pending.is_empty();
            match std::fs::symlink_metadata(&candidate) {
                Ok(meta) if meta.file_type().is_symlink() && (follow_last || !is_last) => {
                    hops += 1;
                    if hops > MAX_SYMLINK_HOPS {
                        return Err(denied("too many levels of symbolic links"));
                    }
                    let target = std::fs::read_link(&candidate).map_err(|err| io_error(err, path, "resolve"))?;
                    if target.is_absolute() {
                        real = PathBuf::from("/");
                    }
                    for component in target.components().rev() {
                        match component {
                            Component::Normal(name) => pending.push_front(name.to_owned()),
                            Component::ParentDir => pending.push_front(OsString::from("..")),
                            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
                        }
                    }
                }
                Ok(meta) => {
                    real = candidate;
                    if is_last {
                        known = Known::Found(meta);
                    }
                }
                Err(err) if matches!(err.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory) => {
                    // Nothing below a missing entry can exist: the rest is taken literally.
                    real = candidate;
                    // Nothing is there, unless a `..` climbs back out of the missing part.
                    known = if err.kind() == io::ErrorKind::NotFound && !pending.iter().any(|rest| rest == "..") {
                        Known::Missing
                    } else {
                        Known::Unknown
                    };
                    for rest in pending.drain(..) {
                        if rest == ".." {
                            real.pop();
                        } else if rest != "." && !rest.is_empty() {
                            real.push(rest);
                        }
                    }
                }
                Err(err) => return Err(io_error(err, path, "resolve")),
            }
        }
        if !real.starts_with(&self.root) {
            return Err(denied(
                "it resolves outside the workspace through a symbolic link; only paths inside the workspace can be used",
            ));
        }
        Ok((real, known))
    }
}

/// What resolving a path learnt about its final entry.
#[derive(Debug)]
pub(crate) enum Known {
    /// Not looked at (or not conclusively).
    Unknown,
    /// It does not exist.
    Missing,
    /// It exists and is not a symbolic link: its metadata.
    Found(std::fs::Metadata),
}

/// Maps an IO error to the [`FsError`] the caller can act on.
pub(crate) fn io_error(err: io::Error, path: &WsPath, operation: &'static str) -> FsError {
    let path = path.clone();
    match err.kind() {
        io::ErrorKind::NotFound => FsError::NotFound { path },
        io::ErrorKind::IsADirectory => FsError::IsDirectory { path },
        io::ErrorKind::NotADirectory => FsError::NotDirectory { path },
        io::ErrorKind::AlreadyExists => FsError::AlreadyExists { path },
        io::ErrorKind::PermissionDenied => FsError::PermissionDenied {
            path,
            reason: "the operating system refused access".to_owned(),
        },
        io::ErrorKind::InvalidFilename => FsError::InvalidPath {
            path: path.as_str().chars().take(200).collect(),
            reason: "a path segment is longer than the filesystem allows (255 bytes)".to_owned(),
        },
        _ if err.raw_os_error() == Some(libc::ELOOP) => FsError::PermissionDenied {
            path,
            reason: "it is a symbolic link that changed while it was being used".to_owned(),
        },
        _ => FsError::Io {
            path,
            operation,
            source: Box::new(err),
        },
    }
}
