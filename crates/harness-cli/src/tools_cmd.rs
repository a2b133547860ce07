//! `harness tools`: every tool the agent would offer (built-ins and MCP, after `tools.json`'s
//! allow/deny, and with `--user` the caller's own `tools.json`), with its source and
//! annotations, and why a configured server offers none.

use harness::HarnessConfig;
use harness::extensions::{Extensions, ToolSource};
use harness_core::Tool as _;
use harness_mcp::{HostEnv, McpToolAnnotations};
use std::path::PathBuf;
use std::sync::Arc;

/// Arguments of `harness tools`.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct ToolsArgs {
    /// Workspace directory (default: $HARNESS_WORKSPACE, else ./.harness/workspace).
    #[arg(long, env = "HARNESS_WORKSPACE")]
    workspace: Option<PathBuf>,
    /// Agent name (default: harness.toml's, else `harness`).
    #[arg(long)]
    agent: Option<String>,
    /// List what this caller is offered: the workspace's set narrowed by the caller's own
    /// `tools.json` (in its layer, e.g. `<user>/tools.json`).
    #[arg(long, value_parser = crate::parse_user)]
    user: Option<harness_core::UserId>,
    /// One JSON object per tool (and per failed server) instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs `harness tools`.
pub(crate) async fn tools(args: ToolsArgs) -> anyhow::Result<()> {
    let dir = args
        .workspace
        .clone()
        .unwrap_or_else(|| PathBuf::from(harness::DEFAULT_WORKSPACE));
    let config = HarnessConfig::load_with(
        &dir,
        &harness_serve::sections()
            .with(harness_ops::SECTION)
            .with(harness_ops::RETENTION),
    )
    .map_err(|err| crate::usage(err.to_string()))?;
    let name = args
        .agent
        .clone()
        .or_else(|| config.agent.name.clone())
        .unwrap_or_else(|| harness::DEFAULT_AGENT_NAME.into());
    let mut builder = harness::HarnessAgent::builder().workspace(&dir).name(name.as_str());
    let mut shell = false;
    if let Some(fs_config) = &config.filesystem {
        let fs = harness::filesystem::open(fs_config, &dir, &name)
            .await
            .map_err(|err| crate::usage(format!("[filesystem]: {}", harness_core::error_chain(&err))))?;
        shell = fs.shell().is_some();
        builder = builder.filesystem(fs);
    }
    // tools.json and [skills] exactly as the agent reads them, without building its models.
    let env = |key: &str| std::env::var(key).ok();
    let extensions = harness::WorkspaceLoader::new(&dir, &env)
        .register(harness_serve::SECTION)
        .register(harness_ops::SECTION)
        .register(harness_ops::RETENTION)
        .host_env(HostEnv::from_vars(std::env::vars()))
        .start_extensions(&config, shell)
        .await
        .map(Arc::new)
        .map_err(|err| crate::usage(harness_core::error_chain(&err)))?;
    let agent = builder
        .config(config)
        .model(harness_models::ScriptedModel::new())
        .extensions(Arc::clone(&extensions))
        .build()
        .map_err(|err| crate::usage(harness_core::error_chain(&err)));
    let result = match agent {
        Ok(agent) => match caller_filter(&agent, args.user.clone()).await {
            Ok(caller) => match print(&agent, &extensions, caller.as_ref(), args.json) {
                Ok(()) => print_skills(&agent, &extensions, args.user.clone(), args.json).await,
                Err(err) => Err(err),
            },
            Err(err) => Err(err),
        },
        Err(err) => Err(err),
    };
    extensions.shutdown().await;
    result
}

/// The caller's own `tools.json` filter, when `--user` names a caller that has one.
async fn caller_filter(
    agent: &harness::HarnessAgent,
    user: Option<harness_core::UserId>,
) -> anyhow::Result<Option<harness_mcp::tools_json::ToolFilter>> {
    let Some(user) = user else {
        return Ok(None);
    };
    let ctx = agent
        .bind(harness_core::RuntimeContext::for_user(user))
        .map_err(|err| crate::usage(harness_core::error_chain(&err)))?;
    harness::user_tools::caller_tool_filter(&ctx)
        .await
        .map_err(|err| crate::usage(err.to_string()))
}

