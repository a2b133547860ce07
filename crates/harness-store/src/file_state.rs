//! [`FileStateStore`]: one `agent_state.json` snapshot per session, written atomically, plus
//! an append-only `agent_state.log` of the messages added since, with a version for
//! compare-and-set that holds across processes.
//!
//! # Incremental saves
//!
//! Most saves only add messages at the end of the context. Rewriting the whole state for
//! them costs bytes proportional to the history and a new file per turn (temp file +
//! rename). Instead, when this store wrote the previous version itself (it remembers, per
//! session, the version and the identity of each message it wrote) and the new state keeps
//! those very messages (the same shared `Arc<Msg>`s, so the check compares pointers and
//! serializes nothing), the same format and the same extensions, the save serializes only
//! the new messages and appends one line `{"version":V,"transcript_offset":T,"messages":[new…]}` to
//! `agent_state.log`. Anything else — another writer in between, an edited or removed
//! message (compaction, eviction), changed extensions, or a log that grew past the snapshot
//! size (at least `MIN_LOG_BYTES`, 64 KiB) — writes a full snapshot (temp file + rename) and
//! removes the log. Loads read the snapshot and apply the log records that follow its
//! version in sequence, so a load reads at most about twice the state.
//!
//! # Warm loads
//!
//! The store keeps the last state it loaded or saved per session in a bounded cache, with
//! the snapshot's stamp (device, inode, length, mtime) and the log's inode and the offset
//! after the last record applied. A load opens both files and `fstat`s them: an unchanged
//! snapshot and log return the cached state without reading or parsing; a log that only grew
//! is read from the cached offset; anything else (a new snapshot, another log) is a full load.
//!
//! Guarantees kept: compare-and-set (under the directory's `.lock`, the current version is
//! the larger of the snapshot's and the log's last record; a stale save is a
//! [`StateError::Conflict`]); crash safety (a process killed mid-append leaves a torn last
//! line, which a load ignores — that save is lost as a whole, never half-applied — and the
//! next save writes a full snapshot); no fsync, as before.

mod load;

use crate::state_cache::{CacheEntry, DEFAULT_CACHE_BYTES, DEFAULT_CACHE_ENTRIES, StateCache};
use async_trait::async_trait;
use harness_core::{AgentState, Msg, StateError, StateKey, StateStore, Version};
use load::{FileCursor, Stamp};
use serde::Deserialize;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

/// Maps a session key to its directory, relative to the store's root.
pub type StateLayout = Arc<dyn Fn(&StateKey) -> PathBuf + Send + Sync>;

const STATE_FILE: &str = "agent_state.json";
const LOG_FILE: &str = "agent_state.log";
/// The log may always grow to this size before a snapshot is due (beyond it, to the
/// snapshot's size).
pub(crate) const MIN_LOG_BYTES: u64 = 64 * 1024;
/// Sessions remembered for incremental saves before the memory is cleared.
const MAX_REMEMBERED: usize = 4096;
const LOCK_FILE: &str = ".lock";
/// The version is the first field, so a save can check it by reading a few bytes.
const HEADER_BYTES: usize = 64;

#[derive(Deserialize)]
struct OwnedEnvelope {
    version: Version,
    state: AgentState,
}

/// One line of `agent_state.log`.
#[derive(Deserialize)]
struct LogRecord {
    version: Version,
    transcript_offset: u64,
    messages: Vec<Arc<harness_core::Msg>>,
}

/// What this store last wrote for a session (see the module docs).
#[derive(Clone)]
struct Written {
    version: Version,
    snapshot_version: Version,
    snapshot: Option<Stamp>,
    snapshot_len: u64,
    log_len: u64,
    /// The messages on disk at `version`, by identity. A `Weak` keeps its allocation (not
    /// the message) alive, so no other message can take its address while it is
    /// remembered: a message at the same address is the same, unmodified message (`Msg`s
    /// behind an `Arc` are immutable; `Arc::make_mut` moves a message that has weak
    /// references to a new allocation).
    messages: Vec<Weak<Msg>>,
    format: u32,
    extensions: serde_json::Map<String, serde_json::Value>,
}

