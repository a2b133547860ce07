//! Processes inside a sandbox: [`SandboxShell`] (the [`Shell`] of `execute`: one command at a
//! time, output capped, timeout and cancellation kill the command's process group) and
//! [`SandboxProcess`] (a long-running process with piped stdio, for MCP stdio servers and skill
//! scripts).

use crate::client::{Connection, Event};
use crate::protocol::{ExecSpec, Exited, Frame, Kind};
use crate::provider::SandboxError;
use async_trait::async_trait;
use harness_fs::{FsError, OutputCapture, Shell, ShellError, ShellOutput, ShellRequest, WsPath};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tokio_util::sync::PollSender;

/// Where the work tree is mounted inside every sandbox.
pub const WORK_TREE_MOUNT: &str = "/workspace";

/// Settings shared by every command of one sandbox.
#[derive(Debug, Clone)]
pub(crate) struct ExecSettings {
    /// The base environment (allow-listed and sandbox-local values).
    pub(crate) env: Vec<(String, String)>,
    /// Most bytes kept per stream of a shell command.
    pub(crate) max_output_bytes: usize,
    /// Longest time limit a command may ask for.
    pub(crate) max_timeout: Duration,
}

fn sandbox_dir(cwd: &WsPath) -> String {
    if cwd.is_root() {
        WORK_TREE_MOUNT.to_owned()
    } else {
        format!("{WORK_TREE_MOUNT}/{cwd}")
    }
}

/// The shell of one sandbox. Commands of one sandbox run one at a time, in the order they
/// were asked for (turns that share the sandbox see each other's results, never a half-run
/// command); processes from [`Sandbox::spawn`](crate::Sandbox::spawn) are not serialised.
/// Background jobs (`server &`) keep running after their command returns, until the sandbox
/// stops.
pub(crate) struct SandboxShell {
    pub(crate) connection: Arc<Connection>,
    pub(crate) settings: Arc<ExecSettings>,
    pub(crate) serial: Arc<tokio::sync::Mutex<()>>,
    pub(crate) name: String,
    /// Plan mode: every command gets the read-only Landlock layer.
    pub(crate) read_only: bool,
}

/// The environment of a read-only process: `TMPDIR` moves to the private `/tmp` (the work
/// tree's `.tmp` is not writable for it).
fn read_only_env(env: &mut Vec<(String, String)>) {
    env.retain(|(name, _)| name != "TMPDIR");
    env.push(("TMPDIR".to_owned(), "/tmp".to_owned()));
}

/// Sends a kill for a process group when dropped, unless disarmed.
struct KillOnDrop {
    writer: mpsc::Sender<Vec<u8>>,
    id: Option<u64>,
}

impl KillOnDrop {
    fn disarm(&mut self) {
        self.id = None;
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let _ = self.writer.try_send(Frame::new(Kind::Kill, id, Vec::new()).encode());
        }
    }
}

#[async_trait]
impl Shell for SandboxShell {
    fn describe(&self) -> String {
        if self.read_only {
            format!("sandbox:{} (read-only)", self.name)
        } else {
            format!("sandbox:{}", self.name)
        }
    }

