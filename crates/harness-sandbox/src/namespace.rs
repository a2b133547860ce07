//! The `namespace` backend: a dedicated unprivileged host uid per sandbox, then bubblewrap
//! (its own user, pid, mount, IPC, UTS, cgroup and, offline, network namespaces; nested user
//! namespaces disabled; every capability dropped; dies with the harness; its own session), a
//! minimal mount view, and the init as pid 1 applying Landlock and seccomp.

mod bwrap;
mod launcher;
mod uid;
mod work_tree;

use crate::client::Connection;
use crate::confine::Rlimits;
use crate::process::{ExecSettings, SandboxProcess, SandboxShell, SpawnRequest, WORK_TREE_MOUNT};
use crate::protocol::{Decoder, InitReport, Kind, PROTOCOL_VERSION, read_frame};
use crate::provider::{
    Capabilities, CreateRequest, Network, ProbeError, Resumed, Sandbox, SandboxError, SandboxProvider, SandboxState,
};
use crate::proxy::{NetworkDenial, ProxyPolicy, ProxyServer};
use crate::work_fs::WorkTreeFs;
use async_trait::async_trait;
use harness_fs::{Filesystem, LocalFs, Shell};
use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

pub(crate) use uid::UidLease;

/// How long a new sandbox may take to report its confinement before it is refused.
const HELLO_TIMEOUT: Duration = Duration::from_secs(20);

/// Variables copied from the harness's environment into every sandbox when set (values such
/// as the locale; never credentials). `PATH`, `HOME`, `TMPDIR` and the caches are always the
/// sandbox's own.
pub const DEFAULT_INHERITED_ENV: &[&str] = &["LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TERM"];

/// Limits of every sandbox of a provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Processes the sandbox may run at once (`RLIMIT_NPROC` of its dedicated uid).
    pub max_processes: u64,
    /// Address space of each process, when limited (`RLIMIT_AS`). Off by default: language
    /// runtimes reserve large address ranges. A total memory limit needs cgroups (not done).
    pub max_process_memory: Option<u64>,
    /// The largest file a process may write (`RLIMIT_FSIZE`).
    pub max_file_bytes: Option<u64>,
    /// Open descriptors per process.
    pub max_open_files: u64,
    /// Size of the sandbox's private `/tmp` (a tmpfs).
    pub tmp_bytes: u64,
    /// Most bytes kept per stream of one command's output (head and tail).
    pub max_output_bytes: usize,
    /// Longest time limit a command may ask for.
    pub max_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_processes: 512,
            max_process_memory: None,
            max_file_bytes: Some(8 << 30),
            max_open_files: 4096,
            tmp_bytes: 256 << 20,
            max_output_bytes: 100_000,
            max_timeout: Duration::from_secs(600),
        }
    }
}

/// Settings of a [`NamespaceProvider`]. Plain data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceConfig {
    /// The bubblewrap binary.
    pub bwrap: PathBuf,
    /// The `harness-sandbox-init` binary. It is bound read-only into each sandbox, so the
    /// sandbox uid must be able to read it (it must not live under `/root`).
    pub init: PathBuf,
    /// A host directory for bookkeeping (uid locks, instance records, the curated `/etc`);
    /// outside every work tree, never mounted whole into a sandbox.
    pub state_dir: PathBuf,
    /// First and last host uid for sandboxes, one per live sandbox (required when the harness
    /// runs as root; the uids must belong to nobody else). The gid equals the uid.
    pub uid_range: Option<(u32, u32)>,
    /// Extra host directories offered read-only at the same path (host toolchains outside
    /// `/usr`); never `/root` or `/home`.
    pub read_only: Vec<PathBuf>,
    /// Variables copied from the harness's environment when set.
    pub inherit_env: Vec<String>,
    /// Limits of every sandbox.
    pub limits: Limits,
    /// The hosts sandboxes with `network = "proxy"` may reach (empty: none).
    pub proxy: ProxyPolicy,
}

