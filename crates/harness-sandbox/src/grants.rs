//! Widening is an approval: the `sandbox_grant` tool asks, through the durable approval flow
//! (`harness approve`, the serve API's approvals), for one of two grants, and applies it only
//! once a person approved that very call:
//!
//! - **one host** for the proxy (`network = "proxy"`): added to the allow-list of the call's
//!   sandbox until that sandbox ends, and recorded in the session's [`SandboxGrants`], so
//!   every sandbox this session binds later gets it too ([`apply_session_grants`]). A sandbox
//!   shared by several sessions (scope `user`, `agent`, `global`) keeps the host until it
//!   ends, for the other sessions bound to it meanwhile as well. The request shows the person
//!   the proxy's refusals of that host (the evidence).
//! - **one command run outside the sandbox**, on the host in the work tree's directory with
//!   the scrubbed host-shell environment, once, when the operator set
//!   `[sandbox] allow_unsandboxed = true`; otherwise the request is refused at once, naming
//!   that key, and nobody is asked.
//!
//! A denied request comes back as the approval flow's refusal ("a person refused"); nothing
//! is granted or recorded.

use crate::binder::CallSandbox;
use crate::provider::Network;
use crate::proxy::ProxyPolicy;
use async_trait::async_trait;
use harness_core::{Tool, ToolAnnotations, ToolCall, ToolContext, ToolError, ToolOutput, ToolSpec};
use harness_fs::{LocalShell, LocalShellConfig, Shell, ShellRequest};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;

/// The tool's name.
pub const GRANT_TOOL: &str = "sandbox_grant";

/// Most characters of a command or a host in a grant request.
const MAX_REQUEST_CHARS: usize = 4000;

/// The grants a person approved in a session (session slot `sandbox_grants`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxGrants {
    /// Hosts added to the proxy's allow-list, oldest first.
    #[serde(default)]
    pub hosts: Vec<HostGrant>,
    /// Commands run once outside the sandbox, oldest first.
    #[serde(default)]
    pub commands: Vec<CommandGrant>,
}

impl harness_core::SessionSlot for SandboxGrants {
    const KEY: &'static str = "sandbox_grants";
}

/// One host a person allowed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostGrant {
    /// The allow-list entry (`host`, `*.suffix` or an address, optionally with `:port`).
    pub host: String,
    /// The approved call's id.
    pub call_id: String,
    /// Why the model asked.
    #[serde(default)]
    pub why: String,
    /// When it was granted (milliseconds since the epoch).
    pub granted_ms: i64,
}

/// One command a person let run outside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandGrant {
    /// The command line.
    pub command: String,
    /// The approved call's id.
    pub call_id: String,
    /// Why the model asked.
    #[serde(default)]
    pub why: String,
    /// When it ran (milliseconds since the epoch).
    pub granted_ms: i64,
    /// Its exit code (`None`: killed, or it could not start).
    pub exit_code: Option<i32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantArgs {
    #[serde(default)]
    host: Option<String>,
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    why: String,
}

/// `sandbox_grant`: asks a person to widen the sandbox by one host or one unsandboxed command.
pub struct GrantTool {
    spec: ToolSpec,
    allow_unsandboxed: bool,
}

