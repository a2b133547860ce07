//! Durable sessions: the append-only transcript, the session index and crash replay. (Turns
//! of one session are serialised by the agent's `SessionLease`.)
//!
//! Files, in the caller's namespace (paths from the call's [`CallScope`]):
//!
//! ```text
//! agents/<agentId>/sessions/<sessionId>.log.jsonl   one Msg per line, append-only, never rewritten
//! agents/<agentId>/sessions/sessions.json           {"v":1,"sessions":{"<id>":{summary,created,updated,message_count}}}
//! ```
//!
//! The transcript is written as the call goes (the input before the first model call, then
//! after each model call, tool results travelling with the next answer), so a process that
//! dies mid-turn leaves the user's message and every tool call on disk before the tool runs. The agent state records
//! how many transcript bytes it contains (`transcript_offset`); on the next call, anything
//! past that offset is replayed into the state and a tool call left without a result gets a
//! synthetic "interrupted" result. A call whose one user message repeats the last user
//! message of a turn that never reached a final answer (the caller retrying after a failure)
//! continues that turn instead of adding the message twice.
//!
//! The agent state itself is saved by the kernel's `StateStore` at the end of every call,
//! without the messages the transcript already holds: the context is the state's inline
//! messages followed by the transcript's bytes from the [`TranscriptTail`] slot's offset to
//! `transcript_offset` (layout 2; states without the slot load as they are, see the `tail` module).
//! So each message is serialised once, and a turn that only appends writes the new
//! messages to the transcript and a few bytes of state. The context is attached when this
//! layer's `agent` hook starts and detached when it returns: inner layers see it whole, a
//! user middleware (outermost) sees only the inline part after its `next` returned.

use harness_core::{
    AgentError, AgentNext, Hooks, Middleware, Msg, ReasoningNext, Role, Turn, async_trait, repair_tool_pairs_except,
};
use harness_fs::{CallScope, CallWorkspace, Filesystem, FsError, WriteMode, WsPath};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

pub(crate) mod tail;

use tail::{Attached, CachedTail, TailCache};
pub use tail::{TAIL_FORMAT, TranscriptTail};

/// The transcript of a session, relative to the caller's namespace.
///
/// # Errors
/// [`FsError::InvalidPath`] for unsafe ids (ids are checked before they reach here).
pub fn transcript_path(agent: &str, session: &str) -> Result<WsPath, FsError> {
    WsPath::parse(&format!("agents/{agent}/sessions/{session}.log.jsonl"))
}

/// The session index of an agent, relative to the caller's namespace.
///
/// # Errors
/// [`FsError::InvalidPath`] for an unsafe agent id.
pub fn index_path(agent: &str) -> Result<WsPath, FsError> {
    WsPath::parse(&format!("agents/{agent}/sessions/sessions.json"))
}

/// One entry of `sessions.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSummary {
    /// The first user message, cut to 120 characters.
    pub summary: String,
    /// When the session started.
    pub created: jiff::Timestamp,
    /// When it last changed.
    pub updated: jiff::Timestamp,
    /// Messages in its transcript.
    pub message_count: u64,
}

/// `sessions.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionIndex {
    /// Format version.
    #[serde(default = "one")]
    pub v: u32,
    /// Sessions by id.
    #[serde(default)]
    pub sessions: BTreeMap<String, SessionSummary>,
}

fn one() -> u32 {
    1
}

/// Reads every complete record of a transcript. A torn or corrupt line is skipped (with a
/// count) instead of failing the read.
pub fn parse_transcript(bytes: &[u8]) -> (Vec<Msg>, usize) {
    let mut messages = Vec::new();
    let mut skipped = 0;
    for line in bytes.split(|b| *b == b'\n') {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Msg>(line) {
            Ok(msg) => messages.push(msg),
            Err(_) => skipped += 1,
        }
    }
    (messages, skipped)
}

