//! One MCP server: connect, watch for its death, restart it once per death (with a growing
//! backoff), shut it down with its whole process group.
//!
//! A streamable-HTTP server is not ours to restart: when it goes away the connection is
//! re-established instead, with the same growing backoff and without giving up, and a tool
//! call while it is away asks for an attempt at once and waits for that attempt only (so a
//! call during the outage is an error result as soon as the connect fails, and the first
//! call after the server is back reconnects and goes through).
//!
//! A stdio server runs in its own process group with a scrubbed environment (see
//! [`HostEnv::scrubbed`]) plus the `env` of its configuration; shutdown and death kill the
//! group, so grandchildren go too. The live state is published on a `watch` channel: tools
//! read the current peer from it (a call during an outage fails at once) and tests wait on
//! it instead of sleeping.

use crate::env::HostEnv;
use crate::spawn::{ServerProcess, StdioCommand, StdioSpawner};
use crate::tools_json::{McpServerConfig, McpTransport};
use rmcp::service::{Peer, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use std::collections::{HashMap, VecDeque};
use std::process::Stdio;
use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::time::Duration;
use tokio::io::AsyncBufReadExt;
use tokio::process::Child;
use tokio::sync::{Mutex, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

type Client = RunningService<RoleClient, ServerLog>;

/// The client side of a connection: the server's log messages (`notifications/message`)
/// go to the process log at debug, named by server (never to the model).
#[derive(Debug, Clone)]
pub(crate) struct ServerLog {
    server: String,
}

#[allow(deprecated)] // logging is SEP-2577-deprecated in rmcp, and still what servers send
impl rmcp::ClientHandler for ServerLog {
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let logger = params.logger.unwrap_or_default();
        tracing::debug!(server = %self.server, level = ?params.level, logger = %logger, "MCP server log: {}", params.data);
    }
}

/// Lines of a stdio server's stderr kept for error messages.
const STDERR_TAIL_LINES: usize = 8;

/// How a dead server is restarted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    /// Wait before the first restart; doubles with every further restart.
    pub backoff: Duration,
    /// The longest wait.
    pub max_backoff: Duration,
    /// Time allowed for spawning and the MCP handshake.
    pub connect_timeout: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        Self {
            backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(30),
        }
    }
}

impl RestartPolicy {
    fn delay(&self, restarts: u32) -> Duration {
        self.backoff
            .saturating_mul(1u32.checked_shl(restarts.min(16)).unwrap_or(u32::MAX))
            .min(self.max_backoff)
    }
}

/// Why a server could not be reached.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The command could not be started.
    #[error("cannot start `{command}`")]
    Spawn {
        /// The program.
        command: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The agent's [`StdioSpawner`] (its sandbox) could not start the command; it is never
    /// started on the host instead.
    #[error("cannot start `{command}`: {message}")]
    Confined {
        /// The program.
        command: String,
        /// The spawner's cause and fix.
        message: String,
    },
    /// A header name or value is not valid HTTP.
    #[error("invalid header `{name}`")]
    Header {
        /// The header.
        name: String,
    },
    /// The MCP handshake failed.
    #[error("MCP handshake failed: {message}{stderr}")]
    Handshake {
        /// The client's error.
        message: String,
        /// The tail of the server's stderr, when it wrote any.
        stderr: String,
    },
    /// Spawn plus handshake took too long.
    #[error("no MCP handshake within {after:?}{stderr}")]
    Timeout {
        /// The limit.
        after: Duration,
        /// The tail of the server's stderr, when it wrote any.
        stderr: String,
    },
    /// Listing the server's tools failed.
    #[error("tools/list failed: {message}")]
    ListTools {
        /// The client's error.
        message: String,
    },
}

/// Where a server is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerPhase {
    /// Connected; calls go through.
    Ready,
    /// It died; a restart is pending. Calls fail at once.
    Restarting {
        /// What happened.
        reason: String,
    },
    /// It died and could not be restarted. Calls fail at once.
    Down {
        /// What happened.
        reason: String,
    },
    /// Shut down.
    Stopped,
}

/// A snapshot of one server's state.
#[derive(Debug, Clone)]
pub struct ServerStatus {
    /// The phase.
    pub phase: ServerPhase,
    /// The stdio server's process id (= its process group), while it runs on the host
    /// (`None` for a server in a sandbox, whose pids are the sandbox's own).
    pub pid: Option<u32>,
    /// Restarts so far.
    pub restarts: u32,
    peer: Option<Peer<RoleClient>>,
    /// Completed reconnect attempts (streamable HTTP), so a call can wait for the next one.
    attempts: u64,
}