impl NamespaceConfig {
    /// Debian's bubblewrap, `init`, `state_dir`, no uid range, default limits.
    pub fn new(init: impl Into<PathBuf>, state_dir: impl Into<PathBuf>) -> Self {
        Self {
            bwrap: PathBuf::from("/usr/bin/bwrap"),
            init: init.into(),
            state_dir: state_dir.into(),
            uid_range: None,
            read_only: Vec::new(),
            inherit_env: DEFAULT_INHERITED_ENV.iter().map(|name| (*name).to_owned()).collect(),
            limits: Limits::default(),
            proxy: ProxyPolicy::default(),
        }
    }

    /// Sets the uid range.
    #[must_use]
    pub fn uid_range(mut self, first: u32, last: u32) -> Self {
        self.uid_range = Some((first, last));
        self
    }
}

/// The namespace sandbox provider. Create one per process; it keeps the live instances.
pub struct NamespaceProvider {
    config: NamespaceConfig,
    inherited: Vec<(String, String)>,
    live: Mutex<HashMap<String, Weak<NamespaceSandbox>>>,
    /// The bubblewrap version once [`check_host`](Self::check_host) passed: later starts skip
    /// running `bwrap --version` (the configuration cannot change; [`probe`] always re-checks).
    checked: std::sync::OnceLock<String>,
}

impl std::fmt::Debug for NamespaceProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamespaceProvider")
            .field("state_dir", &self.config.state_dir)
            .finish_non_exhaustive()
    }
}

