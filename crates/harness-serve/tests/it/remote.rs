//! Remote subagents: a local parent (scripted model) spawns a child declared with `url`,
//! served by a real gateway on 127.0.0.1:0 (the `helper` agent of [`Server`]).

use crate::support::Server;
use harness::HarnessAgent;
use harness::subagents::{SubagentDeclaration, TaskStatus};
use harness_core::{AgentEvent, ChatRequest, EventKind, Role, RuntimeContext, SessionId, UserId};
use harness_models::{Reply, ScriptedModel, ScriptedToolCall};
use harness_serve::ServeOptions;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn ctx(user: &str, session: &str) -> RuntimeContext {
    RuntimeContext::for_user(UserId::parse(user).unwrap()).with_session(SessionId::parse(session).unwrap())
}

fn tool_text(request: &ChatRequest) -> Option<(String, bool)> {
    let last = request.messages.last().filter(|msg| msg.role == Role::Tool)?;
    last.content.iter().find_map(|block| match block {
        harness_core::Block::ToolResult { content, is_error, .. } => {
            Some((harness_core::join_text(content), *is_error))
        }
        _ => None,
    })
}

/// A parent whose model spawns `remote` with the user's text as the task (`bg ...`: in the
/// background), then answers `parent saw: <tool result>`. Other texts (`next`) get `ok`.
/// The tool results it saw are kept, and so are the requests.
struct Parent {
    agent: HarnessAgent,
    results: Arc<Mutex<Vec<(String, bool)>>>,
    requests: Arc<Mutex<Vec<ChatRequest>>>,
    _dir: tempfile::TempDir,
}

fn parent(declaration: SubagentDeclaration) -> Parent {
    parent_in(tempfile::tempdir().unwrap(), |builder| builder.subagent(declaration))
}

fn parent_in(
    dir: tempfile::TempDir,
    configure: impl FnOnce(harness::HarnessAgentBuilder) -> harness::HarnessAgentBuilder,
) -> Parent {
    let results = Arc::new(Mutex::new(Vec::new()));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let (seen, all) = (Arc::clone(&results), Arc::clone(&requests));
    let model = ScriptedModel::from_fn(move |request: &ChatRequest| {
        all.lock().unwrap().push(request.clone());
        if let Some((text, is_error)) = tool_text(request) {
            seen.lock().unwrap().push((text.clone(), is_error));
            return Reply::text(format!("parent saw: {text}"));
        }
        let user = request
            .messages
            .iter()
            .rev()
            .find(|msg| msg.role == Role::User)
            .map(|msg| msg.text())
            .unwrap_or_default();
        let (task, timeout) = match user.strip_prefix("bg ") {
            Some(task) => (task.to_owned(), 0),
            None if user.starts_with("research") => (user.clone(), 30),
            None => return Reply::text("ok"),
        };
        Reply {
            tool_calls: vec![ScriptedToolCall {
                name: "agent_spawn".to_owned(),
                arguments: json!({"agent_id": "remote", "task": task, "timeout_seconds": timeout}),
                id: None,
            }],
            ..Reply::default()
        }
    });
    let mut memory = harness_memory::MemoryConfig::default();
    memory.enabled = false;
    // A remote call is open-world: it asks unless a rule allows it (tested below).
    let allow_spawns = harness::permissions::Policy {
        allow: vec![harness::permissions::Rule::parse("agent_spawn").unwrap()],
        ..harness::permissions::Policy::default()
    };
    let agent = configure(
        HarnessAgent::builder()
            .memory(memory)
            .workspace(dir.path())
            .name("main")
            .permissions(allow_spawns)
            .model(model),
    )
    .build()
    .unwrap();
    Parent {
        agent,
        results,
        requests,
        _dir: dir,
    }
}

fn remote(url: &str) -> SubagentDeclaration {
    SubagentDeclaration {
        agent: Some("helper".to_owned()),
        ..SubagentDeclaration::remote("remote", "A served helper", url)
    }
}

