//! Spawning: a started task's child session, record, call context and runner.

use super::budget::ChildBudget;
use super::declaration::{SubagentDeclaration, WorkspaceMode};
use super::events::EventLog;
use super::limits::SpawnCounter;
use super::lineage::Lineage;
use super::records::{TaskProgress, TaskRecord, TaskStatus, TaskStore};
use super::runtime::Runtime;
use super::spawn_error::SpawnError;
use super::task::{LiveTask, Outcome, now_ms, run_child};
use futures::StreamExt;
use harness_core::{EventSink, EventSource, RuntimeContext, SessionId};
use harness_fs::CallScope;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

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
    /// A task taken over from a replica that died: its message again, which the child's
    /// session recognises as the unfinished turn's and continues (`takeover.rs`).
    Continue {
        /// The task (the record is reused).
        task_id: String,
        /// The child's instance key (its session).
        instance: String,
        /// The message the task was started with.
        message: String,
    },
}

impl Runtime {
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
        let (task_id, instance_key) = task_and_instance(&input, label)?;
        let store = Self::store_for(ctx)?;
        let child_session = Self::child_session(&store, scope, declaration, &input, &instance_key).await?;
        let child = self.child_target(ctx, declaration, &child_session)?;
        let lineage = self.child_lineage(ctx, declaration);
        let record = TaskRecord {
            task_id: task_id.clone(),
            agent_id: declaration.id.clone(),
            label: label.map(str::to_owned),
            child_session: child_session.to_string(),
            parent_session: Some(scope.session().to_string()),
            depth: Some(lineage.depth),
            path: Some(lineage.path.clone()),
            status: TaskStatus::Running,
            result: None,
            runner: self.instance.clone(),
            delivered: false,
            heartbeat_ms: now_ms(),
            cancel_requested: false,
            progress: Some(TaskProgress::default()),
            pending: Vec::new(),
            lease_ms: self.lease_ms(),
            user: ctx.user_id.as_ref().map(|user| user.as_str().to_owned()),
            input: match &input {
                ChildInput::Task(message) | ChildInput::Continue { message, .. } if self.lease_ms().is_some() => {
                    Some(message.clone())
                }
                _ => None,
            },
        };
        let continued = matches!(input, ChildInput::Continue { .. });
        let written = store
            .update(|file| {
                // A taken-over task is written only while this runner still holds its claim.
                if continued && !file.tasks.get(&task_id).is_some_and(|r| r.is_run_by(&self.instance)) {
                    return (false, false);
                }
                file.tasks.insert(record.task_id.clone(), record.clone());
                (true, true)
            })
            .await?;
        if !written {
            return Err(SpawnError::Claimed(task_id));
        }
        self.index_running(&record).await;
        let source = EventSource {
            agent_id: declaration.id.clone(),
            session_id: child_session.to_string(),
            depth: lineage.depth,
            path: lineage.path.clone(),
        };
        let cancel = self.shutdown.child_token();
        let stopped = Arc::new(Mutex::new(None));
        let child_ctx = self.child_context(ctx, scope, declaration, child_session, lineage, &cancel, &stopped);
        let (done_tx, done) = watch::channel(None);
        let live = Arc::new(LiveTask {
            record,
            store,
            cancel,
            expired: std::sync::atomic::AtomicBool::new(false),
            done,
            attached: tokio::sync::Mutex::new(sync_sink),
            log: Arc::new(EventLog::new()),
            stopped,
            asked: Mutex::new(Vec::new()),
        });
        self.live().insert(task_id, Arc::clone(&live));
        let counter = ctx.get::<Arc<SpawnCounter>>().cloned();
        self.run_task(child, input, child_ctx, Arc::clone(&live), source, done_tx, counter);
        Ok(Started {
            agent_key: format!("agent:{}:{}", declaration.id, instance_key),
            task: live,
        })
    }

    /// The child's session: the one recorded for this task (a resume) or instance (a
    /// follow-up), so sessions named in an older shape continue; else the bounded id of
    /// [`lineage::child_session`](super::lineage::child_session).
    async fn child_session(
        store: &TaskStore,
        scope: &CallScope,
        declaration: &SubagentDeclaration,
        input: &ChildInput,
        instance: &str,
    ) -> Result<SessionId, SpawnError> {
        let file = store.load().await?;
        let recorded = match input {
            ChildInput::Resume(ResumeChild { task_id, .. }) | ChildInput::Continue { task_id, .. } => {
                file.tasks.get(task_id).map(|record| record.child_session.clone())
            }
            ChildInput::Task(_) => super::lineage::recorded_session(&file, &declaration.id, instance),
        };
        let bad_id = |err: harness_core::IdError| SpawnError::Build {
            id: declaration.id.clone(),
            message: err.to_string(),
        };
        match recorded {
            Some(session) => SessionId::parse(session).map_err(bad_id),
            None => super::lineage::child_session(scope.session(), &declaration.id, instance).map_err(bad_id),
        }
    }

    /// The local child agent for `declaration`, or the remote server it names.
    fn child_target(
        &self,
        ctx: &RuntimeContext,
        declaration: &SubagentDeclaration,
        child_session: &SessionId,
    ) -> Result<ChildTarget, SpawnError> {
        Ok(match &declaration.url {
            Some(url) => ChildTarget::Remote(Box::new(super::remote::RemoteTarget::new(
                declaration,
                url,
                child_session.to_string(),
                ctx.user_id
                    .as_ref()
                    .map_or_else(|| "default".to_owned(), |user| user.as_str().to_owned()),
                self.caller_depth(ctx) + 1,
                self.inheritance(ctx),
            ))),
            None => ChildTarget::Local(self.factory.child(declaration)?),
        })
    }

    /// Where a child of `declaration` started from `ctx` sits in the tree.
    fn child_lineage(&self, ctx: &RuntimeContext, declaration: &SubagentDeclaration) -> Lineage {
        let parent_path = ctx
            .get::<Lineage>()
            .map_or_else(|| self.agent_id.clone(), |lineage| lineage.path.clone());
        Lineage {
            depth: self.caller_depth(ctx) + 1,
            path: format!("{parent_path}/{}", declaration.id),
        }
    }

    /// The call context of the child's turn: the caller's user and attributes, what the
    /// parent passes down, the lineage and the token budget; cancelled with `cancel`.
    #[allow(clippy::too_many_arguments)] // Each is one part of the child's context.
    fn child_context(
        &self,
        ctx: &RuntimeContext,
        scope: &CallScope,
        declaration: &SubagentDeclaration,
        child_session: SessionId,
        lineage: Lineage,
        cancel: &CancellationToken,
        stopped: &Arc<Mutex<Option<Outcome>>>,
    ) -> RuntimeContext {
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
        // The caller's own tools.json narrows its children too.
        if let Some(filter) = ctx.get::<crate::user_tools::InheritedCallerFilter>() {
            child_ctx.insert(filter.clone());
        }
        // A sandboxed parent's children run in its sandbox (the binding is held while they run).
        if let Some(sandboxed) = ctx.get::<crate::facts::SandboxedCall>() {
            child_ctx.insert(sandboxed.clone());
        }
        if declaration.workspace_mode == WorkspaceMode::Isolated {
            child_ctx.insert(super::IsolatedParent(scope.clone()));
        }
        if let Some((limit, origin)) = self.budget_for(declaration) {
            child_ctx.insert(ChildBudget {
                limit,
                origin,
                stopped: Arc::clone(stopped),
            });
        }
        child_ctx
    }

    /// Runs the started task on the tracker: the child's events to their end, then the
    /// record of how it ended; a programmatic spawn's fan-out slot is freed after it.
    #[allow(clippy::too_many_arguments)] // The parts of one started task.
    fn run_task(
        self: &Arc<Self>,
        child: ChildTarget,
        input: ChildInput,
        child_ctx: RuntimeContext,
        live: Arc<LiveTask>,
        source: EventSource,
        done_tx: watch::Sender<Option<Outcome>>,
        counter: Option<Arc<SpawnCounter>>,
    ) {
        let runtime = Arc::clone(self);
        let limit = self.config.task_timeout;
        self.tracker.spawn(async move {
            let cancel = child_ctx.cancellation().clone();
            let events = match (child, input) {
                (ChildTarget::Local(child), ChildInput::Task(task)) => child.stream(task.into(), child_ctx).boxed(),
                (ChildTarget::Local(child), ChildInput::Resume(resume)) => {
                    child.resume_stream(resume.decisions, child_ctx).boxed()
                }
                (ChildTarget::Local(child), ChildInput::Continue { message, .. }) => {
                    child.stream(message.into(), child_ctx).boxed()
                }
                // Never taken over (`takeover.rs` marks a remote child lost): sent as a task.
                (ChildTarget::Remote(target), ChildInput::Task(task) | ChildInput::Continue { message: task, .. }) => {
                    super::remote::events(*target, super::remote::Send::Task(task), cancel.clone(), source.clone())
                }
                // The parent's person decided what the remote child asked: the decisions go
                // to the remote server, whose turn goes on.
                (ChildTarget::Remote(target), ChildInput::Resume(resume)) => super::remote::events(
                    *target,
                    super::remote::Send::Decisions(resume.decisions),
                    cancel.clone(),
                    source.clone(),
                ),
            };
            let outcome = run_child(events, cancel, &live, source, limit).await;
            let outcome = if outcome.status == TaskStatus::Cancelled && runtime.shutdown.is_cancelled() {
                Outcome {
                    status: TaskStatus::Cancelled,
                    result: "cancelled: the agent shut down before the task finished (the CLI waits for tasks only with `harness run --wait-tasks`)".to_owned(),
                }
            } else {
                outcome
            };
            runtime.finish(&live, outcome, &done_tx).await;
            if let Some(counter) = counter {
                counter.release_programmatic();
            }
        });
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
}

