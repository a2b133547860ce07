//! Issue 27 through the binary: what a plain `harness run` (and `harness chat`) says on
//! stderr about files it could not use, and `[subagents] default_wait`.

use crate::cli::{harness, script, text};
use std::io::Write as _;
use std::path::Path;

/// A workspace without memory extraction (it would take scripted replies meant for turns).
fn workspace(dir: &Path, toml: &str) -> std::path::PathBuf {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("harness.toml"), format!("[memory]\nenabled = false\n{toml}")).unwrap();
    ws
}

/// An AGENTS.md over 1 MiB is not injected, and a plain `harness run` (no `--json`) says so
/// on stderr: the file, the limit, that it was not injected and what to do. The turn answers.
#[test]
fn a_plain_run_says_on_stderr_that_a_large_agents_md_was_not_injected() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path(), "");
    std::fs::write(ws.join("AGENTS.md"), "x".repeat(1024 * 1024 + 1)).unwrap();
    let model = script(dir.path(), r#"{"replies": [{"text": "answered anyway"}]}"#);
    let output = harness()
        .args(["run", "--model", &model, "--workspace"])
        .arg(&ws)
        .arg("hello")
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("answered anyway"), "{stdout}");
    let line = stderr
        .lines()
        .find(|line| line.starts_with("warning: ") && line.contains("AGENTS.md"))
        .unwrap_or_else(|| panic!("no warning line names AGENTS.md: {stderr}"));
    assert!(line.contains("was not injected"), "{line}");
    assert!(line.contains("1048576-byte limit"), "the limit is named: {line}");
    assert!(line.contains("shorten it"), "it says what to do: {line}");
    // The answer stays on stdout alone.
    assert!(!stdout.contains("warning:"), "{stdout}");
}

/// `harness chat` prints the same warning on stderr (it streams, so it always saw it).
#[test]
fn chat_says_on_stderr_that_a_large_agents_md_was_not_injected() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path(), "");
    std::fs::write(ws.join("AGENTS.md"), "x".repeat(1024 * 1024 + 1)).unwrap();
    let model = script(dir.path(), r#"{"replies": [{"text": "chat answered"}]}"#);
    let mut child = harness()
        .args(["chat", "--model", &model, "--workspace"])
        .arg(&ws)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "hello").unwrap();
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("chat answered"), "{stdout}");
    assert!(
        stderr
            .lines()
            .any(|line| line.starts_with("warning: AGENTS.md was not injected") && line.contains("shorten it")),
        "{stderr}"
    );
}

/// A tools.json server whose command does not exist: stderr names the server, why and
/// where to fix it; the other tools are there and the turn still answers.
#[test]
fn a_plain_run_names_an_mcp_server_that_did_not_start_and_still_answers() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path(), "");
    std::fs::write(
        ws.join("tools.json"),
        r#"{"mcpServers": {"ghost": {"command": "/nonexistent/ghost-mcp-server", "args": ["--stdio"]}}}"#,
    )
    .unwrap();
    let model = script(dir.path(), r#"{"replies": [{"text": "answered without ghost"}]}"#);
    let output = harness()
        .args(["run", "--model", &model, "--workspace"])
        .arg(&ws)
        .arg("hello")
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("answered without ghost"), "{stdout}");
    let line = stderr
        .lines()
        .find(|line| line.starts_with("warning: MCP server `ghost`"))
        .unwrap_or_else(|| panic!("no warning names the server: {stderr}"));
    assert!(line.contains("/nonexistent/ghost-mcp-server"), "{line}");
    assert!(line.contains("tools.json"), "it says where to fix it: {line}");
}

/// The parent's `agent_spawn` result line in `--json` output.
fn spawn_result(stdout: &str) -> String {
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|event| event["type"] == "tool_result" && event["name"] == "agent_spawn" && event.get("source").is_none())
        .map(|event| event.to_string())
        .unwrap_or_else(|| panic!("no agent_spawn result: {stdout}"))
}

/// A run whose child (its own scripted model) answers after `delay_ms`, the parent naming
/// no `timeout_seconds`, under `[subagents] default_wait = wait`.
fn run_with_slow_child(wait: u64, delay_ms: u64) -> (std::process::Output, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path(), &format!("[subagents]\ndefault_wait = {wait}\n"));
    let child = dir.path().join("child.json");
    std::fs::write(
        &child,
        format!(r#"{{"replies": [{{"text": "the slow child's finding", "delay_ms": {delay_ms}}}]}}"#),
    )
    .unwrap();
    std::fs::create_dir_all(ws.join("subagents")).unwrap();
    std::fs::write(
        ws.join("subagents/slow.md"),
        format!(
            "---\ndescription: A slow local model\nmodel: scripted:{}\n---\nYou take your time.\n",
            child.display()
        ),
    )
    .unwrap();
    let parent = script(
        dir.path(),
        r#"{"replies": [
            {"tool_calls": [{"name": "agent_spawn", "arguments": {"agent_id": "slow", "task": "look"}}]},
            {"text": "parent done"}]}"#,
    );
    let output = harness()
        .args(["run", "--json", "--model", &parent, "--workspace"])
        .arg(&ws)
        .arg("delegate")
        .output()
        .unwrap();
    (output, dir)
}

/// How long the slow child takes: well past the short wait below, well within the long one.
const SLOW_CHILD_MS: u64 = 5000;

/// A child slower than a small wait but well within a configured larger `default_wait`
/// finishes in the foreground: the parent gets its answer, nothing goes to the background.
/// (The same child is promoted under a 1 s `default_wait`, below: the setting decides.)
#[test]
fn a_larger_default_wait_keeps_a_slow_child_in_the_foreground() {
    let (output, _dir) = run_with_slow_child(120, SLOW_CHILD_MS);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let result = spawn_result(&stdout);
    assert!(result.contains("the slow child's finding"), "{result}");
    assert!(result.contains("status: completed"), "{result}");
    assert!(!result.contains("promoted"), "{result}");
}

/// The converse: a `default_wait` shorter than the child's answer promotes it to the
/// background, and the parent is told so with the task id.
#[test]
fn a_short_default_wait_promotes_a_slow_child_to_the_background() {
    let (output, _dir) = run_with_slow_child(1, SLOW_CHILD_MS);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let result = spawn_result(&stdout);
    assert!(result.contains("status: timeout_promoted"), "{result}");
    assert!(result.contains("task_id: task-"), "{result}");
    assert!(!result.contains("the slow child's finding"), "{result}");
}
