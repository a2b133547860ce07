//! The OpenAI-compatible routes: `GET /v1/models` and `POST /v1/chat/completions` (the
//! Responses API is [`crate::responses`], on the same turn machinery).
//!
//! **Which session.** With an `X-Harness-Session` header the request continues that session:
//! its new input is the last user message (or the trailing tool results), and the session's
//! own history is the context. Without it, a request whose messages extend a conversation
//! this deployment answered for the same user continues that conversation's session
//! ([`crate::threads`]), so an SDK that resends the whole history gets one session per chat;
//! any other request seeds a new session with its messages (the client's own tool calls and
//! results included). The session id comes back in the `X-Harness-Session` header.
//!
//! **Client tools.** `tools` (functions) are offered to the model beside the agent's own (a
//! name clash is a 400). When the model calls one, the reply ends with `tool_calls` and
//! `finish_reason: "tool_calls"`, and the turn waits durably, like an approval; the next
//! request carrying `tool` messages with the results resumes it (header or not).
//! `tool_choice` `required` or a named function makes the turn's first model call call one of
//! the caller's tools (or that one) ([`tool_choice`]).
//!
//! **`response_format`** (`json_object`, `json_schema` with `strict`) runs the turn through
//! the structured output: the content is the validated JSON answer or the request fails; the
//! prose of a refused attempt is never sent.
//!
//! Streamed and non-streamed replies carry the same content: the text of every step of the
//! turn, steps separated by a blank line. Every stream chunk has exactly one choice; tool
//! activity rides in a `harness` extension field on a chunk with an empty delta, and usage
//! (with `stream_options.include_usage`) on the chunk with the finish reason.
//!
//! A turn that stops to wait for a person's approval ends normally (`finish_reason` `stop`);
//! its text ends with a `[waiting for approval: ...]` line naming the calls and the native
//! route that decides them, and the `harness` field says `"status": "awaiting_approval"`
//! with the `pending` calls (streaming: an `approval_required` chunk).

use crate::error::ApiError;
use crate::feed::Frame;
use crate::queue::{Asks, Delegation, SessionKey, TurnInput};
use crate::threads::{self, Seen};
use crate::{Gateway, Served};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::{Stream, StreamExt};
use harness::structured::OutputSchema;
use harness::structured::client_tools::{CLIENT_TOOL_REASON, ClientChoice, ClientResult, ClientTools};
use harness_core::{AgentInput, ApprovalDecision, Block, Msg, PendingCall, Role, SessionId, ToolSpec, Usage, UserId};
use harness_protocol::header::SESSION_HEADER;
use harness_protocol::{EventId, WireKind};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

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
    #[serde(default)]
    tools: Option<Vec<ToolDef>>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    response_format: Option<Value>,
    #[serde(default)]
    n: Option<u32>,
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

/// One entry of `tools`: `{"type": "function", "function": {name, description, parameters}}`.
#[derive(Debug, Deserialize)]
struct ToolDef {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    function: Option<FunctionDef>,
}

/// A function tool's definition (also the flat shape of the Responses API).
#[derive(Debug, Deserialize)]
pub(crate) struct FunctionDef {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) description: Option<String>,
    #[serde(default)]
    pub(crate) parameters: Option<Value>,
}

/// A message of the request. Fields clients add that carry nothing for the turn (`name`,
/// `refusal`, `audio`, ...) are ignored.
#[derive(Debug, Deserialize)]
pub(crate) struct RequestMessage {
    pub(crate) role: String,
    #[serde(default)]
    pub(crate) content: Option<Content>,
    #[serde(default)]
    pub(crate) tool_calls: Option<Vec<CallIn>>,
    #[serde(default)]
    pub(crate) tool_call_id: Option<String>,
}

/// An assistant message's tool call as the client echoes it.
#[derive(Debug, Deserialize)]
pub(crate) struct CallIn {
    pub(crate) id: String,
    pub(crate) function: FunctionCall,
}

