//! Retention and maintenance: `[retention]` names what may be deleted and after how long
//! idle; [`Maintenance`] applies it (`harness maintenance`, and `harness serve` on a
//! schedule under a leader lease, [`Maintenance::run_scheduled`]).
//!
//! ```toml
//! [retention]
//! sessions = "90d"       # idle sessions: transcript, state, index entry, offloads, task records, their evicted results
//! offloads = "30d"       # compaction offloads (agents/<agent>/compacted/<session>/) of sessions idle this long
//! tool_results = "30d"   # evicted large tool results whose sessions are all idle this long
//! daily_logs = "180d"    # memory/YYYY-MM-DD.md older than this, once consolidation merged all of it
//! snapshots = 3          # sandbox snapshots ([sandbox.snapshots]): the last 3 heads per scope and what they reach
//! interval = "1h"        # how often `harness serve` runs maintenance (one replica at a time)
//! ```
//!
//! Nothing is deleted for a kind `[retention]` does not name. Age is the last activity the
//! session index records (`sessions.json`'s `updated`) and, for daily logs, the date in the
//! file name — never file modification times — so it reads the same on local disk and on a
//! composite filesystem in Redis or PostgreSQL. A session whose lease is held (a turn runs)
//! or that a running background task references is kept; a transcript the index never
//! recorded (age unknown) is kept; an evicted result no transcript references is kept.
//! Snapshots are kept by count, not age: per scope, the last `snapshots` heads and every
//! object they reach; an object whose id (a UUIDv7) says it was created within the store's
//! grace period is kept too (an upload in flight), and the current head's chain always is.
//! Every deletion is logged (`harness::maintenance` target) and reported.

use harness::capability::{ConfigSection, Registration};
use harness::session::{SessionIndex, index_path};
use harness::subagents::{TaskFile, TaskStatus};
use harness_core::{
    AgentId, CancellationToken, LeaseError, LeaseGuard, LeaseKey, SessionId, SessionLease, StateStore, UserId,
};
use harness_fs::{CallScope, Filesystem, FsError, IsolationScope, Namespaced, WriteMode, WsPath};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

/// `[retention]`'s registration (a section only: maintenance is not a capability of a turn).
pub const RETENTION: Registration = Registration::section_only::<RetentionSection>("retention");

/// How often `harness serve` runs maintenance when `interval` is not set.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(3600);

/// How long maintenance tries to take a session's lease before it counts the session live.
const LEASE_PROBE: Duration = Duration::from_millis(300);

/// `[retention]` of harness.toml: per kind, how long idle before it may be deleted. A kind
/// left out is never deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionSection {
    /// Idle sessions: transcript, agent state, index entry, compaction offloads, task
    /// records, memory-extraction mark, isolated children's layers, and the evicted results
    /// only they reference.
    #[serde(default, deserialize_with = "age")]
    pub sessions: Option<Duration>,
    /// Compaction offloads of sessions idle this long (the sessions stay).
    #[serde(default, deserialize_with = "age")]
    pub offloads: Option<Duration>,
    /// Evicted large tool results whose referencing sessions are all idle this long.
    #[serde(default, deserialize_with = "age")]
    pub tool_results: Option<Duration>,
    /// Daily memory logs dated longer ago than this, once consolidation merged every line.
    #[serde(default, deserialize_with = "age")]
    pub daily_logs: Option<Duration>,
    /// Sandbox work-tree snapshots (`[sandbox.snapshots]`): the last this many heads of
    /// each scope are kept with everything they reach (a delta's bases); older snapshot
    /// objects are deleted.
    #[serde(default, deserialize_with = "count")]
    pub snapshots: Option<usize>,
    /// How often `harness serve` runs maintenance (default 1h).
    #[serde(default, deserialize_with = "age")]
    pub interval: Option<Duration>,
}

impl ConfigSection for RetentionSection {
    const KEY: &'static str = "retention";
}

fn age<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Duration>, D::Error> {
    let text = String::deserialize(deserializer)?;
    let duration = harness_memory::parse_duration(&text).map_err(serde::de::Error::custom)?;
    if duration.is_zero() {
        return Err(serde::de::Error::custom(
            "a retention age must be longer than 0 (leave the key out to keep that kind forever)",
        ));
    }
    Ok(Some(duration))
}

fn count<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<usize>, D::Error> {
    let count = usize::deserialize(deserializer)?;
    if count == 0 {
        return Err(serde::de::Error::custom(
            "snapshots = 0 would delete every head: keep at least 1 (leave the key out to keep all snapshots)",
        ));
    }
    Ok(Some(count))
}

impl RetentionSection {
    /// Whether any kind may be deleted.
    pub fn names_anything(&self) -> bool {
        self.sessions.is_some()
            || self.offloads.is_some()
            || self.tool_results.is_some()
            || self.daily_logs.is_some()
            || self.snapshots.is_some()
    }

    /// How often `harness serve` runs maintenance.
    pub fn interval(&self) -> Duration {
        self.interval.unwrap_or(DEFAULT_INTERVAL)
    }

