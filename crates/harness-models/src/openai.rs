//! [`OpenAiClient`]: the OpenAI Chat Completions protocol, spoken by OpenAI and by the
//! compatible servers (DashScope/Qwen, DeepSeek, vLLM, Ollama…).
//!
//! Requests are serialized straight from the borrowed [`ChatRequest`] (no intermediate JSON
//! trees), so a long history costs one pass of serde. Responses decode leniently: every field
//! is optional, unknown fields are ignored, `reasoning_content` becomes thinking, and tool-call
//! deltas without an `index` (sent by some compatible servers) are placed by their id.

use crate::classify::{Dialect, classify_stream_error};
use crate::secret::Secret;
use crate::spec::ModelConfigError;
use crate::sse::SseEvent;
use crate::transport::{self, EventDecoder, malformed};
use async_trait::async_trait;
use harness_core::{
    Block, ChatModel, ChatRequest, FinishReason, MediaSource, ModelChunk, ModelError, ModelResponse, ModelStream, Msg,
    ResponseAccumulator, ResponseFormat, Role, ToolChoice, ToolSpec, Usage,
};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Arc;

/// Which body field carries the output token cap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum MaxTokensField {
    /// `max_tokens`: what compatible servers read.
    #[default]
    MaxTokens,
    /// `max_completion_tokens`: what OpenAI's own API reads (and requires for reasoning models).
    MaxCompletionTokens,
}

impl MaxTokensField {
    fn key(self) -> &'static str {
        match self {
            Self::MaxTokens => "max_tokens",
            Self::MaxCompletionTokens => "max_completion_tokens",
        }
    }
}

/// How to reach one OpenAI-compatible model.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OpenAiConfig {
    /// The model id sent as `model`.
    pub model: String,
    /// The API base, e.g. `https://api.openai.com/v1`; requests go to `{base_url}/chat/completions`.
    pub base_url: String,
    /// Sent as `Authorization: Bearer …` when present.
    pub api_key: Option<Secret>,
    /// Which field carries [`ChatRequest::max_tokens`].
    pub max_tokens_field: MaxTokensField,
    /// Send earlier thinking back as `reasoning_content` on assistant messages. Off by
    /// default: DeepSeek's reasoner rejects it in input, and other servers ignore it.
    pub reasoning_in_history: bool,
    /// No byte for this long (response headers or between two body reads) ends the
    /// attempt with a timeout error naming the base URL (default
    /// [`DEFAULT_IDLE_TIMEOUT`](crate::DEFAULT_IDLE_TIMEOUT)).
    pub idle_timeout: std::time::Duration,
    /// Where `base_url` was set (e.g. `set by OPENAI_BASE_URL`), named after it in connection
    /// errors.
    pub base_url_origin: Option<String>,
}

