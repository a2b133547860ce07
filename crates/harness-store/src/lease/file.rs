//! [`FileLease`]: the session lease for several processes on one host.

use super::local::{LocalHold, LocalLease};
use async_trait::async_trait;
use harness_core::{CancellationToken, LeaseError, LeaseGuard, LeaseKey, LeaseRelease, SessionLease};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The longest pause between two attempts to take a lock file another process holds.
const MAX_POLL: Duration = Duration::from_millis(50);
/// How often one process sweeps one fan-out directory for idle lock files, by default.
pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// [`LocalLease`] inside the process plus an exclusive advisory lock (`flock`) on a lock file
/// per key under a directory (the harness uses `<workspace>/.harness/locks/`), so processes
/// sharing the directory serialise their turns too. The OS drops the lock of a process that
/// dies, so a crashed holder never blocks a session.
///
/// Lock files are named by the SHA-256 of the [`LeaseKey`] under 256 fan-out directories
/// (`ab/ab12….lock`): any two keys get distinct files (`v1`, `v1.2`, `v1.3`, `..hidden` all
/// work), whatever characters the ids contain.
///
/// Lock files do not pile up: after taking a lock, a process sweeps that key's fan-out
/// directory (at most once per sweep interval per directory): every other lock file there
/// that nobody holds is deleted while the sweeper holds its lock. Whoever takes a lock checks
/// that the file it locked is still the one at the path (else it opens the new one and tries
/// again), so deleting a file never lets two holders in. A lock file therefore outlives its
/// last use by about one sweep interval of activity in its directory, and a busy session
/// reuses its file instead of creating one per turn.
/// Waiting polls (2 ms doubling to 50 ms) so no thread blocks; it honours cancellation.
#[derive(Debug, Clone)]
pub struct FileLease {
    local: LocalLease,
    dir: PathBuf,
    sweep_interval: Duration,
    /// When each fan-out directory was last swept by this process.
    swept: Arc<Mutex<HashMap<String, Instant>>>,
}

impl FileLease {
    /// Lock files under `dir` (created when first needed).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            local: LocalLease::default(),
            dir: dir.into(),
            sweep_interval: DEFAULT_SWEEP_INTERVAL,
            swept: Arc::default(),
        }
    }

    /// Sweeps a fan-out directory at most once per `interval` (default
    /// [`DEFAULT_SWEEP_INTERVAL`]; zero sweeps after every acquisition).
    #[must_use]
    pub fn sweep_interval(mut self, interval: Duration) -> Self {
        self.sweep_interval = interval;
        self
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

    /// Whether `bucket` is due for a sweep (and if so, marks it swept now).
    fn sweep_due(&self, bucket: &Path) -> bool {
        let name = bucket.to_string_lossy().into_owned();
        let now = Instant::now();
        let mut swept = self.swept.lock().unwrap_or_else(PoisonError::into_inner);
        match swept.get(&name) {
            Some(last) if now.duration_since(*last) < self.sweep_interval => false,
            _ => {
                if swept.len() > 4096 {
                    swept.clear();
                }
                swept.insert(name, now);
                true
            }
        }
    }
}

/// Deletes every lock file in `bucket` but `own` that nobody holds.
fn sweep(bucket: &Path, own: &Path) {
    let Ok(entries) = std::fs::read_dir(bucket) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path == own || path.extension().is_none_or(|ext| ext != "lock") {
            continue;
        }
        let Ok(file) = std::fs::OpenOptions::new().write(true).open(&path) else {
            continue;
        };
        // Held by someone (WouldBlock) or failing: leave it.
        if file.try_lock().is_ok()
            && still_current(&file, &path).unwrap_or(false)
            && let Err(err) = std::fs::remove_file(&path)
        {
            tracing::debug!(path = %path.display(), error = %err, "idle lock file not removed");
        }
    }
}

/// A held lock file; closing it unlocks it.
struct FileHold {
    _file: File,
    _local: LocalHold,
}

#[async_trait]
impl LeaseRelease for FileHold {
    async fn release(self: Box<Self>) {}

    fn release_now(self: Box<Self>) {}
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
        if let Some(bucket) = path.parent()
            && self.sweep_due(bucket)
        {
            sweep(bucket, &path);
        }
        let hold = FileHold {
            _file: file,
            _local: local,
        };
        Ok(LeaseGuard::new(None, CancellationToken::new(), Box::new(hold)))
    }
}