    async fn execute(&self, request: ShellRequest) -> Result<ShellOutput, ShellError> {
        let _turn = self.serial.lock().await;
        let mut env = self.settings.env.clone();
        if self.read_only {
            read_only_env(&mut env);
        }
        env.extend(request.env.iter().cloned());
        let spec = ExecSpec {
            argv: vec!["sh".to_owned(), "-c".to_owned(), request.command.clone()],
            cwd: sandbox_dir(&request.cwd),
            env,
            stdin: false,
            read_only: self.read_only,
        };
        let started = Instant::now();
        let gone = || ShellError::Spawn(std::io::Error::other("the sandbox is no longer running"));
        let (id, mut events) = self.connection.exec(&spec).await.ok_or_else(gone)?;
        let mut guard = KillOnDrop {
            writer: self.connection.writer(),
            id: Some(id),
        };
        let mut out = OutputCapture::new(self.settings.max_output_bytes);
        let mut err = OutputCapture::new(self.settings.max_output_bytes);
        let deadline = tokio::time::sleep(request.timeout.min(self.settings.max_timeout));
        tokio::pin!(deadline);
        let cancel = request.cancel.clone();
        let cancelled = async {
            match &cancel {
                Some(token) => token.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(cancelled);
        let (mut timed_out, mut was_cancelled, mut killed) = (false, false, false);
        let exited = loop {
            tokio::select! {
                event = events.recv() => match event {
                    Some(Event::Started(_)) => {}
                    Some(Event::Stdout(bytes)) => out.push(&bytes),
                    Some(Event::Stderr(bytes)) => err.push(&bytes),
                    Some(Event::Exited(exited)) => break exited,
                    Some(Event::Failed(failed)) => {
                        guard.disarm();
                        return Err(if failed.message.starts_with("working directory") {
                            ShellError::WorkingDirectory(FsError::NotFound { path: request.cwd.clone() })
                        } else {
                            ShellError::Spawn(std::io::Error::other(failed.message))
                        });
                    }
                    None => {
                        guard.disarm();
                        return Err(gone());
                    }
                },
                () = &mut deadline, if !killed => { timed_out = true; killed = true; self.kill(id).await; }
                () = &mut cancelled, if !killed => { was_cancelled = true; killed = true; self.kill(id).await; }
            }
        };
        guard.disarm();
        Ok(ShellOutput {
            stdout: out.render(),
            stderr: err.render(),
            exit_code: if killed { None } else { exited.code },
            signal: exited.signal,
            timed_out,
            cancelled: was_cancelled,
            stdout_truncated: out.truncated(),
            stderr_truncated: err.truncated(),
            stdout_bytes: out.total(),
            stderr_bytes: err.total(),
            duration: started.elapsed(),
        })
    }
}

impl SandboxShell {
    async fn kill(&self, id: u64) {
        let _ = self.connection.send(Frame::new(Kind::Kill, id, Vec::new())).await;
    }
}

/// A long-running process to start inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SpawnRequest {
    /// The program and its arguments (looked up in the sandbox's `PATH`).
    pub argv: Vec<String>,
    /// Working directory, relative to the work tree.
    pub cwd: WsPath,
    /// Variables on top of the sandbox's environment.
    pub env: Vec<(String, String)>,
    /// Plan mode: the process sees the work tree read-only (a second Landlock layer).
    pub read_only: bool,
}

impl SpawnRequest {
    /// `argv` in the work tree's root.
    pub fn new(argv: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            argv: argv.into_iter().map(Into::into).collect(),
            cwd: WsPath::root(),
            env: Vec::new(),
            read_only: false,
        }
    }

    /// Makes the work tree read-only for the process and its children.
    #[must_use]
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Sets the working directory.
    #[must_use]
    pub fn cwd(mut self, cwd: WsPath) -> Self {
        self.cwd = cwd;
        self
    }

    /// Adds an environment variable.
    #[must_use]
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }
}

/// How a spawned process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessExit {
    /// Its exit code, when it exited.
    pub code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
}

/// A process started with [`Sandbox::spawn`](crate::Sandbox::spawn): write its stdin, read its
/// stdout and stderr, wait for it. Dropping it kills its process group.
pub struct SandboxProcess {
    id: u64,
    pid: i32,
    stdin: Option<ProcessStdin>,
    stdout: Option<ProcessOutput>,
    stderr: Option<ProcessOutput>,
    exit: tokio::sync::watch::Receiver<Option<ProcessExit>>,
    connection: Arc<Connection>,
    router: tokio::task::JoinHandle<()>,
    killer: KillOnDrop,
}

impl std::fmt::Debug for SandboxProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxProcess")
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