impl OpenAiConfig {
    /// A config for `model` at `base_url`, without a key.
    pub fn new(model: impl Into<String>, base_url: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            base_url: base_url.into(),
            api_key: None,
            max_tokens_field: MaxTokensField::default(),
            reasoning_in_history: false,
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

/// A [`ChatModel`] speaking OpenAI Chat Completions over HTTP. Cheap to share (`Arc`); one
/// client serves any number of concurrent calls.
#[derive(Debug, Clone)]
pub struct OpenAiClient {
    config: OpenAiConfig,
    http: reqwest::Client,
    url: String,
    headers: HeaderMap,
    /// Configured context window; `None` = the table's value for the model.
    context_window: Option<u64>,
    /// The base URL and its origin, for connection errors.
    target: String,
}

impl OpenAiClient {
    /// A client with its own connection pool.
    ///
    /// # Errors
    /// [`ModelConfigError`] when the base URL is not http(s), the key cannot be a header value,
    /// or the HTTP client cannot be built.
    pub fn new(config: OpenAiConfig) -> Result<Self, ModelConfigError> {
        let http = transport::http_client().map_err(ModelConfigError::Http)?;
        Self::with_http_client(config, http)
    }

    /// A client sharing an existing reqwest client (and its pool).
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_http_client(config: OpenAiConfig, http: reqwest::Client) -> Result<Self, ModelConfigError> {
        let base = crate::spec::check_base_url(&config.base_url)?;
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(key) = &config.api_key {
            let mut value =
                HeaderValue::from_str(&format!("Bearer {}", key.expose())).map_err(|_| ModelConfigError::InvalidKey)?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        Ok(Self {
            url: format!("{base}/chat/completions"),
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
            dialect: Dialect::OpenAi,
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
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    /// The JSON body this client sends for `request` (exposed for tests and benchmarks).
    ///
    /// # Errors
    /// [`ModelError::InvalidRequest`] if the request cannot be serialized.
    pub fn request_body(&self, request: &ChatRequest, stream: bool) -> Result<Vec<u8>, ModelError> {
        let system = request.system.render();
        let body = Body {
            config: &self.config,
            request,
            system: &system,
            stream,
        };
        serde_json::to_vec(&body).map_err(|err| ModelError::InvalidRequest {
            status: 0,
            message: format!("cannot serialize the request: {err}"),
        })
    }
}

#[async_trait]
impl ChatModel for OpenAiClient {
    fn name(&self) -> &str {
        &self.config.model
    }

    fn provider(&self) -> &str {
        // OpenAI-compatible servers by their well-known host; any other is `openai`.
        let url = self.config.base_url.as_str();
        if url.contains("deepseek.com") {
            "deepseek"
        } else if url.contains("dashscope") {
            "dashscope"
        } else {
            "openai"
        }
    }

    /// `response_format` is sent as OpenAI's `response_format` (a server that refuses it
    /// answers 400, and the caller falls back to a tool call).
    fn native_response_format(&self) -> bool {
        true
    }

    /// By the model's name: the OpenAI families that take images (`gpt-4o`, `gpt-4.1`,
    /// `gpt-5`, `o1`/`o3`/`o4`) and names that say so (`vision`, `-vl`, `llava`).
    fn accepts_images(&self) -> bool {
        crate::window::takes_images(&self.config.model)
    }

    fn context_window(&self) -> Option<u64> {
        self.context_window
            .or_else(|| crate::window::known_context_window(&self.config.model))
    }

    async fn stream(&self, request: ChatRequest) -> Result<ModelStream, ModelError> {
        // Nobody watches the chunks (`request.stream` is false for a plain `call`): ask for
        // one JSON response, which is cheaper to produce and decode, and replay it as chunks.
        let body = self.request_body(&request, request.stream)?;
        tracing::debug!(model = %self.config.model, messages = request.messages.len(), body_bytes = body.len(), "chat completions stream");
        self.endpoint().stream::<StreamDecoder>(body).await
    }

    async fn call(&self, request: ChatRequest) -> Result<ModelResponse, ModelError> {
        let body = self.request_body(&request, false)?;
        tracing::debug!(model = %self.config.model, messages = request.messages.len(), body_bytes = body.len(), "chat completions call");
        self.endpoint().call(body).await
    }
}

// ---------------------------------------------------------------------------------------------
// Request encoding: borrowed views serialized in one pass.

struct Body<'a> {
    config: &'a OpenAiConfig,
    request: &'a ChatRequest,
    system: &'a str,
    stream: bool,
}

impl Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let request = self.request;
        let extra = &request.extra;
        let mut map = serializer.serialize_map(None)?;
        // `extra` wins over what we would send: it is the caller's explicit override.
        macro_rules! put {
            ($key:expr, $value:expr) => {
                if !extra.contains_key($key) {
                    map.serialize_entry($key, $value)?;
                }
            };
        }
        put!("model", &self.config.model);
        put!(
            "messages",
            &Messages {
                system: self.system,
                messages: &request.messages,
                reasoning: self.config.reasoning_in_history,
            }
        );
        put!("stream", &self.stream);
        if self.stream {
            put!("stream_options", &StreamOptions { include_usage: true });
        }
        if !request.tools.is_empty() {
            put!("tools", &Tools(&request.tools));
            let choice = match request.tool_choice {
                ToolChoice::Auto => "auto",
                ToolChoice::None => "none",
                ToolChoice::Required => "required",
            };
            put!("tool_choice", choice);
        }
        if let Some(max) = request.max_tokens {
            put!(self.config.max_tokens_field.key(), &max);
        }
        if let Some(temperature) = request.temperature {
            put!("temperature", &temperature);
        }
        if let Some(format) = &request.response_format {
            put!("response_format", &response_format(format));
        }
        for (key, value) in extra {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// `response_format`: `json_object`, or `json_schema` with its name, schema and `strict`.
fn response_format(format: &ResponseFormat) -> Value {
    match format {
        ResponseFormat::JsonObject => serde_json::json!({"type": "json_object"}),
        ResponseFormat::JsonSchema { name, schema, strict } => serde_json::json!({
            "type": "json_schema",
            "json_schema": {"name": name, "schema": schema, "strict": strict},
        }),
    }
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

struct Tools<'a>(&'a [ToolSpec]);

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Function<'a> {
            name: &'a str,
            description: &'a str,
            parameters: &'a Value,
        }
        #[derive(Serialize)]
        struct Tool<'a> {
            r#type: &'static str,
            function: Function<'a>,
        }
        serializer.collect_seq(self.0.iter().map(|tool| Tool {
            r#type: "function",
            function: Function {
                name: &tool.name,
                description: &tool.description,
                parameters: &tool.input_schema,
            },
        }))
    }
}

struct Messages<'a> {
    system: &'a str,
    messages: &'a [Arc<Msg>],
    reasoning: bool,
}

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(None)?;
        if !self.system.is_empty() {
            seq.serialize_element(&TextMessage {
                role: "system",
                content: Content::Text(Cow::Borrowed(self.system)),
            })?;
        }
        for msg in self.messages {
            write_msg(&mut seq, msg, self.reasoning)?;
        }
        seq.end()
    }
}

