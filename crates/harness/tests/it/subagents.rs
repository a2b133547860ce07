//! Subagents: delegation, background tasks, barriers, push-back, limits, streamed events.

use crate::support::{Sleep, builder, collect, ctx};
use harness::HarnessAgent;
use harness::subagents::{SubagentDeclaration, SubagentsConfig, TaskFile, TaskStatus};
use harness_core::{ChatRequest, EventKind, Msg, Role, typed};
use harness_models::{Reply, ScriptedError, ScriptedModel, ScriptedToolCall};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const CHILD: &str = "CHILD-MARKER";

/// A model that answers the parent from a queue and each child by a rule.
#[derive(Clone)]
struct Models {
    parent: Arc<Mutex<VecDeque<Reply>>>,
    child_calls: Arc<Mutex<Vec<ChatRequest>>>,
    parent_calls: Arc<Mutex<Vec<ChatRequest>>>,
}

fn system_text(request: &ChatRequest) -> String {
    request.system.parts.iter().map(|part| part.text.as_str()).collect()
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

impl Models {
    /// `child` answers every child request.
    fn new(child: impl Fn(&ChatRequest) -> Reply + Send + Sync + 'static) -> (Self, ScriptedModel) {
        let models = Self {
            parent: Arc::default(),
            child_calls: Arc::default(),
            parent_calls: Arc::default(),
        };
        let inner = models.clone();
        let model = ScriptedModel::from_fn(move |request| {
            if system_text(request).contains(CHILD) {
                inner.child_calls.lock().unwrap().push(request.clone());
                child(request)
            } else {
                inner.parent_calls.lock().unwrap().push(request.clone());
                inner
                    .parent
                    .lock()
                    .unwrap()
                    .pop_front()
                    .unwrap_or_else(|| Reply::text("parent done"))
            }
        });
        (models, model)
    }

    fn then(&self, reply: Reply) -> &Self {
        self.parent.lock().unwrap().push_back(reply);
        self
    }

    fn child_count(&self) -> usize {
        self.child_calls.lock().unwrap().len()
    }

    fn parent_requests(&self) -> Vec<ChatRequest> {
        self.parent_calls.lock().unwrap().clone()
    }
}

fn calls(calls: &[(&str, Value)]) -> Reply {
    Reply {
        tool_calls: calls
            .iter()
            .map(|(name, arguments)| ScriptedToolCall {
                name: (*name).to_owned(),
                arguments: arguments.clone(),
                id: None,
            })
            .collect(),
        ..Reply::default()
    }
}

fn researcher() -> SubagentDeclaration {
    SubagentDeclaration::new("researcher", "Finds facts", format!("{CHILD} You research."))
}

fn parent(dir: &Path, model: &ScriptedModel) -> HarnessAgent {
    parent_with(dir, model, SubagentsConfig::default())
}

fn parent_with(dir: &Path, model: &ScriptedModel, config: SubagentsConfig) -> HarnessAgent {
    builder()
        .workspace(dir)
        .model(model.clone())
        .subagents(config)
        .subagent(researcher())
        .tool(typed(Sleep))
        .build()
        .unwrap()
}

/// Tool results of the parent's messages, in order.
fn tool_results(message_lists: &[ChatRequest]) -> Vec<(String, bool)> {
    let Some(last) = message_lists.last() else {
        return Vec::new();
    };
    last.messages
        .iter()
        .filter(|msg| msg.role == Role::Tool)
        .flat_map(|msg| {
            msg.content.iter().filter_map(|block| match block {
                harness_core::Block::ToolResult { content, is_error, .. } => {
                    Some((harness_core::join_text(content), *is_error))
                }
                _ => None,
            })
        })
        .collect()
}

fn task_file(dir: &Path, user: &str, session: &str) -> TaskFile {
    let path = dir
        .join(user)
        .join("agents/harness/tasks")
        .join(format!("{session}.json"));
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn reminders(requests: &[ChatRequest]) -> Vec<String> {
    let Some(last) = requests.last() else {
        return Vec::new();
    };
    last.messages
        .iter()
        .filter(|msg| msg.role == Role::User && msg.text().contains("<system-reminder>"))
        .map(|msg: &Arc<Msg>| msg.text())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_sync_spawn_returns_the_childs_answer_and_streams_its_events_with_source() {
    let dir = tempfile::tempdir().unwrap();
    let (models, model) = Models::new(|request| Reply::text(format!("found: {}", last_user_text(request))));
    models.then(calls(&[(
        "agent_spawn",
        json!({"agent_id": "researcher", "task": "the moon"}),
    )]));
    let agent = parent(dir.path(), &model);
    let events = collect(agent.stream("go", ctx("u1", "s1"))).await;
    let results = tool_results(&models.parent_requests());
    assert_eq!(results.len(), 1);
    assert!(
        results[0].0.contains("status: completed") && results[0].0.contains("found: the moon"),
        "{results:?}"
    );
    assert!(!results[0].1);
    let child_events: Vec<_> = events.iter().filter(|event| event.source.is_some()).collect();
    assert!(!child_events.is_empty(), "child events are forwarded");
    let source = child_events[0].source.clone().unwrap();
    assert_eq!(source.agent_id, "researcher");
    assert_eq!(source.depth, 1);
    assert_eq!(source.path, "harness/researcher");
    assert!(
        source.session_id.starts_with("sub.s1.researcher."),
        "{}",
        source.session_id
    );
    assert!(
        child_events
            .iter()
            .any(|event| matches!(event.kind, EventKind::Final { .. }))
    );
    // The parent's own stream ends with its own final message.
    let last = events.last().unwrap();
    assert!(last.source.is_none() && matches!(last.kind, EventKind::Final { .. }));
    // The sync result was delivered as the tool result: never pushed back.
    assert!(
        task_file(dir.path(), "u1", "s1")
            .tasks
            .values()
            .all(|record| record.delivered)
    );
    agent.call("again", ctx("u1", "s1")).await.unwrap();
    assert!(reminders(&models.parent_requests()).is_empty());
}

#[tokio::test(start_paused = true)]
async fn three_sync_spawns_in_one_step_take_the_longest_not_the_sum() {
    let dir = tempfile::tempdir().unwrap();
    let (models, model) = Models::new(|_| Reply::text("ok").delayed(Duration::from_secs(10)));
    let spawn = json!({"agent_id": "researcher", "task": "t", "timeout_seconds": 60});
    models.then(calls(&[
        ("agent_spawn", spawn.clone()),
        ("agent_spawn", spawn.clone()),
        ("agent_spawn", spawn),
    ]));
    let agent = parent(dir.path(), &model);
    let started = tokio::time::Instant::now();
    agent.call("go", ctx("u1", "s1")).await.unwrap();
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(10) && took < Duration::from_secs(20),
        "{took:?}"
    );
    assert_eq!(models.child_count(), 3);
    assert!(
        tool_results(&models.parent_requests())
            .iter()
            .all(|(text, error)| !error && text.contains("ok"))
    );
}

#[tokio::test(start_paused = true)]
async fn a_background_result_is_pushed_back_exactly_once_on_the_next_call() {
    let dir = tempfile::tempdir().unwrap();
    let (models, model) = Models::new(|_| Reply::text("background answer").delayed(Duration::from_secs(5)));
    models.then(calls(&[(
        "agent_spawn",
        json!({"agent_id": "researcher", "task": "t", "timeout_seconds": 0}),
    )]));
    let agent = parent(dir.path(), &model);
    agent.call("go", ctx("u1", "s1")).await.unwrap();
    let first = tool_results(&models.parent_requests());
    assert!(
        first[0].0.contains("status: running") && first[0].0.contains("task_id: task-"),
        "{first:?}"
    );
    agent.wait_for_tasks().await;
    let record = task_file(dir.path(), "u1", "s1").tasks.into_values().next().unwrap();
    assert_eq!((record.status, record.delivered), (TaskStatus::Completed, false));

    agent.call("next", ctx("u1", "s1")).await.unwrap();
    let pushed = reminders(&models.parent_requests());
    assert_eq!(pushed.len(), 1, "{pushed:?}");
    assert!(pushed[0].contains(&record.task_id) && pushed[0].contains("status: completed"));
    assert!(pushed[0].contains("agent: researcher") && pushed[0].contains("background answer"));
    assert!(task_file(dir.path(), "u1", "s1").tasks[&record.task_id].delivered);

    // A later call, and a restarted process, deliver nothing again.
    agent.call("later", ctx("u1", "s1")).await.unwrap();
    assert_eq!(reminders(&models.parent_requests()).len(), 1);
    let restarted = parent(dir.path(), &model);
    restarted.call("after restart", ctx("u1", "s1")).await.unwrap();
    assert_eq!(reminders(&models.parent_requests()).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_result_that_finished_before_a_restart_is_delivered_once_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let (models, model) = Models::new(|_| Reply::text("kept across restarts"));
    models.then(calls(&[(
        "agent_spawn",
        json!({"agent_id": "researcher", "task": "t", "timeout_seconds": 0}),
    )]));
    {
        let agent = parent(dir.path(), &model);
        agent.call("go", ctx("u1", "s1")).await.unwrap();
        agent.wait_for_tasks().await;
        agent.shutdown(Duration::from_secs(5)).await;
    }
    let restarted = parent(dir.path(), &model);
    restarted.call("next", ctx("u1", "s1")).await.unwrap();
    let pushed = reminders(&models.parent_requests());
    assert_eq!(pushed.len(), 1);
    assert!(pushed[0].contains("kept across restarts"));
    restarted.call("again", ctx("u1", "s1")).await.unwrap();
    assert_eq!(reminders(&models.parent_requests()).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_expired_sync_wait_is_promoted_and_its_result_pushed_back() {
    let dir = tempfile::tempdir().unwrap();
    let (models, model) = Models::new(|_| Reply::text("slow answer").delayed(Duration::from_secs(100)));
    models.then(calls(&[(
        "agent_spawn",
        json!({"agent_id": "researcher", "task": "t", "timeout_seconds": 5}),
    )]));
    let agent = parent(dir.path(), &model);
    let started = tokio::time::Instant::now();
    agent.call("go", ctx("u1", "s1")).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(100));
    let result = &tool_results(&models.parent_requests())[0];
    assert!(
        result.0.contains("status: timeout_promoted") && result.0.contains("task_id: task-"),
        "{result:?}"
    );
    agent.wait_for_tasks().await;
    agent.call("next", ctx("u1", "s1")).await.unwrap();
    let pushed = reminders(&models.parent_requests());
    assert_eq!(pushed.len(), 1);
    assert!(pushed[0].contains("slow answer"));
}

#[tokio::test(start_paused = true)]
async fn task_output_and_wait_async_results_deliver_so_nothing_is_pushed_back() {
    let dir = tempfile::tempdir().unwrap();
    let (models, model) = Models::new(|request| {
        Reply::text(format!("answer to {}", last_user_text(request))).delayed(Duration::from_secs(3))
    });
    models.then(calls(&[
        (
            "agent_spawn",
            json!({"agent_id": "researcher", "task": "a", "timeout_seconds": 0, "label": "one"}),
        ),
        (
            "agent_spawn",
            json!({"agent_id": "researcher", "task": "b", "timeout_seconds": 0}),
        ),
    ]));
    models.then(calls(&[("wait_async_results", json!({"wait_all": true}))]));
    let agent = parent(dir.path(), &model);
    agent.call("go", ctx("u1", "s1")).await.unwrap();
    let results = tool_results(&models.parent_requests());
    let waited = &results[2].0;
    assert!(
        waited.contains("answer to a") && waited.contains("answer to b"),
        "{waited}"
    );
    let ids: Vec<String> = task_file(dir.path(), "u1", "s1").tasks.into_keys().collect();

    models.then(calls(&[("task_output", json!({"task_id": ids[0], "block": false}))]));
    models.then(calls(&[("task_list", json!({"status_filter": "completed"}))]));
    agent.call("check", ctx("u1", "s1")).await.unwrap();
    let results = tool_results(&models.parent_requests());
    let output = &results[results.len() - 2].0;
    assert!(
        output.contains("status: completed") && output.contains("answer to"),
        "{output}"
    );
    let listed = &results[results.len() - 1].0;
    assert!(ids.iter().all(|id| listed.contains(id.as_str())), "{listed}");
    assert!(reminders(&models.parent_requests()).is_empty());

    models.then(calls(&[("agent_list", json!({}))]));
    agent.call("list", ctx("u1", "s1")).await.unwrap();
    let listing = tool_results(&models.parent_requests()).pop().unwrap().0;
    assert!(
        listing.contains("researcher") && listing.contains("agent:researcher:one"),
        "{listing}"
    );
}

#[tokio::test(start_paused = true)]
async fn task_cancel_stops_a_child_mid_tool_and_it_makes_no_further_model_calls() {
    let dir = tempfile::tempdir().unwrap();
    let (models, model) = Models::new(|_| Reply::tool_call("sleep", json!({"ms": 1_000_000})));
    models.then(calls(&[(
        "agent_spawn",
        json!({"agent_id": "researcher", "task": "t", "timeout_seconds": 0}),
    )]));
    let agent = parent(dir.path(), &model);
    agent.call("go", ctx("u1", "s1")).await.unwrap();
    let task_id = task_file(dir.path(), "u1", "s1").tasks.into_keys().next().unwrap();
    // Let the child reach its tool.
    while models.child_count() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    models.then(calls(&[("task_cancel", json!({"task_id": task_id}))]));
    agent.call("stop it", ctx("u1", "s1")).await.unwrap();
    let result = tool_results(&models.parent_requests()).pop().unwrap();
    assert!(result.0.contains("status: cancelled"), "{result:?}");
    assert_eq!(
        task_file(dir.path(), "u1", "s1").tasks[&task_id].status,
        TaskStatus::Cancelled
    );
    tokio::time::sleep(Duration::from_secs(5_000)).await;
    assert_eq!(models.child_count(), 1, "no model call after the cancel");
}

#[tokio::test(start_paused = true)]
async fn a_failing_child_is_the_spawns_error_result_not_a_stream_error() {
    let dir = tempfile::tempdir().unwrap();
    let (models, model) = Models::new(|_| Reply::error(ScriptedError::InvalidRequest));
    models.then(calls(&[(
        "agent_spawn",
        json!({"agent_id": "researcher", "task": "t"}),
    )]));
    let agent = parent(dir.path(), &model);
    let events = collect(agent.stream("go", ctx("u1", "s1"))).await;
    assert!(matches!(events.last().unwrap().kind, EventKind::Final { .. }));
    assert!(
        !events
            .iter()
            .any(|event| event.source.is_none() && matches!(event.kind, EventKind::Error { .. }))
    );
    let result = tool_results(&models.parent_requests()).pop().unwrap();
    assert!(result.1 && result.0.contains("status: failed"), "{result:?}");
}

#[tokio::test(start_paused = true)]
async fn a_task_past_its_time_limit_ends_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (models, model) = Models::new(|_| Reply::text("too late").delayed(Duration::from_secs(1_000)));
    models.then(calls(&[(
        "agent_spawn",
        json!({"agent_id": "researcher", "task": "t", "timeout_seconds": 0}),
    )]));
    let config = SubagentsConfig {
        task_timeout: Duration::from_secs(20),
        ..SubagentsConfig::default()
    };
    let agent = parent_with(dir.path(), &model, config);
    agent.call("go", ctx("u1", "s1")).await.unwrap();
    agent.wait_for_tasks().await;
    let record = task_file(dir.path(), "u1", "s1").tasks.into_values().next().unwrap();
    assert_eq!(record.status, TaskStatus::Timeout);
    agent.call("next", ctx("u1", "s1")).await.unwrap();
    assert!(reminders(&models.parent_requests())[0].contains("status: timeout"));
}

#[tokio::test(start_paused = true)]
async fn background_tasks_left_at_shutdown_end_cancelled_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (models, model) = Models::new(|_| Reply::text("never").delayed(Duration::from_secs(1_000)));
    models.then(calls(&[(
        "agent_spawn",
        json!({"agent_id": "researcher", "task": "t", "timeout_seconds": 0}),
    )]));
    let agent = parent(dir.path(), &model);
    agent.call("go", ctx("u1", "s1")).await.unwrap();
    agent.shutdown(Duration::from_secs(5)).await;
    let record = task_file(dir.path(), "u1", "s1").tasks.into_values().next().unwrap();
    assert_eq!(record.status, TaskStatus::Cancelled);
    assert!(record.result.unwrap().contains("shut down"));
}

#[tokio::test(start_paused = true)]
async fn a_task_whose_runner_died_becomes_lost_and_is_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let (models, model) = Models::new(|_| Reply::text("unused"));
    let tasks = dir.path().join("u1/agents/harness/tasks");
    std::fs::create_dir_all(&tasks).unwrap();
    let file = json!({"v": 1, "tasks": {"task-dead": {
        "task_id": "task-dead", "agent_id": "researcher", "child_session": "sub.s1.researcher.task-dead",
        "status": "running", "runner": "runner-killed", "delivered": false, "heartbeat_ms": 1
    }}});
    std::fs::write(tasks.join("s1.json"), file.to_string()).unwrap();
    let agent = parent(dir.path(), &model);
    agent.call("next", ctx("u1", "s1")).await.unwrap();
    let record = &task_file(dir.path(), "u1", "s1").tasks["task-dead"];
    assert_eq!(record.status, TaskStatus::Lost);
    assert!(record.result.as_deref().unwrap().contains("runner-killed"));
    let pushed = reminders(&models.parent_requests());
    assert_eq!(pushed.len(), 1);
    assert!(pushed[0].contains("task-dead") && pushed[0].contains("status: lost"));
}

#[tokio::test(start_paused = true)]
async fn fan_out_and_the_call_budget_are_enforced_naming_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let (models, model) = Models::new(|_| Reply::text("ok"));
    let spawn = json!({"agent_id": "researcher", "task": "t"});
    models.then(calls(&[
        ("agent_spawn", spawn.clone()),
        ("agent_spawn", spawn.clone()),
        ("agent_spawn", spawn.clone()),
    ]));
    models.then(calls(&[("agent_spawn", spawn.clone())]));
    let config = SubagentsConfig {
        max_fanout: 2,
        max_spawns_per_call: 2,
        ..SubagentsConfig::default()
    };
    let agent = parent_with(dir.path(), &model, config);
    agent.call("go", ctx("u1", "s1")).await.unwrap();
    let results = tool_results(&models.parent_requests());
    let refused: Vec<_> = results.iter().filter(|(_, error)| *error).collect();
    assert_eq!(refused.len(), 2, "{results:?}");
    assert!(refused[0].0.contains("max_fanout = 2"), "{refused:?}");
    assert!(refused[1].0.contains("max_spawns_per_call = 2"), "{refused:?}");
    assert_eq!(models.child_count(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_leaf_child_is_not_offered_the_spawn_tools_and_cannot_call_them() {
    let dir = tempfile::tempdir().unwrap();
    let (models, model) = Models::new(|request| {
        if request.messages.iter().any(|msg| msg.role == Role::Tool) {
            Reply::text("child done")
        } else {
            Reply::tool_call("agent_spawn", json!({"agent_id": "researcher", "task": "deeper"}))
        }
    });
    models.then(calls(&[(
        "agent_spawn",
        json!({"agent_id": "researcher", "task": "t"}),
    )]));
    let agent = parent(dir.path(), &model);
    agent.call("go", ctx("u1", "s1")).await.unwrap();
    assert_eq!(models.child_count(), 2, "no grandchild ran");
    let child = models.child_calls.lock().unwrap()[0].clone();
    assert!(
        child
            .tools
            .iter()
            .all(|spec| !spec.name.starts_with("agent_") && !spec.name.starts_with("task_"))
    );
    assert!(
        child.tools.iter().any(|spec| spec.name == "sleep"),
        "the child inherits the parent's tools"
    );
    let refused = models.child_calls.lock().unwrap()[1].clone();
    let text: String = refused
        .messages
        .iter()
        .filter(|msg| msg.role == Role::Tool)
        .map(|msg| format!("{:?}", msg.content))
        .collect();
    assert!(text.contains("not available"), "{text}");
}

#[tokio::test]
async fn declarations_merge_and_a_malformed_file_is_a_named_warning() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("subagents")).unwrap();
    std::fs::write(
        dir.path().join("subagents/reviewer.md"),
        "---\ndescription: Reviews diffs\n---\nYou review.\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("subagents/secret.md"),
        "---\ndescription: hidden one\nhidden: true\n---\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("subagents/broken.md"), "---\nhidden: true\n---\n").unwrap();
    let (models, model) = Models::new(|_| Reply::text("x"));
    let agent = parent(dir.path(), &model);
    let warnings = agent.subagent_warnings();
    assert_eq!(warnings.len(), 1);
    assert_eq!(
        (warnings[0].file.as_str(), warnings[0].key.as_str()),
        ("subagents/broken.md", "description")
    );
    agent.call("hi", ctx("u1", "s1")).await.unwrap();
    let prompt = system_text(&models.parent_requests()[0]);
    assert!(prompt.contains("`general-purpose`") && prompt.contains("`reviewer`: Reviews diffs"));
    assert!(prompt.contains("`researcher`: Finds facts"));
    assert!(!prompt.contains("secret") && !prompt.contains("broken"));
    assert!(!prompt.contains("You review."), "only id and description are listed");
}

#[tokio::test]
async fn subagents_off_offers_no_tools() {
    let dir = tempfile::tempdir().unwrap();
    let (models, model) = Models::new(|_| Reply::text("x"));
    let config = SubagentsConfig {
        enabled: false,
        ..SubagentsConfig::default()
    };
    let agent = parent_with(dir.path(), &model, config);
    assert!(!agent.capabilities().contains(&"subagents"));
    agent.call("hi", ctx("u1", "s1")).await.unwrap();
    assert!(
        models.parent_requests()[0]
            .tools
            .iter()
            .all(|spec| spec.name != "agent_spawn")
    );
}

#[tokio::test(start_paused = true)]
async fn agent_send_continues_a_labelled_instance_with_its_history() {
    let dir = tempfile::tempdir().unwrap();
    let (models, model) = Models::new(|request| {
        let users = request.messages.iter().filter(|msg| msg.role == Role::User).count();
        Reply::text(format!("seen {users} messages"))
    });
    models.then(calls(&[(
        "agent_spawn",
        json!({"agent_id": "researcher", "task": "first", "label": "one"}),
    )]));
    models.then(calls(&[("agent_send", json!({"label": "one", "message": "second"}))]));
    models.then(calls(&[(
        "agent_send",
        json!({"agent_key": "agent:researcher:one", "message": "third"}),
    )]));
    let agent = parent(dir.path(), &model);
    agent.call("go", ctx("u1", "s1")).await.unwrap();
    let results = tool_results(&models.parent_requests());
    assert!(results[0].0.contains("seen 1 messages"), "{results:?}");
    assert!(results[1].0.contains("seen 2 messages"), "{results:?}");
    assert!(results[2].0.contains("seen 3 messages"), "{results:?}");
}

#[tokio::test(start_paused = true)]
async fn a_users_own_spec_file_shadows_the_shared_declaration_for_that_user() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("u1/subagents")).unwrap();
    std::fs::write(
        dir.path().join("u1/subagents/researcher.md"),
        format!("---\ndescription: mine\n---\n{CHILD} USER-OVERRIDE\n"),
    )
    .unwrap();
    let (models, model) = Models::new(|request| {
        Reply::text(if system_text(request).contains("USER-OVERRIDE") {
            "override"
        } else {
            "shared"
        })
    });
    let spawn = json!({"agent_id": "researcher", "task": "t"});
    models.then(calls(&[("agent_spawn", spawn.clone())]));
    let agent = parent(dir.path(), &model);
    agent.call("go", ctx("u1", "s1")).await.unwrap();
    assert!(tool_results(&models.parent_requests())[0].0.contains("override"));
    models.then(calls(&[("agent_spawn", spawn)]));
    agent.call("go", ctx("u2", "s1")).await.unwrap();
    let other = tool_results(&models.parent_requests());
    assert!(other[0].0.contains("shared"), "{other:?}");
}

