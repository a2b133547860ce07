//! The MCP client: servers from `tools.json` wrapped as harness tools.
//!
//! [`McpManager::start`] connects every enabled server concurrently (stdio child processes
//! or streamable HTTP, through the `rmcp` crate); each server's tools become
//! [`McpTool`]s named `mcp__<server>__<tool>`. A stdio server runs in its own process group
//! with a scrubbed environment ([`HostEnv::scrubbed`]) plus its configured `env`; when it
//! dies it is restarted once per death after a backoff that doubles each time, and a call
//! during the outage is an error result at once. [`McpManager::shutdown`] kills every group.

mod annotations;
mod connection;
mod content;
mod env;
mod manager;
mod naming;
mod tool;

pub use annotations::McpToolAnnotations;
pub use connection::{ConnectError, RestartPolicy, ServerPhase, ServerStatus};
pub use content::to_output;
pub use env::{HostEnv, INHERITED_VARS};
pub use manager::{McpManager, ServerFailure};
pub use naming::{group_name, sanitize, tool_name};
pub use tool::McpTool;
