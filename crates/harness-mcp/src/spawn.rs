//! [`StdioSpawner`]: where a stdio server's process starts. Without one a server is a host
//! child in its own process group with a scrubbed environment; a sandboxed agent passes one
//! that starts every server inside its sandbox, and a server it cannot start there fails
//! (the spawner's message names the cause and the fix), never falling back to the host.

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncWrite};

/// A server's stdout or stderr.
pub type ServerRead = Box<dyn AsyncRead + Send + Unpin>;
/// A server's stdin.
pub type ServerWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// The stdio server to start: its configuration's `command`, `args` and `env` (the
/// spawner adds its own base environment; the host's is never passed).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StdioCommand {
    /// The server's name in `tools.json`.
    pub server: String,
    /// The program.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// The configuration's `env`.
    pub env: Vec<(String, String)>,
}

/// A started server process: its pipes and a handle that kills it.
pub struct SpawnedServer {
    /// Its stdin.
    pub stdin: ServerWrite,
    /// Its stdout (ends when the process ended).
    pub stdout: ServerRead,
    /// Its stderr, when captured (ends when the process ended).
    pub stderr: Option<ServerRead>,
    /// Kills it (dropping it must kill it too).
    pub process: Box<dyn ServerProcess>,
}

impl std::fmt::Debug for SpawnedServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpawnedServer").finish_non_exhaustive()
    }
}

/// A running server process of a [`StdioSpawner`].
#[async_trait]
pub trait ServerProcess: Send {
    /// Kills the process and everything it started; returns when they are gone.
    async fn kill(&mut self);
}

/// Starts stdio servers somewhere other than the host (a sandbox).
#[async_trait]
pub trait StdioSpawner: Send + Sync + 'static {
    /// Starts `command`.
    ///
    /// # Errors
    /// Why it cannot start, naming the cause and the fix (shown as the server's failure).
    async fn spawn(&self, command: StdioCommand) -> Result<SpawnedServer, String>;

    /// Called once by [`McpManager::shutdown`](crate::McpManager::shutdown) after every
    /// server is gone: stop whatever hosts them.
    async fn shutdown(&self) {}
}
