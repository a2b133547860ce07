//! Structured output: [`HarnessAgent::call_structured`] runs a turn whose final answer is a
//! JSON value matching an [`OutputSchema`].
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
//! assert_eq!(model.request_count(), 2);
//! # Ok::<_, Box<dyn std::error::Error>>(()) }).unwrap();
//! ```

use crate::capability::{Assembly, Capability, CapabilityError, Layer, Registration, Setup};
use harness_core::{
    AgentError, Block, ChatRequest, EventKind, Hooks, Middleware, ModelCallInfo, ModelError, ModelNext, ModelStream,
    Msg, ReasoningNext, ResponseFormat, Role, ToolCall, ToolChoice, ToolContext, ToolOutput, ToolSpec, Turn,
    async_trait,
};
use serde_json::Value;
use std::sync::Arc;

/// The synthetic tool whose arguments are the answer.
pub const GENERATE_RESPONSE: &str = "generate_response";
/// Repair asks after the first answer, by default.
pub const DEFAULT_MAX_REPAIRS: u32 = 2;
/// The capability's name (and the `capability` of its errors).
pub const CAPABILITY: &str = "structured_output";
/// The code of the warning event when a provider refused the native field.
pub const NATIVE_REFUSED: &str = "structured_output.native_refused";

/// How the answer is asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum StructuredMode {
    /// Natively where the model supports it, else the `generate_response` tool.
    #[default]
    Auto,
    /// Always the `generate_response` tool.
    Tool,
}

/// The shape the answer must have: a JSON Schema, checked when it is made.
#[derive(Clone)]
pub struct OutputSchema {
    name: String,
    schema: Arc<Value>,
    strict: bool,
    object_only: bool,
    validator: Arc<jsonschema::Validator>,
    max_repairs: u32,
    mode: StructuredMode,
}

impl std::fmt::Debug for OutputSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputSchema")
            .field("name", &self.name)
            .field("schema", &self.schema)
            .field("strict", &self.strict)
            .field("max_repairs", &self.max_repairs)
            .field("mode", &self.mode)
            .finish()
    }
}

/// Why a structured call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StructuredError {
    /// The schema is not a valid JSON Schema. Nothing ran.
    #[error("invalid output schema: {message}")]
    InvalidSchema {
        /// What the schema compiler said.
        message: String,
    },
    /// The schema's name cannot be sent to a provider. Nothing ran.
    #[error("invalid output schema name `{name}`: use 1 to 64 letters, digits, `_` or `-`")]
    InvalidName {
        /// The name as given.
        name: String,
    },
    /// The model's answers did not match the schema, also after the repair asks. The turn
    /// is saved (with the answers and the asks); nothing was returned as the answer.
    #[error("the model's answer did not match the output schema after {attempts} attempts: {error}")]
    NotCompliant {
        /// Answers checked.
        attempts: u32,
        /// The last validation error.
        error: String,
    },
    /// The turn stopped to wait for a person's approval of a tool call before it had an
    /// answer (`HarnessAgent::pending_approval` lists the calls; resuming it is an ordinary
    /// turn).
    #[error("the turn waits for a person's approval before it can answer")]
    AwaitingApproval {
        /// The assistant message that asked.
        message: Box<Msg>,
    },
    /// The turn failed for another reason.
    #[error(transparent)]
    Agent(AgentError),
}

impl StructuredError {
    /// A failed turn, with the capability's own failure unwrapped.
    pub(crate) fn from_agent(err: AgentError) -> Self {
        match err {
            AgentError::Capability { capability, source } if capability == CAPABILITY => {
                match source.downcast::<NotCompliant>() {
                    Ok(failure) => Self::NotCompliant {
                        attempts: failure.attempts,
                        error: failure.error,
                    },
                    Err(source) => Self::Agent(AgentError::Capability { capability, source }),
                }
            }
            other => Self::Agent(other),
        }
    }
}

/// The capability's failure inside the turn (mapped to [`StructuredError::NotCompliant`]).
#[derive(Debug, thiserror::Error)]
#[error("the answer did not match the output schema after {attempts} attempts: {error}")]
struct NotCompliant {
    attempts: u32,
    error: String,
}

impl OutputSchema {
    /// An answer matching `schema` (named `response`, not strict).
    ///
    /// # Errors
    /// [`StructuredError::InvalidSchema`] when `schema` is not a valid JSON Schema.
    pub fn new(schema: Value) -> Result<Self, StructuredError> {
        let validator = jsonschema::validator_for(&schema).map_err(|err| StructuredError::InvalidSchema {
            message: err.to_string(),
        })?;
        Ok(Self {
            name: "response".to_owned(),
            schema: Arc::new(schema),
            strict: false,
            object_only: false,
            validator: Arc::new(validator),
            max_repairs: DEFAULT_MAX_REPAIRS,
            mode: StructuredMode::Auto,
        })
    }

