//! The `harness` command-line tool.
//!
//! The library resolves the workspace's configuration
//! ([`harness::WorkspaceLoader`]) and reads sessions ([`harness::SessionReader`]); this
//! binary parses flags, applies them on top, and owns the terminal: exit codes (2 usage or
//! configuration, 1 runtime), stdin input, quiet closed pipes, progress notes and Ctrl-C.

#![allow(clippy::print_stderr)]

mod approve;
mod chat;
mod demo;
mod doctor;
mod input;
mod inspect;
mod maintenance;
mod output;
mod progress;
mod sandbox_cmd;
mod serve;
mod telemetry;
mod tools_cmd;
mod workspace;

use clap::{Parser, Subcommand};
use futures::StreamExt;
use harness::structured::{OutputSchema, StructuredError};
use harness::{HarnessAgent, WorkspaceLoader};
use harness_core::{CancellationToken, EventKind, RuntimeContext, SessionId, UserId};
use harness_protocol::{WireEvent, WireKind};
use output::Out;
use progress::Interrupts;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Harness: a runtime for long-running LLM agents.
///
/// Commands: init, run, approve, chat, serve, tools, sessions (list, show, search), memory (search, review, extract, consolidate), doctor, demo.
/// Exit codes: 0 success, 1 runtime error, 2 usage or configuration error, 3 the turn waits
/// for a person's approval (`harness approve` continues it).
#[derive(Parser)]
#[command(name = "harness", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

fn parse_user(raw: &str) -> Result<UserId, String> {
    UserId::parse(raw).map_err(|err| err.to_string())
}

fn parse_session(raw: &str) -> Result<SessionId, String> {
    SessionId::parse(raw).map_err(|err| err.to_string())
}

/// Which workspace, agent and user: shared by every command.
#[derive(clap::Args, Clone, Debug)]
struct WorkspaceArgs {
    /// Workspace directory; must exist (default: $HARNESS_WORKSPACE, else ./.harness/workspace,
    /// created on first use by run and chat).
    #[arg(long, env = "HARNESS_WORKSPACE")]
    workspace: Option<PathBuf>,
    /// Agent name (default: harness.toml's, else `harness`).
    #[arg(long)]
    agent: Option<String>,
    /// User id (default: `default`).
    #[arg(long, value_parser = parse_user)]
    user: Option<UserId>,
}

/// Options of commands that run the agent.
#[derive(clap::Args, Clone, Debug)]
struct AgentArgs {
    #[command(flatten)]
    ws: WorkspaceArgs,
    /// Session id (default: `default`).
    #[arg(long, value_parser = parse_session)]
    session: Option<SessionId>,
    /// Model spec `provider:model`, e.g. openai:gpt-4o-mini, anthropic:claude-sonnet-4-5, scripted:PATH
    /// (default: $HARNESS_MODEL, else harness.toml's [agent] model).
    #[arg(long)]
    model: Option<String>,
    /// Maximum reasoning-acting steps (at least 1).
    #[arg(long)]
    max_iters: Option<NonZeroU32>,
}

