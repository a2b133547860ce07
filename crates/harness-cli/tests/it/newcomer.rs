//! Issue 15, black-box through the binary: workspaces that do not exist, stdin and files,
//! closed pipes, one exit-code rule, messages that point to the fix, silent providers, and
//! sessions a user expects to keep.

use crate::cli::{harness, script, text};
use std::io::{Read as _, Write as _};
use std::path::Path;
use std::process::Stdio;

fn scripted_text(dir: &Path, reply: &str) -> String {
    script(
        dir,
        &serde_json::json!({"replies": [{"text": reply}], "fallback": "repeat_last"}).to_string(),
    )
}

/// A workspace with memory off, so scripted replies all go to the turns.
fn quiet_workspace(dir: &Path) -> std::path::PathBuf {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("harness.toml"), "[memory]\nenabled = false\n").unwrap();
    ws
}

// ---- item 2: a mistyped --workspace ----

#[test]
fn an_explicit_workspace_that_does_not_exist_is_an_error_and_is_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("wss");
    let model = scripted_text(dir.path(), "x");
    let commands: [&[&str]; 5] = [
        &["sessions", "list"],
        &["sessions", "show", "s1"],
        &["memory", "search", "tea"],
        &["run", "--model", &model, "hi"],
        &["chat", "--model", &model],
    ];
    for args in commands {
        let output = harness()
            .args(args)
            .arg("--workspace")
            .arg(&missing)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let (_, stderr) = text(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("does not exist") && stderr.contains("harness init"),
            "{stderr}"
        );
        assert!(!missing.exists(), "{args:?} created the workspace");
    }
    // The variable counts as explicit too.
    let output = harness()
        .args(["sessions", "list"])
        .env("HARNESS_WORKSPACE", &missing)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn only_run_creates_the_default_workspace_and_says_so_once() {
    let dir = tempfile::tempdir().unwrap();
    let model = scripted_text(dir.path(), "hello");
    let default = dir.path().join(".harness/workspace");
    for args in [&["sessions", "list"][..], &["memory", "search", "tea"][..]] {
        let output = harness().args(args).current_dir(dir.path()).output().unwrap();
        assert!(output.status.success(), "{:?}", text(&output));
        assert!(!dir.path().join(".harness").exists(), "{args:?} created files");
    }
    let first = harness()
        .args(["run", "--model", &model, "hi"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(first.status.success(), "{:?}", text(&first));
    assert!(
        text(&first).1.contains("created the default workspace"),
        "{:?}",
        text(&first)
    );
    assert!(default.is_dir());
    let second = harness()
        .args(["run", "--model", &model, "hi"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(!text(&second).1.contains("created"), "{:?}", text(&second));
}

#[test]
fn an_existing_empty_directory_is_a_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let output = harness()
        .args(["sessions", "list", "--workspace"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(output.status.success());
    assert_eq!(text(&output).0.trim(), "no sessions");
}

// ---- item 5: input ----

#[test]
fn run_reads_a_one_megabyte_message_from_stdin_and_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let ws = quiet_workspace(dir.path());
    let model = scripted_text(dir.path(), "got it");
    let big = format!("start {} end", "x".repeat(1024 * 1024));
    for (session, args) in [("dash", vec!["-"]), ("implicit", vec![])] {
        let mut child = harness()
            .args(["run", "--model", &model, "--session", session, "--workspace"])
            .arg(&ws)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let message = big.clone();
        let writer = std::thread::spawn(move || stdin.write_all(message.as_bytes()));
        let output = child.wait_with_output().unwrap();
        writer.join().unwrap().unwrap();
        assert!(output.status.success(), "{:?}", text(&output));
        assert_eq!(text(&output).0.trim(), "got it");
        let log =
            std::fs::read_to_string(ws.join(format!("default/agents/harness/sessions/{session}.log.jsonl"))).unwrap();
        assert!(log.contains("start x") && log.contains("x end") && log.len() > 1024 * 1024);
    }
    let file = dir.path().join("message.txt");
    std::fs::write(&file, &big).unwrap();
    let output = harness()
        .args(["run", "--model", &model, "--session", "file", "--file"])
        .arg(&file)
        .arg("--workspace")
        .arg(&ws)
        .output()
        .unwrap();
    assert!(output.status.success(), "{:?}", text(&output));
    let log = std::fs::read_to_string(ws.join("default/agents/harness/sessions/file.log.jsonl")).unwrap();
    assert!(log.len() > 1024 * 1024);
    // A file that does not exist is a usage error naming it.
    let output = harness()
        .args(["run", "--model", &model, "--file", "nope.txt", "--workspace"])
        .arg(&ws)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output).1.contains("nope.txt"));
}

#[test]
fn an_invalid_utf8_line_in_chat_is_reported_and_the_chat_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let ws = quiet_workspace(dir.path());
    let model = script(dir.path(), r#"{"replies": [{"text": "still listening"}]}"#);
    let mut child = harness()
        .args(["chat", "--model", &model, "--workspace"])
        .arg(&ws)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"caf\xff\xfe\n").unwrap();
    stdin.write_all(b"hello\n/exit\n").unwrap();
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("not valid UTF-8"), "{stdout}");
    assert!(stdout.contains("still listening"), "{stdout}");
}

