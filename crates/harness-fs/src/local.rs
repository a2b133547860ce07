//! [`LocalFs`]: a directory on the host, symlink-safe and binary-safe, optionally with a shell.

use crate::error::FsError;
use crate::filesystem::{FileInfo, FileVersion, Filesystem, GrepMatch, GrepOptions, WriteMode};
use crate::jail::{Jail, Known, io_error};
use crate::path::WsPath;
use crate::search::{Collector, GrepPlan, SmallestPaths, compile_glob, finish_matches};
use crate::shell::{LocalShell, LocalShellConfig, Shell, ShellSettings};
use crate::text::{BINARY_SNIFF_LEN, Pager, TextPage};
use async_trait::async_trait;
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// Lock stripes serialising writers of the same file inside this process.
const LOCK_STRIPES: usize = 64;
/// Appends up to this size (without fsync) run on the caller's thread; see `append_inline`.
const INLINE_APPEND_BYTES: usize = 64 * 1024;

/// Options of a [`LocalFs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Options {
    respect_gitignore: bool,
    fsync: bool,
}

/// A directory on the host as a [`Filesystem`].
///
/// - **Rooted and symlink-safe.** Every path is resolved component by component, following
///   symlinks, and the real location must lie inside the root; a symlink (to a file or a
///   directory, dangling or not, at any depth) that leads outside is refused with
///   [`FsError::PermissionDenied`]. Files are opened with `O_NOFOLLOW`, so a symlink swapped in
///   after the check is refused rather than followed. (A process that can write the workspace —
///   e.g. the shell — could still swap an intermediate directory between the check and the
///   open; the shell already runs with the same rights, so this adds no new power.)
/// - **Binary-safe** and **atomic**: writes go to a temporary file in the same directory that
///   is then renamed over the target (create-only writes use a hard link, which fails if the
///   target appeared meanwhile); appends use `O_APPEND`. File permissions are kept on
///   overwrite.
/// - **Versions** are content hashes (SHA-256); whole-file writes are checked and applied
///   under a per-file lock of this process and an advisory lock (`flock`) on the file's
///   directory, so [`WriteMode::IfMatch`] is a compare-and-set across processes too.
/// - **No shell** unless built [`with_shell`](Self::with_shell).
///
/// Cheap to clone.
#[derive(Clone)]
pub struct LocalFs {
    jail: Arc<Jail>,
    locks: Arc<[Mutex<()>]>,
    options: Options,
    shell: Option<Arc<ShellSettings>>,
}

impl std::fmt::Debug for LocalFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalFs")
            .field("root", &self.jail.root())
            .field("shell", &self.shell.is_some())
            .finish_non_exhaustive()
    }
}

