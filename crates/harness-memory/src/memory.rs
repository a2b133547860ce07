//! [`Memory`]: the shared memory capability and its background work.
//!
//! Extraction after calls reads the session's transcript past a persisted watermark
//! (`extraction_mark`), so what one process leaves pending a later one catches up on; the
//! throttle window and the consolidation gap are persisted too, and honoured the first time a
//! process sees a session or namespace.
//!
//! Every background task is spawned on one `TaskTracker` and watches two tokens: `shutdown`
//! (graceful: extractions that are due run now, those inside their throttle window are left
//! to a later process, the maintenance loop stops, nothing new is accepted) and `abort` (hard: in-flight work stops at its next await; it has written nothing
//! half-way, because every write is one append or one whole-file write).

use crate::config::{MemoryConfig, MemoryMode};
use crate::consolidation::{self, ConsolidationOutcome};
use crate::error::MemoryError;
use crate::extraction::{self, FlushOutcome};
use crate::extraction_mark::{ExtractionMark, pending_messages};
use crate::index::{Index, IndexStats, SearchResults, SearchScope};
use crate::layout::{CONSOLIDATION_STATE, Watermark, path};
use crate::lease::{Lease, LocalLease};
use crate::middleware::MemoryMiddleware;
use crate::namespace::NamespaceKey;
use harness_core::{ChatModel, Middleware, Msg, SessionId, Tool, Turn};
use harness_fs::{CallScope, CallWorkspace, Filesystem};
use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

mod session_task;
use session_task::SessionExtraction;

/// Messages kept per session while an extraction is throttled; older ones are dropped first
/// (they remain in the transcript).
const MAX_PENDING_MESSAGES: usize = 400;

/// Counters since the [`Memory`] was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Extraction model calls made.
    pub extraction_calls: u64,
    /// Consolidation model calls made.
    pub consolidation_calls: u64,
    /// Index work.
    pub index: IndexStats,
}

/// How [`Memory::shutdown`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Every pending extraction and background task finished within the timeout.
    pub completed: bool,
    /// Tasks still running at the timeout; they were cancelled before writing anything.
    pub abandoned: usize,
}

#[derive(Default)]
struct Pending {
    /// This process's messages of the session not extracted yet (the transcript has them
    /// too once the session layer persisted them).
    messages: Vec<Arc<Msg>>,
    /// The session's scope when extraction reads its transcript and keeps a persisted
    /// watermark (calls through the harness); `None` for messages handed over directly.
    scope: Option<CallScope>,
    running: bool,
    last_run: Option<Instant>,
}

struct NsShared {
    /// The namespace's own files: extraction and consolidation read and write here.
    fs: Arc<dyn Filesystem>,
    /// What the index covers: the caller's layered view (a shared `MEMORY.md` shows through),
    /// the same view `memory_search` refreshes with, so the two never undo each other.
    index_fs: Option<Arc<dyn Filesystem>>,
    last_seen: Instant,
    last_consolidation: Option<Instant>,
    sessions: HashMap<SessionId, Pending>,
}

/// The memory state of one namespace.
struct NsState {
    /// Serialises extractions of this namespace (read the log → ask the model → append), so
    /// two sessions of one user do not both write the same new fact.
    extraction: tokio::sync::Mutex<()>,
    shared: Mutex<NsShared>,
}

