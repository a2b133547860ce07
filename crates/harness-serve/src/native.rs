//! The native routes under `/api` (documented in the README):
//!
//! | route | what |
//! |---|---|
//! | `GET /api/agents` | the served agents |
//! | `GET /api/agents/{agent}/sessions` | the caller's sessions |
//! | `GET /api/agents/{agent}/sessions/{session}` | a session's history (transcript messages) |
//! | `POST /api/agents/{agent}/sessions/{session}/messages` | send a message: JSON reply, or SSE with `"stream": true` |
//! | `GET /api/agents/{agent}/sessions/{session}/events` | the running or last turn's events, from `Last-Event-ID` / `?after=N` |
//! | `POST /api/agents/{agent}/sessions/{session}/cancel` | cancel the running turn (on this replica, else through the session's inbox on the one running it) |
//! | `GET /api/agents/{agent}/sessions/{session}/approvals` | the calls waiting for a person |
//! | `POST /api/agents/{agent}/sessions/{session}/approvals` | decide them; the turn resumes (JSON or SSE) |
//! | `GET /api/agents/{agent}/sessions/{session}/tasks` | the session's subagent tasks |
//! | `GET /api/agents/{agent}/sessions/{session}/tasks/{task_id}` | a task's record and recent events |
//! | `GET /api/agents/{agent}/sessions/{session}/tasks/{task_id}/events` | SSE of a running task's events |
//! | `POST /api/agents/{agent}/sessions/{session}/tasks/{task_id}/cancel` | stop a task |

use crate::error::ApiError;
use crate::feed::Frame;
use crate::owners::{self, Access};
use crate::queue::{Delegation, SessionKey, TurnInput};
use crate::{Gateway, Served};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::{Stream, StreamExt};
use harness::permissions::Inheritance;
use harness::subagents::SpawnError;
use harness_core::{AgentInput, PendingCall, RuntimeContext, SessionId, Usage, UserId};
use harness_protocol::header::{DEPTH_HEADER, LAST_EVENT_ID_HEADER, TRACEPARENT_HEADER};
use harness_protocol::native::{
    ApprovalsReply, CancelReply, DECIDE_SHAPE, DecideRequest, SEND_SHAPE, SendRequest, TurnReply, TurnStatus,
};
use harness_protocol::{EventId, WireEvent, WireKind};
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
        .route(
            "/api/agents/{agent}/sessions/{session}/approvals",
            get(approvals).post(decide),
        )
        .route("/api/agents/{agent}/sessions/{session}/tasks", get(tasks))
        .route("/api/agents/{agent}/sessions/{session}/tasks/{task}", get(task))
        .route(
            "/api/agents/{agent}/sessions/{session}/tasks/{task}/events",
            get(task_events),
        )
        .route(
            "/api/agents/{agent}/sessions/{session}/tasks/{task}/cancel",
            post(cancel_task),
        )
}

/// The caller, the agent and (for session routes) the session key, after the owner check:
/// another user's session is 404 ([`owners::check`]).
pub(crate) async fn session_key(
    gateway: &Gateway,
    headers: &HeaderMap,
    agent: &str,
    session: &str,
    access: Access,
) -> Result<(SessionKey, UserId), ApiError> {
    let user = gateway.user(headers)?;
    let served = gateway.agent(agent)?;
    let session = SessionId::parse(session).map_err(|err| ApiError::bad_request(format!("session id: {err}")))?;
    let key = SessionKey {
        agent: agent.to_owned(),
        user: user.clone(),
        session,
    };
    owners::check(gateway, served, &key, access).await?;
    Ok((key, user))
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
    let mut sessions = Vec::with_capacity(listing.len());
    for entry in listing {
        // Under the `session`, `agent` and `global` scopes the index lists everyone's
        // sessions of the namespace: show only the caller's own.
        let Ok(session) = SessionId::parse(entry.id.as_str()) else {
            continue;
        };
        let key = SessionKey {
            agent: agent.clone(),
            user: user.clone(),
            session,
        };
        if !owners::visible(&gateway, served, &key).await? {
            continue;
        }
        sessions.push(json!({
            "id": entry.id,
            "summary": entry.summary.summary,
            "created": entry.summary.created,
            "updated": entry.summary.updated,
            "message_count": entry.summary.message_count,
        }));
    }
    Ok(axum::Json(json!({"sessions": sessions})).into_response())
}

