//! [`ReadOnlyFs`]: a filesystem every write of which is refused, whatever tool asks. Plan mode
//! puts a sandboxed call's work tree behind it ([`CallWorkTree::read_only`]), so a file tool
//! that slips past the tool filter (a misannotated tool, a user middleware) still cannot
//! change the work tree: the refusal is in the filesystem layer, like the shell's in Landlock.

use crate::error::FsError;
use crate::filesystem::{FileInfo, FileVersion, Filesystem, GrepMatch, GrepOptions, WriteMode};
use crate::path::WsPath;
use crate::shell::Shell;
use crate::text::TextPage;
use crate::workspace::CallWorkTree;
use async_trait::async_trait;
use std::sync::Arc;

/// `inner` with reads passed through and every write, append, delete, mkdir and edit refused
/// with [`FsError::PermissionDenied`] naming the path and `reason`. It has no shell (a shell
/// could write), and its scoped, fenced and replicated views are read-only too.
#[derive(Clone)]
pub struct ReadOnlyFs {
    inner: Arc<dyn Filesystem>,
    reason: Arc<str>,
}

impl ReadOnlyFs {
    /// `inner`, read-only; `reason` says why and what to do (e.g. "plan mode is active:
    /// write the plan, then ask to leave plan mode with plan_exit").
    pub fn new(inner: Arc<dyn Filesystem>, reason: impl Into<Arc<str>>) -> Self {
        Self {
            inner,
            reason: reason.into(),
        }
    }

    fn refuse<T>(&self, path: &WsPath) -> Result<T, FsError> {
        Err(FsError::PermissionDenied {
            path: path.clone(),
            reason: format!("read-only: {}", self.reason),
        })
    }

    fn wrap(&self, inner: Arc<dyn Filesystem>) -> Arc<dyn Filesystem> {
        Arc::new(Self {
            inner,
            reason: Arc::clone(&self.reason),
        })
    }
}

impl std::fmt::Debug for ReadOnlyFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadOnlyFs")
            .field("inner", &self.inner.describe())
            .field("reason", &self.reason)
            .finish()
    }
}

#[async_trait]
impl Filesystem for ReadOnlyFs {
    fn describe(&self) -> String {
        format!("read-only({})", self.inner.describe())
    }

    async fn read(&self, path: &WsPath) -> Result<Vec<u8>, FsError> {
        self.inner.read(path).await
    }

    async fn read_versioned(&self, path: &WsPath) -> Result<(Vec<u8>, FileVersion), FsError> {
        self.inner.read_versioned(path).await
    }

    async fn write(&self, path: &WsPath, _bytes: &[u8], _mode: WriteMode) -> Result<(), FsError> {
        self.refuse(path)
    }

    async fn append(&self, path: &WsPath, _bytes: &[u8]) -> Result<(), FsError> {
        self.refuse(path)
    }

    async fn stat(&self, path: &WsPath) -> Result<FileInfo, FsError> {
        self.inner.stat(path).await
    }

    async fn list(&self, path: &WsPath) -> Result<Vec<FileInfo>, FsError> {
        self.inner.list(path).await
    }

    async fn glob(&self, base: &WsPath, pattern: &str, limit: usize) -> Result<Vec<FileInfo>, FsError> {
        self.inner.glob(base, pattern, limit).await
    }

    async fn grep(&self, base: &WsPath, options: &GrepOptions) -> Result<Vec<GrepMatch>, FsError> {
        self.inner.grep(base, options).await
    }

    async fn delete(&self, path: &WsPath) -> Result<(), FsError> {
        self.refuse(path)
    }

    async fn mkdir(&self, path: &WsPath) -> Result<(), FsError> {
        self.refuse(path)
    }

    async fn read_text(&self, path: &WsPath, offset: usize, limit: usize) -> Result<TextPage, FsError> {
        self.inner.read_text(path, offset, limit).await
    }

    async fn edit(
        &self,
        path: &WsPath,
        _old: &str,
        _new: &str,
        _replace_all: bool,
    ) -> Result<crate::edit::EditOutcome, FsError> {
        self.refuse(path)
    }

    fn spans_replicas(&self) -> bool {
        self.inner.spans_replicas()
    }

