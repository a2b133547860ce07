//! Application control of subagent tasks on [`HarnessAgent`] (part of the composition root: it joins the agent and the subagents capability): spawn, resume, cancel, list,
//! read and watch a session's tasks, under the same limits and records as the model's tools.

use crate::HarnessAgent;
use crate::subagents::DeclarationWarning;
use crate::subagents::limits::SpawnCounter;
use crate::subagents::records::{TaskRecord, TaskStatus};
use crate::subagents::runtime::{Runtime, Waited};
use crate::subagents::spawn::{ChildInput, ResumeChild};
use crate::subagents::spawn_error::SpawnError;
use crate::subagents::takeover::{Claim, Takeover};
use crate::subagents::{SpawnOutcome, SpawnRequest, TaskEvents};
use std::sync::Arc;
use std::time::Duration;

impl HarnessAgent {
    /// `ctx` for a turn of this agent started by a remote parent that passed `inherited`
    /// down (the native API's `inherit`): the turn's calls are decided by this agent's own
    /// policy narrowed by it (the union of both sides' deny and ask rules, the stricter
    /// mode), and a planning parent's child plans too. An agent without plan mode cannot
    /// plan, so a planning parent's child is held to `explore` (read-only tools only) instead.
    pub fn inherited_from_remote(
        &self,
        mut ctx: harness_core::RuntimeContext,
        mut inherited: harness_policy::Inheritance,
    ) -> harness_core::RuntimeContext {
        if inherited.plan && !self.capabilities().contains(&"plan_mode") {
            inherited.mode = inherited.mode.stricter(harness_policy::Mode::Explore);
        }
        ctx.insert(inherited);
        ctx
    }

    /// Waits until every subagent task this agent started in this process has finished
    /// (`harness run --wait-tasks`). Returns at once when subagents are off.
    pub async fn wait_for_tasks(&self) {
        if let Some(handle) = self.provided::<crate::subagents::Handle>() {
            handle.runtime.wait_idle().await;
        }
    }

    /// The subagent tasks of the session in `ctx` (bound like a call: default ids apply), as
    /// recorded in its task file; empty when subagents are off or none ran.
    ///
    /// # Errors
    /// [`harness_core::AgentError`] for bad ids, or when the task file cannot be read.
    pub async fn tasks(&self, ctx: harness_core::RuntimeContext) -> Result<Vec<TaskRecord>, harness_core::AgentError> {
        if self.provided::<crate::subagents::Handle>().is_none() {
            return Ok(Vec::new());
        }
        let ctx = self.bind(ctx)?;
        let capability_error = |err: SpawnError| harness_core::AgentError::Capability {
            capability: "subagents",
            source: Box::new(err),
        };
        let store = Runtime::store_for(&ctx).map_err(capability_error)?;
        let file = store
            .load()
            .await
            .map_err(|err| capability_error(SpawnError::Store(err)))?;
        Ok(file.tasks.into_values().collect())
    }

    /// Spawns a subagent from application code, under the same limits as the model's
    /// `agent_spawn`: depth (a `ctx` from inside a child's call carries its depth), fan-out,
    /// the spawn budget, the token budget and the task time limit. Called from inside a call
    /// (a tool's `ctx.runtime`), the spawn counts against that call's fan-out and budget;
    /// outside one, against the session's programmatic counter in this process (fan-out:
    /// programmatic spawns running at once; budget: `max_spawns_per_call` programmatic
    /// spawns per session per process). The task is recorded like any other: a background
    /// or promoted one is pushed back to the session's next call.
    ///
    /// # Errors
    /// [`SpawnError`]: which limit refused it, an unknown id, bad ids, a child that cannot
    /// be built, a task file that cannot be written.
    pub async fn spawn_subagent(
        &self,
        ctx: harness_core::RuntimeContext,
        request: SpawnRequest,
    ) -> Result<SpawnOutcome, SpawnError> {
        let handle = self
            .provided::<crate::subagents::Handle>()
            .ok_or(SpawnError::Disabled)?;
        let runtime = &handle.runtime;
        let task = request.task.trim().to_owned();
        if task.is_empty() {
            return Err(SpawnError::Build {
                id: request.agent_id,
                message: "`task` is empty: give the subagent a self-contained task".to_owned(),
            });
        }
        let mut ctx = self.bind(ctx).map_err(|err| SpawnError::Bind(err.to_string()))?;
        let declaration = handle
            .declarations
            .resolve(&ctx, &request.agent_id)
            .await
            .map_err(|message| SpawnError::Build {
                id: request.agent_id.clone(),
                message,
            })?;
        let counter = match ctx.get::<Arc<SpawnCounter>>() {
            Some(counter) => Arc::clone(counter),
            None => {
                let counter = runtime.programmatic_counter(Runtime::store_for(&ctx)?.path());
                ctx.insert(Arc::clone(&counter));
                counter
            }
        };
        runtime.admit_with(&ctx, Some(&counter))?;
        let sink = request.wait.map(|_| harness_core::EventSink::disabled());
        let started = runtime
            .start(
                &ctx,
                &declaration,
                ChildInput::Task(task),
                request.label.as_deref(),
                sink,
            )
            .await
            // A spawn that did not start runs nothing: its fan-out slot is free again.
            .inspect_err(|_| counter.release_programmatic())?;
        let task_id = started.task.id().to_owned();
        let (status, result) = match request.wait {
            None => (TaskStatus::Running, None),
            Some(wait) => match runtime.wait_sync(&started.task, wait).await {
                Waited::Done(outcome) => (outcome.status, Some(outcome.result)),
                Waited::Promoted => (TaskStatus::Running, None),
            },
        };
        Ok(SpawnOutcome {
            task_id,
            agent_key: started.agent_key,
            status,
            result,
        })
    }

