//! Shared fixtures: tools built from closures, a recording middleware, a logging model, a
//! transcript renderer and the `check(script, expect)` helper most tests go through.

use futures::future::BoxFuture;
use harness_core::{
    ActingNext, AgentError, AgentNext, AgentState, Block, ChatModel, ChatRequest, Hooks, Middleware, ModelCallInfo,
    ModelError, ModelNext, ModelStream, Msg, ReActAgent, ReActAgentBuilder, ReasoningNext, Role, RuntimeContext,
    SystemPrompt, Tool, ToolCall, ToolContext, ToolError, ToolOutput, ToolSpec, Turn, async_trait,
};
use harness_models::ScriptedModel;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// A shared, ordered log of what happened.
#[derive(Debug, Clone, Default)]
pub(crate) struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    pub(crate) fn push(&self, entry: impl Into<String>) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).push(entry.into());
    }

    pub(crate) fn entries(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

type ToolFn = dyn Fn(Value, ToolContext) -> BoxFuture<'static, Result<ToolOutput, ToolError>> + Send + Sync;

/// A tool whose behaviour is a closure.
pub(crate) struct FnTool {
    spec: ToolSpec,
    timeout: Option<Duration>,
    run: Box<ToolFn>,
}

/// A tool named `name` with the argument schema `schema` that runs `run`.
pub(crate) fn fn_tool<F, Fut>(name: &str, schema: Value, run: F) -> FnTool
where
    F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
{
    FnTool {
        spec: ToolSpec {
            name: name.to_owned(),
            description: format!("test tool {name}"),
            input_schema: schema,
            annotations: harness_core::ToolAnnotations::new(),
        },
        timeout: None,
        run: Box::new(move |input, ctx| Box::pin(run(input, ctx))),
    }
}

impl FnTool {
    /// The same tool with its own time limit.
    pub(crate) fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The same tool marked read-only (so concurrency-safe).
    pub(crate) fn read_only(mut self) -> Self {
        self.spec = self.spec.read_only();
        self
    }

    pub(crate) fn shared(self) -> Arc<dyn Tool> {
        Arc::new(self)
    }
}

#[async_trait]
impl Tool for FnTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        (self.run)(input, ctx.clone()).await
    }

    fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
}

/// `sleep {ms, label}`: sleeps `ms` (tokio time) and answers `slept <label>`.
pub(crate) fn sleep_tool() -> FnTool {
    fn_tool(
        "sleep",
        json!({
            "type": "object",
            "properties": {"ms": {"type": "integer", "minimum": 0}, "label": {"type": "string"}},
            "required": ["ms"],
        }),
        |input, _ctx| async move {
            let ms = input["ms"].as_u64().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(ToolOutput::text(format!(
                "slept {}",
                input["label"].as_str().unwrap_or("")
            )))
        },
    )
    .read_only()
}

/// `echo {text}`: answers `text`.
pub(crate) fn echo_tool() -> FnTool {
    fn_tool(
        "echo",
        json!({
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
            "additionalProperties": false,
        }),
        |input, _ctx| async move { Ok(ToolOutput::text(input["text"].as_str().unwrap_or_default())) },
    )
    .read_only()
}

/// A middleware that logs entering and leaving each hook it declares (and, to prove the
/// kernel honours [`Middleware::hooks`], also each hook it does not declare).
pub(crate) struct Recorder {
    pub(crate) name: &'static str,
    pub(crate) hooks: Hooks,
    pub(crate) log: Log,
}

impl Recorder {
    pub(crate) fn shared(name: &'static str, hooks: Hooks, log: &Log) -> Arc<dyn Middleware> {
        Arc::new(Self {
            name,
            hooks,
            log: log.clone(),
        })
    }

    fn note(&self, what: impl std::fmt::Display) {
        self.log.push(format!("{} {what}", self.name));
    }
}

#[async_trait]
impl Middleware for Recorder {
    fn name(&self) -> &'static str {
        self.name
    }

    fn hooks(&self) -> Hooks {
        self.hooks
    }

    async fn agent(&self, turn: &mut Turn, next: AgentNext<'_>) -> Result<(), AgentError> {
        self.note("agent>");
        let result = next.run(turn).await;
        self.note("agent<");
        result
    }

    async fn reasoning(&self, turn: &mut Turn, next: ReasoningNext<'_>) -> Result<(), AgentError> {
        self.note(format_args!("reasoning> {}", turn.step()));
        let result = next.run(turn).await;
        self.note(format_args!("reasoning< {}", turn.step()));
        result
    }

    async fn system_prompt(&self, prompt: &mut SystemPrompt, turn: &Turn) {
        self.note(format_args!("system_prompt {}", turn.step()));
        prompt.push_volatile(self.name, format!("from {}", self.name));
    }

    async fn model_call(
        &self,
        request: ChatRequest,
        info: ModelCallInfo<'_>,
        next: ModelNext<'_>,
    ) -> Result<ModelStream, ModelError> {
        self.note(format_args!("model_call> {}", info.turn.step()));
        let result = next.run(request, info).await;
        self.note(format_args!("model_call< {}", info.turn.step()));
        result
    }

    async fn acting(&self, call: ToolCall, ctx: &ToolContext, next: ActingNext<'_>) -> ToolOutput {
        let name = call.name.clone();
        self.note(format_args!("acting> {name}"));
        let output = next.run(call, ctx).await;
        self.note(format_args!("acting< {name}"));
        output
    }
}

