//! The values of the application API on [`HarnessAgent`](crate::HarnessAgent) (spawn
//! requests and outcomes, task events); the methods live in the composition root
//! (`crate::subagent_control`), which joins the agent and this capability.

use super::records::{TaskRecord, TaskStatus};
use std::time::Duration;

/// A programmatic spawn ([`HarnessAgent::spawn_subagent`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnRequest {
    /// The subagent's id.
    pub agent_id: String,
    /// Its task.
    pub task: String,
    /// The instance label (the same label continues the instance's session).
    pub label: Option<String>,
    /// How long to wait for the answer; `None` runs it in the background. A wait that
    /// expires leaves the task running in the background (its result is pushed back).
    pub wait: Option<Duration>,
}

impl SpawnRequest {
    /// A background spawn of `agent_id` on `task`.
    pub fn new(agent_id: impl Into<String>, task: impl Into<String>) -> Self {
        Self {
            agent_id: agent_id.into(),
            task: task.into(),
            label: None,
            wait: None,
        }
    }

    /// Waits up to `wait` for the answer.
    #[must_use]
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Names the instance.
    #[must_use]
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }
}

/// What a programmatic spawn returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnOutcome {
    /// The task.
    pub task_id: String,
    /// The instance handle (`agent:<id>:<instance>`).
    pub agent_key: String,
    /// `running` for a background (or promoted) task, else how it ended.
    pub status: TaskStatus,
    /// The answer or what went wrong, when it ended within the wait.
    pub result: Option<String>,
}

/// A task's record and the events this process kept of it ([`HarnessAgent::task_events`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskEvents {
    /// The record, with its persisted progress.
    pub record: TaskRecord,
    /// Recent events, oldest first (empty when another process runs the task).
    pub events: Vec<harness_core::AgentEvent>,
    /// Older events dropped from the buffer.
    pub dropped: u64,
    /// Whether this process runs or ran the task (so `events` is its own record).
    pub local: bool,
}
