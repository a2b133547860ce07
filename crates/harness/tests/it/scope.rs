//! Issue 9 through the agent: one `CallScope` per call (problems 1, 2, 4), the session lease
//! (problem 7, a lost lease), and what the four isolation scopes share.

use crate::support::*;
use harness::HarnessAgent;
use harness_core::{
    CancellationToken, ChatRequest, LeaseError, LeaseGuard, LeaseKey, LeaseRelease, Role, SessionLease, async_trait,
};
use harness_fs::IsolationScope;
use harness_models::{Reply, ScriptedModel};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A model that runs `<tool> <json args>` given as the user's message, then answers with the
/// tool's result text; any other message is echoed.
fn tool_runner() -> ScriptedModel {
    ScriptedModel::from_fn(|request: &ChatRequest| {
        let Some(last) = request.messages.last() else {
            return Reply::text("empty");
        };
        if last.role == Role::User {
            let text = last.text();
            if let Some((tool, args)) = text.split_once(' ')
                && let Ok(args) = serde_json::from_str::<serde_json::Value>(args)
            {
                return Reply::tool_call(tool, args);
            }
            if text.is_empty() {
                // A tool result travels as a user-role message in some encodings.
                return Reply::text(result_text(last));
            }
            return Reply::text(format!("echo: {text}"));
        }
        Reply::text(result_text(last))
    })
}

fn result_text(msg: &harness_core::Msg) -> String {
    serde_json::to_string(&msg.content).unwrap_or_default()
}

fn scoped(dir: &Path, scope: IsolationScope, model: &ScriptedModel) -> HarnessAgent {
    builder()
        .workspace(dir)
        .isolation(scope)
        .model(model.clone())
        .build()
        .unwrap()
}

async fn run(agent: &HarnessAgent, user: &str, session: &str, input: &str) -> String {
    agent.call(input, ctx(user, session)).await.unwrap().text()
}

