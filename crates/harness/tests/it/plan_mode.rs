//! Plan mode through the whole agent: what runs while planning, the refusal text, the plan
//! file in the caller's layer, `plan_exit` waiting for approval, state across a restart, the
//! banner in the volatile tail only, and children planning with their parent.

use crate::support::{builder, ctx, shell_agent};
use harness::HarnessAgent;
use harness::plan_mode::{PlanSection, PlanState};
use harness::subagents::SubagentDeclaration;
use harness_core::{Block, ChatRequest, Role};
use harness_models::{Reply, ScriptedModel};
use serde_json::json;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// The tool results the model saw in `request`, in order: (text, is_error).
fn results(request: &ChatRequest) -> Vec<(String, bool)> {
    request
        .messages
        .iter()
        .filter(|msg| msg.role == Role::Tool)
        .flat_map(|msg| msg.content.iter())
        .filter_map(|block| match block {
            Block::ToolResult { content, is_error, .. } => Some((harness_core::join_text(content), *is_error)),
            _ => None,
        })
        .collect()
}

/// The plan-mode banner of `request`, checked to be in the volatile tail.
fn banner(request: &ChatRequest) -> Option<String> {
    let parts: Vec<_> = request
        .system
        .parts
        .iter()
        .filter(|part| part.name == "plan_mode")
        .collect();
    assert!(parts.len() <= 1, "one banner per step");
    parts.first().map(|part| {
        assert!(!part.stable, "the banner is in the volatile tail");
        part.text.clone()
    })
}

const PLAN_ON: &str = "[plan]\nenabled = true\n";

/// While planning, writes and the shell are refused with a result that says plan mode is
/// active and what is allowed; reads, the plan tools and `todo_write` run.
#[tokio::test]
async fn plan_mode_refuses_writes_and_the_shell_and_says_what_is_allowed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("alice")).unwrap();
    std::fs::write(dir.path().join("alice/notes.txt"), "hello").unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("plan_enter", json!({}))
        .reply_tool_call("write_file", json!({"path": "out.txt", "content": "x"}))
        .reply_tool_call("execute", json!({"command": "touch marker"}))
        .reply_tool_call("read_file", json!({"path": "notes.txt"}))
        .reply_tool_call(
            "todo_write",
            json!({"todos": [{"content": "plan", "status": "in_progress"}]}),
        )
        .reply_tool_call("plan_write", json!({"content": "# Plan\n1. write out.txt"}))
        .reply_text("planned");
    let agent = shell_agent(dir.path(), PLAN_ON, &model);
    let names: Vec<String> = agent
        .kernel()
        .tool_specs()
        .iter()
        .map(|spec| spec.name.clone())
        .collect();
    for tool in ["plan_enter", "plan_write", "plan_exit", "todo_write"] {
        assert!(names.iter().any(|name| name == tool), "{tool} offered: {names:?}");
    }
    agent.call("plan the change", ctx("alice", "s1")).await.unwrap();
    let last = model.last_request().unwrap();
    let got = results(&last);
    assert_eq!(got.len(), 6, "{got:?}");
    assert!(!got[0].1 && got[0].0.contains("Plan mode is now active"), "{got:?}");
    for refused in [&got[1], &got[2]] {
        assert!(refused.1, "{got:?}");
        assert!(refused.0.starts_with("Plan mode is active, so `"), "{refused:?}");
        for named in ["read-only tools", "plan_write", "plan_exit", "todo_write", "agent_*"] {
            assert!(refused.0.contains(named), "{named} named in {refused:?}");
        }
        assert!(
            !refused.0.contains("the shell"),
            "the shell is not offered: {refused:?}"
        );
    }
    assert!(!dir.path().join("alice/out.txt").exists() && !dir.path().join("out.txt").exists());
    assert!(!dir.path().join("alice/marker").exists() && !dir.path().join("marker").exists());
    assert!(!got[3].1 && got[3].0.contains("hello"), "reads run: {got:?}");
    assert!(!got[4].1, "todo_write runs: {got:?}");
    assert!(!got[5].1, "plan_write runs: {got:?}");
}