    /// The kinds named, for messages (`sessions 90d, daily_logs 180d`).
    pub fn describe(&self) -> String {
        let kinds = [
            ("sessions", self.sessions),
            ("offloads", self.offloads),
            ("tool_results", self.tool_results),
            ("daily_logs", self.daily_logs),
        ];
        let mut named: Vec<String> = kinds
            .iter()
            .filter_map(|(name, age)| age.map(|age| format!("{name} {}", harness_memory::format_duration(age))))
            .collect();
        if let Some(heads) = self.snapshots {
            named.push(format!("snapshots: last {heads} head(s)"));
        }
        if named.is_empty() {
            "nothing".to_owned()
        } else {
            named.join(", ")
        }
    }
}

/// Which part of the workspace a run covers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Target {
    /// Only this user's namespace (user isolation).
    pub user: Option<UserId>,
    /// Only this session (in every namespace the run covers).
    pub session: Option<SessionId>,
}

/// One thing a run removed (or, dry, would remove).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removal {
    /// `transcript`, `state`, `index entry`, `offloads`, `task records`, `extraction mark`,
    /// `child layer`, `tool result`, `daily log`.
    pub kind: &'static str,
    /// The path from the workspace root (for `state`: the state key).
    pub path: String,
    /// Why: the session and how long it was idle, or the log's date.
    pub reason: String,
}

/// Something a run would have removed by age but kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    /// The session (`namespace/agent/session`) or path.
    pub what: String,
    /// Why it was kept.
    pub reason: String,
}

/// What one run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MaintenanceReport {
    /// Whether nothing was deleted (a dry run).
    pub dry_run: bool,
    /// What was (or would be) removed, in order.
    pub removed: Vec<Removal>,
    /// What was due by age but kept (live, or a failure).
    pub kept: Vec<Kept>,
}

impl MaintenanceReport {
    /// One line per removal and per kept item, and a count.
    pub fn render(&self) -> String {
        let verb = if self.dry_run { "would remove" } else { "removed" };
        let mut out = String::new();
        for removal in &self.removed {
            let _ = writeln!(out, "{verb} {} {} ({})", removal.kind, removal.path, removal.reason);
        }
        for kept in &self.kept {
            let _ = writeln!(out, "kept {}: {}", kept.what, kept.reason);
        }
        let _ = writeln!(
            out,
            "{} {} item(s); kept {} due item(s)",
            verb,
            self.removed.len(),
            self.kept.len()
        );
        harness_core::redact::redact(&out)
    }
}

/// Why maintenance could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MaintenanceError {
    /// The workspace or a backend could not be read or written.
    #[error("cannot read or delete {path}")]
    Fs {
        /// The path.
        path: String,
        /// The cause.
        #[source]
        source: FsError,
    },
    /// The state store failed.
    #[error("the state store failed for {key}")]
    State {
        /// The state key.
        key: String,
        /// The cause.
        #[source]
        source: harness_core::StateError,
    },
    /// The lease backend failed.
    #[error("the lease backend failed")]
    Lease(#[source] LeaseError),
    /// The workspace's configuration could not be opened.
    #[error("cannot open the workspace: {0}")]
    Open(String),
    /// The snapshot store (`[sandbox.snapshots]`) failed.
    #[error("the snapshot store failed for scope {scope}")]
    Snapshot {
        /// The scope.
        scope: String,
        /// The cause.
        #[source]
        source: harness_snapshot::SnapshotError,
    },
}

fn fs_error(path: impl std::fmt::Display, source: FsError) -> MaintenanceError {
    MaintenanceError::Fs {
        path: path.to_string(),
        source,
    }
}

/// Applies `[retention]` to one agent workspace through its filesystem (local or
/// composite), its state store and its session lease.
#[derive(Clone)]
pub struct Maintenance {
    fs: Arc<dyn Filesystem>,
    state: Arc<dyn StateStore>,
    lease: Arc<dyn SessionLease>,
    isolation: IsolationScope,
    evicted_dir: WsPath,
    retention: RetentionSection,
    /// `[sandbox.snapshots]`' store and the KV its heads live in, when both are configured.
    snapshots: Option<(harness_snapshot::Snapshots, Arc<dyn harness_store::KvStore>)>,
}

impl std::fmt::Debug for Maintenance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Maintenance")
            .field("fs", &self.fs.describe())
            .field("isolation", &self.isolation)
            .field("retention", &self.retention)
            .finish_non_exhaustive()
    }
}

/// One session's decision in a run.
struct Due {
    scope: CallScope,
    idle: Duration,
    whole: bool,
    offloads: bool,
    tool_results: bool,
}

impl Maintenance {
    /// Maintenance over `fs` (the workspace root), `state` and `lease`, with the agent's
    /// isolation scope.
    pub fn new(
        fs: Arc<dyn Filesystem>,
        state: Arc<dyn StateStore>,
        lease: Arc<dyn SessionLease>,
        isolation: IsolationScope,
        retention: RetentionSection,
    ) -> Self {
        Self {
            fs,
            state,
            lease,
            isolation,
            evicted_dir: WsPath::parse(harness_fs::DEFAULT_EVICTED_DIR).unwrap_or_default(),
            retention,
            snapshots: None,
        }
    }

