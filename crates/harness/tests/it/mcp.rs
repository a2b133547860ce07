//! MCP tools in agent turns, against real servers installed by `scripts/mcp-servers.sh`:
//! `@modelcontextprotocol/server-everything` (stdio and streamable HTTP) and `mcp-server-time`.
//! The client on its own (restarts, reconnects, timeouts, re-sends) is tested in harness-mcp.

use crate::support::{builder, ctx};
use harness_core::{Block, Role, Tool};
use harness_mcp::tools_json::ToolsConfig;
use harness_mcp::{HostEnv, McpManager, RestartPolicy};
use harness_models::ScriptedModel;
use serde_json::json;
use std::time::Duration;

pub use harness_test_support::tools::{everything_js, time_bin};

/// The test process's environment plus a secret that must never reach a server.
pub fn host_env() -> HostEnv {
    let mut vars: Vec<(String, String)> = std::env::vars().collect();
    vars.push(("HARNESS_TEST_API_KEY".into(), "sk-must-not-leak".into()));
    HostEnv::from_vars(vars)
}

pub fn config(text: &str) -> ToolsConfig {
    let env = host_env();
    ToolsConfig::parse(text, "test/tools.json", &|name| env.get(name)).unwrap()
}

/// `tools.json` text for server-everything over stdio under `name`. The operator trusts its
/// annotations (`"trust_annotations": true`), so its read-only tools run without asking, as
/// these tests of the MCP client expect (what an untrusted server's claims count for is
/// `a_servers_read_only_claim_counts_only_when_tools_json_trusts_it`).
pub fn everything_server(name: &str, extra: &str) -> String {
    format!(
        r#""{name}": {{"transport": "stdio", "command": "node", "args": [{js:?}, "stdio"], "trust_annotations": true{extra}}}"#,
        js = everything_js()
    )
}

async fn start(text: &str, policy: RestartPolicy) -> McpManager {
    let config = config(text);
    McpManager::start(config.mcp_servers.into_values(), &host_env(), policy).await
}

#[tokio::test]
async fn stdio_server_tools_are_listed_and_called_from_an_agent_turn() {
    let manager = start(
        &format!("{{\"mcpServers\": {{{}}}}}", everything_server("everything", "")),
        RestartPolicy::default(),
    )
    .await;
    assert!(manager.failures().is_empty(), "{:?}", manager.failures());
    let names: Vec<String> = manager.tools().iter().map(|t| t.spec().name.clone()).collect();
    for expected in [
        "mcp__everything__echo",
        "mcp__everything__get-sum",
        "mcp__everything__get-env",
    ] {
        assert!(names.contains(&expected.to_owned()), "{names:?}");
    }
    let sum = manager
        .mcp_tools()
        .iter()
        .find(|t| t.remote_name() == "get-sum")
        .unwrap();
    assert_eq!(sum.server(), "everything");

    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("mcp__everything__get-sum", json!({"a": 2, "b": 40}))
        .reply_text("the sum is 42");
    let mut agent = builder().workspace(dir.path()).model(model.clone());
    for tool in manager.tools() {
        agent = agent.tool(tool);
    }
    let agent = agent.build().unwrap();
    let reply = agent.call("add 2 and 40", ctx("u1", "s1")).await.unwrap();
    assert_eq!(reply.text(), "the sum is 42");
    let requests = model.requests();
    assert!(
        requests[0]
            .tools
            .iter()
            .any(|spec| spec.name == "mcp__everything__get-sum")
    );
    let result = requests[1].messages.last().unwrap();
    assert_eq!(result.role, Role::Tool);
    let Block::ToolResult { content, is_error, .. } = &result.content[0] else {
        panic!("{result:?}")
    };
    assert!(!is_error);
    assert!(harness_core::join_text(content).contains("42"), "{content:?}");
    manager.shutdown().await;
}

