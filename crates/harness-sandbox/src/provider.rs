//! The backend-neutral contract: [`SandboxProvider`] (probe, create, resume, destroy, list
//! orphans), [`Sandbox`] (a live instance: its filesystem, shell, process spawn, shutdown), the
//! persisted [`SandboxState`], and the errors.

use crate::process::{SandboxProcess, SpawnRequest};
use async_trait::async_trait;
use harness_fs::{Filesystem, Shell};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;

/// What the sandbox's network may reach.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// Its own network namespace with loopback only (the default): servers inside reach each
    /// other, nothing outside is reachable, host loopback included.
    #[default]
    Offline,
    /// Its own network namespace as with `Offline`, plus egress through the harness's
    /// allow-list proxy only ([`ProxyPolicy`](crate::ProxyPolicy)): `http_proxy` and
    /// `https_proxy` point at `127.0.0.1:3128`, relayed by the init to a Unix socket served by
    /// the harness. Host loopback stays unreachable unless an address is on the list.
    Proxy,
    /// The host's network, unfiltered (an operator's choice; host loopback is reachable).
    Full,
}

impl Network {
    /// Its name in `[sandbox] network`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Offline => "offline",
            Self::Proxy => "proxy",
            Self::Full => "full",
        }
    }
}

/// What one sandbox is for: its writable work tree and its network. Everything else (mount
/// view, limits, uid) is the provider's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CreateRequest {
    /// The host directory mounted read-write as the sandbox's work tree (`/workspace`). It is
    /// created when missing and handed to the sandbox uid; it must hold none of the harness's
    /// own data.
    pub work_tree: PathBuf,
    /// The network policy.
    pub network: Network,
    /// Who created it (a process or replica tag), for [`SandboxProvider::list_orphans`].
    pub owner: String,
    /// The scope key the sandbox serves (recorded in its state).
    pub scope_key: String,
    /// The work tree is read-only for everything in the sandbox: bound read-only in the mount
    /// view, and without write rights in Landlock (plan mode for a whole sandbox).
    pub read_only: bool,
}

impl CreateRequest {
    /// A request for `work_tree`, offline, owned by `owner`, serving `scope_key`.
    pub fn new(work_tree: impl Into<PathBuf>, owner: impl Into<String>, scope_key: impl Into<String>) -> Self {
        Self {
            work_tree: work_tree.into(),
            network: Network::Offline,
            owner: owner.into(),
            scope_key: scope_key.into(),
            read_only: false,
        }
    }

    /// Makes the work tree read-only for the whole sandbox (mount view and Landlock).
    #[must_use]
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Sets the network policy.
    #[must_use]
    pub fn network(mut self, network: Network) -> Self {
        self.network = network;
        self
    }
}

/// The persisted description of one sandbox instance (serde-stable; `version` guards the
/// shape).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxState {
    /// Shape version ([`SandboxState::VERSION`]).
    pub version: u32,
    /// The backend that made it (`namespace`).
    pub backend: String,
    /// Unique instance name (never reused).
    pub instance: String,
    /// The scope key it serves.
    pub scope_key: String,
    /// Who created it.
    pub owner: String,
    /// The host uid its processes run as.
    pub uid: u32,
    /// The host work tree.
    pub work_tree: PathBuf,
    /// Its network policy.
    pub network: Network,
    /// The fencing token of the lease under which it was created, when the lease has one.
    pub fence: Option<u64>,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_ms: i64,
}

impl SandboxState {
    /// The current shape version.
    pub const VERSION: u32 = 1;
}

/// What [`SandboxProvider::probe`] proved on this host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Capabilities {
    /// The backend (`namespace`).
    pub backend: &'static str,
    /// The bubblewrap version found.
    pub bwrap_version: String,
    /// Each sandbox gets its own unprivileged host uid (the harness runs as root with a uid
    /// range); otherwise sandboxes run as the harness's own (non-root) uid.
    pub per_sandbox_uid: bool,
    /// The Landlock ABI the probe sandbox was confined with.
    pub landlock_abi: u8,
    /// The seccomp filter was installed.
    pub seccomp: bool,
    /// The probe sandbox's init was pid 1 of its own pid namespace.
    pub pid_namespace: bool,
    /// The probe sandbox held no capabilities and had `NoNewPrivs`.
    pub unprivileged: bool,
}

