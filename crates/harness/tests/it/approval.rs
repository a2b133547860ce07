//! Human approval that survives the process: an ask ends the turn in a saved "awaiting
//! approval" state; another agent instance (another process) resumes it with decisions.

use crate::support::{builder, collect, ctx, last_tool_results, shell_agent};
use harness_core::{AgentError, ApprovalDecision, ApprovalError, EventKind, PendingApproval, SessionSlot};
use harness_models::ScriptedModel;
use serde_json::json;
use std::path::Path;
use std::sync::Arc;

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

/// The file the shell's `echo x >> count` appends to (the caller's area).
fn count_file(dir: &Path) -> std::path::PathBuf {
    dir.join("alice/count")
}

const ASK: &str = "[permissions]\n";

/// Process one asks and stops; process two (a fresh agent on the same workspace) sees the
/// pending call, approves it, and the call runs exactly once; approving again is refused.
#[tokio::test]
async fn a_second_agent_resumes_the_turn_and_the_approved_call_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let first_model = ScriptedModel::new().reply_tool_call("execute", json!({"command": "echo x >> count"}));
    let first = shell_agent(dir.path(), ASK, &first_model);
    let events = collect(first.stream("count", ctx("alice", "s1"))).await;
    let asked: Vec<_> = events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::ApprovalRequired { calls } => Some(calls.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(asked.len(), 1, "{events:?}");
    assert_eq!(asked[0][0].tool, "execute");
    assert_eq!(asked[0][0].suggestion.as_deref(), Some("execute(echo x*)"));
    assert!(
        matches!(events.last().map(|e| &e.kind), Some(EventKind::Final { .. })),
        "the turn ends normally"
    );
    assert_eq!(lines(&count_file(dir.path())), 0, "nothing ran while waiting");
    drop(first);

    let second_model = ScriptedModel::new().reply_text("counted");
    let second = shell_agent(dir.path(), ASK, &second_model);
    let pending = second.pending_approval(ctx("alice", "s1")).await.unwrap();
    assert_eq!(pending.calls.len(), 1);
    assert_eq!(pending.calls[0].input, json!({"command": "echo x >> count"}));
    let id = pending.calls[0].id.clone();
    let reply = second
        .resume(vec![ApprovalDecision::approve(&id)], ctx("alice", "s1"))
        .await
        .unwrap();
    assert_eq!(reply.text(), "counted");
    assert_eq!(lines(&count_file(dir.path())), 1, "ran once");
    let seen = last_tool_results(&second_model);
    assert_eq!(seen.len(), 1, "the call has exactly one result: {seen:?}");
    assert!(seen[0].contains(&id) && seen[0].contains("is_error: false"), "{seen:?}");
    assert!(second.pending_approval(ctx("alice", "s1")).await.unwrap().is_empty());

    let again = second
        .resume(vec![ApprovalDecision::approve(&id)], ctx("alice", "s1"))
        .await;
    assert!(
        matches!(again, Err(AgentError::Approval(ApprovalError::NothingPending))),
        "{again:?}"
    );
    assert_eq!(lines(&count_file(dir.path())), 1, "never twice");
}

/// A denied call never runs and the model reads that a person refused; an unknown id is an
/// error that runs nothing.
#[tokio::test]
async fn a_denied_call_never_runs_and_the_model_is_told_a_person_refused() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("execute", json!({"command": "echo x >> count"}))
        .reply_text("ok, not counting");
    let agent = shell_agent(dir.path(), ASK, &model);
    agent.call("count", ctx("alice", "s1")).await.unwrap();
    let pending = agent.pending_approval(ctx("alice", "s1")).await.unwrap();
    let id = pending.calls[0].id.clone();

    let unknown = agent
        .resume(vec![ApprovalDecision::approve("no-such-call")], ctx("alice", "s1"))
        .await;
    match unknown {
        Err(AgentError::Approval(ApprovalError::UnknownCall { id: given, pending })) => {
            assert_eq!(given, "no-such-call");
            assert!(pending.contains(&id), "{pending}");
        }
        other => panic!("expected an unknown-call error, got {other:?}"),
    }
    assert_eq!(pending.calls.len(), 1, "still pending");

    let reply = agent
        .resume(
            vec![ApprovalDecision::deny(&id).with_note("not today")],
            ctx("alice", "s1"),
        )
        .await
        .unwrap();
    assert_eq!(reply.text(), "ok, not counting");
    assert_eq!(lines(&count_file(dir.path())), 0);
    let seen = last_tool_results(&model);
    assert!(
        seen[0].contains("A person refused this call") && seen[0].contains("not today"),
        "{seen:?}"
    );
    assert!(seen[0].contains("is_error: true"), "{seen:?}");
}

