//! Plan mode: a read-only "think first" phase. The model enters it with `plan_enter`, writes
//! its plan with `plan_write` (to `plans/PLAN.md` in the caller's layer) and asks to leave
//! it with `plan_exit`, which needs a person's approval: the permission policy's built-in
//! check makes every `plan_exit` call ask, in every mode (`dont_ask` therefore denies it).
//!
//! While plan mode is active, the [`PlanGate`] (an acting layer at [`Layer::Plan`], outside
//! the permission check) lets through only read-only tools (by their annotations), the plan
//! tools, `todo_write`, the subagent tools (`agent_*`, `task_*`, `wait_async_results`: the
//! children they start plan too) and, with `allow_shell = true`, the shell. Every other call
//! gets an error result saying plan mode is active and what is allowed, and does not run.
//! What passes runs with the call's read-only shell when it has one
//! ([`harness_fs::CallReadOnlyShell`]: a sandbox's, whose work tree is read-only at the
//! Landlock level), so a command the filter cannot judge (`sh -c 'echo x > f'`) cannot write,
//! and with its work tree (a sandbox's [`harness_fs::CallWorkTree`]) behind a
//! [`harness_fs::ReadOnlyFs`], so a file tool that slips past the filter cannot write either.
//! A banner in the volatile tail of the system prompt says the same (nothing when inactive).
//!
//! The state is per session (the [`PlanState`] session slot), so it survives restarts.
//! Children spawned while the parent plans inherit plan mode through a typed value on the
//! call context ([`harness_policy::Inheritance`], sent along to remote children); they cannot
//! leave it themselves.
//!
//! ```toml
//! [plan]
//! enabled = true       # plan_enter / plan_write / plan_exit (off by default)
//! allow_shell = false  # `execute` while planning (meant for read-only commands)
//! task_list = true     # todo_write (always on while plan mode is enabled)
//! ```

use crate::capability::{Assembly, Capability, CapabilityError, ConfigSection, Layer, Registration, Setup, SlotKey};
use harness_core::{
    ActingNext, Hooks, JsonSchema, Middleware, SessionSlot, SystemPrompt, Tool, ToolAnnotations, ToolCall, ToolContext,
    ToolError, ToolOutput, Turn, TypedTool, async_trait, typed,
};
use harness_fs::{CallWorkspace, WriteMode, WsPath};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Why a sandboxed call's work tree refuses writes while planning (the file tools' result).
const PLAN_READ_ONLY: &str = "plan mode is active, so the work tree cannot change; write the plan with plan_write and ask to leave plan mode with plan_exit";
/// The plan file, relative to the caller's layer.
pub const PLAN_FILE: &str = "plans/PLAN.md";
/// Largest plan `plan_write` accepts, in characters.
pub const MAX_PLAN_CHARS: usize = 100_000;

/// `plan_enter`'s name.
pub(crate) const PLAN_ENTER: &str = "plan_enter";
/// `plan_write`'s name.
pub(crate) const PLAN_WRITE: &str = "plan_write";
/// `plan_exit`'s name: the permission policy makes every call of it ask.
pub(crate) const PLAN_EXIT: &str = harness_policy::PLAN_EXIT_TOOL;

/// `[plan]` in harness.toml.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanSection {
    /// Offers `plan_enter`, `plan_write` and `plan_exit` (and `todo_write`).
    #[serde(default)]
    pub enabled: bool,
    /// Lets the shell (`execute`) run while plan mode is active.
    #[serde(default)]
    pub allow_shell: bool,
    /// Offers `todo_write` and shows the task list before each step (always on while plan
    /// mode is enabled).
    #[serde(default)]
    pub task_list: bool,
}

impl ConfigSection for PlanSection {
    const KEY: &'static str = "plan";
}

/// The session's plan mode (session slot `plan_mode`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanState {
    /// Plan mode is on for this session.
    #[serde(default)]
    pub active: bool,
    /// Where `plan_write` last wrote the plan (in the caller's layer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_file: Option<String>,
}

impl SessionSlot for PlanState {
    const KEY: &'static str = "plan_mode";
}

impl PlanState {
    /// The plan mode saved in a session's state (inactive when there is none or it cannot
    /// be read).
    pub fn from_state(state: &harness_core::AgentState) -> Self {
        harness_core::SessionState::from_extensions(&state.extensions)
            .get::<Self>()
            .unwrap_or_default()
    }
}