    /// Resumes the task `task_id` of the session in `ctx` whose child waits for a person
    /// (status `awaiting_approval`, e.g. a background child that asked): the child's turn
    /// continues with `decisions` on its pending calls ([`TaskRecord::pending`]; a denied
    /// call gives the child's model a result saying a person refused). The same task runs
    /// again and is recorded like any other (a background one is pushed back to the
    /// session's next call). `wait`: how long to wait for it (`None`: background).
    ///
    /// # Errors
    /// [`SpawnError`]: subagents off, bad ids, no such task or it is not awaiting approval
    /// ([`SpawnError::NotWaiting`]), a child that cannot be built, a task file that cannot
    /// be read or written.
    pub async fn resume_task(
        &self,
        ctx: harness_core::RuntimeContext,
        task_id: &str,
        decisions: Vec<harness_core::ApprovalDecision>,
        wait: Option<Duration>,
    ) -> Result<SpawnOutcome, SpawnError> {
        let handle = self
            .provided::<crate::subagents::Handle>()
            .ok_or(SpawnError::Disabled)?;
        let runtime = &handle.runtime;
        let ctx = self.bind(ctx).map_err(|err| SpawnError::Bind(err.to_string()))?;
        let store = Runtime::store_for(&ctx)?;
        let record = store.load().await?.tasks.get(task_id).cloned();
        let Some(record) = record.filter(|record| record.status == TaskStatus::AwaitingApproval) else {
            return Err(SpawnError::NotWaiting(task_id.to_owned()));
        };
        let declaration = handle
            .declarations
            .resolve(&ctx, &record.agent_id)
            .await
            .map_err(|message| SpawnError::Build {
                id: record.agent_id.clone(),
                message,
            })?;
        let instance = record.label.clone().unwrap_or_else(|| record.task_id.clone());
        let input = ChildInput::Resume(ResumeChild {
            task_id: record.task_id.clone(),
            instance,
            decisions,
        });
        let sink = wait.map(|_| harness_core::EventSink::disabled());
        let started = runtime
            .start(&ctx, &declaration, input, record.label.as_deref(), sink)
            .await?;
        let (status, result) = match wait {
            None => (TaskStatus::Running, None),
            Some(wait) => match runtime.wait_sync(&started.task, wait).await {
                Waited::Done(outcome) => (outcome.status, Some(outcome.result)),
                Waited::Promoted => (TaskStatus::Running, None),
            },
        };
        Ok(SpawnOutcome {
            task_id: record.task_id,
            agent_key: started.agent_key,
            status,
            result,
        })
    }

    /// Stops the task `task_id` of the session in `ctx`, also when another process runs it
    /// (its record gets a cancel request; that runner stops the child at its next tool or
    /// chunk boundary and records `cancelled`). Waits up to `wait` for the record to end.
    /// Returns the record (still `running` when the other runner has not answered within
    /// `wait`), or `None` when the session has no such task.
    ///
    /// # Errors
    /// [`SpawnError`]: subagents off, bad ids, a task file that cannot be read or written.
    pub async fn cancel_task(
        &self,
        ctx: harness_core::RuntimeContext,
        task_id: &str,
        wait: Duration,
    ) -> Result<Option<TaskRecord>, SpawnError> {
        let handle = self
            .provided::<crate::subagents::Handle>()
            .ok_or(SpawnError::Disabled)?;
        let ctx = self.bind(ctx).map_err(|err| SpawnError::Bind(err.to_string()))?;
        let store = Runtime::store_for(&ctx)?;
        handle.runtime.cancel_task(&store, task_id, wait).await
    }

