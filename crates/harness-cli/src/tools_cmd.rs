//! `harness tools`: every tool the agent would offer (built-ins and MCP, after `tools.json`'s
//! allow/deny), with its source and annotations, and why a configured server offers none.

use harness::HarnessConfig;
use harness::extensions::{Extensions, ExtensionsConfig, ToolSource};
use harness::mcp::{HostEnv, McpToolAnnotations};
use harness::skills::SkillsConfig;
use harness::tools_json::{TOOLS_JSON, ToolsConfig};
use harness_core::Tool as _;
use std::path::{Path, PathBuf};
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
    /// One JSON object per tool (and per failed server) instead of a table.
    #[arg(long)]
    json: bool,
}

/// Reads `<workspace>/tools.json` (when present) with `${VAR}` from the process environment
/// and starts its MCP servers and the workspace's skill layers. A bad file is a usage error
/// (exit 2) naming the file, the line, the key or the variable.
pub(crate) async fn load_extensions(dir: &Path, shell: bool) -> anyhow::Result<Arc<Extensions>> {
    let env = HostEnv::from_vars(std::env::vars());
    let path = dir.join(TOOLS_JSON);
    let text = match tokio::fs::read_to_string(&path).await {
        Ok(text) => Some(text),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
        Err(err) => return Err(crate::usage(format!("{}: {err}", path.display()))),
    };
    let origin = path.display().to_string();
    let tools = ToolsConfig::layered(text.as_deref().map(|text| (origin.as_str(), text)), None, &|name| {
        env.get(name)
    })
    .map_err(|err| crate::usage(err.to_string()))?;
    let config = ExtensionsConfig {
        tools,
        skills: Some(SkillsConfig::default()),
        ..ExtensionsConfig::default()
    };
    let extensions = Extensions::start(config, &env, dir, shell)
        .await
        .map_err(|err| crate::usage(harness_core::error_chain(&err)))?;
    Ok(Arc::new(extensions))
}

/// Runs `harness tools`.
pub(crate) async fn tools(args: ToolsArgs) -> anyhow::Result<()> {
    let dir = args
        .workspace
        .clone()
        .unwrap_or_else(|| PathBuf::from(harness::DEFAULT_WORKSPACE));
    let config = HarnessConfig::load(&dir).map_err(|err| crate::usage(err.to_string()))?;
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
    let extensions = load_extensions(&dir, shell).await?;
    let agent = builder
        .config(config)
        .model(harness_models::ScriptedModel::new())
        .extensions(Arc::clone(&extensions))
        .build()
        .map_err(|err| crate::usage(harness_core::error_chain(&err)));
    let result = agent.and_then(|agent| print(&agent, &extensions, args.json));
    extensions.shutdown().await;
    result
}

fn annotations_of(extensions: &Extensions, name: &str) -> Option<McpToolAnnotations> {
    extensions
        .mcp()
        .mcp_tools()
        .iter()
        .find(|tool| tool.spec().name == name)
        .map(|tool| tool.annotations().clone())
}

fn print(agent: &harness::HarnessAgent, extensions: &Extensions, json: bool) -> anyhow::Result<()> {
    let specs = agent.kernel().tool_specs();
    let group_of = |name: &str| {
        extensions
            .groups()
            .iter()
            .find(|group| group.tools.contains(name))
            .map(|group| group.name.clone())
    };
    let mut out = crate::output::Out::new();
    for spec in specs.iter() {
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