#[derive(Subcommand)]
enum Command {
    /// Create a workspace skeleton (never overwrites existing files).
    Init {
        /// Directory (default: the workspace).
        dir: Option<PathBuf>,
        /// Write this model spec as `[agent] model` in the new harness.toml.
        #[arg(long)]
        model: Option<String>,
    },
    /// Run one turn and print the reply.
    Run {
        #[command(flatten)]
        agent: AgentArgs,
        /// Print one JSON event per line; the last line is the final message.
        #[arg(long)]
        json: bool,
        /// Wait for background subagent tasks started in the turn before exiting (otherwise
        /// they end `cancelled`, with the reason in their task record).
        #[arg(long)]
        wait_tasks: bool,
        /// Read the message from this file.
        #[arg(long, value_name = "PATH")]
        file: Option<PathBuf>,
        /// The answer must be JSON matching the JSON Schema in this file: printed on one
        /// line, validated (the model is asked again when it does not match; exit 1 when it
        /// never does).
        #[arg(long, value_name = "FILE")]
        output_schema: Option<PathBuf>,
        /// The message; `-` (or no message with stdin not a terminal) reads stdin.
        message: Option<String>,
    },
    /// Check the host, services and this workspace's configuration: one line per check
    /// (ok / warn / fail with the fix); exit 0 all ok, 1 a warning, 2 a failure.
    Doctor(doctor::DoctorArgs),
    /// Apply [retention] now: delete idle sessions, consolidated daily logs, evicted tool
    /// results and compaction offloads as harness.toml names them (never a live session or
    /// task), printing each removal; --dry-run only prints. `harness serve` runs it on
    /// [retention] interval, on one replica at a time.
    Maintenance(maintenance::MaintenanceArgs),
    /// Decide the calls a turn waits for (approve, or --deny) and run the rest of the turn.
    ///
    /// The model is the one the waiting turn used (recorded with it); --model overrides it.
    /// Exits 3 again when the rest of the turn asks for approval.
    Approve {
        #[command(flatten)]
        agent: AgentArgs,
        #[command(flatten)]
        approve: approve::ApproveArgs,
    },
    /// Chat interactively (streams tokens; /help lists the commands, /exit quits; Ctrl-C cancels a turn).
    Chat {
        #[command(flatten)]
        agent: AgentArgs,
    },
    /// List the tools the agent would offer (built-ins and MCP, after tools.json's allow/deny).
    Tools(tools_cmd::ToolsArgs),
    /// Serve the agent over HTTP: an OpenAI-compatible API (/v1) and the native API (/api).
    /// Prints `listening on http://HOST:PORT` on stderr when ready; SIGTERM or Ctrl-C finishes
    /// running turns and exits 0.
    Serve(serve::ServeArgs),
    /// Inspect sessions (list, show).
    Sessions {
        #[command(subcommand)]
        command: inspect::SessionsCommand,
    },
    /// Search, review, extract or consolidate long-term memory.
    Memory {
        #[command(subcommand)]
        command: inspect::MemoryCommand,
    },
    /// The sandbox: `check` prints what the host proves for `[sandbox]`.
    Sandbox {
        #[command(subcommand)]
        command: sandbox_cmd::SandboxCommand,
    },
    /// An offline demonstration on the scripted model: persona, two turns, files written.
    Demo {
        /// Workspace (default: a fresh temporary directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
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

/// A usage or configuration error (exit code 2).
fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(message.into()))
}

/// A runtime error (exit code 1) with its whole cause chain.
fn runtime(err: &(dyn std::error::Error + 'static)) -> anyhow::Error {
    anyhow::anyhow!(harness_core::error_chain(err))
}

fn env_lookup(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|value| !value.trim().is_empty())
}

/// How long background work (a due memory extraction) may run after the last turn; Ctrl-C
/// ends the wait at once. Nothing is lost by not waiting: extraction works from the
/// transcript past a persisted watermark, so a later process (or `harness memory extract`)
/// catches up.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// After this long the wait is announced on stderr.
const SHUTDOWN_ANNOUNCE: std::time::Duration = std::time::Duration::from_secs(1);

/// The `harness.toml` sections the CLI accepts: the built-in ones, `[serve]`, `[telemetry]`
/// and `[retention]` (what every loader of the CLI registers).
pub(crate) fn sections() -> harness::capability::Sections {
    harness::capability::Sections::builtin()
        .with(harness_serve::SECTION)
        .with(harness_ops::SECTION)
        .with(harness_ops::RETENTION)
}

/// Builds the agent: the library resolves harness.toml, flags go on top.
/// A `--user` or `--session` the agent cannot use (a reserved name, an unsafe id) is a
/// usage error (exit 2), found before anything runs.
async fn build_agent(args: &AgentArgs) -> anyhow::Result<(HarnessAgent, String)> {
    let (agent, spec, _) = build_agent_configured(args).await?;
    match agent.bind(context(args)) {
        Err(err @ (harness_core::AgentError::Refused { .. } | harness_core::AgentError::Identity(_))) => {
            Err(UsageError(harness_core::error_chain(&err)).into())
        }
        _ => Ok((agent, spec)),
    }
}

