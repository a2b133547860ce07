//! [`KvFs`]: files as items of a [`KvStore`], for state shared by many replicas.

use crate::error::FsError;
use crate::filesystem::{FileInfo, FileVersion, Filesystem, GrepMatch, GrepOptions, WriteMode};
use crate::path::WsPath;
use crate::search::{GrepPlan, SmallestPaths, compile_glob, finish_matches, grep_bytes};
use async_trait::async_trait;
use harness_store::{KvEntry, KvFence, KvStore, StoreError};
use std::sync::Arc;

/// Keys fetched per `list` page.
const PAGE: usize = 1000;
/// Most keys a single listing, glob or grep walks before it stops.
const MAX_SCAN: usize = 200_000;

/// Files as items of a [`KvStore`] (in memory, Redis, …).
///
/// - A file `a/b.md` is the item `<namespace>/a/b.md`; the key is always derived from the
///   normalised [`WsPath`], so `/a/b.md`, `a//b.md` and `./a/b.md` are the same file.
/// - Values are the file's bytes, unchanged (binary-safe).
/// - Directories are implicit (a prefix of some file) or explicit (a marker item
///   `<namespace>/dir/` written by [`mkdir`](Filesystem::mkdir)).
/// - Versions are the store's: [`WriteMode::CreateNew`] is an atomic create-only put and
///   [`WriteMode::IfMatch`] an atomic compare-and-set, so concurrent editors on different
///   replicas never lose an update.
/// - No shell.
///
/// The file/directory rules (a file cannot sit where a directory is, or below a file) are
/// checked before each write; two replicas racing to create `a` as a file and `a/b` at the
/// same moment can both succeed, leaving `a` shadowed by the directory.
#[derive(Clone)]
pub struct KvFs {
    store: Arc<dyn KvStore>,
    /// Empty, or a normalised path: the key prefix is `namespace/`.
    namespace: WsPath,
    /// When set, every put, append and delete is checked against this fence
    /// ([`Filesystem::fenced`]).
    fence: Option<KvFence>,
}

impl std::fmt::Debug for KvFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvFs")
            .field("store", &self.store.describe())
            .field("namespace", &self.namespace)
            .field("fence", &self.fence)
            .finish()
    }
}

fn store_error(path: &WsPath, operation: &'static str, err: StoreError) -> FsError {
    FsError::Io {
        path: path.clone(),
        operation,
        source: Box::new(err),
    }
}

impl KvFs {
    /// Files of `store` under the key prefix `namespace` (e.g. `fs/agents/main/users/alice`;
    /// empty for the whole store).
    pub fn new(store: Arc<dyn KvStore>, namespace: WsPath) -> Self {
        Self {
            store,
            namespace,
            fence: None,
        }
    }

    async fn put(&self, key: &str, bytes: &[u8], expected: Option<u64>) -> Result<u64, StoreError> {
        match &self.fence {
            Some(fence) => self.store.put_fenced(key, bytes, expected, fence).await,
            None => self.store.put(key, bytes, expected).await,
        }
    }

    async fn append_bytes(&self, key: &str, bytes: &[u8]) -> Result<u64, StoreError> {
        match &self.fence {
            Some(fence) => self.store.append_fenced(key, bytes, fence).await,
            None => self.store.append(key, bytes).await,
        }
    }

    async fn remove(&self, key: &str) -> Result<bool, StoreError> {
        match &self.fence {
            Some(fence) => self.store.delete_fenced(key, fence).await,
            None => self.store.delete(key).await,
        }
    }

    fn key(&self, path: &WsPath) -> String {
        self.namespace.join_path(path).as_str().to_owned()
    }

    /// The key prefix of everything below `path` (`""` for the whole store).
    fn dir_prefix(&self, path: &WsPath) -> String {
        let key = self.key(path);
        if key.is_empty() { key } else { key + "/" }
    }

    /// The path of an item key, when the key is a file under the namespace.
    fn path_of(&self, key: &str) -> Option<WsPath> {
        if key.ends_with('/') {
            return None; // a directory marker
        }
        let rest = if self.namespace.is_root() {
            key
        } else {
            key.strip_prefix(self.namespace.as_str())?.strip_prefix('/')?
        };
        WsPath::parse(rest).ok()
    }

    /// Every item under `path`, in key order, stopping after [`MAX_SCAN`] or when `visit`
    /// returns `false`.
    async fn scan(
        &self,
        path: &WsPath,
        operation: &'static str,
        mut visit: impl FnMut(KvEntry) -> bool + Send,
    ) -> Result<(), FsError> {
        let prefix = self.dir_prefix(path);
        let mut after: Option<String> = None;
        let mut seen = 0;
        loop {
            let page = self
                .store
                .list(&prefix, after.as_deref(), PAGE)
                .await
                .map_err(|err| store_error(path, operation, err))?;
            for entry in page.entries {
                seen += 1;
                if !visit(entry) || seen >= MAX_SCAN {
                    return Ok(());
                }
            }
            match page.next_after {
                Some(next) => after = Some(next),
                None => return Ok(()),
            }
        }
    }

