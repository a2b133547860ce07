//! [`SandboxManager`]: one live sandbox per scope key, bound under the key's lease.
//!
//! Concurrency (decided for the wiring): callers **share** the live sandbox of a scope key.
//! Within one process every concurrent [`acquire`](SandboxManager::acquire) of a key gets the
//! same [`BoundSandbox`] (reference-counted; a parent's turn and its background children hold
//! clones), and the key's lease is taken once, by the first, and released when the last clone
//! is dropped. Across processes (replicas) the lease is exclusive, so another process **waits**
//! until this one lets go. Inside the shared sandbox, shell commands run one at a time in
//! arrival order (see [`Sandbox::shell`]), so two turns never interleave half-run commands.
//!
//! After the last clone is dropped the instance stays warm (background servers keep running)
//! until the key is acquired again, [`evict_idle`](SandboxManager::evict_idle) or
//! [`shutdown`](SandboxManager::shutdown). Each acquisition reconciles the persisted
//! [`SandboxState`] (kept in a [`KvStore`] under the lease's fencing token) with what runs:
//! live → reuse, gone → a new instance on the same work tree.

use crate::provider::{CreateRequest, Network, Resumed, Sandbox, SandboxError, SandboxProvider, SandboxState};
use harness_core::{CancellationToken, LeaseGuard, LeaseKey, SessionLease};
use harness_fs::{CallScope, IsolationScope};
use harness_store::KvStore;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// Which calls share one sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxScope {
    /// One sandbox per session.
    Session,
    /// One per user of an agent (the default, like the isolation scope's).
    #[default]
    User,
    /// One per agent, shared by every user.
    Agent,
    /// One for everything.
    Global,
}

impl From<IsolationScope> for SandboxScope {
    fn from(scope: IsolationScope) -> Self {
        match scope {
            IsolationScope::Session => Self::Session,
            IsolationScope::User => Self::User,
            IsolationScope::Agent => Self::Agent,
            IsolationScope::Global => Self::Global,
        }
    }
}

/// The key a sandbox is bound under (and its lease and state are named by).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScopeKey(LeaseKey);

impl ScopeKey {
    /// The key of `call` under `scope`: the session scope includes the namespace owner and
    /// the session, the user scope the user, the agent scope only the agent.
    pub fn for_call(scope: SandboxScope, call: &CallScope) -> Self {
        let agent = call.agent().as_str();
        let key = match scope {
            SandboxScope::Session => LeaseKey::new(&[
                "sandbox",
                "session",
                agent,
                call.state_key().user_id.as_str(),
                call.session().as_str(),
            ]),
            SandboxScope::User => LeaseKey::new(&["sandbox", "user", agent, call.user().as_str()]),
            SandboxScope::Agent => LeaseKey::new(&["sandbox", "agent", agent]),
            SandboxScope::Global => LeaseKey::new(&["sandbox", "global"]),
        };
        Self(key)
    }

    /// A key named by `key` itself (the MCP servers' sandbox: `sandbox/servers/<agent>`).
    pub(crate) fn from_lease_key(key: LeaseKey) -> Self {
        Self(key)
    }

    /// The lease key.
    pub fn lease_key(&self) -> &LeaseKey {
        &self.0
    }

    /// The key as a string.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    fn state_key(&self) -> String {
        format!("sandboxes/{}", self.0.as_str())
    }
}

/// A sandbox bound to a scope key. Cheap to clone; the binding (and the lease) ends when the
/// last clone is dropped.
#[derive(Clone)]
pub struct BoundSandbox(Arc<Binding>);

impl std::fmt::Debug for BoundSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundSandbox")
            .field("key", &self.0.key.as_str())
            .field("instance", &self.0.state.instance)
            .finish()
    }
}

impl BoundSandbox {
    /// The sandbox.
    pub fn sandbox(&self) -> &Arc<dyn Sandbox> {
        &self.0.sandbox
    }