/// A live connection to one server plus its restart supervisor.
pub(crate) struct Connection {
    config: McpServerConfig,
    env: HostEnv,
    spawner: Option<Arc<dyn StdioSpawner>>,
    policy: RestartPolicy,
    status: watch::Sender<ServerStatus>,
    shutdown: CancellationToken,
    supervisor: Mutex<Option<JoinHandle<()>>>,
    stderr_tail: Arc<StdMutex<VecDeque<String>>>,
    /// A call asking the HTTP reconnect loop to try now.
    nudge: tokio::sync::Notify,
    /// Cancels the live client (a call found its transport broken).
    current: StdMutex<Option<CancellationToken>>,
    attempts: std::sync::atomic::AtomicU64,
}

/// A connected server: the client plus, for stdio, the child (owned here so it is reaped).
struct Running {
    client: Client,
    child: Option<ServerChild>,
}

impl Running {
    fn pid(&self) -> Option<u32> {
        match self.child.as_ref()? {
            ServerChild::Host(child) => child.pid,
            ServerChild::Spawned { .. } => None,
        }
    }
}

/// A stdio server's process: a host child, or one a [`StdioSpawner`] started.
enum ServerChild {
    Host(GroupChild),
    Spawned {
        process: Box<dyn ServerProcess>,
        stderr_reader: Option<JoinHandle<()>>,
    },
}

impl ServerChild {
    /// Kills it (with everything it started) and waits (bounded) for its stderr reader.
    async fn kill(&mut self) {
        match self {
            Self::Host(child) => child.kill().await,
            Self::Spawned { process, stderr_reader } => {
                process.kill().await;
                drain(stderr_reader.take()).await;
            }
        }
    }
}

/// Waits (bounded) for a stderr reader to reach the end of the stream.
async fn drain(reader: Option<JoinHandle<()>>) {
    if let Some(reader) = reader {
        let abort = reader.abort_handle();
        if tokio::time::timeout(STDERR_DRAIN, reader).await.is_err() {
            abort.abort();
        }
    }
}

/// Copies a server's stderr lines into `tail` (and the debug log).
fn read_stderr(
    stderr: impl tokio::io::AsyncRead + Send + Unpin + 'static,
    tail: &Arc<StdMutex<VecDeque<String>>>,
    server: &str,
) -> JoinHandle<()> {
    let tail = Arc::clone(tail);
    let server = server.to_owned();
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::debug!(server = %server, "{line}");
            let mut tail = tail.lock().unwrap_or_else(PoisonError::into_inner);
            if tail.len() == STDERR_TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line);
        }
    })
}

/// A stdio server's process, leader of its own group. Dropped without [`kill`](Self::kill)
/// (a task torn down with its runtime), it still kills the group.
struct GroupChild {
    child: Child,
    pid: Option<u32>,
    reaped: bool,
    /// Copies stderr into the tail; ends when the group is dead.
    stderr_reader: Option<JoinHandle<()>>,
}

/// How long the stderr reader may take to drain after the group is killed.
const STDERR_DRAIN: Duration = Duration::from_secs(2);

impl GroupChild {
    /// Kills the group, reaps the leader and waits (bounded) for the stderr reader, so an
    /// error built right after quotes everything the server said.
    async fn kill(&mut self) {
        if let Some(pid) = self.pid {
            kill_group_now(pid);
        }
        let _ = self.child.kill().await;
        self.reaped = true;
        drain(self.stderr_reader.take()).await;
    }
}

impl Drop for GroupChild {
    fn drop(&mut self) {
        if let (false, Some(pid)) = (self.reaped, self.pid) {
            kill_group_now(pid);
        }
    }
}

impl Connection {
    /// Connects and lists the server's tools.
    pub(crate) async fn start(
        config: McpServerConfig,
        env: HostEnv,
        spawner: Option<Arc<dyn StdioSpawner>>,
        policy: RestartPolicy,
    ) -> Result<(Arc<Self>, Vec<rmcp::model::Tool>), ConnectError> {
        let stderr_tail = Arc::new(StdMutex::new(VecDeque::new()));
        let running = connect(&config, &env, spawner.as_deref(), &policy, &stderr_tail).await?;
        let tools = match running.client.peer().list_all_tools().await {
            Ok(tools) => tools,
            Err(err) => {
                running.stop().await;
                return Err(ConnectError::ListTools {
                    message: err.to_string(),
                });
            }
        };
        let (status, _) = watch::channel(ServerStatus {
            phase: ServerPhase::Ready,
            pid: running.pid(),
            restarts: 0,
            peer: Some(running.client.peer().clone()),
            attempts: 0,
        });
        let connection = Arc::new(Self {
            config,
            env,
            spawner,
            policy,
            status,
            shutdown: CancellationToken::new(),
            supervisor: Mutex::new(None),
            stderr_tail,
            nudge: tokio::sync::Notify::new(),
            current: StdMutex::new(None),
            attempts: std::sync::atomic::AtomicU64::new(0),
        });
        let supervisor = tokio::spawn(Arc::clone(&connection).supervise(running));
        *connection.supervisor.lock().await = Some(supervisor);
        Ok((connection, tools))
    }

