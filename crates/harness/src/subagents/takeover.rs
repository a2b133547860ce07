//! Takeover of a dead replica's background tasks (`harness serve` in a workspace that spans
//! replicas: a composite filesystem on a shared `[state]`).
//!
//! - **Lease:** a task this runner starts carries [`TaskRecord::lease_ms`] (the `[state]`
//!   lease) and the message it was started with; the heartbeat renews it every third of it.
//!   Every write the runner makes to the record is fenced by its runner id
//!   ([`TaskRecord::is_run_by`]), so a replica whose task was taken over changes nothing of it.
//! - **Running list:** `agents/<agent>/takeover/running.json` in the shared store, a
//!   [`TaskStore`] of pointer records (task id, user, parent session), updated by
//!   compare-and-set: a task is listed when it starts and unlisted when its runner records
//!   its end.
//! - **Claim loop:** every half lease, each listed task whose runner is not this replica and
//!   whose heartbeat is older than its lease is claimed by compare-and-set on its record (the
//!   runner id becomes this replica's), then continued: its message is sent again to the
//!   child's session (in the shared store), which continues the unfinished turn; a tool call
//!   that was running gets the "interrupted" result and never runs twice. Its result reaches
//!   the parent's next step exactly once (the push-back marks it delivered in one
//!   compare-and-set write).
//! - **Lost:** a task with a lease is swept `lost` only after twice its lease. What cannot be
//!   resumed is marked `lost` when claimed, with the reason: a remote child, a declaration that
//!   no longer exists, a resumed approval (no message to send again), and grandchildren
//!   (only a served agent's own children are listed). A one-shot `harness run` takes nothing
//!   over and lists nothing: its tasks end `lost` after the stale heartbeat.

use super::Handle;
use super::records::{TaskRecord, TaskStatus, TaskStore};
use super::runtime::Runtime;
use super::spawn::ChildInput;
use super::spawn_error::SpawnError;
use super::task::now_ms;
use crate::HarnessAgent;
use harness_core::{RuntimeContext, SessionId, UserId};
use harness_fs::WsPath;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A served agent's takeover settings.
pub(crate) struct Takeover {
    /// The running list.
    index: TaskStore,
    lease: Duration,
}

/// What a claim found.
enum Claim {
    /// The task ended or left its session: unlist it.
    Gone,
    /// Its runner's lease holds.
    Held,
    /// This replica holds it now.
    Taken(TaskRecord, RuntimeContext),
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl Runtime {
    /// The lease of the tasks this runner starts, when it lists them for takeover.
    pub(crate) fn lease_ms(&self) -> Option<u64> {
        self.takeover.get().map(|takeover| millis(takeover.lease))
    }

    /// Lists a started task for takeover (when this runner lists its tasks).
    pub(crate) async fn index_running(&self, record: &TaskRecord) {
        let Some(takeover) = self.takeover.get() else {
            return;
        };
        let entry = TaskRecord {
            input: None,
            progress: None,
            ..record.clone()
        };
        let listed = takeover
            .index
            .update(|file| {
                file.tasks.insert(entry.task_id.clone(), entry.clone());
                (true, ())
            })
            .await;
        if let Err(err) = listed {
            tracing::warn!(task = %record.task_id, error = %harness_core::error_chain(&err), "task not listed for takeover");
        }
    }

    /// Unlists a task whose end was recorded.
    pub(crate) async fn unindex(&self, task_id: &str) {
        let Some(takeover) = self.takeover.get() else {
            return;
        };
        let removed = takeover
            .index
            .update(|file| (file.tasks.remove(task_id).is_some(), ()))
            .await;
        if let Err(err) = removed {
            tracing::warn!(task = %task_id, error = %harness_core::error_chain(&err), "finished task not unlisted");
        }
    }

    /// Ends a claimed task that cannot be continued: `lost`, with `reason` (fenced by this
    /// runner's claim).
    async fn give_up(&self, store: &TaskStore, task_id: &str, reason: String) -> Result<(), SpawnError> {
        store
            .update(|file| match file.tasks.get_mut(task_id) {
                Some(record) if record.status == TaskStatus::Running && record.is_run_by(&self.instance) => {
                    record.status = TaskStatus::Lost;
                    record.result = Some(reason.clone());
                    (true, ())
                }
                _ => (false, ()),
            })
            .await?;
        self.unindex(task_id).await;
        Ok(())
    }
}

impl HarnessAgent {
    /// Makes this agent's background tasks takeable: each carries `lease` and is listed in
    /// the shared store, so another replica continues it when this one dies (`harness serve`
    /// calls it with the `[state]` lease). Returns `false`, changing nothing, when subagents
    /// are off or the workspace does not span replicas (no composite filesystem with a shared
    /// store). Call it once, before serving.
    pub fn enable_task_takeover(&self, lease: Duration) -> bool {
        let Some(handle) = self.provided::<Handle>() else {
            return false;
        };
        let dir = WsPath::parse(&format!("agents/{}/takeover", self.workspace().agent()));
        let Ok(dir) = dir else {
            return false;
        };
        let Some(shared) = self.workspace().filesystem().replicated(std::slice::from_ref(&dir)) else {
            return false;
        };
        let Ok(path) = dir.join("running.json") else {
            return false;
        };
        handle
            .runtime
            .takeover
            .set(Takeover {
                index: TaskStore::new(shared, path),
                lease,
            })
            .is_ok()
    }