impl GrantTool {
    /// The tool; `allow_unsandboxed` is `[sandbox] allow_unsandboxed`.
    pub fn new(allow_unsandboxed: bool) -> Self {
        let mut spec = ToolSpec::new(
            GRANT_TOOL,
            "Ask a person to widen the sandbox, when a denial blocks needed work: `host` (e.g. \"pypi.org\" or \"pypi.org:443\") adds one host to the network allow-list for this session; `command` runs one command once outside the sandbox, on the host (only where the operator allows it). Say `why`. The request waits for approval; retry the blocked work once it is granted.",
            serde_json::json!({
                "type": "object",
                "properties": {
                    "host": {"type": "string", "description": "One host (optionally host:port) the proxy refused."},
                    "command": {"type": "string", "description": "One shell command to run once outside the sandbox."},
                    "why": {"type": "string", "description": "Why it is needed, for the person who decides."}
                },
                "additionalProperties": false
            }),
        );
        // It changes the sandbox's policy (and may run a host command): never read-only,
        // so plan mode refuses it.
        spec.annotations = ToolAnnotations::new().destructive(true);
        Self {
            spec,
            allow_unsandboxed,
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
}

fn failed(message: impl Into<String>) -> ToolError {
    ToolError::failed(message.into())
}

fn record(ctx: &ToolContext, change: impl FnOnce(&mut SandboxGrants)) -> Result<(), ToolError> {
    ctx.session
        .update::<SandboxGrants, _>(change)
        .map_err(|err| failed(format!("the grant could not be recorded in the session ({err})")))
}

#[async_trait]
impl Tool for GrantTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let call = ToolCall {
            id: ctx.call_id.clone(),
            name: GRANT_TOOL.to_owned(),
            input: input.clone(),
        };
        let args: GrantArgs = serde_json::from_value(input)
            .map_err(|err| failed(format!("bad arguments ({err}): give `host` or `command`, and `why`")))?;
        let Some(CallSandbox(bound)) = ctx.runtime.get::<CallSandbox>().cloned() else {
            return Err(failed("no sandbox is bound to this call, so there is nothing to widen"));
        };
        let approved = ctx.is_approved(&call);
        match (args.host, args.command) {
            (Some(host), None) => {
                let host = host.trim().to_owned();
                if host.chars().count() > MAX_REQUEST_CHARS {
                    return Err(failed("`host` is too long: name one host"));
                }
                let policy = ProxyPolicy::new([host.as_str()]).map_err(|err| failed(err.to_string()))?;
                let sandbox = bound.sandbox();
                if sandbox.state().network != Network::Proxy {
                    let network = match sandbox.state().network {
                        Network::Offline => "offline",
                        Network::Proxy => "proxy",
                        Network::Full => "full",
                    };
                    return Err(failed(format!(
                        "this sandbox's network is \"{network}\", not \"proxy\": a host grant widens the proxy's allow-list, so it needs [sandbox] network = \"proxy\" (the operator's decision)"
                    )));
                }
                if !approved {
                    let refused: Vec<String> = sandbox
                        .network_denials()
                        .into_iter()
                        .filter(|denial| policy.allows_name(&denial.host, denial.port))
                        .map(|denial| format!("{}:{} ({})", denial.host, denial.port, denial.reason))
                        .collect();
                    let evidence = if refused.is_empty() {
                        "the proxy has not refused it in this sandbox yet".to_owned()
                    } else {
                        format!("the proxy refused {}", refused.join(", "))
                    };
                    let reason = format!(
                        "widen the sandbox network: allow {host} through the proxy for this session ({evidence}); why: {}",
                        or_none(&args.why)
                    );
                    return Ok(ctx.request_approval(&call, &reason, None));
                }
                sandbox.allow_host(&host).map_err(|err| failed(err.to_string()))?;
                let why = args.why;
                record(ctx, |grants| {
                    grants.hosts.retain(|known| known.host != host);
                    grants.hosts.push(HostGrant {
                        host: host.clone(),
                        call_id: call.id.clone(),
                        why,
                        granted_ms: now_ms(),
                    });
                })?;
                tracing::info!(%host, call = %call.id, "sandbox grant: host allowed");
                Ok(ToolOutput::text(format!(
                    "Granted by a person: {host} is on this sandbox's network allow-list for the rest of this session (recorded). Retry the request."
                )))
            }
            (None, Some(command)) => {
                if !self.allow_unsandboxed {
                    return Err(failed(
                        "running a command outside the sandbox is not allowed here: the operator enables such requests with [sandbox] allow_unsandboxed = true. The command was not run; do the work inside the sandbox, or report what blocks it.",
                    ));
                }
                if command.trim().is_empty() || command.chars().count() > MAX_REQUEST_CHARS {
                    return Err(failed("`command` must be one non-empty command line"));
                }
                if !approved {
                    let reason = format!(
                        "run one command OUTSIDE the sandbox, on the host, in the work tree: `{command}`; why: {}",
                        or_none(&args.why)
                    );
                    return Ok(ctx.request_approval(&call, &reason, None));
                }
                let work_tree = bound.sandbox().state().work_tree;
                let shell = LocalShell::new(&work_tree, LocalShellConfig::default())
                    .map_err(|err| failed(format!("the host shell could not start in the work tree: {err}")))?;
                let mut request = ShellRequest::new(command.clone());
                request.cancel = Some(ctx.runtime.cancellation().clone());
                let output = shell.execute(request).await;
                let exit_code = output.as_ref().ok().and_then(|output| output.exit_code);
                let why = args.why;
                record(ctx, |grants| {
                    grants.commands.push(CommandGrant {
                        command: command.clone(),
                        call_id: call.id.clone(),
                        why,
                        granted_ms: now_ms(),
                        exit_code,
                    });
                })?;
                tracing::info!(%command, call = %call.id, ?exit_code, "sandbox grant: command ran unsandboxed");
                let output = output.map_err(|err| failed(format!("the approved command could not run: {err}")))?;
                let status = match (output.exit_code, output.signal) {
                    (Some(code), _) => format!("exit code {code}"),
                    (None, Some(signal)) => format!("killed by signal {signal}"),
                    (None, None) => "killed".to_owned(),
                };
                let text = format!(
                    "Approved by a person and run once outside the sandbox (recorded); {status}.\nstdout:\n{}\nstderr:\n{}",
                    output.stdout, output.stderr
                );
                Ok(if output.exit_code == Some(0) {
                    ToolOutput::text(text)
                } else {
                    ToolOutput::error(text)
                })
            }
            _ => Err(failed(
                "give exactly one of `host` (one host to allow) or `command` (one command to run outside the sandbox)",
            )),
        }
    }
}

fn or_none(why: &str) -> &str {
    if why.trim().is_empty() { "(not given)" } else { why }
}

/// Applies the host grants recorded in `session` to `bound` (a sandbox this session binds
/// after the grant: the grant holds for the session). A sandbox without a proxy gets none.
pub(crate) fn apply_session_grants(session: &harness_core::SessionState, bound: &crate::manager::BoundSandbox) {
    let grants = match session.get::<SandboxGrants>() {
        Ok(grants) => grants,
        Err(err) => {
            tracing::warn!(error = %err, "the session's sandbox grants could not be read; none applied");
            return;
        }
    };
    if grants.hosts.is_empty() || bound.sandbox().state().network != Network::Proxy {
        return;
    }
    for grant in &grants.hosts {
        if let Err(err) = bound.sandbox().allow_host(&grant.host) {
            tracing::warn!(host = %grant.host, error = %err, "a recorded sandbox grant could not be applied");
        }
    }
}

/// The tool, shared.
pub fn grant_tool(allow_unsandboxed: bool) -> Arc<dyn Tool> {
    Arc::new(GrantTool::new(allow_unsandboxed))
}