    /// Whether anything (a file or a marker) lies below `path`.
    async fn is_dir(&self, path: &WsPath) -> Result<bool, FsError> {
        if path.is_root() {
            return Ok(true);
        }
        let page = self
            .store
            .list(&self.dir_prefix(path), None, 1)
            .await
            .map_err(|err| store_error(path, "stat", err))?;
        Ok(!page.entries.is_empty())
    }

    async fn head(&self, path: &WsPath, operation: &'static str) -> Result<Option<KvEntry>, FsError> {
        if path.is_root() {
            return Ok(None);
        }
        self.store
            .head(&self.key(path))
            .await
            .map_err(|err| store_error(path, operation, err))
    }

    /// Refuses a write of a file at `path` when a directory is there or a parent is a file.
    /// An existing file passed these checks when it was created, so it costs one lookup.
    async fn check_file_slot(&self, path: &WsPath) -> Result<(), FsError> {
        if !path.is_root() && self.head(path, "write").await?.is_some() {
            return Ok(());
        }
        if path.is_root() || self.is_dir(path).await? {
            return Err(FsError::IsDirectory { path: path.clone() });
        }
        let mut parent = path.parent();
        while let Some(dir) = parent {
            if dir.is_root() {
                break;
            }
            if self.head(&dir, "write").await?.is_some() {
                return Err(FsError::NotDirectory { path: dir });
            }
            parent = dir.parent();
        }
        Ok(())
    }

    async fn missing(&self, path: &WsPath) -> FsError {
        match self.is_dir(path).await {
            Ok(true) => FsError::IsDirectory { path: path.clone() },
            Ok(false) => FsError::NotFound { path: path.clone() },
            Err(err) => err,
        }
    }
}

fn info_of(path: WsPath, entry: &KvEntry) -> FileInfo {
    FileInfo {
        path,
        is_dir: false,
        size: entry.size,
        modified: jiff::Timestamp::from_millisecond(entry.modified_ms).ok(),
    }
}

fn dir_info(path: WsPath) -> FileInfo {
    FileInfo {
        path,
        is_dir: true,
        size: 0,
        modified: None,
    }
}

#[async_trait]
impl Filesystem for KvFs {
    fn describe(&self) -> String {
        format!("kv:{}/{}", self.store.describe(), self.namespace)
    }

    fn spans_replicas(&self) -> bool {
        self.store.is_shared()
    }

    async fn read(&self, path: &WsPath) -> Result<Vec<u8>, FsError> {
        Ok(self.read_versioned(path).await?.0)
    }

    async fn read_versioned(&self, path: &WsPath) -> Result<(Vec<u8>, FileVersion), FsError> {
        if path.is_root() {
            return Err(FsError::IsDirectory { path: path.clone() });
        }
        match self.store.get(&self.key(path)).await {
            Ok(Some(item)) => Ok((item.value, FileVersion(item.version.to_string()))),
            Ok(None) => Err(self.missing(path).await),
            Err(err) => Err(store_error(path, "read", err)),
        }
    }

    async fn write(&self, path: &WsPath, bytes: &[u8], mode: WriteMode) -> Result<(), FsError> {
        self.check_file_slot(path).await?;
        let expected = match &mode {
            WriteMode::CreateNew => Some(0),
            WriteMode::Overwrite => None,
            WriteMode::IfMatch(version) => match version.0.parse() {
                Ok(version) => Some(version),
                Err(_) => return Err(FsError::Conflict { path: path.clone() }),
            },
        };
        match self.put(&self.key(path), bytes, expected).await {
            Ok(_) => Ok(()),
            Err(StoreError::Conflict { .. }) if mode == WriteMode::CreateNew => {
                Err(FsError::AlreadyExists { path: path.clone() })
            }
            Err(StoreError::Conflict { .. }) => Err(FsError::Conflict { path: path.clone() }),
            Err(err) => Err(store_error(path, "write", err)),
        }
    }

    async fn append(&self, path: &WsPath, bytes: &[u8]) -> Result<(), FsError> {
        self.check_file_slot(path).await?;
        self.append_bytes(&self.key(path), bytes)
            .await
            .map(|_| ())
            .map_err(|err| store_error(path, "append", err))
    }

    async fn stat(&self, path: &WsPath) -> Result<FileInfo, FsError> {
        if let Some(entry) = self.head(path, "stat").await? {
            return Ok(info_of(path.clone(), &entry));
        }
        if self.is_dir(path).await? {
            return Ok(dir_info(path.clone()));
        }
        Err(FsError::NotFound { path: path.clone() })
    }

