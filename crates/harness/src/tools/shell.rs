//! The shell tool, `execute`. It exists only where a shell does: offer it when the configured
//! filesystem has one ([`Filesystem::shell`](harness_fs::Filesystem::shell)) or calls carry a
//! [`CallShell`].

use crate::filesystem::tool_error as fs_error;
use async_trait::async_trait;
use harness_core::{Tool, ToolAnnotations, ToolContext, ToolError, ToolOutput, TypedTool, typed};
use harness_fs::{CallShell, CallWorkspace, Shell, ShellError, ShellOutput, ShellRequest, WsPath};
use schemars::JsonSchema;
use serde::Deserialize;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

/// Time limit of a command when none is given, in seconds.
pub const EXECUTE_DEFAULT_TIMEOUT_SECS: u64 = 30;
/// Longest time limit a command may ask for, in seconds.
pub const EXECUTE_MAX_TIMEOUT_SECS: u64 = 600;
/// Most characters of stdout shown (head and tail are kept).
pub const EXECUTE_MAX_STDOUT_CHARS: usize = 60_000;
/// Most characters of stderr shown (head and tail are kept).
pub const EXECUTE_MAX_STDERR_CHARS: usize = 20_000;
/// Exit code reported for a command that was killed at its time limit (as `timeout(1)` does).
pub const TIMEOUT_EXIT_CODE: i32 = 124;

/// Arguments of `execute`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecuteArgs {
    /// The shell command line (run with `sh -c`).
    pub command: String,
    /// Directory to run in, relative to the workspace root (default: the root).
    #[serde(default)]
    pub working_directory: Option<String>,
    /// Time limit in seconds (default 30, at most 600). When it passes, the command and every
    /// process it started are killed.
    #[serde(default)]
    pub timeout: Option<i64>,
}

/// `execute`: runs a shell command in the caller's workspace and returns its exit code and
/// output. Background processes do not outlive the command.
#[derive(Debug, Default, Clone, Copy)]
pub struct Execute;

/// The call's shell: a [`CallShell`] when bound, else the caller's filesystem's.
fn shell_of(ctx: &ToolContext) -> Result<Arc<dyn Shell>, ToolError> {
    if let Some(CallShell(shell)) = ctx.runtime.get::<CallShell>() {
        return Ok(Arc::clone(shell));
    }
    ctx.runtime
        .get::<CallWorkspace>()
        .and_then(|workspace| workspace.user.shell())
        .ok_or_else(|| ToolError::failed("no shell is available in this workspace; use the file tools instead"))
}

/// At most `max` characters of `text`, keeping its head and tail around a marker.
fn head_and_tail(text: &str, max: usize) -> String {
    let total = text.chars().count();
    if total <= max {
        return text.to_owned();
    }
    let head: String = text.chars().take(max / 2).collect();
    let tail: String = text.chars().skip(total - max / 2).collect();
    format!("{head}\n[… {} characters omitted …]\n{tail}", total - 2 * (max / 2))
}

fn render(output: &ShellOutput, timeout: Duration) -> String {
    let code = if output.timed_out {
        TIMEOUT_EXIT_CODE
    } else {
        output.exit_code.unwrap_or(-1)
    };
    let mut text = format!("Exit code: {code}");
    if output.timed_out {
        let _ = write!(
            text,
            " (timed out after {}s; the command and everything it started were killed)",
            timeout.as_secs()
        );
    } else if output.cancelled {
        text.push_str(" (cancelled; the command and everything it started were killed)");
    } else if let (None, Some(signal)) = (output.exit_code, output.signal) {
        let _ = write!(text, " (killed by signal {signal})");
    }
    if !output.stdout.is_empty() {
        text.push_str("\n\n");
        text.push_str(&head_and_tail(&output.stdout, EXECUTE_MAX_STDOUT_CHARS));
    }
    if !output.stderr.is_empty() {
        text.push_str("\n\n[stderr]\n");
        text.push_str(&head_and_tail(&output.stderr, EXECUTE_MAX_STDERR_CHARS));
    }
    if output.stdout.is_empty() && output.stderr.is_empty() {
        text.push_str("\n\n<no output>");
    }
    if output.stdout_truncated || output.stderr_truncated {
        let _ = write!(
            text,
            "\n\n(output was truncated: the command wrote {} bytes to stdout and {} to stderr; redirect to a file and read it in pages to see everything)",
            output.stdout_bytes, output.stderr_bytes
        );
    }
    text
}