// ---- item 6: pipes ----

#[test]
fn a_closed_stdout_ends_a_listing_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let sessions = dir.path().join("default/agents/harness/sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    // Far more than a pipe buffer holds.
    let mut log = String::new();
    for n in 0..400 {
        let msg = harness_core::Msg::user(format!("message {n} {}", "y".repeat(1000)));
        log.push_str(&serde_json::to_string(&msg).unwrap());
        log.push('\n');
    }
    std::fs::write(sessions.join("big.log.jsonl"), log).unwrap();
    let mut child = harness()
        .args(["sessions", "show", "big", "--workspace"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 1];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{:?}", text(&output));
    assert!(!text(&output).1.contains("panicked"));
}

#[test]
fn a_json_turn_whose_reader_went_away_still_completes_and_is_persisted() {
    let dir = tempfile::tempdir().unwrap();
    let ws = quiet_workspace(dir.path());
    let model = scripted_text(dir.path(), "the whole answer");
    let mut child = harness()
        .args(["run", "--json", "--model", &model, "--session", "piped", "--workspace"])
        .arg(&ws)
        .arg("hi")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Nobody reads anything: every write meets a closed pipe.
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{:?}", text(&output));
    let log = std::fs::read_to_string(ws.join("default/agents/harness/sessions/piped.log.jsonl")).unwrap();
    assert!(log.contains("the whole answer"), "{log}");
}

// ---- item 7: exit codes ----

#[test]
fn usage_and_configuration_errors_exit_two_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let model = scripted_text(dir.path(), "x");
    let ws = dir.path().to_str().unwrap().to_owned();
    let afile = dir.path().join("afile");
    std::fs::write(&afile, "x").unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["run", "--model", &model, "--session", "../x", "--workspace", &ws, "hi"],
        vec!["sessions", "show", "../x", "--workspace", &ws],
        vec!["run", "--model", &model, "--user", "../x", "--workspace", &ws, "hi"],
        vec!["sessions", "list", "--user", "../x", "--workspace", &ws],
        vec!["memory", "search", "--user", "../x", "--workspace", &ws, "q"],
        vec!["init", afile.to_str().unwrap()],
        vec!["run", "--model", &model, "--max-iters", "0", "--workspace", &ws, "hi"],
    ];
    for args in cases {
        let output = harness().args(&args).output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}: {:?}", text(&output));
    }
    std::fs::write(dir.path().join("harness.toml"), "[agent]\nmax_iters = 0\n").unwrap();
    let output = harness()
        .args(["run", "--model", &model, "--workspace", &ws, "hi"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output).1.contains("[agent] max_iters must be at least 1"),
        "{:?}",
        text(&output)
    );
}

