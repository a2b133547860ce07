//! Session state between calls: persistence, compare-and-set, repair of broken tool pairs.

use crate::support::{assert_paired, echo_tool, fn_tool, lines, render, saved};
use harness_core::{
    AgentError, AgentId, AgentState, Block, InMemoryStateStore, Msg, ReActAgent, Role, RuntimeContext, STATE_FORMAT,
    StateError, StateKey, StateStore, ToolOutput, meta, repair_tool_pairs,
};
use harness_models::ScriptedModel;
use serde_json::json;
use std::sync::Arc;

fn key(session: &str) -> StateKey {
    StateKey {
        agent_id: AgentId::parse("agent").unwrap(),
        user_id: harness_core::UserId::from_static("u1"),
        session_id: harness_core::SessionId::parse(session).unwrap(),
    }
}

fn assistant_calls(ids: &[&str]) -> Msg {
    Msg::new(
        Role::Assistant,
        ids.iter()
            .map(|id| Block::ToolUse {
                id: (*id).to_owned(),
                name: "echo".into(),
                input: json!({"text": id}),
            })
            .collect(),
    )
}

fn result(id: &str) -> Msg {
    Msg::tool_result(id, vec![Block::text(format!("result {id}"))], false)
}

#[tokio::test]
async fn the_second_call_sees_the_first_calls_messages() {
    let model = ScriptedModel::new()
        .reply_tool_call("echo", json!({"text": "a"}))
        .reply_text("one")
        .reply_text("two");
    let agent = ReActAgent::builder()
        .model(model.clone())
        .tool(echo_tool().shared())
        .build()
        .unwrap();
    let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("u1"))
        .with_session(harness_core::SessionId::from_static("s1"));
    assert_eq!(agent.call("first", ctx.clone()).await.unwrap().text(), "one");
    assert_eq!(agent.call("second", ctx.clone()).await.unwrap().text(), "two");
    let last = model.last_request().unwrap();
    assert_eq!(
        render(&last.messages),
        lines(
            r#"
            user: first
            assistant: call echo {"text":"a"}
            tool: ok: a
            assistant: one
            user: second
            "#
        )
    );
    let (state, version) = agent.state_store().load(&agent.key_for(&ctx)).await.unwrap().unwrap();
    assert_eq!(version, 2, "one save per call");
    assert_eq!(render(&state.messages[5..]), "assistant: two");
    // Another session of the same user starts empty.
    let other = RuntimeContext::for_user(harness_core::UserId::from_static("u1"))
        .with_session(harness_core::SessionId::from_static("s2"));
    let model_other = ScriptedModel::new().reply_text("fresh");
    let agent_other = ReActAgent::builder()
        .model(model_other.clone())
        .shared_state_store_of(&agent)
        .build()
        .unwrap();
    agent_other.call("hi", other).await.unwrap();
    assert_eq!(render(&model_other.last_request().unwrap().messages), "user: hi");
}

/// A small extension trait so the test above can share one store between two agents.
trait SharedStore {
    fn shared_state_store_of(self, agent: &ReActAgent) -> Self;
}

impl SharedStore for harness_core::ReActAgentBuilder {
    fn shared_state_store_of(self, agent: &ReActAgent) -> Self {
        self.state_store(Arc::clone(agent.state_store()))
    }
}

#[tokio::test]
async fn a_stale_save_is_a_conflict() {
    let store = InMemoryStateStore::default();
    let key = key("s1");
    let mut state = AgentState::default();
    assert_eq!(store.save(&key, &state, 0, None).await.unwrap(), 1);
    let stale = store.save(&key, &state, 0, None).await;
    assert!(
        matches!(stale, Err(StateError::Conflict { expected: 0, found: 1, ref key }) if key == "agent/u1/s1"),
        "{stale:?}"
    );
    state.messages.push(Arc::new(Msg::user("hi")));
    assert_eq!(store.save(&key, &state, 1, None).await.unwrap(), 2);
    assert!(matches!(
        store.save(&key, &AgentState::default(), 1, None).await,
        Err(StateError::Conflict {
            expected: 1,
            found: 2,
            ..
        })
    ));
    // The conflicting write changed nothing.
    let (loaded, version) = store.load(&key).await.unwrap().unwrap();
    assert_eq!((loaded, version), (state, 2));
    store.delete(&key).await.unwrap();
    assert!(store.load(&key).await.unwrap().is_none());
    store.delete(&key).await.unwrap();
    assert_eq!(store.save(&key, &AgentState::default(), 0, None).await.unwrap(), 1);
}

/// Another writer saves the session while a call runs: the call's save fails with a
/// conflict instead of overwriting the other write.
#[tokio::test]
async fn a_call_never_overwrites_a_concurrent_write() {
    let store: Arc<dyn StateStore> = Arc::new(InMemoryStateStore::default());
    let intruder = {
        let store = Arc::clone(&store);
        fn_tool("intrude", json!({"type": "object"}), move |_input, _ctx| {
            let store = Arc::clone(&store);
            async move {
                let mut theirs = AgentState::default();
                theirs.messages.push(Arc::new(Msg::user("written by someone else")));
                store
                    .save(&key("s1"), &theirs, 0, None)
                    .await
                    .map_err(|err| harness_core::ToolError::failed(err.to_string()))?;
                Ok(ToolOutput::text("saved behind your back"))
            }
        })
    };
    let model = ScriptedModel::new()
        .reply_tool_call("intrude", json!({}))
        .reply_text("done");
    let agent = ReActAgent::builder()
        .model(model)
        .tool(intruder.shared())
        .state_store(Arc::clone(&store))
        .build()
        .unwrap();
    let result = agent
        .call(
            "go",
            RuntimeContext::for_user(harness_core::UserId::from_static("u1"))
                .with_session(harness_core::SessionId::from_static("s1")),
        )
        .await;
    assert!(
        matches!(
            result,
            Err(AgentError::State(StateError::Conflict {
                expected: 0,
                found: 1,
                ..
            }))
        ),
        "{result:?}"
    );
    let (kept, _) = store.load(&key("s1")).await.unwrap().unwrap();
    assert_eq!(render(&kept.messages), "user: written by someone else");
}