    /// Snapshot retention (`[retention] snapshots`) applies to `snapshots`, whose heads are
    /// kept in `heads`.
    #[must_use]
    pub fn snapshots(mut self, snapshots: harness_snapshot::Snapshots, heads: Arc<dyn harness_store::KvStore>) -> Self {
        self.snapshots = Some((snapshots, heads));
        self
    }

    /// Evicted results live under `dir` (`[tool_result_eviction] dir`), not
    /// `large_tool_results`.
    #[must_use]
    pub fn evicted_dir(mut self, dir: WsPath) -> Self {
        self.evicted_dir = dir;
        self
    }

    /// The retention it applies.
    pub fn retention(&self) -> &RetentionSection {
        &self.retention
    }

    /// Maintenance of the workspace at `dir` as `config` describes it: its `[filesystem]`,
    /// `[state]` (and lease), `[agent] isolation`, `[tool_result_eviction] dir` and
    /// `[retention]`. `config` must have been loaded with [`RETENTION`] registered.
    ///
    /// # Errors
    /// [`MaintenanceError::Open`] naming what could not be opened.
    pub async fn open(dir: &std::path::Path, config: &harness::HarnessConfig) -> Result<Self, MaintenanceError> {
        let retention = config
            .section::<RetentionSection>()
            .map_err(|err| MaintenanceError::Open(err.to_string()))?
            .unwrap_or_default();
        let name = config
            .agent
            .name
            .clone()
            .unwrap_or_else(|| harness::DEFAULT_AGENT_NAME.to_owned());
        let fs: Arc<dyn Filesystem> = match &config.filesystem {
            Some(fs_config) => harness::filesystem::open(fs_config, dir, &name)
                .await
                .map_err(|err| MaintenanceError::Open(harness_core::error_chain(&err)))?,
            None => Arc::new(
                harness_fs::LocalFs::new(dir)
                    .map_err(|err| MaintenanceError::Open(harness_core::error_chain(&err)))?
                    .fsync(false),
            ),
        };
        let backend = match &config.state {
            Some(state) => harness::state::open(state)
                .await
                .map_err(|err| MaintenanceError::Open(harness_core::error_chain(&err)))?,
            None => None,
        };
        let (state, lease): (Arc<dyn StateStore>, Arc<dyn SessionLease>) = match backend {
            Some(backend) => (backend.store, backend.lease),
            // The agent's defaults: JSON files in the namespaces, lock files in .harness/locks.
            None => (
                Arc::new(harness_store::FileStateStore::with_layout(
                    dir.to_owned(),
                    harness_fs::state_layout(),
                )),
                Arc::new(harness_store::FileLease::new(dir.join(".harness").join("locks"))),
            ),
        };
        let snapshots = match (&config.state, retention.snapshots) {
            (Some(state), Some(_)) => open_snapshots(dir, config, state).await?,
            _ => None,
        };
        let mut maintenance = Self::new(fs, state, lease, config.agent.isolation.unwrap_or_default(), retention);
        if let Some((snapshots, heads)) = snapshots {
            maintenance = maintenance.snapshots(snapshots, heads);
        }
        if let Ok(Some(eviction)) = config.section::<harness::eviction::EvictionSection>()
            && let Ok(evicted) = WsPath::parse(&eviction.config.dir)
        {
            maintenance = maintenance.evicted_dir(evicted);
        }
        Ok(maintenance)
    }

    /// Applies the retention to `target` as of `now`; with `dry_run` nothing is deleted (the
    /// leases are still probed, so the report says what a real run would keep).
    ///
    /// # Errors
    /// [`MaintenanceError`] when a backend fails; what was deleted before stays deleted
    /// (each deletion is logged).
    pub async fn run(
        &self,
        target: &Target,
        dry_run: bool,
        now: jiff::Timestamp,
    ) -> Result<MaintenanceReport, MaintenanceError> {
        let mut report = MaintenanceReport {
            dry_run,
            ..MaintenanceReport::default()
        };
        if !self.retention.names_anything() {
            return Ok(report);
        }
        for (namespace, user, only_session) in self.namespaces(target).await? {
            let fs: Arc<dyn Filesystem> = if namespace.is_root() {
                Arc::clone(&self.fs)
            } else {
                Arc::new(Namespaced::new(Arc::clone(&self.fs), namespace.clone()))
            };
            let ctx = Namespace {
                fs,
                prefix: namespace,
                user,
                only_session: only_session.or_else(|| target.session.clone()),
            };
            let live = live_tasks(ctx.fs.as_ref()).await?;
            for agent in agents(ctx.fs.as_ref()).await? {
                // The leases taken are released before the next agent (and before the process
                // exits: a guard dropped at exit may never reach a shared backend, which would
                // keep the session "live" for the next run until the lease expires).
                let mut held = Vec::new();
                let done = self
                    .agent(&ctx, &agent, &live, dry_run, now, &mut report, &mut held)
                    .await;
                for guard in held {
                    guard.release().await;
                }
                done?;
            }
            if target.session.is_none() {
                self.daily_logs(&ctx, dry_run, now, &mut report).await?;
            }
        }
        // Snapshot scopes are hashes of sandbox scope keys: a run narrowed to a user or a
        // session cannot tell which are theirs, so only a whole run applies `snapshots`.
        if let Some(keep) = self.retention.snapshots
            && *target == Target::default()
        {
            self.snapshot_retention(keep, dry_run, now, &mut report).await?;
        }
        Ok(report)
    }

