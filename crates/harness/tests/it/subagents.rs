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
        source.session_id.starts_with("sub.researcher."),
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

fn spawn_call(task: &str, label: &str) -> Reply {
    calls(&[(
        "agent_spawn",
        json!({"agent_id": "researcher", "task": task, "label": label, "timeout_seconds": 60}),
    )])
}

fn last_is_tool_result(request: &ChatRequest) -> bool {
    request.messages.last().is_some_and(|msg| msg.role == Role::Tool)
}

#[tokio::test(start_paused = true)]
async fn an_isolated_child_gets_its_own_layer_per_parent_session() {
    let dir = tempfile::tempdir().unwrap();
    // The child writes `notes.txt` with its task, then answers.
    let (models, model) = Models::new(|request| {
        if last_is_tool_result(request) {
            Reply::text("noted")
        } else {
            Reply::tool_call(
                "write_file",
                json!({"path": "notes.txt", "content": last_user_text(request)}),
            )
        }
    });
    models.then(spawn_call("alpha", "same"));
    let agent = parent(dir.path(), &model);
    agent.call("go", ctx("u1", "s1")).await.unwrap();
    models.then(spawn_call("beta", "same"));
    agent.call("go", ctx("u1", "s2")).await.unwrap();
    assert!(
        tool_results(&models.parent_requests())
            .iter()
            .all(|(text, error)| !error && text.contains("noted")),
        "both children wrote their file (a shared layer would refuse the second)"
    );
    let layer = |session: &str| dir.path().join("u1/agents/harness/subagents/researcher").join(session);
    assert_eq!(std::fs::read_to_string(layer("s1").join("notes.txt")).unwrap(), "alpha");
    assert_eq!(std::fs::read_to_string(layer("s2").join("notes.txt")).unwrap(), "beta");
    assert!(
        !dir.path().join("u1/notes.txt").exists(),
        "nothing in the parent's files"
    );
    // Each child's transcript lives in its own layer.
    for session in ["s1", "s2"] {
        let file = task_file(dir.path(), "u1", session);
        let child = &file.tasks.values().next().unwrap().child_session;
        assert!(child.starts_with("sub.researcher."), "{child}");
        let transcript = layer(session).join(format!("agents/researcher/sessions/{child}.log.jsonl"));
        assert!(transcript.exists(), "{}", transcript.display());
    }
    // A second spawn of the same label in s1 continues s1's child only.
    models.then(calls(&[(
        "agent_send",
        json!({"label": "same", "message": "again", "timeout_seconds": 60}),
    )]));
    agent.call("more", ctx("u1", "s1")).await.unwrap();
    let last_child = models.child_calls.lock().unwrap().last().cloned().unwrap();
    let history: String = last_child.messages.iter().map(|msg| msg.text()).collect();
    assert!(history.contains("alpha") && !history.contains("beta"), "{history}");
}

#[tokio::test(start_paused = true)]
async fn a_shared_child_uses_the_parents_layer() {
    let dir = tempfile::tempdir().unwrap();
    let (models, model) = Models::new(|request| {
        if last_is_tool_result(request) {
            Reply::text("noted")
        } else {
            Reply::tool_call("write_file", json!({"path": "shared.txt", "content": "x"}))
        }
    });
    models.then(spawn_call("t", "one"));
    let mut declaration = researcher();
    declaration.workspace_mode = harness::subagents::WorkspaceMode::Shared;
    let agent = builder()
        .workspace(dir.path())
        .model(model.clone())
        .subagent(declaration)
        .build()
        .unwrap();
    agent.call("go", ctx("u1", "s1")).await.unwrap();
    assert!(dir.path().join("u1/shared.txt").exists());
}