/// The remote session's history as `(role, text)`, read as `user`.
async fn remote_history(server: &Server, user: &str, session: &str) -> Value {
    server
        .client
        .get(server.url(&format!("/api/agents/helper/sessions/{session}")))
        .header("X-Harness-User", user)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_sync_remote_spawn_returns_the_answer_and_forwards_events_with_their_source() {
    let server = Server::start(ServeOptions::default()).await;
    let parent = parent(remote(&server.base));
    let events: Vec<AgentEvent> =
        futures::StreamExt::collect(parent.agent.stream("research tides", ctx("u1", "s1"))).await;
    let final_text = events
        .iter()
        .find_map(|event| match &event.kind {
            EventKind::Final { message } if event.source.is_none() => Some(message.text()),
            _ => None,
        })
        .unwrap();
    assert!(
        final_text.starts_with("parent saw: status: completed") && final_text.ends_with("\n\nturn 1: research tides"),
        "{final_text}"
    );
    let forwarded: Vec<_> = events.iter().filter(|event| event.source.is_some()).collect();
    assert!(
        forwarded.iter().any(
            |event| matches!(&event.kind, EventKind::Final { message } if message.text() == "turn 1: research tides")
        ),
        "{forwarded:?}"
    );
    let source = forwarded[0].source.clone().unwrap();
    assert_eq!(
        (source.agent_id.as_str(), source.depth, source.path.as_str()),
        ("remote", 1, "main/remote")
    );
    assert!(source.session_id.starts_with("sub.remote."), "{source:?}");
    // The child session lives on the remote side, as the parent's user.
    let history = remote_history(&server, "u1", &source.session_id).await;
    assert_eq!(history["messages"].as_array().unwrap().len(), 2, "{history}");
    let other = server
        .client
        .get(server.url(&format!("/api/agents/helper/sessions/{}", source.session_id)))
        .header("X-Harness-User", "u2")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 404);
}

#[tokio::test]
async fn a_background_remote_task_completes_and_is_pushed_back_once() {
    let server = Server::start(ServeOptions::default()).await;
    let parent = parent(remote(&server.base));
    parent.agent.call("bg find the moon", ctx("u1", "s1")).await.unwrap();
    assert!(parent.results.lock().unwrap()[0].0.contains("status: running"));
    parent.agent.wait_for_tasks().await;
    let tasks = parent.agent.tasks(ctx("u1", "s1")).await.unwrap();
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0].status, TaskStatus::Completed);
    assert_eq!(tasks[0].result.as_deref(), Some("turn 1: find the moon"));
    parent.agent.call("next", ctx("u1", "s1")).await.unwrap();
    parent.agent.call("next", ctx("u1", "s1")).await.unwrap();
    let pushed = parent
        .requests
        .lock()
        .unwrap()
        .iter()
        .filter(|request| {
            request
                .messages
                .iter()
                .any(|msg| msg.text().contains("<system-reminder>") && msg.text().contains("turn 1: find the moon"))
        })
        .count();
    // The second `next` request still holds the first reminder in its history: one delivery,
    // seen by two requests; a second delivery would add a second reminder message.
    let last = parent.requests.lock().unwrap().last().cloned().unwrap();
    let reminders = last
        .messages
        .iter()
        .filter(|msg| msg.text().contains("<system-reminder>") && msg.text().contains("turn 1: find the moon"))
        .count();
    assert!(pushed >= 1);
    assert_eq!(reminders, 1);
}

