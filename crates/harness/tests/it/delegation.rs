//! Delegation trees: child session ids bounded at every depth (from the 41-byte sessions of
//! the OpenAI route), the readable path kept in the task records, and the defects of the
//! subagent capability that a test keeps fixed (fan-out slots of failed spawns, the tools of
//! `general-purpose`, session tools beside an isolated child, `task_list` filters, shutdown of
//! shared capabilities).

use crate::support::{builder, ctx};
use harness::capability::Capability;
use harness::subagents::{SpawnError, SpawnRequest, SubagentDeclaration, SubagentsConfig, TaskStatus};
use harness_core::{Block, ChatRequest, Role, join_text};
use harness_models::{Reply, ScriptedModel, ScriptedToolCall};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// An OpenAI-route session id: `chatcmpl-` and 32 characters, 41 bytes.
const OPENAI_SESSION: &str = "chatcmpl-0123456789abcdef0123456789abcdef";

fn call(name: &str, arguments: Value) -> Reply {
    Reply {
        tool_calls: vec![ScriptedToolCall {
            name: name.to_owned(),
            arguments,
            id: None,
        }],
        ..Reply::default()
    }
}

fn last_user_text(request: &ChatRequest) -> String {
    request
        .messages
        .iter()
        .rev()
        .find(|msg| msg.role == Role::User)
        .map(|msg| msg.text())
        .unwrap_or_default()
}

/// The text of the tool results of the request's last message, when it is one.
fn last_tool_result(request: &ChatRequest) -> Option<String> {
    let last = request.messages.last()?;
    (last.role == Role::Tool).then(|| {
        last.content
            .iter()
            .filter_map(|block| match block {
                Block::ToolResult { content, .. } => Some(join_text(content)),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    })
}

/// A model for a chain of `general-purpose` delegations: the task `level N` spawns
/// `level N+1` until `deepest`, which answers; every level relays the answer it got.
fn chain_model(deepest: u32) -> ScriptedModel {
    ScriptedModel::from_fn(move |request| {
        if let Some(result) = last_tool_result(request) {
            let answer = result
                .lines()
                .find(|line| line.contains("ANSWER"))
                .unwrap_or("no answer")
                .trim()
                .to_owned();
            return Reply::text(answer);
        }
        let task = last_user_text(request);
        let level = task
            .strip_prefix("level ")
            .and_then(|level| level.parse::<u32>().ok())
            .unwrap_or(0);
        if level == deepest {
            return Reply::text(format!("ANSWER from level {level}"));
        }
        call(
            "agent_spawn",
            json!({"agent_id": "general-purpose", "task": format!("level {}", level + 1), "timeout_seconds": 60}),
        )
    })
}

fn deep_parent(dir: &std::path::Path, model: ScriptedModel) -> harness::HarnessAgent {
    builder()
        .workspace(dir)
        .model(model)
        .subagents(SubagentsConfig {
            max_depth: 3,
            ..SubagentsConfig::default()
        })
        .build()
        .unwrap()
}

/// Runs a chain `deepest` levels deep from an OpenAI-route session and checks the answer and
/// the records of every level.
async fn check_chain(deepest: u32) {
    let dir = tempfile::tempdir().unwrap();
    let agent = deep_parent(dir.path(), chain_model(deepest));
    let reply = agent.call("level 0", ctx("u1", OPENAI_SESSION)).await.unwrap();
    assert_eq!(reply.text(), format!("ANSWER from level {deepest}"));
    // Each level's task record names its parent session, its depth and its path; the child's
    // session id stays bounded, and the next level's record is in the child's own task file.
    let mut session = OPENAI_SESSION.to_owned();
    let mut path = "harness".to_owned();
    for depth in 1..=deepest {
        let tasks = agent.tasks(ctx("u1", &session)).await.unwrap();
        let [record] = tasks.as_slice() else {
            panic!("depth {depth}: one task expected in {session}: {tasks:?}");
        };
        path.push_str("/general-purpose");
        assert_eq!(record.status, TaskStatus::Completed, "{record:?}");
        assert_eq!(record.parent_session.as_deref(), Some(session.as_str()));
        assert_eq!(record.depth, Some(depth));
        assert_eq!(record.path.as_deref(), Some(path.as_str()));
        assert!(record.child_session.starts_with("sub.general-purpose."), "{record:?}");
        assert!(record.child_session.len() <= 101, "{}", record.child_session);
        session = record.child_session.clone();
    }
    // The deepest child spawned nothing.
    assert!(agent.tasks(ctx("u1", &session)).await.unwrap().is_empty());
}

#[tokio::test]
async fn depth_two_from_an_openai_session_returns_the_grandchilds_answer() {
    check_chain(2).await;
}

#[tokio::test]
async fn depth_three_from_an_openai_session_returns_the_deepest_answer() {
    check_chain(3).await;
}

#[test]
fn max_depth_above_three_is_refused_when_harness_toml_is_parsed() {
    let parse = |text: &str| harness::HarnessConfig::parse(text, std::path::Path::new("harness.toml"));
    let err = parse("[subagents]\nmax_depth = 4\n").unwrap_err().to_string();
    assert!(err.contains("max_depth = 4") && err.contains("limit of 3"), "{err}");
    assert!(err.contains("[subagents]"), "{err}");
    assert!(parse("[subagents]\nmax_depth = 3\n").is_ok());
}

/// A task record written before child session ids were bounded: `sub.<parent>.<id>.<label>`,
/// no parent session, depth or path.
fn old_record(session: &str) -> Value {
    json!({
        "task_id": "task-old", "agent_id": "researcher", "label": "notes",
        "child_session": format!("sub.{session}.researcher.notes"), "status": "completed",
        "result": "old answer", "runner": "runner-old", "delivered": true, "heartbeat_ms": 1
    })
}

#[tokio::test]
async fn an_instance_recorded_with_the_old_session_id_continues_in_that_session() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("u1/agents/harness/tasks");
    std::fs::create_dir_all(&tasks).unwrap();
    let file = json!({"v": 1, "tasks": {"task-old": old_record("s1")}});
    std::fs::write(tasks.join("s1.json"), file.to_string()).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&seen);
    let model = ScriptedModel::from_fn(move |request| {
        let system: String = request.system.parts.iter().map(|part| part.text.as_str()).collect();
        if system.contains("RESEARCHER") {
            kept.lock().unwrap().push(request.messages.len());
            return Reply::text("ANSWER again");
        }
        Reply::text("parent")
    });
    let agent = builder()
        .workspace(dir.path())
        .model(model)
        .subagent(SubagentDeclaration::new("researcher", "Finds facts", "RESEARCHER"))
        .build()
        .unwrap();
    let request = SpawnRequest::new("researcher", "more")
        .label("notes")
        .wait(Duration::from_secs(30));
    let outcome = agent.spawn_subagent(ctx("u1", "s1"), request).await.unwrap();
    assert_eq!(outcome.result.as_deref(), Some("ANSWER again"));
    let records = agent.tasks(ctx("u1", "s1")).await.unwrap();
    // The old record still loads, and the new task reuses its child session.
    assert_eq!(records.len(), 2, "{records:?}");
    assert!(
        records
            .iter()
            .all(|record| record.child_session == "sub.s1.researcher.notes"),
        "{records:?}"
    );
    assert!(
        dir.path()
            .join(
                "u1/agents/harness/subagents/researcher/s1/agents/researcher/sessions/sub.s1.researcher.notes.log.jsonl"
            )
            .exists()
    );
}

