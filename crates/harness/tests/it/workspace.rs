//! Workspace context: persona injection, prompt stability, budgets, live edits, bad files.

use crate::support::*;

use harness_core::EventKind;
use harness_models::{Reply, ScriptedModel};
use serde_json::json;

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("AGENTS.md"), "You are Ada.\nAlways answer in French.").unwrap();
    std::fs::write(dir.path().join("MEMORY.md"), "- The user likes tea.").unwrap();
    std::fs::create_dir_all(dir.path().join("knowledge/sub")).unwrap();
    std::fs::write(dir.path().join("knowledge/KNOWLEDGE.md"), "Product FAQ entry.").unwrap();
    std::fs::write(dir.path().join("knowledge/sub/pricing.md"), "Prices.").unwrap();
    dir
}

#[tokio::test]
async fn persona_memory_and_knowledge_are_injected() {
    let dir = workspace();
    let model = ScriptedModel::new().reply_text("ok");
    agent(dir.path(), &model).call("hi", ctx("u1", "s1")).await.unwrap();
    let system = model.requests()[0].system.render();
    for needle in [
        "You are Ada.",
        "Always answer in French.",
        "The user likes tea.",
        "Product FAQ entry.",
        "knowledge/sub/pricing.md",
        "Session: s1",
        "<memory_context>\nNotes remembered",
    ] {
        assert!(system.contains(needle), "missing {needle:?} in\n{system}");
    }
    // Rarely-changing content first, the session facts last.
    assert!(system.find("You are Ada.").unwrap() < system.find("The user likes tea.").unwrap());
    assert!(system.find("The user likes tea.").unwrap() < system.find("## Session Context").unwrap());
}

#[tokio::test]
async fn two_steps_with_unchanged_files_send_identical_prompts() {
    let dir = workspace();
    let model = ScriptedModel::new()
        .reply(Reply::tool_call("sleep", json!({"ms": 1})))
        .reply_text("done")
        .reply_text("again");
    let agent = crate::support::builder()
        .workspace(dir.path())
        .model(model.clone())
        .tool(tool(Sleep))
        .build()
        .unwrap();
    agent.call("one", ctx("u1", "s1")).await.unwrap();
    agent.call("two", ctx("u1", "s1")).await.unwrap();
    let prompts: Vec<String> = model.requests().iter().map(|r| r.system.render()).collect();
    assert_eq!(prompts.len(), 3);
    assert_eq!(prompts[0], prompts[1]);
    assert_eq!(prompts[1], prompts[2]);
    let (stable, volatile) = model.requests()[0].system.split_stable();
    assert!(stable.contains("You are Ada.") && !stable.contains("Session: s1"));
    assert!(volatile.contains("Session: s1"));
}

#[tokio::test]
async fn an_edit_takes_effect_on_the_next_step() {
    let dir = workspace();
    let model = ScriptedModel::new()
        .reply(Reply::tool_call(
            "write_note",
            json!({"path": "AGENTS.md", "text": "You are Bea now."}),
        ))
        .reply_text("done");
    // AGENTS.md is protected (a write asks); this test is about the prompt, so it lifts that.
    let agent = crate::support::builder()
        .workspace(dir.path())
        .model(model.clone())
        .tool(tool(WriteNote {
            root: dir.path().to_owned(),
        }))
        .permissions(harness::permissions::Policy::default().with_protected(harness::permissions::Protected::none()))
        .build()
        .unwrap();
    agent.call("change yourself", ctx("u1", "s1")).await.unwrap();
    let requests = model.requests();
    assert!(requests[0].system.render().contains("You are Ada."));
    let second = requests[1].system.render();
    assert!(
        second.contains("You are Bea now.") && !second.contains("You are Ada."),
        "{second}"
    );
}