/// Whether the caller plans because its parent does (local or remote: the typed
/// [`Inheritance`](harness_policy::Inheritance) on the call context says so).
fn inherited(ctx: &harness_core::RuntimeContext) -> bool {
    ctx.get::<harness_policy::Inheritance>()
        .is_some_and(|inherited| inherited.plan)
}

/// Whether plan mode is active for this call: the session's own state, or the parent's.
fn active(ctx: &harness_core::RuntimeContext, session: &harness_core::SessionState) -> bool {
    if inherited(ctx) {
        return true;
    }
    match session.get::<PlanState>() {
        Ok(state) => state.active,
        Err(err) => {
            // A slot that cannot be read would also refuse `plan_exit`'s write: treat the
            // session as not planning rather than lock it.
            tracing::warn!(error = %err, "plan mode state could not be read; treated as inactive");
            false
        }
    }
}

/// Marks the plan tools: they stay in the agent's own area and change only its plan.
const PLAN_TOOL: ToolAnnotations = ToolAnnotations::new()
    .destructive(false)
    .idempotent()
    .closed_world()
    .concurrency_safe(false)
    .agent_local();

/// Arguments of `plan_enter` (none).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanEnterArgs {}

/// `plan_enter`: turns plan mode on for the session.
#[derive(Debug, Default, Clone, Copy)]
pub struct PlanEnter {
    allow_shell: bool,
}

#[async_trait]
impl TypedTool for PlanEnter {
    const NAME: &'static str = PLAN_ENTER;
    const DESCRIPTION: &'static str = "Enter plan mode: investigate with read-only tools, write your plan with plan_write, then call plan_exit to ask a person to approve it. Until it is approved, tools that change things do not run. Use it before large or risky changes.";
    type Args = PlanEnterArgs;
    const ANNOTATIONS: ToolAnnotations = PLAN_TOOL;

    async fn call(&self, _args: PlanEnterArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let was_active = active(&ctx.runtime, &ctx.session);
        ctx.session
            .update::<PlanState, _>(|state| state.active = true)
            .map_err(|err| ToolError::failed(format!("plan mode could not be saved: {err}")))?;
        let first = if was_active {
            "Plan mode was already active."
        } else {
            "Plan mode is now active."
        };
        Ok(ToolOutput::text(format!("{first} {}", allowed_text(self.allow_shell))))
    }
}

/// Arguments of `plan_write`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanWriteArgs {
    /// The whole plan, in Markdown (it replaces the previous plan).
    pub content: String,
}

/// `plan_write`: writes the plan to `plans/PLAN.md` in the caller's layer.
#[derive(Debug, Default, Clone, Copy)]
pub struct PlanWrite;

#[async_trait]
impl TypedTool for PlanWrite {
    const NAME: &'static str = PLAN_WRITE;
    const DESCRIPTION: &'static str = "Write your plan (Markdown; replaces the previous plan) to plans/PLAN.md. It is what a person reviews when you call plan_exit.";
    type Args = PlanWriteArgs;
    const ANNOTATIONS: ToolAnnotations = PLAN_TOOL;

    async fn call(&self, args: PlanWriteArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        if args.content.trim().is_empty() {
            return Err(ToolError::failed("`content` is empty: write the plan itself"));
        }
        let chars = args.content.chars().count();
        if chars > MAX_PLAN_CHARS {
            return Err(ToolError::failed(format!(
                "the plan has {chars} characters; at most {MAX_PLAN_CHARS} are allowed: shorten it"
            )));
        }
        let workspace = ctx
            .runtime
            .get::<CallWorkspace>()
            .ok_or_else(|| ToolError::failed("no workspace is bound to this call; the plan cannot be written"))?;
        let path = WsPath::parse(PLAN_FILE).map_err(|err| crate::filesystem::tool_error(&err))?;
        workspace
            .layered
            .write(&path, args.content.as_bytes(), WriteMode::Overwrite)
            .await
            .map_err(|err| crate::filesystem::tool_error(&err))?;
        ctx.session
            .update::<PlanState, _>(|state| state.plan_file = Some(PLAN_FILE.to_owned()))
            .map_err(|err| ToolError::failed(format!("plan mode could not be saved: {err}")))?;
        Ok(ToolOutput::text(format!(
            "Plan written to {PLAN_FILE} ({} bytes). Call plan_exit with a rationale when it is ready for approval.",
            args.content.len()
        )))
    }
}

/// Arguments of `plan_exit`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanExitArgs {
    /// Why the plan is ready, for the person who approves it.
    #[serde(default)]
    pub rationale: Option<String>,
}

