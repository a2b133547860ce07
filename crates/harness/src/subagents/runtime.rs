//! The task runtime: starts children, runs them as tasks (sync ones are tasks a tool call
//! waits for), records every transition in the parent session's task file, enforces the
//! limits, and stops children on cancel, timeout and shutdown.

use super::declaration::{SubagentDeclaration, WorkspaceMode};
use super::records::{TaskProgress, TaskRecord, TaskStatus, TaskStore, TaskStoreError};
use super::{ChildFactory, SubagentsConfig};
use futures::StreamExt;
use harness_core::{AgentEvent, EventKind, EventSink, EventSource, RuntimeContext, SessionId};
use harness_fs::{CallScope, CallWorkspace, WsPath};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How often a runner refreshes its tasks' heartbeats in the task file.
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(10);
/// A running task whose heartbeat is older than this, from another runner, is `lost`.
pub(crate) const HEARTBEAT_STALE: Duration = Duration::from_secs(30);
/// How often a runner looks in the task file for a cancel request from another process.
pub(crate) const CANCEL_POLL: Duration = Duration::from_secs(1);
/// Events of one task kept in memory (the oldest are dropped first).
pub(crate) const EVENT_BUFFER: usize = 256;
/// Finished tasks whose events stay readable in this process.
const FINISHED_KEPT: usize = 64;

/// The recent events of one task, and its progress, in this process.
pub(crate) struct EventLog {
    inner: Mutex<LogInner>,
    tx: tokio::sync::broadcast::Sender<AgentEvent>,
}

#[derive(Default)]
struct LogInner {
    recent: VecDeque<AgentEvent>,
    dropped: u64,
    progress: TaskProgress,
}