#[derive(Debug, Deserialize)]
pub(crate) struct FunctionCall {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) arguments: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize)]
pub(crate) struct Part {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    image_url: Option<ImageUrl>,
}

/// `image_url`: `{"url": ...}` (chat) or the URL itself.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum ImageUrl {
    Object { url: String },
    Url(String),
}

impl ImageUrl {
    fn url(&self) -> &str {
        match self {
            Self::Object { url } | Self::Url(url) => url,
        }
    }
}

/// Where an image part's bytes are: a `data:` URL's payload, or an `http(s)` URL.
///
/// # Errors
/// 400 for any other address.
pub(crate) fn image_source(url: &str) -> Result<harness_core::MediaSource, ApiError> {
    if let Some(rest) = url.strip_prefix("data:") {
        let (media_type, data) = rest
            .split_once(";base64,")
            .ok_or_else(|| ApiError::bad_request("an image data URL must be data:<type>;base64,<data>"))?;
        return Ok(harness_core::MediaSource::Base64 {
            media_type: media_type.to_owned(),
            data: data.to_owned(),
        });
    }
    if url.starts_with("https://") || url.starts_with("http://") {
        return Ok(harness_core::MediaSource::Url { url: url.to_owned() });
    }
    Err(ApiError::bad_request("an image URL must be http(s):// or a data: URL"))
}

/// 400 unless the agent's model takes images (when `seen` holds any).
///
/// # Errors
/// 400 naming the agent.
pub(crate) fn check_images(served: &Served, seen: &[Seen]) -> Result<(), ApiError> {
    if seen.iter().any(|message| !message.images.is_empty()) && !served.agent.kernel().accepts_images() {
        return Err(ApiError::bad_request(format!(
            "image parts: the model of agent `{}` takes no images; send text only, or serve the agent with a vision-capable model",
            served.agent.kernel().name()
        )));
    }
    Ok(())
}

impl RequestMessage {
    /// The text and the image URLs of the content.
    fn content(&self) -> Result<(String, Vec<String>), ApiError> {
        match &self.content {
            None => Ok((String::new(), Vec::new())),
            Some(Content::Text(text)) => Ok((text.clone(), Vec::new())),
            Some(Content::Parts(parts)) => {
                let mut text = String::new();
                let mut images = Vec::new();
                for part in parts {
                    match (part.kind.as_str(), &part.text, &part.image_url) {
                        ("text" | "input_text" | "output_text", Some(part), _) => text.push_str(part),
                        ("image_url", _, Some(image)) => images.push(image.url().to_owned()),
                        ("refusal", _, _) => {}
                        (kind, _, _) => {
                            return Err(ApiError::bad_request(format!(
                                "content part `{kind}` is not supported; send text or image_url parts"
                            )));
                        }
                    }
                }
                Ok((text, images))
            }
        }
    }

    /// The message in the normal form of [`crate::threads`].
    pub(crate) fn seen(&self) -> Result<Seen, ApiError> {
        let role = match self.role.as_str() {
            "system" | "developer" => "system",
            "user" => "user",
            "assistant" => "assistant",
            "tool" | "function" => "tool",
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown role `{other}`; use system, developer, user, assistant or tool"
                )));
            }
        };
        let calls = self
            .tool_calls
            .iter()
            .flatten()
            .map(|call| {
                let arguments = Seen::arguments(call.function.arguments.as_deref().unwrap_or("{}"));
                (call.id.clone(), call.function.name.clone(), arguments)
            })
            .collect();
        let (text, images) = self.content()?;
        if !images.is_empty() && role != "user" {
            return Err(ApiError::bad_request("image parts are taken in user messages only"));
        }
        Ok(Seen {
            role,
            text: text.trim().to_owned(),
            calls,
            call_id: self.tool_call_id.clone(),
            images,
        })
    }
}

