//! [`McpManager`]: every configured server, connected concurrently, owned until shutdown.

use crate::connection::{ConnectError, Connection, RestartPolicy, ServerStatus};
use crate::env::HostEnv;
use crate::naming::{group_name, sanitize};
use crate::spawn::StdioSpawner;
use crate::tool::McpTool;
use crate::tools_json::McpServerConfig;
use harness_core::Tool;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::sync::watch;

/// A server that is configured but offers no tools, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerFailure {
    /// The server's name.
    pub server: String,
    /// Why: the connect error, a name collision, or `disabled` (`enabled: false`).
    pub reason: String,
    /// Whether it was skipped on purpose (`enabled: false`) rather than broken.
    pub disabled: bool,
}

/// The MCP servers of an agent. Servers connect concurrently at start; a broken one is a
/// warning (recorded in [`failures`](Self::failures)) and its tools are absent, the rest
/// start. Call [`shutdown`](Self::shutdown) when done: the servers run (serving the tools
/// handed out) until then, and are killed with their process groups at the latest when the
/// tokio runtime shuts down.
#[derive(Default)]
pub struct McpManager {
    servers: Vec<Arc<Connection>>,
    tools: Vec<Arc<McpTool>>,
    failures: Vec<ServerFailure>,
    spawner: Option<Arc<dyn StdioSpawner>>,
}

impl std::fmt::Debug for McpManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpManager")
            .field("servers", &self.servers.iter().map(|s| s.name()).collect::<Vec<_>>())
            .field("tools", &self.tools.len())
            .field("failures", &self.failures)
            .finish()
    }
}

impl McpManager {
    /// Connects every enabled server at once and lists its tools; stdio servers are host
    /// children.
    pub async fn start(
        servers: impl IntoIterator<Item = McpServerConfig>,
        env: &HostEnv,
        policy: RestartPolicy,
    ) -> Self {
        Self::start_with(servers, env, None, policy).await
    }

    /// As [`start`](Self::start), with stdio servers started by `spawner` when given (a
    /// sandboxed agent's sandbox): one it cannot start is a failure naming the spawner's
    /// cause and fix, never a host child. With a spawner, nothing of `env` reaches a stdio
    /// server: it gets the spawner's base environment plus its configured `env`.
    pub async fn start_with(
        servers: impl IntoIterator<Item = McpServerConfig>,
        env: &HostEnv,
        spawner: Option<Arc<dyn StdioSpawner>>,
        policy: RestartPolicy,
    ) -> Self {
        let mut failures = Vec::new();
        let mut pending = Vec::new();
        for config in servers {
            if config.enabled {
                pending.push(config);
            } else {
                failures.push(ServerFailure {
                    server: config.name,
                    reason: "`enabled: false`".to_owned(),
                    disabled: true,
                });
            }
        }
        let attempts = futures::future::join_all(pending.into_iter().map(|config| {
            let name = config.name.clone();
            let on_demand = config.on_demand;
            let spawner = spawner.clone();
            async move {
                let result: Result<_, ConnectError> = Connection::start(config, env.clone(), spawner, policy).await;
                (name, on_demand, result)
            }
        }))
        .await;

        let mut manager = Self {
            spawner,
            ..Self::default()
        };
        // Sanitised server names must stay distinct, or tool names could collide across servers.
        let mut prefixes: HashMap<String, String> = HashMap::new();
        for (name, on_demand, result) in attempts {
            let (connection, remote_tools) = match result {
                Ok(ok) => ok,
                Err(err) => {
                    let reason = harness_core::error_chain(&err);
                    tracing::warn!(server = %name, error = %reason, "MCP server failed to start; its tools are absent");
                    failures.push(ServerFailure {
                        server: name,
                        reason,
                        disabled: false,
                    });
                    continue;
                }
            };
            let refuse = |reason: String| {
                tracing::warn!(server = %name, %reason, "MCP server refused; its tools are absent");
                ServerFailure {
                    server: name.clone(),
                    reason,
                    disabled: false,
                }
            };
            if let Some(other) = prefixes.get(&sanitize(&name)) {
                failures.push(refuse(format!(
                    "its name and server `{other}`'s both become `{}` in tool names; rename one",
                    sanitize(&name)
                )));
                connection.shutdown().await;
                continue;
            }
            let group = on_demand.then(|| group_name(&name));
            let mut seen: BTreeMap<String, String> = BTreeMap::new();
            let mut tools = Vec::new();
            let mut collision = None;
            for remote in remote_tools {
                let tool = McpTool::new(Arc::clone(&connection), remote, group.clone());
                if let Some(first) = seen.insert(tool.spec().name.clone(), tool.remote_name().to_owned()) {
                    collision = Some(format!(
                        "tools `{first}` and `{}` both become `{}`",
                        tool.remote_name(),
                        tool.spec().name
                    ));
                    break;
                }
                tools.push(Arc::new(tool));
            }
            if let Some(reason) = collision {
                failures.push(refuse(reason));
                connection.shutdown().await;
                continue;
            }
            prefixes.insert(sanitize(&name), name.clone());
            manager.tools.extend(tools);
            manager.servers.push(connection);
        }
        failures.sort_by(|a, b| a.server.cmp(&b.server));
        manager.failures = failures;
        manager
    }

    /// Every tool of every connected server, as harness tools.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.tools
            .iter()
            .map(|tool| Arc::clone(tool) as Arc<dyn Tool>)
            .collect()
    }

    /// The tools with their MCP details (server, annotations, group).
    pub fn mcp_tools(&self) -> &[Arc<McpTool>] {
        &self.tools
    }

    /// Servers that offer no tools, and why (sorted by name).
    pub fn failures(&self) -> &[ServerFailure] {
        &self.failures
    }

    /// The names of the connected servers.
    pub fn servers(&self) -> Vec<&str> {
        self.servers.iter().map(|server| server.name()).collect()
    }

    /// Follows one connected server's state (phase, pid, restarts).
    pub fn status(&self, server: &str) -> Option<watch::Receiver<ServerStatus>> {
        self.servers
            .iter()
            .find(|connection| connection.name() == server)
            .map(|connection| connection.subscribe())
    }

    /// Stops every server and waits until their process groups are gone; then shuts the
    /// spawner down (a sandbox that hosted them).
    pub async fn shutdown(&self) {
        futures::future::join_all(self.servers.iter().map(|server| server.shutdown())).await;
        if let Some(spawner) = &self.spawner {
            spawner.shutdown().await;
        }
    }
}