/// `allow_shell = true` lets the shell through the plan gate (the permission policy still
/// decides on it); file writes stay refused.
#[tokio::test]
async fn allow_shell_lets_the_shell_run_while_planning() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("plan_enter", json!({}))
        .reply_tool_call("execute", json!({"command": "touch marker"}))
        .reply_tool_call("write_file", json!({"path": "out.txt", "content": "x"}))
        .reply_text("done");
    let config = "[plan]\nenabled = true\nallow_shell = true\n[permissions]\nallow = [\"execute(touch *)\"]\n";
    let agent = shell_agent(dir.path(), config, &model);
    agent.call("plan", ctx("alice", "s1")).await.unwrap();
    let got = results(&model.last_request().unwrap());
    assert!(!got[1].1, "{got:?}");
    assert!(
        dir.path().join("alice/marker").exists(),
        "the shell ran in the caller's layer"
    );
    assert!(got[2].1 && got[2].0.contains("Plan mode is active"), "{got:?}");
    assert!(
        got[2].0.contains("the shell (`execute`)"),
        "the refusal names the shell: {got:?}"
    );
    assert!(!dir.path().join("alice/out.txt").exists());
    let shown = banner(&model.last_request().unwrap()).unwrap();
    assert!(shown.contains("read-only commands only"), "{shown}");
}

/// `plan_write` writes `plans/PLAN.md` in the caller's layer: under user isolation, two
/// users do not see each other's plan, and the shared root gets none.
#[tokio::test]
async fn plan_write_writes_the_plan_in_the_callers_layer() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("plan_write", json!({"content": "# Alice's plan"}))
        .reply_text("written")
        .reply_tool_call("read_file", json!({"path": "plans/PLAN.md"}))
        .reply_text("read")
        .reply_tool_call("plan_write", json!({"content": "  "}))
        .reply_text("empty");
    let agent = shell_agent(dir.path(), PLAN_ON, &model);
    agent.call("write it", ctx("alice", "s1")).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("alice/plans/PLAN.md")).unwrap(),
        "# Alice's plan"
    );
    assert!(!dir.path().join("plans/PLAN.md").exists(), "not in the shared layer");
    agent.call("read the plan", ctx("bob", "s1")).await.unwrap();
    let got = results(&model.last_request().unwrap());
    assert!(
        got[0].1 && !got[0].0.contains("Alice"),
        "bob cannot see alice's plan: {got:?}"
    );
    agent.call("empty plan", ctx("bob", "s1")).await.unwrap();
    let got = results(&model.last_request().unwrap());
    assert!(
        got.last().unwrap().1 && got.last().unwrap().0.contains("`content` is empty"),
        "{got:?}"
    );
    assert!(!dir.path().join("bob/plans/PLAN.md").exists());
}

/// Reads the saved plan state of alice's session `s1`.
async fn planning(dir: &Path) -> bool {
    let reader = harness::SessionReader::open(dir, None).await.unwrap();
    let state = reader
        .state(
            &harness_core::UserId::parse("alice").unwrap(),
            &harness_core::SessionId::parse("s1").unwrap(),
        )
        .await
        .unwrap()
        .unwrap();
    PlanState::from_state(&state).active
}