    /// `[retention] snapshots = keep`: per scope with a head, keeps the objects of the head's
    /// chain and of the `keep - 1` previous heads (each chain holds its full base and its
    /// deltas), and deletes the other objects of the scope. An object whose snapshot id says
    /// it was created within the store's grace period (an upload may be in flight: a live
    /// sandbox persisting) is kept; the current chain, the one a live sandbox restored from
    /// or builds its next delta on, is always kept. Ages come from the ids (UUIDv7 creation
    /// times), never from file times.
    async fn snapshot_retention(
        &self,
        keep: usize,
        dry_run: bool,
        now: jiff::Timestamp,
        report: &mut MaintenanceReport,
    ) -> Result<(), MaintenanceError> {
        let Some((snapshots, heads)) = &self.snapshots else {
            return Ok(());
        };
        let failed = |scope: &str| {
            let scope = scope.to_owned();
            move |source| MaintenanceError::Snapshot { scope, source }
        };
        let grace_ms = i64::try_from(snapshots.options().gc_grace.as_millis()).unwrap_or(i64::MAX);
        let now_ms = now.as_millisecond();
        let mut scopes = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = heads
                .list("snapshots/", after.as_deref(), 500)
                .await
                .map_err(|err| failed("*")(harness_snapshot::SnapshotError::Store(err)))?;
            scopes.extend(page.entries.iter().filter_map(|entry| {
                entry
                    .key
                    .strip_prefix("snapshots/")
                    .and_then(|rest| rest.strip_suffix("/HEAD"))
                    .map(str::to_owned)
            }));
            match page.next_after {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        for scope in scopes {
            let (head, _) = snapshots.heads().get(&scope).await.map_err(failed(&scope))?;
            let Some(head) = head else { continue };
            let mut kept: BTreeSet<&str> = head.chain.iter().map(String::as_str).collect();
            for chain in head.history.iter().take(keep.saturating_sub(1)) {
                kept.extend(chain.iter().map(String::as_str));
            }
            for (id, path, _file_time) in snapshots.blobs().objects_of(&scope).await.map_err(failed(&scope))? {
                if kept.contains(id.as_str()) {
                    continue;
                }
                let Some(created_ms) = uuid_v7_ms(&id) else {
                    report.kept.push(Kept {
                        what: format!("snapshot object {path}"),
                        reason: "its name is no snapshot id, so its age is unknown".into(),
                    });
                    continue;
                };
                let age_ms = now_ms.saturating_sub(created_ms);
                if age_ms < grace_ms {
                    report.kept.push(Kept {
                        what: format!("snapshot object {path}"),
                        reason: "created within the grace period: an upload may be in flight".into(),
                    });
                    continue;
                }
                let age = harness_memory::format_duration(Duration::from_millis(u64::try_from(age_ms).unwrap_or(0)));
                let reason = format!("scope {scope}: not in the last {keep} head(s), created {age} ago");
                if !dry_run {
                    snapshots.blobs().delete(&path).await.map_err(failed(&scope))?;
                    tracing::info!(target: "harness::maintenance", kind = "snapshot", path = %path, reason = %reason, "deleted");
                }
                report.removed.push(Removal {
                    kind: "snapshot",
                    path: path.to_string(),
                    reason,
                });
            }
        }
        Ok(())
    }

    /// The namespaces the run covers: `(prefix, user for the scope, the one session it holds)`.
    async fn namespaces(&self, target: &Target) -> Result<Vec<(WsPath, UserId, Option<SessionId>)>, MaintenanceError> {
        if matches!(self.isolation, IsolationScope::Agent | IsolationScope::Global) {
            let user = target.user.clone().unwrap_or(harness_core::DEFAULT_USER_ID);
            return Ok(vec![(WsPath::root(), user, None)]);
        }
        let top = match self.fs.list(&WsPath::root()).await {
            Ok(entries) => entries,
            Err(FsError::NotFound { .. }) => Vec::new(),
            Err(err) => return Err(fs_error("the workspace root", err)),
        };
        let mut out = Vec::new();
        for dir in top.into_iter().filter(|entry| entry.is_dir) {
            let name = dir.path.as_str();
            // A reserved name (memory/, agents/ …) or anything that is no id is no namespace.
            let Ok(probe) = CallScope::parse(self.isolation, "probe", name, name) else {
                continue;
            };
            if probe.namespace().as_str() != name {
                continue;
            }
            match self.isolation {
                IsolationScope::Session => {
                    let session = probe.session().clone();
                    if target.session.as_ref().is_some_and(|s| *s != session) {
                        continue;
                    }
                    let user = target.user.clone().unwrap_or(harness_core::DEFAULT_USER_ID);
                    out.push((dir.path.clone(), user, Some(session)));
                }
                _ => {
                    let user = probe.user().clone();
                    if target.user.as_ref().is_some_and(|u| *u != user) {
                        continue;
                    }
                    out.push((dir.path.clone(), user, None));
                }
            }
        }
        Ok(out)
    }

    /// Takes `key`'s lease if it is free within [`LEASE_PROBE`]; `None` when a turn holds it.
    async fn try_lease(&self, key: &LeaseKey) -> Result<Option<LeaseGuard>, MaintenanceError> {
        let cancel = CancellationToken::new();
        let timer = {
            let cancel = cancel.clone();
            tokio::spawn(async move {
                tokio::time::sleep(LEASE_PROBE).await;
                cancel.cancel();
            })
        };
        let acquired = self.lease.acquire(key, &cancel).await;
        timer.abort();
        match acquired {
            Ok(guard) => Ok(Some(guard)),
            Err(LeaseError::Cancelled) => Ok(None),
            Err(err) => Err(MaintenanceError::Lease(err)),
        }
    }

    #[allow(clippy::too_many_lines, clippy::too_many_arguments)] // one pass over one agent's sessions, in the order of its effects
    async fn agent(
        &self,
        ns: &Namespace,
        agent: &AgentId,
        live: &HashSet<(String, String)>,
        dry_run: bool,
        now: jiff::Timestamp,
        report: &mut MaintenanceReport,
        held: &mut Vec<LeaseGuard>,
    ) -> Result<(), MaintenanceError> {
        let index = read_index(ns.fs.as_ref(), agent).await?;
        let mut due: Vec<Due> = Vec::new();
        let mut idle_by_session: BTreeMap<String, Duration> = BTreeMap::new();
        for (id, entry) in &index.sessions {
            let idle = Duration::try_from(now.duration_since(entry.updated)).unwrap_or(Duration::ZERO);
            idle_by_session.insert(id.clone(), idle);
            if ns.only_session.as_ref().is_some_and(|only| only.as_str() != id) {
                continue;
            }
            let older = |age: Option<Duration>| age.is_some_and(|age| idle >= age);
            let (whole, offloads, tool_results) = (
                older(self.retention.sessions),
                older(self.retention.offloads),
                older(self.retention.tool_results),
            );
            if !(whole || offloads || tool_results) {
                continue;
            }
            let Ok(session) = SessionId::parse(id) else { continue };
            let Ok(scope) = CallScope::new(self.isolation, agent.clone(), ns.user.clone(), session) else {
                continue;
            };
            if scope.namespace() != &ns.prefix {
                continue; // under session isolation, another session's entry in this namespace
            }
            let what = format!("session {}", session_label(&ns.prefix, agent, id));
            if live.contains(&(agent.as_str().to_owned(), id.clone())) {
                report.kept.push(Kept {
                    what,
                    reason: "a background task of it is running".into(),
                });
                continue;
            }
            let Some(guard) = self.try_lease(&scope.lease_key()).await? else {
                report.kept.push(Kept {
                    what,
                    reason: "live: a turn holds its lease".into(),
                });
                continue;
            };
            held.push(guard);
            due.push(Due {
                scope,
                idle,
                whole,
                offloads,
                tool_results,
            });
        }
        if due.is_empty() {
            return Ok(());
        }
        // Under the leases: a turn that ended between the read and the lease moved `updated`.
        let fresh = read_index(ns.fs.as_ref(), agent).await?;
        due.retain(|d| {
            fresh
                .sessions
                .get(d.scope.session().as_str())
                .zip(index.sessions.get(d.scope.session().as_str()))
                .is_some_and(|(now_entry, then)| now_entry.updated == then.updated)
        });
        let removed_sessions: BTreeSet<String> = due
            .iter()
            .filter(|d| d.whole)
            .map(|d| d.scope.session().as_str().to_owned())
            .collect();
        // Evicted results: deletable when every session that references them goes, or is
        // idle past `tool_results` (and none of them is live).
        let evicted_dir = self.evicted_dir.join(agent.as_str()).unwrap_or_default();
        let evicted: Vec<WsPath> = match ns.fs.list(&evicted_dir).await {
            Ok(entries) => entries.into_iter().filter(|e| !e.is_dir).map(|e| e.path).collect(),
            Err(FsError::NotFound { .. }) => Vec::new(),
            Err(err) => return Err(fs_error(ns.full(&evicted_dir), err)),
        };
        if !evicted.is_empty() {
            let mut referenced: BTreeMap<&str, Vec<String>> = BTreeMap::new();
            for id in index.sessions.keys() {
                let Ok(path) = harness::session::transcript_path(agent.as_str(), id) else {
                    continue;
                };
                let text = match ns.fs.read(&path).await {
                    Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                    Err(FsError::NotFound { .. }) => continue,
                    Err(err) => return Err(fs_error(ns.full(&path), err)),
                };
                for file in &evicted {
                    if text.contains(file.as_str()) {
                        referenced.entry(file.as_str()).or_default().push(id.clone());
                    }
                }
            }
            for file in &evicted {
                let Some(sessions) = referenced.get(file.as_str()) else {
                    continue; // no transcript names it: its age is unknown
                };
                let goes = sessions.iter().all(|s| {
                    removed_sessions.contains(s)
                        || due.iter().any(|d| d.scope.session().as_str() == s && d.tool_results)
                });
                if !goes {
                    continue;
                }
                let reason = format!("referenced by session(s) {}", sessions.join(", "));
                self.delete(ns, file, "tool result", reason, dry_run, report).await?;
            }
        }
        for d in &due {
            let id = d.scope.session().as_str();
            let reason = format!(
                "session {} idle {}",
                session_label(&ns.prefix, agent, id),
                harness_memory::format_duration(Duration::from_secs(d.idle.as_secs()))
            );
            if d.whole {
                let key = d.scope.state_key();
                let key_text = key.display();
                if !dry_run {
                    self.state
                        .delete(&key)
                        .await
                        .map_err(|source| MaintenanceError::State {
                            key: key_text.clone(),
                            source,
                        })?;
                    tracing::info!(target: "harness::maintenance", kind = "state", path = %key_text, reason = %reason, "deleted");
                }
                report.removed.push(Removal {
                    kind: "state",
                    path: key_text,
                    reason: reason.clone(),
                });
                let context = WsPath::parse(&format!("agents/{agent}/context/{id}")).unwrap_or_default();
                if exists(ns.fs.as_ref(), &context).await {
                    self.delete(ns, &context, "state files", reason.clone(), dry_run, report)
                        .await?;
                }
                for (kind, path) in [
                    ("transcript", d.scope.transcript_path()),
                    ("offloads", d.scope.compacted_dir()),
                    ("task records", d.scope.task_records_path()),
                    ("extraction mark", d.scope.memory_extraction_path()),
                ] {
                    if exists(ns.fs.as_ref(), &path).await {
                        self.delete(ns, &path, kind, reason.clone(), dry_run, report).await?;
                    }
                }
                // Isolated children of this session: agents/<agent>/subagents/<child>/<session>/.
                let children = WsPath::parse(&format!("agents/{agent}/subagents")).unwrap_or_default();
                if let Ok(entries) = ns.fs.list(&children).await {
                    for child in entries.into_iter().filter(|e| e.is_dir) {
                        if let Ok(layer) = child.path.join(id)
                            && exists(ns.fs.as_ref(), &layer).await
                        {
                            self.delete(ns, &layer, "child layer", reason.clone(), dry_run, report)
                                .await?;
                        }
                    }
                }
            } else if d.offloads {
                let path = d.scope.compacted_dir();
                if exists(ns.fs.as_ref(), &path).await {
                    self.delete(ns, &path, "offloads", reason.clone(), dry_run, report)
                        .await?;
                }
            }
        }
        if !removed_sessions.is_empty() {
            let path = index_path(agent.as_str()).map_err(|err| fs_error("sessions.json", err))?;
            for id in &removed_sessions {
                report.removed.push(Removal {
                    kind: "index entry",
                    path: format!("{}#{id}", ns.full(&path)),
                    reason: format!("session {}", session_label(&ns.prefix, agent, id)),
                });
            }
            if !dry_run {
                remove_index_entries(ns.fs.as_ref(), &path, &removed_sessions)
                    .await
                    .map_err(|err| fs_error(ns.full(&path), err))?;
                tracing::info!(target: "harness::maintenance", kind = "index entry", path = %ns.full(&path), sessions = ?removed_sessions, "deleted");
            }
        }
        Ok(())
    }

    async fn daily_logs(
        &self,
        ns: &Namespace,
        dry_run: bool,
        now: jiff::Timestamp,
        report: &mut MaintenanceReport,
    ) -> Result<(), MaintenanceError> {
        let Some(age) = self.retention.daily_logs else {
            return Ok(());
        };
        let Ok(span) = jiff::SignedDuration::try_from(age) else {
            return Ok(());
        };
        let Ok(cutoff) = now.checked_sub(span) else {
            return Ok(());
        };
        let cutoff = cutoff.to_zoned(jiff::tz::TimeZone::UTC).date();
        let merged = harness_memory::merged_daily_logs(ns.fs.as_ref())
            .await
            .map_err(|err| fs_error(ns.full(&WsPath::parse("memory").unwrap_or_default()), err))?;
        for (date, path) in merged.into_iter().filter(|(date, _)| *date < cutoff) {
            let reason = format!("dated {date}, consolidated into MEMORY.md");
            self.delete(ns, &path, "daily log", reason, dry_run, report).await?;
        }
        Ok(())
    }

    async fn delete(
        &self,
        ns: &Namespace,
        path: &WsPath,
        kind: &'static str,
        reason: String,
        dry_run: bool,
        report: &mut MaintenanceReport,
    ) -> Result<(), MaintenanceError> {
        let full = ns.full(path);
        if !dry_run {
            ns.fs.delete(path).await.map_err(|err| fs_error(&full, err))?;
            tracing::info!(target: "harness::maintenance", kind, path = %full, reason = %reason, "deleted");
        }
        report.removed.push(Removal {
            kind,
            path: full,
            reason,
        });
        Ok(())
    }

    /// `harness serve`'s schedule: waits for the leader lease (`maintenance/leader`, in the
    /// same backend as the session leases, so one replica of a deployment holds it), then
    /// runs maintenance every `interval` while it holds it, calling `on_run` with each
    /// report. Returns when `shutdown` fires. A lost lease (the backend expired it) sends
    /// it back to waiting.
    pub async fn run_scheduled(
        &self,
        interval: Duration,
        shutdown: CancellationToken,
        on_run: impl Fn(&Result<MaintenanceReport, MaintenanceError>) + Send + Sync,
    ) {
        let key = LeaseKey::new(&["maintenance", "leader"]);
        loop {
            let guard = match self.lease.acquire(&key, &shutdown).await {
                Ok(guard) => guard,
                Err(LeaseError::Cancelled) => return,
                Err(err) => {
                    tracing::warn!(target: "harness::maintenance", error = %err, "cannot take the maintenance lease; retrying");
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep(interval.min(Duration::from_secs(30))) => continue,
                    }
                }
            };
            let lost = guard.lost();
            loop {
                let result = self.run(&Target::default(), false, jiff::Timestamp::now()).await;
                if let Err(err) = &result {
                    tracing::warn!(target: "harness::maintenance", error = %harness_core::error_chain(err), "maintenance failed");
                }
                on_run(&result);
                tokio::select! {
                    () = shutdown.cancelled() => {
                        guard.release().await;
                        return;
                    }
                    () = lost.cancelled() => break,
                    () = tokio::time::sleep(interval) => {}
                }
            }
            drop(guard);
        }
    }
}

