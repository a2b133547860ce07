//! Human approval that survives the process.
//!
//! A layer that decides a call needs a person's approval (permissions) calls
//! [`ToolContext::request_approval`] instead of running it. The call is recorded in the
//! session's [`PendingApproval`] slot, gets no result yet, and the kernel ends the turn after
//! the step: the other calls of the step ran (or were refused) as usual, an
//! [`EventKind::ApprovalRequired`](crate::EventKind::ApprovalRequired) event lists the
//! pending calls, the state is saved, and the call returns the assistant message that made
//! the calls. Nothing holds the session while a person decides.
//!
//! The session resumes when a call carries [`Approvals`] in its context (and no new
//! message), from this process or another one. For each decided call:
//!
//! - **deny**: an error result saying a person refused; the tool never runs;
//! - **approve** (optionally with edited arguments): the call is first recorded as started
//!   and the state saved, then it runs through the acting layers again — the arguments are
//!   checked against the schema and decided again, so an edit that a deny rule covers is
//!   denied — with [`ToolContext::is_approved`] true, so an "ask" no longer stops it. A
//!   process that dies while an approved call runs leaves it marked started: the next call
//!   gives it an "interrupted" result and never runs it twice.
//!
//! Calls left undecided stay pending (the turn ends again with the event). When every call
//! is decided, the loop continues: the model sees the results.
//!
//! A **new message** while calls are pending supersedes them: each gets an error result
//! ("not run: superseded by a new message"), so the transcript stays valid for every
//! provider (each tool call has a result), and the new message is handled as usual.

use crate::agent::{AgentError, Kernel};
use crate::event::EventKind;
use crate::lease::FencingToken;
use crate::message::{Msg, Role};
use crate::middleware::ActingNext;
use crate::session_state::SessionState;
use crate::tool::{ToolCall, ToolContext, ToolOutput};
use crate::turn::Turn;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::Instrument;

/// The calls of a session that wait for a person, saved with the session
/// ([`SessionSlot`](crate::SessionSlot) `pending_approval`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PendingApproval {
    /// The pending calls, in call order.
    #[serde(default)]
    pub calls: Vec<PendingCall>,
    /// The model spec of the turn that asked (e.g. `openai:gpt-4o-mini`; never a key), when
    /// the caller put a [`TurnModelSpec`] into the context.
    #[serde(default)]
    pub model: Option<String>,
    /// When the first pending call was recorded (RFC 3339).
    #[serde(default)]
    pub created_at: Option<String>,
}

impl crate::SessionSlot for PendingApproval {
    const KEY: &'static str = "pending_approval";
}

impl PendingApproval {
    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// The ids of the calls that wait for a person (not the ones that started running).
    pub fn waiting_ids(&self) -> Vec<String> {
        self.calls
            .iter()
            .filter(|call| !call.started)
            .map(|call| call.id.clone())
            .collect()
    }

    /// The pending call with this id.
    pub fn call(&self, id: &str) -> Option<&PendingCall> {
        self.calls.iter().find(|call| call.id == id)
    }
}

/// One call that waits for a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingCall {
    /// The model's call id.
    pub id: String,
    /// The tool.
    pub tool: String,
    /// The arguments the model sent.
    pub input: Value,
    /// Why it needs approval.
    #[serde(default)]
    pub reason: String,
    /// The rule that would allow calls like this one (what "approve always" adds).
    #[serde(default)]
    pub suggestion: Option<String>,
    /// Set just before an approved call runs; a call found started on a later call was
    /// interrupted and is never run again.
    #[serde(default)]
    pub started: bool,
    /// Set when the call is a subagent call (`agent_spawn`, `agent_send`) whose child asked:
    /// the child's own pending calls, which this decision is forwarded to. Such a call
    /// runs again on either verdict, resuming the child with the decision (a denial reaches
    /// the child's model as a person's refusal, and the child goes on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child: Option<PendingChild>,
}

