//! The tools, called as the model would.

use crate::support::{MemFs, ctx, memory};
use harness_core::{EventSink, Msg, Tool, ToolContext, ToolError};
use harness_memory::MemoryConfig;
use harness_models::ScriptedModel;
use serde_json::{Value, json};
use std::sync::Arc;

struct Kit {
    tools: Vec<Arc<dyn Tool>>,
    _dir: tempfile::TempDir,
}

fn kit() -> Kit {
    let (memory, dir) = memory(&ScriptedModel::new(), MemoryConfig::default());
    Kit {
        tools: memory.tools(),
        _dir: dir,
    }
}

impl Kit {
    async fn call(&self, name: &str, input: Value, fs: &Arc<MemFs>, user: &str) -> Result<String, ToolError> {
        let tool = self
            .tools
            .iter()
            .find(|tool| tool.spec().name == name)
            .unwrap_or_else(|| panic!("no tool {name}"));
        let context = ToolContext {
            runtime: ctx(user, "current", fs),
            call_id: "c1".into(),
            events: EventSink::disabled(),
            session: harness_core::SessionState::default(),
        };
        tool.call(input, &context).await.map(|output| output.text_content())
    }
}

fn failed(result: Result<String, ToolError>) -> String {
    match result {
        Err(err) => err.to_string(),
        Ok(text) => panic!("expected an error, got {text}"),
    }
}

fn transcript(messages: &[Msg]) -> String {
    messages
        .iter()
        .map(|msg| serde_json::to_string(msg).unwrap_or_default() + "\n")
        .collect()
}

#[test]
fn parameter_names_follow_the_reference_catalogue() {
    let kit = kit();
    let properties = |name: &str| -> Vec<String> {
        let tool = kit.tools.iter().find(|tool| tool.spec().name == name).expect("tool");
        let mut names: Vec<String> = tool.spec().input_schema["properties"]
            .as_object()
            .map(|props| props.keys().cloned().collect())
            .unwrap_or_default();
        names.sort();
        names
    };
    assert_eq!(properties("memory_search"), ["maxResults", "query"]);
    assert_eq!(properties("memory_get"), ["endLine", "path", "startLine"]);
    assert_eq!(properties("session_search"), ["agentId", "maxResults", "query"]);
    assert_eq!(properties("session_history"), ["agentId", "lastN", "sessionId"]);
    assert_eq!(properties("session_list"), ["agentId"]);
}

/// Every memory tool only reads the user's own memory and transcripts: read-only,
/// closed-world, so the kernel runs them concurrently.
#[test]
fn memory_tools_are_read_only_and_closed_world() {
    let kit = kit();
    assert_eq!(kit.tools.len(), 5);
    for tool in &kit.tools {
        let hints = tool.spec().annotations;
        let name = &tool.spec().name;
        assert!(hints.is_read_only() && !hints.is_open_world(), "{name}: {hints:?}");
        assert!(hints.is_concurrency_safe(), "{name}");
    }
}

#[tokio::test]
async fn memory_search_returns_ranked_hits_with_path_and_line() {
    let fs = MemFs::new();
    fs.put(
        "MEMORY.md",
        "## Pets\n- The user has a dog named Rex.\n- The user has a cat.\n",
    );
    let kit = kit();
    let out = kit
        .call("memory_search", json!({"query": "dog Rex"}), &fs, "u1")
        .await
        .expect("search");
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("Found 1 matches for \"dog Rex\":"));
    assert!(
        lines
            .next()
            .is_some_and(|line| line.starts_with("Source: MEMORY.md#2 (score ")
                && line.ends_with("): - The user has a dog named Rex.")),
        "{out}"
    );
    let none = kit
        .call("memory_search", json!({"query": "giraffe"}), &fs, "u1")
        .await
        .expect("search");
    assert_eq!(none, "No matching memories found for: giraffe");
    assert_eq!(
        failed(kit.call("memory_search", json!({"query": "  "}), &fs, "u1").await),
        "No query provided"
    );
}