impl Seen {
    /// The message as transcript context, or `None` for an empty assistant message.
    pub(crate) fn to_msg(&self) -> Result<Option<Msg>, ApiError> {
        Ok(match self.role {
            "system" => Some(Msg::system(self.text.clone())),
            "user" if self.images.is_empty() => Some(Msg::user(self.text.clone())),
            "user" => {
                let mut blocks = vec![Block::text(self.text.clone())];
                for url in &self.images {
                    blocks.push(Block::Image {
                        source: image_source(url)?,
                    });
                }
                Some(Msg::new(Role::User, blocks))
            }
            "assistant" => {
                let mut blocks = Vec::new();
                if !self.text.is_empty() {
                    blocks.push(Block::text(self.text.clone()));
                }
                for (id, name, input) in &self.calls {
                    blocks.push(Block::ToolUse {
                        id: id.clone(),
                        name: name.clone(),
                        input: input.clone(),
                    });
                }
                (!blocks.is_empty()).then(|| Msg::new(Role::Assistant, blocks))
            }
            _ => {
                let id = self
                    .call_id
                    .clone()
                    .ok_or_else(|| ApiError::bad_request("a tool message needs its tool_call_id"))?;
                Some(Msg::tool_result(id, vec![Block::text(self.text.clone())], false))
            }
        })
    }
}

pub(crate) fn session_header(headers: &HeaderMap) -> Result<Option<SessionId>, ApiError> {
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

/// A tool's name as providers take it.
fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The caller's function tools, checked: valid unique names, none an agent tool's.
///
/// # Errors
/// 400 naming the tool.
pub(crate) fn client_specs(served: &Served, functions: Vec<FunctionDef>) -> Result<Arc<[ToolSpec]>, ApiError> {
    let agent_tools = served.agent.kernel().tool_specs();
    let mut specs: Vec<ToolSpec> = Vec::with_capacity(functions.len());
    for function in functions {
        let name = function.name;
        if !valid_tool_name(&name) {
            return Err(ApiError::bad_request(format!(
                "tools: `{name}` is not a valid function name; use 1 to 64 letters, digits, `_` or `-`"
            )));
        }
        if agent_tools.iter().any(|tool| tool.name == name) || name == harness::structured::GENERATE_RESPONSE {
            return Err(ApiError::bad_request(format!(
                "tools: `{name}` is also a tool of agent `{}`; rename your function",
                served.agent.kernel().name()
            )));
        }
        if specs.iter().any(|spec| spec.name == name) {
            return Err(ApiError::bad_request(format!("tools: `{name}` is listed twice")));
        }
        let parameters = function
            .parameters
            .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
        if parameters.get("type").and_then(Value::as_str) != Some("object") {
            return Err(ApiError::bad_request(format!(
                "tools: the parameters of `{name}` must be a JSON Schema of type object"
            )));
        }
        specs.push(ToolSpec::new(
            name,
            function.description.unwrap_or_default(),
            parameters,
        ));
    }
    Ok(specs.into())
}

/// `tool_choice` over the caller's tools: `auto` (or absent) offers them beside the agent's,
/// `none` offers none, `required` makes the first model call call one of them, and a named
/// function (`{"type": "function", "function": {"name": ...}}`, or the Responses API's flat
/// `{"type": "function", "name": ...}`) makes it call that one. Returns the tools to offer
/// and the choice.
///
/// # Errors
/// 400 for `required` without tools, a name that is not among `tools`, or another shape.
pub(crate) fn tool_choice(
    choice: Option<&Value>,
    specs: Arc<[ToolSpec]>,
) -> Result<(Arc<[ToolSpec]>, ClientChoice), ApiError> {
    let named = |choice: &Value| {
        (choice.get("type").and_then(Value::as_str) == Some("function"))
            .then(|| {
                choice
                    .pointer("/function/name")
                    .or_else(|| choice.get("name"))
                    .and_then(Value::as_str)
            })
            .flatten()
            .map(str::to_owned)
    };
    match choice {
        None | Some(Value::Null) => Ok((specs, ClientChoice::Auto)),
        Some(Value::String(choice)) if choice == "auto" => Ok((specs, ClientChoice::Auto)),
        Some(Value::String(choice)) if choice == "none" => Ok((Arc::from(Vec::new()), ClientChoice::Auto)),
        Some(Value::String(choice)) if choice == "required" => {
            if specs.is_empty() {
                return Err(ApiError::bad_request(
                    "tool_choice \"required\" needs function tools in `tools`; send them, or tool_choice \"auto\"",
                ));
            }
            Ok((specs, ClientChoice::Required))
        }
        Some(other) => match named(other) {
            Some(name) if specs.iter().any(|spec| spec.name == name) => Ok((specs, ClientChoice::Function(name))),
            Some(name) => Err(ApiError::bad_request(format!(
                "tool_choice names the function `{name}`, which is not in `tools`; add it to `tools` or name one of them"
            ))),
            None => Err(ApiError::bad_request(format!(
                "tool_choice {other} is not supported; send \"auto\", \"none\", \"required\" or {{\"type\": \"function\", \"function\": {{\"name\": \"...\"}}}}"
            ))),
        },
    }
}

/// The answer's schema from `response_format` (chat) or `text.format` (responses): `text` is
/// none, `json_object` any object, `json_schema` the given schema (`name`, `strict`).
///
/// # Errors
/// 400 for an unknown type or an invalid schema.
pub(crate) fn output_schema(format: Option<&Value>) -> Result<Option<OutputSchema>, ApiError> {
    let Some(format) = format.filter(|format| !format.is_null()) else {
        return Ok(None);
    };
    let bad = |message: String| ApiError::bad_request(format!("response_format: {message}"));
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(OutputSchema::json_object())),
        Some("json_schema") => {
            // Chat nests the definition under `json_schema`; the Responses API has it flat.
            let definition = format.get("json_schema").unwrap_or(format);
            let schema = definition
                .get("schema")
                .cloned()
                .ok_or_else(|| bad("json_schema needs a `schema`".to_owned()))?;
            let mut output = OutputSchema::new(schema).map_err(|err| bad(err.to_string()))?;
            if let Some(name) = definition.get("name").and_then(Value::as_str) {
                output = output.named(name).map_err(|err| bad(err.to_string()))?;
            }
            let strict = definition.get("strict").and_then(Value::as_bool).unwrap_or(false);
            Ok(Some(output.strict(strict)))
        }
        other => Err(bad(format!(
            "type {} is not supported; use text, json_object or json_schema",
            other.unwrap_or("(missing)")
        ))),
    }
}