    fn shell(&self) -> Option<Arc<dyn Shell>> {
        None
    }

    fn scoped(&self, prefix: &WsPath) -> Option<Arc<dyn Filesystem>> {
        self.inner.scoped(prefix).map(|inner| self.wrap(inner))
    }

    fn fenced(&self, fence: &harness_store::KvFence) -> Option<Arc<dyn Filesystem>> {
        self.inner.fenced(fence).map(|inner| self.wrap(inner))
    }

    fn replicated(&self, dirs: &[WsPath]) -> Option<Arc<dyn Filesystem>> {
        self.inner.replicated(dirs).map(|inner| self.wrap(inner))
    }

    async fn exists(&self, path: &WsPath) -> Result<bool, FsError> {
        self.inner.exists(path).await
    }
}

impl CallWorkTree {
    /// Puts `ctx`'s work tree behind a [`ReadOnlyFs`] (refusing with `reason`); `false` (and
    /// `ctx` unchanged) when the call has no work tree of its own.
    pub fn read_only(ctx: &mut harness_core::RuntimeContext, reason: &str) -> bool {
        let Some(CallWorkTree(tree)) = ctx.get::<CallWorkTree>().cloned() else {
            return false;
        };
        ctx.insert(CallWorkTree(Arc::new(ReadOnlyFs::new(tree, reason))));
        true
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::ReadOnlyFs;
    use crate::filesystem::Filesystem;
    use crate::{CallWorkTree, FsError, LocalFs, WriteMode, WsPath};
    use std::sync::Arc;

    fn path(raw: &str) -> WsPath {
        WsPath::parse(raw).unwrap()
    }

    /// Reads pass through; every way of changing a file is refused naming the path and the
    /// reason, and the disk is unchanged.
    #[tokio::test]
    async fn reads_pass_and_every_change_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "hello\n").unwrap();
        let fs = ReadOnlyFs::new(Arc::new(LocalFs::new(dir.path()).unwrap()), "plan mode is active");
        assert_eq!(fs.read(&path("a.txt")).await.unwrap(), b"hello\n");
        assert_eq!(fs.list(&path("")).await.unwrap().len(), 1);
        assert!(fs.exists(&path("a.txt")).await.unwrap());
        let refusals = [
            fs.write(&path("a.txt"), b"x", WriteMode::Overwrite).await,
            fs.write(&path("new.txt"), b"x", WriteMode::CreateNew).await,
            fs.append(&path("a.txt"), b"x").await,
            fs.delete(&path("a.txt")).await,
            fs.mkdir(&path("d")).await,
            fs.edit(&path("a.txt"), "hello", "bye", false).await.map(|_| ()),
        ];
        for refusal in refusals {
            match refusal {
                Err(FsError::PermissionDenied { reason, .. }) => {
                    assert!(reason.contains("read-only") && reason.contains("plan mode"), "{reason}");
                }
                other => panic!("expected a refusal, got {other:?}"),
            }
        }
        assert!(fs.shell().is_none(), "a read-only filesystem offers no shell");
        let scoped = fs.scoped(&path("sub"));
        if let Some(scoped) = scoped {
            assert!(scoped.write(&path("x"), b"x", WriteMode::Overwrite).await.is_err());
        }
        assert_eq!(std::fs::read_to_string(dir.path().join("a.txt")).unwrap(), "hello\n");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[test]
    fn read_only_wraps_the_work_tree_only_when_there_is_one() {
        let dir = tempfile::tempdir().unwrap();
        let mut ctx = harness_core::RuntimeContext::for_user(harness_core::UserId::from_static("alice"));
        assert!(!CallWorkTree::read_only(&mut ctx, "plan mode"));
        assert!(ctx.get::<CallWorkTree>().is_none());
        ctx.insert(CallWorkTree(Arc::new(LocalFs::new(dir.path()).unwrap())));
        assert!(CallWorkTree::read_only(&mut ctx, "plan mode"));
        let CallWorkTree(tree) = ctx.get::<CallWorkTree>().unwrap();
        assert!(tree.describe().starts_with("read-only("), "{}", tree.describe());
    }
}
