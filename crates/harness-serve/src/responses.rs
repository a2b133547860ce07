//! `POST /v1/responses`: the OpenAI Responses API (the default of the Vercel AI SDK's OpenAI
//! provider and of the openai SDKs' `responses.create`) on the same turns as chat
//! completions ([`crate::openai`]).
//!
//! A response's id names its session (`resp_<turn>_<session>`), so `previous_response_id`
//! continues that session (the caller must own it, as for every session route), across
//! restarts and replicas. Without it the request is matched like a chat completion: the
//! `X-Harness-Session` header, else a stateless history this deployment answered, else a new
//! session seeded with the input. `instructions` is a system message before the input.
//! Function tools are the caller's tools (a `function_call` output item; the next request's
//! `function_call_output` items resume the turn); `text.format` is the structured output.
//! Streamed (`stream: true`) it sends the Responses event types: `response.created`,
//! `response.in_progress`, `response.output_item.added`, `response.content_part.added`,
//! `response.output_text.delta` / `.done`, `response.content_part.done`,
//! `response.function_call_arguments.done`, `response.output_item.done`,
//! `response.completed` (or `error` and `response.failed`).

use crate::Gateway;
use crate::error::ApiError;
use crate::feed::Frame;
use crate::openai::{self, FunctionDef, Remember, TurnText};
use crate::queue::SessionKey;
use crate::threads::Seen;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::{Stream, StreamExt};
use harness_core::{SessionId, ToolSpec};
use harness_protocol::header::SESSION_HEADER;
use harness_protocol::{EventId, WireKind};
use serde::Deserialize;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;

pub(crate) fn routes() -> Router<Gateway> {
    Router::new().route("/v1/responses", post(create))
}

#[derive(Debug, Deserialize)]
struct ResponsesRequest {
    model: String,
    #[serde(default)]
    input: Option<Input>,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    previous_response_id: Option<String>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    tools: Option<Vec<ResponseTool>>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    text: Option<TextOptions>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Input {
    Text(String),
    Items(Vec<Value>),
}

#[derive(Debug, Deserialize)]
struct ResponseTool {
    #[serde(rename = "type")]
    kind: String,
    #[serde(flatten)]
    function: Option<FunctionDef>,
}

#[derive(Debug, Deserialize)]
struct TextOptions {
    #[serde(default)]
    format: Option<Value>,
}

/// The text and image URLs of an item's `content`: a string, or `input_text` /
/// `output_text` / `input_image` parts.
fn content_parts(content: Option<&Value>) -> Result<(String, Vec<String>), ApiError> {
    match content {
        None | Some(Value::Null) => Ok((String::new(), Vec::new())),
        Some(Value::String(text)) => Ok((text.clone(), Vec::new())),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            let mut images = Vec::new();
            for part in parts {
                match part.get("type").and_then(Value::as_str) {
                    Some("input_text" | "output_text" | "text") => {
                        text.push_str(part.get("text").and_then(Value::as_str).unwrap_or_default());
                    }
                    Some("refusal") => {}
                    Some("input_image") => {
                        let url = part.get("image_url").and_then(Value::as_str).ok_or_else(|| {
                            ApiError::bad_request(
                                "input: an input_image part needs its image_url (file_id is not supported)",
                            )
                        })?;
                        images.push(url.to_owned());
                    }
                    other => {
                        return Err(ApiError::bad_request(format!(
                            "input: content part `{}` is not supported; send input_text or input_image parts",
                            other.unwrap_or("(no type)")
                        )));
                    }
                }
            }
            Ok((text, images))
        }
        Some(_) => Err(ApiError::bad_request(
            "input: content must be a string or a list of parts",
        )),
    }
}

/// The text of a content that may hold no image.
fn content_text(content: Option<&Value>) -> Result<String, ApiError> {
    let (text, images) = content_parts(content)?;
    if !images.is_empty() {
        return Err(ApiError::bad_request("input: images are taken in user messages only"));
    }
    Ok(text)
}