#[derive(Serialize)]
struct TextMessage<'a> {
    role: &'static str,
    content: Content<'a>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Content<'a> {
    Text(Cow<'a, str>),
    Parts(Vec<Part<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part<'a> {
    Text { text: Cow<'a, str> },
    ImageUrl { image_url: ImageUrl<'a> },
}

#[derive(Serialize)]
struct ImageUrl<'a> {
    url: Cow<'a, str>,
}

#[derive(Serialize)]
struct ToolMessage<'a> {
    role: &'static str,
    tool_call_id: &'a str,
    content: Cow<'a, str>,
}

#[derive(Serialize)]
struct AssistantMessage<'a> {
    role: &'static str,
    content: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireCall<'a>>,
}

#[derive(Serialize)]
struct WireCall<'a> {
    id: &'a str,
    r#type: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    arguments: Cow<'a, str>,
}

/// Joins texts with newlines, borrowing when there is only one.
fn joined<'a>(mut texts: impl Iterator<Item = Cow<'a, str>>) -> Cow<'a, str> {
    let Some(first) = texts.next() else {
        return Cow::Borrowed("");
    };
    match texts.next() {
        None => first,
        Some(second) => {
            let mut out = String::with_capacity(first.len() + second.len() + 1);
            out.push_str(&first);
            for text in std::iter::once(second).chain(texts) {
                out.push('\n');
                out.push_str(&text);
            }
            Cow::Owned(out)
        }
    }
}

fn texts(blocks: &[Block]) -> impl Iterator<Item = Cow<'_, str>> {
    blocks.iter().filter_map(Block::as_text).map(Cow::Borrowed)
}

