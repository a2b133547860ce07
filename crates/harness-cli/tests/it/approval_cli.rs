//! Human approval through the binary: `run` exits 3 and prints what waits, `approve` (another
//! process, the model spec read from the pending record) runs the rest of the turn.

use crate::cli::{harness, script, text};
use std::path::{Path, PathBuf};

const CONFIG: &str = "# my agent\n[filesystem]\nkind = \"local_shell\"\n\n[memory]\nenabled = false\n\n[permissions]\nmode = \"default\" # asks for the shell\n";

fn workspace(dir: &Path) -> PathBuf {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("harness.toml"), CONFIG).unwrap();
    ws
}

fn find(dir: &Path, name: &str) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.file_name().is_some_and(|n| n == name) {
            return Some(path);
        }
        if path.is_dir()
            && let Some(found) = find(&path, name)
        {
            return Some(found);
        }
    }
    None
}

fn count(ws: &Path) -> usize {
    find(ws, "count").map_or(0, |path| std::fs::read_to_string(path).unwrap().lines().count())
}

fn shell_call(command: &str) -> String {
    format!(r#"{{"tool_calls": [{{"name": "execute", "arguments": {{"command": "{command}"}}}}]}}"#)
}

/// `run` leaves nothing done and exits 3 listing the call; `approve` (no --model: the
/// pending record names it) runs it exactly once and the turn completes; approving again
/// finds nothing.
#[test]
fn run_exits_3_and_approve_runs_the_call_once() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path());
    let model = script(
        dir.path(),
        &format!(r#"{{"replies": [{}]}}"#, shell_call("touch marker")),
    );
    let output = harness()
        .args(["run", "--model", &model, "--session", "s1", "--workspace"])
        .arg(&ws)
        .arg("make a marker")
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(3), "{stdout}\n{stderr}");
    assert!(find(&ws, "marker").is_none(), "nothing ran");
    assert!(stdout.contains("execute {\"command\":\"touch marker\"}"), "{stdout}");
    assert!(
        stdout.contains("rule that would allow it: execute(touch marker*)"),
        "{stdout}"
    );
    assert!(!stderr.contains("error"), "{stderr}");
    // The hint is a command that works when pasted: it names the workspace and the session.
    let hint = stdout
        .lines()
        .find_map(|line| line.strip_prefix("decide with: "))
        .unwrap_or_else(|| panic!("no hint: {stdout}"));
    let command = hint.split(" [CALL_ID").next().unwrap();
    assert!(
        command.starts_with("harness approve --workspace ") && command.ends_with(" --session s1"),
        "{command}"
    );

    // The second process replays the script from its start: what follows the approval. It
    // runs the hint as printed, from another directory.
    script(dir.path(), r#"{"replies": [{"text": "marker made"}]}"#);
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_harness"));
    let elsewhere = tempfile::tempdir().unwrap();
    let mut pasted = std::process::Command::new("bash");
    pasted.arg("-c").arg(command).current_dir(elsewhere.path()).env(
        "PATH",
        format!("{}:{}", bin.parent().unwrap().display(), std::env::var("PATH").unwrap()),
    );
    for (key, _) in harness().get_envs() {
        pasted.env_remove(key);
    }
    let output = pasted.output().unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.trim(), "marker made");
    assert!(find(&ws, "marker").is_some(), "the approved call ran");

    let output = harness()
        .args(["approve", "--session", "s1", "--workspace"])
        .arg(&ws)
        .output()
        .unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("nothing is waiting for approval in session `s1`")
            && stderr.contains(&format!("in the workspace {}", ws.display())),
        "the error names the workspace it searched: {stderr}"
    );
}

