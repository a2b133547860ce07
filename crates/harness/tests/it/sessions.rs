//! Sessions: continuity, the transcript, crash repair, turn ordering, isolation.

use crate::support::*;
use harness::HarnessAgent;
use harness::session::{parse_transcript, read_index};
use harness_core::{Block, Msg, Role, RuntimeContext};
use harness_fs::{CallWorkspace, WsPath};
use harness_models::{Reply, ScriptedError, ScriptedModel};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn transcript_file(dir: &Path, user: &str, session: &str) -> PathBuf {
    dir.join(user)
        .join("agents/harness/sessions")
        .join(format!("{session}.log.jsonl"))
}

fn transcript(dir: &Path, user: &str, session: &str) -> Vec<Msg> {
    parse_transcript(&std::fs::read(transcript_file(dir, user, session)).unwrap_or_default()).0
}

#[tokio::test]
async fn a_second_turn_sees_the_first_and_files_land_in_the_layout() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_text("hello Tianyu")
        .reply_text("you are Tianyu");
    let agent = agent(dir.path(), &model);
    agent.call("my name is Tianyu", ctx("alice", "s1")).await.unwrap();
    agent.flush_sessions().await.unwrap();
    // A fresh agent (a new process) continues from disk.
    let agent = agent_again(dir.path(), &model);
    agent.call("who am I?", ctx("alice", "s1")).await.unwrap();
    agent.flush_sessions().await.unwrap();
    let second = &model.requests()[1];
    let texts: Vec<String> = second.messages.iter().map(|m| m.text()).collect();
    assert_eq!(texts, ["my name is Tianyu", "hello Tianyu", "who am I?"]);
    assert!(
        dir.path()
            .join("alice/agents/harness/context/s1/agent_state.json")
            .exists()
    );
    assert_eq!(transcript(dir.path(), "alice", "s1").len(), 4);
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("alice/agents/harness/sessions/sessions.json")).unwrap())
            .unwrap();
    assert_eq!(index["sessions"]["s1"]["message_count"], 4);
    assert_eq!(index["sessions"]["s1"]["summary"], "my name is Tianyu");
}

fn agent_again(dir: &Path, model: &ScriptedModel) -> HarnessAgent {
    agent(dir, model)
}

#[tokio::test]
async fn the_transcript_only_ever_grows_by_the_new_messages() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new().fallback(harness_models::Fallback::Echo);
    let agent = agent(dir.path(), &model);
    let mut previous = Vec::new();
    for n in 0..5 {
        agent.call(format!("turn {n}"), ctx("u", "s")).await.unwrap();
        let bytes = std::fs::read(transcript_file(dir.path(), "u", "s")).unwrap();
        assert!(bytes.starts_with(&previous), "turn {n} rewrote earlier bytes");
        assert_eq!(
            parse_transcript(&bytes[previous.len()..]).0.len(),
            2,
            "turn {n} appended more than its messages"
        );
        previous = bytes;
    }
}

#[tokio::test]
async fn a_failed_call_keeps_the_user_message() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new().reply_error(ScriptedError::Auth).reply_text("ok");
    let agent = agent(dir.path(), &model);
    assert!(agent.call("remember me", ctx("u", "s")).await.is_err());
    agent.call("next", ctx("u", "s")).await.unwrap();
    let texts: Vec<String> = model.requests()[1].messages.iter().map(|m| m.text()).collect();
    assert_eq!(texts, ["remember me", "next"]);
}

#[tokio::test]
async fn a_torn_last_line_is_ignored_and_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new().reply_text("one").reply_text("two");
    let agent = agent(dir.path(), &model);
    agent.call("first", ctx("u", "s")).await.unwrap();
    let path = transcript_file(dir.path(), "u", "s");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(b"{\"v\":1,\"id\":\"torn\",\"role\":\"us");
    std::fs::write(&path, &bytes).unwrap();
    agent.call("second", ctx("u", "s")).await.unwrap();
    let (messages, torn) = parse_transcript(&std::fs::read(&path).unwrap());
    assert_eq!(torn, 1);
    let texts: Vec<String> = messages.iter().map(Msg::text).collect();
    assert_eq!(texts, ["first", "one", "second", "two"]);
    let request: Vec<String> = model.requests()[1].messages.iter().map(|m| m.text()).collect();
    assert_eq!(request, ["first", "one", "second"]);
}

