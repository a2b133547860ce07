//! The [`Shell`] capability: run a command in a filesystem's root. Separate from
//! [`Filesystem`](crate::Filesystem) because most backends (a KV store, a composite of remote
//! stores) have none, and a host shell is never exposed unless asked for.

mod capture;
mod local;

pub use capture::Capture as OutputCapture;
pub(crate) use local::ShellSettings;
pub use local::{DEFAULT_ENV_ALLOWLIST, LocalShell, LocalShellConfig};

use crate::error::FsError;
use crate::path::WsPath;
use async_trait::async_trait;
use harness_core::CancellationToken;
use std::sync::Arc;
use std::time::Duration;

/// One command to run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ShellRequest {
    /// The command line, run with `sh -c`.
    pub command: String,
    /// Working directory, relative to the shell's root (the root itself by default). It must
    /// exist and stay inside the root, symlinks included.
    pub cwd: WsPath,
    /// Time limit; when it passes, the command and every process it started are killed.
    pub timeout: Duration,
    /// Extra environment variables, on top of the shell's scrubbed environment.
    pub env: Vec<(String, String)>,
    /// Cancelling this token kills the command like a timeout does.
    pub cancel: Option<CancellationToken>,
}

impl ShellRequest {
    /// `command` in the root with a 30 s limit.
    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: command.into(),
            cwd: WsPath::root(),
            timeout: Duration::from_secs(30),
            env: Vec::new(),
            cancel: None,
        }
    }

    /// Sets the working directory.
    #[must_use]
    pub fn cwd(mut self, cwd: WsPath) -> Self {
        self.cwd = cwd;
        self
    }

    /// Sets the time limit.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Adds an environment variable.
    #[must_use]
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Kills the command when `token` is cancelled.
    #[must_use]
    pub fn cancel_on(mut self, token: CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }
}

/// What a command did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShellOutput {
    /// Standard output (invalid UTF-8 replaced). When longer than the cap, its head and tail
    /// with a `[… N bytes omitted …]` marker between them.
    pub stdout: String,
    /// Standard error, capped the same way.
    pub stderr: String,
    /// The exit code; `None` when the process was killed by a signal (including a timeout).
    pub exit_code: Option<i32>,
    /// The signal that ended the process, when one did.
    pub signal: Option<i32>,
    /// Whether the time limit passed and the process group was killed.
    pub timed_out: bool,
    /// Whether the request's cancellation token fired and the process group was killed.
    pub cancelled: bool,
    /// Whether `stdout` was cut.
    pub stdout_truncated: bool,
    /// Whether `stderr` was cut.
    pub stderr_truncated: bool,
    /// Bytes the command wrote to stdout, before any cut.
    pub stdout_bytes: u64,
    /// Bytes the command wrote to stderr, before any cut.
    pub stderr_bytes: u64,
    /// Wall time.
    pub duration: Duration,
}

impl ShellOutput {
    /// Whether the command ran to completion and exited with 0.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0)
    }
}

/// Why a command could not be run (a command that runs and fails is a [`ShellOutput`] with a
/// non-zero exit code, not an error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShellError {
    /// The working directory is invalid, missing, not a directory or outside the root.
    #[error("working directory {0}")]
    WorkingDirectory(#[source] FsError),
    /// The shell could not be started.
    #[error("could not start `sh`")]
    Spawn(#[source] std::io::Error),
    /// Reading the command's output or waiting for it failed.
    #[error("running the command failed")]
    Io(#[source] std::io::Error),
}

/// Runs commands in a root directory.
///
/// Implementations guarantee: the command gets its own process group and a scrubbed
/// environment; the time limit (and cancellation) kills the whole group; output is drained
/// while the command runs, so a chatty command never blocks on a full pipe, and it is capped.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use harness_fs::{LocalShell, LocalShellConfig, Shell, ShellRequest};
/// use std::time::Duration;
/// let dir = tempfile::tempdir().unwrap();
/// let shell = LocalShell::new(dir.path(), LocalShellConfig::default())?;
/// let output = shell.execute(ShellRequest::new("echo hi; exit 3")).await.unwrap();
/// assert_eq!((output.stdout.as_str(), output.exit_code), ("hi\n", Some(3)));
/// let slow = shell.execute(ShellRequest::new("sleep 5").timeout(Duration::from_millis(100))).await.unwrap();
/// assert!(slow.timed_out);
/// # Ok::<_, harness_fs::FsError>(()) }).unwrap();
/// ```
#[async_trait]
pub trait Shell: Send + Sync + 'static {
    /// A short description for prompts and logs (e.g. `local:/srv/ws`).
    fn describe(&self) -> String;

    /// Runs one command.
    ///
    /// # Errors
    /// [`ShellError`] when the command could not be run at all.
    ///
    /// # Cancellation
    /// Dropping the future kills the command's process group.
    async fn execute(&self, request: ShellRequest) -> Result<ShellOutput, ShellError>;
}

/// The shell of one call, put into the call's [`RuntimeContext`](harness_core::RuntimeContext)
/// when the call is bound (e.g. a sandbox's shell). The `execute` tool prefers it to the shell
/// of the caller's [`CallWorkspace`](crate::CallWorkspace) filesystem.
#[derive(Clone)]
pub struct CallShell(pub Arc<dyn Shell>);

impl std::fmt::Debug for CallShell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CallShell").field(&self.0.describe()).finish()
    }
}