/// `plan_exit` asks in every mode (even `bypass` with an allow rule): the turn ends waiting
/// for a person with plan mode still on; approving runs it (plan mode ends and a write then
/// runs), refusing keeps plan mode on. `dont_ask` denies it.
#[tokio::test]
async fn plan_exit_waits_for_approval_and_plan_mode_stays_active() {
    for (config, approve) in [
        (PLAN_ON.to_owned(), true),
        (
            format!("{PLAN_ON}[permissions]\nmode = \"bypass\"\nallow = [\"plan_exit\"]\n"),
            true,
        ),
        (PLAN_ON.to_owned(), false),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let model = ScriptedModel::new()
            .reply_tool_call("plan_enter", json!({}))
            .reply_tool_call("plan_exit", json!({"rationale": "the plan is ready"}))
            .reply_tool_call("write_file", json!({"path": "out.txt", "content": "x"}))
            .reply_text("done");
        let agent = shell_agent(dir.path(), &config, &model);
        agent.call("plan and go", ctx("alice", "s1")).await.unwrap();
        assert_eq!(model.request_count(), 2, "{config}: the turn stops at plan_exit");
        let pending = agent.pending_approval(ctx("alice", "s1")).await.unwrap();
        assert_eq!(pending.calls.len(), 1, "{config}: {pending:?}");
        let call = &pending.calls[0];
        assert_eq!(call.tool, "plan_exit");
        assert!(call.reason.contains("leaving plan mode"), "{call:?}");
        assert!(planning(dir.path()).await, "{config}: still planning while it waits");

        let decision = if approve {
            harness_core::ApprovalDecision::approve(call.id.clone())
        } else {
            harness_core::ApprovalDecision::deny(call.id.clone())
        };
        agent.resume(vec![decision], ctx("alice", "s1")).await.unwrap();
        let last = model.last_request().unwrap();
        let got = results(&last);
        if approve {
            assert!(!got[1].1, "{config}: plan_exit ran: {got:?}");
            assert!(!got[2].1, "{config}: the write ran after plan mode ended: {got:?}");
            assert!(dir.path().join("alice/out.txt").exists());
            assert_eq!(banner(&last), None, "{config}: no longer planning");
            assert!(!planning(dir.path()).await);
        } else {
            assert!(got[1].1 && got[1].0.contains("refused"), "{got:?}");
            assert!(got[2].1 && got[2].0.contains("Plan mode is active"), "{got:?}");
            assert!(!dir.path().join("alice/out.txt").exists());
            assert!(banner(&last).is_some(), "still planning");
            assert!(planning(dir.path()).await);
        }
    }

    // Unattended: plan_exit is denied, plan mode stays on, nothing waits.
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("plan_enter", json!({}))
        .reply_tool_call("plan_exit", json!({"rationale": "the plan is ready"}))
        .reply_tool_call("write_file", json!({"path": "out.txt", "content": "x"}))
        .reply_text("waiting");
    let config = format!("{PLAN_ON}[permissions]\nmode = \"dont_ask\"\n");
    let agent = shell_agent(dir.path(), &config, &model);
    agent.call("plan and go", ctx("alice", "s1")).await.unwrap();
    let got = results(&model.last_request().unwrap());
    assert!(got[1].1 && got[1].0.contains("Permission denied"), "{got:?}");
    assert!(got[2].1 && got[2].0.contains("Plan mode is active"), "{got:?}");
    assert!(
        agent
            .pending_approval(ctx("alice", "s1"))
            .await
            .unwrap()
            .calls
            .is_empty()
    );
    assert!(planning(dir.path()).await);
}

/// Plan mode is kept with the session: a new agent on the same workspace still plans in
/// that session, and only there. `plan_exit` outside plan mode is an error result.
#[tokio::test]
async fn plan_mode_survives_a_restart_and_is_per_session() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("plan_enter", json!({}))
        .reply_text("planning");
    let first = shell_agent(dir.path(), PLAN_ON, &model);
    first.call("plan", ctx("alice", "s1")).await.unwrap();
    drop(first);

    let model = ScriptedModel::new()
        .reply_tool_call("write_file", json!({"path": "out.txt", "content": "x"}))
        .reply_text("refused")
        .reply_tool_call("write_file", json!({"path": "out.txt", "content": "x"}))
        .reply_text("written");
    let second = shell_agent(dir.path(), PLAN_ON, &model);
    second.call("write now", ctx("alice", "s1")).await.unwrap();
    let requests = model.requests();
    assert!(banner(&requests[0]).is_some(), "still planning after the restart");
    let got = results(&requests[1]);
    assert!(got.last().unwrap().0.contains("Plan mode is active"), "{got:?}");
    assert!(!dir.path().join("alice/out.txt").exists());
    second
        .call("write in another session", ctx("alice", "s2"))
        .await
        .unwrap();
    let requests = model.requests();
    assert_eq!(banner(&requests[2]), None, "plan mode is per session");
    assert!(dir.path().join("alice/out.txt").exists());

    let model = ScriptedModel::new()
        .reply_tool_call("plan_exit", json!({}))
        .reply_text("ok");
    let third = shell_agent(
        dir.path(),
        &format!("{PLAN_ON}[permissions]\nmode = \"default\"\n"),
        &model,
    );
    third.call("leave", ctx("alice", "s2")).await.unwrap();
    let pending = third.pending_approval(ctx("alice", "s2")).await.unwrap();
    assert_eq!(
        pending.calls.len(),
        1,
        "plan_exit asks even outside plan mode: {pending:?}"
    );
    assert_eq!(pending.calls[0].tool, "plan_exit");
    assert_eq!(pending.calls[0].suggestion, None, "no rule can allow it");
}

