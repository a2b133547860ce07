//! Session control for code on [`HarnessAgent`] (part of the composition root: it joins the
//! agent, plan mode and permissions; the engine is [`harness_store::control`]). None of
//! these is a tool: the model cannot call them.

use crate::HarnessAgent;
use crate::plan_mode::PlanState;
use harness_core::{AgentError, AgentInput, EventSink, Msg, RuntimeContext};
use harness_policy::{Mode, SessionMode};
use harness_store::control::{ControlCall, SessionInbox};
use std::sync::Arc;

pub use harness_store::control::{CONTEXT_CLEARED, Exposed, INTERRUPTED_META, ShutdownCut, ShutdownSignal, Signal};

impl HarnessAgent {
    /// Appends `messages` to the session (context, transcript, index) without a model call;
    /// the next turn sees them. Holds the session like a turn (waits for a running one).
    ///
    /// # Errors
    /// [`AgentError::Refused`] for no messages, and the errors of a call.
    pub async fn observe(&self, messages: Vec<Msg>, ctx: RuntimeContext) -> Result<(), AgentError> {
        if messages.is_empty() {
            let what = "observe needs at least one message".to_owned();
            return Err(AgentError::Refused { what });
        }
        self.control(messages, ctx, ControlCall::observe()).await
    }

    /// Starts the model-visible context afresh; the transcript (which records the clearing),
    /// memory, plan mode, the task list and the session's rules and mode stay.
    ///
    /// # Errors
    /// [`AgentError::Refused`] while calls wait for a person's approval, and the errors of a call.
    pub async fn clear_context(&self, ctx: RuntimeContext) -> Result<(), AgentError> {
        self.control(Vec::new(), ctx, ControlCall::clear_context()).await
    }

    /// Interrupts the session's running turn wherever it runs (any process sharing the
    /// `[state]` backend): without a message it ends at its next step; with one, the model
    /// sees it at the next step and goes on (with no turn running it joins the next one).
    ///
    /// # Errors
    /// [`AgentError::Identity`] for unsafe ids, [`AgentError::State`] when the store fails.
    pub async fn interrupt(&self, message: Option<Msg>, ctx: RuntimeContext) -> Result<(), AgentError> {
        self.signal(Signal::Interrupt { message }, ctx).await
    }

    /// Cancels the session's running turn at once wherever it runs (it still saves what it
    /// finished); dropped when no turn runs.
    ///
    /// # Errors
    /// As [`interrupt`](Self::interrupt).
    pub async fn cancel_turn(&self, ctx: RuntimeContext) -> Result<(), AgentError> {
        self.signal(Signal::Cancel, ctx).await
    }

    /// Turns plan mode on or off for the session, with no person involved.
    ///
    /// # Errors
    /// [`AgentError::Refused`] when plan mode is off (`[plan] enabled`), and the errors of a call.
    pub async fn set_plan_mode(&self, active: bool, ctx: RuntimeContext) -> Result<(), AgentError> {
        if !self.capabilities().contains(&"plan_mode") {
            let what = "plan mode is off for this agent; set `[plan] enabled = true` in harness.toml".to_owned();
            return Err(AgentError::Refused { what });
        }
        let set = ControlCall::update::<PlanState>(move |plan| plan.active = active);
        self.control(Vec::new(), ctx, set).await
    }

    /// Switches the session's permission mode (`None`: harness.toml's), saved with the
    /// session, in force from its next turn.
    ///
    /// # Errors
    /// [`AgentError::Refused`] for a mode more permissive than harness.toml's (`explore` <
    /// `dont_ask` < `default` = `accept_edits` < `bypass`), and the errors of a call.
    pub async fn set_permission_mode(&self, mode: Option<Mode>, ctx: RuntimeContext) -> Result<(), AgentError> {
        let configured = self.permission_policy().map_or(Mode::Default, |policy| policy.mode);
        if let Some(wanted) = mode {
            SessionMode::check(configured, wanted).map_err(|what| AgentError::Refused { what })?;
        }
        let set = ControlCall::update::<SessionMode>(move |session| session.mode = mode);
        self.control(Vec::new(), ctx, set).await
    }

    /// Exposes the session's subagent instance `label` (spawned with that label) to the
    /// session's user, who may then talk to it directly ([`Self::spawn_subagent`] with the
    /// label continues it); saved with the session.
    ///
    /// # Errors
    /// [`AgentError::Refused`] when the session has no instance `label`, and the errors of a call.
    pub async fn expose_subagent(&self, label: &str, ctx: RuntimeContext) -> Result<(), AgentError> {
        let tasks = self.tasks(ctx.clone()).await?;
        let Some(agent_id) = tasks
            .iter()
            .find(|t| t.label.as_deref() == Some(label))
            .map(|t| t.agent_id.clone())
        else {
            let what =
                format!("the session has no subagent instance labelled `{label}`; spawn one with that label first");
            return Err(AgentError::Refused { what });
        };
        let label = label.to_owned();
        let set = ControlCall::update::<Exposed>(move |exposed| {
            exposed.children.insert(label.clone(), agent_id.clone());
        });
        self.control(Vec::new(), ctx, set).await
    }

    async fn signal(&self, signal: Signal, ctx: RuntimeContext) -> Result<(), AgentError> {
        let key = self.kernel().key_for(&self.bind(ctx)?);
        let inbox = SessionInbox::new(Arc::clone(self.kernel().state_store()));
        Ok(inbox.post(&key, signal).await?)
    }

    /// Runs `call` as a call of the session, in place of the loop.
    async fn control(&self, input: Vec<Msg>, mut ctx: RuntimeContext, call: ControlCall) -> Result<(), AgentError> {
        ctx.insert(call);
        self.run(AgentInput(input), ctx, EventSink::disabled()).await.map(drop)
    }
}