/// `--json` prints one event per pending call; unknown ids and bad `--args` are clear
/// errors that decide nothing; `--deny` never runs the call and the model hears a person
/// refused.
#[test]
fn json_events_clear_errors_and_deny() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path());
    let model = script(
        dir.path(),
        r#"{"replies": [{"tool_calls": [
            {"name": "execute", "arguments": {"command": "echo a >> count"}, "id": "c1"},
            {"name": "execute", "arguments": {"command": "echo b >> count"}, "id": "c2"}]}]}"#,
    );
    let output = harness()
        .args(["run", "--json", "--model", &model, "--workspace"])
        .arg(&ws)
        .arg("count")
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(3), "{stdout}\n{stderr}");
    let asked: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter(|event| event["type"] == "approval_required")
        .collect();
    assert_eq!(asked.len(), 2, "one event per call: {stdout}");
    assert_eq!(asked[0]["calls"][0]["id"], "c1");
    assert_eq!(asked[1]["calls"][0]["suggestion"], "execute(echo b*)");

    let approve = |args: &[&str]| {
        harness()
            .arg("approve")
            .args(args)
            .arg("--workspace")
            .arg(&ws)
            .output()
            .unwrap()
    };
    let output = approve(&["nope"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output)
            .1
            .contains("call `nope` is not waiting for approval; pending: c1, c2"),
        "{:?}",
        text(&output)
    );
    let output = approve(&["--args", "c1={not json", "c1"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output).1.contains("--args c1: the arguments are not valid JSON"),
        "{:?}",
        text(&output)
    );
    let output = approve(&["--args", "c1"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output).1.contains("expected CALL_ID=JSON"), "{:?}", text(&output));
    assert_eq!(count(&ws), 0);

    // Deny c2 only: c1 still waits (exit 3 again), nothing ran.
    script(dir.path(), r#"{"replies": [{"text": "unused"}]}"#);
    let output = approve(&["--deny", "--note", "not now", "c2"]);
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(3), "{stdout}\n{stderr}");
    assert!(stdout.contains("call c1"), "{stdout}");
    assert!(!stdout.contains("call c2"), "{stdout}");
    // Approve c1 with edited arguments: the edit is what runs.
    script(dir.path(), r#"{"replies": [{"text": "done"}]}"#);
    let output = approve(&["--json", "--args", r#"c1={"command": "echo edited >> count"}"#]);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_eq!(count(&ws), 1);
    let counted = std::fs::read_to_string(find(&ws, "count").unwrap()).unwrap();
    assert_eq!(counted.trim(), "edited");
    let last: serde_json::Value = serde_json::from_str(stdout.trim().lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "final");
    // The denied call's result, as the model saw it, is in the session history.
    let output = harness()
        .args(["sessions", "show", "default", "--workspace"])
        .arg(&ws)
        .output()
        .unwrap();
    let (history, _) = text(&output);
    assert!(
        history.contains("A person refused this call") && history.contains("not now"),
        "{history}"
    );
}

/// `--always` adds the rule to the session (a second identical call runs without asking);
/// `--save` also writes it to harness.toml, keeping the file's comments.
#[test]
fn always_covers_the_next_call_and_save_writes_harness_toml() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path());
    let model = script(
        dir.path(),
        &format!(r#"{{"replies": [{}]}}"#, shell_call("echo x >> count")),
    );
    let output = harness()
        .args(["run", "--model", &model, "--workspace"])
        .arg(&ws)
        .arg("count twice")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "{:?}", text(&output));
    script(
        dir.path(),
        &format!(
            r#"{{"replies": [{}, {{"text": "counted twice"}}]}}"#,
            shell_call("echo x >> count")
        ),
    );
    let output = harness()
        .args(["approve", "--always", "--save", "--workspace"])
        .arg(&ws)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.trim(), "counted twice");
    assert_eq!(count(&ws), 2, "the second call needed no approval");
    let config = std::fs::read_to_string(ws.join("harness.toml")).unwrap();
    assert!(config.starts_with("# my agent\n"), "{config}");
    assert!(config.contains("mode = \"default\" # asks for the shell"), "{config}");
    assert!(config.contains("allow = [\"execute(echo x*)\"]"), "{config}");
    assert!(stderr.contains("added `execute(echo x*)`"), "{stderr}");

    // A new session of a new process: the saved rule allows it without asking.
    let model = script(
        dir.path(),
        &format!(
            r#"{{"replies": [{}, {{"text": "third"}}]}}"#,
            shell_call("echo x >> count")
        ),
    );
    let output = harness()
        .args(["run", "--model", &model, "--session", "s2", "--workspace"])
        .arg(&ws)
        .arg("again")
        .output()
        .unwrap();
    assert!(output.status.success(), "{:?}", text(&output));
    assert_eq!(count(&ws), 3);
}

