//! [`CallBinder`]: what an agent runtime needs to give each call its sandbox: the manager,
//! the scope and network `[sandbox]` chose, and where the work trees live
//! (`<work_root>/<scope-hash>`, holding none of the harness's data).

use crate::manager::{BoundSandbox, SandboxManager, SandboxScope, ScopeKey};
use crate::provider::{Network, SandboxError, SandboxProvider};
use crate::section::SandboxSection;
use crate::snapshot::{PersistPolicy, Projection, SnapshottingManager};
use async_trait::async_trait;
use harness_core::{AgentError, AgentNext, CancellationToken, Hooks, Middleware, SessionLease, Turn};
use harness_fs::{CallReadOnlyShell, CallScope, CallShell, CallWorkTree, Shell};
use harness_snapshot::Snapshots;
use sha2::Digest;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// The lifecycle behind a binder: plain (the work tree stays on this host) or with snapshots.
enum Lifecycle {
    Plain(SandboxManager),
    Snapshotting(Arc<SnapshottingManager>),
}

/// Binds the sandbox of each call's scope key. One per agent (its children share it).
pub struct CallBinder {
    /// Set once the orphans of an earlier process were reclaimed (at the first bind).
    started: tokio::sync::OnceCell<()>,
    manager: Lifecycle,
    scope: SandboxScope,
    network: Network,
    work_root: PathBuf,
    /// `[sandbox] projection_roots`: written into every new instance.
    projection: Projection,
    /// Without snapshots: the instance each key was last bound to (a new one is projected).
    instances: Mutex<HashMap<ScopeKey, String>>,
    /// The idle persist task (`on_idle`), ended and awaited at shutdown.
    idle_task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for CallBinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallBinder")
            .field("scope", &self.scope)
            .field("work_root", &self.work_root)
            .finish_non_exhaustive()
    }
}

impl CallBinder {
    /// A binder for `section` in the workspace at `workspace`, starting sandboxes with
    /// `provider` and holding each scope key under `lease`; `default_scope` is the agent's
    /// isolation scope. Sandbox states are kept in memory (instances are process-local).
    pub fn new(
        section: &SandboxSection,
        provider: Arc<dyn SandboxProvider>,
        lease: Arc<dyn SessionLease>,
        workspace: &Path,
        default_scope: SandboxScope,
    ) -> Self {
        let states = Arc::new(harness_store::InMemoryKv::default());
        let work_root = section.work_root(workspace);
        let owner = owner_of(&work_root);
        Self {
            started: tokio::sync::OnceCell::new(),
            manager: Lifecycle::Plain(SandboxManager::new(provider, lease, states, owner)),
            scope: section.scope_or(default_scope),
            network: section.network,
            work_root,
            projection: section.projection(workspace),
            instances: Mutex::new(HashMap::new()),
            idle_task: Mutex::new(None),
        }
    }

    /// Work trees saved to `snapshots` and restored from them (persisted as `policy` says):
    /// a scope key continued in another process or on another replica sharing the heads'
    /// state store and the snapshot objects finds its tree restored.
    #[must_use]
    pub fn with_snapshots(mut self, snapshots: Snapshots, policy: PersistPolicy) -> Self {
        self.manager = match self.manager {
            Lifecycle::Plain(manager) => Lifecycle::Snapshotting(Arc::new(
                SnapshottingManager::new(manager, snapshots, policy).with_projection_source(self.projection.clone()),
            )),
            Lifecycle::Snapshotting(managed) => Lifecycle::Snapshotting(managed),
        };
        self
    }

    /// At start: destroys the instances an earlier process of this owner left behind.
    ///
    /// # Errors
    /// The provider's errors.
    pub async fn start(&self) -> Result<usize, SandboxError> {
        match &self.manager {
            Lifecycle::Plain(manager) => manager.reclaim_orphans().await,
            Lifecycle::Snapshotting(managed) => managed.start().await,
        }
    }

    /// The work tree of `key`.
    pub fn work_tree(&self, key: &ScopeKey) -> PathBuf {
        self.work_root.join(key.dir_name())
    }