    /// Any JSON object (OpenAI's `json_object`).
    pub fn json_object() -> Self {
        let schema = serde_json::json!({"type": "object"});
        // A literal schema that always compiles.
        #[allow(clippy::expect_used)]
        let validator = jsonschema::validator_for(&schema).expect("the object schema compiles");
        Self {
            name: "response".to_owned(),
            schema: Arc::new(schema),
            strict: false,
            object_only: true,
            validator: Arc::new(validator),
            max_repairs: DEFAULT_MAX_REPAIRS,
            mode: StructuredMode::Auto,
        }
    }

    /// The same schema under another name (sent to providers that want one).
    ///
    /// # Errors
    /// [`StructuredError::InvalidName`] unless the name is 1 to 64 letters, digits, `_` or `-`.
    pub fn named(mut self, name: impl Into<String>) -> Result<Self, StructuredError> {
        let name = name.into();
        let valid =
            (1..=64).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err(StructuredError::InvalidName { name });
        }
        self.name = name;
        Ok(self)
    }

    /// Asks the provider to follow the schema exactly (OpenAI `strict`; default `false`).
    #[must_use]
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    /// Repair asks after the first answer (default [`DEFAULT_MAX_REPAIRS`]).
    #[must_use]
    pub fn max_repairs(mut self, repairs: u32) -> Self {
        self.max_repairs = repairs;
        self
    }

    /// How the answer is asked for (default [`StructuredMode::Auto`]).
    #[must_use]
    pub fn mode(mut self, mode: StructuredMode) -> Self {
        self.mode = mode;
        self
    }

    /// The schema.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Checks `value` against the schema.
    ///
    /// # Errors
    /// What does not match, as text (the first few errors with their paths).
    pub fn validate(&self, value: &Value) -> Result<(), String> {
        let errors: Vec<String> = self
            .validator
            .iter_errors(value)
            .take(5)
            .map(|error| {
                let path = error.instance_path().to_string();
                if path.is_empty() {
                    error.to_string()
                } else {
                    format!("at {path}: {error}")
                }
            })
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }

    /// The answer in `text`: the JSON it holds (the whole text, or one fenced code block),
    /// checked against the schema.
    ///
    /// # Errors
    /// Why it is not an answer: not JSON, or what does not match.
    pub fn parse(&self, text: &str) -> Result<Value, String> {
        let trimmed = text.trim();
        let body = fenced(trimmed).unwrap_or(trimmed);
        if body.is_empty() {
            return Err("the answer is empty; a JSON value was expected".to_owned());
        }
        let value: Value = serde_json::from_str(body).map_err(|err| format!("the answer is not valid JSON ({err})"))?;
        self.validate(&value)?;
        Ok(value)
    }

    fn response_format(&self) -> ResponseFormat {
        if self.object_only {
            ResponseFormat::JsonObject
        } else {
            ResponseFormat::JsonSchema {
                name: self.name.clone(),
                schema: (*self.schema).clone(),
                strict: self.strict,
            }
        }
    }

    fn tool(&self) -> ToolSpec {
        // A tool's parameters must be an object: any other schema is wrapped.
        let input_schema = if self.schema.get("type").and_then(Value::as_str) == Some("object") {
            (*self.schema).clone()
        } else {
            serde_json::json!({"type": "object", "properties": {"value": *self.schema}, "required": ["value"]})
        };
        ToolSpec::new(
            GENERATE_RESPONSE,
            "Give your final answer by calling this tool once, alone, with the answer as its arguments. \
             Call it when you have everything you need; its arguments must match its schema.",
            input_schema,
        )
        .read_only()
        .closed_world()
    }

    /// The answer carried by a `generate_response` call's arguments.
    fn answer_in_tool_input(&self, input: &Value) -> Value {
        if self.schema.get("type").and_then(Value::as_str) == Some("object") {
            input.clone()
        } else {
            input.get("value").cloned().unwrap_or(Value::Null)
        }
    }
}

/// The body of a text that is exactly one fenced code block (```json ... ```).
fn fenced(text: &str) -> Option<&str> {
    let rest = text.strip_prefix("```")?.strip_suffix("```")?;
    let (first, body) = rest.split_once('\n')?;
    (first.trim().is_empty() || first.trim().eq_ignore_ascii_case("json")).then(|| body.trim())
}

/// What a structured call returned.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StructuredReply {
    /// The answer, valid under the schema.
    pub value: Value,
    /// The turn's final assistant message (its text is the answer's JSON).
    pub message: Msg,
}

/// The call's schema, in its context.
#[derive(Clone)]
pub(crate) struct StructuredCall(pub(crate) OutputSchema);