#[test]
fn repair_answers_a_dangling_call_and_drops_an_orphan_result() {
    let mut messages: Vec<Arc<Msg>> = [
        Msg::user("go"),
        assistant_calls(&["c1", "c2"]),
        result("c1"),
        result("ghost"),
        Msg::new(
            Role::Tool,
            vec![
                Block::ToolResult {
                    tool_use_id: "ghost2".into(),
                    content: vec![Block::text("orphan")],
                    is_error: false,
                },
                Block::ToolResult {
                    tool_use_id: "c1".into(),
                    content: vec![Block::text("kept")],
                    is_error: false,
                },
            ],
        ),
        Msg::user("next"),
    ]
    .into_iter()
    .map(Arc::new)
    .collect();
    let repairs = repair_tool_pairs(&mut messages);
    assert_eq!(
        repairs, 3,
        "one synthetic result, one dropped message, one trimmed message"
    );
    assert_eq!(
        render(&messages),
        lines(
            r#"
            user: go
            assistant: call echo {"text":"c1"} | call echo {"text":"c2"}
            tool: error: interrupted: the process stopped before this tool call finished; its effects are unknown. Check before retrying.
            tool: ok: result c1
            tool: ok: kept
            user: next
            "#
        )
    );
    assert_eq!(messages[2].tool_result_ids().collect::<Vec<_>>(), ["c2"]);
    assert_eq!(messages[2].metadata.get(meta::SYNTHETIC), Some(&json!(true)));
    // A repaired list needs no further repair.
    assert_eq!(repair_tool_pairs(&mut messages), 0);
}

#[test]
fn repair_leaves_a_well_formed_list_alone() {
    let mut messages: Vec<Arc<Msg>> = [
        Msg::user("go"),
        assistant_calls(&["c1"]),
        result("c1"),
        // Results of one step may come in any order.
        assistant_calls(&["c2", "c3", "c4"]),
        result("c4"),
        result("c2"),
        result("c3"),
        Msg::assistant("ok"),
    ]
    .into_iter()
    .map(Arc::new)
    .collect();
    let before = messages.clone();
    assert_eq!(repair_tool_pairs(&mut messages), 0);
    assert_eq!(messages, before);
}

/// A session left with a dangling call (a crash mid-tool) is repaired on the next load, so the
/// provider never sees the broken pair.
#[tokio::test]
async fn a_crashed_session_is_repaired_before_the_next_model_call() {
    let store: Arc<dyn StateStore> = Arc::new(InMemoryStateStore::default());
    let crashed = AgentState {
        messages: [Msg::user("go"), assistant_calls(&["c1"])]
            .into_iter()
            .map(Arc::new)
            .collect(),
        ..AgentState::default()
    };
    store.save(&key("s1"), &crashed, 0, None).await.unwrap();
    let model = ScriptedModel::new().reply_text("recovered");
    let agent = ReActAgent::builder()
        .model(model.clone())
        .state_store(Arc::clone(&store))
        .build()
        .unwrap();
    let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("u1"))
        .with_session(harness_core::SessionId::from_static("s1"));
    assert_eq!(
        agent.call("are you there?", ctx.clone()).await.unwrap().text(),
        "recovered"
    );
    assert_eq!(model.violations(), Vec::<String>::new());
    let state = saved(&agent, &ctx).await;
    assert_paired(&state.messages);
    assert_eq!(
        render(&state.messages),
        lines(
            r#"
            user: go
            assistant: call echo {"text":"c1"}
            tool: error: interrupted: the process stopped before this tool call finished; its effects are unknown. Check before retrying.
            user: are you there?
            assistant: recovered
            "#
        )
    );
}

#[test]
fn agent_state_round_trips_and_old_records_read_as_the_current_format() {
    let mut state = AgentState::default();
    state.messages.push(Arc::new(Msg::user("hi")));
    state.transcript_offset = 7;
    state.extensions.insert("plan_mode".into(), json!({"on": true}));
    let text = serde_json::to_string(&state).unwrap();
    let back: AgentState = serde_json::from_str(&text).unwrap();
    assert_eq!(back, state);
    let bare: AgentState = serde_json::from_str("{}").unwrap();
    assert_eq!(bare, AgentState::default());
    assert_eq!(bare.format, STATE_FORMAT);
}

/// An unsafe id cannot reach a call: every way to make one checks it (the kernel no longer
/// needs to).
#[test]
fn an_unsafe_session_id_cannot_be_made() {
    for bad in ["../etc", "..", "", "a/b", "..hidden", "a\u{7}b"] {
        let err = harness_core::SessionId::parse(bad).err();
        assert!(
            err.as_ref().is_some_and(|e| e.to_string().contains("session id")),
            "{bad:?}: {err:?}"
        );
        assert!(harness_core::SessionId::try_from(bad.to_owned()).is_err());
        let json = serde_json::to_string(bad).unwrap();
        assert!(serde_json::from_str::<harness_core::SessionId>(&json).is_err());
    }
}
