//! Why a spawn was refused.

use super::records::TaskStoreError;

/// Why a spawn was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    /// The caller is a leaf.
    #[error(
        "spawn refused: max_depth = {limit} reached (this agent is at depth {depth}; subagents cannot spawn further subagents)"
    )]
    Depth {
        /// The configured limit.
        limit: u32,
        /// The caller's depth.
        depth: u32,
    },
    /// Too many spawns in this step.
    #[error("spawn refused: max_fanout = {limit} spawns per step already started in this step")]
    Fanout {
        /// The configured limit.
        limit: u32,
    },
    /// Too many spawns in this call.
    #[error("spawn refused: max_spawns_per_call = {limit} spawns already started in this call")]
    CallBudget {
        /// The configured limit.
        limit: u32,
    },
    /// No such subagent.
    #[error("unknown subagent `{id}`; available: {available}")]
    Unknown {
        /// The requested id.
        id: String,
        /// The ids that exist.
        available: String,
    },
    /// The label cannot be part of a session id.
    #[error("label `{0}` may hold letters, digits, `-`, `_` and `.` only (at most 64)")]
    Label(String),
    /// The call has no workspace bound (not a harness call).
    #[error("no call scope is bound to this call")]
    Unbound,
    /// The child could not be built.
    #[error("subagent `{id}` could not be built: {message}")]
    Build {
        /// The subagent.
        id: String,
        /// Why.
        message: String,
    },
    /// The task file could not be written.
    #[error(transparent)]
    Store(#[from] TaskStoreError),
    /// The subagent's `model` could not be built.
    #[error("subagent `{id}`: `model` = `{spec}` ({origin}) cannot be used: {message}")]
    Model {
        /// The subagent.
        id: String,
        /// The spec string.
        spec: String,
        /// Where the declaration came from (the file, or `builder`).
        origin: String,
        /// Why.
        message: String,
    },
    /// Subagents are off for this agent (or it is a leaf).
    #[error("subagents are disabled for this agent ([subagents] enabled = false, or it is a leaf)")]
    Disabled,
    /// The call's ids are bad.
    #[error("{0}")]
    Bind(String),
    /// A resume named a task that does not wait for a person.
    #[error(
        "task `{0}` is not awaiting approval in this session (see the session's tasks: only a task with status awaiting_approval can be resumed)"
    )]
    NotWaiting(String),
    /// Another runner claimed a task this replica was taking over.
    #[error("task `{0}` was claimed by another replica first; it runs there")]
    Claimed(String),
}
