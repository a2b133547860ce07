//! The binary end to end.

use std::path::Path;
use std::process::{Command, Output};

pub fn harness() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_harness"));
    for key in [
        "HARNESS_MODEL",
        "HARNESS_WORKSPACE",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "HARNESS_LOG",
    ] {
        command.env_remove(key);
    }
    command
}

pub fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

pub fn script(dir: &Path, body: &str) -> String {
    let path = dir.join("script.json");
    std::fs::write(&path, body).unwrap();
    format!("scripted:{}", path.display())
}

#[test]
fn demo_runs_offline_and_shows_the_history() {
    let dir = tempfile::tempdir().unwrap();
    let output = harness()
        .args(["demo", "--workspace"])
        .arg(dir.path())
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("persona injected: yes"), "{stdout}");
    assert!(
        stdout.contains("Your name is Tianyu, and today you are giving a talk about ReAct."),
        "{stdout}"
    );
    assert!(
        stdout.contains("tianyu/agents/harness/sessions/demo.log.jsonl"),
        "{stdout}"
    );
}

#[test]
fn run_without_a_model_says_how_to_set_one() {
    let dir = tempfile::tempdir().unwrap();
    let output = harness()
        .args(["run", "--workspace"])
        .arg(dir.path())
        .arg("hi")
        .output()
        .unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr.contains("--model") && stderr.contains("HARNESS_MODEL"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
}

#[test]
fn a_missing_api_key_names_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let output = harness()
        .args(["run", "--model", "openai:gpt-4o-mini", "--workspace"])
        .arg(dir.path())
        .arg("hi")
        .output()
        .unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr.contains("OPENAI_API_KEY"), "{stderr}");
}

#[test]
fn scripted_runs_continue_a_session_and_json_ends_with_the_final_message() {
    let dir = tempfile::tempdir().unwrap();
    let model = script(
        dir.path(),
        r#"{"replies": [{"text": "first reply"}, {"text": "second reply"}]}"#,
    );
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let output = harness()
        .args(["run", "--model", &model, "--session", "s1", "--workspace"])
        .arg(&ws)
        .arg("one")
        .output()
        .unwrap();
    assert!(output.status.success(), "{:?}", text(&output));
    assert_eq!(text(&output).0.trim(), "first reply");
    // A scripted model is re-read per process; the second process plays the script again.
    let model = script(dir.path(), r#"{"replies": [{"text": "second reply"}]}"#);
    let output = harness()
        .args(["run", "--json", "--model", &model, "--session", "s1", "--workspace"])
        .arg(&ws)
        .arg("two")
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    let last: serde_json::Value = serde_json::from_str(stdout.trim().lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "final");
    assert_eq!(last["message"]["content"][0]["text"], "second reply");
    let output = harness()
        .args(["sessions", "show", "s1", "--workspace"])
        .arg(&ws)
        .output()
        .unwrap();
    let (stdout, _) = text(&output);
    assert!(
        stdout.contains("one") && stdout.contains("first reply") && stdout.contains("two"),
        "{stdout}"
    );
    let output = harness()
        .args(["sessions", "list", "--workspace"])
        .arg(&ws)
        .output()
        .unwrap();
    assert!(text(&output).0.contains("s1"), "{:?}", text(&output));
}

#[test]
fn model_errors_exit_one_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let model = script(dir.path(), r#"{"replies": [{"error": {"kind": "auth"}}]}"#);
    let output = harness()
        .args(["run", "--model", &model, "--workspace"])
        .arg(dir.path())
        .arg("hi")
        .output()
        .unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("error: ") && stderr.contains("authentication"),
        "{stderr}"
    );
}

#[test]
fn an_unknown_config_key_is_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("harness.toml"), "[agent]\nmodle = \"x\"\n").unwrap();
    let model = script(dir.path(), r#"[{"text": "x"}]"#);
    let output = harness()
        .args(["run", "--model", &model, "--workspace"])
        .arg(dir.path())
        .arg("hi")
        .output()
        .unwrap();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr.contains("modle"), "{stderr}");
}

