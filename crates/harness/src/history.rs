//! Reading sessions without an agent: list, show (history) and search over a workspace's
//! transcripts. No model is needed and nothing is written, so `harness sessions list|show`
//! and servers can inspect sessions cheaply.
//!
//! A listing merges `sessions.json` with the transcripts on disk: the index is written
//! behind (see [`session`](crate::session)), so a session whose process died during its
//! first turn has a transcript but no index entry — it is still listed, its summary taken
//! from the transcript.

use crate::config::{ConfigError, HarnessConfig};
use crate::session::{SessionSummary, parse_transcript, read_index, read_transcript};
use harness_core::{AgentId, AgentState, Msg, Role, SessionId, StateStore, UserId};
use harness_fs::{CallScope, Filesystem, FsError, IsolationScope, ScopeError, WsPath};
use std::path::Path;
use std::sync::Arc;

/// Why sessions could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HistoryError {
    /// A user or session id is not a safe path segment, or names a reserved directory.
    #[error("invalid id")]
    Id(#[source] ScopeError),
    /// The workspace could not be read.
    #[error("cannot read the sessions")]
    Read(#[source] FsError),
    /// The session's saved state could not be read.
    #[error("cannot read the session's state")]
    State(#[source] harness_core::StateError),
}

/// One session in a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionListing {
    /// The session id.
    pub id: String,
    /// Summary, times and message count.
    pub summary: SessionSummary,
    /// Whether the entry came from the transcript alone (the index never recorded it, e.g.
    /// the process died during the session's first turn).
    pub unindexed: bool,
}

/// One message that matched a search.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionHit {
    /// The session.
    pub session: String,
    /// The message's position in the transcript (1-based).
    pub line: usize,
    /// Who wrote it.
    pub role: Role,
    /// The text around the first match.
    pub snippet: String,
    /// How many of the query's words the message contains.
    pub matched_terms: usize,
}

/// Reads the sessions of one agent in one workspace.
#[derive(Clone)]
pub struct SessionReader {
    fs: Arc<dyn Filesystem>,
    isolation: IsolationScope,
    agent: AgentId,
    state: Option<Arc<dyn StateStore>>,
    /// The local workspace directory when `fs` is not the local disk (its shared files show
    /// through, as for the agent).
    template: Option<Arc<dyn Filesystem>>,
    /// `[memory]` and where its index lives, when [`open`](Self::open) read a workspace.
    memory: Option<(harness_memory::MemoryConfig, std::path::PathBuf)>,
}

impl std::fmt::Debug for SessionReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionReader")
            .field("fs", &self.fs.describe())
            .field("agent", &self.agent)
            .finish_non_exhaustive()
    }
}

impl SessionReader {
    /// A reader over `fs` for agent `agent` with the given isolation.
    pub fn new(fs: Arc<dyn Filesystem>, isolation: IsolationScope, agent: AgentId) -> Self {
        Self {
            fs,
            isolation,
            agent,
            state: None,
            template: None,
            memory: None,
        }
    }

    /// Reads sessions' saved state (task list, plan mode) from `store`.
    #[must_use]
    pub fn with_state_store(mut self, store: Arc<dyn StateStore>) -> Self {
        self.state = Some(store);
        self
    }

    /// A reader for the workspace at `dir` as its harness.toml describes it (`[filesystem]`,
    /// `[agent] name` unless `name` overrides it, `[agent] isolation`). Creates nothing.
    ///
    /// # Errors
    /// [`ConfigError`] for an invalid file, name or filesystem.
    pub async fn open(dir: &Path, name: Option<&str>) -> Result<Self, ConfigError> {
        let config = HarnessConfig::load_agent_sections(dir)?;
        let path = dir.join(crate::config::CONFIG_FILE);
        let name = name
            .map(str::to_owned)
            .or_else(|| config.agent.name.clone())
            .unwrap_or_else(|| crate::config::DEFAULT_AGENT_NAME.to_owned());
        let agent = AgentId::parse(name.as_str()).map_err(|err| ConfigError::Value {
            path: path.clone(),
            section: "agent",
            message: format!("name: {err}"),
        })?;
        let fs: Arc<dyn Filesystem> = match &config.filesystem {
            Some(fs_config) => crate::filesystem::open(fs_config, dir, &name)
                .await
                .map_err(|source| ConfigError::Filesystem { path, source })?,
            None => Arc::new(
                harness_fs::LocalFs::new(dir)
                    .map_err(|source| ConfigError::Filesystem {
                        path,
                        source: crate::filesystem::FilesystemError::Local(source),
                    })?
                    .fsync(false),
            ),
        };
        let scope = config.agent.isolation.unwrap_or_default();
        // The state lives where the agent keeps it: `[state]`, else JSON files in the
        // workspace (opening the store creates nothing).
        let backend = match &config.state {
            Some(state) => crate::state::open(state).await.map_err(|source| ConfigError::State {
                path: dir.join(crate::config::CONFIG_FILE),
                source,
            })?,
            None => None,
        };
        let store: Arc<dyn StateStore> = match backend {
            Some(backend) => backend.store,
            None => Arc::new(harness_store::FileStateStore::with_layout(
                dir.to_owned(),
                harness_fs::state_layout(),
            )),
        };
        let template = match config.filesystem {
            Some(_) => harness_fs::LocalFs::new(dir)
                .ok()
                .map(|fs| Arc::new(fs) as Arc<dyn Filesystem>),
            None => None,
        };
        let memory = config.memory.unwrap_or_default();
        let index = memory
            .index
            .dir
            .clone()
            .unwrap_or_else(|| dir.join(".harness").join("index"));
        Ok(Self {
            template,
            memory: Some((memory, index)),
            ..Self::new(fs, scope, agent).with_state_store(store)
        })
    }