#[tokio::test]
async fn memory_over_budget_is_cut_with_a_marker() {
    let dir = workspace();
    let memory: String = (0..5000).map(|i| format!("- fact number {i}\n")).collect();
    std::fs::write(dir.path().join("MEMORY.md"), &memory).unwrap();
    let model = ScriptedModel::new().reply_text("ok");
    // Memory on (with its own model, so extraction never takes the agent's replies).
    let agent = harness::HarnessAgent::builder()
        .workspace(dir.path())
        .model(model.clone())
        .memory_model(std::sync::Arc::new(
            ScriptedModel::new()
                .fallback(harness_models::Fallback::RepeatLast)
                .reply_text("NO_REPLY"),
        ))
        .max_context_tokens(500)
        .build()
        .unwrap();
    agent.call("hi", ctx("u1", "s1")).await.unwrap();
    agent.shutdown(std::time::Duration::from_secs(5)).await;
    let system = model.requests()[0].system.render();
    assert!(system.contains("memory truncated"), "no marker");
    assert!(system.contains("use memory_search and memory_get"));
    assert!(system.contains("- fact number 0\n") && system.contains("- fact number 4999"));
    assert!(!system.contains("- fact number 2500\n"));
    assert!(system.len() < memory.len() / 4);
}

#[tokio::test]
async fn missing_oversized_and_invalid_files_never_crash() {
    let dir = tempfile::tempdir().unwrap();
    // No AGENTS.md at all: the agent works without a persona.
    let model = ScriptedModel::new().reply_text("a").reply_text("b");
    let agent = agent(dir.path(), &model);
    assert_eq!(agent.call("hi", ctx("u1", "s1")).await.unwrap().text(), "a");
    assert!(
        model.requests()[0]
            .system
            .render()
            .contains("<agents_context>\n</agents_context>")
    );

    std::fs::write(dir.path().join("AGENTS.md"), vec![b'x'; 2 * 1024 * 1024]).unwrap();
    std::fs::write(dir.path().join("MEMORY.md"), b"caf\xe9 ok").unwrap();
    let events = collect(agent.stream("again", ctx("u1", "s1"))).await;
    let warnings: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Warning { code, message } if code == "workspace.file_skipped" => Some(message.clone()),
            _ => None,
        })
        .collect();
    assert!(warnings.iter().any(|w| w.contains("AGENTS.md")), "{warnings:?}");
    assert!(matches!(events.last().map(|e| &e.kind), Some(EventKind::Final { .. })));
    let system = model.requests()[1].system.render();
    assert!(system.contains("caf\u{fffd} ok") && system.contains("not valid UTF-8"));
    assert!(!system.contains("xxxxxxxx"));
}

#[tokio::test]
async fn per_user_agents_md_overrides_the_shared_one() {
    let dir = workspace();
    std::fs::create_dir_all(dir.path().join("u2")).unwrap();
    std::fs::write(dir.path().join("u2/AGENTS.md"), "You are Cid, only for u2.").unwrap();
    let model = ScriptedModel::new().reply_text("a").reply_text("b");
    let agent = agent(dir.path(), &model);
    agent.call("hi", ctx("u1", "s")).await.unwrap();
    agent.call("hi", ctx("u2", "s")).await.unwrap();
    let requests = model.requests();
    assert!(requests[0].system.render().contains("You are Ada."));
    assert!(requests[1].system.render().contains("You are Cid, only for u2."));
}

#[tokio::test]
async fn context_files_outside_the_workspace_are_refused() {
    let dir = workspace();
    let model = ScriptedModel::new();
    let built = crate::support::builder()
        .workspace(dir.path())
        .model(model)
        .additional_context_file("../etc/passwd")
        .build();
    assert!(built.is_err());
}

#[cfg(unix)]
#[tokio::test]
async fn a_symlinked_persona_pointing_outside_is_not_read() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.md"), "TOP SECRET").unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.md"), dir.path().join("AGENTS.md")).unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("knowledge")).unwrap();
    let model = ScriptedModel::new().reply_text("ok");
    agent(dir.path(), &model).call("hi", ctx("u1", "s1")).await.unwrap();
    let system = model.requests()[0].system.render();
    assert!(!system.contains("TOP SECRET"));
    assert!(!system.contains("secret.md"));
}

#[tokio::test]
async fn init_creates_a_skeleton_and_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("AGENTS.md"), "mine").unwrap();
    let created = harness::init_workspace(dir.path()).unwrap();
    assert_eq!(created.len(), 2);
    assert_eq!(std::fs::read_to_string(dir.path().join("AGENTS.md")).unwrap(), "mine");
    assert!(dir.path().join("knowledge/KNOWLEDGE.md").exists());
    assert!(harness::HarnessConfig::load(dir.path()).is_ok());
    assert!(harness::init_workspace(dir.path()).unwrap().is_empty());
}
