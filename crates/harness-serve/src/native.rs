//! The native routes under `/api` (documented in the README):
//!
//! | route | what |
//! |---|---|
//! | `GET /api/agents` | the served agents |
//! | `GET /api/agents/{agent}/sessions` | the caller's sessions |
//! | `GET /api/agents/{agent}/sessions/{session}` | a session's history (transcript messages) |
//! | `POST /api/agents/{agent}/sessions/{session}/messages` | send a message: JSON reply, or SSE with `"stream": true` |
//! | `GET /api/agents/{agent}/sessions/{session}/events` | the running or last turn's events, from `Last-Event-ID` / `?after=N` |
//! | `POST /api/agents/{agent}/sessions/{session}/cancel` | cancel the running turn |
//!
//! Reserved for later (same prefix): `.../approvals`, `.../tasks`, `.../tasks/{task_id}`.

use crate::error::ApiError;
use crate::feed::Frame;
use crate::queue::SessionKey;
use crate::wire::WireKind;
use crate::{Gateway, Served};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::{Stream, StreamExt};
use harness_core::{SessionId, Usage, UserId};
use serde::Deserialize;
use serde_json::json;
use std::convert::Infallible;

pub(crate) fn routes() -> Router<Gateway> {
    Router::new()
        .route("/api/agents", get(agents))
        .route("/api/agents/{agent}/sessions", get(sessions))
        .route("/api/agents/{agent}/sessions/{session}", get(history))
        .route("/api/agents/{agent}/sessions/{session}/messages", post(send))
        .route("/api/agents/{agent}/sessions/{session}/events", get(events))
        .route("/api/agents/{agent}/sessions/{session}/cancel", post(cancel))
}

/// The caller, the agent and (for session routes) the session key.
fn session_key(
    gateway: &Gateway,
    headers: &HeaderMap,
    agent: &str,
    session: &str,
) -> Result<(SessionKey, UserId), ApiError> {
    let user = gateway.user(headers)?;
    gateway.agent(agent)?;
    let session = SessionId::parse(session).map_err(|err| ApiError::bad_request(format!("session id: {err}")))?;
    Ok((
        SessionKey {
            agent: agent.to_owned(),
            user: user.clone(),
            session,
        },
        user,
    ))
}

async fn agents(State(gateway): State<Gateway>, headers: HeaderMap) -> Result<Response, ApiError> {
    gateway.user(&headers)?;
    let agents: Vec<_> = gateway
        .inner
        .agents
        .keys()
        .map(|name| {
            json!({
                "name": name,
                "sessions": format!("/api/agents/{name}/sessions"),
            })
        })
        .collect();
    Ok(axum::Json(json!({"agents": agents})).into_response())
}

async fn sessions(
    State(gateway): State<Gateway>,
    headers: HeaderMap,
    Path(agent): Path<String>,
) -> Result<Response, ApiError> {
    let user = gateway.user(&headers)?;
    let served = gateway.agent(&agent)?;
    let listing = served
        .reader
        .list(&user)
        .await
        .map_err(|err| ApiError::internal(harness_core::error_chain(&err)))?;
    let sessions: Vec<_> = listing
        .into_iter()
        .map(|entry| {
            json!({
                "id": entry.id,
                "summary": entry.summary.summary,
                "created": entry.summary.created,
                "updated": entry.summary.updated,
                "message_count": entry.summary.message_count,
            })
        })
        .collect();
    Ok(axum::Json(json!({"sessions": sessions})).into_response())
}