/// What a request runs: on which session, with which input.
pub(crate) struct Planned {
    pub(crate) session: SessionId,
    pub(crate) input: TurnInput,
    /// The results of the caller's tool calls the input resumes.
    pub(crate) results: HashMap<String, ClientResult>,
}

/// The turn for `messages` on `session` (given or matched): the trailing tool results when
/// they answer calls that wait, else the new messages after `covered`.
pub(crate) async fn continue_session(
    served: &Served,
    user: &UserId,
    session: SessionId,
    seen: &[Seen],
    covered: usize,
) -> Result<Planned, ApiError> {
    let trailing: Vec<&Seen> = seen.iter().rev().take_while(|message| message.role == "tool").collect();
    if !trailing.is_empty() {
        let ctx = harness_core::RuntimeContext::for_user(user.clone()).with_session(session.clone());
        let pending = served
            .agent
            .pending_approval(ctx)
            .await
            .map_err(|err| ApiError::internal(harness_core::error_chain(&err)))?;
        let mut results = HashMap::new();
        let mut decisions = Vec::new();
        for message in trailing.iter().rev() {
            let Some(id) = &message.call_id else { continue };
            if pending.call(id).is_some_and(|call| !call.started) && !results.contains_key(id) {
                decisions.push(ApprovalDecision::approve(id.clone()));
                results.insert(
                    id.clone(),
                    ClientResult {
                        content: message.text.clone(),
                        is_error: false,
                    },
                );
            }
        }
        if !decisions.is_empty() {
            return Ok(Planned {
                session,
                input: TurnInput::Resume(decisions),
                results,
            });
        }
    }
    let new = &seen[covered.min(seen.len())..];
    let mut messages = Vec::new();
    for message in new.iter().filter(|message| matches!(message.role, "system" | "user")) {
        messages.extend(message.to_msg()?);
    }
    if new.last().is_none_or(|message| message.role != "user") {
        return Err(ApiError::bad_request(
            "the last message must be a user message, or tool results for the calls that wait",
        ));
    }
    Ok(Planned {
        session,
        input: TurnInput::Message(AgentInput(messages)),
        results: HashMap::new(),
    })
}