    /// The server's name.
    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    /// The per-call timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.config.timeout
    }

    /// Whether tools.json trusts this server's tool annotations.
    pub(crate) fn trusts_annotations(&self) -> bool {
        self.config.trust_annotations
    }

    /// Follows the server's state.
    pub(crate) fn subscribe(&self) -> watch::Receiver<ServerStatus> {
        self.status.subscribe()
    }

    /// The peer to call, or why there is none right now.
    pub(crate) fn peer(&self) -> Result<Peer<RoleClient>, String> {
        let status = self.status.borrow();
        match (&status.phase, &status.peer) {
            (ServerPhase::Ready, Some(peer)) => Ok(peer.clone()),
            (ServerPhase::Restarting { reason }, _) => Err(format!("{reason}; it is being restarted")),
            (ServerPhase::Down { reason }, _) => Err(reason.clone()),
            (ServerPhase::Stopped, _) => Err("the agent is shutting down".to_owned()),
            (ServerPhase::Ready, None) => Err("not connected".to_owned()),
        }
    }

    fn is_http(&self) -> bool {
        matches!(self.config.transport, McpTransport::StreamableHttp { .. })
    }

    /// The peer for a tool call. A streamable-HTTP server that is away is asked to
    /// reconnect now; the call waits for that one attempt (bounded by the connect timeout)
    /// and gets the new peer, or the reason it is still away.
    pub(crate) async fn peer_for_call(&self) -> Result<Peer<RoleClient>, String> {
        let mut status = self.status.subscribe();
        let (away, seen) = {
            let now = status.borrow();
            (matches!(now.phase, ServerPhase::Restarting { .. }), now.attempts)
        };
        if !(away && self.is_http()) {
            return self.peer();
        }
        self.nudge.notify_one();
        let attempted =
            status.wait_for(|now| now.attempts > seen || !matches!(now.phase, ServerPhase::Restarting { .. }));
        // One connect attempt is bounded by the connect timeout; the slack covers the
        // supervisor getting to it.
        let _ = tokio::time::timeout(self.policy.connect_timeout + Duration::from_secs(5), attempted).await;
        self.peer()
    }

    /// A call found the transport broken (a streamable-HTTP server that went away): drop
    /// the client so the supervisor reconnects, and stop handing out its peer at once.
    pub(crate) fn mark_broken(&self, reason: &str) {
        if !self.is_http() {
            return;
        }
        let token = self.current.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(token) = token {
            token.cancel();
            let restarts = self.status.borrow().restarts;
            self.publish(
                ServerPhase::Restarting {
                    reason: format!("MCP server `{}` is unreachable: {reason}", self.config.name),
                },
                None,
                restarts,
            );
        }
    }

    /// Stops the supervisor, the client and the process group; waits until they are gone.
    pub(crate) async fn shutdown(&self) {
        self.shutdown.cancel();
        let supervisor = self.supervisor.lock().await.take();
        if let Some(supervisor) = supervisor {
            let _ = supervisor.await;
        }
    }

    fn publish(&self, phase: ServerPhase, running: Option<&Running>, restarts: u32) {
        self.status.send_replace(ServerStatus {
            phase,
            pid: running.and_then(Running::pid),
            restarts,
            peer: running.map(|r| r.client.peer().clone()),
            attempts: self.attempts.load(std::sync::atomic::Ordering::SeqCst),
        });
    }

    /// Reconnects a streamable-HTTP server that went away: attempts after a growing backoff
    /// or at once when a call asks ([`peer_for_call`](Self::peer_for_call)), without giving
    /// up; `None` at shutdown.
    async fn reconnect_http(&self, restarts: u32) -> Option<Running> {
        let mut failures = 0u32;
        loop {
            tokio::select! {
                () = tokio::time::sleep(self.policy.delay(failures)) => {}
                () = self.nudge.notified() => {}
                () = self.shutdown.cancelled() => return None,
            }
            let attempt = tokio::select! {
                attempt = connect(&self.config, &self.env, self.spawner.as_deref(), &self.policy, &self.stderr_tail) => attempt,
                () = self.shutdown.cancelled() => return None,
            };
            self.attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            match attempt {
                Ok(next) => {
                    tracing::info!(server = %self.config.name, "MCP server reconnected");
                    self.publish(ServerPhase::Ready, Some(&next), restarts + 1);
                    return Some(next);
                }
                Err(err) => {
                    failures = failures.saturating_add(1);
                    let reason = format!("MCP server `{}` is unreachable: {err}", self.config.name);
                    tracing::debug!(server = %self.config.name, %reason, "reconnect failed; will retry");
                    self.publish(ServerPhase::Restarting { reason: reason.clone() }, None, restarts);
                }
            }
        }
    }

    async fn supervise(self: Arc<Self>, mut running: Running) {
        let mut restarts = 0u32;
        loop {
            let token = running.client.cancellation_token();
            let broken = CancellationToken::new();
            *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(broken.clone());
            let Running { client, mut child } = running;
            let waiting = client.waiting();
            tokio::pin!(waiting);
            tokio::select! {
                _ = &mut waiting => {}
                () = broken.cancelled() => {
                    token.cancel();
                    let _ = waiting.await;
                }
                () = self.shutdown.cancelled() => {
                    token.cancel();
                    let _ = waiting.await;
                    kill(child.as_mut()).await;
                    self.publish(ServerPhase::Stopped, None, restarts);
                    return;
                }
            }
            kill(child.as_mut()).await;
            if self.is_http() {
                let reason = format!("MCP server `{}` went away; reconnecting", self.config.name);
                tracing::warn!(server = %self.config.name, "MCP server went away; reconnecting");
                self.publish(ServerPhase::Restarting { reason }, None, restarts);
                match self.reconnect_http(restarts).await {
                    Some(next) => {
                        restarts += 1;
                        running = next;
                        continue;
                    }
                    None => {
                        self.publish(ServerPhase::Stopped, None, restarts);
                        return;
                    }
                }
            }
            let reason = format!("MCP server `{}` exited{}", self.config.name, self.stderr_suffix());
            tracing::warn!(server = %self.config.name, %reason, "MCP server died; restarting");
            self.publish(ServerPhase::Restarting { reason: reason.clone() }, None, restarts);
            tokio::select! {
                () = tokio::time::sleep(self.policy.delay(restarts)) => {}
                () = self.shutdown.cancelled() => {
                    self.publish(ServerPhase::Stopped, None, restarts);
                    return;
                }
            }
            let attempt = tokio::select! {
                attempt = connect(&self.config, &self.env, self.spawner.as_deref(), &self.policy, &self.stderr_tail) => attempt,
                () = self.shutdown.cancelled() => {
                    self.publish(ServerPhase::Stopped, None, restarts);
                    return;
                }
            };
            match attempt {
                Ok(next) => {
                    restarts += 1;
                    tracing::info!(server = %self.config.name, restarts, "MCP server restarted");
                    self.publish(ServerPhase::Ready, Some(&next), restarts);
                    running = next;
                }
                Err(err) => {
                    let reason = format!("{reason}, and the restart failed: {err}");
                    tracing::warn!(server = %self.config.name, %reason, "MCP server is down");
                    self.publish(ServerPhase::Down { reason }, None, restarts);
                    self.shutdown.cancelled().await;
                    self.publish(ServerPhase::Stopped, None, restarts);
                    return;
                }
            }
        }
    }

    fn stderr_suffix(&self) -> String {
        stderr_suffix(&self.stderr_tail)
    }
}

