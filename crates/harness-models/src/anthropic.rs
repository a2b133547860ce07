//! [`AnthropicClient`]: the Anthropic Messages protocol (`POST {base}/v1/messages`).
//!
//! What differs from OpenAI and is handled here: the system prompt is a list of blocks with a
//! `cache_control` breakpoint after the stable prefix (and, by default, one on the last message
//! so the next step reads the history from cache); tool results travel in user messages, so
//! consecutive tool messages merge into one; thinking blocks carry a signature that must go back
//! unchanged; `max_tokens` is required.

use crate::classify::{Dialect, classify_stream_error, excerpt};
use crate::secret::Secret;
use crate::spec::ModelConfigError;
use crate::sse::SseEvent;
use crate::transport::{self, EventDecoder, WireError, malformed};
use async_trait::async_trait;
use harness_core::{
    Block, ChatModel, ChatRequest, FinishReason, MediaSource, ModelChunk, ModelError, ModelResponse, ModelStream, Msg,
    ResponseAccumulator, Role, ToolChoice, ToolSpec, Usage,
};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};

/// The `anthropic-version` header value.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// `max_tokens` when the request sets none (the API requires one).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// How to reach one Anthropic model.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AnthropicConfig {
    /// The model id, e.g. `claude-sonnet-4-5`.
    pub model: String,
    /// The API base without `/v1`, e.g. `https://api.anthropic.com`.
    pub base_url: String,
    /// Sent as `x-api-key` when present.
    pub api_key: Option<Secret>,
    /// `max_tokens` when the request sets none.
    pub default_max_tokens: u32,
    /// Also put a cache breakpoint on the last message, so the next step (which re-sends the
    /// same history plus new messages) reads the conversation from the prompt cache.
    pub cache_conversation: bool,
    /// No byte for this long (response headers or between two body reads) ends the
    /// attempt with a timeout error naming the base URL (default
    /// [`DEFAULT_IDLE_TIMEOUT`](crate::DEFAULT_IDLE_TIMEOUT)).
    pub idle_timeout: std::time::Duration,
    /// Where `base_url` was set (e.g. `set by OPENAI_BASE_URL`), named after it in connection
    /// errors.
    pub base_url_origin: Option<String>,
}

impl AnthropicConfig {
    /// A config for `model` at `base_url`, without a key.
    pub fn new(model: impl Into<String>, base_url: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            base_url: base_url.into(),
            api_key: None,
            default_max_tokens: DEFAULT_MAX_TOKENS,
            cache_conversation: true,
            idle_timeout: crate::DEFAULT_IDLE_TIMEOUT,
            base_url_origin: None,
        }
    }

    /// The same config with an API key.
    #[must_use]
    pub fn api_key(mut self, key: Secret) -> Self {
        self.api_key = Some(key);
        self
    }
}

/// A [`ChatModel`] speaking Anthropic Messages over HTTP.
#[derive(Debug, Clone)]
pub struct AnthropicClient {
    config: AnthropicConfig,
    http: reqwest::Client,
    url: String,
    headers: HeaderMap,
    /// Configured context window; `None` = the table's value for the model.
    context_window: Option<u64>,
    /// The base URL and its origin, for connection errors.
    target: String,
}

impl AnthropicClient {
    /// A client with its own connection pool.
    ///
    /// # Errors
    /// [`ModelConfigError`] when the base URL is not http(s), the key cannot be a header value,
    /// or the HTTP client cannot be built.
    pub fn new(config: AnthropicConfig) -> Result<Self, ModelConfigError> {
        let http = transport::http_client().map_err(ModelConfigError::Http)?;
        Self::with_http_client(config, http)
    }

