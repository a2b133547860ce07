//! The task list: `todo_write` replaces the session's list of tasks (each `pending`,
//! `in_progress` or `completed`, at most one in progress), kept as a typed session slot — so
//! it survives restarts and is never touched by compaction, which only rewrites messages —
//! and shown to the model before every step as a short reminder in the volatile tail of the
//! system prompt (nothing when the list is empty; never as an extra message).
//!
//! On with `[plan] task_list = true` in harness.toml or [`HarnessAgentBuilder::task_list`],
//! and always while plan mode is enabled (`[plan] enabled = true`).

use crate::capability::{Assembly, Capability, CapabilityError, Layer, Registration, Setup};
use harness_core::{
    Hooks, JsonSchema, Middleware, SessionSlot, SystemPrompt, Tool, ToolAnnotations, ToolContext, ToolError,
    ToolOutput, Turn, TypedTool, async_trait, typed,
};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::sync::Arc;

/// Most tasks in one list.
pub const MAX_TASKS: usize = 50;
/// Longest task text, in characters.
pub const MAX_TASK_CHARS: usize = 500;

/// Where a task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Not started.
    Pending,
    /// Being worked on (at most one task at a time).
    InProgress,
    /// Done.
    Completed,
}

/// One task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Task {
    /// What to do, in a short imperative sentence.
    pub content: String,
    /// `pending`, `in_progress` or `completed`.
    pub status: TaskStatus,
}

/// The session's task list (session slot `task_list`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskList {
    /// The tasks, in order.
    #[serde(default)]
    pub tasks: Vec<Task>,
}

impl SessionSlot for TaskList {
    const KEY: &'static str = "task_list";
}

impl TaskList {
    /// The task list saved in a session's state (empty when there is none or it cannot be
    /// read).
    pub fn from_state(state: &harness_core::AgentState) -> Self {
        harness_core::SessionState::from_extensions(&state.extensions)
            .get::<Self>()
            .unwrap_or_default()
    }

    /// The list for people: one line per task, `[ ]`, `[in progress]` or `[x]` first.
    pub fn lines(&self) -> Vec<String> {
        self.tasks
            .iter()
            .map(|task| {
                let mark = match task.status {
                    TaskStatus::Pending => "[ ]",
                    TaskStatus::InProgress => "[in progress]",
                    TaskStatus::Completed => "[x]",
                };
                format!("{mark} {}", task.content)
            })
            .collect()
    }

    /// The reminder shown to the model, or `None` when the list is empty.
    pub fn reminder(&self) -> Option<String> {
        if self.tasks.is_empty() {
            return None;
        }
        let mut text = String::from(
            "## Task list\nYour current tasks (keep them current with todo_write; at most one in progress):\n",
        );
        for line in self.lines() {
            let _ = writeln!(text, "- {line}");
        }
        Some(text.trim_end().to_owned())
    }

    /// Checks a new list.
    ///
    /// # Errors
    /// A message for the model when the list breaks a rule.
    fn validate(tasks: &[Task]) -> Result<(), String> {
        if tasks.len() > MAX_TASKS {
            return Err(format!("at most {MAX_TASKS} tasks are allowed; got {}", tasks.len()));
        }
        if let Some(at) = tasks.iter().position(|task| task.content.trim().is_empty()) {
            return Err(format!("task {} has no content", at + 1));
        }
        if let Some(task) = tasks.iter().find(|task| task.content.chars().count() > MAX_TASK_CHARS) {
            return Err(format!(
                "a task is longer than {MAX_TASK_CHARS} characters: {}",
                harness_core::excerpt(&task.content, 60)
            ));
        }
        let active: Vec<&str> = tasks
            .iter()
            .filter(|task| task.status == TaskStatus::InProgress)
            .map(|task| task.content.as_str())
            .collect();
        if active.len() > 1 {
            return Err(format!(
                "at most one task may be in_progress; {} are: {}. Mark the others pending or completed.",
                active.len(),
                active.join("; ")
            ));
        }
        Ok(())
    }
}

/// Arguments of `todo_write`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TodoWriteArgs {
    /// The whole new task list (it replaces the old one). At most one task in_progress.
    pub todos: Vec<Task>,
}

/// `todo_write`: replaces the session's task list.
#[derive(Debug, Default, Clone, Copy)]
pub struct TodoWrite;

#[async_trait]
impl TypedTool for TodoWrite {
    const NAME: &'static str = "todo_write";
    const DESCRIPTION: &'static str = "Replace your task list with `todos` (the whole list, in order). Each task has `content` and `status` (pending, in_progress or completed); keep exactly one task in_progress while you work and mark tasks completed as soon as they are done. The list is shown to you before every step.";
    type Args = TodoWriteArgs;
    const ANNOTATIONS: ToolAnnotations = ToolAnnotations::new()
        .destructive(false)
        .idempotent()
        .closed_world()
        .concurrency_safe(false)
        .agent_local();

