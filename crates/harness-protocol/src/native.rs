//! The native API's bodies (`/api/agents/{agent}/sessions/{session}/…`): what a client —
//! a person's script, the web page or a remote parent — sends to `…/messages` and
//! `…/approvals`, and what a non-streaming answer holds. Requests refuse unknown fields.

use harness_core::{ApprovalDecision, Msg, PendingCall, Usage, Verdict};
use harness_policy::Inheritance;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The shape of `POST …/messages`, for error messages.
pub const SEND_SHAPE: &str = "send {\"message\": \"...\", \"stream\": false} (a remote parent may add \"inherit\": {\"plan\", \"mode\", \"ask\", \"deny\"}, never allow rules)";

/// The shape of `POST …/approvals`, for error messages.
pub const DECIDE_SHAPE: &str = "send {\"decisions\": [{\"call_id\": \"...\", \"decision\": \"approve\" or \"deny\", \"always\": false, \"args\": {...}, \"note\": \"...\"}], \"stream\": false} or {\"all\": \"approve\"}";

/// `POST …/messages`: a new message for the session.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SendRequest {
    /// The message.
    pub message: String,
    /// Answer with the turn's events (SSE) instead of one JSON [`TurnReply`].
    #[serde(default)]
    pub stream: bool,
    /// A remote parent's plan mode, mode and deny/ask rules (they can only narrow).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inherit: Option<Inheritance>,
}

/// `POST …/approvals`: decisions on the calls the session waits for, one by one
/// (`decisions`) or all alike (`all`, with `always` and `note`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecideRequest {
    /// One decision per call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decisions: Option<Vec<Decision>>,
    /// The same verdict for every pending call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all: Option<DecisionVerdict>,
    /// With `all`: allow calls like these for the rest of the session.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub always: bool,
    /// With `all`: a note for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Answer with the resumed turn's events (SSE) instead of one JSON [`TurnReply`].
    #[serde(default)]
    pub stream: bool,
    /// A remote parent's plan mode, mode and deny/ask rules, as with the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inherit: Option<Inheritance>,
}

/// One decision: `{"call_id", "decision", "always", "args", "note"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    /// The pending call.
    pub call_id: String,
    /// Approve or deny.
    pub decision: DecisionVerdict,
    /// Approve and allow calls like it for the rest of the session.
    #[serde(default)]
    pub always: bool,
    /// Edited arguments to run instead (approve only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    /// A note for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// `"approve"` or `"deny"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", try_from = "String")]
pub enum DecisionVerdict {
    /// Run the call.
    Approve,
    /// Never run it; the model hears a person refused.
    Deny,
}

impl TryFrom<String> for DecisionVerdict {
    type Error = String;

    fn try_from(raw: String) -> Result<Self, Self::Error> {
        match raw.as_str() {
            "approve" => Ok(Self::Approve),
            "deny" => Ok(Self::Deny),
            other => Err(format!("decision `{other}` is not one of \"approve\", \"deny\"")),
        }
    }
}

/// Why a [`DecideRequest`] decides nothing. Nothing is decided when any part is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecisionError {
    /// Both `decisions` and `all`.
    #[error("give `decisions` or `all`, not both; {}", DECIDE_SHAPE)]
    Both,
    /// Neither.
    #[error("no decision given; {}", DECIDE_SHAPE)]
    Missing,
    /// `decisions: []`.
    #[error("`decisions` is empty; {}", DECIDE_SHAPE)]
    Empty,
    /// A call that does not wait.
    #[error("call `{call_id}` is not waiting for approval; pending: {}", pending.join(", "))]
    NotPending {
        /// The call named.
        call_id: String,
        /// The calls that wait.
        pending: Vec<String>,
    },
    /// `always` with `deny`.
    #[error("call `{call_id}`: `always` only goes with \"approve\"")]
    AlwaysDeny {
        /// The call.
        call_id: String,
    },
    /// `args` with `deny`.
    #[error("call `{call_id}` is denied, so `args` for it make no sense")]
    ArgsDeny {
        /// The call.
        call_id: String,
    },
}

impl Decision {
    /// The wire form of a decision (what a remote parent sends).
    pub fn from_approval(decision: &ApprovalDecision) -> Self {
        Self {
            call_id: decision.call_id.clone(),
            decision: if decision.verdict.approves() {
                DecisionVerdict::Approve
            } else {
                DecisionVerdict::Deny
            },
            always: decision.verdict == Verdict::ApproveAlways,
            args: decision.input.clone(),
            note: decision.note.clone(),
        }
    }

