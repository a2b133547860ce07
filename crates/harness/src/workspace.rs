//! [`WorkspaceManager`]: a stateless accessor over the workspace's filesystem, with the
//! two-layer read for injected files and a change-checked cache so unchanged files are not
//! re-read on every step.

use harness_core::{AgentId, RuntimeContext};
use harness_fs::{CallScope, CallWorkspace, FileInfo, Filesystem, FsError, IsolationScope, ScopeError, WsPath};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Files larger than this are not injected into the prompt (a warning says so).
pub const MAX_INJECTED_BYTES: u64 = 1024 * 1024;
/// At most this many knowledge paths are listed in the prompt.
pub const MAX_KNOWLEDGE_PATHS: usize = 100;
/// How long a knowledge listing is reused before the directory is walked again.
const LISTING_TTL: Duration = Duration::from_secs(2);

/// The text of an injected file and how it was obtained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectedFile {
    /// The text (invalid UTF-8 replaced, with a marker line at the end).
    pub text: Arc<str>,
    /// Which layer it came from.
    pub layer: Layer,
}

/// Where an injected file was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    /// The caller's namespace (a per-user override).
    User,
    /// The shared workspace.
    Shared,
    /// The local template directory (for remote filesystems).
    Template,
}

/// Why a file was left out of the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedFile {
    /// The file.
    pub path: WsPath,
    /// Why.
    pub reason: String,
}

#[derive(Clone)]
struct CachedText {
    stamp: (Option<jiff::Timestamp>, u64),
    text: Arc<str>,
}

#[derive(Clone)]
struct CachedListing {
    at: Instant,
    stamp: Option<(Option<jiff::Timestamp>, u64)>,
    paths: Arc<[WsPath]>,
}

/// The workspace of one agent: where its persona, knowledge and runtime data live.
///
/// Holds no per-call state: [`call_workspace`](Self::call_workspace) gives each call its
/// own view (the caller's namespace plus the shared root). The only mutable part is a cache
/// of injected file texts keyed by path and checked against the file's modification time
/// and size on every read, so an edit takes effect on the next step while unchanged files
/// are never re-read.
pub struct WorkspaceManager {
    root: PathBuf,
    fs: Arc<dyn Filesystem>,
    template: Option<Arc<dyn Filesystem>>,
    scope: IsolationScope,
    agent: AgentId,
    texts: Mutex<HashMap<(Layer, String), CachedText>>,
    listings: Mutex<HashMap<String, CachedListing>>,
}