impl Written {
    /// Whether `state` keeps every message this store wrote, in place, with the same format
    /// and extensions: then only the messages after them are new.
    fn is_prefix_of(&self, state: &AgentState) -> bool {
        self.format == state.format
            && state.messages.len() >= self.messages.len()
            && self
                .messages
                .iter()
                .zip(&state.messages)
                .all(|(written, msg)| std::ptr::eq(written.as_ptr(), Arc::as_ptr(msg)))
            && self.extensions == state.extensions
    }
}

type Remembered = Arc<std::sync::Mutex<std::collections::HashMap<PathBuf, Written>>>;

/// Writes `messages` comma-separated.
fn write_messages(out: &mut Vec<u8>, messages: &[Arc<Msg>]) -> Result<(), serde_json::Error> {
    for (at, msg) in messages.iter().enumerate() {
        if at > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut *out, &**msg)?;
    }
    Ok(())
}

/// `{"version":V,"state":{...}}\n`, the snapshot file.
fn snapshot_bytes(state: &AgentState, version: Version) -> Result<Vec<u8>, serde_json::Error> {
    // Every field is named, so a new field is a compile error here, not a silent loss.
    let AgentState {
        format,
        messages,
        transcript_offset,
        extensions,
    } = state;
    let mut out = Vec::with_capacity(512 * messages.len() + 128);
    out.extend_from_slice(format!("{{\"version\":{version},\"state\":{{\"format\":{format},\"messages\":[").as_bytes());
    write_messages(&mut out, messages)?;
    out.extend_from_slice(format!("],\"transcript_offset\":{transcript_offset}").as_bytes());
    if !extensions.is_empty() {
        out.extend_from_slice(b",\"extensions\":");
        serde_json::to_writer(&mut out, extensions)?;
    }
    out.extend_from_slice(b"}}\n");
    Ok(out)
}

/// One log line with the messages after the first `from`: only those are serialized.
fn record_bytes(state: &AgentState, version: Version, from: usize) -> Result<Vec<u8>, serde_json::Error> {
    let tail = state.messages.get(from..).unwrap_or_default();
    let mut out = Vec::with_capacity(512 * tail.len() + 64);
    out.extend_from_slice(
        format!(
            "{{\"version\":{version},\"transcript_offset\":{},\"messages\":[",
            state.transcript_offset
        )
        .as_bytes(),
    );
    write_messages(&mut out, tail)?;
    out.extend_from_slice(b"]}\n");
    Ok(out)
}

/// Agent state as JSON files under a root directory.
///
/// Each session lives in its own directory (by default
/// `<root>/<userId>/agents/<agentId>/context/<sessionId>/agent_state.json`, the workspace
/// layout for the default user isolation scope). A save writes a temporary file in the same
/// directory and renames it over the old one, so a crash never leaves a torn state. The
/// version check and the rename happen under an advisory lock on the directory's `.lock`
/// file, so compare-and-set holds between processes too.
///
/// Every id is checked to be a single safe path segment before it touches the disk. Loaded
/// and saved states are kept in a bounded cache ([`cache_bounds`](Self::cache_bounds)), so a
/// warm load of an unchanged session parses nothing (see the module docs).
#[derive(Clone)]
pub struct FileStateStore {
    root: PathBuf,
    layout: StateLayout,
    written: Remembered,
    cache: Arc<StateCache<PathBuf, FileCursor>>,
}

