//! The process's subscriber: logs (`HARNESS_LOG`, `HARNESS_LOG_FORMAT`) and the OpenTelemetry
//! exporter (`OTEL_*` variables over the workspace's `[telemetry]`), installed before the
//! runtime starts and flushed before the process exits (crate `harness-ops`).

use crate::Command;
use harness_ops::telemetry::{self, LogFormat, TelemetryGuard, TelemetrySection};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tracing_subscriber::fmt::MakeWriter;

/// How long the exit waits for the last spans to reach the collector.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// The workspace whose `[telemetry]` applies: the commands that run an agent.
fn workspace_of(command: &Command) -> Option<PathBuf> {
    let explicit = match command {
        Command::Run { agent, .. } | Command::Approve { agent, .. } | Command::Chat { agent } => {
            agent.ws.workspace.clone()
        }
        Command::Serve(args) => args.workspace().map(Path::to_path_buf),
        _ => return None,
    };
    Some(explicit.unwrap_or_else(|| PathBuf::from(harness::DEFAULT_WORKSPACE)))
}

/// The harness.toml parsed for `[telemetry]`, kept for the agent's loader, so the file is
/// read and parsed once per process ([`take_parsed`]).
static PARSED: std::sync::Mutex<Option<(PathBuf, harness::HarnessConfig)>> = std::sync::Mutex::new(None);

/// The workspace `dir`'s harness.toml as [`install`] parsed it (with [`crate::sections`]),
/// once; `None` for another workspace or when it did not parse (the loader then reports why).
pub(crate) fn take_parsed(dir: &Path) -> Option<harness::HarnessConfig> {
    let mut parsed = PARSED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    match parsed.take() {
        Some((parsed_dir, config)) if parsed_dir == dir => Some(config),
        other => {
            *parsed = other;
            None
        }
    }
}

/// `[telemetry]` of the workspace's harness.toml, when both exist. The whole file is parsed
/// here, once, and kept for the agent's loader ([`take_parsed`]).
fn section(workspace: &Path) -> anyhow::Result<Option<TelemetrySection>> {
    let path = workspace.join(harness::CONFIG_FILE);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(None);
    };
    if let Ok(config) = harness::HarnessConfig::parse_with(&text, &path, &crate::sections()) {
        let section = config.section::<TelemetrySection>().ok().flatten();
        *PARSED.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some((workspace.to_owned(), config));
        return Ok(section);
    }
    // A file the loader will refuse (it reports why, with its caret diagram): `[telemetry]`
    // alone, so that a bad one is reported here, before anything starts.
    let Ok(table) = text.parse::<toml::Table>() else {
        return Ok(None);
    };
    let Some(value) = table.get("telemetry") else {
        return Ok(None);
    };
    value
        .clone()
        .try_into::<TelemetrySection>()
        .map(Some)
        .map_err(|err| anyhow::anyhow!("{}: [telemetry] {}", path.display(), err.message()))
}

/// Installs logs and, when configured, span export.
pub(crate) fn install<W>(
    command: &Command,
    filter: tracing_subscriber::EnvFilter,
    writer: W,
) -> anyhow::Result<TelemetryGuard>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let format =
        LogFormat::from_env(std::env::var("HARNESS_LOG_FORMAT").ok().as_deref()).map_err(anyhow::Error::msg)?;
    let section = match workspace_of(command) {
        Some(dir) => section(&dir)?,
        None => None,
    };
    let export = telemetry::resolve(section.as_ref(), &|name| std::env::var(name).ok())?;
    let metrics = matches!(command, Command::Serve(_));
    Ok(telemetry::install(filter, format, writer, export.as_ref(), metrics)?)
}

/// Sends the spans still buffered; an unreachable collector is a warning, never a failure of
/// the command.
pub(crate) fn shutdown(guard: TelemetryGuard) {
    if !guard.exporting() {
        return;
    }
    if let Err(err) = guard.shutdown(FLUSH_TIMEOUT) {
        #[allow(clippy::print_stderr)]
        {
            eprintln!(
                "warning: telemetry: could not send the last spans: {}",
                harness_core::redact::redact(&err)
            );
        }
    }
}
