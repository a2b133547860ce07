//! Sandbox snapshots: a work tree saved when a binding is released and restored, inside the
//! sandbox, when the scope key comes back on a new instance — in this process, a later one,
//! or another replica sharing the state store and the snapshot store.
//!
//! [`SnapshottingManager`] wraps a [`SandboxManager`]. Each acquisition takes one of four
//! branches ([`RestoreBranch`]):
//!
//! - **warm**: the live instance of this process is reused as is;
//! - **stopped**: a new instance on the work tree this host already holds, when that tree is
//!   the current head (its marker says so) or no snapshot exists;
//! - **snapshot**: a new instance whose work tree is stale or empty while a head exists: the
//!   tree is cleared and the head chain imported;
//! - **cold**: no head and an empty tree: the instance starts from the projection alone.
//!
//! Every new instance (stopped, snapshot, cold; never warm) then gets the projection
//! ([`SnapshottingManager::with_projection_source`], [`Projection`]): workspace files written
//! through the sandbox's work-tree filesystem after any import — unless the tree it starts
//! from already holds the current projection: each snapshot's manifest records the hash of
//! the projection of the instance it was taken from (`projection_hash`), so a restored tree
//! whose projection is unchanged is not re-projected, and one whose projection changed, or a
//! tree of unknown projection (cold, or no snapshot), is. The hash belongs to the instance
//! that was projected, never to the scope: a new instance never inherits "already
//! projected" from an earlier one unless its tree came from that instance's snapshot.
//!
//! Persisting happens on release, on eviction, and after an idle time
//! ([`PersistPolicy::on_idle`], [`SnapshottingManager::spawn_idle_persist`]); retention runs
//! after each persist, under the store's retention lease (one process at a time,
//! [`Snapshots::collect_exclusive`]).
//!
//! The import runs **inside** the sandbox: the init binary's `unpack` mode, as the sandbox
//! uid under its Landlock rules and seccomp filter, reads the plan and the archive (fetched and
//! verified against its hash by the host) on stdin. The host never writes into the tree.

use crate::manager::{BoundSandbox, SandboxManager, ScopeKey};
use crate::process::SpawnRequest;
use crate::provider::{Network, Sandbox, SandboxError};
use harness_core::CancellationToken;
use harness_snapshot::{Persisted, Restore, SnapshotError, Snapshots, UnpackPlan, UnpackReport, WriterFence};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;

mod projection;

pub use projection::{ProjectedFiles, Projection, apply as apply_projection, check_root as check_projection_root};

/// How long a persist waits for the store's retention lease before leaving retention to
/// the process that holds it.
const RETENTION_WAIT: Duration = Duration::from_secs(1);

/// Where the init binary is inside every sandbox (see the namespace backend's mount view).
const INIT_IN_SANDBOX: &str = "/.harness-init";

/// Which of the four restore branches an acquisition took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RestoreBranch {
    /// The live instance was reused.
    Warm,
    /// A new instance on the work tree this host holds (it is current).
    Stopped,
    /// A new instance; the head snapshot was imported.
    Snapshot,
    /// A new instance on an empty tree with no snapshot.
    Cold,
}

impl RestoreBranch {
    /// Whether the instance is new (the workspace projection must be applied to it).
    pub fn is_new_instance(self) -> bool {
        self != Self::Warm
    }
}

/// When work trees are persisted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PersistPolicy {
    /// On [`SnapshottingManager::release`].
    pub on_release: bool,
    /// On [`SnapshottingManager::evict_idle`] (for each key released since its last
    /// snapshot... persisted under a fresh hold of its lease).
    pub on_evict: bool,
    /// After a key has been released (and not persisted) and left unbound this long, its
    /// tree is persisted under a fresh hold of its lease, without waiting for eviction
    /// ([`SnapshottingManager::spawn_idle_persist`]). `None`: never.
    pub on_idle: Option<Duration>,
}

impl Default for PersistPolicy {
    fn default() -> Self {
        Self {
            on_release: true,
            on_evict: true,
            on_idle: None,
        }
    }
}