impl LocalFs {
    /// A filesystem rooted at `root`, which is created when missing. Blocking (it touches the
    /// disk once): call it while building, not on a hot path.
    ///
    /// # Errors
    /// [`FsError::Io`] when the root cannot be created or resolved.
    pub fn new(root: impl AsRef<Path>) -> Result<Self, FsError> {
        let base = canonical_root(root.as_ref())?;
        Ok(Self {
            jail: Arc::new(Jail::new(base)),
            locks: (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            options: Options {
                respect_gitignore: false,
                fsync: true,
            },
            shell: None,
        })
    }

    /// Adds a host shell (`sh -c`) running in this filesystem's root. Opt-in: without it,
    /// [`Filesystem::shell`] is `None` and no `execute` tool is offered. The allowed variables
    /// of this process's environment are copied now, once (see [`LocalShellConfig`]).
    #[must_use]
    pub fn with_shell(mut self, config: LocalShellConfig) -> Self {
        self.shell = Some(Arc::new(ShellSettings::capture(config)));
        self
    }

    /// Whether `glob` and `grep` skip what `.gitignore`, `.ignore` and `.git/info/exclude`
    /// exclude (also outside a git repository). Off by default: every file is visible.
    #[must_use]
    pub fn respect_gitignore(mut self, yes: bool) -> Self {
        self.options.respect_gitignore = yes;
        self
    }

    /// Whether writes are flushed to disk (`fsync`) before they are renamed into place. On by
    /// default; turn off for scratch data where speed matters more than surviving a power cut.
    #[must_use]
    pub fn fsync(mut self, yes: bool) -> Self {
        self.options.fsync = yes;
        self
    }

    /// The root directory on the host.
    pub fn root(&self) -> &Path {
        self.jail.root()
    }

    fn lock_for(&self, real: &Path) -> &Mutex<()> {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::hash::DefaultHasher::new();
        real.hash(&mut hasher);
        let index = usize::try_from(hasher.finish() % LOCK_STRIPES as u64).unwrap_or(0);
        &self.locks[index]
    }

    /// Runs blocking disk work off the async runtime.
    async fn blocking<T: Send + 'static>(
        &self,
        path: &WsPath,
        operation: &'static str,
        work: impl FnOnce(&LocalFs) -> Result<T, FsError> + Send + 'static,
    ) -> Result<T, FsError> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || work(&this))
            .await
            .map_err(|err| FsError::Io {
                path: path.clone(),
                operation,
                source: Box::new(err),
            })?
    }

    fn read_sync(&self, path: &WsPath) -> Result<Vec<u8>, FsError> {
        let real = self.jail.resolve(path)?;
        let mut file = open_read(&real, path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|err| io_error(err, path, "read"))?;
        Ok(bytes)
    }

    fn write_sync(&self, path: &WsPath, bytes: &[u8], mode: &WriteMode) -> Result<(), FsError> {
        if path.is_root() {
            return Err(FsError::IsDirectory { path: path.clone() });
        }
        let real = self.jail.resolve(path)?;
        let parent = real
            .parent()
            .ok_or_else(|| FsError::IsDirectory { path: path.clone() })?;
        std::fs::create_dir_all(parent).map_err(|err| parent_error(err, path))?;
        let _guard = self.lock_for(&real).lock().unwrap_or_else(PoisonError::into_inner);
        // Other processes writing this directory take the same advisory lock (on the
        // directory itself, so no lock files pile up): the version check and the rename of
        // a conditional write are atomic across processes too. Released when dropped.
        let _dir_lock = lock_directory(parent).map_err(|err| io_error(err, path, "write"))?;
        let existing = match std::fs::metadata(&real) {
            Ok(meta) if meta.is_dir() => return Err(FsError::IsDirectory { path: path.clone() }),
            Ok(meta) => Some(meta),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
            Err(err) => return Err(io_error(err, path, "write")),
        };
        match mode {
            WriteMode::CreateNew if existing.is_some() => return Err(FsError::AlreadyExists { path: path.clone() }),
            WriteMode::IfMatch(expected) => {
                let current = match existing {
                    Some(_) => Some(version_of(&self.read_sync(path)?)),
                    None => None,
                };
                if current.as_ref() != Some(expected) {
                    return Err(FsError::Conflict { path: path.clone() });
                }
            }
            WriteMode::CreateNew | WriteMode::Overwrite => {}
        }
        let temp = self.write_temp(parent, path, bytes, existing.as_ref())?;
        let placed = if *mode == WriteMode::CreateNew {
            // A hard link fails if the target appeared since the check: create-only stays
            // atomic even against other processes. Filesystems without hard links fall back
            // to a checked rename.
            match std::fs::hard_link(&temp, &real) {
                Ok(()) => std::fs::remove_file(&temp),
                Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => Err(err),
                Err(_) if std::fs::symlink_metadata(&real).is_err() => std::fs::rename(&temp, &real),
                Err(err) => Err(err),
            }
        } else {
            std::fs::rename(&temp, &real)
        };
        placed.map_err(|err| {
            let _ = std::fs::remove_file(&temp);
            io_error(err, path, "write")
        })
    }

    fn write_temp(
        &self,
        dir: &Path,
        path: &WsPath,
        bytes: &[u8],
        existing: Option<&std::fs::Metadata>,
    ) -> Result<PathBuf, FsError> {
        let temp = dir.join(format!(".{}.{}.tmp", path.file_name(), uuid::Uuid::new_v4().simple()));
        let result = (|| {
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&temp)?;
            file.write_all(bytes)?;
            if let Some(meta) = existing {
                file.set_permissions(meta.permissions())?;
            }
            if self.options.fsync {
                file.sync_data()?;
            }
            Ok(())
        })();
        match result {
            Ok(()) => Ok(temp),
            Err(err) => {
                let _ = std::fs::remove_file(&temp);
                Err(io_error(err, path, "write"))
            }
        }
    }

    fn append_sync(&self, path: &WsPath, bytes: &[u8]) -> Result<(), FsError> {
        if path.is_root() {
            return Err(FsError::IsDirectory { path: path.clone() });
        }
        let real = self.jail.resolve(path)?;
        let _guard = self.lock_for(&real).lock().unwrap_or_else(PoisonError::into_inner);
        append_locked(path, &real, bytes, self.options.fsync)
    }

    /// A small append without fsync, run on the caller's thread when its lock stripe is
    /// free: one `open` + `write` into the page cache costs microseconds, less than the
    /// hand-off to the blocking pool. `None` means "use the blocking pool".
    fn append_inline(&self, path: &WsPath, bytes: &[u8]) -> Option<Result<(), FsError>> {
        if self.options.fsync || bytes.len() > INLINE_APPEND_BYTES || path.is_root() {
            return None;
        }
        let real = match self.jail.resolve(path) {
            Ok(real) => real,
            Err(err) => return Some(Err(err)),
        };
        let _guard = match self.lock_for(&real).try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        Some(append_locked(path, &real, bytes, false))
    }

    fn stat_sync(&self, path: &WsPath) -> Result<FileInfo, FsError> {
        let (real, known) = self.jail.resolve_known(path)?;
        let meta = match known {
            // The walk already looked at the entry itself.
            Known::Found(meta) => meta,
            Known::Missing => return Err(FsError::NotFound { path: path.clone() }),
            Known::Unknown => std::fs::metadata(&real).map_err(|err| io_error(err, path, "stat"))?,
        };
        Ok(info(path.clone(), &meta))
    }

    fn list_sync(&self, path: &WsPath) -> Result<Vec<FileInfo>, FsError> {
        let real = self.jail.resolve(path)?;
        let entries = match std::fs::read_dir(&real) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => return Err(io_error(err, path, "list")),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|err| io_error(err, path, "list"))?;
            let Some(child) = entry.file_name().to_str().and_then(|name| path.join(name).ok()) else {
                continue; // names that are not UTF-8 cannot be addressed by a WsPath
            };
            if let Some(found) = self.entry_info(&child, &entry.path()) {
                out.push(found);
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// Metadata of a directory entry met while listing or walking; a symlink counts only when
    /// it resolves inside the root.
    fn entry_info(&self, path: &WsPath, real: &Path) -> Option<FileInfo> {
        let meta = std::fs::symlink_metadata(real).ok()?;
        if meta.file_type().is_symlink() {
            let target = self.jail.resolve(path).ok()?;
            return std::fs::metadata(target).ok().map(|meta| info(path.clone(), &meta));
        }
        Some(info(path.clone(), &meta))
    }

    fn walker(&self, real: &Path) -> ignore::Walk {
        let respect = self.options.respect_gitignore;
        ignore::WalkBuilder::new(real)
            .hidden(false)
            .ignore(respect)
            .git_ignore(respect)
            .git_exclude(respect)
            .git_global(false)
            .parents(false)
            .require_git(false)
            .follow_links(false)
            .sort_by_file_name(|a, b| a.cmp(b))
            .filter_entry(|entry| entry.file_name() != ".git")
            .build()
    }

    /// Files under `base` (as `(path from the root, path from base, metadata)`), visited in
    /// name order; `visit` returns `false` to stop.
    fn walk_files(
        &self,
        base: &WsPath,
        mut visit: impl FnMut(WsPath, WsPath, &std::fs::Metadata) -> bool,
    ) -> Result<(), FsError> {
        let real = self.jail.resolve(base)?;
        match std::fs::metadata(&real) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => return Err(FsError::NotDirectory { path: base.clone() }),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(err) => return Err(io_error(err, base, "walk")),
        }
        for entry in self.walker(&real) {
            let Ok(entry) = entry else { continue };
            let Some(file_type) = entry.file_type() else { continue };
            if file_type.is_dir() {
                continue;
            }
            let Some(relative) = entry
                .path()
                .strip_prefix(&real)
                .ok()
                .and_then(Path::to_str)
                .and_then(|rest| WsPath::parse(rest).ok())
            else {
                continue;
            };
            let path = base.join_path(&relative);
            let meta = if file_type.is_symlink() {
                match self
                    .jail
                    .resolve(&path)
                    .ok()
                    .and_then(|target| std::fs::metadata(target).ok())
                {
                    Some(meta) if meta.is_file() => meta,
                    _ => continue,
                }
            } else {
                match entry.metadata() {
                    Ok(meta) => meta,
                    Err(_) => continue,
                }
            };
            if !visit(path, relative, &meta) {
                break;
            }
        }
        Ok(())
    }

    fn glob_sync(&self, base: &WsPath, pattern: &str, limit: usize) -> Result<Vec<FileInfo>, FsError> {
        let matcher = compile_glob(pattern)?;
        let mut found = SmallestPaths::new(limit);
        self.walk_files(base, |path, relative, meta| {
            if matcher.is_match(relative.as_str()) {
                found.push(info(path, meta));
            }
            true
        })?;
        Ok(found.into_sorted())
    }

    fn grep_sync(&self, base: &WsPath, options: &GrepOptions) -> Result<Vec<GrepMatch>, FsError> {
        let plan = GrepPlan::new(options)?;
        let mut searcher = plan.searcher();
        let mut out = Vec::new();
        // A file named by `base` itself is searched directly.
        let real = self.jail.resolve(base)?;
        if std::fs::metadata(&real).is_ok_and(|meta| meta.is_file()) {
            let file = open_read(&real, base)?;
            let _ = searcher.search_file(
                &plan.matcher,
                &file,
                Collector::new(base.clone(), &mut out, plan.max_matches),
            );
            return Ok(out);
        }
        self.walk_files(base, |path, relative, _meta| {
            if !plan.filter.accepts(&relative) {
                return true;
            }
            let Ok(real) = self.jail.resolve(&path) else {
                return true;
            };
            let Ok(file) = open_read(&real, &path) else { return true };
            let collector = Collector::new(path, &mut out, plan.max_matches);
            // An unreadable file is skipped, like ripgrep does.
            let _ = searcher.search_file(&plan.matcher, &file, collector);
            out.len() < plan.max_matches
        })?;
        Ok(finish_matches(out, plan.max_matches))
    }

    fn delete_sync(&self, path: &WsPath) -> Result<(), FsError> {
        if path.is_root() {
            return Err(FsError::PermissionDenied {
                path: path.clone(),
                reason: "the root cannot be deleted".to_owned(),
            });
        }
        // The last component is not followed: deleting a symlink removes the link.
        let real = self.jail.resolve_no_follow(path)?;
        let meta = match std::fs::symlink_metadata(&real) {
            Ok(meta) => meta,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(err) => return Err(io_error(err, path, "delete")),
        };
        let _guard = self.lock_for(&real).lock().unwrap_or_else(PoisonError::into_inner);
        let removed = if meta.is_dir() {
            std::fs::remove_dir_all(&real)
        } else {
            std::fs::remove_file(&real)
        };
        match removed {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(io_error(err, path, "delete")),
            _ => Ok(()),
        }
    }

    fn mkdir_sync(&self, path: &WsPath) -> Result<(), FsError> {
        let real = self.jail.resolve(path)?;
        match std::fs::create_dir_all(&real) {
            Ok(()) => Ok(()),
            Err(err)
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::AlreadyExists | std::io::ErrorKind::NotADirectory
                ) =>
            {
                Err(FsError::NotDirectory { path: path.clone() })
            }
            Err(err) => Err(io_error(err, path, "mkdir")),
        }
    }

    fn read_text_sync(&self, path: &WsPath, offset: usize, limit: usize) -> Result<TextPage, FsError> {
        let real = self.jail.resolve(path)?;
        let mut file = open_read(&real, path)?;
        let size = file.metadata().map(|meta| meta.len()).unwrap_or(0);
        let mut pager = Pager::new(offset, limit);
        let mut buffer = vec![0u8; 64 * 1024];
        let mut sniffed = 0usize;
        loop {
            let read = file.read(&mut buffer).map_err(|err| io_error(err, path, "read"))?;
            if read == 0 {
                break;
            }
            if sniffed < BINARY_SNIFF_LEN {
                let look = read.min(BINARY_SNIFF_LEN - sniffed);
                if buffer[..look].contains(&0) {
                    return Err(FsError::Binary {
                        path: path.clone(),
                        size,
                    });
                }
                sniffed += look;
            }
            pager.feed(&buffer[..read]);
        }
        Ok(pager.finish())
    }
}

