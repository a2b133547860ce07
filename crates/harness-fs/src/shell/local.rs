//! [`LocalShell`]: `sh -c` on the host, in its own process group, with a scrubbed environment,
//! a timeout that kills the whole group, and capped output.

use super::capture::{Capture, drain};
use super::{Shell, ShellError, ShellOutput, ShellRequest};
use crate::error::FsError;
use crate::jail::{Jail, io_error};
use crate::path::WsPath;
use async_trait::async_trait;
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Variables a command inherits from this process by default. `LC_*` matches every locale
/// variable. API keys and other secrets are never on it.
pub const DEFAULT_ENV_ALLOWLIST: &[&str] = &[
    "PATH", "HOME", "LANG", "LANGUAGE", "LC_*", "TERM", "TZ", "USER", "LOGNAME", "SHELL", "TMPDIR",
];

/// How long the output pipes are still read after the process group was killed, in case a
/// process escaped the group (e.g. with `setsid`) and keeps them open.
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// Settings of a [`LocalShell`]. Plain data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalShellConfig {
    /// Names of variables copied from this process's environment when the shell is created;
    /// a trailing `*` matches a prefix. Everything else is removed.
    pub inherit_env: Vec<String>,
    /// Variables set for every command, after the inherited ones.
    pub env: Vec<(String, String)>,
    /// Most bytes kept per stream (stdout, stderr): half from the start, half from the end.
    pub max_output_bytes: usize,
    /// Longest time limit a request may ask for; longer requests are cut to it.
    pub max_timeout: Duration,
}

impl Default for LocalShellConfig {
    fn default() -> Self {
        Self {
            inherit_env: DEFAULT_ENV_ALLOWLIST.iter().map(|name| (*name).to_owned()).collect(),
            env: Vec::new(),
            max_output_bytes: 100_000,
            max_timeout: Duration::from_secs(600),
        }
    }
}

impl LocalShellConfig {
    fn allows(&self, name: &str) -> bool {
        self.inherit_env.iter().any(|allowed| match allowed.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == allowed,
        })
    }
}

/// A config plus the environment captured from this process when the shell was created.
#[derive(Debug)]
pub(crate) struct ShellSettings {
    config: LocalShellConfig,
    inherited: Vec<(OsString, OsString)>,
}

impl ShellSettings {
    /// Copies the allowed variables of this process's environment. This is the only place the
    /// library reads the environment, and only names on the allowlist.
    pub(crate) fn capture(config: LocalShellConfig) -> Self {
        Self::capture_from(config, std::env::vars_os())
    }

    pub(crate) fn capture_from(config: LocalShellConfig, parent: impl Iterator<Item = (OsString, OsString)>) -> Self {
        let inherited = parent
            .filter(|(name, _)| name.to_str().is_some_and(|name| config.allows(name)))
            .collect();
        Self { config, inherited }
    }
}

/// `sh -c` on the host, confined (for its working directory) to a root directory.
///
/// - Each command runs in a new process group. A timeout, a cancellation or dropping the
///   future kills the whole group with `SIGKILL`, grandchildren included; so does the end of
///   the command, so background jobs never outlive it.
/// - stdout and stderr are read while the command runs, so it never blocks on a full pipe,
///   and each is capped at [`LocalShellConfig::max_output_bytes`], keeping head and tail.
/// - The environment is cleared and rebuilt from the allowlist plus explicit variables, so
///   secrets of the host process (`OPENAI_API_KEY`, …) never reach the command.
/// - The working directory must resolve (symlinks included) inside the root.
///
/// This is not a sandbox: the command itself can read and write anything the host user can.
/// Use it for trusted single-user setups; use a sandbox backend otherwise.
#[derive(Debug, Clone)]
pub struct LocalShell {
    jail: Arc<Jail>,
    settings: Arc<ShellSettings>,
}

impl LocalShell {
    /// A shell rooted at `root` (created when missing). Blocking; call it while building.
    ///
    /// # Errors
    /// [`FsError::Io`] when the root cannot be created or resolved.
    pub fn new(root: impl AsRef<Path>, config: LocalShellConfig) -> Result<Self, FsError> {
        let root = root.as_ref();
        let io = |err: std::io::Error| FsError::Io {
            path: WsPath::root(),
            operation: "open root",
            source: Box::new(err),
        };
        std::fs::create_dir_all(root).map_err(io)?;
        let base = std::fs::canonicalize(root).map_err(io)?;
        Ok(Self::from_parts(
            Arc::new(Jail::new(base)),
            Arc::new(ShellSettings::capture(config)),
        ))
    }

    pub(crate) fn from_parts(jail: Arc<Jail>, settings: Arc<ShellSettings>) -> Self {
        Self { jail, settings }
    }

    fn working_directory(&self, cwd: &WsPath) -> Result<std::path::PathBuf, FsError> {
        let real = self.jail.resolve(cwd)?;
        match std::fs::metadata(&real) {
            Ok(meta) if meta.is_dir() => Ok(real),
            Ok(_) => Err(FsError::NotDirectory { path: cwd.clone() }),
            // The root of a fresh namespace may not exist yet.
            Err(err) if err.kind() == std::io::ErrorKind::NotFound && cwd.is_root() => {
                std::fs::create_dir_all(&real).map_err(|err| io_error(err, cwd, "create working directory"))?;
                Ok(real)
            }
            Err(err) => Err(io_error(err, cwd, "open working directory")),
        }
    }
}