/// Every bad id is refused at the CLI's door with the rule, before anything runs.
#[test]
fn bad_ids_are_refused_with_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    let model = scripted_text(dir.path(), "x");
    let ws = dir.path().to_str().unwrap().to_owned();
    let long = "x".repeat(harness_core::MAX_ID_LEN + 1);
    for bad in ["..", "a/b", "", long.as_str(), "a\u{1b}b", "..hidden"] {
        for flag in ["--user", "--session"] {
            let output = harness()
                .args(["run", "--model", &model, flag, bad, "--workspace", &ws, "hi"])
                .output()
                .unwrap();
            let (_, stderr) = text(&output);
            assert_eq!(output.status.code(), Some(2), "{flag} {bad:?}: {stderr}");
            assert!(stderr.contains(harness_core::ID_RULE), "{flag} {bad:?}: {stderr}");
        }
    }
    assert!(!dir.path().join("agents").exists(), "nothing ran");
}

// ---- item 8: messages that point to the fix ----

#[test]
fn configuration_messages_name_the_file_key_and_cause() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("harness.toml"), "[agent]\nmodel = \"gpt4\"\n").unwrap();
    let output = harness()
        .args(["run", "--workspace"])
        .arg(dir.path())
        .arg("hi")
        .output()
        .unwrap();
    let stderr = text(&output).1;
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr.contains("harness.toml [agent] model") && stderr.contains("gpt4"),
        "{stderr}"
    );

    let output = harness()
        .args(["run", "--model", "scripted:/nonexistent/script.json", "--workspace"])
        .arg(dir.path())
        .arg("hi")
        .output()
        .unwrap();
    let stderr = text(&output).1;
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr.contains("/nonexistent/script.json") && stderr.contains("No such file"),
        "{stderr}"
    );

    std::fs::write(dir.path().join("harness.toml"), "[agent]\nname = \n").unwrap();
    let output = harness()
        .args(["sessions", "list", "--workspace"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = text(&output).1;
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr.lines().count() > 1 && stderr.lines().any(|l| l.trim_start().starts_with('|')),
        "{stderr}"
    );
    assert!(stderr.contains('^'), "the caret diagram is kept: {stderr}");
}

/// Issue 32 problem 7: an error is one line, said once, with every unset variable named and
/// no log framing.
#[test]
fn errors_are_one_line_said_once_and_name_every_unset_variable() {
    let dir = tempfile::tempdir().unwrap();
    for (spec, cause) in [
        ("bogus", "invalid model spec `bogus`"),
        ("openai:m", "OPENAI_API_KEY is not set"),
    ] {
        let output = harness()
            .env_remove("OPENAI_API_KEY")
            .env_remove("HARNESS_LOG")
            .args(["run", "--model", spec, "--workspace"])
            .arg(dir.path())
            .arg("hi")
            .output()
            .unwrap();
        let stderr = text(&output).1;
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert_eq!(stderr.matches(cause).count(), 1, "said once: {stderr}");
        assert!(stderr.starts_with("error: --model: "), "{stderr}");
    }
    std::fs::write(
        dir.path().join("tools.json"),
        r#"{"mcpServers": {"t": {"command": "${HARNESS_NOPE_A}", "args": ["${HARNESS_NOPE_B}"]}}}"#,
    )
    .unwrap();
    let output = harness()
        .env_remove("HARNESS_LOG")
        .args(["tools", "--workspace"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = text(&output).1;
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("`HARNESS_NOPE_A` (used in mcpServers.t.command)")
            && stderr.contains("`HARNESS_NOPE_B` (used in mcpServers.t.args[0])"),
        "{stderr}"
    );
    // No log framing (timestamps, levels, module paths) and no Rust type names.
    for framing in [" ERROR ", "WARN", "::", "Error {"] {
        assert!(!stderr.contains(framing), "{framing}: {stderr}");
    }
}

#[test]
fn a_connection_error_names_the_base_url_and_its_variable() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("harness.toml"),
        "[model]\nmax_retries = 0\n[memory]\nenabled = false\n",
    )
    .unwrap();
    // A port nothing listens on (not one freed and hoped to stay free).
    let base = format!("{}/v1", harness_test_support::net::REFUSED_URL);
    let output = harness()
        .env("OPENAI_API_KEY", "x")
        .env("OPENAI_BASE_URL", &base)
        .args(["run", "--model", "openai:m", "--workspace"])
        .arg(dir.path())
        .arg("hi")
        .output()
        .unwrap();
    let stderr = text(&output).1;
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&base) && stderr.contains("OPENAI_BASE_URL"), "{stderr}");
}

