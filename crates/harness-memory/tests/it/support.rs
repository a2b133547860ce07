//! Test support: `MemFs`, a small in-memory `Filesystem`, and helpers to build a memory and
//! a call context.

use async_trait::async_trait;
use harness_core::{ChatRequest, RuntimeContext};
use harness_fs::{
    CallWorkspace, FileInfo, FileVersion, Filesystem, FsError, GrepMatch, GrepOptions, WriteMode, WsPath,
};
use harness_memory::{Memory, MemoryConfig};
use harness_models::{Reply, ScriptedError, ScriptedModel};
use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

struct Entry {
    bytes: Vec<u8>,
    modified: jiff::Timestamp,
    version: u64,
}

/// An in-memory filesystem. Directories exist implicitly (a path is a directory when a file
/// lies below it). Records every path written, and can be told to fail writes to a path.
#[derive(Default)]
pub struct MemFs {
    files: Mutex<BTreeMap<String, Entry>>,
    writes: Mutex<Vec<String>>,
    failing: Mutex<HashSet<String>>,
    versions: AtomicU64,
    /// While `true`, reads wait (to hold a reader, e.g. the index refresh, mid-way).
    reads_held: tokio::sync::watch::Sender<bool>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl MemFs {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Writes a file directly (not recorded as a write).
    pub fn put(&self, path: &str, text: &str) {
        let version = self.versions.fetch_add(1, Ordering::Relaxed) + 1;
        lock(&self.files).insert(
            path.to_owned(),
            Entry {
                bytes: text.as_bytes().to_vec(),
                modified: jiff::Timestamp::now(),
                version,
            },
        );
    }

    /// Removes a file directly.
    pub fn remove(&self, path: &str) {
        lock(&self.files).remove(path);
    }

    /// A file's text, if it exists.
    pub fn text(&self, path: &str) -> Option<String> {
        lock(&self.files)
            .get(path)
            .map(|entry| String::from_utf8_lossy(&entry.bytes).into_owned())
    }

    /// Every path written through the trait, in order.
    pub fn writes(&self) -> Vec<String> {
        lock(&self.writes).clone()
    }

    /// Makes writes and appends to `path` fail.
    pub fn fail_writes_to(&self, path: &str) {
        lock(&self.failing).insert(path.to_owned());
    }

    pub fn heal(&self) {
        lock(&self.failing).clear();
    }

    /// Makes every read wait until [`release_reads`](Self::release_reads).
    pub fn hold_reads(&self) {
        self.reads_held.send_replace(true);
    }

    pub fn release_reads(&self) {
        self.reads_held.send_replace(false);
    }

    fn is_dir(files: &BTreeMap<String, Entry>, path: &str) -> bool {
        path.is_empty()
            || files
                .keys()
                .any(|key| key.len() > path.len() && key.starts_with(path) && key.as_bytes()[path.len()] == b'/')
    }

    fn check_write(&self, path: &WsPath) -> Result<(), FsError> {
        lock(&self.writes).push(path.as_str().to_owned());
        if lock(&self.failing).contains(path.as_str()) {
            return Err(FsError::Io {
                path: path.clone(),
                operation: "write",
                source: "injected failure".into(),
            });
        }
        Ok(())
    }

    fn store(&self, files: &mut BTreeMap<String, Entry>, path: &WsPath, bytes: Vec<u8>) {
        let version = self.versions.fetch_add(1, Ordering::Relaxed) + 1;
        files.insert(
            path.as_str().to_owned(),
            Entry {
                bytes,
                modified: jiff::Timestamp::now(),
                version,
            },
        );
    }
}

#[async_trait]
impl Filesystem for MemFs {
    fn describe(&self) -> String {
        "memfs".into()
    }

    async fn read(&self, path: &WsPath) -> Result<Vec<u8>, FsError> {
        self.read_versioned(path).await.map(|(bytes, _)| bytes)
    }

    async fn read_versioned(&self, path: &WsPath) -> Result<(Vec<u8>, FileVersion), FsError> {
        let _ = self.reads_held.subscribe().wait_for(|held| !*held).await;
        let files = lock(&self.files);
        match files.get(path.as_str()) {
            Some(entry) => Ok((entry.bytes.clone(), FileVersion(entry.version.to_string()))),
            None if Self::is_dir(&files, path.as_str()) => Err(FsError::IsDirectory { path: path.clone() }),
            None => Err(FsError::NotFound { path: path.clone() }),
        }
    }

    async fn write(&self, path: &WsPath, bytes: &[u8], mode: WriteMode) -> Result<(), FsError> {
        self.check_write(path)?;
        let mut files = lock(&self.files);
        if Self::is_dir(&files, path.as_str()) {
            return Err(FsError::IsDirectory { path: path.clone() });
        }
        match (&mode, files.get(path.as_str())) {
            (WriteMode::CreateNew, Some(_)) => return Err(FsError::AlreadyExists { path: path.clone() }),
            (WriteMode::IfMatch(expected), Some(entry)) if entry.version.to_string() != expected.0 => {
                return Err(FsError::Conflict { path: path.clone() });
            }
            (WriteMode::IfMatch(_), None) => return Err(FsError::Conflict { path: path.clone() }),
            _ => {}
        }
        self.store(&mut files, path, bytes.to_vec());
        Ok(())
    }

    async fn append(&self, path: &WsPath, bytes: &[u8]) -> Result<(), FsError> {
        self.check_write(path)?;
        let mut files = lock(&self.files);
        let mut content = files
            .get(path.as_str())
            .map(|entry| entry.bytes.clone())
            .unwrap_or_default();
        content.extend_from_slice(bytes);
        self.store(&mut files, path, content);
        Ok(())
    }

