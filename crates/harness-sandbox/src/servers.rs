//! [`ServersSandbox`]: the sandbox a sandboxed agent's MCP stdio servers run in.
//!
//! MCP connections live as long as the agent, while call sandboxes bind per call and scope
//! key, so the servers get a sandbox of their own: scope key `sandbox/servers/<agent>`, its
//! own work tree under the work root (none of the harness's data, and not a call's work
//! tree), and the same policy as every other sandbox of the provider (dedicated uid,
//! bubblewrap, Landlock, seccomp, the `[sandbox] network`, the allow-listed environment plus
//! each server's configured `env`). It starts at the first server and stops, with every
//! server in it, at [`shutdown`](ServersSandbox::shutdown) or when the harness process dies.
//! A server it cannot start fails with the cause and the fix; it is never started on the
//! host instead.

use crate::process::{SandboxProcess, SpawnRequest};
use crate::provider::{CreateRequest, Network, Sandbox, SandboxProvider};
use crate::section::SandboxSection;
use harness_core::LeaseKey;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The agent-scope sandbox of an agent's MCP stdio servers.
pub struct ServersSandbox {
    provider: Arc<dyn SandboxProvider>,
    work_tree: PathBuf,
    owner: String,
    key: String,
    network: Network,
    live: tokio::sync::Mutex<Option<Arc<dyn Sandbox>>>,
}

impl std::fmt::Debug for ServersSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServersSandbox")
            .field("key", &self.key)
            .field("work_tree", &self.work_tree)
            .finish_non_exhaustive()
    }
}

impl ServersSandbox {
    /// The servers' sandbox of `agent` in the workspace at `workspace`, as `section` and
    /// `provider` (probed) describe. Nothing starts until the first [`spawn`](Self::spawn).
    pub fn new(section: &SandboxSection, provider: Arc<dyn SandboxProvider>, workspace: &Path, agent: &str) -> Self {
        let key = LeaseKey::new(&["sandbox", "servers", agent]);
        let work_root = section.work_root(workspace);
        let work_tree = work_root.join(crate::ScopeKey::from_lease_key(key.clone()).dir_name());
        Self {
            provider,
            owner: crate::binder::owner_of(&work_root),
            work_tree,
            key: key.as_str().to_owned(),
            network: section.network,
            live: tokio::sync::Mutex::new(None),
        }
    }

    /// The servers' work tree on the host (their `/workspace`).
    pub fn work_tree(&self) -> &Path {
        &self.work_tree
    }

    /// The live sandbox, started (again, when it died) on demand.
    async fn sandbox(&self) -> Result<Arc<dyn Sandbox>, String> {
        let mut live = self.live.lock().await;
        if let Some(sandbox) = live.as_ref().filter(|sandbox| sandbox.is_alive()) {
            return Ok(Arc::clone(sandbox));
        }
        let request = CreateRequest::new(&self.work_tree, &self.owner, &self.key).network(self.network);
        let sandbox = self.provider.create(request).await.map_err(|err| {
            format!(
                "the sandbox for MCP servers cannot start: {}; the server is not started on the host",
                harness_core::error_chain(&err)
            )
        })?;
        *live = Some(Arc::clone(&sandbox));
        Ok(sandbox)
    }

    /// Starts `command` with `args` inside the sandbox, with `env` on top of the sandbox's
    /// allow-listed environment, in the servers' work tree.
    ///
    /// # Errors
    /// The cause and the fix: the sandbox cannot start, or `command` is not found in the
    /// sandbox's mount view (a program under `/root` or `/home` never is).
    pub async fn spawn(
        &self,
        command: &str,
        args: &[String],
        env: &[(String, String)],
    ) -> Result<SandboxProcess, String> {
        let sandbox = self.sandbox().await?;
        // A missing program would only be sh's exit 127 after the spawn; find it first so the
        // failure says what to do.
        let mut probe = sandbox
            .spawn(SpawnRequest::new([
                "sh",
                "-c",
                "command -v -- \"$1\" >/dev/null",
                "sh",
                command,
            ]))
            .await
            .map_err(|err| format!("inside the sandbox: {}", harness_core::error_chain(&err)))?;
        drop(probe.take_stdin());
        if probe.wait().await.code != Some(0) {
            return Err(format!(
                "`{command}` is not found inside the sandbox, which sees the system directories (/usr, /bin, /lib), \
                 [sandbox] read_only directories and its own work tree {}, never /root, /home or the host's /tmp: \
                 install the server under /usr or /opt and list its directory in [sandbox] read_only; \
                 it is not started on the host",
                self.work_tree.display()
            ));
        }
        let mut argv = vec![command.to_owned()];
        argv.extend(args.iter().cloned());
        let mut request = SpawnRequest::new(argv);
        for (name, value) in env {
            request = request.env(name.clone(), value.clone());
        }
        sandbox
            .spawn(request)
            .await
            .map_err(|err| format!("inside the sandbox: {}", harness_core::error_chain(&err)))
    }

    /// Stops the sandbox with every process in it and frees its uid. Idempotent.
    pub async fn shutdown(&self) {
        let sandbox = self.live.lock().await.take();
        if let Some(sandbox) = sandbox {
            let state = sandbox.state();
            if let Err(err) = sandbox.shutdown().await {
                tracing::warn!(error = %harness_core::error_chain(&err), "stopping the MCP servers' sandbox");
            }
            if let Err(err) = self.provider.destroy(&state).await {
                tracing::warn!(error = %harness_core::error_chain(&err), "removing the MCP servers' sandbox");
            }
        }
    }
}
