//! Typed session state: tools change it during a call, the next call and a new process see
//! it, and a corrupt slot is a clear error.

use crate::support::fn_tool;
use harness_core::{AgentState, ReActAgent, RuntimeContext, SessionSlot, StateStore, ToolError, ToolOutput};
use harness_models::{Reply, ScriptedModel, ScriptedToolCall};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::Arc;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Todos {
    items: Vec<String>,
}

impl SessionSlot for Todos {
    const KEY: &'static str = "todos";
}

/// `todo {add}`: appends to the session's todo list and answers the whole list.
fn todo_tool() -> Arc<dyn harness_core::Tool> {
    fn_tool("todo", json!({"type": "object"}), |input, ctx| async move {
        let item = input["add"].as_str().unwrap_or_default().to_owned();
        let items = ctx
            .session
            .update::<Todos, _>(|todos| {
                todos.items.push(item);
                todos.items.clone()
            })
            .map_err(|err| ToolError::failed(err.to_string()))?;
        Ok(ToolOutput::text(items.join(",")))
    })
    .shared()
}

/// Two calls to `todo` in one step, then one more on the next step.
fn model() -> ScriptedModel {
    let call = |add: &str| ScriptedToolCall {
        name: "todo".into(),
        arguments: json!({"add": add}),
        id: None,
    };
    ScriptedModel::new()
        .reply(Reply {
            tool_calls: vec![call("a")],
            ..Reply::default()
        })
        .reply(Reply {
            tool_calls: vec![call("b")],
            ..Reply::default()
        })
        .reply_text("noted")
}

fn agent(model: ScriptedModel, store: Arc<dyn StateStore>) -> ReActAgent {
    ReActAgent::builder()
        .model(model)
        .tool(todo_tool())
        .state_store(store)
        .build()
        .unwrap()
}

fn tool_texts(state: &AgentState) -> Vec<String> {
    state
        .messages
        .iter()
        .filter(|m| m.role == harness_core::Role::Tool)
        .flat_map(|m| m.content.iter())
        .filter_map(|block| match block {
            harness_core::Block::ToolResult { content, .. } => {
                content.iter().find_map(|b| b.as_text()).map(str::to_owned)
            }
            _ => None,
        })
        .collect()
}

/// A change made in one call is seen by the next call, and is saved with the session.
#[tokio::test]
async fn a_tool_changes_session_state_and_the_next_call_sees_it() {
    let store: Arc<dyn StateStore> = Arc::new(harness_core::InMemoryStateStore::default());
    let agent = agent(model(), Arc::clone(&store));
    let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("u"))
        .with_session(harness_core::SessionId::from_static("s"));
    agent.call("plan", ctx.clone()).await.unwrap();
    let key = agent.key_for(&ctx);
    let (state, _) = store.load(&key).await.unwrap().unwrap();
    assert_eq!(
        tool_texts(&state),
        ["a", "a,b"],
        "the second call saw the first one's change"
    );
    assert_eq!(state.extensions["todos"], json!({"items": ["a", "b"]}));
}

/// With the file store, a new agent (a new process) over the same directory continues the list.
#[tokio::test]
async fn a_new_process_sees_the_saved_session_state() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("u"))
        .with_session(harness_core::SessionId::from_static("s"));
    let first = agent(model(), Arc::new(harness_store::FileStateStore::new(dir.path())));
    first.call("plan", ctx.clone()).await.unwrap();
    drop(first);
    let store: Arc<dyn StateStore> = Arc::new(harness_store::FileStateStore::new(dir.path()));
    let second = agent(
        ScriptedModel::new()
            .reply_tool_call("todo", json!({"add": "c"}))
            .reply_text("more"),
        Arc::clone(&store),
    );
    second.call("more", ctx.clone()).await.unwrap();
    let (state, _) = store.load(&second.key_for(&ctx)).await.unwrap().unwrap();
    assert_eq!(tool_texts(&state), ["a", "a,b", "a,b,c"]);
}

/// A slot whose stored JSON does not decode: the tool gets a clear error (which the model
/// reads), nothing panics, and the stored value is left as it was.
#[tokio::test]
async fn a_corrupt_slot_is_a_clear_error() {
    let store: Arc<dyn StateStore> = Arc::new(harness_core::InMemoryStateStore::default());
    let agent = agent(
        ScriptedModel::new()
            .reply_tool_call("todo", json!({"add": "x"}))
            .reply_text("sorry"),
        Arc::clone(&store),
    );
    let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("u"))
        .with_session(harness_core::SessionId::from_static("s"));
    let key = agent.key_for(&ctx);
    let mut state = AgentState::default();
    state.extensions.insert("todos".into(), json!({"items": 42}));
    store.save(&key, &state, 0, None).await.unwrap();
    agent.call("add", ctx).await.unwrap();
    let (state, _) = store.load(&key).await.unwrap().unwrap();
    let texts = tool_texts(&state);
    assert_eq!(texts.len(), 1);
    assert!(texts[0].starts_with("session state `todos` is corrupt:"), "{texts:?}");
    assert_eq!(state.extensions["todos"], json!({"items": 42}));
}