struct Inner {
    config: MemoryConfig,
    model: Arc<dyn ChatModel>,
    index: Index,
    lease: Arc<dyn Lease>,
    tasks: TaskTracker,
    shutdown: CancellationToken,
    abort: CancellationToken,
    namespaces: Mutex<HashMap<NamespaceKey, Arc<NsState>>>,
    maintenance_started: AtomicBool,
    extraction_calls: AtomicU64,
    consolidation_calls: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Two-layer long-term memory for one agent, shared by all its calls and users.
///
/// Build it once, register [`middleware`](Self::middleware) and [`tools`](Self::tools) on
/// the agent, and call [`shutdown`](Self::shutdown) before the process exits so throttled
/// extractions are written. Cheap to clone.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use harness_memory::{Memory, MemoryConfig};
/// use harness_models::ScriptedModel;
/// use std::sync::Arc;
/// let dir = tempfile::tempdir()?;
/// let memory = Memory::new(MemoryConfig::default(), Arc::new(ScriptedModel::new()), dir.path().join("index"));
/// let agent = harness_core::ReActAgent::builder()
///     .model(ScriptedModel::new().reply_text("hi"))
///     .middleware(memory.middleware())
///     .tools(memory.tools())
///     .build()?;
/// # let _ = agent;
/// let report = memory.shutdown(std::time::Duration::from_secs(5)).await;
/// assert!(report.completed);
/// # Ok::<_, Box<dyn std::error::Error>>(()) }).unwrap();
/// ```
#[derive(Clone)]
pub struct Memory {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory")
            .field("config", &self.inner.config)
            .field("model", &self.inner.model.name())
            .finish_non_exhaustive()
    }
}

/// The model of a [`Memory::for_search`]: every request fails, naming the fix.
struct NoModel;

#[async_trait::async_trait]
impl ChatModel for NoModel {
    fn name(&self) -> &str {
        "none"
    }

    async fn stream(
        &self,
        _request: harness_core::ChatRequest,
    ) -> Result<harness_core::ModelStream, harness_core::ModelError> {
        Err(harness_core::ModelError::InvalidRequest {
            status: 0,
            message: "this memory was opened for search only; extraction and consolidation need a model \
                      (the agent's, or `[memory] model`)"
                .to_owned(),
        })
    }
}

const _: fn() = || {
    fn shared<T: Send + Sync + 'static>() {}
    shared::<Memory>();
};

impl Memory {
    /// Memory with `config`, asking `model` for extraction and consolidation (the agent's
    /// model, or the cheaper one `config.model` names, resolved by the harness). Index files
    /// go under `index_dir`, one per namespace; it is created on first use. Nothing starts
    /// until the first call.
    pub fn new(config: MemoryConfig, model: Arc<dyn ChatModel>, index_dir: PathBuf) -> Self {
        let tasks = TaskTracker::new();
        let abort = CancellationToken::new();
        let index = Index::new(
            index_dir,
            config.index.enabled,
            config.index.search_wait,
            config.index.max_message_chars,
            tasks.clone(),
            abort.clone(),
        );
        Self {
            inner: Arc::new(Inner {
                config,
                model,
                index,
                lease: Arc::new(LocalLease::default()),
                tasks,
                shutdown: CancellationToken::new(),
                abort,
                namespaces: Mutex::new(HashMap::new()),
                maintenance_started: AtomicBool::new(false),
                extraction_calls: AtomicU64::new(0),
                consolidation_calls: AtomicU64::new(0),
            }),
        }
    }

    /// Memory for reading only (`harness memory search`, a quarantine review): searches and
    /// the index work as with [`new`](Self::new), but no model is configured, so an
    /// extraction or consolidation fails with a message saying so. Nothing starts until the
    /// first call.
    pub fn for_search(config: MemoryConfig, index_dir: PathBuf) -> Self {
        Self::new(config, Arc::new(NoModel), index_dir)
    }

