//! [`CallScope`]: whose data one call touches, computed once per call. Every key and path of
//! the call's runtime data is derived here and nowhere else.

use crate::namespace::{IsolationScope, RESERVED_NAMES};
use crate::path::WsPath;
use harness_core::{AgentId, IdError, LeaseKey, SessionId, StateKey, UserId};
use harness_store::StateLayout;
use std::path::PathBuf;
use std::sync::Arc;

/// The [`StateKey::user_id`] of the shared namespace (scopes `agent` and `global`). It is a
/// reserved workspace name, so no user or session can own a namespace by that name.
pub const SHARED_NAMESPACE_ID: &str = "global";

/// [`SHARED_NAMESPACE_ID`] as a user id.
const SHARED_NAMESPACE_USER: UserId = UserId::from_static(SHARED_NAMESPACE_ID);

/// The default directory of evicted tool outputs (see [`CallScope::evicted_dir`]).
pub const DEFAULT_EVICTED_DIR: &str = "large_tool_results";

/// The memory key of the shared namespace (the memory index database is named after it).
pub const SHARED_MEMORY_KEY: &str = "_shared";

/// Why a [`CallScope`] could not be formed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScopeError {
    /// An id is not a safe path segment (only from [`CallScope::parse`]; ids made by
    /// their own constructors are checked already).
    #[error(transparent)]
    Id(#[from] IdError),
    /// An id that would name a namespace is a reserved workspace name (`knowledge`, `memory`,
    /// ...), so its namespace would overlap the shared files.
    #[error("{kind} id {id:?} is a reserved workspace name and cannot name a namespace")]
    Reserved {
        /// Which id (`user`, `session`).
        kind: &'static str,
        /// The refused id.
        id: String,
    },
}

/// Whose data one call touches: the agent, the caller, the session and the isolation scope,
/// with checked ids (the constructor validates them; the fields are private).
///
/// The harness computes it once when a call is bound and puts it into the call's
/// `RuntimeContext`; every consumer (session persistence, memory, tools, the prompt,
/// eviction, compaction) derives its keys and paths from it:
///
/// | scope | namespace (the caller's layer) | state key user | lease key |
/// |---|---|---|---|
/// | `user` (default) | `<user>/` | `<user>` | `<agent>/<user>/<session>` |
/// | `session` | `<session>/` | `<session>` | `<agent>/<session>/<session>` |
/// | `agent`, `global` | the workspace root | `global` | `<agent>/global/<session>` |
/// | isolated subagent ([`isolated_child`](Self::isolated_child)) | `<parent namespace>/agents/<parent>/subagents/<child>/<parent session>/` | the parent's | `<child>/<parent's>/<child session>` |
///
/// Paths returned by the `*_path` methods are relative to the caller's layer (the
/// namespace); [`state_dir`](Self::state_dir) is relative to the workspace root.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CallScope {
    scope: IsolationScope,
    agent: AgentId,
    user: UserId,
    session: SessionId,
    namespace: WsPath,
    owner: UserId,
    /// Where the owner's agent state lives (the owner's namespace); the same as `namespace`
    /// except for an isolated subagent, whose files sit deeper but whose state stays where
    /// the state store's layout puts every state of the owner.
    state_base: WsPath,
}