/// The child behind a parent's pending subagent call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingChild {
    /// The subagent's id.
    pub agent_id: String,
    /// The child's session id.
    pub session_id: String,
    /// The task the child ran as.
    pub task_id: String,
    /// The child's instance key (its label, or the task id): what resumes the same session.
    pub instance: String,
    /// The child's pending calls (each with its tool, arguments, reason and suggested rule).
    pub calls: Vec<PendingCall>,
}

/// What a person decided about one pending call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalDecision {
    /// The pending call's id.
    pub call_id: String,
    /// Approve or deny.
    pub verdict: Verdict,
    /// Edited arguments to run instead of the model's (approve only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// A note for the model (why it was refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl ApprovalDecision {
    /// Approve `call_id` as it is.
    pub fn approve(call_id: impl Into<String>) -> Self {
        Self {
            call_id: call_id.into(),
            verdict: Verdict::Approve,
            input: None,
            note: None,
        }
    }

    /// Approve `call_id` and allow calls like it for the rest of the session.
    pub fn approve_always(call_id: impl Into<String>) -> Self {
        Self {
            verdict: Verdict::ApproveAlways,
            ..Self::approve(call_id)
        }
    }

    /// Refuse `call_id`.
    pub fn deny(call_id: impl Into<String>) -> Self {
        Self {
            verdict: Verdict::Deny,
            ..Self::approve(call_id)
        }
    }

    /// Runs the call with these arguments instead (they are checked and decided again).
    #[must_use]
    pub fn with_input(mut self, input: Value) -> Self {
        self.input = Some(input);
        self
    }

    /// A note for the model.
    #[must_use]
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }
}

/// A person's verdict on a pending call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Run it once.
    Approve,
    /// Run it, and allow calls like it for the rest of the session (the permissions layer
    /// adds the pending call's suggested rule to the session's rules).
    ApproveAlways,
    /// Never run it; the model gets an error result saying a person refused.
    Deny,
}

impl Verdict {
    /// Whether the call runs.
    pub fn approves(self) -> bool {
        matches!(self, Self::Approve | Self::ApproveAlways)
    }
}

/// The decisions a resuming call carries in its [`RuntimeContext`](crate::RuntimeContext).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Approvals(pub Vec<ApprovalDecision>);

/// The model spec of the turn, put into the context by a front-end that knows it, so a
/// pending approval can say which model to resume with. Never a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnModelSpec(pub String);

/// In the context of a pending subagent call being run again after a person decided on it
/// (either verdict): the decision, to forward to the child's pending calls.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildDecision {
    /// The decision about the parent's call (its `input`, if any, edits the child's call
    /// when the child has exactly one pending call).
    pub decision: ApprovalDecision,
    /// The child and its pending calls.
    pub child: PendingChild,
}

impl ChildDecision {
    /// The decisions to give the child: the verdict (and note) for each of its pending
    /// calls; edited arguments apply when it has a single pending call.
    pub fn child_decisions(&self) -> Vec<ApprovalDecision> {
        let single = self.child.calls.len() == 1;
        self.child
            .calls
            .iter()
            .map(|call| ApprovalDecision {
                call_id: call.id.clone(),
                verdict: self.decision.verdict,
                input: if single { self.decision.input.clone() } else { None },
                note: self.decision.note.clone(),
            })
            .collect()
    }
}

/// Marks the one call a person approved, in that call's context only.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApprovedCall {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) input: Value,
}

/// Why decisions could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalError {
    /// The session has no pending calls.
    #[error("nothing is waiting for approval in this session")]
    NothingPending,
    /// A decision names a call that is not pending.
    #[error("call `{id}` is not waiting for approval; pending: {pending}")]
    UnknownCall {
        /// The id given.
        id: String,
        /// The pending ids, comma-separated.
        pending: String,
    },
    /// Two decisions name the same call.
    #[error("call `{id}` was decided twice")]
    Duplicate {
        /// The id given twice.
        id: String,
    },
    /// Edited arguments for a denied call.
    #[error("call `{id}` is denied, so edited arguments for it make no sense")]
    InputOnDeny {
        /// The call.
        id: String,
    },
}

