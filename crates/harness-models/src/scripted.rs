//! [`ScriptedModel`]: a [`ChatModel`] that plays scripted replies and records every request.

use async_trait::async_trait;
use harness_core::{Block, ChatModel, ChatRequest, FinishReason, ModelChunk, ModelError, ModelStream, Role, Usage};
use serde::Deserialize;
use serde_json::Value;
use std::collections::{HashSet, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// One scripted tool call.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedToolCall {
    /// Tool name.
    pub name: String,
    /// Arguments: an object, or a string sent verbatim (to script malformed arguments).
    #[serde(default)]
    pub arguments: Value,
    /// Call id; generated when absent.
    #[serde(default)]
    pub id: Option<String>,
}

/// The error kinds a script can produce.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", deny_unknown_fields)]
pub enum ScriptedError {
    /// [`ModelError::ContextOverflow`].
    ContextOverflow,
    /// [`ModelError::RateLimited`].
    RateLimited {
        /// Seconds to wait.
        #[serde(default)]
        retry_after_secs: Option<u64>,
    },
    /// [`ModelError::Transient`].
    Transient,
    /// [`ModelError::Auth`].
    Auth,
    /// [`ModelError::InvalidRequest`].
    InvalidRequest,
}

impl ScriptedError {
    fn to_error(&self) -> ModelError {
        match self {
            Self::ContextOverflow => ModelError::ContextOverflow {
                message: "scripted context overflow".into(),
            },
            Self::RateLimited { retry_after_secs } => ModelError::RateLimited {
                retry_after: retry_after_secs.map(Duration::from_secs),
            },
            Self::Transient => ModelError::transient("scripted transient failure"),
            Self::Auth => ModelError::Auth {
                status: 401,
                message: "scripted auth failure".into(),
            },
            Self::InvalidRequest => ModelError::InvalidRequest {
                status: 400,
                message: "scripted invalid request".into(),
            },
        }
    }
}

/// One scripted response.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reply {
    /// Answer text.
    #[serde(default)]
    pub text: Option<String>,
    /// Reasoning text.
    #[serde(default)]
    pub thinking: Option<String>,
    /// Tool calls.
    #[serde(default)]
    pub tool_calls: Vec<ScriptedToolCall>,
    /// Fail instead of answering.
    #[serde(default)]
    pub error: Option<ScriptedError>,
    /// Wait this long before answering.
    #[serde(default)]
    pub delay_ms: Option<u64>,
    /// Usage to report.
    #[serde(default)]
    pub usage: Option<Usage>,
    /// Why the reply ends (`stop`, `length`, `content_filter`, …); by default `tool_calls`
    /// when there are tool calls, else `stop`.
    #[serde(default)]
    pub finish_reason: Option<FinishReason>,
}

impl Reply {
    /// A text reply.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Self::default()
        }
    }

    /// A reply with one tool call.
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Self {
        Self {
            tool_calls: vec![ScriptedToolCall {
                name: name.into(),
                arguments,
                id: None,
            }],
            ..Self::default()
        }
    }

    /// A failing reply.
    pub fn error(error: ScriptedError) -> Self {
        Self {
            error: Some(error),
            ..Self::default()
        }
    }

    /// The same reply after `delay`.
    #[must_use]
    pub fn delayed(mut self, delay: Duration) -> Self {
        self.delay_ms = Some(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
        self
    }

    /// The same reply ending with `reason` (e.g. [`FinishReason::Length`] for a reply cut by
    /// the output-length limit).
    #[must_use]
    pub fn with_finish_reason(mut self, reason: FinishReason) -> Self {
        self.finish_reason = Some(reason);
        self
    }

    /// The same reply reporting `usage`.
    #[must_use]
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = Some(usage);
        self
    }
}

/// Why a script file could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScriptError {
    /// The file could not be read.
    #[error("cannot read script {path}")]
    Read {
        /// The path.
        path: String,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a valid script.
    #[error(
        "script {path} is not valid: {message}; expected {{\"replies\": [{{\"text\": ...}} | {{\"tool_calls\": [...]}} | {{\"error\": {{\"kind\": ...}}}}], \"fallback\": \"echo\" | \"repeat_last\" | \"fail\"}}"
    )]
    Parse {
        /// The path.
        path: String,
        /// What serde said.
        message: String,
    },
}

