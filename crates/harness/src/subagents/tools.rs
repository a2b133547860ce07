//! The subagent tools (names and parameters of the reference catalogue): `agent_spawn`,
//! `agent_send`, `agent_list`, `task_output`, `task_list`, `task_cancel`,
//! `wait_async_results`. The spawn and wait tools are concurrency-safe (several in one step
//! run together and form a barrier) and bring their own time limits, which replace the
//! agent's per-tool timeout.

use super::Declarations;
use super::declaration::{SubagentDeclaration, WorkspaceMode};
use super::pushback::bounded;
use super::records::{TaskRecord, TaskStatus, TaskStore};
use super::runtime::{Runtime, Waited};
use super::spawn::{ChildInput, ResumeChild, Started};
use super::task::{Outcome, now_ms};
use harness_core::{
    ChildDecision, PendingChild, ToolAnnotations, ToolCall, ToolContext, ToolError, ToolOutput, TypedTool, async_trait,
    typed,
};
use schemars::JsonSchema;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// The longest sync wait a model may ask for, in seconds.
pub(crate) const MAX_TIMEOUT_SECONDS: u64 = 600;
/// The tools' own limit: the longest wait plus a margin to answer.
const TOOL_LIMIT: Duration = Duration::from_secs(MAX_TIMEOUT_SECONDS + 5);

/// How long `task_cancel` waits for a task another process runs to record its end.
const CANCEL_WAIT: Duration = Duration::from_secs(15);

// Children run inside the caller's area under the inherited permissions: closed-world.
const WAITS: ToolAnnotations = ToolAnnotations::new()
    .closed_world()
    .concurrency_safe(true)
    .agent_local();
const READS: ToolAnnotations = ToolAnnotations::new().read_only().concurrency_safe(true).agent_local();

/// Every subagent tool.
pub(crate) fn all(runtime: &Arc<Runtime>, declarations: &Arc<Declarations>) -> Vec<Arc<dyn harness_core::Tool>> {
    let shared = Shared {
        runtime: Arc::clone(runtime),
        declarations: Arc::clone(declarations),
    };
    vec![
        typed(AgentSpawn(shared.clone())),
        typed(AgentSend(shared.clone())),
        typed(AgentList(shared.clone())),
        typed(TaskOutput(shared.clone())),
        typed(TaskList(shared.clone())),
        typed(TaskCancel(shared.clone())),
        typed(WaitAsyncResults(shared)),
    ]
}

#[derive(Clone)]
struct Shared {
    runtime: Arc<Runtime>,
    declarations: Arc<Declarations>,
}

fn failed(err: impl std::fmt::Display) -> ToolError {
    ToolError::failed(err.to_string())
}

fn store(ctx: &ToolContext) -> Result<TaskStore, ToolError> {
    Runtime::store_for(&ctx.runtime).map_err(failed)
}

/// The sync wait the model asked for: `None` = background.
fn sync_wait(timeout_seconds: Option<u64>, default: Duration) -> Result<Option<Duration>, ToolError> {
    match timeout_seconds.unwrap_or_else(|| default.as_secs().min(MAX_TIMEOUT_SECONDS)) {
        0 => Ok(None),
        seconds if seconds <= MAX_TIMEOUT_SECONDS => Ok(Some(Duration::from_secs(seconds))),
        seconds => Err(ToolError::failed(format!(
            "timeout_seconds = {seconds} is above the maximum of {MAX_TIMEOUT_SECONDS}; use 0 to run in the background"
        ))),
    }
}

/// Application code's override, put into a call's [`RuntimeContext`](harness_core::RuntimeContext):
/// every `agent_spawn`/`agent_send` of the call waits for its child (a requested background
/// run waits too) and a wait that expires stops the child (`status: timeout`, no promotion).
/// The limits apply as on every other path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ForceSync {
    /// Replaces the model's `timeout_seconds` (0 means the default: `[subagents]
    /// default_wait`, else 30; at most 600).
    pub timeout: Option<Duration>,
}

impl ForceSync {
    fn wait(self, requested: Option<u64>, configured: Duration) -> Result<Duration, ToolError> {
        let default = configured.min(Duration::from_secs(MAX_TIMEOUT_SECONDS));
        Ok(match self.timeout {
            Some(timeout) if timeout.is_zero() => default,
            Some(timeout) => timeout.min(Duration::from_secs(MAX_TIMEOUT_SECONDS)),
            None => sync_wait(requested, configured)?.unwrap_or(default),
        })
    }
}

