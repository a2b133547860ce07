//! [`CallBinder`]: what an agent runtime needs to give each call its sandbox: the manager,
//! the scope and network `[sandbox]` chose, and where the work trees live
//! (`<work_root>/<scope-hash>`, holding none of the harness's data).

use crate::manager::{BoundSandbox, SandboxManager, SandboxScope, ScopeKey};
use crate::provider::{Network, SandboxError, SandboxProvider};
use crate::section::SandboxSection;
use async_trait::async_trait;
use harness_core::{AgentError, AgentNext, CancellationToken, Hooks, Middleware, SessionLease, Turn};
use harness_fs::{CallReadOnlyShell, CallScope, CallShell, CallWorkTree, Shell};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Binds the sandbox of each call's scope key. One per agent (its children share it).
pub struct CallBinder {
    manager: SandboxManager,
    scope: SandboxScope,
    network: Network,
    work_root: PathBuf,
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
        let owner = format!("harness-{}", std::process::id());
        Self {
            manager: SandboxManager::new(provider, lease, states, owner),
            scope: section.scope_or(default_scope),
            network: section.network,
            work_root: section.work_root(workspace),
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
        let key = ScopeKey::for_call(self.scope, call);
        self.manager
            .acquire(&key, self.work_tree(&key), self.network, cancel)
            .await
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
        self.manager.shutdown().await
    }
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
        let bound = match turn.ctx().get::<CallSandbox>() {
            Some(CallSandbox(parent)) => parent.clone(),
            None => {
                let scope = turn.ctx().get::<CallScope>().ok_or_else(|| AgentError::Refused {
                    what: "a sandboxed call needs a bound scope".to_owned(),
                })?;
                let cancel = turn.ctx().cancellation().clone();
                self.0.bind(scope, &cancel).await.map_err(refused)?
            }
        };
        let ctx = turn.ctx_mut();
        ctx.insert(CallShell(self.0.shell(&bound)));
        ctx.insert(CallReadOnlyShell(self.0.read_only_shell(&bound)));
        ctx.insert(CallWorkTree(bound.sandbox().filesystem()));
        ctx.insert(CallSandbox(bound));
        next.run(turn).await
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