    /// A client sharing an existing reqwest client.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_http_client(config: AnthropicConfig, http: reqwest::Client) -> Result<Self, ModelConfigError> {
        let base = crate::spec::check_base_url(&config.base_url)?;
        let base = base.strip_suffix("/v1").unwrap_or(base);
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        if let Some(key) = &config.api_key {
            let mut value = HeaderValue::from_str(key.expose()).map_err(|_| ModelConfigError::InvalidKey)?;
            value.set_sensitive(true);
            headers.insert(HeaderName::from_static("x-api-key"), value);
        }
        Ok(Self {
            url: format!("{base}/v1/messages"),
            target: transport::describe_target(base, config.base_url_origin.as_deref()),
            config,
            http,
            headers,
            context_window: None,
        })
    }

    fn endpoint(&self) -> transport::Endpoint<'_> {
        transport::Endpoint {
            http: &self.http,
            url: &self.url,
            headers: &self.headers,
            dialect: Dialect::Anthropic,
            decode: decode_response,
            idle_timeout: self.config.idle_timeout,
            target: &self.target,
        }
    }

    /// Overrides the context window the client reports (default: the table of known
    /// models, [`known_context_window`](crate::known_context_window)).
    #[must_use]
    pub fn with_context_window(mut self, tokens: u64) -> Self {
        self.context_window = Some(tokens);
        self
    }

    /// The client's settings.
    pub fn config(&self) -> &AnthropicConfig {
        &self.config
    }

    /// The JSON body this client sends for `request` (exposed for tests and benchmarks).
    ///
    /// # Errors
    /// [`ModelError::InvalidRequest`] if the request cannot be serialized.
    pub fn request_body(&self, request: &ChatRequest, stream: bool) -> Result<Vec<u8>, ModelError> {
        let (stable, volatile) = request.system.split_stable();
        let body = Body {
            config: &self.config,
            request,
            system: system_blocks(&stable, &volatile),
            messages: wire_messages(&request.messages, self.config.cache_conversation),
            stream,
        };
        serde_json::to_vec(&body).map_err(|err| ModelError::InvalidRequest {
            status: 0,
            message: format!("cannot serialize the request: {err}"),
        })
    }
}

#[async_trait]
impl ChatModel for AnthropicClient {
    fn name(&self) -> &str {
        &self.config.model
    }

    /// Every Claude model since Claude 3 takes images.
    fn accepts_images(&self) -> bool {
        true
    }

    fn provider(&self) -> &str {
        "anthropic"
    }

    fn context_window(&self) -> Option<u64> {
        self.context_window
            .or_else(|| crate::window::known_context_window(&self.config.model))
    }

    async fn stream(&self, request: ChatRequest) -> Result<ModelStream, ModelError> {
        // Nobody watches the chunks (`request.stream` is false for a plain `call`): ask for
        // one JSON response, which is cheaper to produce and decode, and replay it as chunks.
        let body = self.request_body(&request, request.stream)?;
        tracing::debug!(model = %self.config.model, messages = request.messages.len(), body_bytes = body.len(), "messages stream");
        self.endpoint().stream::<StreamDecoder>(body).await
    }

    async fn call(&self, request: ChatRequest) -> Result<ModelResponse, ModelError> {
        let body = self.request_body(&request, false)?;
        tracing::debug!(model = %self.config.model, messages = request.messages.len(), body_bytes = body.len(), "messages call");
        self.endpoint().call(body).await
    }
}

// ---------------------------------------------------------------------------------------------
// Request encoding.

#[derive(Serialize)]
struct CacheControl {
    r#type: &'static str,
}

const EPHEMERAL: CacheControl = CacheControl { r#type: "ephemeral" };

#[derive(Serialize)]
struct SystemBlock<'a> {
    r#type: &'static str,
    text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

/// The stable prefix (with the breakpoint) and the volatile rest, as text blocks.
fn system_blocks<'a>(stable: &'a str, volatile: &'a str) -> Vec<SystemBlock<'a>> {
    let mut blocks = Vec::with_capacity(2);
    if !stable.is_empty() {
        blocks.push(SystemBlock {
            r#type: "text",
            text: stable,
            cache_control: Some(EPHEMERAL),
        });
    }
    if !volatile.is_empty() {
        blocks.push(SystemBlock {
            r#type: "text",
            text: volatile,
            cache_control: None,
        });
    }
    blocks
}

struct Body<'a> {
    config: &'a AnthropicConfig,
    request: &'a ChatRequest,
    system: Vec<SystemBlock<'a>>,
    messages: Vec<WireMessage<'a>>,
    stream: bool,
}

