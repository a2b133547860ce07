//! The OpenAI-compatible routes: `GET /v1/models` and `POST /v1/chat/completions`.
//!
//! With an `X-Harness-Session` header the request continues that session: its last user
//! message is the turn's input and the session's own history is the context (earlier
//! messages of the request are ignored). Without it the request is self-contained: its
//! messages seed a new session, whose id comes back in the `X-Harness-Session` response
//! header. Tool activity rides in `harness` extension fields that plain clients ignore.
//!
//! A turn that stops to wait for a person's approval ends normally (`finish_reason`
//! `stop`); its text ends with a `[waiting for approval: ...]` line naming the calls and the
//! native route that decides them, and the `harness` field says `"status":
//! "awaiting_approval"` with the `pending` calls (streaming: an `approval_required` chunk).

use crate::Gateway;
use crate::error::ApiError;
use crate::feed::Frame;
use crate::queue::{Delegation, SessionKey};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::{Stream, StreamExt};
use harness_core::{AgentInput, Msg, SessionId, Usage};
use harness_protocol::header::SESSION_HEADER;
use harness_protocol::{EventId, WireKind};
use serde::Deserialize;
use serde_json::{Value, json};
use std::convert::Infallible;

pub(crate) fn routes() -> Router<Gateway> {
    Router::new()
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(completions))
}

async fn models(State(gateway): State<Gateway>, headers: HeaderMap) -> Result<Response, ApiError> {
    gateway.user(&headers)?;
    let data: Vec<Value> = gateway
        .inner
        .agents
        .keys()
        .map(|name| json!({"id": name, "object": "model", "created": 0, "owned_by": "harness"}))
        .collect();
    Ok(axum::Json(json!({"object": "list", "data": data})).into_response())
}

#[derive(Debug, Deserialize)]
struct CompletionRequest {
    model: String,
    messages: Vec<RequestMessage>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

#[derive(Debug, Deserialize)]
struct RequestMessage {
    role: String,
    #[serde(default)]
    content: Option<Content>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize)]
struct Part {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
}

impl RequestMessage {
    fn text(&self) -> Result<String, ApiError> {
        match &self.content {
            None => Ok(String::new()),
            Some(Content::Text(text)) => Ok(text.clone()),
            Some(Content::Parts(parts)) => {
                let mut text = String::new();
                for part in parts {
                    match (part.kind.as_str(), &part.text) {
                        ("text", Some(part)) => text.push_str(part),
                        (kind, _) => {
                            return Err(ApiError::bad_request(format!(
                                "content part `{kind}` is not supported; send text parts"
                            )));
                        }
                    }
                }
                Ok(text)
            }
        }
    }

    /// The message as context, or `None` for messages the transcript does not keep
    /// (tool results and assistant tool calls of another runtime's loop).
    fn to_msg(&self) -> Result<Option<Msg>, ApiError> {
        let text = self.text()?;
        Ok(match self.role.as_str() {
            "system" | "developer" => Some(Msg::system(text)),
            "user" => Some(Msg::user(text)),
            "assistant" if !text.is_empty() => Some(Msg::assistant(text)),
            "assistant" | "tool" | "function" => None,
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown role `{other}`; use system, user or assistant"
                )));
            }
        })
    }
}

fn session_header(headers: &HeaderMap) -> Result<Option<SessionId>, ApiError> {
    let Some(value) = headers.get(SESSION_HEADER) else {
        return Ok(None);
    };
    let raw = value
        .to_str()
        .map_err(|_| ApiError::bad_request("X-Harness-Session must be ASCII"))?;
    SessionId::parse(raw)
        .map(Some)
        .map_err(|err| ApiError::bad_request(format!("X-Harness-Session: {err}")))
}

async fn completions(State(gateway): State<Gateway>, headers: HeaderMap, body: Bytes) -> Result<Response, ApiError> {
    let user = gateway.user(&headers)?;
    let request: CompletionRequest =
        serde_json::from_slice(&body).map_err(|err| ApiError::bad_request(format!("invalid request body: {err}")))?;
    let served = gateway.agent(&request.model)?;
    let (session, input) = match session_header(&headers)? {
        Some(session) => {
            let last = request
                .messages
                .iter()
                .rev()
                .find(|message| message.role == "user")
                .ok_or_else(|| ApiError::bad_request("messages has no user message to send"))?;
            (session, AgentInput::from(last.text()?))
        }
        None => {
            let mut messages = Vec::with_capacity(request.messages.len());
            for message in &request.messages {
                messages.extend(message.to_msg()?);
            }
            if !messages.last().is_some_and(|m| m.role == harness_core::Role::User) {
                return Err(ApiError::bad_request("the last message must be a user message"));
            }
            let session = SessionId::parse(format!("chatcmpl-{}", uuid::Uuid::now_v7().simple()))
                .map_err(|err| ApiError::internal(err.to_string()))?;
            (session, AgentInput(messages))
        }
    };
    let key = SessionKey {
        agent: request.model.clone(),
        user,
        session: session.clone(),
    };
    // The first turn records the caller as the session's owner; another user's is 404.
    crate::owners::check(&gateway, served, &key, crate::owners::Access::Claim).await?;
    let feed = gateway
        .inner
        .queues
        .enqueue(&served.agent, key, input, Delegation::default())?;
    let id = format!("chatcmpl-{}", feed.turn_id().trim_start_matches("turn-"));
    let created = jiff::Timestamp::now().as_second();
    let frames = feed.subscribe(EventId::default());
    let mut response = if request.stream {
        let include_usage = request.stream_options.is_some_and(|options| options.include_usage);
        let chunks = ChunkWriter {
            id,
            created,
            model: request.model,
            session: session.to_string(),
            texted: false,
            usage: Usage::default(),
            include_usage,
        };
        Sse::new(chunks.stream(frames))
            .keep_alive(KeepAlive::default())
            .into_response()
    } else {
        complete(frames, id, created, &request.model, &session).await?
    };
    if let Ok(value) = HeaderValue::from_str(session.as_str()) {
        response.headers_mut().insert(SESSION_HEADER, value);
    }
    Ok(response)
}

