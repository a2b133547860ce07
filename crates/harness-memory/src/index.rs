//! The full-text index: one SQLite FTS5 database per namespace, over the memory files and the
//! session transcripts, refreshed incrementally.
//!
//! A search first asks for a refresh: the namespace's files are listed, files whose size and
//! mtime are unchanged are skipped (unless modified within two seconds of the last check,
//! where mtimes are too coarse to trust), the rest are read and compared by content hash, and
//! only files that really changed are re-indexed (appends only index their new lines); files
//! that disappeared are removed. The refresh runs as an owned background task; a search waits
//! for it up to [`IndexConfig::search_wait`](crate::IndexConfig::search_wait) and otherwise
//! answers from the index as it is, with `stale: true` and a note. When the index cannot be
//! used at all, a search scans the files and says so. It never comes back silently empty.
//!
//! Tokens: a word index (`unicode61`), with CJK runs indexed as overlapping bigrams, so CJK
//! queries of any length match (see the `terms` module for the rules and why not `trigram`).
//! Ranking is BM25, bounded so that very common words cannot make a search slow (see
//! `store::query`).

mod store;
mod sync;
mod terms;

use crate::error::MemoryError;
use crate::namespace::NamespaceKey;
use crate::transcript::RenderLimits;
use harness_core::AgentId;
use harness_fs::{Filesystem, FsError};
use rusqlite::Connection;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use store::{Applied, FileInput, Kind};
use terms::Terms;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub(crate) use terms::snippet;

/// Files modified this close to the last check are re-read even when size and mtime match.
const RACY_MS: i64 = 2000;
/// Namespaces whose database handles are kept open.
const MAX_OPEN_NAMESPACES: usize = 256;
/// Characters of a line shown in a hit.
const SNIPPET_CHARS: usize = 200;

/// What to search.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SearchScope {
    /// `MEMORY.md` and `memory/*.md`.
    Memory,
    /// Session transcripts, of one agent or of all.
    Sessions {
        /// Only this agent's sessions.
        agent: Option<AgentId>,
    },
}

/// One search hit.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    /// Namespace-relative path of the file.
    pub path: String,
    /// 1-based line (for a transcript: the message's line in the JSONL file).
    pub line: usize,
    /// The matching line, cut around the match.
    pub snippet: String,
    /// Relevance; higher is better (BM25 for indexed results, matched terms for a scan).
    pub score: f64,
}

/// The answer to a search.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SearchResults {
    /// Best first, at most the requested limit.
    pub hits: Vec<SearchHit>,
    /// The index had not caught up with the files when the search ran, so recent changes may
    /// be missing.
    pub stale: bool,
    /// Why the results may be incomplete, for the model and the operator.
    pub note: Option<String>,
}

/// Counters of index work since the [`Memory`](crate::Memory) was built (all namespaces).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexStats {
    /// Refresh passes run.
    pub syncs: u64,
    /// Files indexed from scratch (new or rewritten).
    pub files_reindexed: u64,
    /// Files of which only appended lines were indexed.
    pub files_appended: u64,
    /// Files read and found unchanged by hash.
    pub files_unchanged: u64,
    /// Files removed from the index because they are gone.
    pub files_removed: u64,
}

#[derive(Debug, Default)]
struct Counters {
    syncs: AtomicU64,
    reindexed: AtomicU64,
    appended: AtomicU64,
    unchanged: AtomicU64,
    removed: AtomicU64,
}

type Slot = Arc<Mutex<Option<Connection>>>;

#[derive(Default)]
struct SyncState {
    requested: u64,
    running: bool,
    fs: Option<Arc<dyn Filesystem>>,
    problems: Vec<String>,
}

/// The index of one namespace.
struct NsIndex {
    path: PathBuf,
    writer: Slot,
    reader: Slot,
    state: Mutex<SyncState>,
    done: watch::Sender<u64>,
    last_used: AtomicU64,
}

