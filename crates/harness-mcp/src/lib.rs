//! The MCP client of Harness, and `tools.json`: servers wrapped as harness tools.
//!
//! [`tools_json`] parses `tools.json` (allow/deny as a [`ToolFilter`](tools_json::ToolFilter),
//! and the `mcpServers` entries as [`McpServerConfig`](tools_json::McpServerConfig)s).
//! [`McpManager::start`] connects every enabled server concurrently (stdio child processes
//! or streamable HTTP, through the `rmcp` crate); each server's tools become
//! [`McpTool`]s named `mcp__<server>__<tool>`. A stdio server runs in its own process group
//! with a scrubbed environment ([`HostEnv::scrubbed`]) plus its configured `env`; when it
//! dies it is restarted once per death after a backoff that doubles each time, and a call
//! during the outage is an error result at once. A call whose transport fails is sent again
//! only when the server's trusted hints say repeating it is harmless (read-only or
//! idempotent); otherwise the model is told the call may or may not have run.
//! [`McpManager::shutdown`] kills every group. A sandboxed agent passes a [`StdioSpawner`]
//! ([`McpManager::start_with`]): its stdio servers then start inside the sandbox, and one
//! that cannot start there fails, never falling back to a host child.
//!
//! This crate knows nothing of sessions or workspaces: the `harness` crate turns the tools
//! into a capability (the caller's own `tools.json`, on-demand groups, the allow/deny filter
//! over every tool).
//!
//! ```
//! use harness_mcp::tools_json::ToolsConfig;
//! let text = r#"{ "deny": ["execute"],
//!   "mcpServers": { "time": { "transport": "stdio", "command": "mcp-server-time" } } }"#;
//! let config = ToolsConfig::parse(text, "tools.json", &|_| None)?;
//! assert!(!config.filter().permits("execute"));
//! assert_eq!(config.mcp_servers["time"].name, "time");
//! # Ok::<_, harness_mcp::tools_json::ToolsConfigError>(())
//! ```

mod annotations;
mod coercion;
mod connection;
mod content;
mod env;
mod manager;
mod naming;
mod spawn;
mod tool;
pub mod tools_json;

pub use annotations::McpToolAnnotations;
pub use connection::{ConnectError, RestartPolicy, ServerPhase, ServerStatus};
pub use content::to_output;
pub use env::{HostEnv, INHERITED_VARS};
pub use manager::{McpManager, ServerFailure};
pub use naming::{group_name, sanitize, tool_name};
pub use spawn::{ServerProcess, ServerRead, ServerWrite, SpawnedServer, StdioCommand, StdioSpawner};
pub use tool::McpTool;