/// A [`ChatModel`] that logs `model` into a [`Log`] and delegates to a [`ScriptedModel`], so
/// tests see where the provider call sits in the onion.
pub(crate) struct LoggedModel {
    pub(crate) inner: ScriptedModel,
    pub(crate) log: Log,
}

#[async_trait]
impl ChatModel for LoggedModel {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn stream(&self, request: ChatRequest) -> Result<ModelStream, ModelError> {
        self.log.push("model");
        self.inner.stream(request).await
    }
}

/// One line per message: `role: block | block`, without ids (pairing is checked apart).
pub(crate) fn render(messages: &[Arc<Msg>]) -> String {
    messages
        .iter()
        .map(|msg| render_msg(msg))
        .collect::<Vec<_>>()
        .join("\n")
}

fn render_msg(msg: &Msg) -> String {
    let role = match msg.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    let blocks: Vec<String> = msg.content.iter().map(render_block).collect();
    format!("{role}: {}", blocks.join(" | "))
}

fn render_block(block: &Block) -> String {
    match block {
        Block::Text { text } => text.clone(),
        Block::Thinking { thinking, .. } => format!("(thinking) {thinking}"),
        Block::ToolUse { name, input, .. } => format!("call {name} {input}"),
        Block::ToolResult { content, is_error, .. } => {
            let text: Vec<String> = content.iter().map(render_block).collect();
            let kind = if *is_error { "error" } else { "ok" };
            format!("{kind}: {}", text.join(" "))
        }
        other => format!("{other:?}"),
    }
}

/// `expect` with each line trimmed and blank lines dropped, so expectations can be indented.
pub(crate) fn lines(expect: &str) -> String {
    expect
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Panics unless every tool call is answered by exactly one later result and every result
/// answers an earlier call.
pub(crate) fn assert_paired(messages: &[Arc<Msg>]) {
    let mut open: Vec<String> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    for msg in messages {
        for call in msg.tool_calls() {
            assert!(seen.insert(call.id.to_owned()), "duplicate call id {}", call.id);
            open.push(call.id.to_owned());
        }
        for id in msg.tool_result_ids() {
            let at = open.iter().position(|open| open == id);
            assert!(
                at.is_some(),
                "result {id} answers no open call in:\n{}",
                render(messages)
            );
            if let Some(at) = at {
                open.remove(at);
            }
        }
    }
    assert!(
        open.is_empty(),
        "calls {open:?} have no result in:\n{}",
        render(messages)
    );
}

/// The saved messages of `ctx`'s session.
pub(crate) async fn saved(agent: &ReActAgent, ctx: &RuntimeContext) -> AgentState {
    let key = agent.key_for(ctx);
    match agent.state_store().load(&key).await {
        Ok(Some((state, _version))) => state,
        Ok(None) => panic!("session {} was never saved", key.display()),
        Err(err) => panic!("{err}"),
    }
}

/// The outcome of [`check`].
pub(crate) struct Checked {
    pub(crate) agent: ReActAgent,
    pub(crate) model: ScriptedModel,
    pub(crate) ctx: RuntimeContext,
    pub(crate) result: Result<Msg, AgentError>,
}

impl Checked {
    /// The final reply; panics with the error chain if the call failed.
    pub(crate) fn reply(&self) -> &Msg {
        match &self.result {
            Ok(msg) => msg,
            Err(err) => panic!("call failed: {}", harness_core::error_chain(err)),
        }
    }
}

/// Builds `agent` with `model`, runs one call with `input`, and compares the saved session
/// (rendered by [`render`]) with `expect`. Also checks that every tool call has its result
/// and that the model saw no pairing violation.
pub(crate) async fn check(agent: ReActAgentBuilder, model: ScriptedModel, input: &str, expect: &str) -> Checked {
    let agent = agent
        .model(model.clone())
        .build()
        .unwrap_or_else(|err| panic!("build: {err}"));
    let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("tester"))
        .with_session(harness_core::SessionId::from_static("check"));
    let result = agent.call(input, ctx.clone()).await;
    let state = saved(&agent, &ctx).await;
    assert_eq!(render(&state.messages), lines(expect), "saved session differs");
    assert_paired(&state.messages);
    assert_eq!(model.violations(), Vec::<String>::new());
    Checked {
        agent,
        model,
        ctx,
        result,
    }
}

/// The tool results (text, is_error) at the end of `request`, in order.
pub(crate) fn trailing_results(request: &ChatRequest) -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    for msg in request.messages.iter().rev() {
        if msg.role != Role::Tool {
            break;
        }
        for block in &msg.content {
            if let Block::ToolResult {
                tool_use_id,
                content,
                is_error,
            } = block
            {
                let text: Vec<&str> = content.iter().filter_map(Block::as_text).collect();
                out.push((tool_use_id.clone(), text.join("\n"), *is_error));
            }
        }
    }
    out.reverse();
    out
}