impl Running {
    async fn stop(mut self) {
        self.client.cancellation_token().cancel();
        let _ = self.client.waiting().await;
        kill(self.child.as_mut()).await;
    }
}

async fn connect(
    config: &McpServerConfig,
    env: &HostEnv,
    spawner: Option<&dyn StdioSpawner>,
    policy: &RestartPolicy,
    stderr_tail: &Arc<StdMutex<VecDeque<String>>>,
) -> Result<Running, ConnectError> {
    let handler = ServerLog {
        server: config.name.clone(),
    };
    match &config.transport {
        McpTransport::Stdio {
            command,
            args,
            env: extra,
        } => {
            let (mut child, stdout, stdin): (ServerChild, crate::ServerRead, crate::ServerWrite) = match spawner {
                Some(spawner) => {
                    let request = StdioCommand {
                        server: config.name.clone(),
                        command: command.clone(),
                        args: args.clone(),
                        env: extra.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                    };
                    let spawned = spawner.spawn(request).await.map_err(|message| ConnectError::Confined {
                        command: command.clone(),
                        message,
                    })?;
                    let stderr_reader = spawned
                        .stderr
                        .map(|stderr| read_stderr(stderr, stderr_tail, &config.name));
                    let child = ServerChild::Spawned {
                        process: spawned.process,
                        stderr_reader,
                    };
                    (child, spawned.stdout, spawned.stdin)
                }
                None => {
                    let mut cmd = tokio::process::Command::new(command);
                    cmd.args(args)
                        .env_clear()
                        .envs(env.scrubbed())
                        .envs(extra)
                        .stdin(Stdio::piped())
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .process_group(0)
                        .kill_on_drop(true);
                    let child = cmd.spawn().map_err(|source| ConnectError::Spawn {
                        command: command.clone(),
                        source,
                    })?;
                    let pid = child.id();
                    let mut child = GroupChild {
                        child,
                        pid,
                        reaped: false,
                        stderr_reader: None,
                    };
                    if let Some(stderr) = child.child.stderr.take() {
                        child.stderr_reader = Some(read_stderr(stderr, stderr_tail, &config.name));
                    }
                    let (Some(stdout), Some(stdin)) = (child.child.stdout.take(), child.child.stdin.take()) else {
                        child.kill().await;
                        return Err(ConnectError::Handshake {
                            message: "the child has no stdio pipes".to_owned(),
                            stderr: String::new(),
                        });
                    };
                    (
                        ServerChild::Host(child),
                        Box::new(stdout) as crate::ServerRead,
                        Box::new(stdin) as crate::ServerWrite,
                    )
                }
            };
            match tokio::time::timeout(policy.connect_timeout, handler.serve((stdout, stdin))).await {
                Ok(Ok(client)) => Ok(Running {
                    client,
                    child: Some(child),
                }),
                Ok(Err(err)) => {
                    child.kill().await;
                    Err(ConnectError::Handshake {
                        message: err.to_string(),
                        stderr: stderr_suffix(stderr_tail),
                    })
                }
                Err(_) => {
                    child.kill().await;
                    Err(ConnectError::Timeout {
                        after: policy.connect_timeout,
                        stderr: stderr_suffix(stderr_tail),
                    })
                }
            }
        }
        McpTransport::StreamableHttp { url, headers } => {
            let mut custom = HashMap::new();
            for (name, value) in headers {
                let header = || ConnectError::Header { name: name.clone() };
                custom.insert(
                    reqwest::header::HeaderName::try_from(name.as_str()).map_err(|_| header())?,
                    reqwest::header::HeaderValue::try_from(value.as_str()).map_err(|_| header())?,
                );
            }
            let transport = StreamableHttpClientTransport::from_config(
                StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom),
            );
            match tokio::time::timeout(policy.connect_timeout, handler.serve(transport)).await {
                Ok(Ok(client)) => Ok(Running { client, child: None }),
                Ok(Err(err)) => Err(ConnectError::Handshake {
                    message: err.to_string(),
                    stderr: String::new(),
                }),
                Err(_) => Err(ConnectError::Timeout {
                    after: policy.connect_timeout,
                    stderr: String::new(),
                }),
            }
        }
    }
}