/// Decides the request's session and input (see the module docs).
///
/// # Errors
/// 400 for a request that carries nothing to answer.
pub(crate) async fn plan(
    served: &Served,
    user: &UserId,
    header: Option<SessionId>,
    seen: &[Seen],
) -> Result<Planned, ApiError> {
    if let Some(session) = header {
        // The session's own history is the context: only the new input is taken.
        let covered = seen
            .iter()
            .rposition(|message| message.role == "user")
            .unwrap_or(seen.len());
        return continue_session(served, user, session, seen, covered).await;
    }
    let store = served.agent.kernel().state_store();
    let matched = threads::find(store.as_ref(), served.agent.workspace().agent(), user, seen)
        .await
        .map_err(|err| ApiError::internal(harness_core::error_chain(&err)))?;
    if let Some((session, covered)) = matched {
        return continue_session(served, user, session, seen, covered).await;
    }
    let mut messages = Vec::with_capacity(seen.len());
    for message in seen {
        messages.extend(message.to_msg()?);
    }
    if seen.last().is_none_or(|message| message.role != "user") {
        return Err(ApiError::bad_request("the last message must be a user message"));
    }
    let session = SessionId::parse(format!("chatcmpl-{}", uuid::Uuid::now_v7().simple()))
        .map_err(|err| ApiError::internal(err.to_string()))?;
    Ok(Planned {
        session,
        input: TurnInput::Message(AgentInput(messages)),
        results: HashMap::new(),
    })
}

/// Starts the planned turn: claims the session and queues it with the caller's asks.
///
/// # Errors
/// 404 for another user's session; the queue's 429/503.
pub(crate) async fn start(
    gateway: &Gateway,
    served: &Served,
    key: SessionKey,
    planned: Planned,
    (specs, choice): (Arc<[ToolSpec]>, ClientChoice),
    schema: Option<OutputSchema>,
) -> Result<Arc<crate::feed::TurnFeed>, ApiError> {
    // The first turn records the caller as the session's owner; another user's is 404.
    crate::owners::check(gateway, served, &key, crate::owners::Access::Claim).await?;
    let client = (!specs.is_empty() || !planned.results.is_empty()).then_some(ClientTools {
        specs,
        results: planned.results,
        choice,
    });
    gateway.inner.queues.enqueue_asking(
        &served.agent,
        key,
        planned.input,
        Delegation::default(),
        Asks { client, schema },
    )
}