/// Edited arguments are what runs; an edit that a deny rule covers is denied.
#[tokio::test]
async fn an_edited_argument_is_what_runs_and_is_decided_again() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[permissions]\ndeny = [\"execute(rm *)\"]\n";
    let model = ScriptedModel::new()
        .reply_tool_call("execute", json!({"command": "touch original"}))
        .reply_tool_call("execute", json!({"command": "touch second"}))
        .reply_text("done");
    let agent = shell_agent(dir.path(), config, &model);
    agent.call("go", ctx("alice", "s1")).await.unwrap();
    let id = agent.pending_approval(ctx("alice", "s1")).await.unwrap().calls[0]
        .id
        .clone();
    agent
        .resume(
            vec![ApprovalDecision::approve(&id).with_input(json!({"command": "touch edited"}))],
            ctx("alice", "s1"),
        )
        .await
        .unwrap();
    assert!(dir.path().join("alice/edited").exists());
    assert!(!dir.path().join("alice/original").exists());

    // The second call waits too; its edit falls under the deny rule.
    std::fs::write(dir.path().join("alice/victim"), "keep").unwrap();
    let id = agent.pending_approval(ctx("alice", "s1")).await.unwrap().calls[0]
        .id
        .clone();
    agent
        .resume(
            vec![ApprovalDecision::approve(&id).with_input(json!({"command": "rm victim"}))],
            ctx("alice", "s1"),
        )
        .await
        .unwrap();
    assert!(
        dir.path().join("alice/victim").exists(),
        "the deny rule wins over approval"
    );
    let seen = last_tool_results(&model);
    assert!(seen.last().unwrap().contains("Permission denied"), "{seen:?}");

    // Edited arguments that do not match the schema are an error result, not a run.
    let model = ScriptedModel::new()
        .reply_tool_call("execute", json!({"command": "touch third"}))
        .reply_text("done");
    let agent = shell_agent(dir.path(), config, &model);
    agent.call("go", ctx("alice", "s2")).await.unwrap();
    let id = agent.pending_approval(ctx("alice", "s2")).await.unwrap().calls[0]
        .id
        .clone();
    agent
        .resume(
            vec![ApprovalDecision::approve(&id).with_input(json!({"command": 7}))],
            ctx("alice", "s2"),
        )
        .await
        .unwrap();
    assert!(last_tool_results(&model)[0].contains("invalid arguments"));
}

/// "Approve always" adds the suggested rule to the session: a second call it covers runs
/// without asking, in this session only.
#[tokio::test]
async fn approve_always_covers_later_calls_of_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("execute", json!({"command": "echo x >> count"}))
        .reply_tool_call("execute", json!({"command": "echo x >> count"}))
        .reply_text("done");
    let agent = shell_agent(dir.path(), ASK, &model);
    agent.call("go", ctx("alice", "s1")).await.unwrap();
    let id = agent.pending_approval(ctx("alice", "s1")).await.unwrap().calls[0]
        .id
        .clone();
    let reply = agent
        .resume(vec![ApprovalDecision::approve_always(&id)], ctx("alice", "s1"))
        .await
        .unwrap();
    assert_eq!(reply.text(), "done", "the second call did not wait");
    assert_eq!(lines(&count_file(dir.path())), 2);

    // Another session still asks.
    let model = ScriptedModel::new().reply_tool_call("execute", json!({"command": "echo z >> count"}));
    let other = shell_agent(dir.path(), ASK, &model);
    other.call("go", ctx("alice", "s2")).await.unwrap();
    assert_eq!(other.pending_approval(ctx("alice", "s2")).await.unwrap().calls.len(), 1);
    assert_eq!(lines(&count_file(dir.path())), 2);
}