impl Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let request = self.request;
        let extra = &request.extra;
        let mut map = serializer.serialize_map(None)?;
        macro_rules! put {
            ($key:expr, $value:expr) => {
                if !extra.contains_key($key) {
                    map.serialize_entry($key, $value)?;
                }
            };
        }
        put!("model", &self.config.model);
        put!(
            "max_tokens",
            &request.max_tokens.unwrap_or(self.config.default_max_tokens)
        );
        if !self.system.is_empty() {
            put!("system", &self.system);
        }
        put!("messages", &self.messages);
        if !request.tools.is_empty() {
            put!("tools", &Tools(&request.tools));
            match (&request.tool_choice, &*request.tools) {
                // One tool that must be called: force that tool by name (how structured output
                // is asked of Claude).
                (ToolChoice::Required, [only]) => {
                    put!("tool_choice", &serde_json::json!({"type": "tool", "name": only.name}))
                }
                (choice, _) => {
                    let choice = match choice {
                        ToolChoice::Auto => "auto",
                        ToolChoice::None => "none",
                        ToolChoice::Required => "any",
                    };
                    put!("tool_choice", &TypeOnly { r#type: choice });
                }
            }
        }
        if let Some(temperature) = request.temperature {
            put!("temperature", &temperature);
        }
        put!("stream", &self.stream);
        for (key, value) in extra {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

#[derive(Serialize)]
struct TypeOnly {
    r#type: &'static str,
}

struct Tools<'a>(&'a [ToolSpec]);

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Tool<'a> {
            name: &'a str,
            description: &'a str,
            input_schema: &'a Value,
        }
        serializer.collect_seq(self.0.iter().map(|tool| Tool {
            name: &tool.name,
            description: &tool.description,
            input_schema: &tool.input_schema,
        }))
    }
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Vec<WireBlock<'a>>,
    /// Whether the message was built from tool results (so a following tool or user message
    /// may merge into it).
    #[serde(skip)]
    from_tools: bool,
}

struct WireBlock<'a> {
    kind: BlockKind<'a>,
    cache_control: Option<CacheControl>,
}

enum BlockKind<'a> {
    Text {
        text: Cow<'a, str>,
    },
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Cow<'a, Value>,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: Vec<WireBlock<'a>>,
        is_error: bool,
    },
    Image {
        source: ImageSource<'a>,
    },
}

// Written by hand (not `#[serde(flatten)]` over a tagged enum): this runs once per block of a
// long history, and the derived flatten path is several times slower.
impl Serialize for WireBlock<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        match &self.kind {
            BlockKind::Text { text } => {
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", text)?;
            }
            BlockKind::Thinking { thinking, signature } => {
                map.serialize_entry("type", "thinking")?;
                map.serialize_entry("thinking", thinking)?;
                map.serialize_entry("signature", signature)?;
            }
            BlockKind::ToolUse { id, name, input } => {
                map.serialize_entry("type", "tool_use")?;
                map.serialize_entry("id", id)?;
                map.serialize_entry("name", name)?;
                map.serialize_entry("input", input)?;
            }
            BlockKind::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => {
                map.serialize_entry("type", "tool_result")?;
                map.serialize_entry("tool_use_id", tool_use_id)?;
                if !content.is_empty() {
                    map.serialize_entry("content", content)?;
                }
                if *is_error {
                    map.serialize_entry("is_error", &true)?;
                }
            }
            BlockKind::Image { source } => {
                map.serialize_entry("type", "image")?;
                map.serialize_entry("source", source)?;
            }
        }
        if let Some(cache_control) = &self.cache_control {
            map.serialize_entry("cache_control", cache_control)?;
        }
        map.end()
    }
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ImageSource<'a> {
    Base64 { media_type: &'a str, data: &'a str },
    Url { url: &'a str },
}

