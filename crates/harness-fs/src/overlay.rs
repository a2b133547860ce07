//! [`OverlayFs`]: a writable upper layer over a read-only lower one.

use crate::error::FsError;
use crate::filesystem::{FileInfo, FileVersion, Filesystem, GrepMatch, GrepOptions, WriteMode};
use crate::path::WsPath;
use crate::search::{finish_matches, union_by_path};
use crate::shell::Shell;
use crate::text::TextPage;
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::Arc;

/// Version tags telling which layer a version was read from.
const UPPER: &str = "upper:";
const LOWER: &str = "lower:";

/// Two layers: reads look in `upper` first and then in `lower`; every write goes to `upper`,
/// and `lower` is never modified.
///
/// - Both layers report [`WsPath`]s relative to their own roots, so listings merge in one path
///   format and a file present in both appears once (the upper copy).
/// - Editing a file that exists only below copies it up (the edit's conditional write checks
///   that the lower file did not change since it was read), then edits the copy.
/// - Appending to a lower-only file copies it up first.
/// - Deleting removes the upper copy; a file that also exists below cannot be deleted, which is
///   reported as [`FsError::PermissionDenied`] (the lower version shows through again).
/// - The shell is the upper layer's, so commands see copied-up edits in the upper root.
#[derive(Clone)]
pub struct OverlayFs {
    upper: Arc<dyn Filesystem>,
    lower: Arc<dyn Filesystem>,
}

impl std::fmt::Debug for OverlayFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OverlayFs")
            .field("upper", &self.upper.describe())
            .field("lower", &self.lower.describe())
            .finish()
    }
}

impl OverlayFs {
    /// `upper` (writable) over `lower` (read-only).
    pub fn new(upper: Arc<dyn Filesystem>, lower: Arc<dyn Filesystem>) -> Self {
        Self { upper, lower }
    }

    /// Copies a lower-only file into the upper layer; a file already there is kept.
    async fn copy_up(&self, path: &WsPath) -> Result<(), FsError> {
        if self.upper.exists(path).await? {
            return Ok(());
        }
        let bytes = match self.lower.read(path).await {
            Ok(bytes) => bytes,
            Err(FsError::NotFound { .. }) => return Ok(()),
            Err(err) => return Err(err),
        };
        match self.upper.write(path, &bytes, WriteMode::CreateNew).await {
            Ok(()) | Err(FsError::AlreadyExists { .. }) => Ok(()),
            Err(err) => Err(err),
        }
    }
}

/// Runs `upper`, and `lower` only when the upper layer has nothing at the path.
macro_rules! upper_then_lower {
    ($self:ident, $method:ident ( $($arg:expr),* )) => {
        match $self.upper.$method($($arg),*).await {
            Err(FsError::NotFound { .. }) => $self.lower.$method($($arg),*).await,
            other => other,
        }
    };
}

#[async_trait]
impl Filesystem for OverlayFs {
    fn describe(&self) -> String {
        format!("overlay({} over {})", self.upper.describe(), self.lower.describe())
    }

    async fn read(&self, path: &WsPath) -> Result<Vec<u8>, FsError> {
        upper_then_lower!(self, read(path))
    }

    async fn read_versioned(&self, path: &WsPath) -> Result<(Vec<u8>, FileVersion), FsError> {
        match self.upper.read_versioned(path).await {
            Ok((bytes, version)) => Ok((bytes, FileVersion(format!("{UPPER}{}", version.0)))),
            Err(FsError::NotFound { .. }) => {
                let (bytes, version) = self.lower.read_versioned(path).await?;
                Ok((bytes, FileVersion(format!("{LOWER}{}", version.0))))
            }
            Err(err) => Err(err),
        }
    }

    async fn write(&self, path: &WsPath, bytes: &[u8], mode: WriteMode) -> Result<(), FsError> {
        match mode {
            WriteMode::CreateNew => {
                if self.lower.exists(path).await? {
                    return Err(FsError::AlreadyExists { path: path.clone() });
                }
                self.upper.write(path, bytes, WriteMode::CreateNew).await
            }
            WriteMode::Overwrite => self.upper.write(path, bytes, WriteMode::Overwrite).await,
            WriteMode::IfMatch(version) => {
                if let Some(upper) = version.0.strip_prefix(UPPER) {
                    return self
                        .upper
                        .write(path, bytes, WriteMode::IfMatch(FileVersion(upper.to_owned())))
                        .await;
                }
                let Some(lower) = version.0.strip_prefix(LOWER) else {
                    return Err(FsError::Conflict { path: path.clone() });
                };
                // Copy-on-write: the lower file must be unchanged and not yet copied up.
                match self.lower.read_versioned(path).await {
                    Ok((_, current)) if current.0 == lower => {}
                    Ok(_) | Err(FsError::NotFound { .. }) => return Err(FsError::Conflict { path: path.clone() }),
                    Err(err) => return Err(err),
                }
                match self.upper.write(path, bytes, WriteMode::CreateNew).await {
                    Err(FsError::AlreadyExists { .. }) => Err(FsError::Conflict { path: path.clone() }),
                    other => other,
                }
            }
        }
    }

