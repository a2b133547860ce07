//! Issue 23, the lean request: rarely used built-in tools wait in on-demand groups and stay
//! reachable, `load_skill_through_path` costs nothing until there is a skill, and a denied
//! `activate_tool_group` hides nothing.

use crate::mcp::config;
use crate::support::ctx;
use harness::extensions::{Extensions, ExtensionsConfig};
use harness_core::ChatRequest;
use harness_models::ScriptedModel;
use serde_json::json;
use std::sync::Arc;

async fn extensions(tools_json: &str, root: &std::path::Path, skills: bool) -> Arc<Extensions> {
    let config = ExtensionsConfig {
        tools: config(tools_json),
        skills: skills.then(harness_skills::SkillsConfig::default),
        ..ExtensionsConfig::default()
    };
    let env = harness_mcp::HostEnv::from_vars(std::iter::empty::<(String, String)>());
    Arc::new(Extensions::start(config, &env, root, false).await.unwrap())
}

fn names(request: &ChatRequest) -> Vec<String> {
    request.tools.iter().map(|spec| spec.name.clone()).collect()
}

/// Memory on (the session tools) and subagents on (the task tools), as `harness init` has it.
fn agent(root: &std::path::Path, model: &ScriptedModel, ext: &Arc<Extensions>) -> harness::HarnessAgent {
    harness::HarnessAgent::builder()
        .workspace(root)
        .model(model.clone())
        .extensions(Arc::clone(ext))
        .build()
        .unwrap()
}

fn agent_without_extraction(
    root: &std::path::Path,
    model: &ScriptedModel,
    ext: &Arc<Extensions>,
) -> harness::HarnessAgent {
    let mut memory = harness_memory::MemoryConfig::default();
    memory.mode = harness_memory::MemoryMode::Off;
    harness::HarnessAgent::builder()
        .workspace(root)
        .model(model.clone())
        .extensions(Arc::clone(ext))
        .memory(memory)
        .build()
        .unwrap()
}

#[tokio::test]
async fn the_session_and_task_tools_wait_in_groups_and_one_activation_offers_them() {
    let dir = tempfile::tempdir().unwrap();
    let ext = extensions("{}", dir.path(), false).await;
    let model = ScriptedModel::new()
        .reply_tool_call("activate_tool_group", json!({"group": "sessions"}))
        .reply_tool_call("session_list", json!({}))
        .reply_text("done")
        .fallback(harness_models::Fallback::RepeatLast);
    let agent = agent(dir.path(), &model, &ext);
    agent.call("hi", ctx("alice", "s1")).await.unwrap();
    let requests = model.requests();
    let first = names(&requests[0]);
    for hidden in [
        "session_search",
        "session_history",
        "session_list",
        "agent_send",
        "agent_list",
        "task_output",
        "task_list",
        "task_cancel",
        "wait_async_results",
    ] {
        assert!(!first.iter().any(|name| name == hidden), "{hidden}: {first:?}");
    }
    for offered in ["read_file", "memory_search", "agent_spawn", "activate_tool_group"] {
        assert!(first.iter().any(|name| name == offered), "{offered}: {first:?}");
    }
    let activate = requests[0]
        .tools
        .iter()
        .find(|spec| spec.name == "activate_tool_group")
        .unwrap();
    assert!(
        activate
            .description
            .contains("- sessions: session_history, session_list, session_search"),
        "{}",
        activate.description
    );
    assert!(
        activate.description.contains("- tasks: agent_list, agent_send"),
        "{}",
        activate.description
    );
    // The step after the activation offers the group, and its tool runs.
    let second = names(&requests[1]);
    assert!(second.iter().any(|name| name == "session_list"), "{second:?}");
    assert!(!second.iter().any(|name| name == "task_output"), "{second:?}");
    let result = requests[1].messages.last().unwrap();
    assert!(
        matches!(
            &result.content[..],
            [harness_core::Block::ToolResult { is_error: false, .. }]
        ),
        "{result:?}"
    );
    ext.shutdown().await;
}

#[tokio::test]
async fn denying_activate_tool_group_offers_every_tool() {
    let dir = tempfile::tempdir().unwrap();
    let ext = extensions(r#"{"deny": ["activate_tool_group"]}"#, dir.path(), false).await;
    let model = ScriptedModel::new().reply_text("ok");
    let agent = agent(dir.path(), &model, &ext);
    agent.call("hi", ctx("alice", "s1")).await.unwrap();
    let first = names(&model.requests()[0]);
    assert!(!first.iter().any(|name| name == "activate_tool_group"), "{first:?}");
    for offered in ["session_search", "task_output", "agent_send"] {
        assert!(first.iter().any(|name| name == offered), "{offered}: {first:?}");
    }
    ext.shutdown().await;
}

#[tokio::test]
async fn load_skill_is_offered_only_on_a_step_with_a_skill_to_load() {
    let dir = tempfile::tempdir().unwrap();
    let ext = extensions("{}", dir.path(), true).await;
    let model = ScriptedModel::new()
        .reply_text("ok")
        .fallback(harness_models::Fallback::RepeatLast);
    let agent = agent(dir.path(), &model, &ext);
    agent.call("hi", ctx("alice", "s1")).await.unwrap();
    let without = names(&model.requests()[0]);
    assert!(!without.is_empty());
    assert!(
        !without.iter().any(|name| name == "load_skill_through_path"),
        "{without:?}"
    );
    std::fs::create_dir_all(dir.path().join("skills/pdf")).unwrap();
    std::fs::write(
        dir.path().join("skills/pdf/SKILL.md"),
        "---\nname: pdf\ndescription: Use for PDFs\n---\nSteps.\n",
    )
    .unwrap();
    let before = model.requests().len();
    agent.call("again", ctx("alice", "s1")).await.unwrap();
    // The turn's request (memory extraction, on by default, asks without tools).
    let requests = model.requests();
    let turn = requests[before..].iter().find(|r| !r.tools.is_empty()).unwrap();
    let with = names(turn);
    assert!(with.iter().any(|name| name == "load_skill_through_path"), "{with:?}");
    ext.shutdown().await;
}

/// Activations are kept in the session's `tool_groups` slot as they happen (each step looks
/// only at the call's own messages): the next call, in a new process, offers the group from
/// its first step.
#[tokio::test]
async fn an_activation_is_kept_for_the_next_call_in_a_new_process() {
    let dir = tempfile::tempdir().unwrap();
    let ext = extensions("{}", dir.path(), false).await;
    let model = ScriptedModel::new()
        .reply_tool_call("activate_tool_group", json!({"group": "sessions"}))
        .reply_text("active")
        .reply_text("still active");
    // No background extraction: it would take a scripted reply between the two calls.
    agent_without_extraction(dir.path(), &model, &ext)
        .call("hi", ctx("alice", "s1"))
        .await
        .unwrap();
    agent_without_extraction(dir.path(), &model, &ext)
        .call("again", ctx("alice", "s1"))
        .await
        .unwrap();
    let third = names(&model.requests()[2]);
    assert!(third.iter().any(|name| name == "session_list"), "{third:?}");
    assert!(!third.iter().any(|name| name == "task_output"), "{third:?}");
    ext.shutdown().await;
}