/// A child to run: a local agent, or a turn on a remote server.
enum ChildTarget {
    Local(std::sync::Arc<dyn crate::capability::ChildAgent>),
    Remote(Box<super::remote::RemoteTarget>),
}

/// The task id and instance key of a start: a resume keeps its task and instance; a new task
/// gets a fresh id and is its own instance unless labelled.
fn task_and_instance(input: &ChildInput, label: Option<&str>) -> Result<(String, String), SpawnError> {
    if let Some(label) = label
        && !super::declaration::valid_id(label)
    {
        return Err(SpawnError::Label(label.to_owned()));
    }
    match input {
        ChildInput::Resume(resume) => {
            if !super::declaration::valid_id(&resume.instance) {
                return Err(SpawnError::Label(resume.instance.clone()));
            }
            Ok((resume.task_id.clone(), resume.instance.clone()))
        }
        ChildInput::Continue { task_id, instance, .. } => {
            if !super::declaration::valid_id(instance) {
                return Err(SpawnError::Label(instance.clone()));
            }
            Ok((task_id.clone(), instance.clone()))
        }
        ChildInput::Task(_) => {
            let task_id = format!("task-{}", uuid::Uuid::new_v4().simple());
            let instance = label.map_or_else(|| task_id.clone(), str::to_owned);
            Ok((task_id, instance))
        }
    }
}
