//! The README's command blocks, run as written against the project's own fake server
//! (`mock-llm`), so a README that does not work fails CI. The `cargo install`/`cargo build`
//! lines are replaced by the binaries this build made (put on PATH, or in place of
//! `target/release/`), and the port by a free one; everything else runs verbatim.

use crate::cli::text;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .to_owned()
}

/// The ```sh blocks of the README section that starts with `heading`.
pub(crate) fn sh_blocks(readme: &str, heading: &str) -> Vec<String> {
    let start = readme
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading:?} in README.md"));
    let section = &readme[start + heading.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    section
        .split("```sh\n")
        .skip(1)
        .map(|rest| rest[..rest.find("```").unwrap()].to_owned())
        .collect()
}

/// The directory holding `harness` and `mock-llm` (building `mock-llm` when this test runs
/// alone, as with `cargo test -p harness-cli`).
pub(crate) fn binaries() -> PathBuf {
    let harness = PathBuf::from(env!("CARGO_BIN_EXE_harness"));
    let dir = harness.parent().unwrap().to_owned();
    let needed = ["mock-llm", "bench-driver"];
    if needed.iter().any(|bin| !dir.join(bin).exists()) {
        let profile_release = dir.file_name().is_some_and(|name| name == "release");
        let mut build = Command::new(env!("CARGO"));
        build
            .args(["build", "-p", "harness-bench", "--bins"])
            .current_dir(workspace_root());
        if profile_release {
            build.arg("--release");
        }
        let status = build.status().unwrap();
        assert!(status.success(), "building harness-bench failed");
    }
    dir
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `script` with bash in `cwd`, the binaries first on PATH, a clean environment for
/// Harness and OpenAI variables, no stdin; background jobs are ended on exit.
fn run_script(script: &str, cwd: &Path, bin: &Path) -> std::process::Output {
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let full = format!("set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n{script}");
    let mut command = Command::new("bash");
    command
        .arg("-c")
        .arg(full)
        .current_dir(cwd)
        .env("PATH", path)
        .stdin(Stdio::null());
    for key in [
        "HARNESS_MODEL",
        "HARNESS_WORKSPACE",
        "HARNESS_LOG",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
    ] {
        command.env_remove(key);
    }
    command.output().unwrap()
}

pub(crate) fn prepare(block: &str, port: u16, bin: &Path) -> String {
    block
        .lines()
        .filter(|line| !line.trim_start().starts_with("cargo "))
        .map(|line| {
            line.replace("8787", &port.to_string())
                .replace("target/release/", &format!("{}/", bin.display()))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_using_it_block_works_verbatim_against_mock_llm() {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
    let blocks = sh_blocks(&readme, "## Using it");
    assert_eq!(blocks.len(), 1, "one command block in Using it");
    let bin = binaries();
    let dir = tempfile::tempdir().unwrap();
    let output = run_script(&prepare(&blocks[0], free_port(), &bin), dir.path(), &bin);
    let (stdout, stderr) = text(&output);
    assert!(
        output.status.success(),
        "README block failed\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    // The second turn saw the first (the mock repeats the earlier message).
    assert!(stdout.contains(r#"Before this you said: \"hello\""#), "{stdout}");
    assert!(stdout.contains("s1\t"), "sessions list shows s1: {stdout}");
    // alice's fact was extracted, found, and consolidated; `memory extract` found nothing
    // left, since `run` extracted it.
    assert!(stdout.contains("default: nothing pending"), "{stdout}");
    let hit = stdout
        .lines()
        .find(|line| line.contains("memory/") && line.contains("green tea"))
        .unwrap_or_else(|| panic!("memory search found nothing: {stdout}\n{stderr}"));
    assert!(hit.contains("\t1.00\t"), "{hit}");
    // `run` consolidates what its extraction wrote (within its bounded wait), so the
    // explicit consolidation may find nothing left; either way it answers in a sentence.
    assert!(
        stdout.contains("into MEMORY.md") || stdout.contains("nothing to consolidate: no new daily-log entries"),
        "{stdout}"
    );
    let memory = std::fs::read_to_string(dir.path().join("ws/alice/MEMORY.md")).unwrap();
    assert!(memory.contains("green tea"), "{memory}");
}

#[test]
fn the_benchmark_block_runs_against_mock_llm() {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
    let blocks = sh_blocks(&readme, "## Benchmarks");
    assert_eq!(blocks.len(), 1, "one command block in Benchmarks");
    let bin = binaries();
    let dir = tempfile::tempdir().unwrap();
    let output = run_script(&prepare(&blocks[0], free_port(), &bin), dir.path(), &bin);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "--- stdout\n{stdout}\n--- stderr\n{stderr}");
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("w1.json")).unwrap()).unwrap();
    assert_eq!(result["history_ok"], true, "{result}");
}
