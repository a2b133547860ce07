//! `harness doctor`: is this host, its services and this workspace's configuration fit to
//! run the agent? One line per check (ok / warn / fail, with the fix); the exit status is the
//! worst line (0 ok, 1 warn, 2 fail). No model call unless `--online`.
#![allow(clippy::print_stdout)] // the report is the command's output

use crate::WorkspaceArgs;
use harness::{HarnessConfig, WorkspaceLoader};
use harness_ops::doctor::{Check, Report, Status, disk_use, redis_ping, tcp_reachable};
use std::process::ExitCode;
use std::time::Duration;

/// How long a service may take to answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Options of `doctor`.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct DoctorArgs {
    #[command(flatten)]
    ws: WorkspaceArgs,
    /// Model spec to check instead of $HARNESS_MODEL / harness.toml's.
    #[arg(long)]
    model: Option<String>,
    /// Also send the model one short request (costs a call).
    #[arg(long)]
    online: bool,
}

async fn service(report: &mut Report, name: &str, url: Option<&str>, redis: bool) {
    let Some(url) = url else {
        report.push(Check::fail(
            name,
            "no url",
            format!("set the url of [{name}] in harness.toml"),
        ));
        return;
    };
    let probe = if redis {
        redis_ping(url, PROBE_TIMEOUT).await
    } else {
        tcp_reachable(url, PROBE_TIMEOUT).await
    };
    match probe {
        Ok(detail) => report.push(Check::ok(name, detail)),
        Err(detail) => report.push(Check::fail(
            name,
            detail,
            format!("start the service, or correct [{name}] url in harness.toml"),
        )),
    }
}

pub(crate) async fn doctor(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let mut report = Report::default();
    let dir = match crate::workspace::resolve(args.ws.workspace.clone()) {
        Ok(ws) if ws.exists => ws.dir,
        Ok(ws) => {
            report.push(Check::fail(
                "workspace",
                format!("{} does not exist", ws.dir.display()),
                format!("create it with `harness init {}`", ws.dir.display()),
            ));
            print!("{}", report.render());
            return Ok(ExitCode::from(report.exit_code()));
        }
        Err(err) => {
            report.push(Check::fail(
                "workspace",
                format!("{err:#}"),
                "pass an existing --workspace DIR",
            ));
            print!("{}", report.render());
            return Ok(ExitCode::from(report.exit_code()));
        }
    };
    report.push(Check::ok("workspace", dir.display().to_string()));
    let sections = harness_serve::sections()
        .with(harness_ops::SECTION)
        .with(harness_ops::RETENTION);
    let config = match HarnessConfig::load_with(&dir, &sections) {
        Ok(config) => {
            let file = dir.join(harness::CONFIG_FILE);
            report.push(Check::ok(
                "harness.toml",
                if file.is_file() {
                    "parsed"
                } else {
                    "none (defaults apply)"
                },
            ));
            config
        }
        Err(err) => {
            report.push(Check::fail(
                "harness.toml",
                err.to_string(),
                "correct the named key (`harness init` on an empty directory writes a commented template)",
            ));
            print!("{}", report.render());
            return Ok(ExitCode::from(report.exit_code()));
        }
    };
    match config.state.as_ref().map(|s| s.kind) {
        None | Some(harness::state::StateKind::File) => report.push(Check::ok("state", "JSON files in the workspace")),
        Some(harness::state::StateKind::Redis) => {
            service(
                &mut report,
                "state",
                config.state.as_ref().and_then(|s| s.url.as_deref()),
                true,
            )
            .await;
        }
        Some(harness::state::StateKind::Postgres) => {
            service(
                &mut report,
                "state",
                config.state.as_ref().and_then(|s| s.url.as_deref()),
                false,
            )
            .await;
        }
    }
    let schema_current = match &config.state {
        Some(state) if state.kind != harness::state::StateKind::File && report.worst() < Status::Fail => {
            let check = schema(state).await;
            let current = check.status == Status::Ok;
            report.push(check);
            current
        }
        _ => true,
    };
    if let Some(fs) = &config.filesystem
        && matches!(fs.kind, harness::filesystem::FilesystemKind::Composite)
    {
        let url = fs.url.clone().unwrap_or_else(|| fs.redis_url.clone());
        let redis = url.starts_with("redis");
        service(&mut report, "filesystem", Some(&url), redis).await;
    }
    let telemetry_section = config
        .section::<harness_ops::TelemetrySection>()
        .map_err(|err| anyhow::anyhow!("{err}"))?;
    match harness_ops::telemetry::resolve(telemetry_section.as_ref(), &|name| std::env::var(name).ok()) {
        Ok(None) => report.push(Check::ok(
            "telemetry",
            "export off (set OTEL_EXPORTER_OTLP_ENDPOINT to export spans)",
        )),
        Ok(Some(settings)) => report.push(Check::ok(
            "telemetry",
            format!("exporting to {} as {}", settings.traces_endpoint, settings.service_name),
        )),
        Err(err) => report.push(Check::fail("telemetry", err.to_string(), "see the message")),
    }
    // The model and the extensions: what the loader resolves and starts.
    let env = crate::env_lookup;
    let loaded = WorkspaceLoader::new(&dir, &env)
        .register(harness_serve::SECTION)
        .register(harness_ops::SECTION)
        .register(harness_ops::RETENTION)
        .model(args.model.clone())
        .name(args.ws.agent.clone())
        .host_env(harness_mcp::HostEnv::from_vars(std::env::vars()))
        // Connecting migrates a schema: the stores were probed above, read-only.
        .stores(false)
        .load()
        .await;
    match loaded {
        // The loader resolves the model and starts the extensions.
        Err(err) => report.push(Check::fail(
            "agent",
            harness_core::error_chain(&err),
            "fix what the message names (the model spec and its API key variable, a service url, tools.json)",
        )),
        Ok(loaded) => {
            match &loaded.model {
                None => report.push(Check::fail(
                    "model",
                    "no model configured",
                    "pass --model provider:model, set HARNESS_MODEL, or set [agent] model in harness.toml",
                )),
                Some((spec, source)) => report.push(Check::ok("model", format!("{spec} ({source:?}); key resolved"))),
            }
            if let Some(extensions) = &loaded.extensions {
                mcp_lines(&mut report, extensions);
                extensions.shutdown().await;
            }
            if args.online && loaded.model.is_some() {
                report.push(online(loaded.builder).await);
            }
        }
    }
    report.push(sandbox(&dir, &config).await);
    let (bytes, files) = disk_use(&dir);
    #[allow(clippy::cast_precision_loss)] // a display value
    let mib = bytes as f64 / (1024.0 * 1024.0);
    let detail = format!("{mib:.1} MiB in {files} files");
    report.push(disk(&dir, &config, detail, bytes, schema_current).await);
    print!("{}", report.render());
    Ok(ExitCode::from(report.exit_code()))
}