/// The banner is in the volatile tail of the system prompt only while planning: nothing
/// before `plan_enter`, never an extra message, and the stable prefix does not change.
#[tokio::test]
async fn the_banner_is_only_in_the_volatile_tail_and_empty_when_inactive() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("plan_enter", json!({}))
        .reply_text("planning");
    let agent = shell_agent(dir.path(), PLAN_ON, &model);
    agent.call("plan", ctx("alice", "s1")).await.unwrap();
    let requests = model.requests();
    assert_eq!(banner(&requests[0]), None, "nothing while inactive");
    let shown = banner(&requests[1]).unwrap();
    assert!(
        shown.starts_with("## Plan mode\n") && shown.contains("plan_exit"),
        "{shown}"
    );
    let stable = |request: &ChatRequest| -> Vec<String> {
        request
            .system
            .parts
            .iter()
            .filter(|part| part.stable)
            .map(|part| part.text.clone())
            .collect()
    };
    assert_eq!(
        stable(&requests[0]),
        stable(&requests[1]),
        "the stable prefix is unchanged"
    );
    for msg in &requests[1].messages {
        if msg.role != Role::Tool {
            assert!(!msg.text().contains("## Plan mode"), "never a message: {msg:?}");
        }
    }
    let off = ScriptedModel::new().reply_text("hi");
    let plain = agent_without_plan(dir.path(), &off);
    plain.call("hi", ctx("alice", "s9")).await.unwrap();
    assert_eq!(banner(&off.requests()[0]), None);
    assert!(
        !plain
            .kernel()
            .tool_specs()
            .iter()
            .any(|spec| spec.name.starts_with("plan_")),
        "off by default"
    );
}

fn agent_without_plan(dir: &Path, model: &ScriptedModel) -> HarnessAgent {
    builder().workspace(dir).model(model.clone()).build().unwrap()
}

const CHILD: &str = "CHILD-MARKER";