    /// Uses `lease` for "one consolidator per namespace" (e.g. a Redis lease shared by all
    /// replicas) instead of the in-process default. Call it before sharing the memory.
    #[must_use]
    pub fn with_lease(self, lease: Arc<dyn Lease>) -> Self {
        let Inner {
            config,
            model,
            index,
            tasks,
            shutdown,
            abort,
            namespaces,
            maintenance_started,
            extraction_calls,
            consolidation_calls,
            ..
        } = match Arc::try_unwrap(self.inner) {
            Ok(inner) => inner,
            Err(shared) => {
                tracing::warn!("Memory::with_lease called after the memory was shared; the lease was not changed");
                return Self { inner: shared };
            }
        };
        Self {
            inner: Arc::new(Inner {
                config,
                model,
                index,
                lease,
                tasks,
                shutdown,
                abort,
                namespaces,
                maintenance_started,
                extraction_calls,
                consolidation_calls,
            }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &MemoryConfig {
        &self.inner.config
    }

    /// The `agent` middleware: after a successful call it schedules extraction of what the
    /// session has not had extracted (its transcript past the watermark, and the call's new
    /// messages) in the background (mode `after_call`), no earlier than the throttle allows and asks for a throttled
    /// consolidation. The reply is never delayed. It does nothing when memory is disabled.
    pub fn middleware(&self) -> Arc<dyn Middleware> {
        Arc::new(MemoryMiddleware::new(self.clone()))
    }

    /// The tools: `memory_search`, `memory_get`, `session_search`, `session_history`,
    /// `session_list`. They read only the caller's namespace
    /// ([`CallWorkspace::user`](harness_fs::CallWorkspace)).
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        crate::tools::all(self.clone())
    }

    /// Counters since the memory was built.
    pub fn stats(&self) -> MemoryStats {
        MemoryStats {
            extraction_calls: self.inner.extraction_calls.load(Ordering::Relaxed),
            consolidation_calls: self.inner.consolidation_calls.load(Ordering::Relaxed),
            index: self.inner.index.stats(),
        }
    }

    /// The index database file of a namespace (for operators and tests).
    pub fn index_path(&self, namespace: &NamespaceKey) -> PathBuf {
        self.inner.index.db_path(namespace)
    }

    /// Extracts facts from `messages` now and appends the new ones to today's log, with the
    /// session and time as provenance. See the crate docs for the rules a fact must pass.
    /// Extractions of one namespace run one at a time.
    ///
    /// # Errors
    /// [`MemoryError::Model`] or [`MemoryError::Fs`]; nothing was written then.
    ///
    /// # Cancellation
    /// Dropping the future or shutting down before the append leaves no trace.
    pub async fn flush(
        &self,
        fs: Arc<dyn Filesystem>,
        namespace: &NamespaceKey,
        session: &SessionId,
        messages: &[Arc<Msg>],
    ) -> Result<FlushOutcome, MemoryError> {
        let config = &self.inner.config;
        if !config.enabled || config.mode == MemoryMode::Off {
            return Ok(FlushOutcome::Skipped);
        }
        let state = self.inner.namespace(namespace, &fs);
        let outcome = self
            .inner
            .abortable(self.inner.extract(&state, fs, session, messages))
            .await?;
        if matches!(outcome, FlushOutcome::Written { .. }) {
            self.inner.request_consolidation(namespace);
        }
        Ok(outcome)
    }

    /// Extracts what of one session is pending — its transcript past the persisted watermark
    /// — now, ignoring the throttle (`harness memory extract`), and advances the watermark
    /// after the facts are written. Extractions of one namespace run one at a time.
    ///
    /// # Errors
    /// [`MemoryError::Model`] or [`MemoryError::Fs`]; the watermark did not move then.
    pub async fn extract_pending(
        &self,
        fs: Arc<dyn Filesystem>,
        scope: &CallScope,
    ) -> Result<FlushOutcome, MemoryError> {
        let config = &self.inner.config;
        if !config.enabled || config.mode == MemoryMode::Off {
            return Ok(FlushOutcome::Skipped);
        }
        let namespace = NamespaceKey::for_scope(scope);
        let state = self.inner.namespace(&namespace, &fs);
        let outcome = self
            .inner
            .abortable(self.inner.extract_session(&state, fs, scope, &[]))
            .await?;
        if matches!(outcome, FlushOutcome::Written { .. }) {
            self.inner.request_consolidation(&namespace);
        }
        Ok(outcome)
    }

    /// The sessions of `scope`'s agent with a transcript in the caller's layer (`fs`), in
    /// name order: what [`extract_pending`](Self::extract_pending) can catch up on.
    ///
    /// # Errors
    /// [`MemoryError::Fs`] when the sessions directory cannot be listed.
    pub async fn sessions_with_transcripts(
        &self,
        fs: &dyn Filesystem,
        scope: &CallScope,
    ) -> Result<Vec<SessionId>, MemoryError> {
        let entries = match fs.list(&scope.sessions_dir()).await {
            Ok(entries) => entries,
            Err(harness_fs::FsError::NotFound { .. }) => return Ok(Vec::new()),
            Err(err) => return Err(err.into()),
        };
        let mut sessions: Vec<SessionId> = entries
            .into_iter()
            .filter(|info| !info.is_dir)
            .filter_map(|info| {
                let id = info.path.file_name().strip_suffix(".log.jsonl")?.to_owned();
                SessionId::parse(&id).ok()
            })
            .collect();
        sessions.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        Ok(sessions)
    }

    /// For the compaction capability, before it summarises `messages` away: in mode
    /// `before_compaction` schedules an extraction of them in the background and returns at
    /// once; in any other mode does nothing (mode `after_call` already extracts every call).
    pub fn flush_before_compaction(
        &self,
        fs: Arc<dyn Filesystem>,
        namespace: &NamespaceKey,
        session: &SessionId,
        messages: Vec<Arc<Msg>>,
    ) {
        let config = &self.inner.config;
        if !config.enabled || config.mode != MemoryMode::BeforeCompaction || self.inner.shutdown.is_cancelled() {
            return;
        }
        let state = self.inner.namespace(namespace, &fs);
        Inner::enqueue(&self.inner, &state, namespace, session, None, messages, Duration::ZERO);
    }

    /// Merges the daily entries past the watermark into `MEMORY.md` (see
    /// [`ConsolidationOutcome`]). Returns [`ConsolidationOutcome::Busy`] when another
    /// consolidator holds the namespace.
    ///
    /// # Errors
    /// [`MemoryError::Disabled`], [`MemoryError::Model`], [`MemoryError::UnusableReply`],
    /// [`MemoryError::Fs`] (a [`Conflict`](harness_fs::FsError::Conflict) when `MEMORY.md`
    /// changed meanwhile), [`MemoryError::Lease`]. In every error case the old `MEMORY.md`
    /// and the watermark are unchanged.
    ///
    /// # Cancellation
    /// Safe at any point: `MEMORY.md` is replaced by one conditional write, and the watermark
    /// only moves after it.
    pub async fn consolidate(
        &self,
        fs: Arc<dyn Filesystem>,
        namespace: &NamespaceKey,
    ) -> Result<ConsolidationOutcome, MemoryError> {
        if !self.inner.config.enabled {
            return Err(MemoryError::Disabled);
        }
        self.inner.abortable(self.inner.consolidate(fs, namespace)).await
    }

    /// Searches the namespace's memory files (`MEMORY.md`, `memory/*.md`), best first.
    pub async fn search(
        &self,
        fs: Arc<dyn Filesystem>,
        namespace: &NamespaceKey,
        query: &str,
        limit: usize,
    ) -> SearchResults {
        self.search_in(fs, namespace, &SearchScope::Memory, query, limit).await
    }

    /// Searches memory files or session transcripts, best first, at most `limit` hits (and
    /// never more than `index.max_results`).
    pub async fn search_in(
        &self,
        fs: Arc<dyn Filesystem>,
        namespace: &NamespaceKey,
        scope: &SearchScope,
        query: &str,
        limit: usize,
    ) -> SearchResults {
        let limit = limit.clamp(1, self.inner.config.index.max_results.max(1));
        self.inner.index.search(namespace, fs, scope, query, limit).await
    }

    /// Brings the namespace's index up to date and waits for it (for `harness memory`
    /// commands and tests). Returns the problems met, if any.
    pub async fn refresh_index(&self, fs: Arc<dyn Filesystem>, namespace: &NamespaceKey) -> Vec<String> {
        self.inner.index.refresh(namespace, fs, None).await.1
    }

    /// Stops accepting work, runs the extractions that are due now (those inside their
    /// throttle window stay pending in the transcript for a later process; messages handed
    /// over without a transcript run now), and waits up to `timeout` for everything pending
    /// to finish; what is still running then is cancelled (before it writes anything, so its
    /// watermark does not move).
    pub async fn shutdown(&self, timeout: Duration) -> ShutdownReport {
        let inner = &self.inner;
        inner.shutdown.cancel();
        inner.tasks.close();
        if tokio::time::timeout(timeout, inner.tasks.wait()).await.is_ok() {
            return ShutdownReport {
                completed: true,
                abandoned: 0,
            };
        }
        let abandoned = inner.tasks.len();
        tracing::warn!(abandoned, "memory shutdown timed out; cancelling pending work");
        inner.abort.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(1), inner.tasks.wait()).await;
        ShutdownReport {
            completed: false,
            abandoned,
        }
    }

    /// The middleware's end-of-call work.
    pub(crate) fn after_call(&self, turn: &Turn) {
        let inner = &self.inner;
        if !inner.config.enabled || inner.shutdown.is_cancelled() {
            return;
        }
        let Some(workspace) = turn.ctx().get::<CallWorkspace>() else {
            tracing::debug!("no CallWorkspace in the call context; memory skipped");
            return;
        };
        let Some(key) = NamespaceKey::for_call(turn.ctx()) else {
            tracing::debug!("no CallScope in the call context; memory skipped");
            return;
        };
        let state = inner.namespace(&key, &workspace.user);
        lock(&state.shared).index_fs = Some(Arc::clone(&workspace.layered));
        Inner::start_maintenance(inner);
        if inner.config.mode == MemoryMode::AfterCall {
            Inner::enqueue(
                inner,
                &state,
                &key,
                &turn.key().session_id,
                turn.ctx().get::<CallScope>().cloned(),
                turn.appended().to_vec(),
                inner.config.extraction_throttle,
            );
        } else {
            // Entries written by hand or by a compaction flush still get consolidated.
            inner.request_consolidation(&key);
        }
    }
}

impl Inner {
    fn namespace(&self, key: &NamespaceKey, fs: &Arc<dyn Filesystem>) -> Arc<NsState> {
        let mut namespaces = lock(&self.namespaces);
        let state = namespaces.entry(key.clone()).or_insert_with(|| {
            Arc::new(NsState {
                extraction: tokio::sync::Mutex::new(()),
                shared: Mutex::new(NsShared {
                    fs: Arc::clone(fs),
                    index_fs: None,
                    last_seen: Instant::now(),
                    last_consolidation: None,
                    sessions: HashMap::new(),
                }),
            })
        });
        {
            let mut shared = lock(&state.shared);
            shared.fs = Arc::clone(fs);
            shared.last_seen = Instant::now();
        }
        Arc::clone(state)
    }