#[tokio::test]
async fn a_turn_killed_during_a_tool_call_is_repaired_on_the_next_load() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply(Reply::tool_call("sleep", json!({"ms": 60_000})))
        .reply_text("recovered");
    let build = || {
        crate::support::builder()
            .workspace(dir.path())
            .model(model.clone())
            .tool(tool(Sleep))
            .build()
            .unwrap()
    };
    let agent = build();
    // The "process" dies while the tool runs: the call's future is dropped without saving.
    let running = tokio::spawn(async move { agent.call("do the slow thing", ctx("u", "s")).await });
    for _ in 0..200 {
        if model.request_count() == 1 && transcript(dir.path(), "u", "s").len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    running.abort();
    let _ = running.await;
    assert!(
        !dir.path().join("u/agents/harness/context/s/agent_state.json").exists(),
        "the state was never saved"
    );

    let agent = build();
    let reply = agent.call("are you there?", ctx("u", "s")).await.unwrap();
    assert_eq!(reply.text(), "recovered");
    assert!(model.violations().is_empty(), "{:?}", model.violations());
    let request = &model.requests()[1];
    let roles: Vec<Role> = request.messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool, Role::User]);
    let interrupted = request.messages[2].content.iter().any(|b| matches!(b, Block::ToolResult { is_error: true, content, .. } if content.iter().any(|c| c.as_text().is_some_and(|t| t.contains("interrupted")))));
    assert!(interrupted);
}

#[tokio::test(flavor = "current_thread")]
async fn fifty_concurrent_calls_on_one_session_are_served_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::from_fn(|request| {
        let last = request.messages.last().map(|m| m.text()).unwrap_or_default();
        Reply::text(format!("re: {last}")).delayed(Duration::from_millis(1))
    });
    let agent = agent(dir.path(), &model);
    let mut tasks = Vec::new();
    for n in 0..50 {
        let agent = agent.clone();
        tasks.push(tokio::spawn(
            async move { agent.call(format!("m{n}"), ctx("u", "s")).await },
        ));
        // Let the task reach the session's gate before the next one starts: arrival order.
        for _ in 0..5 {
            tokio::task::yield_now().await;
        }
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let texts: Vec<String> = transcript(dir.path(), "u", "s").iter().map(Msg::text).collect();
    let expected: Vec<String> = (0..50).flat_map(|n| [format!("m{n}"), format!("re: m{n}")]).collect();
    assert_eq!(texts, expected);
    let store = agent.kernel().state_store();
    let key = agent.kernel().key_for(&agent.bind(ctx("u", "s")).unwrap());
    let (_, version) = store.load(&key).await.unwrap().unwrap();
    let context = saved_context(dir.path(), "u", "s").await;
    assert_eq!((context.messages.len(), version), (100, 50));
}

#[tokio::test]
async fn two_agents_on_one_workspace_never_interleave_a_session() {
    // Two agent instances with separate gates and caches behave like two processes: only the
    // lock file and the state's compare-and-set keep them apart.
    let dir = tempfile::tempdir().unwrap();
    let slow = |request: &harness_core::ChatRequest| {
        let last = request.messages.last().map(|m| m.text()).unwrap_or_default();
        Reply::text(format!("re: {last}")).delayed(Duration::from_millis(20))
    };
    let (model_a, model_b) = (ScriptedModel::from_fn(slow), ScriptedModel::from_fn(slow));
    let (a, b) = (agent(dir.path(), &model_a), agent(dir.path(), &model_b));
    let mut tasks = Vec::new();
    for n in 0..10 {
        let agent = if n % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(
            async move { agent.call(format!("m{n}"), ctx("u", "s")).await },
        ));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let messages = transcript(dir.path(), "u", "s");
    assert_eq!(messages.len(), 20);
    for pair in messages.chunks(2) {
        assert_eq!(
            pair[1].text(),
            format!("re: {}", pair[0].text()),
            "interleaved: {pair:?}"
        );
    }
    // Each request carried the full history so far: nothing was lost to a stale state.
    let mut sizes: Vec<usize> = model_a
        .requests()
        .iter()
        .chain(model_b.requests().iter())
        .map(|r| r.messages.len())
        .collect();
    sizes.sort_unstable();
    assert_eq!(sizes, (0..10).map(|n| 2 * n + 1).collect::<Vec<_>>());
}