async fn completions(State(gateway): State<Gateway>, headers: HeaderMap, body: Bytes) -> Result<Response, ApiError> {
    let user = gateway.user(&headers)?;
    let request: CompletionRequest =
        serde_json::from_slice(&body).map_err(|err| ApiError::bad_request(format!("invalid request body: {err}")))?;
    if request.n.is_some_and(|n| n != 1) {
        return Err(ApiError::bad_request(
            "n: only one choice per request is supported; send n = 1 (or leave it out) and repeat the request for more",
        ));
    }
    let served = gateway.agent(&request.model)?;
    let schema = output_schema(request.response_format.as_ref())?;
    let mut functions = Vec::new();
    for tool in request.tools.into_iter().flatten() {
        match (tool.kind.as_str(), tool.function) {
            ("function", Some(function)) => functions.push(function),
            (kind, _) => {
                return Err(ApiError::bad_request(format!(
                    "tools: type `{kind}` is not supported; send function tools"
                )));
            }
        }
    }
    let (specs, choice) = tool_choice(request.tool_choice.as_ref(), client_specs(served, functions)?)?;
    let seen = request
        .messages
        .iter()
        .map(RequestMessage::seen)
        .collect::<Result<Vec<_>, _>>()?;
    check_images(served, &seen)?;
    let planned = plan(served, &user, session_header(&headers)?, &seen).await?;
    let session = planned.session.clone();
    let key = SessionKey {
        agent: request.model.clone(),
        user: user.clone(),
        session: session.clone(),
    };
    let structured = schema.is_some();
    let feed = start(&gateway, served, key, planned, (Arc::clone(&specs), choice), schema).await?;
    let remember = Remember::new(served, user, &seen, session.clone());
    let turn = TurnText::new(specs, structured);
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
            turn,
            include_usage,
            remember,
        };
        Sse::new(chunks.stream(frames))
            .keep_alive(KeepAlive::default())
            .into_response()
    } else {
        complete(frames, id, created, &request.model, turn, remember).await?
    };
    if let Ok(value) = HeaderValue::from_str(session.as_str()) {
        response.headers_mut().insert(SESSION_HEADER, value);
    }
    Ok(response)
}

/// Records the conversation as the client holds it after the reply ([`crate::threads`]).
pub(crate) struct Remember {
    pub(crate) store: Arc<dyn harness_core::StateStore>,
    pub(crate) agent: harness_core::AgentId,
    pub(crate) user: UserId,
    /// The fingerprint of the request's messages.
    pub(crate) base: Option<[u8; 32]>,
    pub(crate) session: SessionId,
}

impl Remember {
    pub(crate) fn new(served: &Served, user: UserId, seen: &[Seen], session: SessionId) -> Self {
        Self {
            store: Arc::clone(served.agent.kernel().state_store()),
            agent: served.agent.workspace().agent().clone(),
            user,
            base: threads::prefixes(seen).last().copied(),
            session,
        }
    }

    /// Records the conversation with the reply (`text` and the caller's `calls`). A failed
    /// write is logged: the reply stands, the next request starts a new session.
    pub(crate) async fn reply(&self, text: &str, calls: &[PendingCall]) {
        let reply = Seen {
            role: "assistant",
            text: text.trim().to_owned(),
            calls: calls
                .iter()
                .map(|call| {
                    (
                        call.id.clone(),
                        call.tool.clone(),
                        Seen::arguments(&call.input.to_string()),
                    )
                })
                .collect(),
            call_id: None,
            images: Vec::new(),
        };
        let hash = threads::extend(self.base, &reply);
        if let Err(err) = threads::remember(self.store.as_ref(), &self.agent, &self.user, hash, &self.session).await {
            tracing::warn!(session = %self.session, error = %harness_core::error_chain(&err), "could not record the conversation for stateless clients");
        }
    }
}

/// What a turn's events make of the reply, the same for streamed and non-streamed answers:
/// the text of every step (steps separated by a blank line; with a schema only the final,
/// validated answer), the caller's tool calls, the calls waiting for a person, usage.
pub(crate) struct TurnText {
    specs: Arc<[ToolSpec]>,
    structured: bool,
    pub(crate) text: String,
    /// A step ended since the last text: the next text starts a new paragraph.
    step_ended: bool,
    pub(crate) usage: Usage,
    pub(crate) tools: Vec<Value>,
    /// The caller's tool calls the turn waits on.
    pub(crate) client_calls: Vec<PendingCall>,
    /// The calls waiting for a person.
    pub(crate) pending: Vec<PendingCall>,
    /// Whether the approval notice was added.
    noticed: bool,
}

impl TurnText {
    pub(crate) fn new(specs: Arc<[ToolSpec]>, structured: bool) -> Self {
        Self {
            specs,
            structured,
            text: String::new(),
            step_ended: false,
            usage: Usage::default(),
            tools: Vec::new(),
            client_calls: Vec::new(),
            pending: Vec::new(),
            noticed: false,
        }
    }