#[test]
fn init_writes_a_skeleton() {
    let dir = tempfile::tempdir().unwrap();
    let output = harness().arg("init").arg(dir.path()).output().unwrap();
    assert!(output.status.success());
    for file in ["AGENTS.md", "knowledge/KNOWLEDGE.md", "harness.toml"] {
        assert!(dir.path().join(file).exists(), "{file}");
    }
}

#[test]
fn two_processes_on_one_session_take_turns() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let model = script(dir.path(), r#"{"replies": [{"text": "slow reply", "delay_ms": 300}]}"#);
    let children: Vec<_> = (0..2)
        .map(|n| {
            harness()
                .args(["run", "--model", &model, "--session", "shared", "--workspace"])
                .arg(&ws)
                .arg(format!("message {n}"))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "{:?}", text(&output));
    }
    let log = std::fs::read_to_string(ws.join("default/agents/harness/sessions/shared.log.jsonl")).unwrap();
    let roles: Vec<String> = log
        .lines()
        .map(|line| {
            serde_json::from_str::<serde_json::Value>(line).unwrap()["role"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant"], "{log}");
}

pub mod openai_server {
    //! The shared fake OpenAI-compatible server, answering "hello from fake".

    use harness_test_support::openai::FakeOpenAi;
    pub use harness_test_support::openai::Seen;

    /// The base URL, the record of requests, and the server (stopped when dropped).
    pub fn start() -> (String, Seen, FakeOpenAi) {
        let server = FakeOpenAi::replying("hello from fake");
        (server.base_url().to_owned(), server.seen(), server)
    }
}

#[test]
fn openai_compatible_servers_work_streaming_and_not() {
    let (base, seen, _server) = openai_server::start();
    let dir = tempfile::tempdir().unwrap();
    for json in [false, true] {
        let mut command = harness();
        command.env("OPENAI_API_KEY", "sk-test").env("OPENAI_BASE_URL", &base);
        command
            .args(["run", "--model", "openai:any-model", "--workspace"])
            .arg(dir.path());
        if json {
            command.arg("--json");
        }
        let output = command.arg("hi").output().unwrap();
        let (stdout, stderr) = text(&output);
        assert!(output.status.success(), "{stderr}");
        assert!(stdout.contains("hello from fake"), "{stdout}");
    }
    let seen = seen.lock().unwrap();
    // The agent's own turns offer tools; memory extraction (on by default) runs at exit
    // without tools.
    let turns: Vec<&serde_json::Value> = seen
        .iter()
        .filter(|r| r["tools"].as_array().is_some_and(|tools| !tools.is_empty()))
        .collect();
    assert_eq!(turns.len(), 2);
    assert!(seen.len() > turns.len(), "memory extraction ran after the turns");
    assert_eq!(turns[0]["model"], "any-model");
    assert!(!turns[0]["stream"].as_bool().unwrap_or(false));
    assert_eq!(turns[1]["stream"], true);
    assert_eq!(
        turns[1]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "user")
            .count(),
        2
    );
}

#[test]
fn memory_search_finds_a_users_facts_in_cjk_and_latin() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("alice/memory")).unwrap();
    std::fs::write(
        dir.path().join("alice/memory/2026-11-01.md"),
        "- Alice 喜欢喝绿茶 and green tea.\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("bob/memory")).unwrap();
    std::fs::write(dir.path().join("bob/memory/2026-11-01.md"), "- Bob 也喜欢绿茶.\n").unwrap();
    for query in ["绿茶", "green"] {
        let output = harness()
            .args(["memory", "search", "--user", "alice", "--workspace"])
            .arg(dir.path())
            .arg(query)
            .output()
            .unwrap();
        let (stdout, stderr) = text(&output);
        assert!(output.status.success(), "{stderr}");
        assert!(
            stdout.contains("memory/2026-11-01.md:1") && stdout.contains("Alice"),
            "{query}: {stdout}"
        );
        assert!(!stdout.contains("Bob"), "{stdout}");
    }
}

/// `memory search|review` and `sessions list|show|search` read what the agent wrote without
/// building an agent: a harness.toml whose model cannot be built (no key) does not stop them.
#[test]
fn inspection_commands_work_when_the_workspace_model_cannot_be_built() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("default/memory")).unwrap();
    std::fs::write(ws.join("default/memory/2026-11-01.md"), "- The user likes green tea.\n").unwrap();
    let model = script(
        dir.path(),
        r#"{"replies": [{"text": "noted the tea"}], "fallback": "echo"}"#,
    );
    std::fs::write(
        ws.join("harness.toml"),
        "[agent]\nmodel = \"anthropic:claude-sonnet-4-5\"\n[memory]\nmode = \"off\"\n",
    )
    .unwrap();
    let turn = harness()
        .args(["run", "--session", "s1", "--model", &model, "--workspace"])
        .arg(&ws)
        .arg("remember the oolong")
        .output()
        .unwrap();
    assert!(turn.status.success(), "{:?}", text(&turn));
    // The file's own model cannot be built here: an agent command fails naming the key.
    let refused = harness()
        .args(["run", "--workspace"])
        .arg(&ws)
        .arg("hi")
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(text(&refused).1.contains("ANTHROPIC_API_KEY"), "{:?}", text(&refused));
    let cases: [(&[&str], &str); 5] = [
        (&["memory", "search"], "memory/2026-11-01.md:1"),
        // What it lists depends on what the run's consolidation of the scripted echo left in
        // quarantine; it has to work, and print its listing.
        (&["memory", "review"], "consolidation output"),
        (&["sessions", "list"], "s1"),
        (&["sessions", "show", "s1"], "noted the tea"),
        (&["sessions", "search"], "s1:1"),
    ];
    for (args, expected) in cases {
        let mut command = harness();
        command.args(args).arg("--workspace").arg(&ws);
        match args {
            ["memory", "search"] => command.arg("tea"),
            ["sessions", "search"] => command.arg("oolong"),
            _ => &mut command,
        };
        let output = command.output().unwrap();
        let (stdout, stderr) = text(&output);
        assert!(output.status.success(), "{args:?}: {stderr}");
        assert!(stdout.contains(expected), "{args:?}: {stdout}");
    }
}

