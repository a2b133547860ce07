//! `[sandbox]`: the model's shell and file tools confined to a sandbox bound per call
//! (`harness-sandbox`). Thin glue: the section's meaning, the provider, the manager and the
//! denial notes live in that crate.
//!
//! Around each call (its middleware at [`Layer::Sandbox`]) the call's sandbox is bound under
//! its scope key (`[sandbox] scope`, default the agent's isolation scope): its shell becomes
//! the call's [`CallShell`] (`execute`), its work tree the call's [`CallWorkTree`] (the file
//! tools), both the same directory, `<work_root>/<scope-hash>`, which holds none of the
//! harness's data. A child's turn started by a sandboxed turn shares its binding
//! ([`SandboxedCall`]); a child agent shares the parent's manager. Fails closed: a host that
//! cannot provide the sandbox fails the call (and the workspace loader probes at start), never
//! a host shell; `[filesystem] kind = "local_shell"` with `[sandbox]` is a build error.

use crate::capability::{Capability, CapabilityError, ConfigSection, Layer, Registration, Setup};
use crate::facts::{SandboxedCall, SandboxedShell};
use async_trait::async_trait;
use harness_core::{AgentError, AgentNext, Hooks, Middleware, Turn};
use harness_fs::{CallScope, CallShell, CallWorkTree};
use harness_sandbox::{
    BoundSandbox, NamespaceProvider, Network, SandboxError, SandboxManager, SandboxProvider, SandboxScope,
    SandboxSection, ScopeKey,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

impl ConfigSection for SandboxSection {
    const KEY: &'static str = SandboxSection::KEY;
}

/// A provider to use instead of one built from `[sandbox]` (the workspace loader passes the
/// one it probed; tests pass doubles).
#[derive(Clone)]
pub struct SandboxProviderSetting(pub Arc<dyn SandboxProvider>);

/// The init binary when `[sandbox] init` is unset: `harness-sandbox-init` beside the running
/// program, else the program itself (the `harness` binary is its own init when started as
/// `/.harness-init`).
pub fn default_init() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let sibling = exe.with_file_name("harness-sandbox-init");
    if sibling.is_file() { sibling } else { exe }
}

/// The provider `[sandbox]` describes.
pub fn provider(section: &SandboxSection) -> Arc<dyn SandboxProvider> {
    Arc::new(NamespaceProvider::new(section.namespace_config(&default_init())))
}

/// What a parent and its children share.
struct Runtime {
    manager: SandboxManager,
    scope: SandboxScope,
    network: Network,
    work_root: PathBuf,
}

#[derive(Clone)]
struct Shared(Arc<Runtime>);

pub(crate) const REGISTRATION: Registration = Registration::new("sandbox", build).with_section::<SandboxSection>();

fn build(setup: &mut Setup<'_>) -> Result<Option<Arc<dyn Capability>>, CapabilityError> {
    let Some(section) = setup.section::<SandboxSection>()? else {
        return Ok(None);
    };
    if setup.workspace().filesystem().shell().is_some() {
        return Err(CapabilityError::new(
            "sandbox",
            "[filesystem] kind = \"local_shell\" and [sandbox] cannot be used together: local_shell is the unconfined host \
             shell; remove one of them ([sandbox] confines `execute`)",
        ));
    }
    let runtime = match setup.take::<Shared>() {
        Some(Shared(runtime)) => runtime,
        None => {
            section
                .validate(setup.root())
                .map_err(|message| CapabilityError::new("sandbox", message))?;
            let provider = setup
                .take::<SandboxProviderSetting>()
                .map_or_else(|| provider(&section), |setting| setting.0);
            let lease = setup.inherited.session_lease.clone().unwrap_or_else(|| {
                Arc::new(harness_store::FileLease::new(
                    setup.root().join(".harness").join("locks"),
                ))
            });
            let owner = format!("harness-{}", std::process::id());
            let states = Arc::new(harness_store::InMemoryKv::default());
            Arc::new(Runtime {
                manager: SandboxManager::new(provider, lease, states, owner),
                scope: section.scope_or(setup.isolation().into()),
                network: section.network,
                work_root: section.work_root(setup.root()),
            })
        }
    };
    setup.inherit(Shared(Arc::clone(&runtime)));
    setup.provide(SandboxedShell(harness_sandbox::prompt_line(
        section.network,
        section.read_only.len(),
    )));
    Ok(Some(Arc::new(Sandboxed(runtime))))
}

struct Sandboxed(Arc<Runtime>);

#[async_trait]
impl Capability for Sandboxed {
    fn name(&self) -> &'static str {
        "sandbox"
    }

    fn middleware(&self, _: &crate::capability::Assembly) -> Vec<(Layer, Arc<dyn Middleware>)> {
        vec![(
            Layer::Sandbox,
            Arc::new(Bind(Arc::clone(&self.0))) as Arc<dyn Middleware>,
        )]
    }

    async fn shutdown(&self, _deadline: tokio::time::Instant) {
        if let Err(err) = self.0.manager.shutdown().await {
            tracing::warn!(error = %harness_core::error_chain(&err), "sandbox shutdown");
        }
    }
}

/// The work tree of `key` under `root`.
fn work_tree(root: &Path, key: &ScopeKey) -> PathBuf {
    root.join(key.dir_name())
}

struct Bind(Arc<Runtime>);

#[async_trait]
impl Middleware for Bind {
    fn name(&self) -> &'static str {
        "sandbox"
    }

    fn hooks(&self) -> Hooks {
        Hooks::AGENT
    }

    async fn agent(&self, turn: &mut Turn, next: AgentNext<'_>) -> Result<(), AgentError> {
        let parent = turn
            .ctx()
            .get::<SandboxedCall>()
            .and_then(|call| Arc::clone(&call.0).downcast::<BoundSandbox>().ok());
        let bound = match parent {
            Some(bound) => bound,
            None => {
                let scope = turn.ctx().get::<CallScope>().ok_or_else(|| AgentError::Refused {
                    what: "a sandboxed call needs a bound scope".to_owned(),
                })?;
                let key = ScopeKey::for_call(self.0.scope, scope);
                let tree = work_tree(&self.0.work_root, &key);
                let cancel = turn.ctx().cancellation().clone();
                Arc::new(
                    self.0
                        .manager
                        .acquire(&key, tree, self.0.network, &cancel)
                        .await
                        .map_err(refused)?,
                )
            }
        };
        let sandbox = bound.sandbox();
        let ctx = turn.ctx_mut();
        ctx.insert(CallShell(harness_sandbox::explaining(sandbox.shell(), self.0.network)));
        ctx.insert(CallWorkTree(sandbox.filesystem()));
        ctx.insert(SandboxedCall(bound));
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