    async fn list(&self, path: &WsPath) -> Result<Vec<FileInfo>, FsError> {
        if self.head(path, "list").await?.is_some() {
            return Err(FsError::NotDirectory { path: path.clone() });
        }
        let prefix = self.dir_prefix(path);
        let mut out: Vec<FileInfo> = Vec::new();
        self.scan(path, "list", |entry| {
            let rest = &entry.key[prefix.len()..];
            let (name, is_dir) = match rest.split_once('/') {
                Some((name, _)) => (name, true),
                None => (rest, false),
            };
            let Ok(child) = path.join(name) else { return true };
            if child == *path {
                return true; // this directory's own marker
            }
            let duplicate = out.last().is_some_and(|last| last.path == child);
            if !duplicate {
                out.push(if is_dir {
                    dir_info(child)
                } else {
                    info_of(child, &entry)
                });
            }
            true
        })
        .await?;
        out.sort_by(|a, b| a.path.cmp(&b.path));
        out.dedup_by(|a, b| a.path == b.path);
        Ok(out)
    }

    async fn glob(&self, base: &WsPath, pattern: &str, limit: usize) -> Result<Vec<FileInfo>, FsError> {
        let matcher = compile_glob(pattern)?;
        if self.head(base, "glob").await?.is_some() {
            return Err(FsError::NotDirectory { path: base.clone() });
        }
        let mut found = SmallestPaths::new(limit);
        self.scan(base, "glob", |entry| {
            if let Some(path) = self.path_of(&entry.key)
                && let Some(relative) = path.strip_prefix(base)
                && matcher.is_match(relative.as_str())
            {
                found.push(info_of(path, &entry));
            }
            true
        })
        .await?;
        Ok(found.into_sorted())
    }

    async fn grep(&self, base: &WsPath, options: &GrepOptions) -> Result<Vec<GrepMatch>, FsError> {
        let plan = GrepPlan::new(options)?;
        let mut out = Vec::new();
        // `base` itself may be a file.
        if let Some(_entry) = self.head(base, "grep").await? {
            let bytes = self.read(base).await?;
            grep_bytes(&plan, base.clone(), &bytes, &mut out);
            return Ok(out);
        }
        let mut candidates = Vec::new();
        self.scan(base, "grep", |entry| {
            if let Some(path) = self.path_of(&entry.key)
                && path
                    .strip_prefix(base)
                    .is_some_and(|relative| plan.filter.accepts(&relative))
            {
                candidates.push(path);
            }
            true
        })
        .await?;
        for path in candidates {
            if out.len() >= plan.max_matches {
                break;
            }
            // A file deleted since the scan is simply skipped.
            if let Ok(Some(item)) = self.store.get(&self.key(&path)).await {
                grep_bytes(&plan, path, &item.value, &mut out);
            }
        }
        Ok(finish_matches(out, plan.max_matches))
    }

    async fn delete(&self, path: &WsPath) -> Result<(), FsError> {
        if path.is_root() {
            return Err(FsError::PermissionDenied {
                path: path.clone(),
                reason: "the root cannot be deleted".to_owned(),
            });
        }
        self.remove(&self.key(path))
            .await
            .map_err(|err| store_error(path, "delete", err))?;
        let mut keys = Vec::new();
        self.scan(path, "delete", |entry| {
            keys.push(entry.key);
            true
        })
        .await?;
        for key in keys {
            self.remove(&key)
                .await
                .map_err(|err| store_error(path, "delete", err))?;
        }
        Ok(())
    }

    async fn mkdir(&self, path: &WsPath) -> Result<(), FsError> {
        if path.is_root() {
            return Ok(());
        }
        if self.head(path, "mkdir").await?.is_some() {
            return Err(FsError::NotDirectory { path: path.clone() });
        }
        let mut parent = path.parent();
        while let Some(dir) = parent {
            if dir.is_root() {
                break;
            }
            if self.head(&dir, "mkdir").await?.is_some() {
                return Err(FsError::NotDirectory { path: dir });
            }
            parent = dir.parent();
        }
        self.put(&self.dir_prefix(path), b"", None)
            .await
            .map(|_| ())
            .map_err(|err| store_error(path, "mkdir", err))
    }

    async fn exists(&self, path: &WsPath) -> Result<bool, FsError> {
        Ok(self.head(path, "stat").await?.is_some() || self.is_dir(path).await?)
    }

    fn scoped(&self, prefix: &WsPath) -> Option<Arc<dyn Filesystem>> {
        Some(Arc::new(Self {
            store: Arc::clone(&self.store),
            namespace: self.namespace.join_path(prefix),
            fence: self.fence.clone(),
        }))
    }

    fn fenced(&self, fence: &KvFence) -> Option<Arc<dyn Filesystem>> {
        Some(Arc::new(Self {
            store: Arc::clone(&self.store),
            namespace: self.namespace.clone(),
            fence: Some(fence.clone()),
        }))
    }
}