/// Settings and handles shared by all namespaces.
pub(crate) struct Index {
    dir: PathBuf,
    enabled: bool,
    search_wait: Duration,
    limits: RenderLimits,
    namespaces: Mutex<HashMap<NamespaceKey, Arc<NsIndex>>>,
    counters: Arc<Counters>,
    clock: AtomicU64,
    /// The memory's task owner and hard-stop token (refreshes run as its tasks).
    tasks: TaskTracker,
    abort: CancellationToken,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn is_corruption(err: &rusqlite::Error) -> bool {
    matches!(
        err.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    )
}

/// Runs `work` on the blocking pool with the connection in `slot`, opening (and, if the file
/// is corrupt, recreating) the database first.
async fn with_conn<T: Send + 'static>(
    slot: &Slot,
    path: &std::path::Path,
    work: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
) -> Result<T, MemoryError> {
    let slot = Arc::clone(slot);
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut guard = lock(&slot);
        if guard.is_none() {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(MemoryError::index)?;
            }
            let conn = match store::open(&path) {
                Ok(conn) => conn,
                Err(err) if is_corruption(&err) => {
                    tracing::warn!(path = %path.display(), error = %err, "memory index is corrupt; rebuilding it");
                    for suffix in ["", "-wal", "-shm"] {
                        let mut file = path.clone().into_os_string();
                        file.push(suffix);
                        let _ = std::fs::remove_file(file);
                    }
                    store::open(&path).map_err(MemoryError::index)?
                }
                Err(err) => return Err(MemoryError::index(err)),
            };
            *guard = Some(conn);
        }
        let Some(conn) = guard.as_mut() else {
            return Err(MemoryError::index("index connection missing"));
        };
        match work(conn) {
            Ok(value) => Ok(value),
            Err(err) => {
                if is_corruption(&err) {
                    // Drop the handle and the file; the next refresh rebuilds from the files.
                    *guard = None;
                    let _ = std::fs::remove_file(&path);
                }
                Err(MemoryError::index(err))
            }
        }
    })
    .await
    .map_err(MemoryError::index)?
}

impl Index {
    pub(crate) fn new(
        dir: PathBuf,
        enabled: bool,
        search_wait: Duration,
        max_message_chars: usize,
        tasks: TaskTracker,
        abort: CancellationToken,
    ) -> Self {
        Self {
            dir,
            enabled,
            search_wait,
            limits: RenderLimits {
                text: max_message_chars,
                tool_input: 500,
                tool_result: max_message_chars,
            },
            namespaces: Mutex::new(HashMap::new()),
            counters: Arc::new(Counters::default()),
            clock: AtomicU64::new(0),
            tasks,
            abort,
        }
    }

    pub(crate) fn stats(&self) -> IndexStats {
        let c = &self.counters;
        IndexStats {
            syncs: c.syncs.load(Ordering::Relaxed),
            files_reindexed: c.reindexed.load(Ordering::Relaxed),
            files_appended: c.appended.load(Ordering::Relaxed),
            files_unchanged: c.unchanged.load(Ordering::Relaxed),
            files_removed: c.removed.load(Ordering::Relaxed),
        }
    }

    /// The database file of a namespace.
    pub(crate) fn db_path(&self, key: &NamespaceKey) -> PathBuf {
        self.dir.join(format!("{}.sqlite", key.file_stem()))
    }

    fn namespace(&self, key: &NamespaceKey) -> Arc<NsIndex> {
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        let mut namespaces = lock(&self.namespaces);
        if let Some(found) = namespaces.get(key) {
            found.last_used.store(now, Ordering::Relaxed);
            return Arc::clone(found);
        }
        if namespaces.len() >= MAX_OPEN_NAMESPACES {
            let idle = namespaces
                .iter()
                .filter(|(_, ns)| !lock(&ns.state).running)
                .min_by_key(|(_, ns)| ns.last_used.load(Ordering::Relaxed))
                .map(|(key, _)| key.clone());
            if let Some(idle) = idle {
                namespaces.remove(&idle);
            }
        }
        let (done, _) = watch::channel(0);
        let ns = Arc::new(NsIndex {
            path: self.db_path(key),
            writer: Arc::default(),
            reader: Arc::default(),
            state: Mutex::new(SyncState::default()),
            done,
            last_used: AtomicU64::new(now),
        });
        namespaces.insert(key.clone(), Arc::clone(&ns));
        ns
    }

    /// Asks for a refresh of `key`'s index from `fs` and returns the generation to wait for.
    fn request_refresh(&self, ns: &Arc<NsIndex>, fs: Arc<dyn Filesystem>) -> u64 {
        let mut state = lock(&ns.state);
        state.requested += 1;
        state.fs = Some(fs);
        let target = state.requested;
        if !state.running {
            state.running = true;
            let runner = Refresher {
                ns: Arc::clone(ns),
                counters: Arc::clone(&self.counters),
                limits: self.limits,
                abort: self.abort.clone(),
            };
            self.tasks.spawn(runner.run());
        }
        target
    }