#[tokio::test(start_paused = true)]
async fn a_spec_files_model_key_picks_the_childs_model() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("child-model.json");
    std::fs::write(
        &script,
        json!({"replies": [{"text": "answer from the second model"}]}).to_string(),
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("subagents")).unwrap();
    std::fs::write(
        dir.path().join("subagents/coder.md"),
        format!(
            "---\ndescription: Writes code\nmodel: scripted:{}\n---\n{CHILD} You code.\n",
            script.display()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("subagents/broken.md"),
        "---\ndescription: Needs a key\nmodel: deepseek:deepseek-chat\n---\nbody\n",
    )
    .unwrap();
    let (models, model) = Models::new(|_| Reply::text("answer from the parent's model"));
    models.then(calls(&[
        ("agent_spawn", json!({"agent_id": "coder", "task": "t"})),
        ("agent_spawn", json!({"agent_id": "broken", "task": "t"})),
    ]));
    let agent = parent(dir.path(), &model);
    agent.call("go", ctx("u1", "s1")).await.unwrap();
    let results = tool_results(&models.parent_requests());
    let coder = results
        .iter()
        .find(|(text, _)| text.contains("status: completed"))
        .unwrap();
    assert!(coder.0.contains("answer from the second model"), "{results:?}");
    assert_eq!(models.child_count(), 0, "the parent's model never served the child");
    let broken = results
        .iter()
        .find(|(text, _)| text.contains("DEEPSEEK_API_KEY"))
        .unwrap();
    assert!(broken.1, "{broken:?}");
    assert!(
        broken.0.contains("subagents/broken.md") && broken.0.contains("`model`"),
        "names the file and the key: {}",
        broken.0
    );
}

fn costly(tokens: u64) -> Reply {
    Reply::tool_call("sleep", json!({"ms": 1})).with_usage(harness_core::Usage {
        input_tokens: tokens,
        output_tokens: 0,
        ..harness_core::Usage::default()
    })
}