    /// The claim loop: every half lease, takes over the listed tasks whose runner's lease
    /// expired (see [`enable_task_takeover`](Self::enable_task_takeover)) until `shutdown`.
    /// Returns at once when takeover is not enabled.
    pub async fn run_task_takeover(&self, shutdown: CancellationToken) {
        let Some(handle) = self.provided::<Handle>() else {
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
            match takeover.index.load().await {
                Ok(listed) => {
                    for entry in listed.tasks.into_values() {
                        if handle.runtime.live_task(&entry.task_id).is_none()
                            && let Err(err) = self.take_over(handle, &entry).await
                        {
                            tracing::warn!(task = %entry.task_id, error = %harness_core::error_chain(&err), "task not taken over");
                        }
                    }
                }
                Err(err) => tracing::warn!(error = %harness_core::error_chain(&err), "running tasks not read"),
            }
        }
    }

    /// Claims the listed task `entry` when its lease expired, and continues it.
    async fn take_over(&self, handle: &Handle, entry: &TaskRecord) -> Result<(), SpawnError> {
        let runtime = &handle.runtime;
        let claim = self.claim(runtime, entry).await;
        let (record, ctx) = match claim {
            Ok(Claim::Held) => return Ok(()),
            Ok(Claim::Taken(record, ctx)) => (record, ctx),
            Ok(Claim::Gone) => {
                runtime.unindex(&entry.task_id).await;
                return Ok(());
            }
            Err(err) => {
                // A pointer naming no valid scope is never claimable.
                if matches!(err, SpawnError::Bind(_)) {
                    runtime.unindex(&entry.task_id).await;
                }
                return Err(err);
            }
        };
        let store = Runtime::store_for(&ctx)?;
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

    /// The compare-and-set claim of `entry`'s record, in the parent's scope.
    async fn claim(&self, runtime: &Arc<Runtime>, entry: &TaskRecord) -> Result<Claim, SpawnError> {
        let bad = |err: harness_core::IdError| SpawnError::Bind(format!("task {}: {err}", entry.task_id));
        let session = SessionId::parse(entry.parent_session.clone().unwrap_or_default()).map_err(bad)?;
        let user = match &entry.user {
            Some(user) => UserId::parse(user.clone()).map_err(bad)?,
            None => harness_core::DEFAULT_USER_ID,
        };
        let ctx = self
            .bind(RuntimeContext::default().with_session(session).with_user(user))
            .map_err(|err| SpawnError::Bind(err.to_string()))?;
        let store = Runtime::store_for(&ctx)?;
        let now = now_ms();
        let instance = &runtime.instance;
        let claimed = store
            .update(|file| match file.tasks.get_mut(&entry.task_id) {
                Some(record) if record.status == TaskStatus::Running => match record.lease_ms {
                    Some(lease) if !record.is_run_by(instance) && now.saturating_sub(record.heartbeat_ms) > lease => {
                        record.runner.clone_from(instance);
                        record.heartbeat_ms = now;
                        (true, Some(Some(record.clone())))
                    }
                    Some(_) => (false, Some(None)),
                    None => (false, None),
                },
                _ => (false, None),
            })
            .await?;
        Ok(match claimed {
            Some(Some(record)) => Claim::Taken(record, ctx),
            Some(None) => Claim::Held,
            None => Claim::Gone,
        })
    }
}