/// What the kernel discards: a pending call's placeholder output (never shown to the model).
const PLACEHOLDER: &str = "awaiting a person's approval";

impl ToolContext {
    /// Records `call` as waiting for a person's approval (in the session's
    /// [`PendingApproval`]) instead of running it. The kernel ends the turn after the step;
    /// return the output of this method from the acting layer.
    ///
    /// `suggestion` is the rule that would allow calls like this one.
    pub fn request_approval(&self, call: &ToolCall, reason: &str, suggestion: Option<String>) -> ToolOutput {
        self.request_approval_for(call, reason, suggestion, None)
    }

    /// [`request_approval`](Self::request_approval) for a subagent call whose child waits
    /// for a person: the parent's pending call carries the child's pending calls, and when
    /// a person decides, the call runs again with a [`ChildDecision`] in its context.
    pub fn request_child_approval(
        &self,
        call: &ToolCall,
        reason: &str,
        suggestion: Option<String>,
        child: PendingChild,
    ) -> ToolOutput {
        self.request_approval_for(call, reason, suggestion, Some(child))
    }

    fn request_approval_for(
        &self,
        call: &ToolCall,
        reason: &str,
        suggestion: Option<String>,
        child: Option<PendingChild>,
    ) -> ToolOutput {
        let model = self.runtime.get::<TurnModelSpec>().map(|spec| spec.0.clone());
        let recorded = self.session.update::<PendingApproval, _>(|pending| {
            if pending.calls.is_empty() {
                pending.model = model;
                pending.created_at = Some(jiff::Timestamp::now().to_string());
            }
            pending.calls.retain(|known| known.id != call.id);
            pending.calls.push(PendingCall {
                id: call.id.clone(),
                tool: call.name.clone(),
                input: call.input.clone(),
                reason: reason.to_owned(),
                suggestion,
                started: false,
                child,
            });
        });
        match recorded {
            Ok(()) => ToolOutput::error(PLACEHOLDER),
            Err(err) => ToolOutput::error(format!(
                "This call needs a person's approval ({reason}), but it could not be recorded ({err}), so it was not run."
            )),
        }
    }

    /// Whether a person approved exactly this call (same id, tool and arguments): the call
    /// is being resumed after approval, so a layer that would ask lets it run.
    pub fn is_approved(&self, call: &ToolCall) -> bool {
        self.runtime.get::<ApprovedCall>().is_some_and(|approved| {
            approved.id == call.id && approved.name == call.name && approved.input == call.input
        })
    }
}

/// The ids of the calls that wait for a person (not the ones that started running).
pub(crate) fn waiting_ids(session: &SessionState) -> Vec<String> {
    session
        .get::<PendingApproval>()
        .map(|pending| pending.waiting_ids())
        .unwrap_or_default()
}

/// What [`Kernel::settle_approvals`] left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    /// Nothing waits (any more): the loop goes on.
    Continue,
    /// Calls still wait: the turn ended with the event.
    StillWaiting,
}

fn slot_error(err: crate::SessionStateError) -> AgentError {
    AgentError::Capability {
        capability: "approval",
        source: Box::new(err),
    }
}

