//! Which workspace a command uses, and whether it may create it.
//!
//! An explicit workspace (`--workspace` or `HARNESS_WORKSPACE`) must exist: a typo is an
//! error suggesting `harness init DIR`, never a new empty workspace. Any existing directory
//! is a workspace. Only the default workspace is created on first use, and only by commands
//! that run the agent (`run`, `chat`), which say so once; read-only commands create nothing.

use crate::usage;
use std::path::PathBuf;

/// A resolved workspace directory.
#[derive(Debug, Clone)]
pub(crate) struct Workspace {
    /// The directory.
    pub(crate) dir: PathBuf,
    /// Whether it exists (a missing default workspace is not an error for read-only commands).
    pub(crate) exists: bool,
}

/// Resolves `explicit` (the flag or variable) or the default.
pub(crate) fn resolve(explicit: Option<PathBuf>) -> anyhow::Result<Workspace> {
    match explicit {
        Some(dir) => {
            if dir.is_dir() {
                return Ok(Workspace { dir, exists: true });
            }
            if dir.exists() {
                return Err(usage(format!("workspace {} is not a directory", dir.display())));
            }
            Err(usage(format!(
                "workspace {} does not exist; create it with `harness init {}`",
                dir.display(),
                dir.display()
            )))
        }
        None => {
            let dir = PathBuf::from(harness::DEFAULT_WORKSPACE);
            let exists = dir.is_dir();
            if dir.exists() && !exists {
                return Err(usage(format!("workspace {} is not a directory", dir.display())));
            }
            Ok(Workspace { dir, exists })
        }
    }
}

/// For commands that run the agent: creates the default workspace on first use, saying so.
pub(crate) fn resolve_for_agent(explicit: Option<PathBuf>) -> anyhow::Result<Workspace> {
    let mut workspace = resolve(explicit)?;
    if !workspace.exists {
        std::fs::create_dir_all(&workspace.dir)
            .map_err(|err| anyhow::anyhow!("cannot create the workspace {}: {err}", workspace.dir.display()))?;
        #[allow(clippy::print_stderr)]
        {
            eprintln!(
                "note: created the default workspace {} (run `harness init {}` for a persona and harness.toml)",
                workspace.dir.display(),
                workspace.dir.display()
            );
        }
        workspace.exists = true;
    }
    Ok(workspace)
}