/// The other calls of the asking step run as usual; a new message supersedes what still
/// waits: each pending call gets a "superseded" result, so every tool call has a result.
#[tokio::test]
async fn a_new_message_supersedes_pending_calls_and_keeps_the_transcript_valid() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply(harness_models::Reply {
            tool_calls: vec![
                harness_models::ScriptedToolCall {
                    name: "write_file".into(),
                    arguments: json!({"path": "note.txt", "content": "hi"}),
                    id: Some("w1".into()),
                },
                harness_models::ScriptedToolCall {
                    name: "execute".into(),
                    arguments: json!({"command": "touch marker"}),
                    id: Some("x1".into()),
                },
            ],
            ..harness_models::Reply::default()
        })
        .reply_text("fine");
    let agent = shell_agent(dir.path(), ASK, &model);
    agent.call("go", ctx("alice", "s1")).await.unwrap();
    assert!(
        dir.path().join("alice/note.txt").exists(),
        "the allowed call of the step ran"
    );
    let pending = agent.pending_approval(ctx("alice", "s1")).await.unwrap();
    assert_eq!(pending.calls.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["x1"]);
    let reply = agent.call("never mind", ctx("alice", "s1")).await.unwrap();
    assert_eq!(reply.text(), "fine");
    assert!(!dir.path().join("alice/marker").exists());
    let seen = last_tool_results(&model);
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(
        seen.iter().any(|r| r.contains("x1") && r.contains("superseded")),
        "{seen:?}"
    );
    let last_request = model.requests().last().unwrap().clone();
    let last_user = last_request.messages.last().unwrap();
    assert_eq!(last_user.text(), "never mind", "the new message follows the results");
    assert!(agent.pending_approval(ctx("alice", "s1")).await.unwrap().is_empty());
}

/// A call recorded as started whose process died is never run again: the next call gives
/// it an "interrupted" result.
#[tokio::test]
async fn an_approved_call_that_was_started_is_never_run_twice() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("execute", json!({"command": "echo x >> count"}))
        .reply_text("after the crash");
    let agent = shell_agent(dir.path(), ASK, &model);
    agent.call("go", ctx("alice", "s1")).await.unwrap();
    // What a process that died while running the approved call leaves behind.
    let store = agent.kernel().state_store();
    let key = agent.kernel().key_for(&agent.bind(ctx("alice", "s1")).unwrap());
    let (mut state, version) = store.load(&key).await.unwrap().unwrap();
    let mut pending: PendingApproval = serde_json::from_value(state.extensions[PendingApproval::KEY].clone()).unwrap();
    pending.calls[0].started = true;
    state
        .extensions
        .insert(PendingApproval::KEY.into(), serde_json::to_value(&pending).unwrap());
    store.save(&key, &state, version, None).await.unwrap();

    assert!(agent.pending_approval(ctx("alice", "s1")).await.unwrap().calls[0].started);
    let again = agent
        .resume(
            vec![ApprovalDecision::approve(&pending.calls[0].id)],
            ctx("alice", "s1"),
        )
        .await;
    assert!(
        matches!(again, Err(AgentError::Approval(ApprovalError::NothingPending))),
        "{again:?}"
    );
    assert_eq!(lines(&count_file(dir.path())), 0, "never run by the retry");
    let reply = agent.call("and now?", ctx("alice", "s1")).await.unwrap();
    assert_eq!(reply.text(), "after the crash");
    assert!(
        last_tool_results(&model)[0].contains("interrupted"),
        "{:?}",
        last_tool_results(&model)
    );
}

/// `dont_ask` never waits: the call is denied and the turn goes on.
#[tokio::test]
async fn dont_ask_denies_instead_of_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("execute", json!({"command": "touch marker"}))
        .reply_text("done");
    let agent = shell_agent(dir.path(), "[permissions]\nmode = \"dont_ask\"\n", &model);
    let reply = agent.call("go", ctx("alice", "s1")).await.unwrap();
    assert_eq!(reply.text(), "done");
    assert!(agent.pending_approval(ctx("alice", "s1")).await.unwrap().is_empty());
    assert!(!dir.path().join("alice/marker").exists());
    assert!(last_tool_results(&model)[0].contains("dont_ask"));
}