fn write_tree(dir: &Path, files: &[(&str, &str)]) {
    for (path, text) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

/// Problem 1: the prompt lists `knowledge/products.md` and `read_file` opens it for alice.
#[tokio::test]
async fn problem_1_a_user_reads_shared_knowledge_the_prompt_lists() {
    let dir = tempfile::tempdir().unwrap();
    write_tree(
        dir.path(),
        &[
            ("knowledge/KNOWLEDGE.md", "# Knowledge\n"),
            ("knowledge/products.md", "The X100 router costs 49 EUR.\n"),
        ],
    );
    let model = tool_runner();
    let agent = scoped(dir.path(), IsolationScope::User, &model);
    let answer = run(&agent, "alice", "s1", r#"read_file {"path": "knowledge/products.md"}"#).await;
    assert!(answer.contains("49 EUR"), "{answer}");
    let prompt = model.requests()[0].system.render();
    assert!(prompt.contains("- knowledge/products.md"), "the prompt lists it");
    assert!(
        prompt.contains("shared files"),
        "the prompt says which files are shared"
    );
    // Listing, globbing and grepping see it too.
    for call in [
        r#"list_files {"path": "knowledge"}"#,
        r#"glob_files {"pattern": "**/*.md"}"#,
        r#"grep_files {"pattern": "X100"}"#,
    ] {
        let answer = run(&agent, "alice", "s1", call).await;
        assert!(answer.contains("products.md"), "{call}: {answer}");
    }
}

/// Writing a shared path makes the caller's own copy; the shared file never changes, and other
/// users still see it. Under the shared scopes the write is refused.
#[tokio::test]
async fn shared_files_are_read_only_to_the_model() {
    let dir = tempfile::tempdir().unwrap();
    write_tree(dir.path(), &[("knowledge/products.md", "original\n")]);
    let model = tool_runner();
    let agent = scoped(dir.path(), IsolationScope::User, &model);
    let write = r#"write_file {"path": "knowledge/products.md", "content": "alice's notes\n", "overwrite": true}"#;
    run(&agent, "alice", "s1", write).await;
    let root = dir.path();
    assert_eq!(
        std::fs::read_to_string(root.join("knowledge/products.md")).unwrap(),
        "original\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("alice/knowledge/products.md")).unwrap(),
        "alice's notes\n"
    );
    let read = r#"read_file {"path": "knowledge/products.md"}"#;
    assert!(run(&agent, "alice", "s1", read).await.contains("alice's notes"));
    assert!(run(&agent, "bob", "s1", read).await.contains("original"));

    let global = scoped(dir.path(), IsolationScope::Global, &model);
    let answer = run(&global, "alice", "s2", write).await;
    assert!(answer.contains("read-only"), "{answer}");
    assert_eq!(
        std::fs::read_to_string(root.join("knowledge/products.md")).unwrap(),
        "original\n"
    );
}

/// Problem 2: a workspace-root MEMORY.md is injected, and `memory_search` finds it.
#[tokio::test]
async fn problem_2_memory_search_finds_the_shared_memory() {
    let dir = tempfile::tempdir().unwrap();
    write_tree(dir.path(), &[("MEMORY.md", "- The office wifi password is hunter2.\n")]);
    let model = tool_runner();
    let mut memory = harness_memory::MemoryConfig::default();
    memory.mode = harness_memory::MemoryMode::Off;
    let agent = HarnessAgent::builder()
        .workspace(dir.path())
        .model(model.clone())
        .memory(memory)
        .build()
        .unwrap();
    let answer = run(&agent, "alice", "s1", r#"memory_search {"query": "wifi"}"#).await;
    assert!(answer.contains("MEMORY.md#1") && answer.contains("hunter2"), "{answer}");
    let answer = run(&agent, "alice", "s1", r#"memory_get {"path": "MEMORY.md"}"#).await;
    assert!(answer.contains("hunter2"), "{answer}");
    assert!(model.requests()[0].system.render().contains("hunter2"), "injected");
}

/// Problem 4: under the session, agent and global scopes two users of one session share the
/// state as they share the transcript; the state lives in the scope's namespace.
#[tokio::test]
async fn problem_4_state_follows_the_scope() {
    for (scope, namespace) in [
        (IsolationScope::Session, "s1/"),
        (IsolationScope::Agent, ""),
        (IsolationScope::Global, ""),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let model = tool_runner();
        let agent = scoped(dir.path(), scope, &model);
        run(&agent, "alice", "s1", "alice speaks").await;
        run(&agent, "bob", "s1", "bob speaks").await;
        let texts: Vec<String> = model.requests()[1].messages.iter().map(|m| m.text()).collect();
        assert_eq!(
            texts,
            ["alice speaks", "echo: alice speaks", "bob speaks"],
            "{scope:?}: bob continues the shared session"
        );
        let root = dir.path();
        let state = root.join(format!("{namespace}agents/harness/context/s1/agent_state.json"));
        assert!(state.exists(), "{scope:?}: {state:?}");
        for user in ["alice", "bob"] {
            assert!(!root.join(user).exists(), "{scope:?}: nothing under the user id {user}");
        }
        let transcript = root.join(format!("{namespace}agents/harness/sessions/s1.log.jsonl"));
        let lines = std::fs::read_to_string(transcript).unwrap().lines().count();
        assert_eq!(lines, 4, "{scope:?}");
        // A fresh process sees the same shared state.
        let again = scoped(dir.path(), scope, &model);
        run(&again, "carol", "s1", "carol speaks").await;
        assert_eq!(model.requests()[2].messages.len(), 5, "{scope:?}");
    }
}

/// The four scopes, two users and two sessions: who sees whose files, transcripts and state.
#[tokio::test]
async fn four_scopes_share_exactly_what_they_say() {
    let calls = [("alice", "s1"), ("alice", "s2"), ("bob", "s1"), ("bob", "s2")];
    // For each scope: whose note each call reads back after all four wrote theirs, and
    // where the state of (alice, s1) is.
    let cases: [(IsolationScope, [&str; 4], &str); 4] = [
        (
            IsolationScope::User,
            ["alice/s2", "alice/s2", "bob/s2", "bob/s2"],
            "alice/agents/harness/context/s1",
        ),
        (
            IsolationScope::Session,
            ["bob/s1", "bob/s2", "bob/s1", "bob/s2"],
            "s1/agents/harness/context/s1",
        ),
        (
            IsolationScope::Agent,
            ["bob/s2", "bob/s2", "bob/s2", "bob/s2"],
            "agents/harness/context/s1",
        ),
        (
            IsolationScope::Global,
            ["bob/s2", "bob/s2", "bob/s2", "bob/s2"],
            "agents/harness/context/s1",
        ),
    ];
    for (scope, seen, state_dir) in cases {
        let dir = tempfile::tempdir().unwrap();
        let model = tool_runner();
        let agent = scoped(dir.path(), scope, &model);
        for (user, session) in calls {
            let write =
                format!(r#"write_file {{"path": "note.md", "content": "{user}/{session}", "overwrite": true}}"#);
            run(&agent, user, session, &write).await;
        }
        for ((user, session), expected) in calls.iter().zip(seen) {
            let answer = run(&agent, user, session, r#"read_file {"path": "note.md"}"#).await;
            assert!(answer.contains(expected), "{scope:?} {user}/{session}: {answer}");
        }
        let root = dir.path();
        assert!(root.join(state_dir).join("agent_state.json").exists(), "{scope:?}");
        // The transcript of (alice, s1) holds the turns of everyone who shares it.
        let transcript = root
            .join(state_dir.replace("context/s1", "sessions/s1.log.jsonl"))
            .to_string_lossy()
            .into_owned();
        let turns = std::fs::read_to_string(&transcript)
            .unwrap()
            .lines()
            .filter(|line| line.contains(r#""role":"user""#) && line.contains("write_file"))
            .count();
        let sharers = match scope {
            IsolationScope::User => 1,
            _ => 2,
        };
        assert_eq!(turns, sharers, "{scope:?}: {transcript}");
        // One lock file per lease key at most: two per shared namespace and session.
        let locks = walk(&root.join(".harness/locks"));
        let keys = if scope == IsolationScope::User { 4 } else { 2 };
        assert!(locks.len() <= keys, "{scope:?}: {locks:?}");
    }
}

fn walk(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path.to_string_lossy().into_owned());
        }
    }
    found
}

/// Problem 7: sessions `v1.2`, `v1.3` and `v1` (and `v1.2.lock`) do not share a lock; a
/// hidden name such as `..hidden` cannot be a session id at all.
#[tokio::test]
async fn problem_7_similar_session_ids_have_their_own_lease() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::from_fn(|request| {
        let last = request.messages.last().map(|m| m.text()).unwrap_or_default();
        if last == "slow" {
            Reply::text("slow done").delayed(Duration::from_secs(60))
        } else {
            Reply::text("fast done")
        }
    });
    let agent = agent(dir.path(), &model);
    let slow = {
        let agent = agent.clone();
        tokio::spawn(async move { agent.call("slow", ctx("u", "v1.2")).await })
    };
    // Wait until the slow turn holds its lease (its request reached the model).
    while model.requests().is_empty() {
        tokio::task::yield_now().await;
    }
    assert!(harness_core::SessionId::parse("..hidden").is_err());
    for session in ["v1.3", "v1", "v1.2.lock"] {
        let fast = tokio::time::timeout(Duration::from_secs(10), agent.call("fast", ctx("u", session))).await;
        assert_eq!(fast.unwrap().unwrap().text(), "fast done", "{session}");
    }
    slow.abort();
}

/// A lease that is lost as soon as it is held (as when a shared-store lease expires).
struct LostAtOnce;

struct Nothing;

#[async_trait]
impl LeaseRelease for Nothing {
    async fn release(self: Box<Self>) {}
    fn release_now(self: Box<Self>) {}
}

#[async_trait]
impl SessionLease for LostAtOnce {
    async fn acquire(&self, _key: &LeaseKey, _cancel: &CancellationToken) -> Result<LeaseGuard, LeaseError> {
        let lost = CancellationToken::new();
        lost.cancel();
        Ok(LeaseGuard::new(
            Some(harness_core::FencingToken::new(7)),
            lost,
            Box::new(Nothing),
        ))
    }
}

#[tokio::test]
async fn a_lost_lease_cancels_the_turn_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new().reply(Reply::text("never").delayed(Duration::from_secs(60)));
    let agent = builder()
        .workspace(dir.path())
        .model(model)
        .session_lease(Arc::new(LostAtOnce))
        .build()
        .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(10), agent.call("hi", ctx("u", "s")))
        .await
        .unwrap()
        .unwrap_err();
    let chain = harness_core::error_chain(&err);
    assert!(chain.contains("session lease was lost"), "{chain}");
    // A race, not a failure: a conflict (409 over HTTP), not an internal error.
    assert_eq!(err.kind(), harness_core::ErrorKind::Conflict, "{chain}");
}

/// Waiting for a busy session honours the call's cancellation.
#[tokio::test]
async fn cancelling_a_waiting_call_ends_it() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new().reply(Reply::text("slow").delayed(Duration::from_secs(60)));
    let agent = agent(dir.path(), &model);
    let holder = {
        let agent = agent.clone();
        tokio::spawn(async move { agent.call("one", ctx("u", "s")).await })
    };
    while model.requests().is_empty() {
        tokio::task::yield_now().await;
    }
    let cancel = CancellationToken::new();
    let waiting = {
        let agent = agent.clone();
        let ctx = ctx("u", "s").with_cancellation(cancel.clone());
        tokio::spawn(async move { agent.call("two", ctx).await })
    };
    cancel.cancel();
    let err = waiting.await.unwrap().unwrap_err();
    assert!(matches!(err, harness_core::AgentError::Cancelled), "{err:?}");
    holder.abort();
}

/// A lease whose holders carry a fencing token (as a shared-store lease does).
struct Fenced;

#[async_trait]
impl SessionLease for Fenced {
    async fn acquire(&self, _key: &LeaseKey, _cancel: &CancellationToken) -> Result<LeaseGuard, LeaseError> {
        Ok(LeaseGuard::new(
            Some(harness_core::FencingToken::new(42)),
            CancellationToken::new(),
            Box::new(Nothing),
        ))
    }
}

/// Records the key and fence of every save.
#[derive(Default)]
struct RecordingStore {
    inner: harness_core::InMemoryStateStore,
    saves: std::sync::Mutex<Vec<(harness_core::StateKey, Option<harness_core::FencingToken>)>>,
}

#[async_trait]
impl harness_core::StateStore for RecordingStore {
    async fn load(
        &self,
        key: &harness_core::StateKey,
    ) -> Result<Option<(harness_core::AgentState, harness_core::Version)>, harness_core::StateError> {
        self.inner.load(key).await
    }

    async fn save(
        &self,
        key: &harness_core::StateKey,
        state: &harness_core::AgentState,
        expected: harness_core::Version,
        fence: Option<harness_core::FencingToken>,
    ) -> Result<harness_core::Version, harness_core::StateError> {
        self.saves.lock().unwrap().push((key.clone(), fence));
        self.inner.save(key, state, expected, fence).await
    }

    async fn delete(&self, key: &harness_core::StateKey) -> Result<(), harness_core::StateError> {
        self.inner.delete(key).await
    }
}

/// The lease's fencing token goes onto the state save, and the state key is the scope's.
#[tokio::test]
async fn the_lease_token_and_the_scope_key_reach_the_state_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(RecordingStore::default());
    let agent = builder()
        .workspace(dir.path())
        .isolation(IsolationScope::Session)
        .model(ScriptedModel::new().reply_text("ok"))
        .state_store(Arc::clone(&store) as Arc<dyn harness_core::StateStore>)
        .session_lease(Arc::new(Fenced))
        .build()
        .unwrap();
    run(&agent, "alice", "s9", "hi").await;
    let saves = store.saves.lock().unwrap().clone();
    assert_eq!(saves.len(), 1);
    let (key, fence) = &saves[0];
    assert_eq!(
        (key.agent_id.as_str(), key.user_id.as_str(), key.session_id.as_str()),
        ("harness", "s9", "s9")
    );
    assert_eq!(*fence, Some(harness_core::FencingToken::new(42)));
}