impl CallScope {
    /// The scope of a call by `user` in `session` of `agent`, partitioned by `scope`.
    ///
    /// # Errors
    /// [`ScopeError::Reserved`] when the id that names the namespace is a reserved workspace
    /// name. (The ids themselves were checked when they were made: see
    /// [`harness_core::check_id`].)
    pub fn new(scope: IsolationScope, agent: AgentId, user: UserId, session: SessionId) -> Result<Self, ScopeError> {
        let (kind, owner) = match scope {
            IsolationScope::User => ("user", Some(user.as_str())),
            IsolationScope::Session => ("session", Some(session.as_str())),
            IsolationScope::Agent | IsolationScope::Global => ("", None),
        };
        let (namespace, owner) = match owner {
            Some(id) => {
                if RESERVED_NAMES.iter().any(|reserved| reserved.eq_ignore_ascii_case(id)) {
                    return Err(ScopeError::Reserved {
                        kind,
                        id: id.to_owned(),
                    });
                }
                // A checked id is one safe segment, so it parses as a one-segment path.
                let namespace = WsPath::parse(id).map_err(|_| IdError::BadChar {
                    kind,
                    id: id.to_owned(),
                    found: '/',
                })?;
                (namespace, UserId::parse(id)?)
            }
            None => (WsPath::root(), SHARED_NAMESPACE_USER),
        };
        Ok(Self {
            scope,
            agent,
            user,
            session,
            state_base: namespace.clone(),
            namespace,
            owner,
        })
    }

    /// The scope of a call from unchecked text (CLI arguments, request fields): checks each
    /// id with the one id rule, then as [`new`](Self::new).
    ///
    /// # Errors
    /// [`ScopeError::Id`] naming the id and what is allowed; otherwise as [`new`](Self::new).
    pub fn parse(scope: IsolationScope, agent: &str, user: &str, session: &str) -> Result<Self, ScopeError> {
        Self::new(
            scope,
            AgentId::parse(agent)?,
            UserId::parse(user)?,
            SessionId::parse(session)?,
        )
    }

    /// The scope of an isolated subagent `child` that this call spawned, in the child's
    /// `session`: its own caller layer
    /// `<namespace>/agents/<agent>/subagents/<child>/<session of this call>/` (its transcript,
    /// task records, large results and the files it writes live there, over the same
    /// read-only shared layer), the same user and owner, so the child's state and lease are
    /// keyed by (owner, child, child session). Two conversations (parent sessions) of one
    /// user never share a child's files, even when the child's session id is the same.
    ///
    /// # Errors
    /// None in practice: checked ids are single safe path segments (the `Result` keeps the
    /// signature of the other constructors).
    pub fn isolated_child(&self, child: AgentId, session: SessionId) -> Result<Self, ScopeError> {
        // Checked ids are single safe segments, so the joined path always parses.
        let nested =
            WsPath::parse(&format!("agents/{}/subagents/{child}/{}", self.agent, self.session)).map_err(|_| {
                IdError::BadChar {
                    kind: "agent",
                    id: child.to_string(),
                    found: '/',
                }
            })?;
        Ok(Self {
            scope: self.scope,
            agent: child,
            user: self.user.clone(),
            session,
            namespace: self.namespace.join_path(&nested),
            owner: self.owner.clone(),
            state_base: self.state_base.clone(),
        })
    }

    /// The isolation scope.
    pub fn scope(&self) -> IsolationScope {
        self.scope
    }

    /// The agent.
    pub fn agent(&self) -> &AgentId {
        &self.agent
    }

    /// The caller.
    pub fn user(&self) -> &UserId {
        &self.user
    }

    /// The session.
    pub fn session(&self) -> &SessionId {
        &self.session
    }

    /// The caller's layer: the namespace prefix inside the workspace (the root for the shared
    /// namespace of scopes `agent` and `global`).
    pub fn namespace(&self) -> &WsPath {
        &self.namespace
    }

    /// Whether the caller's layer is the workspace root (scopes `agent` and `global`).
    pub fn is_shared_namespace(&self) -> bool {
        self.namespace.is_root()
    }

    /// The key of the session's agent state. Its `user_id` names the namespace (the user,
    /// the session, or [`SHARED_NAMESPACE_ID`]), so two users sharing a namespace share one
    /// state, exactly as they share the transcript.
    pub fn state_key(&self) -> StateKey {
        StateKey {
            agent_id: self.agent.clone(),
            user_id: self.owner.clone(),
            session_id: self.session.clone(),
        }
    }

