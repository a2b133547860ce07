//! The model boundary: [`ChatModel`] streams [`ModelChunk`]s for a [`ChatRequest`]; errors are
//! typed [`ModelError`]s so the loop decides from the variant, never from the text.

use crate::annotations::ToolAnnotations;
use crate::error_kind::ErrorKind;
use crate::message::{Block, Msg, Role, Usage};
use async_trait::async_trait;
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// A boxed error used as a `#[source]`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What the model is told about one tool, plus local [`ToolAnnotations`] (never sent to a
/// provider; the scheduler and policy capabilities read them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Wire name.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub input_schema: Value,
    /// Effect hints (read-only, destructive, …). Unset hints take MCP's cautious defaults.
    #[serde(default, skip_serializing_if = "ToolAnnotations::is_unset")]
    pub annotations: ToolAnnotations,
}

impl ToolSpec {
    /// A spec without annotations (every hint at its cautious default).
    pub fn new(name: impl Into<String>, description: impl Into<String>, input_schema: Value) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            input_schema,
            annotations: ToolAnnotations::new(),
        }
    }

    /// The same spec with `annotations`.
    #[must_use]
    pub fn with_annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.annotations = annotations;
        self
    }

    /// The same spec marked read-only (and so concurrency-safe unless said otherwise).
    #[must_use]
    pub fn read_only(mut self) -> Self {
        self.annotations = self.annotations.read_only();
        self
    }

    /// The same spec marked as reaching only the agent's own environment.
    #[must_use]
    pub fn closed_world(mut self) -> Self {
        self.annotations = self.annotations.closed_world();
        self
    }

    /// The same spec with an explicit concurrency-safety hint.
    #[must_use]
    pub fn concurrency_safe(mut self, safe: bool) -> Self {
        self.annotations = self.annotations.concurrency_safe(safe);
        self
    }
}

/// One part of the system prompt. Parts are joined with a blank line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptPart {
    /// Stable name of the section (for tests and tracing), e.g. `persona`.
    pub name: &'static str,
    /// The text.
    pub text: String,
    /// Whether the part belongs to the stable (cacheable) prefix. Stable parts must come before
    /// volatile ones; providers with explicit caching put their breakpoint after the last one.
    pub stable: bool,
}

/// The system prompt, as ordered parts. Built fresh for every reasoning step by the
/// `system_prompt` middleware pipeline.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SystemPrompt {
    /// Ordered parts.
    pub parts: Vec<PromptPart>,
}

impl SystemPrompt {
    /// A prompt with one stable part.
    pub fn new(base: impl Into<String>) -> Self {
        let mut prompt = Self::default();
        prompt.push_stable("base", base);
        prompt
    }

    /// Appends a part to the stable prefix (before any volatile part).
    pub fn push_stable(&mut self, name: &'static str, text: impl Into<String>) {
        let text = text.into();
        if text.is_empty() {
            return;
        }
        let at = self.parts.iter().position(|p| !p.stable).unwrap_or(self.parts.len());
        self.parts.insert(
            at,
            PromptPart {
                name,
                text,
                stable: true,
            },
        );
    }

    /// Appends a volatile part (per-step content) at the end.
    pub fn push_volatile(&mut self, name: &'static str, text: impl Into<String>) {
        let text = text.into();
        if text.is_empty() {
            return;
        }
        self.parts.push(PromptPart {
            name,
            text,
            stable: false,
        });
    }

    /// Whether there is no text at all.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// The whole prompt as one string.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for part in &self.parts {
            if !out.is_empty() {
                out.push_str("\n\n");
            }
            out.push_str(&part.text);
        }
        out
    }

    /// The stable prefix and the volatile rest, each rendered. Their concatenation with a
    /// blank line between (when both are non-empty) equals [`render`](Self::render).
    pub fn split_stable(&self) -> (String, String) {
        let stable = Self {
            parts: self.parts.iter().filter(|p| p.stable).cloned().collect(),
        };
        let volatile = Self {
            parts: self.parts.iter().filter(|p| !p.stable).cloned().collect(),
        };
        (stable.render(), volatile.render())
    }
}

/// How the model may use tools.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// The model must not call tools.
    None,
    /// The model must call some tool.
    Required,
}

/// The shape the answer must take, asked of the provider natively (OpenAI `response_format`,
/// Gemini `responseMimeType` + `responseJsonSchema`). Only sent to a model whose
/// [`ChatModel::native_response_format`] is `true`; the caller still validates the answer,
/// because a provider's constrained decoding is a promise, not a proof.
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseFormat {
    /// Any JSON object (OpenAI `json_object`).
    JsonObject,
    /// A JSON document matching `schema`.
    JsonSchema {
        /// A name for the schema (OpenAI requires one: letters, digits, `_` and `-`).
        name: String,
        /// The JSON Schema.
        schema: Value,
        /// Ask the provider to follow the schema exactly (OpenAI `strict`).
        strict: bool,
    },
}