#[tokio::test]
async fn a_failed_programmatic_spawn_frees_its_fanout_slot() {
    let dir = tempfile::tempdir().unwrap();
    let mut broken = SubagentDeclaration::new("broken", "Cannot be built", "BROKEN");
    broken.model = Some("no-such-provider:model".to_owned());
    let agent = builder()
        .workspace(dir.path())
        .model(ScriptedModel::from_fn(|_| Reply::text("ANSWER")))
        .subagents(SubagentsConfig {
            max_fanout: 1,
            ..SubagentsConfig::default()
        })
        .subagent(broken)
        .build()
        .unwrap();
    for _ in 0..2 {
        let err = agent
            .spawn_subagent(ctx("u1", "s1"), SpawnRequest::new("broken", "t"))
            .await
            .unwrap_err();
        assert!(matches!(err, SpawnError::Model { .. }), "{err}");
    }
    // The failed spawns ran nothing: the single fan-out slot is free for a real one.
    let request = SpawnRequest::new("general-purpose", "t").wait(Duration::from_secs(30));
    let outcome = agent.spawn_subagent(ctx("u1", "s1"), request).await.unwrap();
    assert_eq!(outcome.result.as_deref(), Some("ANSWER"));
}

fn memory_without_extraction() -> harness_memory::MemoryConfig {
    let mut memory = harness_memory::MemoryConfig::default();
    memory.mode = harness_memory::MemoryMode::Off;
    memory
}

const SESSION_TOOLS: [&str; 5] = [
    "memory_search",
    "memory_get",
    "session_search",
    "session_history",
    "session_list",
];