/// [`build_agent`], also returning the parsed harness.toml.
async fn build_agent_configured(args: &AgentArgs) -> anyhow::Result<(HarnessAgent, String, harness::HarnessConfig)> {
    let workspace = workspace::resolve_for_agent(args.ws.workspace.clone())?;
    let env = env_lookup;
    let mut loader = WorkspaceLoader::new(&workspace.dir, &env)
        .register(harness_serve::SECTION)
        .register(harness_ops::SECTION)
        .register(harness_ops::RETENTION);
    // The file as the telemetry setup parsed it (with the same sections): not parsed again.
    if let Some(config) = telemetry::take_parsed(&workspace.dir) {
        loader = loader.parsed(config);
    }
    let loaded = loader
        .model(args.model.clone())
        .name(args.ws.agent.clone())
        .on_retry(Some(progress::retry_observer()))
        .on_fallback(Some(progress::fallback_observer()))
        .host_env(harness_mcp::HostEnv::from_vars(std::env::vars()))
        .load()
        .await
        .map_err(|err| usage(harness_core::error_chain(&err)))?;
    let Some((spec, _)) = loaded.model else {
        return Err(usage(
            "no model configured: pass --model provider:model (e.g. --model openai:gpt-4o-mini), set HARNESS_MODEL, \
             or set [agent] model in harness.toml (`harness init DIR --model SPEC` writes it); `harness demo` runs offline",
        ));
    };
    // The loader started tools.json's MCP servers and the skill layers; the agent's shutdown
    // stops the servers.
    let mut builder = loaded.builder;
    if let Some(max) = args.max_iters {
        builder = builder.max_iters(max);
    }
    let agent = builder.build().map_err(|err| usage(harness_core::error_chain(&err)))?;
    // A malformed subagent file is skipped, and a part of one ignored, never silently.
    #[allow(clippy::print_stderr)]
    for warning in agent.subagent_warnings() {
        eprintln!(
            "warning: subagent file {}",
            harness_core::redact::redact(&warning.to_string())
        );
    }
    // A server that did not start is named with why (its tools are absent; the rest run).
    for failure in loaded
        .extensions
        .iter()
        .flat_map(|e| e.failures())
        .filter(|f| !f.disabled)
    {
        eprintln!(
            "warning: MCP server `{}` offers no tools: {}; fix its entry in tools.json or .mcp.json (`harness doctor` checks it)",
            failure.server,
            harness_core::redact::redact(&failure.reason)
        );
    }
    Ok((agent, spec, loaded.config))
}

/// The flags of `args` that name its workspace, user and session (for printed hints).
fn target_flags(args: &AgentArgs) -> String {
    approve::target_flags(
        args.ws.workspace.as_deref(),
        args.ws.user.as_ref().map(|user| user.as_str()),
        args.session.as_ref().map(|session| session.as_str()),
    )
}

fn context(args: &AgentArgs) -> RuntimeContext {
    let mut ctx = RuntimeContext::default();
    ctx.user_id = args.ws.user.clone();
    ctx.session_id = args.session.clone();
    ctx
}

/// Waits for background work up to [`SHUTDOWN_GRACE`], says so after
/// [`SHUTDOWN_ANNOUNCE`], and never waits past a Ctrl-C.
async fn shutdown(agent: &HarnessAgent) {
    let done = agent.shutdown(SHUTDOWN_GRACE);
    tokio::pin!(done);
    tokio::select! {
        () = &mut done => return,
        _ = tokio::signal::ctrl_c() => return,
        () = tokio::time::sleep(SHUTDOWN_ANNOUNCE) => {}
    }
    eprintln!(
        "(finishing memory extraction, up to {} s; Ctrl-C skips it and a later run or `harness memory extract` catches up)",
        SHUTDOWN_GRACE.as_secs()
    );
    tokio::select! {
        () = &mut done => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// `--output-schema FILE`: the JSON Schema in the file, checked (a usage error otherwise).
fn read_output_schema(path: &std::path::Path) -> anyhow::Result<OutputSchema> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| usage(format!("cannot read the output schema {}: {err}", path.display())))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|err| usage(format!("the output schema {} is not JSON: {err}", path.display())))?;
    OutputSchema::new(value).map_err(|err| usage(format!("{}: {err}", path.display())))
}

