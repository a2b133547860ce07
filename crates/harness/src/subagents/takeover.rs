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

use super::records::{TaskRecord, TaskStatus, TaskStore};
use super::runtime::Runtime;
use super::spawn_error::SpawnError;
use super::task::now_ms;
use std::time::Duration;

/// A served agent's takeover settings.
pub(crate) struct Takeover {
    /// The running list.
    pub(crate) index: TaskStore,
    /// The lease of the tasks this runner starts.
    pub(crate) lease: Duration,
}

/// What a claim found.
pub(crate) enum Claim {
    /// The task ended or left its session (or is not claimable): unlist it.
    Gone,
    /// Its runner's lease holds.
    Held,
    /// This runner holds it now.
    Taken(Box<TaskRecord>),
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
    pub(crate) async fn give_up(&self, store: &TaskStore, task_id: &str, reason: String) -> Result<(), SpawnError> {
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

    /// The compare-and-set claim of the listed `entry` in its parent's task file `store`:
    /// taken when the record still runs under another runner whose lease expired.
    pub(crate) async fn claim(&self, store: &TaskStore, entry: &TaskRecord) -> Result<Claim, SpawnError> {
        let now = now_ms();
        let instance = &self.instance;
        let claimed = store
            .update(|file| match file.tasks.get_mut(&entry.task_id) {
                Some(record) if record.status == TaskStatus::Running => match record.lease_ms {
                    Some(lease) if !record.is_run_by(instance) && now.saturating_sub(record.heartbeat_ms) > lease => {
                        record.runner.clone_from(instance);
                        record.heartbeat_ms = now;
                        (true, Claim::Taken(Box::new(record.clone())))
                    }
                    Some(_) => (false, Claim::Held),
                    None => (false, Claim::Gone),
                },
                _ => (false, Claim::Gone),
            })
            .await?;
        Ok(claimed)
    }
}