impl std::fmt::Debug for FileStateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileStateStore")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl FileStateStore {
    /// A store under `root` with the default layout.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self::with_layout(
            root,
            Arc::new(|key: &StateKey| {
                PathBuf::from(key.user_id.as_str())
                    .join("agents")
                    .join(key.agent_id.as_str())
                    .join("context")
                    .join(key.session_id.as_str())
            }),
        )
    }

    /// A store under `root` where `layout` places each session's directory.
    pub fn with_layout(root: impl Into<PathBuf>, layout: StateLayout) -> Self {
        Self {
            root: root.into(),
            layout,
            written: Remembered::default(),
            cache: Arc::new(StateCache::new(DEFAULT_CACHE_ENTRIES, DEFAULT_CACHE_BYTES)),
        }
    }

    /// Bounds the cache of loaded states to `entries` sessions and about `bytes` bytes
    /// (defaults: [`DEFAULT_CACHE_ENTRIES`](crate::DEFAULT_CACHE_ENTRIES),
    /// [`DEFAULT_CACHE_BYTES`](crate::DEFAULT_CACHE_BYTES)); 0 disables it.
    #[must_use]
    pub fn cache_bounds(mut self, entries: usize, bytes: u64) -> Self {
        self.cache = Arc::new(StateCache::new(entries, bytes));
        self
    }

    /// The directory of a session (ids are safe path segments by construction; the layout's
    /// result is checked).
    ///
    /// # Errors
    /// [`StateError::Corrupt`] is never returned; a layout that produces an unsafe path gives
    /// [`StateError::Backend`].
    pub fn dir_of(&self, key: &StateKey) -> Result<PathBuf, StateError> {
        let relative = (self.layout)(key);
        if relative.is_absolute()
            || relative
                .components()
                .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return Err(StateError::Backend(
                format!("state layout produced an unsafe path {relative:?}").into(),
            ));
        }
        Ok(self.root.join(relative))
    }

    /// The version of the last complete record of the log (0 when none), and whether the
    /// log ends cleanly (no torn last line).
    fn log_version(path: &Path) -> Result<(Version, u64, bool), StateError> {
        let log = match fs::read(path) {
            Ok(log) => log,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok((0, 0, true)),
            Err(err) => return Err(StateError::Backend(Box::new(err))),
        };
        let clean = log.last().is_none_or(|b| *b == b'\n');
        let version = complete_records(&log)
            .filter_map(|line| serde_json::from_slice::<LogRecord>(line).ok())
            .map(|r| r.version)
            .max()
            .unwrap_or(0);
        Ok((version, log.len() as u64, clean))
    }

    /// The snapshot's version and stamp (`(0, None)` when there is none).
    fn stored_version(path: &Path, key: &StateKey) -> Result<(Version, Option<Stamp>), StateError> {
        let mut file = match File::open(path) {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok((0, None)),
            Err(err) => return Err(StateError::Backend(Box::new(err))),
        };
        let stamp = Stamp::of(&file.metadata().map_err(|err| StateError::Backend(Box::new(err)))?);
        let mut header = [0u8; HEADER_BYTES];
        let mut filled = 0;
        while filled < HEADER_BYTES {
            match file.read(&mut header[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(err) => return Err(StateError::Backend(Box::new(err))),
            }
        }
        let version = parse_version(&header[..filled]).ok_or_else(|| StateError::Corrupt {
            key: key.display(),
            message: "no version header".into(),
        })?;
        Ok((version, Some(stamp)))
    }

    fn save_blocking(
        dir: &Path,
        key: &StateKey,
        state: &AgentState,
        expected: Version,
        written: &Remembered,
    ) -> Result<(Version, FileCursor, u64), StateError> {
        let backend = |err: std::io::Error| StateError::Backend(Box::new(err));
        let open_lock = || {
            OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(dir.join(LOCK_FILE))
        };
        // The directory exists after the first save: create it only when the open says so.
        let lock = match open_lock() {
            Ok(lock) => lock,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                fs::create_dir_all(dir).map_err(backend)?;
                open_lock().map_err(backend)?
            }
            Err(err) => return Err(backend(err)),
        };
        lock.lock().map_err(backend)?;
        let path = dir.join(STATE_FILE);
        let log_path = dir.join(LOG_FILE);
        let remembered = written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(dir)
            .cloned();
        let (snapshot_version, snapshot_stamp) = Self::stored_version(&path, key)?;
        let log_len = match fs::metadata(&log_path) {
            Ok(meta) => meta.len(),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => 0,
            Err(err) => return Err(backend(err)),
        };
        // What this store wrote last is still what is on disk: no other writer since.
        // The stamp tells a snapshot we wrote from another writer's with the same version
        // (the session deleted and created again).
        let ours = remembered
            .filter(|w| w.snapshot_version == snapshot_version && w.snapshot == snapshot_stamp && w.log_len == log_len);
        let found = match &ours {
            Some(w) => w.version,
            None => {
                let (log_version, _, _) = Self::log_version(&log_path)?;
                snapshot_version.max(log_version)
            }
        };
        if found != expected {
            return Err(StateError::Conflict {
                key: key.display(),
                expected,
                found,
            });
        }
        let version = found + 1;
        let forget = || {
            written
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(dir);
        };
        let encode = |err: serde_json::Error| StateError::Backend(Box::new(err));
        let written_messages = || state.messages.iter().map(Arc::downgrade).collect::<Vec<_>>();
        // Only the messages after ours are serialized for an append, not the whole history.
        let next = match ours.filter(|w| w.is_prefix_of(state)) {
            Some(w) => {
                let record = record_bytes(state, version, w.messages.len()).map_err(encode)?;
                let budget = MIN_LOG_BYTES.max(w.snapshot_len);
                (w.log_len + record.len() as u64 <= budget).then_some((w, record))
            }
            None => None,
        };
        let remember = match next {
            Some((w, record)) => {
                let appended = OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(&log_path)
                    .and_then(|mut log| log.write_all(&record));
                if let Err(err) = appended {
                    forget();
                    return Err(backend(err));
                }
                Written {
                    version,
                    log_len: w.log_len + record.len() as u64,
                    messages: written_messages(),
                    ..w
                }
            }
            None => {
                let bytes = snapshot_bytes(state, version).map_err(encode)?;
                let mut temp = tempfile::NamedTempFile::new_in(dir).map_err(backend)?;
                temp.write_all(&bytes).map_err(backend)?;
                temp.persist(&path).map_err(|err| backend(err.error))?;
                // Records in the log now predate the snapshot; a crash before this removal
                // leaves them, and loads skip them by version.
                match fs::remove_file(&log_path) {
                    Ok(()) => {}
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                    Err(err) => {
                        forget();
                        return Err(backend(err));
                    }
                }
                Written {
                    version,
                    snapshot_version: version,
                    snapshot: fs::metadata(&path).ok().map(|meta| Stamp::of(&meta)),
                    snapshot_len: bytes.len() as u64,
                    log_len: 0,
                    messages: written_messages(),
                    format: state.format,
                    extensions: state.extensions.clone(),
                }
            }
        };
        // What a load would read now: the snapshot file and the log up to its end.
        let stamps = fs::metadata(&path).map(|meta| Stamp::of(&meta)).and_then(|snapshot| {
            let log = match fs::metadata(&log_path) {
                Ok(meta) => Some(meta.ino()),
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
                Err(err) => return Err(err),
            };
            Ok(FileCursor {
                snapshot,
                log,
                log_offset: remember.log_len,
            })
        });
        let bytes = remember.snapshot_len + remember.log_len;
        let mut all = written.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if all.len() >= MAX_REMEMBERED {
            all.clear();
        }
        all.insert(dir.to_path_buf(), remember);
        drop(all);
        // The lock is released when `lock` is dropped.
        Ok((version, stamps.map_err(backend)?, bytes))
    }
}