/// `plan_exit`: leaves plan mode. It runs only once a person approved the call (the
/// permission policy asks for every `plan_exit`).
#[derive(Debug, Default, Clone, Copy)]
pub struct PlanExit;

#[async_trait]
impl TypedTool for PlanExit {
    const NAME: &'static str = PLAN_EXIT;
    const DESCRIPTION: &'static str = "Ask a person to approve your plan (write it with plan_write first) and leave plan mode. Give a short rationale. Once approved, every tool is available again.";
    type Args = PlanExitArgs;
    const ANNOTATIONS: ToolAnnotations = PLAN_TOOL;

    async fn call(&self, _args: PlanExitArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        if inherited(&ctx.runtime) {
            return Err(ToolError::failed(INHERITED_EXIT));
        }
        let was_active = ctx
            .session
            .update::<PlanState, _>(|state| std::mem::replace(&mut state.active, false))
            .map_err(|err| ToolError::failed(format!("plan mode could not be saved: {err}")))?;
        if !was_active {
            return Err(ToolError::failed("plan mode is not active; there is nothing to leave"));
        }
        Ok(ToolOutput::text(
            "The plan was approved and plan mode is off: every tool is available again. Carry out the plan.",
        ))
    }
}

/// Why a child in its parent's plan mode cannot leave it.
const INHERITED_EXIT: &str = "you are in plan mode because the agent that started you is planning; it ends when that agent's plan is approved. Report your findings instead.";

/// What runs while planning, for the banner and the refusals.
fn allowed_text(allow_shell: bool) -> String {
    let shell = if allow_shell {
        ", and the shell (`execute`) for read-only commands only (cat, ls, grep, git log/diff/show/status)"
    } else {
        ""
    };
    format!(
        "While plan mode is active only read-only tools, plan_enter, plan_write, plan_exit, todo_write and the subagent tools (agent_*, task_*, wait_async_results){shell} run; every other call is refused. Write the plan with plan_write, then call plan_exit to ask a person to approve it."
    )
}

/// The plan mode entry of the capability registry (it owns `[plan]`).
pub(crate) const REGISTRATION: Registration = Registration::new("plan_mode", build).with_section::<PlanSection>();

/// The `[plan]` this agent uses (absent = everything off).
pub(crate) fn section(setup: &Setup<'_>) -> Result<PlanSection, CapabilityError> {
    Ok(setup.section::<PlanSection>()?.unwrap_or_default())
}

fn build(setup: &mut Setup<'_>) -> Result<Option<Arc<dyn Capability>>, CapabilityError> {
    let section = section(setup)?;
    if section.task_list {
        setup.provide(crate::facts::TaskListRequested);
    }
    if !section.enabled {
        return Ok(None);
    }
    setup.provide(crate::facts::PlanModeEnabled);
    Ok(Some(Arc::new(PlanMode {
        allow_shell: section.allow_shell,
    })))
}

/// The capability: the three tools, the gate and the banner.
struct PlanMode {
    allow_shell: bool,
}

/// Plan mode lives in one session slot.
const SLOTS: &[SlotKey] = &[SlotKey::of::<PlanState>()];

impl Capability for PlanMode {
    fn name(&self) -> &'static str {
        "plan_mode"
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![
            typed(PlanEnter {
                allow_shell: self.allow_shell,
            }),
            typed(PlanWrite),
            typed(PlanExit),
        ]
    }

    fn middleware(&self, _assembly: &Assembly) -> Vec<(Layer, Arc<dyn Middleware>)> {
        vec![(
            Layer::Plan,
            Arc::new(PlanGate {
                allow_shell: self.allow_shell,
            }) as Arc<dyn Middleware>,
        )]
    }

    fn session_slots(&self) -> &'static [SlotKey] {
        SLOTS
    }
}

/// Refuses what may not run while planning, passes plan mode on to children, and shows the
/// banner.
struct PlanGate {
    allow_shell: bool,
}

impl PlanGate {
    /// Whether `tool` (with `hints`) may run while planning.
    fn allows(&self, tool: &str, hints: ToolAnnotations) -> bool {
        // Agent-local tools (the plan tools, `todo_write`, the subagent tools, whose children
        // plan too) change only the agent's own session.
        hints.is_read_only() || hints.is_agent_local() || (self.allow_shell && tool == harness_policy::SHELL_TOOL)
    }
}