    /// What is known of the task `task_id` of the session in `ctx`: its record (with the
    /// persisted [`TaskProgress`], readable from any process) and, when this process runs
    /// or recently ran it, its recent events (at most 256, oldest dropped first), each
    /// tagged with the child's [`EventSource`](harness_core::EventSource). `None` when the
    /// session has no such task.
    ///
    /// # Errors
    /// [`SpawnError`]: subagents off, bad ids, a task file that cannot be read.
    pub async fn task_events(
        &self,
        ctx: harness_core::RuntimeContext,
        task_id: &str,
    ) -> Result<Option<TaskEvents>, SpawnError> {
        let handle = self
            .provided::<crate::subagents::Handle>()
            .ok_or(SpawnError::Disabled)?;
        let ctx = self.bind(ctx).map_err(|err| SpawnError::Bind(err.to_string()))?;
        let store = Runtime::store_for(&ctx)?;
        let Some(record) = store.load().await?.tasks.get(task_id).cloned() else {
            return Ok(None);
        };
        let (events, dropped) = handle
            .runtime
            .event_log(task_id)
            .map(|log| log.snapshot())
            .unwrap_or_default();
        let local = handle.runtime.event_log(task_id).is_some();
        Ok(Some(TaskEvents {
            record,
            events,
            dropped,
            local,
        }))
    }

    /// The events of the task `task_id` of the session in `ctx` as a stream: the buffered
    /// ones, then each new one live, ending when the task ends. `None` when this process
    /// does not run (or recently ran) that task of the session; use
    /// [`task_events`](Self::task_events) for the persisted summary then. A subscriber that
    /// falls more than 256 events behind skips the ones it missed.
    ///
    /// # Errors
    /// [`SpawnError`]: subagents off, bad ids, a task file that cannot be read.
    pub async fn watch_task(
        &self,
        ctx: harness_core::RuntimeContext,
        task_id: &str,
    ) -> Result<Option<futures::stream::BoxStream<'static, harness_core::AgentEvent>>, SpawnError> {
        use futures::StreamExt;
        let handle = self
            .provided::<crate::subagents::Handle>()
            .ok_or(SpawnError::Disabled)?;
        let ctx = self.bind(ctx).map_err(|err| SpawnError::Bind(err.to_string()))?;
        let store = Runtime::store_for(&ctx)?;
        if !store.load().await?.tasks.contains_key(task_id) {
            return Ok(None);
        }
        let Some(log) = handle.runtime.event_log(task_id) else {
            return Ok(None);
        };
        let done = handle.runtime.live_task(task_id).map(|task| task.done_signal());
        let (buffered, rx) = log.subscribe();
        let live = futures::stream::unfold((rx, done), |(mut rx, mut done)| async move {
            use tokio::sync::broadcast::error::{RecvError, TryRecvError};
            enum Next {
                Event(Box<harness_core::AgentEvent>),
                Skip,
                End,
                TaskEnded,
            }
            loop {
                let next = match done.as_mut() {
                    // The task ended: what was sent before, then the end.
                    None => match rx.try_recv() {
                        Ok(event) => Next::Event(Box::new(event)),
                        Err(TryRecvError::Lagged(_)) => Next::Skip,
                        Err(_) => Next::End,
                    },
                    Some(signal) => tokio::select! {
                        biased;
                        event = rx.recv() => match event {
                            Ok(event) => Next::Event(Box::new(event)),
                            Err(RecvError::Lagged(_)) => Next::Skip,
                            Err(RecvError::Closed) => Next::End,
                        },
                        _ = signal.wait_for(Option::is_some) => Next::TaskEnded,
                    },
                };
                match next {
                    Next::Event(event) => return Some((*event, (rx, done))),
                    Next::Skip => {}
                    Next::End => return None,
                    Next::TaskEnded => done = None,
                }
            }
        });
        Ok(Some(futures::stream::iter(buffered).chain(live).boxed()))
    }

    /// The malformed subagent spec files skipped at build (each names its file and key).
    pub fn subagent_warnings(&self) -> Vec<DeclarationWarning> {
        self.provided::<crate::subagents::Handle>()
            .map(|handle| handle.declarations.warnings.clone())
            .unwrap_or_default()
    }
}

