//! Session control routes (documented in the README), beside the native ones:
//!
//! | route | what |
//! |---|---|
//! | `POST /api/agents/{agent}/sessions/{session}/observe` | add messages without a model call |
//! | `POST /api/agents/{agent}/sessions/{session}/clear` | start the model-visible context afresh |
//! | `POST /api/agents/{agent}/sessions/{session}/interrupt` | interrupt the running turn, on any replica |
//! | `POST /api/agents/{agent}/sessions/{session}/mode` | the session's permission mode |
//! | `POST /api/agents/{agent}/sessions/{session}/plan` | plan mode on or off |
//! | `GET /api/agents/{agent}/sessions/{session}/subagents` | the subagent instances exposed to the user |
//! | `POST /api/agents/{agent}/sessions/{session}/subagents/{label}/messages` | talk to an exposed one |
//!
//! They run on whichever replica answers: the ones that change the session hold it like a
//! turn (they wait for a running one), `interrupt` goes through the session's inbox in the
//! shared `[state]` backend.

use crate::error::ApiError;
use crate::native::{context, session_key};
use crate::owners::Access;
use crate::{Gateway, Served};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use harness::control::{Exposed, ShutdownCut};
use harness::permissions::SessionMode;
use harness::plan_mode::PlanState;
use harness_core::{AgentError, Msg, SessionState, StateKey};
use harness_protocol::native::{
    CONTROL_SHAPE, InterruptRequest, ModeRequest, OBSERVE_SHAPE, ObserveRequest, PlanRequest, SEND_SHAPE, SendRequest,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

pub(crate) fn routes() -> Router<Gateway> {
    Router::new()
        .route("/api/agents/{agent}/sessions/{session}/observe", post(observe))
        .route("/api/agents/{agent}/sessions/{session}/clear", post(clear))
        .route("/api/agents/{agent}/sessions/{session}/interrupt", post(interrupt))
        .route("/api/agents/{agent}/sessions/{session}/mode", post(mode))
        .route("/api/agents/{agent}/sessions/{session}/plan", post(plan))
        .route("/api/agents/{agent}/sessions/{session}/subagents", get(exposed))
        .route(
            "/api/agents/{agent}/sessions/{session}/subagents/{label}/messages",
            post(to_child),
        )
}

fn parse<T: DeserializeOwned>(body: &Bytes, shape: &str) -> Result<T, ApiError> {
    let body: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        body
    };
    serde_json::from_slice(body).map_err(|err| ApiError::bad_request(format!("invalid request body ({err}); {shape}")))
}

fn failed(err: &AgentError) -> ApiError {
    ApiError::from_turn(err.kind(), harness_core::error_chain(err))
}

