//! Issue 9 through the binary: problems 2 and 3, and the four isolation scopes as the CLI
//! shows them.

use crate::cli::{harness, script, text};
use std::path::Path;

fn roles(transcript: &Path) -> Vec<String> {
    std::fs::read_to_string(transcript)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            serde_json::from_str::<serde_json::Value>(line).unwrap()["role"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

/// Problem 3: with a `[filesystem]` section the turns of one session are still serialised
/// across processes.
#[test]
fn problem_3_concurrent_runs_with_a_filesystem_section_take_turns() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("harness.toml"), "[filesystem]\nkind = \"local_shell\"\n").unwrap();
    let model = script(dir.path(), r#"{"replies": [{"text": "reply", "delay_ms": 50}]}"#);
    let children: Vec<_> = (0..8)
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
    let roles = roles(&ws.join("default/agents/harness/sessions/shared.log.jsonl"));
    assert_eq!(roles.len(), 16, "{roles:?}");
    assert!(
        roles.chunks(2).all(|turn| turn == ["user", "assistant"]),
        "turns interleaved: {roles:?}"
    );
    // The saved context (its inline messages and its transcript tail) holds every turn.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let context = runtime.block_on(async {
        let reader = harness::SessionReader::open(&ws, None).await.unwrap();
        let user = harness_core::UserId::parse("default").unwrap();
        let session = harness_core::SessionId::parse("shared").unwrap();
        reader.state(&user, &session).await.unwrap().unwrap()
    });
    let snapshot = context.messages.len();
    let logged = 0;
    assert_eq!(snapshot + logged, 16, "every turn is in the state");
}

/// Problem 2: `harness memory search --user alice` finds a fact of the workspace's MEMORY.md.
#[test]
fn problem_2_memory_search_finds_the_shared_memory_md() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("MEMORY.md"), "- The office wifi password is hunter2.\n").unwrap();
    let output = harness()
        .args(["memory", "search", "--user", "alice", "--workspace"])
        .arg(dir.path())
        .arg("wifi")
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.contains("MEMORY.md:1") && stdout.contains("hunter2"), "{stdout}");
}

/// The four scopes through the binary: two users, two sessions; `sessions show` and the files
/// on disk show exactly what is shared.
#[test]
fn four_scopes_through_the_cli() {
    for (scope, s1_dir, shared_between_users) in [
        ("user", None, false),
        ("session", Some("s1/"), true),
        ("agent", Some(""), true),
        ("global", Some(""), true),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("harness.toml"), format!("[agent]\nisolation = \"{scope}\"\n")).unwrap();
        let model = script(dir.path(), r#"{"replies": [{"text": "noted"}]}"#);
        for (user, session) in [("alice", "s1"), ("alice", "s2"), ("bob", "s1"), ("bob", "s2")] {
            let output = harness()
                .args([
                    "run",
                    "--model",
                    &model,
                    "--user",
                    user,
                    "--session",
                    session,
                    "--workspace",
                ])
                .arg(&ws)
                .arg(format!("{user} in {session}"))
                .output()
                .unwrap();
            assert!(output.status.success(), "{scope}: {:?}", text(&output));
        }
        let output = harness()
            .args(["sessions", "show", "s1", "--user", "bob", "--workspace"])
            .arg(&ws)
            .output()
            .unwrap();
        let (stdout, stderr) = text(&output);
        assert!(output.status.success(), "{scope}: {stderr}");
        assert!(stdout.contains("bob in s1"), "{scope}: {stdout}");
        assert!(!stdout.contains("in s2"), "{scope}: sessions never mix: {stdout}");
        assert_eq!(
            stdout.contains("alice in s1"),
            shared_between_users,
            "{scope}: {stdout}"
        );
        // On disk: one transcript and one state per namespace and session.
        let (transcript, state) = match s1_dir {
            Some(namespace) => (
                ws.join(format!("{namespace}agents/harness/sessions/s1.log.jsonl")),
                ws.join(format!("{namespace}agents/harness/context/s1/agent_state.json")),
            ),
            None => (
                ws.join("bob/agents/harness/sessions/s1.log.jsonl"),
                ws.join("bob/agents/harness/context/s1/agent_state.json"),
            ),
        };
        let expected_turns = if shared_between_users { 2 } else { 1 };
        assert_eq!(roles(&transcript).len(), 2 * expected_turns, "{scope}");
        assert!(state.exists(), "{scope}: {state:?}");
        if shared_between_users {
            assert!(!ws.join("alice").exists() && !ws.join("bob").exists(), "{scope}");
        }
    }
}