impl Shared {
    /// Starts `agent_id` on `message` and waits as asked. `call` is the tool call itself
    /// (`tool` and its arguments): when the child's turn ends waiting for a person, this
    /// call becomes the parent's pending approval, and when the person decided, it runs
    /// again with a [`ChildDecision`] in its context and resumes the child with the decision
    /// instead of sending `message` again.
    async fn run(
        &self,
        ctx: &ToolContext,
        call: (&'static str, serde_json::Value),
        agent_id: &str,
        message: String,
        instance: Option<&str>,
        timeout_seconds: Option<u64>,
    ) -> Result<ToolOutput, ToolError> {
        let forced = ctx.runtime.get::<ForceSync>().copied();
        let wait = match forced {
            Some(force) => Some(force.wait(timeout_seconds, self.runtime.config.default_wait)?),
            None => sync_wait(timeout_seconds, self.runtime.config.default_wait)?,
        };
        let resumed = ctx.runtime.get::<ChildDecision>().cloned();
        let agent_id = resumed
            .as_ref()
            .map_or(agent_id, |resumed| resumed.child.agent_id.as_str());
        let declaration = self
            .declarations
            .resolve(&ctx.runtime, agent_id)
            .await
            .map_err(ToolError::failed)?;
        let (name, mut input) = call;
        if let Some(fields) = input.as_object_mut() {
            fields.retain(|_, value| !value.is_null());
        }
        let tool_call = ToolCall {
            id: ctx.call_id.clone(),
            name: name.to_owned(),
            input,
        };
        if resumed.is_none()
            && let Some(output) = self.declarations.gate_remote(ctx, &tool_call, &declaration)
        {
            return Ok(output);
        }
        let sink = wait.map(|_| ctx.events.clone());
        let started = match &resumed {
            // Not a new spawn: the limits counted it when it started.
            Some(resumed) => {
                let label =
                    (resumed.child.instance != resumed.child.task_id).then_some(resumed.child.instance.as_str());
                let input = ChildInput::Resume(ResumeChild {
                    task_id: resumed.child.task_id.clone(),
                    instance: resumed.child.instance.clone(),
                    decisions: resumed.child_decisions(),
                });
                self.runtime.start(&ctx.runtime, &declaration, input, label, sink).await
            }
            None => {
                self.runtime.admit(&ctx.runtime).map_err(failed)?;
                self.runtime
                    .start(&ctx.runtime, &declaration, ChildInput::Task(message), instance, sink)
                    .await
            }
        }
        .map_err(failed)?;
        let task_id = started.task.id().to_owned();
        let Some(wait) = wait else {
            return Ok(ToolOutput::text(format!(
                "status: running\nagent_key: {}\ntask_id: {task_id}\nThe result will be delivered to you automatically when it is ready.",
                started.agent_key
            )));
        };
        // If the parent's call is cancelled while it waits, the child is stopped too.
        let guard = CancelOnDrop {
            runtime: &self.runtime,
            task_id: Some(task_id.clone()),
        };
        let waited = self.runtime.wait_sync(&started.task, wait).await;
        guard.defuse();
        self.answer(ctx, &tool_call, &declaration, &started, waited, wait, forced.is_some())
            .await
    }

    /// The tool result of a spawn or send that waited `wait` and got `waited`: the answer,
    /// the parent's pending approval when the child asks a person, or how it goes on.
    #[allow(clippy::too_many_arguments)] // The parts of one waited call.
    async fn answer(
        &self,
        ctx: &ToolContext,
        tool_call: &ToolCall,
        declaration: &SubagentDeclaration,
        started: &Started,
        waited: Waited,
        wait: Duration,
        forced: bool,
    ) -> Result<ToolOutput, ToolError> {
        let task_id = started.task.id().to_owned();
        match waited {
            Waited::Done(outcome) if outcome.status == TaskStatus::AwaitingApproval => {
                let asked = started.task.asked();
                let instance = started
                    .agent_key
                    .rsplit(':')
                    .next()
                    .unwrap_or(task_id.as_str())
                    .to_owned();
                let child = PendingChild {
                    agent_id: declaration.id.clone(),
                    session_id: started.task.record.child_session.clone(),
                    task_id: task_id.clone(),
                    instance,
                    calls: asked.clone(),
                };
                let reason = asked
                    .iter()
                    .map(|asked| format!("`{}` {} ({})", asked.tool, asked.input, asked.reason))
                    .collect::<Vec<_>>()
                    .join("; ");
                let reason = format!("subagent `{}` asks: {reason}", declaration.id);
                // One rule covers one call: a single child call's rule is the suggestion.
                let suggestion = match asked.as_slice() {
                    [only] => only.suggestion.clone(),
                    _ => None,
                };
                Ok(ctx.request_child_approval(tool_call, &reason, suggestion, child))
            }
            Waited::Done(outcome) => {
                let shown = bounded(&ctx.runtime, &started.task.record, &outcome.result).await;
                let header = format!(
                    "status: {}\nagent_key: {}\ntask_id: {task_id}\n\n",
                    outcome.status.as_str(),
                    started.agent_key
                );
                if outcome.status == TaskStatus::Completed {
                    Ok(ToolOutput::text(format!("{header}{shown}")))
                } else {
                    Ok(ToolOutput::error(format!("{header}{shown}")))
                }
            }
            Waited::Promoted if forced => {
                started.task.expire();
                let _ = self.runtime.wait_live(&task_id, TOOL_LIMIT).await;
                let store = store(ctx)?;
                let record = self.record(&store, &task_id, true).await?;
                let status = record.map_or(TaskStatus::Timeout, |record| record.status);
                Ok(ToolOutput::error(format!(
                    "status: {}\nagent_key: {}\ntask_id: {task_id}\nThe subagent did not answer within {} s and was stopped.",
                    status.as_str(),
                    started.agent_key,
                    wait.as_secs()
                )))
            }
            Waited::Promoted => Ok(ToolOutput::text(format!(
                "status: timeout_promoted\nagent_key: {}\ntask_id: {task_id}\nThe subagent did not finish within {} s and goes on in the background; its result will be delivered to you automatically.",
                started.agent_key,
                wait.as_secs()
            ))),
        }
    }

    /// The record of `task_id` after the lost sweep, marked delivered when terminal and
    /// `deliver` is set.
    async fn record(&self, store: &TaskStore, task_id: &str, deliver: bool) -> Result<Option<TaskRecord>, ToolError> {
        let now = now_ms();
        store
            .update(|file| match file.tasks.get_mut(task_id) {
                Some(record) => {
                    let mut changed = self.runtime.sweep_lost(record, now);
                    if deliver && record.status.is_terminal() && !record.delivered {
                        record.delivered = true;
                        changed = true;
                    }
                    (changed, Some(record.clone()))
                }
                None => (false, None),
            })
            .await
            .map_err(failed)
    }
}

/// Stops a sync child when the waiting tool call is dropped (the parent was cancelled).
struct CancelOnDrop<'a> {
    runtime: &'a Runtime,
    task_id: Option<String>,
}