    async fn stat(&self, path: &WsPath) -> Result<FileInfo, FsError> {
        let files = lock(&self.files);
        match files.get(path.as_str()) {
            Some(entry) => Ok(FileInfo {
                path: path.clone(),
                is_dir: false,
                size: entry.bytes.len() as u64,
                modified: Some(entry.modified),
            }),
            None if Self::is_dir(&files, path.as_str()) => Ok(FileInfo {
                path: path.clone(),
                is_dir: true,
                size: 0,
                modified: None,
            }),
            None => Err(FsError::NotFound { path: path.clone() }),
        }
    }

    async fn list(&self, path: &WsPath) -> Result<Vec<FileInfo>, FsError> {
        let files = lock(&self.files);
        if files.contains_key(path.as_str()) {
            return Err(FsError::NotDirectory { path: path.clone() });
        }
        let prefix = if path.is_root() {
            String::new()
        } else {
            format!("{}/", path.as_str())
        };
        let mut dirs = BTreeSet::new();
        let mut out = Vec::new();
        for (key, entry) in files.range(prefix.clone()..) {
            let Some(rest) = key.strip_prefix(&prefix) else {
                break;
            };
            match rest.split_once('/') {
                Some((dir, _)) => {
                    dirs.insert(dir.to_owned());
                }
                None => out.push(FileInfo {
                    path: WsPath::parse(key)?,
                    is_dir: false,
                    size: entry.bytes.len() as u64,
                    modified: Some(entry.modified),
                }),
            }
        }
        for dir in dirs {
            out.push(FileInfo {
                path: WsPath::parse(&format!("{prefix}{dir}"))?,
                is_dir: true,
                size: 0,
                modified: None,
            });
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    async fn glob(&self, _base: &WsPath, _pattern: &str, _limit: usize) -> Result<Vec<FileInfo>, FsError> {
        Err(FsError::Unsupported { operation: "glob" })
    }

    async fn grep(&self, _base: &WsPath, _options: &GrepOptions) -> Result<Vec<GrepMatch>, FsError> {
        Err(FsError::Unsupported { operation: "grep" })
    }

    async fn delete(&self, path: &WsPath) -> Result<(), FsError> {
        let mut files = lock(&self.files);
        let prefix = format!("{}/", path.as_str());
        files.retain(|key, _| key != path.as_str() && !key.starts_with(&prefix));
        Ok(())
    }

    async fn mkdir(&self, _path: &WsPath) -> Result<(), FsError> {
        Ok(())
    }
}

/// A memory whose index lives in a fresh temporary directory.
pub fn memory(model: &ScriptedModel, config: MemoryConfig) -> (Memory, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let memory = Memory::new(config, Arc::new(model.clone()), dir.path().join("index"));
    (memory, dir)
}

/// A configuration that extracts after every call, without throttling.
pub fn eager() -> MemoryConfig {
    let mut config = MemoryConfig::default();
    config.extraction_throttle = std::time::Duration::ZERO;
    config
}

/// A call context for `user` in `session` with `fs` as the user's workspace.
pub fn ctx(user: &str, session: &str, fs: &Arc<MemFs>) -> RuntimeContext {
    let (user_id, session_id) = (
        harness_core::UserId::parse(user).expect("test ids are safe"),
        harness_core::SessionId::parse(session).expect("test ids are safe"),
    );
    let mut ctx = RuntimeContext::for_user(user_id).with_session(session_id);
    let fs: Arc<dyn Filesystem> = fs.clone();
    ctx.insert(CallWorkspace {
        user: Arc::clone(&fs),
        layered: Arc::clone(&fs),
        unfenced: Arc::clone(&fs),
        shared: fs,
    });
    let scope = harness_fs::CallScope::parse(harness_fs::IsolationScope::User, "main", user, session)
        .expect("test ids are safe");
    ctx.insert(scope);
    ctx
}

/// `fs` as the trait object the memory API takes.
pub fn dyn_fs(fs: &Arc<MemFs>) -> Arc<dyn Filesystem> {
    fs.clone()
}

/// Today's daily log path (UTC), as the memory writes it.
pub fn today_log() -> String {
    harness_memory::daily_log_path(jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC).date())
        .as_str()
        .to_owned()
}

/// The text of the user message of a recorded model request.
pub fn request_text(request: &harness_core::ChatRequest) -> String {
    request
        .messages
        .iter()
        .map(|msg| msg.text())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A scripted model that answers extraction and consolidation requests from separate
/// scripts (told apart by the system prompt), so background consolidations triggered by a
/// test's extractions never eat the extraction replies. An empty script fails the call.
pub fn routed_model(extraction: Vec<Reply>, consolidation: Vec<Reply>) -> ScriptedModel {
    let extraction = Mutex::new(VecDeque::from(extraction));
    let consolidation = Mutex::new(VecDeque::from(consolidation));
    ScriptedModel::from_fn(move |request| {
        let queue = if is_consolidation(request) {
            &consolidation
        } else {
            &extraction
        };
        lock(queue)
            .pop_front()
            .unwrap_or_else(|| Reply::error(ScriptedError::InvalidRequest))
    })
}

/// Whether a recorded request is a consolidation (else an extraction).
pub fn is_consolidation(request: &ChatRequest) -> bool {
    request.system.render().contains("You maintain MEMORY.md")
}

/// The extraction requests a model received.
pub fn extraction_requests(model: &ScriptedModel) -> Vec<ChatRequest> {
    model
        .requests()
        .into_iter()
        .filter(|request| !is_consolidation(request))
        .collect()
}
