//! `harness maintenance`: applies `[retention]` now (crate `harness-ops`, module
//! `retention`) and prints every removal, or with `--dry-run` what it would remove.
#![allow(clippy::print_stdout)] // the report is the command's output

use crate::{parse_session, parse_user, usage};
use harness::HarnessConfig;
use harness_core::{SessionId, UserId};
use harness_ops::{Maintenance, Target};

/// Options of `maintenance`.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct MaintenanceArgs {
    /// Workspace directory; must exist (default: $HARNESS_WORKSPACE, else ./.harness/workspace).
    #[arg(long, env = "HARNESS_WORKSPACE")]
    workspace: Option<std::path::PathBuf>,
    /// Print what would be removed; delete nothing.
    #[arg(long)]
    dry_run: bool,
    /// Only this user's namespace.
    #[arg(long, value_parser = parse_user, conflicts_with = "session")]
    user: Option<UserId>,
    /// Only this session (in every namespace).
    #[arg(long, value_parser = parse_session)]
    session: Option<SessionId>,
}

pub(crate) async fn maintenance(args: MaintenanceArgs) -> anyhow::Result<()> {
    let ws = crate::workspace::resolve(args.workspace.clone())?;
    if !ws.exists {
        return Err(usage(format!(
            "the workspace {} does not exist (see `harness init`)",
            ws.dir.display()
        )));
    }
    let sections = harness_serve::sections()
        .with(harness_ops::SECTION)
        .with(harness_ops::RETENTION);
    let config = HarnessConfig::load_with(&ws.dir, &sections).map_err(|err| usage(err.to_string()))?;
    let maintenance = Maintenance::open(&ws.dir, &config)
        .await
        .map_err(|err| usage(harness_core::error_chain(&err)))?;
    if !maintenance.retention().names_anything() {
        println!(
            "[retention] names nothing, so nothing is deleted (set e.g. sessions = \"90d\" in {}'s harness.toml)",
            ws.dir.display()
        );
        return Ok(());
    }
    let target = Target {
        user: args.user,
        session: args.session,
    };
    let report = maintenance
        .run(&target, args.dry_run, jiff::Timestamp::now())
        .await
        .map_err(|err| anyhow::anyhow!(harness_core::error_chain(&err)))?;
    print!("{}", report.render());
    Ok(())
}
