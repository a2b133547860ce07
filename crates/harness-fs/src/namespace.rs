//! [`IsolationScope`]: how runtime data is partitioned (a call's [`CallScope`](crate::CallScope)
//! derives its namespace from it); [`Namespaced`]: a filesystem seen from a fixed prefix.

use crate::error::FsError;
use crate::filesystem::{FileInfo, FileVersion, Filesystem, GrepMatch, GrepOptions, WriteMode};
use crate::path::WsPath;
use crate::shell::{NamespacedShell, Shell};
use crate::text::TextPage;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// How runtime data (sessions, memory, tool-result files) is partitioned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IsolationScope {
    /// One namespace per session id.
    Session,
    /// One namespace per user id (default; a call without a user id runs as user `default`).
    #[default]
    User,
    /// One namespace for the whole agent (all users share).
    Agent,
    /// One namespace for everything.
    Global,
}

/// Workspace entries that may not be used as a namespace name, so a user called `memory`
/// can never land inside the shared `memory/` directory. Every entry the harness reads as
/// configuration, injects into a prompt or keeps as state is here (the test
/// `every_file_the_harness_reads_is_protected` in the `harness` crate keeps it in step).
pub const RESERVED_NAMES: &[&str] = &[
    "AGENTS.md",
    "MEMORY.md",
    "memory",
    "knowledge",
    "skills",
    "subagents",
    "agents",
    "plans",
    "tools.json",
    "harness.toml",
    ".mcp.json",
    ".harness",
    ".skills-cache",
    "large_tool_results",
    "rules",
    "users",
    "sessions",
    "shared",
    "global",
];

/// A filesystem seen from a fixed prefix of another: path `x` is `prefix/x` inside, and results
/// come back without the prefix.
///
/// No path can leave the prefix: a [`WsPath`] has no `..` and a leading `/` means the
/// namespace's own root, so `/bob/secret` from alice's view is `alice/bob/secret`. When the
/// inner filesystem can scope itself ([`Filesystem::scoped`]) that is used instead, which also
/// confines symlinks on the local disk to the namespace (a link from `alice/` to `bob/` is
/// refused).
#[derive(Clone)]
pub struct Namespaced {
    inner: Arc<dyn Filesystem>,
    prefix: WsPath,
}

impl std::fmt::Debug for Namespaced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Namespaced")
            .field("inner", &self.inner.describe())
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl Namespaced {
    /// `inner` seen from `prefix`.
    pub fn new(inner: Arc<dyn Filesystem>, prefix: WsPath) -> Self {
        match inner.scoped(&prefix) {
            Some(scoped) => Self {
                inner: scoped,
                prefix: WsPath::root(),
            },
            None => Self { inner, prefix },
        }
    }

    fn inside(&self, path: &WsPath) -> WsPath {
        self.prefix.join_path(path)
    }

    fn outside(&self, path: &WsPath) -> WsPath {
        path.strip_prefix(&self.prefix).unwrap_or_default()
    }

    fn error(&self, err: FsError) -> FsError {
        err.map_path(|path| self.outside(path))
    }

    fn infos(&self, infos: Vec<FileInfo>) -> Vec<FileInfo> {
        infos
            .into_iter()
            .map(|info| FileInfo {
                path: self.outside(&info.path),
                ..info
            })
            .collect()
    }
}

#[async_trait]
impl Filesystem for Namespaced {
    fn describe(&self) -> String {
        if self.prefix.is_root() {
            self.inner.describe()
        } else {
            format!("{}/{}", self.inner.describe(), self.prefix)
        }
    }

    async fn read(&self, path: &WsPath) -> Result<Vec<u8>, FsError> {
        self.inner.read(&self.inside(path)).await.map_err(|err| self.error(err))
    }

    async fn read_versioned(&self, path: &WsPath) -> Result<(Vec<u8>, FileVersion), FsError> {
        self.inner
            .read_versioned(&self.inside(path))
            .await
            .map_err(|err| self.error(err))
    }