/// Appends to `real` (the caller holds its lock stripe), creating the parent only when the
/// open says it is missing (appends go to logs that usually exist).
fn append_locked(path: &WsPath, real: &Path, bytes: &[u8], fsync: bool) -> Result<(), FsError> {
    let open = || {
        OpenOptions::new()
            .append(true)
            .create(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(real)
    };
    let mut file = match open() {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = real.parent() {
                std::fs::create_dir_all(parent).map_err(|err| parent_error(err, path))?;
            }
            open().map_err(|err| io_error(err, path, "append"))?
        }
        Err(err) => return Err(io_error(err, path, "append")),
    };
    file.write_all(bytes).map_err(|err| io_error(err, path, "append"))?;
    if fsync {
        file.sync_data().map_err(|err| io_error(err, path, "append"))?;
    }
    Ok(())
}

/// Opens `dir` and takes an exclusive advisory lock on it, released when the handle drops.
fn lock_directory(dir: &Path) -> std::io::Result<File> {
    let handle = File::open(dir)?;
    handle.lock()?;
    Ok(handle)
}

fn canonical_root(root: &Path) -> Result<PathBuf, FsError> {
    let io = |err: std::io::Error| FsError::Io {
        path: WsPath::root(),
        operation: "open root",
        source: Box::new(err),
    };
    std::fs::create_dir_all(root).map_err(io)?;
    std::fs::canonicalize(root).map_err(io)
}