impl NamespaceProvider {
    /// A provider with `config`. The allowed variables of this process's environment are
    /// copied now (the only read of the environment).
    pub fn new(config: NamespaceConfig) -> Self {
        let inherited = std::env::vars()
            .filter(|(name, _)| config.inherit_env.iter().any(|allowed| allowed == name))
            .collect();
        Self {
            config,
            inherited,
            live: Mutex::new(HashMap::new()),
            checked: std::sync::OnceLock::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &NamespaceConfig {
        &self.config
    }

    fn check_host(&self) -> Result<String, ProbeError> {
        if !self.config.bwrap.is_file() {
            return Err(ProbeError::BwrapMissing {
                path: self.config.bwrap.clone(),
            });
        }
        let version = bwrap::version(&self.config.bwrap)?;
        if !self.config.init.is_file() {
            return Err(ProbeError::InitMissing {
                path: self.config.init.clone(),
            });
        }
        if let Some(path) = self.config.read_only.iter().find(|path| is_forbidden_host_dir(path)) {
            return Err(ProbeError::ForbiddenReadOnly { path: path.clone() });
        }
        if rustix::process::geteuid().is_root() && self.config.uid_range.is_none() {
            return Err(ProbeError::UidRangeRequired);
        }
        let _ = self.checked.set(version.clone());
        Ok(version)
    }

    /// [`check_host`](Self::check_host) once per provider; the binaries are still required to
    /// exist at every start (a removed bwrap or init fails the start, never weakens it).
    fn check_host_cached(&self) -> Result<(), ProbeError> {
        if self.checked.get().is_some() {
            if !self.config.bwrap.is_file() {
                return Err(ProbeError::BwrapMissing {
                    path: self.config.bwrap.clone(),
                });
            }
            if !self.config.init.is_file() {
                return Err(ProbeError::InitMissing {
                    path: self.config.init.clone(),
                });
            }
            return Ok(());
        }
        self.check_host().map(drop)
    }

    async fn start(&self, request: &CreateRequest) -> Result<(Arc<NamespaceSandbox>, InitReport), SandboxError> {
        let began = std::time::Instant::now();
        self.check_host_cached()?;
        let state_dir = self.config.state_dir.clone();
        let range = self.config.uid_range;
        let work_tree = request.work_tree.clone();
        let (lease, work_tree) = tokio::task::spawn_blocking(move || -> Result<_, SandboxError> {
            let lease = uid::allocate(&state_dir, range)?;
            let work_tree = work_tree::prepare(&work_tree, lease.uid())?;
            Ok((lease, work_tree))
        })
        .await
        .map_err(|err| SandboxError::Io {
            operation: "prepare sandbox",
            source: std::io::Error::other(err),
        })??;
        let state = SandboxState {
            version: SandboxState::VERSION,
            backend: "namespace".to_owned(),
            instance: lease.instance().to_owned(),
            scope_key: request.scope_key.clone(),
            owner: request.owner.clone(),
            uid: lease.uid(),
            work_tree: work_tree.clone(),
            network: request.network,
            fence: None,
            created_ms: jiff_now_ms(),
        };
        lease.record(&state)?;
        let proxy = if request.network == Network::Proxy {
            let dir = lease.proxy_dir()?;
            Some((self.serve_proxy(&dir, lease.uid())?, dir))
        } else {
            None
        };
        let plan = bwrap::Plan {
            bwrap: &self.config.bwrap,
            init: &self.config.init,
            work_tree: &work_tree,
            etc: &lease.etc_dir(),
            read_only: &self.config.read_only,
            network: request.network,
            tmp_bytes: self.config.limits.tmp_bytes,
            confinement: bwrap::confinement(
                &self.config.read_only,
                &rlimits(&self.config.limits),
                request.read_only,
                proxy.is_some(),
            ),
            proxy_dir: proxy.as_ref().map(|(_, dir)| dir.as_path()),
            read_only_work_tree: request.read_only,
        };
        let prepared = began.elapsed();
        let command = bwrap::command(&plan, lease.uid(), rustix::process::geteuid().is_root());
        let mut child = launcher::spawn(command).await.map_err(|source| SandboxError::Io {
            operation: "start bubblewrap",
            source,
        })?;
        let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let (Some(stdin), Some(stdout), Some(stderr)) = (stdin, stdout, stderr) else {
            return Err(SandboxError::Io {
                operation: "start bubblewrap",
                source: std::io::Error::other("missing pipe"),
            });
        };
        // Read the hello frame off the runtime (a blocking read on the init's stdout).
        let hello = tokio::task::spawn_blocking(move || {
            let mut stdout = stdout;
            let mut decoder = Decoder::default();
            let frame = read_frame(&mut stdout, &mut decoder);
            (stdout, decoder, frame)
        });
        let (stdout, decoder, frame) = match tokio::time::timeout(HELLO_TIMEOUT, hello).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ProbeError::Bwrap {
                    detail: "the sandbox did not report within 20 s".to_owned(),
                }
                .into());
            }
        };
        let report = match frame {
            Ok(Some(frame)) if frame.kind == Kind::Hello => frame.parse::<InitReport>().ok(),
            _ => None,
        };
        let Some(report) = report else {
            let _ = child.kill();
            let _ = child.wait();
            let detail = read_stderr(stderr);
            return Err(bwrap::classify_failure(&detail).into());
        };
        if let Some(error) = &report.error {
            let _ = child.kill();
            let _ = child.wait();
            return Err(classify_refusal(error).into());
        }
        if report.protocol != PROTOCOL_VERSION || !report.no_capabilities || !report.no_new_privs || report.pid != 1 {
            let _ = child.kill();
            let _ = child.wait();
            return Err(ProbeError::Confinement {
                detail: format!("unexpected init report {report:?}"),
            }
            .into());
        }
        drop(stderr);
        tracing::debug!(
            instance = %state.instance,
            prepare_us = prepared.as_micros(),
            confined_us = (began.elapsed() - prepared).as_micros(),
            "sandbox started"
        );
        let connection = Arc::new(Connection::new(
            tokio::process::ChildStdin::from_std(stdin).map_err(|source| SandboxError::Io {
                operation: "adopt init stdin",
                source,
            })?,
            tokio::process::ChildStdout::from_std(stdout).map_err(|source| SandboxError::Io {
                operation: "adopt init stdout",
                source,
            })?,
            decoder,
        ));
        let fs = LocalFs::new(&work_tree).map_err(|err| SandboxError::Io {
            operation: "open work tree",
            source: std::io::Error::other(err.to_string()),
        })?;
        let mut env = sandbox_env(&self.inherited);
        if proxy.is_some() {
            env.extend(proxy_env());
        }
        env.sort();
        let settings = Arc::new(ExecSettings {
            env,
            max_output_bytes: self.config.limits.max_output_bytes,
            max_timeout: self.config.limits.max_timeout,
        });
        let sandbox = Arc::new(NamespaceSandbox {
            state,
            connection,
            settings,
            serial: Arc::new(tokio::sync::Mutex::new(())),
            filesystem: Arc::new(WorkTreeFs::new(fs, work_tree, lease.uid())),
            bwrap: Mutex::new(Some(child)),
            lease: Mutex::new(Some(lease)),
            proxy: proxy.map(|(server, _)| server),
        });
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(sandbox.state.instance.clone(), Arc::downgrade(&sandbox));
        Ok((sandbox, report))
    }
}