    /// The sandbox of `call` (shared with concurrent calls of its scope key).
    ///
    /// # Errors
    /// As [`SandboxManager::acquire`]: a host that cannot provide the sandbox fails here.
    pub async fn bind(&self, call: &CallScope, cancel: &CancellationToken) -> Result<BoundSandbox, SandboxError> {
        self.started
            .get_or_init(|| async {
                // With `on_idle`: a task persisting idle keys while this binder lives (it
                // ends once the binder is dropped).
                if let Lifecycle::Snapshotting(managed) = &self.manager {
                    *self.idle_task.lock().unwrap_or_else(PoisonError::into_inner) =
                        SnapshottingManager::spawn_idle_persist(managed);
                }
                match self.start().await {
                    Ok(0) => {}
                    Ok(reclaimed) => tracing::info!(reclaimed, "sandbox instances of an earlier process reclaimed"),
                    Err(err) => {
                        tracing::warn!(error = %harness_core::error_chain(&err), "reclaiming orphan sandboxes failed")
                    }
                }
            })
            .await;
        let key = ScopeKey::for_call(self.scope, call);
        match &self.manager {
            Lifecycle::Plain(manager) => {
                let bound = manager
                    .acquire(&key, self.work_tree(&key), self.network, cancel)
                    .await?;
                let instance = bound.state().instance.clone();
                let previous = self
                    .instances
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(key.clone(), instance.clone());
                if !self.projection.is_none() && previous.as_ref() != Some(&instance) {
                    let files = self.projection.collect().await?;
                    crate::snapshot::apply_projection(bound.sandbox().as_ref(), &files).await?;
                }
                Ok(bound)
            }
            Lifecycle::Snapshotting(managed) => {
                let acquired = managed
                    .acquire(&key, self.work_tree(&key), self.network, cancel)
                    .await?;
                tracing::debug!(key = key.as_str(), branch = ?acquired.branch, "sandbox bound");
                Ok(acquired.bound)
            }
        }
    }

    /// Ends a call's hold of `bound`: with snapshots, its work tree is persisted first (when
    /// the policy says so).
    ///
    /// # Errors
    /// As [`SnapshottingManager::release`]; the hold ends either way.
    pub async fn release(&self, bound: BoundSandbox) -> Result<(), SandboxError> {
        match &self.manager {
            Lifecycle::Plain(_) => Ok(()),
            Lifecycle::Snapshotting(managed) => managed.release(bound).await.map(|_| ()),
        }
    }

    /// The shell of `bound` for `execute`: denials come back explained.
    pub fn shell(&self, bound: &BoundSandbox) -> Arc<dyn Shell> {
        crate::denials::explaining(bound.sandbox().shell(), self.network)
    }

    /// The read-only (plan mode) shell of `bound`: the work tree read-only at the Landlock
    /// level; denials come back explained.
    pub fn read_only_shell(&self, bound: &BoundSandbox) -> Arc<dyn Shell> {
        crate::denials::explaining(bound.sandbox().read_only_shell(), self.network)
    }

    /// Shuts down the idle sandboxes.
    ///
    /// # Errors
    /// As [`SandboxManager::shutdown`].
    pub async fn shutdown(&self) -> Result<(), SandboxError> {
        match &self.manager {
            Lifecycle::Plain(manager) => manager.shutdown().await,
            Lifecycle::Snapshotting(managed) => {
                // No idle persist runs past this point (its lease hold would outlive the process).
                managed.stop_idle_persist();
                let task = self.idle_task.lock().unwrap_or_else(PoisonError::into_inner).take();
                if let Some(task) = task {
                    let _ = task.await;
                }
                managed.evict_idle().await
            }
        }
    }
}

/// The owner tag of the sandboxes whose work trees are under `work_root`. Stable per work
/// root, so a later process finds (by this tag) the instances a killed one left; a live
/// process's instances are never orphans (their locks are held).
pub(crate) fn owner_of(work_root: &Path) -> String {
    let digest = sha2::Sha256::digest(work_root.display().to_string().as_bytes());
    format!("harness-{}", &hex::encode(digest)[..16])
}