#[test]
fn memory_commands_speak_in_sentences_and_meaningful_scores() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("alice/memory")).unwrap();
    std::fs::write(
        dir.path().join("alice/memory/2026-11-01.md"),
        "- Alice drinks green tea every morning.\n- Alice likes green tea and green apples.\n- Alice lives in Hangzhou.\n",
    )
    .unwrap();
    let output = harness()
        .args(["memory", "search", "--user", "alice", "--workspace"])
        .arg(dir.path())
        .arg("green tea")
        .output()
        .unwrap();
    let stdout = text(&output).0;
    assert!(output.status.success(), "{:?}", text(&output));
    let scores: Vec<f64> = stdout
        .lines()
        .map(|line| line.split('\t').nth(1).unwrap().parse().unwrap())
        .collect();
    assert!(!scores.is_empty(), "{stdout}");
    assert_eq!(scores[0], 1.0, "{stdout}");
    assert!(scores.iter().all(|s| *s > 0.0), "{stdout}");

    let model = scripted_text(dir.path(), "## Facts\n- Alice drinks green tea every morning.\n");
    let output = harness()
        .args([
            "memory",
            "consolidate",
            "--user",
            "alice",
            "--model",
            &model,
            "--workspace",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = text(&output).0;
    assert!(output.status.success(), "{:?}", text(&output));
    assert!(stdout.starts_with("merged 3 new entries into MEMORY.md"), "{stdout}");
    assert!(!stdout.contains('{'), "no Rust struct: {stdout}");
}

#[test]
fn the_top_level_help_lists_every_command_and_show_has_one_way_to_name_a_session() {
    let output = harness().arg("--help").output().unwrap();
    let stdout = text(&output).0;
    for command in ["init", "run", "chat", "sessions", "memory", "demo"] {
        assert!(stdout.contains(command), "{command}: {stdout}");
    }
    let output = harness().args(["sessions", "show", "--help"]).output().unwrap();
    assert!(!text(&output).0.contains("--session"), "{}", text(&output).0);
}

// ---- item 4: a provider that never answers ----

#[test]
fn a_provider_that_never_answers_ends_with_a_clear_error_and_retries_are_shown() {
    // Accepts and holds every connection, never answering.
    let (url, accepted) = harness_test_support::net::holding_listener();
    let base = format!("{url}/v1");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("harness.toml"),
        "[model]\nidle_timeout = \"300ms\"\nmax_retries = 1\n[memory]\nenabled = false\n",
    )
    .unwrap();
    let output = harness()
        .env("OPENAI_API_KEY", "x")
        .env("OPENAI_BASE_URL", &base)
        .args(["run", "--model", "openai:m", "--workspace"])
        .arg(dir.path())
        .arg("hi")
        .output()
        .unwrap();
    let stderr = text(&output).1;
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("retrying the model (1/1)"), "{stderr}");
    let error = stderr.lines().find(|l| l.starts_with("error: ")).unwrap_or_default();
    assert!(
        error.contains(&base) && error.contains("idle timeout") && error.contains("OPENAI_BASE_URL"),
        "{stderr}"
    );
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "two attempts reached the server"
    );
}

// ---- item 9 (non-memory part) ----

