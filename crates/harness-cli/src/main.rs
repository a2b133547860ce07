//! The `harness` command-line tool.

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod chat;
mod demo;
mod tools_cmd;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use futures::StreamExt;
use harness::{HarnessAgent, HarnessConfig};
use harness_core::{ChatModel, EventKind, RuntimeContext};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Harness: a runtime for long-running LLM agents.
#[derive(Parser)]
#[command(name = "harness", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Options shared by commands that build an agent.
#[derive(clap::Args, Clone, Debug)]
struct AgentArgs {
    /// Workspace directory (default: $HARNESS_WORKSPACE, else ./.harness/workspace).
    #[arg(long, env = "HARNESS_WORKSPACE")]
    workspace: Option<PathBuf>,
    /// Agent name (default: harness.toml's, else `harness`).
    #[arg(long)]
    agent: Option<String>,
    /// User id (default: `default`).
    #[arg(long)]
    user: Option<String>,
    /// Session id (default: `default`).
    #[arg(long)]
    session: Option<String>,
    /// Model spec `provider:model`, e.g. openai:gpt-4o-mini, anthropic:claude-sonnet-4-5, scripted:PATH
    /// (default: $HARNESS_MODEL, else harness.toml's).
    #[arg(long)]
    model: Option<String>,
    /// Maximum reasoning-acting steps.
    #[arg(long)]
    max_iters: Option<u32>,
}

#[derive(Subcommand)]
enum Command {
    /// Create a workspace skeleton (never overwrites existing files).
    Init {
        /// Directory (default: the workspace).
        dir: Option<PathBuf>,
    },
    /// Run one turn and print the reply.
    Run {
        #[command(flatten)]
        agent: AgentArgs,
        /// Print one JSON event per line; the last line is the final message.
        #[arg(long)]
        json: bool,
        /// The message.
        message: String,
    },
    /// Chat interactively (streams tokens; /session ID, /new, /exit; Ctrl-C cancels a turn).
    Chat {
        #[command(flatten)]
        agent: AgentArgs,
    },
    /// List the tools the agent would offer (built-ins and MCP, after tools.json's allow/deny).
    Tools(tools_cmd::ToolsArgs),
    /// Inspect sessions.
    Sessions {
        #[command(subcommand)]
        command: SessionsCommand,
    },
    /// Search or consolidate long-term memory.
    Memory {
        #[command(subcommand)]
        command: MemoryCommand,
    },
    /// An offline demonstration on the scripted model: persona, two turns, files written.
    Demo {
        /// Workspace (default: a fresh temporary directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum MemoryCommand {
    /// Full-text search over MEMORY.md and the daily logs (CJK included).
    Search {
        #[command(flatten)]
        agent: AgentArgs,
        /// Maximum hits.
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// What to look for.
        query: String,
    },
    /// Merge new daily-log entries into MEMORY.md now (uses the configured model).
    Consolidate {
        #[command(flatten)]
        agent: AgentArgs,
    },
}

#[derive(Subcommand)]
enum SessionsCommand {
    /// List the sessions of a user.
    List {
        #[command(flatten)]
        agent: AgentArgs,
    },
    /// Print a session's transcript.
    Show {
        #[command(flatten)]
        agent: AgentArgs,
        /// Session id.
        id: String,
        /// Print raw JSON lines.
        #[arg(long)]
        json: bool,
    },
}

/// A usage or configuration error: exit code 2.
#[derive(Debug)]
struct UsageError(String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(message.into()))
}

fn env_lookup(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|value| !value.trim().is_empty())
}

/// Resolves a model spec string into a model.
fn resolve_model(spec: &str) -> anyhow::Result<Arc<dyn ChatModel>> {
    let parsed = harness_models::ModelSpec::parse(spec).map_err(|err| usage(err.to_string()))?;
    parsed.build(&env_lookup).map_err(|err| usage(err.to_string()))
}

fn workspace_dir(args: &AgentArgs) -> PathBuf {
    args.workspace
        .clone()
        .unwrap_or_else(|| PathBuf::from(harness::DEFAULT_WORKSPACE))
}