impl CancelOnDrop<'_> {
    fn defuse(mut self) {
        self.task_id = None;
    }
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(task_id) = self.task_id.take() {
            self.runtime.cancel_live(&task_id);
        }
    }
}

async fn describe(ctx: &ToolContext, record: &TaskRecord) -> String {
    let mut text = format!(
        "task_id: {}\nagent: {}\nstatus: {}",
        record.task_id,
        record.agent_id,
        record.status.as_str()
    );
    if let Some(label) = &record.label {
        text.push_str(&format!("\nlabel: {label}"));
    }
    if let Some(progress) = &record.progress {
        text.push_str(&format!(
            "\nprogress: {} steps, {} tool calls, {} tokens{}",
            progress.steps,
            progress.tool_calls,
            progress.tokens,
            progress
                .last_tool
                .as_ref()
                .map(|tool| format!(", last tool: {tool}"))
                .unwrap_or_default()
        ));
    }
    if record.cancel_requested && !record.status.is_terminal() {
        text.push_str("\ncancel requested: the runner stops it at its next tool or chunk boundary");
    }
    if record.status.is_terminal() {
        let result = record.result.clone().unwrap_or_default();
        text.push_str(&format!("\nresult:\n{}", bounded(&ctx.runtime, record, &result).await));
    }
    text
}

