//! [`GeminiClient`]: the Google Gemini API (`POST {base}/models/{model}:generateContent`, and
//! `:streamGenerateContent?alt=sse` when someone watches the chunks).
//!
//! What differs from OpenAI and is handled here:
//! - the system prompt is a `systemInstruction`; the history is `contents` of `user` and
//!   `model` turns, tool results travel as `functionResponse` parts of a user turn (named after
//!   the call they answer, looked up in the history);
//! - tools are `functionDeclarations` with a JSON Schema (`parametersJsonSchema`), tool choice
//!   is a `functionCallingConfig` mode;
//! - a function call arrives whole (never in argument pieces); its `id` is kept when the API
//!   gives one, else one is made up (prefixed [`SYNTHETIC_ID_PREFIX`]) and not sent back;
//! - thought signatures: the API may put a `thoughtSignature` on a part; it is kept on the
//!   message's [`Block::Thinking`] (prefixed [`SIGNATURE_PREFIX`], so a signature from another
//!   provider is never sent here, nor this one there) and sent back where the API documents
//!   it: on the first function call of the turn, else on its last part. Thought summaries
//!   (`thought: true` parts) become thinking text and are not sent back. An assistant turn
//!   whose calls carry no Gemini signature (another provider wrote it) gets the documented
//!   [`SKIP_SIGNATURE_VALIDATION`] on its first call, except for Gemini 1.x and 2.x models,
//!   which do not validate signatures;
//! - a safety block (a candidate's `finishReason` such as `SAFETY`, or a `promptFeedback`
//!   `blockReason` with no candidate) ends the response with [`FinishReason::ContentFilter`],
//!   which the agent reports as a content-filter error;
//! - `STOP` with function calls is reported as [`FinishReason::ToolCalls`];
//! - usage: `promptTokenCount` (which includes `cachedContentTokenCount`) is the input,
//!   candidates plus thoughts the output, cached content the cache reads.

use crate::classify::{Dialect, classify_stream_error};
use crate::secret::Secret;
use crate::spec::ModelConfigError;
use crate::sse::SseEvent;
use crate::transport::{self, EventDecoder, WireError, malformed};
use async_trait::async_trait;
use harness_core::{
    Block, ChatModel, ChatRequest, FinishReason, MediaSource, ModelChunk, ModelError, ModelResponse, ModelStream, Msg,
    ResponseAccumulator, ResponseFormat, Role, ToolChoice, Usage,
};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// The API version appended to a base URL that names none (`http://127.0.0.1:8080` →
/// `http://127.0.0.1:8080/v1beta`).
pub const GEMINI_API_VERSION: &str = "v1beta";

/// Marks a [`Block::Thinking`] signature that came from Gemini (the wire value follows it).
pub const SIGNATURE_PREFIX: &str = "gemini:";

/// The thought signature the API documents for function calls it did not generate (history
/// from another provider, e.g. after a fallback switch): it skips the signature validation
/// Gemini 3 enforces on the current turn's calls.
pub const SKIP_SIGNATURE_VALIDATION: &str = "skip_thought_signature_validator";

/// Marks a tool-call id this client made up because the API sent none; such ids are not sent
/// back to the API.
pub const SYNTHETIC_ID_PREFIX: &str = "gemini_call_";

/// How to reach one Gemini model.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GeminiConfig {
    /// The model id, e.g. `gemini-2.5-flash` (a leading `models/` is dropped).
    pub model: String,
    /// The API base including its version, e.g.
    /// `https://generativelanguage.googleapis.com/v1beta`; a base without a path gets
    /// [`GEMINI_API_VERSION`].
    pub base_url: String,
    /// Sent as `x-goog-api-key` when present.
    pub api_key: Option<Secret>,
    /// Ask for thought summaries (`thinkingConfig.includeThoughts`); only thinking models
    /// accept it.
    pub include_thoughts: bool,
    /// No byte for this long ends the attempt (default
    /// [`DEFAULT_IDLE_TIMEOUT`](crate::DEFAULT_IDLE_TIMEOUT)).
    pub idle_timeout: std::time::Duration,
    /// Where `base_url` was set (e.g. `set by GEMINI_BASE_URL`), named in connection errors.
    pub base_url_origin: Option<String>,
}

