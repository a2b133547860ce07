//! The middleware onion.
//!
//! A [`Middleware`] wraps any of four hooks — `agent` (one whole call), `reasoning` (one
//! step: prompt, model call, decode), `model_call` (the raw provider call) and `acting` (one
//! tool call) — and may transform the system prompt (`system_prompt`, a pipeline in
//! registration order). Nesting per call:
//!
//! ```text
//! agent ⊃ for each step { reasoning ⊃ (system_prompt pipeline, model_call) ; acting × N }
//! ```
//!
//! The `acting` calls of one step run in call order, consecutive concurrency-safe ones
//! together (see [`ToolAnnotations`](crate::ToolAnnotations)); a call to a tool that was not
//! offered on the step never reaches the `acting` onion.
//!
//! The first registered middleware is the outermost. A middleware declares the hooks it
//! implements in [`Middleware::hooks`]; the chain is split per hook at build time, so a hook a
//! middleware does not implement costs nothing on the hot path.
//!
//! Each `*Next` value is the rest of the onion. `run` consumes it; a middleware that wants to
//! retry (e.g. compact and retry on overflow) clones it first — `Next` values are cheap
//! copies of two references.

use crate::agent::{AgentError, Kernel};
use crate::model::{ChatRequest, ModelError, ModelStream, SystemPrompt};
use crate::tool::{ToolCall, ToolContext, ToolOutput};
use crate::turn::Turn;
use async_trait::async_trait;
use std::ops::BitOr;
use std::sync::Arc;

/// The set of hooks a middleware implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hooks(u8);

impl Hooks {
    /// No hook.
    pub const NONE: Self = Self(0);
    /// `agent`.
    pub const AGENT: Self = Self(1);
    /// `reasoning`.
    pub const REASONING: Self = Self(2);
    /// `system_prompt`.
    pub const SYSTEM_PROMPT: Self = Self(4);
    /// `model_call`.
    pub const MODEL_CALL: Self = Self(8);
    /// `acting`.
    pub const ACTING: Self = Self(16);
    /// Every hook.
    pub const ALL: Self = Self(31);

    /// Whether all hooks of `other` are in `self`.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for Hooks {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

/// What a model-call middleware sees of the call.
#[derive(Debug, Clone, Copy)]
pub struct ModelCallInfo<'a> {
    /// The turn (identity, state, step number).
    pub turn: &'a Turn,
    /// The model's name.
    pub model: &'a str,
}

/// Cross-cutting logic around the loop. Implement only the hooks you need and list them in
/// [`hooks`](Self::hooks). Never keep per-call state in fields: one middleware serves every
/// call of every session at once; per-call data lives in the [`Turn`] or the
/// [`RuntimeContext`](crate::RuntimeContext).
#[async_trait]
pub trait Middleware: Send + Sync + 'static {
    /// Stable snake_case name (spans, the documented order).
    fn name(&self) -> &'static str;

    /// The hooks this middleware implements. Hooks not listed are never called. The default
    /// lists all of them, which is correct but slower; narrow it.
    fn hooks(&self) -> Hooks {
        Hooks::ALL
    }

    /// Around one whole call.
    ///
    /// # Errors
    /// Whatever the inner layers return, or this layer's own [`AgentError`].
    async fn agent(&self, turn: &mut Turn, next: AgentNext<'_>) -> Result<(), AgentError> {
        next.run(turn).await
    }

    /// Around one reasoning step. On success the step's assistant message is the last message
    /// of `turn.state.messages`.
    ///
    /// # Errors
    /// Whatever the inner layers return, or this layer's own [`AgentError`].
    async fn reasoning(&self, turn: &mut Turn, next: ReasoningNext<'_>) -> Result<(), AgentError> {
        next.run(turn).await
    }

    /// Transforms the system prompt of one step (registration order).
    async fn system_prompt(&self, prompt: &mut SystemPrompt, turn: &Turn) {
        let _ = (prompt, turn);
    }

    /// Around the raw provider call.
    ///
    /// # Errors
    /// The [`ModelError`] of the inner layers or of this layer.
    async fn model_call(
        &self,
        request: ChatRequest,
        info: ModelCallInfo<'_>,
        next: ModelNext<'_>,
    ) -> Result<ModelStream, ModelError> {
        next.run(request, info).await
    }

    /// Around one tool call. Failures are values: return an error [`ToolOutput`].
    async fn acting(&self, call: ToolCall, ctx: &ToolContext, next: ActingNext<'_>) -> ToolOutput {
        next.run(call, ctx).await
    }
}

/// The middleware chain split per hook, outermost first.
#[derive(Default, Clone)]
pub(crate) struct Chain {
    pub(crate) agent: Vec<Arc<dyn Middleware>>,
    pub(crate) reasoning: Vec<Arc<dyn Middleware>>,
    pub(crate) system_prompt: Vec<Arc<dyn Middleware>>,
    pub(crate) model_call: Vec<Arc<dyn Middleware>>,
    pub(crate) acting: Vec<Arc<dyn Middleware>>,
    pub(crate) names: Vec<&'static str>,
}