/// One namespace of a run.
struct Namespace {
    fs: Arc<dyn Filesystem>,
    prefix: WsPath,
    user: UserId,
    only_session: Option<SessionId>,
}

impl Namespace {
    fn full(&self, path: &WsPath) -> String {
        self.prefix.join_path(path).as_str().to_owned()
    }
}

fn session_label(prefix: &WsPath, agent: &AgentId, id: &str) -> String {
    if prefix.is_root() {
        format!("{agent}/{id}")
    } else {
        format!("{prefix}/{agent}/{id}")
    }
}

async fn exists(fs: &dyn Filesystem, path: &WsPath) -> bool {
    fs.exists(path).await.unwrap_or(false)
}

async fn agents(fs: &dyn Filesystem) -> Result<Vec<AgentId>, MaintenanceError> {
    let dir = WsPath::parse("agents").unwrap_or_default();
    match fs.list(&dir).await {
        Ok(entries) => Ok(entries
            .into_iter()
            .filter(|e| e.is_dir)
            .filter_map(|e| AgentId::parse(e.path.file_name()).ok())
            .collect()),
        Err(FsError::NotFound { .. }) => Ok(Vec::new()),
        Err(err) => Err(fs_error("agents", err)),
    }
}

async fn read_index(fs: &dyn Filesystem, agent: &AgentId) -> Result<SessionIndex, MaintenanceError> {
    let path = index_path(agent.as_str()).map_err(|err| fs_error("sessions.json", err))?;
    match fs.read(&path).await {
        // A corrupt index dates nothing: nothing of the agent is deleted by age.
        Ok(bytes) => Ok(serde_json::from_slice(&bytes).unwrap_or_default()),
        Err(FsError::NotFound { .. }) => Ok(SessionIndex::default()),
        Err(err) => Err(fs_error(path, err)),
    }
}