/// Opens a regular file for reading without following a final symlink.
fn open_read(real: &Path, path: &WsPath) -> Result<File, FsError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(real)
        .map_err(|err| io_error(err, path, "read"))?;
    let meta = file.metadata().map_err(|err| io_error(err, path, "read"))?;
    if meta.is_dir() {
        return Err(FsError::IsDirectory { path: path.clone() });
    }
    Ok(file)
}

/// A parent directory could not be created: usually a file is in the way.
fn parent_error(err: std::io::Error, path: &WsPath) -> FsError {
    match err.kind() {
        std::io::ErrorKind::AlreadyExists | std::io::ErrorKind::NotADirectory => FsError::NotDirectory {
            path: path.parent().unwrap_or_default(),
        },
        _ => io_error(err, path, "create parent directories"),
    }
}

fn info(path: WsPath, meta: &std::fs::Metadata) -> FileInfo {
    FileInfo {
        path,
        is_dir: meta.is_dir(),
        size: if meta.is_dir() { 0 } else { meta.len() },
        modified: meta
            .modified()
            .ok()
            .and_then(|time| jiff::Timestamp::try_from(time).ok()),
    }
}

fn version_of(bytes: &[u8]) -> FileVersion {
    let digest = Sha256::digest(bytes);
    FileVersion(format!("sha256:{}", hex::encode(&digest[..16])))
}