impl EventLog {
    fn new() -> Self {
        Self {
            inner: Mutex::new(LogInner::default()),
            tx: tokio::sync::broadcast::channel(EVENT_BUFFER).0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LogInner> {
        // Every critical section is a few field updates; a panic cannot leave it half-done.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records `event` (already tagged with its source) and returns the progress so far.
    fn push(&self, event: &AgentEvent, own: bool) -> TaskProgress {
        let mut inner = self.lock();
        let progress = &mut inner.progress;
        progress.events += 1;
        if own {
            match &event.kind {
                EventKind::StepEnd { usage, .. } => {
                    progress.steps += 1;
                    if let Some(usage) = usage {
                        progress.tokens += usage.input_tokens + usage.output_tokens;
                    }
                }
                EventKind::ToolCallEnd { name, .. } => {
                    progress.tool_calls += 1;
                    progress.last_tool = Some(name.clone());
                }
                _ => {}
            }
        }
        let progress = progress.clone();
        if inner.recent.len() == EVENT_BUFFER {
            inner.recent.pop_front();
            inner.dropped += 1;
        }
        inner.recent.push_back(event.clone());
        // Sent under the lock, so a subscriber's snapshot and its live events never overlap.
        let _no_subscriber = self.tx.send(event.clone());
        progress
    }

    fn progress(&self) -> TaskProgress {
        self.lock().progress.clone()
    }

    /// The buffered events and how many older ones were dropped.
    pub(crate) fn snapshot(&self) -> (Vec<AgentEvent>, u64) {
        let inner = self.lock();
        (inner.recent.iter().cloned().collect(), inner.dropped)
    }

    /// The buffered events and a receiver of every later one.
    pub(crate) fn subscribe(&self) -> (Vec<AgentEvent>, tokio::sync::broadcast::Receiver<AgentEvent>) {
        let inner = self.lock();
        (inner.recent.iter().cloned().collect(), self.tx.subscribe())
    }
}

/// Where a child sits in the delegation tree; in the context of every child call.
#[derive(Debug, Clone)]
pub(crate) struct Lineage {
    /// The child's depth (a direct child is 1).
    pub(crate) depth: u32,
    /// Slash-separated agent ids from the root.
    pub(crate) path: String,
}

/// Spawn counters of one call, put into its context by the push-back middleware.
#[derive(Debug, Default)]
pub(crate) struct SpawnCounter {
    step: AtomicU32,
    in_step: AtomicU32,
    in_call: AtomicU32,
    /// Programmatic spawns outside a call: a finished task frees its fan-out slot.
    programmatic: bool,
}

impl SpawnCounter {
    /// A new step began: its fan-out count starts at zero.
    pub(crate) fn begin_step(&self, step: u32) {
        self.step.store(step, Ordering::SeqCst);
        self.in_step.store(0, Ordering::SeqCst);
    }
}

/// How a finished task ended, as the waiters see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub(crate) status: TaskStatus,
    pub(crate) result: String,
}

/// A task this process runs.
pub(crate) struct LiveTask {
    pub(crate) record: TaskRecord,
    pub(crate) store: TaskStore,
    cancel: CancellationToken,
    /// Set when a forced-sync wait expired: the child is stopped and ends `timeout`.
    expired: std::sync::atomic::AtomicBool,
    done: watch::Receiver<Option<Outcome>>,
    /// The sync waiter's sink while a tool call waits for the task (`None`: background).
    attached: tokio::sync::Mutex<Option<EventSink>>,
    /// The child's recent events and progress.
    pub(crate) log: Arc<EventLog>,
    /// Why the runner stopped the child itself (token budget, a cancel request from another
    /// process); first reason wins.
    stopped: Arc<Mutex<Option<Outcome>>>,
    /// The child's calls waiting for a person when its turn ended awaiting approval.
    asked: Mutex<Vec<harness_core::PendingCall>>,
}

/// In a child's call context when its spawn has a token budget; checked by [`BudgetGuard`].
#[derive(Clone)]
pub(crate) struct ChildBudget {
    limit: u64,
    origin: String,
    stopped: Arc<Mutex<Option<Outcome>>>,
}

/// The child's middleware enforcing [`ChildBudget`]: before each reasoning step, a call
/// whose usage so far exceeds the budget is stopped (the task ends `failed`, naming the
/// limit), so no model call is made past the budget.
pub(crate) struct BudgetGuard;

#[harness_core::async_trait]
impl harness_core::Middleware for BudgetGuard {
    fn name(&self) -> &'static str {
        "subagent-budget"
    }

    fn hooks(&self) -> harness_core::Hooks {
        harness_core::Hooks::REASONING
    }

    async fn reasoning(
        &self,
        turn: &mut harness_core::Turn,
        next: harness_core::ReasoningNext<'_>,
    ) -> Result<(), harness_core::AgentError> {
        if let Some(budget) = turn.ctx().get::<ChildBudget>() {
            let used = turn.usage().input_tokens + turn.usage().output_tokens;
            if used > budget.limit {
                let mut stopped = budget.stopped.lock().unwrap_or_else(PoisonError::into_inner);
                if stopped.is_none() {
                    *stopped = Some(Outcome {
                        status: TaskStatus::Failed,
                        result: format!(
                            "stopped: token budget exceeded (used {used} tokens; the limit is {}, set by {})",
                            budget.limit, budget.origin
                        ),
                    });
                }
                return Err(harness_core::AgentError::Cancelled);
            }
        }
        next.run(turn).await
    }
}

/// Why a spawn was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    /// The caller is a leaf.
    #[error(
        "spawn refused: max_depth = {limit} reached (this agent is at depth {depth}; subagents cannot spawn further subagents)"
    )]
    Depth {
        /// The configured limit.
        limit: u32,
        /// The caller's depth.
        depth: u32,
    },
    /// Too many spawns in this step.
    #[error("spawn refused: max_fanout = {limit} spawns per step already started in this step")]
    Fanout {
        /// The configured limit.
        limit: u32,
    },
    /// Too many spawns in this call.
    #[error("spawn refused: max_spawns_per_call = {limit} spawns already started in this call")]
    CallBudget {
        /// The configured limit.
        limit: u32,
    },
    /// No such subagent.
    #[error("unknown subagent `{id}`; available: {available}")]
    Unknown {
        /// The requested id.
        id: String,
        /// The ids that exist.
        available: String,
    },
    /// The label cannot be part of a session id.
    #[error("label `{0}` may hold letters, digits, `-`, `_` and `.` only (at most 64)")]
    Label(String),
    /// The call has no workspace bound (not a harness call).
    #[error("no call scope is bound to this call")]
    Unbound,
    /// The child could not be built.
    #[error("subagent `{id}` could not be built: {message}")]
    Build {
        /// The subagent.
        id: String,
        /// Why.
        message: String,
    },
    /// The task file could not be written.
    #[error(transparent)]
    Store(#[from] TaskStoreError),
    /// The subagent's `model` could not be built.
    #[error("subagent `{id}`: `model` = `{spec}` ({origin}) cannot be used: {message}")]
    Model {
        /// The subagent.
        id: String,
        /// The spec string.
        spec: String,
        /// Where the declaration came from (the file, or `builder`).
        origin: String,
        /// Why.
        message: String,
    },
    /// Subagents are off for this agent (or it is a leaf).
    #[error("subagents are disabled for this agent ([subagents] enabled = false, or it is a leaf)")]
    Disabled,
    /// The call's ids are bad.
    #[error("{0}")]
    Bind(String),
    /// A resume named a task that does not wait for a person.
    #[error(
        "task `{0}` is not awaiting approval in this session (see the session's tasks: only a task with status awaiting_approval can be resumed)"
    )]
    NotWaiting(String),
}

