//! `harness sandbox check`: what the host proves for the configured sandbox tier (the probe
//! starts a throwaway sandbox), one property per line; exit 1 when the tier cannot run.

use harness::HarnessConfig;
use harness_sandbox::SandboxSection;
use std::path::PathBuf;

/// `harness sandbox ...`.
#[derive(clap::Subcommand, Clone, Debug)]
pub(crate) enum SandboxCommand {
    /// Probe the host for the `[sandbox]` of harness.toml (or the default namespace tier
    /// when there is none) and print what it proves; exit 1 when it cannot run.
    Check {
        /// Workspace directory (default: $HARNESS_WORKSPACE, else ./.harness/workspace).
        #[arg(long, env = "HARNESS_WORKSPACE")]
        workspace: Option<PathBuf>,
        /// One JSON object instead of lines.
        #[arg(long)]
        json: bool,
    },
}

/// Runs `harness sandbox`.
pub(crate) async fn sandbox(command: SandboxCommand) -> anyhow::Result<()> {
    let SandboxCommand::Check { workspace, json } = command;
    let dir = workspace.unwrap_or_else(|| PathBuf::from(harness::DEFAULT_WORKSPACE));
    let config =
        HarnessConfig::load_with(&dir, &harness_serve::sections()).map_err(|err| crate::usage(err.to_string()))?;
    let configured = config
        .section::<SandboxSection>()
        .map_err(|err| crate::usage(harness_core::error_chain(&err)))?;
    let mut out = crate::output::Out::new();
    let section = match configured {
        Some(section) => section,
        None => {
            out.line("no [sandbox] in harness.toml: checking the default namespace tier")?;
            toml::from_str::<SandboxSection>("kind = \"namespace\"")?
        }
    };
    section.validate(&dir).map_err(crate::usage)?;
    let config = section.namespace_config(&harness_sandbox::default_init());
    let provider = section.provider();
    let probe = provider.probe().await;
    if json {
        let value = match &probe {
            Ok(caps) => serde_json::json!({ "ok": true, "capabilities": caps }),
            Err(err) => serde_json::json!({ "ok": false, "error": err.to_string() }),
        };
        out.line(&value.to_string())?;
    } else {
        out.line(&format!("backend        namespace (bwrap {})", config.bwrap.display()))?;
        out.line(&format!("init           {}", config.init.display()))?;
        out.line(&format!("state dir      {}", config.state_dir.display()))?;
        out.line(&format!("network        {:?}", section.network).to_lowercase())?;
        if let Ok(caps) = &probe {
            let yes = |ok: bool| if ok { "yes" } else { "NO" };
            out.line(&format!("bubblewrap     {}", caps.bwrap_version))?;
            out.line(&format!("per-sandbox uid {}", yes(caps.per_sandbox_uid)))?;
            out.line(&format!(
                "unprivileged   {} (no capabilities, no_new_privs, not uid 0)",
                yes(caps.unprivileged)
            ))?;
            out.line(&format!("pid namespace  {}", yes(caps.pid_namespace)))?;
            out.line(&format!("landlock       ABI {}", caps.landlock_abi))?;
            out.line(&format!("seccomp        {}", yes(caps.seccomp)))?;
            out.line("result         ok: the configured tier runs on this host")?;
        }
    }
    probe
        .map(drop)
        .map_err(|err| anyhow::anyhow!("the sandbox cannot run on this host: {err}"))
}