#[async_trait]
impl TypedTool for Execute {
    const NAME: &'static str = "execute";
    const DESCRIPTION: &'static str = "Run a shell command (sh -c) in the workspace and return its exit code, stdout and stderr. Default time limit 30 s (max 600). Long output is cut in the middle.";
    type Args = ExecuteArgs;
    const ANNOTATIONS: ToolAnnotations = ToolAnnotations::new()
        .destructive(true)
        .open_world(true)
        .concurrency_safe(false);

    async fn call(&self, args: ExecuteArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let shell = shell_of(ctx)?;
        let cwd = match args.working_directory.as_deref() {
            Some(dir) => WsPath::parse(dir).map_err(|err| {
                ToolError::failed(format!(
                    "working_directory must be a relative path within the workspace: {err}"
                ))
            })?,
            None => WsPath::root(),
        };
        let seconds = match args.timeout {
            Some(seconds) if seconds > 0 => u64::try_from(seconds).unwrap_or(EXECUTE_MAX_TIMEOUT_SECS),
            _ => EXECUTE_DEFAULT_TIMEOUT_SECS,
        }
        .min(EXECUTE_MAX_TIMEOUT_SECS);
        let timeout = Duration::from_secs(seconds);
        let request = ShellRequest::new(args.command)
            .cwd(cwd)
            .timeout(timeout)
            .cancel_on(ctx.runtime.cancellation().clone());
        match shell.execute(request).await {
            Ok(output) => Ok(ToolOutput::text(render(&output, timeout))),
            Err(ShellError::WorkingDirectory(err)) => {
                Err(ToolError::failed(format!("working_directory: {}", fs_error(&err))))
            }
            Err(err) => {
                tracing::warn!(error = %harness_core::error_chain(&err), "execute failed");
                Err(ToolError::failed(format!("the command could not be run: {err}")))
            }
        }
    }

    fn timeout(&self) -> Option<Duration> {
        // The command has its own limit (at most 600 s); the agent's default tool limit must
        // not cut it shorter.
        Some(Duration::from_secs(EXECUTE_MAX_TIMEOUT_SECS + 30))
    }
}

/// The `execute` tool, ready for a toolkit. Register it only when a shell exists.
pub fn shell_tool() -> Arc<dyn Tool> {
    typed(Execute)
}

/// The shell's entry in the capability registry: on when the workspace filesystem has a
/// shell, or a sandbox confines it ([`SandboxedShell`](crate::facts::SandboxedShell), whose
/// prompt part replaces the host shell's).
pub(crate) const REGISTRATION: crate::capability::Registration =
    crate::capability::Registration::new("shell", |setup| {
        let sandboxed = setup
            .provided::<crate::facts::SandboxedShell>()
            .map(|shell| shell.0.clone());
        let host = setup.workspace().filesystem().shell().is_some();
        Ok((host || sandboxed.is_some()).then(|| {
            Arc::new(HostShell(sandboxed.unwrap_or_else(|| SHELL_PROMPT.to_owned())))
                as Arc<dyn crate::capability::Capability>
        }))
    });

/// The shell tool as a capability, with its prompt part.
struct HostShell(String);

impl crate::capability::Capability for HostShell {
    fn name(&self) -> &'static str {
        "shell"
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![shell_tool()]
    }

    fn prompt_parts(&self) -> Vec<harness_core::PromptPart> {
        vec![harness_core::PromptPart {
            name: "shell",
            text: self.0.clone(),
            stable: true,
        }]
    }
}

/// The shell's prompt part: what a host shell can reach, said plainly (the file tools'
/// limits do not hold for it). Until a sandbox jails the shell, this is the truth.
pub const SHELL_PROMPT: &str = "## Shell\n`execute` runs commands on this host with the rights of the agent's process. It is not confined to your area the way the file tools are: files outside it, other users' data included, can be reachable through it. Use it only on your own area and the shared files. Protected paths do not hold it either: the harness's own files (harness.toml, tools.json, agents/, ...) are reachable through it, and a command line that names one asks a person first; only a sandbox would confine it.";

#[cfg(test)]
mod tests {
    use super::head_and_tail;

    #[test]
    fn long_text_keeps_both_ends() {
        assert_eq!(head_and_tail("abc", 10), "abc");
        assert_eq!(head_and_tail("0123456789", 4), "01\n[… 6 characters omitted …]\n89");
    }
}