    async fn write(&self, path: &WsPath, bytes: &[u8], mode: WriteMode) -> Result<(), FsError> {
        self.inner
            .write(&self.inside(path), bytes, mode)
            .await
            .map_err(|err| self.error(err))
    }

    async fn append(&self, path: &WsPath, bytes: &[u8]) -> Result<(), FsError> {
        self.inner
            .append(&self.inside(path), bytes)
            .await
            .map_err(|err| self.error(err))
    }

    async fn stat(&self, path: &WsPath) -> Result<FileInfo, FsError> {
        let info = self
            .inner
            .stat(&self.inside(path))
            .await
            .map_err(|err| self.error(err))?;
        Ok(FileInfo {
            path: path.clone(),
            ..info
        })
    }

    async fn list(&self, path: &WsPath) -> Result<Vec<FileInfo>, FsError> {
        let infos = self
            .inner
            .list(&self.inside(path))
            .await
            .map_err(|err| self.error(err))?;
        Ok(self.infos(infos))
    }

    async fn glob(&self, base: &WsPath, pattern: &str, limit: usize) -> Result<Vec<FileInfo>, FsError> {
        let infos = self
            .inner
            .glob(&self.inside(base), pattern, limit)
            .await
            .map_err(|err| self.error(err))?;
        Ok(self.infos(infos))
    }

    async fn grep(&self, base: &WsPath, options: &GrepOptions) -> Result<Vec<GrepMatch>, FsError> {
        let matches = self
            .inner
            .grep(&self.inside(base), options)
            .await
            .map_err(|err| self.error(err))?;
        Ok(matches
            .into_iter()
            .map(|found| GrepMatch {
                path: self.outside(&found.path),
                ..found
            })
            .collect())
    }

    async fn delete(&self, path: &WsPath) -> Result<(), FsError> {
        if path.is_root() {
            return Err(FsError::PermissionDenied {
                path: path.clone(),
                reason: "the root cannot be deleted".to_owned(),
            });
        }
        self.inner
            .delete(&self.inside(path))
            .await
            .map_err(|err| self.error(err))
    }

    async fn mkdir(&self, path: &WsPath) -> Result<(), FsError> {
        self.inner
            .mkdir(&self.inside(path))
            .await
            .map_err(|err| self.error(err))
    }

    async fn exists(&self, path: &WsPath) -> Result<bool, FsError> {
        self.inner
            .exists(&self.inside(path))
            .await
            .map_err(|err| self.error(err))
    }

    async fn read_text(&self, path: &WsPath, offset: usize, limit: usize) -> Result<TextPage, FsError> {
        self.inner
            .read_text(&self.inside(path), offset, limit)
            .await
            .map_err(|err| self.error(err))
    }

    fn spans_replicas(&self) -> bool {
        self.inner.spans_replicas()
    }

    fn shell(&self) -> Option<Arc<dyn Shell>> {
        let shell = self.inner.shell()?;
        if self.prefix.is_root() {
            return Some(shell);
        }
        Some(Arc::new(NamespacedShell {
            inner: shell,
            prefix: self.prefix.clone(),
        }))
    }

    fn fenced(&self, fence: &harness_store::KvFence) -> Option<Arc<dyn Filesystem>> {
        let inner = self.inner.fenced(fence)?;
        Some(Arc::new(Self {
            inner,
            prefix: self.prefix.clone(),
        }))
    }

    fn replicated(&self, dirs: &[WsPath]) -> Option<Arc<dyn Filesystem>> {
        let inside: Vec<WsPath> = dirs.iter().map(|dir| self.inside(dir)).collect();
        let inner = self.inner.replicated(&inside)?;
        Some(Arc::new(Self {
            inner,
            prefix: self.prefix.clone(),
        }))
    }

    fn scoped(&self, prefix: &WsPath) -> Option<Arc<dyn Filesystem>> {
        Some(Arc::new(Self::new(
            Arc::clone(&self.inner),
            self.prefix.join_path(prefix),
        )))
    }
}