/// Every skill the caller sees, the ones for people only (`disable-model-invocation`)
/// marked, then every `SKILL.md` skipped or loaded with a note.
async fn print_skills(
    agent: &harness::HarnessAgent,
    extensions: &Extensions,
    user: Option<harness_core::UserId>,
    json: bool,
) -> anyhow::Result<()> {
    let Some(skills) = extensions.skills() else {
        return Ok(());
    };
    let ctx = match user {
        Some(user) => harness_core::RuntimeContext::for_user(user),
        None => harness_core::RuntimeContext::default(),
    };
    let ctx = agent
        .bind(ctx)
        .map_err(|err| crate::usage(harness_core::error_chain(&err)))?;
    let Some(workspace) = ctx.get::<harness_fs::CallWorkspace>() else {
        return Ok(());
    };
    let namespace = ctx.get::<harness_fs::CallScope>().map(harness_fs::CallScope::namespace);
    let set = skills.resolve(workspace, namespace).await;
    let mut out = crate::output::Out::new();
    for skill in set.iter() {
        let people_only = skill.disable_model_invocation;
        if json {
            let line = serde_json::json!({
                "skill": skill.name,
                "layer": skill.layer.to_string(),
                "file": skill.file(),
                "offered_to_model": !people_only,
            });
            out.line(&line.to_string())?;
        } else {
            let note = if people_only {
                "for people only (disable-model-invocation)"
            } else {
                ""
            };
            out.line(&format!(
                "skill {:<34} {:<16} {note}",
                skill.name,
                skill.layer.to_string()
            ))?;
        }
    }
    for warning in set.warnings() {
        if json {
            let line = serde_json::json!({
                "skill_file": warning.file,
                "skipped": warning.kind == harness_skills::SkillWarningKind::Skipped,
                "reason": warning.reason,
            });
            out.line(&line.to_string())?;
        } else {
            out.line(&format!("skill file {warning}"))?;
        }
    }
    Ok(())
}

fn annotations_of(extensions: &Extensions, name: &str) -> Option<McpToolAnnotations> {
    extensions
        .mcp()
        .mcp_tools()
        .iter()
        .find(|tool| tool.spec().name == name)
        .map(|tool| tool.annotations().clone())
}

fn print(
    agent: &harness::HarnessAgent,
    extensions: &Extensions,
    caller: Option<&harness_mcp::tools_json::ToolFilter>,
    json: bool,
) -> anyhow::Result<()> {
    let specs = agent.kernel().tool_specs();
    let group_of = |name: &str| agent.kernel().tool_group(name).map(str::to_owned);
    let mut out = crate::output::Out::new();
    for spec in specs
        .iter()
        .filter(|spec| caller.is_none_or(|filter| filter.permits(&spec.name)))
    {
        let source = match extensions.source_of(&spec.name) {
            ToolSource::BuiltIn => "built-in".to_owned(),
            ToolSource::Mcp { server } => format!("mcp:{server}"),
            ToolSource::Skills => "skills".to_owned(),
            ToolSource::ToolGroups => "tool-groups".to_owned(),
        };
        let annotations = annotations_of(extensions, &spec.name).unwrap_or_default();
        let group = group_of(&spec.name);
        if json {
            let line = serde_json::json!({
                "tool": spec.name,
                "source": source,
                "annotations": annotations,
                "on_demand_group": group,
            });
            out.line(&line.to_string())?;
        } else {
            let mut notes = annotations.summary();
            if let Some(group) = group {
                if !notes.is_empty() {
                    notes.push_str("; ");
                }
                notes.push_str(&format!("on demand ({group})"));
            }
            out.line(&format!("{:<40} {:<16} {notes}", spec.name, source))?;
        }
    }
    for failure in extensions.failures() {
        if json {
            let line = serde_json::json!({
                "server": failure.server,
                "disabled": failure.disabled,
                "error": failure.reason,
            });
            out.line(&line.to_string())?;
        } else if failure.disabled {
            out.line(&format!("server {}: skipped ({})", failure.server, failure.reason))?;
        } else {
            out.line(&format!("server {}: FAILED: {}", failure.server, failure.reason))?;
        }
    }
    Ok(())
}
