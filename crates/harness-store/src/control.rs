//! Session control: the per-session inbox kept in the shared state backend, the layer that
//! reads it while a turn runs, control calls (a session change without a model call) and the
//! "cut by shutdown" flag.
//!
//! The inbox of a session is one more document in the [`StateStore`] that keeps the
//! session's state (JSON files, Redis or PostgreSQL), under the key
//! [`SessionInbox::key_of`] derives from the session's. Any process that shares the store
//! posts to it ([`SessionInbox::post`]); the process running the session's turn, wherever it
//! runs, takes what was posted every [`INBOX_POLL`] and at the start of the turn:
//!
//! - [`Signal::Cancel`] cancels the running turn at once (an in-flight model call or tool
//!   too); the turn still saves what it finished.
//! - [`Signal::Interrupt`] without a message ends the turn at its next step with an
//!   assistant message saying it was interrupted, without a model call.
//! - [`Signal::Interrupt`] with a message adds the message to the context at the next step;
//!   the model sees it and the turn goes on.
//!
//! Signals posted while no turn runs are dropped when the next turn starts (they were meant
//! for a turn that had already ended), except the messages, which join the next turn: an
//! injected message is never lost.

use harness_core::{
    AgentError, AgentNext, AgentState, CancellationToken, Hooks, Middleware, Msg, PendingApproval, ReasoningNext,
    SessionId, SessionSlot, StateError, StateKey, StateStore, Turn, async_trait,
};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// How often a running turn reads its session's inbox.
pub const INBOX_POLL: Duration = Duration::from_millis(200);

/// The extension key of the inbox document.
const INBOX_SLOT: &str = "inbox";

/// What another process asks of a session's running turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Signal {
    /// Stop the running turn now.
    Cancel,
    /// Stop at the next step (no message), or show the model `message` at the next step
    /// and go on.
    Interrupt {
        /// The message to add to the context.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<Msg>,
    },
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct InboxDoc {
    #[serde(default)]
    signals: Vec<Signal>,
}

/// The per-session inbox in a [`StateStore`] (see the module docs).
#[derive(Clone)]
pub struct SessionInbox {
    store: Arc<dyn StateStore>,
}

impl std::fmt::Debug for SessionInbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionInbox").finish_non_exhaustive()
    }
}

impl SessionInbox {
    /// An inbox kept in `store` (the one that keeps the sessions' state).
    pub fn new(store: Arc<dyn StateStore>) -> Self {
        Self { store }
    }

    /// Where the inbox of `session` lives: the same agent and user, the session id with
    /// `.inbox` appended (a digest of it when that would be too long).
    pub fn key_of(session: &StateKey) -> StateKey {
        let id = format!("{}.inbox", session.session_id);
        let session_id = SessionId::parse(id).unwrap_or_else(|_| {
            use sha2::Digest as _;
            let digest = sha2::Sha256::digest(session.session_id.as_str().as_bytes());
            let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
            // Hex digits and a dot: always a valid id (proven by the test below).
            SessionId::parse(format!("{hex}.inbox")).unwrap_or_else(|_| session.session_id.clone())
        });
        StateKey {
            agent_id: session.agent_id.clone(),
            user_id: session.user_id.clone(),
            session_id,
        }
    }

    /// Posts `signal` to the inbox of `session`.
    ///
    /// # Errors
    /// [`StateError`] when the store fails (or keeps changing under concurrent posts).
    pub async fn post(&self, session: &StateKey, signal: Signal) -> Result<(), StateError> {
        self.change(session, |doc| {
            doc.signals.push(signal.clone());
            true
        })
        .await
        .map(drop)
    }

    /// Takes every signal posted to the inbox of `session`, oldest first (empty when none;
    /// reading an empty inbox writes nothing).
    ///
    /// # Errors
    /// [`StateError`] when the store fails.
    pub async fn take(&self, session: &StateKey) -> Result<Vec<Signal>, StateError> {
        let mut taken = Vec::new();
        self.change(session, |doc| {
            taken = std::mem::take(&mut doc.signals);
            !taken.is_empty()
        })
        .await?;
        Ok(taken)
    }

