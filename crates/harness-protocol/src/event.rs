//! [`WireEvent`]: one event of a turn as it leaves the process — in `data:` of the native
//! API's Server-Sent Events, in the `harness` field of the OpenAI-compatible stream, and as
//! one line of `harness run --json`. It is built from the kernel's `AgentEvent` by
//! [`WireEvent::from_agent`] (the only place that decides what reaches the wire) and read
//! back by a remote parent with [`WireKind::into_kernel`].

use harness_core::{AgentEvent, Block, ErrorKind, EventKind, EventSource, Msg, PendingCall, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One event of a turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireEvent {
    /// What happened.
    #[serde(flatten)]
    pub kind: WireKind,
    /// The subagent that produced it (absent for the served agent's own events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<WireSource>,
}

/// A child agent's identity on its events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

impl From<EventSource> for WireSource {
    fn from(source: EventSource) -> Self {
        Self {
            agent_id: source.agent_id,
            session_id: source.session_id,
            depth: source.depth,
            path: source.path,
        }
    }
}

impl From<WireSource> for EventSource {
    fn from(source: WireSource) -> Self {
        Self {
            agent_id: source.agent_id,
            session_id: source.session_id,
            depth: source.depth,
            path: source.path,
        }
    }
}

/// The event kinds; `type` in JSON. A turn's own events end with `final` or `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum WireKind {
    /// The message waits behind `ahead` others of the same session (server only).
    TurnQueued {
        /// The turn's id.
        turn_id: String,
        /// Messages ahead of it (including the running turn).
        ahead: usize,
    },
    /// The turn started running (server only).
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
        #[serde(default)]
        input: Value,
    },
    /// A tool finished.
    ToolResult {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
        /// Its text output.
        #[serde(default)]
        output: String,
        /// Whether it failed.
        #[serde(default)]
        is_error: bool,
    },
    /// A reasoning-acting step ended.
    StepEnd {
        /// 1-based step number.
        step: u32,
        /// The step's token usage, when the provider reported it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
    },
    /// Something was degraded but handled (`max_iterations` among them).
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
        #[serde(default)]
        data: Value,
    },
    /// Tool calls wait for a person's decision: the turn ends (its `final` follows) and
    /// resumes when the calls are decided.
    ApprovalRequired {
        /// The pending calls (`id`, `tool`, `input`, `reason`, `suggestion`).
        calls: Vec<PendingCall>,
    },
    /// The reader fell behind the bounded replay buffer and `missed` events are gone; the
    /// terminal event still comes (server only).
    Lagged {
        /// How many events were skipped.
        missed: u64,
    },
    /// The turn's final assistant message (terminal).
    Final {
        /// The turn's id (absent outside a server: `harness run --json`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        turn_id: Option<String>,
        /// The message, in the transcript's format.
        message: Msg,
    },
    /// The turn failed (terminal).
    Error {
        /// The turn's id (absent outside a server: `harness run --json`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        turn_id: Option<String>,
        /// What went wrong.
        message: String,
        /// The class of failure (`cancelled`, `provider`, `rate_limit`, ...).
        #[serde(default)]
        kind: ErrorKind,
        /// The HTTP status a non-streaming request would have got
        /// ([`ErrorClass::of_turn`](crate::ErrorClass::of_turn)).
        #[serde(default)]
        status: u16,
    },
}

impl WireEvent {
    /// An event of the served agent itself.
    pub fn own(kind: WireKind) -> Self {
        Self { kind, source: None }
    }

    /// Whether this event ends a turn's stream (a child's `final` does not).
    pub fn is_terminal(&self) -> bool {
        self.source.is_none() && self.kind.is_terminal()
    }

    /// The `type` name (also the SSE `event:` name).
    pub fn name(&self) -> &'static str {
        self.kind.name()
    }

    /// The wire form of a kernel event of turn `turn_id` (`None` outside a server); `None`
    /// for the kinds the wire does not carry:
    ///
    /// - `agent_start`: a served turn's start is `turn_start`, sent by the server's queue
    ///   when the turn leaves it; a child's start says nothing its first event does not.
    /// - `tool_call_args`: argument deltas; `tool_call` carries the complete arguments.
    /// - `max_iterations`: the kernel reports the limit with a `warning` of code
    ///   `max_iterations` right after it, which the wire carries (once).
    ///
    /// Warning and error messages pass [`harness_core::redact`].
    pub fn from_agent(event: AgentEvent, turn_id: Option<&str>) -> Option<Self> {
        let kind = match event.kind {
            EventKind::AgentStart { .. } | EventKind::ToolCallArgs { .. } | EventKind::MaxIterations { .. } => {
                return None;
            }
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
                output: harness_core::join_text(&content),
                is_error,
            },
            EventKind::StepEnd { step, usage } => WireKind::StepEnd { step, usage },
            EventKind::Warning { code, message } => WireKind::Warning {
                code,
                message: harness_core::redact::redact(&message),
            },
            EventKind::Notice { kind, data } => WireKind::Notice { kind, data },
            EventKind::ApprovalRequired { calls } => WireKind::ApprovalRequired { calls },
            EventKind::Final { message } => WireKind::Final {
                turn_id: turn_id.map(str::to_owned),
                message,
            },
            EventKind::Error { message, kind } => WireKind::Error {
                turn_id: turn_id.map(str::to_owned),
                message: harness_core::redact::redact(&message),
                kind,
                status: crate::ErrorClass::of_turn(kind).status,
            },
        };
        Some(Self {
            kind,
            source: event.source.map(WireSource::from),
        })
    }
}