#[tokio::test(start_paused = true)]
async fn a_long_background_result_is_pushed_back_as_a_preview_with_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let long = "x".repeat(5_000);
    let answer = long.clone();
    let (models, model) = Models::new(move |_| Reply::text(answer.clone()));
    models.then(calls(&[(
        "agent_spawn",
        json!({"agent_id": "researcher", "task": "t", "timeout_seconds": 0}),
    )]));
    let agent = parent(dir.path(), &model);
    agent.call("go", ctx("u1", "s1")).await.unwrap();
    agent.wait_for_tasks().await;
    agent.call("next", ctx("u1", "s1")).await.unwrap();
    let pushed = reminders(&models.parent_requests());
    assert_eq!(pushed.len(), 1);
    assert!(pushed[0].len() < 3_000, "the reminder is bounded");
    let task_id = task_file(dir.path(), "u1", "s1").tasks.into_keys().next().unwrap();
    let path = format!("large_tool_results/harness/{task_id}.txt");
    assert!(pushed[0].contains(&path), "{}", &pushed[0][pushed[0].len() - 200..]);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("u1").join(&path)).unwrap(),
        long
    );
}

#[tokio::test(start_paused = true)]
async fn forced_sync_waits_stops_the_child_on_expiry_and_keeps_the_limits() {
    let dir = tempfile::tempdir().unwrap();
    let (models, model) = Models::new(|_| Reply::text("too slow").delayed(Duration::from_secs(100)));
    let background = json!({"agent_id": "researcher", "task": "t", "timeout_seconds": 0});
    models.then(calls(&[
        ("agent_spawn", background.clone()),
        ("agent_spawn", background),
    ]));
    let config = SubagentsConfig {
        max_fanout: 1,
        ..SubagentsConfig::default()
    };
    let agent = parent_with(dir.path(), &model, config);
    let mut forced = ctx("u1", "s1");
    forced.insert(harness::subagents::ForceSync {
        timeout: Some(Duration::from_secs(5)),
    });
    let started = tokio::time::Instant::now();
    agent.call("go", forced).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(100));
    // The two spawns of the step run concurrently: either one may take the single slot.
    let results = tool_results(&models.parent_requests());
    assert_eq!(results.len(), 2, "{results:?}");
    let timed_out = results
        .iter()
        .filter(|(text, error)| *error && text.contains("status: timeout\n"))
        .count();
    let refused = results
        .iter()
        .filter(|(text, error)| *error && text.contains("max_fanout = 1"))
        .count();
    assert_eq!((timed_out, refused), (1, 1), "{results:?}");
    let record = task_file(dir.path(), "u1", "s1").tasks.into_values().next().unwrap();
    assert_eq!((record.status, record.delivered), (TaskStatus::Timeout, true));
    agent.call("next", ctx("u1", "s1")).await.unwrap();
    assert!(reminders(&models.parent_requests()).is_empty());
}