/// The turn's provider refused the native field: the rest of the turn uses the tool.
struct NativeRefused;

/// How the step's model calls ask for the answer.
#[derive(Clone, Copy)]
struct StepPath {
    native: bool,
    forced: bool,
}

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
        ]
    }
}

/// Asks for the answer on each step and checks it.
struct AnswerStep {
    native: bool,
}

/// A `generate_response` call that shares its reply with other calls: refused, so the model
/// calls it again once the other results are in.
struct AnswerCalls;

#[async_trait]
impl Middleware for AnswerCalls {
    fn name(&self) -> &'static str {
        "structured_output_calls"
    }

    fn hooks(&self) -> Hooks {
        Hooks::ACTING
    }

    async fn acting(&self, call: ToolCall, ctx: &ToolContext, next: harness_core::ActingNext<'_>) -> ToolOutput {
        if call.name == GENERATE_RESPONSE && ctx.runtime.get::<StructuredCall>().is_some() {
            return ToolOutput::error(format!(
                "`{GENERATE_RESPONSE}` was called together with other tools, so it was not taken. \
                 Call it again alone, in a reply of its own, once you have the other results."
            ));
        }
        next.run(call, ctx).await
    }
}

/// What the step's reply is, for the answer.
enum Verdict {
    /// A valid answer (text, or a lone `generate_response` call with this id and value).
    Answer(Option<(String, Value)>),
    /// The reply calls tools: the loop goes on.
    Tools,
    /// Not an answer: why, and the id of a lone `generate_response` call to answer.
    Invalid { error: String, call: Option<String> },
}

fn verdict(schema: &OutputSchema, reply: &Msg) -> Verdict {
    let calls: Vec<_> = reply.tool_calls().collect();
    match calls.as_slice() {
        [] => match schema.parse(&reply.text()) {
            Ok(_) => Verdict::Answer(None),
            Err(error) => Verdict::Invalid { error, call: None },
        },
        [only] if only.name == GENERATE_RESPONSE => {
            let value = schema.answer_in_tool_input(only.input);
            match schema.validate(&value) {
                Ok(()) => Verdict::Answer(Some((only.id.to_owned(), value))),
                Err(error) => Verdict::Invalid {
                    error,
                    call: Some(only.id.to_owned()),
                },
            }
        }
        _ => Verdict::Tools,
    }
}