/// One request to a model.
#[derive(Debug, Clone, Default)]
pub struct ChatRequest {
    /// The system prompt.
    pub system: SystemPrompt,
    /// The conversation, oldest first. Shared, so building a request never copies history.
    pub messages: Vec<Arc<Msg>>,
    /// Tools offered.
    pub tools: Arc<[ToolSpec]>,
    /// Tool choice.
    pub tool_choice: ToolChoice,
    /// Output token cap.
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Provider-specific options passed through to the request body (e.g. `enable_thinking`).
    pub extra: BTreeMap<String, Value>,
    /// The answer's required shape, for models that constrain it natively (see
    /// [`ResponseFormat`]); models that cannot ignore it.
    pub response_format: Option<ResponseFormat>,
    /// Whether anyone watches the chunks as they arrive. When `false` a client may use the
    /// provider's cheaper non-streaming endpoint and return the whole response as chunks.
    pub stream: bool,
}

/// Why the model stopped. Persisted on assistant messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// Natural end.
    Stop,
    /// It requested tool calls.
    ToolCalls,
    /// It hit the token cap.
    Length,
    /// A content filter stopped it.
    ContentFilter,
    /// Anything else the provider said.
    Other(String),
}

impl FinishReason {
    /// The snake_case name used in events and logs (`stop`, `length`, …; the provider's own
    /// word for [`Other`](Self::Other)).
    pub fn as_str(&self) -> &str {
        match self {
            Self::Stop => "stop",
            Self::ToolCalls => "tool_calls",
            Self::Length => "length",
            Self::ContentFilter => "content_filter",
            Self::Other(raw) => raw,
        }
    }
}

/// One streamed piece of a model response.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ModelChunk {
    /// More answer text.
    TextDelta(String),
    /// More reasoning text; `signature` arrives (once) when the provider signs the block.
    ThinkingDelta {
        /// Reasoning text.
        text: String,
        /// Provider signature.
        signature: Option<String>,
    },
    /// Part of a tool call. The first delta of an index carries the id and the name; later
    /// ones append argument text.
    ToolCallDelta {
        /// Position of the call in this response.
        index: usize,
        /// Call id, when known.
        id: Option<String>,
        /// Tool name, when known.
        name: Option<String>,
        /// Argument JSON text to append.
        arguments: String,
    },
    /// Token usage (may arrive more than once; the last value wins per field when non-zero).
    Usage(Usage),
    /// Why the response ended.
    Finish(FinishReason),
    /// Something the caller should hear about that is not part of the answer (a model that
    /// failed and the fallback that answers instead). The loop turns it into a warning event;
    /// it never reaches the message.
    Notice {
        /// A stable snake_case code, e.g. `model_fallback`.
        code: String,
        /// What happened, for people.
        message: String,
    },
}

/// A boxed stream of chunks.
pub type ModelStream = Pin<Box<dyn Stream<Item = Result<ModelChunk, ModelError>> + Send>>;

/// A complete model response.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelResponse {
    /// The assistant message (text, thinking and tool-use blocks).
    pub message: Msg,
    /// Usage, when reported.
    pub usage: Option<Usage>,
    /// Why it ended.
    pub finish_reason: Option<FinishReason>,
}

/// Why a model call failed. The loop decides from the variant, never from the text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The prompt did not fit the context window. The harness compacts once and retries once.
    #[error("context window exceeded: {message}")]
    ContextOverflow {
        /// The provider's words.
        message: String,
    },
    /// 429 or "overloaded". Retried after `retry_after` when given, else with backoff.
    #[error("rate limited")]
    RateLimited {
        /// How long the provider asked us to wait.
        retry_after: Option<Duration>,
    },
    /// Connect failure, 5xx, or a stream cut mid-response. Retried with backoff.
    #[error("transient provider failure")]
    Transient(#[source] BoxError),
    /// Missing or rejected credentials. Never retried.
    #[error("authentication rejected (status {status}): {message}")]
    Auth {
        /// HTTP status.
        status: u16,
        /// The provider's words.
        message: String,
    },
    /// The provider refused the request as malformed: a bug here or in the caller. Not retried.
    #[error("invalid request (status {status}): {message}")]
    InvalidRequest {
        /// HTTP status.
        status: u16,
        /// The provider's words.
        message: String,
    },
    /// The response could not be decoded (a malformed chunk). Not retried.
    #[error("malformed model response: {detail}")]
    Malformed {
        /// What was wrong, with a short excerpt.
        detail: String,
    },
    /// No response (or no further byte of one) arrived in time. Retried with backoff.
    #[error("model call timed out after {after:?}")]
    Timeout {
        /// The limit that was exceeded.
        after: Duration,
    },
    /// The call's cancellation token fired.
    #[error("model call cancelled")]
    Cancelled,
}