/// What to do when the script runs out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fallback {
    /// Fail with a clear error (default: a test that makes more calls than scripted fails).
    #[default]
    Fail,
    /// Answer `echo: <last user text>`.
    Echo,
    /// Play the last reply again.
    RepeatLast,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptFile {
    #[serde(default)]
    replies: Vec<Reply>,
    #[serde(default)]
    fallback: Fallback,
}

type Responder = dyn Fn(&ChatRequest) -> Reply + Send + Sync;

#[derive(Default)]
struct Inner {
    replies: Mutex<VecDeque<Reply>>,
    last: Mutex<Option<Reply>>,
    requests: Mutex<Vec<ChatRequest>>,
    violations: Mutex<Vec<String>>,
    fallback: Mutex<Fallback>,
    responder: Option<Box<Responder>>,
    name: String,
    /// The context window to report; 0 = unknown.
    context_window: std::sync::atomic::AtomicU64,
    /// What [`ChatModel::native_response_format`] reports.
    native_response_format: std::sync::atomic::AtomicBool,
    /// What [`ChatModel::accepts_images`] reports.
    accepts_images: std::sync::atomic::AtomicBool,
}

/// A test double that plays scripted replies in order and records every [`ChatRequest`].
///
/// On every call it checks the conversation invariant real providers enforce: each tool
/// call in the request has a result and each result answers a call. A violation is recorded
/// ([`violations`](Self::violations)) and fails the call with `InvalidRequest`, as a real
/// provider would. Clones share the script and the recordings.
///
/// Scripts load from JSON (`{"replies": [...], "fallback": "echo"}`), so
/// `harness run --model scripted:PATH` works offline.
#[derive(Clone)]
pub struct ScriptedModel {
    inner: Arc<Inner>,
}

impl Default for ScriptedModel {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedModel")
            .field("name", &self.inner.name)
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ScriptedModel {
    /// An empty script; calls fail until replies are added.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                name: "scripted".into(),
                ..Inner::default()
            }),
        }
    }

    /// A model that computes each reply from the request (for benchmarks and demos).
    pub fn from_fn(responder: impl Fn(&ChatRequest) -> Reply + Send + Sync + 'static) -> Self {
        Self {
            inner: Arc::new(Inner {
                name: "scripted".into(),
                responder: Some(Box::new(responder)),
                ..Inner::default()
            }),
        }
    }

    /// Loads a JSON script.
    ///
    /// # Errors
    /// [`ScriptError`] when the file cannot be read or parsed.
    pub fn from_file(path: &Path) -> Result<Self, ScriptError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ScriptError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::from_json(&text).map_err(|message| ScriptError::Parse { path: shown, message })
    }

    /// Parses a JSON script (an object with `replies`, or a bare array of replies).
    ///
    /// # Errors
    /// The parse error as text.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let file: ScriptFile = match serde_json::from_str::<Vec<Reply>>(text) {
            Ok(replies) => ScriptFile {
                replies,
                fallback: Fallback::Fail,
            },
            Err(_) => serde_json::from_str(text).map_err(|err| err.to_string())?,
        };
        let model = Self::new().fallback(file.fallback);
        for reply in file.replies {
            model.push(reply);
        }
        Ok(model)
    }

    /// Reports `tokens` as the context window (default: unknown). Clones share the value.
    #[must_use]
    pub fn with_context_window(self, tokens: u64) -> Self {
        self.inner
            .context_window
            .store(tokens, std::sync::atomic::Ordering::Relaxed);
        self
    }

    /// Reports that it takes images ([`ChatModel::accepts_images`]; default: it does not).
    /// Clones share the value.
    #[must_use]
    pub fn with_images(self, accepts: bool) -> Self {
        self.inner
            .accepts_images
            .store(accepts, std::sync::atomic::Ordering::Relaxed);
        self
    }

    /// Reports that it honours [`ChatRequest::response_format`] natively (default: it does
    /// not), as a provider client with constrained decoding does; the replies stay what the
    /// script says. Clones share the value.
    #[must_use]
    pub fn with_native_response_format(self, native: bool) -> Self {
        self.inner
            .native_response_format
            .store(native, std::sync::atomic::Ordering::Relaxed);
        self
    }

    /// Appends a reply to the script (usable while the model is shared).
    pub fn push(&self, reply: Reply) {
        lock(&self.inner.replies).push_back(reply);
    }

    /// Adds a reply.
    #[must_use]
    pub fn reply(self, reply: Reply) -> Self {
        self.push(reply);
        self
    }

    /// Adds a text reply.
    #[must_use]
    pub fn reply_text(self, text: impl Into<String>) -> Self {
        self.reply(Reply::text(text))
    }

    /// Adds a reply with one tool call.
    #[must_use]
    pub fn reply_tool_call(self, name: impl Into<String>, arguments: Value) -> Self {
        self.reply(Reply::tool_call(name, arguments))
    }

    /// Adds a failing reply.
    #[must_use]
    pub fn reply_error(self, error: ScriptedError) -> Self {
        self.reply(Reply::error(error))
    }

    /// Sets what happens when the script runs out.
    #[must_use]
    pub fn fallback(self, fallback: Fallback) -> Self {
        *lock(&self.inner.fallback) = fallback;
        self
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<ChatRequest> {
        lock(&self.inner.requests).clone()
    }

    /// How many requests were received.
    pub fn request_count(&self) -> usize {
        lock(&self.inner.requests).len()
    }

    /// The last request received.
    pub fn last_request(&self) -> Option<ChatRequest> {
        lock(&self.inner.requests).last().cloned()
    }

    /// Conversation-invariant violations seen so far (should be empty).
    pub fn violations(&self) -> Vec<String> {
        lock(&self.inner.violations).clone()
    }

    /// How many scripted replies are left.
    pub fn remaining(&self) -> usize {
        lock(&self.inner.replies).len()
    }

    fn next_reply(&self, request: &ChatRequest) -> Result<Reply, ModelError> {
        if let Some(responder) = &self.inner.responder {
            return Ok(responder(request));
        }
        if let Some(reply) = lock(&self.inner.replies).pop_front() {
            *lock(&self.inner.last) = Some(reply.clone());
            return Ok(reply);
        }
        match *lock(&self.inner.fallback) {
            Fallback::Echo => {
                let last_user = request
                    .messages
                    .iter()
                    .rev()
                    .find(|m| m.role == Role::User)
                    .map(|m| m.text());
                Ok(Reply::text(format!("echo: {}", last_user.unwrap_or_default())))
            }
            Fallback::RepeatLast => lock(&self.inner.last).clone().ok_or_else(exhausted),
            Fallback::Fail => Err(exhausted()),
        }
    }
}

