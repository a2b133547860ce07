//! `[sandbox]`: `execute` and the file tools confined to a sandbox bound per call (thin glue
//! over `harness-sandbox`'s [`BindCall`] at [`Layer::Sandbox`]). Children share the parent's
//! binder and a child's turn its parent's binding. Fails closed: the loader probes at start,
//! an unprovidable sandbox fails the call, never a host shell; with `local_shell`, a build error.
//! The agent's MCP stdio servers run in its [`ServersSandbox`] ([`SandboxedServers`]).

use crate::capability::{Capability, CapabilityError, ConfigSection, Layer, Registration, Setup};
use crate::facts::SandboxedShell;
use harness_core::Middleware;
use harness_mcp::{ServerProcess, ServerRead, SpawnedServer, StdioCommand, StdioSpawner};
pub use harness_sandbox::bound_sandboxes;
use harness_sandbox::{BindCall, CallBinder, SandboxProcess, SandboxProvider, SandboxSection, ServersSandbox};
use std::sync::Arc;

impl ConfigSection for SandboxSection {
    const KEY: &'static str = SandboxSection::KEY;
}

/// A provider to use instead of one built from `[sandbox]` (the loader's, probed).
#[derive(Clone)]
pub struct SandboxProviderSetting(pub Arc<dyn SandboxProvider>);

/// Where the snapshot heads of `[sandbox.snapshots]` live: the shared state store's server.
#[derive(Clone)]
pub struct SnapshotHeads(pub Arc<dyn harness_store::KvStore>);

/// `[sandbox.snapshots]` without a shared `[state]`.
pub const SNAPSHOTS_NEED_STATE: &str = "[sandbox.snapshots] keeps each snapshot head in the shared state store: \
    set [state] kind = \"redis\" or \"postgres\" (replicas that continue each other's sessions share it), or remove [sandbox.snapshots]";

/// The host shell and a sandbox together: named both.
pub const LOCAL_SHELL_CONFLICT: &str = "[filesystem] kind = \"local_shell\" and [sandbox] cannot be used together: \
    local_shell is the unconfined host shell; remove one of them ([sandbox] confines `execute`)";

#[derive(Clone)]
struct Shared(Arc<CallBinder>);

pub(crate) const REGISTRATION: Registration = Registration::new("sandbox", build).with_section::<SandboxSection>();

fn build(setup: &mut Setup<'_>) -> Result<Option<Arc<dyn Capability>>, CapabilityError> {
    let Some(section) = setup.section::<SandboxSection>()? else {
        return Ok(None);
    };
    if setup.workspace().filesystem().shell().is_some() {
        return Err(CapabilityError::new("sandbox", LOCAL_SHELL_CONFLICT));
    }
    let binder = match setup.take::<Shared>() {
        Some(Shared(binder)) => binder,
        None => {
            section
                .validate(setup.root())
                .map_err(|message| CapabilityError::new("sandbox", message))?;
            let provider = setup
                .take::<SandboxProviderSetting>()
                .map_or_else(|| section.provider(), |setting| setting.0);
            let locks = setup.root().join(".harness/locks");
            let lease =
                (setup.session_lease().cloned()).unwrap_or_else(|| Arc::new(harness_store::FileLease::new(locks)));
            let scope = setup.isolation().into();
            let mut binder = CallBinder::new(&section, provider, lease, setup.root(), scope);
            if let Some(snapshots) = &section.snapshots {
                let heads = setup
                    .take::<SnapshotHeads>()
                    .ok_or_else(|| CapabilityError::new("sandbox", SNAPSHOTS_NEED_STATE))?;
                let (snapshots, policy) = snapshots
                    .open(setup.root(), heads.0)
                    .map_err(|message| CapabilityError::new("sandbox", message))?;
                binder = binder.with_snapshots(snapshots, policy);
            }
            Arc::new(binder)
        }
    };
    setup.inherit(Shared(Arc::clone(&binder)));
    let prompt = harness_sandbox::prompt_line(&section);
    setup.provide(SandboxedShell(prompt));
    Ok(Some(Arc::new(Sandboxed(binder, section.allow_unsandboxed))))
}

/// The binder, and `[sandbox] allow_unsandboxed` (for `sandbox_grant`).
struct Sandboxed(Arc<CallBinder>, bool);

#[async_trait::async_trait]
impl Capability for Sandboxed {
    fn name(&self) -> &'static str {
        "sandbox"
    }

    /// `sandbox_grant`: widening the sandbox (one host, one unsandboxed command) is an
    /// approval through the durable approval flow.
    fn tools(&self) -> Vec<Arc<dyn harness_core::Tool>> {
        vec![harness_sandbox::grant_tool(self.1)]
    }

    fn session_slots(&self) -> &'static [crate::capability::SlotKey] {
        const SLOTS: &[crate::capability::SlotKey] =
            &[crate::capability::SlotKey::of::<harness_sandbox::SandboxGrants>()];
        SLOTS
    }

    fn middleware(&self, _: &crate::capability::Assembly) -> Vec<(Layer, Arc<dyn Middleware>)> {
        let bind: Arc<dyn Middleware> = Arc::new(BindCall(Arc::clone(&self.0)));
        vec![(Layer::Sandbox, bind)]
    }

    async fn shutdown(&self, _deadline: tokio::time::Instant) {
        if let Err(err) = self.0.shutdown().await {
            tracing::warn!(error = %harness_core::error_chain(&err), "sandbox shutdown");
        }
    }
}

/// The agent's MCP stdio servers, started in its [`ServersSandbox`] (never on the host).
pub struct SandboxedServers(pub Arc<ServersSandbox>);

#[async_trait::async_trait]
impl StdioSpawner for SandboxedServers {
    async fn spawn(&self, command: StdioCommand) -> Result<SpawnedServer, String> {
        let mut process = self.0.spawn(&command.command, &command.args, &command.env).await?;
        let (Some(stdin), Some(stdout)) = (process.take_stdin(), process.take_stdout()) else {
            return Err("the sandboxed process has no stdio pipes".to_owned());
        };
        let stderr = process.take_stderr().map(|stderr| Box::new(stderr) as ServerRead);
        Ok(SpawnedServer {
            stdin: Box::new(stdin),
            stdout: Box::new(stdout),
            stderr,
            process: Box::new(InSandbox(process)),
        })
    }

    async fn shutdown(&self) {
        self.0.shutdown().await;
    }
}

/// A server process in the sandbox: killing it kills its process group there.
struct InSandbox(SandboxProcess);

#[async_trait::async_trait]
impl ServerProcess for InSandbox {
    async fn kill(&mut self) {
        self.0.kill().await;
        self.0.wait().await;
    }
}