#[tokio::test]
async fn general_purpose_has_the_parents_memory_and_session_tools() {
    let dir = tempfile::tempdir().unwrap();
    let child_tools = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&child_tools);
    let model = ScriptedModel::from_fn(move |request| {
        if last_user_text(request) == "child task" {
            *kept.lock().unwrap() = request.tools.iter().map(|tool| tool.name.clone()).collect::<Vec<_>>();
            return Reply::text("ANSWER");
        }
        Reply::text("parent")
    });
    let agent = harness::HarnessAgent::builder()
        .workspace(dir.path())
        .model(model)
        .memory(memory_without_extraction())
        .build()
        .unwrap();
    let request = SpawnRequest::new("general-purpose", "child task").wait(Duration::from_secs(30));
    agent.spawn_subagent(ctx("u1", "s1"), request).await.unwrap();
    let tools = child_tools.lock().unwrap().clone();
    for name in SESSION_TOOLS {
        assert!(tools.iter().any(|tool| tool == name), "{name} missing from {tools:?}");
    }
}

#[tokio::test]
async fn session_tools_list_the_calling_agents_sessions_beside_an_isolated_child() {
    let dir = tempfile::tempdir().unwrap();
    let results = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&results);
    let model = ScriptedModel::from_fn(move |request| {
        if let Some(result) = last_tool_result(request) {
            kept.lock().unwrap().push((last_user_text(request), result));
            return Reply::text("done");
        }
        match last_user_text(request).as_str() {
            "delegate" => call(
                "agent_spawn",
                json!({"agent_id": "researcher", "task": "look", "timeout_seconds": 60}),
            ),
            "look" | "mine" => call("session_list", json!({})),
            _ => Reply::text("parent"),
        }
    });
    let agent = harness::HarnessAgent::builder()
        .workspace(dir.path())
        .model(model)
        .memory(memory_without_extraction())
        .subagent(SubagentDeclaration::new("researcher", "Finds facts", "RESEARCHER"))
        .build()
        .unwrap();
    agent.call("delegate", ctx("u1", "s1")).await.unwrap();
    agent.flush_sessions().await.unwrap();
    agent.call("mine", ctx("u1", "s2")).await.unwrap();
    let results = results.lock().unwrap().clone();
    let of = |task: &str| {
        results
            .iter()
            .find(|(user, _)| user == task)
            .map(|(_, result)| result.clone())
            .unwrap_or_else(|| panic!("no session_list result for {task}: {results:?}"))
    };
    // The isolated child lists its own sessions, the parent its own.
    let child = of("look");
    assert!(child.contains("sub.researcher."), "{child}");
    let parent = of("mine");
    assert!(parent.contains("s1") && !parent.contains("sub.researcher."), "{parent}");
}

#[tokio::test]
async fn task_list_filters_by_awaiting_approval() {
    let dir = tempfile::tempdir().unwrap();
    let output = Arc::new(Mutex::new(None));
    let kept = Arc::clone(&output);
    let model = ScriptedModel::from_fn(move |request| {
        if let Some(result) = last_tool_result(request) {
            *kept.lock().unwrap() = Some(result);
            return Reply::text("done");
        }
        call("task_list", json!({"status_filter": "awaiting_approval"}))
    });
    let agent = builder().workspace(dir.path()).model(model).build().unwrap();
    let tasks = dir.path().join("u1/agents/harness/tasks");
    std::fs::create_dir_all(&tasks).unwrap();
    let mut waiting = old_record("s1");
    waiting["status"] = json!("awaiting_approval");
    let file = json!({"v": 1, "tasks": {"task-old": waiting}});
    std::fs::write(tasks.join("s1.json"), file.to_string()).unwrap();
    agent.call("list", ctx("u1", "s1")).await.unwrap();
    let output = output.lock().unwrap().clone().unwrap();
    assert!(
        output.contains("task-old") && output.contains("status=awaiting_approval"),
        "{output}"
    );
}

/// A capability of the caller's that counts its shutdowns.
struct Counted(Arc<AtomicUsize>);

#[harness_core::async_trait]
impl Capability for Counted {
    fn name(&self) -> &'static str {
        "counted"
    }

    async fn shutdown(&self, _deadline: tokio::time::Instant) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_childs_shutdown_leaves_what_it_shares_with_the_parent() {
    let dir = tempfile::tempdir().unwrap();
    let shutdowns = Arc::new(AtomicUsize::new(0));
    let agent = builder()
        .workspace(dir.path())
        .model(ScriptedModel::from_fn(|_| Reply::text("ANSWER")))
        .capability(Arc::new(Counted(Arc::clone(&shutdowns))))
        .build()
        .unwrap();
    let request = SpawnRequest::new("general-purpose", "t").wait(Duration::from_secs(30));
    agent.spawn_subagent(ctx("u1", "s1"), request).await.unwrap();
    agent.shutdown(Duration::from_secs(5)).await;
    // The child inherited the capability; only its owner, the parent, shuts it down.
    assert_eq!(shutdowns.load(Ordering::SeqCst), 1);
}