/// Disk use against `[retention]`: what a maintenance run would remove now (a dry run).
async fn disk(
    dir: &std::path::Path,
    config: &HarnessConfig,
    detail: String,
    bytes: u64,
    schema_current: bool,
) -> Check {
    let retention = match config.section::<harness_ops::RetentionSection>() {
        Ok(section) => section.unwrap_or_default(),
        Err(err) => return Check::fail("disk", err.to_string(), "correct [retention] in harness.toml"),
    };
    if !retention.names_anything() {
        return if bytes > 1024 * 1024 * 1024 {
            Check::warn(
                "disk",
                format!("{detail}; nothing is ever deleted"),
                "name what may be deleted in [retention] and run `harness maintenance`",
            )
        } else {
            Check::ok(
                "disk",
                format!("{detail}; [retention] names nothing, so nothing is deleted"),
            )
        };
    }
    let described = retention.describe();
    if !schema_current {
        // The dry run opens the state store, and opening it migrates.
        return Check::warn(
            "disk",
            format!("{detail}; not measured against [retention] ({described}): the state schema is not current"),
            "see the `state schema` line, then run `harness maintenance --dry-run`",
        );
    }
    let dry = match harness_ops::Maintenance::open(dir, config).await {
        Ok(maintenance) => {
            maintenance
                .run(&harness_ops::Target::default(), true, jiff::Timestamp::now())
                .await
        }
        Err(err) => Err(err),
    };
    match dry {
        Ok(dry) if dry.removed.is_empty() => {
            Check::ok("disk", format!("{detail}; nothing past [retention] ({described})"))
        }
        Ok(dry) => Check::warn(
            "disk",
            format!("{detail}; {} item(s) past [retention] ({described})", dry.removed.len()),
            "run `harness maintenance` (`harness maintenance --dry-run` lists them; `harness serve` runs it every interval)",
        ),
        Err(err) => Check::fail(
            "disk",
            harness_core::error_chain(&err),
            "fix what the message names, then run `harness maintenance --dry-run`",
        ),
    }
}