/// Arguments of `agent_spawn`.
#[derive(Debug, Deserialize, JsonSchema)]
struct SpawnArgs {
    /// A subagent of the list.
    agent_id: String,
    /// A self-contained task with everything it needs.
    task: Option<String>,
    /// Names the instance; reusing it continues its session.
    label: Option<String>,
    /// Wait for the result (default 30, max 600); 0: in the background.
    timeout_seconds: Option<u64>,
}

struct AgentSpawn(Shared);

#[async_trait]
impl TypedTool for AgentSpawn {
    const NAME: &'static str = "agent_spawn";
    const DESCRIPTION: &'static str = "Start a subagent on a task; several in one step run in parallel.";
    const ANNOTATIONS: ToolAnnotations = WAITS;
    type Args = SpawnArgs;

    async fn call(&self, args: SpawnArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let Some(task) = args.task.filter(|task| !task.trim().is_empty()) else {
            return Err(ToolError::failed(
                "`task` is empty: give the subagent a self-contained task (use agent_send to continue a labelled instance)",
            ));
        };
        let (label, note) = slugged_label(args.label)?;
        let input = serde_json::json!({
            "agent_id": args.agent_id,
            "task": task,
            "label": label,
            "timeout_seconds": args.timeout_seconds,
        });
        let mut output = self
            .0
            .run(
                ctx,
                (Self::NAME, input),
                &args.agent_id,
                task,
                label.as_deref(),
                args.timeout_seconds,
            )
            .await?;
        if let Some(note) = note {
            output.content.push(harness_core::Block::text(note));
        }
        Ok(output)
    }

    fn timeout(&self) -> Option<Duration> {
        Some(TOOL_LIMIT)
    }
}

/// A label that is no id ([`harness_agents::slug`]) as one, with a note for the result
/// saying so: the model uses the slug to continue the instance.
fn slugged_label(label: Option<String>) -> Result<(Option<String>, Option<String>), ToolError> {
    let Some(label) = label.filter(|label| !label.is_empty()) else {
        return Ok((None, None));
    };
    if harness_agents::valid_id(&label) {
        return Ok((Some(label), None));
    }
    match harness_agents::slug(&label) {
        Some(slug) => {
            let note = format!(
                "note: the label `{label}` was changed to `{slug}` (letters, digits, `-`, `_` and `.` only); use `{slug}` to continue this instance"
            );
            Ok((Some(slug), Some(note)))
        }
        None => Err(ToolError::failed(format!(
            "label `{label}` has no letter or digit to make an id of; use letters, digits, `-`, `_` and `.`"
        ))),
    }
}

/// Arguments of `agent_send`.
#[derive(Debug, Deserialize, JsonSchema)]
struct SendArgs {
    /// What a spawn returned (`agent:<agent_id>:<instance>`).
    agent_key: Option<String>,
    /// Or a spawn's label.
    label: Option<String>,
    /// For the subagent.
    message: String,
    /// As agent_spawn's.
    timeout_seconds: Option<u64>,
}

struct AgentSend(Shared);

#[async_trait]
impl TypedTool for AgentSend {
    const NAME: &'static str = "agent_send";
    const DESCRIPTION: &'static str = "Continue a subagent instance's conversation.";
    const ANNOTATIONS: ToolAnnotations = WAITS;
    const GROUP: Option<&'static str> = Some("tasks");
    type Args = SendArgs;

