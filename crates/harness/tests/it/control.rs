//! Session control for code (issue 31): observe (row 4), interrupt and cancel through the
//! session inbox from another agent instance (row 8), clear_context (row 39), the
//! shutdown flag (row 41), plan mode for code (row 228), the session's permission mode
//! (row 240).

use crate::support::{Sleep, builder, ctx, parse, shell_agent, tool};
use harness::HarnessAgent;
use harness::control::{CONTEXT_CLEARED, INTERRUPTED_META, ShutdownCut, ShutdownSignal};
use harness::permissions::{Mode, SessionMode};
use harness::plan_mode::PlanState;
use harness_core::{AgentError, AgentState, CancellationToken, Msg, SessionState};
use harness_models::ScriptedModel;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

const PLAN_ON: &str = "[plan]\nenabled = true\n";

/// An agent on `dir` with the `sleep` tool and `config` as its harness.toml.
fn agent(dir: &Path, config: &str, model: &ScriptedModel) -> HarnessAgent {
    builder()
        .workspace(dir)
        .config(parse(config))
        .tool(tool(Sleep))
        .model(model.clone())
        .build()
        .unwrap()
}

async fn state(agent: &HarnessAgent, session: &str) -> AgentState {
    let key = agent.kernel().key_for(&agent.bind(ctx("alice", session)).unwrap());
    agent.kernel().state_store().load(&key).await.unwrap().unwrap().0
}

/// Every transcript line of the workspace, as JSON.
fn transcript(dir: &Path, session: &str) -> Vec<serde_json::Value> {
    let Some(path) = find(dir, &format!("{session}.log.jsonl")) else {
        return Vec::new();
    };
    let text = std::fs::read_to_string(path).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The first file named `name` under `dir`.
fn find(dir: &Path, name: &str) -> Option<std::path::PathBuf> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == name) {
                return Some(path);
            }
        }
    }
    None
}

/// Every message text of the model's requests, joined.
fn sent(model: &ScriptedModel, request: usize) -> String {
    model.requests()[request]
        .messages
        .iter()
        .map(|m| m.text())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Row 4: observed messages are saved (transcript, index) without a model call, and the
/// next turn's model sees them.
#[tokio::test]
async fn observed_messages_are_saved_without_a_model_call_and_the_next_turn_sees_them() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new().reply_text("4711, as you said");
    let agent = agent(dir.path(), "", &model);
    agent
        .observe(
            vec![Msg::user("the door code is 4711"), Msg::assistant("noted")],
            ctx("alice", "s"),
        )
        .await
        .unwrap();
    assert!(model.requests().is_empty(), "observe calls no model");
    let lines = transcript(dir.path(), "s");
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].to_string().contains("4711"));
    agent.flush_sessions().await.unwrap();
    let index = find(dir.path(), "sessions.json").expect("the session index");
    let index: serde_json::Value = serde_json::from_slice(&std::fs::read(index).unwrap()).unwrap();
    assert_eq!(index["sessions"]["s"]["message_count"], json!(2), "indexed: {index}");

    let reply = agent.call("what is the code?", ctx("alice", "s")).await.unwrap();
    assert_eq!(reply.text(), "4711, as you said");
    let seen = sent(&model, 0);
    assert!(
        seen.contains("the door code is 4711") && seen.contains("noted"),
        "{seen}"
    );
    let empty = agent.observe(Vec::new(), ctx("alice", "s")).await;
    assert!(matches!(empty, Err(AgentError::Refused { .. })), "{empty:?}");
}

/// Row 39: clearing starts the model-visible context afresh and keeps the transcript, plan
/// mode, the session's mode and rules; the transcript records it.
#[tokio::test]
async fn clear_context_starts_the_context_afresh_and_keeps_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new().reply_text("apple noted").reply_text("fresh");
    let agent = agent(dir.path(), PLAN_ON, &model);
    agent.call("remember: apple", ctx("alice", "s")).await.unwrap();
    agent.set_plan_mode(true, ctx("alice", "s")).await.unwrap();
    agent
        .set_permission_mode(Some(Mode::Explore), ctx("alice", "s"))
        .await
        .unwrap();
    agent.clear_context(ctx("alice", "s")).await.unwrap();
    let after = state(&agent, "s").await;
    assert!(after.messages.is_empty(), "{:?}", after.messages);
    assert!(PlanState::from_state(&after).active, "plan mode kept");
    let session = SessionState::from_extensions(&after.extensions);
    assert_eq!(
        session.get::<SessionMode>().unwrap().mode,
        Some(Mode::Explore),
        "mode kept"
    );

    agent.call("what did I say?", ctx("alice", "s")).await.unwrap();
    let seen = sent(&model, 1);
    assert!(!seen.contains("apple"), "the cleared context is not sent: {seen}");
    let lines = transcript(dir.path(), "s");
    assert!(lines[0].to_string().contains("apple"), "the transcript keeps it");
    let marker = lines.iter().find(|l| l["metadata"][CONTEXT_CLEARED].is_number());
    assert_eq!(
        marker.map(|m| m["metadata"][CONTEXT_CLEARED].clone()),
        Some(json!(2)),
        "{lines:?}"
    );
}