/// The input items in the normal form of [`crate::threads`]. Consecutive `function_call`
/// items join the assistant message before them (as a chat client holds them). An
/// `item_reference` to a message this server sent (what the Vercel AI SDK sends for an
/// earlier reply when it stores responses) names that message's session: with it comes how
/// many items it covers.
fn seen_items(instructions: Option<&str>, input: Option<Input>) -> Result<(Vec<Seen>, Option<Referenced>), ApiError> {
    let mut seen: Vec<Seen> = Vec::new();
    let mut referenced = None;
    if let Some(instructions) = instructions.filter(|text| !text.trim().is_empty()) {
        seen.push(Seen {
            role: "system",
            text: instructions.trim().to_owned(),
            calls: Vec::new(),
            call_id: None,
            images: Vec::new(),
        });
    }
    let items = match input {
        None => Vec::new(),
        Some(Input::Text(text)) => vec![json!({"role": "user", "content": text})],
        Some(Input::Items(items)) => items,
    };
    for item in items {
        let kind = item.get("type").and_then(Value::as_str).unwrap_or("message");
        let text_of = |key: &str| item.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
        match kind {
            "message" => {
                let role = match item.get("role").and_then(Value::as_str) {
                    Some("system" | "developer") => "system",
                    Some("user") => "user",
                    Some("assistant") => "assistant",
                    other => {
                        return Err(ApiError::bad_request(format!(
                            "input: unknown role `{}`; use system, developer, user or assistant",
                            other.unwrap_or("(missing)")
                        )));
                    }
                };
                let (text, images) = if role == "user" {
                    content_parts(item.get("content"))?
                } else {
                    (content_text(item.get("content"))?, Vec::new())
                };
                seen.push(Seen {
                    role,
                    text: text.trim().to_owned(),
                    calls: Vec::new(),
                    call_id: None,
                    images,
                });
            }
            "function_call" => {
                let call = (
                    text_of("call_id"),
                    text_of("name"),
                    Seen::arguments(&text_of("arguments")),
                );
                match seen.last_mut() {
                    Some(last) if last.role == "assistant" => last.calls.push(call),
                    _ => seen.push(Seen {
                        role: "assistant",
                        text: String::new(),
                        calls: vec![call],
                        call_id: None,
                        images: Vec::new(),
                    }),
                }
            }
            "function_call_output" => seen.push(Seen {
                role: "tool",
                text: match item.get("output") {
                    Some(Value::String(text)) => text.trim().to_owned(),
                    Some(other) => content_text(Some(other))?.trim().to_owned(),
                    None => String::new(),
                },
                calls: Vec::new(),
                call_id: Some(text_of("call_id")),
                images: Vec::new(),
            }),
            "reasoning" => {}
            "item_reference" => {
                let id = text_of("id");
                let session = id
                    .strip_prefix("msg_")
                    .map(|rest| format!("resp_{rest}"))
                    .and_then(|id| session_of(&id).ok())
                    .ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "input: item_reference `{id}` is not an item of this server; send the item itself"
                        ))
                    })?;
                seen.push(Seen {
                    role: "assistant",
                    text: String::new(),
                    calls: Vec::new(),
                    call_id: Some(id),
                    images: Vec::new(),
                });
                referenced = Some((session, seen.len()));
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "input: item type `{other}` is not supported; send messages, function_call and function_call_output items"
                )));
            }
        }
    }
    if seen.iter().all(|message| message.role == "system") {
        return Err(ApiError::bad_request("input is empty: send a user message"));
    }
    Ok((seen, referenced))
}

/// The session an `item_reference` names, and how many items it covers.
type Referenced = (SessionId, usize);

/// `resp_<32 hex>_<session>`: the response's id, which names its session.
fn response_id(turn_id: &str, session: &SessionId) -> String {
    let hex: String = turn_id.chars().filter(char::is_ascii_hexdigit).collect();
    format!("resp_{hex:0>32.32}_{session}")
}

/// The session a `previous_response_id` names.
fn session_of(previous: &str) -> Result<SessionId, ApiError> {
    let unknown = || {
        ApiError::not_found(format!(
            "previous_response_id `{previous}` is not a response of this server; send the id of a response it returned"
        ))
    };
    let rest = previous.strip_prefix("resp_").ok_or_else(unknown)?;
    let session = rest
        .get(33..)
        .filter(|_| rest.as_bytes().get(32) == Some(&b'_'))
        .ok_or_else(unknown)?;
    SessionId::parse(session).map_err(|_| unknown())
}

