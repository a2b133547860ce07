//! Issue 23, each message written once: the transcript is the log of the context, the state
//! holds only what the transcript lacks (layout 2), and states written before (layout 1,
//! the fixture written by the code at main) still load.

use crate::support::*;
use harness::history::SessionReader;
use harness::session::{TAIL_FORMAT, TranscriptTail};
use harness_core::{Role, SessionId, SessionState, UserId};
use harness_models::{Fallback, ScriptedModel};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

fn state_dir(dir: &Path, user: &str, session: &str) -> PathBuf {
    dir.join(user).join("agents/harness/context").join(session)
}

fn transcript_file(dir: &Path, user: &str, session: &str) -> PathBuf {
    dir.join(user)
        .join("agents/harness/sessions")
        .join(format!("{session}.log.jsonl"))
}

/// What the state files hold: (length, inode, mtime in ns) of each, missing = zeros.
fn stamp(path: &Path) -> (u64, u64, i64) {
    std::fs::metadata(path).map_or((0, 0, 0), |m| {
        (m.len(), m.ino(), m.mtime_nsec() + m.mtime() * 1_000_000_000)
    })
}

/// Bytes written to a file between two stamps: its growth when it was appended to, its
/// whole length when it was replaced.
fn written(before: (u64, u64, i64), after: (u64, u64, i64)) -> u64 {
    if after == before {
        0
    } else if after.1 == before.1 && after.0 >= before.0 {
        after.0 - before.0
    } else {
        after.0
    }
}

/// Bytes one turn writes to the transcript and to the state files.
struct TurnWrites {
    transcript: u64,
    state: u64,
}

#[tokio::test]
async fn a_turn_writes_each_new_message_once_and_bytes_stay_flat_from_turn_5_to_turn_50() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new().fallback(Fallback::Echo);
    let agent = agent(dir.path(), &model);
    let files = |dir: &Path| {
        let state = state_dir(dir, "u", "s");
        [
            transcript_file(dir, "u", "s"),
            state.join("agent_state.json"),
            state.join("agent_state.log"),
        ]
    };
    let mut writes = Vec::new();
    for n in 1..=50 {
        let before = files(dir.path()).map(|path| stamp(&path));
        // Every message is about 2 KB, so a second copy anywhere shows in the numbers.
        let text = format!("turn {n:02} {}", "lorem ipsum ".repeat(170));
        agent.call(text, ctx("u", "s")).await.unwrap();
        let after = files(dir.path()).map(|path| stamp(&path));
        writes.push(TurnWrites {
            transcript: written(before[0], after[0]),
            state: written(before[1], after[1]) + written(before[2], after[2]),
        });
    }
    let (fifth, fiftieth) = (&writes[4], &writes[49]);
    // The transcript gets the two new messages (about 4 KB), the state a few bytes.
    for turn in [fifth, fiftieth] {
        assert!(turn.transcript > 4_000, "{}", turn.transcript);
        assert!(turn.state < 200, "the state holds no message: {} bytes", turn.state);
    }
    let (at_5, at_50) = (fifth.transcript + fifth.state, fiftieth.transcript + fiftieth.state);
    assert!(
        at_50.abs_diff(at_5) * 20 < at_5,
        "a turn's bytes grew with the history: {at_5} at turn 5, {at_50} at turn 50"
    );
    // No message text reached the state files.
    let state = state_dir(dir.path(), "u", "s");
    for name in ["agent_state.json", "agent_state.log"] {
        let bytes = std::fs::read_to_string(state.join(name)).unwrap_or_default();
        assert!(!bytes.contains("lorem ipsum"), "{name} holds a message");
    }
    // And the context is whole: the fiftieth request carried all 99 earlier messages.
    assert_eq!(model.requests()[49].messages.len(), 99);
}

#[tokio::test]
async fn a_new_process_continues_from_the_transcript_tail() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new().fallback(Fallback::Echo);
    for n in 0..3 {
        // A fresh agent each turn, as with one `harness run` per turn.
        let agent = agent(dir.path(), &model);
        agent.call(format!("m{n}"), ctx("u", "s")).await.unwrap();
    }
    let texts: Vec<String> = model.requests()[2].messages.iter().map(|m| m.text()).collect();
    assert_eq!(texts, ["m0", "echo: m0", "m1", "echo: m1", "m2"]);
    let reader = SessionReader::open(dir.path(), None).await.unwrap();
    let (user, session) = (UserId::parse("u").unwrap(), SessionId::parse("s").unwrap());
    let state = reader.state(&user, &session).await.unwrap().unwrap();
    assert_eq!(state.messages.len(), 6, "the reader attaches the tail");
    let slot: TranscriptTail = SessionState::from_extensions(&state.extensions).get().unwrap();
    assert_eq!((slot.format, slot.from), (TAIL_FORMAT, 0));
}

#[tokio::test]
async fn a_cleared_context_is_kept_inline_and_later_turns_append_to_a_new_tail() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new().fallback(Fallback::Echo);
    let first = agent(dir.path(), &model);
    first.call("apple", ctx("u", "s")).await.unwrap();
    first.clear_context(ctx("u", "s")).await.unwrap();
    first.call("pear", ctx("u", "s")).await.unwrap();
    let again = agent(dir.path(), &model);
    again.call("plum", ctx("u", "s")).await.unwrap();
    let texts: Vec<String> = model
        .requests()
        .last()
        .unwrap()
        .messages
        .iter()
        .map(|m| m.text())
        .collect();
    assert_eq!(texts, ["pear", "echo: pear", "plum"]);
}

/// Copies the fixture tree `from` into `to`.
fn copy_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// `tests/fixtures/state_v1`: five `harness run`/`chat` turns written by the code at main
/// (commit cfe3f30): a snapshot, a log record and the transcript.
#[tokio::test]
async fn a_session_written_in_layout_1_loads_and_continues() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/state_v1"),
        dir.path(),
    );
    let model = ScriptedModel::new().fallback(Fallback::Echo);
    let users = |model: &ScriptedModel, at: usize| -> Vec<String> {
        model.requests()[at]
            .messages
            .iter()
            .filter(|m| m.role == Role::User)
            .map(|m| m.text())
            .collect()
    };
    let old = [
        "hello there",
        "list the files",
        "thanks",
        "fourth message",
        "fifth message",
    ];
    agent(dir.path(), &model)
        .call("sixth", ctx("default", "old"))
        .await
        .unwrap();
    assert_eq!(users(&model, 0), [&old[..], &["sixth"]].concat());
    // A new process reads the mixed state: layout-1 messages inline, the rest from the tail.
    agent(dir.path(), &model)
        .call("seventh", ctx("default", "old"))
        .await
        .unwrap();
    assert_eq!(users(&model, 1), [&old[..], &["sixth", "seventh"]].concat());
    let snapshot = std::fs::read_to_string(state_dir(dir.path(), "default", "old").join("agent_state.json")).unwrap();
    assert!(
        snapshot.contains("fifth message") && !snapshot.contains("sixth"),
        "{snapshot}"
    );
}
