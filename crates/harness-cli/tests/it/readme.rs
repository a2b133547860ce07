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

/// Runs `script` with bash in `cwd` (also its TMPDIR, so a scratch directory the block
/// makes is inside it), the binaries first on PATH, a clean environment for Harness and
/// OpenAI variables, no stdin; background jobs are ended on exit.
fn run_script(script: &str, cwd: &Path, bin: &Path) -> std::process::Output {
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let full = format!("set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n{script}");
    let mut command = Command::new("bash");
    command
        .arg("-c")
        .arg(full)
        .current_dir(cwd)
        .env("TMPDIR", cwd)
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

/// The block with its `cargo` lines dropped, the directory of the binaries in place of the
/// one the README computes (`BIN=…`, `export PATH=…`), and `port` for the README's ports.
pub(crate) fn prepare(block: &str, port: u16, bin: &Path) -> String {
    block
        .lines()
        .filter(|line| !line.trim_start().starts_with("cargo "))
        .map(|line| {
            if line.starts_with("BIN=") {
                format!("BIN={}", bin.display())
            } else if line.starts_with("export PATH=") {
                format!("export PATH={}:$PATH", bin.display())
            } else {
                line.replace("8787", &port.to_string())
                    .replace("8791", &port.to_string())
            }
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
        stdout.contains("into MEMORY.md")
            || stdout.contains("nothing to consolidate: MEMORY.md already holds every daily-log entry ("),
        "{stdout}"
    );
    // It ran in a scratch directory (under TMPDIR), not where it was started.
    assert!(!dir.path().join("ws").exists());
    let scratch = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.join("ws").is_dir())
        .expect("the block's scratch directory");
    let memory = std::fs::read_to_string(scratch.join("ws/alice/MEMORY.md")).unwrap();
    assert!(memory.contains("green tea"), "{memory}");
}

/// Issue 32 problem 5: the offline-model section's block (a `--script` rule file for
/// `mock-llm` and a `scripted:` file) runs as written, and each answer is the scripted one.
#[test]
fn the_offline_model_block_runs_and_its_scripts_answer() {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
    let blocks = sh_blocks(&readme, "## The offline model");
    assert_eq!(blocks.len(), 1, "one command block in The offline model");
    let bin = binaries();
    let dir = tempfile::tempdir().unwrap();
    let output = run_script(&prepare(&blocks[0], free_port(), &bin), dir.path(), &bin);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "--- stdout\n{stdout}\n--- stderr\n{stderr}");
    // The mock's rule called list_files, and the rule for the tool result answered.
    assert!(stdout.contains("Listed them for you."), "{stdout}\n{stderr}");
    // The scripted model's two replies both went to the turn (memory extraction was off).
    assert!(stdout.contains("AGENTS.md holds the persona."), "{stdout}\n{stderr}");
    // mock-llm --help documents the policy and the rule format it was driven with.
    let help = std::process::Command::new(bin.join("mock-llm"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for needle in [
        "/tool NAME {json}",
        "--script FILE",
        "last_text_contains",
        "tool_calls",
        "system_contains",
    ] {
        assert!(help.contains(needle), "{needle} in mock-llm --help:\n{help}");
    }
}

/// A `--script` file that is not valid stops mock-llm at start with the file and the rule.
#[test]
fn a_bad_mock_script_is_refused_at_start_naming_the_rule() {
    let bin = binaries();
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.json");
    std::fs::write(
        &rules,
        r#"{"rules": [{"reply": {"text": "a"}}, {"when": {"nth": 0}, "reply": {}}]}"#,
    )
    .unwrap();
    let output = std::process::Command::new(bin.join("mock-llm"))
        .args(["--port", "0", "--script"])
        .arg(&rules)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("rules.json: rule 1: reply needs exactly one of"),
        "{stderr}"
    );
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

/// Issue 32 problem 8: the commented harness.toml `harness init` writes has every section the
/// README names (the list is taken from the README, so a section documented later is checked
/// too), and each block, uncommented alone, is a harness.toml the binary accepts.
#[test]
fn init_writes_every_section_the_readme_names() {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
    let mut named = std::collections::BTreeSet::new();
    for (at, _) in readme.match_indices('[') {
        let rest = &readme[at + 1..];
        let Some(end) = rest.find(']') else { continue };
        let name = &rest[..end];
        // `[name]` as a section header or a mention (`[plan] enabled`), not `[[serve.keys]]`,
        // a link or an array.
        let is_section = !name.is_empty()
            && name.chars().all(|c| c.is_ascii_lowercase() || c == '_')
            && !readme[..at].ends_with('[')
            && !rest[end + 1..].starts_with(['(', ']']);
        if is_section {
            named.insert(name.to_owned());
        }
    }
    assert!(named.len() >= 10, "README sections: {named:?}");
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let output = crate::cli::harness().arg("init").arg(&ws).output().unwrap();
    assert!(output.status.success(), "{:?}", text(&output));
    let template = std::fs::read_to_string(ws.join("harness.toml")).unwrap();
    for name in &named {
        let header = format!("[{name}]");
        let block: Vec<&str> = template
            .lines()
            .skip_while(|line| line.trim_start_matches("# ").trim() != header)
            .take_while(|line| !line.trim().is_empty())
            .collect();
        assert!(
            !block.is_empty(),
            "README names {header}; harness init does not write it:\n{template}"
        );
        // The block uncommented alone: its header and its `key = value` lines.
        let toml: String = block
            .iter()
            .map(|line| line.strip_prefix("# ").unwrap_or(line))
            .filter(|line| line.starts_with('[') || line.split_once(" = ").is_some_and(|(key, _)| !key.contains(' ')))
            .map(|line| format!("{line}\n"))
            .collect();
        let alone = dir.path().join(name);
        std::fs::create_dir_all(&alone).unwrap();
        std::fs::write(alone.join("harness.toml"), &toml).unwrap();
        let output = crate::cli::harness()
            .args(["doctor", "--workspace"])
            .arg(&alone)
            .output()
            .unwrap();
        let (stdout, stderr) = text(&output);
        assert!(
            stdout.contains("ok    harness.toml: parsed"),
            "{header} uncommented is refused:\n{toml}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
        );
    }
}
