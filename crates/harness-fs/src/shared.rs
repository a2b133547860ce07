//! [`SharedLayer`]: the workspace's shared files (AGENTS.md, knowledge/, MEMORY.md, skills/,
//! subagents/) as a read-only layer, or a filesystem whose shared files the model may not
//! write.

use crate::error::FsError;
use crate::filesystem::{FileInfo, FileVersion, Filesystem, GrepMatch, GrepOptions, WriteMode};
use crate::path::WsPath;
use crate::search::{finish_matches, union_by_path};
use crate::shell::Shell;
use crate::text::TextPage;
use async_trait::async_trait;
use std::sync::Arc;

/// The top-level workspace entries every caller reads through under its own layer.
pub const SHARED_ENTRIES: &[&str] = &["AGENTS.md", "MEMORY.md", "knowledge", "skills", "subagents"];

/// Whether `path` is a shared entry or inside one.
pub fn is_shared_path(path: &WsPath) -> bool {
    path.segments()
        .next()
        .is_some_and(|first| SHARED_ENTRIES.contains(&first))
}

/// A view of the workspace root that guards its shared files.
///
/// - [`SharedLayer::read_only`]: only the shared entries exist (everything else, such as
///   other users' namespaces, is not found) and every write is refused. This is the lower
///   layer of a caller's layered view under scopes `user` and `session`.
/// - [`SharedLayer::protected`]: everything exists, but writes, appends and deletes of a
///   shared path are refused. This is the model's view under scopes `agent` and `global`,
///   where the caller's own layer is the workspace root itself.
///
/// Refusals are [`FsError::PermissionDenied`] naming the path.
#[derive(Clone)]
pub struct SharedLayer {
    inner: Arc<dyn Filesystem>,
    hide_others: bool,
    /// A view from inside a shared entry ([`Filesystem::scoped`]): everything in it is
    /// shared, so everything is visible and read-only.
    all_shared: bool,
}

impl std::fmt::Debug for SharedLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedLayer")
            .field("inner", &self.inner.describe())
            .field("hide_others", &self.hide_others)
            .field("all_shared", &self.all_shared)
            .finish()
    }
}

impl SharedLayer {
    /// Only the shared entries of `root`, read-only.
    pub fn read_only(root: Arc<dyn Filesystem>) -> Self {
        Self {
            inner: root,
            hide_others: true,
            all_shared: false,
        }
    }

    /// All of `fs`, with its shared entries read-only.
    pub fn protected(fs: Arc<dyn Filesystem>) -> Self {
        Self {
            inner: fs,
            hide_others: false,
            all_shared: false,
        }
    }

    fn visible(&self, path: &WsPath) -> bool {
        self.all_shared || !self.hide_others || path.is_root() || is_shared_path(path)
    }

    fn check_visible(&self, path: &WsPath) -> Result<(), FsError> {
        if self.visible(path) {
            Ok(())
        } else {
            Err(FsError::NotFound { path: path.clone() })
        }
    }

    fn check_writable(&self, path: &WsPath) -> Result<(), FsError> {
        if self.all_shared || self.hide_others || path.is_root() || is_shared_path(path) {
            return Err(FsError::PermissionDenied {
                path: path.clone(),
                reason: "it is a shared workspace file (AGENTS.md, MEMORY.md, knowledge/, skills/, subagents/), \
                         read-only to the agent"
                    .to_owned(),
            });
        }
        Ok(())
    }

    /// Runs `search` once per shared top-level entry when a hidden-others search starts at
    /// the root, so other namespaces are neither searched nor able to crowd out shared hits.
    async fn per_entry<T, F, Fut>(&self, search: F) -> Result<Vec<T>, FsError>
    where
        F: Fn(WsPath) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<T>, FsError>>,
    {
        let mut found = Vec::new();
        for entry in SHARED_ENTRIES {
            let base = WsPath::parse(entry)?;
            match search(base).await {
                Ok(mut items) => found.append(&mut items),
                Err(FsError::NotFound { .. } | FsError::NotDirectory { .. }) => {}
                Err(err) => return Err(err),
            }
        }
        Ok(found)
    }
}

/// Whether a pattern relative to the root means the same relative to any top-level entry
/// (it starts with `**/`), so a root search can run per entry.
fn any_depth(pattern: &str) -> bool {
    pattern.starts_with("**/")
}

#[async_trait]
impl Filesystem for SharedLayer {
    fn describe(&self) -> String {
        let kind = if self.hide_others { "shared" } else { "protected" };
        format!("{kind}({})", self.inner.describe())
    }

    async fn read(&self, path: &WsPath) -> Result<Vec<u8>, FsError> {
        self.check_visible(path)?;
        self.inner.read(path).await
    }