async fn create(State(gateway): State<Gateway>, headers: HeaderMap, body: Bytes) -> Result<Response, ApiError> {
    let user = gateway.user(&headers)?;
    let request: ResponsesRequest =
        serde_json::from_slice(&body).map_err(|err| ApiError::bad_request(format!("invalid request body: {err}")))?;
    let served = gateway.agent(&request.model)?;
    let format = request.text.as_ref().and_then(|text| text.format.clone());
    let schema = openai::output_schema(format.as_ref())?;
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
    let (specs, choice) = openai::tool_choice(request.tool_choice.as_ref(), openai::client_specs(served, functions)?)?;
    let (seen, referenced) = seen_items(request.instructions.as_deref(), request.input)?;
    openai::check_images(served, &seen)?;
    let planned = match (&request.previous_response_id, referenced) {
        (Some(previous), _) => {
            let session = session_of(previous)?;
            openai::continue_session(served, &user, session, &seen, 0).await?
        }
        (None, Some((session, covered))) => {
            // Calls answered after the referenced message join it.
            let covered = covered + seen[covered..].iter().take_while(|m| m.role == "assistant").count();
            openai::continue_session(served, &user, session, &seen, covered).await?
        }
        (None, None) => openai::plan(served, &user, openai::session_header(&headers)?, &seen).await?,
    };
    let session = planned.session.clone();
    let key = SessionKey {
        agent: request.model.clone(),
        user: user.clone(),
        session: session.clone(),
    };
    let structured = schema.is_some();
    let feed = openai::start(&gateway, served, key, planned, (Arc::clone(&specs), choice), schema).await?;
    let remember = Remember::new(served, user, &seen, session.clone());
    let writer = Writer {
        id: response_id(feed.turn_id(), &session),
        created: jiff::Timestamp::now().as_second(),
        model: request.model,
        previous: request.previous_response_id,
        format: format.unwrap_or_else(|| json!({"type": "text"})),
        turn: TurnText::new(Arc::clone(&specs), structured),
        tools: specs,
        remember,
        seq: 0,
        text_open: false,
    };
    let frames = feed.subscribe(EventId::default());
    let mut response = if request.stream {
        Sse::new(writer.stream(frames))
            .keep_alive(KeepAlive::default())
            .into_response()
    } else {
        writer.complete(frames).await?
    };
    if let Ok(value) = HeaderValue::from_str(session.as_str()) {
        response.headers_mut().insert(SESSION_HEADER, value);
    }
    Ok(response)
}

/// Writes a turn as a `response` object, or as its stream of events.
struct Writer {
    id: String,
    created: i64,
    model: String,
    previous: Option<String>,
    format: Value,
    tools: Arc<[ToolSpec]>,
    turn: TurnText,
    remember: Remember,
    /// The next event's `sequence_number`.
    seq: u64,
    /// Whether the message item and its text part were announced.
    text_open: bool,
}

impl Writer {
    fn message_id(&self) -> String {
        format!("msg_{}", self.id.trim_start_matches("resp_"))
    }