#[test]
fn memory_consolidate_needs_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let output = harness()
        .args(["memory", "consolidate", "--workspace"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output).1.contains("--model"));
}

#[test]
fn flags_override_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("harness.toml"),
        "[agent]\nname = \"from-file\"\nmax_iters = 1\n",
    )
    .unwrap();
    let model = script(
        dir.path(),
        r#"{"replies": [{"text": "ok"}, {"text": "ok"}], "fallback": "echo"}"#,
    );
    let output = harness()
        .args(["run", "--model", &model, "--workspace"])
        .arg(dir.path())
        .arg("a")
        .output()
        .unwrap();
    assert!(output.status.success(), "{:?}", text(&output));
    assert!(
        dir.path()
            .join("default/agents/from-file/sessions/default.log.jsonl")
            .exists()
    );
    let output = harness()
        .args(["run", "--agent", "from-flag", "--model", &model, "--workspace"])
        .arg(dir.path())
        .arg("b")
        .output()
        .unwrap();
    assert!(output.status.success(), "{:?}", text(&output));
    assert!(
        dir.path()
            .join("default/agents/from-flag/sessions/default.log.jsonl")
            .exists()
    );
}

#[test]
fn chat_streams_switches_sessions_and_survives_a_cancelled_turn() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let model = script(
        dir.path(),
        r#"{"replies": [{"text": "hello there"}, {"text": "too slow", "delay_ms": 20000}, {"text": "still here"}], "fallback": "echo"}"#,
    );
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    // Memory extraction would take scripted replies meant for the turns.
    std::fs::write(ws.join("harness.toml"), "[memory]\nenabled = false\n").unwrap();
    let mut child = harness()
        .args(["chat", "--model", &model, "--workspace"])
        .arg(&ws)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "/session s9").unwrap();
    writeln!(stdin, "hi").unwrap();
    writeln!(stdin, "take your time").unwrap();
    stdin.flush().unwrap();
    // Interrupt the slow turn once it is running: its user message is on disk before the
    // first model call (a bounded readiness wait, not a guess at timing).
    let transcript = ws.join("default/agents/harness/sessions/s9.log.jsonl");
    let started = std::time::Instant::now();
    while !std::fs::read_to_string(&transcript).is_ok_and(|log| log.contains("take your time")) {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the slow turn never started"
        );
        std::thread::yield_now();
        std::thread::park_timeout(std::time::Duration::from_millis(10));
    }
    let pid = child.id().to_string();
    let status = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    // The REPL reads the next line only after the interrupted turn has ended.
    writeln!(stdin, "again").unwrap();
    writeln!(stdin, "/exit").unwrap();
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("session s9") && stdout.contains("hello there"),
        "{stdout}"
    );
    assert!(stdout.contains("cancelling"), "{stdout}");
    assert!(stdout.contains("still here"), "{stdout}");
    // The cancelled turn kept the user's message; the session went on.
    let log = std::fs::read_to_string(ws.join("default/agents/harness/sessions/s9.log.jsonl")).unwrap();
    for expected in ["hi", "hello there", "take your time", "again", "still here"] {
        assert!(log.contains(expected), "{expected} missing from {log}");
    }
}

