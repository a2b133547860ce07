//! The task registry of one agent: the tasks this process runs and recently ran, the
//! waits on them, cancel (also across processes), the sweep of tasks whose runner is gone,
//! and shutdown. Spawning is in `spawn.rs`, a task's run in `task.rs`.

use super::events::EventLog;
use super::factory::ChildFactory;
use super::limits::SpawnCounter;
use super::records::{TaskRecord, TaskStatus, TaskStore};
use super::settings::SubagentsConfig;
use super::spawn_error::SpawnError;
use super::task::{CANCEL_POLL, HEARTBEAT_STALE, LiveTask, Outcome, now_ms};
use harness_core::RuntimeContext;
use harness_fs::{CallScope, CallWorkspace, WsPath};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Finished tasks whose events stay readable in this process.
pub(crate) const FINISHED_KEPT: usize = 64;

/// The runtime of one agent's subagents.
pub(crate) struct Runtime {
    pub(crate) config: SubagentsConfig,
    /// This agent's own depth (0 for a top-level agent).
    pub(crate) depth: u32,
    pub(crate) agent_id: String,
    pub(crate) factory: ChildFactory,
    /// Process-unique id of this runtime's runner, recorded on every task it runs.
    pub(crate) instance: String,
    pub(crate) live: Mutex<HashMap<String, Arc<LiveTask>>>,
    /// Event logs of recently finished tasks of this process, oldest first.
    pub(crate) finished: Mutex<VecDeque<(String, Arc<EventLog>)>>,
    /// Spawn counters of programmatic spawns made outside a call, by task file.
    pub(crate) programmatic: Mutex<HashMap<WsPath, Arc<SpawnCounter>>>,
    pub(crate) tracker: TaskTracker,
    pub(crate) shutdown: CancellationToken,
    /// Set by `harness serve` in a workspace that spans replicas (`takeover.rs`): this
    /// runner's tasks carry a lease and are listed for takeover.
    pub(crate) takeover: std::sync::OnceLock<super::takeover::Takeover>,
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

/// What a sync wait ended with.
pub(crate) enum Waited {
    /// The task finished (and its result counts as delivered).
    Done(Outcome),
    /// The wait expired; the task keeps running in the background.
    Promoted,
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
            takeover: std::sync::OnceLock::new(),
        }
    }

    pub(crate) fn live(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<LiveTask>>> {
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
        Arc::clone(
            counters
                .entry(path.clone())
                .or_insert_with(|| Arc::new(SpawnCounter::programmatic())),
        )
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
    /// live here (the runner task died), or another runner's with a stale heartbeat (for a
    /// task with a lease, which another replica takes over, twice the lease).
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
            let stale = record.lease_ms.map_or_else(
                || u64::try_from(HEARTBEAT_STALE.as_millis()).unwrap_or(u64::MAX),
                |lease| lease.saturating_mul(2),
            );
            if now.saturating_sub(record.heartbeat_ms) <= stale {
                return false;
            }
            let taken = if record.lease_ms.is_some() {
                "; no replica took it over within twice its lease"
            } else {
                " (a one-shot `harness run` or a single-host workspace: nothing takes its tasks over)"
            };
            format!(
                "its runner ({}) stopped: no heartbeat for {} s (the process ended or was killed){taken}",
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