impl std::fmt::Debug for WorkspaceManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkspaceManager")
            .field("root", &self.root)
            .field("fs", &self.fs.describe())
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl WorkspaceManager {
    /// A workspace at `root` (a local directory, shown in prompts) served by `fs`, with
    /// `template` as the fallback layer for injected files when `fs` is not the local disk.
    pub fn new(
        root: impl Into<PathBuf>,
        fs: Arc<dyn Filesystem>,
        template: Option<Arc<dyn Filesystem>>,
        scope: IsolationScope,
        agent: AgentId,
    ) -> Self {
        Self {
            root: root.into(),
            fs,
            template,
            scope,
            agent,
            texts: Mutex::new(HashMap::new()),
            listings: Mutex::new(HashMap::new()),
        }
    }

    /// The local root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The workspace filesystem (shared, not namespaced).
    pub fn filesystem(&self) -> &Arc<dyn Filesystem> {
        &self.fs
    }

    /// How runtime data is partitioned.
    pub fn scope(&self) -> IsolationScope {
        self.scope
    }

    /// The agent whose workspace this is.
    pub fn agent(&self) -> &AgentId {
        &self.agent
    }

    /// The scope of a call: its user and session (the documented defaults when missing),
    /// this agent and the isolation scope. The only place a call's namespace is computed.
    ///
    /// # Errors
    /// [`ScopeError`] when an id is unsafe, or reserved where it would name a namespace.
    pub fn call_scope(&self, ctx: &RuntimeContext) -> Result<CallScope, ScopeError> {
        // An isolated subagent's call: its layer is derived from the parent's scope.
        if let Some(crate::facts::IsolatedParent(parent)) = ctx.get::<crate::facts::IsolatedParent>() {
            return parent.isolated_child(
                self.agent.clone(),
                ctx.session_id.clone().unwrap_or(harness_core::DEFAULT_SESSION_ID),
            );
        }
        CallScope::new(
            self.scope,
            self.agent.clone(),
            ctx.user_id.clone().unwrap_or(harness_core::DEFAULT_USER_ID),
            ctx.session_id.clone().unwrap_or(harness_core::DEFAULT_SESSION_ID),
        )
    }

    /// The filesystems of one call (see [`CallWorkspace`]).
    pub fn call_workspace(&self, scope: &CallScope) -> CallWorkspace {
        CallWorkspace::new(&self.fs, scope, self.template.as_ref())
    }

    /// [`call_workspace`](Self::call_workspace) whose writes to shared backends carry
    /// `fence` ([`CallWorkspace::fenced`]).
    pub fn call_workspace_fenced(&self, scope: &CallScope, fence: &harness_store::KvFence) -> CallWorkspace {
        CallWorkspace::fenced(&self.fs, scope, self.template.as_ref(), fence)
    }

    /// Reads an injected file with the two-layer rule: the caller's namespace first (a
    /// per-user override), then the shared workspace, then the local template. Empty files
    /// count as absent. Oversized or unreadable files are skipped with a reason.
    pub async fn read_injected(
        &self,
        call: &CallWorkspace,
        namespace: &WsPath,
        path: &WsPath,
    ) -> Result<Option<InjectedFile>, SkippedFile> {
        self.read_layers(call, namespace, path, &call.shared).await
    }

    /// Reads an operator-configured context file (`additional_context_files`): the caller's
    /// override first, then the workspace root itself (such a file need not be one of the
    /// shared entries), then the local template.
    pub async fn read_context_file(
        &self,
        call: &CallWorkspace,
        namespace: &WsPath,
        path: &WsPath,
    ) -> Result<Option<InjectedFile>, SkippedFile> {
        self.read_layers(call, namespace, path, &self.fs).await
    }

    async fn read_layers(
        &self,
        call: &CallWorkspace,
        namespace: &WsPath,
        path: &WsPath,
        shared: &Arc<dyn Filesystem>,
    ) -> Result<Option<InjectedFile>, SkippedFile> {
        let mut layers: Vec<(Layer, &Arc<dyn Filesystem>)> = Vec::with_capacity(3);
        if !namespace.is_root() {
            layers.push((Layer::User, &call.user));
        }
        layers.push((Layer::Shared, shared));
        if let Some(template) = &self.template {
            layers.push((Layer::Template, template));
        }
        for (layer, fs) in layers {
            let cache_key = match layer {
                Layer::User => format!("{namespace}/{path}"),
                _ => path.as_str().to_owned(),
            };
            match self.cached_text(layer, cache_key, fs, path).await {
                Ok(Some(text)) if !text.trim().is_empty() => return Ok(Some(InjectedFile { text, layer })),
                Ok(_) => {}
                Err(reason) => {
                    return Err(SkippedFile {
                        path: path.clone(),
                        reason,
                    });
                }
            }
        }
        Ok(None)
    }

    async fn cached_text(
        &self,
        layer: Layer,
        key: String,
        fs: &Arc<dyn Filesystem>,
        path: &WsPath,
    ) -> Result<Option<Arc<str>>, String> {
        let info = match fs.stat(path).await {
            Ok(info) => info,
            Err(FsError::NotFound { .. }) => {
                lock(&self.texts).remove(&(layer, key));
                return Ok(None);
            }
            Err(err) => return Err(err.to_string()),
        };
        if info.is_dir {
            return Ok(None);
        }
        if info.size > MAX_INJECTED_BYTES {
            return Err(format!(
                "{} bytes is over the {MAX_INJECTED_BYTES}-byte limit for injected files; \
                 shorten it below the limit (move detail into other files the agent reads when it needs them)",
                info.size
            ));
        }
        let stamp = (info.modified, info.size);
        if let Some(hit) = lock(&self.texts)
            .get(&(layer, key.clone()))
            .filter(|c| c.stamp == stamp)
        {
            return Ok(Some(Arc::clone(&hit.text)));
        }
        let bytes = fs.read(path).await.map_err(|err| err.to_string())?;
        let text: Arc<str> = match String::from_utf8(bytes) {
            Ok(text) => text.into(),
            Err(err) => {
                let mut text = String::from_utf8_lossy(err.as_bytes()).into_owned();
                text.push_str("\n[harness: this file is not valid UTF-8; undecodable bytes were replaced with U+FFFD]");
                text.into()
            }
        };
        lock(&self.texts).insert(
            (layer, key),
            CachedText {
                stamp,
                text: Arc::clone(&text),
            },
        );
        Ok(Some(text))
    }

    /// Every file under `dir` (recursive) in the shared workspace and the caller's namespace,
    /// de-duplicated and sorted. Re-walked when the directory changed or after a short TTL.
    pub async fn list_files(&self, call: &CallWorkspace, namespace: &WsPath, dir: &WsPath) -> Arc<[WsPath]> {
        let key = format!("{namespace}|{dir}");
        let stamp = call
            .shared
            .stat(dir)
            .await
            .ok()
            .map(|info: FileInfo| (info.modified, info.size));
        if let Some(hit) = lock(&self.listings)
            .get(&key)
            .filter(|c| c.stamp == stamp && c.at.elapsed() < LISTING_TTL)
        {
            return Arc::clone(&hit.paths);
        }
        let mut paths: Vec<WsPath> = Vec::new();
        let mut layers: Vec<&Arc<dyn Filesystem>> = vec![&call.shared];
        if !namespace.is_root() {
            layers.push(&call.user);
        }
        for fs in layers {
            if let Ok(found) = fs.glob(dir, "**/*", MAX_KNOWLEDGE_PATHS * 4).await {
                paths.extend(found.into_iter().filter(|info| !info.is_dir).map(|info| info.path));
            }
        }
        paths.sort();
        paths.dedup();
        let paths: Arc<[WsPath]> = paths.into();
        lock(&self.listings).insert(
            key,
            CachedListing {
                at: Instant::now(),
                stamp,
                paths: Arc::clone(&paths),
            },
        );
        paths
    }
}

/// The `AGENTS.md` written by `harness init`.
pub const AGENTS_TEMPLATE: &str = "# Persona\n\nYou are a helpful, precise assistant.\n(Who the agent is and its rules: this file is in every step's prompt.)\n";
/// The `knowledge/KNOWLEDGE.md` written by `harness init`.
pub const KNOWLEDGE_TEMPLATE: &str =
    "# Knowledge\n\nThe agent's reference material; other files here are listed and read on demand.\n";

/// Creates a workspace skeleton in `dir` (AGENTS.md, knowledge/KNOWLEDGE.md, a commented
/// harness.toml). Existing files are never overwritten. Returns the files created.
///
/// # Errors
/// The first IO error.
pub fn init_workspace(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let files = [
        ("AGENTS.md", AGENTS_TEMPLATE),
        ("knowledge/KNOWLEDGE.md", KNOWLEDGE_TEMPLATE),
        (crate::config::CONFIG_FILE, crate::config::CONFIG_TEMPLATE),
    ];
    let mut created = Vec::new();
    for (relative, content) in files {
        let path = dir.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(mut file) => {
                std::io::Write::write_all(&mut file, content.as_bytes())?;
                created.push(path);
            }
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(err) => return Err(err),
        }
    }
    Ok(created)
}