impl Kernel {
    /// Before the loop: applies the call's [`Approvals`], supersedes what a new message
    /// leaves undecided, or ends the turn again when calls still wait.
    pub(crate) async fn settle_approvals(&self, turn: &mut Turn) -> Result<Settled, AgentError> {
        let mut pending = turn.session.get::<PendingApproval>().map_err(slot_error)?;
        let resuming = turn.ctx.get::<Approvals>().is_some();
        let decisions = turn
            .ctx
            .get::<Approvals>()
            .map(|approvals| approvals.0.clone())
            .unwrap_or_default();
        // A started call got its "interrupted" result when the state was loaded.
        let had_started = pending.calls.iter().any(|call| call.started);
        pending.calls.retain(|call| !call.started);
        if had_started {
            let kept = pending.clone();
            turn.session
                .update::<PendingApproval, _>(|slot| *slot = kept)
                .map_err(slot_error)?;
        }
        if pending.is_empty() {
            if resuming && turn.input.is_empty() {
                return Err(ApprovalError::NothingPending.into());
            }
            return Ok(Settled::Continue);
        }
        if !decisions.is_empty() {
            self.apply_decisions(turn, &pending, &decisions).await?;
        }
        let pending = turn.session.get::<PendingApproval>().map_err(slot_error)?;
        if pending.is_empty() {
            return Ok(Settled::Continue);
        }
        if turn.input.is_empty() {
            self.wait_for_approval(turn, pending).await;
            return Ok(Settled::StillWaiting);
        }
        // A new message: what is still undecided will never run.
        for call in &pending.calls {
            let output = ToolOutput::error(
                "Not run: the user sent a new message instead of approving this call, which superseded it. \
                 Read the new message; ask again only if the call is still needed.",
            );
            self.record_result(turn, &call.id, &call.tool, output).await;
        }
        turn.session
            .update::<PendingApproval, _>(|slot| *slot = PendingApproval::default())
            .map_err(slot_error)?;
        Ok(Settled::Continue)
    }

