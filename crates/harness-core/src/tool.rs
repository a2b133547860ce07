//! Tools: [`Tool`] (object-safe), [`TypedTool`] (typed arguments with a derived schema) and the
//! [`Toolkit`] that validates arguments before a call.

use crate::annotations::ToolAnnotations;
use crate::context::RuntimeContext;
use crate::event::EventSink;
use crate::message::Block;
use crate::model::ToolSpec;
use crate::session_state::SessionState;
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// What a tool returns: blocks the model reads.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// Output blocks (text, images).
    pub content: Vec<Block>,
    /// Whether this is an error the model should see as one.
    pub is_error: bool,
}

impl ToolOutput {
    /// A successful text result.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![Block::text(text)],
            is_error: false,
        }
    }

    /// An error result with an actionable message.
    pub fn error(message: impl Into<String>) -> Self {
        Self {
            content: vec![Block::text(message)],
            is_error: true,
        }
    }

    /// The text blocks joined with newlines.
    pub fn text_content(&self) -> String {
        crate::message::join_text(&self.content)
    }

    /// Total bytes of text.
    pub fn text_len(&self) -> usize {
        self.content.iter().filter_map(Block::as_text).map(str::len).sum()
    }
}

/// Why a tool call failed. Every variant becomes an error result the model reads; the
/// message says what to do differently.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The model called a tool that does not exist.
    #[error("unknown tool `{name}`; available tools: {available}")]
    UnknownTool {
        /// The requested name.
        name: String,
        /// Comma-separated names of the offered tools.
        available: String,
    },
    /// The model called a tool that was not offered on this step (narrowed by a middleware or
    /// filtered for the session). The call never runs.
    #[error("tool `{name}` is not available on this step; available tools: {offered}")]
    NotOffered {
        /// The requested name.
        name: String,
        /// Comma-separated names of the tools offered on this step.
        offered: String,
    },
    /// The arguments do not match the schema.
    #[error("invalid arguments for `{tool}`: {message}")]
    InvalidArguments {
        /// Tool name.
        tool: String,
        /// What is wrong, from the validator.
        message: String,
    },
    /// The tool ran and failed; `message` is what the model should know.
    #[error("{message}")]
    Failed {
        /// Actionable message.
        message: String,
    },
    /// The tool did not finish in time.
    #[error("tool `{tool}` timed out after {after:?}")]
    Timeout {
        /// Tool name.
        tool: String,
        /// The limit.
        after: Duration,
    },
    /// The tool panicked.
    #[error("tool `{tool}` crashed: {message}")]
    Panicked {
        /// Tool name.
        tool: String,
        /// The panic payload, when it was text.
        message: String,
    },
    /// The call was cancelled before the tool finished.
    #[error("tool call cancelled before it finished")]
    Cancelled,
}

impl ToolError {
    /// A failure with a message for the model.
    pub fn failed(message: impl Into<String>) -> Self {
        Self::Failed {
            message: message.into(),
        }
    }
}

/// One tool call to run.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// Call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments as the model sent them.
    pub input: Value,
}

/// What a tool sees of the call it runs in.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The call's runtime context (identity, typed extras, cancellation).
    pub runtime: RuntimeContext,
    /// This tool call's id.
    pub call_id: String,
    /// The call's event sink.
    pub events: EventSink,
    /// Typed per-session state, shared by every tool and middleware of the call and saved
    /// with the session.
    pub session: SessionState,
}

/// A callable tool. Most tools implement [`TypedTool`] instead and are wrapped by
/// [`typed`].
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// Name, description and argument schema.
    fn spec(&self) -> &ToolSpec;

    /// Runs the tool. Arguments were already validated against the schema.
    ///
    /// # Errors
    /// A [`ToolError`], which the model sees as an error result.
    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError>;

    /// A per-tool time limit overriding the agent's default.
    fn timeout(&self) -> Option<Duration> {
        None
    }

    /// The schema arguments are checked against before [`call`](Self::call), when it is not
    /// the spec's: a tool that repairs some arguments itself (an MCP tool turning `"3"` into
    /// `3` where its schema asks for a number) accepts them here and checks the rest in
    /// `call`. The model is still offered the spec's schema.
    fn accepted_schema(&self) -> Option<&Value> {
        None
    }

    /// The on-demand group the tool belongs to: an agent with tool groups offers it to the
    /// model only once the group is activated (`activate_tool_group`). `None`: always offered.
    fn group(&self) -> Option<&str> {
        None
    }
}