    /// Runs `work` unless the hard-stop token fires first. The work counts as pending for
    /// [`Memory::shutdown`], which waits for it (up to its timeout) and then cancels it.
    async fn abortable<T>(&self, work: impl Future<Output = Result<T, MemoryError>>) -> Result<T, MemoryError> {
        self.tasks
            .track_future(async {
                tokio::select! {
                    biased;
                    () = self.abort.cancelled() => Err(MemoryError::Cancelled),
                    result = work => result,
                }
            })
            .await
    }

    async fn extract(
        &self,
        state: &NsState,
        fs: Arc<dyn Filesystem>,
        session: &SessionId,
        messages: &[Arc<Msg>],
    ) -> Result<FlushOutcome, MemoryError> {
        let _one_at_a_time = state.extraction.lock().await;
        extraction::extract(
            &*self.model,
            &*fs,
            session,
            messages,
            usize::try_from(self.config.max_memory_tokens.get()).unwrap_or(usize::MAX),
            &self.extraction_calls,
        )
        .await
    }

    /// Extracts what of the session is not extracted yet (the transcript past the watermark
    /// and `extra`), then advances the watermark — only after the facts were appended.
    async fn extract_session(
        &self,
        state: &NsState,
        fs: Arc<dyn Filesystem>,
        scope: &CallScope,
        extra: &[Arc<Msg>],
    ) -> Result<FlushOutcome, MemoryError> {
        let _one_at_a_time = state.extraction.lock().await;
        let mark = ExtractionMark::read(&*fs, scope).await?;
        let messages = pending_messages(&*fs, scope, &mark, extra).await?;
        if messages.is_empty() {
            return Ok(FlushOutcome::Empty);
        }
        let outcome = extraction::extract(
            &*self.model,
            &*fs,
            scope.session(),
            &messages,
            usize::try_from(self.config.max_memory_tokens.get()).unwrap_or(usize::MAX),
            &self.extraction_calls,
        )
        .await?;
        let mut next = mark.advanced(&messages, jiff::Timestamp::now());
        if outcome == FlushOutcome::Empty {
            // No model call: the throttle window did not restart.
            next.last_run = mark.last_run;
        }
        next.write(&*fs, scope).await?;
        Ok(outcome)
    }