/// A leaf child keeps the parent's deny rules and mode whatever its configuration says: a
/// builder policy (not in harness.toml) still binds it, a denied command hidden in a list
/// is denied, `explore` stays read-only; its denials never reach a person, and its one ask
/// becomes the parent's pending approval (refused here: the child's model is told so).
#[tokio::test]
async fn a_leaf_child_cannot_escape_the_parents_deny_rules() {
    use harness::permissions::{Mode, Policy, Rule};
    use harness_models::Reply;
    let dir = tempfile::tempdir().unwrap();
    let child_calls = Arc::new(std::sync::Mutex::new(Vec::<harness_core::ChatRequest>::new()));
    let seen = Arc::clone(&child_calls);
    let parent_replies = Arc::new(std::sync::Mutex::new(std::collections::VecDeque::from([
        Reply::tool_call("agent_spawn", json!({"agent_id": "leaf", "task": "try"})),
        Reply::text("parent done"),
    ])));
    let model = ScriptedModel::from_fn(move |request| {
        let system: String = request.system.parts.iter().map(|part| part.text.as_str()).collect();
        if !system.contains("LEAF-CHILD") {
            return parent_replies
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| Reply::text("parent done"));
        }
        let mut calls = seen.lock().unwrap();
        calls.push(request.clone());
        let call = |name: &str, arguments: serde_json::Value| harness_models::ScriptedToolCall {
            name: name.into(),
            arguments,
            id: None,
        };
        match calls.len() {
            1 => Reply {
                tool_calls: vec![
                    call("execute", json!({"command": "touch escaped"})),
                    call("execute", json!({"command": "echo ok; touch hidden"})),
                    call("write_file", json!({"path": "written.txt", "content": "x"})),
                    call("execute", json!({"command": "echo hi"})),
                ],
                ..Reply::default()
            },
            _ => Reply::text("child done"),
        }
    });
    let policy = Policy {
        mode: Mode::Default,
        allow: vec![Rule::parse("execute(echo *)").unwrap()],
        ask: Vec::new(),
        deny: vec![
            Rule::parse("execute(touch *)").unwrap(),
            Rule::parse("write_file").unwrap(),
        ],
        ..Policy::default()
    };
    let fs = harness_fs::LocalFs::new(dir.path())
        .unwrap()
        .with_shell(harness_fs::LocalShellConfig::default());
    let subagents = harness::subagents::SubagentsConfig {
        max_depth: 1,
        ..Default::default()
    };
    let parent = builder()
        .workspace(dir.path())
        .filesystem(Arc::new(fs))
        .model(model)
        .permissions(policy)
        .subagents(subagents)
        .subagent(harness::subagents::SubagentDeclaration::new(
            "leaf",
            "tries things",
            "LEAF-CHILD you try things.",
        ))
        .build()
        .unwrap();
    parent.call("go", ctx("alice", "s1")).await.unwrap();
    let pending = parent.pending_approval(ctx("alice", "s1")).await.unwrap();
    assert_eq!(pending.calls.len(), 1, "{pending:?}");
    let child = pending.calls[0]
        .child
        .clone()
        .expect("the spawn carries the child's calls");
    assert_eq!(
        child
            .calls
            .iter()
            .map(|call| call.input["command"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["echo hi"],
        "only the child's ask reaches a person, never its denials"
    );
    let reply = parent
        .resume(vec![ApprovalDecision::deny(&pending.calls[0].id)], ctx("alice", "s1"))
        .await
        .unwrap();
    assert_eq!(reply.text(), "parent done");
    assert!(parent.pending_approval(ctx("alice", "s1")).await.unwrap().is_empty());
    let found = |name: &str| walkdir(dir.path()).iter().any(|path| path.ends_with(name));
    assert!(!found("escaped") && !found("hidden") && !found("written.txt"));
    let calls = child_calls.lock().unwrap();
    assert_eq!(calls.len(), 2, "the child's turn went on after its calls");
    let results: Vec<String> = calls[1]
        .messages
        .iter()
        .flat_map(|msg| msg.content.iter())
        .filter_map(|block| match block {
            harness_core::Block::ToolResult { content, .. } => Some(harness_core::join_text(content)),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 4, "{results:?}");
    assert!(results[0].contains("Permission denied"), "{results:?}");
    assert!(results[1].contains("Permission denied"), "{results:?}");
    assert!(results[2].contains("Permission denied"), "{results:?}");
    assert!(
        results[3].contains("A person refused"),
        "the parent's allow rules are not inherited; the child's ask went to a person: {results:?}"
    );
}

fn walkdir(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path.clone());
            }
            out.push(path);
        }
    }
    out
}