    /// The text `delta` adds to the reply (with the paragraph break before a new step's
    /// first text), or `None` when it is not part of it.
    pub(crate) fn delta(&mut self, delta: &str) -> Option<String> {
        if self.structured || delta.is_empty() {
            return None;
        }
        let mut added = String::new();
        if self.step_ended && !self.text.is_empty() {
            added.push_str("\n\n");
        }
        self.step_ended = false;
        added.push_str(delta);
        self.text.push_str(&added);
        Some(added)
    }

    pub(crate) fn step_end(&mut self, usage: Option<&Usage>) {
        if let Some(usage) = usage {
            self.usage.add(usage);
        }
        self.step_ended = true;
    }

    /// Splits the waiting calls into the caller's and a person's.
    pub(crate) fn waiting(&mut self, calls: Vec<PendingCall>) {
        for call in calls {
            let client = call.reason == CLIENT_TOOL_REASON || self.specs.iter().any(|spec| spec.name == call.tool);
            if client {
                self.client_calls.push(call);
            } else {
                self.pending.push(call);
            }
        }
    }

    /// The approval notice the reply ends with when calls wait for a person (added to the
    /// text), once.
    pub(crate) fn notice(&mut self, model: &str, session: &str) -> Option<String> {
        if self.pending.is_empty() || self.noticed {
            return None;
        }
        self.noticed = true;
        let mut notice = approval_notice(model, session, &self.pending);
        if !self.text.is_empty() {
            notice.insert_str(0, "\n\n");
        }
        self.text.push_str(&notice);
        Some(notice)
    }

    /// The text a structured turn answers with (its final message), once.
    pub(crate) fn structured_answer(&mut self, message: &Msg) -> Option<String> {
        if !self.structured || !self.client_calls.is_empty() {
            return None;
        }
        self.text = message.text();
        Some(self.text.clone())
    }
}

/// A pending client call as an OpenAI `tool_calls` entry.
pub(crate) fn tool_call_json(call: &PendingCall) -> Value {
    json!({
        "id": call.id,
        "type": "function",
        "function": {"name": call.tool, "arguments": call.input.to_string()},
    })
}