/// Builds the agent from flags, environment and harness.toml (flags win).
async fn build_agent(args: &AgentArgs) -> anyhow::Result<HarnessAgent> {
    let dir = workspace_dir(args);
    let config = HarnessConfig::load(&dir).map_err(|err| usage(err.to_string()))?;
    let spec = args
        .model
        .clone()
        .or_else(|| env_lookup("HARNESS_MODEL"))
        .or_else(|| config.agent.model.clone());
    let Some(spec) = spec else {
        return Err(usage(
            "no model configured: pass --model provider:model (e.g. --model openai:gpt-4o-mini), set HARNESS_MODEL, \
             or set [agent] model in harness.toml; `harness demo` runs offline",
        ));
    };
    let model = resolve_model(&spec)?;
    let mut builder = agent_builder(args, &dir, config).await?.shared_model(model);
    // tools.json + skills; MCP servers die with the runtime if nobody shuts them down.
    builder = builder.extensions(tools_cmd::load_extensions(&dir, false).await?);
    if let Some(max) = args.max_iters {
        let max = std::num::NonZeroU32::new(max).ok_or_else(|| usage("--max-iters must be at least 1"))?;
        builder = builder.max_iters(max);
    }
    builder.build().map_err(|err| usage(harness_core::error_chain(&err)))
}

/// A builder with everything harness.toml configures except the main model: the filesystem
/// and the optional cheaper models of memory and compaction.
async fn agent_builder(
    args: &AgentArgs,
    dir: &std::path::Path,
    config: HarnessConfig,
) -> anyhow::Result<harness::HarnessAgentBuilder> {
    let name = args
        .agent
        .clone()
        .or_else(|| config.agent.name.clone())
        .unwrap_or_else(|| harness::DEFAULT_AGENT_NAME.into());
    let mut builder = HarnessAgent::builder().workspace(dir).name(name.as_str());
    if let Some(fs_config) = &config.filesystem {
        let fs = harness::filesystem::open(fs_config, dir, &name)
            .await
            .map_err(|err| usage(format!("[filesystem]: {}", harness_core::error_chain(&err))))?;
        builder = builder.filesystem(fs);
    }
    if let Some(spec) = config.memory.as_ref().and_then(|m| m.model.clone()) {
        builder = builder.memory_model(resolve_model(&spec)?);
    }
    if let Some(spec) = config.compaction.as_ref().and_then(|c| c.model.clone()) {
        builder = builder.compaction_model(resolve_model(&spec)?);
    }
    Ok(builder.config(config))
}

/// How long background work (memory extraction) may run after the last turn.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

fn context(args: &AgentArgs) -> RuntimeContext {
    let mut ctx = RuntimeContext::default();
    ctx.user_id = args.user.clone().map(Into::into);
    ctx.session_id = args.session.clone().map(Into::into);
    ctx
}

async fn run(args: AgentArgs, json: bool, message: String) -> anyhow::Result<()> {
    let agent = build_agent(&args).await?;
    let result = run_turn(&agent, context(&args), json, message).await;
    agent.shutdown(SHUTDOWN_GRACE).await;
    result
}

async fn run_turn(agent: &HarnessAgent, ctx: RuntimeContext, json: bool, message: String) -> anyhow::Result<()> {
    if !json {
        // Nobody watches tokens: one non-streaming request per model call.
        let reply = agent
            .call(message, ctx)
            .await
            .map_err(|err| anyhow::anyhow!(harness_core::error_chain(&err)))?;
        println!("{}", reply.text());
        return Ok(());
    }
    let mut events = agent.stream(message, ctx);
    let mut stdout = std::io::stdout().lock();
    let mut failed = None;
    while let Some(event) = events.next().await {
        serde_json::to_writer(&mut stdout, &event)?;
        writeln!(stdout)?;
        if let EventKind::Error { message } = event.kind {
            failed = Some(message);
        }
    }
    stdout.flush()?;
    match failed {
        Some(message) => Err(anyhow::anyhow!(message)),
        None => Ok(()),
    }
}

async fn sessions(command: SessionsCommand) -> anyhow::Result<()> {
    match command {
        SessionsCommand::List { agent } => {
            let harness = build_agent_for_inspection(&agent).await?;
            let ctx = harness
                .bind(context(&agent))
                .map_err(|err| usage(harness_core::error_chain(&err)))?;
            let call = ctx.get::<harness_fs::CallWorkspace>().context("workspace not bound")?;
            let index = harness::session::read_index(call.user.as_ref(), harness.kernel().name().as_str()).await;
            if index.sessions.is_empty() {
                println!("no sessions");
            }
            for (id, entry) in &index.sessions {
                println!(
                    "{id}\t{}\t{} messages\t{}",
                    entry.updated.strftime("%Y-%m-%d %H:%M:%S"),
                    entry.message_count,
                    entry.summary
                );
            }
        }
        SessionsCommand::Show { agent, id, json } => {
            let harness = build_agent_for_inspection(&agent).await?;
            let ctx = harness
                .bind(context(&agent).with_session(id.as_str()))
                .map_err(|err| usage(harness_core::error_chain(&err)))?;
            let call = ctx.get::<harness_fs::CallWorkspace>().context("workspace not bound")?;
            let messages =
                harness::session::read_transcript(call.user.as_ref(), harness.kernel().name().as_str(), &id).await?;
            if messages.is_empty() {
                return Err(usage(format!(
                    "session {id:?} has no transcript (see `harness sessions list`)"
                )));
            }
            for msg in messages {
                if json {
                    println!("{}", serde_json::to_string(&msg)?);
                } else {
                    println!("{}", chat::render_message(&msg));
                }
            }
        }
    }
    Ok(())
}

