//! Remote subagents: a declaration with `url` runs its turn on another `harness serve`
//! through the native API (`POST {url}/api/agents/{agent}/sessions/{session}/messages` with
//! `"stream": true`, read as Server-Sent Events), and stops it with `POST .../cancel`.
//!
//! The events, bodies and header names are `harness_protocol`'s, the schema the server
//! writes (the serve crate sits above `harness` in the layering and is not a dependency):
//! the served agent's own events become the child's events, a remote grandchild's events keep
//! their source, re-rooted under the child. The parent's plan mode, mode and deny/ask rules travel as the request's
//! `inherit` object ([`harness_policy::Inheritance`]), which the serving side applies on top of
//! its own (it only narrows). A remote turn that waits for approval becomes the child's
//! `approval_required`, so the parent asks its own person; the decision is sent to the remote
//! `POST .../approvals` and the child's stream goes on from there. Every failure (connection refused, a 4xx/5xx answer, a body that breaks off, a
//! stream that ends without `final`) becomes the child's `error` event, so the task ends
//! `failed` with the reason; it is never an error of the parent's stream.

use super::SubagentDeclaration;
use futures::StreamExt;
use futures::stream::BoxStream;
use harness_core::{AgentEvent, ApprovalDecision, ErrorKind, EventKind, EventSource};
use harness_protocol::header::{DEPTH_HEADER, REQUEST_HEADER, TRACEPARENT_HEADER, USER_HEADER};
use harness_protocol::native::{DecideRequest, Decision, SendRequest};
use harness_protocol::{ErrorBody, WireEvent};
use std::collections::BTreeMap;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Where and as whom one remote spawn runs.
#[derive(Debug, Clone)]
pub(crate) struct RemoteTarget {
    /// The declaration id (for messages).
    pub(crate) id: String,
    /// The server's base URL, without a trailing `/`.
    pub(crate) base: String,
    /// The remote agent's name.
    pub(crate) agent: String,
    /// The child session on the remote side.
    pub(crate) session: String,
    /// The declared headers (already substituted).
    pub(crate) headers: BTreeMap<String, String>,
    /// The parent's user: sent as `X-Harness-User` unless the headers carry an
    /// `Authorization` key (then the key decides the remote user).
    pub(crate) user: String,
    /// The child's depth, sent as [`DEPTH_HEADER`].
    pub(crate) depth: u32,
    /// What the child keeps of its parent (sent as `inherit`).
    pub(crate) inherit: harness_policy::Inheritance,
    /// The spawning tool call's W3C trace context (sent as `traceparent`), so the remote
    /// turn's spans join the parent's trace; `None` when no telemetry records spans.
    pub(crate) traceparent: Option<String>,
}

impl RemoteTarget {
    /// The target of `declaration` (which has a `url`) for `session` and `user`.
    pub(crate) fn new(
        declaration: &SubagentDeclaration,
        url: &str,
        session: String,
        user: String,
        depth: u32,
        inherit: harness_policy::Inheritance,
    ) -> Self {
        Self {
            id: declaration.id.clone(),
            base: url.trim_end_matches('/').to_owned(),
            agent: declaration.agent.clone().unwrap_or_else(|| declaration.id.clone()),
            session,
            headers: declaration.headers.clone(),
            user,
            depth,
            inherit,
            // Taken here, inside the spawning tool call's span: the request is sent from a
            // task of its own, outside it.
            traceparent: harness_core::semconv::traceparent(),
        }
    }

    fn session_url(&self, leaf: &str) -> String {
        format!(
            "{}/api/agents/{}/sessions/{}/{leaf}",
            self.base, self.agent, self.session
        )
    }

    fn request(&self, client: &reqwest::Client, url: String) -> reqwest::RequestBuilder {
        let mut request = client
            .post(url)
            .header(DEPTH_HEADER, self.depth.to_string())
            // `harness serve` refuses state-changing requests a browser could send unasked.
            .header(REQUEST_HEADER, "1");
        if let Some(traceparent) = &self.traceparent {
            request = request.header(TRACEPARENT_HEADER, traceparent.as_str());
        }
        let mut keyed = false;
        for (name, value) in &self.headers {
            keyed |= name.eq_ignore_ascii_case("authorization");
            request = request.header(name.as_str(), value.as_str());
        }
        if !keyed && !self.headers.keys().any(|name| name.eq_ignore_ascii_case(USER_HEADER)) {
            request = request.header(USER_HEADER, self.user.as_str());
        }
        request
    }
}

/// What one remote exchange sends: a new task, or the decisions on the calls the remote
/// turn waits on.
pub(crate) enum Send {
    /// `POST .../messages`.
    Task(String),
    /// `POST .../approvals`.
    Decisions(Vec<ApprovalDecision>),
}

/// The child's events for `send` on `target`: the remote turn's events, ending with its
/// `final` or an `error` saying what went wrong. When `cancel` fires the remote turn is
/// cancelled (`POST .../cancel`) and the stream ends.
pub(crate) fn events(
    target: RemoteTarget,
    send: Send,
    cancel: CancellationToken,
    source: EventSource,
) -> BoxStream<'static, AgentEvent> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let client = match reqwest::Client::builder().build() {
            Ok(client) => client,
            Err(err) => {
                let message = format!("remote subagent `{}`: no HTTP client: {err}", target.id);
                let _ = tx.send(error_event(message, ErrorKind::Internal)).await;
                return;
            }
        };
        let outcome = tokio::select! {
            outcome = exchange(&client, &target, send, &source, &tx) => outcome,
            () = cancel.cancelled() => {
                // Dropping the stream does not stop a served turn; the cancel route does.
                let url = target.session_url("cancel");
                if let Err(err) = target.request(&client, url).send().await.and_then(reqwest::Response::error_for_status) {
                    tracing::warn!(subagent = %target.id, error = %err, "remote turn not cancelled");
                }
                Err((format!("remote subagent `{}`: cancelled", target.id), ErrorKind::Cancelled))
            }
        };
        if let Err((message, kind)) = outcome {
            let _ = tx.send(error_event(message, kind)).await;
        }
    });
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|event| (event, rx)) }).boxed()
}