    /// The decision it describes.
    ///
    /// # Errors
    /// [`DecisionError::AlwaysDeny`] or [`DecisionError::ArgsDeny`] for a denial with
    /// `always` or `args`.
    pub fn into_approval(self) -> Result<ApprovalDecision, DecisionError> {
        let Self {
            call_id,
            decision,
            always,
            args,
            note,
        } = self;
        let mut approval = match (decision, always) {
            (DecisionVerdict::Approve, false) => ApprovalDecision::approve(call_id),
            (DecisionVerdict::Approve, true) => ApprovalDecision::approve_always(call_id),
            (DecisionVerdict::Deny, false) => ApprovalDecision::deny(call_id),
            (DecisionVerdict::Deny, true) => return Err(DecisionError::AlwaysDeny { call_id }),
        };
        if let Some(args) = args {
            if decision == DecisionVerdict::Deny {
                return Err(DecisionError::ArgsDeny {
                    call_id: approval.call_id,
                });
            }
            approval = approval.with_input(args);
        }
        if let Some(note) = note {
            approval = approval.with_note(note);
        }
        Ok(approval)
    }
}

impl DecideRequest {
    /// The decisions this request makes on the `pending` calls.
    ///
    /// # Errors
    /// [`DecisionError`]: both or neither of `decisions` and `all`, an empty list, a call
    /// that does not wait, or a denial with `always` or `args`.
    pub fn resolve(self, pending: &[PendingCall]) -> Result<Vec<ApprovalDecision>, DecisionError> {
        let list = match (self.decisions, self.all) {
            (Some(_), Some(_)) => return Err(DecisionError::Both),
            (None, None) => return Err(DecisionError::Missing),
            (Some(list), None) if list.is_empty() => return Err(DecisionError::Empty),
            (Some(list), None) => {
                if let Some(unknown) = list
                    .iter()
                    .find(|item| !pending.iter().any(|call| call.id == item.call_id))
                {
                    return Err(DecisionError::NotPending {
                        call_id: unknown.call_id.clone(),
                        pending: pending.iter().map(|call| call.id.clone()).collect(),
                    });
                }
                list
            }
            (None, Some(verdict)) => pending
                .iter()
                .map(|call| Decision {
                    call_id: call.id.clone(),
                    decision: verdict,
                    always: self.always,
                    args: None,
                    note: self.note.clone(),
                })
                .collect(),
        };
        list.into_iter().map(Decision::into_approval).collect()
    }
}

/// Whether a turn completed or waits for a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnStatus {
    /// The turn answered.
    Completed,
    /// Calls wait for a decision (`pending`).
    AwaitingApproval,
}

/// The JSON answer to a non-streaming `…/messages` or `…/approvals`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnReply {
    /// The session.
    pub session_id: String,
    /// The turn.
    pub turn_id: String,
    /// Completed, or waiting for approval.
    pub status: TurnStatus,
    /// The calls that wait (empty when completed).
    pub pending: Vec<PendingCall>,
    /// The final message's text.
    pub text: String,
    /// The final message, in the transcript's format.
    pub message: Msg,
    /// The turn's token usage, summed over its steps.
    pub usage: Usage,
}

/// `GET …/approvals`: the calls the session waits on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalsReply {
    /// The session.
    pub session_id: String,
    /// The pending calls.
    pub pending: Vec<PendingCall>,
}

/// `POST …/cancel`: whether a running turn was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelReply {
    /// Whether a turn was running on the replica that answered.
    pub cancelled: bool,
    /// Whether the cancel was posted to the session's inbox, for the replica that runs the
    /// turn (when none ran on the one that answered); it takes effect within a fraction of
    /// a second, and is dropped when no turn runs anywhere.
    #[serde(default)]
    pub posted: bool,
}

/// The shape of `POST …/observe`, for error messages.
pub const OBSERVE_SHAPE: &str =
    "send {\"messages\": [{\"role\": \"user\" or \"assistant\" or \"system\", \"content\": \"...\"}]}";

/// The shape of the session control routes (`…/interrupt`, `…/mode`, `…/plan`), for error
/// messages.
pub const CONTROL_SHAPE: &str = "send {\"message\": \"...\"} or {} to …/interrupt, {\"mode\": \"explore\"} (or null for harness.toml's) to …/mode, {\"active\": true} to …/plan";