fn stderr_suffix(tail: &StdMutex<VecDeque<String>>) -> String {
    let lines: Vec<String> = tail
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .cloned()
        .collect();
    if lines.is_empty() {
        String::new()
    } else {
        format!(" (stderr: {})", lines.join(" | "))
    }
}

/// Kills a stdio server's process group and reaps its leader (nothing for HTTP).
async fn kill(child: Option<&mut ServerChild>) {
    if let Some(child) = child {
        child.kill().await;
    }
}

#[allow(unsafe_code)]
fn kill_group_now(pid: u32) {
    let Ok(group) = libc::pid_t::try_from(pid) else {
        return;
    };
    // Never signal group 0 (our own) or 1 (init).
    if group <= 1 {
        return;
    }
    // SAFETY: `killpg` takes two integers and touches no memory of ours. `group` is the pid of
    // a child spawned with `process_group(0)`, so it leads its own group; the group outlives
    // the leader while any member lives, which is exactly what is killed here.
    let _ = unsafe { libc::killpg(group, libc::SIGKILL) };
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        let policy = RestartPolicy {
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(350),
            connect_timeout: Duration::from_secs(1),
        };
        assert_eq!(policy.delay(0), Duration::from_millis(100));
        assert_eq!(policy.delay(1), Duration::from_millis(200));
        assert_eq!(policy.delay(2), Duration::from_millis(350));
        assert_eq!(policy.delay(40), Duration::from_millis(350));
    }
}