/// The complete (newline-terminated) lines of a log; a torn last line is left out.
fn complete_records(log: &[u8]) -> impl Iterator<Item = &[u8]> {
    let end = log.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    log[..end]
        .split(|b| *b == b'\n')
        .filter(|line| !line.iter().all(u8::is_ascii_whitespace))
}

/// Reads `{"version":N` from the start of a state file.
fn parse_version(header: &[u8]) -> Option<Version> {
    let text = std::str::from_utf8(header).ok().or_else(|| {
        // The header may end inside a multi-byte character; the version is before it.
        let valid = std::str::from_utf8(header).err()?.valid_up_to();
        std::str::from_utf8(&header[..valid]).ok()
    })?;
    let rest = text.trim_start().strip_prefix("{\"version\":")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StateError> + Send + 'static,
) -> Result<T, StateError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| StateError::Backend(Box::new(err)))?
}

#[async_trait]
impl StateStore for FileStateStore {
    fn replica_local(&self) -> bool {
        true
    }

    async fn load(&self, key: &StateKey) -> Result<Option<(AgentState, Version)>, StateError> {
        let dir = self.dir_of(key)?;
        let cached = self.cache.get(&dir);
        let key = key.clone();
        let cache_key = dir.clone();
        let loaded = blocking(move || Self::load_blocking(&dir, &key, cached)).await;
        match loaded {
            Ok(Some(entry)) => {
                let out = (entry.state.clone(), entry.version);
                self.cache.put(cache_key, entry);
                Ok(Some(out))
            }
            other => {
                self.cache.remove(&cache_key);
                other.map(|_| None)
            }
        }
    }

