//! The real MCP servers installed by `scripts/mcp-servers.sh` (`@modelcontextprotocol/server-everything`
//! over stdio and streamable HTTP, `mcp-server-time`) and helpers to drive a [`McpManager`].

use harness_core::{EventSink, RuntimeContext, Tool, ToolContext, ToolError, ToolOutput};
use harness_mcp::tools_json::ToolsConfig;
use harness_mcp::{HostEnv, McpManager, RestartPolicy, ServerStatus};
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

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

pub async fn start(text: &str, policy: RestartPolicy) -> McpManager {
    let config = config(text);
    McpManager::start(config.mcp_servers.into_values(), &host_env(), policy).await
}

pub fn tool_ctx() -> ToolContext {
    ToolContext {
        runtime: RuntimeContext::for_user(harness_core::UserId::from_static("u1")),
        call_id: "call-1".into(),
        events: EventSink::disabled(),
        session: harness_core::SessionState::default(),
    }
}

pub fn find(manager: &McpManager, name: &str) -> Arc<dyn Tool> {
    manager
        .tools()
        .into_iter()
        .find(|tool| tool.spec().name == name)
        .unwrap_or_else(|| panic!("no tool {name}; failures: {:?}", manager.failures()))
}

pub async fn call(manager: &McpManager, name: &str, input: Value) -> Result<ToolOutput, ToolError> {
    find(manager, name).call(input, &tool_ctx()).await
}

pub async fn wait_for(
    status: &mut watch::Receiver<ServerStatus>,
    what: impl Fn(&ServerStatus) -> bool,
) -> ServerStatus {
    let status = tokio::time::timeout(Duration::from_secs(60), status.wait_for(|s| what(s)))
        .await
        .expect("server state did not change in time")
        .expect("status channel closed");
    status.clone()
}

/// Processes (not zombies) whose process group is one of `groups`.
pub fn live_members(groups: &BTreeSet<u32>) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the parenthesised command: state ppid pgrp ...
        let Some(rest) = stat.rfind(')').map(|at| &stat[at + 2..]) else {
            continue;
        };
        let fields: Vec<&str> = rest.split(' ').collect();
        let (state, pgrp) = (fields[0], fields[2].parse::<u32>().unwrap_or(0));
        if groups.contains(&pgrp) && state != "Z" {
            found.push((pid, stat.clone()));
        }
    }
    found
}

/// Starts server-everything over streamable HTTP on a free port and waits for its
/// "listening" line (a readiness signal, not a sleep).
pub async fn http_server() -> (tokio::process::Child, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    (http_server_on(port).await, port)
}

/// Starts server-everything over streamable HTTP on `port`.
pub async fn http_server_on(port: u16) -> tokio::process::Child {
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
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("listening on port") {
                return;
            }
        }
        panic!("server exited before listening");
    })
    .await
    .unwrap();
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    child
}