    async fn append(&self, path: &WsPath, bytes: &[u8]) -> Result<(), FsError> {
        self.copy_up(path).await?;
        self.upper.append(path, bytes).await
    }

    async fn stat(&self, path: &WsPath) -> Result<FileInfo, FsError> {
        upper_then_lower!(self, stat(path))
    }

    async fn list(&self, path: &WsPath) -> Result<Vec<FileInfo>, FsError> {
        let (upper, lower) = tokio::join!(self.upper.list(path), self.lower.list(path));
        match (upper, lower) {
            (Ok(upper), Ok(lower)) => Ok(union_by_path([upper, lower])),
            (Ok(upper), Err(FsError::NotDirectory { .. })) => Ok(upper),
            (Err(FsError::NotDirectory { .. }), Ok(lower)) if lower.is_empty() => {
                Err(FsError::NotDirectory { path: path.clone() })
            }
            (Err(err), _) | (_, Err(err)) => Err(err),
        }
    }

    async fn glob(&self, base: &WsPath, pattern: &str, limit: usize) -> Result<Vec<FileInfo>, FsError> {
        let (upper, lower) = tokio::join!(
            self.upper.glob(base, pattern, limit),
            self.lower.glob(base, pattern, limit)
        );
        let mut merged = union_by_path([upper?, lower?]);
        merged.truncate(limit);
        Ok(merged)
    }

    async fn grep(&self, base: &WsPath, options: &GrepOptions) -> Result<Vec<GrepMatch>, FsError> {
        let (upper, lower) = tokio::join!(self.upper.grep(base, options), self.lower.grep(base, options));
        let mut matches = upper?;
        // Lower matches count only for files the upper layer does not shadow.
        let mut shadowed: HashMap<WsPath, bool> = HashMap::new();
        for found in lower? {
            let hidden = match shadowed.get(&found.path) {
                Some(hidden) => *hidden,
                None => {
                    let hidden = self.upper.exists(&found.path).await?;
                    shadowed.insert(found.path.clone(), hidden);
                    hidden
                }
            };
            if !hidden {
                matches.push(found);
            }
        }
        Ok(finish_matches(matches, options.max_matches.max(1)))
    }

    async fn delete(&self, path: &WsPath) -> Result<(), FsError> {
        self.upper.delete(path).await?;
        if self.lower.exists(path).await? {
            return Err(FsError::PermissionDenied {
                path: path.clone(),
                reason: "it belongs to the read-only base layer and cannot be deleted (any changed copy was removed)"
                    .to_owned(),
            });
        }
        Ok(())
    }

    async fn mkdir(&self, path: &WsPath) -> Result<(), FsError> {
        self.upper.mkdir(path).await
    }

    async fn exists(&self, path: &WsPath) -> Result<bool, FsError> {
        Ok(self.upper.exists(path).await? || self.lower.exists(path).await?)
    }

    async fn read_text(&self, path: &WsPath, offset: usize, limit: usize) -> Result<TextPage, FsError> {
        upper_then_lower!(self, read_text(path, offset, limit))
    }

    fn spans_replicas(&self) -> bool {
        self.upper.spans_replicas() || self.lower.spans_replicas()
    }

    fn shell(&self) -> Option<Arc<dyn Shell>> {
        self.upper.shell()
    }

    /// Only the upper layer is written, so only it carries the fence.
    fn fenced(&self, fence: &harness_store::KvFence) -> Option<Arc<dyn Filesystem>> {
        let upper = self.upper.fenced(fence)?;
        Some(Arc::new(Self {
            upper,
            lower: Arc::clone(&self.lower),
        }))
    }

    fn scoped(&self, prefix: &WsPath) -> Option<Arc<dyn Filesystem>> {
        Some(Arc::new(Self {
            upper: Arc::new(crate::Namespaced::new(Arc::clone(&self.upper), prefix.clone())),
            lower: Arc::new(crate::Namespaced::new(Arc::clone(&self.lower), prefix.clone())),
        }))
    }
}