#[tokio::test(start_paused = true)]
async fn a_child_past_its_token_budget_stops_and_the_result_names_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let (models, model) = Models::new(|_| costly(600));
    models.then(calls(&[(
        "agent_spawn",
        json!({"agent_id": "researcher", "task": "t", "timeout_seconds": 60}),
    )]));
    let config = SubagentsConfig {
        child_token_budget: Some(1_000),
        ..SubagentsConfig::default()
    };
    let agent = parent_with(dir.path(), &model, config);
    agent.call("go", ctx("u1", "s1")).await.unwrap();
    let result = tool_results(&models.parent_requests()).pop().unwrap();
    assert!(result.1 && result.0.contains("status: failed"), "{result:?}");
    assert!(
        result.0.contains("token budget exceeded") && result.0.contains("child_token_budget"),
        "{result:?}"
    );
    assert_eq!(
        models.child_count(),
        2,
        "stopped at the step boundary after the budget was passed"
    );
    let record = task_file(dir.path(), "u1", "s1").tasks.into_values().next().unwrap();
    assert_eq!(record.status, TaskStatus::Failed);
    assert_eq!(record.progress.unwrap().tokens, 1_200);

    // A declaration's `max_tokens` applies on the background path too.
    let dir = tempfile::tempdir().unwrap();
    let (models, model) = Models::new(|_| costly(600));
    models.then(calls(&[(
        "agent_spawn",
        json!({"agent_id": "researcher", "task": "t", "timeout_seconds": 0}),
    )]));
    let mut declaration = researcher();
    declaration.max_tokens = Some(100);
    let agent = builder()
        .workspace(dir.path())
        .model(model.clone())
        .subagent(declaration)
        .tool(typed(Sleep))
        .build()
        .unwrap();
    agent.call("go", ctx("u1", "s1")).await.unwrap();
    agent.wait_for_tasks().await;
    let record = task_file(dir.path(), "u1", "s1").tasks.into_values().next().unwrap();
    assert_eq!(record.status, TaskStatus::Failed);
    assert!(record.result.unwrap().contains("`max_tokens`"));
    assert_eq!(models.child_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn task_cancel_from_another_process_stops_the_runners_child() {
    let dir = tempfile::tempdir().unwrap();
    let (models, model) = Models::new(|_| Reply::tool_call("sleep", json!({"ms": 1_000_000})));
    models.then(calls(&[(
        "agent_spawn",
        json!({"agent_id": "researcher", "task": "t", "timeout_seconds": 0}),
    )]));
    let runner = parent(dir.path(), &model);
    runner.call("go", ctx("u1", "s1")).await.unwrap();
    let task_id = task_file(dir.path(), "u1", "s1").tasks.into_keys().next().unwrap();
    while models.child_count() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A second agent instance on the same workspace (another process's view).
    let other = parent(dir.path(), &model);
    models.then(calls(&[("task_cancel", json!({"task_id": task_id}))]));
    other.call("stop it", ctx("u1", "s1")).await.unwrap();
    let result = tool_results(&models.parent_requests()).pop().unwrap();
    assert!(result.0.contains("status: cancelled"), "{result:?}");
    let record = &task_file(dir.path(), "u1", "s1").tasks[&task_id];
    assert_eq!(record.status, TaskStatus::Cancelled);
    assert!(record.result.as_deref().unwrap().contains("another process"));
    tokio::time::sleep(Duration::from_secs(5_000)).await;
    assert_eq!(models.child_count(), 1, "no model call after the cancel");

    // The library API does the same; an unknown task is `None`.
    assert!(
        other
            .cancel_task(ctx("u1", "s1"), "task-none", Duration::from_secs(1))
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test(start_paused = true)]
async fn a_background_tasks_events_are_readable_from_its_task() {
    let dir = tempfile::tempdir().unwrap();
    let (models, model) = Models::new(|request| {
        if last_is_tool_result(request) {
            Reply::text("found it").delayed(Duration::from_secs(5))
        } else {
            Reply::tool_call("sleep", json!({"ms": 10}))
        }
    });
    models.then(calls(&[(
        "agent_spawn",
        json!({"agent_id": "researcher", "task": "t", "timeout_seconds": 0}),
    )]));
    let agent = parent(dir.path(), &model);
    agent.call("go", ctx("u1", "s1")).await.unwrap();
    let task_id = task_file(dir.path(), "u1", "s1").tasks.into_keys().next().unwrap();
    let stream = agent.watch_task(ctx("u1", "s1"), &task_id).await.unwrap().unwrap();
    let watched: Vec<harness_core::AgentEvent> = futures::StreamExt::collect(stream).await;
    assert!(
        watched
            .iter()
            .all(|event| event.source.as_ref().unwrap().agent_id == "researcher")
    );
    assert!(
        matches!(watched.last().unwrap().kind, EventKind::Final { .. }),
        "ends with the answer"
    );
    assert!(
        watched
            .iter()
            .any(|event| matches!(&event.kind, EventKind::ToolCallEnd { name, .. } if name == "sleep"))
    );

    let events = agent.task_events(ctx("u1", "s1"), &task_id).await.unwrap().unwrap();
    assert!(events.local);
    assert_eq!(events.events, watched);
    let progress = events.record.progress.clone().unwrap();
    assert_eq!((progress.steps, progress.tool_calls), (2, 1));
    assert_eq!(progress.last_tool.as_deref(), Some("sleep"));

    models.then(calls(&[(
        "task_output",
        json!({"task_id": task_id, "block": false, "events": true}),
    )]));
    agent.call("what did it do", ctx("u1", "s1")).await.unwrap();
    let output = tool_results(&models.parent_requests()).pop().unwrap().0;
    assert!(
        output.contains("tool call sleep") && output.contains("answered: found it"),
        "{output}"
    );
    assert!(output.contains("progress: 2 steps, 1 tool calls"), "{output}");

    // Another process sees the persisted summary only.
    let other = parent(dir.path(), &model);
    let remote = other.task_events(ctx("u1", "s1"), &task_id).await.unwrap().unwrap();
    assert!(!remote.local && remote.events.is_empty());
    assert_eq!(remote.record.progress.unwrap().steps, 2);
    assert!(other.watch_task(ctx("u1", "s1"), &task_id).await.unwrap().is_none());
    assert!(
        agent.task_events(ctx("u1", "s2"), &task_id).await.unwrap().is_none(),
        "per session"
    );
}

/// A tool that spawns through the public API with its own call's context.
struct SpawnFromTool(Arc<std::sync::OnceLock<HarnessAgent>>);

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

#[harness_core::async_trait]
impl harness_core::TypedTool for SpawnFromTool {
    const NAME: &'static str = "spawn_from_code";
    const DESCRIPTION: &'static str = "Spawns from code.";
    // Like `agent_spawn`: the child stays in the caller's area (no approval needed).
    const ANNOTATIONS: harness_core::ToolAnnotations = harness_core::ToolAnnotations::new().closed_world();
    type Args = NoArgs;

    async fn call(
        &self,
        _args: NoArgs,
        ctx: &harness_core::ToolContext,
    ) -> Result<harness_core::ToolOutput, harness_core::ToolError> {
        let agent = self.0.get().unwrap();
        let request = harness::subagents::SpawnRequest::new("researcher", "nested").wait(Duration::from_secs(5));
        match agent.spawn_subagent(ctx.runtime.clone(), request).await {
            Ok(outcome) => Ok(harness_core::ToolOutput::text(format!("spawned {:?}", outcome.status))),
            Err(err) => Err(harness_core::ToolError::failed(err.to_string())),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn programmatic_spawns_keep_every_limit() {
    let dir = tempfile::tempdir().unwrap();
    let slot = Arc::new(std::sync::OnceLock::new());
    let (models, model) = Models::new(|request| {
        if last_is_tool_result(request) {
            Reply::text("child done")
        } else if last_user_text(request).contains("from code") {
            Reply::tool_call("spawn_from_code", json!({}))
        } else {
            Reply::text(format!("did {}", last_user_text(request))).delayed(Duration::from_secs(10))
        }
    });
    let config = SubagentsConfig {
        max_fanout: 1,
        max_spawns_per_call: 2,
        ..SubagentsConfig::default()
    };
    let agent = builder()
        .workspace(dir.path())
        .model(model.clone())
        .subagents(config)
        .subagent(researcher())
        .tool(typed(SpawnFromTool(Arc::clone(&slot))))
        .build()
        .unwrap();
    let _ = slot.set(agent.clone());
    use harness::subagents::{SpawnError, SpawnRequest};

    // Sync: the answer comes back.
    let done = agent
        .spawn_subagent(
            ctx("u1", "s1"),
            SpawnRequest::new("researcher", "a").wait(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    assert_eq!(
        (done.status, done.result.as_deref()),
        (TaskStatus::Completed, Some("did a"))
    );
    // Fan-out: one running at a time.
    let running = agent
        .spawn_subagent(ctx("u1", "s1"), SpawnRequest::new("researcher", "b"))
        .await
        .unwrap();
    assert_eq!(running.status, TaskStatus::Running);
    let refused = agent
        .spawn_subagent(ctx("u1", "s1"), SpawnRequest::new("researcher", "c"))
        .await
        .unwrap_err();
    assert!(matches!(refused, SpawnError::Fanout { limit: 1 }), "{refused}");
    agent.wait_for_tasks().await;
    // The budget: two spawns of this session were made already.
    let refused = agent
        .spawn_subagent(ctx("u1", "s1"), SpawnRequest::new("researcher", "d"))
        .await
        .unwrap_err();
    assert!(matches!(refused, SpawnError::CallBudget { limit: 2 }), "{refused}");
    assert!(refused.to_string().contains("max_spawns_per_call"));
    // Depth: a child's own call cannot spawn through the API either.
    models.then(spawn_call("from code", "deep"));
    agent.call("go", ctx("u1", "s2")).await.unwrap();
    let child_results: Vec<_> = models
        .child_calls
        .lock()
        .unwrap()
        .iter()
        .flat_map(|request| tool_results(std::slice::from_ref(request)))
        .collect();
    assert!(
        child_results
            .iter()
            .any(|(text, error)| *error && text.contains("max_depth = 1")),
        "{child_results:?}"
    );
    let tasks = agent.tasks(ctx("u1", "s2")).await.unwrap();
    assert_eq!(tasks.len(), 1, "only the parent's spawn made a task: {tasks:?}");
    // Unknown ids and empty tasks are errors that say so.
    let unknown = agent
        .spawn_subagent(ctx("u1", "s3"), SpawnRequest::new("nobody", "x"))
        .await
        .unwrap_err();
    assert!(unknown.to_string().contains("unknown subagent"), "{unknown}");
}

/// Problems 1 and 2 of the trust boundary: a per-user declaration (which the model can
/// write) that names a URL, an agent, headers, a `${VAR}` or a model with its own `@URL`
/// is refused with a result naming the file and the key, and nothing reaches the URL.
#[tokio::test]
async fn a_per_user_declaration_cannot_name_a_url_headers_variables_or_a_model_url() {
    let dir = tempfile::tempdir().unwrap();
    let (url, hits) = harness_test_support::net::counting_listener().await;
    let own = dir.path().join("u1/subagents");
    std::fs::create_dir_all(&own).unwrap();
    let files = [
        ("remote", format!("url: {url}"), "`url`"),
        ("named", format!("url: {url}\nagent: helper"), "`url`"),
        ("keyed", format!("model: openai:gpt-4o@{url}/v1"), "`model`"),
        (
            "compatible",
            format!("model: openai-compatible:qwen@{url}/v1"),
            "`model`",
        ),
        ("variable", "tools: [\"${OPENAI_API_KEY}\"]".to_owned(), "`${VAR}`"),
    ];
    for (id, front, _) in &files {
        std::fs::write(
            own.join(format!("{id}.md")),
            format!("---\ndescription: mine\n{front}\n---\n{CHILD} x\n"),
        )
        .unwrap();
    }
    let (models, model) = Models::new(|_| Reply::text("child ran"));
    let spawns: Vec<(&str, Value)> = files
        .iter()
        .map(|(id, _, _)| ("agent_spawn", json!({"agent_id": id, "task": "t"})))
        .collect();
    models.then(calls(&spawns));
    let agent = parent(dir.path(), &model);
    agent.call("go", ctx("u1", "s1")).await.unwrap();
    let results = tool_results(&models.parent_requests());
    assert_eq!(results.len(), files.len(), "{results:?}");
    for (id, _, key) in &files {
        let result = results
            .iter()
            .find(|(text, _)| text.contains(&format!("u1/subagents/{id}.md")))
            .unwrap_or_else(|| panic!("no result names u1/subagents/{id}.md: {results:?}"));
        assert!(result.1 && result.0.contains(key), "{id}: {result:?}");
        assert!(result.0.contains("only the workspace root"), "{result:?}");
    }
    assert_eq!(models.child_count(), 0, "no child ran");
    assert_eq!(
        hits.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "no request may reach {url}"
    );
}

fn now_ms() -> u64 {
    u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// A task with a lease (one another replica takes over) is swept `lost` only after twice its
/// lease, with a reason saying no replica took it over; one without a lease after 30 s.
#[tokio::test]
async fn a_task_with_a_lease_is_lost_only_after_twice_its_lease() {
    let dir = tempfile::tempdir().unwrap();
    let (_models, model) = Models::new(|_| Reply::text("unused"));
    let tasks = dir.path().join("u1/agents/harness/tasks");
    std::fs::create_dir_all(&tasks).unwrap();
    let record = |id: &str, lease: u64, age: u64| {
        json!({"task_id": id, "agent_id": "researcher", "child_session": format!("sub.s1.researcher.{id}"),
            "status": "running", "runner": "runner-elsewhere", "delivered": false,
            "heartbeat_ms": now_ms() - age, "lease_ms": lease})
    };
    let file = json!({"v": 1, "tasks": {
        "task-held": record("task-held", 60_000, 100_000),
        "task-expired": record("task-expired", 20_000, 100_000),
    }});
    std::fs::write(tasks.join("s1.json"), file.to_string()).unwrap();
    let agent = parent(dir.path(), &model);
    agent.call("next", ctx("u1", "s1")).await.unwrap();
    let file = task_file(dir.path(), "u1", "s1");
    assert_eq!(
        file.tasks["task-held"].status,
        TaskStatus::Running,
        "within twice its lease"
    );
    let lost = &file.tasks["task-expired"];
    assert_eq!(lost.status, TaskStatus::Lost);
    assert!(
        lost.result.as_deref().unwrap().contains("no replica took it over"),
        "{lost:?}"
    );
}

/// The runner-id fence: once another runner claimed a task's record, the runner that started
/// it stops its child and writes nothing more to the record.
#[tokio::test(start_paused = true)]
async fn a_runner_whose_task_was_claimed_elsewhere_writes_nothing_more() {
    let dir = tempfile::tempdir().unwrap();
    let (models, model) = Models::new(|_| Reply::text("never").delayed(Duration::from_secs(1_000)));
    models.then(calls(&[(
        "agent_spawn",
        json!({"agent_id": "researcher", "task": "t", "timeout_seconds": 0}),
    )]));
    let agent = parent(dir.path(), &model);
    agent.call("go", ctx("u1", "s1")).await.unwrap();
    let path = dir.path().join("u1/agents/harness/tasks/s1.json");
    let mut file: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let (id, record) = file["tasks"].as_object_mut().unwrap().iter_mut().next().unwrap();
    let id = id.clone();
    assert_eq!(record["status"], "running");
    record["runner"] = json!("runner-other-replica");
    record["heartbeat_ms"] = json!(7);
    std::fs::write(&path, file.to_string()).unwrap();
    agent.wait_for_tasks().await;
    let claimed = &task_file(dir.path(), "u1", "s1").tasks[&id];
    assert_eq!(claimed.status, TaskStatus::Running, "{claimed:?}");
    assert_eq!(claimed.runner, "runner-other-replica");
    assert_eq!(claimed.heartbeat_ms, 7, "no heartbeat over the claim");
}
