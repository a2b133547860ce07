//! An MCP server's tool as a harness [`Tool`].

use crate::annotations::McpToolAnnotations;
use crate::connection::Connection;
use crate::content::to_output;
use crate::naming::tool_name;
use async_trait::async_trait;
use harness_core::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use rmcp::RoleClient;
use rmcp::model::{CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest, ServerResult};
use rmcp::service::{Peer, PeerRequestOptions, ServiceError};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// Slack between our per-call timeout and the kernel's, so ours (with the better message)
/// fires first.
const KERNEL_TIMEOUT_SLACK: Duration = Duration::from_secs(5);

/// A call that reports progress may run this many times its `timeout_seconds` in all; each
/// progress notification gives it another `timeout_seconds` from then.
pub(crate) const PROGRESS_TOTAL_FACTOR: u32 = 10;

/// One `tools/call`: every request carries a progress token (rmcp sets it), a progress
/// notification for it restarts the `after` timer, and the call ends at
/// [`PROGRESS_TOTAL_FACTOR`] × `after` whatever it reports. A timeout is
/// [`ServiceError::Timeout`].
async fn call_tool(
    peer: &Peer<RoleClient>,
    params: CallToolRequestParams,
    after: Duration,
) -> Result<CallToolResult, ServiceError> {
    let options = PeerRequestOptions::with_timeout(after)
        .reset_timeout_on_progress()
        .with_max_total_timeout(after * PROGRESS_TOTAL_FACTOR);
    let handle = peer
        .send_request_with_option(ClientRequest::CallToolRequest(CallToolRequest::new(params)), options)
        .await?;
    match handle.await_response().await? {
        ServerResult::CallToolResult(result) => Ok(result),
        _ => Err(ServiceError::UnexpectedResponse),
    }
}

/// One tool of one MCP server, named `mcp__<server>__<tool>`.
pub struct McpTool {
    spec: ToolSpec,
    remote_name: String,
    annotations: McpToolAnnotations,
    group: Option<String>,
    server: Arc<Connection>,
    /// The schema arguments are checked against: the tool's with numbers and booleans also
    /// accepting a string (converted in `call`); `None` when it has none.
    accepted: Option<Value>,
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
        let accepted = crate::coercion::accepting_strings(&schema);
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
            accepted,
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
}

/// Whether `err` says the transport failed (the request could not be sent or its answer
/// never came): the call may or may not have reached the server and run.
fn transport_failed(err: &ServiceError) -> bool {
    matches!(err, ServiceError::TransportSend(_) | ServiceError::TransportClosed)
}

/// Whether a call whose transport failed may be sent again: only when the hints the harness
/// acts on (a trusted server's, see [`McpToolAnnotations::effective`]) say running it twice
/// is harmless — it is read-only, or idempotent.
fn safe_to_repeat(hints: harness_core::ToolAnnotations) -> bool {
    hints.is_read_only() || hints.is_idempotent()
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    /// The on-demand group the tool belongs to, when its server is declared `on_demand`.
    fn group(&self) -> Option<&str> {
        self.group.as_deref()
    }

    fn accepted_schema(&self) -> Option<&Value> {
        self.accepted.as_ref()
    }

    async fn call(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let mut notes = Vec::new();
        let arguments = match input {
            Value::Object(mut map) => {
                if self.accepted.is_some() {
                    notes = crate::coercion::coerce(&self.spec.input_schema, &mut map).map_err(|message| {
                        ToolError::InvalidArguments {
                            tool: self.spec.name.clone(),
                            message,
                        }
                    })?;
                }
                Some(map)
            }
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
        let mut outcome = call_tool(&peer, params.clone(), after).await;
        if let Err(err) = &outcome
            && transport_failed(err)
        {
            // The transport is gone either way: have it reconnected.
            self.server.mark_broken(&err.to_string());
            if !safe_to_repeat(self.spec.annotations) {
                return Err(ToolError::failed(format!(
                    "MCP server `{}`: the connection to the server failed during the call ({err}), so the call may \
                     or may not have run. It was not sent again: the server's hints for this tool are not trusted, \
                     or do not say it is read-only or idempotent. Check its effect before calling it again.",
                    self.server.name()
                )));
            }
            let peer = self.server.peer_for_call().await.map_err(unavailable)?;
            outcome = call_tool(&peer, params, after).await;
        }
        match outcome {
            Ok(result) => {
                let mut output = to_output(result);
                output.content.extend(notes.into_iter().map(harness_core::Block::text));
                Ok(output)
            }
            Err(ServiceError::Timeout { .. }) => Err(ToolError::Timeout {
                tool: self.spec.name.clone(),
                after,
            }),
            Err(err) => Err(ToolError::failed(format!("MCP server `{}`: {err}", self.server.name()))),
        }
    }

    fn timeout(&self) -> Option<Duration> {
        // Progress may extend a call up to the factor; ours fires first with a better message.
        Some(self.server.timeout() * PROGRESS_TOTAL_FACTOR + KERNEL_TIMEOUT_SLACK)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::{McpToolAnnotations, safe_to_repeat, transport_failed};
    use rmcp::service::ServiceError;

    fn hints(read_only: Option<bool>, idempotent: Option<bool>) -> McpToolAnnotations {
        McpToolAnnotations {
            read_only,
            idempotent,
            ..McpToolAnnotations::default()
        }
    }

    #[test]
    fn a_failed_call_is_sent_again_only_when_trusted_hints_say_it_is_safe() {
        assert!(safe_to_repeat(hints(Some(true), None).effective(true)), "read-only");
        assert!(
            safe_to_repeat(hints(Some(false), Some(true)).effective(true)),
            "idempotent"
        );
        assert!(!safe_to_repeat(hints(None, None).effective(true)), "unhinted");
        assert!(
            !safe_to_repeat(hints(Some(false), Some(false)).effective(true)),
            "writes"
        );
        assert!(
            !safe_to_repeat(hints(Some(true), Some(true)).effective(false)),
            "an untrusted claim is not enough"
        );
        assert!(transport_failed(&ServiceError::TransportClosed));
        assert!(!transport_failed(&ServiceError::Cancelled { reason: None }));
    }
}