/// Why the host cannot provide the sandbox. Each message names the cause and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProbeError {
    /// bubblewrap is not installed where configured.
    #[error("bubblewrap not found at {path}: install it (`apt-get install bubblewrap`) or set the bwrap path")]
    BwrapMissing {
        /// The configured path.
        path: PathBuf,
    },
    /// bubblewrap is older than the flags the sandbox needs (`--disable-userns`: 0.8).
    #[error("bubblewrap {found} is too old: 0.8 or newer is needed (for --disable-userns); upgrade it")]
    BwrapTooOld {
        /// The version found.
        found: String,
    },
    /// The init binary is missing.
    #[error("sandbox init binary not found at {path}: build or install `harness-sandbox-init` and set its path")]
    InitMissing {
        /// The configured path.
        path: PathBuf,
    },
    /// The harness runs as root and no uid range is configured: sandboxes would be host root.
    #[error(
        "the harness runs as root but no sandbox uid range is configured: set a range of unused uids (e.g. 200000-200999); sandboxes never run as host root"
    )]
    UidRangeRequired,
    /// User namespaces cannot be created for the sandbox uid.
    #[error(
        "user namespaces are not usable for the sandbox uid ({detail}): enable them (sysctl user.max_user_namespaces > 0, kernel.unprivileged_userns_clone=1, or an AppArmor profile that allows bwrap)"
    )]
    UserNamespaces {
        /// What bubblewrap said.
        detail: String,
    },
    /// Landlock could not be enforced.
    #[error(
        "landlock could not be enforced ({detail}): the namespace sandbox needs Landlock ABI 6 or newer (Linux 6.7+, `landlock` in the lsm= boot list)"
    )]
    Landlock {
        /// What the init reported.
        detail: String,
    },
    /// The seccomp filter could not be installed.
    #[error("seccomp filters are not available ({detail}): a kernel with CONFIG_SECCOMP_FILTER is needed")]
    Seccomp {
        /// What the init reported.
        detail: String,
    },
    /// The sandbox started but its confinement check failed for another reason.
    #[error("the sandbox refused to start: {detail}")]
    Confinement {
        /// What the init reported.
        detail: String,
    },
    /// A configured read-only directory is one a sandbox must never see.
    #[error(
        "{path} may not be offered read-only to a sandbox (it holds host state or sockets): offer a narrower directory outside /root, /home, /run, /var, /tmp, /etc"
    )]
    ForbiddenReadOnly {
        /// The configured directory.
        path: PathBuf,
    },
    /// bubblewrap failed for another reason.
    #[error("bubblewrap failed: {detail}")]
    Bwrap {
        /// Its stderr.
        detail: String,
    },
    /// Preparing the provider's state directory failed.
    #[error("sandbox state directory {path}: {detail}")]
    StateDir {
        /// The directory.
        path: PathBuf,
        /// What failed.
        detail: String,
    },
}

