//! The task list through the whole agent: `todo_write`, the reminder in the volatile tail of
//! the system prompt, validation, survival across a restart and across compaction.

use crate::support::{builder, ctx};
use harness::compaction::{CompactionConfig, is_summary};
use harness_core::ChatRequest;
use harness_models::{Fallback, Reply, ScriptedModel};
use serde_json::json;
use std::sync::Arc;

fn reminder(request: &ChatRequest) -> Option<String> {
    let parts: Vec<_> = request
        .system
        .parts
        .iter()
        .filter(|part| part.name == "task_list")
        .collect();
    assert!(parts.len() <= 1, "one reminder per step");
    parts.first().map(|part| {
        assert!(!part.stable, "the reminder is in the volatile tail");
        part.text.clone()
    })
}

fn plan() -> serde_json::Value {
    json!({"todos": [
        {"content": "read the code", "status": "completed"},
        {"content": "write the fix", "status": "in_progress"},
        {"content": "run the tests", "status": "pending"},
    ]})
}

/// The list is shown from the step after `todo_write`, in the volatile tail only, never as a
/// message; nothing is shown while the list is empty; a restart keeps it.
#[tokio::test]
async fn todo_write_sets_the_reminder_and_it_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("todo_write", plan())
        .reply_text("on it");
    let agent = builder()
        .workspace(dir.path())
        .task_list(true)
        .model(model.clone())
        .build()
        .unwrap();
    assert!(agent.kernel().tool_specs().iter().any(|spec| spec.name == "todo_write"));
    agent.call("fix the bug", ctx("alice", "s1")).await.unwrap();
    let requests = model.requests();
    assert_eq!(reminder(&requests[0]), None, "nothing while the list is empty");
    let shown = reminder(&requests[1]).unwrap();
    assert!(
        shown.contains("- [x] read the code\n- [in progress] write the fix\n- [ ] run the tests"),
        "{shown}"
    );
    assert!(
        requests[1]
            .messages
            .iter()
            .all(|msg| !msg.text().contains("Your current tasks")),
        "never an extra message"
    );
    drop(agent);

    let model = ScriptedModel::new().reply_text("still on it").reply_text("fine");
    let agent = builder()
        .workspace(dir.path())
        .task_list(true)
        .model(model.clone())
        .build()
        .unwrap();
    agent.call("status?", ctx("alice", "s1")).await.unwrap();
    assert_eq!(reminder(&model.requests()[0]), Some(shown));
    agent.call("other session", ctx("alice", "s2")).await.unwrap();
    assert_eq!(reminder(&model.requests()[1]), None, "the list is per session");
}

/// Two tasks in progress is an error result and the old list stays.
#[tokio::test]
async fn two_tasks_in_progress_is_an_error_and_the_list_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("todo_write", plan())
        .reply_tool_call(
            "todo_write",
            json!({"todos": [
                {"content": "a", "status": "in_progress"},
                {"content": "b", "status": "in_progress"},
            ]}),
        )
        .reply_tool_call("todo_write", json!({"todos": [{"content": "a", "status": "started"}]}))
        .reply_text("ok");
    let agent = builder()
        .workspace(dir.path())
        .task_list(true)
        .model(model.clone())
        .build()
        .unwrap();
    agent.call("go", ctx("alice", "s1")).await.unwrap();
    let requests = model.requests();
    let results: Vec<String> = requests[3]
        .messages
        .iter()
        .flat_map(|msg| msg.content.iter())
        .filter_map(|block| match block {
            block @ harness_core::Block::ToolResult { .. } => Some(format!("{block:?}")),
            _ => None,
        })
        .collect();
    assert!(
        results[1].contains("at most one task may be in_progress") && results[1].contains("is_error: true"),
        "{results:?}"
    );
    assert!(results[2].contains("invalid arguments"), "{results:?}");
    assert!(reminder(&requests[3]).unwrap().contains("[in progress] write the fix"));
}

/// Compaction replaces messages, never the task list.
#[tokio::test]
async fn the_task_list_survives_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("todo_write", plan())
        .fallback(Fallback::Echo);
    let summaries = ScriptedModel::from_fn(|_| Reply::text("## Intent\nsummary"));
    let agent = builder()
        .workspace(dir.path())
        .task_list(true)
        .compaction(CompactionConfig::default().trigger_messages(6).keep_messages(2))
        .compaction_model(Arc::new(summaries.clone()))
        .model(model.clone())
        .build()
        .unwrap();
    for turn in 1..=4 {
        agent.call(format!("m{turn}"), ctx("alice", "s1")).await.unwrap();
    }
    assert!(summaries.request_count() >= 1, "compaction ran");
    let last = model.last_request().unwrap();
    assert!(is_summary(&last.messages[0]), "the context was compacted");
    assert!(reminder(&last).unwrap().contains("[in progress] write the fix"));
}

/// `[plan] task_list = true` turns it on from harness.toml; unknown keys are refused.
#[test]
fn the_plan_section_turns_the_task_list_on() {
    let dir = tempfile::tempdir().unwrap();
    let parse = |text: &str| harness::HarnessConfig::parse(text, std::path::Path::new("harness.toml"));
    let agent = builder()
        .workspace(dir.path())
        .config(parse("[plan]\ntask_list = true\n").unwrap())
        .model(ScriptedModel::new())
        .build()
        .unwrap();
    assert!(agent.kernel().tool_specs().iter().any(|spec| spec.name == "todo_write"));
    let off = builder()
        .workspace(dir.path())
        .model(ScriptedModel::new())
        .build()
        .unwrap();
    assert!(!off.kernel().tool_specs().iter().any(|spec| spec.name == "todo_write"));
    assert!(parse("[plan]\ntask_lists = true\n").is_err());
}