/// `harness chat` asks inline, showing the rule "always" would add: `n` refuses (the model
/// hears it), `a` runs the call and the session's next identical call needs no question.
#[test]
fn chat_asks_inline_and_always_adds_the_rule() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path());
    let model = script(
        dir.path(),
        &format!(
            r#"{{"replies": [{}, {{"text": "refused, fine"}}, {}, {}, {{"text": "counted"}}]}}"#,
            shell_call("echo no >> count"),
            shell_call("echo x >> count"),
            shell_call("echo x >> count")
        ),
    );
    let mut child = harness()
        .args(["chat", "--model", &model, "--workspace"])
        .arg(&ws)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "first").unwrap();
    writeln!(stdin, "n").unwrap();
    writeln!(stdin, "second").unwrap();
    writeln!(stdin, "a").unwrap();
    writeln!(stdin, "/exit").unwrap();
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("always adds `execute(echo x*)` for this session"),
        "{stdout}"
    );
    assert!(stdout.contains("A person refused this call"), "{stdout}");
    assert!(
        stdout.contains("refused, fine") && stdout.contains("counted"),
        "{stdout}"
    );
    let counted = std::fs::read_to_string(find(&ws, "count").unwrap()).unwrap();
    assert_eq!(
        counted, "x\nx\n",
        "the refused call never ran; the second x needed no question"
    );
    assert_eq!(
        stdout.matches("  ? execute").count(),
        2,
        "asked twice, not three times: {stdout}"
    );
}

/// A subagent's ask goes through the same path: `run` exits 3 and shows what the child
/// wants to run; `approve` (another process) resumes the child, which runs it once, and the
/// parent's turn completes with the child's answer.
#[test]
fn a_subagents_ask_waits_on_the_parent_and_approve_resumes_the_child() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path());
    // Parent and child share the scripted model: the parent spawns, the child asks.
    let model = script(
        dir.path(),
        &format!(
            r#"{{"replies": [{{"tool_calls": [{{"name": "agent_spawn", "arguments": {{"agent_id": "general-purpose", "task": "make a marker"}}}}]}}, {}]}}"#,
            shell_call("touch marker")
        ),
    );
    let output = harness()
        .args(["run", "--model", &model, "--session", "s1", "--workspace"])
        .arg(&ws)
        .arg("delegate the marker")
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(3), "{stdout}\n{stderr}");
    assert!(find(&ws, "marker").is_none(), "nothing ran");
    assert!(stdout.contains(": agent_spawn "), "{stdout}");
    assert!(
        stdout.contains("subagent general-purpose (session sub.general-purpose.")
            && stdout.contains("wants: execute {\"command\":\"touch marker\"}"),
        "{stdout}"
    );
    assert!(
        stdout.contains("rule that would allow it: execute(touch marker*)"),
        "{stdout}"
    );

    // The second process: the child's answer after its call ran, then the parent's.
    script(
        dir.path(),
        r#"{"replies": [{"text": "child: marker made"}, {"text": "parent: the child made it"}]}"#,
    );
    let output = harness()
        .args(["approve", "--session", "s1", "--workspace"])
        .arg(&ws)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.trim().ends_with("parent: the child made it"), "{stdout}");
    assert!(find(&ws, "marker").is_some(), "the child ran the approved call");
    let output = harness()
        .args(["approve", "--session", "s1", "--workspace"])
        .arg(&ws)
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(2),
        "nothing waits any more: {:?}",
        text(&output)
    );
}