async fn run(
    args: AgentArgs,
    json: bool,
    wait_tasks: bool,
    message: String,
    schema: Option<OutputSchema>,
    interrupts: Arc<Interrupts>,
) -> anyhow::Result<()> {
    let (agent, spec) = build_agent(&args).await?;
    let _handling = interrupts.handling();
    let cancel = CancellationToken::new();
    let ctx = context(&args).with_cancellation(cancel.clone());
    let target = target_flags(&args);
    let turn = run_turn(
        &agent,
        ctx,
        json,
        TurnInput::Message(message),
        schema.as_ref(),
        &spec,
        &target,
    );
    tokio::pin!(turn);
    let result = tokio::select! {
        result = &mut turn => result,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("(cancelling the turn; Ctrl-C again to quit)");
            cancel.cancel();
            turn.await
        }
    };
    if wait_tasks && result.is_ok() {
        tokio::select! {
            () = agent.wait_for_tasks() => {}
            _ = tokio::signal::ctrl_c() => eprintln!("(not waiting for background tasks any more)"),
        }
    }
    interrupts.reset();
    shutdown(&agent).await;
    result
}

/// What a turn is given.
enum TurnInput {
    /// A new message.
    Message(String),
    /// Decisions on the calls it waits for.
    Decisions(Vec<harness_core::ApprovalDecision>),
}

/// Runs one turn (or the rest of a waiting one) and prints it: the reply text, or with
/// `json` one event per line. A turn that ends waiting for approval prints the pending calls
/// and fails with [`approve::AwaitingApproval`] (exit code 3).
async fn run_turn(
    agent: &HarnessAgent,
    mut ctx: RuntimeContext,
    json: bool,
    input: TurnInput,
    schema: Option<&OutputSchema>,
    spec: &str,
    target: &str,
) -> anyhow::Result<()> {
    ctx.insert(harness_core::TurnModelSpec(spec.to_owned()));
    let mut out = Out::new();
    let waiting = progress::WaitingNote::start(format!("the model {spec}"));
    if let (Some(schema), false, TurnInput::Message(message)) = (schema, json, &input) {
        let reply = progress::printing_warnings(|events| {
            agent.call_structured_with_events(message.as_str(), schema, ctx.clone(), events)
        })
        .await;
        drop(waiting);
        return match reply {
            Ok(reply) => Ok(out.line(&serde_json::to_string(&reply.value)?)?),
            Err(StructuredError::AwaitingApproval { message }) => {
                let pending = agent.pending_approval(ctx.clone()).await.map_err(|err| runtime(&err))?;
                let text = message.text();
                if !text.trim().is_empty() {
                    out.line(&text)?;
                }
                approve::print_pending(&mut out, &pending, target)?;
                Err(anyhow::Error::new(approve::AwaitingApproval))
            }
            Err(err) => Err(runtime(&err)),
        };
    }
    if !json {
        // Nobody watches tokens: one non-streaming request per model call. Warnings (a
        // workspace file not injected, a cut reply) still reach stderr.
        let reply = progress::printing_warnings(|events| async {
            match input {
                TurnInput::Message(message) => agent.call_with_events(message, ctx.clone(), events).await,
                TurnInput::Decisions(decisions) => agent.resume_with_events(decisions, ctx.clone(), events).await,
            }
        })
        .await;
        drop(waiting);
        let reply = reply.map_err(|err| runtime(&err))?;
        let pending = agent.pending_approval(ctx.clone()).await.map_err(|err| runtime(&err))?;
        let text = reply.text();
        if !pending.is_empty() {
            if !text.trim().is_empty() {
                out.line(&text)?;
            }
            approve::print_pending(&mut out, &pending, target)?;
            return Err(anyhow::Error::new(approve::AwaitingApproval));
        }
        out.line(&text)?;
        return Ok(());
    }
    let mut waiting = Some(waiting);
    let mut events = match (input, schema) {
        (TurnInput::Message(message), Some(schema)) => agent.stream_structured(message, schema, ctx),
        (TurnInput::Message(message), None) => agent.stream(message, ctx),
        (TurnInput::Decisions(decisions), _) => agent.resume_stream(decisions, ctx),
    };
    let mut failed = None;
    let mut asked = false;
    // Every event is drained even when nobody reads stdout any more: the turn completes and
    // is persisted.
    while let Some(event) = events.next().await {
        waiting.take();
        if let EventKind::Error { message, .. } = &event.kind {
            failed = Some(message.clone());
        }
        // The protocol's events (README "Events"), as `harness serve` streams them.
        let lines = match WireEvent::from_agent(event, None) {
            // One event per pending call.
            Some(WireEvent {
                kind: WireKind::ApprovalRequired { calls },
                source: None,
            }) => {
                asked = true;
                approve::pending_lines(&calls)?
            }
            Some(wire) => vec![serde_json::to_string(&wire)?],
            None => Vec::new(),
        };
        if !out.closed() {
            for mut line in lines {
                line.push('\n');
                out.write(&line)?;
            }
        }
    }
    match failed {
        Some(message) => Err(anyhow::anyhow!(message)),
        None if asked => Err(anyhow::Error::new(approve::AwaitingApproval)),
        None => Ok(()),
    }
}

