//! Structured output: [`HarnessAgent::call_structured`] runs a turn whose final answer is a
//! JSON value matching an [`OutputSchema`]. The engine (schema checks, repair asks, request
//! shaping) is the `harness-structured` crate, re-exported here; this module registers it as
//! the `structured_output` capability.
//!
//! The turn is an ordinary one (tools, memory, persistence); only its answer is constrained,
//! in one of two ways:
//!
//! - **native**, where the model constrains its own decoding
//!   ([`ChatModel::native_response_format`](harness_core::ChatModel::native_response_format):
//!   OpenAI's `response_format` with `json_schema`, Gemini's `responseMimeType` +
//!   `responseJsonSchema`): every model call of the turn carries the schema as
//!   [`ChatRequest::response_format`](harness_core::ChatRequest::response_format), and the
//!   answer is the reply's text;
//! - **the `generate_response` tool** otherwise (and when [`StructuredMode::Tool`] asks for
//!   it): the tool, whose parameters are the schema, is offered beside the agent's own, and
//!   the answer is its arguments. A reply that does not call it gets a repair ask and the
//!   next model call offers only that tool, with the tool choice forced (for Anthropic that is
//!   `tool_choice: {"type": "tool", "name": "generate_response"}`, Claude's way of structured
//!   output). When the model calls it alone with a valid value, the call gets an "accepted"
//!   result and the value becomes the turn's final assistant message (its text is the JSON),
//!   so the transcript stays one valid turn and the next turn reads it like any answer.
//!
//! The answer is **always** validated against the schema, also when the provider was asked
//! natively. An answer that is not JSON or does not match gets a repair ask carrying the
//! validation error (a user message, kept in the transcript, or the tool call's error
//! result), at most [`OutputSchema::max_repairs`] times (default [`DEFAULT_MAX_REPAIRS`]);
//! then the call fails with [`StructuredError::NotCompliant`]. A provider that refuses the
//! native field (a 400 on the request) is asked again the tool's way for the rest of the
//! turn, with a `structured_output.native_refused` warning event.
//!
//! `OutputSchema` is shaped for the OpenAI-compatible API's `response_format`:
//! `{"type": "json_object"}` is [`OutputSchema::json_object`], `{"type": "json_schema",
//! "json_schema": {"name", "schema", "strict"}}` is [`OutputSchema::new`] with
//! [`named`](OutputSchema::named) and [`strict`](OutputSchema::strict).
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use harness::HarnessAgent;
//! use harness::structured::OutputSchema;
//! use harness_core::RuntimeContext;
//! use harness_models::ScriptedModel;
//! let dir = tempfile::tempdir()?;
//! // The first answer is prose: the model is asked again, and then calls the tool.
//! let model = ScriptedModel::new()
//!     .reply_text("The capital of France is Paris.")
//!     .reply_tool_call("generate_response", serde_json::json!({"city": "Paris"}));
//! let agent = HarnessAgent::builder().workspace(dir.path()).model(model.clone()).build()?;
//! let schema = OutputSchema::new(serde_json::json!({
//!     "type": "object",
//!     "properties": {"city": {"type": "string"}},
//!     "required": ["city"]
//! }))?;
//! let reply = agent.call_structured("Capital of France?", &schema, RuntimeContext::default()).await?;
//! assert_eq!(reply.value, serde_json::json!({"city": "Paris"}));
//! // At least the prose answer and the repair ask reached the model.
//! assert!(model.request_count() >= 2);
//! # Ok::<_, Box<dyn std::error::Error>>(()) }).unwrap();
//! ```

use crate::capability::{Assembly, Capability, CapabilityError, Layer, Registration, Setup};
use harness_core::Middleware;
use harness_structured::client_tools::{ClientToolCalls, ClientToolOffer};
use std::sync::Arc;

pub use harness_structured::{
    AnswerCalls, AnswerStep, CAPABILITY, DEFAULT_MAX_REPAIRS, GENERATE_RESPONSE, NATIVE_REFUSED, OutputSchema,
    StructuredCall, StructuredError, StructuredMode, StructuredReply, client_tools,
};

pub(crate) const REGISTRATION: Registration = Registration::new("structured_output", build);

fn build(setup: &mut Setup<'_>) -> Result<Option<Arc<dyn Capability>>, CapabilityError> {
    Ok(Some(Arc::new(StructuredOutput {
        native: setup.model().native_response_format(),
    })))
}

/// The capability: idle unless a call carries an [`OutputSchema`].
struct StructuredOutput {
    /// Whether the agent's model constrains its output natively.
    native: bool,
}

impl Capability for StructuredOutput {
    fn name(&self) -> &'static str {
        CAPABILITY
    }

    fn middleware(&self, _assembly: &Assembly) -> Vec<(Layer, Arc<dyn Middleware>)> {
        vec![
            // Outside permissions and plan mode: the synthetic tool never reaches them.
            (Layer::Eviction, Arc::new(AnswerCalls) as Arc<dyn Middleware>),
            // Innermost: the tool is added after every other layer narrowed the tools.
            (Layer::Context, Arc::new(AnswerStep { native: self.native })),
            // The caller's own tools (`client_tools`): their calls wait for the caller.
            (Layer::Eviction, Arc::new(ClientToolCalls)),
            (Layer::Context, Arc::new(ClientToolOffer)),
        ]
    }
}
