//! Test doubles for the compaction and eviction tests: an in-memory `Filesystem`, a filesystem
//! that refuses writes, simple tools, a transcript recorder and event helpers.
#![allow(clippy::expect_used, dead_code, unreachable_pub)]

use futures::StreamExt;
use harness_core::{
    AgentEvent, AgentNext, AgentStream, EventKind, Hooks, Middleware, Msg, RuntimeContext, Tool, ToolContext,
    ToolError, ToolOutput, ToolSpec, Turn, async_trait,
};
use harness_fs::{
    CallWorkspace, FileInfo, FileVersion, Filesystem, FsError, GrepMatch, GrepOptions, WriteMode, WsPath,
};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};

// ---------------------------------------------------------------------------------------------
// MemFs: an in-memory Filesystem.

#[derive(Debug, Default)]
struct Files {
    /// path → (bytes, version)
    files: BTreeMap<String, (Vec<u8>, u64)>,
    /// Directories created explicitly (others exist because a file lies below them).
    dirs: BTreeSet<String>,
    next_version: u64,
}

/// An in-memory [`Filesystem`]: files in a map, directories implied by paths (or made with
/// `mkdir`). Glob supports `*`, `**` and `?`; grep supports literal patterns.
#[derive(Debug, Default)]
pub struct MemFs {
    inner: Mutex<Files>,
}

fn below(path: &str, dir: &str) -> bool {
    dir.is_empty() || (path.len() > dir.len() && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/')
}

impl Files {
    fn is_dir(&self, path: &str) -> bool {
        path.is_empty()
            || self.dirs.contains(path)
            || self.files.keys().any(|file| below(file, path))
            || self.dirs.iter().any(|dir| below(dir, path))
    }

    /// The nearest ancestor of `path` that is a file, if any.
    fn file_ancestor(&self, path: &WsPath) -> Option<WsPath> {
        let mut at = path.parent();
        while let Some(dir) = at {
            if self.files.contains_key(dir.as_str()) {
                return Some(dir);
            }
            at = dir.parent();
        }
        None
    }

    fn check_writable(&self, path: &WsPath) -> Result<(), FsError> {
        if path.is_root() || self.is_dir(path.as_str()) {
            return Err(FsError::IsDirectory { path: path.clone() });
        }
        if let Some(file) = self.file_ancestor(path) {
            return Err(FsError::NotDirectory { path: file });
        }
        Ok(())
    }

    fn bump(&mut self) -> u64 {
        self.next_version += 1;
        self.next_version
    }
}

impl MemFs {
    /// An empty filesystem.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn files(&self) -> std::sync::MutexGuard<'_, Files> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every file path, sorted.
    pub fn paths(&self) -> Vec<String> {
        self.files().files.keys().cloned().collect()
    }

    /// A file's text, if it exists.
    pub fn text(&self, path: &str) -> Option<String> {
        self.files()
            .files
            .get(path)
            .map(|(bytes, _)| String::from_utf8_lossy(bytes).into_owned())
    }
}

fn glob_match(pattern: &[&str], path: &[&str]) -> bool {
    match (pattern.first(), path.first()) {
        (None, None) => true,
        (Some(&"**"), _) => glob_match(&pattern[1..], path) || (!path.is_empty() && glob_match(pattern, &path[1..])),
        (Some(segment), Some(name)) => {
            segment_match(segment.as_bytes(), name.as_bytes()) && glob_match(&pattern[1..], &path[1..])
        }
        _ => false,
    }
}

fn segment_match(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            segment_match(&pattern[1..], name) || (!name.is_empty() && segment_match(pattern, &name[1..]))
        }
        (Some(b'?'), Some(_)) => segment_match(&pattern[1..], &name[1..]),
        (Some(a), Some(b)) => a == b && segment_match(&pattern[1..], &name[1..]),
        _ => false,
    }
}

fn relative<'a>(path: &'a str, base: &str) -> &'a str {
    if base.is_empty() {
        path
    } else {
        path.get(base.len() + 1..).unwrap_or("")
    }
}

#[async_trait]
impl Filesystem for MemFs {
    fn describe(&self) -> String {
        "mem:".to_owned()
    }

    async fn read(&self, path: &WsPath) -> Result<Vec<u8>, FsError> {
        self.read_versioned(path).await.map(|(bytes, _)| bytes)
    }

    async fn read_versioned(&self, path: &WsPath) -> Result<(Vec<u8>, FileVersion), FsError> {
        let files = self.files();
        match files.files.get(path.as_str()) {
            Some((bytes, version)) => Ok((bytes.clone(), FileVersion(version.to_string()))),
            None if files.is_dir(path.as_str()) => Err(FsError::IsDirectory { path: path.clone() }),
            None => Err(FsError::NotFound { path: path.clone() }),
        }
    }