    /// The scope key it is bound under.
    pub fn key(&self) -> &ScopeKey {
        &self.0.key
    }

    /// Its state as persisted at acquisition (with the lease's fencing token).
    pub fn state(&self) -> &SandboxState {
        &self.0.state
    }

    /// Cancelled when the key's lease was lost: stop using the sandbox.
    pub fn lost(&self) -> CancellationToken {
        self.0.lease.lost()
    }
}

struct Binding {
    key: ScopeKey,
    sandbox: Arc<dyn Sandbox>,
    state: SandboxState,
    lease: LeaseGuard,
    idle: Weak<Mutex<HashMap<ScopeKey, Arc<dyn Sandbox>>>>,
}

/// Sandboxes bound to a call in this process now (every [`SandboxManager`] together).
static BOUND: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many sandboxes calls of this process hold bound now (all managers together): the
/// `harness_sandboxes_active` gauge of `harness serve`'s `/metrics`.
pub fn bound_sandboxes() -> usize {
    BOUND.load(std::sync::atomic::Ordering::Relaxed)
}

impl Drop for Binding {
    fn drop(&mut self) {
        BOUND.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        // Keep the instance warm for the next acquisition of the key.
        if let Some(idle) = self.idle.upgrade() {
            idle.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(self.key.clone(), self.sandbox.clone());
        }
    }
}

type Slot = Arc<tokio::sync::Mutex<Weak<Binding>>>;

/// Binds sandboxes to scope keys. See the module docs for the sharing rules.
pub struct SandboxManager {
    provider: Arc<dyn SandboxProvider>,
    lease: Arc<dyn SessionLease>,
    states: Arc<dyn KvStore>,
    owner: String,
    slots: Mutex<HashMap<ScopeKey, Slot>>,
    idle: Arc<Mutex<HashMap<ScopeKey, Arc<dyn Sandbox>>>>,
}

impl std::fmt::Debug for SandboxManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxManager")
            .field("provider", &self.provider.name())
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