    /// The files of `user`'s calls (of `session` under session isolation; the default
    /// session when `None`) as a bound call of the agent sees them, with the call's scope.
    ///
    /// # Errors
    /// [`HistoryError::Id`] for an unsafe id.
    pub fn call_files(
        &self,
        user: &UserId,
        session: Option<&SessionId>,
    ) -> Result<(CallScope, harness_fs::CallWorkspace), HistoryError> {
        let session = session.cloned().unwrap_or(harness_core::DEFAULT_SESSION_ID);
        let scope =
            CallScope::new(self.isolation, self.agent.clone(), user.clone(), session).map_err(HistoryError::Id)?;
        let files = harness_fs::CallWorkspace::new(&self.fs, &scope, self.template.as_ref());
        Ok((scope, files))
    }

    /// The workspace's memory for searching and reviewing, as `[memory]` configures it (no
    /// model: extraction and consolidation fail, see [`harness_memory::Memory::for_search`]).
    /// `None` when memory is disabled or the reader was not [opened](Self::open) on a
    /// workspace.
    pub fn memory(&self) -> Option<harness_memory::Memory> {
        let (config, index) = self.memory.as_ref().filter(|(config, _)| config.enabled)?;
        Some(harness_memory::Memory::for_search(config.clone(), index.clone()))
    }

    /// The saved state of `user`'s `session`, its `messages` the whole context (the inline
    /// part and the transcript's tail, see `harness::session`): `None` when the session has
    /// none or the reader has no state store.
    ///
    /// # Errors
    /// [`HistoryError`] for an unsafe id or a store (or transcript) that cannot be read.
    pub async fn state(&self, user: &UserId, session: &SessionId) -> Result<Option<AgentState>, HistoryError> {
        let Some(store) = &self.state else {
            return Ok(None);
        };
        let scope = CallScope::new(self.isolation, self.agent.clone(), user.clone(), session.clone())
            .map_err(HistoryError::Id)?;
        let loaded = store.load(&scope.state_key()).await.map_err(HistoryError::State)?;
        let Some((mut state, _version)) = loaded else {
            return Ok(None);
        };
        let slot = harness_core::SessionState::from_extensions(&state.extensions)
            .get::<crate::session::TranscriptTail>()
            .unwrap_or_default();
        if slot.format == crate::session::TAIL_FORMAT {
            let fs = self.user_fs(user, Some(session))?;
            let bytes = match fs.read(&scope.transcript_path()).await {
                Ok(bytes) => bytes,
                Err(FsError::NotFound { .. }) => Vec::new(),
                Err(err) => return Err(HistoryError::Read(err)),
            };
            let tail = crate::session::tail::parse_range(&bytes, slot.from, state.transcript_offset);
            crate::session::tail::append_tail(&mut state.messages, tail);
        }
        Ok(Some(state))
    }

    /// The filesystem of `user`'s namespace (for `session` under session isolation).
    fn user_fs(&self, user: &UserId, session: Option<&SessionId>) -> Result<Arc<dyn Filesystem>, HistoryError> {
        let session = session.cloned().unwrap_or(harness_core::DEFAULT_SESSION_ID);
        let scope =
            CallScope::new(self.isolation, self.agent.clone(), user.clone(), session).map_err(HistoryError::Id)?;
        let prefix = scope.namespace().clone();
        Ok(if prefix.is_root() {
            Arc::clone(&self.fs)
        } else {
            Arc::new(harness_fs::Namespaced::new(Arc::clone(&self.fs), prefix))
        })
    }

    /// The sessions of `user`, by id: the index merged with the transcripts on disk. Under
    /// session isolation every session has its own namespace, so each one is visited.
    ///
    /// # Errors
    /// [`HistoryError`] for an unsafe id or an unreadable directory.
    pub async fn list(&self, user: &UserId) -> Result<Vec<SessionListing>, HistoryError> {
        let mut listing = std::collections::BTreeMap::new();
        if self.isolation == IsolationScope::Session {
            let top = match self.fs.list(&WsPath::root()).await {
                Ok(entries) => entries,
                Err(FsError::NotFound { .. }) => Vec::new(),
                Err(err) => return Err(HistoryError::Read(err)),
            };
            for dir in top.into_iter().filter(|entry| entry.is_dir) {
                let Ok(session) = SessionId::parse(dir.path.as_str()) else {
                    continue;
                };
                let Ok(fs) = self.user_fs(user, Some(&session)) else {
                    continue; // a reserved name (knowledge/, memory/ …), not a session
                };
                self.list_in(fs.as_ref(), &mut listing).await?;
            }
        } else {
            let fs = self.user_fs(user, None)?;
            self.list_in(fs.as_ref(), &mut listing).await?;
        }
        Ok(listing.into_values().collect())
    }

