//! The server's event schema ([`WireEvent`]): what `/api` SSE streams carry in `data:` and
//! what the `/v1` stream's `harness` extension field holds. It is built from the kernel's
//! `AgentEvent` here, so the kernel's type can change without changing the wire.

use harness_core::{AgentEvent, Block, ErrorKind, EventKind, Msg, Usage};
use serde::Serialize;
use serde_json::Value;

/// One event of a turn, as sent to clients.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WireEvent {
    /// What happened.
    #[serde(flatten)]
    pub kind: WireKind,
    /// The subagent that produced it (absent for the served agent's own events).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<WireSource>,
}

/// A child agent's identity on its events.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WireSource {
    /// The subagent id.
    pub agent_id: String,
    /// Its session.
    pub session_id: String,
    /// Nesting depth (a direct child is 1).
    pub depth: u32,
    /// Slash-separated path from the root.
    pub path: String,
}

/// The event kinds; `type` in JSON. A stream ends with `final` or `error`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum WireKind {
    /// The message waits behind `ahead` others of the same session.
    TurnQueued {
        /// The turn's id.
        turn_id: String,
        /// Messages ahead of it (including the running turn).
        ahead: usize,
    },
    /// The turn started running.
    TurnStart {
        /// The turn's id.
        turn_id: String,
        /// The session.
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
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
    },
    /// A tool call's arguments are complete; it runs now.
    ToolCall {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
        /// Its arguments.
        input: Value,
    },
    /// A tool finished.
    ToolResult {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
        /// Its text output.
        output: String,
        /// Whether it failed.
        is_error: bool,
    },
    /// A reasoning-acting step ended.
    StepEnd {
        /// 1-based step number.
        step: u32,
        /// The step's token usage, when the provider reported it.
        #[serde(skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
    },
    /// Something was degraded but handled.
    Warning {
        /// Machine-readable code.
        code: String,
        /// What happened.
        message: String,
    },
    /// A capability's notice (compaction, eviction, ...).
    Notice {
        /// Machine-readable kind.
        kind: String,
        /// Details.
        data: Value,
    },
    /// Tool calls wait for a person's decision: the turn ends (its `final` follows) and
    /// resumes when `POST .../approvals` answers them.
    ApprovalRequired {
        /// The pending calls (`id`, `tool`, `input`, `reason`, `suggestion`).
        calls: Vec<harness_core::PendingCall>,
    },
    /// The reader fell behind the bounded replay buffer and `missed` events are gone; the
    /// terminal event still comes (and the turn is in the history).
    Lagged {
        /// How many events were skipped.
        missed: u64,
    },
    /// The turn's final assistant message (terminal).
    Final {
        /// The turn's id.
        turn_id: String,
        /// The message, in the transcript's format.
        message: Msg,
    },
    /// The turn failed (terminal).
    Error {
        /// The turn's id.
        turn_id: String,
        /// What went wrong.
        message: String,
        /// The class of failure (`cancelled`, `provider`, `rate_limit`, ...).
        kind: ErrorKind,
        /// The HTTP status a non-streaming request would have got.
        status: u16,
    },
}

impl WireEvent {
    /// An event of the served agent itself.
    pub(crate) fn own(kind: WireKind) -> Self {
        Self { kind, source: None }
    }

    /// Whether this event ends a turn's stream.
    pub fn is_terminal(&self) -> bool {
        self.source.is_none() && matches!(self.kind, WireKind::Final { .. } | WireKind::Error { .. })
    }

    /// The SSE `event:` name.
    pub fn name(&self) -> &'static str {
        match self.kind {
            WireKind::TurnQueued { .. } => "turn_queued",
            WireKind::TurnStart { .. } => "turn_start",
            WireKind::TextDelta { .. } => "text_delta",
            WireKind::ThinkingDelta { .. } => "thinking_delta",
            WireKind::ToolCallStart { .. } => "tool_call_start",
            WireKind::ToolCall { .. } => "tool_call",
            WireKind::ToolResult { .. } => "tool_result",
            WireKind::StepEnd { .. } => "step_end",
            WireKind::Warning { .. } => "warning",
            WireKind::Notice { .. } => "notice",
            WireKind::ApprovalRequired { .. } => "approval_required",
            WireKind::Lagged { .. } => "lagged",
            WireKind::Final { .. } => "final",
            WireKind::Error { .. } => "error",
        }
    }

    /// The wire form of a kernel event of turn `turn_id`; `None` for kinds the wire does
    /// not carry (the kernel's own start marker, argument deltas).
    pub(crate) fn from_agent(event: AgentEvent, turn_id: &str) -> Option<Self> {
        let kind = match event.kind {
            EventKind::TextDelta { delta } => WireKind::TextDelta { delta },
            EventKind::ThinkingDelta { delta } => WireKind::ThinkingDelta { delta },
            EventKind::ToolCallStart { id, name } => WireKind::ToolCallStart { id, name },
            EventKind::ToolCallEnd { id, name, input } => WireKind::ToolCall { id, name, input },
            EventKind::ToolResult {
                id,
                name,
                content,
                is_error,
            } => WireKind::ToolResult {
                id,
                name,
                output: block_text(&content),
                is_error,
            },
            EventKind::StepEnd { step, usage } => WireKind::StepEnd { step, usage },
            EventKind::MaxIterations { limit } => WireKind::Warning {
                code: "max_iterations".to_owned(),
                message: format!("the turn reached its limit of {limit} steps"),
            },
            EventKind::Warning { code, message } => WireKind::Warning {
                code,
                message: harness_core::redact::redact(&message),
            },
            EventKind::Notice { kind, data } => WireKind::Notice { kind, data },
            EventKind::ApprovalRequired { calls } => WireKind::ApprovalRequired { calls },
            EventKind::Final { message } => WireKind::Final {
                turn_id: turn_id.to_owned(),
                message,
            },
            EventKind::Error { message, kind } => WireKind::Error {
                turn_id: turn_id.to_owned(),
                message: harness_core::redact::redact(&message),
                kind,
                status: crate::error::turn_status(kind).0.as_u16(),
            },
            // A child's start is not interesting on the wire; the turn's own start is
            // `turn_start`, sent by the queue.
            _ => return None,
        };
        let source = event.source.map(|source| WireSource {
            agent_id: source.agent_id,
            session_id: source.session_id,
            depth: source.depth,
            path: source.path,
        });
        Some(Self { kind, source })
    }
}

fn block_text(blocks: &[Block]) -> String {
    harness_core::join_text(blocks)
}