/// The runtime of one agent's subagents.
pub(crate) struct Runtime {
    pub(crate) config: SubagentsConfig,
    /// This agent's own depth (0 for a top-level agent).
    pub(crate) depth: u32,
    pub(crate) agent_id: String,
    pub(crate) factory: ChildFactory,
    /// Process-unique id of this runtime's runner, recorded on every task it runs.
    pub(crate) instance: String,
    live: Mutex<HashMap<String, Arc<LiveTask>>>,
    /// Event logs of recently finished tasks of this process, oldest first.
    finished: Mutex<VecDeque<(String, Arc<EventLog>)>>,
    /// Spawn counters of programmatic spawns made outside a call, by task file.
    programmatic: Mutex<HashMap<WsPath, Arc<SpawnCounter>>>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("agent_id", &self.agent_id)
            .field("depth", &self.depth)
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

/// A started task, for the spawn tool.
pub(crate) struct Started {
    pub(crate) task: Arc<LiveTask>,
    pub(crate) agent_key: String,
}

/// What a resumed child is given instead of a new task: the decisions on its pending calls.
pub(crate) struct ResumeChild {
    /// The task the child ran as (the record is reused).
    pub(crate) task_id: String,
    /// The child's instance key (its session).
    pub(crate) instance: String,
    /// The decisions on the child's pending calls.
    pub(crate) decisions: Vec<harness_core::ApprovalDecision>,
}

/// What a child is started with.
pub(crate) enum ChildInput {
    /// A new message (a spawn's task or a send's message).
    Task(String),
    /// A person's decisions on the child's pending calls.
    Resume(ResumeChild),
}

/// What a sync wait ended with.
pub(crate) enum Waited {
    /// The task finished (and its result counts as delivered).
    Done(Outcome),
    /// The wait expired; the task keeps running in the background.
    Promoted,
}

/// Milliseconds since the Unix epoch (heartbeats compare across processes).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
}