impl NamespaceProvider {
    /// Binds the proxy socket in `dir` (for the sandbox uid only) and serves it.
    fn serve_proxy(&self, dir: &Path, uid: u32) -> Result<ProxyServer, SandboxError> {
        let path = dir.join(bwrap::PROXY_SOCKET);
        let _ = std::fs::remove_file(&path);
        let io = |operation| move |source| SandboxError::Io { operation, source };
        let listener = tokio::net::UnixListener::bind(&path).map_err(io("bind the sandbox proxy socket"))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(io("set the sandbox proxy socket mode"))?;
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::lchown(&path, Some(uid), Some(uid)).map_err(io("hand over the sandbox proxy socket"))?;
        }
        Ok(ProxyServer::start(listener, self.config.proxy.clone()))
    }
}

/// The variables that send a sandbox's HTTP clients (curl, pip, npm, cargo, git) to the relay.
fn proxy_env() -> Vec<(String, String)> {
    let url = format!("http://{}", crate::proxy::PROXY_LISTEN);
    let mut env = Vec::new();
    for name in [
        "http_proxy",
        "https_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "npm_config_proxy",
        "npm_config_https_proxy",
        "CARGO_HTTP_PROXY",
    ] {
        env.push((name.to_owned(), url.clone()));
    }
    for name in ["no_proxy", "NO_PROXY"] {
        env.push((name.to_owned(), "localhost,127.0.0.1,::1".to_owned()));
    }
    env
}

fn jiff_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
}

fn read_stderr(stderr: std::process::ChildStderr) -> String {
    use std::io::Read;
    let mut text = String::new();
    let _ = stderr.take(8192).read_to_string(&mut text);
    text.trim().to_owned()
}

fn classify_refusal(error: &str) -> ProbeError {
    if error.starts_with("landlock") {
        ProbeError::Landlock {
            detail: error.to_owned(),
        }
    } else if error.starts_with("seccomp") {
        ProbeError::Seccomp {
            detail: error.to_owned(),
        }
    } else {
        ProbeError::Confinement {
            detail: error.to_owned(),
        }
    }
}

fn rlimits(limits: &Limits) -> Rlimits {
    Rlimits {
        processes: Some(limits.max_processes),
        address_space: limits.max_process_memory,
        file_size: limits.max_file_bytes,
        open_files: Some(limits.max_open_files),
        core: 0,
    }
}