/// Compaction's offload and eviction's files are derived from the call's `CallScope`: under
/// each isolation scope they land in the caller's layer as ARCHITECTURE.md's layout table
/// says (`<ns>/large_tool_results/<agent>/…`, `<ns>/agents/<agent>/compacted/<session>/…`).
#[tokio::test]
async fn offloaded_and_evicted_files_land_in_the_scopes_layer() {
    use harness::compaction::CompactionConfig;
    use harness::eviction::ToolResultEvictionConfig;
    for (scope, ns) in [
        (IsolationScope::User, "alice/"),
        (IsolationScope::Session, "s1/"),
        (IsolationScope::Agent, ""),
        (IsolationScope::Global, ""),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let model = ScriptedModel::from_fn(|request: &ChatRequest| {
            let last = request.messages.last().unwrap();
            if last.role == Role::User && last.text() == "dump" {
                Reply::tool_call("dump", serde_json::json!({}))
            } else {
                Reply::text("ok")
            }
        });
        let summaries = ScriptedModel::from_fn(|_| Reply::text("## Intent\nsummary"));
        let agent = builder()
            .workspace(dir.path())
            .isolation(scope)
            .name("bot")
            .tool(crate::doubles::text_tool("dump", |_| "x".repeat(5_000)))
            .permissions(crate::support::unattended())
            .tool_result_eviction(Some(
                ToolResultEvictionConfig::default().max_chars(2_000).preview_chars(100),
            ))
            .compaction(CompactionConfig::default().trigger_messages(6).keep_messages(2))
            .compaction_model(Arc::new(summaries.clone()))
            .model(model)
            .build()
            .unwrap();
        agent.call("dump", ctx("alice", "s1")).await.unwrap();
        for turn in 0..4 {
            agent.call(format!("m{turn}"), ctx("alice", "s1")).await.unwrap();
        }
        assert!(summaries.request_count() >= 1, "{scope:?}: compaction ran");
        let root = dir.path().to_string_lossy().into_owned();
        let files: Vec<String> = walk(dir.path())
            .into_iter()
            .map(|path| path.strip_prefix(&format!("{root}/")).unwrap_or(&path).to_owned())
            .collect();
        let evicted = format!("{ns}large_tool_results/bot/");
        let compacted = format!("{ns}agents/bot/compacted/s1/");
        assert!(
            files
                .iter()
                .any(|path| path.starts_with(&evicted) && path.ends_with(".txt")),
            "{scope:?}: {evicted} in {files:?}"
        );
        assert!(
            files
                .iter()
                .any(|path| path.starts_with(&compacted) && path.ends_with(".jsonl")),
            "{scope:?}: {compacted} in {files:?}"
        );
        let stray = files
            .iter()
            .filter(|path| path.contains("large_tool_results/") || path.contains("/compacted/"))
            .find(|path| !path.starts_with(&evicted) && !path.starts_with(&compacted));
        assert_eq!(stray, None, "{scope:?}");
    }
}
