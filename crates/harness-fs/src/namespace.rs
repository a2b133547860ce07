//! [`IsolationScope`] and [`NamespaceFactory`]: whose data a call may touch.

use crate::path::WsPath;
use harness_core::{AgentId, RuntimeContext};
use serde::{Deserialize, Serialize};

/// How runtime data (sessions, memory, tool-result files) is partitioned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IsolationScope {
    /// One namespace per session id.
    Session,
    /// One namespace per user id (default). A call without a user id falls back to its
    /// session id, then to the shared default namespace.
    #[default]
    User,
    /// One namespace for the whole agent (all users share).
    Agent,
    /// One namespace for everything.
    Global,
}

/// Maps a call to the path prefix of its namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceFactory {
    scope: IsolationScope,
    agent: AgentId,
}

/// Workspace entries that may not be used as a namespace name, so a user called `memory`
/// can never land inside the shared `memory/` directory.
pub const RESERVED_NAMES: &[&str] = &[
    "AGENTS.md",
    "MEMORY.md",
    "memory",
    "knowledge",
    "skills",
    "subagents",
    "agents",
    "plans",
    "tools.json",
    "harness.toml",
    "large_tool_results",
    "rules",
    "users",
    "sessions",
    "shared",
    "global",
];

impl NamespaceFactory {
    /// A factory for `scope` in `agent`'s workspace.
    pub fn new(scope: IsolationScope, agent: AgentId) -> Self {
        Self { scope, agent }
    }

    /// The scope.
    pub fn scope(&self) -> IsolationScope {
        self.scope
    }

    /// The agent.
    pub fn agent(&self) -> &AgentId {
        &self.agent
    }

    /// The namespace prefix of a call (the root for the shared namespace). Ids are checked
    /// to be single safe path segments and not reserved names.
    ///
    /// # Errors
    /// [`crate::FsError::InvalidPath`] for an id that is not a safe segment or is reserved.
    pub fn prefix(&self, ctx: &RuntimeContext) -> Result<WsPath, crate::FsError> {
        let segment = match self.scope {
            IsolationScope::User => ctx
                .user_id
                .as_ref()
                .map(|user| user.validate().map(|()| user.as_str().to_owned()))
                .or_else(|| {
                    ctx.session_id
                        .as_ref()
                        .map(|s| s.validate().map(|()| s.as_str().to_owned()))
                }),
            IsolationScope::Session => ctx
                .session_id
                .as_ref()
                .map(|s| s.validate().map(|()| s.as_str().to_owned())),
            IsolationScope::Agent | IsolationScope::Global => None,
        };
        let Some(segment) = segment else {
            return Ok(WsPath::root());
        };
        let segment = segment.map_err(|err| crate::FsError::InvalidPath {
            path: String::new(),
            reason: err.to_string(),
        })?;
        if RESERVED_NAMES
            .iter()
            .any(|reserved| reserved.eq_ignore_ascii_case(&segment))
        {
            return Err(crate::FsError::InvalidPath {
                path: segment.clone(),
                reason: format!("{segment:?} is a reserved workspace name and cannot be used as a user or session id"),
            });
        }
        WsPath::parse(&segment)
    }
}