/// The environment of every process in a sandbox: sandbox-local paths plus the inherited
/// allow-listed values. Nothing else of the harness's environment (API keys) ever enters.
fn sandbox_env(inherited: &[(String, String)]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = [
        ("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"),
        ("HOME", WORK_TREE_MOUNT),
        ("TMPDIR", "/workspace/.tmp"),
        ("XDG_CACHE_HOME", "/workspace/.cache"),
        ("USER", "sandbox"),
        ("LOGNAME", "sandbox"),
        ("SHELL", "/bin/sh"),
    ]
    .iter()
    .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
    .collect();
    if !inherited.iter().any(|(name, _)| name == "LANG") {
        env.push(("LANG".to_owned(), "C.UTF-8".to_owned()));
    }
    env.extend(inherited.iter().cloned());
    env
}

#[async_trait]
impl SandboxProvider for NamespaceProvider {
    fn name(&self) -> &'static str {
        "namespace"
    }

    async fn probe(&self) -> Result<Capabilities, ProbeError> {
        let bwrap_version = self.check_host()?;
        let scratch = self.config.state_dir.join("probe");
        let work = scratch.join(format!("work-{}", std::process::id()));
        let request = CreateRequest::new(&work, "probe", "probe");
        let result = self.start(&request).await;
        let outcome = match result {
            Ok((sandbox, report)) => {
                let _ = sandbox.shutdown().await;
                Ok(Capabilities {
                    backend: "namespace",
                    bwrap_version,
                    per_sandbox_uid: self.config.uid_range.is_some() && rustix::process::geteuid().is_root(),
                    landlock_abi: report.landlock_abi,
                    seccomp: report.seccomp,
                    pid_namespace: report.pid == 1,
                    unprivileged: report.no_capabilities && report.no_new_privs && report.uid != 0,
                })
            }
            Err(SandboxError::Probe(probe)) => Err(probe),
            Err(other) => Err(ProbeError::StateDir {
                path: self.config.state_dir.clone(),
                detail: other.to_string(),
            }),
        };
        let _ = std::fs::remove_dir_all(&work);
        outcome
    }

    async fn create(&self, request: CreateRequest) -> Result<Arc<dyn Sandbox>, SandboxError> {
        let (sandbox, _) = self.start(&request).await?;
        Ok(sandbox)
    }

    async fn resume(&self, state: &SandboxState) -> Result<Resumed, SandboxError> {
        let live = self
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&state.instance)
            .and_then(Weak::upgrade);
        Ok(match live {
            Some(sandbox) if sandbox.is_alive() => Resumed::Live(sandbox),
            _ => Resumed::Gone,
        })
    }

    async fn destroy(&self, state: &SandboxState) -> Result<(), SandboxError> {
        let live = self
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&state.instance)
            .and_then(|weak| weak.upgrade());
        if let Some(sandbox) = live {
            sandbox.shutdown().await?;
        }
        let state_dir = self.config.state_dir.clone();
        let instance = state.instance.clone();
        tokio::task::spawn_blocking(move || uid::remove_orphan(&state_dir, &instance))
            .await
            .map_err(|err| SandboxError::Io {
                operation: "destroy sandbox",
                source: std::io::Error::other(err),
            })?
    }

    async fn list_orphans(&self, owner: &str) -> Result<Vec<SandboxState>, SandboxError> {
        let state_dir = self.config.state_dir.clone();
        let owner = owner.to_owned();
        tokio::task::spawn_blocking(move || uid::orphans(&state_dir, &owner))
            .await
            .map_err(|err| SandboxError::Io {
                operation: "list orphans",
                source: std::io::Error::other(err),
            })?
    }
}

/// One live namespace sandbox.
pub(crate) struct NamespaceSandbox {
    state: SandboxState,
    connection: Arc<Connection>,
    settings: Arc<ExecSettings>,
    serial: Arc<tokio::sync::Mutex<()>>,
    filesystem: Arc<WorkTreeFs>,
    bwrap: Mutex<Option<std::process::Child>>,
    lease: Mutex<Option<UidLease>>,
    proxy: Option<ProxyServer>,
}