impl GeminiConfig {
    /// A config for `model` at `base_url`, without a key.
    pub fn new(model: impl Into<String>, base_url: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            base_url: base_url.into(),
            api_key: None,
            include_thoughts: false,
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

/// A [`ChatModel`] speaking the Gemini API over HTTP.
#[derive(Debug, Clone)]
pub struct GeminiClient {
    config: GeminiConfig,
    http: reqwest::Client,
    call_url: String,
    stream_url: String,
    headers: HeaderMap,
    context_window: Option<u64>,
    target: String,
}

impl GeminiClient {
    /// A client with its own connection pool.
    ///
    /// # Errors
    /// [`ModelConfigError`] when the base URL is not http(s), the key cannot be a header value,
    /// or the HTTP client cannot be built.
    pub fn new(config: GeminiConfig) -> Result<Self, ModelConfigError> {
        let http = transport::http_client().map_err(ModelConfigError::Http)?;
        Self::with_http_client(config, http)
    }

    /// A client sharing an existing reqwest client.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_http_client(config: GeminiConfig, http: reqwest::Client) -> Result<Self, ModelConfigError> {
        let base = crate::spec::check_base_url(&config.base_url)?;
        let has_path = reqwest::Url::parse(base).is_ok_and(|url| !url.path().trim_matches('/').is_empty());
        let base = if has_path {
            base.to_owned()
        } else {
            format!("{base}/{GEMINI_API_VERSION}")
        };
        let model = config.model.strip_prefix("models/").unwrap_or(&config.model);
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(key) = &config.api_key {
            let mut value = HeaderValue::from_str(key.expose()).map_err(|_| ModelConfigError::InvalidKey)?;
            value.set_sensitive(true);
            headers.insert(HeaderName::from_static("x-goog-api-key"), value);
        }
        Ok(Self {
            call_url: format!("{base}/models/{model}:generateContent"),
            stream_url: format!("{base}/models/{model}:streamGenerateContent?alt=sse"),
            target: transport::describe_target(&base, config.base_url_origin.as_deref()),
            config,
            http,
            headers,
            context_window: None,
        })
    }

    fn endpoint<'a>(&'a self, url: &'a str) -> transport::Endpoint<'a> {
        transport::Endpoint {
            http: &self.http,
            url,
            headers: &self.headers,
            dialect: Dialect::Gemini,
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
    pub fn config(&self) -> &GeminiConfig {
        &self.config
    }

    /// The JSON body this client sends for `request` (the same for both endpoints).
    ///
    /// `request.extra` entries are added at the top level, except `generationConfig`, whose
    /// keys are merged into the one built here (so a caller can add `responseMimeType` and
    /// `responseJsonSchema` and keep the token cap).
    ///
    /// # Errors
    /// [`ModelError::InvalidRequest`] if the request cannot be serialized.
    pub fn request_body(&self, request: &ChatRequest) -> Result<Vec<u8>, ModelError> {
        serde_json::to_vec(&self.body_value(request)).map_err(|err| ModelError::InvalidRequest {
            status: 0,
            message: format!("cannot serialize the request: {err}"),
        })
    }

    fn body_value(&self, request: &ChatRequest) -> Value {
        let mut body = Map::new();
        let system = request.system.render();
        if !system.is_empty() {
            body.insert("systemInstruction".into(), json!({"parts": [{"text": system}]}));
        }
        let model = self.config.model.strip_prefix("models/").unwrap_or(&self.config.model);
        let validates = !(model.starts_with("gemini-1") || model.starts_with("gemini-2"));
        body.insert(
            "contents".into(),
            Value::Array(wire_contents(&request.messages, validates)),
        );
        if !request.tools.is_empty() {
            let declarations: Vec<Value> = request
                .tools
                .iter()
                .map(|tool| {
                    json!({
                        "name": tool.name,
                        "description": tool.description,
                        "parametersJsonSchema": tool.input_schema,
                    })
                })
                .collect();
            body.insert("tools".into(), json!([{ "functionDeclarations": declarations }]));
            let mode = match request.tool_choice {
                ToolChoice::Auto => "AUTO",
                ToolChoice::None => "NONE",
                ToolChoice::Required => "ANY",
            };
            body.insert("toolConfig".into(), json!({"functionCallingConfig": {"mode": mode}}));
        }
        let mut generation = Map::new();
        if let Some(max) = request.max_tokens {
            generation.insert("maxOutputTokens".into(), max.into());
        }
        if let Some(temperature) = request.temperature {
            generation.insert("temperature".into(), json!(temperature));
        }
        if self.config.include_thoughts {
            generation.insert("thinkingConfig".into(), json!({"includeThoughts": true}));
        }
        match &request.response_format {
            Some(ResponseFormat::JsonObject) => {
                generation.insert("responseMimeType".into(), "application/json".into());
            }
            Some(ResponseFormat::JsonSchema { schema, .. }) => {
                generation.insert("responseMimeType".into(), "application/json".into());
                generation.insert("responseJsonSchema".into(), schema.clone());
            }
            None => {}
        }
        for (key, value) in &request.extra {
            match (key.as_str(), value) {
                ("generationConfig", Value::Object(extra)) => {
                    generation.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
                _ => {
                    body.insert(key.clone(), value.clone());
                }
            }
        }
        if !generation.is_empty() {
            body.insert("generationConfig".into(), Value::Object(generation));
        }
        Value::Object(body)
    }
}

#[async_trait]
impl ChatModel for GeminiClient {
    fn name(&self) -> &str {
        &self.config.model
    }

    fn provider(&self) -> &str {
        "gcp.gemini"
    }

    /// `response_format` becomes `generationConfig.responseMimeType` (and
    /// `responseJsonSchema`).
    fn native_response_format(&self) -> bool {
        true
    }

    /// Every Gemini model takes images.
    fn accepts_images(&self) -> bool {
        true
    }

    fn context_window(&self) -> Option<u64> {
        self.context_window
            .or_else(|| crate::window::known_context_window(&self.config.model))
    }

    async fn stream(&self, request: ChatRequest) -> Result<ModelStream, ModelError> {
        // Nobody watches the chunks: one generateContent answer, replayed as chunks.
        let body = self.request_body(&request)?;
        let url = if request.stream {
            &self.stream_url
        } else {
            &self.call_url
        };
        tracing::debug!(model = %self.config.model, messages = request.messages.len(), body_bytes = body.len(), "gemini stream");
        self.endpoint(url).stream::<StreamDecoder>(body).await
    }

    async fn call(&self, request: ChatRequest) -> Result<ModelResponse, ModelError> {
        let body = self.request_body(&request)?;
        tracing::debug!(model = %self.config.model, messages = request.messages.len(), body_bytes = body.len(), "gemini call");
        self.endpoint(&self.call_url).call(body).await
    }
}

// ---------------------------------------------------------------------------------------------
// Request encoding.

/// Media as an `inlineData` part when its bytes are inline, else a text stand-in.
fn media_part(kind: &str, source: &MediaSource, name: Option<&str>) -> Value {
    match (source, name) {
        (MediaSource::Base64 { media_type, data }, _) => {
            json!({"inlineData": {"mimeType": media_type, "data": data}})
        }
        (_, Some(name)) => json!({"text": format!("[{kind}: {name}]")}),
        (MediaSource::Path { path }, None) => json!({"text": format!("[{kind}: {path}]")}),
        (MediaSource::Url { url }, None) => json!({"text": format!("[{kind}: {url}]")}),
    }
}

/// The user-side parts of `content` (text and media).
fn user_parts(content: &[Block], out: &mut Vec<Value>) {
    for item in content {
        match item {
            Block::Text { text } if !text.is_empty() => out.push(json!({"text": text})),
            Block::Image { source } => out.push(media_part("image", source, None)),
            Block::Audio { source } => out.push(media_part("audio", source, None)),
            Block::File { source, name } => out.push(media_part("file", source, name.as_deref())),
            _ => {}
        }
    }
}

/// A tool result as a `functionResponse` part: `{"output": text}`, or `{"error": text}` when
/// the tool failed (the keys the API documents). Media in the result follows as parts.
fn function_response(id: &str, name: &str, content: &[Block], is_error: bool, media: &mut Vec<Value>) -> Value {
    let text = harness_core::join_text(content);
    let key = if is_error { "error" } else { "output" };
    let mut response = json!({"name": name, "response": {key: text}});
    if !id.starts_with(SYNTHETIC_ID_PREFIX)
        && let Some(map) = response.as_object_mut()
    {
        map.insert("id".into(), id.into());
    }
    // Text went into the response; media (or its stand-in) follows as parts.
    for item in content.iter().filter(|item| !matches!(item, Block::Text { .. })) {
        user_parts(std::slice::from_ref(item), media);
    }
    json!({ "functionResponse": response })
}

/// The `model` parts of an assistant message, with its Gemini signature put back where the
/// API documents it (first function call, else last part). With `validates` (a model that
/// checks signatures), unsigned calls get [`SKIP_SIGNATURE_VALIDATION`].
fn model_parts(msg: &Msg, validates: bool) -> Vec<Value> {
    let mut parts = Vec::with_capacity(msg.content.len());
    let mut signature = None;
    let mut first_call = None;
    for item in &msg.content {
        match item {
            Block::Thinking {
                signature: Some(sig), ..
            } => signature = sig.strip_prefix(SIGNATURE_PREFIX).filter(|s| !s.is_empty()),
            Block::Text { text } if !text.is_empty() => parts.push(json!({"text": text})),
            Block::ToolUse { id, name, input } => {
                let args = match input {
                    Value::Object(_) => input.clone(),
                    // The API wants an object; keep argument text that was not one visible.
                    other => json!({ "arguments": other }),
                };
                let mut call = json!({"name": name, "args": args});
                if !id.starts_with(SYNTHETIC_ID_PREFIX)
                    && let Some(map) = call.as_object_mut()
                {
                    map.insert("id".into(), id.as_str().into());
                }
                first_call.get_or_insert(parts.len());
                parts.push(json!({ "functionCall": call }));
            }
            _ => {}
        }
    }
    let signature = signature.or((validates && first_call.is_some()).then_some(SKIP_SIGNATURE_VALIDATION));
    if let Some(signature) = signature {
        let at = first_call.or_else(|| parts.len().checked_sub(1));
        if let Some(part) = at.and_then(|at| parts.get_mut(at)).and_then(Value::as_object_mut) {
            part.insert("thoughtSignature".into(), signature.into());
        }
    }
    parts
}

/// Maps the history to `contents`: assistant messages become `model` turns, everything else
/// `user` turns (tool results as `functionResponse` parts, system messages as text);
/// consecutive turns of one role merge.
fn wire_contents(messages: &[Arc<Msg>], validates: bool) -> Vec<Value> {
    let mut names: HashMap<&str, &str> = HashMap::new();
    let mut out: Vec<(&'static str, Vec<Value>)> = Vec::with_capacity(messages.len());
    for msg in messages {
        let (role, parts) = if msg.role == Role::Assistant {
            for item in &msg.content {
                if let Block::ToolUse { id, name, .. } = item {
                    names.insert(id, name);
                }
            }
            ("model", model_parts(msg, validates))
        } else {
            let mut parts = Vec::new();
            let mut media = Vec::new();
            for item in &msg.content {
                if let Block::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                } = item
                {
                    // A result whose call is gone from the history (compacted) still needs a
                    // name; its id is the best one left.
                    let name = names.get(tool_use_id.as_str()).copied().unwrap_or(tool_use_id);
                    parts.push(function_response(tool_use_id, name, content, *is_error, &mut media));
                }
            }
            parts.extend(media);
            user_parts(&msg.content, &mut parts);
            ("user", parts)
        };
        if parts.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(parts),
            _ => out.push((role, parts)),
        }
    }
    out.into_iter()
        .map(|(role, parts)| json!({"role": role, "parts": parts}))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Response decoding.

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct WireUsage {
    prompt_token_count: u64,
    candidates_token_count: u64,
    cached_content_token_count: u64,
    thoughts_token_count: u64,
    tool_use_prompt_token_count: u64,
}

impl WireUsage {
    fn to_usage(&self) -> Usage {
        Usage {
            input_tokens: self.prompt_token_count + self.tool_use_prompt_token_count,
            output_tokens: self.candidates_token_count + self.thoughts_token_count,
            cache_read_tokens: self.cached_content_token_count,
            cache_write_tokens: 0,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireFunctionCall {
    id: Option<String>,
    name: String,
    args: Value,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct WirePart {
    text: Option<String>,
    thought: bool,
    thought_signature: Option<String>,
    function_call: Option<WireFunctionCall>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireContent {
    parts: Vec<WirePart>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct WireCandidate {
    content: Option<WireContent>,
    finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct WirePromptFeedback {
    block_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct WireResponse {
    candidates: Vec<WireCandidate>,
    prompt_feedback: Option<WirePromptFeedback>,
    usage_metadata: Option<WireUsage>,
    error: Option<Value>,
}

/// A candidate's `finishReason` (`STOP` is a tool-call finish when the response called tools).
fn finish_reason(reason: &str, called_tools: bool) -> Option<FinishReason> {
    Some(match reason {
        "" | "FINISH_REASON_UNSPECIFIED" => return None,
        "STOP" if called_tools => FinishReason::ToolCalls,
        "STOP" => FinishReason::Stop,
        "MAX_TOKENS" => FinishReason::Length,
        "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    })
}

/// A tool-call id for a call the API sent without one: unique, and marked so it is not sent
/// back.
fn synthetic_id() -> String {
    format!("{SYNTHETIC_ID_PREFIX}{:016x}", rand::random::<u64>())
}

/// What one response (or stream chunk) adds. Shared by the stream and the whole-response
/// decoders.
#[derive(Debug, Default)]
struct Decoder {
    calls: usize,
    finished: bool,
}

impl Decoder {
    fn decode(&mut self, data: &str, out: &mut VecDeque<ModelChunk>) -> Result<(), ModelError> {
        let response: WireResponse = serde_json::from_str(data).map_err(|err| malformed("a response", &err, data))?;
        if response.error.is_some() {
            return Err(classify_stream_error(Dialect::Gemini, data));
        }
        if let Some(candidate) = response.candidates.into_iter().next() {
            for part in candidate.content.map(|c| c.parts).unwrap_or_default() {
                if let Some(call) = part.function_call {
                    let arguments = match call.args {
                        Value::Null => String::new(),
                        args => args.to_string(),
                    };
                    out.push_back(ModelChunk::ToolCallDelta {
                        index: self.calls,
                        id: Some(call.id.filter(|id| !id.is_empty()).unwrap_or_else(synthetic_id)),
                        name: Some(call.name),
                        arguments,
                    });
                    self.calls += 1;
                } else if let Some(text) = part.text.filter(|t| !t.is_empty()) {
                    out.push_back(if part.thought {
                        ModelChunk::ThinkingDelta { text, signature: None }
                    } else {
                        ModelChunk::TextDelta(text)
                    });
                }
                if let Some(signature) = part.thought_signature.filter(|s| !s.is_empty()) {
                    out.push_back(ModelChunk::ThinkingDelta {
                        text: String::new(),
                        signature: Some(format!("{SIGNATURE_PREFIX}{signature}")),
                    });
                }
            }
            if let Some(reason) = candidate
                .finish_reason
                .as_deref()
                .and_then(|r| finish_reason(r, self.calls > 0))
            {
                out.push_back(ModelChunk::Finish(reason));
                self.finished = true;
            }
        } else if let Some(reason) = response
            .prompt_feedback
            .and_then(|feedback| feedback.block_reason)
            .filter(|reason| !reason.is_empty() && reason != "BLOCK_REASON_UNSPECIFIED")
        {
            // The prompt itself was blocked: no candidate comes.
            tracing::debug!(%reason, "gemini blocked the prompt");
            out.push_back(ModelChunk::Finish(FinishReason::ContentFilter));
            self.finished = true;
        }
        if let Some(usage) = response.usage_metadata {
            out.push_back(ModelChunk::Usage(usage.to_usage()));
        }
        Ok(())
    }
}

/// Decodes `streamGenerateContent?alt=sse` events: each is a whole `GenerateContentResponse`
/// holding the next parts. The stream has no end marker; it is complete once a finish reason
/// (or a prompt block) arrived.
#[derive(Debug, Default)]
struct StreamDecoder {
    inner: Decoder,
}

impl EventDecoder for StreamDecoder {
    fn event(&mut self, event: &SseEvent, out: &mut VecDeque<ModelChunk>) -> Result<bool, ModelError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(false);
        }
        self.inner.decode(data, out)?;
        Ok(false)
    }

    fn end_of_body(&mut self) -> Result<(), ModelError> {
        if self.inner.finished {
            Ok(())
        } else {
            Err(ModelError::transient(WireError::Incomplete))
        }
    }
}

/// Decodes a complete `generateContent` response, or the JSON array of responses
/// `streamGenerateContent` sends when `alt=sse` was dropped on the way (a proxy).
fn decode_response(body: &[u8]) -> Result<ModelResponse, ModelError> {
    let text = String::from_utf8_lossy(body);
    let mut chunks = VecDeque::new();
    let mut decoder = Decoder::default();
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Array(items)) => {
            for item in items {
                decoder.decode(&item.to_string(), &mut chunks)?;
            }
        }
        _ => decoder.decode(&text, &mut chunks)?,
    }
    let mut acc = ResponseAccumulator::default();
    for chunk in &chunks {
        acc.push(chunk);
    }
    Ok(acc.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(body: Value) -> ModelResponse {
        decode_response(body.to_string().as_bytes()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn finish_reasons_map_to_the_loop_s_words() {
        assert_eq!(finish_reason("STOP", true), Some(FinishReason::ToolCalls));
        assert_eq!(finish_reason("STOP", false), Some(FinishReason::Stop));
        assert_eq!(finish_reason("MAX_TOKENS", false), Some(FinishReason::Length));
        for reason in ["SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII"] {
            assert_eq!(
                finish_reason(reason, false),
                Some(FinishReason::ContentFilter),
                "{reason}"
            );
        }
        assert_eq!(
            finish_reason("MALFORMED_FUNCTION_CALL", false),
            Some(FinishReason::Other("MALFORMED_FUNCTION_CALL".into()))
        );
        assert_eq!(finish_reason("FINISH_REASON_UNSPECIFIED", false), None);
    }

    #[test]
    fn usage_counts_cached_and_thought_tokens() {
        let response = decode(json!({
            "candidates": [{"content": {"role": "model", "parts": [{"text": "hi"}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 1200, "candidatesTokenCount": 5, "thoughtsTokenCount": 40,
                              "cachedContentTokenCount": 1024, "totalTokenCount": 1245}
        }));
        assert_eq!(
            response.usage,
            Some(Usage {
                input_tokens: 1200,
                output_tokens: 45,
                cache_read_tokens: 1024,
                cache_write_tokens: 0
            })
        );
        assert_eq!(response.finish_reason, Some(FinishReason::Stop));
    }

    #[test]
    fn calls_without_ids_get_marked_ids_that_are_not_sent_back() {
        let response = decode(json!({
            "candidates": [{"content": {"role": "model", "parts": [
                {"functionCall": {"name": "lookup", "args": {"key": "k1"}}, "thoughtSignature": "c2lnLWE="},
                {"functionCall": {"id": "fc-2", "name": "lookup", "args": {"key": "k2"}}}
            ]}, "finishReason": "STOP"}]
        }));
        let ids: Vec<String> = response.message.tool_calls().map(|c| c.id.to_owned()).collect();
        assert!(ids[0].starts_with(SYNTHETIC_ID_PREFIX), "{ids:?}");
        assert_eq!(ids[1], "fc-2");
        assert_eq!(response.finish_reason, Some(FinishReason::ToolCalls));
        let parts = model_parts(&response.message, true);
        assert_eq!(
            parts,
            vec![
                json!({"functionCall": {"name": "lookup", "args": {"key": "k1"}}, "thoughtSignature": "c2lnLWE="}),
                json!({"functionCall": {"id": "fc-2", "name": "lookup", "args": {"key": "k2"}}}),
            ]
        );
    }

    #[test]
    fn a_text_turn_s_signature_goes_back_on_its_last_part_and_foreign_ones_never() {
        let mut msg = Msg::new(
            Role::Assistant,
            vec![
                Block::Thinking {
                    thinking: "summary".into(),
                    signature: Some(format!("{SIGNATURE_PREFIX}c2ln")),
                },
                Block::text("answer"),
            ],
        );
        assert_eq!(
            model_parts(&msg, true),
            vec![json!({"text": "answer", "thoughtSignature": "c2ln"})]
        );
        // An Anthropic signature is not Gemini's to replay.
        msg.content[0] = Block::Thinking {
            thinking: "t".into(),
            signature: Some("EqQBCkYIARgCKkD==".into()),
        };
        assert_eq!(model_parts(&msg, true), vec![json!({"text": "answer"})]);
    }

    fn body(request: &ChatRequest) -> Value {
        let client =
            GeminiClient::new(GeminiConfig::new("gemini-test", "http://127.0.0.1:1")).unwrap_or_else(|e| panic!("{e}"));
        let bytes = client.request_body(request).unwrap_or_else(|e| panic!("{e}"));
        serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn tool_choice_maps_to_function_calling_modes() {
        let tools: Arc<[harness_core::ToolSpec]> = Arc::from(vec![harness_core::ToolSpec::new(
            "lookup",
            "Look up.",
            json!({"type": "object"}),
        )]);
        for (choice, mode) in [
            (ToolChoice::Auto, "AUTO"),
            (ToolChoice::None, "NONE"),
            (ToolChoice::Required, "ANY"),
        ] {
            let request = ChatRequest {
                tools: Arc::clone(&tools),
                tool_choice: choice,
                ..ChatRequest::default()
            };
            assert_eq!(body(&request)["toolConfig"]["functionCallingConfig"]["mode"], mode);
        }
        assert!(body(&ChatRequest::default()).get("toolConfig").is_none());
    }

    #[test]
    fn media_system_messages_and_consecutive_turns_map_to_user_parts() {
        let image = MediaSource::Base64 {
            media_type: "image/png".into(),
            data: "iVBORw0K".into(),
        };
        let request = ChatRequest {
            messages: [
                Msg::new(Role::System, vec![Block::text("Be brief.")]),
                Msg::new(
                    Role::User,
                    vec![
                        Block::text("what is this?"),
                        Block::Image { source: image.clone() },
                        Block::Image {
                            source: MediaSource::Url {
                                url: "https://example.com/a.png".into(),
                            },
                        },
                    ],
                ),
                Msg::new(
                    Role::Assistant,
                    vec![Block::ToolUse {
                        id: "c1".into(),
                        name: "screenshot".into(),
                        input: json!("not an object"),
                    }],
                ),
                Msg::tool_result(
                    "c1",
                    vec![
                        Block::text("taken"),
                        Block::Image { source: image },
                        Block::Image {
                            source: MediaSource::Url {
                                url: "https://example.com/shot.png".into(),
                            },
                        },
                    ],
                    false,
                ),
                Msg::user("and now?"),
            ]
            .into_iter()
            .map(Arc::new)
            .collect(),
            ..ChatRequest::default()
        };
        assert_eq!(
            body(&request)["contents"],
            json!([
                {"role": "user", "parts": [
                    {"text": "Be brief."},
                    {"text": "what is this?"},
                    {"inlineData": {"mimeType": "image/png", "data": "iVBORw0K"}},
                    {"text": "[image: https://example.com/a.png]"},
                ]},
                {"role": "model", "parts": [
                    {"functionCall": {"id": "c1", "name": "screenshot", "args": {"arguments": "not an object"}},
                     "thoughtSignature": SKIP_SIGNATURE_VALIDATION},
                ]},
                {"role": "user", "parts": [
                    {"functionResponse": {"id": "c1", "name": "screenshot", "response": {"output": "taken"}}},
                    {"inlineData": {"mimeType": "image/png", "data": "iVBORw0K"}},
                    {"text": "[image: https://example.com/shot.png]"},
                    {"text": "and now?"},
                ]},
            ])
        );
    }

    #[test]
    fn calls_another_provider_made_skip_validation_on_models_that_validate() {
        let msg = Msg::new(
            Role::Assistant,
            vec![
                Block::Thinking {
                    thinking: "plan".into(),
                    signature: Some("EqQBCkYIARgCKkD==".into()),
                },
                Block::ToolUse {
                    id: "toolu_a".into(),
                    name: "lookup".into(),
                    input: json!({"key": "k1"}),
                },
                Block::ToolUse {
                    id: "toolu_b".into(),
                    name: "lookup".into(),
                    input: json!({"key": "k2"}),
                },
            ],
        );
        let call = |id: &str, key: &str| json!({"functionCall": {"id": id, "name": "lookup", "args": {"key": key}}});
        let mut first = call("toolu_a", "k1");
        first["thoughtSignature"] = json!(SKIP_SIGNATURE_VALIDATION);
        assert_eq!(model_parts(&msg, true), vec![first, call("toolu_b", "k2")]);
        assert_eq!(
            model_parts(&msg, false),
            vec![call("toolu_a", "k1"), call("toolu_b", "k2")]
        );
        // Through the request: a 2.5 model gets no sentinel, a 3 model does.
        let request = ChatRequest {
            messages: vec![Arc::new(msg)],
            ..ChatRequest::default()
        };
        let signature_sent = |model: &str| {
            let client =
                GeminiClient::new(GeminiConfig::new(model, "http://127.0.0.1:1")).unwrap_or_else(|e| panic!("{e}"));
            let bytes = client.request_body(&request).unwrap_or_else(|e| panic!("{e}"));
            let body: Value = serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{e}"));
            body["contents"][0]["parts"][0].get("thoughtSignature").cloned()
        };
        assert_eq!(signature_sent("models/gemini-2.5-flash"), None);
        assert_eq!(
            signature_sent("gemini-3-pro-preview"),
            Some(json!(SKIP_SIGNATURE_VALIDATION))
        );
        // A text-only turn needs no signature.
        let text = Msg::new(Role::Assistant, vec![Block::text("hi")]);
        assert_eq!(model_parts(&text, true), vec![json!({"text": "hi"})]);
    }

    #[test]
    fn a_blocked_prompt_is_a_content_filter_finish() {
        let response = decode(json!({
            "promptFeedback": {"blockReason": "SAFETY", "safetyRatings": [
                {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH"}]},
            "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9}
        }));
        assert_eq!(response.finish_reason, Some(FinishReason::ContentFilter));
        assert!(response.message.content.is_empty());
    }

    #[test]
    fn a_json_array_of_stream_chunks_decodes_as_one_response() {
        let response = decode(json!([
            {"candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}}]},
            {"candidates": [{"content": {"role": "model", "parts": [{"text": "lo"}]}, "finishReason": "STOP"}],
             "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2}}
        ]));
        assert_eq!(response.message.text(), "Hello");
        assert_eq!(response.finish_reason, Some(FinishReason::Stop));
        assert_eq!(response.usage.map(|u| u.output_tokens), Some(2));
        let err = decode_response(b"not json")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.starts_with("malformed model response: a response is not valid JSON"),
            "{err}"
        );
    }

    #[test]
    fn an_error_body_with_status_200_is_classified() {
        let err = decode_response(
            br#"{"error": {"code": 429, "message": "Resource has been exhausted", "status": "RESOURCE_EXHAUSTED",
                "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "2s"}]}}"#,
        )
        .err();
        assert!(
            matches!(err, Some(ModelError::RateLimited { retry_after: Some(wait) }) if wait.as_secs() == 2),
            "{err:?}"
        );
    }
}