/// One message of `POST …/observe`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObservedMessage {
    /// `user` (the default), `assistant` or `system`.
    #[serde(default = "user_role")]
    pub role: String,
    /// The text.
    pub content: String,
}

fn user_role() -> String {
    "user".to_owned()
}

/// `POST …/observe`: messages added to the session without a model call.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObserveRequest {
    /// The messages, oldest first.
    pub messages: Vec<ObservedMessage>,
}

/// `POST …/interrupt`: stop the running turn at its next step, or (with a message) show
/// the model the message at its next step.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InterruptRequest {
    /// The message to inject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `POST …/mode`: the session's permission mode (`None`: harness.toml's).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModeRequest {
    /// The mode.
    pub mode: Option<harness_policy::Mode>,
}

/// `POST …/plan`: plan mode on or off.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanRequest {
    /// Whether plan mode is on.
    pub active: bool,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pending(ids: &[&str]) -> Vec<PendingCall> {
        ids.iter()
            .map(|id| serde_json::from_value(json!({"id": id, "tool": "execute", "input": {}, "reason": "r"})).unwrap())
            .collect()
    }

    fn check(body: Value, pending_ids: &[&str]) -> Result<Vec<ApprovalDecision>, String> {
        let request: DecideRequest = serde_json::from_value(body).map_err(|err| err.to_string())?;
        request.resolve(&pending(pending_ids)).map_err(|err| err.to_string())
    }

    #[test]
    fn decisions_resolve_against_the_pending_calls() {
        let decided = check(
            json!({"decisions": [{"call_id": "c1", "decision": "approve", "always": true, "args": {"a": 1}, "note": "n"}]}),
            &["c1", "c2"],
        )
        .unwrap();
        assert_eq!(
            decided,
            [ApprovalDecision::approve_always("c1")
                .with_input(json!({"a": 1}))
                .with_note("n")]
        );
        let all = check(json!({"all": "deny", "note": "no"}), &["c1", "c2"]).unwrap();
        assert_eq!(
            all,
            [
                ApprovalDecision::deny("c1").with_note("no"),
                ApprovalDecision::deny("c2").with_note("no")
            ]
        );
    }

    #[test]
    fn bad_decisions_say_what_is_wrong() {
        let refused = [
            (
                json!({"decisions": [{"call_id": "x", "decision": "approve"}]}),
                "call `x` is not waiting for approval; pending: c1",
            ),
            (
                json!({"decisions": [{"call_id": "c1", "decision": "maybe"}]}),
                "decision `maybe` is not one of",
            ),
            (
                json!({"decisions": [{"call_id": "c1", "decision": "deny", "args": {}}]}),
                "make no sense",
            ),
            (
                json!({"decisions": [{"call_id": "c1", "decision": "deny", "always": true}]}),
                "only goes with",
            ),
            (json!({"all": "deny", "always": true}), "only goes with"),
            (json!({"decisions": []}), "`decisions` is empty"),
            (json!({}), "no decision given"),
            (json!({"all": "approve", "decisions": []}), "not both"),
            (json!({"verdict": "yes"}), "unknown field `verdict`"),
        ];
        for (body, expected) in refused {
            let err = check(body.clone(), &["c1"]).unwrap_err();
            assert!(err.contains(expected), "{body}: {err}");
        }
    }

    #[test]
    fn a_decision_round_trips_through_its_wire_form() {
        for decision in [
            ApprovalDecision::approve("a"),
            ApprovalDecision::approve_always("b").with_note("ok"),
            ApprovalDecision::approve("c").with_input(json!({"x": 1})),
            ApprovalDecision::deny("d").with_note("no"),
        ] {
            let wire = serde_json::to_value(Decision::from_approval(&decision)).unwrap();
            let back: Decision = serde_json::from_value(wire).unwrap();
            assert_eq!(back.into_approval().unwrap(), decision);
        }
    }

    #[test]
    fn a_send_request_carries_inherit_and_refuses_allow_rules() {
        let request: SendRequest = serde_json::from_value(
            json!({"message": "hi", "stream": true, "inherit": {"plan": true, "deny": ["execute"]}}),
        )
        .unwrap();
        let inherit = request.inherit.unwrap();
        assert!(inherit.plan);
        assert_eq!(inherit.deny.len(), 1);
        let err = serde_json::from_value::<SendRequest>(json!({"message": "hi", "inherit": {"allow": ["execute"]}}))
            .unwrap_err();
        assert!(err.to_string().contains("unknown field `allow`"), "{err}");
    }
}
