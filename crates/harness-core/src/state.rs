//! [`AgentState`] and the [`StateStore`] that keeps it between calls, with compare-and-set
//! versions so two writers can never silently overwrite each other.

use crate::id::{AgentId, SessionId, UserId};
use crate::lease::FencingToken;
use crate::message::Msg;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// The version written into every serialized [`AgentState`].
pub const STATE_FORMAT: u32 = 1;

fn state_format() -> u32 {
    STATE_FORMAT
}

/// The model-visible context of one session plus capability state. A persisted format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentState {
    /// Format version; see [`STATE_FORMAT`].
    #[serde(default = "state_format")]
    pub format: u32,
    /// The context sent to the model, oldest first.
    #[serde(default)]
    pub messages: Vec<Arc<Msg>>,
    /// How many bytes of the session's append-only transcript this state already contains.
    /// A transcript longer than this after a crash holds messages the state lacks; the
    /// session layer replays them on load.
    #[serde(default)]
    pub transcript_offset: u64,
    /// Capability state by capability name (compaction summaries, plan mode, …).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extensions: Map<String, Value>,
}

impl Default for AgentState {
    fn default() -> Self {
        Self {
            format: STATE_FORMAT,
            messages: Vec::new(),
            transcript_offset: 0,
            extensions: Map::new(),
        }
    }
}

/// Where a session's state lives.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StateKey {
    /// The agent.
    pub agent_id: AgentId,
    /// The user (the namespace; a global scope uses a fixed user).
    pub user_id: UserId,
    /// The session.
    pub session_id: SessionId,
}

/// A state's version: 0 means "never saved".
pub type Version = u64;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// Someone saved since we loaded. Reload, re-apply, save again.
    #[error("state of session {key} was changed by another writer (expected version {expected}, found {found})")]
    Conflict {
        /// The session, as `agent/user/session`.
        key: String,
        /// The version we loaded.
        expected: Version,
        /// The version in the store.
        found: Version,
    },
    /// The stored bytes are not a state we can read.
    #[error("stored state of session {key} is corrupt: {message}")]
    Corrupt {
        /// The session.
        key: String,
        /// What failed.
        message: String,
    },
    /// The writer's session lease expired and another holder took it: the write is refused.
    #[error(
        "state of session {key} was not written: the session lease passed to another holder (token {token}, newest {current})"
    )]
    Fenced {
        /// The session.
        key: String,
        /// The token the write carried.
        token: FencingToken,
        /// The newest token issued for the session.
        current: FencingToken,
    },
    /// The backend failed (disk, network).
    #[error("state store backend failed")]
    Backend(#[source] crate::model::BoxError),
}

impl StateKey {
    /// `agent/user/session`, for messages.
    pub fn display(&self) -> String {
        format!("{}/{}/{}", self.agent_id, self.user_id, self.session_id)
    }
}

/// Keeps [`AgentState`] between calls.
#[async_trait]
pub trait StateStore: Send + Sync + 'static {
    /// The state and its version, or `None` when the session was never saved.
    ///
    /// # Errors
    /// [`StateError::Corrupt`] or [`StateError::Backend`].
    async fn load(&self, key: &StateKey) -> Result<Option<(AgentState, Version)>, StateError>;

    /// Saves `state` if the stored version is still `expected` (0 = must not exist yet) and
    /// returns the new version.
    ///
    /// `fence` is the [`FencingToken`] of the session lease the writer holds, when that lease
    /// has one. A store that keeps leases beside the state refuses a write whose token is
    /// older than the newest one issued for the session ([`StateError::Fenced`]); stores whose
    /// writers cannot go stale (files under an OS lock, process memory) ignore it.
    ///
    /// # Errors
    /// [`StateError::Conflict`] when another writer saved first; [`StateError::Fenced`] when
    /// the writer's lease was taken over.
    async fn save(
        &self,
        key: &StateKey,
        state: &AgentState,
        expected: Version,
        fence: Option<FencingToken>,
    ) -> Result<Version, StateError>;

    /// Removes a session's state. Removing a missing state is not an error.
    ///
    /// # Errors
    /// [`StateError::Backend`].
    async fn delete(&self, key: &StateKey) -> Result<(), StateError>;

    /// Whether the state (and the lease beside it) lives on this host only, like a
    /// directory of JSON files. Default `false`: a store says so when it knows.
    fn replica_local(&self) -> bool {
        false
    }
}

