//! `harness chat` and the README's block on a real pseudo-terminal, driven by
//! `tests/support/pty_drive.py` the way a person types or pastes: exact chat commands, the
//! `//` escape, a pasted block as one message, and a block pasted into the shell that the
//! chat does not eat.

use crate::readme::{binaries, free_port, prepare, sh_blocks, workspace_root};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

/// The Python that runs the driver (the test venv when set, else the system's).
fn python() -> String {
    std::env::var("HARNESS_TEST_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// Runs `argv` on a pty through the driver with `steps`; returns its output with terminal
/// escapes removed, and whether every step matched and the program exited 0.
fn drive(steps: &Value, argv: &[&str], cwd: &Path, envs: &[(&str, String)]) -> (String, bool) {
    let driver = workspace_root().join("crates/harness-cli/tests/support/pty_drive.py");
    let mut command = Command::new(python());
    command
        .arg(driver)
        .arg(steps.to_string())
        .arg("--")
        .args(argv)
        .current_dir(cwd);
    for key in [
        "HARNESS_MODEL",
        "HARNESS_WORKSPACE",
        "HARNESS_LOG",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
    ] {
        command.env_remove(key);
    }
    for (key, value) in envs {
        command.env(key, value);
    }
    let output = command.output().unwrap();
    let raw = String::from_utf8_lossy(&output.stdout).into_owned();
    (strip_escapes(&raw), output.status.success())
}

/// `text` without ANSI control sequences (`ESC [ … letter`) and carriage returns.
fn strip_escapes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else if c != '\r' {
            out.push(c);
        }
    }
    out
}

/// A `mock-llm` on a free port and a workspace `ws` initialised for it in `dir`.
fn mock_and_workspace(dir: &Path) -> (std::process::Child, Vec<(&'static str, String)>) {
    let bin = binaries();
    let port = free_port();
    let mock = Command::new(bin.join("mock-llm"))
        .args(["--port", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let envs = vec![
        ("OPENAI_BASE_URL", format!("http://127.0.0.1:{port}/v1")),
        ("OPENAI_API_KEY", "x".to_owned()),
        (
            "PATH",
            format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()),
        ),
    ];
    let init = Command::new(bin.join("harness"))
        .args(["init", "ws", "--model", "openai:gpt-4o-mini"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(init.status.success(), "{init:?}");
    (mock, envs)
}

#[test]
fn chat_commands_are_exact_a_double_slash_sends_a_slash_and_a_paste_is_one_message() {
    let dir = tempfile::tempdir().unwrap();
    let (mut mock, envs) = mock_and_workspace(dir.path());
    let harness = binaries().join("harness").display().to_string();
    let steps = json!([
        {"expect": "s2> "},
        {"send": "/help\r"},
        {"expect": "/sessions lists.*s2> "},
        {"send": "//etc/hosts\r"},
        {"expect": "done \\d+\\..*s2> "},
        {"send": "next\r"},
        // The mock repeats the earlier message: the escaped line was sent with its slash.
        {"expect": "you said: \"/etc/hosts\".*s2> "},
        {"send": "/sessions\r"},
        {"expect": "s2  .* 4 messages.*s2> "},
        {"send": "/sessionx\r"},
        {"expect": "unknown command /sessionx.*s2> "},
        // A bracketed paste of two lines is one message.
        {"send": "\u{1b}[200~first line\nsecond line\u{1b}[201~\r"},
        {"expect": "done \\d+\\..*done \\d+\\..*done \\d+\\..*s2> "},
        {"send": "after\r"},
        {"expect": "you said: \"first line\\s+second line\".*s2> "},
        {"send": "/exit\r"},
    ]);
    let (out, ok) = drive(
        &steps,
        &[&harness, "chat", "--workspace", "ws", "--session", "s2"],
        dir.path(),
        &envs,
    );
    mock.kill().unwrap();
    assert!(ok, "{out}");
    // `/sessionx` switched nothing: every prompt is still s2's.
    assert!(!out.contains("session s "), "{out}");
}

#[test]
fn the_using_it_block_pasted_into_a_terminal_runs_every_line() {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
    let block = &sh_blocks(&readme, "## Using it")[0];
    let bin = binaries();
    let dir = tempfile::tempdir().unwrap();
    // The marker is computed, so the echo of the typed line cannot match it.
    let script = format!("{}\necho __pasted_$((6*7))_done__\n", prepare(block, free_port(), &bin));
    let envs = vec![
        (
            "PATH",
            format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()),
        ),
        // The block's scratch directory is made inside the test's.
        ("TMPDIR", dir.path().display().to_string()),
    ];
    // The whole block arrives at once, as a paste into a terminal without bracketed paste:
    // while one line runs, the next ones wait in the terminal's input queue.
    let steps = json!([
        {"expect": "[#$] "},
        {"send": script},
        {"expect": "__pasted_42_done__\r?\n.*[#$] ", "timeout": 240},
        {"send": "kill %1 2>/dev/null; exit 0\n"},
    ]);
    let (out, ok) = drive(&steps, &["bash", "--norc", "--noprofile", "-i"], dir.path(), &envs);
    assert!(ok, "{out}");
    // The chat saw input waiting and left it to the shell, which ran every later line.
    assert!(
        out.contains("the chat did not start, so your shell runs those lines"),
        "{out}"
    );
    let after_chat = &out[out.find("harness chat --workspace").unwrap()..];
    assert!(
        after_chat.contains("s1\t"),
        "sessions list ran after the chat line: {out}"
    );
    assert!(
        after_chat.contains("green tea"),
        "memory search ran after the chat line: {out}"
    );
}