    async fn read_versioned(&self, path: &WsPath) -> Result<(Vec<u8>, FileVersion), FsError> {
        self.check_visible(path)?;
        self.inner.read_versioned(path).await
    }

    async fn write(&self, path: &WsPath, bytes: &[u8], mode: WriteMode) -> Result<(), FsError> {
        self.check_writable(path)?;
        self.inner.write(path, bytes, mode).await
    }

    async fn append(&self, path: &WsPath, bytes: &[u8]) -> Result<(), FsError> {
        self.check_writable(path)?;
        self.inner.append(path, bytes).await
    }

    async fn stat(&self, path: &WsPath) -> Result<FileInfo, FsError> {
        self.check_visible(path)?;
        self.inner.stat(path).await
    }

    async fn list(&self, path: &WsPath) -> Result<Vec<FileInfo>, FsError> {
        // A hidden directory lists like a missing one: empty.
        if !self.visible(path) {
            return Ok(Vec::new());
        }
        let mut infos = self.inner.list(path).await?;
        infos.retain(|info| self.visible(&info.path));
        Ok(infos)
    }

    async fn glob(&self, base: &WsPath, pattern: &str, limit: usize) -> Result<Vec<FileInfo>, FsError> {
        if !self.visible(base) {
            return Ok(Vec::new());
        }
        if !(self.hide_others && base.is_root()) {
            return self.inner.glob(base, pattern, limit).await;
        }
        let mut found = if any_depth(pattern) {
            self.per_entry(|entry| async move { self.inner.glob(&entry, pattern, limit).await })
                .await?
        } else {
            // A pattern anchored at the root (`knowledge/*.md`, `*.md`): filter a root
            // search. Hits outside the shared entries count against `limit` here.
            self.inner.glob(base, pattern, limit).await?
        };
        found.retain(|info| self.visible(&info.path));
        if any_depth(pattern) {
            // `**/x` also matches top-level files.
            let top = self.inner.glob(base, pattern.trim_start_matches("**/"), limit).await?;
            found.extend(top.into_iter().filter(|info| self.visible(&info.path)));
        }
        let mut merged = union_by_path([found]);
        merged.truncate(limit);
        Ok(merged)
    }

    async fn grep(&self, base: &WsPath, options: &GrepOptions) -> Result<Vec<GrepMatch>, FsError> {
        if !self.visible(base) {
            return Ok(Vec::new());
        }
        if !(self.hide_others && base.is_root()) {
            return self.inner.grep(base, options).await;
        }
        let anchored = options.glob.as_deref().is_some_and(|glob| glob.contains('/'));
        let mut found = if anchored {
            self.inner.grep(base, options).await?
        } else {
            self.per_entry(|entry| async move { self.inner.grep(&entry, options).await })
                .await?
        };
        found.retain(|hit| self.visible(&hit.path));
        Ok(finish_matches(found, options.max_matches.max(1)))
    }

    async fn delete(&self, path: &WsPath) -> Result<(), FsError> {
        self.check_writable(path)?;
        self.inner.delete(path).await
    }

    async fn mkdir(&self, path: &WsPath) -> Result<(), FsError> {
        self.check_writable(path)?;
        self.inner.mkdir(path).await
    }

    async fn exists(&self, path: &WsPath) -> Result<bool, FsError> {
        if !self.visible(path) {
            return Ok(false);
        }
        self.inner.exists(path).await
    }

    async fn read_text(&self, path: &WsPath, offset: usize, limit: usize) -> Result<TextPage, FsError> {
        self.check_visible(path)?;
        self.inner.read_text(path, offset, limit).await
    }

    fn fenced(&self, fence: &harness_store::KvFence) -> Option<Arc<dyn Filesystem>> {
        let inner = self.inner.fenced(fence)?;
        Some(Arc::new(Self {
            inner,
            hide_others: self.hide_others,
            all_shared: self.all_shared,
        }))
    }

    /// From inside a shared entry (`skills/`), where everything is shared: the backend's own
    /// narrowed view (the local disk then checks symlinks against the narrower root), all of
    /// it read-only. `None` elsewhere (the generic prefix wrapper applies).
    fn scoped(&self, prefix: &WsPath) -> Option<Arc<dyn Filesystem>> {
        if !is_shared_path(prefix) {
            return None;
        }
        Some(Arc::new(Self {
            inner: self.inner.scoped(prefix)?,
            hide_others: false,
            all_shared: true,
        }))
    }

    fn spans_replicas(&self) -> bool {
        self.inner.spans_replicas()
    }

    fn shell(&self) -> Option<Arc<dyn Shell>> {
        // The read-only layer runs nothing; the protected view keeps the caller's shell.
        if self.hide_others || self.all_shared {
            None
        } else {
            self.inner.shell()
        }
    }
}