/// Waits for the turn and answers one `chat.completion`.
async fn complete(
    frames: impl Stream<Item = Frame>,
    id: String,
    created: i64,
    model: &str,
    session: &SessionId,
) -> Result<Response, ApiError> {
    let mut frames = std::pin::pin!(frames);
    let mut usage = Usage::default();
    let mut tools = Vec::new();
    let mut pending = Vec::new();
    while let Some(frame) = frames.next().await {
        if frame.event.source.is_some() {
            continue;
        }
        match frame.event.kind {
            WireKind::StepEnd { usage: Some(step), .. } => usage.add(&step),
            WireKind::ToolCall { id, name, input } => tools.push(json!({"id": id, "name": name, "input": input})),
            WireKind::ApprovalRequired { calls } => pending = calls,
            WireKind::Final { turn_id, message } => {
                let mut content = message.text();
                let status = if pending.is_empty() {
                    "completed"
                } else {
                    if !content.is_empty() {
                        content.push_str("\n\n");
                    }
                    content.push_str(&approval_notice(model, session.as_str(), &pending));
                    "awaiting_approval"
                };
                let body = json!({
                    "id": id,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [{
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }],
                    "usage": usage_json(&usage),
                    "harness": {
                        "session_id": session.as_str(),
                        "turn_id": turn_id,
                        "tool_calls": tools,
                        "status": status,
                        "pending": pending,
                    },
                });
                return Ok(axum::Json(body).into_response());
            }
            WireKind::Error { message, kind, .. } => return Err(ApiError::from_turn(kind, message)),
            _ => {}
        }
    }
    Err(ApiError::internal("the turn ended without a final message"))
}

/// The text a plain OpenAI client sees when the turn waits for approval: which calls, and
/// where to answer them (the native approvals route).
fn approval_notice(agent: &str, session: &str, pending: &[harness_core::PendingCall]) -> String {
    let calls: Vec<String> = pending
        .iter()
        .map(|call| format!("{} ({}, call {})", call.tool, call.input, call.id))
        .collect();
    format!(
        "[waiting for approval: {}; decide with POST /api/agents/{agent}/sessions/{session}/approvals]",
        calls.join("; ")
    )
}

fn usage_json(usage: &Usage) -> Value {
    json!({
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
    })
}

/// Turns a turn's events into `chat.completion.chunk`s.
struct ChunkWriter {
    id: String,
    created: i64,
    model: String,
    session: String,
    /// Whether answer text was sent (the approval notice then starts on a new paragraph).
    texted: bool,
    usage: Usage,
    include_usage: bool,
}

impl ChunkWriter {
    fn chunk(&self, choices: Value, extra: Option<(&str, Value)>) -> Event {
        let mut chunk = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        });
        if let (Some((key, value)), Some(object)) = (extra, chunk.as_object_mut()) {
            object.insert(key.to_owned(), value);
        }
        Event::default().data(chunk.to_string())
    }

    fn delta(&self, delta: Value, finish: Option<&str>) -> Event {
        self.chunk(json!([{"index": 0, "delta": delta, "finish_reason": finish}]), None)
    }

    /// The chunks for one frame; the last frame also yields the usage chunk and `[DONE]`.
    fn frame(&mut self, frame: Frame) -> Vec<Event> {
        let own = frame.event.source.is_none();
        match frame.event.kind {
            WireKind::TextDelta { delta } if own => {
                self.texted = true;
                vec![self.delta(json!({"content": delta}), None)]
            }
            WireKind::StepEnd { usage: Some(step), .. } if own => {
                self.usage.add(&step);
                Vec::new()
            }
            WireKind::ApprovalRequired { calls } if own => {
                let mut notice = approval_notice(&self.model, &self.session, &calls);
                if self.texted {
                    notice.insert_str(0, "\n\n");
                }
                let event = json!({"type": "approval_required", "calls": calls});
                vec![
                    self.chunk(json!([]), Some(("harness", event))),
                    self.delta(json!({"content": notice}), None),
                ]
            }
            WireKind::TurnStart { .. } => vec![self.delta(json!({"role": "assistant", "content": ""}), None)],
            WireKind::Final { .. } if own => {
                let mut events = vec![self.delta(json!({}), Some("stop"))];
                if self.include_usage {
                    events.push(self.chunk(json!([]), Some(("usage", usage_json(&self.usage)))));
                }
                events.push(Event::default().data("[DONE]"));
                events
            }
            WireKind::Error { message, kind, .. } if own => {
                let error = ApiError::from_turn(kind, message);
                vec![
                    Event::default().data(serde_json::to_string(&error.body()).unwrap_or_default()),
                    Event::default().data("[DONE]"),
                ]
            }
            // Tool calls, results, thinking, notices and child activity: an extension field on
            // a chunk with no choices, which OpenAI clients skip.
            _ => {
                let event = serde_json::to_value(&frame.event).unwrap_or(Value::Null);
                vec![self.chunk(json!([]), Some(("harness", event)))]
            }
        }
    }

    fn stream(
        mut self,
        frames: impl Stream<Item = Frame> + Send + 'static,
    ) -> impl Stream<Item = Result<Event, Infallible>> + Send + 'static {
        frames
            .flat_map(move |frame| futures::stream::iter(self.frame(frame)))
            .map(Ok)
    }
}
