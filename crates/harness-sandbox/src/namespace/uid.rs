//! Host bookkeeping of sandboxes: one uid per live sandbox (an exclusive `flock` on
//! `<state>/uids/<uid>.lock`), and one record per instance (`<state>/instances/<name>/`: its
//! state, its curated `/etc`, and a lock held while it lives). A killed harness releases its
//! locks with its descriptors, so what it left behind shows up as orphans.

use super::bwrap::etc_files;
use crate::provider::{SandboxError, SandboxState};
use rustix::fs::{FlockOperation, flock};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static INSTANCE_COUNTER: AtomicU64 = AtomicU64::new(0);

fn io(operation: &'static str) -> impl FnOnce(std::io::Error) -> SandboxError {
    move |source| SandboxError::Io { operation, source }
}

/// Creates `dir` (and parents) with `mode`, and sets the mode of an existing one.
fn make_dir(dir: &Path, mode: u32) -> Result<(), SandboxError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)
        .map_err(io("create sandbox state directory"))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).map_err(io("set state directory mode"))
}

fn open_lock(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)
}

/// Takes the lock without waiting; `Ok(None)` when someone else holds it.
fn try_lock(path: &Path) -> Result<Option<File>, SandboxError> {
    let file = open_lock(path).map_err(io("open lock file"))?;
    match flock(&file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Some(file)),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
        Err(err) => Err(SandboxError::Io {
            operation: "lock",
            source: err.into(),
        }),
    }
}

/// A uid and an instance record held by one live sandbox.
#[derive(Debug)]
pub(crate) struct UidLease {
    uid: u32,
    /// Whether the uid belongs to this sandbox alone (from the range), so everything running
    /// as it may be killed at release.
    dedicated: bool,
    instance: String,
    dir: PathBuf,
    _instance_lock: File,
    uid_lock: Option<File>,
}

/// Takes a free uid of `range` (or the harness's own uid without a range) and creates the
/// instance record.
pub(crate) fn allocate(state_dir: &Path, range: Option<(u32, u32)>) -> Result<UidLease, SandboxError> {
    make_dir(state_dir, 0o711)?;
    make_dir(&state_dir.join("uids"), 0o700)?;
    make_dir(&state_dir.join("instances"), 0o711)?;
    let (uid, dedicated, uid_lock) = match range {
        Some((first, last)) => {
            let mut found = None;
            for uid in first..=last {
                if let Some(lock) = try_lock(&state_dir.join("uids").join(format!("{uid}.lock")))? {
                    found = Some((uid, lock));
                    break;
                }
            }
            let (uid, lock) = found.ok_or(SandboxError::NoFreeUid { first, last })?;
            // Nothing may still run as a uid we hand out. A uid whose last sandbox was seen to
            // end completely carries the clean mark; any other (a harness killed before it
            // cleaned up, a first use) is swept. The mark is cleared while the uid is in use.
            if !take_clean_mark(&lock) {
                let _ = kill_uid(uid);
            }
            (uid, true, Some(lock))
        }
        None => (rustix::process::geteuid().as_raw(), false, None),
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    let instance = format!(
        "ns-{uid}-{}-{}-{nanos:x}",
        std::process::id(),
        INSTANCE_COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let dir = state_dir.join("instances").join(&instance);
    make_dir(&dir, 0o711)?;
    let instance_lock = try_lock(&dir.join("lock"))?.ok_or_else(|| SandboxError::Io {
        operation: "lock instance",
        source: std::io::Error::other("a fresh instance record is locked"),
    })?;
    let etc = dir.join("etc");
    make_dir(&etc, 0o755)?;
    for (name, content) in etc_files(uid) {
        let path = etc.join(name);
        std::fs::write(&path, content).map_err(io("write sandbox /etc"))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).map_err(io("write sandbox /etc"))?;
    }
    Ok(UidLease {
        uid,
        dedicated,
        instance,
        dir,
        _instance_lock: instance_lock,
        uid_lock,
    })
}

impl UidLease {
    pub(crate) fn uid(&self) -> u32 {
        self.uid
    }

    pub(crate) fn instance(&self) -> &str {
        &self.instance
    }

    pub(crate) fn etc_dir(&self) -> PathBuf {
        self.dir.join("etc")
    }

    /// Creates the directory of the instance's proxy socket: owned by the sandbox uid when
    /// the harness is root, mode 0700, so no other host user (and no other sandbox) reaches it.
    pub(crate) fn proxy_dir(&self) -> Result<PathBuf, SandboxError> {
        let dir = self.dir.join("proxy");
        make_dir(&dir, 0o700)?;
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::lchown(&dir, Some(self.uid), Some(self.uid)).map_err(io("hand over proxy directory"))?;
        }
        Ok(dir)
    }

    /// Writes the instance's state next to its lock (for orphan scans).
    pub(crate) fn record(&self, state: &SandboxState) -> Result<(), SandboxError> {
        let json = serde_json::to_vec_pretty(state).map_err(|err| SandboxError::Io {
            operation: "encode sandbox state",
            source: std::io::Error::other(err),
        })?;
        let path = self.dir.join("state.json");
        let temp = self.dir.join("state.json.tmp");
        std::fs::write(&temp, json).map_err(io("write sandbox state"))?;
        std::fs::rename(&temp, &path).map_err(io("write sandbox state"))
    }

    /// Kills whatever still runs as the uid (unless `ended` proves the sandbox ended
    /// completely), removes the record, marks the uid clean, frees it.
    pub(crate) fn release(mut self, ended: bool) -> std::io::Result<()> {
        let clean = self.dedicated && (ended || kill_uid(self.uid));
        let removed = std::fs::remove_dir_all(&self.dir);
        if let Some(lock) = self.uid_lock.take() {
            if clean {
                set_clean_mark(&lock);
            }
            drop(lock);
        }
        removed
    }
}