    async fn consolidate(
        &self,
        fs: Arc<dyn Filesystem>,
        key: &NamespaceKey,
    ) -> Result<ConsolidationOutcome, MemoryError> {
        let Some(_lease) = self.lease.try_acquire(&format!("memory-consolidation:{key}")).await? else {
            return Ok(ConsolidationOutcome::Busy);
        };
        consolidation::run(
            &*self.model,
            &*fs,
            usize::try_from(self.config.max_memory_tokens.get()).unwrap_or(usize::MAX),
            &self.consolidation_calls,
        )
        .await
    }

    /// Adds `messages` to the session's pending extraction and makes sure a task will run it
    /// no earlier than `throttle` after the previous one.
    fn enqueue(
        this: &Arc<Self>,
        state: &Arc<NsState>,
        key: &NamespaceKey,
        session: &SessionId,
        scope: Option<CallScope>,
        messages: Vec<Arc<Msg>>,
        throttle: Duration,
    ) {
        if messages.is_empty() {
            return;
        }
        let (due, first) = {
            let mut shared = lock(&state.shared);
            let pending = shared.sessions.entry(session.clone()).or_default();
            pending.messages.extend(messages);
            if scope.is_some() {
                pending.scope = scope;
            }
            if pending.messages.len() > MAX_PENDING_MESSAGES {
                let excess = pending.messages.len() - MAX_PENDING_MESSAGES;
                pending.messages.drain(..excess);
                tracing::warn!(session = %session, dropped = excess, "memory extraction backlog full; oldest messages skipped");
            }
            if pending.running {
                return;
            }
            pending.running = true;
            (
                pending.last_run.map_or_else(Instant::now, |last| last + throttle),
                pending.last_run.is_none(),
            )
        };
        let span = tracing::debug_span!("memory_extraction", namespace = %key, session_id = %session);
        let task = SessionExtraction {
            inner: Arc::clone(this),
            state: Arc::clone(state),
            key: key.clone(),
            session: session.clone(),
            throttle,
        };
        this.tasks.spawn(task.run(due, first).instrument(span));
    }