/// Reads a session's transcript from `fs` (missing = empty).
///
/// # Errors
/// [`FsError`] other than not-found.
pub async fn read_transcript(fs: &dyn Filesystem, agent: &str, session: &str) -> Result<Vec<Msg>, FsError> {
    match fs.read(&transcript_path(agent, session)?).await {
        Ok(bytes) => Ok(parse_transcript(&bytes).0),
        Err(FsError::NotFound { .. }) => Ok(Vec::new()),
        Err(err) => Err(err),
    }
}

/// Reads an agent's session index (missing or corrupt = empty; corrupt is logged, and the
/// next update keeps the corrupt file aside instead of silently dropping it).
pub async fn read_index(fs: &dyn Filesystem, agent: &str) -> SessionIndex {
    let Ok(path) = index_path(agent) else {
        return SessionIndex::default();
    };
    match fs.read(&path).await {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|err| {
            tracing::warn!(error = %err, "sessions.json is corrupt; treating it as empty");
            SessionIndex::default()
        }),
        Err(_) => SessionIndex::default(),
    }
}

fn call_scope(turn: &Turn) -> Result<&CallScope, AgentError> {
    turn.ctx()
        .get::<CallScope>()
        .ok_or_else(|| session_error("the call has no scope bound"))
}

fn session_error(err: impl Into<harness_core::BoxError>) -> AgentError {
    AgentError::Capability {
        capability: "session_persistence",
        source: err.into(),
    }
}

/// How long index updates are gathered in memory before one write of `sessions.json`.
pub const INDEX_FLUSH_INTERVAL: std::time::Duration = std::time::Duration::from_millis(250);

/// The `session_persistence` middleware: replays a crashed turn, writes the transcript as
/// the call goes, and records the session in the index at the end (also after a failure).
///
/// # The session index is written behind
///
/// `sessions.json` is a listing (summary, times, message counts), not the conversation: the
/// transcript and the agent state are the record, and they are on disk before a call
/// returns. Index updates are therefore gathered in memory per index file and written by
/// one background task at most every [`INDEX_FLUSH_INTERVAL`] (one read + one
/// compare-and-set write for every session that changed, however many turns ran), and on
/// [`flush_index`](Self::flush_index) / `HarnessAgent::shutdown`. The write is still a
/// compare-and-set, so entries written by other processes are never lost. The trade: a
/// process that dies without a shutdown can leave up to one interval of index updates
/// unwritten (a missing entry or a low `message_count`); the transcripts are complete.
///
/// A fenced call (a lease with fencing tokens, as with `[state] kind = "redis"` or
/// `"postgres"`: several replicas) instead writes its index entry before it returns, while
/// it holds the lease, through its fenced layer — a stale replica cannot write the index.
#[derive(Debug, Default)]
pub struct SessionPersistence {
    index: Arc<IndexWriter>,
    tails: TailCache,
}

/// Pending index updates and the task that writes them.
#[derive(Default)]
struct IndexWriter {
    pending: Mutex<PendingIndexes>,
    /// One flush at a time in this process (CAS covers other processes).
    flushing: tokio::sync::Mutex<()>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for IndexWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("IndexWriter")
            .field("pending_files", &pending.files.len())
            .field("scheduled", &pending.scheduled)
            .finish()
    }
}

#[derive(Default)]
struct PendingIndexes {
    /// By `<fs description>|<index path>`.
    files: HashMap<String, PendingIndex>,
    /// Whether the background task is running (it exits when it finds nothing to write).
    scheduled: bool,
}

struct PendingIndex {
    fs: Arc<dyn Filesystem>,
    path: WsPath,
    sessions: HashMap<String, PendingEntry>,
}

#[derive(Clone)]
struct PendingEntry {
    summary: String,
    first_seen: jiff::Timestamp,
    updated: jiff::Timestamp,
    new_messages: u64,
}

impl PendingEntry {
    fn merge(&mut self, later: PendingEntry) {
        if self.summary.is_empty() {
            self.summary = later.summary;
        }
        self.first_seen = self.first_seen.min(later.first_seen);
        self.updated = self.updated.max(later.updated);
        self.new_messages += later.new_messages;
    }
}

