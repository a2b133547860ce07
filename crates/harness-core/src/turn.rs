//! [`Turn`]: everything about one call in flight.
//!
//! Middlewares read it and change it only through methods that keep its invariants: the
//! messages a call adds ([`appended`](Turn::appended), what persistence writes to the
//! transcript) only grow, through [`push`](Turn::push); what was reported persisted only
//! advances; the call's input and its final reply are set by the kernel.

use crate::context::RuntimeContext;
use crate::event::EventSink;
use crate::message::{Msg, Usage};
use crate::model::ToolSpec;
use crate::session_state::SessionState;
use crate::state::{AgentState, StateKey, Version};
use std::sync::Arc;

/// Everything about one call in flight. Middlewares read and change it; it is dropped when
/// the call ends (after the state was saved).
#[derive(Debug)]
pub struct Turn {
    pub(crate) ctx: RuntimeContext,
    pub(crate) key: StateKey,
    pub(crate) state: AgentState,
    pub(crate) version: Version,
    pub(crate) input: Vec<Msg>,
    pub(crate) appended: Vec<Arc<Msg>>,
    pub(crate) persisted: usize,
    pub(crate) events: EventSink,
    pub(crate) step: u32,
    pub(crate) usage: Usage,
    pub(crate) tools: Arc<[ToolSpec]>,
    pub(crate) offered: Arc<[ToolSpec]>,
    pub(crate) session: SessionState,
    pub(crate) step_notes: Vec<String>,
    pub(crate) output: Option<Msg>,
}

impl Turn {
    /// Who is calling.
    pub fn ctx(&self) -> &RuntimeContext {
        &self.ctx
    }

    /// The call's context, to add call-scoped extras (a counter, a handle) for the layers and
    /// tools inside.
    pub fn ctx_mut(&mut self) -> &mut RuntimeContext {
        &mut self.ctx
    }

    /// Which session.
    pub fn key(&self) -> &StateKey {
        &self.key
    }

    /// The session state; `state().messages` is the context the model sees.
    pub fn state(&self) -> &AgentState {
        &self.state
    }

    /// The session state, to change the model-visible context (compaction, crash replay) or
    /// capability state. The transcript is not in here: it is [`appended`](Self::appended),
    /// which only [`push`](Self::push) extends, so nothing a middleware does to the context
    /// rewrites what was persisted.
    pub fn state_mut(&mut self) -> &mut AgentState {
        &mut self.state
    }

    /// The version the state was loaded at (0 = new session).
    pub fn version(&self) -> Version {
        self.version
    }

    /// The messages this call was given and the kernel has not yet added to the context.
    pub fn input(&self) -> &[Msg] {
        &self.input
    }

    /// Drops the call's input before the kernel adds it: the context already ends with it (a
    /// message sent again after a turn that did not finish continues that turn).
    pub fn discard_input(&mut self) {
        self.input.clear();
    }

    /// Every message appended to the context during this call, in order (input, assistant
    /// messages, tool results). Persistence capabilities write these.
    pub fn appended(&self) -> &[Arc<Msg>] {
        &self.appended
    }

    /// Appends a message to the context and records it in [`appended`](Self::appended).
    pub fn push(&mut self, msg: Msg) -> Arc<Msg> {
        let msg = Arc::new(msg);
        self.state.messages.push(Arc::clone(&msg));
        self.appended.push(Arc::clone(&msg));
        msg
    }

    /// The last message of the context.
    pub fn last_message(&self) -> Option<&Arc<Msg>> {
        self.state.messages.last()
    }

    /// How many of [`appended`](Self::appended) a persistence capability already wrote
    /// durably.
    pub fn persisted(&self) -> usize {
        self.persisted
    }

    /// Records that the first `count` appended messages are written durably. Only advances,
    /// and never past what was appended.
    pub fn mark_persisted(&mut self, count: usize) {
        self.persisted = self.persisted.max(count.min(self.appended.len()));
    }

    /// Where events go.
    pub fn events(&self) -> &EventSink {
        &self.events
    }

    /// The current step (1-based; 0 before the first).
    pub fn step(&self) -> u32 {
        self.step
    }

    /// Usage summed over the call's model calls.
    pub fn usage(&self) -> &Usage {
        &self.usage
    }

    /// The tools to offer on the next step.
    pub fn tools(&self) -> &Arc<[ToolSpec]> {
        &self.tools
    }

    /// Narrows (or restores) the tools offered on the next step, or for the whole call from
    /// the `agent` hook (a per-session filter).
    pub fn set_tools(&mut self, tools: Arc<[ToolSpec]>) {
        self.tools = tools;
    }

    /// The tools the model was actually offered on the latest step (set by the kernel when it
    /// builds the request). A call to any other tool gets an error result and never runs.
    pub fn offered(&self) -> &Arc<[ToolSpec]> {
        &self.offered
    }

    /// Sets the offered tools, for a `reasoning` middleware that answers without running the
    /// inner layers.
    pub fn set_offered(&mut self, offered: Arc<[ToolSpec]>) {
        self.offered = offered;
    }

    /// Ends the call with `reply` as its final message, for an `agent` middleware that
    /// answers without running the loop (a control call: a session change without a model
    /// call). The reply is not added to the context; [`push`](Self::push) what should be.
    pub fn set_output(&mut self, reply: Msg) {
        self.output = Some(reply);
    }

    /// Typed per-session capability state ([`SessionSlot`](crate::SessionSlot)s), shared with
    /// every tool call of the turn and written into the state's extensions before the kernel
    /// saves.
    pub fn session(&self) -> &SessionState {
        &self.session
    }

    /// Extra text for this step's system prompt that is not persisted (e.g. reminders).
    pub fn step_notes(&self) -> &[String] {
        &self.step_notes
    }

    /// The step notes, to add or restore them.
    pub fn step_notes_mut(&mut self) -> &mut Vec<String> {
        &mut self.step_notes
    }

    /// The final message, once the kernel has one (it is also the last appended message).
    pub fn output(&self) -> Option<&Msg> {
        self.output.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::{AgentId, SessionId, UserId};

    fn turn() -> Turn {
        Turn {
            ctx: RuntimeContext::default(),
            key: StateKey {
                agent_id: AgentId::from_static("a"),
                user_id: UserId::from_static("u"),
                session_id: SessionId::from_static("s"),
            },
            state: AgentState::default(),
            version: 0,
            input: vec![Msg::user("hi")],
            appended: Vec::new(),
            persisted: 0,
            events: EventSink::disabled(),
            step: 0,
            usage: Usage::default(),
            tools: Arc::from(Vec::new()),
            offered: Arc::from(Vec::new()),
            session: SessionState::default(),
            step_notes: Vec::new(),
            output: None,
        }
    }

    #[test]
    fn what_was_persisted_only_advances_and_never_past_what_was_appended() {
        let mut turn = turn();
        turn.push(Msg::user("one"));
        turn.push(Msg::assistant("two"));
        turn.mark_persisted(5);
        assert_eq!(turn.persisted(), 2, "clamped to the appended messages");
        turn.mark_persisted(1);
        assert_eq!(turn.persisted(), 2, "never moves back");
        // Editing the context (as compaction does) leaves the transcript's messages alone.
        turn.state_mut().messages.clear();
        assert_eq!(turn.appended().len(), 2);
        assert_eq!(turn.appended()[0].text(), "one");
    }

    #[test]
    fn discarding_the_input_keeps_the_context() {
        let mut turn = turn();
        turn.push(Msg::user("hi"));
        turn.discard_input();
        assert!(turn.input().is_empty());
        assert_eq!(turn.state().messages.len(), 1);
    }
}