impl ModelError {
    /// Whether retrying the same request may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::RateLimited { .. } | Self::Transient(_) | Self::Timeout { .. }
        )
    }

    /// The class of this failure (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::ContextOverflow { .. } => ErrorKind::Overflow,
            Self::RateLimited { .. } => ErrorKind::RateLimit,
            Self::Auth { .. } => ErrorKind::Auth,
            Self::Timeout { .. } => ErrorKind::Timeout,
            Self::Cancelled => ErrorKind::Cancelled,
            Self::Transient(_) | Self::InvalidRequest { .. } | Self::Malformed { .. } => ErrorKind::Provider,
        }
    }

    /// A transient error from any error value.
    pub fn transient(err: impl Into<BoxError>) -> Self {
        Self::Transient(err.into())
    }
}

/// A language model.
///
/// Implementations speak one wire protocol; the loop only sees chunks. `call` collects
/// `stream`; override it only when the provider has a cheaper non-streaming path.
#[async_trait]
pub trait ChatModel: Send + Sync + 'static {
    /// The model's name, for tracing and events.
    fn name(&self) -> &str;

    /// The provider, as OpenTelemetry's `gen_ai.provider.name` names it (`openai`,
    /// `anthropic`, `gcp.gemini`, ...); `unknown` unless the client says.
    fn provider(&self) -> &str {
        "unknown"
    }

    /// Starts a streamed response.
    ///
    /// # Errors
    /// A [`ModelError`] when the request could not be started (HTTP status errors arrive here).
    async fn stream(&self, request: ChatRequest) -> Result<ModelStream, ModelError>;

    /// The model's context window in tokens, when known (a table of known models or a
    /// configured override). `None` means unknown: nothing may be refused for its size.
    /// Wrappers forward their inner model's value.
    fn context_window(&self) -> Option<u64> {
        None
    }

    /// Whether the model honours [`ChatRequest::response_format`] natively (constrained
    /// decoding on the provider's side). `false` (the default) means the field is ignored and
    /// a caller wanting structured output must use another way (a tool call). Wrappers
    /// forward their inner model's value.
    fn native_response_format(&self) -> bool {
        false
    }

    /// Whether the model takes images ([`Block::Image`](crate::Block::Image) in user
    /// messages). `false` (the default) means a caller should refuse them rather than send
    /// them. Wrappers forward their inner model's value.
    fn accepts_images(&self) -> bool {
        false
    }

    /// Runs a request to completion.
    ///
    /// # Errors
    /// A [`ModelError`] from starting or reading the stream.
    async fn call(&self, request: ChatRequest) -> Result<ModelResponse, ModelError> {
        collect(self.stream(request).await?).await
    }
}

/// A shared model is a model (so wrappers such as a context-window override can hold an
/// `Arc<dyn ChatModel>`).
#[async_trait]
impl<M: ChatModel + ?Sized> ChatModel for Arc<M> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn provider(&self) -> &str {
        (**self).provider()
    }

    fn context_window(&self) -> Option<u64> {
        (**self).context_window()
    }

    fn native_response_format(&self) -> bool {
        (**self).native_response_format()
    }

    fn accepts_images(&self) -> bool {
        (**self).accepts_images()
    }

    async fn stream(&self, request: ChatRequest) -> Result<ModelStream, ModelError> {
        (**self).stream(request).await
    }

    async fn call(&self, request: ChatRequest) -> Result<ModelResponse, ModelError> {
        (**self).call(request).await
    }
}

/// Drains a chunk stream into a [`ModelResponse`].
///
/// # Errors
/// The first error the stream yields.
pub async fn collect(mut stream: ModelStream) -> Result<ModelResponse, ModelError> {
    let mut acc = ResponseAccumulator::default();
    while let Some(chunk) = stream.next().await {
        acc.push(&chunk?);
    }
    Ok(acc.finish())
}

#[derive(Debug, Default)]
struct PartialCall {
    id: Option<String>,
    name: Option<String>,
    arguments: String,
}

/// Folds [`ModelChunk`]s into a [`ModelResponse`]. Tool calls are grouped by index; a call
/// whose id never arrived gets a generated one.
#[derive(Debug, Default)]
pub struct ResponseAccumulator {
    text: String,
    thinking: String,
    signature: Option<String>,
    calls: BTreeMap<usize, PartialCall>,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
}