    async fn write(&self, path: &WsPath, bytes: &[u8], mode: WriteMode) -> Result<(), FsError> {
        let mut files = self.files();
        files.check_writable(path)?;
        let existing = files.files.get(path.as_str()).map(|(_, version)| *version);
        match (&mode, existing) {
            (WriteMode::CreateNew, Some(_)) => return Err(FsError::AlreadyExists { path: path.clone() }),
            (WriteMode::IfMatch(expected), found) if found.map(|v| v.to_string()) != Some(expected.0.clone()) => {
                return Err(FsError::Conflict { path: path.clone() });
            }
            _ => {}
        }
        let version = files.bump();
        files.files.insert(path.as_str().to_owned(), (bytes.to_vec(), version));
        Ok(())
    }

    async fn append(&self, path: &WsPath, bytes: &[u8]) -> Result<(), FsError> {
        let mut files = self.files();
        files.check_writable(path)?;
        let version = files.bump();
        let entry = files
            .files
            .entry(path.as_str().to_owned())
            .or_insert_with(|| (Vec::new(), version));
        entry.0.extend_from_slice(bytes);
        entry.1 = version;
        Ok(())
    }

    async fn stat(&self, path: &WsPath) -> Result<FileInfo, FsError> {
        let files = self.files();
        if let Some((bytes, _)) = files.files.get(path.as_str()) {
            return Ok(FileInfo {
                path: path.clone(),
                is_dir: false,
                size: bytes.len() as u64,
                modified: None,
            });
        }
        if files.is_dir(path.as_str()) {
            return Ok(FileInfo {
                path: path.clone(),
                is_dir: true,
                size: 0,
                modified: None,
            });
        }
        Err(FsError::NotFound { path: path.clone() })
    }

    async fn list(&self, path: &WsPath) -> Result<Vec<FileInfo>, FsError> {
        let files = self.files();
        if files.files.contains_key(path.as_str()) {
            return Err(FsError::NotDirectory { path: path.clone() });
        }
        let mut entries: BTreeMap<String, FileInfo> = BTreeMap::new();
        let candidates = files.files.keys().chain(files.dirs.iter());
        for full in candidates.filter(|candidate| below(candidate, path.as_str())) {
            let rest = relative(full, path.as_str());
            let child = rest.split('/').next().unwrap_or(rest);
            let child_path = path.join(child).expect("stored paths are valid");
            let info = match files.files.get(child_path.as_str()) {
                Some((bytes, _)) => FileInfo {
                    path: child_path.clone(),
                    is_dir: false,
                    size: bytes.len() as u64,
                    modified: None,
                },
                None => FileInfo {
                    path: child_path.clone(),
                    is_dir: true,
                    size: 0,
                    modified: None,
                },
            };
            entries.insert(child_path.as_str().to_owned(), info);
        }
        Ok(entries.into_values().collect())
    }

    async fn glob(&self, base: &WsPath, pattern: &str, limit: usize) -> Result<Vec<FileInfo>, FsError> {
        if pattern.contains(['[', '{']) {
            return Err(FsError::Unsupported {
                operation: "glob with [..] or {..} (MemFs)",
            });
        }
        let pattern: Vec<&str> = pattern.split('/').filter(|s| !s.is_empty()).collect();
        let files = self.files();
        Ok(files
            .files
            .iter()
            .filter(|(path, _)| below(path, base.as_str()))
            .filter(|(path, _)| {
                let rest: Vec<&str> = relative(path, base.as_str()).split('/').collect();
                glob_match(&pattern, &rest)
            })
            .take(limit)
            .map(|(path, (bytes, _))| FileInfo {
                path: WsPath::parse(path).expect("stored paths are valid"),
                is_dir: false,
                size: bytes.len() as u64,
                modified: None,
            })
            .collect())
    }