#[async_trait]
impl Filesystem for LocalFs {
    fn describe(&self) -> String {
        format!("local:{}", self.jail.root().display())
    }

    async fn read(&self, path: &WsPath) -> Result<Vec<u8>, FsError> {
        let owned = path.clone();
        self.blocking(path, "read", move |fs| fs.read_sync(&owned)).await
    }

    async fn read_versioned(&self, path: &WsPath) -> Result<(Vec<u8>, FileVersion), FsError> {
        let owned = path.clone();
        self.blocking(path, "read", move |fs| {
            let bytes = fs.read_sync(&owned)?;
            let version = version_of(&bytes);
            Ok((bytes, version))
        })
        .await
    }

    async fn write(&self, path: &WsPath, bytes: &[u8], mode: WriteMode) -> Result<(), FsError> {
        let owned = path.clone();
        let bytes = bytes.to_vec();
        self.blocking(path, "write", move |fs| fs.write_sync(&owned, &bytes, &mode))
            .await
    }

    async fn append(&self, path: &WsPath, bytes: &[u8]) -> Result<(), FsError> {
        if let Some(done) = self.append_inline(path, bytes) {
            return done;
        }
        let owned = path.clone();
        let bytes = bytes.to_vec();
        self.blocking(path, "append", move |fs| fs.append_sync(&owned, &bytes))
            .await
    }