/// What the background task records of a workspace say now: tasks by status, and the calls
/// of the tasks waiting for a person ([`Maintenance::task_census`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskCensus {
    /// Tasks by status name (`running`, `completed`, `awaiting_approval`, ...); every status
    /// of [`TASK_STATES`] is present, with 0 when no task has it.
    pub by_state: BTreeMap<String, u64>,
    /// The pending calls of the tasks in `awaiting_approval`.
    pub pending_calls: u64,
}

/// The task statuses a census always reports (a status added later is counted too).
pub const TASK_STATES: [&str; 7] = [
    "running",
    "completed",
    "failed",
    "timeout",
    "cancelled",
    "lost",
    "awaiting_approval",
];

impl Maintenance {
    /// Counts the background task records of every namespace and agent of the workspace, as
    /// the shared store holds them (so every replica reports the same numbers). Unreadable
    /// record files are skipped.
    ///
    /// # Errors
    /// [`MaintenanceError::Fs`] when the filesystem fails listing.
    pub async fn task_census(&self) -> Result<TaskCensus, MaintenanceError> {
        let mut census = TaskCensus {
            by_state: TASK_STATES.iter().map(|state| ((*state).to_owned(), 0)).collect(),
            pending_calls: 0,
        };
        for (namespace, _, _) in self.namespaces(&Target::default()).await? {
            let fs: Arc<dyn Filesystem> = if namespace.is_root() {
                Arc::clone(&self.fs)
            } else {
                Arc::new(Namespaced::new(Arc::clone(&self.fs), namespace.clone()))
            };
            for agent in agents(fs.as_ref()).await? {
                let dir = WsPath::parse(&format!("agents/{agent}/tasks")).unwrap_or_default();
                let files = match fs.list(&dir).await {
                    Ok(entries) => entries,
                    Err(FsError::NotFound { .. }) => continue,
                    Err(err) => return Err(fs_error(dir, err)),
                };
                for file in files
                    .into_iter()
                    .filter(|e| !e.is_dir && e.path.as_str().ends_with(".json"))
                {
                    let Ok(bytes) = fs.read(&file.path).await else { continue };
                    let Ok(tasks) = serde_json::from_slice::<TaskFile>(&bytes) else {
                        continue;
                    };
                    for task in tasks.tasks.values() {
                        let state = match serde_json::to_value(task.status) {
                            Ok(serde_json::Value::String(name)) => name,
                            _ => "unknown".to_owned(),
                        };
                        *census.by_state.entry(state).or_default() += 1;
                        if task.status == TaskStatus::AwaitingApproval {
                            census.pending_calls += u64::try_from(task.pending.len()).unwrap_or(u64::MAX);
                        }
                    }
                }
            }
        }
        Ok(census)
    }
}