    async fn grep(&self, base: &WsPath, options: &GrepOptions) -> Result<Vec<GrepMatch>, FsError> {
        if !options.literal {
            return Err(FsError::Unsupported {
                operation: "regex grep (MemFs)",
            });
        }
        let glob: Option<Vec<&str>> = options
            .glob
            .as_deref()
            .map(|glob| glob.split('/').filter(|s| !s.is_empty()).collect());
        let needle = if options.case_insensitive {
            options.pattern.to_lowercase()
        } else {
            options.pattern.clone()
        };
        let files = self.files();
        let mut out = Vec::new();
        for (path, (bytes, _)) in files.files.iter().filter(|(path, _)| below(path, base.as_str())) {
            if let Some(glob) = &glob {
                let rest: Vec<&str> = relative(path, base.as_str()).split('/').collect();
                let name = rest.last().copied().unwrap_or("");
                if !(glob_match(glob, &rest) || (glob.len() == 1 && glob_match(glob, &[name]))) {
                    continue;
                }
            }
            let Ok(text) = std::str::from_utf8(bytes) else { continue };
            let lines: Vec<&str> = text.lines().collect();
            for (at, line) in lines.iter().enumerate() {
                let hay = if options.case_insensitive {
                    line.to_lowercase()
                } else {
                    (*line).to_owned()
                };
                if !hay.contains(&needle) {
                    continue;
                }
                if out.len() == options.max_matches {
                    return Ok(out);
                }
                out.push(GrepMatch {
                    path: WsPath::parse(path).expect("stored paths are valid"),
                    line: at + 1,
                    text: (*line).to_owned(),
                    before: lines[at.saturating_sub(options.context)..at]
                        .iter()
                        .map(|l| (*l).to_owned())
                        .collect(),
                    after: lines[at + 1..(at + 1 + options.context).min(lines.len())]
                        .iter()
                        .map(|l| (*l).to_owned())
                        .collect(),
                });
            }
        }
        Ok(out)
    }

    async fn delete(&self, path: &WsPath) -> Result<(), FsError> {
        let mut files = self.files();
        files
            .files
            .retain(|file, _| file != path.as_str() && !below(file, path.as_str()));
        files
            .dirs
            .retain(|dir| dir != path.as_str() && !below(dir, path.as_str()));
        Ok(())
    }

    async fn mkdir(&self, path: &WsPath) -> Result<(), FsError> {
        let mut files = self.files();
        if files.files.contains_key(path.as_str()) {
            return Err(FsError::NotDirectory { path: path.clone() });
        }
        if let Some(file) = files.file_ancestor(path) {
            return Err(FsError::NotDirectory { path: file });
        }
        if !path.is_root() {
            files.dirs.insert(path.as_str().to_owned());
        }
        Ok(())
    }
}

/// A filesystem whose writes all fail (a full disk); reads find nothing.
#[derive(Debug, Default)]
pub struct FailingFs;

fn disk_full(path: &WsPath, operation: &'static str) -> FsError {
    FsError::Io {
        path: path.clone(),
        operation,
        source: "no space left on device".into(),
    }
}

#[async_trait]
impl Filesystem for FailingFs {
    fn describe(&self) -> String {
        "failing:".to_owned()
    }
    async fn read(&self, path: &WsPath) -> Result<Vec<u8>, FsError> {
        Err(FsError::NotFound { path: path.clone() })
    }
    async fn read_versioned(&self, path: &WsPath) -> Result<(Vec<u8>, FileVersion), FsError> {
        Err(FsError::NotFound { path: path.clone() })
    }
    async fn write(&self, path: &WsPath, _bytes: &[u8], _mode: WriteMode) -> Result<(), FsError> {
        Err(disk_full(path, "write"))
    }
    async fn append(&self, path: &WsPath, _bytes: &[u8]) -> Result<(), FsError> {
        Err(disk_full(path, "append"))
    }
    async fn stat(&self, path: &WsPath) -> Result<FileInfo, FsError> {
        Err(FsError::NotFound { path: path.clone() })
    }
    async fn list(&self, _path: &WsPath) -> Result<Vec<FileInfo>, FsError> {
        Ok(Vec::new())
    }
    async fn glob(&self, _base: &WsPath, _pattern: &str, _limit: usize) -> Result<Vec<FileInfo>, FsError> {
        Ok(Vec::new())
    }
    async fn grep(&self, _base: &WsPath, _options: &GrepOptions) -> Result<Vec<GrepMatch>, FsError> {
        Ok(Vec::new())
    }
    async fn delete(&self, _path: &WsPath) -> Result<(), FsError> {
        Ok(())
    }
    async fn mkdir(&self, path: &WsPath) -> Result<(), FsError> {
        Err(disk_full(path, "mkdir"))
    }
}

/// A context for `user` in the default session whose namespace (and shared root) is `fs`.
pub fn ctx_with(user: &str, fs: Arc<dyn Filesystem>) -> RuntimeContext {
    ctx_in(user, harness_core::DEFAULT_SESSION, fs)
}

/// A context for `user` in `session` whose namespace (and shared root) is `fs`, with the
/// call's scope (isolation `user`, agent `agent`, the builder's default name) as the harness
/// binds it.
pub fn ctx_in(user: &str, session: &str, fs: Arc<dyn Filesystem>) -> RuntimeContext {
    let user = harness_core::UserId::parse(user).unwrap();
    let session = harness_core::SessionId::parse(session).unwrap();
    let scope = harness_fs::CallScope::new(
        harness_fs::IsolationScope::User,
        harness_core::AgentId::from_static("agent"),
        user.clone(),
        session.clone(),
    )
    .unwrap();
    let mut ctx = RuntimeContext::for_user(user).with_session(session);
    ctx.insert(scope);
    ctx.insert(CallWorkspace {
        user: Arc::clone(&fs),
        layered: Arc::clone(&fs),
        unfenced: Arc::clone(&fs),
        shared: fs,
    });
    ctx
}