impl PendingIndexes {
    fn merge(&mut self, key: String, file: PendingIndex) {
        match self.files.entry(key) {
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(file);
            }
            std::collections::hash_map::Entry::Occupied(mut slot) => {
                let into = slot.get_mut();
                for (session, entry) in file.sessions {
                    match into.sessions.entry(session) {
                        std::collections::hash_map::Entry::Vacant(s) => {
                            s.insert(entry);
                        }
                        std::collections::hash_map::Entry::Occupied(mut s) => s.get_mut().merge(entry),
                    }
                }
            }
        }
    }
}

impl IndexWriter {
    /// Queues one call's update and makes sure the background task runs.
    fn record(self: &Arc<Self>, fs: Arc<dyn Filesystem>, path: WsPath, session: String, entry: PendingEntry) {
        let key = format!("{}|{}", fs.describe(), path);
        let mut sessions = HashMap::with_capacity(1);
        sessions.insert(session, entry);
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        pending.merge(key, PendingIndex { fs, path, sessions });
        if pending.scheduled {
            return;
        }
        pending.scheduled = true;
        drop(pending);
        let writer = Arc::clone(self);
        let handle = tokio::spawn(async move { writer.run().await });
        // The handle is kept so the task has an owner; it ends by itself when idle.
        *self.task.lock().unwrap_or_else(PoisonError::into_inner) = Some(handle);
    }

    /// The background task: writes what was gathered every interval, exits when idle.
    async fn run(self: Arc<Self>) {
        loop {
            tokio::time::sleep(INDEX_FLUSH_INTERVAL).await;
            let _one = self.flushing.lock().await;
            let files = {
                let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
                if pending.files.is_empty() {
                    pending.scheduled = false;
                    return;
                }
                std::mem::take(&mut pending.files)
            };
            if let Err(err) = self.write_all(files).await {
                tracing::warn!(error = %err, "session index update failed; will retry");
            }
        }
    }

    /// Writes everything queued so far.
    async fn flush(&self) -> Result<(), AgentError> {
        let _one = self.flushing.lock().await;
        let files = std::mem::take(&mut self.pending.lock().unwrap_or_else(PoisonError::into_inner).files);
        self.write_all(files).await
    }