/// Without `[permissions]` the built-in defaults apply: closed-world tools (the file tools in
/// the caller's area) and read-only tools run, the shell waits for a person.
#[tokio::test]
async fn without_a_permissions_section_the_defaults_ask_for_the_shell_only() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new().reply(harness_models::Reply {
        tool_calls: vec![
            harness_models::ScriptedToolCall {
                name: "write_file".into(),
                arguments: json!({"path": "a.txt", "content": "x"}),
                id: Some("w".into()),
            },
            harness_models::ScriptedToolCall {
                name: "read_file".into(),
                arguments: json!({"path": "a.txt"}),
                id: Some("r".into()),
            },
            harness_models::ScriptedToolCall {
                name: "execute".into(),
                arguments: json!({"command": "touch marker"}),
                id: Some("x".into()),
            },
        ],
        ..harness_models::Reply::default()
    });
    let agent = shell_agent(dir.path(), "", &model);
    assert!(agent.middleware_order().contains(&"permissions"));
    agent.call("go", ctx("alice", "s1")).await.unwrap();
    assert!(dir.path().join("alice/a.txt").exists());
    assert!(!dir.path().join("alice/marker").exists());
    let pending = agent.pending_approval(ctx("alice", "s1")).await.unwrap();
    assert_eq!(
        pending.calls.iter().map(|call| call.id.as_str()).collect::<Vec<_>>(),
        ["x"]
    );
}