fn block(kind: BlockKind<'_>) -> WireBlock<'_> {
    WireBlock {
        kind,
        cache_control: None,
    }
}

/// Media as a native block where the protocol has one, else a text stand-in.
fn media_block<'a>(kind: &str, source: &'a MediaSource, name: Option<&str>) -> WireBlock<'a> {
    let text = match (kind, source, name) {
        ("image", MediaSource::Base64 { media_type, data }, _) => {
            return block(BlockKind::Image {
                source: ImageSource::Base64 { media_type, data },
            });
        }
        ("image", MediaSource::Url { url }, _) => {
            return block(BlockKind::Image {
                source: ImageSource::Url { url },
            });
        }
        (_, _, Some(name)) => format!("[{kind}: {name}]"),
        (_, MediaSource::Path { path }, None) => format!("[{kind}: {path}]"),
        (_, MediaSource::Url { url }, None) => format!("[{kind}: {url}]"),
        (_, MediaSource::Base64 { media_type, .. }, None) => format!("[{kind}: inline {media_type}]"),
    };
    block(BlockKind::Text { text: Cow::Owned(text) })
}

/// The blocks of `content` that may appear in a message of the given side.
fn content_blocks(content: &[Block], assistant: bool) -> Vec<WireBlock<'_>> {
    let mut out = Vec::with_capacity(content.len());
    push_content_blocks(content, assistant, &mut out);
    out
}

/// Appends the blocks of `content` that may appear in a message of the given side.
fn push_content_blocks<'a>(content: &'a [Block], assistant: bool, out: &mut Vec<WireBlock<'a>>) {
    for item in content {
        match item {
            // The API rejects empty text blocks.
            Block::Text { text } if !text.is_empty() => out.push(block(BlockKind::Text {
                text: Cow::Borrowed(text),
            })),
            // Only signed thinking can go back; unsigned thinking, or thinking signed by
            // Gemini, came from another provider.
            Block::Thinking {
                thinking,
                signature: Some(signature),
            } if assistant && !signature.starts_with(crate::gemini::SIGNATURE_PREFIX) => {
                out.push(block(BlockKind::Thinking { thinking, signature }));
            }
            Block::ToolUse { id, name, input } if assistant => out.push(block(BlockKind::ToolUse {
                id,
                name,
                input: match input {
                    Value::Object(_) => Cow::Borrowed(input),
                    // The API wants an object; keep argument text that was not one visible.
                    other => Cow::Owned(serde_json::json!({ "arguments": other })),
                },
            })),
            Block::Image { source } if !assistant => out.push(media_block("image", source, None)),
            Block::Audio { source } if !assistant => out.push(media_block("audio", source, None)),
            Block::File { source, name } if !assistant => out.push(media_block("file", source, name.as_deref())),
            _ => {}
        }
    }
}

fn tool_result_blocks(content: &[Block]) -> impl Iterator<Item = WireBlock<'_>> {
    content.iter().filter_map(|item| match item {
        Block::ToolResult {
            tool_use_id,
            content,
            is_error,
        } => Some(block(BlockKind::ToolResult {
            tool_use_id,
            content: content_blocks(content, false),
            is_error: *is_error,
        })),
        _ => None,
    })
}

/// Maps the history to alternating user/assistant messages: tool results become user
/// messages of `tool_result` blocks (merged with the tool results and user text that follow),
/// system messages in the history become user text.
fn wire_messages(messages: &[std::sync::Arc<Msg>], cache_last: bool) -> Vec<WireMessage<'_>> {
    let mut out: Vec<WireMessage<'_>> = Vec::with_capacity(messages.len());
    for msg in messages {
        let assistant = msg.role == Role::Assistant;
        let mut content: Vec<WireBlock<'_>> = Vec::with_capacity(msg.content.len());
        content.extend(tool_result_blocks(&msg.content));
        let has_results = !content.is_empty();
        push_content_blocks(&msg.content, assistant, &mut content);
        if content.is_empty() {
            continue;
        }
        let role = if assistant { "assistant" } else { "user" };
        match out.last_mut() {
            // Tool results answer the assistant turn before them; what follows them on the
            // user side joins the same message (results first, as the API requires).
            Some(last) if last.role == "user" && role == "user" && last.from_tools => {
                last.content.extend(content);
                last.from_tools = has_results || msg.role == Role::Tool;
            }
            _ => out.push(WireMessage {
                role,
                content,
                from_tools: has_results,
            }),
        }
    }
    if cache_last
        && let Some(last) = out.last_mut().and_then(|m| m.content.last_mut())
        && !matches!(last.kind, BlockKind::Thinking { .. })
    {
        last.cache_control = Some(EPHEMERAL);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Response decoding.

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
}