/// A text stand-in for content the protocol cannot carry in this position.
fn placeholder(block: &Block) -> Option<Cow<'_, str>> {
    let describe = |kind: &str, source: &MediaSource| match source {
        MediaSource::Path { path } => format!("[{kind}: {path}]"),
        MediaSource::Url { url } => format!("[{kind}: {url}]"),
        MediaSource::Base64 { media_type, .. } => format!("[{kind}: inline {media_type}]"),
    };
    match block {
        Block::Text { text } => Some(Cow::Borrowed(text)),
        Block::Image { source } => Some(Cow::Owned(describe("image", source))),
        Block::Audio { source } => Some(Cow::Owned(describe("audio", source))),
        Block::File { source, name } => Some(Cow::Owned(match name {
            Some(name) => format!("[file: {name}]"),
            None => describe("file", source),
        })),
        _ => None,
    }
}

/// An image the wire can carry as a part (a URL or inline data; a path is a placeholder).
fn image_part(block: &Block) -> Option<Part<'_>> {
    match block {
        Block::Image {
            source: MediaSource::Url { url },
        } => Some(Part::ImageUrl {
            image_url: ImageUrl {
                url: Cow::Borrowed(url),
            },
        }),
        Block::Image {
            source: MediaSource::Base64 { media_type, data },
        } => Some(Part::ImageUrl {
            image_url: ImageUrl {
                url: Cow::Owned(format!("data:{media_type};base64,{data}")),
            },
        }),
        _ => None,
    }
}

fn write_msg<S: SerializeSeq>(seq: &mut S, msg: &Msg, reasoning: bool) -> Result<(), S::Error> {
    // Tool results first: they must directly follow the assistant message that called. A
    // tool message carries text only, so a result's images follow all of them as one
    // user message of image parts, each named in its result's text (never sent as text).
    let mut images = Vec::new();
    for block in &msg.content {
        if let Block::ToolResult {
            tool_use_id, content, ..
        } = block
        {
            let mut parts = Vec::with_capacity(content.len());
            for block in content {
                match image_part(block) {
                    Some(part) => {
                        images.push(part);
                        parts.push(Cow::Owned(format!(
                            "[image {}: attached in the user message after the tool results]",
                            images.len()
                        )));
                    }
                    None => parts.extend(placeholder(block)),
                }
            }
            seq.serialize_element(&ToolMessage {
                role: "tool",
                tool_call_id: tool_use_id,
                content: joined(parts.into_iter()),
            })?;
        }
    }
    if !images.is_empty() {
        let count = images.len();
        let mut parts = Vec::with_capacity(count + 1);
        parts.push(Part::Text {
            text: Cow::Owned(format!(
                "The {count} image(s) the tool results above returned, in order:"
            )),
        });
        parts.extend(images);
        seq.serialize_element(&TextMessage {
            role: "user",
            content: Content::Parts(parts),
        })?;
    }
    match msg.role {
        Role::Assistant => {
            let text = joined(texts(&msg.content));
            let tool_calls: Vec<WireCall<'_>> = msg
                .tool_calls()
                .map(|call| WireCall {
                    id: call.id,
                    r#type: "function",
                    function: WireFunction {
                        name: call.name,
                        arguments: match call.input {
                            // Argument text that was not JSON goes back as it came.
                            Value::String(raw) => Cow::Borrowed(raw.as_str()),
                            input => Cow::Owned(input.to_string()),
                        },
                    },
                })
                .collect();
            let reasoning_content = if reasoning {
                let thinking = joined(msg.content.iter().filter_map(|block| match block {
                    Block::Thinking { thinking, .. } => Some(Cow::Borrowed(thinking.as_str())),
                    _ => None,
                }));
                (!thinking.is_empty()).then_some(thinking)
            } else {
                None
            };
            if text.is_empty() && tool_calls.is_empty() && reasoning_content.is_none() {
                return Ok(());
            }
            seq.serialize_element(&AssistantMessage {
                role: "assistant",
                content: (!text.is_empty() || tool_calls.is_empty()).then_some(text),
                reasoning_content,
                tool_calls,
            })
        }
        Role::System => {
            let text = joined(texts(&msg.content));
            if text.is_empty() {
                return Ok(());
            }
            seq.serialize_element(&TextMessage {
                role: "system",
                content: Content::Text(text),
            })
        }
        // A tool-role message carries tool results (written above); anything else in it, and
        // every user message, goes out as user content.
        Role::User | Role::Tool => match user_content(&msg.content) {
            Some(content) => seq.serialize_element(&TextMessage { role: "user", content }),
            None => Ok(()),
        },
    }
}