/// `harness approve`: reads what the session waits for, turns the flags into decisions,
/// optionally saves the rules, and runs the rest of the turn like `run`.
async fn approve_cmd(
    mut args: AgentArgs,
    flags: approve::ApproveArgs,
    interrupts: Arc<Interrupts>,
) -> anyhow::Result<()> {
    let ctx = context(&args);
    let pending = approve::read_pending(&args, &ctx).await?;
    if pending.is_empty() {
        return Err(usage(format!(
            "nothing is waiting for approval in session `{}` of user `{}` in the workspace {} (`harness run` exits 3 when a turn waits)",
            ctx.session_id
                .as_ref()
                .map_or(harness_core::DEFAULT_SESSION, |id| id.as_str()),
            ctx.user_id
                .as_ref()
                .map_or(harness_core::DEFAULT_USER, |id| id.as_str()),
            workspace::resolve(args.ws.workspace.clone())?.dir.display(),
        )));
    }
    let decisions = approve::decisions(&flags, &pending)?;
    if args.model.is_none() {
        args.model = pending.model.clone();
    }
    if flags.save {
        let rules: Vec<String> = decisions
            .iter()
            .filter_map(|decision| pending.call(&decision.call_id))
            .filter_map(|call| call.suggestion.clone())
            .collect();
        let dir = workspace::resolve(args.ws.workspace.clone())?.dir;
        let added = approve::save_rules(&dir, &rules)?;
        for rule in added {
            eprintln!(
                "added `{rule}` to [permissions] allow in {}",
                dir.join(harness::config::CONFIG_FILE).display()
            );
        }
    }
    let (agent, spec) = build_agent(&args).await?;
    let _handling = interrupts.handling();
    let cancel = CancellationToken::new();
    let ctx = ctx.with_cancellation(cancel.clone());
    let target = target_flags(&args);
    let turn = run_turn(
        &agent,
        ctx,
        flags.json,
        TurnInput::Decisions(decisions),
        None,
        &spec,
        &target,
    );
    tokio::pin!(turn);
    let result = tokio::select! {
        result = &mut turn => result,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("(cancelling the turn; Ctrl-C again to quit)");
            cancel.cancel();
            turn.await
        }
    };
    interrupts.reset();
    shutdown(&agent).await;
    result
}

fn init(dir: Option<PathBuf>, model: Option<String>) -> anyhow::Result<()> {
    let dir = dir
        .or_else(|| env_lookup("HARNESS_WORKSPACE").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(harness::DEFAULT_WORKSPACE));
    if dir.exists() && !dir.is_dir() {
        return Err(usage(format!("{} exists and is not a directory", dir.display())));
    }
    if let Some(spec) = &model {
        harness_models::ModelSpec::parse(spec).map_err(|err| usage(format!("--model: {err}")))?;
    }
    let created =
        harness::init_workspace(&dir).map_err(|err| anyhow::anyhow!("cannot initialise {}: {err}", dir.display()))?;
    let config = dir.join(harness::config::CONFIG_FILE);
    if let Some(spec) = &model {
        if created.iter().any(|path| path == &config) {
            let text = std::fs::read_to_string(&config)?;
            let line = format!("model = {}", toml_string(spec));
            let text = text.replacen("[agent]\n", &format!("[agent]\n{line}\n"), 1);
            std::fs::write(&config, text)?;
        } else {
            eprintln!(
                "note: {} already exists; set [agent] model there yourself",
                config.display()
            );
        }
    }
    let mut out = Out::new();
    out.line(&format!(
        "workspace {}: {} file(s) created",
        dir.display(),
        created.len()
    ))?;
    for path in created {
        out.line(&format!("  {}", path.display()))?;
    }
    Ok(())
}

/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Standard error through the process's redactor: each log record is masked before it is
/// written (the subscriber writes one record per call).
struct RedactingStderr;