async fn history(
    State(gateway): State<Gateway>,
    headers: HeaderMap,
    Path((agent, session)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let (key, user) = session_key(&gateway, &headers, &agent, &session, Access::Read).await?;
    let served = gateway.agent(&agent)?;
    let messages = read_history(served, &user, &key.session).await?;
    if messages.is_empty() && gateway.inner.queues.last_turn(&key).is_none() {
        return Err(ApiError::not_found(format!("no session `{session}` for this user")));
    }
    let pending = pending_calls(served, &key).await?;
    let url = format!("/api/agents/{agent}/sessions/{session}");
    let control = crate::control::status(served, &owners::state_key(served, &key)?, &url).await?;
    Ok(axum::Json(json!({
        "id": key.session.as_str(),
        "messages": messages,
        "pending_approvals": pending,
        "control": control,
    }))
    .into_response())
}

/// The context of a call on `key`'s session.
pub(crate) fn context(key: &SessionKey) -> RuntimeContext {
    RuntimeContext::for_user(key.user.clone()).with_session(key.session.clone())
}

/// The calls of the session waiting for a person.
async fn pending_calls(served: &Served, key: &SessionKey) -> Result<Vec<PendingCall>, ApiError> {
    served
        .agent
        .pending_approval(context(key))
        .await
        .map(|pending| pending.calls)
        .map_err(|err| ApiError::internal(harness_core::error_chain(&err)))
}

async fn read_history(served: &Served, user: &UserId, session: &SessionId) -> Result<Vec<harness_core::Msg>, ApiError> {
    served
        .reader
        .history(user, session)
        .await
        .map_err(|err| ApiError::internal(harness_core::error_chain(&err)))
}

/// What a remote parent sent with a turn: `X-Harness-Depth`, `traceparent` and the body's
/// `inherit`.
fn delegation(headers: &HeaderMap, inherit: Option<Inheritance>) -> Result<Delegation, ApiError> {
    let depth = match headers.get(DEPTH_HEADER) {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(|raw| raw.trim().parse::<u32>().ok())
                .ok_or_else(|| ApiError::bad_request("X-Harness-Depth must be a delegation depth (a whole number)"))?,
        ),
    };
    // Untrusted: a malformed value is dropped where it is parsed (`join_remote`).
    let traceparent = headers
        .get(TRACEPARENT_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    Ok(Delegation {
        depth,
        inherit,
        traceparent,
    })
}

async fn send(
    State(gateway): State<Gateway>,
    headers: HeaderMap,
    Path((agent, session)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let (key, _) = session_key(&gateway, &headers, &agent, &session, Access::Read).await?;
    let request: SendRequest = serde_json::from_slice(&body)
        .map_err(|err| ApiError::bad_request(format!("invalid request body ({err}); {SEND_SHAPE}")))?;
    let delegation = delegation(&headers, request.inherit)?;
    let served = gateway.agent(&agent)?;
    // The first turn records the caller as the session's owner.
    owners::check(&gateway, served, &key, Access::Claim).await?;
    let feed = gateway.inner.queues.enqueue(
        &served.agent,
        key.clone(),
        AgentInput::from(request.message),
        delegation,
    )?;
    reply(feed.subscribe(EventId::default()), &key, request.stream).await
}

/// The answer to a queued turn: its SSE stream, or (waiting for it) one JSON object with
/// `status` `completed`, or `awaiting_approval` and the `pending` calls.
async fn reply(
    frames: impl Stream<Item = Frame> + Send + 'static,
    key: &SessionKey,
    stream: bool,
) -> Result<Response, ApiError> {
    if stream {
        return Ok(sse(frames).into_response());
    }
    let mut frames = std::pin::pin!(frames);
    let mut usage = Usage::default();
    let mut pending = Vec::new();
    while let Some(frame) = frames.next().await {
        if frame.event.source.is_some() {
            continue;
        }
        match frame.event.kind {
            WireKind::StepEnd { usage: Some(step), .. } => usage.add(&step),
            WireKind::ApprovalRequired { calls } => pending = calls,
            WireKind::Final { turn_id, message } => {
                let status = if pending.is_empty() {
                    TurnStatus::Completed
                } else {
                    TurnStatus::AwaitingApproval
                };
                return Ok(axum::Json(TurnReply {
                    session_id: key.session.to_string(),
                    turn_id: turn_id.unwrap_or_default(),
                    status,
                    pending,
                    text: message.text(),
                    message,
                    usage,
                })
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
fn resume_point(headers: &HeaderMap, query: Option<&str>) -> Result<EventId, ApiError> {
    if let Some(value) = headers.get(LAST_EVENT_ID_HEADER) {
        return value
            .to_str()
            .ok()
            .and_then(|raw| raw.parse().ok())
            .ok_or_else(|| ApiError::bad_request("Last-Event-ID must be an event id (a number)"));
    }
    for pair in query.unwrap_or_default().split('&') {
        if let Some(raw) = pair.strip_prefix("after=") {
            return raw
                .parse()
                .map_err(|_| ApiError::bad_request("after must be an event id (a number)"));
        }
    }
    Ok(EventId::default())
}

async fn events(
    State(gateway): State<Gateway>,
    headers: HeaderMap,
    Path((agent, session)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let (key, _) = session_key(&gateway, &headers, &agent, &session, Access::Read).await?;
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
    let (key, _) = session_key(&gateway, &headers, &agent, &session, Access::Read).await?;
    let cancelled = gateway.inner.queues.cancel(&key);
    // Not running here: the replica that runs it reads the session's inbox.
    let posted = !cancelled;
    if posted {
        let served = gateway.agent(&agent)?;
        served
            .agent
            .cancel_turn(context(&key))
            .await
            .map_err(|err| ApiError::internal(harness_core::error_chain(&err)))?;
    }
    Ok(axum::Json(CancelReply { cancelled, posted }).into_response())
}

async fn approvals(
    State(gateway): State<Gateway>,
    headers: HeaderMap,
    Path((agent, session)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let (key, _) = session_key(&gateway, &headers, &agent, &session, Access::Read).await?;
    let served = gateway.agent(&agent)?;
    let pending = pending_calls(served, &key).await?;
    Ok(axum::Json(ApprovalsReply {
        session_id: key.session.to_string(),
        pending,
    })
    .into_response())
}

/// `POST .../approvals`: checks the decisions against the pending calls, then resumes the
/// turn through the session's queue (behind any message already there).
async fn decide(
    State(gateway): State<Gateway>,
    headers: HeaderMap,
    Path((agent, session)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let (key, _) = session_key(&gateway, &headers, &agent, &session, Access::Read).await?;
    let request: DecideRequest = serde_json::from_slice(&body)
        .map_err(|err| ApiError::bad_request(format!("invalid request body ({err}); {DECIDE_SHAPE}")))?;
    let delegation = delegation(&headers, request.inherit.clone())?;
    let served = gateway.agent(&agent)?;
    let pending = pending_calls(served, &key).await?;
    if pending.is_empty() {
        return Err(ApiError::not_found(format!(
            "nothing in session `{session}` waits for approval; GET /api/agents/{agent}/sessions/{session}/approvals lists what does"
        )));
    }
    let stream = request.stream;
    let decisions = request
        .resolve(&pending)
        .map_err(|err| ApiError::bad_request(err.to_string()))?;
    let feed = gateway
        .inner
        .queues
        .enqueue(&served.agent, key.clone(), TurnInput::Resume(decisions), delegation)?;
    reply(feed.subscribe(EventId::default()), &key, stream).await
}

/// A subagent-API failure as an answer.
fn task_error(err: &SpawnError) -> ApiError {
    match err {
        SpawnError::Disabled => ApiError::not_found("this agent runs no subagents, so it has no tasks"),
        SpawnError::Bind(message) => ApiError::bad_request(message.clone()),
        other => ApiError::internal(harness_core::error_chain(other)),
    }
}

fn no_task(session: &str, task: &str) -> ApiError {
    ApiError::not_found(format!(
        "session `{session}` has no task `{task}`; GET .../sessions/{session}/tasks lists its tasks"
    ))
}

async fn tasks(
    State(gateway): State<Gateway>,
    headers: HeaderMap,
    Path((agent, session)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let (key, user) = session_key(&gateway, &headers, &agent, &session, Access::Read).await?;
    let served = gateway.agent(&agent)?;
    let records = served
        .agent
        .tasks(context(&key))
        .await
        .map_err(|err| ApiError::internal(harness_core::error_chain(&err)))?;
    if records.is_empty()
        && gateway.inner.queues.last_turn(&key).is_none()
        && read_history(served, &user, &key.session).await?.is_empty()
    {
        return Err(ApiError::not_found(format!("no session `{session}` for this user")));
    }
    Ok(axum::Json(json!({"session_id": key.session.as_str(), "tasks": records})).into_response())
}

async fn task(
    State(gateway): State<Gateway>,
    headers: HeaderMap,
    Path((agent, session, task)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let (key, _) = session_key(&gateway, &headers, &agent, &session, Access::Read).await?;
    let served = gateway.agent(&agent)?;
    let found = served
        .agent
        .task_events(context(&key), &task)
        .await
        .map_err(|err| task_error(&err))?
        .ok_or_else(|| no_task(&session, &task))?;
    let events: Vec<_> = found
        .events
        .into_iter()
        .filter_map(|event| WireEvent::from_agent(event, Some(&task)))
        .collect();
    Ok(axum::Json(json!({
        "task": found.record,
        "events": events,
        "dropped": found.dropped,
        "local": found.local,
    }))
    .into_response())
}

async fn task_events(
    State(gateway): State<Gateway>,
    headers: HeaderMap,
    Path((agent, session, task)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let (key, _) = session_key(&gateway, &headers, &agent, &session, Access::Read).await?;
    let served = gateway.agent(&agent)?;
    let Some(stream) = served
        .agent
        .watch_task(context(&key), &task)
        .await
        .map_err(|err| task_error(&err))?
    else {
        let known = served
            .agent
            .task_events(context(&key), &task)
            .await
            .map_err(|err| task_error(&err))?;
        return Err(match known {
            Some(_) => ApiError::not_found(format!(
                "task `{task}` is not run by this server, so its events cannot be followed here; GET .../tasks/{task} has its record and progress"
            )),
            None => no_task(&session, &task),
        });
    };
    let mut seq = EventId::default();
    let events = stream.filter_map(move |event| {
        let wire = WireEvent::from_agent(event, Some(&task));
        futures::future::ready(wire.map(|wire| {
            seq = seq.next();
            Frame {
                seq: Some(seq),
                event: wire,
            }
        }))
    });
    Ok(sse(events).into_response())
}

async fn cancel_task(
    State(gateway): State<Gateway>,
    headers: HeaderMap,
    Path((agent, session, task)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let (key, _) = session_key(&gateway, &headers, &agent, &session, Access::Read).await?;
    let served = gateway.agent(&agent)?;
    let record = served
        .agent
        .cancel_task(context(&key), &task, TASK_CANCEL_WAIT)
        .await
        .map_err(|err| task_error(&err))?
        .ok_or_else(|| no_task(&session, &task))?;
    Ok(axum::Json(json!({"task": record})).into_response())
}

/// How long `POST .../tasks/{task}/cancel` waits for the task to record its end.
const TASK_CANCEL_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