    /// Refreshes `key`'s index and waits for it, at most `wait`. Returns whether the index
    /// caught up, with any problems the refresh met.
    pub(crate) async fn refresh(
        &self,
        key: &NamespaceKey,
        fs: Arc<dyn Filesystem>,
        wait: Option<Duration>,
    ) -> (bool, Vec<String>) {
        let ns = self.namespace(key);
        let mut done = ns.done.subscribe();
        let target = self.request_refresh(&ns, fs);
        // A refresh cancelled by shutdown never reports done, so the wait also ends then.
        let finished = async {
            tokio::select! {
                biased;
                () = self.abort.cancelled() => false,
                result = done.wait_for(|done| *done >= target) => result.is_ok(),
            }
        };
        let caught_up = match wait {
            Some(wait) => tokio::time::timeout(wait, finished).await.unwrap_or(false),
            None => finished.await,
        };
        let problems = lock(&ns.state).problems.clone();
        (caught_up, problems)
    }

    /// Searches one namespace. See the module docs for freshness and fallbacks.
    pub(crate) async fn search(
        &self,
        key: &NamespaceKey,
        fs: Arc<dyn Filesystem>,
        scope: &SearchScope,
        query: &str,
        limit: usize,
    ) -> SearchResults {
        let terms = Terms::parse(query);
        if terms.is_empty() {
            return SearchResults {
                note: Some("empty query: give one or more words to search for".into()),
                ..SearchResults::default()
            };
        }
        let (kind, prefix) = match scope {
            SearchScope::Memory => (Kind::Memory, None),
            SearchScope::Sessions { agent: Some(agent) } => (Kind::Session, Some(format!("agents/{agent}/sessions/"))),
            SearchScope::Sessions { agent: None } => (Kind::Session, None),
        };
        if !self.enabled {
            return self
                .scan(
                    &*fs,
                    kind,
                    prefix.as_deref(),
                    &terms,
                    limit,
                    "the index is disabled; these are results of a plain scan (unranked beyond term counts)".into(),
                )
                .await;
        }
        let (caught_up, problems) = self.refresh(key, Arc::clone(&fs), Some(self.search_wait)).await;
        let ns = self.namespace(key);
        let query_terms = terms.clone();
        let query_prefix = prefix.clone();
        let fetch = limit.max(1);
        let raw = with_conn(&ns.reader, &ns.path, move |conn| {
            store::query(conn, &query_terms, kind, query_prefix.as_deref(), fetch)
        })
        .await;
        match raw {
            Ok(raw) => {
                let mut notes = Vec::new();
                if !caught_up {
                    notes.push(
                        "the search index is still being updated; recent changes may be missing — search again shortly"
                            .to_owned(),
                    );
                }
                if !problems.is_empty() {
                    notes.push(format!("some files could not be indexed: {}", problems.join("; ")));
                }
                SearchResults {
                    hits: raw
                        .into_iter()
                        .map(|hit| SearchHit {
                            path: hit.path,
                            line: usize::try_from(hit.line).unwrap_or(usize::MAX),
                            snippet: snippet(&hit.text, &terms.all, SNIPPET_CHARS),
                            score: hit.score,
                        })
                        .collect(),
                    stale: !caught_up || !problems.is_empty(),
                    note: (!notes.is_empty()).then(|| notes.join("; ")),
                }
            }
            Err(err) => {
                tracing::warn!(namespace = %key, error = %harness_core::error_chain(&err), "memory index query failed; scanning files");
                self.scan(
                    &*fs,
                    kind,
                    prefix.as_deref(),
                    &terms,
                    limit,
                    "the search index is unavailable; these are results of a plain scan".into(),
                )
                .await
            }
        }
    }

    async fn scan(
        &self,
        fs: &dyn Filesystem,
        kind: Kind,
        prefix: Option<&str>,
        terms: &Terms,
        limit: usize,
        note: String,
    ) -> SearchResults {
        let (hits, problems) = sync::scan(fs, kind, prefix, terms, self.limits, limit.max(1)).await;
        let mut note = note;
        if !problems.is_empty() {
            note.push_str(&format!("; some files could not be read: {}", problems.join("; ")));
        }
        SearchResults {
            hits: hits
                .into_iter()
                .map(|hit| SearchHit {
                    path: hit.path,
                    line: usize::try_from(hit.line).unwrap_or(usize::MAX),
                    snippet: snippet(&hit.text, &terms.all, SNIPPET_CHARS),
                    score: hit.score,
                })
                .collect(),
            stale: false,
            note: Some(note),
        }
    }
}