#[tokio::test]
async fn task_cancel_cancels_the_remote_turn() {
    let server = Server::start(ServeOptions::default()).await;
    let parent = parent(remote(&server.base));
    // `wait` holds the remote model until the gate opens (it never does here).
    parent.agent.call("bg wait forever", ctx("u1", "s1")).await.unwrap();
    let task = parent.agent.tasks(ctx("u1", "s1")).await.unwrap().remove(0);
    // Let the remote turn start before cancelling it.
    for _ in 0..200 {
        let history = server
            .client
            .get(server.url(&format!("/api/agents/helper/sessions/{}/events", task.child_session)))
            .header("X-Harness-User", "u1")
            .send()
            .await
            .unwrap();
        if history.status() == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let record = parent
        .agent
        .cancel_task(ctx("u1", "s1"), &task.task_id, Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, TaskStatus::Cancelled, "{record:?}");
    // The remote turn ends cancelled (its event feed ends with a cancelled error).
    let response = server
        .client
        .get(server.url(&format!("/api/agents/helper/sessions/{}/events", task.child_session)))
        .header("X-Harness-User", "u1")
        .send()
        .await
        .unwrap();
    let events = crate::support::SseReader::new(response).rest().await;
    let last = events.last().unwrap().json();
    assert_eq!(
        (last["type"].as_str(), last["kind"].as_str()),
        (Some("error"), Some("cancelled")),
        "{last}"
    );
}

#[tokio::test]
async fn a_remote_that_is_down_or_refuses_is_the_spawns_error_result() {
    // Nothing listens there (not a port freed and hoped to stay free).
    let down = harness_test_support::net::REFUSED_URL.to_owned();
    let parent = parent(remote(&down));
    let events: Vec<AgentEvent> =
        futures::StreamExt::collect(parent.agent.stream("research tides", ctx("u1", "s1"))).await;
    assert!(
        !events
            .iter()
            .any(|event| event.source.is_none() && matches!(event.kind, EventKind::Error { .. })),
        "the parent's stream has no error"
    );
    let (text, is_error) = parent.results.lock().unwrap()[0].clone();
    assert!(is_error && text.contains("could not reach"), "{text}");

    // A server that answers 404 (no such agent): the status and the server's reason.
    let server = Server::start(ServeOptions::default()).await;
    let parent = crate::remote::parent(SubagentDeclaration::remote("remote", "No such agent", &server.base));
    parent.agent.call("research tides", ctx("u1", "s1")).await.unwrap();
    let (text, is_error) = parent.results.lock().unwrap()[0].clone();
    assert!(is_error && text.contains("404"), "{text}");
    let tasks = parent.agent.tasks(ctx("u1", "s1")).await.unwrap();
    assert_eq!(tasks[0].status, TaskStatus::Failed);
}

#[tokio::test]
async fn a_remote_file_with_an_authorization_header_from_a_variable_runs_as_the_keys_user() {
    use sha2::Digest;
    let mut options = ServeOptions::default();
    options.keys = vec![harness_serve::ServeKey {
        user: "alice".to_owned(),
        sha256: hex::encode(sha2::Sha256::digest(b"k-alice")),
    }];
    let server = Server::start(options).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("subagents")).unwrap();
    let spec = format!(
        "---\ndescription: A served helper\nurl: {}/\nagent: helper\nheaders:\n  Authorization: Bearer ${{REMOTE_KEY}}\n---\n",
        server.base
    );
    std::fs::write(dir.path().join("subagents/remote.md"), &spec).unwrap();
    std::fs::write(
        dir.path().join("subagents/broken.md"),
        "---\ndescription: d\nurl: http://127.0.0.1:9\nheaders:\n  Authorization: Bearer ${NOT_SET}\n---\n",
    )
    .unwrap();
    let parent = parent_in(dir, |builder| {
        builder.subagent_variables(Arc::new(|var: &str| {
            (var == "REMOTE_KEY").then(|| "k-alice".to_owned())
        }))
    });
    let warnings = parent.agent.subagent_warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(
        (warnings[0].file.as_str(), warnings[0].key.as_str()),
        ("subagents/broken.md", "headers.Authorization")
    );
    assert!(warnings[0].message.contains("NOT_SET"), "{}", warnings[0]);
    parent.agent.call("research keys", ctx("u1", "s1")).await.unwrap();
    let (text, is_error) = parent.results.lock().unwrap()[0].clone();
    assert!(!is_error && text.ends_with("turn 1: research keys"), "{text}");
    // The key decided the remote user: alice's session list has the child session.
    let listed: Value = server
        .client
        .get(server.url("/api/agents/helper/sessions"))
        .header("Authorization", "Bearer k-alice")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["sessions"].as_array().unwrap().len(), 1, "{listed}");
}