/// `(agent, session)` pairs a running or approval-waiting task references: its parent
/// session and its child's session.
async fn live_tasks(fs: &dyn Filesystem) -> Result<HashSet<(String, String)>, MaintenanceError> {
    let mut live = HashSet::new();
    for agent in agents(fs).await? {
        let dir = WsPath::parse(&format!("agents/{agent}/tasks")).unwrap_or_default();
        let files = match fs.list(&dir).await {
            Ok(entries) => entries,
            Err(FsError::NotFound { .. }) => continue,
            Err(err) => return Err(fs_error(dir, err)),
        };
        for file in files.into_iter().filter(|e| !e.is_dir) {
            let Some(parent) = file.path.file_name().strip_suffix(".json") else {
                continue;
            };
            let Ok(bytes) = fs.read(&file.path).await else { continue };
            let Ok(tasks) = serde_json::from_slice::<TaskFile>(&bytes) else {
                // Unreadable records: keep the session they belong to.
                live.insert((agent.as_str().to_owned(), parent.to_owned()));
                continue;
            };
            for task in tasks.tasks.values() {
                if matches!(task.status, TaskStatus::Running | TaskStatus::AwaitingApproval) {
                    live.insert((agent.as_str().to_owned(), parent.to_owned()));
                    live.insert((task.agent_id.clone(), task.child_session.clone()));
                }
            }
        }
    }
    Ok(live)
}