impl SandboxManager {
    /// A manager creating sandboxes with `provider`, holding each key under `lease`, keeping
    /// states in `states`; `owner` tags the instances it creates (for orphan scans).
    pub fn new(
        provider: Arc<dyn SandboxProvider>,
        lease: Arc<dyn SessionLease>,
        states: Arc<dyn KvStore>,
        owner: impl Into<String>,
    ) -> Self {
        Self {
            provider,
            lease,
            states,
            owner: owner.into(),
            slots: Mutex::new(HashMap::new()),
            idle: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The sandbox of `key`, with `work_tree` as its work tree: the live binding when this
    /// process has one (shared), else under a fresh hold of the key's lease (waiting for other
    /// processes to let go), reusing the warm instance when it is still the recorded one.
    ///
    /// # Errors
    /// [`SandboxError::Lease`] (cancelled or backend), [`SandboxError::Store`], and the
    /// provider's errors (a host that cannot provide the sandbox fails here, closed).
    ///
    /// # Cancellation
    /// `cancel` ends the wait for the lease.
    pub async fn acquire(
        &self,
        key: &ScopeKey,
        work_tree: impl Into<PathBuf>,
        network: Network,
        cancel: &CancellationToken,
    ) -> Result<BoundSandbox, SandboxError> {
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            slots.entry(key.clone()).or_default().clone()
        };
        let mut slot = slot.lock().await;
        if let Some(binding) = slot.upgrade() {
            return Ok(BoundSandbox(binding));
        }
        let lease = self
            .lease
            .acquire(key.lease_key(), cancel)
            .await
            .map_err(SandboxError::Lease)?;
        let fence = lease.token().map(|token| token.get());
        let stored = self.states.get(&key.state_key()).await.map_err(SandboxError::Store)?;
        let (previous, version) = match stored {
            Some(item) => (serde_json::from_slice::<SandboxState>(&item.value).ok(), item.version),
            None => (None, 0),
        };
        if let (Some(previous), Some(ours)) = (&previous, fence)
            && previous.fence.is_some_and(|theirs| theirs > ours)
        {
            return Err(SandboxError::Store(harness_store::StoreError::Fenced {
                key: key.state_key(),
                token: harness_core::FencingToken::new(ours),
                current: harness_core::FencingToken::new(previous.fence.unwrap_or(ours)),
            }));
        }
        let warm = self.idle.lock().unwrap_or_else(PoisonError::into_inner).remove(key);
        let work_tree = work_tree.into();
        let mut sandbox = None;
        if let Some(previous) = &previous
            && let Resumed::Live(live) = self.provider.resume(previous).await?
        {
            sandbox = Some(live);
        }
        if let Some(warm) = warm
            && sandbox
                .as_ref()
                .is_none_or(|live| live.state().instance != warm.state().instance)
        {
            // Another holder recorded a newer instance: ours is stale.
            let _ = warm.shutdown().await;
        }
        let sandbox = match sandbox {
            Some(live) if live.state().work_tree == std::fs::canonicalize(&work_tree).unwrap_or_default() => live,
            other => {
                if let Some(stale) = other {
                    let _ = stale.shutdown().await;
                }
                let request = CreateRequest::new(work_tree, self.owner.clone(), key.as_str()).network(network);
                self.provider.create(request).await?
            }
        };
        let mut state = sandbox.state();
        state.fence = fence;
        let json = serde_json::to_vec(&state).map_err(|err| SandboxError::Io {
            operation: "encode sandbox state",
            source: std::io::Error::other(err),
        })?;
        if let Err(err) = self.states.put(&key.state_key(), &json, Some(version)).await {
            let _ = sandbox.shutdown().await;
            return Err(SandboxError::Store(err));
        }
        // Counted from here; the binding's drop uncounts it.
        BOUND.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let binding = Arc::new(Binding {
            key: key.clone(),
            sandbox,
            state,
            lease,
            idle: Arc::downgrade(&self.idle),
        });
        *slot = Arc::downgrade(&binding);
        Ok(BoundSandbox(binding))
    }

    /// The lease the keys are held under.
    pub fn lease(&self) -> &Arc<dyn SessionLease> {
        &self.lease
    }

    /// The keys whose warm instance no binding holds (what [`evict_idle`](Self::evict_idle)
    /// would shut down).
    pub fn idle_keys(&self) -> Vec<ScopeKey> {
        let mut keys: Vec<ScopeKey> = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect();
        keys.sort();
        keys
    }

    /// The work tree of `key`'s idle warm instance, if it has one.
    pub fn idle_work_tree(&self, key: &ScopeKey) -> Option<PathBuf> {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .map(|sandbox| sandbox.state().work_tree)
    }

    /// Shuts down every warm instance no binding holds.
    ///
    /// # Errors
    /// The first shutdown error (the others are still attempted).
    pub async fn evict_idle(&self) -> Result<(), SandboxError> {
        let idle: Vec<_> = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .map(|(_, sandbox)| sandbox)
            .collect();
        let mut first = None;
        for sandbox in idle {
            if let Err(err) = sandbox.shutdown().await {
                first.get_or_insert(err);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Destroys the instances this manager's owner left behind in an earlier process.
    ///
    /// # Errors
    /// The provider's errors.
    pub async fn reclaim_orphans(&self) -> Result<usize, SandboxError> {
        let orphans = self.provider.list_orphans(&self.owner).await?;
        for orphan in &orphans {
            self.provider.destroy(orphan).await?;
        }
        Ok(orphans.len())
    }

    /// Shuts down the idle instances (bound ones end when their last binding is dropped).
    ///
    /// # Errors
    /// As [`evict_idle`](Self::evict_idle).
    pub async fn shutdown(&self) -> Result<(), SandboxError> {
        self.evict_idle().await
    }
}