/// Row 39: while a call waits for a person, clearing is refused and the call still waits.
#[tokio::test]
async fn clear_context_is_refused_while_a_call_waits_for_approval() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new().reply_tool_call("execute", json!({"command": "echo x >> count"}));
    let agent = shell_agent(dir.path(), "[permissions]\n", &model);
    agent.call("count", ctx("alice", "s")).await.unwrap();
    assert_eq!(agent.pending_approval(ctx("alice", "s")).await.unwrap().calls.len(), 1);
    let refused = agent.clear_context(ctx("alice", "s")).await;
    match refused {
        Err(AgentError::Refused { what }) => assert!(what.contains("approval"), "{what}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(agent.pending_approval(ctx("alice", "s")).await.unwrap().calls.len(), 1);
    let context = crate::support::saved_context(dir.path(), "alice", "s").await;
    assert!(!context.messages.is_empty(), "nothing was cleared");
}

/// Row 8: a message injected from another agent instance on the same store (another
/// process) reaches the running turn at its next step; the model sees it and goes on.
#[tokio::test]
async fn an_interrupt_with_a_message_reaches_the_running_turn_at_its_next_step() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("sleep", json!({"ms": 1500}))
        .reply_text("done, and the weather too");
    let running = agent(dir.path(), "", &model);
    let other = agent(dir.path(), "", &ScriptedModel::new());
    let turn = tokio::spawn(async move { running.call("do the work", ctx("alice", "s")).await });
    while model.requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    other
        .interrupt(Some(Msg::user("also check the weather")), ctx("alice", "s"))
        .await
        .unwrap();
    let reply = turn.await.unwrap().unwrap();
    assert_eq!(reply.text(), "done, and the weather too");
    assert_eq!(model.requests().len(), 2);
    assert!(
        sent(&model, 1).contains("also check the weather"),
        "{}",
        sent(&model, 1)
    );
    assert!(
        transcript(dir.path(), "s")
            .iter()
            .any(|l| l.to_string().contains("also check the weather")),
        "the injected message is in the transcript"
    );
}

/// Row 8: a bare interrupt ends the turn at its next step without another model call.
#[tokio::test]
async fn an_interrupt_without_a_message_ends_the_turn_at_its_next_step() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("sleep", json!({"ms": 1500}))
        .reply_text("never asked");
    let running = agent(dir.path(), "", &model);
    let other = agent(dir.path(), "", &ScriptedModel::new());
    let turn = tokio::spawn(async move { running.call("do the work", ctx("alice", "s")).await });
    while model.requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    other.interrupt(None, ctx("alice", "s")).await.unwrap();
    let reply = turn.await.unwrap().unwrap();
    assert_eq!(reply.metadata.get(INTERRUPTED_META), Some(&json!(true)), "{reply:?}");
    assert_eq!(model.requests().len(), 1, "no model call after the interrupt");
}

/// Row 8: a cancel posted from another agent instance stops the running turn inside its
/// tool call; the turn saved what it finished.
#[tokio::test]
async fn a_cancel_posted_from_another_instance_stops_the_running_turn() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new().reply_tool_call("sleep", json!({"ms": 120_000}));
    let running = agent(dir.path(), "", &model);
    let other = agent(dir.path(), "", &ScriptedModel::new());
    let turn = tokio::spawn(async move { running.call("wait a long time", ctx("alice", "s")).await });
    while model.requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    other.cancel_turn(ctx("alice", "s")).await.unwrap();
    // A liveness bound (the tool would sleep two minutes), not a performance assertion.
    let result = tokio::time::timeout(Duration::from_secs(60), turn)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(result, Err(AgentError::Cancelled)), "{result:?}");
    assert!(transcript(dir.path(), "s")[0].to_string().contains("wait a long time"));
}

