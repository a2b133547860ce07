//! Sandboxes for Harness: where the model's commands, MCP stdio servers and skill scripts run
//! when the host must be out of their reach.
//!
//! A [`SandboxProvider`] proves what the host provides ([`probe`](SandboxProvider::probe)) and
//! starts [`Sandbox`]es; a sandbox gives the existing [`harness_fs::Filesystem`] (host-side,
//! over its work tree) and [`harness_fs::Shell`] (inside it) plus [`Sandbox::spawn`] for
//! long-running processes with piped stdio. [`SandboxManager`] binds one sandbox per scope key
//! under a lease. The `namespace` backend ([`NamespaceProvider`]) never runs a sandbox as host
//! root or with capabilities: a dedicated uid, bubblewrap, Landlock and seccomp, and an init
//! (the `harness-sandbox-init` binary) as pid 1. It fails closed: a host that cannot provide a
//! piece is an error naming it ([`ProbeError`]), never a weaker sandbox.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use harness_fs::{Shell, ShellRequest};
//! use harness_sandbox::{CreateRequest, NamespaceConfig, NamespaceProvider, SandboxProvider};
//! let config = NamespaceConfig::new("/usr/lib/harness/harness-sandbox-init", "/var/lib/harness/sandboxes")
//!     .uid_range(200_000, 200_999);
//! let provider = NamespaceProvider::new(config);
//! provider.probe().await?; // fails closed, naming the cause and the fix
//! let sandbox = provider.create(CreateRequest::new("/srv/work/alice", "replica-1", "agent/alice")).await?;
//! let output = sandbox.shell().execute(ShellRequest::new("id -u; ls /root")).await?;
//! assert_ne!(output.stdout.lines().next(), Some("0"));
//! sandbox.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! Where to start: [`SandboxProvider`], [`Sandbox`], [`NamespaceProvider`], [`SandboxManager`].

mod binder;
mod client;
mod confine;
mod denials;
mod grants;
mod init;
mod manager;
mod namespace;
mod process;
mod protocol;
mod provider;
mod proxy;
mod section;
mod servers;
mod snapshot;
mod work_fs;

pub use binder::{BindCall, CallBinder, CallSandbox, default_init};
pub use denials::{explaining, prompt_line};
pub use grants::{CommandGrant, GRANT_TOOL, GrantTool, HostGrant, SandboxGrants, grant_tool};
pub use init::init_main;
pub use manager::{BoundSandbox, SandboxManager, SandboxScope, ScopeKey, bound_sandboxes};
pub use namespace::{DEFAULT_INHERITED_ENV, Limits, NamespaceConfig, NamespaceProvider};
pub use process::{ProcessExit, ProcessOutput, ProcessStdin, SandboxProcess, SpawnRequest, WORK_TREE_MOUNT};
pub use provider::{
    Capabilities, CreateRequest, Network, ProbeError, Resumed, Sandbox, SandboxError, SandboxProvider, SandboxState,
};
pub use proxy::{NetworkDenial, PROXY_LISTEN, ProxyPolicy, ProxyPolicyError};
pub use section::{DEFAULT_STATE_DIR, LimitsSection, SandboxKind, SandboxSection};
pub use servers::ServersSandbox;
pub use snapshot::{
    Acquired, PersistPolicy, ProjectedFiles, Projection, RestoreBranch, SnapshottingManager, apply_projection,
    check_projection_root, restore_in_sandbox,
};