    async fn stat(&self, path: &WsPath) -> Result<FileInfo, FsError> {
        // A metadata lookup (a few path lookups and one statx, microseconds on a local disk)
        // runs on the caller's thread: the hand-off to the blocking pool costs more than the
        // call, and prompts check several files per step.
        self.stat_sync(path)
    }

    async fn list(&self, path: &WsPath) -> Result<Vec<FileInfo>, FsError> {
        let owned = path.clone();
        self.blocking(path, "list", move |fs| fs.list_sync(&owned)).await
    }

    async fn glob(&self, base: &WsPath, pattern: &str, limit: usize) -> Result<Vec<FileInfo>, FsError> {
        let owned = base.clone();
        let pattern = pattern.to_owned();
        self.blocking(base, "glob", move |fs| fs.glob_sync(&owned, &pattern, limit))
            .await
    }

    async fn grep(&self, base: &WsPath, options: &GrepOptions) -> Result<Vec<GrepMatch>, FsError> {
        let owned = base.clone();
        let options = options.clone();
        self.blocking(base, "grep", move |fs| fs.grep_sync(&owned, &options))
            .await
    }

    async fn delete(&self, path: &WsPath) -> Result<(), FsError> {
        let owned = path.clone();
        self.blocking(path, "delete", move |fs| fs.delete_sync(&owned)).await
    }

    async fn mkdir(&self, path: &WsPath) -> Result<(), FsError> {
        let owned = path.clone();
        self.blocking(path, "mkdir", move |fs| fs.mkdir_sync(&owned)).await
    }

    async fn read_text(&self, path: &WsPath, offset: usize, limit: usize) -> Result<TextPage, FsError> {
        let owned = path.clone();
        self.blocking(path, "read", move |fs| fs.read_text_sync(&owned, offset, limit))
            .await
    }

    fn shell(&self) -> Option<Arc<dyn Shell>> {
        let settings = self.shell.as_ref()?;
        Some(Arc::new(LocalShell::from_parts(
            Arc::clone(&self.jail),
            Arc::clone(settings),
        )))
    }

    fn scoped(&self, prefix: &WsPath) -> Option<Arc<dyn Filesystem>> {
        Some(Arc::new(Self {
            jail: Arc::new(self.jail.narrowed(prefix)),
            locks: Arc::clone(&self.locks),
            options: self.options,
            shell: self.shell.clone(),
        }))
    }
}