impl Runtime {
    pub(crate) fn new(config: SubagentsConfig, depth: u32, agent_id: String, factory: ChildFactory) -> Self {
        Self {
            config,
            depth,
            agent_id,
            factory,
            instance: format!("runner-{}", uuid::Uuid::new_v4().simple()),
            live: Mutex::new(HashMap::new()),
            finished: Mutex::new(VecDeque::new()),
            programmatic: Mutex::new(HashMap::new()),
            tracker: TaskTracker::new(),
            shutdown: CancellationToken::new(),
        }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<LiveTask>>> {
        // Only inserts and removes happen under the lock; a panic cannot leave it half-done.
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The event log of `task_id` if this process runs or recently ran it.
    pub(crate) fn event_log(&self, task_id: &str) -> Option<Arc<EventLog>> {
        if let Some(task) = self.live_task(task_id) {
            return Some(Arc::clone(&task.log));
        }
        // Only pushes and pops happen under the lock.
        let finished = self.finished.lock().unwrap_or_else(PoisonError::into_inner);
        finished
            .iter()
            .find(|(id, _)| id == task_id)
            .map(|(_, log)| Arc::clone(log))
    }

    /// The spawn counter of programmatic spawns of the session whose task file is `path`
    /// (outside a call): fan-out counts the ones running now, the budget every one made by
    /// this process.
    pub(crate) fn programmatic_counter(&self, path: &WsPath) -> Arc<SpawnCounter> {
        let mut counters = self.programmatic.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(counters.entry(path.clone()).or_insert_with(|| {
            Arc::new(SpawnCounter {
                programmatic: true,
                ..SpawnCounter::default()
            })
        }))
    }

    /// The live task `task_id`, if this process runs it.
    pub(crate) fn live_task(&self, task_id: &str) -> Option<Arc<LiveTask>> {
        self.live().get(task_id).cloned()
    }

    /// Whether this process runs or ran tasks of the session whose task file is `path`.
    pub(crate) fn has_tasks_for(&self, path: &WsPath) -> bool {
        self.live().values().any(|task| task.store.path() == path)
    }

    /// The task file of the call in `ctx`.
    pub(crate) fn store_for(ctx: &RuntimeContext) -> Result<TaskStore, SpawnError> {
        let scope = ctx.get::<CallScope>().ok_or(SpawnError::Unbound)?;
        let workspace = ctx.get::<CallWorkspace>().ok_or(SpawnError::Unbound)?;
        Ok(TaskStore::new(Arc::clone(&workspace.user), scope.task_records_path()))
    }

    /// The caller's depth: the lineage in its context, else this agent's own.
    pub(crate) fn caller_depth(&self, ctx: &RuntimeContext) -> u32 {
        ctx.get::<Lineage>().map_or(self.depth, |lineage| lineage.depth)
    }

    /// Checks depth, fan-out and the call budget, counting this spawn when it is allowed.
    pub(crate) fn admit(&self, ctx: &RuntimeContext) -> Result<(), SpawnError> {
        let counter = ctx.get::<Arc<SpawnCounter>>().cloned();
        self.admit_with(ctx, counter.as_ref())
    }

    /// [`admit`](Self::admit) with an explicit counter (`None`: refused, no budget).
    pub(crate) fn admit_with(
        &self,
        ctx: &RuntimeContext,
        counter: Option<&Arc<SpawnCounter>>,
    ) -> Result<(), SpawnError> {
        let depth = self.caller_depth(ctx);
        if depth >= self.config.max_depth {
            return Err(SpawnError::Depth {
                limit: self.config.max_depth,
                depth,
            });
        }
        // A call that did not pass the push-back middleware (a tool invoked directly) has
        // no counter: it is refused rather than unlimited.
        let counter = counter.ok_or(SpawnError::CallBudget {
            limit: self.config.max_spawns_per_call,
        })?;
        let in_step = counter.in_step.fetch_add(1, Ordering::SeqCst);
        if in_step >= self.config.max_fanout {
            counter.in_step.fetch_sub(1, Ordering::SeqCst);
            return Err(SpawnError::Fanout {
                limit: self.config.max_fanout,
            });
        }
        let in_call = counter.in_call.fetch_add(1, Ordering::SeqCst);
        if in_call >= self.config.max_spawns_per_call {
            counter.in_call.fetch_sub(1, Ordering::SeqCst);
            counter.in_step.fetch_sub(1, Ordering::SeqCst);
            return Err(SpawnError::CallBudget {
                limit: self.config.max_spawns_per_call,
            });
        }
        Ok(())
    }

    /// Starts `declaration` on `task` for the caller in `ctx`, after [`admit`](Self::admit).
    /// `sync_sink` attaches a waiter from the start, so the child's first event is forwarded
    /// and a result that arrives before the waiter looks is counted as delivered.
    pub(crate) async fn start(
        self: &Arc<Self>,
        ctx: &RuntimeContext,
        declaration: &SubagentDeclaration,
        input: ChildInput,
        label: Option<&str>,
        sync_sink: Option<EventSink>,
    ) -> Result<Started, SpawnError> {
        let scope = ctx.get::<CallScope>().ok_or(SpawnError::Unbound)?;
        if let Some(label) = label
            && !super::declaration::valid_id(label)
        {
            return Err(SpawnError::Label(label.to_owned()));
        }
        let (task_id, instance_key) = match &input {
            ChildInput::Resume(resume) => {
                if !super::declaration::valid_id(&resume.instance) {
                    return Err(SpawnError::Label(resume.instance.clone()));
                }
                (resume.task_id.clone(), resume.instance.clone())
            }
            ChildInput::Task(_) => {
                let task_id = format!("task-{}", uuid::Uuid::new_v4().simple());
                let instance_key = label.map_or_else(|| task_id.clone(), str::to_owned);
                (task_id, instance_key)
            }
        };
        let child_session = SessionId::parse(format!("sub.{}.{}.{}", scope.session(), declaration.id, instance_key))
            .map_err(|err| SpawnError::Build {
                id: declaration.id.clone(),
                message: err.to_string(),
            })?;
        let child = match &declaration.url {
            Some(url) => Err(super::remote::RemoteTarget::new(
                declaration,
                url,
                child_session.to_string(),
                ctx.user_id
                    .as_ref()
                    .map_or_else(|| "default".to_owned(), |user| user.as_str().to_owned()),
                self.caller_depth(ctx) + 1,
                self.inheritance(ctx),
            )),
            None => Ok(self.factory.child(declaration)?),
        };
        let store = Self::store_for(ctx)?;
        let record = TaskRecord {
            task_id: task_id.clone(),
            agent_id: declaration.id.clone(),
            label: label.map(str::to_owned),
            child_session: child_session.to_string(),
            status: TaskStatus::Running,
            result: None,
            runner: self.instance.clone(),
            delivered: false,
            heartbeat_ms: now_ms(),
            cancel_requested: false,
            progress: Some(TaskProgress::default()),
            pending: Vec::new(),
        };
        let inserted = record.clone();
        store
            .update(|file| {
                file.tasks.insert(inserted.task_id.clone(), inserted.clone());
                (true, ())
            })
            .await?;
        let parent_path = ctx
            .get::<Lineage>()
            .map_or_else(|| self.agent_id.clone(), |lineage| lineage.path.clone());
        let lineage = Lineage {
            depth: self.caller_depth(ctx) + 1,
            path: format!("{parent_path}/{}", declaration.id),
        };
        let source = EventSource {
            agent_id: declaration.id.clone(),
            session_id: child_session.to_string(),
            depth: lineage.depth,
            path: lineage.path.clone(),
        };
        let cancel = self.shutdown.child_token();
        let mut child_ctx = RuntimeContext::default()
            .with_session(child_session)
            .with_cancellation(cancel.clone());
        child_ctx.user_id = ctx.user_id.clone();
        child_ctx.attributes = ctx.attributes.clone();
        // Plan mode and what a remote grandparent passed down reach the child as typed
        // values (the parent's own rules are the child's through its built policy).
        if let Some(inherited) = ctx.get::<harness_policy::Inheritance>() {
            child_ctx.insert(inherited.clone());
        }
        child_ctx.insert(lineage);
        if declaration.workspace_mode == WorkspaceMode::Isolated {
            child_ctx.insert(super::IsolatedParent(scope.clone()));
        }
        let counter = ctx.get::<Arc<SpawnCounter>>().cloned();
        let stopped = Arc::new(Mutex::new(None));
        if let Some((limit, origin)) = self.budget_for(declaration) {
            child_ctx.insert(ChildBudget {
                limit,
                origin,
                stopped: Arc::clone(&stopped),
            });
        }
        let (done_tx, done) = watch::channel(None);
        let live = Arc::new(LiveTask {
            record,
            store,
            cancel,
            expired: std::sync::atomic::AtomicBool::new(false),
            done,
            attached: tokio::sync::Mutex::new(sync_sink),
            log: Arc::new(EventLog::new()),
            stopped: Arc::clone(&stopped),
            asked: Mutex::new(Vec::new()),
        });
        self.live().insert(task_id.clone(), Arc::clone(&live));
        let runtime = Arc::clone(self);
        let running = Arc::clone(&live);
        let limit = self.config.task_timeout;
        self.tracker.spawn(async move {
            let cancel = child_ctx.cancellation().clone();
            let events = match (child, input) {
                (Ok(child), ChildInput::Task(task)) => child.stream(task.into(), child_ctx).boxed(),
                (Ok(child), ChildInput::Resume(resume)) => child.resume_stream(resume.decisions, child_ctx).boxed(),
                (Err(target), ChildInput::Task(task)) => {
                    super::remote::events(target, super::remote::Send::Task(task), cancel.clone(), source.clone())
                }
                // The parent's person decided what the remote child asked: the decisions go
                // to the remote server, whose turn goes on.
                (Err(target), ChildInput::Resume(resume)) => super::remote::events(
                    target,
                    super::remote::Send::Decisions(resume.decisions),
                    cancel.clone(),
                    source.clone(),
                ),
            };
            let outcome = run_child(events, cancel, &running, source, limit).await;
            let outcome = if outcome.status == TaskStatus::Cancelled && runtime.shutdown.is_cancelled() {
                Outcome {
                    status: TaskStatus::Cancelled,
                    result: "cancelled: the agent shut down before the task finished (the CLI waits for tasks only with `harness run --wait-tasks`)".to_owned(),
                }
            } else {
                outcome
            };
            runtime.finish(&running, outcome, &done_tx).await;
            if let Some(counter) = counter.filter(|counter| counter.programmatic) {
                counter.in_step.fetch_sub(1, Ordering::SeqCst);
            }
        });
        Ok(Started {
            agent_key: format!("agent:{}:{}", declaration.id, instance_key),
            task: live,
        })
    }

    /// What a child started from `ctx` keeps of this agent: what was passed down to it, plus
    /// its own mode and deny/ask rules and whether it plans (sent to a remote child, which
    /// has no other way to know them).
    fn inheritance(&self, ctx: &RuntimeContext) -> harness_policy::Inheritance {
        let passed = ctx.get::<harness_policy::Inheritance>().cloned().unwrap_or_default();
        match self.factory.parent_policy.as_deref() {
            Some(policy) => passed.and(&harness_policy::Inheritance::of(policy, false)),
            None => passed,
        }
    }

    /// Records the terminal state, wakes the waiters, forgets the live task.
    async fn finish(&self, task: &LiveTask, outcome: Outcome, done: &watch::Sender<Option<Outcome>>) {
        let attached = task.attached.lock().await;
        let delivered = attached.is_some();
        let task_id = task.record.task_id.clone();
        let written = task
            .store
            .update(|file| match file.tasks.get_mut(&task_id) {
                Some(record) if !record.status.is_terminal() => {
                    record.status = outcome.status;
                    record.result = Some(outcome.result.clone());
                    record.delivered = delivered;
                    record.progress = Some(task.log.progress());
                    record.pending = if outcome.status == TaskStatus::AwaitingApproval {
                        task.asked()
                    } else {
                        Vec::new()
                    };
                    (true, ())
                }
                _ => (false, ()),
            })
            .await;
        if let Err(err) = written {
            tracing::warn!(task = %task_id, error = %harness_core::error_chain(&err), "task result not recorded");
        }
        done.send_replace(Some(outcome));
        drop(attached);
        {
            let mut finished = self.finished.lock().unwrap_or_else(PoisonError::into_inner);
            if finished.len() == FINISHED_KEPT {
                finished.pop_front();
            }
            finished.push_back((task_id.clone(), Arc::clone(&task.log)));
        }
        self.live().remove(&task_id);
    }

    /// The token budget of a child of `declaration`: the smaller of its `max_tokens` and
    /// `[subagents] child_token_budget`, with where it comes from.
    fn budget_for(&self, declaration: &SubagentDeclaration) -> Option<(u64, String)> {
        let own = declaration.max_tokens.map(|limit| {
            let origin = declaration.origin.as_deref().unwrap_or("its declaration");
            (limit, format!("`max_tokens` of {origin}"))
        });
        let config = self
            .config
            .child_token_budget
            .map(|limit| (limit, "`[subagents] child_token_budget`".to_owned()));
        match (own, config) {
            (Some(own), Some(config)) => Some(if config.0 < own.0 { config } else { own }),
            (own, config) => own.or(config),
        }
    }

    /// Stops `task_id`: at once when this process runs it; else by a cancel request in its
    /// record, which the runner in the other process sees within [`CANCEL_POLL`] and obeys
    /// at the child's next tool or chunk boundary. Waits up to `wait` for the record to end
    /// and returns it (`None`: no such task; still `running` when the other runner has not
    /// answered yet).
    ///
    /// # Errors
    /// [`SpawnError::Store`] when the task file cannot be read or written.
    pub(crate) async fn cancel_task(
        &self,
        store: &TaskStore,
        task_id: &str,
        wait: Duration,
    ) -> Result<Option<TaskRecord>, SpawnError> {
        // Live tasks are indexed by id across the whole process: a task that is not in the
        // caller's own task file (another session's, another user's) is not the caller's to
        // stop, so it is looked up there first.
        if !store.load().await?.tasks.contains_key(task_id) {
            return Ok(None);
        }
        if let Some(task) = self.live_task(task_id) {
            task.cancel();
            // The child stops at its next tool or chunk boundary and saves its session.
            let _ = self.wait_live(task_id, wait).await;
            return Ok(store.load().await?.tasks.get(task_id).cloned());
        }
        let now = now_ms();
        let requested = store
            .update(|file| match file.tasks.get_mut(task_id) {
                Some(record) => {
                    let mut changed = self.sweep_lost(record, now);
                    if record.status == TaskStatus::Running && !record.cancel_requested {
                        record.cancel_requested = true;
                        changed = true;
                    }
                    (changed, Some(record.clone()))
                }
                None => (false, None),
            })
            .await?;
        let Some(mut record) = requested else {
            return Ok(None);
        };
        let deadline = tokio::time::Instant::now() + wait;
        while record.status == TaskStatus::Running && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(CANCEL_POLL.min(deadline.saturating_duration_since(tokio::time::Instant::now()))).await;
            match store.load().await?.tasks.get(task_id) {
                Some(now) => record = now.clone(),
                None => break,
            }
        }
        Ok(Some(record))
    }

    /// Waits up to `limit` for a task started with a sync sink; on expiry detaches the sink
    /// so the task goes on in the background (its result is then pushed back).
    pub(crate) async fn wait_sync(&self, task: &LiveTask, limit: Duration) -> Waited {
        let mut done = task.done.clone();
        // Expiry is not an answer by itself: the runner may finish while we take the lock.
        let _expired = tokio::time::timeout(limit, async {
            let _ = done.wait_for(Option::is_some).await;
        })
        .await;
        let mut attached = task.attached.lock().await;
        // The runner records under this lock; what it saw decides who delivers.
        let outcome = task.done.borrow().clone();
        if let Some(outcome) = outcome {
            return Waited::Done(outcome);
        }
        *attached = None;
        Waited::Promoted
    }

    /// Cancels a sync child whose waiter went away (the parent's call was cancelled).
    pub(crate) fn cancel_live(&self, task_id: &str) -> bool {
        match self.live_task(task_id) {
            Some(task) => {
                task.cancel.cancel();
                true
            }
            None => false,
        }
    }

    /// Waits up to `limit` for a task this process runs; `None` when it is not live here.
    pub(crate) async fn wait_live(&self, task_id: &str, limit: Duration) -> Option<Option<Outcome>> {
        let task = self.live_task(task_id)?;
        let mut done = task.done.clone();
        let _expired = tokio::time::timeout(limit, async {
            let _ = done.wait_for(Option::is_some).await;
        })
        .await;
        let outcome = task.done.borrow().clone();
        Some(outcome)
    }

    /// Turns the session's running records whose runner is gone into `lost`: ours but not
    /// live here (the runner task died), or another runner's with a stale heartbeat.
    pub(crate) fn sweep_lost(&self, record: &mut TaskRecord, now: u64) -> bool {
        if record.status != TaskStatus::Running {
            return false;
        }
        let reason = if record.runner == self.instance {
            if self.live().contains_key(&record.task_id) {
                return false;
            }
            format!("its runner ({}) ended without recording a result", record.runner)
        } else {
            let stale = u64::try_from(HEARTBEAT_STALE.as_millis()).unwrap_or(u64::MAX);
            if now.saturating_sub(record.heartbeat_ms) <= stale {
                return false;
            }
            format!(
                "its runner ({}) stopped: no heartbeat for {} s (the process ended or was killed)",
                record.runner,
                now.saturating_sub(record.heartbeat_ms) / 1000
            )
        };
        record.status = TaskStatus::Lost;
        record.result = Some(reason);
        true
    }

    /// Stops every running child (they end `cancelled`) and waits for their records, until
    /// `deadline`.
    pub(crate) async fn shutdown(&self, deadline: tokio::time::Instant) {
        self.shutdown.cancel();
        self.tracker.close();
        if tokio::time::timeout_at(deadline, self.tracker.wait()).await.is_err() {
            tracing::warn!("subagent tasks did not record their end before the shutdown deadline");
        }
    }

    /// Waits for every running child to finish, however long it takes.
    pub(crate) async fn wait_idle(&self) {
        loop {
            let tasks: Vec<_> = self.live().values().cloned().collect();
            if tasks.is_empty() {
                return;
            }
            for task in tasks {
                let mut done = task.done.clone();
                let _closed = done.wait_for(Option::is_some).await.is_err();
            }
        }
    }
}

impl LiveTask {
    /// The task's id.
    pub(crate) fn id(&self) -> &str {
        &self.record.task_id
    }

