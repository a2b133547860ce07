//! `[sandbox]`: `execute` and the file tools confined to a sandbox bound per call (thin glue
//! over `harness-sandbox`'s [`BindCall`] at [`Layer::Sandbox`]). Children share the parent's
//! binder and a child's turn its parent's binding. Fails closed: the loader probes at start,
//! an unprovidable sandbox fails the call, never a host shell; with `local_shell`, a build error.

use crate::capability::{Capability, CapabilityError, ConfigSection, Layer, Registration, Setup};
use crate::facts::SandboxedShell;
use harness_core::Middleware;
pub use harness_sandbox::bound_sandboxes;
use harness_sandbox::{BindCall, CallBinder, SandboxProvider, SandboxSection};
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
    Ok(Some(Arc::new(Sandboxed(binder))))
}

struct Sandboxed(Arc<CallBinder>);

#[async_trait::async_trait]
impl Capability for Sandboxed {
    fn name(&self) -> &'static str {
        "sandbox"
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