/// Waits for the turn and answers one `chat.completion`.
async fn complete(
    frames: impl Stream<Item = Frame>,
    id: String,
    created: i64,
    model: &str,
    mut turn: TurnText,
    remember: Remember,
) -> Result<Response, ApiError> {
    let mut frames = std::pin::pin!(frames);
    while let Some(frame) = frames.next().await {
        if frame.event.source.is_some() {
            continue;
        }
        match frame.event.kind {
            WireKind::TextDelta { delta } => {
                turn.delta(&delta);
            }
            WireKind::StepEnd { usage, .. } => turn.step_end(usage.as_ref()),
            WireKind::ToolCall { id, name, input } => turn.tools.push(json!({"id": id, "name": name, "input": input})),
            WireKind::ApprovalRequired { calls } => turn.waiting(calls),
            WireKind::Final { turn_id, message } => {
                turn.structured_answer(&message);
                turn.notice(model, remember.session.as_str());
                let content = turn.text.clone();
                remember.reply(&content, &turn.client_calls).await;
                let status = if !turn.pending.is_empty() {
                    "awaiting_approval"
                } else if turn.client_calls.is_empty() {
                    "completed"
                } else {
                    "awaiting_tool_results"
                };
                let mut message = json!({"role": "assistant", "content": content});
                let finish = if turn.client_calls.is_empty() {
                    "stop"
                } else {
                    message["tool_calls"] = turn.client_calls.iter().map(tool_call_json).collect();
                    if content.is_empty() {
                        message["content"] = Value::Null;
                    }
                    "tool_calls"
                };
                let body = json!({
                    "id": id,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": usage_json(&turn.usage),
                    "harness": {
                        "session_id": remember.session.as_str(),
                        "turn_id": turn_id,
                        "tool_calls": turn.tools,
                        "status": status,
                        "pending": turn.pending,
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
pub(crate) fn approval_notice(agent: &str, session: &str, pending: &[PendingCall]) -> String {
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

/// Turns a turn's events into `chat.completion.chunk`s, each with exactly one choice.
struct ChunkWriter {
    id: String,
    created: i64,
    model: String,
    session: String,
    turn: TurnText,
    include_usage: bool,
    remember: Remember,
}

impl ChunkWriter {
    fn chunk(&self, delta: Value, finish: Option<&str>, extra: Option<(&str, Value)>) -> Event {
        let mut chunk = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        });
        if let (Some((key, value)), Some(object)) = (extra, chunk.as_object_mut()) {
            object.insert(key.to_owned(), value);
        }
        Event::default().data(chunk.to_string())
    }

    fn delta(&self, delta: Value) -> Event {
        self.chunk(delta, None, None)
    }

    /// The chunks for one frame; the last frame also yields `[DONE]`.
    fn frame(&mut self, frame: Frame) -> Vec<Event> {
        let own = frame.event.source.is_none();
        match frame.event.kind {
            WireKind::TextDelta { delta } if own => match self.turn.delta(&delta) {
                Some(added) => vec![self.delta(json!({"content": added}))],
                None => Vec::new(),
            },
            WireKind::StepEnd { usage, .. } if own => {
                self.turn.step_end(usage.as_ref());
                Vec::new()
            }
            WireKind::ApprovalRequired { calls } if own => {
                self.turn.waiting(calls.clone());
                let mut events = Vec::new();
                if !self.turn.client_calls.is_empty() {
                    let calls: Vec<Value> = self
                        .turn
                        .client_calls
                        .iter()
                        .enumerate()
                        .map(|(index, call)| {
                            let mut call = tool_call_json(call);
                            call["index"] = json!(index);
                            call
                        })
                        .collect();
                    events.push(self.delta(json!({"tool_calls": calls})));
                }
                if let Some(notice) = self.turn.notice(&self.model, &self.session) {
                    let event = json!({"type": "approval_required", "calls": calls});
                    events.push(self.chunk(json!({}), None, Some(("harness", event))));
                    events.push(self.delta(json!({"content": notice})));
                }
                events
            }
            WireKind::TurnStart { .. } => vec![self.delta(json!({"role": "assistant", "content": ""}))],
            WireKind::Final { message, .. } if own => {
                let mut events = Vec::new();
                if let Some(answer) = self.turn.structured_answer(&message) {
                    events.push(self.delta(json!({"content": answer})));
                }
                let finish = if self.turn.client_calls.is_empty() {
                    "stop"
                } else {
                    "tool_calls"
                };
                let usage = self.include_usage.then(|| ("usage", usage_json(&self.turn.usage)));
                events.push(self.chunk(json!({}), Some(finish), usage));
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
            // a chunk with an empty delta, which OpenAI clients skip.
            _ => {
                let event = serde_json::to_value(&frame.event).unwrap_or(Value::Null);
                vec![self.chunk(json!({}), None, Some(("harness", event)))]
            }
        }
    }

    fn stream(
        self,
        frames: impl Stream<Item = Frame> + Send + 'static,
    ) -> impl Stream<Item = Result<Event, Infallible>> + Send + 'static {
        futures::stream::unfold((self, Box::pin(frames)), |(mut writer, mut frames)| async move {
            let frame = frames.next().await?;
            let last = frame.event.source.is_none() && matches!(frame.event.kind, WireKind::Final { .. });
            let events = writer.frame(frame);
            if last {
                // Recorded before the last event goes out: the client's next request finds it.
                writer
                    .remember
                    .reply(&writer.turn.text, &writer.turn.client_calls)
                    .await;
            }
            Some((futures::stream::iter(events), (writer, frames)))
        })
        .flatten()
        .map(Ok)
    }
}