impl ResponseAccumulator {
    /// Adds one chunk.
    pub fn push(&mut self, chunk: &ModelChunk) {
        match chunk {
            ModelChunk::TextDelta(text) => self.text.push_str(text),
            ModelChunk::ThinkingDelta { text, signature } => {
                self.thinking.push_str(text);
                if signature.is_some() {
                    self.signature.clone_from(signature);
                }
            }
            ModelChunk::ToolCallDelta {
                index,
                id,
                name,
                arguments,
            } => {
                let call = self.calls.entry(*index).or_default();
                if call.id.is_none() {
                    call.id.clone_from(id);
                }
                if let Some(name) = name {
                    match &mut call.name {
                        // Some servers stream the name in pieces.
                        Some(existing) if !existing.is_empty() && existing != name => existing.push_str(name),
                        _ => call.name = Some(name.clone()),
                    }
                }
                call.arguments.push_str(arguments);
            }
            ModelChunk::Usage(usage) => {
                let merged = self.usage.get_or_insert_with(Usage::default);
                for (into, from) in [
                    (&mut merged.input_tokens, usage.input_tokens),
                    (&mut merged.output_tokens, usage.output_tokens),
                    (&mut merged.cache_read_tokens, usage.cache_read_tokens),
                    (&mut merged.cache_write_tokens, usage.cache_write_tokens),
                ] {
                    if from != 0 {
                        *into = from;
                    }
                }
            }
            ModelChunk::Finish(reason) => self.finish = Some(reason.clone()),
            ModelChunk::Notice { .. } => {}
        }
    }

    /// The assembled response.
    pub fn finish(self) -> ModelResponse {
        let mut content = Vec::new();
        if !self.thinking.is_empty() || self.signature.is_some() {
            content.push(Block::Thinking {
                thinking: self.thinking,
                signature: self.signature,
            });
        }
        if !self.text.is_empty() {
            content.push(Block::Text { text: self.text });
        }
        for (index, call) in self.calls {
            let input = parse_arguments(&call.arguments);
            content.push(Block::ToolUse {
                id: call
                    .id
                    .filter(|id| !id.is_empty())
                    .unwrap_or_else(|| format!("call_{}_{index}", short_id())),
                name: call.name.unwrap_or_default(),
                input,
            });
        }
        let mut message = Msg::new(Role::Assistant, content);
        message.usage = self.usage;
        message.finish_reason.clone_from(&self.finish);
        ModelResponse {
            message,
            usage: self.usage,
            finish_reason: self.finish,
        }
    }
}

/// Parses tool-call argument text. Empty text is `{}`; text that is not JSON is kept as a
/// JSON string, so validation can tell the model what was wrong.
pub fn parse_arguments(text: &str) -> Value {
    if text.trim().is_empty() {
        return Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

fn short_id() -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    id[..12].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accumulator_groups_tool_calls_by_index_and_keeps_order() {
        let mut acc = ResponseAccumulator::default();
        for chunk in [
            ModelChunk::ThinkingDelta {
                text: "think".into(),
                signature: None,
            },
            ModelChunk::TextDelta("a".into()),
            ModelChunk::ToolCallDelta {
                index: 1,
                id: Some("c2".into()),
                name: Some("b".into()),
                arguments: "{\"x\"".into(),
            },
            ModelChunk::ToolCallDelta {
                index: 0,
                id: Some("c1".into()),
                name: Some("a".into()),
                arguments: "{}".into(),
            },
            ModelChunk::ToolCallDelta {
                index: 1,
                id: None,
                name: None,
                arguments: ":1}".into(),
            },
            ModelChunk::Usage(Usage {
                input_tokens: 5,
                ..Usage::default()
            }),
            ModelChunk::Usage(Usage {
                output_tokens: 2,
                ..Usage::default()
            }),
            ModelChunk::Finish(FinishReason::ToolCalls),
        ] {
            acc.push(&chunk);
        }
        let response = acc.finish();
        let calls: Vec<_> = response
            .message
            .tool_calls()
            .map(|c| (c.id.to_owned(), c.input.clone()))
            .collect();
        assert_eq!(
            calls,
            [
                ("c1".to_owned(), serde_json::json!({})),
                ("c2".to_owned(), serde_json::json!({"x": 1}))
            ]
        );
        assert_eq!(
            response.usage,
            Some(Usage {
                input_tokens: 5,
                output_tokens: 2,
                ..Usage::default()
            })
        );
        assert_eq!(response.message.text(), "a");
    }

    #[test]
    fn stable_parts_stay_before_volatile_ones() {
        let mut prompt = SystemPrompt::new("base");
        prompt.push_volatile("facts", "date");
        prompt.push_stable("persona", "persona");
        assert_eq!(prompt.render(), "base\n\npersona\n\ndate");
        assert_eq!(prompt.split_stable(), ("base\n\npersona".to_owned(), "date".to_owned()));
    }

    #[test]
    fn non_json_arguments_are_kept_as_text() {
        assert_eq!(parse_arguments("{oops"), Value::String("{oops".into()));
        assert_eq!(parse_arguments(""), serde_json::json!({}));
    }
}