    /// The response object; `status` `in_progress` before the end.
    fn object(&self, status: &str, output: Vec<Value>) -> Value {
        let usage = &self.turn.usage;
        let tools: Vec<Value> = self
            .tools
            .iter()
            .map(|spec| {
                json!({"type": "function", "name": spec.name, "description": spec.description,
                       "parameters": spec.input_schema, "strict": false})
            })
            .collect();
        let output_text = self.turn.text.clone();
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "error": null,
            "incomplete_details": null,
            "instructions": null,
            "max_output_tokens": null,
            "model": self.model,
            "output": output,
            "output_text": output_text,
            "parallel_tool_calls": true,
            "previous_response_id": self.previous,
            "reasoning": {"effort": null, "summary": null},
            "store": true,
            "temperature": 1.0,
            "text": {"format": self.format},
            "tool_choice": "auto",
            "tools": tools,
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": {
                "input_tokens": usage.input_tokens,
                "input_tokens_details": {"cached_tokens": usage.cache_read_tokens},
                "output_tokens": usage.output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage.input_tokens + usage.output_tokens,
            },
            "metadata": {},
        })
    }

    fn message_item(&self, status: &str) -> Value {
        json!({
            "type": "message",
            "id": self.message_id(),
            "status": status,
            "role": "assistant",
            "content": [{"type": "output_text", "text": self.turn.text, "annotations": []}],
        })
    }

    fn call_items(&self) -> Vec<Value> {
        self.turn
            .client_calls
            .iter()
            .map(|call| {
                json!({
                    "type": "function_call",
                    "id": format!("fc_{}", call.id),
                    "call_id": call.id,
                    "name": call.tool,
                    "arguments": call.input.to_string(),
                    "status": "completed",
                })
            })
            .collect()
    }

    /// The output items at the end of the turn.
    fn output(&self) -> Vec<Value> {
        let mut output = Vec::new();
        if !self.turn.text.is_empty() || self.turn.client_calls.is_empty() {
            output.push(self.message_item("completed"));
        }
        output.extend(self.call_items());
        output
    }

    fn finish(&mut self, message: &harness_core::Msg) {
        self.turn.structured_answer(message);
        let session = self.remember.session.to_string();
        self.turn.notice(&self.model, &session);
    }

    async fn complete(mut self, frames: impl Stream<Item = Frame>) -> Result<Response, ApiError> {
        let mut frames = std::pin::pin!(frames);
        while let Some(frame) = frames.next().await {
            if frame.event.source.is_some() {
                continue;
            }
            match frame.event.kind {
                WireKind::TextDelta { delta } => {
                    self.turn.delta(&delta);
                }
                WireKind::StepEnd { usage, .. } => self.turn.step_end(usage.as_ref()),
                WireKind::ApprovalRequired { calls } => self.turn.waiting(calls),
                WireKind::Final { message, .. } => {
                    self.finish(&message);
                    self.remember.reply(&self.turn.text, &self.turn.client_calls).await;
                    let body = self.object("completed", self.output());
                    return Ok(axum::Json(body).into_response());
                }
                WireKind::Error { message, kind, .. } => return Err(ApiError::from_turn(kind, message)),
                _ => {}
            }
        }
        Err(ApiError::internal("the turn ended without a final message"))
    }

    fn event(&mut self, kind: &str, mut data: Value) -> Event {
        if let Some(object) = data.as_object_mut() {
            object.insert("type".to_owned(), json!(kind));
            object.insert("sequence_number".to_owned(), json!(self.seq));
        }
        self.seq += 1;
        Event::default().event(kind).data(data.to_string())
    }

    /// The events that open the message item and its text part, once.
    fn open_text(&mut self) -> Vec<Event> {
        if self.text_open {
            return Vec::new();
        }
        self.text_open = true;
        let item = json!({"type": "message", "id": self.message_id(), "status": "in_progress", "role": "assistant", "content": []});
        let item_id = self.message_id();
        vec![
            self.event("response.output_item.added", json!({"output_index": 0, "item": item})),
            self.event(
                "response.content_part.added",
                json!({"item_id": item_id, "output_index": 0, "content_index": 0,
                       "part": {"type": "output_text", "text": "", "annotations": []}}),
            ),
        ]
    }

    fn text_delta(&mut self, added: &str) -> Vec<Event> {
        let mut events = self.open_text();
        let item_id = self.message_id();
        events.push(self.event(
            "response.output_text.delta",
            json!({"item_id": item_id, "output_index": 0, "content_index": 0, "delta": added, "logprobs": []}),
        ));
        events
    }

    fn frame(&mut self, frame: Frame) -> Vec<Event> {
        if frame.event.source.is_some() {
            return Vec::new();
        }
        match frame.event.kind {
            WireKind::TurnStart { .. } => {
                let created = self.object("in_progress", Vec::new());
                let progress = created.clone();
                vec![
                    self.event("response.created", json!({"response": created})),
                    self.event("response.in_progress", json!({"response": progress})),
                ]
            }
            WireKind::TextDelta { delta } => match self.turn.delta(&delta) {
                Some(added) => self.text_delta(&added),
                None => Vec::new(),
            },
            WireKind::StepEnd { usage, .. } => {
                self.turn.step_end(usage.as_ref());
                Vec::new()
            }
            WireKind::ApprovalRequired { calls } => {
                self.turn.waiting(calls);
                Vec::new()
            }
            WireKind::Final { message, .. } => {
                let before = self.turn.text.len();
                self.finish(&message);
                let mut events = Vec::new();
                let added = self.turn.text.get(before..).unwrap_or_default().to_owned();
                if !added.is_empty() {
                    events.extend(self.text_delta(&added));
                }
                let mut index = 0;
                if self.text_open || self.turn.client_calls.is_empty() {
                    events.extend(self.open_text());
                    let item_id = self.message_id();
                    let text = self.turn.text.clone();
                    events.push(self.event(
                        "response.output_text.done",
                        json!({"item_id": item_id, "output_index": 0, "content_index": 0, "text": text, "logprobs": []}),
                    ));
                    events.push(self.event(
                        "response.content_part.done",
                        json!({"item_id": item_id, "output_index": 0, "content_index": 0,
                               "part": {"type": "output_text", "text": text, "annotations": []}}),
                    ));
                    let item = self.message_item("completed");
                    events.push(self.event("response.output_item.done", json!({"output_index": 0, "item": item})));
                    index = 1;
                }
                for item in self.call_items() {
                    events.push(self.event(
                        "response.output_item.added",
                        json!({"output_index": index, "item": item}),
                    ));
                    events.push(self.event(
                        "response.function_call_arguments.done",
                        json!({"item_id": item["id"], "output_index": index, "arguments": item["arguments"]}),
                    ));
                    events.push(self.event(
                        "response.output_item.done",
                        json!({"output_index": index, "item": item}),
                    ));
                    index += 1;
                }
                let done = self.object("completed", self.output());
                events.push(self.event("response.completed", json!({"response": done})));
                events
            }
            WireKind::Error { message, kind, .. } => {
                let error = ApiError::from_turn(kind, message);
                let body = error.body();
                let detail = serde_json::to_value(&body.error).unwrap_or(Value::Null);
                let mut failed = self.object("failed", Vec::new());
                failed["error"] = json!({"code": detail["code"], "message": detail["message"]});
                vec![
                    self.event(
                        "error",
                        json!({"code": detail["code"], "message": detail["message"], "param": null}),
                    ),
                    self.event("response.failed", json!({"response": failed})),
                ]
            }
            _ => Vec::new(),
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