fn exhausted() -> ModelError {
    ModelError::InvalidRequest {
        status: 400,
        message: "the scripted model has no reply left; add replies to the script or set a fallback".into(),
    }
}

/// Checks that every tool call has a result and every result answers an earlier call.
fn check_pairs(request: &ChatRequest) -> Result<(), String> {
    let mut open: HashSet<&str> = HashSet::new();
    let mut seen_calls: HashSet<&str> = HashSet::new();
    for msg in &request.messages {
        for block in &msg.content {
            match block {
                Block::ToolUse { id, .. } => {
                    open.insert(id);
                    seen_calls.insert(id);
                }
                Block::ToolResult { tool_use_id, .. } => {
                    if !seen_calls.contains(tool_use_id.as_str()) {
                        return Err(format!("tool result {tool_use_id} answers no earlier tool call"));
                    }
                    open.remove(tool_use_id.as_str());
                }
                _ => {}
            }
        }
        if msg.role == Role::User && !open.is_empty() {
            return Err(format!(
                "tool calls {open:?} have no result before the next user message"
            ));
        }
    }
    if !open.is_empty() {
        return Err(format!("tool calls {open:?} have no result"));
    }
    Ok(())
}

fn split_pieces(text: &str, pieces: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(pieces.max(1)).max(1);
    chars.chunks(size).map(|chunk| chunk.iter().collect()).collect()
}

#[async_trait]
impl ChatModel for ScriptedModel {
    fn name(&self) -> &str {
        &self.inner.name
    }

    fn provider(&self) -> &str {
        "scripted"
    }

