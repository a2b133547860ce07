//! Durable task records: one JSON file per parent session
//! (`<ns>/agents/<agent>/tasks/<session>.json`, [`CallScope::task_records_path`]), every
//! change a compare-and-set write ([`WriteMode::IfMatch`]) retried on conflict, so two
//! writers (the runner finishing a task, the parent delivering results, a second process)
//! never lose each other's changes. A runner's own writes (heartbeat, progress, the end) are
//! also fenced by its runner id ([`TaskRecord::is_run_by`]): once another replica took the
//! task over, the old runner changes nothing of it.
//!
//! [`CallScope::task_records_path`]: harness_fs::CallScope::task_records_path
//!
//! (Used by the `harness` crate's subagents capability, which re-exports this module.)

use harness_fs::{FileVersion, Filesystem, FsError, WriteMode, WsPath};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// How many times a compare-and-set update is retried before it gives up.
const CAS_ATTEMPTS: usize = 32;

/// Where a task is in its life. Every state but `running` is terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// The child is running.
    Running,
    /// The child answered.
    Completed,
    /// The child's call failed.
    Failed,
    /// The child ran past its time limit and was stopped.
    Timeout,
    /// `task_cancel`, or the agent shut down before the task finished.
    Cancelled,
    /// Its runner ended (the process exited or crashed) before the task finished and nothing
    /// could take it over: a one-shot `harness run`'s task, a remote child, a vanished
    /// declaration, a grandchild, a child continuing after an approval, or a listed task no
    /// replica claimed within twice its lease (the `harness` crate's `subagents/takeover.rs` says which are taken over).
    Lost,
    /// The child's turn ended waiting for a person's approval (its pending calls are in
    /// [`TaskRecord::pending`]); nothing runs until a person decides. A sync child's ask
    /// is the parent's pending approval; a background child is resumed with
    /// `HarnessAgent::resume_task` (crate `harness`).
    AwaitingApproval,
}

impl TaskStatus {
    /// Every status, in the order of the type (for messages that list them; a unit test
    /// keeps it complete).
    pub const ALL: [Self; 7] = [
        Self::Running,
        Self::Completed,
        Self::Failed,
        Self::Timeout,
        Self::Cancelled,
        Self::Lost,
        Self::AwaitingApproval,
    ];

    /// Whether the task's runner has finished (`awaiting_approval` included: nothing runs
    /// until a person decides, and a resume runs the child again).
    pub fn is_terminal(self) -> bool {
        self != Self::Running
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Timeout => "timeout",
            Self::Cancelled => "cancelled",
            Self::Lost => "lost",
            Self::AwaitingApproval => "awaiting_approval",
        }
    }
}

/// One task of a parent session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// The task id (`task-<uuid>`).
    pub task_id: String,
    /// The subagent's id.
    pub agent_id: String,
    /// The spawn's label, if any.
    #[serde(default)]
    pub label: Option<String>,
    /// The child's session id (`sub.<agent id>.<digest>`; records written before the
    /// bounded shape hold `sub.<parent session>.<agent id>.<instance>`, which stay in use).
    pub child_session: String,
    /// The session of the parent that spawned the task, readable (the child's own session id
    /// is a digest); `None` for records written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session: Option<String>,
    /// The child's depth in the delegation tree (a direct child of a top-level agent is 1);
    /// `None` for records written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<u32>,
    /// The slash-separated agent ids from the root agent to the child (`assistant/researcher`);
    /// `None` for records written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The state.
    pub status: TaskStatus,
    /// The child's answer (completed) or what went wrong (the other terminal states).
    #[serde(default)]
    pub result: Option<String>,
    /// The process-unique id of the runner executing the task.
    pub runner: String,
    /// Whether the result reached the parent's model (tool result, `task_output`,
    /// `wait_async_results` or the push-back reminder); a delivered task is never pushed.
    #[serde(default)]
    pub delivered: bool,
    /// When the runner last showed it is alive (ms since the Unix epoch).
    #[serde(default)]
    pub heartbeat_ms: u64,
    /// Set by a `task_cancel` from a process that does not run the task: the runner sees it
    /// at its next poll and stops the child, which then ends `cancelled`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancel_requested: bool,
    /// What the child did so far (kept up to date by the runner while it runs), for readers
    /// in any process; `None` for records written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<TaskProgress>,
    /// The child's calls waiting for a person (status `awaiting_approval`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<harness_core::PendingCall>,
    /// The runner's lease in ms, set when the runner is a `harness serve` replica of a
    /// workspace that spans replicas: once `heartbeat_ms` is older than this, another replica
    /// may claim the task (compare-and-set on this record) and continue it. `None`: nothing
    /// takes the task over (a one-shot `harness run`, a single-host workspace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
    /// The parent's caller (user id), so a replica taking the task over binds the same scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The message the child's turn was started with (kept with a lease): a replica taking
    /// the task over sends it again, and the child's session continues that unfinished turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
}

impl TaskRecord {
    /// Whether `runner` may write this record's run state: the fence of every write a runner
    /// makes (heartbeat, progress, the end), so a runner whose task was taken over by another
    /// replica changes nothing of it.
    pub fn is_run_by(&self, runner: &str) -> bool {
        self.runner == runner
    }
}