#[tokio::test]
async fn users_are_isolated_through_every_path_form() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new().fallback(harness_models::Fallback::Echo);
    let agent = agent(dir.path(), &model);
    agent.call("alice's secret", ctx("alice", "s")).await.unwrap();
    let bob = agent.bind(ctx("bob", "s")).unwrap();
    let bob_fs = &bob.get::<CallWorkspace>().unwrap().user;
    let alice_transcript = "agents/harness/sessions/s.log.jsonl";
    let host_path = dir.path().join("alice").join(alice_transcript);
    for attempt in [
        alice_transcript.to_owned(),
        format!("../alice/{alice_transcript}"),
        format!("/alice/{alice_transcript}"),
        format!("/../alice/{alice_transcript}"),
        host_path.display().to_string(),
        format!("./../../alice/{alice_transcript}"),
    ] {
        let result = match WsPath::parse(&attempt) {
            Ok(path) => bob_fs
                .read(&path)
                .await
                .map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
            Err(err) => Err(err),
        };
        assert!(
            result.as_ref().map_or(true, |text| !text.contains("alice's secret")),
            "{attempt} leaked"
        );
    }
    // Bob's sessions and index do not list Alice's.
    assert!(read_index(bob_fs.as_ref(), "harness").await.sessions.is_empty());
    // Reserved names and unsafe ids are refused before any IO.
    for user in ["memory", "agents"] {
        let ctx = RuntimeContext::for_user(harness_core::UserId::parse(user).unwrap());
        assert!(agent.call("x", ctx).await.is_err(), "{user}");
    }
    for user in ["..", "a/b", "..hidden"] {
        assert!(harness_core::UserId::parse(user).is_err(), "{user}");
    }
}

#[tokio::test]
async fn sessions_of_different_users_do_not_mix() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new().fallback(harness_models::Fallback::Echo);
    let agent = agent(dir.path(), &model);
    let mut tasks = Vec::new();
    for user in 0..10 {
        let agent = agent.clone();
        tasks.push(tokio::spawn(async move {
            for turn in 0..3 {
                agent
                    .call(format!("u{user} t{turn}"), ctx(&format!("u{user}"), "default"))
                    .await
                    .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    for user in 0..10 {
        let texts: Vec<String> = transcript(dir.path(), &format!("u{user}"), "default")
            .iter()
            .map(Msg::text)
            .collect();
        assert_eq!(texts.len(), 6);
        assert!(texts.iter().all(|t| t.contains(&format!("u{user} "))), "{texts:?}");
    }
}

#[tokio::test]
async fn compaction_never_touches_the_raw_transcript() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::from_fn(|request| {
        let last = request.messages.last().map(|m| m.text()).unwrap_or_default();
        if request.tools.is_empty() && last.contains("summar")
            || request.system.render().contains("summar") && request.messages.len() == 1
        {
            Reply::text("SUMMARY of the earlier turns")
        } else {
            Reply::text(format!("re: {last}"))
        }
    });
    let config = harness::compaction::CompactionConfig::default()
        .trigger_messages(6)
        .keep_messages(2);
    let agent = crate::support::builder()
        .workspace(dir.path())
        .model(model.clone())
        .compaction(config)
        .build()
        .unwrap();
    let mut previous = Vec::new();
    for n in 0..12 {
        agent.call(format!("turn {n}"), ctx("u", "s")).await.unwrap();
        let bytes = std::fs::read(transcript_file(dir.path(), "u", "s")).unwrap();
        assert!(bytes.starts_with(&previous), "turn {n} rewrote the transcript");
        previous = bytes;
    }
    let raw = transcript(dir.path(), "u", "s");
    let texts: Vec<String> = raw.iter().map(Msg::text).collect();
    let expected: Vec<String> = (0..12)
        .flat_map(|n| [format!("turn {n}"), format!("re: turn {n}")])
        .collect();
    assert_eq!(texts, expected, "the transcript holds every raw message and no summary");
    let key = agent.kernel().key_for(&agent.bind(ctx("u", "s")).unwrap());
    let (state, _) = agent.kernel().state_store().load(&key).await.unwrap().unwrap();
    assert!(
        state.messages.len() < raw.len(),
        "the context was compacted ({} messages)",
        state.messages.len()
    );
    assert!(state.messages.iter().any(|m| harness::compaction::is_summary(m)));
}

#[tokio::test]
async fn retrying_the_message_of_a_failed_turn_continues_that_turn() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_error(ScriptedError::Transient)
        .reply_text("answered")
        .reply_text("again");
    let agent = agent(dir.path(), &model);
    assert!(agent.call("what is 2+2?", ctx("alice", "s1")).await.is_err());
    let reply = agent.call("what is 2+2?", ctx("alice", "s1")).await.unwrap();
    assert_eq!(reply.text(), "answered");
    let texts: Vec<String> = model.requests()[1].messages.iter().map(|m| m.text()).collect();
    assert_eq!(texts, ["what is 2+2?"], "the user's message is sent once");
    let kept: Vec<(Role, String)> = transcript(dir.path(), "alice", "s1")
        .iter()
        .map(|m| (m.role, m.text()))
        .collect();
    assert_eq!(
        kept,
        [
            (Role::User, "what is 2+2?".to_owned()),
            (Role::Assistant, "answered".to_owned())
        ]
    );
    // After a finished turn the same words are a new message.
    agent.call("what is 2+2?", ctx("alice", "s1")).await.unwrap();
    let users = model.requests()[2]
        .messages
        .iter()
        .filter(|m| m.role == Role::User)
        .count();
    assert_eq!(users, 2);
}
