//! [`AgentEvent`]: what a streaming call yields. Front-ends see only these.

use crate::error_kind::ErrorKind;
use crate::message::{Block, Msg, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;

/// Which agent produced an event. `None` on the top-level agent's own events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventSource {
    /// The producing agent.
    pub agent_id: String,
    /// Its session.
    pub session_id: String,
    /// Nesting depth (a direct child is 1).
    pub depth: u32,
    /// Slash-separated path from the root, e.g. `main/researcher`.
    pub path: String,
}

/// What happened.
///
/// Deliberately not `#[non_exhaustive]`: the boundary that turns these into a public format
/// (`harness_protocol::WireEvent::from_agent`) matches every kind without a wildcard, so a
/// new kind does not compile until it is placed on the wire or listed as not on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// A call started.
    AgentStart {
        /// The session it runs in.
        session_id: String,
    },
    /// More answer text.
    TextDelta {
        /// The text.
        delta: String,
    },
    /// More reasoning text.
    ThinkingDelta {
        /// The text.
        delta: String,
    },
    /// The model started a tool call.
    ToolCallStart {
        /// Call id (may be generated when the provider gave none yet).
        id: String,
        /// Tool name.
        name: String,
    },
    /// More argument text of a tool call.
    ToolCallArgs {
        /// Position of the call in the response.
        index: usize,
        /// Argument text.
        delta: String,
    },
    /// A tool call is complete and about to run.
    ToolCallEnd {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
        /// Parsed arguments.
        input: Value,
    },
    /// A tool finished.
    ToolResult {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
        /// Output blocks.
        content: Vec<Block>,
        /// Whether it failed.
        is_error: bool,
    },
    /// A reasoning-acting step ended.
    StepEnd {
        /// 1-based step number.
        step: u32,
        /// Usage of the step's model call.
        usage: Option<Usage>,
    },
    /// The maximum number of steps was reached; a final answer without tools was requested.
    MaxIterations {
        /// The limit.
        limit: u32,
    },
    /// Something was degraded but handled (a skipped file, a failed background job).
    Warning {
        /// Machine-readable code, e.g. `workspace.file_skipped`.
        code: String,
        /// What happened.
        message: String,
    },
    /// A capability's own notice (compaction, eviction, …) with structured details.
    Notice {
        /// Machine-readable kind, e.g. `compaction`.
        kind: String,
        /// Details.
        data: Value,
    },
    /// Calls wait for a person's approval: the turn ends here, saved, and resumes with
    /// decisions (see [`PendingApproval`](crate::PendingApproval)).
    ApprovalRequired {
        /// The pending calls.
        calls: Vec<crate::PendingCall>,
    },
    /// The call failed.
    Error {
        /// What went wrong.
        message: String,
        /// The class of failure, for mapping to a status.
        #[serde(default)]
        kind: ErrorKind,
    },
    /// The call's final message. Always the last event of a successful call.
    Final {
        /// The assistant's final message.
        message: Msg,
    },
}

/// One event, with its source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentEvent {
    /// Which agent produced it; `None` for the top-level agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<EventSource>,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// Where a call sends its events. A sink without a receiver (a plain `call`) drops them
/// without building them where it can (see [`is_active`](Self::is_active)).
#[derive(Debug, Clone, Default)]
pub struct EventSink {
    tx: Option<mpsc::Sender<AgentEvent>>,
    source: Option<EventSource>,
    /// Passes only [`EventKind::Warning`] (see [`warnings`](Self::warnings)).
    warnings_only: bool,
}

impl EventSink {
    /// A sink that drops everything.
    pub fn disabled() -> Self {
        Self::default()
    }

    /// A sink feeding `tx`.
    pub fn new(tx: mpsc::Sender<AgentEvent>) -> Self {
        Self {
            tx: Some(tx),
            source: None,
            warnings_only: false,
        }
    }

    /// A sink feeding `tx` with the call's [`EventKind::Warning`]s only (its children's
    /// too) and dropping the rest. It does not count as [`active`](Self::is_active), so
    /// the call behaves as a plain `call` does (no streaming requests, no costly events):
    /// for a caller that prints an answer but must not lose what was degraded.
    pub fn warnings(tx: mpsc::Sender<AgentEvent>) -> Self {
        Self {
            warnings_only: true,
            ..Self::new(tx)
        }
    }

    /// The same sink, tagging events with `source` (for child agents).
    #[must_use]
    pub fn with_source(mut self, source: EventSource) -> Self {
        self.source = Some(source);
        self
    }

    /// Whether anyone listens. Producers of costly events check this first.
    pub fn is_active(&self) -> bool {
        !self.warnings_only && self.tx.as_ref().is_some_and(|tx| !tx.is_closed())
    }

    fn passes(&self, kind: &EventKind) -> bool {
        !self.warnings_only || matches!(kind, EventKind::Warning { .. })
    }

    /// Sends an event, waiting while the receiver is behind (the channel is bounded). A gone
    /// receiver is not an error: the call goes on.
    pub async fn emit(&self, kind: EventKind) {
        if !self.passes(&kind) {
            return;
        }
        if let Some(tx) = &self.tx {
            let _gone = tx
                .send(AgentEvent {
                    source: self.source.clone(),
                    kind,
                })
                .await;
        }
    }

    /// Forwards an event produced elsewhere (a child agent), keeping its source.
    pub async fn forward(&self, event: AgentEvent) {
        if !self.passes(&event.kind) {
            return;
        }
        if let Some(tx) = &self.tx {
            let _gone = tx.send(event).await;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A warnings sink passes warnings (its own and forwarded ones) and nothing else, and
    /// does not count as active, so a call with it does not stream.
    #[tokio::test]
    async fn a_warnings_sink_passes_only_warnings_and_is_not_active() {
        let (tx, mut rx) = mpsc::channel(8);
        let sink = EventSink::warnings(tx);
        assert!(!sink.is_active());
        sink.emit(EventKind::TextDelta { delta: "x".into() }).await;
        sink.emit(EventKind::Warning {
            code: "c".into(),
            message: "own".into(),
        })
        .await;
        let source = EventSource {
            agent_id: "child".into(),
            session_id: "sub.s".into(),
            depth: 1,
            path: "a/child".into(),
        };
        sink.forward(AgentEvent {
            source: Some(source.clone()),
            kind: EventKind::StepEnd { step: 1, usage: None },
        })
        .await;
        sink.clone()
            .with_source(source.clone())
            .emit(EventKind::Warning {
                code: "c".into(),
                message: "child's".into(),
            })
            .await;
        drop(sink);
        let mut got = Vec::new();
        while let Some(event) = rx.recv().await {
            got.push(event);
        }
        let messages: Vec<(Option<String>, String)> = got
            .into_iter()
            .map(|event| match event.kind {
                EventKind::Warning { message, .. } => (event.source.map(|s| s.agent_id), message),
                other => panic!("only warnings pass: {other:?}"),
            })
            .collect();
        assert_eq!(
            messages,
            [
                (None, "own".to_owned()),
                (Some("child".to_owned()), "child's".to_owned())
            ]
        );
        // A plain sink still passes everything and is active while its receiver lives.
        let (tx, _rx) = mpsc::channel(8);
        assert!(EventSink::new(tx).is_active());
    }
}