/// `sessions show` prints the task list (and that the session is planning) after the
/// transcript; `--json` stays one message per line.
#[test]
fn sessions_show_prints_the_task_list_and_plan_mode() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("harness.toml"), "[plan]\nenabled = true\n").unwrap();
    let model = script(
        dir.path(),
        r#"{"replies": [
            {"tool_calls": [{"id": "c1", "name": "plan_enter", "arguments": {}}]},
            {"tool_calls": [{"id": "c2", "name": "todo_write", "arguments": {"todos": [
                {"content": "read the code", "status": "completed"},
                {"content": "write the plan", "status": "in_progress"},
                {"content": "ask for approval", "status": "pending"}]}}]},
            {"tool_calls": [{"id": "c3", "name": "write_file", "arguments": {"path": "out.txt", "content": "x"}}]},
            {"tool_calls": [{"id": "c4", "name": "plan_exit", "arguments": {"rationale": "ready"}}]},
            {"text": "planning"}]}"#,
    );
    let output = harness()
        .args(["run", "--model", &model, "--session", "s1", "--workspace"])
        .arg(&ws)
        .arg("plan it")
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(3),
        "plan_exit waits for approval: {:?}",
        text(&output)
    );
    assert!(text(&output).0.contains("plan_exit"), "{:?}", text(&output));
    assert!(
        !ws.join("default/out.txt").exists() && !ws.join("out.txt").exists(),
        "refused while planning"
    );
    let output = harness()
        .args(["sessions", "show", "s1", "--workspace"])
        .arg(&ws)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stdout.contains("Plan mode is active, so `write_file` was not run"),
        "{stdout}"
    );
    assert!(stdout.contains("plan mode: active (no plan written yet"), "{stdout}");
    assert!(
        stdout.ends_with("task list:\n  [x] read the code\n  [in progress] write the plan\n  [ ] ask for approval\n"),
        "{stdout}"
    );
    let output = harness()
        .args(["sessions", "show", "s1", "--json", "--workspace"])
        .arg(&ws)
        .output()
        .unwrap();
    for line in text(&output).0.lines() {
        let msg: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(msg.get("role").is_some(), "{line}");
    }

    // A person approves leaving plan mode: the turn ends and the session no longer plans.
    // (The second process replays the script from its start: what follows the approval.)
    script(dir.path(), r#"{"replies": [{"text": "plan approved"}]}"#);
    let output = harness()
        .args(["approve", "--session", "s1", "--workspace"])
        .arg(&ws)
        .output()
        .unwrap();
    assert!(output.status.success(), "{:?}", text(&output));
    let output = harness()
        .args(["sessions", "show", "s1", "--workspace"])
        .arg(&ws)
        .output()
        .unwrap();
    let (stdout, _) = text(&output);
    assert!(!stdout.contains("plan mode: active"), "{stdout}");
    assert!(stdout.contains("task list:"), "the task list stays: {stdout}");
}