impl SandboxProcess {
    pub(crate) async fn start(
        connection: Arc<Connection>,
        settings: &ExecSettings,
        request: SpawnRequest,
    ) -> Result<Self, SandboxError> {
        if request.argv.is_empty() {
            return Err(SandboxError::Spawn {
                message: "empty command".to_owned(),
            });
        }
        let mut env = settings.env.clone();
        if request.read_only {
            read_only_env(&mut env);
        }
        env.extend(request.env);
        let spec = ExecSpec {
            argv: request.argv,
            cwd: sandbox_dir(&request.cwd),
            env,
            stdin: true,
            read_only: request.read_only,
        };
        let (id, mut events) = connection.exec(&spec).await.ok_or(SandboxError::Gone)?;
        let killer = KillOnDrop {
            writer: connection.writer(),
            id: Some(id),
        };
        let pid = match events.recv().await {
            Some(Event::Started(started)) => started.pid,
            Some(Event::Failed(failed)) => {
                return Err(SandboxError::Spawn {
                    message: failed.message,
                });
            }
            Some(_) | None => return Err(SandboxError::Gone),
        };
        let (stdout_tx, stdout_rx) = mpsc::channel(64);
        let (stderr_tx, stderr_rx) = mpsc::channel(64);
        let (exit_tx, exit) = tokio::sync::watch::channel(None);
        let router = tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                match event {
                    Event::Stdout(bytes) => {
                        let _ = stdout_tx.send(bytes).await;
                    }
                    Event::Stderr(bytes) => {
                        let _ = stderr_tx.send(bytes).await;
                    }
                    Event::Exited(Exited { code, signal }) => {
                        let _ = exit_tx.send(Some(ProcessExit { code, signal }));
                        return;
                    }
                    Event::Started(_) | Event::Failed(_) => {}
                }
            }
            // The sandbox went away: report a kill.
            let _ = exit_tx.send(Some(ProcessExit {
                code: None,
                signal: Some(libc::SIGKILL),
            }));
        });
        Ok(Self {
            id,
            pid,
            stdin: Some(ProcessStdin {
                id,
                sender: PollSender::new(connection.writer()),
            }),
            stdout: Some(ProcessOutput::new(stdout_rx)),
            stderr: Some(ProcessOutput::new(stderr_rx)),
            exit,
            connection,
            router,
            killer,
        })
    }

    /// Its pid inside the sandbox (also its process group).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Its stdin (`AsyncWrite`); dropping or shutting it down closes the process's stdin.
    pub fn take_stdin(&mut self) -> Option<ProcessStdin> {
        self.stdin.take()
    }

    /// Its stdout (`AsyncRead`).
    pub fn take_stdout(&mut self) -> Option<ProcessOutput> {
        self.stdout.take()
    }

    /// Its stderr (`AsyncRead`).
    pub fn take_stderr(&mut self) -> Option<ProcessOutput> {
        self.stderr.take()
    }

    /// Waits until it ended.
    pub async fn wait(&mut self) -> ProcessExit {
        loop {
            if let Some(exit) = *self.exit.borrow() {
                self.killer.disarm();
                return exit;
            }
            if self.exit.changed().await.is_err() {
                return ProcessExit {
                    code: None,
                    signal: Some(libc::SIGKILL),
                };
            }
        }
    }

    /// Kills its process group (its exit is then reported by [`wait`](Self::wait)).
    pub async fn kill(&self) {
        let _ = self.connection.send(Frame::new(Kind::Kill, self.id, Vec::new())).await;
    }
}

impl Drop for SandboxProcess {
    fn drop(&mut self) {
        if self.exit.borrow().is_none() {
            self.router.abort();
        } else {
            self.killer.disarm();
        }
        self.connection.forget(self.id);
    }
}

/// The stdin of a [`SandboxProcess`].
pub struct ProcessStdin {
    id: u64,
    sender: PollSender<Vec<u8>>,
}

impl std::fmt::Debug for ProcessStdin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessStdin").field("id", &self.id).finish()
    }
}

impl AsyncWrite for ProcessStdin {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let closed = || std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the sandbox is no longer running");
        match self.sender.poll_reserve(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(_)) => Poll::Ready(Err(closed())),
            Poll::Ready(Ok(())) => {
                let take = buf.len().min(60 * 1024);
                let frame = Frame::new(Kind::Stdin, self.id, buf[..take].to_vec()).encode();
                match self.sender.send_item(frame) {
                    Ok(()) => Poll::Ready(Ok(take)),
                    Err(_) => Poll::Ready(Err(closed())),
                }
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.sender.poll_reserve(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(_)) => Poll::Ready(Ok(())),
            Poll::Ready(Ok(())) => {
                let frame = Frame::new(Kind::CloseStdin, self.id, Vec::new()).encode();
                let _ = self.sender.send_item(frame);
                self.sender.close();
                Poll::Ready(Ok(()))
            }
        }
    }
}

impl Drop for ProcessStdin {
    fn drop(&mut self) {
        if let Some(sender) = self.sender.get_ref() {
            let _ = sender.try_send(Frame::new(Kind::CloseStdin, self.id, Vec::new()).encode());
        }
    }
}

/// The stdout or stderr of a [`SandboxProcess`]; ends when the process ended.
pub struct ProcessOutput {
    receiver: mpsc::Receiver<Vec<u8>>,
    pending: Vec<u8>,
    offset: usize,
}

impl std::fmt::Debug for ProcessOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessOutput").finish_non_exhaustive()
    }
}

impl ProcessOutput {
    fn new(receiver: mpsc::Receiver<Vec<u8>>) -> Self {
        Self {
            receiver,
            pending: Vec::new(),
            offset: 0,
        }
    }
}

impl AsyncRead for ProcessOutput {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        loop {
            if self.offset < self.pending.len() {
                let take = buf.remaining().min(self.pending.len() - self.offset);
                let start = self.offset;
                buf.put_slice(&self.pending[start..start + take]);
                self.offset += take;
                return Poll::Ready(Ok(()));
            }
            match self.receiver.poll_recv(cx) {
                Poll::Ready(Some(bytes)) => {
                    self.pending = bytes;
                    self.offset = 0;
                }
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