/// A tool with typed arguments. The schema is derived from `Args` once, at wrap time.
#[async_trait]
pub trait TypedTool: Send + Sync + 'static {
    /// Wire name.
    const NAME: &'static str;
    /// Description for the model.
    const DESCRIPTION: &'static str;
    /// Arguments; field docs become the schema text the model reads.
    type Args: DeserializeOwned + JsonSchema + Send;
    /// Effect hints (default: none set, so the cautious MCP defaults apply and calls run one
    /// after another). Never sent to the provider.
    const ANNOTATIONS: ToolAnnotations = ToolAnnotations::new();
    /// The on-demand group ([`Tool::group`]); default none.
    const GROUP: Option<&'static str> = None;

    /// Runs the tool.
    ///
    /// # Errors
    /// A [`ToolError`], which the model sees as an error result.
    async fn call(&self, args: Self::Args, ctx: &ToolContext) -> Result<ToolOutput, ToolError>;

    /// A per-tool time limit.
    fn timeout(&self) -> Option<Duration> {
        None
    }
}

/// The JSON Schema of `T`, trimmed to what a provider needs: every tool's schema is sent on
/// every request, so what tells the model nothing goes: the type's own doc comment, the
/// `$schema` and `title` keys, `"default": null`, the Rust width of an integer (`"format":
/// "uint32"`, and the `"minimum": 0` of an unsigned one: decoding the arguments refuses a
/// negative number), and the `"null"` of an optional argument's type (an optional argument
/// is one left out of `required`; [`Toolkit::prepare`] takes a `null` one as absent).
pub fn schema_of<T: JsonSchema>() -> Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null);
    if let Some(object) = schema.as_object_mut() {
        for key in ["$schema", "title", "description"] {
            object.remove(key);
        }
        let required: Vec<Value> = object
            .get("required")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if let Some(Value::Object(properties)) = object.get_mut("properties") {
            for (name, property) in properties.iter_mut() {
                let Some(kind) = property.get_mut("type") else {
                    continue;
                };
                let optional = !required.iter().any(|r| r.as_str() == Some(name));
                if let Value::Array(kinds) = kind
                    && optional
                    && kinds.len() == 2
                    && kinds.iter().any(|k| k == "null")
                {
                    *kind = kinds.iter().find(|k| *k != "null").cloned().unwrap_or(Value::Null);
                }
            }
        }
    }
    trim_schema(&mut schema);
    schema
}

fn trim_schema(schema: &mut Value) {
    match schema {
        Value::Object(object) => {
            if object.get("default").is_some_and(Value::is_null) {
                object.remove("default");
            }
            let format = object.get("format").and_then(Value::as_str).unwrap_or_default();
            let digits = format.trim_start_matches("uint").trim_start_matches("int");
            if digits.len() < format.len() && digits.chars().all(|c| c.is_ascii_digit()) {
                if format.starts_with("uint") && object.get("minimum").and_then(Value::as_u64) == Some(0) {
                    object.remove("minimum");
                }
                object.remove("format");
            }
            object.values_mut().for_each(trim_schema);
        }
        Value::Array(items) => items.iter_mut().for_each(trim_schema),
        _ => {}
    }
}

struct TypedAdapter<T> {
    tool: T,
    spec: ToolSpec,
}

#[async_trait]
impl<T: TypedTool> Tool for TypedAdapter<T> {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: T::Args = serde_json::from_value(input).map_err(|err| ToolError::InvalidArguments {
            tool: T::NAME.to_owned(),
            message: err.to_string(),
        })?;
        self.tool.call(args, ctx).await
    }

    fn timeout(&self) -> Option<Duration> {
        self.tool.timeout()
    }

    fn group(&self) -> Option<&str> {
        T::GROUP
    }
}