    /// A receiver that turns `Some` when the task ends.
    pub(crate) fn done_signal(&self) -> watch::Receiver<Option<Outcome>> {
        self.done.clone()
    }

    /// The child's calls waiting for a person (when it ended `awaiting_approval`).
    pub(crate) fn asked(&self) -> Vec<harness_core::PendingCall> {
        self.asked.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Asks the child to stop at its next tool or chunk boundary.
    pub(crate) fn cancel(&self) {
        self.cancel.cancel();
    }

    /// Stops the child for `outcome` (the first reason given wins).
    fn stop(&self, outcome: Outcome) {
        {
            let mut stopped = self.stopped.lock().unwrap_or_else(PoisonError::into_inner);
            if stopped.is_none() {
                *stopped = Some(outcome);
            }
        }
        self.cancel.cancel();
    }

    /// Stops the child because a forced-sync wait expired: it ends `timeout`.
    pub(crate) fn expire(&self) {
        self.expired.store(true, Ordering::SeqCst);
        self.cancel.cancel();
    }
}

/// Runs the child (a local agent's or a remote turn's events) to its end, forwarding events to the attached waiter, keeping the
/// heartbeat, and stopping it (through its cancellation token, so it saves its session) on
/// cancel and timeout.
async fn run_child(
    mut stream: futures::stream::BoxStream<'static, AgentEvent>,
    cancel: CancellationToken,
    live: &LiveTask,
    source: EventSource,
    limit: Duration,
) -> Outcome {
    let deadline = tokio::time::sleep(limit);
    tokio::pin!(deadline);
    let mut poll = tokio::time::interval_at(tokio::time::Instant::now() + CANCEL_POLL, CANCEL_POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_beat = tokio::time::Instant::now();
    let mut timed_out = false;
    let mut last = None;
    loop {
        tokio::select! {
            event = stream.next() => {
                let Some(event) = event else { break };
                forward(live, &source, &event).await;
                match event.kind {
                    EventKind::Final { message } if event.source.is_none() => last = Some(Ok(message.text())),
                    EventKind::Error { message, .. } if event.source.is_none() => last = Some(Err(message)),
                    EventKind::ApprovalRequired { calls } if event.source.is_none() => {
                        *live.asked.lock().unwrap_or_else(PoisonError::into_inner) = calls;
                    }
                    _ => {}
                }
            }
            () = &mut deadline, if !timed_out => {
                timed_out = true;
                cancel.cancel();
            }
            _ = poll.tick() => {
                let task_id = live.record.task_id.clone();
                let cancel_requested = if last_beat.elapsed() >= HEARTBEAT {
                    last_beat = tokio::time::Instant::now();
                    let progress = live.log.progress();
                    live.store.update(|file| match file.tasks.get_mut(&task_id) {
                        Some(record) if record.status == TaskStatus::Running => {
                            record.heartbeat_ms = now_ms();
                            record.progress = Some(progress.clone());
                            (true, record.cancel_requested)
                        }
                        _ => (false, false),
                    }).await
                } else {
                    live.store.load().await.map(|file| {
                        file.tasks.get(&task_id).is_some_and(|record| record.cancel_requested)
                    })
                };
                match cancel_requested {
                    Ok(true) => live.stop(Outcome {
                        status: TaskStatus::Cancelled,
                        result: "cancelled by task_cancel (requested from another process)".to_owned(),
                    }),
                    Ok(false) => {}
                    Err(err) => {
                        tracing::warn!(task = %task_id, error = %harness_core::error_chain(&err), "task record not read or written");
                    }
                }
            }
        }
    }
    let stopped = live.stopped.lock().unwrap_or_else(PoisonError::into_inner).take();
    if let Some(outcome) = stopped.filter(|_| !timed_out) {
        return outcome;
    }
    let asked = live.asked();
    match last {
        Some(Ok(_)) if !asked.is_empty() && !timed_out && !live.cancel.is_cancelled() => Outcome {
            status: TaskStatus::AwaitingApproval,
            result: describe_asked(&asked),
        },
        Some(Ok(text)) if !timed_out && !live.cancel.is_cancelled() => Outcome {
            status: TaskStatus::Completed,
            result: text,
        },
        _ if timed_out => Outcome {
            status: TaskStatus::Timeout,
            result: format!("stopped after the task time limit of {} s", limit.as_secs()),
        },
        _ if live.expired.load(Ordering::SeqCst) => Outcome {
            status: TaskStatus::Timeout,
            result: "stopped: the forced-sync wait expired before the subagent answered".to_owned(),
        },
        _ if live.cancel.is_cancelled() => Outcome {
            status: TaskStatus::Cancelled,
            result:
                "cancelled before the task finished (task_cancel, or the parent's call was cancelled while it waited)"
                    .to_owned(),
        },
        Some(Err(message)) => Outcome {
            status: TaskStatus::Failed,
            result: message,
        },
        Some(Ok(text)) => Outcome {
            status: TaskStatus::Completed,
            result: text,
        },
        None => Outcome {
            status: TaskStatus::Failed,
            result: "the subagent ended without an answer".to_owned(),
        },
    }
}

/// What a child that waits for a person asked, one line per call.
pub(crate) fn describe_asked(asked: &[harness_core::PendingCall]) -> String {
    let mut text = String::from("waiting for a person's approval of:");
    for call in asked {
        text.push_str(&format!("\n- {} {} ({})", call.tool, call.input, call.reason));
        if let Some(rule) = &call.suggestion {
            text.push_str(&format!(" [rule to allow it: {rule}]"));
        }
    }
    text
}

/// Sends `event` to the sync waiter, if one is attached, tagged with the child's source
/// (a grandchild's event keeps its own).
async fn forward(live: &LiveTask, source: &EventSource, event: &AgentEvent) {
    let own = event.source.is_none();
    let mut event = event.clone();
    if own {
        event.source = Some(source.clone());
    }
    live.log.push(&event, own);
    let attached = live.attached.lock().await;
    if let Some(sink) = attached.as_ref() {
        sink.forward(event).await;
    }
}

/// The isolated/shared choice, for `agent_list`.
pub(crate) fn mode_name(mode: WorkspaceMode) -> &'static str {
    match mode {
        WorkspaceMode::Isolated => "isolated",
        WorkspaceMode::Shared => "shared",
    }
}
