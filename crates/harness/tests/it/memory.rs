//! Memory wired into HarnessAgent: extraction after calls, the tools, memory off.

use crate::support::*;
use harness::HarnessAgent;
use harness_models::{Fallback, Reply, ScriptedModel};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

fn memory_model(reply: &str) -> ScriptedModel {
    ScriptedModel::new().reply_text(reply).fallback(Fallback::RepeatLast)
}

fn daily_logs(dir: &std::path::Path, user: &str) -> String {
    let mut text = String::new();
    if let Ok(entries) = std::fs::read_dir(dir.join(user).join("memory")) {
        for entry in entries.flatten() {
            if entry.path().extension().is_some_and(|e| e == "md") {
                text.push_str(&std::fs::read_to_string(entry.path()).unwrap());
            }
        }
    }
    text
}

#[tokio::test]
async fn facts_are_extracted_after_a_call_into_the_users_daily_log() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new().reply_text("Nice to meet you.");
    let extractor = memory_model("- The user's name is Tianyu.\n- The user gives a talk about ReAct today.");
    let agent = HarnessAgent::builder()
        .workspace(dir.path())
        .model(model.clone())
        .memory_model(Arc::new(extractor.clone()))
        .build()
        .unwrap();
    agent
        .call(
            "My name is Tianyu; today I give a talk about ReAct.",
            ctx("tianyu", "s1"),
        )
        .await
        .unwrap();
    agent.shutdown(Duration::from_secs(10)).await;
    let log = daily_logs(dir.path(), "tianyu");
    assert!(log.contains("The user's name is Tianyu."), "{log}");
    assert!(log.contains("session=s1"), "provenance: {log}");
    assert_eq!(model.request_count(), 1, "extraction never used the agent's model");
    assert!(extractor.request_count() >= 1);
    // Another user's namespace holds nothing.
    assert!(daily_logs(dir.path(), "someone-else").is_empty());
}

#[tokio::test]
async fn memory_search_is_offered_and_finds_the_users_facts() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("alice/memory")).unwrap();
    std::fs::write(
        dir.path().join("alice/memory/2026-11-01.md"),
        "- Alice prefers green tea.\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("bob/memory")).unwrap();
    std::fs::write(
        dir.path().join("bob/memory/2026-11-01.md"),
        "- Bob prefers black coffee.\n",
    )
    .unwrap();
    let model = ScriptedModel::new()
        .reply(Reply::tool_call("memory_search", json!({"query": "prefers"})))
        .reply_text("Green tea.");
    let agent = HarnessAgent::builder()
        .workspace(dir.path())
        .model(model.clone())
        .memory_model(Arc::new(memory_model("NO_REPLY")))
        .build()
        .unwrap();
    agent.call("What do I like to drink?", ctx("alice", "s")).await.unwrap();
    agent.shutdown(Duration::from_secs(10)).await;
    let requests = model.requests();
    let names: Vec<&str> = requests[0].tools.iter().map(|t| t.name.as_str()).collect();
    for tool in [
        "memory_search",
        "memory_get",
        "session_search",
        "session_history",
        "session_list",
        "read_file",
    ] {
        assert!(names.contains(&tool), "{tool} missing from {names:?}");
    }
    assert!(!names.contains(&"execute"), "no shell unless configured");
    assert!(requests[0].system.render().contains("memory_search"));
    let result = requests[1].messages.last().unwrap();
    let text = serde_json::to_string(&result.content).unwrap();
    assert!(text.contains("green tea"), "{text}");
    assert!(!text.contains("coffee"), "another user's memory leaked: {text}");
}

#[tokio::test]
async fn memory_off_means_no_memory_tools_and_no_extra_calls() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new().reply_text("ok");
    let agent = agent(dir.path(), &model);
    agent.call("remember that I like tea", ctx("u", "s")).await.unwrap();
    agent.shutdown(Duration::from_secs(5)).await;
    assert_eq!(model.request_count(), 1);
    let names: Vec<String> = model.requests()[0].tools.iter().map(|t| t.name.clone()).collect();
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("memory_") || n.starts_with("session_")),
        "{names:?}"
    );
    assert!(daily_logs(dir.path(), "u").is_empty());
}

#[tokio::test]
async fn a_local_shell_is_opt_in() {
    let dir = tempfile::tempdir().unwrap();
    let config = harness::filesystem::FilesystemConfig {
        kind: harness::filesystem::FilesystemKind::LocalShell,
        ..Default::default()
    };
    let fs = harness::filesystem::open(&config, dir.path(), "harness").await.unwrap();
    let model = ScriptedModel::new()
        .reply(Reply::tool_call(
            "execute",
            json!({"command": "echo from-the-shell; echo $OPENAI_API_KEY"}),
        ))
        .reply_text("done");
    let agent = builder()
        .workspace(dir.path())
        .filesystem(fs)
        .model(model.clone())
        .permissions(crate::support::unattended())
        .build()
        .unwrap();
    agent.call("run it", ctx("u", "s")).await.unwrap();
    let requests = model.requests();
    assert!(requests[0].tools.iter().any(|t| t.name == "execute"));
    let result = serde_json::to_string(&requests[1].messages.last().unwrap().content).unwrap();
    assert!(result.contains("from-the-shell"), "{result}");
}
