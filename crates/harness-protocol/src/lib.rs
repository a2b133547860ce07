//! The Harness wire: the one schema every producer and consumer of events and API bodies
//! outside the process uses — `harness serve` (SSE and the OpenAI stream's `harness` field),
//! the remote-subagent client in `harness`, and `harness run --json`. The kernel's
//! `AgentEvent` is not a public format; [`WireEvent::from_agent`] decides what of it reaches
//! the wire, and under which name.
//!
//! Where to start: [`WireEvent`] and [`WireKind`] (the event types, documented in the
//! README's "Events" section), [`EventId`] (resumption), [`ErrorBody`] and [`ErrorClass`]
//! (errors), [`header`] (header names), [`native`] (request and response bodies).
//!
//! ```
//! use harness_core::{AgentEvent, EventKind};
//! use harness_protocol::{WireEvent, WireKind};
//!
//! let kernel = AgentEvent {
//!     source: None,
//!     kind: EventKind::ToolCallEnd { id: "c1".into(), name: "ls".into(), input: serde_json::json!({}) },
//! };
//! let wire = WireEvent::from_agent(kernel, None).unwrap();
//! assert_eq!(wire.name(), "tool_call");
//! let line = serde_json::to_string(&wire).unwrap();
//! assert_eq!(line, r#"{"type":"tool_call","id":"c1","name":"ls","input":{}}"#);
//! let back: WireEvent = serde_json::from_str(&line).unwrap();
//! assert!(matches!(back.kind, WireKind::ToolCall { .. }));
//! ```
//!
//! **Architecture invariant:** no IO and no HTTP crate: header names are strings, statuses
//! are numbers. The crate knows events and bodies, never sessions or transports.

mod error;
mod event;
pub mod header;
pub mod native;

pub use error::{ErrorBody, ErrorClass, ErrorCode, ErrorDetail, ErrorType};
pub use event::{EventId, EventIdError, WireEvent, WireKind, WireSource};