const CLEAN_MARK: &[u8] = b"clean\n";

/// Reads and clears the clean mark of a uid lock file (held by us).
fn take_clean_mark(lock: &File) -> bool {
    use std::io::{Read, Seek};
    let mut content = Vec::new();
    let mut file = lock;
    let clean = file.seek(std::io::SeekFrom::Start(0)).is_ok()
        && file.take(16).read_to_end(&mut content).is_ok()
        && content == CLEAN_MARK;
    // Cleared before the uid is used, so a harness killed from here on leaves it unmarked (the
    // page cache outlives a killed process; a machine crash takes the sandboxes with it, so
    // no fsync).
    let cleared = lock.set_len(0).is_ok();
    clean && cleared
}

/// Marks a uid lock file clean (no process of the uid is left).
fn set_clean_mark(lock: &File) {
    use std::os::unix::fs::FileExt;
    let _ = lock.set_len(0);
    let _ = lock.write_all_at(CLEAN_MARK, 0);
}

/// Real uid of a live (not zombie) process, from `/proc/<pid>/status`.
fn process_uid(pid: &str) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    // A zombie runs nothing; it is gone once its parent (outside the sandbox) reaps it.
    if status
        .lines()
        .any(|line| line.starts_with("State:") && line.contains('Z'))
    {
        return None;
    }
    let line = status.lines().find_map(|line| line.strip_prefix("Uid:"))?;
    line.split_whitespace().next()?.parse().ok()
}

/// Pids of every process running as `uid`.
pub(crate) fn processes_of(uid: u32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| name.bytes().all(|byte| byte.is_ascii_digit()))
        .filter(|pid| process_uid(pid) == Some(uid))
        .filter_map(|pid| pid.parse().ok())
        .collect()
}

/// SIGKILLs every process of a dedicated sandbox uid (never uid 0 or our own uid); `true`
/// once none is left (`false` after 100 ms of trying).
fn kill_uid(uid: u32) -> bool {
    let own = rustix::process::geteuid().as_raw();
    if uid == 0 || uid == own {
        return false;
    }
    for _ in 0..50 {
        let pids = processes_of(uid);
        if pids.is_empty() {
            return true;
        }
        for pid in pids {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    false
}

/// Instances of `owner` whose lock nobody holds.
pub(crate) fn orphans(state_dir: &Path, owner: &str) -> Result<Vec<SandboxState>, SandboxError> {
    let Ok(entries) = std::fs::read_dir(state_dir.join("instances")) else {
        return Ok(Vec::new());
    };
    let mut found = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        let dir = entry.path();
        let Some(lock) = try_lock(&dir.join("lock"))? else {
            continue; // live
        };
        let state = std::fs::read(dir.join("state.json"))
            .ok()
            .and_then(|bytes| serde_json::from_slice::<SandboxState>(&bytes).ok());
        drop(lock);
        if let Some(state) = state
            && state.owner == owner
        {
            found.push(state);
        }
    }
    found.sort_by(|a, b| a.instance.cmp(&b.instance));
    Ok(found)
}

/// Removes the record of an instance nobody holds, killing what is left of its uid when the
/// uid is free too.
pub(crate) fn remove_orphan(state_dir: &Path, instance: &str) -> Result<(), SandboxError> {
    if instance.contains('/') || instance.starts_with('.') {
        return Ok(());
    }
    let dir = state_dir.join("instances").join(instance);
    if !dir.exists() {
        return Ok(());
    }
    let Some(lock) = try_lock(&dir.join("lock"))? else {
        return Ok(()); // another process still runs it
    };
    let state = std::fs::read(dir.join("state.json"))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<SandboxState>(&bytes).ok());
    if let Some(state) = state
        && let Some(uid_lock) = try_lock(&state_dir.join("uids").join(format!("{}.lock", state.uid)))?
    {
        let _ = kill_uid(state.uid);
        drop(uid_lock);
    }
    let removed = std::fs::remove_dir_all(&dir).map_err(io("remove sandbox record"));
    drop(lock);
    removed
}