/// A bound sandbox and the branch its acquisition took.
#[derive(Debug, Clone)]
pub struct Acquired {
    /// The binding.
    pub bound: BoundSandbox,
    /// The branch.
    pub branch: RestoreBranch,
    /// Whether the projection was written into the tree by this acquisition (a new
    /// instance whose tree did not hold the current projection already).
    pub projected: bool,
}

/// Snapshot errors as sandbox errors.
fn snapshot_error(err: SnapshotError) -> SandboxError {
    SandboxError::Io {
        operation: "sandbox snapshot",
        source: std::io::Error::other(err),
    }
}

/// The host-side marker of which head a work tree reflects: a sibling file of the tree
/// (outside the sandbox's mount).
fn marker_path(work_tree: &Path) -> PathBuf {
    let mut name = work_tree
        .file_name()
        .map(|name| name.to_os_string())
        .unwrap_or_default();
    name.push(".snapshot-head");
    work_tree.with_file_name(name)
}

fn read_marker(work_tree: &Path) -> Option<Vec<String>> {
    let bytes = std::fs::read(marker_path(work_tree)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

fn write_marker(work_tree: &Path, chain: &[String]) -> Result<(), SandboxError> {
    let json = serde_json::to_vec(chain).map_err(|err| SandboxError::Io {
        operation: "encode snapshot marker",
        source: std::io::Error::other(err),
    })?;
    let path = marker_path(work_tree);
    let temporary = path.with_extension("snapshot-head.tmp");
    std::fs::write(&temporary, json)
        .and_then(|()| std::fs::rename(&temporary, &path))
        .map_err(|source| SandboxError::Io {
            operation: "write snapshot marker",
            source,
        })
}

/// The top-level entries of a work tree that a restore clears (not the sandbox's own
/// temporary and cache directories).
fn top_level_entries(work_tree: &Path) -> Result<Vec<String>, SandboxError> {
    let mut names = Vec::new();
    let listing = std::fs::read_dir(work_tree).map_err(|source| SandboxError::Io {
        operation: "list work tree",
        source,
    })?;
    for entry in listing {
        let entry = entry.map_err(|source| SandboxError::Io {
            operation: "list work tree",
            source,
        })?;
        if let Some(name) = entry.file_name().to_str()
            && name != ".tmp"
            && name != ".cache"
        {
            names.push(name.to_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// Imports `restore` into `sandbox`'s work tree, inside the sandbox: each layer is streamed
/// to the init's `unpack` mode. `clear` lists paths removed first (a stale tree).
///
/// # Errors
/// [`SandboxError::Spawn`] when the unpacker cannot start, [`SandboxError::Io`] when a layer
/// fails (its report's error: a limit, a malformed or mismatching archive).
pub async fn restore_in_sandbox(
    sandbox: &dyn Sandbox,
    restore: &Restore,
    clear: Vec<String>,
) -> Result<Vec<UnpackReport>, SandboxError> {
    let mut reports = Vec::with_capacity(restore.layers.len());
    let mut clear = Some(clear);
    for layer in &restore.layers {
        let mut plan: UnpackPlan = layer.plan.clone();
        if let Some(mut first) = clear.take() {
            first.extend(plan.deleted);
            plan.deleted = first;
        }
        let report = unpack_layer(sandbox, &plan, &layer.archive).await?;
        reports.push(report);
    }
    Ok(reports)
}

/// Archive bytes sent to the unpacker ahead of what it reported read: the init relays stdin
/// without flow control of its own, so the sender keeps at most this much in flight (in the
/// init's buffer and the pipes) instead of the whole archive.
const UNPACK_WINDOW: u64 = 16 << 20;

async fn unpack_layer(sandbox: &dyn Sandbox, plan: &UnpackPlan, archive: &Path) -> Result<UnpackReport, SandboxError> {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let io = |operation: &'static str| move |source: std::io::Error| SandboxError::Io { operation, source };
    let mut process = sandbox.spawn(SpawnRequest::new([INIT_IN_SANDBOX, "unpack"])).await?;
    let mut stdin = process.take_stdin().ok_or_else(|| SandboxError::Spawn {
        message: "the unpacker has no stdin".to_owned(),
    })?;
    let stdout = process.take_stdout().ok_or_else(|| SandboxError::Spawn {
        message: "the unpacker has no stdout".to_owned(),
    })?;
    let mut line = serde_json::to_vec(plan).map_err(|err| io("encode unpack plan")(std::io::Error::other(err)))?;
    line.push(b'\n');
    let (consumed_tx, mut consumed) = tokio::sync::watch::channel(0u64);
    let reader = async move {
        let mut lines = BufReader::new(stdout).lines();
        let mut report = None;
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(count) = line.strip_prefix(harness_snapshot::PROGRESS_PREFIX) {
                if let Ok(count) = count.trim().parse::<u64>() {
                    let _ = consumed_tx.send(count);
                }
            } else if report.is_none() && !line.trim().is_empty() {
                report = Some(line);
            }
        }
        report
    };
    let writer = async {
        stdin.write_all(&line).await?;
        let mut file = BufReader::with_capacity(256 << 10, tokio::fs::File::open(archive).await?);
        let mut sent = 0u64;
        loop {
            let chunk = file.fill_buf().await?;
            if chunk.is_empty() {
                break;
            }
            let length = chunk.len();
            stdin.write_all(chunk).await?;
            file.consume(length);
            sent += length as u64;
            while sent > consumed.borrow().saturating_add(UNPACK_WINDOW) {
                if consumed.changed().await.is_err() {
                    return Err(std::io::Error::other("the unpacker stopped reading"));
                }
            }
        }
        stdin.shutdown().await
    };
    let (written, out) = tokio::join!(writer, reader);
    let exit = process.wait().await;
    let report: Option<UnpackReport> = out.and_then(|line| serde_json::from_str(&line).ok());
    match report {
        Some(report) if report.error.is_none() && exit.code == Some(0) => Ok(report),
        Some(report) => Err(io("restore snapshot")(std::io::Error::other(
            report
                .error
                .unwrap_or_else(|| format!("the unpacker exited with {exit:?}")),
        ))),
        None => Err(io("restore snapshot")(std::io::Error::other(format!(
            "the unpacker gave no report (exit {exit:?}, stdin {written:?})"
        )))),
    }
}

/// A [`SandboxManager`] whose work trees outlive their instances and hosts. See the module
/// docs.
pub struct SnapshottingManager {
    manager: SandboxManager,
    snapshots: Snapshots,
    policy: PersistPolicy,
    /// The instance each key was last bound to in this process (warm detection), and the
    /// network it was bound with (to bind it again for a persist on eviction).
    seen: Mutex<HashMap<ScopeKey, (String, Network)>>,
    /// Workspace files written into new instances' trees (after a restore, so they win).
    projection: Projection,
    /// The projection hash each live instance's tree holds, by instance id: what its next
    /// snapshot's manifest records.
    projected: Mutex<HashMap<String, String>>,
    /// Keys released without a persist since, and when (the idle persist's work list).
    unsaved: Mutex<HashMap<ScopeKey, Instant>>,
    /// Ends the idle persist task between two rounds ([`stop_idle_persist`](Self::stop_idle_persist)).
    idle_stop: CancellationToken,
}

impl std::fmt::Debug for SnapshottingManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshottingManager")
            .field("manager", &self.manager)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl SnapshottingManager {
    /// Wraps `manager`, keeping snapshots in `snapshots`.
    pub fn new(manager: SandboxManager, snapshots: Snapshots, policy: PersistPolicy) -> Self {
        Self {
            manager,
            snapshots,
            policy,
            seen: Mutex::new(HashMap::new()),
            projection: Projection::None,
            projected: Mutex::new(HashMap::new()),
            unsaved: Mutex::new(HashMap::new()),
            idle_stop: CancellationToken::new(),
        }
    }

    /// Fixed files projected into **new** instances (see
    /// [`with_projection_source`](Self::with_projection_source)).
    #[must_use]
    pub fn with_projection(self, files: Vec<(harness_fs::WsPath, Vec<u8>)>) -> Self {
        self.with_projection_source(Projection::Files(files))
    }

    /// The projection of **new** instances (the stopped, snapshot and cold branches; a warm
    /// instance keeps what it has): its files are read at each new instance and written
    /// through the sandbox's work-tree filesystem after any import, so the workspace's
    /// current version replaces a restored one — unless the tree already holds this very
    /// projection (its snapshot's manifest names the same hash).
    #[must_use]
    pub fn with_projection_source(mut self, projection: Projection) -> Self {
        self.projection = projection;
        self
    }

    /// Projects into the new instance of `bound` when its tree (whose projection hash is
    /// `tree_hash`, `None` when unknown) does not hold the current projection; records the
    /// hash the tree holds afterwards under the instance. Returns whether it wrote.
    async fn project(&self, bound: &BoundSandbox, tree_hash: Option<&str>) -> Result<bool, SandboxError> {
        let files = self.projection.collect().await?;
        let current = tree_hash.is_some_and(|hash| !hash.is_empty() && hash == files.hash);
        let wrote = !current && !files.files.is_empty();
        if wrote {
            apply_projection(bound.sandbox().as_ref(), &files).await?;
        }
        let hash = if wrote || current {
            files.hash
        } else {
            tree_hash.unwrap_or_default().to_owned()
        };
        self.projected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(bound.state().instance.clone(), hash);
        Ok(wrote)
    }

    /// The wrapped manager.
    pub fn manager(&self) -> &SandboxManager {
        &self.manager
    }

    /// The snapshots.
    pub fn snapshots(&self) -> &Snapshots {
        &self.snapshots
    }

    /// At start: destroys the instances this owner left behind (a killed process), by owner
    /// tag. Their work trees and snapshots stay.
    ///
    /// # Errors
    /// The provider's errors.
    pub async fn start(&self) -> Result<usize, SandboxError> {
        self.manager.reclaim_orphans().await
    }

    /// Acquires `key` as [`SandboxManager::acquire`] does, then reconciles the work tree with
    /// the scope's snapshot head (the four branches of the module docs). A live instance whose
    /// tree is no longer the head (another replica moved it since) is not warm: its tree is
    /// cleared and the head imported.
    ///
    /// # Errors
    /// The manager's errors; a failed import (the binding is dropped).
    pub async fn acquire(
        &self,
        key: &ScopeKey,
        work_tree: impl Into<PathBuf>,
        network: Network,
        cancel: &CancellationToken,
    ) -> Result<Acquired, SandboxError> {
        let bound = self.manager.acquire(key, work_tree, network, cancel).await?;
        let state = bound.state().clone();
        let previous = self
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone(), (state.instance.clone(), network));
        let scope = harness_snapshot::scope_name(key.as_str());
        let (head, _) = self.snapshots.heads().get(&scope).await.map_err(snapshot_error)?;
        let work_tree = state.work_tree.clone();
        let current = match &head {
            None => true,
            Some(head) => read_marker(&work_tree).as_ref() == Some(&head.chain),
        };
        if current && previous.is_some_and(|(instance, _)| instance == state.instance) {
            return Ok(Acquired {
                bound,
                branch: RestoreBranch::Warm,
                projected: false,
            });
        }
        let present = top_level_entries(&work_tree)?;
        let branch = match &head {
            None if present.is_empty() => RestoreBranch::Cold,
            None => RestoreBranch::Stopped,
            Some(_) if current => RestoreBranch::Stopped,
            Some(_) => RestoreBranch::Snapshot,
        };
        let tree_hash = if branch == RestoreBranch::Snapshot {
            let restore = self
                .snapshots
                .fetch(&scope)
                .await
                .map_err(snapshot_error)?
                .ok_or_else(|| snapshot_error(SnapshotError::Restore("the head vanished".to_owned())))?;
            restore_in_sandbox(bound.sandbox().as_ref(), &restore, present).await?;
            write_marker(&work_tree, &restore.head.chain)?;
            restore
                .layers
                .last()
                .map(|layer| layer.manifest.projection_hash.clone())
        } else if let Some(head) = head.as_ref().filter(|_| branch == RestoreBranch::Stopped)
            && let Some(last) = head.chain.last()
        {
            // The tree on disk is the head: it holds the head's projection.
            let manifest = self
                .snapshots
                .blobs()
                .manifest(&scope, last)
                .await
                .map_err(snapshot_error)?;
            Some(manifest.projection_hash)
        } else {
            None
        };
        let projected = self.project(&bound, tree_hash.as_deref()).await?;
        Ok(Acquired {
            bound,
            branch,
            projected,
        })
    }

    /// Persists the work tree of `bound` now, under its lease's fence.
    ///
    /// # Errors
    /// A stale fence ([`SnapshotError::is_fenced`] inside), IO and store errors.
    pub async fn persist(&self, bound: &BoundSandbox) -> Result<Persisted, SandboxError> {
        let state = bound.state();
        let scope = harness_snapshot::scope_name(&state.scope_key);
        let fence = WriterFence {
            token: state.fence,
            kv: None,
        };
        // The projection of this very instance (never another's: a new instance has its own).
        let projection_hash = self
            .projected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&state.instance)
            .cloned()
            .unwrap_or_default();
        let persisted = self
            .snapshots
            .persist_with_projection(&scope, &state.work_tree, &fence, &projection_hash)
            .await
            .map_err(snapshot_error)?;
        let chain = match &persisted {
            Persisted::Written { head, .. } => Some(head.chain.clone()),
            Persisted::Unchanged => self
                .snapshots
                .heads()
                .get(&scope)
                .await
                .map_err(snapshot_error)?
                .0
                .map(|head| head.chain),
        };
        if let Some(chain) = chain {
            write_marker(&state.work_tree, &chain)?;
        }
        self.unsaved
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(bound.key());
        let lease = self.manager.lease();
        match self
            .snapshots
            .collect_exclusive(&scope, lease.as_ref(), RETENTION_WAIT)
            .await
        {
            Ok(harness_snapshot::Retention::Busy) => {
                tracing::debug!("snapshot retention left to the process holding its lease");
            }
            Ok(harness_snapshot::Retention::Done { .. }) => {}
            Err(err) => tracing::warn!(error = %harness_core::error_chain(&err), "snapshot retention failed"),
        }
        Ok(persisted)
    }

    /// Ends a binding: persists its work tree first when the policy says so (only this clone
    /// is consumed; the lease ends with the last clone).
    ///
    /// # Errors
    /// As [`persist`](Self::persist); the binding is dropped either way.
    pub async fn release(&self, bound: BoundSandbox) -> Result<Option<Persisted>, SandboxError> {
        if !self.policy.on_release {
            self.mark_unsaved(&bound);
            return Ok(None);
        }
        let persisted = self.persist(&bound).await;
        if persisted.is_err() {
            self.mark_unsaved(&bound);
        }
        drop(bound);
        persisted.map(Some)
    }

    fn mark_unsaved(&self, bound: &BoundSandbox) {
        self.unsaved
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(bound.key().clone(), Instant::now());
    }

    /// Persists every key released without a persist at least `idle` ago and unbound now,
    /// each under a fresh hold of its lease (a key another process holds is skipped: its
    /// holder persists it). Returns how many were persisted.
    pub async fn persist_idle_for(&self, idle: Duration) -> usize {
        let unbound: std::collections::HashSet<ScopeKey> = self.manager.idle_keys().into_iter().collect();
        let due: Vec<ScopeKey> = {
            let unsaved = self.unsaved.lock().unwrap_or_else(PoisonError::into_inner);
            unsaved
                .iter()
                .filter(|(key, since)| since.elapsed() >= idle && unbound.contains(*key))
                .map(|(key, _)| key.clone())
                .collect()
        };
        let mut persisted = 0;
        for key in due {
            let network = self
                .seen
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&key)
                .map_or(Network::Offline, |(_, network)| *network);
            match self.persist_idle(&key, network, Duration::from_secs(5)).await {
                Ok(true) => persisted += 1,
                Ok(false) => {}
                Err(err) => {
                    tracing::warn!(key = key.as_str(), error = %harness_core::error_chain(&err), "persist after idle failed");
                }
            }
        }
        persisted
    }

    /// With [`PersistPolicy::on_idle`]: a task that runs
    /// [`persist_idle_for`](Self::persist_idle_for) a few times per idle period while the
    /// manager lives (it holds it weakly, and ends once the manager is dropped or
    /// [`stop_idle_persist`](Self::stop_idle_persist) is called — between two rounds, never
    /// in the middle of a persist). `None` when the policy has no idle time. Must be called
    /// inside a Tokio runtime.
    pub fn spawn_idle_persist(this: &Arc<Self>) -> Option<tokio::task::JoinHandle<()>> {
        let idle = this.policy.on_idle?;
        let tick = (idle / 4).clamp(Duration::from_millis(10), Duration::from_secs(30));
        let weak = Arc::downgrade(this);
        let stop = this.idle_stop.clone();
        Some(tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(tick) => {}
                }
                let Some(manager) = weak.upgrade() else { break };
                manager.persist_idle_for(idle).await;
            }
        }))
    }

    /// Ends the idle persist task after its current round (await its handle to know when).
    pub fn stop_idle_persist(&self) {
        self.idle_stop.cancel();
    }

    /// Shuts down the idle instances. With [`PersistPolicy::on_evict`], each one's tree is
    /// persisted first, under a fresh hold of its key's lease (a key another process holds
    /// is skipped after `lease_wait`: that holder persists it). The marker lets the next
    /// acquisition on this host take the stopped branch.
    ///
    /// # Errors
    /// As [`SandboxManager::evict_idle`]; a failed persist is logged and the instance still
    /// stops (its last persisted head stays the restore point).
    pub async fn evict_idle(&self) -> Result<(), SandboxError> {
        self.evict_idle_within(std::time::Duration::from_secs(5)).await
    }

    /// [`evict_idle`](Self::evict_idle), waiting at most `lease_wait` for each key's lease.
    ///
    /// # Errors
    /// As [`evict_idle`](Self::evict_idle).
    pub async fn evict_idle_within(&self, lease_wait: std::time::Duration) -> Result<(), SandboxError> {
        if self.policy.on_evict {
            for key in self.manager.idle_keys() {
                let network = self
                    .seen
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get(&key)
                    .map_or(Network::Offline, |(_, network)| *network);
                if let Err(err) = self.persist_idle(&key, network, lease_wait).await {
                    tracing::warn!(key = key.as_str(), error = %harness_core::error_chain(&err), "persist on eviction failed");
                }
            }
        }
        self.manager.evict_idle().await
    }

    async fn persist_idle(
        &self,
        key: &ScopeKey,
        network: Network,
        lease_wait: std::time::Duration,
    ) -> Result<bool, SandboxError> {
        let Some(work_tree) = self.manager.idle_work_tree(key) else {
            return Ok(false);
        };
        let cancel = CancellationToken::new();
        let timer = {
            let cancel = cancel.clone();
            tokio::spawn(async move {
                tokio::time::sleep(lease_wait).await;
                cancel.cancel();
            })
        };
        let acquired = self.acquire(key, work_tree, network, &cancel).await;
        timer.abort();
        let acquired = match acquired {
            Ok(acquired) => acquired,
            // Another process holds the key: its holder persists the tree.
            Err(SandboxError::Lease(harness_core::LeaseError::Cancelled)) => return Ok(false),
            Err(err) => return Err(err),
        };
        self.persist(&acquired.bound).await.map(|_| true)
    }
}
