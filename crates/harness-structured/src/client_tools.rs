//! Client tools: tools the turn's caller runs itself (the OpenAI-compatible API's `tools`).
//!
//! A turn whose context holds [`ClientTools`] offers their specs to the model beside the
//! agent's own. A call to one never runs here: [`ClientToolCalls`] records it as pending,
//! the way a call waiting for a person's approval is
//! ([`ToolContext::request_approval`](harness_core::ToolContext::request_approval), reason
//! [`CLIENT_TOOL_REASON`]), so the turn ends after the step with the pending calls, the state
//! is saved and nothing holds the session. The caller runs the calls and resumes the turn by
//! approving them with their results in [`ClientTools::results`]: the approved call passes
//! this layer again, which answers it with the caller's result. A new message instead
//! supersedes the calls, as for approvals.
//!
//! [`ClientTools::choice`] is the caller's `tool_choice`: with [`ClientChoice::Required`] or
//! [`ClientChoice::Function`] the turn's first model call is offered only the caller's tools
//! (all of them, or the named one) and must call one ([`ToolChoice::Required`], which every
//! provider client maps to its own forcing); later steps choose freely.

use harness_core::{
    ActingNext, ChatRequest, Hooks, Middleware, ModelCallInfo, ModelError, ModelNext, ModelStream, ReasoningNext,
    ToolCall, ToolChoice, ToolContext, ToolOutput, ToolSpec, Turn,
};
use harness_core::{AgentError, async_trait};
use std::collections::HashMap;
use std::sync::Arc;

/// The `reason` of a pending call that the caller runs.
pub const CLIENT_TOOL_REASON: &str = "client tool: the caller runs it and sends back its result";

/// The caller's tools for one turn, and the results of calls it ran.
#[derive(Debug, Clone, Default)]
pub struct ClientTools {
    /// The tools offered beside the agent's own.
    pub specs: Arc<[ToolSpec]>,
    /// Results of client tool calls, by call id (what the caller sent back).
    pub results: HashMap<String, ClientResult>,
    /// What the turn's first model call must do with the caller's tools.
    pub choice: ClientChoice,
}

/// The caller's `tool_choice` for the turn's first model call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ClientChoice {
    /// The model decides (the agent's tools and the caller's are offered).
    #[default]
    Auto,
    /// The model must call one of the caller's tools.
    Required,
    /// The model must call the caller's tool of this name.
    Function(String),
}

/// What one client tool call returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientResult {
    /// The result's text.
    pub content: String,
    /// Whether the caller reports a failure.
    pub is_error: bool,
}

impl ClientTools {
    /// Whether `name` is one of the caller's tools.
    pub fn offers(&self, name: &str) -> bool {
        self.specs.iter().any(|spec| spec.name == name)
    }
}

/// Whether `input` is an object matching the tool's parameters.
fn check_arguments(spec: &ToolSpec, input: &serde_json::Value) -> Result<(), String> {
    if !input.is_object() {
        return Err("the arguments are not a JSON object".to_owned());
    }
    let validator =
        jsonschema::validator_for(&spec.input_schema).map_err(|err| format!("its schema is invalid ({err})"))?;
    let errors: Vec<String> = validator
        .iter_errors(input)
        .take(3)
        .map(|err| err.to_string())
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// Offers the caller's tools on each step (the innermost reasoning layer: after every other
/// layer narrowed the agent's tools).
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientToolOffer;

/// Turns calls of the caller's tools into pending calls, or answers them with the caller's
/// results (an acting layer outside permissions: the caller decides about its own tools).
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientToolCalls;

#[async_trait]
impl Middleware for ClientToolOffer {
    fn name(&self) -> &'static str {
        "client_tools_offer"
    }

    fn hooks(&self) -> Hooks {
        Hooks::REASONING | Hooks::MODEL_CALL
    }

    async fn reasoning(&self, turn: &mut Turn, next: ReasoningNext<'_>) -> Result<(), AgentError> {
        let Some(client) = turn.ctx().get::<ClientTools>().filter(|c| !c.specs.is_empty()).cloned() else {
            return next.run(turn).await;
        };
        let tools = Arc::clone(turn.tools());
        let mut offered: Vec<ToolSpec> = tools.iter().cloned().collect();
        for spec in client.specs.iter() {
            if !offered.iter().any(|known| known.name == spec.name) {
                offered.push(spec.clone());
            }
        }
        turn.set_tools(offered.into());
        let result = next.run(turn).await;
        // The outer layers see the tools they set.
        turn.set_tools(tools);
        result
    }

    async fn model_call(
        &self,
        mut request: ChatRequest,
        info: ModelCallInfo<'_>,
        next: ModelNext<'_>,
    ) -> Result<ModelStream, ModelError> {
        if info.turn.step() <= 1
            && let Some(client) = info.turn.ctx().get::<ClientTools>()
        {
            let forced: Vec<ToolSpec> = match &client.choice {
                ClientChoice::Auto => Vec::new(),
                ClientChoice::Required => client.specs.to_vec(),
                ClientChoice::Function(name) => {
                    client.specs.iter().filter(|spec| &spec.name == name).cloned().collect()
                }
            };
            if !forced.is_empty() {
                request.tools = forced.into();
                request.tool_choice = ToolChoice::Required;
            }
        }
        next.run(request, info).await
    }
}

#[async_trait]
impl Middleware for ClientToolCalls {
    fn name(&self) -> &'static str {
        "client_tools"
    }

    fn hooks(&self) -> Hooks {
        Hooks::ACTING
    }

    async fn acting(&self, call: ToolCall, ctx: &ToolContext, next: ActingNext<'_>) -> ToolOutput {
        let Some(client) = ctx.runtime.get::<ClientTools>() else {
            return next.run(call, ctx).await;
        };
        if let Some(result) = client.results.get(&call.id) {
            return if result.is_error {
                ToolOutput::error(result.content.clone())
            } else {
                ToolOutput::text(result.content.clone())
            };
        }
        if let Some(spec) = client.specs.iter().find(|spec| spec.name == call.name) {
            // The caller gets only calls that match its schema; the model sees why not.
            if let Err(error) = check_arguments(spec, &call.input) {
                return ToolOutput::error(format!(
                    "invalid arguments for `{}`: {error}; call it again with arguments that match its schema",
                    call.name
                ));
            }
            return ctx.request_approval(&call, CLIENT_TOOL_REASON, None);
        }
        next.run(call, ctx).await
    }
}
