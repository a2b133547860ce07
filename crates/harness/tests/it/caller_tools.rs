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