fn user_content(blocks: &[Block]) -> Option<Content<'_>> {
    if !blocks.iter().any(|block| matches!(block, Block::Image { .. })) {
        let text = joined(blocks.iter().filter_map(placeholder));
        return (!text.is_empty()).then_some(Content::Text(text));
    }
    let parts = blocks
        .iter()
        .filter_map(|block| image_part(block).or_else(|| placeholder(block).map(|text| Part::Text { text })))
        .collect();
    Some(Content::Parts(parts))
}

// ---------------------------------------------------------------------------------------------
// Response decoding: lenient wire types.

/// Deserializes `null` as the type's default.
fn nullable<'de, D: Deserializer<'de>, T: Default + Deserialize<'de>>(deserializer: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireChunk {
    #[serde(deserialize_with = "nullable")]
    choices: Vec<WireChoice>,
    usage: Option<WireUsage>,
    error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireChoice {
    /// Streaming responses carry `delta`, complete ones `message`.
    delta: Option<WireDelta>,
    message: Option<WireDelta>,
    finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireDelta {
    content: Option<String>,
    /// DeepSeek, Qwen, vLLM (older).
    reasoning_content: Option<String>,
    /// vLLM (newer), Ollama, OpenRouter.
    reasoning: Option<String>,
    #[serde(deserialize_with = "nullable")]
    tool_calls: Vec<WireToolCall>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireToolCall {
    index: Option<usize>,
    id: Option<String>,
    function: Option<WireFunctionDelta>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireFunctionDelta {
    name: Option<String>,
    /// A string per the spec; some servers send an object.
    arguments: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<WirePromptDetails>,
    /// DeepSeek's name for cached prompt tokens.
    prompt_cache_hit_tokens: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WirePromptDetails {
    cached_tokens: Option<u64>,
}

impl WireUsage {
    fn to_usage(&self) -> Usage {
        let cached = self
            .prompt_tokens_details
            .as_ref()
            .and_then(|d| d.cached_tokens)
            .or(self.prompt_cache_hit_tokens)
            .unwrap_or(0);
        Usage {
            input_tokens: self.prompt_tokens.unwrap_or(0),
            output_tokens: self.completion_tokens.unwrap_or(0),
            cache_read_tokens: cached,
            cache_write_tokens: 0,
        }
    }
}

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "stop" | "end_turn" => FinishReason::Stop,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "length" => FinishReason::Length,
        "content_filter" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

fn arguments_text(arguments: Option<Value>) -> String {
    match arguments {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text,
        Some(other) => other.to_string(),
    }
}

fn non_empty(text: Option<String>) -> Option<String> {
    text.filter(|t| !t.is_empty())
}

/// Assigns tool-call indexes. A delta with an `index` uses it; one without (some compatible
/// servers) continues the call with the same id, starts the next index for a new id, and
/// continues the last call when it has no id.
#[derive(Debug, Default)]
struct ToolIndexer {
    ids: Vec<Option<String>>,
    last: Option<usize>,
}

impl ToolIndexer {
    fn index(&mut self, index: Option<usize>, id: Option<&str>) -> usize {
        let at = match (index, id) {
            (Some(index), _) => index,
            (None, Some(id)) => self
                .ids
                .iter()
                .position(|known| known.as_deref() == Some(id))
                .unwrap_or(self.ids.len()),
            (None, None) => self.last.unwrap_or(0),
        };
        if self.ids.len() <= at {
            self.ids.resize(at + 1, None);
        }
        if let Some(id) = id {
            self.ids[at].get_or_insert_with(|| id.to_owned());
        }
        self.last = Some(at);
        at
    }
}

/// Decodes `chat.completion.chunk` events.
#[derive(Debug, Default)]
struct StreamDecoder {
    indexer: ToolIndexer,
    finished: bool,
}

impl EventDecoder for StreamDecoder {
    fn event(&mut self, event: &SseEvent, out: &mut VecDeque<ModelChunk>) -> Result<bool, ModelError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let chunk: WireChunk = serde_json::from_str(data).map_err(|err| malformed("a stream chunk", &err, data))?;
        if chunk.error.as_ref().is_some_and(|e| !e.is_null()) {
            return Err(classify_stream_error(Dialect::OpenAi, data));
        }
        for choice in chunk.choices {
            if let Some(delta) = choice.delta.or(choice.message) {
                if let Some(text) = non_empty(delta.reasoning_content).or(non_empty(delta.reasoning)) {
                    out.push_back(ModelChunk::ThinkingDelta { text, signature: None });
                }
                if let Some(text) = non_empty(delta.content) {
                    out.push_back(ModelChunk::TextDelta(text));
                }
                for call in delta.tool_calls {
                    let id = non_empty(call.id);
                    let function = call.function.unwrap_or_default();
                    out.push_back(ModelChunk::ToolCallDelta {
                        index: self.indexer.index(call.index, id.as_deref()),
                        id,
                        name: non_empty(function.name),
                        arguments: arguments_text(function.arguments),
                    });
                }
            }
            if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
                self.finished = true;
                out.push_back(ModelChunk::Finish(finish_reason(&reason)));
            }
        }
        if let Some(usage) = chunk.usage {
            out.push_back(ModelChunk::Usage(usage.to_usage()));
        }
        Ok(false)
    }

    fn end_of_body(&mut self) -> Result<(), ModelError> {
        if self.finished {
            Ok(()) // some servers close after the finish chunk without `[DONE]`
        } else {
            Err(ModelError::transient(transport::WireError::Incomplete))
        }
    }
}

/// Decodes a complete (`stream: false`) `chat.completion`.
fn decode_response(body: &[u8]) -> Result<ModelResponse, ModelError> {
    let text = String::from_utf8_lossy(body);
    let chunk: WireChunk = serde_json::from_str(&text).map_err(|err| malformed("the response", &err, &text))?;
    if chunk.error.as_ref().is_some_and(|e| !e.is_null()) {
        return Err(classify_stream_error(Dialect::OpenAi, &text));
    }
    let Some(choice) = chunk.choices.into_iter().next() else {
        return Err(ModelError::Malformed {
            detail: format!("the response has no choices: {}", crate::classify::excerpt(&text, 200)),
        });
    };
    let mut acc = ResponseAccumulator::default();
    if let Some(message) = choice.message.or(choice.delta) {
        if let Some(text) = non_empty(message.reasoning_content).or(non_empty(message.reasoning)) {
            acc.push(&ModelChunk::ThinkingDelta { text, signature: None });
        }
        if let Some(text) = non_empty(message.content) {
            acc.push(&ModelChunk::TextDelta(text));
        }
        for (index, call) in message.tool_calls.into_iter().enumerate() {
            let function = call.function.unwrap_or_default();
            acc.push(&ModelChunk::ToolCallDelta {
                index,
                id: non_empty(call.id),
                name: non_empty(function.name),
                arguments: arguments_text(function.arguments),
            });
        }
    }
    if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
        acc.push(&ModelChunk::Finish(finish_reason(&reason)));
    }
    if let Some(usage) = chunk.usage {
        acc.push(&ModelChunk::Usage(usage.to_usage()));
    }
    Ok(acc.finish())
}

#[cfg(test)]
mod tests;