/// A persisted summary of a task's activity: what another process can know of a child it
/// does not run (this process's own tasks also keep their recent events, see
/// [`HarnessAgent::task_events`](crate::HarnessAgent::task_events)).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskProgress {
    /// Reasoning-acting steps finished.
    #[serde(default)]
    pub steps: u32,
    /// Tool calls the child made.
    #[serde(default)]
    pub tool_calls: u32,
    /// Tokens the child used so far (input + output of every model call).
    #[serde(default)]
    pub tokens: u64,
    /// The last tool the child called, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_tool: Option<String>,
    /// Events the child produced in all.
    #[serde(default)]
    pub events: u64,
}

/// The task file of one parent session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskFile {
    /// Format version.
    #[serde(default = "format_version")]
    pub v: u32,
    /// Records by task id.
    #[serde(default)]
    pub tasks: BTreeMap<String, TaskRecord>,
}

fn format_version() -> u32 {
    1
}

/// Why the task file could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TaskStoreError {
    /// The file could not be read or written.
    #[error("task records {path}")]
    Fs {
        /// The task file.
        path: WsPath,
        /// The cause.
        #[source]
        source: FsError,
    },
    /// The file is not a task file.
    #[error("task records {path} are corrupt: {message}")]
    Corrupt {
        /// The task file.
        path: WsPath,
        /// What the decoder said.
        message: String,
    },
    /// Other writers kept changing the file.
    #[error("task records {path}: gave up after {CAS_ATTEMPTS} conflicting writes")]
    Contended {
        /// The task file.
        path: WsPath,
    },
}

/// The task file of one parent session, on the caller's own layer.
#[derive(Clone)]
pub struct TaskStore {
    fs: Arc<dyn Filesystem>,
    path: WsPath,
}

impl std::fmt::Debug for TaskStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl TaskStore {
    /// The records at `path` of `fs`.
    pub fn new(fs: Arc<dyn Filesystem>, path: WsPath) -> Self {
        Self { fs, path }
    }

    /// The file's path.
    pub fn path(&self) -> &WsPath {
        &self.path
    }

    /// Whether the file exists: a metadata lookup (on a local disk it runs on the caller's
    /// thread, no hand-off to the blocking pool), so a session that never started a task
    /// pays almost nothing per call. Never cached: a task another process creates is seen
    /// on the next check.
    ///
    /// # Errors
    /// [`TaskStoreError::Fs`] when the lookup fails for another reason than a missing file.
    pub async fn exists(&self) -> Result<bool, TaskStoreError> {
        match self.fs.stat(&self.path).await {
            Ok(_) => Ok(true),
            Err(FsError::NotFound { .. }) => Ok(false),
            Err(source) => Err(TaskStoreError::Fs {
                path: self.path.clone(),
                source,
            }),
        }
    }

    /// The file as it is now (empty when there is none).
    ///
    /// # Errors
    /// [`TaskStoreError`] when the file cannot be read or decoded.
    pub async fn load(&self) -> Result<TaskFile, TaskStoreError> {
        Ok(self.read().await?.0)
    }

    async fn read(&self) -> Result<(TaskFile, Option<FileVersion>), TaskStoreError> {
        match self.fs.read_versioned(&self.path).await {
            Ok((bytes, version)) => {
                let file = serde_json::from_slice(&bytes).map_err(|err| TaskStoreError::Corrupt {
                    path: self.path.clone(),
                    message: err.to_string(),
                })?;
                Ok((file, Some(version)))
            }
            Err(FsError::NotFound { .. }) => Ok((TaskFile::default(), None)),
            Err(source) => Err(TaskStoreError::Fs {
                path: self.path.clone(),
                source,
            }),
        }
    }

    /// Applies `change` with compare-and-set, retrying on conflict (`change` may run more
    /// than once and sees the newest file each time). Nothing is written when `change`
    /// returns `false` in its first element.
    ///
    /// # Errors
    /// [`TaskStoreError`] when the file cannot be read, decoded or written.
    pub async fn update<R>(&self, mut change: impl FnMut(&mut TaskFile) -> (bool, R)) -> Result<R, TaskStoreError> {
        for _ in 0..CAS_ATTEMPTS {
            let (mut file, version) = self.read().await?;
            let (changed, result) = change(&mut file);
            if !changed {
                return Ok(result);
            }
            let bytes = serde_json::to_vec_pretty(&file).map_err(|err| TaskStoreError::Corrupt {
                path: self.path.clone(),
                message: err.to_string(),
            })?;
            let mode = match version {
                Some(version) => WriteMode::IfMatch(version),
                None => WriteMode::CreateNew,
            };
            match self.fs.write(&self.path, &bytes, mode).await {
                Ok(()) => return Ok(result),
                Err(FsError::Conflict { .. } | FsError::AlreadyExists { .. }) => continue,
                Err(source) => {
                    return Err(TaskStoreError::Fs {
                        path: self.path.clone(),
                        source,
                    });
                }
            }
        }
        Err(TaskStoreError::Contended {
            path: self.path.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::TaskStatus;

    #[test]
    fn every_status_is_listed_once_under_its_wire_name() {
        for status in TaskStatus::ALL {
            // A new variant fails to compile here until it is listed in `ALL`.
            match status {
                TaskStatus::Running
                | TaskStatus::Completed
                | TaskStatus::Failed
                | TaskStatus::Timeout
                | TaskStatus::Cancelled
                | TaskStatus::Lost
                | TaskStatus::AwaitingApproval => {}
            }
            let wire = serde_json::to_value(status).unwrap_or_else(|err| panic!("{err}"));
            assert_eq!(wire, serde_json::Value::String(status.as_str().to_owned()));
        }
        let mut names: Vec<&str> = TaskStatus::ALL.iter().map(|status| status.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), TaskStatus::ALL.len());
    }
}