/// A [`StateStore`] in process memory. Loses everything at exit; for tests and one-shot runs.
#[derive(Debug, Default)]
pub struct InMemoryStateStore {
    states: Mutex<HashMap<StateKey, (AgentState, Version)>>,
}

#[async_trait]
impl StateStore for InMemoryStateStore {
    async fn load(&self, key: &StateKey) -> Result<Option<(AgentState, Version)>, StateError> {
        let states = self.states.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(states.get(key).cloned())
    }

    async fn save(
        &self,
        key: &StateKey,
        state: &AgentState,
        expected: Version,
        _fence: Option<FencingToken>,
    ) -> Result<Version, StateError> {
        let mut states = self.states.lock().unwrap_or_else(PoisonError::into_inner);
        let found = states.get(key).map_or(0, |(_, version)| *version);
        if found != expected {
            return Err(StateError::Conflict {
                key: key.display(),
                expected,
                found,
            });
        }
        states.insert(key.clone(), (state.clone(), found + 1));
        Ok(found + 1)
    }

    async fn delete(&self, key: &StateKey) -> Result<(), StateError> {
        self.states.lock().unwrap_or_else(PoisonError::into_inner).remove(key);
        Ok(())
    }
}

/// Finds tool calls without a result and tool results without a call, and repairs the
/// message list: a missing result becomes a synthetic error result placed right after the
/// calling message; an orphan result is dropped. Returns how many repairs were made.
pub fn repair_tool_pairs(messages: &mut Vec<Arc<Msg>>) -> usize {
    repair_tool_pairs_except(messages, &[])
}

/// [`repair_tool_pairs`], leaving the calls in `waiting` without a result: they wait for a
/// person's approval ([`PendingApproval`](crate::PendingApproval)) and get their result when
/// the session resumes.
pub fn repair_tool_pairs_except(messages: &mut Vec<Arc<Msg>>, waiting: &[&str]) -> usize {
    use crate::message::{Block, Role, meta};
    use std::collections::HashSet;

    // Runs on every load: skip the owned id sets and the rebuild when nothing is broken.
    if is_well_paired(messages, waiting) {
        return 0;
    }
    let answered: HashSet<String> = messages
        .iter()
        .flat_map(|msg| msg.tool_result_ids().map(str::to_owned))
        .chain(waiting.iter().map(|id| (*id).to_owned()))
        .collect();
    let called: HashSet<String> = messages
        .iter()
        .flat_map(|msg| msg.tool_calls().map(|call| call.id.to_owned()))
        .collect();
    let mut repairs = 0;
    let mut out = Vec::with_capacity(messages.len());
    for msg in messages.drain(..) {
        if msg.role == Role::Tool && msg.tool_result_ids().any(|id| !called.contains(id)) {
            let kept: Vec<Block> = msg
                .content
                .iter()
                .filter(
                    |block| !matches!(block, Block::ToolResult { tool_use_id, .. } if !called.contains(tool_use_id)),
                )
                .cloned()
                .collect();
            repairs += 1;
            if !kept.is_empty() {
                let mut fixed = (*msg).clone();
                fixed.content = kept;
                out.push(Arc::new(fixed));
            }
            continue;
        }
        let missing: Vec<String> = msg
            .tool_calls()
            .filter(|call| !answered.contains(call.id))
            .map(|call| call.id.to_owned())
            .collect();
        out.push(msg);
        for id in missing {
            let mut result = Msg::tool_result(
                id,
                vec![Block::text(
                    "interrupted: the process stopped before this tool call finished; its effects are unknown. Check before retrying.",
                )],
                true,
            );
            result.metadata.insert(meta::SYNTHETIC.to_owned(), Value::Bool(true));
            out.push(Arc::new(result));
            repairs += 1;
        }
    }
    *messages = out;
    repairs
}

/// Whether every tool result answers an earlier call that is still open and no call is left
/// open, in which case [`repair_tool_pairs`] has nothing to do. One pass, no hashing and no
/// id copies; open calls are few (one step's worth).
fn is_well_paired(messages: &[Arc<Msg>], waiting: &[&str]) -> bool {
    let mut open: Vec<&str> = Vec::new();
    for msg in messages {
        open.extend(msg.tool_calls().map(|call| call.id));
        for id in msg.tool_result_ids() {
            match open.iter().position(|call| *call == id) {
                Some(at) => {
                    open.swap_remove(at);
                }
                None => return false,
            }
        }
    }
    open.iter().all(|call| waiting.contains(call))
}
