//! The external programs tests drive: the real MCP servers `scripts/mcp-servers.sh` installs
//! and `git` with a fixed identity.

use std::path::{Path, PathBuf};

/// Where `scripts/mcp-servers.sh` installed the servers (`HARNESS_TEST_MCP_DIR`). A missing
/// installation fails the test: skipping would hide that the MCP client went untested.
///
/// # Panics
/// When the variable is unset or a server is missing, with what to run.
pub fn mcp_dir() -> PathBuf {
    const HOW: &str = "run `bash scripts/mcp-servers.sh` and export HARNESS_TEST_MCP_DIR=<the directory it prints> \
                       (scripts/test.sh does both)";
    let dir =
        std::env::var("HARNESS_TEST_MCP_DIR").unwrap_or_else(|_| panic!("HARNESS_TEST_MCP_DIR is not set: {HOW}"));
    let dir = PathBuf::from(dir);
    for program in [everything_js_in(&dir), time_bin_in(&dir)] {
        assert!(program.is_file(), "{} is missing: {HOW}", program.display());
    }
    dir
}

fn everything_js_in(dir: &Path) -> PathBuf {
    dir.join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

fn time_bin_in(dir: &Path) -> PathBuf {
    dir.join("venv/bin/mcp-server-time")
}

/// `@modelcontextprotocol/server-everything`'s entry point (run with `node`).
pub fn everything_js() -> String {
    everything_js_in(&mcp_dir()).display().to_string()
}

/// The `mcp-server-time` executable.
pub fn time_bin() -> String {
    time_bin_in(&mcp_dir()).display().to_string()
}

/// Runs `git args` in `dir` with a fixed identity and `main` as the default branch.
///
/// # Panics
/// When git cannot run or fails, with its stderr.
pub fn git(dir: &Path, args: &[&str]) {
    let output = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|err| panic!("git: {err}"));
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