// ---------------------------------------------------------------------------------------------
// Tools.

/// A tool returning text computed from its arguments.
pub struct TextTool {
    spec: ToolSpec,
    output: Box<dyn Fn(&Value) -> String + Send + Sync>,
}

/// A tool named `name` (any arguments) answering `output(arguments)`.
pub fn text_tool(name: &str, output: impl Fn(&Value) -> String + Send + Sync + 'static) -> Arc<dyn Tool> {
    Arc::new(TextTool {
        spec: ToolSpec {
            name: name.to_owned(),
            description: format!("test tool {name}"),
            input_schema: serde_json::json!({"type": "object"}),
            annotations: harness_core::ToolAnnotations::new(),
        },
        output: Box::new(output),
    })
}

#[async_trait]
impl Tool for TextTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn call(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text((self.output)(&input)))
    }
}

/// `read_file` over the call's namespace, paging by lines (`offset` 0-based, `limit` lines).
pub struct ReadFile {
    spec: ToolSpec,
}

impl ReadFile {
    /// The tool.
    pub fn tool() -> Arc<dyn Tool> {
        Arc::new(Self {
            spec: ToolSpec {
                name: "read_file".to_owned(),
                description: "Read a text file; page with offset/limit (lines).".to_owned(),
                input_schema: serde_json::json!({
                    "type": "object",
                    "properties": {
                        "path": {"type": "string"},
                        "offset": {"type": "integer", "minimum": 0},
                        "limit": {"type": "integer", "minimum": 0}
                    },
                    "required": ["path"]
                }),
                annotations: harness_core::ToolAnnotations::new(),
            },
        })
    }
}

#[async_trait]
impl Tool for ReadFile {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let workspace = ctx
            .runtime
            .get::<CallWorkspace>()
            .ok_or_else(|| ToolError::failed("no workspace"))?;
        let path =
            WsPath::parse(input["path"].as_str().unwrap_or_default()).map_err(|e| ToolError::failed(e.to_string()))?;
        let bytes = workspace
            .user
            .read(&path)
            .await
            .map_err(|e| ToolError::failed(e.to_string()))?;
        let text = String::from_utf8_lossy(&bytes);
        let offset = input["offset"].as_u64().unwrap_or(0) as usize;
        let limit = input["limit"].as_u64().unwrap_or(0) as usize;
        let lines = text.lines().skip(offset);
        let page: Vec<&str> = if limit == 0 {
            lines.collect()
        } else {
            lines.take(limit).collect()
        };
        Ok(ToolOutput::text(page.join("\n")))
    }
}

// ---------------------------------------------------------------------------------------------
// Transcript recorder and events.

/// An outermost `agent` middleware that keeps a copy of every message each call appended:
/// what the session layer writes to the raw transcript.
#[derive(Debug, Default)]
pub struct TranscriptRecorder {
    messages: Mutex<Vec<Arc<Msg>>>,
}

impl TranscriptRecorder {
    /// Everything appended so far, in order.
    pub fn messages(&self) -> Vec<Arc<Msg>> {
        self.messages.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

#[async_trait]
impl Middleware for TranscriptRecorder {
    fn name(&self) -> &'static str {
        "transcript_recorder"
    }
    fn hooks(&self) -> Hooks {
        Hooks::AGENT
    }
    async fn agent(&self, turn: &mut Turn, next: AgentNext<'_>) -> Result<(), harness_core::AgentError> {
        let result = next.run(turn).await;
        self.messages
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(turn.appended().iter().cloned());
        result
    }
}

/// Drains a streaming call.
pub async fn collect(stream: AgentStream) -> Vec<AgentEvent> {
    stream.collect().await
}

/// The data of every notice of `kind`, decoded.
pub fn notices<T: DeserializeOwned>(events: &[AgentEvent], kind: &str) -> Vec<T> {
    events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::Notice { kind: found, data } if found == kind => {
                Some(serde_json::from_value(data.clone()).expect("notice data decodes"))
            }
            _ => None,
        })
        .collect()
}

/// The codes of every warning.
pub fn warnings(events: &[AgentEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::Warning { code, .. } => Some(code.clone()),
            _ => None,
        })
        .collect()
}

/// The final message's text, or the error.
pub fn outcome(events: &[AgentEvent]) -> Result<String, String> {
    match events.last().map(|event| &event.kind) {
        Some(EventKind::Final { message }) => Ok(message.text()),
        Some(EventKind::Error { message, .. }) => Err(message.clone()),
        other => Err(format!("stream ended with {other:?}")),
    }
}