#[async_trait]
impl Middleware for AnswerStep {
    fn name(&self) -> &'static str {
        CAPABILITY
    }

    fn hooks(&self) -> Hooks {
        Hooks::REASONING | Hooks::MODEL_CALL
    }

    async fn reasoning(&self, turn: &mut Turn, next: ReasoningNext<'_>) -> Result<(), AgentError> {
        let Some(StructuredCall(schema)) = turn.ctx().get::<StructuredCall>().cloned() else {
            return next.run(turn).await;
        };
        let mut native =
            self.native && schema.mode == StructuredMode::Auto && turn.ctx().get::<NativeRefused>().is_none();
        let mut forced = false;
        let mut attempts = 0;
        loop {
            let tools = Arc::clone(turn.tools());
            if !native && !tools.iter().any(|tool| tool.name == GENERATE_RESPONSE) {
                let mut offered: Vec<ToolSpec> = tools.iter().cloned().collect();
                offered.push(schema.tool());
                turn.set_tools(offered.into());
            }
            turn.ctx_mut().insert(StepPath { native, forced });
            let result = next.run(turn).await;
            // The outer layers see the tools they set.
            turn.set_tools(tools);
            match result {
                Ok(()) => {}
                Err(AgentError::Model(ModelError::InvalidRequest { status, message })) if native && status != 0 => {
                    tracing::warn!(status, %message, "the provider refused the native response format; using the tool");
                    turn.ctx_mut().insert(NativeRefused);
                    turn.events()
                        .emit(EventKind::Warning {
                            code: NATIVE_REFUSED.to_owned(),
                            message: format!(
                                "the provider refused the native response format (status {status}); \
                                 asking for the answer through the `{GENERATE_RESPONSE}` tool"
                            ),
                        })
                        .await;
                    native = false;
                    continue;
                }
                Err(err) => return Err(err),
            }
            let Some(reply) = turn.last_message().filter(|m| m.role == Role::Assistant).cloned() else {
                return Ok(());
            };
            attempts += 1;
            let error = match verdict(&schema, &reply) {
                Verdict::Tools => return Ok(()),
                Verdict::Answer(None) => return Ok(()),
                Verdict::Answer(Some((id, value))) => {
                    turn.push(Msg::tool_result(id, vec![Block::text("Accepted.")], false));
                    let text = value.to_string();
                    if turn.events().is_active() {
                        turn.events().emit(EventKind::TextDelta { delta: text.clone() }).await;
                    }
                    // No usage of its own: the model call's is on the message before.
                    let mut answer = Msg::assistant(text);
                    answer.finish_reason = Some(harness_core::FinishReason::Stop);
                    turn.push(answer);
                    return Ok(());
                }
                Verdict::Invalid { error, call } => {
                    if let Some(id) = &call {
                        let result = format!(
                            "The answer does not match the schema: {error}. Call `{GENERATE_RESPONSE}` again with a corrected answer."
                        );
                        turn.push(Msg::tool_result(id.clone(), vec![Block::text(result)], true));
                    }
                    if attempts > schema.max_repairs {
                        return Err(AgentError::Capability {
                            capability: CAPABILITY,
                            source: Box::new(NotCompliant { attempts, error }),
                        });
                    }
                    if call.is_none() {
                        let ask = if native {
                            format!(
                                "Your answer did not match the required JSON schema: {error}. \
                                 Answer again with only the JSON value, no other text."
                            )
                        } else {
                            format!(
                                "Your answer did not match the required JSON schema: {error}. \
                                 Give the answer by calling the `{GENERATE_RESPONSE}` tool."
                            )
                        };
                        turn.push(Msg::user(ask));
                    }
                    error
                }
            };
            tracing::debug!(attempts, error = %error, "structured answer refused; asking again");
            // The tool's way: the next model call may only give the answer.
            forced = !native;
        }
    }

    async fn model_call(
        &self,
        mut request: ChatRequest,
        info: ModelCallInfo<'_>,
        next: ModelNext<'_>,
    ) -> Result<ModelStream, ModelError> {
        let ctx = info.turn.ctx();
        if let (Some(StructuredCall(schema)), Some(path)) = (ctx.get::<StructuredCall>(), ctx.get::<StepPath>()) {
            if path.native {
                request.response_format = Some(schema.response_format());
            }
            if path.forced {
                request.tools = Arc::from(vec![schema.tool()]);
                request.tool_choice = ToolChoice::Required;
            }
        }
        next.run(request, info).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> OutputSchema {
        OutputSchema::new(serde_json::json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"],
            "additionalProperties": false
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn answers_are_parsed_from_plain_or_fenced_json_and_validated() {
        let schema = schema();
        assert_eq!(schema.parse(" {\"n\": 3} "), Ok(serde_json::json!({"n": 3})));
        assert_eq!(
            schema.parse("```json\n{\"n\": 3}\n```"),
            Ok(serde_json::json!({"n": 3}))
        );
        let prose = schema.parse("The answer is 3.").err().unwrap_or_default();
        assert!(prose.starts_with("the answer is not valid JSON"), "{prose}");
        let wrong = schema.parse("{\"n\": \"three\"}").err().unwrap_or_default();
        assert!(wrong.contains("at /n") && wrong.contains("integer"), "{wrong}");
        assert!(schema.parse("").is_err());
        assert!(OutputSchema::json_object().parse("[1]").is_err());
        assert!(OutputSchema::json_object().parse("{}").is_ok());
    }

    #[test]
    fn bad_schemas_and_names_are_refused_before_anything_runs() {
        let err = OutputSchema::new(serde_json::json!({"type": 12})).err();
        assert!(matches!(err, Some(StructuredError::InvalidSchema { .. })), "{err:?}");
        let err = schema().named("has space").err();
        assert!(matches!(err, Some(StructuredError::InvalidName { .. })), "{err:?}");
        assert_eq!(
            schema().named("City_1").map(|s| s.name().to_owned()).ok().as_deref(),
            Some("City_1")
        );
    }

    #[test]
    fn a_non_object_schema_is_wrapped_for_the_tool() {
        let schema = OutputSchema::new(serde_json::json!({"type": "array", "items": {"type": "integer"}}))
            .unwrap_or_else(|e| panic!("{e}"));
        let tool = schema.tool();
        assert_eq!(tool.input_schema["properties"]["value"]["type"], "array");
        assert_eq!(
            schema.answer_in_tool_input(&serde_json::json!({"value": [1, 2]})),
            serde_json::json!([1, 2])
        );
    }

    #[test]
    fn the_format_maps_onto_the_openai_shapes() {
        assert_eq!(
            OutputSchema::json_object().response_format(),
            ResponseFormat::JsonObject
        );
        let named = schema().named("answer").unwrap_or_else(|e| panic!("{e}")).strict(true);
        let ResponseFormat::JsonSchema { name, strict, schema } = named.response_format() else {
            panic!("a schema");
        };
        assert_eq!((name.as_str(), strict), ("answer", true));
        assert_eq!(schema["required"], serde_json::json!(["n"]));
    }
}