async fn observe(
    State(gateway): State<Gateway>,
    headers: HeaderMap,
    Path((agent, session)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    // Observing a new session makes it the caller's, like a first message.
    let (key, _) = session_key(&gateway, &headers, &agent, &session, Access::Claim).await?;
    let request: ObserveRequest = parse(&body, OBSERVE_SHAPE)?;
    let messages = request
        .messages
        .into_iter()
        .map(|m| match m.role.as_str() {
            "user" => Ok(Msg::user(m.content)),
            "assistant" => Ok(Msg::assistant(m.content)),
            "system" => Ok(Msg::system(m.content)),
            other => Err(ApiError::bad_request(format!(
                "role `{other}` cannot be observed; {OBSERVE_SHAPE}"
            ))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let count = messages.len();
    let served = gateway.agent(&agent)?;
    served
        .agent
        .observe(messages, context(&key))
        .await
        .map_err(|e| failed(&e))?;
    Ok(axum::Json(json!({"observed": count})).into_response())
}

async fn clear(
    State(gateway): State<Gateway>,
    headers: HeaderMap,
    Path((agent, session)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let (key, _) = session_key(&gateway, &headers, &agent, &session, Access::Read).await?;
    let served = gateway.agent(&agent)?;
    served
        .agent
        .clear_context(context(&key))
        .await
        .map_err(|e| failed(&e))?;
    Ok(axum::Json(json!({"cleared": true})).into_response())
}

async fn interrupt(
    State(gateway): State<Gateway>,
    headers: HeaderMap,
    Path((agent, session)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let (key, _) = session_key(&gateway, &headers, &agent, &session, Access::Read).await?;
    let request: InterruptRequest = parse(&body, CONTROL_SHAPE)?;
    let served = gateway.agent(&agent)?;
    served
        .agent
        .interrupt(request.message.map(Msg::user), context(&key))
        .await
        .map_err(|e| failed(&e))?;
    Ok(axum::Json(json!({"posted": true})).into_response())
}

async fn mode(
    State(gateway): State<Gateway>,
    headers: HeaderMap,
    Path((agent, session)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let (key, _) = session_key(&gateway, &headers, &agent, &session, Access::Read).await?;
    let request: ModeRequest = parse(&body, CONTROL_SHAPE)?;
    let served = gateway.agent(&agent)?;
    served
        .agent
        .set_permission_mode(request.mode, context(&key))
        .await
        .map_err(|e| failed(&e))?;
    Ok(axum::Json(json!({"mode": request.mode})).into_response())
}

async fn plan(
    State(gateway): State<Gateway>,
    headers: HeaderMap,
    Path((agent, session)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let (key, _) = session_key(&gateway, &headers, &agent, &session, Access::Read).await?;
    let request: PlanRequest = parse(&body, CONTROL_SHAPE)?;
    let served = gateway.agent(&agent)?;
    served
        .agent
        .set_plan_mode(request.active, context(&key))
        .await
        .map_err(|e| failed(&e))?;
    Ok(axum::Json(json!({"plan_mode": request.active})).into_response())
}

/// The session's control state for its history: the shutdown flag (with how to resume),
/// plan mode and the session's permission mode.
pub(crate) async fn status(served: &Served, key: &StateKey, history_url: &str) -> Result<Value, ApiError> {
    let loaded = served
        .agent
        .kernel()
        .state_store()
        .load(key)
        .await
        .map_err(|err| ApiError::internal(harness_core::error_chain(&err)))?;
    let Some((state, _)) = loaded else {
        return Ok(json!({"shutdown_cut": null, "plan_mode": false, "permission_mode": null}));
    };
    let session = SessionState::from_extensions(&state.extensions);
    let cut = ShutdownCut::from_state(&state);
    let resume = cut.at.map(|_| {
        format!(
            "the last turn was cut short by a server shutdown; POST {history_url}/messages to go on \
             (the same message again continues the cut turn)"
        )
    });
    Ok(json!({
        "shutdown_cut": cut.at,
        "resume": resume,
        "plan_mode": PlanState::from_state(&state).active,
        "permission_mode": session.get::<SessionMode>().unwrap_or_default().mode,
    }))
}

/// How long a message to an exposed subagent waits for its answer.
const CHILD_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

/// The session's exposed instances (after the owner check: another user's are a 404).
async fn exposure(
    gateway: &Gateway,
    headers: &HeaderMap,
    agent: &str,
    session: &str,
) -> Result<(Exposed, crate::queue::SessionKey), ApiError> {
    let (key, _) = session_key(gateway, headers, agent, session, Access::Read).await?;
    let served = gateway.agent(agent)?;
    let state_key = crate::owners::state_key(served, &key)?;
    let loaded = served
        .agent
        .kernel()
        .state_store()
        .load(&state_key)
        .await
        .map_err(|err| ApiError::internal(harness_core::error_chain(&err)))?;
    Ok((
        loaded.map(|(state, _)| Exposed::from_state(&state)).unwrap_or_default(),
        key,
    ))
}

async fn exposed(
    State(gateway): State<Gateway>,
    headers: HeaderMap,
    Path((agent, session)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let (exposed, _) = exposure(&gateway, &headers, &agent, &session).await?;
    let children: Vec<Value> = exposed
        .children
        .iter()
        .map(|(label, agent_id)| json!({"label": label, "agent_id": agent_id}))
        .collect();
    Ok(axum::Json(json!({"subagents": children})).into_response())
}

/// A message of the user to an exposed subagent instance: it continues that instance's
/// conversation and answers here. An instance that is not exposed is a 404.
async fn to_child(
    State(gateway): State<Gateway>,
    headers: HeaderMap,
    Path((agent, session, label)): Path<(String, String, String)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let (exposed, key) = exposure(&gateway, &headers, &agent, &session).await?;
    let request: SendRequest = parse(&body, SEND_SHAPE)?;
    if request.stream {
        return Err(ApiError::bad_request(
            "a message to a subagent answers in JSON; send \"stream\": false",
        ));
    }
    let Some(agent_id) = exposed.children.get(&label) else {
        return Err(ApiError::not_found(format!(
            "session `{session}` exposes no subagent `{label}`; GET /api/agents/{agent}/sessions/{session}/subagents lists them"
        )));
    };
    let served = gateway.agent(&agent)?;
    let spawn = harness::subagents::SpawnRequest::new(agent_id.clone(), request.message)
        .label(label.clone())
        .wait(CHILD_WAIT);
    let outcome = served
        .agent
        .spawn_subagent(context(&key), spawn)
        .await
        .map_err(|err| ApiError::bad_request(harness_core::error_chain(&err)))?;
    Ok(axum::Json(json!({
        "label": label,
        "task_id": outcome.task_id,
        "status": outcome.status,
        "text": outcome.result,
    }))
    .into_response())
}