/// Removes `sessions` from the index at `path` with compare-and-set writes.
async fn remove_index_entries(fs: &dyn Filesystem, path: &WsPath, sessions: &BTreeSet<String>) -> Result<(), FsError> {
    for _attempt in 0..8 {
        let (bytes, version) = match fs.read_versioned(path).await {
            Ok(read) => read,
            Err(FsError::NotFound { .. }) => return Ok(()),
            Err(err) => return Err(err),
        };
        let Ok(mut index) = serde_json::from_slice::<SessionIndex>(&bytes) else {
            return Ok(()); // corrupt: the next turn's index write keeps it aside
        };
        let before = index.sessions.len();
        index.sessions.retain(|id, _| !sessions.contains(id));
        if index.sessions.len() == before {
            return Ok(());
        }
        let bytes = serde_json::to_vec_pretty(&index).map_err(|err| FsError::Io {
            path: path.clone(),
            operation: "encode",
            source: Box::new(err),
        })?;
        match fs.write(path, &bytes, WriteMode::IfMatch(version)).await {
            Ok(()) => return Ok(()),
            Err(FsError::Conflict { .. }) => {}
            Err(err) => return Err(err),
        }
    }
    Err(FsError::Conflict { path: path.clone() })
}

/// The creation time (ms since the epoch) a UUIDv7 snapshot id records; `None` for any
/// other name.
fn uuid_v7_ms(id: &str) -> Option<i64> {
    let hex: String = id.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) || hex.as_bytes()[12] != b'7' {
        return None;
    }
    i64::from_str_radix(&hex[..12], 16).ok()
}

/// `[sandbox.snapshots]`' store with its heads in `[state]`'s backend (what the sandbox
/// capability opens), when the workspace configures it.
async fn open_snapshots(
    dir: &std::path::Path,
    config: &harness::HarnessConfig,
    state: &harness::state::StateConfig,
) -> Result<Option<(harness_snapshot::Snapshots, Arc<dyn harness_store::KvStore>)>, MaintenanceError> {
    let section = config
        .section::<harness_sandbox::SandboxSection>()
        .map_err(|err| MaintenanceError::Open(err.to_string()))?;
    let Some(settings) = section.as_ref().and_then(|section| section.snapshots.as_ref()) else {
        return Ok(None);
    };
    let Some(heads) = harness::state::open_kv(state, "sandbox")
        .await
        .map_err(|err| MaintenanceError::Open(harness_core::error_chain(&err)))?
    else {
        return Ok(None);
    };
    let (snapshots, _) = settings.open(dir, Arc::clone(&heads)).map_err(MaintenanceError::Open)?;
    Ok(Some((snapshots, heads)))
}