    fn context_window(&self) -> Option<u64> {
        match self.inner.context_window.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            tokens => Some(tokens),
        }
    }

    fn native_response_format(&self) -> bool {
        self.inner
            .native_response_format
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn accepts_images(&self) -> bool {
        self.inner.accepts_images.load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn stream(&self, request: ChatRequest) -> Result<ModelStream, ModelError> {
        let checked = check_pairs(&request);
        let reply = self.next_reply(&request);
        lock(&self.inner.requests).push(request);
        if let Err(violation) = checked {
            lock(&self.inner.violations).push(violation.clone());
            return Err(ModelError::InvalidRequest {
                status: 400,
                message: violation,
            });
        }
        let reply = reply?;
        if let Some(delay) = reply.delay_ms {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if let Some(error) = &reply.error {
            return Err(error.to_error());
        }
        let mut chunks: Vec<Result<ModelChunk, ModelError>> = Vec::new();
        if let Some(thinking) = &reply.thinking {
            chunks.push(Ok(ModelChunk::ThinkingDelta {
                text: thinking.clone(),
                signature: None,
            }));
        }
        if let Some(text) = &reply.text {
            chunks.extend(
                split_pieces(text, 3)
                    .into_iter()
                    .map(|piece| Ok(ModelChunk::TextDelta(piece))),
            );
        }
        for (index, call) in reply.tool_calls.iter().enumerate() {
            let arguments = match &call.arguments {
                Value::String(raw) => raw.clone(),
                Value::Null => "{}".to_owned(),
                other => other.to_string(),
            };
            let id = call.id.clone().unwrap_or_else(|| format!("call_{}", uuid_like(index)));
            let mut pieces = split_pieces(&arguments, 2).into_iter();
            chunks.push(Ok(ModelChunk::ToolCallDelta {
                index,
                id: Some(id),
                name: Some(call.name.clone()),
                arguments: pieces.next().unwrap_or_default(),
            }));
            chunks.extend(pieces.map(|piece| {
                Ok(ModelChunk::ToolCallDelta {
                    index,
                    id: None,
                    name: None,
                    arguments: piece,
                })
            }));
        }
        if let Some(usage) = reply.usage {
            chunks.push(Ok(ModelChunk::Usage(usage)));
        }
        let finish = match &reply.finish_reason {
            Some(reason) => reason.clone(),
            None if reply.tool_calls.is_empty() => FinishReason::Stop,
            None => FinishReason::ToolCalls,
        };
        chunks.push(Ok(ModelChunk::Finish(finish)));
        Ok(Box::pin(futures::stream::iter(chunks)))
    }
}

fn uuid_like(index: usize) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(1);
    format!("{:06}_{index}", COUNTER.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use harness_core::{Msg, collect};

    fn request(messages: Vec<Msg>) -> ChatRequest {
        ChatRequest {
            messages: messages.into_iter().map(Arc::new).collect(),
            ..ChatRequest::default()
        }
    }

    #[tokio::test]
    async fn plays_replies_in_order_and_records_requests() {
        let model = ScriptedModel::new()
            .reply_tool_call("lookup", serde_json::json!({"key": "k1"}))
            .reply_text("done");
        let first = collect(
            model
                .stream(request(vec![Msg::user("hi")]))
                .await
                .unwrap_or_else(|e| panic!("{e}")),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        let call = first
            .message
            .tool_calls()
            .next()
            .map(|c| (c.name.to_owned(), c.input.clone()));
        assert_eq!(call, Some(("lookup".to_owned(), serde_json::json!({"key": "k1"}))));
        let second = model
            .call(request(vec![Msg::user("again")]))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(second.message.text(), "done");
        assert_eq!(model.request_count(), 2);
        assert!(matches!(
            model.call(request(vec![])).await,
            Err(ModelError::InvalidRequest { .. })
        ));
    }

    #[tokio::test]
    async fn a_dangling_tool_call_is_a_violation() {
        let model = ScriptedModel::new().reply_text("x");
        let mut call = Msg::assistant("");
        call.content = vec![Block::ToolUse {
            id: "c1".into(),
            name: "t".into(),
            input: serde_json::json!({}),
        }];
        let result = model.call(request(vec![Msg::user("a"), call, Msg::user("b")])).await;
        assert!(matches!(result, Err(ModelError::InvalidRequest { .. })));
        assert_eq!(model.violations().len(), 1);
    }

    #[test]
    fn scripts_load_from_json() {
        let model = ScriptedModel::from_json(
            r#"{"replies": [{"text": "a"}, {"tool_calls": [{"name": "t", "arguments": {"x": 1}}]}, {"error": {"kind": "context_overflow"}}], "fallback": "echo"}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(model.remaining(), 3);
        assert!(ScriptedModel::from_json(r#"{"replies": [{"txt": "a"}]}"#).is_err());
    }
}