    /// The key of the session's lease: one per (agent, namespace, session), so turns that
    /// share a transcript and a state are serialised, and no others.
    pub fn lease_key(&self) -> LeaseKey {
        LeaseKey::new(&[self.agent.as_str(), self.owner.as_str(), self.session.as_str()])
    }

    /// The key memory uses for the namespace (its index database, consolidation lease and
    /// throttles): the namespace prefix, or [`SHARED_MEMORY_KEY`] for the root.
    pub fn memory_key(&self) -> &str {
        if self.namespace.is_root() {
            SHARED_MEMORY_KEY
        } else {
            self.namespace.as_str()
        }
    }

    fn agent_path(&self, rest: &str) -> WsPath {
        // Checked ids are single safe segments, so the joined path always parses.
        WsPath::parse(&format!("agents/{}/{rest}", self.agent)).unwrap_or_default()
    }

    /// The session's transcript: `agents/<agent>/sessions/<session>.log.jsonl`.
    pub fn transcript_path(&self) -> WsPath {
        self.agent_path(&format!("sessions/{}.log.jsonl", self.session))
    }

    /// The agent's session index: `agents/<agent>/sessions/sessions.json`.
    pub fn session_index_path(&self) -> WsPath {
        self.agent_path("sessions/sessions.json")
    }

    /// The agent's transcripts directory: `agents/<agent>/sessions/`.
    pub fn sessions_dir(&self) -> WsPath {
        self.agent_path("sessions")
    }

    /// The scope of `session` for the same agent, caller and isolation scope (memory
    /// catching up on every session of a caller).
    ///
    /// # Errors
    /// As [`CallScope::new`].
    pub fn with_session(&self, session: SessionId) -> Result<Self, ScopeError> {
        Self::new(self.scope, self.agent.clone(), self.user.clone(), session)
    }

    /// The session's memory-extraction watermark (what of the transcript was extracted, and
    /// when extraction last ran): `memory/.extraction/<agent>/<session>.json`.
    pub fn memory_extraction_path(&self) -> WsPath {
        WsPath::parse(&format!("memory/.extraction/{}/{}.json", self.agent, self.session)).unwrap_or_default()
    }

    /// Messages compaction replaced: `agents/<agent>/compacted/<session>/`.
    pub fn compacted_dir(&self) -> WsPath {
        self.agent_path(&format!("compacted/{}", self.session))
    }

    /// Evicted tool outputs with the default directory: `large_tool_results/<agent>/`.
    pub fn large_tool_results_dir(&self) -> WsPath {
        WsPath::parse(&format!("{DEFAULT_EVICTED_DIR}/{}", self.agent)).unwrap_or_default()
    }

    /// Evicted tool outputs under the configured directory `base` (`large_tool_results` by
    /// default): `<base>/<agent>/`, inside the caller's layer.
    pub fn evicted_dir(&self, base: &WsPath) -> WsPath {
        // A checked agent id is one safe segment, so the join cannot fail.
        base.join(self.agent.as_str())
            .unwrap_or_else(|_| self.large_tool_results_dir())
    }

    /// The session's background-task records: `agents/<agent>/tasks/<session>.json`.
    pub fn task_records_path(&self) -> WsPath {
        self.agent_path(&format!("tasks/{}.json", self.session))
    }

    /// The directories of the caller's layer holding what a later turn or task reads back:
    /// the transcripts and session index, the task records, compaction offloads, evicted tool
    /// outputs (under the default directory), the plan (`plans/`), and the layers of the
    /// isolated children this agent spawns (`agents/<agent>/subagents/`); for an isolated
    /// child, its whole layer (the root). In a deployment of several replicas
    /// ([`Filesystem::replicated`](crate::Filesystem::replicated)) they live in the shared
    /// store, so another replica continues the session or takes a task over.
    pub fn replicated_dirs(&self) -> Vec<WsPath> {
        if self.is_isolated_child() {
            return vec![WsPath::root()];
        }
        vec![
            self.sessions_dir(),
            self.agent_path("tasks"),
            self.agent_path("compacted"),
            self.agent_path("subagents"),
            self.large_tool_results_dir(),
            WsPath::parse("plans").unwrap_or_default(),
        ]
    }