/// Row 8: signals posted while no turn runs are dropped when the next turn starts, except a
/// message, which joins that turn.
#[tokio::test]
async fn stale_signals_are_dropped_and_an_injected_message_joins_the_next_turn() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new().reply_text("ran normally");
    let agent = agent(dir.path(), "", &model);
    agent.cancel_turn(ctx("alice", "s")).await.unwrap();
    agent.interrupt(None, ctx("alice", "s")).await.unwrap();
    agent
        .interrupt(Some(Msg::user("PS: use metric units")), ctx("alice", "s"))
        .await
        .unwrap();
    let reply = agent.call("hello", ctx("alice", "s")).await.unwrap();
    assert_eq!(reply.text(), "ran normally");
    assert!(sent(&model, 0).contains("PS: use metric units"), "{}", sent(&model, 0));
}

/// Row 41: a turn the shutdown cancels is flagged in the saved state; the next turn (the
/// resume) clears the flag.
#[tokio::test]
async fn a_turn_cut_by_the_shutdown_is_flagged_until_the_next_turn() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("sleep", json!({"ms": 120_000}))
        .reply_text("resumed");
    let agent = agent(dir.path(), "", &model);
    let stopping = CancellationToken::new();
    let mut call = ctx("alice", "s").with_cancellation(stopping.clone());
    call.insert(ShutdownSignal(stopping.clone()));
    let running = agent.clone();
    let turn = tokio::spawn(async move { running.call("long job", call).await });
    while model.requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stopping.cancel();
    assert!(matches!(turn.await.unwrap(), Err(AgentError::Cancelled)));
    let cut = ShutdownCut::from_state(&state(&agent, "s").await);
    assert!(cut.at.is_some(), "flagged");

    // A turn cancelled for another reason is not flagged.
    agent.call("long job", ctx("alice", "s")).await.unwrap();
    assert_eq!(
        ShutdownCut::from_state(&state(&agent, "s").await),
        ShutdownCut::default()
    );
}

/// Row 228: code turns plan mode on and off with no person involved; while it is on, a
/// write is refused.
#[tokio::test]
async fn plan_mode_is_entered_and_left_by_code() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("write_file", json!({"path": "notes.md", "content": "x"}))
        .reply_text("could not write");
    let off = agent(dir.path(), "", &model)
        .set_plan_mode(true, ctx("alice", "s"))
        .await;
    match off {
        Err(AgentError::Refused { what }) => assert!(what.contains("[plan] enabled"), "{what}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let agent = agent(dir.path(), PLAN_ON, &model);
    agent.set_plan_mode(true, ctx("alice", "s")).await.unwrap();
    assert!(PlanState::from_state(&state(&agent, "s").await).active);
    agent.call("write notes", ctx("alice", "s")).await.unwrap();
    let results = crate::support::last_tool_results(&model);
    assert!(results[0].contains("Plan mode is active"), "{results:?}");
    agent.set_plan_mode(false, ctx("alice", "s")).await.unwrap();
    assert!(!PlanState::from_state(&state(&agent, "s").await).active);
}

/// Row 240: the session's mode narrows what runs, survives another agent instance, and a
/// switch above harness.toml's mode is refused.
#[tokio::test]
async fn a_session_mode_switch_narrows_and_one_above_harness_toml_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[permissions]\nmode = \"default\"\n";
    let model = ScriptedModel::new();
    let agent = agent(dir.path(), config, &model);
    let above = agent.set_permission_mode(Some(Mode::Bypass), ctx("alice", "s")).await;
    match above {
        Err(AgentError::Refused { what }) => assert!(what.contains("more permissive"), "{what}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    agent
        .set_permission_mode(Some(Mode::Explore), ctx("alice", "s"))
        .await
        .unwrap();

    let model = ScriptedModel::new()
        .reply_tool_call("write_file", json!({"path": "notes.md", "content": "x"}))
        .reply_text("denied");
    let restarted = crate::control::agent(dir.path(), config, &model);
    restarted.call("write notes", ctx("alice", "s")).await.unwrap();
    let results = crate::support::last_tool_results(&model);
    assert!(results[0].contains("explore"), "{results:?}");
    assert!(!dir.path().join("alice/notes.md").exists());

    restarted.set_permission_mode(None, ctx("alice", "s")).await.unwrap();
    let session = SessionState::from_extensions(&state(&restarted, "s").await.extensions);
    assert_eq!(session.get::<SessionMode>().unwrap().mode, None);
}