#[async_trait]
impl Middleware for PlanGate {
    fn name(&self) -> &'static str {
        "plan_mode"
    }

    fn hooks(&self) -> Hooks {
        Hooks::ACTING | Hooks::SYSTEM_PROMPT
    }

    async fn acting(&self, call: ToolCall, ctx: &ToolContext, next: ActingNext<'_>) -> ToolOutput {
        if !active(&ctx.runtime, &ctx.session) {
            return next.run(call, ctx).await;
        }
        let hints = match next.check(&call) {
            Ok(hints) => hints,
            Err(err) => return ToolOutput::error(err.to_string()),
        };
        if !self.allows(&call.name, hints) {
            tracing::info!(tool = %call.name, "refused: plan mode is active");
            return ToolOutput::error(format!(
                "Plan mode is active, so `{}` was not run. {}",
                call.name,
                allowed_text(self.allow_shell)
            ));
        }
        // Below the filter: a call with a read-only shell (a sandbox's, the work tree read-only
        // at the kernel level) runs with it, so a command the filter cannot judge cannot write.
        let mut confined = ctx.clone();
        harness_fs::CallReadOnlyShell::apply(&mut confined.runtime);
        // The same for the file tools: a sandboxed call's work tree is read-only in the
        // filesystem layer, so a writing tool that slipped past the filter (misannotated, or
        // called by a user middleware) is refused there and the work tree stays unchanged.
        harness_fs::CallWorkTree::read_only(&mut confined.runtime, PLAN_READ_ONLY);
        let ctx = &confined;
        if call.name == PLAN_EXIT && inherited(&ctx.runtime) {
            // Refused before the permissions layer would ask a person for it: only the
            // parent's own plan can be approved.
            return ToolOutput::error(INHERITED_EXIT);
        }
        if hints.is_agent_local()
            && !harness_policy::PLAN_TOOLS.contains(&call.name.as_str())
            && !inherited(&ctx.runtime)
        {
            // The children an agent-local call (a subagent tool) starts or continues plan too.
            let mut planning = ctx.clone();
            let mut inherited = ctx
                .runtime
                .get::<harness_policy::Inheritance>()
                .cloned()
                .unwrap_or_default();
            inherited.plan = true;
            planning.runtime.insert(inherited);
            return next.run(call, &planning).await;
        }
        next.run(call, ctx).await
    }

    async fn system_prompt(&self, prompt: &mut SystemPrompt, turn: &Turn) {
        if active(turn.ctx(), turn.session()) {
            let why = if inherited(turn.ctx()) {
                "The agent that started you is planning, so you are in plan mode too: research and report; do not change anything."
            } else {
                "You are planning: research, then write the plan."
            };
            prompt.push_volatile(
                "plan_mode",
                format!("## Plan mode\n{why} {}", allowed_text(self.allow_shell)),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::PlanGate;
    use harness_core::ToolAnnotations;

    const READ: ToolAnnotations = ToolAnnotations::new().read_only();
    const WRITE: ToolAnnotations = ToolAnnotations::new().destructive(true).closed_world();
    const UNHINTED: ToolAnnotations = ToolAnnotations::new();
    const LOCAL: ToolAnnotations = ToolAnnotations::new().destructive(false).agent_local();

    /// Annotations, not names, decide: read-only tools and agent-local ones (the plan,
    /// task-list and subagent tools mark themselves so in code; a tool server cannot claim
    /// it) run, the shell only with `allow_shell`. A tool that merely has a plan or subagent
    /// tool's name does not.
    #[test]
    fn what_runs_while_planning() {
        let strict = PlanGate { allow_shell: false };
        let shell = PlanGate { allow_shell: true };
        #[rustfmt::skip]
        let table: &[(&str, ToolAnnotations, bool, bool)] = &[
            // tool, hints, allowed (strict), allowed (allow_shell)
            ("read_file", READ, true, true),
            ("mcp__web__fetch", READ, true, true),
            ("read_file", UNHINTED, false, false),
            ("mcp__db__query", UNHINTED, false, false),
            ("write_file", WRITE, false, false),
            ("edit_file", WRITE, false, false),
            ("execute", UNHINTED, false, true),
            ("plan_write", LOCAL, true, true),
            ("todo_write", LOCAL, true, true),
            ("agent_spawn", LOCAL, true, true),
            ("plan_write", WRITE, false, false),
            ("agent_spawn", UNHINTED, false, false),
            ("task_delete", UNHINTED, false, false),
        ];
        for (tool, hints, strict_allows, shell_allows) in table {
            assert_eq!(strict.allows(tool, *hints), *strict_allows, "{tool} without the shell");
            assert_eq!(shell.allows(tool, *hints), *shell_allows, "{tool} with allow_shell");
        }
    }
}