/// The init binary when `[sandbox] init` is unset: `harness-sandbox-init` beside the running
/// program, else the program itself (the `harness` binary is its own init when started as
/// `/.harness-init`).
pub fn default_init() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let sibling = exe.with_file_name("harness-sandbox-init");
    if sibling.is_file() { sibling } else { exe }
}

impl SandboxSection {
    /// The provider the section describes (init: [`default_init`] unless set).
    pub fn provider(&self) -> Arc<dyn SandboxProvider> {
        Arc::new(crate::NamespaceProvider::new(self.namespace_config(&default_init())))
    }

    /// [`validate`](Self::validate)s the section, then proves the host provides it (fails
    /// closed, naming the cause and the fix) and returns the probed provider.
    ///
    /// # Errors
    /// The message to show the operator.
    pub async fn probed_provider(&self, workspace: &Path) -> Result<Arc<dyn SandboxProvider>, String> {
        self.validate(workspace)?;
        let provider = self.provider();
        provider
            .probe()
            .await
            .map_err(|err| format!("the host cannot provide the sandbox: {err}"))?;
        Ok(provider)
    }
}

/// On the call context of a sandboxed turn: its binding (held while the turn, or a child it
/// started, runs). A child's turn gets a clone, so it shares the parent's sandbox.
#[derive(Debug, Clone)]
pub struct CallSandbox(pub BoundSandbox);

/// The middleware (the agent hook, around a whole call) that binds the call's sandbox: the
/// context's [`CallSandbox`] when a parent put one there, else [`CallBinder::bind`]; then the
/// sandbox's shell is the call's [`CallShell`] (its read-only shell the call's
/// [`CallReadOnlyShell`], for plan mode) and its work tree the call's [`CallWorkTree`].
/// A host that cannot provide the sandbox fails the call ([`AgentError::Refused`]).
pub struct BindCall(pub Arc<CallBinder>);

#[async_trait]
impl Middleware for BindCall {
    fn name(&self) -> &'static str {
        "sandbox"
    }

    fn hooks(&self) -> Hooks {
        Hooks::AGENT
    }

    async fn agent(&self, turn: &mut Turn, next: AgentNext<'_>) -> Result<(), AgentError> {
        let (bound, ours) = match turn.ctx().get::<CallSandbox>() {
            Some(CallSandbox(parent)) => (parent.clone(), false),
            None => {
                let scope = turn.ctx().get::<CallScope>().ok_or_else(|| AgentError::Refused {
                    what: "a sandboxed call needs a bound scope".to_owned(),
                })?;
                let cancel = turn.ctx().cancellation().clone();
                (self.0.bind(scope, &cancel).await.map_err(refused)?, true)
            }
        };
        // The hosts a person granted this session hold for every sandbox it binds.
        crate::grants::apply_session_grants(turn.session(), &bound);
        let ctx = turn.ctx_mut();
        ctx.insert(CallShell(self.0.shell(&bound)));
        ctx.insert(CallReadOnlyShell(self.0.read_only_shell(&bound)));
        ctx.insert(CallWorkTree(bound.sandbox().filesystem()));
        ctx.insert(CallSandbox(bound.clone()));
        let result = next.run(turn).await;
        // The call that bound the sandbox releases it (a child's turn leaves it to its parent).
        if ours && let Err(err) = self.0.release(bound).await {
            tracing::warn!(error = %harness_core::error_chain(&err), "sandbox snapshot on release failed");
        }
        result
    }
}

fn refused(err: SandboxError) -> AgentError {
    match err {
        SandboxError::Lease(harness_core::LeaseError::Cancelled) => AgentError::Cancelled,
        SandboxError::Probe(probe) => AgentError::Refused {
            what: format!("the sandbox cannot start: {probe}"),
        },
        other => AgentError::Capability {
            capability: "sandbox",
            source: Box::new(other),
        },
    }
}