/// A child spawned while the parent plans is in plan mode too: its writes are refused, its
/// prompt carries the banner, and it cannot leave plan mode itself. A child spawned after
/// the parent stopped planning is not.
#[tokio::test(start_paused = true)]
async fn children_spawned_while_the_parent_plans_plan_too() {
    let dir = tempfile::tempdir().unwrap();
    let child_requests: Arc<Mutex<Vec<ChatRequest>>> = Arc::default();
    let parent_replies: Arc<Mutex<Vec<Reply>>> = Arc::new(Mutex::new(vec![
        Reply::tool_call("plan_enter", json!({})),
        Reply::tool_call("agent_spawn", json!({"agent_id": "researcher", "task": "look around"})),
        Reply::text("parent done"),
    ]));
    let seen = Arc::clone(&child_requests);
    let queue = Arc::clone(&parent_replies);
    let model = ScriptedModel::from_fn(move |request| {
        let system: String = request.system.parts.iter().map(|part| part.text.as_str()).collect();
        if system.contains(CHILD) {
            seen.lock().unwrap().push(request.clone());
            let tool_results = results(request);
            match tool_results.len() {
                0 => Reply::tool_call("write_file", json!({"path": "child.txt", "content": "x"})),
                1 => Reply::tool_call("plan_exit", json!({})),
                _ => Reply::text(format!("child saw: {:?}", tool_results)),
            }
        } else {
            let mut queue = queue.lock().unwrap();
            if queue.is_empty() {
                Reply::text("parent done")
            } else {
                queue.remove(0)
            }
        }
    });
    let researcher = SubagentDeclaration::new("researcher", "Finds facts", format!("{CHILD} You research."));
    let parent = builder()
        .workspace(dir.path())
        .plan(PlanSection {
            enabled: true,
            ..PlanSection::default()
        })
        .subagent(researcher)
        .model(model.clone())
        .build()
        .unwrap();
    parent.call("plan with help", ctx("alice", "s1")).await.unwrap();
    let children = child_requests.lock().unwrap().clone();
    assert!(children.len() >= 3, "{children:?}");
    let shown = banner(&children[0]).unwrap();
    assert!(shown.contains("started you is planning"), "{shown}");
    let got = results(children.last().unwrap());
    assert!(got[0].1 && got[0].0.contains("Plan mode is active"), "{got:?}");
    assert!(got[1].1, "a child cannot leave its parent's plan mode: {got:?}");
    assert!(written(dir.path()).is_empty(), "nothing written while planning");

    // Not planning: a new child writes.
    child_requests.lock().unwrap().clear();
    parent_replies.lock().unwrap().push(Reply::tool_call(
        "agent_spawn",
        json!({"agent_id": "researcher", "task": "write it"}),
    ));
    parent.call("now without planning", ctx("alice", "s2")).await.unwrap();
    let children = child_requests.lock().unwrap().clone();
    assert_eq!(banner(&children[0]), None, "{children:?}");
    // An isolated child writes in its own layer for the parent's session.
    assert_eq!(
        written(dir.path()),
        vec![
            dir.path()
                .join("alice/agents/harness/subagents/researcher/s2/child.txt")
        ],
        "the child wrote"
    );
}

/// Every `child.txt` under `dir`.
fn written(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(next) = stack.pop() {
        for entry in std::fs::read_dir(next).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|name| name == "child.txt") {
                found.push(path);
            }
        }
    }
    found
}

/// `[plan]` keys are checked when harness.toml is parsed; plan mode brings `todo_write`.
#[test]
fn the_plan_section_is_checked_and_plan_mode_brings_the_task_list() {
    let parse = |text: &str| harness::HarnessConfig::parse(text, Path::new("harness.toml"));
    let err = parse("[plan]\nenable = true\n").unwrap_err().to_string();
    assert!(err.contains("[plan]") && err.contains("enable"), "{err}");
    assert!(parse("[plan]\nallow_shell = \"yes\"\n").is_err());
    let dir = tempfile::tempdir().unwrap();
    let agent = builder()
        .workspace(dir.path())
        .config(parse(PLAN_ON).unwrap())
        .task_list(false)
        .model(ScriptedModel::new())
        .build()
        .unwrap();
    assert!(agent.kernel().tool_specs().iter().any(|spec| spec.name == "todo_write"));
}

/// Plays a sandbox's binder for the file-tool test: the call's work tree is `tree` (the
/// directory `execute` would see), as `harness_sandbox::BindCall` makes it.
struct BindWorkTree(Arc<dyn harness_fs::Filesystem>);

#[harness_core::async_trait]
impl harness_core::Middleware for BindWorkTree {
    fn name(&self) -> &'static str {
        "test_work_tree"
    }

    fn hooks(&self) -> harness_core::Hooks {
        harness_core::Hooks::AGENT
    }

    async fn agent(
        &self,
        turn: &mut harness_core::Turn,
        next: harness_core::AgentNext<'_>,
    ) -> Result<(), harness_core::AgentError> {
        turn.ctx_mut().insert(harness_fs::CallWorkTree(Arc::clone(&self.0)));
        next.run(turn).await
    }
}

/// A real file tool registered under another name with read-only annotations: what a
/// misregistered tool looks like to the plan filter, which lets it through.
struct Misannotated {
    inner: Arc<dyn harness_core::Tool>,
    spec: harness_core::ToolSpec,
}