/// What ended the wait.
enum Ending {
    Exited(std::io::Result<std::process::ExitStatus>),
    TimedOut,
    Cancelled,
}

/// Kills a process group when dropped, unless disarmed: a dropped `execute` future never
/// leaves processes behind.
struct GroupGuard(Option<u32>);

impl GroupGuard {
    fn kill(&mut self) {
        if let Some(group) = self.0.take() {
            kill_group(group);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sends `SIGKILL` to every process of group `group`.
#[allow(unsafe_code)]
fn kill_group(group: u32) {
    let Ok(group) = libc::pid_t::try_from(group) else {
        return;
    };
    // Group ids 0 and 1 would mean "our own group" and init: never signal those.
    if group <= 1 {
        return;
    }
    // SAFETY: `killpg` takes two integers and touches no memory of ours. `group` is the pid of
    // a child we spawned with `process_group(0)`, so it names that child's own group. A group
    // that is already gone yields ESRCH, which is fine to ignore.
    let _ = unsafe { libc::killpg(group, libc::SIGKILL) };
}

#[async_trait]
impl Shell for LocalShell {
    fn describe(&self) -> String {
        format!("local:{}", self.jail.root().display())
    }

    async fn execute(&self, request: ShellRequest) -> Result<ShellOutput, ShellError> {
        let this = self.clone();
        let cwd = request.cwd.clone();
        let directory = tokio::task::spawn_blocking(move || this.working_directory(&cwd))
            .await
            .map_err(|err| ShellError::Io(std::io::Error::other(err)))?
            .map_err(ShellError::WorkingDirectory)?;

        let config = &self.settings.config;
        let mut command = tokio::process::Command::new("sh");
        command
            .arg("-c")
            .arg(&request.command)
            .current_dir(&directory)
            .env_clear()
            .envs(self.settings.inherited.iter().map(|(name, value)| (name, value)))
            .envs(config.env.iter().map(|(name, value)| (name, value)))
            .envs(request.env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let started = Instant::now();
        let mut child = command.spawn().map_err(ShellError::Spawn)?;
        let mut guard = GroupGuard(child.id());
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let mut out = Capture::new(config.max_output_bytes);
        let mut err = Capture::new(config.max_output_bytes);
        let timeout = request.timeout.min(config.max_timeout);
        let cancel = request.cancel.clone();

        let ending = {
            let pumps = async { tokio::join!(drain(stdout, &mut out), drain(stderr, &mut err)) };
            tokio::pin!(pumps);
            let deadline = tokio::time::sleep(timeout);
            tokio::pin!(deadline);
            let cancelled = async {
                match &cancel {
                    Some(token) => token.cancelled().await,
                    None => std::future::pending().await,
                }
            };
            tokio::pin!(cancelled);
            let mut pumps_done = false;
            let ending = loop {
                tokio::select! {
                    status = child.wait() => break Ending::Exited(status),
                    _ = &mut pumps, if !pumps_done => pumps_done = true,
                    () = &mut deadline => break Ending::TimedOut,
                    () = &mut cancelled => break Ending::Cancelled,
                }
            };
            // Whatever ended the wait, nothing of the command may live on: kill the group
            // (background jobs included), then collect what the pipes still hold.
            guard.kill();
            if !pumps_done {
                let _ = tokio::time::timeout(PIPE_GRACE, &mut pumps).await;
            }
            ending
        };
        let timed_out = matches!(ending, Ending::TimedOut);
        let cancelled = matches!(ending, Ending::Cancelled);
        let status = match ending {
            Ending::Exited(status) => Some(status.map_err(ShellError::Io)?),
            Ending::TimedOut | Ending::Cancelled => child.wait().await.ok(),
        };
        Ok(ShellOutput {
            stdout: out.render(),
            stderr: err.render(),
            exit_code: if timed_out || cancelled {
                None
            } else {
                status.and_then(|status| status.code())
            },
            signal: status.and_then(|status| status.signal()),
            timed_out,
            cancelled,
            stdout_truncated: out.truncated(),
            stderr_truncated: err.truncated(),
            stdout_bytes: out.total(),
            stderr_bytes: err.total(),
            duration: started.elapsed(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_allowlisted_variables_are_inherited() {
        let parent = [
            ("PATH", "/bin"),
            ("LC_ALL", "C"),
            ("OPENAI_API_KEY", "sk-secret"),
            ("AWS_SECRET_ACCESS_KEY", "x"),
            ("PATHOLOGICAL", "x"),
        ]
        .map(|(name, value)| (OsString::from(name), OsString::from(value)));
        let settings = ShellSettings::capture_from(LocalShellConfig::default(), parent.into_iter());
        let names: Vec<&str> = settings
            .inherited
            .iter()
            .filter_map(|(name, _)| name.to_str())
            .collect();
        assert_eq!(names, ["PATH", "LC_ALL"]);
    }
}