/// The read-only twin of a call's [`CallShell`], put beside it by a backend that can enforce
/// it (a sandbox: the work tree read-only at the kernel level, not by inspecting commands). A
/// capability that must keep the work tree unchanged for a call (plan mode) makes it the
/// call's [`CallShell`] with [`CallReadOnlyShell::apply`].
#[derive(Clone)]
pub struct CallReadOnlyShell(pub Arc<dyn Shell>);

impl CallReadOnlyShell {
    /// Makes `ctx`'s read-only shell its [`CallShell`]; `false` (and `ctx` unchanged) when
    /// the call has none, i.e. nothing below the tool filter keeps its shell from writing.
    pub fn apply(ctx: &mut harness_core::RuntimeContext) -> bool {
        let Some(CallReadOnlyShell(shell)) = ctx.get::<CallReadOnlyShell>().cloned() else {
            return false;
        };
        ctx.insert(CallShell(shell));
        true
    }
}

impl std::fmt::Debug for CallReadOnlyShell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CallReadOnlyShell").field(&self.0.describe()).finish()
    }
}

/// A shell whose working directories are relative to `prefix` inside another shell's root:
/// the shell half of [`Namespaced`](crate::Namespaced) for backends that cannot scope
/// themselves.
pub(crate) struct NamespacedShell {
    pub(crate) inner: Arc<dyn Shell>,
    pub(crate) prefix: WsPath,
}

#[async_trait]
impl Shell for NamespacedShell {
    fn describe(&self) -> String {
        format!("{}/{}", self.inner.describe(), self.prefix)
    }

    async fn execute(&self, mut request: ShellRequest) -> Result<ShellOutput, ShellError> {
        request.cwd = self.prefix.join_path(&request.cwd);
        self.inner.execute(request).await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::{CallReadOnlyShell, CallShell, LocalShell, LocalShellConfig, Shell};
    use std::sync::Arc;

    /// With a read-only twin, `apply` makes it the call's shell; without one it says so and
    /// leaves the call's shell alone.
    #[test]
    fn apply_swaps_in_the_read_only_shell_only_when_there_is_one() {
        let dir = tempfile::tempdir().unwrap();
        let shell = |sub: &str| -> Arc<dyn Shell> {
            let root = dir.path().join(sub);
            std::fs::create_dir_all(&root).unwrap();
            Arc::new(LocalShell::new(&root, LocalShellConfig::default()).unwrap())
        };
        let described = |ctx: &harness_core::RuntimeContext| ctx.get::<CallShell>().map(|CallShell(s)| s.describe());
        let mut ctx = harness_core::RuntimeContext::for_user(harness_core::UserId::from_static("alice"));
        ctx.insert(CallShell(shell("rw")));
        let before = described(&ctx);
        assert!(!CallReadOnlyShell::apply(&mut ctx));
        assert_eq!(described(&ctx), before);
        let read_only = shell("ro");
        let expected = read_only.describe();
        ctx.insert(CallReadOnlyShell(read_only));
        assert!(CallReadOnlyShell::apply(&mut ctx));
        assert_eq!(described(&ctx), Some(expected));
        assert_ne!(described(&ctx), before);
    }
}
