//! [`ReActAgent`]: the reason → act loop, its [`Turn`] and its errors.

use crate::context::RuntimeContext;
use crate::error_kind::ErrorKind;
use crate::event::{AgentEvent, EventKind, EventSink};
use crate::id::{AgentId, IdError, SessionId, UserId};
use crate::lease::FencingToken;
use crate::message::{Msg, Role, Usage};
use crate::middleware::{AgentNext, Chain, Middleware, ReasoningNext};
use crate::model::{BoxError, ChatModel, ModelError, ToolSpec};
use crate::session_state::SessionState;
use crate::state::{InMemoryStateStore, StateError, StateKey, StateStore, repair_tool_pairs_except};
use crate::tool::{Tool, Toolkit, ToolkitError};
use crate::turn::Turn;
use futures::Stream;
use std::collections::BTreeMap;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;
use tracing::Instrument;

/// Default maximum number of reasoning-acting steps per call.
pub const DEFAULT_MAX_ITERS: u32 = 10;
/// Default time limit of one tool call.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(120);
/// The user id used when a call names none.
pub const DEFAULT_USER: &str = "default";
/// The session id used when a call names none.
pub const DEFAULT_SESSION: &str = "default";
/// [`DEFAULT_USER`] as an id.
pub const DEFAULT_USER_ID: UserId = UserId::from_static(DEFAULT_USER);
/// [`DEFAULT_SESSION`] as an id.
pub const DEFAULT_SESSION_ID: SessionId = SessionId::from_static(DEFAULT_SESSION);
/// Capacity of a streaming call's event channel.
const EVENT_CAPACITY: usize = 256;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The model failed (after the provider client's own retries).
    #[error("model call failed")]
    Model(#[from] ModelError),
    /// Loading or saving the session failed.
    #[error("session state")]
    State(#[from] StateError),
    /// The call's cancellation token fired. The session was saved with every finished step.
    #[error("call cancelled")]
    Cancelled,
    /// The call named an unusable user or session id.
    #[error("invalid call identity")]
    Identity(#[from] IdError),
    /// A capability failed in a way that stops the call.
    #[error("{capability} failed")]
    Capability {
        /// The middleware or capability name.
        capability: &'static str,
        /// What failed.
        #[source]
        source: BoxError,
    },
    /// The call's approval decisions cannot be applied (nothing pending, an unknown call
    /// id). Nothing was run.
    #[error("approval")]
    Approval(#[from] crate::ApprovalError),
    /// The caller asked for something that cannot be (a reserved user or session name, an
    /// unknown agent): the caller's mistake, a 400/404 over HTTP and exit 2 on the CLI.
    /// Nothing ran.
    #[error("{what}")]
    Refused {
        /// What was refused and how to fix it.
        what: String,
    },
    /// Another call or replica holds what this one needs (a lost session lease, a busy
    /// session): retrying later may succeed (409, or 429 with `Retry-After`).
    #[error("{what}")]
    Busy {
        /// What is busy.
        what: String,
        /// When retrying makes sense, if known.
        retry_after: Option<std::time::Duration>,
    },
    /// The provider's content filter stopped the model's reply (OpenAI `content_filter`,
    /// Anthropic `refusal`). The reply is not returned and not kept in the session.
    #[error("the reply of model `{model}` was stopped by the provider's content filter")]
    ContentFiltered {
        /// The model's name.
        model: String,
    },
}

impl AgentError {
    /// The class of this failure, for front-ends and servers that map it to a status.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Model(err) => err.kind(),
            Self::State(StateError::Conflict { .. }) => ErrorKind::Conflict,
            Self::State(_) | Self::Capability { .. } => ErrorKind::Internal,
            Self::Cancelled => ErrorKind::Cancelled,
            Self::Identity(_) | Self::Approval(_) | Self::Refused { .. } => ErrorKind::Configuration,
            Self::Busy { .. } => ErrorKind::Conflict,
            Self::ContentFiltered { .. } => ErrorKind::ContentFilter,
        }
    }
}

/// Why an agent could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// No model was set.
    #[error("no model set; call `.model(...)` on the builder")]
    MissingModel,
    /// The tools do not form a valid toolkit.
    #[error(transparent)]
    Toolkit(#[from] ToolkitError),
    /// The agent name is not a valid id.
    #[error("agent name")]
    Name(#[from] IdError),
}

/// What a call is given: one or more new messages.
#[derive(Debug, Clone)]
pub struct AgentInput(pub Vec<Msg>);

impl From<&str> for AgentInput {
    fn from(text: &str) -> Self {
        Self(vec![Msg::user(text)])
    }
}
impl From<String> for AgentInput {
    fn from(text: String) -> Self {
        Self(vec![Msg::user(text)])
    }
}
impl From<Msg> for AgentInput {
    fn from(msg: Msg) -> Self {
        Self(vec![msg])
    }
}
impl From<Vec<Msg>> for AgentInput {
    fn from(msgs: Vec<Msg>) -> Self {
        Self(msgs)
    }
}

/// Options of the loop.
#[derive(Debug, Clone)]
pub(crate) struct LoopConfig {
    pub(crate) name: AgentId,
    pub(crate) sys_prompt: String,
    pub(crate) max_iters: NonZeroU32,
    pub(crate) tool_timeout: Duration,
    pub(crate) max_tokens: Option<u32>,
    pub(crate) temperature: Option<f32>,
    pub(crate) extra: BTreeMap<String, serde_json::Value>,
}

/// The immutable parts of an agent that the onion's innermost layers use.
pub(crate) struct Kernel {
    pub(crate) model: Arc<dyn ChatModel>,
    pub(crate) toolkit: Toolkit,
    pub(crate) chain: Chain,
    pub(crate) config: LoopConfig,
    pub(crate) store: Arc<dyn StateStore>,
}

/// Assembles a [`ReActAgent`]; nothing is checked until [`build`](Self::build).
#[derive(Default)]
#[must_use = "a builder does nothing until `.build()`"]
pub struct ReActAgentBuilder {
    name: Option<String>,
    model: Option<Arc<dyn ChatModel>>,
    tools: Vec<Arc<dyn Tool>>,
    middleware: Vec<Arc<dyn Middleware>>,
    sys_prompt: String,
    max_iters: Option<NonZeroU32>,
    tool_timeout: Option<Duration>,
    max_tokens: Option<u32>,
    temperature: Option<f32>,
    extra: BTreeMap<String, serde_json::Value>,
    store: Option<Arc<dyn StateStore>>,
}

impl ReActAgentBuilder {
    /// The agent's name (default `agent`); a path segment, so letters, digits and `-_.@:`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The model.
    pub fn model(mut self, model: impl ChatModel) -> Self {
        self.model = Some(Arc::new(model));
        self
    }

    /// The model, already shared.
    pub fn shared_model(mut self, model: Arc<dyn ChatModel>) -> Self {
        self.model = Some(model);
        self
    }

    /// Adds a tool.
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Adds tools.
    pub fn tools(mut self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        self.tools.extend(tools);
        self
    }

    /// Adds a middleware inside the ones added before (the first added is outermost).
    pub fn middleware(mut self, middleware: Arc<dyn Middleware>) -> Self {
        self.middleware.push(middleware);
        self
    }

    /// The base system prompt.
    pub fn sys_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.sys_prompt = prompt.into();
        self
    }

    /// Maximum reasoning-acting steps per call (default 10). When reached, one last model
    /// call without tools asks for the final answer.
    pub fn max_iters(mut self, max: NonZeroU32) -> Self {
        self.max_iters = Some(max);
        self
    }

    /// Default time limit of a tool call (default 120 s).
    pub fn tool_timeout(mut self, timeout: Duration) -> Self {
        self.tool_timeout = Some(timeout);
        self
    }

    /// Output token cap per model call.
    pub fn max_tokens(mut self, max: u32) -> Self {
        self.max_tokens = Some(max);
        self
    }

    /// Sampling temperature.
    pub fn temperature(mut self, temperature: f32) -> Self {
        self.temperature = Some(temperature);
        self
    }

    /// A provider-specific request option passed through verbatim.
    pub fn request_option(mut self, key: impl Into<String>, value: serde_json::Value) -> Self {
        self.extra.insert(key.into(), value);
        self
    }

    /// Where sessions are kept (default: in memory).
    pub fn state_store(mut self, store: Arc<dyn StateStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Validates and builds.
    ///
    /// # Errors
    /// [`BuildError`] if no model is set, two tools share a name, a schema does not compile
    /// or the name is not a valid id.
    pub fn build(self) -> Result<ReActAgent, BuildError> {
        let model = self.model.ok_or(BuildError::MissingModel)?;
        let name = AgentId::parse(self.name.unwrap_or_else(|| "agent".to_owned()))?;
        let toolkit = Toolkit::new(self.tools)?;
        let config = LoopConfig {
            name,
            sys_prompt: self.sys_prompt,
            max_iters: self
                .max_iters
                .unwrap_or(NonZeroU32::MIN.saturating_add(DEFAULT_MAX_ITERS - 1)),
            tool_timeout: self.tool_timeout.unwrap_or(DEFAULT_TOOL_TIMEOUT),
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            extra: self.extra,
        };
        let kernel = Kernel {
            model,
            toolkit,
            chain: Chain::new(self.middleware),
            config,
            store: self.store.unwrap_or_else(|| Arc::new(InMemoryStateStore::default())),
        };
        Ok(ReActAgent {
            kernel: Arc::new(kernel),
        })
    }
}

/// A ReAct agent: reason → act → observe until the model answers without tool calls.
///
/// Immutable and cheap to clone; one agent serves any number of sessions at once. Each call
/// loads the session's [`AgentState`] from the [`StateStore`], runs the middleware onion
/// around the loop and saves the state at the end — also when the call fails or is
/// cancelled, so finished steps are never lost.
///
/// ```
/// # tokio_test_block_on(async {
/// use harness_core::{ReActAgent, RuntimeContext};
/// use harness_models::ScriptedModel;
/// let agent = ReActAgent::builder().model(ScriptedModel::new().reply_text("hello")).build()?;
/// let reply = agent.call("hi", RuntimeContext::for_user(harness_core::UserId::from_static("u1"))).await?;
/// assert_eq!(reply.text(), "hello");
/// # Ok::<_, Box<dyn std::error::Error>>(()) }).unwrap();
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
/// # }
/// ```
#[derive(Clone)]
pub struct ReActAgent {
    kernel: Arc<Kernel>,
}

const _: fn() = || {
    fn shared<T: Send + Sync + 'static>() {}
    shared::<ReActAgent>();
};

impl std::fmt::Debug for ReActAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReActAgent")
            .field("name", &self.kernel.config.name)
            .field("model", &self.kernel.model.name())
            .field("tools", &self.kernel.toolkit)
            .field("middleware", &self.kernel.chain.names)
            .finish()
    }
}

impl ReActAgent {
    /// A new builder.
    pub fn builder() -> ReActAgentBuilder {
        ReActAgentBuilder::default()
    }

    /// The agent's name.
    pub fn name(&self) -> &AgentId {
        &self.kernel.config.name
    }

    /// Whether the agent's model takes images ([`ChatModel::accepts_images`]).
    pub fn accepts_images(&self) -> bool {
        self.kernel.model.accepts_images()
    }

    /// The tools offered to the model.
    pub fn tool_specs(&self) -> Arc<[ToolSpec]> {
        self.kernel.toolkit.specs()
    }

    /// The on-demand group of the tool called `name` ([`Tool::group`](crate::Tool::group)).
    pub fn tool_group(&self, name: &str) -> Option<&str> {
        self.kernel.toolkit.group(name)
    }

    /// How many tool-argument schema checks this agent ran (see
    /// [`Toolkit::argument_checks`](crate::Toolkit::argument_checks)).
    pub fn argument_checks(&self) -> u64 {
        self.kernel.toolkit.argument_checks()
    }

    /// The state store.
    pub fn state_store(&self) -> &Arc<dyn StateStore> {
        &self.kernel.store
    }

    /// The session key a context resolves to (documented defaults for missing ids). Ids are
    /// checked when they are made, so every key is made of safe path segments.
    pub fn key_for(&self, ctx: &RuntimeContext) -> StateKey {
        // A harness that partitions state by something other than the user (an isolation
        // scope) puts the call's key into the context when it binds the call.
        if let Some(key) = ctx.get::<StateKey>() {
            return key.clone();
        }
        StateKey {
            agent_id: self.kernel.config.name.clone(),
            user_id: ctx.user_id.clone().unwrap_or(DEFAULT_USER_ID),
            session_id: ctx.session_id.clone().unwrap_or(DEFAULT_SESSION_ID),
        }
    }

    /// Runs one call to completion and returns the final assistant message.
    ///
    /// # Errors
    /// [`AgentError`] when the model fails, the state cannot be loaded or saved, or the call
    /// is cancelled. The state is saved in every case it was loaded.
    ///
    /// # Cancellation
    /// Cancelling `ctx`'s token stops the loop at the next chunk or tool boundary; every tool
    /// call in the context keeps a result (a cancelled one gets an error result).
    pub async fn call(&self, input: impl Into<AgentInput>, ctx: RuntimeContext) -> Result<Msg, AgentError> {
        self.run(input.into(), ctx, EventSink::disabled()).await
    }

    /// Runs one call, yielding its events. The last event is [`EventKind::Final`] or
    /// [`EventKind::Error`]. Dropping the stream stops the call.
    pub fn stream(&self, input: impl Into<AgentInput>, ctx: RuntimeContext) -> AgentStream {
        let (tx, rx) = mpsc::channel(EVENT_CAPACITY);
        let sink = EventSink::new(tx);
        self.stream_with(input.into(), ctx, sink, rx)
    }

    /// Like [`stream`](Self::stream) with a caller-made sink (e.g. one tagged with a child's
    /// [`EventSource`](crate::EventSource)).
    pub fn stream_with(
        &self,
        input: AgentInput,
        ctx: RuntimeContext,
        sink: EventSink,
        rx: mpsc::Receiver<AgentEvent>,
    ) -> AgentStream {
        let agent = self.clone();
        let future = async move {
            let result = agent.run(input, ctx, sink.clone()).await;
            match &result {
                Ok(message) => {
                    sink.emit(EventKind::Final {
                        message: message.clone(),
                    })
                    .await
                }
                Err(err) => {
                    sink.emit(EventKind::Error {
                        message: error_chain(err),
                        kind: err.kind(),
                    })
                    .await
                }
            }
        };
        AgentStream {
            future: Some(Box::pin(future)),
            rx,
        }
    }

    /// Runs one call with an explicit event sink.
    ///
    /// # Errors
    /// See [`call`](Self::call).
    pub async fn run(&self, input: AgentInput, ctx: RuntimeContext, events: EventSink) -> Result<Msg, AgentError> {
        let key = self.key_for(&ctx);
        // OpenTelemetry GenAI agent span (`crate::semconv`): the fields are evaluated only
        // when a subscriber enables the span.
        let span = tracing::info_span!(
            "invoke_agent",
            otel.name = %format_args!("invoke_agent {}", key.agent_id),
            otel.kind = "internal",
            gen_ai.operation.name = crate::semconv::OP_INVOKE_AGENT,
            gen_ai.provider.name = %self.kernel.model.provider(),
            gen_ai.agent.name = %key.agent_id,
            gen_ai.request.model = %self.kernel.model.name(),
            gen_ai.conversation.id = %key.session_id,
            user_id = %key.user_id,
            session_id = %key.session_id,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            gen_ai.usage.cache_read.input_tokens = tracing::field::Empty,
            gen_ai.output.messages = tracing::field::Empty,
            error.type = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let result = self.run_keyed(input, ctx, events, key).instrument(span.clone()).await;
        if !span.is_disabled() {
            match &result {
                Ok(msg) => {
                    if crate::semconv::capture_content() {
                        span.record("gen_ai.output.messages", crate::semconv::content(&msg.text()).as_str());
                    }
                }
                Err(err) => crate::semconv::record_error(&span, err.kind().as_str()),
            }
        }
        result
    }

    async fn run_keyed(
        &self,
        input: AgentInput,
        ctx: RuntimeContext,
        events: EventSink,
        key: StateKey,
    ) -> Result<Msg, AgentError> {
        let kernel = &*self.kernel;
        let (mut state, version) = kernel.store.load(&key).await?.unwrap_or_default();
        let session = SessionState::from_extensions(&state.extensions);
        // Calls waiting for a person keep no result until they are decided; a call that was
        // approved and started but never finished gets the "interrupted" result here.
        let waiting = crate::approval::waiting_ids(&session);
        let waiting: Vec<&str> = waiting.iter().map(String::as_str).collect();
        let repaired = repair_tool_pairs_except(&mut state.messages, &waiting);
        if repaired > 0 {
            tracing::warn!(repairs = repaired, "repaired tool calls left without results");
        }
        let mut turn = Turn {
            ctx,
            key,
            session,
            state,
            version,
            input: input.0,
            appended: Vec::new(),
            persisted: 0,
            events,
            step: 0,
            usage: Usage::default(),
            tools: kernel.toolkit.specs(),
            offered: Arc::from(Vec::new()),
            step_notes: Vec::new(),
            output: None,
        };
        let result = AgentNext {
            rest: &kernel.chain.agent,
            kernel,
        }
        .run(&mut turn)
        .await;
        // The turn's usage over all its model calls, on the `invoke_agent` span.
        let span = tracing::Span::current();
        if !span.is_disabled() {
            crate::semconv::record_usage(
                &span,
                turn.usage.input_tokens,
                turn.usage.output_tokens,
                turn.usage.cache_read_tokens,
            );
        }
        turn.session.write_into(&mut turn.state.extensions);
        // Save also after a failure: finished steps and the user's message are kept.
        let saved = kernel
            .store
            .save(
                &turn.key,
                &turn.state,
                turn.version,
                turn.ctx.get::<FencingToken>().copied(),
            )
            .await;
        result?;
        saved?;
        turn.output.take().ok_or(AgentError::Capability {
            capability: "agent",
            source: "the call ended without a final message (a middleware skipped the loop)".into(),
        })
    }
}

impl Kernel {
    /// The innermost `agent` layer: the loop.
    pub(crate) async fn run_loop(&self, turn: &mut Turn) -> Result<(), AgentError> {
        turn.events
            .emit(EventKind::AgentStart {
                session_id: turn.key.session_id.to_string(),
            })
            .await;
        if self.settle_approvals(turn).await? == crate::approval::Settled::StillWaiting {
            return Ok(());
        }
        for msg in std::mem::take(&mut turn.input) {
            turn.push(msg);
        }
        let limit = self.config.max_iters.get();
        for step in 1..=limit {
            turn.step = step;
            if turn.ctx.is_cancelled() {
                return Err(AgentError::Cancelled);
            }
            ReasoningNext {
                rest: &self.chain.reasoning,
                kernel: self,
            }
            .run(turn)
            .await?;
            let Some(reply) = turn.last_message().filter(|m| m.role == Role::Assistant).cloned() else {
                return Err(AgentError::Capability {
                    capability: "reasoning",
                    source: "a reasoning step ended without an assistant message".into(),
                });
            };
            if !reply.has_tool_calls() {
                turn.events
                    .emit(EventKind::StepEnd {
                        step,
                        usage: reply.usage,
                    })
                    .await;
                turn.output = Some((*reply).clone());
                return Ok(());
            }
            self.act(turn, &reply).await;
            turn.events
                .emit(EventKind::StepEnd {
                    step,
                    usage: reply.usage,
                })
                .await;
            if self.end_if_waiting(turn).await {
                return Ok(());
            }
            if turn.ctx.is_cancelled() {
                return Err(AgentError::Cancelled);
            }
        }
        // Out of steps: one last call without tools asks for the answer. The kernel's
        // reasoning layer shapes that reply (no tool calls, never empty) before it is
        // appended, so what the caller receives is exactly what the transcript records.
        turn.events.emit(EventKind::MaxIterations { limit }).await;
        turn.events
            .emit(EventKind::Warning {
                code: "max_iterations".to_owned(),
                message: format!("the call used all {limit} reasoning steps; asked the model for a final answer"),
            })
            .await;
        turn.step = limit + 1;
        turn.tools = Arc::from(Vec::new());
        turn.step_notes.push(format!(
            "You have used all {limit} reasoning steps allowed for this request. Do not call tools. \
             Answer now with what you have, and say what is left undone."
        ));
        ReasoningNext {
            rest: &self.chain.reasoning,
            kernel: self,
        }
        .run(turn)
        .await?;
        let Some(reply) = turn.last_message().filter(|m| m.role == Role::Assistant).cloned() else {
            return Err(AgentError::Capability {
                capability: "reasoning",
                source: "no final message".into(),
            });
        };
        // Like every other model call, the last one ends its step (and reports its usage).
        turn.events
            .emit(EventKind::StepEnd {
                step: limit + 1,
                usage: reply.usage,
            })
            .await;
        turn.output = Some((*reply).clone());
        Ok(())
    }
}

/// An error and its sources, joined with `: `.
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The events of one streaming call. Polling the stream drives the call; dropping it stops
/// the call (the state is saved only if the call reaches its end).
pub struct AgentStream {
    future: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    rx: mpsc::Receiver<AgentEvent>,
}

impl AgentStream {
    /// A stream that drives `future` and yields what it sends into the sink feeding `rx`.
    /// The future should end by emitting [`EventKind::Final`] or [`EventKind::Error`].
    pub fn new(future: impl Future<Output = ()> + Send + 'static, rx: mpsc::Receiver<AgentEvent>) -> Self {
        Self {
            future: Some(Box::pin(future)),
            rx,
        }
    }

    /// A channel pair for [`new`](Self::new), with the kernel's capacity.
    pub fn channel() -> (EventSink, mpsc::Receiver<AgentEvent>) {
        let (tx, rx) = mpsc::channel(EVENT_CAPACITY);
        (EventSink::new(tx), rx)
    }
}

impl std::fmt::Debug for AgentStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentStream")
            .field("running", &self.future.is_some())
            .finish()
    }
}

impl Stream for AgentStream {
    type Item = AgentEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<AgentEvent>> {
        loop {
            if let Poll::Ready(Some(event)) = self.rx.poll_recv(cx) {
                return Poll::Ready(Some(event));
            }
            match self.future.as_mut() {
                Some(future) => match future.as_mut().poll(cx) {
                    // The call ended. Close the channel rather than wait for every sender to
                    // drop: a tool may have handed a sink clone to work that outlives the call.
                    // Buffered events are still delivered.
                    Poll::Ready(()) => {
                        self.future = None;
                        self.rx.close();
                    }
                    Poll::Pending => return Poll::Pending,
                },
                None => return self.rx.poll_recv(cx),
            }
        }
    }
}