    /// Writes each index file; anything that failed goes back into the queue.
    async fn write_all(&self, files: HashMap<String, PendingIndex>) -> Result<(), AgentError> {
        let mut first_error = None;
        for (key, file) in files {
            if let Err(err) = write_index(&file).await {
                first_error.get_or_insert(err);
                self.pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .merge(key, file);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// One compare-and-set update of an index file with every pending entry.
async fn write_index(file: &PendingIndex) -> Result<(), AgentError> {
    let (fs, path) = (&file.fs, &file.path);
    for _attempt in 0..8 {
        let now = jiff::Timestamp::now();
        let (mut index, mode) = match fs.read_versioned(path).await {
            Ok((bytes, version)) => match serde_json::from_slice::<SessionIndex>(&bytes) {
                Ok(index) => (index, WriteMode::IfMatch(version)),
                Err(err) => {
                    // Never drop other sessions' entries silently: keep the bad file aside.
                    let aside = WsPath::parse(&format!("{path}.corrupt-{}", now.as_second())).map_err(session_error)?;
                    let _ = fs.write(&aside, &bytes, WriteMode::Overwrite).await;
                    tracing::warn!(error = %err, kept = %aside, "sessions.json was corrupt; rebuilt it");
                    (SessionIndex::default(), WriteMode::IfMatch(version))
                }
            },
            Err(FsError::NotFound { .. }) => (SessionIndex::default(), WriteMode::CreateNew),
            Err(err) => return Err(session_error(err)),
        };
        for (session, pending) in &file.sessions {
            let entry = index.sessions.entry(session.clone()).or_insert_with(|| SessionSummary {
                summary: pending.summary.clone(),
                created: pending.first_seen,
                updated: pending.updated,
                message_count: 0,
            });
            if entry.summary.is_empty() {
                entry.summary.clone_from(&pending.summary);
            }
            entry.updated = entry.updated.max(pending.updated);
            entry.message_count += pending.new_messages;
        }
        let bytes = serde_json::to_vec_pretty(&index).map_err(session_error)?;
        match fs.write(path, &bytes, mode).await {
            Ok(()) => return Ok(()),
            Err(FsError::Conflict { .. } | FsError::AlreadyExists { .. }) => continue,
            Err(err) => return Err(session_error(err)),
        }
    }
    Err(session_error(
        "sessions.json kept changing under concurrent writers; gave up after 8 attempts",
    ))
}

impl SessionPersistence {
    /// Writes every queued session-index update now (see the type's docs). Call it before
    /// reading `sessions.json` in the same process; `HarnessAgent::shutdown` calls it.
    ///
    /// # Errors
    /// [`AgentError::Capability`] when an index file cannot be read or written; the
    /// updates stay queued.
    pub async fn flush_index(&self) -> Result<(), AgentError> {
        self.index.flush().await
    }

    async fn flush(&self, turn: &mut Turn) -> Result<(), AgentError> {
        if turn.persisted() >= turn.appended().len() {
            return Ok(());
        }
        let call = turn
            .ctx()
            .get::<CallWorkspace>()
            .ok_or_else(|| session_error("the call has no workspace bound"))?;
        let mut lines = Vec::with_capacity(256 * (turn.appended().len() - turn.persisted()));
        for msg in &turn.appended()[turn.persisted()..] {
            serde_json::to_writer(&mut lines, msg.as_ref()).map_err(session_error)?;
            lines.push(b'\n');
        }
        let path = call_scope(turn)?.transcript_path();
        call.user.append(&path, &lines).await.map_err(session_error)?;
        turn.state_mut().transcript_offset += lines.len() as u64;
        turn.mark_persisted(turn.appended().len());
        Ok(())
    }

    /// Attaches the context's transcript tail (layout 2, see the `tail` module) and brings the state
    /// up to date with the transcript after a crash.
    async fn replay(&self, turn: &mut Turn) -> Result<Attached, AgentError> {
        let call = turn
            .ctx()
            .get::<CallWorkspace>()
            .cloned()
            .ok_or_else(|| session_error("the call has no workspace bound"))?;
        let path = call_scope(turn)?.transcript_path();
        let key = format!("{}|{path}", call.user.describe());
        let slot = turn.session().get::<TranscriptTail>().unwrap_or_default();
        let offset = turn.state().transcript_offset;
        let inline = turn.state().messages.len();
        let size = match call.user.stat(&path).await {
            Ok(info) => info.size,
            Err(FsError::NotFound { .. }) => 0,
            Err(err) => return Err(session_error(err)),
        };
        let mut bytes = None;
        let mut rewritten = false;
        let from = if slot.format == TAIL_FORMAT && slot.from <= offset && offset <= size {
            let cached = self.tails.get(&key, slot.from, offset);
            let (mut tail, parsed_to) = match cached {
                Some(cached) => (cached.messages, cached.end),
                None => (Vec::new(), slot.from),
            };
            if parsed_to < offset {
                let read = call.user.read(&path).await.map_err(session_error)?;
                tail.extend(tail::parse_range(&read, parsed_to, offset));
                bytes = Some(read);
            }
            rewritten |= tail::append_tail(&mut turn.state_mut().messages, tail);
            slot.from
        } else {
            if slot.format == TAIL_FORMAT {
                tracing::warn!(
                    from = slot.from,
                    offset,
                    size,
                    "transcript tail out of range; the context keeps its inline part"
                );
            }
            offset
        };
        if size != offset {
            rewritten = true;
            self.tails.forget(&key);
            let bytes = match bytes {
                Some(bytes) => bytes,
                None => call.user.read(&path).await.map_err(session_error)?,
            };
            self.repair(turn, &call, &path, &bytes).await?;
        } else if slot.format == TAIL_FORMAT {
            // The kernel repaired the inline part on load; the tail is checked here (a call
            // that failed before its tools ran left a call without a result).
            let waiting = waiting_ids(turn);
            let waiting: Vec<&str> = waiting.iter().map(String::as_str).collect();
            let repaired = repair_tool_pairs_except(&mut turn.state_mut().messages, &waiting);
            if repaired > 0 {
                tracing::warn!(repairs = repaired, "repaired tool calls left without results");
                rewritten = true;
            }
        }
        Ok(Attached {
            context: turn.state().messages.clone(),
            inline,
            from,
            rewritten,
        })
    }

    /// Replays what the transcript holds past the state's offset (a crashed turn).
    async fn repair(
        &self,
        turn: &mut Turn,
        call: &CallWorkspace,
        path: &WsPath,
        bytes: &[u8],
    ) -> Result<(), AgentError> {
        let offset = usize::try_from(turn.state().transcript_offset).unwrap_or(usize::MAX);
        if bytes.len() < offset {
            // The transcript is shorter than the state believes (restored from an older
            // copy?): keep the state, resynchronise the offset.
            tracing::warn!(size = bytes.len(), offset, "transcript shorter than the state's offset");
            turn.state_mut().transcript_offset = bytes.len() as u64;
            return Ok(());
        }
        let (missing, torn) = parse_transcript(&bytes[offset..]);
        let known: std::collections::HashSet<&str> = turn.state().messages.iter().map(|m| m.id.as_str()).collect();
        let missing: Vec<Msg> = missing.into_iter().filter(|m| !known.contains(m.id.as_str())).collect();
        let mut repaired = missing.len();
        for msg in missing {
            turn.state_mut().messages.push(Arc::new(msg));
        }
        let waiting = waiting_ids(turn);
        let waiting: Vec<&str> = waiting.iter().map(String::as_str).collect();
        repaired += repair_tool_pairs_except(&mut turn.state_mut().messages, &waiting);
        // A torn last line: end it so the next record starts on a line of its own.
        let mut end = bytes.len() as u64;
        if bytes.last().is_some_and(|b| *b != b'\n') {
            call.user.append(path, b"\n").await.map_err(session_error)?;
            end += 1;
        }
        turn.state_mut().transcript_offset = end;
        tracing::warn!(
            replayed = repaired,
            torn,
            "session repaired from its transcript after an interrupted turn"
        );
        Ok(())
    }

    /// Leaves only the context's inline part in the state, to be saved, and remembers the
    /// tail (see the `tail` module).
    fn detach(&self, turn: &mut Turn, attached: &Attached) -> Result<(), AgentError> {
        let end = turn.state().transcript_offset;
        let (inline, from) = attached.split(&turn.state().messages, turn.appended(), turn.persisted(), end);
        let call = turn
            .ctx()
            .get::<CallWorkspace>()
            .ok_or_else(|| session_error("the call has no workspace bound"))?;
        let key = format!("{}|{}", call.user.describe(), call_scope(turn)?.transcript_path());
        let messages = turn.state_mut().messages.split_off(inline);
        self.tails.put(key, CachedTail { from, end, messages });
        turn.session()
            .update::<TranscriptTail, _>(|slot| {
                *slot = TranscriptTail {
                    format: TAIL_FORMAT,
                    from,
                }
            })
            .map_err(session_error)
    }

    /// This call's update of the session index. A fenced call (a lease with fencing tokens:
    /// several replicas share the store) writes it now, while its lease is held, through its
    /// fenced layer: a replica whose lease passed to another holder cannot touch the index.
    /// An unfenced call (one host, where the lease is a lock file or in-process) queues it
    /// for the write-behind, merged by compare-and-set.
    async fn record_index(&self, turn: &Turn) -> Result<(), AgentError> {
        let call = turn
            .ctx()
            .get::<CallWorkspace>()
            .ok_or_else(|| session_error("the call has no workspace bound"))?;
        let path = call_scope(turn)?.session_index_path();
        let now = jiff::Timestamp::now();
        let summary = turn
            .state()
            .messages
            .iter()
            .chain(turn.appended().iter())
            .find(|m| m.role == Role::User)
            .map(|m| harness_core::excerpt(&m.text().replace('\n', " "), 120))
            .unwrap_or_default();
        let entry = PendingEntry {
            summary,
            first_seen: now,
            updated: now,
            new_messages: turn.appended().len() as u64,
        };
        let session = turn.key().session_id.to_string();
        if !Arc::ptr_eq(&call.user, &call.unfenced) {
            let mut sessions = HashMap::with_capacity(1);
            sessions.insert(session, entry);
            return write_index(&PendingIndex {
                fs: Arc::clone(&call.user),
                path,
                sessions,
            })
            .await;
        }
        self.index.record(Arc::clone(&call.user), path, session, entry);
        Ok(())
    }
}

#[async_trait]
impl Middleware for SessionPersistence {
    fn name(&self) -> &'static str {
        "session_persistence"
    }

    fn hooks(&self) -> Hooks {
        Hooks::AGENT | Hooks::REASONING
    }

    async fn agent(&self, turn: &mut Turn, next: AgentNext<'_>) -> Result<(), AgentError> {
        let attached = self.replay(turn).await?;
        if is_retry_of_unfinished_turn(turn) {
            // The same message again after a failed turn: continue that turn instead of
            // adding the user's message twice.
            tracing::info!("the message repeats an unfinished turn's; continuing that turn");
            turn.discard_input();
        }
        let result = next.run(turn).await;
        // Write what the call produced even when it failed: the user's message and every
        // finished tool result are kept.
        let flushed = self.flush(turn).await;
        let indexed = if turn.appended().is_empty() {
            Ok(())
        } else {
            self.record_index(turn).await
        };
        // Only what the transcript lacks is saved in the state (a failed write keeps it
        // all inline).
        let detached = if flushed.is_ok() {
            self.detach(turn, &attached)
        } else {
            Ok(())
        };
        result?;
        flushed?;
        indexed?;
        detached
    }

    async fn reasoning(&self, turn: &mut Turn, next: ReasoningNext<'_>) -> Result<(), AgentError> {
        // The call's input goes to disk before the first model call. Later steps only have
        // tool results pending here: they travel with the model's next answer (one append
        // per step instead of two). A tool call is always on disk before its tool runs; a
        // process killed during the next model call loses the finished tool results, and the
        // replay gives their calls an "interrupted" result. A failed model call still writes
        // them (the agent hook flushes on every exit).
        if turn.persisted() == 0 {
            self.flush(turn).await?;
        }
        let result = next.run(turn).await;
        self.flush(turn).await?;
        result
    }
}

/// Calls waiting for a person's approval: they get their result when they are decided.
fn waiting_ids(turn: &Turn) -> Vec<String> {
    turn.session()
        .get::<harness_core::PendingApproval>()
        .map(|pending| pending.waiting_ids())
        .unwrap_or_default()
}

/// Whether this call's input is one user message equal to the last user message of the
/// session, and the turn that message started never ended with a final answer (an
/// assistant message without tool calls).
fn is_retry_of_unfinished_turn(turn: &Turn) -> bool {
    let [input] = turn.input() else {
        return false;
    };
    if input.role != Role::User {
        return false;
    }
    let Some(at) = turn.state().messages.iter().rposition(|m| m.role == Role::User) else {
        return false;
    };
    let unfinished = !turn.state().messages[at + 1..]
        .iter()
        .any(|m| m.role == Role::Assistant && !m.has_tool_calls());
    unfinished && turn.state().messages[at].content == input.content
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torn_lines_are_skipped() {
        let good = serde_json::to_string(&Msg::user("a")).unwrap_or_default();
        let bytes = format!("{good}\n{good}\n{{\"v\":1,\"id\":\"x\",\"ro");
        let (messages, torn) = parse_transcript(bytes.as_bytes());
        assert_eq!((messages.len(), torn), (2, 1));
    }
}