#[tokio::test]
async fn the_depth_header_keeps_a_served_child_within_max_depth() {
    // A served agent whose model delegates to `general-purpose` and reports the result.
    let model = ScriptedModel::from_fn(|request: &ChatRequest| {
        if let Some((text, is_error)) = tool_text(request) {
            return Reply::text(format!("error={is_error}: {text}"));
        }
        if request
            .system
            .parts
            .iter()
            .any(|part| part.text.contains("delegation depth"))
        {
            return Reply::text("child answer");
        }
        Reply {
            tool_calls: vec![ScriptedToolCall {
                name: "agent_spawn".to_owned(),
                arguments: json!({"agent_id": "general-purpose", "task": "delegation depth", "timeout_seconds": 30}),
                id: None,
            }],
            ..Reply::default()
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let mut memory = harness_memory::MemoryConfig::default();
    memory.enabled = false;
    let agent = HarnessAgent::builder()
        .memory(memory)
        .workspace(dir.path())
        .name("helper")
        .model(model)
        .build()
        .unwrap();
    let gateway = harness_serve::Gateway::new(vec![agent], ServeOptions::default()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(gateway.serve(listener, std::future::pending::<()>()));
    let client = reqwest::Client::new();
    let send = |session: &'static str, depth: Option<&'static str>| {
        let mut request = client
            .post(format!("{base}/api/agents/helper/sessions/{session}/messages"))
            .json(&json!({"message": "go", "stream": false}));
        if let Some(depth) = depth {
            request = request.header(harness_protocol::header::DEPTH_HEADER, depth);
        }
        request.send()
    };
    let top: Value = send("top", None).await.unwrap().json().await.unwrap();
    assert!(top["text"].as_str().unwrap().starts_with("error=false"), "{top}");
    let child: Value = send("child", Some("1")).await.unwrap().json().await.unwrap();
    let text = child["text"].as_str().unwrap();
    assert!(text.starts_with("error=true") && text.contains("depth"), "{text}");
    assert_eq!(send("bad", Some("deep")).await.unwrap().status(), 400);
}

#[tokio::test]
async fn limits_count_remote_spawns_too() {
    use harness::subagents::{SpawnRequest, SubagentsConfig};
    let server = Server::start(ServeOptions::default()).await;
    let config = SubagentsConfig {
        max_fanout: 1,
        ..SubagentsConfig::default()
    };
    let url = server.base.clone();
    let parent = parent_in(tempfile::tempdir().unwrap(), move |builder| {
        builder.subagent(remote(&url)).subagents(config)
    });
    // The first one waits on the remote model; a second while it runs is past the fan-out.
    let first = parent
        .agent
        .spawn_subagent(ctx("u1", "s1"), SpawnRequest::new("remote", "wait here"))
        .await
        .unwrap();
    assert_eq!(first.status, TaskStatus::Running);
    let refused = parent
        .agent
        .spawn_subagent(ctx("u1", "s1"), SpawnRequest::new("remote", "another"))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("max_fanout = 1"), "{refused}");
    server.gate.add_permits(1);
    parent.agent.wait_for_tasks().await;
    let tasks = parent.agent.tasks(ctx("u1", "s1")).await.unwrap();
    assert_eq!((tasks.len(), tasks[0].status), (1, TaskStatus::Completed));
}

#[tokio::test]
async fn the_task_time_limit_cancels_the_remote_turn() {
    use harness::subagents::SubagentsConfig;
    let server = Server::start(ServeOptions::default()).await;
    let config = SubagentsConfig {
        task_timeout: Duration::from_secs(1),
        ..SubagentsConfig::default()
    };
    let url = server.base.clone();
    let parent = parent_in(tempfile::tempdir().unwrap(), move |builder| {
        builder.subagent(remote(&url)).subagents(config)
    });
    parent
        .agent
        .call("bg wait past the limit", ctx("u1", "s1"))
        .await
        .unwrap();
    parent.agent.wait_for_tasks().await;
    let task = parent.agent.tasks(ctx("u1", "s1")).await.unwrap().remove(0);
    assert_eq!(task.status, TaskStatus::Timeout, "{task:?}");
    let response = server
        .client
        .get(server.url(&format!("/api/agents/helper/sessions/{}/events", task.child_session)))
        .header("X-Harness-User", "u1")
        .send()
        .await
        .unwrap();
    let events = crate::support::SseReader::new(response).rest().await;
    let last = events.last().unwrap().json();
    assert_eq!(last["kind"].as_str(), Some("cancelled"), "{last}");
}

/// Problem 2 of the trust boundary: a remote subagent call is open-world, so under the
/// default permissions it waits for a person and nothing is sent; `dont_ask` refuses it.
#[tokio::test]
async fn a_remote_spawn_asks_under_the_default_permissions_and_sends_nothing() {
    let (url, hits) = harness_test_support::net::counting_listener().await;
    let default = parent_in(tempfile::tempdir().unwrap(), |builder| {
        builder
            .subagent(remote(&url))
            .permissions(harness::permissions::Policy::default())
    });
    let events: Vec<AgentEvent> =
        futures::StreamExt::collect(default.agent.stream("research tides", ctx("u1", "s1"))).await;
    let asked = events.iter().find_map(|event| match &event.kind {
        EventKind::ApprovalRequired { calls, .. } => Some(calls.clone()),
        _ => None,
    });
    let asked = asked.unwrap_or_else(|| panic!("no approval asked: {events:?}"));
    assert_eq!(asked.len(), 1);
    assert!(asked[0].reason.contains("remote server"), "{:?}", asked[0]);
    let dont_ask = parent_in(tempfile::tempdir().unwrap(), |builder| {
        builder
            .subagent(remote(&url))
            .permissions(harness::permissions::Policy {
                mode: harness::permissions::Mode::DontAsk,
                ..harness::permissions::Policy::default()
            })
    });
    dont_ask.agent.call("research tides", ctx("u1", "s1")).await.unwrap();
    let (text, is_error) = dont_ask.results.lock().unwrap()[0].clone();
    assert!(is_error && text.contains("Permission denied"), "{text}");
    // A person's decision is needed before the task leaves the process.
    default
        .agent
        .resume(
            vec![harness_core::ApprovalDecision::deny(&asked[0].id)],
            ctx("u1", "s1"),
        )
        .await
        .unwrap();
    assert_eq!(
        hits.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "no request may reach the remote"
    );
}

/// The events the served agent's own tool results produced, forwarded to the parent with the
/// remote child's source: `(tool, output, is_error)`.
fn forwarded_results(events: &[AgentEvent]) -> Vec<(String, String, bool)> {
    events
        .iter()
        .filter(|event| event.source.is_some())
        .filter_map(|event| match &event.kind {
            EventKind::ToolResult {
                name,
                content,
                is_error,
                ..
            } => Some((name.clone(), harness_core::join_text(content), *is_error)),
            _ => None,
        })
        .collect()
}

/// The calls the parent's own turn asks its person about (a test failure when it asks none).
fn parent_asks(events: &[AgentEvent]) -> Vec<harness_core::PendingCall> {
    events
        .iter()
        .find_map(|event| match &event.kind {
            EventKind::ApprovalRequired { calls } if event.source.is_none() => Some(calls.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("the parent asks its person: {events:?}"))
}

/// A parent (allowed to spawn) whose remote child on `server` is asked to use a tool, and
/// the events of that turn.
async fn ask_through_a_remote(server: &Server) -> (Parent, Vec<AgentEvent>) {
    let parent = parent(remote(&server.base));
    let events: Vec<AgentEvent> =
        futures::StreamExt::collect(parent.agent.stream("research with a tool", ctx("u1", "s1"))).await;
    (parent, events)
}

/// Problem 5 of the trust boundary: a remote child that waits for approval becomes the
/// parent's pending approval (it used to be recorded `completed` with the question as its
/// answer), and the parent's person's decision resumes the remote turn.
#[tokio::test]
async fn a_remote_childs_approval_becomes_the_parents_and_the_decision_resumes_it() {
    let server = Server::start_with(ServeOptions::default(), Some(crate::support::ASK_LIST)).await;
    let (parent, events) = ask_through_a_remote(&server).await;
    let asked = parent_asks(&events);
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].tool, "agent_spawn");
    assert!(asked[0].reason.contains("list_files"), "{:?}", asked[0]);
    let tasks = parent.agent.tasks(ctx("u1", "s1")).await.unwrap();
    assert_eq!(tasks[0].status, TaskStatus::AwaitingApproval, "{tasks:?}");
    // The remote side waits too.
    let child_session = tasks[0].child_session.clone();
    let history = remote_history(&server, "u1", &child_session).await;
    assert_eq!(history["pending_approvals"].as_array().unwrap().len(), 1, "{history}");

    let resumed: Vec<AgentEvent> = futures::StreamExt::collect(parent.agent.resume_stream(
        vec![harness_core::ApprovalDecision::approve(&asked[0].id)],
        ctx("u1", "s1"),
    ))
    .await;
    let final_text = resumed
        .iter()
        .find_map(|event| match &event.kind {
            EventKind::Final { message } if event.source.is_none() => Some(message.text()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{resumed:?}"));
    assert!(
        final_text.starts_with("parent saw: status: completed") && final_text.ends_with("turn 1: listed"),
        "{final_text}"
    );
    let ran = forwarded_results(&resumed);
    assert!(
        ran.iter().any(|(tool, _, is_error)| tool == "list_files" && !is_error),
        "{ran:?}"
    );
    let history = remote_history(&server, "u1", &child_session).await;
    assert_eq!(history["pending_approvals"], json!([]), "{history}");
}

/// A denial reaches the remote child as a person's refusal: the call is not run there.
#[tokio::test]
async fn a_denied_remote_childs_call_is_not_run_on_the_remote() {
    let server = Server::start_with(ServeOptions::default(), Some(crate::support::ASK_LIST)).await;
    let (parent, events) = ask_through_a_remote(&server).await;
    let asked = parent_asks(&events);
    let resumed: Vec<AgentEvent> = futures::StreamExt::collect(parent.agent.resume_stream(
        vec![harness_core::ApprovalDecision::deny(&asked[0].id)],
        ctx("u1", "s1"),
    ))
    .await;
    let ran = forwarded_results(&resumed);
    let refused = ran
        .iter()
        .find(|(tool, _, _)| tool == "list_files")
        .unwrap_or_else(|| panic!("{resumed:?}"));
    assert!(refused.2, "{refused:?}");
    let tasks = parent.agent.tasks(ctx("u1", "s1")).await.unwrap();
    assert_eq!(tasks[0].status, TaskStatus::Completed, "{tasks:?}");
}

/// Problem 5: the remote child keeps the parent's deny rules (a call the parent denies is
/// denied on the remote, which alone would allow it) and its mode (a parent in `dont_ask`
/// turns the remote's ask into a refusal instead of a wait).
#[tokio::test]
async fn a_remote_child_keeps_the_parents_deny_rules_and_its_stricter_mode() {
    let rule = |text: &str| harness::permissions::Rule::parse(text).unwrap();
    let server = Server::start(ServeOptions::default()).await;
    let denying = parent_in(tempfile::tempdir().unwrap(), |builder| {
        builder
            .subagent(remote(&server.base))
            .permissions(harness::permissions::Policy {
                allow: vec![rule("agent_spawn")],
                deny: vec![rule("list_files")],
                ..harness::permissions::Policy::default()
            })
    });
    let events: Vec<AgentEvent> =
        futures::StreamExt::collect(denying.agent.stream("research with a tool", ctx("u1", "s1"))).await;
    let ran = forwarded_results(&events);
    assert!(
        ran.iter()
            .any(|(tool, output, is_error)| tool == "list_files" && *is_error && output.contains("Permission denied")),
        "{ran:?}"
    );

    let asking = Server::start_with(ServeOptions::default(), Some(crate::support::ASK_LIST)).await;
    let unattended = parent_in(tempfile::tempdir().unwrap(), |builder| {
        builder
            .subagent(remote(&asking.base))
            .permissions(harness::permissions::Policy {
                mode: harness::permissions::Mode::DontAsk,
                allow: vec![rule("agent_spawn")],
                ..harness::permissions::Policy::default()
            })
    });
    let events: Vec<AgentEvent> =
        futures::StreamExt::collect(unattended.agent.stream("research with a tool", ctx("u1", "s1"))).await;
    assert!(
        !events
            .iter()
            .any(|event| matches!(event.kind, EventKind::ApprovalRequired { .. })),
        "{events:?}"
    );
    let ran = forwarded_results(&events);
    assert!(
        ran.iter()
            .any(|(tool, output, is_error)| tool == "list_files" && *is_error && output.contains("Permission denied")),
        "{ran:?}"
    );
}

/// Problem 5: a planning parent's remote child plans too. The served agent has no plan mode,
/// so it is held to read-only tools: its own spawn is refused, its read runs.
#[tokio::test]
async fn a_planning_parents_remote_child_cannot_change_anything() {
    let server = Server::start(ServeOptions::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("plan_enter", json!({}))
        .reply_tool_call("agent_spawn", json!({"agent_id": "remote", "task": "spawn:dig"}))
        .reply_tool_call("agent_spawn", json!({"agent_id": "remote", "task": "look with a tool"}))
        .reply_text("planned");
    let mut memory = harness_memory::MemoryConfig::default();
    memory.enabled = false;
    let planner = HarnessAgent::builder()
        .memory(memory)
        .workspace(dir.path())
        .name("main")
        .config(
            harness::HarnessConfig::parse(
                "[plan]\nenabled = true\n[permissions]\nallow = [\"agent_spawn\"]\n",
                std::path::Path::new("harness.toml"),
            )
            .unwrap(),
        )
        .model(model)
        .subagent(remote(&server.base))
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = futures::StreamExt::collect(planner.stream("plan it", ctx("u1", "s1"))).await;
    let ran = forwarded_results(&events);
    let spawn = ran
        .iter()
        .find(|(tool, _, _)| tool == "agent_spawn")
        .unwrap_or_else(|| panic!("{ran:?}"));
    assert!(spawn.2 && spawn.1.contains("Permission denied"), "{spawn:?}");
    assert!(
        ran.iter().any(|(tool, _, is_error)| tool == "list_files" && !is_error),
        "{ran:?}"
    );
}

/// The serving side refuses an `inherit` it cannot honour rather than ignore it.
#[tokio::test]
async fn a_bad_inherit_is_refused_with_what_to_send() {
    let server = Server::start(ServeOptions::default()).await;
    for inherit in [
        json!({"allow": ["execute"]}),
        json!({"deny": ["execute("]}),
        json!({"mode": "yolo"}),
    ] {
        let response = server
            .post(
                "/api/agents/helper/sessions/s1/messages",
                json!({"message": "hi", "inherit": inherit}),
            )
            .await;
        assert_eq!(response.status(), 400, "{inherit}");
        let body: Value = response.json().await.unwrap();
        assert!(body["error"]["message"].as_str().unwrap().contains("inherit"), "{body}");
    }
    let history = server.get("/api/agents/helper/sessions/s1").await;
    assert_eq!(history.status(), 404, "nothing ran, so the session does not exist");
}