/// Problem 7 of the trust boundary against a real server: `mcp-server-time` claims
/// `readOnlyHint` for `get_current_time`. Untrusted (the default), the claim is kept for
/// display and scheduling only: the spec the permission check and plan mode read is
/// unhinted, so the call asks under the default permissions. With `"trust_annotations":
/// true` the hint counts and the call runs.
#[tokio::test]
async fn a_servers_read_only_claim_counts_only_when_tools_json_trusts_it() {
    for trusted in [false, true] {
        let manager = start(
            &format!(
                r#"{{"mcpServers": {{"time": {{"transport": "stdio", "command": {:?}, "args": ["--local-timezone", "UTC"],
                     "trust_annotations": {trusted}}}}}}}"#,
                time_bin()
            ),
            RestartPolicy::default(),
        )
        .await;
        assert!(manager.failures().is_empty(), "{:?}", manager.failures());
        let tool = manager
            .mcp_tools()
            .iter()
            .find(|t| t.remote_name() == "get_current_time")
            .unwrap();
        assert_eq!(tool.annotations().read_only, Some(true), "the claim is kept");
        let hints = tool.spec().annotations;
        assert_eq!(hints.is_read_only(), trusted, "{hints:?}");
        assert!(hints.is_concurrency_safe(), "the scheduler may still use the claim");
        let decision = harness::permissions::Policy::default().decide(
            "mcp__time__get_current_time",
            hints,
            &json!({"timezone": "UTC"}),
        );
        if trusted {
            assert_eq!(decision, harness::permissions::Decision::Allow);
        } else {
            assert!(
                matches!(decision, harness::permissions::Decision::Ask { .. }),
                "{decision:?}"
            );
        }
        manager.shutdown().await;
    }
}

/// Starts server-everything over streamable HTTP on a free port and waits for its
/// "listening" line (a readiness signal, not a sleep). The node server takes a port number,
/// not a listener, so the port is one the system just gave out; should another process take
/// it first, the server reports the port in use and another one is tried.
async fn http_server() -> (tokio::process::Child, u16) {
    for _ in 0..5 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if let Some(child) = try_http_server_on(port).await {
            return (child, port);
        }
    }
    panic!("server-everything did not start on any of five free ports");
}

/// The server listening on `port`, or `None` when it exited first (the port was taken).
async fn try_http_server_on(port: u16) -> Option<tokio::process::Child> {
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new("node")
        .arg(everything_js())
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let listening = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("listening on port") {
                return true;
            }
        }
        false
    })
    .await
    .unwrap();
    if !listening {
        return None;
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Some(child)
}

#[tokio::test]
async fn streamable_http_server_with_headers_from_an_agent_turn() {
    let (mut server, port) = http_server().await;
    let manager = start(
        &format!(
            r#"{{"mcpServers": {{"web": {{"transport": "streamableHttp", "url": "http://127.0.0.1:{port}/mcp",
                 "headers": {{"X-Harness-Test": "yes"}}, "timeout_seconds": 20, "trust_annotations": true}}}}}}"#
        ),
        RestartPolicy::default(),
    )
    .await;
    assert!(manager.failures().is_empty(), "{:?}", manager.failures());
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("mcp__web__echo", json!({"message": "over http"}))
        .reply_text("echoed");
    let mut agent = builder().workspace(dir.path()).model(model.clone());
    for tool in manager.tools() {
        agent = agent.tool(tool);
    }
    let agent = agent.build().unwrap();
    assert_eq!(agent.call("echo", ctx("u1", "s1")).await.unwrap().text(), "echoed");
    let result = model.requests()[1].messages.last().unwrap().clone();
    let Block::ToolResult { content, is_error, .. } = &result.content[0] else {
        panic!("{result:?}")
    };
    assert!(
        !is_error && harness_core::join_text(content).contains("over http"),
        "{content:?}"
    );
    manager.shutdown().await;
    server.kill().await.unwrap();
}

#[tokio::test]
async fn a_large_mcp_result_goes_through_eviction() {
    let manager = start(
        &format!("{{\"mcpServers\": {{{}}}}}", everything_server("e", "")),
        RestartPolicy::default(),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let long = "x".repeat(5_000);
    let model = ScriptedModel::new()
        .reply_tool_call("mcp__e__echo", json!({"message": long}))
        .reply_text("ok");
    let mut agent = builder()
        .workspace(dir.path())
        .model(model.clone())
        .tool_result_eviction(Some(
            harness::eviction::ToolResultEvictionConfig::default()
                .max_chars(1_000)
                .preview_chars(200),
        ));
    for tool in manager.tools() {
        agent = agent.tool(tool);
    }
    agent
        .build()
        .unwrap()
        .call("echo a lot", ctx("u1", "s1"))
        .await
        .unwrap();
    let result = model.requests()[1].messages.last().unwrap().clone();
    let Block::ToolResult { content, .. } = &result.content[0] else {
        panic!("{result:?}")
    };
    let text = harness_core::join_text(content);
    assert!(
        text.starts_with("[Tool output too large") && text.len() < 4_000,
        "{text}"
    );
    let evicted = dir.path().join("u1/large_tool_results");
    assert!(
        evicted.is_dir(),
        "the whole result is in a file under {}",
        evicted.display()
    );
    manager.shutdown().await;
}