impl std::io::Write for RedactingStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let masked = harness_core::redact::redact(&text);
        std::io::stderr().lock().write_all(masked.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().lock().flush()
    }
}

fn main() -> ExitCode {
    // Started by bubblewrap as a sandbox's pid 1 (`/.harness-init`): the binary is its own
    // sandbox init, so a `harness` install needs no second binary.
    if std::env::args_os()
        .next()
        .is_some_and(|arg0| std::path::Path::new(&arg0).file_name() == Some(std::ffi::OsStr::new(".harness-init")))
    {
        return harness_sandbox::init_main();
    }
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
    // Every credential the process holds is masked in what it prints or logs (also in what
    // dependencies log, e.g. an MCP client logging an expanded URL).
    harness_core::redact::learn_process_env();
    // A server's operator sees what it refused (a foreign Origin or Host, a request that is
    // not the API's) without asking for it; other commands print errors only.
    let default_log = if matches!(cli.command, Command::Serve(_)) {
        "error,harness_serve=warn"
    } else {
        "error"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("HARNESS_LOG").unwrap_or_else(|_| default_log.into());
    let telemetry = match telemetry::install(&cli.command, filter, || RedactingStderr) {
        Ok(guard) => guard,
        Err(err) => {
            eprintln!("error: {}", harness_core::redact::redact(&format!("{err:#}")));
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the runtime: {err}");
            return ExitCode::from(1);
        }
    };
    let command = match cli.command {
        Command::Doctor(args) => {
            let code = runtime.block_on(doctor::doctor(args));
            telemetry::shutdown(telemetry);
            return code.unwrap_or_else(|err| {
                eprintln!("error: {}", harness_core::redact::redact(&format!("{err:#}")));
                ExitCode::from(2)
            });
        }
        other => other,
    };
    let result = runtime.block_on(async move {
        let interrupts = Interrupts::install();
        match command {
            Command::Init { dir, model } => init(dir, model),
            Command::Run {
                agent,
                json,
                wait_tasks,
                file,
                output_schema,
                message,
            } => {
                let schema = output_schema.as_deref().map(read_output_schema).transpose()?;
                // Reading stdin or a file blocks: off the runtime's threads.
                let message = tokio::task::spawn_blocking(move || input::message(message, file.as_deref())).await??;
                run(agent, json, wait_tasks, message, schema, interrupts).await
            }
            Command::Approve { agent, approve } => approve_cmd(agent, approve, interrupts).await,
            Command::Chat { agent } => {
                if chat::typed_ahead() {
                    // A block pasted into the shell: its next lines are the shell's, not messages.
                    eprintln!("{}", chat::TYPED_AHEAD);
                    return Ok(());
                }
                let (harness, _) = build_agent(&agent).await?;
                let _handling = interrupts.handling();
                let setup = chat::ChatSetup {
                    reader: inspect::reader(&agent.ws).await.ok().flatten(),
                    user: agent.ws.user.clone().unwrap_or(harness_core::DEFAULT_USER_ID),
                    target: approve::target_flags(
                        agent.ws.workspace.as_deref(),
                        agent.ws.user.as_ref().map(|user| user.as_str()),
                        None,
                    ),
                };
                let result = chat::chat(harness.clone(), context(&agent), Arc::clone(&interrupts), setup).await;
                shutdown(&harness).await;
                result
            }
            Command::Serve(args) => serve::serve(args, interrupts).await,
            Command::Memory { command } => inspect::memory(command).await,
            Command::Sessions { command } => inspect::sessions(command).await,
            Command::Tools(args) => tools_cmd::tools(args).await,
            Command::Sandbox { command } => sandbox_cmd::sandbox(command).await,
            Command::Demo { workspace } => demo::demo(workspace).await,
            Command::Maintenance(args) => maintenance::maintenance(args).await,
            Command::Doctor(_) => Ok(()),
        }
    });
    // Buffered spans leave before the process does (a one-shot `run` included).
    telemetry::shutdown(telemetry);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The pending calls were printed; the status says the turn waits.
        Err(err) if err.downcast_ref::<approve::AwaitingApproval>().is_some() => ExitCode::from(approve::EXIT_WAITING),
        Err(err) => {
            // One line, except a message that carries its own layout (a TOML caret diagram).
            let text = harness_core::redact::redact(&format!("{err:#}"));
            eprintln!("error: {}", text.trim_end());
            if err.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}