    /// Whether this is the scope of an isolated subagent ([`isolated_child`](Self::isolated_child)),
    /// whose layer lies inside its owner's.
    pub fn is_isolated_child(&self) -> bool {
        self.namespace != self.state_base
    }

    /// The directory of the session's agent state, relative to the workspace root (where
    /// [`state_layout`] puts it): `<namespace>/agents/<agent>/context/<session>` (for an
    /// isolated subagent, the owner's namespace rather than the child's own layer).
    pub fn state_dir(&self) -> WsPath {
        self.state_base
            .join_path(&self.agent_path(&format!("context/{}", self.session)))
    }
}

/// The `FileStateStore` layout that keeps each session's state inside its namespace:
/// `<user_id>/agents/<agent>/context/<session>`, and `agents/<agent>/context/<session>` for
/// the shared namespace ([`SHARED_NAMESPACE_ID`]).
pub fn state_layout() -> StateLayout {
    Arc::new(|key: &StateKey| {
        let base = if key.user_id.as_str() == SHARED_NAMESPACE_ID {
            PathBuf::new()
        } else {
            PathBuf::from(key.user_id.as_str())
        };
        base.join("agents")
            .join(key.agent_id.as_str())
            .join("context")
            .join(key.session_id.as_str())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(scope: IsolationScope, user: &str, session: &str) -> Result<CallScope, ScopeError> {
        CallScope::parse(scope, "main", user, session)
    }

    /// A shared state store checks a save's fencing token against the lease it finds with
    /// `harness_store::default_lease_key(state_key)`; the harness takes the lease at
    /// `lease_key()`. If the two diverged, fencing would check a counter nobody increments.
    #[test]
    fn the_store_fences_with_the_lease_the_call_takes() -> Result<(), ScopeError> {
        for kind in [
            IsolationScope::User,
            IsolationScope::Session,
            IsolationScope::Agent,
            IsolationScope::Global,
        ] {
            for (user, session) in [("alice", "s1"), ("bob", "v1.2"), ("a:b", "x@y")] {
                let call = scope(kind, user, session)?;
                assert_eq!(
                    harness_store::default_lease_key(&call.state_key()),
                    call.lease_key(),
                    "{kind:?} {user} {session}"
                );
            }
        }
        Ok(())
    }

    #[test]
    fn every_key_follows_the_scope() -> Result<(), ScopeError> {
        let cases = [
            (IsolationScope::User, "alice", "alice", "main/alice/s1"),
            (IsolationScope::Session, "s1", "s1", "main/s1/s1"),
            (IsolationScope::Agent, "", SHARED_NAMESPACE_ID, "main/global/s1"),
            (IsolationScope::Global, "", SHARED_NAMESPACE_ID, "main/global/s1"),
        ];
        for (kind, namespace, owner, lease) in cases {
            let call = scope(kind, "alice", "s1")?;
            assert_eq!(call.namespace().as_str(), namespace);
            assert_eq!(call.state_key().user_id.as_str(), owner);
            assert_eq!(call.lease_key().as_str(), lease);
            let layout = state_layout();
            assert_eq!(
                layout(&call.state_key()).to_string_lossy(),
                call.state_dir().as_str(),
                "the state store puts the state inside the namespace"
            );
        }
        Ok(())
    }

    #[test]
    fn two_users_in_one_shared_scope_share_every_key() -> Result<(), ScopeError> {
        for kind in [IsolationScope::Session, IsolationScope::Agent, IsolationScope::Global] {
            let (alice, bob) = (scope(kind, "alice", "s1")?, scope(kind, "bob", "s1")?);
            assert_eq!(alice.state_key(), bob.state_key());
            assert_eq!(alice.lease_key(), bob.lease_key());
            assert_eq!(alice.memory_key(), bob.memory_key());
            assert_eq!(alice.transcript_path(), bob.transcript_path());
        }
        let (alice, bob) = (
            scope(IsolationScope::User, "alice", "s1")?,
            scope(IsolationScope::User, "bob", "s1")?,
        );
        assert_ne!(alice.state_key(), bob.state_key());
        assert_ne!(alice.lease_key(), bob.lease_key());
        assert_ne!(alice.memory_key(), bob.memory_key());
        Ok(())
    }

    #[test]
    fn an_isolated_child_gets_its_own_layer_per_parent_session() -> Result<(), ScopeError> {
        for kind in [IsolationScope::User, IsolationScope::Session, IsolationScope::Global] {
            let (one, two) = (scope(kind, "alice", "s1")?, scope(kind, "alice", "s2")?);
            let child_session = SessionId::parse("sub.x")?;
            let a = one.isolated_child(AgentId::parse("researcher")?, child_session.clone())?;
            let b = two.isolated_child(AgentId::parse("researcher")?, child_session.clone())?;
            assert_eq!(
                a.namespace(),
                &one.namespace()
                    .join_path(&WsPath::parse("agents/main/subagents/researcher/s1").unwrap_or_default())
            );
            assert_ne!(a.namespace(), b.namespace(), "{kind:?}");
            assert!(!a.is_shared_namespace());
            assert_eq!((a.user(), a.agent().as_str()), (one.user(), "researcher"));
            assert_eq!(a.state_key().user_id, one.state_key().user_id);
            assert_eq!(
                state_layout()(&a.state_key()).to_string_lossy(),
                a.state_dir().as_str(),
                "the child's state sits where the store puts it"
            );
        }
        Ok(())
    }

    #[test]
    fn unsafe_and_reserved_ids_are_refused() {
        assert!(matches!(
            scope(IsolationScope::User, "../x", "s"),
            Err(ScopeError::Id(_))
        ));
        assert!(matches!(
            scope(IsolationScope::User, "Knowledge", "s"),
            Err(ScopeError::Reserved { kind: "user", .. })
        ));
        assert!(matches!(
            scope(IsolationScope::Session, "alice", "memory"),
            Err(ScopeError::Reserved { kind: "session", .. })
        ));
        // A reserved session id is fine when the session does not name the namespace.
        assert!(scope(IsolationScope::User, "alice", "memory").is_ok());
        // Hidden names (`..hidden`) are refused by the id rule, like `.` and `..`.
        for bad in ["..hidden", "..", "", "a/b", "a\nb"] {
            assert!(
                matches!(scope(IsolationScope::Session, "alice", bad), Err(ScopeError::Id(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn paths_for_later_issues() -> Result<(), ScopeError> {
        let call = scope(IsolationScope::User, "alice", "v1.2")?;
        assert_eq!(call.task_records_path().as_str(), "agents/main/tasks/v1.2.json");
        assert_eq!(call.transcript_path().as_str(), "agents/main/sessions/v1.2.log.jsonl");
        assert_eq!(call.session_index_path().as_str(), "agents/main/sessions/sessions.json");
        assert_eq!(call.sessions_dir().as_str(), "agents/main/sessions");
        assert_eq!(call.compacted_dir().as_str(), "agents/main/compacted/v1.2");
        assert_eq!(call.large_tool_results_dir().as_str(), "large_tool_results/main");
        let custom = WsPath::parse("out/big").unwrap_or_default();
        assert_eq!(call.evicted_dir(&custom).as_str(), "out/big/main");
        assert_eq!(
            call.memory_extraction_path().as_str(),
            "memory/.extraction/main/v1.2.json"
        );
        let other = call.with_session(SessionId::from_static("s2"))?;
        assert_eq!((other.user(), other.session().as_str()), (call.user(), "s2"));
        assert_eq!(other.namespace(), call.namespace());
        Ok(())
    }
}
