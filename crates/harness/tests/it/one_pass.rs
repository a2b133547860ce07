//! Issue 23, one pass per turn: a tool call's arguments are checked against the schema once,
//! however many layers (plan mode, permissions, acting) look at it.

use crate::support::{builder, ctx, parse};
use harness_core::Role;
use harness_models::ScriptedModel;
use serde_json::json;

fn agent(dir: &std::path::Path, config: &str, model: &ScriptedModel) -> harness::HarnessAgent {
    builder()
        .workspace(dir)
        .config(parse(config))
        .model(model.clone())
        .build()
        .unwrap()
}

/// The result the model got for its first tool call.
fn first_result(model: &ScriptedModel) -> String {
    model.requests()[1]
        .messages
        .iter()
        .find(|m| m.role == Role::Tool)
        .map(|m| serde_json::to_string(&m.content).unwrap())
        .unwrap_or_default()
}

#[tokio::test]
async fn plan_mode_permissions_and_acting_share_one_argument_check() {
    let dir = tempfile::tempdir().unwrap();
    // The user's namespace (user isolation).
    std::fs::create_dir_all(dir.path().join("u")).unwrap();
    std::fs::write(dir.path().join("u/notes.txt"), "the plan").unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("read_file", json!({"path": "notes.txt"}))
        .reply_text("read it");
    let agent = agent(dir.path(), "[plan]\nenabled = true\n", &model);
    agent.set_plan_mode(true, ctx("u", "s")).await.unwrap();
    let before = agent.kernel().argument_checks();
    agent.call("read my notes", ctx("u", "s")).await.unwrap();
    assert!(first_result(&model).contains("the plan"), "{}", first_result(&model));
    assert_eq!(agent.kernel().argument_checks() - before, 1);
}

#[tokio::test]
async fn bad_arguments_are_checked_once_and_refused_with_the_schema_error() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("read_file", json!({"key": "k"}))
        .reply_text("sorry");
    let agent = agent(dir.path(), "[plan]\nenabled = true\n", &model);
    agent.set_plan_mode(true, ctx("u", "s")).await.unwrap();
    let before = agent.kernel().argument_checks();
    agent.call("read", ctx("u", "s")).await.unwrap();
    assert!(
        first_result(&model).contains("invalid arguments"),
        "{}",
        first_result(&model)
    );
    assert_eq!(agent.kernel().argument_checks() - before, 1);
}