/// Why a sandbox operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The host cannot provide the sandbox (creating one is refused, never weakened).
    #[error(transparent)]
    Probe(#[from] ProbeError),
    /// Every uid of the configured range is in use by a live sandbox.
    #[error("no free sandbox uid in {first}-{last}: destroy idle sandboxes or widen the range")]
    NoFreeUid {
        /// First uid of the range.
        first: u32,
        /// Last uid of the range.
        last: u32,
    },
    /// The request asks for something this backend does not do yet.
    #[error("{what} is not supported by the {backend} sandbox yet")]
    Unsupported {
        /// The backend.
        backend: &'static str,
        /// What was asked.
        what: &'static str,
    },
    /// The work tree could not be prepared.
    #[error("work tree {path}: {operation} failed")]
    WorkTree {
        /// The directory.
        path: PathBuf,
        /// What failed.
        operation: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The sandbox is gone (shut down, or its init died).
    #[error("the sandbox is no longer running")]
    Gone,
    /// A process could not be started inside the sandbox.
    #[error("could not start the process: {message}")]
    Spawn {
        /// What the init said.
        message: String,
    },
    /// The state store failed.
    #[error("sandbox state store")]
    Store(#[source] harness_store::StoreError),
    /// The scope key's lease could not be taken.
    #[error("sandbox lease")]
    Lease(#[source] harness_core::LeaseError),
    /// A grant names something that is not a host.
    #[error(transparent)]
    Grant(#[from] crate::proxy::ProxyPolicyError),
    /// Host IO failed.
    #[error("{operation} failed")]
    Io {
        /// What failed.
        operation: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// What [`SandboxProvider::resume`] found for a persisted state.
pub enum Resumed {
    /// The instance is live in this process: use it.
    Live(Arc<dyn Sandbox>),
    /// The instance is gone (its process ended); its work tree is still on disk. Create a new
    /// instance for it.
    Gone,
}

impl std::fmt::Debug for Resumed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Live(sandbox) => f.debug_tuple("Live").field(&sandbox.state().instance).finish(),
            Self::Gone => f.write_str("Gone"),
        }
    }
}

/// A sandbox backend.
#[async_trait]
pub trait SandboxProvider: Send + Sync + 'static {
    /// The backend's name (`namespace`).
    fn name(&self) -> &'static str;

    /// Proves that this host provides the sandbox, by starting a throwaway one.
    ///
    /// # Errors
    /// [`ProbeError`] naming the missing piece and the fix.
    async fn probe(&self) -> Result<Capabilities, ProbeError>;

    /// Starts a new sandbox instance. Never falls back to something weaker.
    ///
    /// # Errors
    /// [`SandboxError::Probe`] when the host cannot provide it, [`SandboxError::NoFreeUid`],
    /// [`SandboxError::Unsupported`], [`SandboxError::WorkTree`], IO.
    async fn create(&self, request: CreateRequest) -> Result<Arc<dyn Sandbox>, SandboxError>;

    /// Reconciles a persisted state with what is running.
    ///
    /// # Errors
    /// IO while inspecting the instance.
    async fn resume(&self, state: &SandboxState) -> Result<Resumed, SandboxError>;

    /// Stops the instance (if live) and removes its bookkeeping; the work tree stays.
    /// Idempotent.
    ///
    /// # Errors
    /// IO while cleaning up.
    async fn destroy(&self, state: &SandboxState) -> Result<(), SandboxError>;

    /// Instances created by `owner` that no live process holds any more (a harness that was
    /// killed), for [`destroy`](Self::destroy).
    ///
    /// # Errors
    /// IO while scanning.
    async fn list_orphans(&self, owner: &str) -> Result<Vec<SandboxState>, SandboxError>;
}

/// A live sandbox instance.
#[async_trait]
pub trait Sandbox: Send + Sync + 'static {
    /// Its persisted description.
    fn state(&self) -> SandboxState;

    /// The work tree as a host-side [`Filesystem`] (the file tools): what it writes belongs to
    /// the sandbox uid, so commands inside can change it.
    fn filesystem(&self) -> Arc<dyn Filesystem>;

    /// The sandbox's shell (`execute`): `sh -c` inside, working directories relative to the
    /// work tree.
    fn shell(&self) -> Arc<dyn Shell>;

    /// The sandbox's shell in plan mode: every command it runs gets a second Landlock layer
    /// that leaves the work tree (and everything else but the private `/tmp`) read-only, so
    /// writes fail with `EACCES` while reads work. Backends without it return a shell that
    /// refuses every command (never one that could write).
    fn read_only_shell(&self) -> Arc<dyn Shell> {
        Arc::new(RefusingShell)
    }

    /// Connections the sandbox's network proxy refused, oldest first (empty unless
    /// `network = "proxy"`).
    fn network_denials(&self) -> Vec<crate::proxy::NetworkDenial> {
        Vec::new()
    }

    /// Adds `entry` (a host, wildcard or address, optionally with `:port`) to the sandbox's
    /// network allow-list until it ends: a grant a person approved.
    ///
    /// # Errors
    /// [`SandboxError::Unsupported`] when the sandbox has no proxy (`network` is not
    /// `"proxy"`); [`SandboxError::Grant`] when `entry` is not a host.
    fn allow_host(&self, _entry: &str) -> Result<(), SandboxError> {
        Err(SandboxError::Unsupported {
            backend: "this",
            what: "a network grant without network = \"proxy\"",
        })
    }

    /// Starts a long-running process with piped stdio (MCP stdio servers, skill scripts).
    ///
    /// # Errors
    /// [`SandboxError::Gone`], [`SandboxError::Spawn`].
    async fn spawn(&self, request: SpawnRequest) -> Result<SandboxProcess, SandboxError>;

    /// Whether the instance is still running.
    fn is_alive(&self) -> bool;

    /// Stops every process of the sandbox. Idempotent.
    ///
    /// # Errors
    /// IO while stopping.
    async fn shutdown(&self) -> Result<(), SandboxError>;
}

/// The read-only shell of a backend that cannot provide one: fails closed.
struct RefusingShell;

#[async_trait]
impl Shell for RefusingShell {
    fn describe(&self) -> String {
        "sandbox:read-only-unsupported".to_owned()
    }

    async fn execute(
        &self,
        _request: harness_fs::ShellRequest,
    ) -> Result<harness_fs::ShellOutput, harness_fs::ShellError> {
        Err(harness_fs::ShellError::Spawn(std::io::Error::other(
            "this sandbox backend has no read-only (plan mode) shell; leave plan mode or use the namespace backend",
        )))
    }
}

impl std::fmt::Debug for dyn Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("instance", &self.state().instance)
            .finish_non_exhaustive()
    }
}