    /// Adds the sessions of one namespace to `listing`.
    async fn list_in(
        &self,
        fs: &dyn Filesystem,
        listing: &mut std::collections::BTreeMap<String, SessionListing>,
    ) -> Result<(), HistoryError> {
        let index = read_index(fs, self.agent.as_str()).await;
        for (id, summary) in index.sessions {
            let entry = SessionListing {
                id: id.clone(),
                summary,
                unindexed: false,
            };
            listing.insert(id, entry);
        }
        let dir = WsPath::parse(&format!("agents/{}/sessions", self.agent)).map_err(HistoryError::Read)?;
        let files = match fs.list(&dir).await {
            Ok(files) => files,
            Err(FsError::NotFound { .. }) => Vec::new(),
            Err(err) => return Err(HistoryError::Read(err)),
        };
        for file in files.into_iter().filter(|f| !f.is_dir) {
            let Some(id) = file
                .path
                .as_str()
                .rsplit('/')
                .next()
                .and_then(|n| n.strip_suffix(".log.jsonl"))
            else {
                continue;
            };
            if listing.contains_key(id) {
                continue;
            }
            let bytes = match fs.read(&file.path).await {
                Ok(bytes) => bytes,
                Err(FsError::NotFound { .. }) => continue,
                Err(err) => return Err(HistoryError::Read(err)),
            };
            let messages = parse_transcript(&bytes).0;
            let when = file.modified.unwrap_or_else(jiff::Timestamp::now);
            let summary = messages
                .iter()
                .find(|m| m.role == Role::User)
                .map(|m| harness_core::excerpt(&m.text().replace('\n', " "), 120))
                .unwrap_or_default();
            listing.insert(
                id.to_owned(),
                SessionListing {
                    id: id.to_owned(),
                    summary: SessionSummary {
                        summary,
                        created: when,
                        updated: when,
                        message_count: messages.len() as u64,
                    },
                    unindexed: true,
                },
            );
        }
        Ok(())
    }

    /// The transcript of `user`'s `session` (empty when there is none).
    ///
    /// # Errors
    /// [`HistoryError`] for an unsafe id or an unreadable transcript.
    pub async fn history(&self, user: &UserId, session: &SessionId) -> Result<Vec<Msg>, HistoryError> {
        let fs = self.user_fs(user, Some(session))?;
        read_transcript(fs.as_ref(), self.agent.as_str(), session.as_str())
            .await
            .map_err(HistoryError::Read)
    }

    /// Messages of `user`'s sessions containing any word of `query` (case-insensitive), the
    /// messages with the most words first, then the most recent sessions; at most `limit`.
    ///
    /// # Errors
    /// As [`list`](Self::list).
    pub async fn search(&self, user: &UserId, query: &str, limit: usize) -> Result<Vec<SessionHit>, HistoryError> {
        let terms: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
        if terms.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let mut sessions = self.list(user).await?;
        sessions.sort_by_key(|s| std::cmp::Reverse(s.summary.updated));
        let mut hits = Vec::new();
        for (rank, listing) in sessions.iter().enumerate() {
            let Ok(session) = SessionId::parse(listing.id.as_str()) else {
                continue;
            };
            let messages = self.history(user, &session).await?;
            for (at, msg) in messages.iter().enumerate() {
                let text = msg.text();
                let lower = text.to_lowercase();
                let matched = terms.iter().filter(|t| lower.contains(t.as_str())).count();
                if matched == 0 {
                    continue;
                }
                hits.push((
                    matched,
                    rank,
                    SessionHit {
                        session: listing.id.clone(),
                        line: at + 1,
                        role: msg.role,
                        snippet: snippet(&text, &lower, &terms),
                        matched_terms: matched,
                    },
                ));
            }
        }
        hits.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.line.cmp(&b.2.line)));
        Ok(hits.into_iter().take(limit).map(|(_, _, hit)| hit).collect())
    }
}

/// Up to ~160 characters of `text` around the first term found (on one line).
fn snippet(text: &str, lower: &str, terms: &[String]) -> String {
    let at = terms.iter().filter_map(|t| lower.find(t.as_str())).min().unwrap_or(0);
    // `lower` may differ in length from `text` for some scripts: map by characters.
    let chars_before = lower[..at].chars().count();
    let start = chars_before.saturating_sub(60);
    let piece: String = text.chars().skip(start).take(160).collect();
    let mut out = piece.replace('\n', " ");
    if start > 0 {
        out.insert(0, '…');
    }
    if text.chars().count() > start + 160 {
        out.push('…');
    }
    out
}