#[test]
fn a_session_killed_during_its_first_turn_is_still_listed() {
    let dir = tempfile::tempdir().unwrap();
    let ws = quiet_workspace(dir.path());
    let model = script(dir.path(), r#"{"replies": [{"text": "never", "delay_ms": 60000}]}"#);
    let mut child = harness()
        .args(["run", "--model", &model, "--session", "doomed", "--workspace"])
        .arg(&ws)
        .arg("plan my trip to Kyoto")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Readiness: the user's message is on disk before the model is called.
    let log = ws.join("default/agents/harness/sessions/doomed.log.jsonl");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !std::fs::read_to_string(&log).is_ok_and(|t| t.contains("Kyoto")) {
        assert!(std::time::Instant::now() < deadline, "the transcript never appeared");
        std::thread::park_timeout(std::time::Duration::from_millis(5)); // poll, not a wait for correctness
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let output = harness()
        .args(["sessions", "list", "--workspace"])
        .arg(&ws)
        .output()
        .unwrap();
    let stdout = text(&output).0;
    assert!(output.status.success());
    assert!(
        stdout.contains("doomed") && stdout.contains("plan my trip to Kyoto"),
        "{stdout}"
    );
}

#[test]
fn sessions_search_finds_messages_across_a_users_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let ws = quiet_workspace(dir.path());
    let model = scripted_text(dir.path(), "noted");
    for (session, message) in [("a", "I drink oolong tea"), ("b", "My bike is red")] {
        let output = harness()
            .args(["run", "--model", &model, "--session", session, "--workspace"])
            .arg(&ws)
            .arg(message)
            .output()
            .unwrap();
        assert!(output.status.success(), "{:?}", text(&output));
    }
    let output = harness()
        .args(["sessions", "search", "--workspace"])
        .arg(&ws)
        .arg("OOLONG")
        .output()
        .unwrap();
    let stdout = text(&output).0;
    assert!(output.status.success());
    assert_eq!(stdout.trim(), "a:1\tuser\tI drink oolong tea");
}

/// Sends SIGINT to `pid`.
fn interrupt(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn ctrl_c_cancels_a_run_and_the_turn_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let ws = quiet_workspace(dir.path());
    let model = script(dir.path(), r#"{"replies": [{"text": "never", "delay_ms": 60000}]}"#);
    let child = harness()
        .args(["run", "--model", &model, "--session", "c", "--workspace"])
        .arg(&ws)
        .arg("a long question")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = ws.join("default/agents/harness/sessions/c.log.jsonl");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !std::fs::read_to_string(&log).is_ok_and(|t| t.contains("a long question")) {
        assert!(std::time::Instant::now() < deadline, "the turn never started");
        std::thread::park_timeout(std::time::Duration::from_millis(5)); // poll, not a wait for correctness
    }
    interrupt(child.id());
    let output = child.wait_with_output().unwrap();
    let stderr = text(&output).1;
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cancel"), "{stderr}");
}

#[test]
fn after_exit_ctrl_c_ends_the_wait_for_background_memory_work() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    // The turn answers at once; memory extraction (after the call) would take a minute.
    let model = script(
        dir.path(),
        r#"{"replies": [{"text": "hi there"}, {"text": "- slow fact", "delay_ms": 60000}]}"#,
    );
    let mut child = harness()
        .args(["chat", "--model", &model, "--workspace"])
        .arg(&ws)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"hello\n/exit\n").unwrap();
    drop(stdin);
    // Readiness: the reply is on screen, so /exit follows and the wait begins.
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    while !String::from_utf8_lossy(&seen).contains("hi there") {
        let n = stdout.read(&mut buf).unwrap();
        assert!(n > 0, "chat ended early: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    let started = std::time::Instant::now();
    // Each Ctrl-C either ends the wait or, arriving before it began, counts as the first.
    while child.try_wait().unwrap().is_none() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "Ctrl-C was ignored"
        );
        interrupt(child.id());
        std::thread::park_timeout(std::time::Duration::from_millis(100));
    }
}

#[test]
fn on_a_terminal_the_cli_says_it_is_waiting_for_the_model() {
    let (url, _accepted) = harness_test_support::net::holding_listener();
    let base = format!("{url}/v1");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("harness.toml"),
        "[model]\nidle_timeout = \"4s\"\nmax_retries = 0\n[memory]\nenabled = false\n",
    )
    .unwrap();
    // `script` gives the command a pseudo-terminal (stdout and stderr both go to it).
    let command = format!(
        "{} run --model openai:m --workspace {} hi",
        env!("CARGO_BIN_EXE_harness"),
        dir.path().display()
    );
    let output = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("OPENAI_API_KEY", "x")
        .env("OPENAI_BASE_URL", &base)
        .env_remove("HARNESS_MODEL")
        .env_remove("HARNESS_WORKSPACE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(shown.contains("waiting for the model openai:m"), "{shown}");
    assert!(shown.contains("idle timeout"), "{shown}");
}