    async fn call(&self, args: SendArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let (agent_id, instance) = match (&args.agent_key, &args.label) {
            (Some(key), _) => {
                let mut parts = key.splitn(3, ':');
                match (parts.next(), parts.next(), parts.next()) {
                    (Some("agent"), Some(agent_id), Some(instance)) => (agent_id.to_owned(), instance.to_owned()),
                    _ => {
                        return Err(ToolError::failed(format!(
                            "agent_key `{key}` is not of the form agent:<agent_id>:<instance> (use the agent_key a spawn returned)"
                        )));
                    }
                }
            }
            (None, Some(label)) => {
                // The slug a spawn made of the same label (the spawn's note named it).
                let label = &slugged_label(Some(label.clone()))?.0.unwrap_or_default();
                let file = store(ctx)?.load().await.map_err(failed)?;
                let agent_id = file
                    .tasks
                    .values()
                    .find(|record| record.label.as_deref() == Some(label.as_str()))
                    .map(|record| record.agent_id.clone())
                    .ok_or_else(|| {
                        ToolError::failed(format!("no subagent was spawned with label `{label}` in this session"))
                    })?;
                (agent_id, label.clone())
            }
            (None, None) => return Err(ToolError::failed("give `agent_key` or `label`")),
        };
        let input = serde_json::json!({
            "agent_key": args.agent_key,
            "label": args.label,
            "message": args.message,
            "timeout_seconds": args.timeout_seconds,
        });
        self.0
            .run(
                ctx,
                (Self::NAME, input),
                &agent_id,
                args.message,
                Some(&instance),
                args.timeout_seconds,
            )
            .await
    }

    fn timeout(&self) -> Option<Duration> {
        Some(TOOL_LIMIT)
    }
}

/// No arguments.
#[derive(Debug, Deserialize, JsonSchema)]
struct NoArgs {}

struct AgentList(Shared);

#[async_trait]
impl TypedTool for AgentList {
    const NAME: &'static str = "agent_list";
    const DESCRIPTION: &'static str = "List the subagents and this session's instances.";
    const ANNOTATIONS: ToolAnnotations = READS;
    type Args = NoArgs;
    const GROUP: Option<&'static str> = Some("tasks");

    async fn call(&self, _args: NoArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let mut text = String::from("Subagents:\n");
        for declaration in self.0.declarations.listed() {
            text.push_str(&format!(
                "- {} ({}): {}\n",
                declaration.id,
                if declaration.is_remote() {
                    "remote"
                } else {
                    mode_name(declaration.workspace_mode)
                },
                declaration.description
            ));
        }
        let file = store(ctx)?.load().await.map_err(failed)?;
        let mut instances: Vec<(&str, &TaskRecord)> = Vec::new();
        for record in file.tasks.values() {
            match instances
                .iter_mut()
                .find(|(session, _)| *session == record.child_session)
            {
                Some(entry) => entry.1 = record,
                None => instances.push((&record.child_session, record)),
            }
        }
        if instances.is_empty() {
            text.push_str("\nNo instances in this session yet.");
        } else {
            text.push_str("\nInstances in this session:\n");
            for (_, record) in instances {
                let instance = record.label.clone().unwrap_or_else(|| record.task_id.clone());
                text.push_str(&format!(
                    "- agent_key: agent:{}:{instance}  last task: {} ({})\n",
                    record.agent_id,
                    record.task_id,
                    record.status.as_str()
                ));
            }
        }
        Ok(ToolOutput::text(text))
    }
}

/// Arguments of `task_output`.
#[derive(Debug, Deserialize, JsonSchema)]
struct OutputArgs {
    /// The task.
    task_id: String,
    /// Wait for the task to finish (default true).
    block: Option<bool>,
    /// How long to wait, in milliseconds (default: the subagents' default wait, 30000 unless
    /// configured; max 600000).
    timeout: Option<u64>,
    /// Also show the task's recent events (what the subagent did), newest last.
    events: Option<bool>,
}

/// Events shown by `task_output` with `events: true`.
const EVENTS_SHOWN: usize = 20;

/// One line per event, compact.
fn event_line(event: &harness_core::AgentEvent) -> Option<String> {
    use harness_core::EventKind;
    let who = event
        .source
        .as_ref()
        .map_or_else(String::new, |source| format!("[{}] ", source.path));
    let what = match &event.kind {
        EventKind::AgentStart { .. } => "started".to_owned(),
        EventKind::ToolCallEnd { name, input, .. } => {
            let args: String = input.to_string().chars().take(120).collect();
            format!("tool call {name} {args}")
        }
        EventKind::ToolResult { name, is_error, .. } => {
            format!("tool result {name}{}", if *is_error { " (error)" } else { "" })
        }
        EventKind::StepEnd { step, .. } => format!("step {step} done"),
        EventKind::Error { message, .. } => format!("error: {message}"),
        EventKind::Final { message } => {
            let text: String = message.text().chars().take(120).collect();
            format!("answered: {text}")
        }
        EventKind::Warning { message, .. } => format!("warning: {message}"),
        _ => return None,
    };
    Some(format!("- {who}{what}"))
}

