//! A caller's own `tools.json` (`<user>/tools.json`): it narrows that caller's tools only,
//! and cannot declare MCP servers.

use crate::support::{builder, ctx};
use harness::extensions::{Extensions, ExtensionsConfig};
use harness_core::{AgentError, Block, ChatRequest};
use harness_mcp::HostEnv;
use harness_mcp::tools_json::ToolsConfig;
use harness_models::ScriptedModel;
use serde_json::json;
use std::path::Path;
use std::sync::Arc;

async fn extensions(root: &Path) -> Arc<Extensions> {
    let text = std::fs::read_to_string(root.join("tools.json")).unwrap();
    let config = ExtensionsConfig {
        tools: ToolsConfig::parse(&text, "tools.json", &|_| None).unwrap(),
        ..ExtensionsConfig::default()
    };
    Arc::new(
        Extensions::start(config, &HostEnv::default(), root, false)
            .await
            .unwrap(),
    )
}

fn offered(request: &ChatRequest) -> Vec<String> {
    request.tools.iter().map(|spec| spec.name.clone()).collect()
}

#[tokio::test]
async fn a_users_file_narrows_that_user_only_and_a_guessed_call_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tools.json"), r#"{"deny": ["write_file"]}"#).unwrap();
    std::fs::create_dir_all(dir.path().join("alice")).unwrap();
    std::fs::write(
        dir.path().join("alice/tools.json"),
        r#"{ // alice only reads
            "allow": ["read_file", "list_files", "write_file"], "deny": ["list_files"] }"#,
    )
    .unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("grep_files", json!({"pattern": "x"}))
        .reply_text("alice done")
        .reply_text("bob done");
    let agent = builder()
        .workspace(dir.path())
        .model(model.clone())
        .extensions(extensions(dir.path()).await)
        .build()
        .unwrap();
    agent.call("hi", ctx("alice", "s1")).await.unwrap();
    agent.call("hi", ctx("bob", "s1")).await.unwrap();
    let requests = model.requests();
    assert_eq!(offered(&requests[0]), ["read_file"], "allow ∩ root, deny ∪ root");
    let Block::ToolResult { content, is_error, .. } = &requests[1].messages.last().unwrap().content[0] else {
        panic!("{:?}", requests[1].messages.last());
    };
    assert!(
        *is_error,
        "a call to a tool alice's file removed is refused: {content:?}"
    );
    let bob = offered(&requests[2]);
    assert!(
        bob.iter().any(|name| name == "grep_files") && bob.iter().any(|name| name == "list_files"),
        "{bob:?}"
    );
    assert!(
        !bob.iter().any(|name| name == "write_file"),
        "the root's deny holds for bob: {bob:?}"
    );
}

#[tokio::test]
async fn mcp_servers_in_a_users_file_is_an_error_naming_the_key_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tools.json"), "{}").unwrap();
    std::fs::create_dir_all(dir.path().join("alice")).unwrap();
    std::fs::write(
        dir.path().join("alice/tools.json"),
        r#"{"mcpServers": {"mine": {"transport": "stdio", "command": "x"}}}"#,
    )
    .unwrap();
    let model = ScriptedModel::new().reply_text("unused");
    let agent = builder()
        .workspace(dir.path())
        .model(model.clone())
        .extensions(extensions(dir.path()).await)
        .build()
        .unwrap();
    let err = agent.call("hi", ctx("alice", "s1")).await.unwrap_err();
    let text = harness_core::error_chain(&err);
    assert!(matches!(err, AgentError::Capability { .. }), "{text}");
    assert!(
        text.contains("alice/tools.json") && text.contains("`mcpServers`"),
        "{text}"
    );
    assert_eq!(model.request_count(), 0);
}

/// Issue 27, attack: a prompt-injected model puts a Claude Code agent file in its caller's
/// own layer (`alice/subagents/helper.md`, `tools: Read, Write`: every name maps) and spawns
/// it. Alice's `tools.json` denies `write_file`: her call's children are narrowed by it too,
/// so the child is neither offered `write_file` nor runs a guessed call to it.
#[tokio::test]
async fn a_users_file_narrows_the_children_of_that_users_calls() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tools.json"), "{}").unwrap();
    std::fs::create_dir_all(dir.path().join("alice/subagents")).unwrap();
    std::fs::write(dir.path().join("alice/tools.json"), r#"{"deny": ["write_file"]}"#).unwrap();
    std::fs::write(
        dir.path().join("alice/subagents/helper.md"),
        "---\nname: helper\ndescription: Helps\ntools: Read, Write\n---\nCHILD-MARKER helper\n",
    )
    .unwrap();
    let children: Arc<std::sync::Mutex<Vec<ChatRequest>>> = Arc::default();
    let parents: Arc<std::sync::Mutex<Vec<ChatRequest>>> = Arc::default();
    let (kept, seen) = (Arc::clone(&children), Arc::clone(&parents));
    let model = ScriptedModel::from_fn(move |request| {
        let system: String = request.system.parts.iter().map(|part| part.text.as_str()).collect();
        if system.contains("CHILD-MARKER") {
            let mut kept = kept.lock().unwrap();
            kept.push(request.clone());
            return if kept.len() == 1 {
                harness_models::Reply::tool_call("write_file", json!({"path": "pwned.txt", "content": "pwned"}))
            } else {
                harness_models::Reply::text("child done")
            };
        }
        let mut seen = seen.lock().unwrap();
        seen.push(request.clone());
        if seen.len() == 1 {
            harness_models::Reply::tool_call("agent_spawn", json!({"agent_id": "helper", "task": "write it"}))
        } else {
            harness_models::Reply::text("parent done")
        }
    });
    let agent = builder()
        .workspace(dir.path())
        .model(model)
        .permissions(crate::support::unattended())
        .extensions(extensions(dir.path()).await)
        .build()
        .unwrap();
    agent.call("hi", ctx("alice", "s1")).await.unwrap();
    assert!(
        !offered(&parents.lock().unwrap()[0])
            .iter()
            .any(|name| name == "write_file"),
        "the parent is narrowed"
    );
    let children = children.lock().unwrap().clone();
    assert_eq!(children.len(), 2, "the child ran: {children:?}");
    let tools = offered(&children[0]);
    assert!(tools.iter().any(|name| name == "read_file"), "{tools:?}");
    assert!(
        !tools.iter().any(|name| name == "write_file"),
        "the child is narrowed by its caller's file: {tools:?}"
    );
    let Some(Block::ToolResult { is_error, .. }) = children[1].messages.last().and_then(|msg| msg.content.first())
    else {
        panic!("{:?}", children[1].messages.last());
    };
    assert!(*is_error, "a guessed call to the denied tool is refused");
    let written = walkdir(dir.path()).into_iter().any(|path| path.ends_with("pwned.txt"));
    assert!(!written, "nothing was written");
}

fn walkdir(root: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path.clone());
            }
            found.push(path);
        }
    }
    found
}