#[test]
fn a_subagents_model_key_and_own_layer_work_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let child = dir.path().join("child.json");
    std::fs::write(
        &child,
        r#"{"replies": [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "hello.txt", "content": "hi"}}]},
            {"text": "child wrote it"}]}"#,
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("subagents")).unwrap();
    std::fs::write(
        dir.path().join("subagents/coder.md"),
        format!(
            "---\ndescription: Writes files\nmodel: scripted:{}\n---\nYou write.\n",
            child.display()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("subagents/bad.md"),
        "---\ndescription: Broken\nmodel: nonsense\n---\nx\n",
    )
    .unwrap();
    let parent = script(
        dir.path(),
        r#"{"replies": [
            {"tool_calls": [{"name": "agent_spawn", "arguments": {"agent_id": "coder", "task": "write", "label": "c1"}}]},
            {"text": "parent done"}]}"#,
    );
    let output = harness()
        .args(["run", "--session", "s1", "--model", &parent, "--workspace"])
        .arg(dir.path())
        .arg("delegate")
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("parent done"), "{stdout}");
    assert!(
        stderr.contains("subagents/bad.md") && stderr.contains("`model`"),
        "the bad spec is a warning naming file and key: {stderr}"
    );
    let layer = dir.path().join("default/agents/harness/subagents/coder/s1");
    assert_eq!(std::fs::read_to_string(layer.join("hello.txt")).unwrap(), "hi");
    assert!(!dir.path().join("default/hello.txt").exists());
}

/// Issue 31, row 240: `sessions mode` switches one session's permission mode (saved with
/// it, shown by `sessions show`), never above harness.toml's, and names the modes when one
/// is unknown.
#[test]
fn sessions_mode_switches_a_session_below_harness_toml_only() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("harness.toml"), "[permissions]\nmode = \"default\"\n").unwrap();
    let model = script(dir.path(), r#"{"replies": [{"text": "hi"}]}"#);
    let output = harness()
        .args(["run", "--model", &model, "--session", "s1", "--workspace"])
        .arg(&ws)
        .arg("hello")
        .output()
        .unwrap();
    assert!(output.status.success(), "{:?}", text(&output));
    let mode = |name: &str| {
        harness()
            .args(["sessions", "mode", "s1", name, "--workspace"])
            .arg(&ws)
            .output()
            .unwrap()
    };
    let above = mode("bypass");
    assert_eq!(above.status.code(), Some(2), "{:?}", text(&above));
    assert!(text(&above).1.contains("more permissive"), "{:?}", text(&above));
    let unknown = mode("yolo");
    assert_eq!(unknown.status.code(), Some(2));
    assert!(text(&unknown).1.contains("explore, dont_ask"), "{:?}", text(&unknown));
    let below = mode("explore");
    assert!(below.status.success(), "{:?}", text(&below));
    assert!(text(&below).0.contains("permission mode explore"));
    let show = harness()
        .args(["sessions", "show", "s1", "--workspace"])
        .arg(&ws)
        .output()
        .unwrap();
    assert!(
        text(&show).0.contains("permission mode: explore (this session)"),
        "{:?}",
        text(&show)
    );
}

/// `harness --help`'s first line names every command the list below it has.
#[test]
fn the_help_header_names_every_command() {
    let output = harness().arg("--help").output().unwrap();
    let (stdout, _) = text(&output);
    let header = stdout.lines().next().unwrap();
    let commands: Vec<&str> = stdout
        .split("Commands:\n")
        .nth(1)
        .unwrap()
        .lines()
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .collect();
    assert!(commands.len() >= 10, "{stdout}");
    for command in commands {
        assert!(header.contains(command), "the header omits `{command}`: {header}");
    }
}