/// Takeover of a dead replica's background tasks (the design is in `subagents/takeover.rs`).
impl HarnessAgent {
    /// Makes this agent's background tasks takeable: each carries `lease` and is listed in
    /// the shared store, so another replica continues it when this one dies (`harness serve`
    /// calls it with the `[state]` lease). Returns `false`, changing nothing, when subagents
    /// are off or the workspace does not span replicas (no composite filesystem with a shared
    /// store). Call it once, before serving.
    pub fn enable_task_takeover(&self, lease: Duration) -> bool {
        let Some(handle) = self.provided::<crate::subagents::Handle>() else {
            return false;
        };
        let Ok(dir) = harness_fs::WsPath::parse(&format!("agents/{}/takeover", self.workspace().agent())) else {
            return false;
        };
        let Some(shared) = self.workspace().filesystem().replicated(std::slice::from_ref(&dir)) else {
            return false;
        };
        let Ok(path) = dir.join("running.json") else {
            return false;
        };
        let index = crate::subagents::TaskStore::new(shared, path);
        handle.runtime.takeover.set(Takeover { index, lease }).is_ok()
    }

    /// The claim loop: every half lease, takes over the listed tasks whose runner's lease
    /// expired (see [`enable_task_takeover`](Self::enable_task_takeover)) until `shutdown`.
    /// Returns at once when takeover is not enabled.
    pub async fn run_task_takeover(&self, shutdown: harness_core::CancellationToken) {
        let Some(handle) = self.provided::<crate::subagents::Handle>() else {
            return;
        };
        let Some(takeover) = handle.runtime.takeover.get() else {
            return;
        };
        let period = (takeover.lease / 2).max(Duration::from_millis(50));
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
            let listed = match takeover.index.load().await {
                Ok(listed) => listed,
                Err(err) => {
                    tracing::warn!(error = %harness_core::error_chain(&err), "running tasks not read");
                    continue;
                }
            };
            for entry in listed.tasks.into_values() {
                if handle.runtime.live_task(&entry.task_id).is_none()
                    && let Err(err) = self.take_over(handle, &entry).await
                {
                    tracing::warn!(task = %entry.task_id, error = %harness_core::error_chain(&err), "task not taken over");
                }
            }
        }
    }

    /// Claims the listed task `entry` when its lease expired, and continues it; what cannot
    /// be continued ends `lost` with the reason.
    async fn take_over(&self, handle: &crate::subagents::Handle, entry: &TaskRecord) -> Result<(), SpawnError> {
        let runtime = &handle.runtime;
        let bad = |err: harness_core::IdError| SpawnError::Bind(format!("task {}: {err}", entry.task_id));
        let bound = harness_core::SessionId::parse(entry.parent_session.clone().unwrap_or_default())
            .map_err(bad)
            .and_then(|session| {
                let user = match &entry.user {
                    Some(user) => harness_core::UserId::parse(user.clone()).map_err(bad)?,
                    None => harness_core::DEFAULT_USER_ID,
                };
                let ctx = harness_core::RuntimeContext::default()
                    .with_session(session)
                    .with_user(user);
                self.bind(ctx).map_err(|err| SpawnError::Bind(err.to_string()))
            });
        let ctx = match bound {
            Ok(ctx) => ctx,
            Err(err) => {
                // A listed pointer naming no valid scope is never claimable.
                runtime.unindex(&entry.task_id).await;
                return Err(err);
            }
        };
        let store = Runtime::store_for(&ctx)?;
        let record = match runtime.claim(&store, entry).await? {
            Claim::Held => return Ok(()),
            Claim::Gone => {
                runtime.unindex(&entry.task_id).await;
                return Ok(());
            }
            Claim::Taken(record) => *record,
        };
        let declaration = match handle.declarations.resolve(&ctx, &record.agent_id).await {
            Ok(declaration) => declaration,
            Err(message) => {
                let reason = format!("its replica died and the task cannot be continued: {message}");
                return runtime.give_up(&store, &record.task_id, reason).await;
            }
        };
        let Some(message) = record.input.clone().filter(|_| declaration.url.is_none()) else {
            let reason = if declaration.url.is_some() {
                "its replica died while it ran on the remote server; a remote child is not taken over (its turn may have gone on there)"
            } else {
                "its replica died while it continued after an approval; such a task is not taken over"
            };
            return runtime.give_up(&store, &record.task_id, reason.to_owned()).await;
        };
        let input = ChildInput::Continue {
            task_id: record.task_id.clone(),
            instance: record.label.clone().unwrap_or_else(|| record.task_id.clone()),
            message,
        };
        tracing::info!(task = %record.task_id, from = %entry.runner, "taking over a background task whose replica died");
        if let Err(err) = runtime
            .start(&ctx, &declaration, input, record.label.as_deref(), None)
            .await
        {
            let reason = format!("its replica died and the task could not be continued: {err}");
            runtime.give_up(&store, &record.task_id, reason).await?;
        }
        Ok(())
    }
}