    async fn save(
        &self,
        key: &StateKey,
        state: &AgentState,
        expected: Version,
        // Writers hold an OS lock on the session while they save; a holder cannot go stale.
        _fence: Option<harness_core::FencingToken>,
    ) -> Result<Version, StateError> {
        let dir = self.dir_of(key)?;
        // The blocking task serializes under the lock what the disk lacks (usually only the
        // new messages); the copy shares the messages, so it costs one pointer per message.
        let state = state.clone();
        let key = key.clone();
        let written = Arc::clone(&self.written);
        let cache_key = dir.clone();
        let saved =
            blocking(move || Self::save_blocking(&dir, &key, &state, expected, &written).map(|saved| (saved, state)))
                .await;
        match saved {
            Ok(((version, cursor, bytes), state)) => {
                let entry = CacheEntry {
                    state,
                    version,
                    cursor,
                    bytes,
                };
                self.cache.put(cache_key, entry);
                Ok(version)
            }
            Err(err) => {
                self.cache.remove(&cache_key);
                Err(err)
            }
        }
    }

    async fn delete(&self, key: &StateKey) -> Result<(), StateError> {
        let dir = self.dir_of(key)?;
        self.cache.remove(&dir);
        let written = Arc::clone(&self.written);
        blocking(move || {
            written
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&dir);
            for file in [LOG_FILE, STATE_FILE] {
                match fs::remove_file(dir.join(file)) {
                    Ok(()) => {}
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                    Err(err) => return Err(StateError::Backend(Box::new(err))),
                }
            }
            Ok(())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use harness_core::{AgentId, Msg, SessionId, UserId};

    fn key(user: &str, session: &str) -> StateKey {
        StateKey {
            agent_id: AgentId::from_static("a"),
            user_id: UserId::parse(user).unwrap(),
            session_id: SessionId::parse(session).unwrap(),
        }
    }

    #[tokio::test]
    async fn round_trip_with_versions_and_conflicts() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStateStore::new(dir.path());
        let k = key("u1", "s1");
        assert!(store.load(&k).await.unwrap().is_none());
        let mut state = AgentState::default();
        state.messages.push(Arc::new(Msg::user("héllo")));
        assert_eq!(store.save(&k, &state, 0, None).await.unwrap(), 1);
        assert_eq!(store.save(&k, &state, 1, None).await.unwrap(), 2);
        let (loaded, version) = store.load(&k).await.unwrap().unwrap();
        assert_eq!((loaded, version), (state.clone(), 2));
        match store.save(&k, &state, 1, None).await {
            Err(StateError::Conflict {
                expected: 1, found: 2, ..
            }) => {}
            other => panic!("expected a conflict, got {other:?}"),
        }
        assert!(dir.path().join("u1/agents/a/context/s1/agent_state.json").exists());
    }

    #[tokio::test]
    async fn unsafe_ids_never_touch_the_disk() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStateStore::new(dir.path().join("root"));
        // Unsafe ids cannot be made at all ...
        for (user, session) in [("..", "s"), ("u", ".."), ("u/../../x", "s"), ("u", "a/b")] {
            assert!(UserId::parse(user).is_err() || SessionId::parse(session).is_err());
        }
        // ... and a layout that would leave the root is refused before any IO.
        let escaping = FileStateStore::with_layout(
            dir.path().join("root"),
            Arc::new(|key: &StateKey| PathBuf::from("..").join(key.session_id.as_str())),
        );
        for store in [&store, &escaping] {
            let saved = store.save(&key("u", "s"), &AgentState::default(), 0, None).await;
            assert_eq!(saved.is_err(), std::ptr::eq(store, &escaping));
        }
        assert!(!dir.path().join("s").exists());
    }