impl WireUsage {
    /// Anthropic counts cached prompt tokens apart from `input_tokens`; [`Usage`] includes them.
    fn to_usage(&self) -> Usage {
        let read = self.cache_read_input_tokens.unwrap_or(0);
        let write = self.cache_creation_input_tokens.unwrap_or(0);
        let input = self.input_tokens.unwrap_or(0);
        Usage {
            input_tokens: if input + read + write == 0 {
                0
            } else {
                input + read + write
            },
            output_tokens: self.output_tokens.unwrap_or(0),
            cache_read_tokens: read,
            cache_write_tokens: write,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireContent {
    Text {
        #[serde(default)]
        text: String,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
        #[serde(default)]
        signature: String,
    },
    ToolUse {
        #[serde(default)]
        id: String,
        #[serde(default)]
        name: String,
        #[serde(default)]
        input: Value,
    },
    /// `redacted_thinking`, `server_tool_use`, citations… are not modelled.
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireDelta {
    TextDelta {
        #[serde(default)]
        text: String,
    },
    InputJsonDelta {
        #[serde(default)]
        partial_json: String,
    },
    ThinkingDelta {
        #[serde(default)]
        thinking: String,
    },
    SignatureDelta {
        #[serde(default)]
        signature: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireMessageStart {
    usage: Option<WireUsage>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireMessageDelta {
    stop_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireEvent {
    MessageStart {
        #[serde(default)]
        message: WireMessageStart,
    },
    ContentBlockStart {
        #[serde(default)]
        index: usize,
        content_block: WireContent,
    },
    ContentBlockDelta {
        #[serde(default)]
        index: usize,
        delta: WireDelta,
    },
    ContentBlockStop,
    MessageDelta {
        #[serde(default)]
        delta: WireMessageDelta,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop,
    Ping,
    Error,
    #[serde(other)]
    Other,
}

fn stop_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "tool_use" => FinishReason::ToolCalls,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "refusal" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

/// The arguments of a `tool_use` block that arrived whole (non-streaming, or a start block
/// with a non-empty input).
fn input_text(input: &Value) -> String {
    match input {
        Value::Null => String::new(),
        Value::Object(map) if map.is_empty() => String::new(),
        other => other.to_string(),
    }
}

/// Decodes Messages stream events. Content blocks are numbered across kinds; tool calls are
/// renumbered 0, 1, … in arrival order.
#[derive(Debug, Default)]
struct StreamDecoder {
    tool_index: HashMap<usize, usize>,
    stopped: bool,
}

impl EventDecoder for StreamDecoder {
    fn event(&mut self, event: &SseEvent, out: &mut VecDeque<ModelChunk>) -> Result<bool, ModelError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(false);
        }
        let parsed: WireEvent = serde_json::from_str(data).map_err(|err| malformed("a stream event", &err, data))?;
        match parsed {
            WireEvent::MessageStart { message } => {
                if let Some(usage) = message.usage {
                    out.push_back(ModelChunk::Usage(usage.to_usage()));
                }
            }
            WireEvent::ContentBlockStart { index, content_block } => match content_block {
                WireContent::Text { text } if !text.is_empty() => out.push_back(ModelChunk::TextDelta(text)),
                WireContent::Thinking { thinking, signature } if !thinking.is_empty() || !signature.is_empty() => {
                    out.push_back(ModelChunk::ThinkingDelta {
                        text: thinking,
                        signature: (!signature.is_empty()).then_some(signature),
                    });
                }
                WireContent::ToolUse { id, name, input } => {
                    let next = self.tool_index.len();
                    let call = *self.tool_index.entry(index).or_insert(next);
                    out.push_back(ModelChunk::ToolCallDelta {
                        index: call,
                        id: Some(id),
                        name: Some(name),
                        arguments: input_text(&input),
                    });
                }
                _ => {}
            },
            WireEvent::ContentBlockDelta { index, delta } => match delta {
                WireDelta::TextDelta { text } if !text.is_empty() => out.push_back(ModelChunk::TextDelta(text)),
                WireDelta::ThinkingDelta { thinking } if !thinking.is_empty() => {
                    out.push_back(ModelChunk::ThinkingDelta {
                        text: thinking,
                        signature: None,
                    });
                }
                WireDelta::SignatureDelta { signature } if !signature.is_empty() => {
                    out.push_back(ModelChunk::ThinkingDelta {
                        text: String::new(),
                        signature: Some(signature),
                    });
                }
                WireDelta::InputJsonDelta { partial_json } if !partial_json.is_empty() => {
                    let Some(&call) = self.tool_index.get(&index) else {
                        return Err(ModelError::Malformed {
                            detail: format!(
                                "input_json_delta for content block {index}, which is not a tool_use block: {}",
                                excerpt(data, 200)
                            ),
                        });
                    };
                    out.push_back(ModelChunk::ToolCallDelta {
                        index: call,
                        id: None,
                        name: None,
                        arguments: partial_json,
                    });
                }
                _ => {}
            },
            WireEvent::MessageDelta { delta, usage } => {
                if let Some(reason) = delta.stop_reason.filter(|r| !r.is_empty()) {
                    out.push_back(ModelChunk::Finish(stop_reason(&reason)));
                }
                if let Some(usage) = usage {
                    out.push_back(ModelChunk::Usage(usage.to_usage()));
                }
            }
            WireEvent::MessageStop => {
                self.stopped = true;
                return Ok(true);
            }
            WireEvent::Error => return Err(classify_stream_error(Dialect::Anthropic, data)),
            WireEvent::ContentBlockStop | WireEvent::Ping | WireEvent::Other => {}
        }
        Ok(false)
    }

    fn end_of_body(&mut self) -> Result<(), ModelError> {
        if self.stopped {
            Ok(())
        } else {
            Err(ModelError::transient(WireError::Incomplete))
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireResponse {
    r#type: String,
    content: Vec<WireContent>,
    stop_reason: Option<String>,
    usage: Option<WireUsage>,
}

/// Decodes a complete (non-streaming) Messages response.
fn decode_response(body: &[u8]) -> Result<ModelResponse, ModelError> {
    let text = String::from_utf8_lossy(body);
    let response: WireResponse = serde_json::from_str(&text).map_err(|err| malformed("the response", &err, &text))?;
    if response.r#type == "error" {
        return Err(classify_stream_error(Dialect::Anthropic, &text));
    }
    let mut acc = ResponseAccumulator::default();
    let mut calls = 0;
    for content in response.content {
        match content {
            WireContent::Text { text } => acc.push(&ModelChunk::TextDelta(text)),
            WireContent::Thinking { thinking, signature } => acc.push(&ModelChunk::ThinkingDelta {
                text: thinking,
                signature: (!signature.is_empty()).then_some(signature),
            }),
            WireContent::ToolUse { id, name, input } => {
                acc.push(&ModelChunk::ToolCallDelta {
                    index: calls,
                    id: Some(id),
                    name: Some(name),
                    arguments: input_text(&input),
                });
                calls += 1;
            }
            WireContent::Other => {}
        }
    }
    if let Some(reason) = response.stop_reason.filter(|r| !r.is_empty()) {
        acc.push(&ModelChunk::Finish(stop_reason(&reason)));
    }
    if let Some(usage) = response.usage {
        acc.push(&ModelChunk::Usage(usage.to_usage()));
    }
    Ok(acc.finish())
}

#[cfg(test)]
mod tests;