    /// Loads the inbox, applies `change` and saves it with compare-and-set when `change`
    /// says it changed anything; retried on a concurrent write.
    async fn change(
        &self,
        session: &StateKey,
        mut change: impl FnMut(&mut InboxDoc) -> bool,
    ) -> Result<(), StateError> {
        let key = Self::key_of(session);
        let mut last = None;
        for _attempt in 0..16 {
            let (mut state, version) = self.store.load(&key).await?.unwrap_or_default();
            let mut doc: InboxDoc = state
                .extensions
                .get(INBOX_SLOT)
                .and_then(|value| serde_json::from_value(value.clone()).ok())
                .unwrap_or_default();
            if !change(&mut doc) {
                return Ok(());
            }
            let value = serde_json::to_value(&doc).map_err(|err| StateError::Corrupt {
                key: key.display(),
                message: err.to_string(),
            })?;
            state.extensions.insert(INBOX_SLOT.to_owned(), value);
            match self.store.save(&key, &state, version, None).await {
                Ok(_) => return Ok(()),
                Err(conflict @ StateError::Conflict { .. }) => last = Some(conflict),
                Err(other) => return Err(other),
            }
        }
        Err(last.unwrap_or_else(|| StateError::Corrupt {
            key: key.display(),
            message: "the inbox kept changing".to_owned(),
        }))
    }
}

/// A session change made as a call of its own, without a model call: the operation runs
/// in place of the loop, inside the session layer (so it holds the session's lease, what
/// it appends goes to the transcript and the index, and the state is saved after it), and
/// its returned message is the call's reply. Put it on the call's context.
#[derive(Clone)]
pub struct ControlCall(pub Arc<ControlFn>);

/// What a [`ControlCall`] runs: it changes the turn and returns the call's reply.
pub type ControlFn = dyn Fn(&mut Turn) -> Result<Msg, AgentError> + Send + Sync;

/// The metadata key of the transcript record [`ControlCall::clear_context`] writes (its
/// value: how many messages the context held).
pub const CONTEXT_CLEARED: &str = "context_cleared";

impl ControlCall {
    /// Adds the call's input to the context, the transcript and the index.
    pub fn observe() -> Self {
        Self(Arc::new(|turn| {
            let input = turn.input().to_vec();
            turn.discard_input();
            for message in input {
                turn.push(message);
            }
            Ok(Msg::system("observed"))
        }))
    }

    /// Empties the model-visible context (capability state stays) and records that in the
    /// transcript; refused while calls wait for a person's approval.
    pub fn clear_context() -> Self {
        Self(Arc::new(|turn| {
            let waiting = turn
                .session()
                .get::<PendingApproval>()
                .map_or(0, |p| p.waiting_ids().len());
            if waiting > 0 {
                return Err(AgentError::Refused {
                    what: format!(
                        "{waiting} tool call(s) wait for a person's approval; decide them first \
                         (`harness approve`, or POST .../approvals), then clear the context"
                    ),
                });
            }
            let dropped = turn.state().messages.len();
            let mut marker = Msg::system(format!(
                "The context was cleared here ({dropped} messages before it stay in the transcript)."
            ));
            marker.metadata.insert(CONTEXT_CLEARED.to_owned(), dropped.into());
            turn.push(marker);
            turn.state_mut().messages.clear();
            Ok(Msg::system("cleared"))
        }))
    }

    /// Changes the session's slot `T`.
    pub fn update<T: SessionSlot>(change: impl Fn(&mut T) + Send + Sync + 'static) -> Self {
        Self(Arc::new(move |turn| {
            turn.session()
                .update::<T, _>(&change)
                .map_err(|err| AgentError::Capability {
                    capability: "session_control",
                    source: Box::new(err),
                })?;
            Ok(Msg::system(format!("{} updated", T::KEY)))
        }))
    }
}