impl Chain {
    pub(crate) fn new(middleware: Vec<Arc<dyn Middleware>>) -> Self {
        let mut chain = Self::default();
        for layer in middleware {
            let hooks = layer.hooks();
            chain.names.push(layer.name());
            for (hook, list) in [
                (Hooks::AGENT, &mut chain.agent),
                (Hooks::REASONING, &mut chain.reasoning),
                (Hooks::SYSTEM_PROMPT, &mut chain.system_prompt),
                (Hooks::MODEL_CALL, &mut chain.model_call),
                (Hooks::ACTING, &mut chain.acting),
            ] {
                if hooks.contains(hook) {
                    list.push(Arc::clone(&layer));
                }
            }
        }
        chain
    }
}

/// The rest of the onion around one call.
#[derive(Clone, Copy)]
pub struct AgentNext<'a> {
    pub(crate) rest: &'a [Arc<dyn Middleware>],
    pub(crate) kernel: &'a Kernel,
}

impl AgentNext<'_> {
    /// Runs the inner layers and then the loop.
    ///
    /// # Errors
    /// Whatever the inner layers or the loop return.
    pub async fn run(self, turn: &mut Turn) -> Result<(), AgentError> {
        match self.rest.split_first() {
            Some((layer, rest)) => {
                layer
                    .agent(
                        turn,
                        AgentNext {
                            rest,
                            kernel: self.kernel,
                        },
                    )
                    .await
            }
            None => self.kernel.run_loop(turn).await,
        }
    }
}

/// The rest of the onion around one reasoning step.
#[derive(Clone, Copy)]
pub struct ReasoningNext<'a> {
    pub(crate) rest: &'a [Arc<dyn Middleware>],
    pub(crate) kernel: &'a Kernel,
}

impl ReasoningNext<'_> {
    /// Runs the inner layers and then the step.
    ///
    /// # Errors
    /// Whatever the inner layers or the model return.
    pub async fn run(self, turn: &mut Turn) -> Result<(), AgentError> {
        match self.rest.split_first() {
            Some((layer, rest)) => {
                layer
                    .reasoning(
                        turn,
                        ReasoningNext {
                            rest,
                            kernel: self.kernel,
                        },
                    )
                    .await
            }
            None => self.kernel.reason(turn).await,
        }
    }
}

/// The rest of the onion around one provider call.
#[derive(Clone, Copy)]
pub struct ModelNext<'a> {
    pub(crate) rest: &'a [Arc<dyn Middleware>],
    pub(crate) kernel: &'a Kernel,
}

impl ModelNext<'_> {
    /// Runs the inner layers and then the provider.
    ///
    /// # Errors
    /// The provider's [`ModelError`].
    pub async fn run(self, request: ChatRequest, info: ModelCallInfo<'_>) -> Result<ModelStream, ModelError> {
        match self.rest.split_first() {
            Some((layer, rest)) => {
                layer
                    .model_call(
                        request,
                        info,
                        ModelNext {
                            rest,
                            kernel: self.kernel,
                        },
                    )
                    .await
            }
            None => self.kernel.model.stream(request).await,
        }
    }
}

/// The rest of the onion around one tool call.
#[derive(Clone, Copy)]
pub struct ActingNext<'a> {
    pub(crate) rest: &'a [Arc<dyn Middleware>],
    pub(crate) kernel: &'a Kernel,
    /// The call's one argument check, shared by its layers.
    pub(crate) checked: &'a crate::tool::CheckedCall,
}

impl ActingNext<'_> {
    /// Checks `call` the way the innermost layer will before it runs the tool: the tool must
    /// exist and the arguments must match its schema. Returns the tool's effect hints, so a
    /// layer that decides whether a call may run (permissions) decides on valid arguments
    /// and on the tool's declared effects, never on its name.
    ///
    /// # Errors
    /// [`ToolError::UnknownTool`](crate::ToolError::UnknownTool) or
    /// [`ToolError::InvalidArguments`](crate::ToolError::InvalidArguments): the error result
    /// the call would get anyway.
    pub fn check(&self, call: &ToolCall) -> Result<crate::ToolAnnotations, crate::ToolError> {
        if self.checked.holds(call)
            && let Some(tool) = self.kernel.toolkit.lookup(&call.name)
        {
            return Ok(tool.spec().annotations);
        }
        let tool = self.kernel.toolkit.prepare(&call.name, &call.input)?;
        self.checked.record(call);
        Ok(tool.spec().annotations)
    }

    /// Runs the inner layers and then the tool (validate, call, catch panics, time out).
    pub async fn run(self, call: ToolCall, ctx: &ToolContext) -> ToolOutput {
        match self.rest.split_first() {
            Some((layer, rest)) => {
                layer
                    .acting(
                        call,
                        ctx,
                        ActingNext {
                            rest,
                            kernel: self.kernel,
                            checked: self.checked,
                        },
                    )
                    .await
            }
            None => self.kernel.invoke(call, ctx, self.checked).await,
        }
    }
}