#[tokio::test]
async fn memory_get_reads_bounded_line_ranges_of_memory_files_only() {
    let fs = MemFs::new();
    let log: String = (1..=450).map(|n| format!("- fact {n}\n")).collect();
    fs.put("memory/2026-11-29.md", &log);
    fs.put("AGENTS.md", "rules");
    let kit = kit();
    let get = |input: Value| kit.call("memory_get", input, &fs, "u1");

    let out = get(json!({"path": "memory/2026-11-29.md", "startLine": 3, "endLine": 4}))
        .await
        .expect("get");
    assert_eq!(
        out,
        "3|- fact 3\n4|- fact 4\n(lines 3-4 of 450; call again with startLine=5 for more)"
    );
    let out = get(json!({"path": "/memory/2026-11-29.md", "startLine": 449, "endLine": 1000}))
        .await
        .expect("get");
    assert_eq!(out, "449|- fact 449\n450|- fact 450");
    let out = get(json!({"path": "memory/2026-11-29.md", "startLine": 1, "endLine": 450}))
        .await
        .expect("get");
    assert_eq!(
        out.lines().filter(|line| line.contains('|')).count(),
        200,
        "at most 200 lines per call"
    );
    assert_eq!(
        failed(get(json!({"path": "memory/2026-11-29.md", "startLine": 451, "endLine": 460})).await),
        "startLine 451 exceeds file length 450"
    );
    assert_eq!(
        failed(get(json!({"path": "memory/missing.md", "startLine": 1, "endLine": 2})).await),
        "file not found: memory/missing.md"
    );
    assert!(failed(get(json!({"path": "AGENTS.md", "startLine": 1, "endLine": 2})).await).contains("use read_file"));
    assert!(failed(get(json!({"path": "memory/../AGENTS.md", "startLine": 1, "endLine": 2})).await).contains("'..'"));
}

#[tokio::test]
async fn session_tools_read_the_callers_own_sessions() {
    let fs = MemFs::new();
    let messages: Vec<Msg> = (1..=30)
        .map(|n| {
            if n % 2 == 1 {
                Msg::user(format!("question {n}"))
            } else {
                Msg::assistant(format!("answer {n}"))
            }
        })
        .collect();
    fs.put(
        "agents/helper/sessions/s1.log.jsonl",
        &format!("{}{{\"v\":1,\"id\":\"torn", transcript(&messages)),
    );
    fs.put(
        "agents/helper/sessions/sessions.json",
        r#"{"v":1,"sessions":{
            "s1":{"summary":"question 1","created":"2026-11-28T10:00:00Z","updated":"2026-11-29T10:00:00Z","message_count":30},
            "s0":{"summary":"an older chat","created":"2026-11-01T10:00:00Z","updated":"2026-11-01T11:00:00Z","message_count":4}}}"#,
    );
    let stranger = MemFs::new();
    let kit = kit();

    let history = kit
        .call("session_history", json!({"sessionId": "s1", "lastN": 3}), &fs, "u1")
        .await
        .expect("history");
    assert_eq!(
        history,
        "Session s1 (agent helper): last 3 of 30 messages\n[assistant]: answer 28\n[user]: question 29\n[assistant]: answer 30"
    );
    let list = kit
        .call("session_list", json!({"agentId": "helper"}), &fs, "u1")
        .await
        .expect("list");
    assert_eq!(
        list,
        "Sessions of agent helper (2), most recent first:\n\
         - s1 · updated 2026-11-29T10:00:00Z · 30 messages · question 1\n\
         - s0 · updated 2026-11-01T11:00:00Z · 4 messages · an older chat"
    );
    let found = kit
        .call(
            "session_search",
            json!({"query": "answer 28", "maxResults": 1}),
            &fs,
            "u1",
        )
        .await
        .expect("search");
    assert!(
        found.contains("[agents/helper/sessions/s1.log.jsonl#28] session s1 — [assistant]: answer 28"),
        "{found}"
    );

    // Another user's namespace has none of it.
    assert_eq!(
        failed(
            kit.call(
                "session_history",
                json!({"agentId": "helper", "sessionId": "s1"}),
                &stranger,
                "u2"
            )
            .await
        ),
        "session not found: s1 (agent helper); use session_list to see the sessions"
    );
    let none = kit
        .call("session_search", json!({"query": "answer"}), &stranger, "u2")
        .await
        .expect("search");
    assert!(none.starts_with("No matching sessions found for: answer"), "{none}");
    assert!(failed(kit.call("session_history", json!({"agentId": "../x"}), &fs, "u1").await).contains("agentId"));
}