    /// Spawns a consolidation of `key` unless one ran within the minimum interval.
    /// During a graceful shutdown it still runs (an extraction that was due wrote facts;
    /// the caller's shutdown timeout bounds it), but not after the hard stop.
    fn request_consolidation(self: &Arc<Self>, key: &NamespaceKey) {
        if !self.config.enabled || self.abort.is_cancelled() {
            return;
        }
        let Some(state) = lock(&self.namespaces).get(key).cloned() else {
            return;
        };
        let (fs, first) = {
            let mut shared = lock(&state.shared);
            let now = Instant::now();
            if shared
                .last_consolidation
                .is_some_and(|last| now.duration_since(last) < self.config.consolidation_min_interval)
            {
                return;
            }
            let first = shared.last_consolidation.replace(now).is_none();
            (Arc::clone(&shared.fs), first)
        };
        let inner = Arc::clone(self);
        let key = key.clone();
        let span = tracing::debug_span!("memory_consolidation", namespace = %key);
        self.tasks.spawn(
            async move {
                // The gap holds across processes: the first request this process sees
                // honours the last consolidation recorded in the watermark.
                if first && inner.consolidated_recently(&*fs).await {
                    tracing::debug!("memory consolidation ran recently (persisted); skipped");
                    return;
                }
                match inner.abortable(inner.consolidate(fs, &key)).await {
                    Ok(outcome) => tracing::debug!(?outcome, "memory consolidation finished"),
                    Err(err) => {
                        tracing::warn!(error = %harness_core::error_chain(&err), "memory consolidation failed; will retry later");
                    }
                }
            }
            .instrument(span),
        );
    }