impl Misannotated {
    fn wrap(name: &str, inner: Arc<dyn harness_core::Tool>) -> Arc<dyn harness_core::Tool> {
        let mut spec = inner.spec().clone();
        spec.name = name.to_owned();
        spec.annotations = harness_core::ToolAnnotations::new().read_only();
        Arc::new(Self { inner, spec })
    }
}

#[harness_core::async_trait]
impl harness_core::Tool for Misannotated {
    fn spec(&self) -> &harness_core::ToolSpec {
        &self.spec
    }

    async fn call(
        &self,
        input: serde_json::Value,
        ctx: &harness_core::ToolContext,
    ) -> Result<harness_core::ToolOutput, harness_core::ToolError> {
        self.inner.call(input, ctx).await
    }
}

/// In plan mode a sandboxed call's work tree is read-only in the filesystem layer, not only
/// behind the tool filter: the real `write_file` and `edit_file`, registered as read-only
/// tools so the filter lets them through, fail with a result saying plan mode is active, and
/// the host files are unchanged. Reads still work, and the same tools write once plan mode
/// is off.
#[tokio::test]
async fn file_tools_that_slip_past_the_filter_cannot_write_the_work_tree_in_plan_mode() {
    let dir = tempfile::tempdir().unwrap();
    let tree_dir = dir.path().join("tree");
    std::fs::create_dir_all(&tree_dir).unwrap();
    std::fs::write(tree_dir.join("seed.txt"), "seed\n").unwrap();
    let tree: Arc<dyn harness_fs::Filesystem> = Arc::new(harness_fs::LocalFs::new(&tree_dir).unwrap());
    let model = ScriptedModel::new()
        .reply_tool_call(
            "sneaky_write",
            json!({"path": "seed.txt", "content": "before", "overwrite": true}),
        )
        .reply_text("wrote")
        .reply_tool_call("plan_enter", json!({}))
        .reply_tool_call("sneaky_write", json!({"path": "planned.txt", "content": "x"}))
        .reply_tool_call(
            "sneaky_write",
            json!({"path": "seed.txt", "content": "x", "overwrite": true}),
        )
        .reply_tool_call(
            "sneaky_edit",
            json!({"path": "seed.txt", "old_string": "before", "new_string": "after"}),
        )
        .reply_tool_call("read_file", json!({"path": "seed.txt"}))
        .reply_text("planned");
    let agent = builder()
        .workspace(dir.path())
        .config(crate::support::parse(PLAN_ON))
        .model(model.clone())
        .middleware(Arc::new(BindWorkTree(Arc::clone(&tree))))
        .tool(Misannotated::wrap(
            "sneaky_write",
            harness_core::typed(harness::tools::files::WriteFile),
        ))
        .tool(Misannotated::wrap(
            "sneaky_edit",
            harness_core::typed(harness::tools::files::EditFile),
        ))
        .build()
        .unwrap();
    agent.call("write first", ctx("alice", "s1")).await.unwrap();
    let got = results(&model.last_request().unwrap());
    assert!(!got[0].1, "outside plan mode the tool writes: {got:?}");
    assert_eq!(std::fs::read_to_string(tree_dir.join("seed.txt")).unwrap(), "before");

    agent.call("plan", ctx("alice", "s1")).await.unwrap();
    let got = results(&model.last_request().unwrap());
    let got = &got[got.len() - 5..];
    assert!(!got[0].1 && got[0].0.contains("Plan mode is now active"), "{got:?}");
    for refused in &got[1..4] {
        assert!(refused.1, "a write in plan mode failed: {got:?}");
        assert!(
            refused.0.contains("read-only") && refused.0.contains("plan mode is active"),
            "the refusal says why: {got:?}"
        );
        assert!(
            !refused.0.contains("Plan mode is active, so"),
            "the filter let it through; the filesystem refused it: {got:?}"
        );
    }
    assert!(!got[4].1 && got[4].0.contains("before"), "reads still work: {got:?}");
    assert_eq!(
        std::fs::read_to_string(tree_dir.join("seed.txt")).unwrap(),
        "before",
        "the host file is unchanged"
    );
    assert!(!tree_dir.join("planned.txt").exists(), "nothing new was written");
}