/// One short model call.
async fn online(builder: harness::HarnessAgentBuilder) -> Check {
    let agent = match builder.build() {
        Ok(agent) => agent,
        Err(err) => return Check::fail("model call", harness_core::error_chain(&err), "see the message"),
    };
    let mut ctx = harness_core::RuntimeContext::default();
    ctx.session_id = harness_core::SessionId::parse("doctor").ok();
    let reply = agent.call("Reply with the single word OK.", ctx).await;
    agent.shutdown(Duration::from_secs(5)).await;
    match reply {
        Ok(msg) => Check::ok("model call", format!("answered ({} chars)", msg.text().len())),
        Err(err) => Check::fail(
            "model call",
            harness_core::error_chain(&err),
            "check the API key, base URL and model name",
        ),
    }
}

/// The state store's schema version, read without migrating: ok when it is this build's (or
/// nothing was created yet), warn when older (connecting migrates it), fail when newer.
async fn schema(state: &harness::state::StateConfig) -> Check {
    const NAME: &str = "state schema";
    match harness::state::probe_schema(state).await {
        Ok(None) => Check::ok(NAME, "JSON files (no schema)"),
        Ok(Some(probe)) => match probe.found {
            None => Check::ok(
                NAME,
                format!(
                    "nothing created under this prefix yet (the first run creates version {})",
                    probe.current
                ),
            ),
            Some(found) if found == probe.current => Check::ok(NAME, format!("version {found} (current)")),
            Some(found) if found < probe.current => Check::warn(
                NAME,
                format!("version {found}, older than this binary's {}", probe.current),
                "back it up, then run `harness maintenance --dry-run` (or start `harness serve`) once with this binary: connecting migrates it",
            ),
            Some(found) => Check::fail(
                NAME,
                format!("version {found}, newer than this binary's {}", probe.current),
                "run the Harness version that wrote it (or a newer one); this binary must not write a newer schema",
            ),
        },
        Err(err) => Check::fail(
            NAME,
            harness_core::error_chain(&err),
            "start the service, or correct [state] url and key_prefix in harness.toml",
        ),
    }
}

/// One line per MCP server of tools.json / .mcp.json: started with its tool count, skipped
/// (`enabled: false`), or failed with the server's error and stderr tail.
fn mcp_lines(report: &mut Report, extensions: &harness::extensions::Extensions) {
    let mcp = extensions.mcp();
    let servers = mcp.servers();
    if servers.is_empty() && extensions.failures().is_empty() {
        report.push(Check::ok("mcp", "no MCP servers configured"));
        return;
    }
    for server in servers {
        let tools = mcp.mcp_tools().iter().filter(|tool| tool.server() == server).count();
        report.push(Check::ok(
            format!("mcp {server}"),
            format!("started, listed {tools} tool(s)"),
        ));
    }
    for failure in extensions.failures() {
        let name = format!("mcp {}", failure.server);
        if failure.disabled {
            report.push(Check::ok(name, "skipped (\"enabled\": false)"));
        } else {
            report.push(Check::fail(
                name,
                failure.reason.clone(),
                "correct the server's command, args, env or url in tools.json / .mcp.json (its stderr is quoted above), or set \"enabled\": false",
            ));
        }
    }
}

/// `harness sandbox check` as one line: the configured tier probed on this host.
async fn sandbox(dir: &std::path::Path, config: &HarnessConfig) -> Check {
    const NAME: &str = "sandbox";
    let section = match config.section::<harness_sandbox::SandboxSection>() {
        Ok(None) => return Check::ok(NAME, "no sandbox configured ([sandbox] is absent)"),
        Ok(Some(section)) => section,
        Err(err) => {
            return Check::fail(
                NAME,
                harness_core::error_chain(&err),
                "correct [sandbox] in harness.toml",
            );
        }
    };
    if let Err(message) = section.validate(dir) {
        return Check::fail(NAME, message, "correct [sandbox] in harness.toml");
    }
    match section.provider().probe().await {
        Ok(caps) => Check::ok(
            NAME,
            format!(
                "namespace tier runs here (bubblewrap {}, landlock ABI {}, seccomp {}, per-sandbox uid {})",
                caps.bwrap_version,
                caps.landlock_abi,
                if caps.seccomp { "yes" } else { "no" },
                if caps.per_sandbox_uid { "yes" } else { "no" }
            ),
        ),
        Err(err) => Check::fail(
            NAME,
            format!("the configured tier cannot run on this host: {err}"),
            "run `harness sandbox check` for each property; install bubblewrap or correct [sandbox] bwrap, uid_range and state_dir",
        ),
    }
}
