//! [`FileLease`]: the session lease for several processes on one host.

use super::local::{LocalHold, LocalLease};
use async_trait::async_trait;
use harness_core::{CancellationToken, LeaseError, LeaseGuard, LeaseKey, LeaseRelease, SessionLease};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The longest pause between two attempts to take a lock file another process holds.
const MAX_POLL: Duration = Duration::from_millis(50);

/// [`LocalLease`] inside the process plus an exclusive advisory lock (`flock`) on a lock file
/// per key under a directory (the harness uses `<workspace>/.harness/locks/`), so processes
/// sharing the directory serialise their turns too. The OS drops the lock of a process that
/// dies, so a crashed holder never blocks a session.
///
/// Lock files are named by the SHA-256 of the [`LeaseKey`] under 256 fan-out directories
/// (`ab/ab12….lock`): any two keys get distinct files (`v1`, `v1.2`, `v1.3`, `..hidden` all
/// work), whatever characters the ids contain. A holder deletes its lock file before it
/// unlocks it, and whoever takes a lock checks that the file it locked is still the one at
/// the path (else it tries again), so only the files of held leases exist and none pile up
/// (a waiter only ever creates the file it then locks; a process killed while holding leaves
/// its file, which the next holder of that key deletes).
/// Waiting polls (2 ms doubling to 50 ms) so no thread blocks; it honours cancellation.
#[derive(Debug, Clone)]
pub struct FileLease {
    local: LocalLease,
    dir: PathBuf,
}

impl FileLease {
    /// Lock files under `dir` (created when first needed).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            local: LocalLease::default(),
            dir: dir.into(),
        }
    }

    /// The lock directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The lock file of `key`.
    pub fn lock_path(&self, key: &LeaseKey) -> PathBuf {
        let digest = Sha256::digest(key.as_str().as_bytes());
        let name: String = digest.iter().take(16).map(|byte| format!("{byte:02x}")).collect();
        self.dir.join(&name[..2]).join(format!("{name}.lock"))
    }
}

/// A held lock file. Release deletes the file, then unlocks it (by closing it).
struct FileHold {
    path: PathBuf,
    file: Option<File>,
    _local: LocalHold,
}

impl FileHold {
    fn unlock(&mut self) {
        if let Some(file) = self.file.take() {
            // Deleted while still locked: a process waiting on this file notices that it is
            // no longer at the path once it gets the lock, and retries on a fresh file.
            if let Err(err) = std::fs::remove_file(&self.path) {
                tracing::warn!(path = %self.path.display(), error = %err, "lock file not removed");
            }
            drop(file);
        }
    }
}

impl Drop for FileHold {
    fn drop(&mut self) {
        self.unlock();
    }
}

#[async_trait]
impl LeaseRelease for FileHold {
    async fn release(mut self: Box<Self>) {
        self.unlock();
    }

    fn release_now(mut self: Box<Self>) {
        self.unlock();
    }
}

fn open(path: &Path) -> std::io::Result<File> {
    let open = || {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
    };
    match open() {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            open()
        }
        other => other,
    }
}

/// Whether `file` (locked) is still the file at `path`.
fn still_current(file: &File, path: &Path) -> std::io::Result<bool> {
    let held = file.metadata()?;
    match std::fs::metadata(path) {
        Ok(current) => Ok(current.dev() == held.dev() && current.ino() == held.ino()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(err) => Err(err),
    }
}

async fn lock_file(path: &Path, cancel: &CancellationToken) -> Result<File, LeaseError> {
    let backend = |err: std::io::Error| LeaseError::Backend(Box::new(err));
    let mut wait = Duration::from_millis(2);
    let mut file = open(path).map_err(backend)?;
    loop {
        match file.try_lock() {
            Ok(()) => {
                if still_current(&file, path).map_err(backend)? {
                    return Ok(file);
                }
                // The previous holder deleted it: lock the file now at the path.
                file = open(path).map_err(backend)?;
                continue;
            }
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(err)) => return Err(backend(err)),
        }
        tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(LeaseError::Cancelled),
            () = tokio::time::sleep(wait) => {}
        }
        wait = (wait * 2).min(MAX_POLL);
    }
}

#[async_trait]
impl SessionLease for FileLease {
    async fn acquire(&self, key: &LeaseKey, cancel: &CancellationToken) -> Result<LeaseGuard, LeaseError> {
        let local = self.local.hold(key, cancel).await?;
        let path = self.lock_path(key);
        let file = lock_file(&path, cancel).await?;
        let hold = FileHold {
            path,
            file: Some(file),
            _local: local,
        };
        Ok(LeaseGuard::new(None, CancellationToken::new(), Box::new(hold)))
    }
}