impl NamespaceSandbox {
    /// Closes the init's command pipe, so the init exits, and with it (pid 1) every process
    /// of its pid namespace; bwrap exits once the kernel has reaped them all. A bwrap that does
    /// not exit in time is killed, and then everything left of the sandbox uid is killed too.
    /// Frees the uid.
    fn stop(&self) -> std::io::Result<()> {
        self.connection.close();
        if let Some(proxy) = &self.proxy {
            proxy.stop();
        }
        let child = self.bwrap.lock().unwrap_or_else(PoisonError::into_inner).take();
        let mut clean = false;
        if let Some(mut child) = child {
            clean = exits_on_its_own(&mut child);
            if !clean {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let lease = self.lease.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(lease) = lease {
            lease.release(clean)?;
        }
        Ok(())
    }
}

impl Drop for NamespaceSandbox {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

#[async_trait]
impl Sandbox for NamespaceSandbox {
    fn state(&self) -> SandboxState {
        self.state.clone()
    }

    fn filesystem(&self) -> Arc<dyn Filesystem> {
        self.filesystem.clone()
    }

    fn shell(&self) -> Arc<dyn Shell> {
        Arc::new(SandboxShell {
            connection: self.connection.clone(),
            settings: self.settings.clone(),
            serial: self.serial.clone(),
            name: self.state.instance.clone(),
            read_only: false,
        })
    }

    fn read_only_shell(&self) -> Arc<dyn Shell> {
        Arc::new(SandboxShell {
            connection: self.connection.clone(),
            settings: self.settings.clone(),
            serial: self.serial.clone(),
            name: self.state.instance.clone(),
            read_only: true,
        })
    }

    fn network_denials(&self) -> Vec<NetworkDenial> {
        self.proxy.as_ref().map(ProxyServer::denials).unwrap_or_default()
    }

    fn allow_host(&self, entry: &str) -> Result<(), SandboxError> {
        let Some(proxy) = &self.proxy else {
            return Err(SandboxError::Unsupported {
                backend: "namespace",
                what: "a network grant without network = \"proxy\"",
            });
        };
        Ok(proxy.allow(entry)?)
    }

    async fn spawn(&self, request: SpawnRequest) -> Result<SandboxProcess, SandboxError> {
        SandboxProcess::start(self.connection.clone(), &self.settings, request).await
    }

    fn is_alive(&self) -> bool {
        !self.connection.is_closed() && self.bwrap.lock().unwrap_or_else(PoisonError::into_inner).is_some()
    }

    async fn shutdown(&self) -> Result<(), SandboxError> {
        // SAFETY of the blocking: kill + wait of a killed child returns at once.
        self.stop().map_err(|source| SandboxError::Io {
            operation: "stop sandbox",
            source,
        })
    }
}

/// How long a stopping sandbox's bwrap may take to exit after its init's pipe closed.
const STOP_GRACE: Duration = Duration::from_millis(500);

/// Waits up to [`STOP_GRACE`] for bwrap to exit by itself; `true` when it did with an exit
/// code. bwrap exits with a code only after `waitpid` returned its child, the init, which is
/// pid 1 of the sandbox's pid namespace: the kernel completes pid 1's exit only after every
/// other process of the namespace is gone. So nothing of the sandbox is left. A bwrap killed
/// by a signal proves nothing (its child dies by `PR_SET_PDEATHSIG`, asynchronously).
fn exits_on_its_own(child: &mut std::process::Child) -> bool {
    let deadline = std::time::Instant::now() + STOP_GRACE;
    let mut pause = Duration::from_micros(50);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.code().is_some(),
            Ok(None) => {}
            Err(_) => return false,
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(2));
    }
}

/// Whether `path` lies under one of the host directories a sandbox must never see.
pub(crate) fn is_forbidden_host_dir(path: &Path) -> bool {
    [
        "/root", "/home", "/run", "/var", "/tmp", "/proc", "/sys", "/dev", "/etc", "/boot",
    ]
    .iter()
    .any(|forbidden| path == Path::new(forbidden) || path.starts_with(forbidden))
}