impl std::fmt::Debug for ControlCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControlCall")
    }
}

/// The server's (or the process's) shutdown, on a call's context: a turn cancelled after
/// it fired is flagged [`ShutdownCut`].
#[derive(Debug, Clone)]
pub struct ShutdownSignal(pub CancellationToken);

/// A session whose last turn a shutdown cut short: kept in the session's state until its
/// next turn (which resumes it) starts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShutdownCut {
    /// When the turn was cut; `None` = not cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<jiff::Timestamp>,
}

impl SessionSlot for ShutdownCut {
    const KEY: &'static str = "shutdown_cut";
}

impl ShutdownCut {
    /// The flag saved in a session's state (not cut when absent or unreadable).
    pub fn from_state(state: &AgentState) -> Self {
        state
            .extensions
            .get(Self::KEY)
            .and_then(|value| serde_json::from_value(value.clone()).ok())
            .unwrap_or_default()
    }
}

/// The subagent instances of a session exposed to its user (by label, with the subagent's
/// id): the user may talk to them directly. Saved with the session, so it holds on every
/// replica and after a restart.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exposed {
    /// The subagent id of each exposed instance label.
    #[serde(default)]
    pub children: std::collections::BTreeMap<String, String>,
}

impl SessionSlot for Exposed {
    const KEY: &'static str = "exposed_subagents";
}

impl Exposed {
    /// The exposure saved in a session's state (none when absent or unreadable).
    pub fn from_state(state: &AgentState) -> Self {
        state
            .extensions
            .get(Self::KEY)
            .and_then(|value| serde_json::from_value(value.clone()).ok())
            .unwrap_or_default()
    }
}

/// What the inbox delivered to the running turn for its next step.
#[derive(Debug, Default)]
struct Delivered {
    messages: Vec<Msg>,
    stop: bool,
}

/// The metadata key marking an assistant message that ended an interrupted turn.
pub const INTERRUPTED_META: &str = "interrupted";

/// The `session_control` layer (right inside session persistence): runs [`ControlCall`]s,
/// reads the session's inbox while a turn runs, and flags turns a shutdown cut.
pub struct SessionControl {
    inbox: SessionInbox,
}

impl std::fmt::Debug for SessionControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionControl").finish_non_exhaustive()
    }
}

impl SessionControl {
    /// The layer, reading the inboxes `inbox` keeps.
    pub fn new(inbox: SessionInbox) -> Self {
        Self { inbox }
    }

    /// Files what `signals` ask for; returns whether to cancel now.
    fn deliver(signals: Vec<Signal>, into: &Mutex<Delivered>) -> bool {
        let mut cancel = false;
        let mut delivered = into.lock().unwrap_or_else(PoisonError::into_inner);
        for signal in signals {
            match signal {
                Signal::Cancel => cancel = true,
                Signal::Interrupt { message: Some(message) } => delivered.messages.push(message),
                Signal::Interrupt { message: None } => delivered.stop = true,
            }
        }
        cancel
    }
}