/// Wraps a [`TypedTool`] as a shareable [`Tool`].
pub fn typed<T: TypedTool>(tool: T) -> Arc<dyn Tool> {
    let spec = ToolSpec::new(T::NAME, T::DESCRIPTION, schema_of::<T::Args>()).with_annotations(T::ANNOTATIONS);
    Arc::new(TypedAdapter { tool, spec })
}

/// Why a toolkit could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolkitError {
    /// Two tools share a name.
    #[error("two tools are named `{name}`; tool names must be unique")]
    DuplicateName {
        /// The name.
        name: String,
    },
    /// A tool's schema does not compile.
    #[error("the input schema of tool `{name}` is invalid: {message}")]
    BadSchema {
        /// Tool name.
        name: String,
        /// The compiler's words.
        message: String,
    },
}

struct Entry {
    tool: Arc<dyn Tool>,
    validator: jsonschema::Validator,
}

/// The tools of an agent, with compiled argument validators. Immutable once built.
pub struct Toolkit {
    entries: HashMap<String, Entry>,
    specs: Arc<[ToolSpec]>,
    /// Schema checks run so far (see [`argument_checks`](Self::argument_checks)).
    checks: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Toolkit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Toolkit").field("tools", &self.names()).finish()
    }
}

impl Toolkit {
    /// Checks names and compiles every schema.
    ///
    /// # Errors
    /// [`ToolkitError`] on a duplicate name or a schema that does not compile.
    pub fn new(tools: Vec<Arc<dyn Tool>>) -> Result<Self, ToolkitError> {
        let mut entries = HashMap::with_capacity(tools.len());
        let mut specs = Vec::with_capacity(tools.len());
        for tool in tools {
            let spec = tool.spec().clone();
            let accepted = tool.accepted_schema().unwrap_or(&spec.input_schema);
            let validator = jsonschema::validator_for(accepted).map_err(|err| ToolkitError::BadSchema {
                name: spec.name.clone(),
                message: err.to_string(),
            })?;
            if entries.contains_key(&spec.name) {
                return Err(ToolkitError::DuplicateName { name: spec.name });
            }
            entries.insert(spec.name.clone(), Entry { tool, validator });
            specs.push(spec);
        }
        Ok(Self {
            entries,
            specs: specs.into(),
            checks: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The specs offered to the model, in registration order.
    pub fn specs(&self) -> Arc<[ToolSpec]> {
        Arc::clone(&self.specs)
    }

    /// Tool names in registration order.
    pub fn names(&self) -> Vec<&str> {
        self.specs.iter().map(|spec| spec.name.as_str()).collect()
    }

    /// The effect hints of the tool called `name`, if there is one.
    pub fn annotations(&self, name: &str) -> Option<ToolAnnotations> {
        self.entries.get(name).map(|entry| entry.tool.spec().annotations)
    }

    /// The on-demand group of the tool called `name` ([`Tool::group`]), if it has one.
    pub fn group(&self, name: &str) -> Option<&str> {
        self.entries.get(name).and_then(|entry| entry.tool.group())
    }

    /// Whether there are no tools.
    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    /// How many times arguments were checked against a schema since the toolkit was built
    /// (a call's arguments are checked once however many layers ask, unless one edits them).
    pub fn argument_checks(&self) -> u64 {
        self.checks.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The tool named `name`, unchecked.
    pub(crate) fn lookup(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.entries.get(name).map(|entry| &entry.tool)
    }

    /// Looks up a tool and checks `input` against its schema.
    ///
    /// # Errors
    /// [`ToolError::UnknownTool`] or [`ToolError::InvalidArguments`].
    pub fn prepare(&self, name: &str, input: &Value) -> Result<&Arc<dyn Tool>, ToolError> {
        let entry = self.entries.get(name).ok_or_else(|| ToolError::UnknownTool {
            name: name.to_owned(),
            available: self.names().join(", "),
        })?;
        if let Value::String(raw) = input {
            return Err(ToolError::InvalidArguments {
                tool: name.to_owned(),
                message: format!(
                    "arguments must be a JSON object, got text that is not JSON: {}",
                    excerpt(raw, 200)
                ),
            });
        }
        // A `null` argument is an absent one (models send them for optional arguments, whose
        // trimmed schema no longer lists "null"); the tool still gets `input` as sent.
        let without_nulls;
        let checked = match input {
            Value::Object(map) if map.values().any(Value::is_null) => {
                without_nulls = Value::Object(
                    map.iter()
                        .filter(|(_, value)| !value.is_null())
                        .map(|(key, value)| (key.clone(), value.clone()))
                        .collect(),
                );
                &without_nulls
            }
            _ => input,
        };
        self.checks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let problems: Vec<String> = entry
            .validator
            .iter_errors(checked)
            .take(5)
            .map(|err| {
                let at = err.instance_path().to_string();
                if at.is_empty() {
                    err.to_string()
                } else {
                    format!("at {at}: {err}")
                }
            })
            .collect();
        if !problems.is_empty() {
            return Err(ToolError::InvalidArguments {
                tool: name.to_owned(),
                message: problems.join("; "),
            });
        }
        Ok(&entry.tool)
    }
}

/// The arguments of one tool call that passed their schema check, shared by the layers of
/// that call: a layer that asks ([`ActingNext::check`](crate::ActingNext::check)) and the
/// innermost layer check once, and a layer that edits the arguments gets them checked again.
#[derive(Debug, Default)]
pub(crate) struct CheckedCall {
    passed: std::sync::Mutex<Option<(String, Value)>>,
}

impl CheckedCall {
    /// Whether `call`, exactly as it is, passed.
    pub(crate) fn holds(&self, call: &ToolCall) -> bool {
        let passed = self.passed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        passed
            .as_ref()
            .is_some_and(|(name, input)| *name == call.name && *input == call.input)
    }

    /// Records that `call` passed.
    pub(crate) fn record(&self, call: &ToolCall) {
        *self.passed.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some((call.name.clone(), call.input.clone()));
    }
}

/// At most `max` characters of `text`, with `…` when cut. Never splits a character.
pub fn excerpt(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    /// Arguments (this doc is not sent).
    #[derive(Debug, Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Args {
        /// Needed.
        path: String,
        /// Optional.
        #[serde(default)]
        limit: Option<u32>,
        /// Optional text.
        #[serde(default)]
        glob: Option<String>,
        /// A flag.
        #[serde(default)]
        regex: bool,
    }

    struct Probe;

    #[async_trait]
    impl TypedTool for Probe {
        const NAME: &'static str = "probe";
        const DESCRIPTION: &'static str = "Probe.";
        const GROUP: Option<&'static str> = Some("probes");
        type Args = Args;

        async fn call(&self, _args: Args, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
            Ok(ToolOutput::text("ok"))
        }
    }

    #[test]
    fn a_typed_schema_carries_only_what_the_model_needs() {
        let schema = schema_of::<Args>();
        assert_eq!(
            schema,
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Needed."},
                    "limit": {"type": "integer", "description": "Optional."},
                    "glob": {"type": "string", "description": "Optional text."},
                    "regex": {"type": "boolean", "default": false, "description": "A flag."},
                },
                "required": ["path"],
            })
        );
    }

    #[test]
    fn a_null_optional_argument_is_an_absent_one_and_a_null_required_one_is_refused() {
        let tool = typed(Probe);
        assert_eq!(tool.group(), Some("probes"));
        let toolkit = Toolkit::new(vec![tool]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(toolkit.group("probe"), Some("probes"));
        assert!(
            toolkit
                .prepare("probe", &json!({"path": "a", "limit": null, "glob": null}))
                .is_ok()
        );
        assert!(toolkit.prepare("probe", &json!({"path": "a", "limit": 3})).is_ok());
        let refused = [
            json!({"path": null}),
            json!({"path": "a", "limit": "three"}),
            json!({"path": "a", "glob": 1}),
        ];
        for input in refused {
            match toolkit.prepare("probe", &input) {
                Err(ToolError::InvalidArguments { .. }) => {}
                other => panic!("{input}: {:?}", other.map(|_| ())),
            }
        }
    }
}