/// An agent for commands that call no model of the conversation (inspection, memory
/// search). Memory consolidation uses the configured model when one is set.
async fn build_agent_for_inspection(args: &AgentArgs) -> anyhow::Result<HarnessAgent> {
    let dir = workspace_dir(args);
    let config = HarnessConfig::load(&dir).map_err(|err| usage(err.to_string()))?;
    let spec = args
        .model
        .clone()
        .or_else(|| env_lookup("HARNESS_MODEL"))
        .or_else(|| config.agent.model.clone());
    let model: Arc<dyn ChatModel> = match spec {
        Some(spec) => resolve_model(&spec)?,
        None => Arc::new(harness_models::ScriptedModel::new()),
    };
    agent_builder(args, &dir, config)
        .await?
        .shared_model(model)
        .build()
        .map_err(|err| usage(harness_core::error_chain(&err)))
}

async fn memory(command: MemoryCommand) -> anyhow::Result<()> {
    let args = match &command {
        MemoryCommand::Search { agent, .. } | MemoryCommand::Consolidate { agent } => agent.clone(),
    };
    let harness = build_agent_for_inspection(&args).await?;
    let memory = harness
        .memory()
        .ok_or_else(|| usage("memory is disabled ([memory] enabled = false)"))?;
    let ctx = harness
        .bind(context(&args))
        .map_err(|err| usage(harness_core::error_chain(&err)))?;
    let call = ctx.get::<harness_fs::CallWorkspace>().context("workspace not bound")?;
    let namespace = harness_memory::NamespaceKey::for_call(&ctx);
    match command {
        MemoryCommand::Search { limit, query, .. } => {
            let results = memory.search(Arc::clone(&call.user), &namespace, &query, limit).await;
            if let Some(note) = &results.note {
                eprintln!("note: {note}");
            }
            if results.hits.is_empty() {
                println!("no matches");
            }
            for hit in results.hits {
                println!("{}:{}\t{:.2}\t{}", hit.path, hit.line, hit.score, hit.snippet);
            }
        }
        MemoryCommand::Consolidate { .. } => {
            let config = HarnessConfig::load(&workspace_dir(&args)).unwrap_or_default();
            let configured = args.model.is_some()
                || env_lookup("HARNESS_MODEL").is_some()
                || config.agent.model.is_some()
                || config.memory.and_then(|m| m.model).is_some();
            if !configured {
                return Err(usage(
                    "consolidation needs a model: pass --model provider:model or set [memory] model",
                ));
            }
            let outcome = memory
                .consolidate(Arc::clone(&call.user), &namespace)
                .await
                .map_err(|err| anyhow::anyhow!(harness_core::error_chain(&err)))?;
            println!("{outcome:?}");
        }
    }
    harness.shutdown(SHUTDOWN_GRACE).await;
    Ok(())
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            return if err.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("HARNESS_LOG").unwrap_or_else(|_| "error".into()))
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the runtime: {err}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Init { dir } => {
                let dir = dir
                    .or_else(|| env_lookup("HARNESS_WORKSPACE").map(PathBuf::from))
                    .unwrap_or_else(|| PathBuf::from(harness::DEFAULT_WORKSPACE));
                let created =
                    harness::init_workspace(&dir).with_context(|| format!("cannot initialise {}", dir.display()))?;
                println!("workspace {}: {} file(s) created", dir.display(), created.len());
                for path in created {
                    println!("  {}", path.display());
                }
                Ok(())
            }
            Command::Run { agent, json, message } => run(agent, json, message).await,
            Command::Chat { agent } => {
                let harness = build_agent(&agent).await?;
                let result = chat::chat(harness.clone(), context(&agent)).await;
                harness.shutdown(SHUTDOWN_GRACE).await;
                result
            }
            Command::Memory { command } => memory(command).await,
            Command::Sessions { command } => sessions(command).await,
            Command::Tools(args) => tools_cmd::tools(args).await,
            Command::Demo { workspace } => demo::demo(workspace).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            let line = format!("{err:#}").replace('\n', " ");
            eprintln!("error: {line}");
            if err.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}