impl WireKind {
    /// Whether this kind ends a turn (`final`, `error`).
    pub fn is_terminal(&self) -> bool {
        matches!(self, Self::Final { .. } | Self::Error { .. })
    }

    /// The `type` name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::TurnQueued { .. } => "turn_queued",
            Self::TurnStart { .. } => "turn_start",
            Self::TextDelta { .. } => "text_delta",
            Self::ThinkingDelta { .. } => "thinking_delta",
            Self::ToolCallStart { .. } => "tool_call_start",
            Self::ToolCall { .. } => "tool_call",
            Self::ToolResult { .. } => "tool_result",
            Self::StepEnd { .. } => "step_end",
            Self::Warning { .. } => "warning",
            Self::Notice { .. } => "notice",
            Self::ApprovalRequired { .. } => "approval_required",
            Self::Lagged { .. } => "lagged",
            Self::Final { .. } => "final",
            Self::Error { .. } => "error",
        }
    }

    /// The kernel event a reader of the wire (a remote parent) relays for this kind; `None`
    /// for the server's own bookkeeping (`turn_queued`, `turn_start`, `lagged`). A tool
    /// result comes back as one text block.
    pub fn into_kernel(self) -> Option<EventKind> {
        Some(match self {
            Self::TurnQueued { .. } | Self::TurnStart { .. } | Self::Lagged { .. } => return None,
            Self::TextDelta { delta } => EventKind::TextDelta { delta },
            Self::ThinkingDelta { delta } => EventKind::ThinkingDelta { delta },
            Self::ToolCallStart { id, name } => EventKind::ToolCallStart { id, name },
            Self::ToolCall { id, name, input } => EventKind::ToolCallEnd { id, name, input },
            Self::ToolResult {
                id,
                name,
                output,
                is_error,
            } => EventKind::ToolResult {
                id,
                name,
                content: vec![Block::text(output)],
                is_error,
            },
            Self::StepEnd { step, usage } => EventKind::StepEnd { step, usage },
            Self::Warning { code, message } => EventKind::Warning { code, message },
            Self::Notice { kind, data } => EventKind::Notice { kind, data },
            Self::ApprovalRequired { calls } => EventKind::ApprovalRequired { calls },
            Self::Final { message, .. } => EventKind::Final { message },
            Self::Error { message, kind, .. } => EventKind::Error { message, kind },
        })
    }
}

/// The id of one event of a served turn: the SSE `id:` and what `Last-Event-ID` (or
/// `?after=N`) resumes from. `turn << 32 | position`, the position counting from 1: ids are
/// never reused by another turn of the process, so a resume point is unambiguous, and dense
/// within a turn, so a reader can be told exactly how many events it missed. Clients treat
/// them as opaque, increasing numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EventId(u64);

const TURN_SHIFT: u32 = 32;

impl EventId {
    /// The id just before turn `turn`'s first event (position 0).
    pub const fn turn_start(turn: u64) -> Self {
        Self(turn << TURN_SHIFT)
    }

    /// An id from its number (as sent).
    pub const fn from_u64(raw: u64) -> Self {
        Self(raw)
    }

    /// The number.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The turn it belongs to.
    pub const fn turn(self) -> u64 {
        self.0 >> TURN_SHIFT
    }

    /// Its position in the turn (0 before the first event).
    pub const fn position(self) -> u64 {
        self.0 & ((1 << TURN_SHIFT) - 1)
    }

    /// The next event's id.
    #[must_use]
    pub const fn next(self) -> Self {
        Self(self.0 + 1)
    }
}

impl std::fmt::Display for EventId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// An event id that is not a number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an event id is a whole number, e.g. `8589934595`; got `{0}`")]
pub struct EventIdError(String);

impl std::str::FromStr for EventId {
    type Err = EventIdError;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        raw.trim()
            .parse()
            .map(Self)
            .map_err(|_| EventIdError(raw.chars().take(40).collect()))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn event_ids_split_into_turn_and_position_and_parse_from_headers() {
        let id = EventId::turn_start(2).next().next();
        assert_eq!((id.get(), id.turn(), id.position()), (8_589_934_594, 2, 2));
        assert_eq!(" 8589934594 ".parse::<EventId>().unwrap(), id);
        assert_eq!(id.to_string(), "8589934594");
        let err = "abc".parse::<EventId>().unwrap_err();
        assert!(err.to_string().contains("got `abc`"), "{err}");
        assert_eq!(serde_json::to_string(&id).unwrap(), "8589934594");
    }

    #[test]
    fn a_childs_final_is_not_terminal() {
        let final_event = |source: Option<WireSource>| WireEvent {
            kind: WireKind::Final {
                turn_id: None,
                message: Msg::assistant("x"),
            },
            source,
        };
        assert!(final_event(None).is_terminal());
        let child = WireSource {
            agent_id: "c".into(),
            session_id: "s".into(),
            depth: 1,
            path: "main/c".into(),
        };
        assert!(!final_event(Some(child)).is_terminal());
    }
}