    #[tokio::test]
    async fn concurrent_savers_with_the_same_version_one_wins() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStateStore::new(dir.path());
        let k = key("u", "s");
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let (store, k) = (store.clone(), k.clone());
                tokio::spawn(async move { store.save(&k, &AgentState::default(), 0, None).await })
            })
            .collect();
        let mut wins = 0;
        for task in tasks {
            if task.await.unwrap().is_ok() {
                wins += 1;
            }
        }
        assert_eq!(wins, 1);
    }

    #[tokio::test]
    async fn appends_go_to_the_log_and_loads_replay_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStateStore::new(dir.path());
        let k = key("u", "s");
        let session = dir.path().join("u/agents/a/context/s");
        let mut state = AgentState::default();
        let mut version = 0;
        for n in 0..5 {
            state.messages.push(Arc::new(Msg::user(format!("turn {n}"))));
            state.transcript_offset += 10;
            version = store.save(&k, &state, version, None).await.unwrap();
        }
        assert_eq!(version, 5);
        let log = std::fs::read_to_string(session.join(LOG_FILE)).unwrap();
        assert_eq!(
            log.lines().count(),
            4,
            "the first save is a snapshot, the rest are appends"
        );
        // A fresh store (another process) sees the same state and version.
        let other = FileStateStore::new(dir.path());
        assert_eq!(other.load(&k).await.unwrap().unwrap(), (state.clone(), 5));
        // A stale save is a conflict, from either store.
        assert!(matches!(
            store.save(&k, &state, 4, None).await,
            Err(StateError::Conflict { found: 5, .. })
        ));
        // Another writer saves version 6 with an edited history: our next save at 5 conflicts,
        // and at 6 it writes a snapshot (the history is not ours).
        let mut edited = state.clone();
        edited.messages.remove(0);
        assert_eq!(other.save(&k, &edited, 5, None).await.unwrap(), 6);
        assert!(matches!(
            store.save(&k, &state, 5, None).await,
            Err(StateError::Conflict { found: 6, .. })
        ));
        assert_eq!(store.load(&k).await.unwrap().unwrap(), (edited.clone(), 6));
        edited.messages.push(Arc::new(Msg::user("more")));
        assert_eq!(store.save(&k, &edited, 6, None).await.unwrap(), 7);
        assert_eq!(other.load(&k).await.unwrap().unwrap(), (edited.clone(), 7));
        // A torn last record (a crash mid-append) is ignored; the save before it stands.
        edited.messages.push(Arc::new(Msg::user("again")));
        assert_eq!(store.save(&k, &edited, 7, None).await.unwrap(), 8);
        let mut log = std::fs::OpenOptions::new()
            .append(true)
            .open(session.join(LOG_FILE))
            .unwrap();
        std::io::Write::write_all(&mut log, b"{\"version\":9,\"transcript_offset\":1,\"mess").unwrap();
        assert_eq!(other.load(&k).await.unwrap().unwrap(), (edited.clone(), 8));
        // The next save notices the log changed under it and writes a clean snapshot.
        assert_eq!(store.save(&k, &edited, 8, None).await.unwrap(), 9);
        assert!(!session.join(LOG_FILE).exists());
        assert_eq!(other.load(&k).await.unwrap().unwrap(), (edited, 9));
        store.delete(&k).await.unwrap();
        assert!(store.load(&k).await.unwrap().is_none());
    }

    /// An append serializes only the messages after the ones this store wrote, which it
    /// recognises by identity: a message replaced in place (eviction swaps a tool result for
    /// a stub, the count unchanged) is not "ours" any more and the save writes a snapshot.
    #[tokio::test]
    async fn a_message_replaced_in_place_writes_a_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStateStore::new(dir.path());
        let k = key("u", "s");
        let session = dir.path().join("u/agents/a/context/s");
        let mut state = AgentState::default();
        state.messages.push(Arc::new(Msg::user("first")));
        state.messages.push(Arc::new(Msg::user("second")));
        assert_eq!(store.save(&k, &state, 0, None).await.unwrap(), 1);
        state.messages.push(Arc::new(Msg::user("third")));
        assert_eq!(store.save(&k, &state, 1, None).await.unwrap(), 2);
        assert_eq!(
            std::fs::read_to_string(session.join(LOG_FILE)).unwrap().lines().count(),
            1,
            "an unchanged prefix is an append"
        );
        // Replaced in place, and a new message after it.
        state.messages[1] = Arc::new(Msg::user("stub"));
        state.messages.push(Arc::new(Msg::user("fourth")));
        assert_eq!(store.save(&k, &state, 2, None).await.unwrap(), 3);
        assert!(!session.join(LOG_FILE).exists(), "a changed message is a snapshot");
        assert_eq!(
            FileStateStore::new(dir.path()).load(&k).await.unwrap().unwrap(),
            (state.clone(), 3)
        );
        // An equal copy of a message is still a rewrite: identity, not content, is checked.
        state.messages[0] = Arc::new((*state.messages[0]).clone());
        assert_eq!(store.save(&k, &state, 3, None).await.unwrap(), 4);
        assert!(!session.join(LOG_FILE).exists());
        state.messages.push(Arc::new(Msg::user("fifth")));
        assert_eq!(store.save(&k, &state, 4, None).await.unwrap(), 5);
        assert!(session.join(LOG_FILE).exists());
        assert_eq!(
            FileStateStore::new(dir.path()).load(&k).await.unwrap().unwrap(),
            (state, 5)
        );
    }

    /// Overwrites `path` with garbage of the same length and restores its modification time:
    /// the file's stamp is unchanged, so only a load that parses it notices.
    fn corrupt_in_place(path: &Path) -> Vec<u8> {
        let original = std::fs::read(path).unwrap();
        // Line ends stay, so later appends still start a line of their own.
        let garbage: Vec<u8> = original
            .iter()
            .map(|b| if *b == b'\n' { b'\n' } else { b'#' })
            .collect();
        rewrite_in_place(path, &garbage);
        original
    }

    fn rewrite_in_place(path: &Path, bytes: &[u8]) {
        let meta = std::fs::metadata(path).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        std::io::Write::write_all(&mut &file, bytes).unwrap();
        file.set_modified(meta.modified().unwrap()).unwrap();
    }

    /// Issue 9: "Keep the last state in memory keyed by its version and read only what
    /// changed since" — an unchanged 1,000-message session loads without parsing anything,
    /// and messages another writer appended are read from the log alone.
    #[tokio::test]
    async fn warm_loads_parse_only_what_changed() {
        let dir = tempfile::tempdir().unwrap();
        let session = dir.path().join("u/agents/a/context/s");
        let (ours, theirs) = (FileStateStore::new(dir.path()), FileStateStore::new(dir.path()));
        let k = key("u", "s");
        let mut state = AgentState::default();
        for n in 0..1000 {
            state.messages.push(Arc::new(Msg::user(format!("message {n}"))));
        }
        assert_eq!(theirs.save(&k, &state, 0, None).await.unwrap(), 1);
        state.messages.push(Arc::new(Msg::user("appended")));
        assert_eq!(theirs.save(&k, &state, 1, None).await.unwrap(), 2);
        assert_eq!(ours.load(&k).await.unwrap().unwrap(), (state.clone(), 2));
        // Unchanged: the snapshot and the log are not parsed again.
        let snapshot = corrupt_in_place(&session.join(STATE_FILE));
        assert_eq!(ours.load(&k).await.unwrap().unwrap(), (state.clone(), 2));
        rewrite_in_place(&session.join(STATE_FILE), &snapshot);
        // Another writer appends: only the new log record is read (the record before it is
        // unreadable now, so a load from the start would stop at version 1).
        corrupt_in_place(&session.join(LOG_FILE));
        state.messages.push(Arc::new(Msg::user("theirs")));
        assert_eq!(theirs.save(&k, &state, 2, None).await.unwrap(), 3);
        assert_eq!(ours.load(&k).await.unwrap().unwrap(), (state.clone(), 3));
        // Our own save is remembered too: the next load reads nothing.
        state.messages.push(Arc::new(Msg::user("ours")));
        assert_eq!(ours.save(&k, &state, 3, None).await.unwrap(), 4);
        corrupt_in_place(&session.join(STATE_FILE));
        assert_eq!(ours.load(&k).await.unwrap().unwrap(), (state.clone(), 4));
        // A fresh process parses the files and finds the corruption.
        assert!(matches!(
            FileStateStore::new(dir.path()).load(&k).await,
            Err(StateError::Corrupt { .. })
        ));
        // A cache bounded to nothing always reads the files.
        let uncached = FileStateStore::new(dir.path()).cache_bounds(0, 0);
        assert!(uncached.load(&k).await.is_err());
    }

    #[test]
    fn version_header_parses() {
        assert_eq!(parse_version(b"{\"version\":42,\"state\":{"), Some(42));
        assert_eq!(parse_version(b"garbage"), None);
    }
}