struct TaskOutput(Shared);

#[async_trait]
impl TypedTool for TaskOutput {
    const NAME: &'static str = "task_output";
    const DESCRIPTION: &'static str = "The status or result of a background task (waits for it unless block is false).";
    const ANNOTATIONS: ToolAnnotations = WAITS;
    const GROUP: Option<&'static str> = Some("tasks");
    type Args = OutputArgs;

    async fn call(&self, args: OutputArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let configured = self
            .0
            .runtime
            .config
            .default_wait
            .min(Duration::from_secs(MAX_TIMEOUT_SECONDS));
        let timeout = args
            .timeout
            .unwrap_or_else(|| u64::try_from(configured.as_millis()).unwrap_or(30_000));
        if timeout > MAX_TIMEOUT_SECONDS * 1000 {
            return Err(ToolError::failed(format!(
                "timeout = {timeout} ms is above the maximum of {} ms",
                MAX_TIMEOUT_SECONDS * 1000
            )));
        }
        if args.block.unwrap_or(true) {
            let _: Option<Option<Outcome>> = self
                .0
                .runtime
                .wait_live(&args.task_id, Duration::from_millis(timeout))
                .await;
        }
        let store = store(ctx)?;
        let record =
            self.0.record(&store, &args.task_id, true).await?.ok_or_else(|| {
                ToolError::failed(format!("no task `{}` in this session (see task_list)", args.task_id))
            })?;
        let mut text = describe(ctx, &record).await;
        if args.events.unwrap_or(false) {
            match self.0.runtime.event_log(&args.task_id) {
                Some(log) => {
                    let (events, _) = log.snapshot();
                    let lines: Vec<String> = events.iter().filter_map(event_line).collect();
                    let skip = lines.len().saturating_sub(EVENTS_SHOWN);
                    text.push_str(&format!("\nrecent events ({} shown):\n", lines.len() - skip));
                    text.push_str(&lines[skip..].join("\n"));
                }
                None => {
                    text.push_str("\nrecent events: not kept here (another process runs or ran the task; see progress)")
                }
            }
        }
        Ok(ToolOutput::text(text))
    }

    fn timeout(&self) -> Option<Duration> {
        Some(TOOL_LIMIT)
    }
}

/// Arguments of `task_list`.
#[derive(Debug, Deserialize, JsonSchema)]
struct ListArgs {
    /// running, completed, failed, timeout, cancelled, lost, awaiting_approval or all
    /// (default all).
    status_filter: Option<String>,
}

struct TaskList(Shared);

#[async_trait]
impl TypedTool for TaskList {
    const NAME: &'static str = "task_list";
    const DESCRIPTION: &'static str = "List this session's subagent tasks and their status.";
    const ANNOTATIONS: ToolAnnotations = READS;
    const GROUP: Option<&'static str> = Some("tasks");
    type Args = ListArgs;

    async fn call(&self, args: ListArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let filter = args.status_filter.unwrap_or_else(|| "all".to_owned());
        // A filter is any status the records can hold, read with the records' own decoder
        // (so a new status is a filter without a list to keep in step), or `all`.
        let wanted = match filter.as_str() {
            "all" => None,
            name => Some(
                serde_json::from_value::<TaskStatus>(serde_json::Value::String(name.to_owned())).map_err(|_| {
                    let known: Vec<&str> = std::iter::once("all")
                        .chain(TaskStatus::ALL.iter().map(|status| status.as_str()))
                        .collect();
                    ToolError::failed(format!("status_filter `{filter}` is not one of {}", known.join(", ")))
                })?,
            ),
        };
        let now = now_ms();
        let runtime = &self.0.runtime;
        let file = store(ctx)?
            .update(|file| {
                let mut changed = false;
                for record in file.tasks.values_mut() {
                    changed |= runtime.sweep_lost(record, now);
                }
                (changed, file.clone())
            })
            .await
            .map_err(failed)?;
        let lines: Vec<String> = file
            .tasks
            .values()
            .filter(|record| wanted.is_none_or(|status| record.status == status))
            .map(|record| {
                format!(
                    "- {} agent={} status={}{}",
                    record.task_id,
                    record.agent_id,
                    record.status.as_str(),
                    record
                        .label
                        .as_ref()
                        .map(|label| format!(" label={label}"))
                        .unwrap_or_default()
                )
            })
            .collect();
        Ok(ToolOutput::text(if lines.is_empty() {
            format!("No tasks ({filter}) in this session.")
        } else {
            lines.join("\n")
        }))
    }
}