fn error_event(message: String, kind: ErrorKind) -> AgentEvent {
    AgentEvent {
        source: None,
        kind: EventKind::Error { message, kind },
    }
}

/// Sends the message and relays the SSE stream until the turn's `final` or `error`.
async fn exchange(
    client: &reqwest::Client,
    target: &RemoteTarget,
    send: Send,
    source: &EventSource,
    tx: &mpsc::Sender<AgentEvent>,
) -> Result<(), (String, ErrorKind)> {
    let inherit = Some(target.inherit.clone());
    let (url, body) = match send {
        Send::Task(message) => (
            target.session_url("messages"),
            serde_json::to_value(SendRequest {
                message,
                stream: true,
                inherit,
            }),
        ),
        Send::Decisions(decisions) => (
            target.session_url("approvals"),
            serde_json::to_value(DecideRequest {
                decisions: Some(decisions.iter().map(Decision::from_approval).collect()),
                stream: true,
                inherit,
                ..DecideRequest::default()
            }),
        ),
    };
    let failed = |message: String| (message, ErrorKind::Provider);
    let body = body.map_err(|err| {
        (
            format!(
                "remote subagent `{}`: the request could not be written: {err}",
                target.id
            ),
            ErrorKind::Internal,
        )
    })?;
    let response = target
        .request(client, url.clone())
        .json(&body)
        .send()
        .await
        .map_err(|err| {
            failed(format!(
                "remote subagent `{}`: could not reach {url}: {}",
                target.id,
                error_chain(&err.without_url())
            ))
        })?;
    let status = response.status();
    if !status.is_success() {
        let body = response.text().await.unwrap_or_default();
        return Err(failed(format!(
            "remote subagent `{}`: {url} answered {status}: {}",
            target.id,
            error_message(&body)
        )));
    }
    let mut stream = harness_models::sse_events(Box::pin(response.bytes_stream()));
    while let Some(item) = stream.next().await {
        let item = item.map_err(|err| {
            failed(format!(
                "remote subagent `{}`: the event stream from {url} broke off: {}",
                target.id,
                error_chain(&err.without_url())
            ))
        })?;
        let Ok(wire) = serde_json::from_str::<WireEvent>(&item.data) else {
            tracing::debug!(subagent = %target.id, data = %item.data, "remote event skipped");
            continue;
        };
        let own = wire.source.is_none();
        let Some(kind) = wire.kind.into_kernel() else { continue };
        let terminal = own && matches!(kind, EventKind::Final { .. } | EventKind::Error { .. });
        let event = AgentEvent {
            source: wire.source.map(|nested| reroot(source, nested.into())),
            kind,
        };
        if tx.send(event).await.is_err() {
            return Ok(());
        }
        if terminal {
            return Ok(());
        }
    }
    Err(failed(format!(
        "remote subagent `{}`: the event stream from {url} ended without a final message",
        target.id
    )))
}

/// A remote grandchild's source, placed under the remote child's.
fn reroot(child: &EventSource, nested: EventSource) -> EventSource {
    // The remote path starts with the served agent's own name; the child stands for it.
    let below = nested
        .path
        .split_once('/')
        .map_or(nested.path.as_str(), |(_, rest)| rest);
    EventSource {
        agent_id: nested.agent_id,
        session_id: nested.session_id,
        depth: child.depth + nested.depth,
        path: format!("{}/{below}", child.path),
    }
}

fn error_chain(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The `message` of the error body ([`ErrorBody`]), else the body's start.
fn error_message(body: &str) -> String {
    serde_json::from_str::<ErrorBody>(body)
        .map(|body| body.error.message)
        .unwrap_or_else(|_| body.chars().take(500).collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn wire_events_are_read_and_nested_sources_rerooted() {
        let wire: WireEvent = serde_json::from_str(
            r#"{"type":"tool_result","id":"c1","name":"ls","output":"a","is_error":false,"source":{"agent_id":"g","session_id":"s","depth":1,"path":"remote/g"}}"#,
        )
        .unwrap();
        let child = EventSource {
            agent_id: "r".into(),
            session_id: "x".into(),
            depth: 1,
            path: "main/r".into(),
        };
        let source = reroot(&child, wire.source.unwrap().into());
        assert_eq!((source.depth, source.path.as_str()), (2, "main/r/g"));
        let queued: WireEvent = serde_json::from_str(r#"{"type":"turn_queued","turn_id":"t","ahead":1}"#).unwrap();
        assert!(queued.kind.into_kernel().is_none());
        let error: WireEvent =
            serde_json::from_str(r#"{"type":"error","turn_id":"t","message":"m","kind":"cancelled","status":499}"#)
                .unwrap();
        assert!(matches!(
            error.kind.into_kernel(),
            Some(EventKind::Error {
                kind: ErrorKind::Cancelled,
                ..
            })
        ));
    }

    #[test]
    fn error_bodies_give_their_message() {
        assert_eq!(
            error_message(
                r#"{"error":{"message":"no agent `x`","type":"invalid_request_error","code":"model_not_found"}}"#
            ),
            "no agent `x`"
        );
        assert_eq!(error_message("plain"), "plain");
    }
}