    /// Whether the namespace's watermark records a consolidation within the minimum interval.
    async fn consolidated_recently(&self, fs: &dyn Filesystem) -> bool {
        let Ok(bytes) = fs.read(&path(CONSOLIDATION_STATE)).await else {
            return false;
        };
        let Some(at) = Watermark::parse(&String::from_utf8_lossy(&bytes)).consolidated_at else {
            return false;
        };
        let elapsed = Duration::try_from(jiff::Timestamp::now().duration_since(at)).unwrap_or(Duration::ZERO);
        elapsed < self.config.consolidation_min_interval
    }

    /// Starts the periodic maintenance loop once (needs a runtime, so it starts with the
    /// first call rather than in `new`). A zero interval disables it.
    fn start_maintenance(this: &Arc<Self>) {
        if this.config.maintenance_interval.is_zero() || this.maintenance_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let inner = Arc::clone(this);
        this.tasks
            .spawn(async move { inner.maintenance().await }.instrument(tracing::debug_span!("memory_maintenance")));
    }

    async fn maintenance(self: Arc<Self>) {
        let interval = self.config.maintenance_interval;
        let mut next = Instant::now() + interval;
        loop {
            tokio::select! {
                biased;
                () = self.shutdown.cancelled() => return,
                () = tokio::time::sleep_until(next) => {}
            }
            next = Instant::now() + interval;
            // (key, the namespace's own files, the index's view)
            type Recent = (NamespaceKey, Arc<dyn Filesystem>, Arc<dyn Filesystem>);
            let recent: Vec<Recent> = {
                let mut namespaces = lock(&self.namespaces);
                let now = Instant::now();
                namespaces.retain(|_, state| {
                    let mut shared = lock(&state.shared);
                    let throttle = self.config.extraction_throttle;
                    shared.sessions.retain(|_, pending| {
                        pending.running
                            || !pending.messages.is_empty()
                            || pending.last_run.is_some_and(|last| now.duration_since(last) < throttle)
                    });
                    now.duration_since(shared.last_seen) < interval * 2 || !shared.sessions.is_empty()
                });
                namespaces
                    .iter()
                    .map(|(key, state)| {
                        let shared = lock(&state.shared);
                        let index_fs = shared.index_fs.as_ref().unwrap_or(&shared.fs);
                        (key.clone(), Arc::clone(&shared.fs), Arc::clone(index_fs))
                    })
                    .collect()
            };
            for (key, fs, index_fs) in recent {
                let pass = async {
                    match self.consolidate(Arc::clone(&fs), &key).await {
                        Ok(outcome) => tracing::debug!(namespace = %key, ?outcome, "maintenance consolidation"),
                        Err(err) => {
                            tracing::warn!(namespace = %key, error = %harness_core::error_chain(&err), "maintenance consolidation failed")
                        }
                    }
                    if self.config.index.enabled {
                        let (_, problems) = self.index.refresh(&key, index_fs, None).await;
                        if !problems.is_empty() {
                            tracing::warn!(namespace = %key, problems = problems.len(), "maintenance index refresh had problems");
                        }
                    }
                };
                tokio::select! {
                    biased;
                    () = self.shutdown.cancelled() => return,
                    () = pass => {}
                }
            }
        }
    }
}