    async fn apply_decisions(
        &self,
        turn: &mut Turn,
        pending: &PendingApproval,
        decisions: &[ApprovalDecision],
    ) -> Result<(), AgentError> {
        let mut seen: Vec<&str> = Vec::new();
        for decision in decisions {
            if pending.call(&decision.call_id).is_none() {
                return Err(ApprovalError::UnknownCall {
                    id: decision.call_id.clone(),
                    pending: pending
                        .calls
                        .iter()
                        .map(|call| call.id.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                }
                .into());
            }
            if seen.contains(&decision.call_id.as_str()) {
                return Err(ApprovalError::Duplicate {
                    id: decision.call_id.clone(),
                }
                .into());
            }
            if decision.verdict == Verdict::Deny && decision.input.is_some() {
                return Err(ApprovalError::InputOnDeny {
                    id: decision.call_id.clone(),
                }
                .into());
            }
            seen.push(&decision.call_id);
        }
        let decided = |call: &PendingCall| decisions.iter().find(|decision| decision.call_id == call.id);
        // Refusals first: they cost nothing and are final.
        for call in &pending.calls {
            if let Some(decision) =
                decided(call).filter(|decision| !decision.verdict.approves() && call.child.is_none())
            {
                let note = decision
                    .note
                    .as_deref()
                    .map(|note| format!(" They said: {note}"))
                    .unwrap_or_default();
                let output = ToolOutput::error(format!(
                    "A person refused this call; it was not run.{note} Do not retry it as it was; \
                     change your approach or ask the user what they want."
                ));
                self.record_result(turn, &call.id, &call.tool, output).await;
            }
        }
        // A subagent call runs again on either verdict (it forwards the decision to its
        // child), with its own arguments; edited arguments are the child's.
        let approved: Vec<(PendingCall, Value, Option<ChildDecision>)> = pending
            .calls
            .iter()
            .filter_map(|call| {
                decided(call)
                    .filter(|decision| decision.verdict.approves() || call.child.is_some())
                    .map(|decision| match &call.child {
                        Some(child) => (
                            call.clone(),
                            call.input.clone(),
                            Some(ChildDecision {
                                decision: decision.clone(),
                                child: child.clone(),
                            }),
                        ),
                        None => (
                            call.clone(),
                            decision.input.clone().unwrap_or_else(|| call.input.clone()),
                            None,
                        ),
                    })
            })
            .collect();
        let denied: Vec<String> = pending
            .calls
            .iter()
            .filter(|call| call.child.is_none() && decided(call).is_some_and(|decision| !decision.verdict.approves()))
            .map(|call| call.id.clone())
            .collect();
        // Record the approved calls as started and save before any of them runs: a retry
        // after a crash finds them started and never runs them twice.
        turn.session
            .update::<PendingApproval, _>(|slot| {
                slot.calls.retain(|call| !denied.contains(&call.id));
                for call in &mut slot.calls {
                    if approved.iter().any(|(approved, _, _)| approved.id == call.id) {
                        call.started = true;
                    }
                }
            })
            .map_err(slot_error)?;
        if !approved.is_empty() {
            turn.session.write_into(&mut turn.state.extensions);
            turn.version = self
                .store
                .save(
                    &turn.key,
                    &turn.state,
                    turn.version,
                    turn.ctx.get::<FencingToken>().copied(),
                )
                .await?;
        }
        for (call, input, child) in approved {
            let output = self.run_approved(turn, &call, input, child).await;
            // A layer may ask again (the edited call is new to it): then it waits again.
            let waiting_again = waiting_ids(&turn.session).contains(&call.id);
            if waiting_again {
                continue;
            }
            turn.session
                .update::<PendingApproval, _>(|slot| slot.calls.retain(|known| known.id != call.id))
                .map_err(slot_error)?;
            self.record_result(turn, &call.id, &call.tool, output).await;
        }
        Ok(())
    }

    /// Runs one approved call through the acting layers, marked approved in its context.
    async fn run_approved(
        &self,
        turn: &Turn,
        call: &PendingCall,
        input: Value,
        child: Option<ChildDecision>,
    ) -> ToolOutput {
        if turn.events.is_active() {
            turn.events
                .emit(EventKind::ToolCallEnd {
                    id: call.id.clone(),
                    name: call.tool.clone(),
                    input: input.clone(),
                })
                .await;
        }
        let mut runtime = turn.ctx.clone();
        runtime.insert(ApprovedCall {
            id: call.id.clone(),
            name: call.tool.clone(),
            input: input.clone(),
        });
        if let Some(child) = child {
            runtime.insert(child);
        }
        let ctx = ToolContext {
            runtime,
            call_id: call.id.clone(),
            events: turn.events.clone(),
            session: turn.session.clone(),
        };
        let tool_call = ToolCall {
            id: call.id.clone(),
            name: call.tool.clone(),
            input,
        };
        let span = tracing::info_span!("execute_tool", gen_ai.tool.name = %call.tool, gen_ai.tool.call.id = %call.id);
        let checked = crate::tool::CheckedCall::default();
        ActingNext {
            rest: &self.chain.acting,
            kernel: self,
            checked: &checked,
        }
        .run(tool_call, &ctx)
        .instrument(span)
        .await
    }

    async fn record_result(&self, turn: &mut Turn, id: &str, tool: &str, output: ToolOutput) {
        if turn.events.is_active() {
            turn.events
                .emit(EventKind::ToolResult {
                    id: id.to_owned(),
                    name: tool.to_owned(),
                    content: output.content.clone(),
                    is_error: output.is_error,
                })
                .await;
        }
        turn.push(Msg::tool_result(id, output.content, output.is_error));
    }

    /// After a step: when calls wait for a person, ends the turn with the event.
    pub(crate) async fn end_if_waiting(&self, turn: &mut Turn) -> bool {
        match turn.session.get::<PendingApproval>() {
            Ok(pending) if !pending.is_empty() => {
                self.wait_for_approval(turn, pending).await;
                true
            }
            _ => false,
        }
    }

    async fn wait_for_approval(&self, turn: &mut Turn, pending: PendingApproval) {
        let ids: Vec<&str> = pending.calls.iter().map(|call| call.id.as_str()).collect();
        let asking = turn
            .state
            .messages
            .iter()
            .rev()
            .find(|msg| msg.role == Role::Assistant && msg.tool_calls().any(|call| ids.contains(&call.id)))
            .map(|msg| (**msg).clone());
        tracing::info!(calls = ids.len(), "the turn waits for a person's approval");
        turn.events
            .emit(EventKind::ApprovalRequired {
                calls: pending.calls.clone(),
            })
            .await;
        turn.output = Some(asking.unwrap_or_else(|| Msg::assistant("(waiting for a person's approval)")));
    }
}