/// The owned task that runs refreshes of one namespace until no request is pending.
struct Refresher {
    ns: Arc<NsIndex>,
    counters: Arc<Counters>,
    limits: RenderLimits,
    abort: CancellationToken,
}

impl Refresher {
    async fn run(self) {
        loop {
            let (target, fs) = {
                let mut state = lock(&self.ns.state);
                let fs = state.fs.clone();
                match fs {
                    Some(fs) if *self.ns.done.borrow() < state.requested => (state.requested, fs),
                    _ => {
                        state.running = false;
                        return;
                    }
                }
            };
            let problems = tokio::select! {
                biased;
                () = self.abort.cancelled() => {
                    lock(&self.ns.state).running = false;
                    return;
                }
                problems = self.sync_once(&*fs) => problems,
            };
            lock(&self.ns.state).problems = problems;
            self.ns.done.send_replace(target);
        }
    }

    /// One pass over the namespace; returns the problems met.
    async fn sync_once(&self, fs: &dyn Filesystem) -> Vec<String> {
        self.counters.syncs.fetch_add(1, Ordering::Relaxed);
        let (candidates, mut problems) = sync::gather(fs, &[Kind::Memory, Kind::Session]).await;
        // A directory that could not be listed must not make its files look deleted.
        let listing_complete = problems.is_empty();
        let known = match with_conn(&self.ns.writer, &self.ns.path, |conn| store::files(conn)).await {
            Ok(known) => Arc::new(known),
            Err(err) => {
                problems.push(format!("index database: {}", harness_core::error_chain(&err)));
                return problems;
            }
        };
        let now = jiff::Timestamp::now().as_millisecond();
        let mut present = HashSet::with_capacity(candidates.len());
        for candidate in candidates {
            let path_text = candidate.path.as_str().to_owned();
            present.insert(path_text.clone());
            let record = known.get(&path_text);
            let quick_same = record.is_some_and(|record| {
                record.size == candidate.size
                    && candidate.mtime.is_some()
                    && record.mtime == candidate.mtime
                    && candidate.mtime.is_some_and(|mtime| mtime + RACY_MS < record.indexed_at)
            });
            if quick_same {
                continue;
            }
            let bytes = match fs.read(&candidate.path).await {
                Ok(bytes) => bytes,
                Err(FsError::NotFound { .. }) => {
                    present.remove(&path_text);
                    continue;
                }
                Err(err) => {
                    problems.push(format!("{}: {err}", candidate.path));
                    continue;
                }
            };
            let known = Arc::clone(&known);
            let limits = self.limits;
            let kind = candidate.kind;
            let mtime = candidate.mtime;
            let applied = with_conn(&self.ns.writer, &self.ns.path, move |conn| {
                let input = FileInput {
                    path: &path_text,
                    kind,
                    bytes: &bytes,
                    mtime,
                    now,
                    known: known.get(&path_text),
                    limits,
                };
                store::update_file(conn, &input)
            })
            .await;
            match applied {
                Ok(Applied::Reindexed) => self.counters.reindexed.fetch_add(1, Ordering::Relaxed),
                Ok(Applied::Appended) => self.counters.appended.fetch_add(1, Ordering::Relaxed),
                Ok(Applied::Unchanged) => self.counters.unchanged.fetch_add(1, Ordering::Relaxed),
                Err(err) => {
                    problems.push(format!("{}: {}", candidate.path, harness_core::error_chain(&err)));
                    continue;
                }
            };
        }
        let gone_files = known.keys().filter(|path| listing_complete && !present.contains(*path));
        for gone in gone_files {
            let gone = gone.clone();
            match with_conn(&self.ns.writer, &self.ns.path, move |conn| {
                store::remove_file(conn, &gone)
            })
            .await
            {
                Ok(()) => {
                    self.counters.removed.fetch_add(1, Ordering::Relaxed);
                }
                Err(err) => problems.push(format!("index database: {}", harness_core::error_chain(&err))),
            }
        }
        problems
    }
}