async fn history(
    State(gateway): State<Gateway>,
    headers: HeaderMap,
    Path((agent, session)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let (key, user) = session_key(&gateway, &headers, &agent, &session)?;
    let served = gateway.agent(&agent)?;
    let messages = read_history(served, &user, &key.session).await?;
    if messages.is_empty() && gateway.inner.queues.last_turn(&key).is_none() {
        return Err(ApiError::not_found(format!("no session `{session}` for this user")));
    }
    Ok(axum::Json(json!({"id": key.session.as_str(), "messages": messages})).into_response())
}

async fn read_history(served: &Served, user: &UserId, session: &SessionId) -> Result<Vec<harness_core::Msg>, ApiError> {
    served
        .reader
        .history(user, session)
        .await
        .map_err(|err| ApiError::internal(harness_core::error_chain(&err)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SendRequest {
    message: String,
    #[serde(default)]
    stream: bool,
}

async fn send(
    State(gateway): State<Gateway>,
    headers: HeaderMap,
    Path((agent, session)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let (key, _) = session_key(&gateway, &headers, &agent, &session)?;
    let request: SendRequest = serde_json::from_slice(&body).map_err(|err| {
        ApiError::bad_request(format!(
            "invalid request body ({err}); send {{\"message\": \"...\", \"stream\": false}}"
        ))
    })?;
    let depth = match headers.get(harness::subagents::DEPTH_HEADER) {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(|raw| raw.trim().parse::<u32>().ok())
                .ok_or_else(|| ApiError::bad_request("X-Harness-Depth must be a delegation depth (a whole number)"))?,
        ),
    };
    let served = gateway.agent(&agent)?;
    let feed = gateway
        .inner
        .queues
        .enqueue(&served.agent, key.clone(), request.message.into(), depth)?;
    let frames = feed.subscribe(0);
    if request.stream {
        return Ok(sse(frames).into_response());
    }
    let mut frames = std::pin::pin!(frames);
    let mut usage = Usage::default();
    while let Some(frame) = frames.next().await {
        if frame.event.source.is_some() {
            continue;
        }
        match frame.event.kind {
            WireKind::StepEnd { usage: Some(step), .. } => usage.add(&step),
            WireKind::Final { turn_id, message } => {
                return Ok(axum::Json(json!({
                    "session_id": key.session.as_str(),
                    "turn_id": turn_id,
                    "text": message.text(),
                    "message": message,
                    "usage": usage,
                }))
                .into_response());
            }
            WireKind::Error { message, kind, .. } => return Err(ApiError::from_turn(kind, message)),
            _ => {}
        }
    }
    Err(ApiError::internal("the turn ended without a final message"))
}

/// `id: <seq>`, `event: <type>`, `data: <json>` for each frame.
fn sse(frames: impl Stream<Item = Frame> + Send + 'static) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let events = frames.map(|frame| {
        let data = serde_json::to_string(&frame.event).unwrap_or_else(|_| "{}".to_owned());
        let mut event = Event::default().event(frame.event.name()).data(data);
        if let Some(seq) = frame.seq {
            event = event.id(seq.to_string());
        }
        Ok(event)
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}

/// `Last-Event-ID`, else `?after=N`, else 0 (the whole turn).
fn resume_point(headers: &HeaderMap, query: Option<&str>) -> Result<u64, ApiError> {
    if let Some(value) = headers.get("last-event-id") {
        return value
            .to_str()
            .ok()
            .and_then(|raw| raw.trim().parse().ok())
            .ok_or_else(|| ApiError::bad_request("Last-Event-ID must be an event id (a number)"));
    }
    for pair in query.unwrap_or_default().split('&') {
        if let Some(raw) = pair.strip_prefix("after=") {
            return raw
                .parse()
                .map_err(|_| ApiError::bad_request("after must be an event id (a number)"));
        }
    }
    Ok(0)
}

async fn events(
    State(gateway): State<Gateway>,
    headers: HeaderMap,
    Path((agent, session)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let (key, _) = session_key(&gateway, &headers, &agent, &session)?;
    let after = resume_point(&headers, query.as_deref())?;
    let feed = gateway.inner.queues.last_turn(&key).ok_or_else(|| {
        ApiError::not_found(format!(
            "session `{session}` has no turn on this server to follow; its history is at /api/agents/{agent}/sessions/{session}"
        ))
    })?;
    Ok(sse(feed.subscribe(after)).into_response())
}

async fn cancel(
    State(gateway): State<Gateway>,
    headers: HeaderMap,
    Path((agent, session)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let (key, _) = session_key(&gateway, &headers, &agent, &session)?;
    let cancelled = gateway.inner.queues.cancel(&key);
    Ok(axum::Json(json!({"cancelled": cancelled})).into_response())
}