/// Arguments of `task_cancel`.
#[derive(Debug, Deserialize, JsonSchema)]
struct CancelArgs {
    /// The task to stop.
    task_id: String,
}

struct TaskCancel(Shared);

#[async_trait]
impl TypedTool for TaskCancel {
    const NAME: &'static str = "task_cancel";
    const DESCRIPTION: &'static str = "Stop a running subagent task (no effect on a finished one).";
    const ANNOTATIONS: ToolAnnotations = WAITS;
    const GROUP: Option<&'static str> = Some("tasks");
    type Args = CancelArgs;

    async fn call(&self, args: CancelArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let store = store(ctx)?;
        let found = self
            .0
            .runtime
            .cancel_task(&store, &args.task_id, CANCEL_WAIT)
            .await
            .map_err(failed)?;
        if found.is_none() {
            return Err(ToolError::failed(format!(
                "no task `{}` in this session (see task_list)",
                args.task_id
            )));
        }
        let record =
            self.0.record(&store, &args.task_id, true).await?.ok_or_else(|| {
                ToolError::failed(format!("no task `{}` in this session (see task_list)", args.task_id))
            })?;
        Ok(ToolOutput::text(describe(ctx, &record).await))
    }

    fn timeout(&self) -> Option<Duration> {
        Some(TOOL_LIMIT)
    }
}

/// Arguments of `wait_async_results`.
#[derive(Debug, Deserialize, JsonSchema)]
struct WaitArgs {
    /// Comma-separated task ids to wait for.
    task_ids: Option<String>,
    /// Wait for every unfinished task of this session (as of now).
    wait_all: Option<bool>,
}

struct WaitAsyncResults(Shared);

#[async_trait]
impl TypedTool for WaitAsyncResults {
    const NAME: &'static str = "wait_async_results";
    const DESCRIPTION: &'static str =
        "Wait for background tasks to finish and return their results: task_ids (comma-separated) or wait_all.";
    const ANNOTATIONS: ToolAnnotations = WAITS;
    const GROUP: Option<&'static str> = Some("tasks");
    type Args = WaitArgs;

    async fn call(&self, args: WaitArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let store = store(ctx)?;
        let ids: Vec<String> = match (args.task_ids, args.wait_all.unwrap_or(false)) {
            (Some(ids), _) if !ids.trim().is_empty() => ids
                .split(',')
                .map(|id| id.trim().to_owned())
                .filter(|id| !id.is_empty())
                .collect(),
            (_, true) => {
                let file = store.load().await.map_err(failed)?;
                file.tasks
                    .values()
                    .filter(|record| !record.status.is_terminal() || !record.delivered)
                    .map(|record| record.task_id.clone())
                    .collect()
            }
            _ => {
                return Err(ToolError::failed(
                    "give `task_ids` (comma-separated) or `wait_all: true`",
                ));
            }
        };
        if ids.is_empty() {
            return Ok(ToolOutput::text("No unfinished tasks in this session."));
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(MAX_TIMEOUT_SECONDS);
        for id in &ids {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let _ = self.0.runtime.wait_live(id, left).await;
        }
        let mut parts = Vec::with_capacity(ids.len());
        for id in &ids {
            match self.0.record(&store, id, true).await? {
                Some(record) => parts.push(describe(ctx, &record).await),
                None => parts.push(format!("task_id: {id}\nstatus: unknown (no such task in this session)")),
            }
        }
        Ok(ToolOutput::text(parts.join("\n\n")))
    }

    fn timeout(&self) -> Option<Duration> {
        Some(TOOL_LIMIT)
    }
}

/// The isolated/shared choice, for `agent_list`.
fn mode_name(mode: WorkspaceMode) -> &'static str {
    match mode {
        WorkspaceMode::Isolated => "isolated",
        WorkspaceMode::Shared => "shared",
    }
}