    async fn call(&self, args: TodoWriteArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        TaskList::validate(&args.todos).map_err(ToolError::failed)?;
        let summary = TaskList {
            tasks: args.todos.clone(),
        }
        .reminder()
        .unwrap_or_else(|| "The task list is now empty.".to_owned());
        ctx.session
            .update::<TaskList, _>(|list| list.tasks = args.todos)
            .map_err(|err| ToolError::failed(format!("the task list could not be saved: {err}")))?;
        Ok(ToolOutput::text(summary))
    }
}

/// The task list's entry in the capability registry (`[plan]` is plan mode's section).
pub(crate) const REGISTRATION: Registration = Registration::new("task_list", build);

/// The builder's choice (overrides `[plan] task_list`).
#[derive(Clone)]
pub(crate) struct TaskListOverride(pub(crate) bool);

fn build(setup: &mut Setup<'_>) -> Result<Option<Arc<dyn Capability>>, CapabilityError> {
    let asked = match setup.take::<TaskListOverride>() {
        Some(TaskListOverride(enabled)) => enabled,
        None => setup.provided::<crate::facts::TaskListRequested>().is_some(),
    };
    // Plan mode lets `todo_write` run while planning: it is always on with it.
    let enabled = asked || setup.provided::<crate::facts::PlanModeEnabled>().is_some();
    setup.inherit(TaskListOverride(asked));
    Ok(enabled.then(|| Arc::new(TaskListCapability) as Arc<dyn Capability>))
}

/// `todo_write` and the reminder.
struct TaskListCapability;

impl Capability for TaskListCapability {
    fn name(&self) -> &'static str {
        "task_list"
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![typed(TodoWrite)]
    }

    fn middleware(&self, _assembly: &Assembly) -> Vec<(Layer, Arc<dyn Middleware>)> {
        vec![(Layer::Plan, Arc::new(TaskReminder) as Arc<dyn Middleware>)]
    }

    fn session_slots(&self) -> &'static [crate::capability::SlotKey] {
        SLOTS
    }
}

/// The task list lives in one session slot.
const SLOTS: &[crate::capability::SlotKey] = &[crate::capability::SlotKey::of::<TaskList>()];

/// Puts the task list into the volatile tail of every step's system prompt.
struct TaskReminder;

#[async_trait]
impl Middleware for TaskReminder {
    fn name(&self) -> &'static str {
        "task_reminder"
    }

    fn hooks(&self) -> Hooks {
        Hooks::SYSTEM_PROMPT
    }

    async fn system_prompt(&self, prompt: &mut SystemPrompt, turn: &Turn) {
        match turn.session().get::<TaskList>() {
            Ok(list) => {
                if let Some(reminder) = list.reminder() {
                    prompt.push_volatile("task_list", reminder);
                }
            }
            Err(err) => tracing::warn!(error = %err, "the task list could not be read"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Task, TaskList, TaskStatus};

    fn task(content: &str, status: TaskStatus) -> Task {
        Task {
            content: content.to_owned(),
            status,
        }
    }

    #[test]
    fn validation_allows_at_most_one_task_in_progress_and_bounds_the_list() {
        let ok = [
            task("a", TaskStatus::Completed),
            task("b", TaskStatus::InProgress),
            task("c", TaskStatus::Pending),
        ];
        assert_eq!(TaskList::validate(&ok), Ok(()));
        assert_eq!(TaskList::validate(&[]), Ok(()));
        let two = [task("a", TaskStatus::InProgress), task("b", TaskStatus::InProgress)];
        let err = TaskList::validate(&two).err().unwrap_or_default();
        assert!(
            err.contains("at most one task may be in_progress") && err.contains("a; b"),
            "{err}"
        );
        assert!(TaskList::validate(&[task(" ", TaskStatus::Pending)]).is_err());
        assert!(TaskList::validate(&[task(&"x".repeat(501), TaskStatus::Pending)]).is_err());
        let many: Vec<Task> = (0..51).map(|n| task(&n.to_string(), TaskStatus::Pending)).collect();
        assert!(TaskList::validate(&many).is_err());
    }

    #[test]
    fn the_reminder_is_empty_for_an_empty_list() {
        assert_eq!(TaskList::default().reminder(), None);
        let list = TaskList {
            tasks: vec![task("write", TaskStatus::InProgress), task("test", TaskStatus::Pending)],
        };
        let text = list.reminder().unwrap_or_default();
        assert!(text.contains("- [in progress] write\n- [ ] test"), "{text}");
    }
}