/// The pending approval lives in the session state, so it works with every state store: two
/// agents (two replicas) on Redis and on PostgreSQL state, one asks, the other resumes.
#[cfg(all(feature = "redis", feature = "postgres"))]
#[tokio::test]
async fn approval_crosses_replicas_on_redis_and_postgres_state() {
    use harness::state::{StateConfig, StateKind};
    use harness_test_support::services::{PgPrefix, RedisPrefix};
    // What the replicas write is removed when the guards drop, passed or failed.
    let (keys, tables) = (RedisPrefix::new("approval"), PgPrefix::new("approval"));
    for (kind, url, prefix) in [
        (StateKind::Redis, keys.url(), keys.prefix()),
        (StateKind::Postgres, tables.url(), tables.prefix()),
    ] {
        let config = StateConfig {
            kind,
            url: Some(url.to_owned()),
            key_prefix: Some(prefix.to_owned()),
            ..StateConfig::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let replica = |model: &ScriptedModel| {
            let config = config.clone();
            let model = model.clone();
            let dir = dir.path().to_path_buf();
            async move {
                let backend = harness::state::open(&config)
                    .await
                    .expect("Redis and PostgreSQL must answer (scripts/services.sh starts them)")
                    .unwrap();
                let fs = harness_fs::LocalFs::new(&dir)
                    .unwrap()
                    .with_shell(harness_fs::LocalShellConfig::default());
                builder()
                    .workspace(&dir)
                    .filesystem(Arc::new(fs))
                    .state_store(backend.store)
                    .session_lease(backend.lease)
                    .model(model)
                    .build()
                    .unwrap()
            }
        };
        let first_model = ScriptedModel::new().reply_tool_call("execute", json!({"command": "echo x >> count"}));
        let first = replica(&first_model).await;
        first.call("count", ctx("alice", "s1")).await.unwrap();
        assert_eq!(lines(&count_file(dir.path())), 0);
        let second_model = ScriptedModel::new().reply_text("counted");
        let second = replica(&second_model).await;
        let pending = second.pending_approval(ctx("alice", "s1")).await.unwrap();
        assert_eq!(pending.calls.len(), 1, "{kind:?}");
        let reply = second
            .resume(
                vec![ApprovalDecision::approve(&pending.calls[0].id)],
                ctx("alice", "s1"),
            )
            .await
            .unwrap();
        assert_eq!(reply.text(), "counted");
        assert_eq!(lines(&count_file(dir.path())), 1, "{kind:?}");
        assert!(first.pending_approval(ctx("alice", "s1")).await.unwrap().is_empty());
    }
}

/// A parent with the built-in permission defaults (the shell asks) and one isolated child
/// (`helper`) whose model asks to `execute` `touch marker`, then answers from what it got.
fn family(dir: &Path, child_turns: Arc<std::sync::Mutex<Vec<harness_core::ChatRequest>>>) -> harness::HarnessAgent {
    use harness_models::Reply;
    let parent_turns = Arc::new(std::sync::Mutex::new(0_usize));
    let model = ScriptedModel::from_fn(move |request| {
        let system: String = request.system.parts.iter().map(|part| part.text.as_str()).collect();
        if system.contains("HELPER-CHILD") {
            let mut turns = child_turns.lock().unwrap();
            turns.push(request.clone());
            let last_result = request
                .messages
                .iter()
                .flat_map(|msg| msg.content.iter())
                .rev()
                .find_map(|block| match block {
                    harness_core::Block::ToolResult { content, .. } => Some(harness_core::join_text(content)),
                    _ => None,
                });
            return match last_result {
                None => Reply::tool_call("execute", json!({"command": "touch marker"})),
                Some(result) if result.contains("A person refused") => Reply::text("child was refused"),
                Some(_) => Reply::text("child made the marker"),
            };
        }
        let mut turns = parent_turns.lock().unwrap();
        *turns += 1;
        let last_result = request
            .messages
            .iter()
            .flat_map(|msg| msg.content.iter())
            .rev()
            .find_map(|block| match block {
                harness_core::Block::ToolResult { content, .. } => Some(harness_core::join_text(content)),
                _ => None,
            });
        match last_result {
            None => Reply::tool_call("agent_spawn", json!({"agent_id": "helper", "task": "make the marker"})),
            Some(result) => Reply::text(format!("parent saw: {result}")),
        }
    });
    let fs = harness_fs::LocalFs::new(dir)
        .unwrap()
        .with_shell(harness_fs::LocalShellConfig::default());
    builder()
        .workspace(dir)
        .filesystem(Arc::new(fs))
        .config(harness::HarnessConfig::parse(ASK, Path::new("harness.toml")).unwrap())
        .model(model)
        .subagent(harness::subagents::SubagentDeclaration::new(
            "helper",
            "makes markers",
            "HELPER-CHILD you make markers.",
        ))
        .build()
        .unwrap()
}

fn markers(dir: &Path) -> usize {
    walkdir(dir).iter().filter(|path| path.ends_with("marker")).count()
}

/// A sync child's ask ends the parent's turn awaiting approval; the parent's pending call
/// lists the child's call; a second agent (another process) approves it on the parent: the
/// child (not a fresh spawn) runs it exactly once, and the parent's turn completes with
/// the child's answer.
#[tokio::test]
async fn a_sync_childs_ask_is_the_parents_pending_approval_and_approving_resumes_the_child() {
    let dir = tempfile::tempdir().unwrap();
    let child_turns = Arc::new(std::sync::Mutex::new(Vec::new()));
    let first = family(dir.path(), Arc::clone(&child_turns));
    let events = collect(first.stream("delegate", ctx("alice", "s1"))).await;
    let asked: Vec<_> = events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::ApprovalRequired { calls } if event.source.is_none() => Some(calls.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(asked.len(), 1, "the parent's turn ends awaiting approval: {events:?}");
    assert_eq!(markers(dir.path()), 0, "nothing ran while waiting");
    drop(first);

    let second = family(dir.path(), Arc::clone(&child_turns));
    let pending = second.pending_approval(ctx("alice", "s1")).await.unwrap();
    assert_eq!(pending.calls.len(), 1);
    let call = &pending.calls[0];
    assert_eq!(call.tool, "agent_spawn");
    let child = call.child.clone().expect("the child's pending calls");
    assert_eq!(child.agent_id, "helper");
    assert_eq!(child.calls.len(), 1);
    assert_eq!(child.calls[0].tool, "execute");
    assert_eq!(child.calls[0].input, json!({"command": "touch marker"}));
    assert_eq!(child.calls[0].suggestion.as_deref(), Some("execute(touch marker*)"));
    assert!(call.reason.contains("touch marker"), "{}", call.reason);

    let reply = second
        .resume(vec![ApprovalDecision::approve(&call.id)], ctx("alice", "s1"))
        .await
        .unwrap();
    assert_eq!(reply.text().lines().next(), Some("parent saw: status: completed"));
    assert!(reply.text().contains("child made the marker"), "{}", reply.text());
    assert_eq!(markers(dir.path()), 1, "the child ran it exactly once");
    assert_eq!(
        child_turns.lock().unwrap().len(),
        2,
        "the child was resumed, not spawned again"
    );
    assert!(second.pending_approval(ctx("alice", "s1")).await.unwrap().is_empty());
    let tasks = second.tasks(ctx("alice", "s1")).await.unwrap();
    assert_eq!(tasks.len(), 1, "one task, resumed: {tasks:?}");
    assert_eq!(tasks[0].status, harness::subagents::TaskStatus::Completed);
    assert!(tasks[0].pending.is_empty());
}

/// Refusing the parent's pending call is forwarded to the child: nothing runs, the
/// child's model is told a person refused, and the child goes on to answer.
#[tokio::test]
async fn denying_a_childs_ask_on_the_parent_tells_the_childs_model() {
    let dir = tempfile::tempdir().unwrap();
    let child_turns = Arc::new(std::sync::Mutex::new(Vec::new()));
    let agent = family(dir.path(), Arc::clone(&child_turns));
    agent.call("delegate", ctx("alice", "s1")).await.unwrap();
    let pending = agent.pending_approval(ctx("alice", "s1")).await.unwrap();
    let reply = agent
        .resume(
            vec![ApprovalDecision::deny(&pending.calls[0].id).with_note("not today")],
            ctx("alice", "s1"),
        )
        .await
        .unwrap();
    assert_eq!(markers(dir.path()), 0, "a denied call never runs");
    assert!(reply.text().contains("child was refused"), "{}", reply.text());
    let turns = child_turns.lock().unwrap();
    assert_eq!(turns.len(), 2);
    let seen = format!("{:?}", turns[1].messages);
    assert!(
        seen.contains("A person refused") && seen.contains("not today"),
        "{seen}"
    );
}

/// A background child that asks: its task is recorded `awaiting_approval` with its pending
/// calls (and pushed back to the parent's model once, so it knows), and
/// `HarnessAgent::resume_task` continues the child with the decisions.
#[tokio::test]
async fn a_background_childs_ask_waits_in_its_task_and_resume_task_continues_it() {
    use harness::subagents::{SpawnRequest, TaskStatus};
    let dir = tempfile::tempdir().unwrap();
    let child_turns = Arc::new(std::sync::Mutex::new(Vec::new()));
    let agent = family(dir.path(), Arc::clone(&child_turns));
    let spawned = agent
        .spawn_subagent(
            ctx("alice", "s1"),
            SpawnRequest::new("helper", "make the marker").wait(std::time::Duration::from_secs(30)),
        )
        .await
        .unwrap();
    assert_eq!(spawned.status, TaskStatus::AwaitingApproval);
    let tasks = agent.tasks(ctx("alice", "s1")).await.unwrap();
    assert_eq!(tasks[0].status, TaskStatus::AwaitingApproval);
    assert_eq!(tasks[0].pending.len(), 1);
    assert_eq!(tasks[0].pending[0].input, json!({"command": "touch marker"}));
    assert_eq!(markers(dir.path()), 0);

    let refused = agent
        .resume_task(ctx("alice", "s1"), "task-none", Vec::new(), None)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("not awaiting approval"), "{refused}");

    let call_id = tasks[0].pending[0].id.clone();
    let resumed = agent
        .resume_task(
            ctx("alice", "s1"),
            &spawned.task_id,
            vec![ApprovalDecision::approve(call_id)],
            Some(std::time::Duration::from_secs(30)),
        )
        .await
        .unwrap();
    assert_eq!(resumed.status, TaskStatus::Completed);
    assert_eq!(resumed.result.as_deref(), Some("child made the marker"));
    assert_eq!(markers(dir.path()), 1);
    let tasks = agent.tasks(ctx("alice", "s1")).await.unwrap();
    assert_eq!(tasks.len(), 1);
    assert!(tasks[0].pending.is_empty());
}
