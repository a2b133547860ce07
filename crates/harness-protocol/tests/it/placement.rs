//! Where every kernel event kind goes: onto the wire as which protocol type, or listed as
//! deliberately not on it. `expected` matches `EventKind` without a wildcard, so a new kernel
//! kind does not compile here until it is placed (and `WireEvent::from_agent` does not compile
//! either until it is converted).

use harness_core::{AgentEvent, Block, ErrorKind, EventKind, EventSource, Msg, PendingCall, Usage};
use harness_protocol::{WireEvent, WireKind};
use serde_json::json;
use std::collections::BTreeSet;

/// Where a kernel kind goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// Onto the wire as this `type`.
    Wire(&'static str),
    /// Not on the wire, and why.
    NotOnWire(&'static str),
}

/// The number of arms of [`expected`]: every kernel kind.
const KERNEL_KINDS: usize = 14;

fn expected(kind: &EventKind) -> Placement {
    use Placement::{NotOnWire, Wire};
    match kind {
        EventKind::AgentStart { .. } => NotOnWire("a served turn's start is `turn_start`, sent by the queue"),
        EventKind::TextDelta { .. } => Wire("text_delta"),
        EventKind::ThinkingDelta { .. } => Wire("thinking_delta"),
        EventKind::ToolCallStart { .. } => Wire("tool_call_start"),
        EventKind::ToolCallArgs { .. } => NotOnWire("argument deltas: `tool_call` carries the whole input"),
        EventKind::ToolCallEnd { .. } => Wire("tool_call"),
        EventKind::ToolResult { .. } => Wire("tool_result"),
        EventKind::StepEnd { .. } => Wire("step_end"),
        EventKind::MaxIterations { .. } => NotOnWire("the kernel's `max_iterations` warning that follows carries it"),
        EventKind::Warning { .. } => Wire("warning"),
        EventKind::Notice { .. } => Wire("notice"),
        EventKind::ApprovalRequired { .. } => Wire("approval_required"),
        EventKind::Error { .. } => Wire("error"),
        EventKind::Final { .. } => Wire("final"),
    }
}

fn pending_call() -> PendingCall {
    serde_json::from_value(json!({"id": "c1", "tool": "execute", "input": {"command": "ls"}, "reason": "asks"}))
        .unwrap()
}

/// One example of every kernel kind.
fn every_kind() -> Vec<EventKind> {
    vec![
        EventKind::AgentStart {
            session_id: "s1".into(),
        },
        EventKind::TextDelta { delta: "hel".into() },
        EventKind::ThinkingDelta { delta: "hmm".into() },
        EventKind::ToolCallStart {
            id: "c1".into(),
            name: "read_file".into(),
        },
        EventKind::ToolCallArgs {
            index: 0,
            delta: "{\"pa".into(),
        },
        EventKind::ToolCallEnd {
            id: "c1".into(),
            name: "read_file".into(),
            input: json!({"path": "a.txt"}),
        },
        EventKind::ToolResult {
            id: "c1".into(),
            name: "read_file".into(),
            content: vec![Block::text("contents")],
            is_error: false,
        },
        EventKind::StepEnd {
            step: 1,
            usage: Some(Usage::default()),
        },
        EventKind::MaxIterations { limit: 3 },
        EventKind::Warning {
            code: "max_iterations".into(),
            message: "the call used all 3 reasoning steps".into(),
        },
        EventKind::Notice {
            kind: "compaction".into(),
            data: json!({"removed": 4}),
        },
        EventKind::ApprovalRequired {
            calls: vec![pending_call()],
        },
        EventKind::Error {
            message: "provider down".into(),
            kind: ErrorKind::Provider,
        },
        EventKind::Final {
            message: Msg::assistant("done"),
        },
    ]
}

#[test]
fn every_kernel_kind_has_its_place_on_the_wire_or_off_it() {
    let kinds = every_kind();
    // The list builds each kind once: as many distinct kinds as `expected` has arms.
    let distinct: BTreeSet<String> = kinds
        .iter()
        .map(|kind| format!("{:?}", std::mem::discriminant(kind)))
        .collect();
    assert_eq!(distinct.len(), kinds.len(), "a kind is listed twice");
    assert_eq!(
        kinds.len(),
        KERNEL_KINDS,
        "every kernel kind needs an example in `every_kind`"
    );
    let child = EventSource {
        agent_id: "researcher".into(),
        session_id: "sub.s1".into(),
        depth: 1,
        path: "main/researcher".into(),
    };
    for kind in kinds {
        let placement = expected(&kind);
        for source in [None, Some(child.clone())] {
            let event = AgentEvent {
                source: source.clone(),
                kind: kind.clone(),
            };
            let wire = WireEvent::from_agent(event, Some("turn-1"));
            match (placement, wire) {
                (Placement::Wire(name), Some(wire)) => {
                    assert_eq!(wire.name(), name, "{kind:?}");
                    let line = serde_json::to_value(&wire).unwrap();
                    assert_eq!(line["type"], name, "the JSON `type` is the name: {line}");
                    assert_eq!(
                        wire.source.clone().map(EventSource::from),
                        source,
                        "the source travels with the event"
                    );
                    // What a reader of the wire parses is what was written.
                    let read: WireEvent = serde_json::from_value(line).unwrap();
                    assert_eq!(read, wire);
                }
                (Placement::NotOnWire(_), None) => {}
                (placement, wire) => panic!("{kind:?}: expected {placement:?}, the protocol made {wire:?}"),
            }
        }
    }
}

/// A remote parent reads the wire back into kernel events: every kind on the wire but the
/// server's bookkeeping comes back as the kernel kind it was made from (a tool result as one
/// text block).
#[test]
fn the_wire_reads_back_into_the_kernel_kinds_it_came_from() {
    for kind in every_kind() {
        let Some(wire) = WireEvent::from_agent(
            AgentEvent {
                source: None,
                kind: kind.clone(),
            },
            Some("turn-1"),
        ) else {
            continue;
        };
        assert_eq!(wire.kind.into_kernel(), Some(kind));
    }
    for bookkeeping in [
        WireKind::TurnQueued {
            turn_id: "t".into(),
            ahead: 1,
        },
        WireKind::TurnStart {
            turn_id: "t".into(),
            session_id: "s".into(),
        },
        WireKind::Lagged { missed: 3 },
    ] {
        assert_eq!(bookkeeping.into_kernel(), None);
    }
}

/// The `max_iterations` limit reaches the wire once: the kernel emits its typed
/// `MaxIterations` and a `warning` of the same code; only the warning is carried.
#[test]
fn the_max_iterations_limit_is_one_warning_on_the_wire() {
    let kernel = [
        EventKind::MaxIterations { limit: 2 },
        EventKind::Warning {
            code: "max_iterations".into(),
            message: "the call used all 2 reasoning steps; asked the model for a final answer".into(),
        },
    ];
    let wire: Vec<WireEvent> = kernel
        .into_iter()
        .filter_map(|kind| WireEvent::from_agent(AgentEvent { source: None, kind }, None))
        .collect();
    assert_eq!(
        wire,
        [WireEvent::own(WireKind::Warning {
            code: "max_iterations".into(),
            message: "the call used all 2 reasoning steps; asked the model for a final answer".into(),
        })]
    );
}

/// Warning and error messages are redacted on the way out.
#[test]
fn secrets_in_messages_do_not_reach_the_wire() {
    let event = AgentEvent {
        source: None,
        kind: EventKind::Error {
            message: "could not reach https://user:hunter2@example.com/v1".into(),
            kind: ErrorKind::Provider,
        },
    };
    let wire = WireEvent::from_agent(event, None).unwrap();
    let WireKind::Error {
        message,
        status,
        turn_id,
        ..
    } = wire.kind
    else {
        panic!("not an error: {wire:?}");
    };
    assert!(!message.contains("hunter2"), "{message}");
    assert_eq!((status, turn_id), (503, None));
}
