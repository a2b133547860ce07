//! An MCP server's tool as a harness [`Tool`].

use super::annotations::McpToolAnnotations;
use super::connection::Connection;
use super::content::to_output;
use super::naming::tool_name;
use async_trait::async_trait;
use harness_core::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use rmcp::model::CallToolRequestParams;
use rmcp::service::ServiceError;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// Slack between our per-call timeout and the kernel's, so ours (with the better message)
/// fires first.
const KERNEL_TIMEOUT_SLACK: Duration = Duration::from_secs(5);

/// One tool of one MCP server, named `mcp__<server>__<tool>`.
pub struct McpTool {
    spec: ToolSpec,
    remote_name: String,
    annotations: McpToolAnnotations,
    group: Option<String>,
    server: Arc<Connection>,
}

impl std::fmt::Debug for McpTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTool")
            .field("name", &self.spec.name)
            .field("server", &self.server.name())
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

impl McpTool {
    pub(crate) fn new(server: Arc<Connection>, tool: rmcp::model::Tool, group: Option<String>) -> Self {
        let description = tool
            .description
            .as_deref()
            .map(str::to_owned)
            .or_else(|| tool.title.clone())
            .unwrap_or_else(|| format!("`{}` of MCP server `{}`", tool.name, server.name()));
        let mut schema = Value::Object((*tool.input_schema).clone());
        if let Some(object) = schema.as_object_mut() {
            object.remove("$schema");
            object.entry("type").or_insert_with(|| Value::String("object".into()));
        }
        let annotations = McpToolAnnotations::from_mcp(tool.annotations.as_ref());
        Self {
            spec: ToolSpec {
                name: tool_name(server.name(), &tool.name),
                description,
                input_schema: schema,
                // The spec carries what the permission check, plan mode and the re-send
                // decision act on: the server's hints only when tools.json trusts it.
                annotations: annotations.effective(server.trusts_annotations()),
            },
            remote_name: tool.name.to_string(),
            annotations,
            group,
            server,
        }
    }

    /// The server this tool belongs to.
    pub fn server(&self) -> &str {
        self.server.name()
    }

    /// The tool's name on its server.
    pub fn remote_name(&self) -> &str {
        &self.remote_name
    }

    /// The server's hints about the tool, as it sent them (claims unless the server is
    /// trusted; [`Tool::spec`] has the ones the harness acts on).
    pub fn annotations(&self) -> &McpToolAnnotations {
        &self.annotations
    }

    /// The on-demand group the tool belongs to, when its server is declared `on_demand`.
    pub fn group(&self) -> Option<&str> {
        self.group.as_deref()
    }
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let arguments = match input {
            Value::Object(map) => Some(map),
            Value::Null => None,
            other => {
                return Err(ToolError::InvalidArguments {
                    tool: self.spec.name.clone(),
                    message: format!("expected a JSON object, got {other}"),
                });
            }
        };
        let unavailable = |reason: String| {
            ToolError::failed(format!(
                "MCP server `{}` is unavailable: {reason}. Try again later or use another tool.",
                self.server.name()
            ))
        };
        let mut params = CallToolRequestParams::new(self.remote_name.clone());
        params.arguments = arguments;
        let after = self.server.timeout();
        let peer = self.server.peer_for_call().await.map_err(unavailable)?;
        let mut outcome = tokio::time::timeout(after, peer.call_tool(params.clone())).await;
        let resend = match &outcome {
            // The request could not be sent (the server went away, or came back without
            // our session): it never arrived, so sending it again is safe.
            Ok(Err(ServiceError::TransportSend(_))) => true,
            // The transport closed with the request possibly delivered: send it again only
            // when a trusted hint says repeating it is harmless.
            Ok(Err(ServiceError::TransportClosed)) => self.spec.annotations.is_idempotent(),
            _ => false,
        };
        if resend && let Ok(Err(err)) = &outcome {
            // Reconnect and send it once more.
            self.server.mark_broken(&err.to_string());
            let peer = self.server.peer_for_call().await.map_err(unavailable)?;
            outcome = tokio::time::timeout(after, peer.call_tool(params)).await;
        }
        match outcome {
            Ok(Ok(result)) => Ok(to_output(result)),
            Ok(Err(err)) => Err(ToolError::failed(format!("MCP server `{}`: {err}", self.server.name()))),
            Err(_) => Err(ToolError::Timeout {
                tool: self.spec.name.clone(),
                after,
            }),
        }
    }

    fn timeout(&self) -> Option<Duration> {
        Some(self.server.timeout() + KERNEL_TIMEOUT_SLACK)
    }
}