#[async_trait]
impl Middleware for SessionControl {
    fn name(&self) -> &'static str {
        "session_control"
    }

    fn hooks(&self) -> Hooks {
        Hooks::AGENT | Hooks::REASONING
    }

    async fn agent(&self, turn: &mut Turn, next: AgentNext<'_>) -> Result<(), AgentError> {
        if let Some(ControlCall(operation)) = turn.ctx().get::<ControlCall>().cloned() {
            let reply = operation(turn)?;
            turn.set_output(reply);
            return Ok(());
        }
        // This turn resumes a session a shutdown cut: the flag has served its purpose.
        if turn.session().get::<ShutdownCut>().is_ok_and(|cut| cut.at.is_some()) {
            let _ = turn.session().update::<ShutdownCut, _>(|cut| cut.at = None);
        }
        let key = turn.key().clone();
        let delivered = Arc::new(Mutex::new(Delivered::default()));
        // Signals from before this turn were meant for an earlier one; messages join this one.
        match self.inbox.take(&key).await {
            Ok(stale) => {
                let messages = stale.into_iter().filter_map(|signal| match signal {
                    Signal::Interrupt { message } => message,
                    Signal::Cancel => None,
                });
                delivered
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .messages
                    .extend(messages);
            }
            Err(err) => tracing::warn!(error = %err, "session inbox unreadable at the start of the turn"),
        }
        let cancel = turn.ctx().cancellation().child_token();
        let ctx = turn.ctx().clone().with_cancellation(cancel.clone());
        *turn.ctx_mut() = ctx;
        turn.ctx_mut().insert(Arc::clone(&delivered));
        let watch = async {
            loop {
                tokio::time::sleep(INBOX_POLL).await;
                match self.inbox.take(&key).await {
                    Ok(signals) if !signals.is_empty() => {
                        if Self::deliver(signals, &delivered) {
                            tracing::info!("the session's inbox cancelled the running turn");
                            cancel.cancel();
                        }
                    }
                    Ok(_) => {}
                    Err(err) => tracing::warn!(error = %err, "session inbox unreadable"),
                }
            }
        };
        let result = tokio::select! {
            result = next.run(turn) => result,
            _ = watch => unreachable_loop(),
        };
        // Messages that arrived too late for this turn go to the next one.
        let late = std::mem::take(&mut delivered.lock().unwrap_or_else(PoisonError::into_inner).messages);
        for message in late {
            if let Err(err) = self
                .inbox
                .post(&key, Signal::Interrupt { message: Some(message) })
                .await
            {
                tracing::warn!(error = %err, "an injected message could not be kept for the next turn");
            }
        }
        let stopping = turn.ctx().get::<ShutdownSignal>().is_some_and(|s| s.0.is_cancelled());
        if stopping && matches!(result, Err(AgentError::Cancelled)) {
            let at = jiff::Timestamp::now();
            let _ = turn.session().update::<ShutdownCut, _>(|cut| cut.at = Some(at));
            tracing::warn!("the turn was cut by the shutdown; the session is flagged for resuming");
        }
        result
    }

    async fn reasoning(&self, turn: &mut Turn, next: ReasoningNext<'_>) -> Result<(), AgentError> {
        let delivered = turn
            .ctx()
            .get::<Arc<Mutex<Delivered>>>()
            .map(|d| std::mem::take(&mut *d.lock().unwrap_or_else(PoisonError::into_inner)));
        if let Some(Delivered { messages, stop }) = delivered {
            if messages.is_empty() && stop {
                // Interrupted: end here with a reply of our own, no model call.
                turn.set_offered(Arc::from(Vec::new()));
                let mut reply = Msg::assistant("Interrupted by the user before the next step.");
                reply
                    .metadata
                    .insert(INTERRUPTED_META.to_owned(), serde_json::Value::Bool(true));
                turn.push(reply);
                return Ok(());
            }
            for message in messages {
                turn.push(message);
            }
        }
        next.run(turn).await
    }
}

/// The watch loop never ends; `select!` needs a value of the branch's type.
fn unreachable_loop() -> Result<(), AgentError> {
    Err(AgentError::Cancelled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use harness_core::{AgentId, UserId};

    fn key(session: &str) -> StateKey {
        StateKey {
            agent_id: AgentId::from_static("a"),
            user_id: UserId::from_static("u"),
            session_id: SessionId::parse(session).unwrap_or_else(|e| panic!("{e}")),
        }
    }

    #[test]
    fn an_inbox_key_is_valid_for_every_session_id() {
        assert_eq!(SessionInbox::key_of(&key("s")).session_id.as_str(), "s.inbox");
        let long = "x".repeat(harness_core::MAX_ID_LEN);
        let inbox = SessionInbox::key_of(&key(&long));
        assert!(inbox.session_id.as_str().ends_with(".inbox"));
        assert_ne!(inbox.session_id.as_str(), long);
    }
}
