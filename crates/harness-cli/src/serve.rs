//! `harness serve`: the workspace's agent over HTTP (crate `harness-serve`). This file only
//! resolves flags over `[serve]`, binds, prints the address, and turns SIGTERM / Ctrl-C into
//! the gateway's graceful shutdown.

use crate::progress::Interrupts;
use crate::{AgentArgs, build_agent_configured, usage};
use harness_serve::{Gateway, ServeOptions};
use std::sync::Arc;

/// Options of `serve`.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct ServeArgs {
    /// Address to listen on, HOST:PORT (default: [serve] bind, else 127.0.0.1:8080; port 0 picks
    /// a free one). Without [[serve.keys]] only loopback addresses are allowed.
    #[arg(long)]
    bind: Option<String>,
    /// How long running turns may take to finish after SIGTERM or Ctrl-C before they are
    /// cancelled (seconds).
    #[arg(long, default_value_t = 30)]
    shutdown_grace: u64,
    /// Workspace directory; must exist (default: $HARNESS_WORKSPACE, else ./.harness/workspace).
    #[arg(long, env = "HARNESS_WORKSPACE")]
    workspace: Option<std::path::PathBuf>,
    /// Agent name (default: harness.toml's, else `harness`); clients use it as the `model`.
    #[arg(long)]
    agent: Option<String>,
    /// Model spec `provider:model` (default: $HARNESS_MODEL, else harness.toml's [agent] model).
    #[arg(long)]
    model: Option<String>,
    /// Maximum reasoning-acting steps per turn (at least 1).
    #[arg(long)]
    max_iters: Option<std::num::NonZeroU32>,
}

impl ServeArgs {
    /// The `--workspace` flag (or `HARNESS_WORKSPACE`).
    pub(crate) fn workspace(&self) -> Option<&std::path::Path> {
        self.workspace.as_deref()
    }

    fn agent_args(&self) -> AgentArgs {
        AgentArgs {
            ws: crate::WorkspaceArgs {
                workspace: self.workspace.clone(),
                agent: self.agent.clone(),
                user: None,
            },
            session: None,
            model: self.model.clone(),
            max_iters: self.max_iters,
        }
    }
}

pub(crate) async fn serve(args: ServeArgs, interrupts: Arc<Interrupts>) -> anyhow::Result<()> {
    let (agent, _spec, config) = build_agent_configured(&args.agent_args()).await?;
    let section = config
        .section::<harness_serve::ServeSection>()
        .map_err(|err| usage(err.to_string()))?;
    let mut agents = vec![agent];
    // `[serve] agents`: more workspaces, each served under its own agent name.
    let root = agents[0].workspace().root().to_path_buf();
    for dir in section.iter().flat_map(|s| s.agents.iter()) {
        let dir = if dir.is_absolute() { dir.clone() } else { root.join(dir) };
        if !dir.is_dir() {
            return Err(usage(format!(
                "[serve] agents: {} is not a directory (create it with `harness init --workspace {}`)",
                dir.display(),
                dir.display()
            )));
        }
        let mut extra = args.agent_args();
        extra.ws.workspace = Some(dir);
        extra.ws.agent = None;
        let (agent, _, _) = build_agent_configured(&extra).await?;
        agents.push(agent);
    }
    let mut options = ServeOptions::from_section(section.as_ref()).map_err(|err| usage(err.to_string()))?;
    options.shutdown_grace = std::time::Duration::from_secs(args.shutdown_grace);
    let bind = args
        .bind
        .or_else(|| section.as_ref().and_then(|s| s.bind.clone()))
        .unwrap_or_else(|| harness_serve::DEFAULT_BIND.to_owned());
    let addr: std::net::SocketAddr = tokio::net::lookup_host(bind.as_str())
        .await
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| usage(format!("--bind {bind}: expected HOST:PORT, e.g. 127.0.0.1:8080")))?;
    let served_agents = agents.clone();
    let gateway = Gateway::new(agents, options).map_err(|err| usage(err.to_string()))?;
    gateway.check_bind(addr).map_err(|err| usage(err.to_string()))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|err| usage(format!("cannot listen on {addr}: {err}")))?;
    let local = listener.local_addr()?;
    eprintln!("listening on http://{local}");
    // What the isolation scope still shares, in one line.
    eprintln!("sharing: {}", gateway.sharing_notice());
    let takeover = schedule_takeover(&served_agents, &config);
    let _handling = interrupts.handling();
    let maintenance = harness_ops::Maintenance::open(&root, &config)
        .await
        .map_err(|err| usage(harness_core::error_chain(&err)))?;
    // `/metrics`: background tasks by state from the task records (the shared store's).
    gateway.add_gauges(Arc::new(maintenance.clone()));
    let maintenance = schedule_maintenance(maintenance);
    let served = gateway
        .serve(listener, async {
            stop_signal().await;
            eprintln!("shutting down: finishing running turns (Ctrl-C again to quit at once)");
        })
        .await
        .map_err(|err| anyhow::anyhow!(harness_core::error_chain(&err)));
    if let Some((stop, task)) = maintenance {
        stop.cancel();
        let _ = task.await;
    }
    takeover.cancel();
    served
}

/// A workspace that spans replicas (composite filesystem, shared `[state]`): each served
/// agent's background tasks carry the `[state]` lease, and a claim loop takes over those of
/// a replica that died. The returned token stops the loops.
fn schedule_takeover(
    agents: &[harness::HarnessAgent],
    config: &harness::HarnessConfig,
) -> harness_core::CancellationToken {
    let stop = harness_core::CancellationToken::new();
    let lease = config.state.clone().unwrap_or_default().lease_ttl;
    for agent in agents {
        if agent.enable_task_takeover(lease) {
            eprintln!(
                "takeover: background tasks of agent {} carry a {} lease; another replica continues them if this one dies",
                agent.workspace().agent(),
                harness_memory::format_duration(lease)
            );
            let (agent, shutdown) = (agent.clone(), stop.clone());
            tokio::spawn(async move { agent.run_task_takeover(shutdown).await });
        }
    }
    stop
}

/// `[retention]` naming anything: maintenance every `interval` on the replica that holds the
/// leader lease (the session leases' backend), each run summarised on stderr.
fn schedule_maintenance(
    maintenance: harness_ops::Maintenance,
) -> Option<(harness_core::CancellationToken, tokio::task::JoinHandle<()>)> {
    if !maintenance.retention().names_anything() {
        return None;
    }
    let interval = maintenance.retention().interval();
    eprintln!(
        "maintenance: every {} on the replica holding the maintenance lease ({})",
        harness_memory::format_duration(interval),
        maintenance.retention().describe()
    );
    let stop = harness_core::CancellationToken::new();
    let shutdown = stop.clone();
    let task = tokio::spawn(async move {
        maintenance
            .run_scheduled(interval, shutdown, |result| match result {
                Ok(report) => eprintln!(
                    "maintenance: removed {} item(s), kept {} due item(s)",
                    report.removed.len(),
                    report.kept.len()
                ),
                Err(err) => eprintln!(
                    "maintenance: failed: {}",
                    harness_core::redact::redact(&harness_core::error_chain(err))
                ),
            })
            .await;
    });
    Some((stop, task))
}

/// SIGTERM or Ctrl-C.
async fn stop_signal() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
