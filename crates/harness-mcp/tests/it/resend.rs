//! A call whose transport fails is sent again only when it is safe to repeat: against an
//! in-process streamable-HTTP MCP server that drops the connection of the first `tools/call`
//! of each tool (it counts every call it receives, so a re-send is visible).

use crate::servers::tool_ctx;
use harness_mcp::tools_json::ToolsConfig;
use harness_mcp::{HostEnv, McpManager, RestartPolicy};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// `tools/call`s received, by tool name.
type Calls = Arc<Mutex<BTreeMap<String, u32>>>;

/// The server's tools: `write` (no hints), `read` (`readOnlyHint`), `put` (`idempotentHint`,
/// not read-only).
fn tools() -> Value {
    json!({"tools": [
        {"name": "write", "inputSchema": {"type": "object"}},
        {"name": "read", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}},
        {"name": "put", "inputSchema": {"type": "object"},
         "annotations": {"readOnlyHint": false, "idempotentHint": true}}
    ]})
}

/// Serves MCP over streamable HTTP (JSON responses) on `listener` until the test ends.
async fn serve(listener: TcpListener, calls: Calls) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        tokio::spawn(connection(stream, Arc::clone(&calls)));
    }
}

/// One HTTP/1.1 connection: requests until the client closes it, or until a first call of a
/// tool, whose connection is dropped without an answer.
async fn connection(stream: TcpStream, calls: Calls) {
    let mut reader = BufReader::new(stream);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).await.unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).await.unwrap();
        if !request_line.starts_with("POST") {
            // No standalone SSE stream; DELETE of the session is fine too.
            respond(&mut reader, "405 Method Not Allowed", None).await;
            continue;
        }
        let message: Value = serde_json::from_slice(&body).unwrap();
        let id = message["id"].clone();
        let result = match message["method"].as_str().unwrap_or_default() {
            "initialize" => json!({
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "flaky", "version": "1"}
            }),
            "tools/list" => tools(),
            "tools/call" => {
                let name = message["params"]["name"].as_str().unwrap().to_owned();
                let seen = {
                    let mut calls = calls.lock().unwrap();
                    let count = calls.entry(name.clone()).or_default();
                    *count += 1;
                    *count
                };
                if seen == 1 {
                    // The call arrived (and "ran"); the answer never leaves.
                    return;
                }
                json!({"content": [{"type": "text", "text": format!("ran {name}")}]})
            }
            _ if id.is_null() => {
                respond(&mut reader, "202 Accepted", None).await;
                continue;
            }
            _ => json!({}),
        };
        let answer = json!({"jsonrpc": "2.0", "id": id, "result": result});
        respond(&mut reader, "200 OK", Some(answer)).await;
    }
}

async fn respond(stream: &mut BufReader<TcpStream>, status: &str, body: Option<Value>) {
    let body = body.map(|body| body.to_string()).unwrap_or_default();
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\nmcp-session-id: flaky-1\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let stream = stream.get_mut();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
}

/// A manager for the flaky server, `trusted` or not, and the server's call counts.
async fn flaky(trusted: bool) -> (McpManager, Calls) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let calls = Calls::default();
    tokio::spawn(serve(listener, Arc::clone(&calls)));
    let text = format!(
        r#"{{"mcpServers": {{"flaky": {{"transport": "streamableHttp", "url": "http://127.0.0.1:{port}/mcp",
             "timeout_seconds": 20, "trust_annotations": {trusted}}}}}}}"#
    );
    let config = ToolsConfig::parse(&text, "test/tools.json", &|_| None).unwrap();
    let policy = RestartPolicy {
        backoff: Duration::from_millis(20),
        ..RestartPolicy::default()
    };
    let manager = McpManager::start(config.mcp_servers.into_values(), &HostEnv::default(), policy).await;
    assert!(manager.failures().is_empty(), "{:?}", manager.failures());
    (manager, calls)
}

/// Calls `tool` of the flaky server; returns the result text (or error text) and whether it
/// failed.
async fn call(manager: &McpManager, tool: &str) -> (String, bool) {
    let name = format!("mcp__flaky__{tool}");
    let tool = manager
        .tools()
        .into_iter()
        .find(|t| t.spec().name == name)
        .unwrap_or_else(|| panic!("no {name}"));
    match tool.call(json!({}), &tool_ctx()).await {
        Ok(output) => (output.text_content(), output.is_error),
        Err(err) => (err.to_string(), true),
    }
}

fn received(calls: &Calls, tool: &str) -> u32 {
    calls.lock().unwrap().get(tool).copied().unwrap_or(0)
}

#[tokio::test]
async fn a_call_that_is_not_safe_to_repeat_is_sent_once_and_the_model_is_told_it_may_have_run() {
    let (manager, calls) = flaky(false).await;
    for tool in ["write", "read"] {
        let (text, failed) = call(&manager, tool).await;
        assert!(failed, "{tool}: {text}");
        assert!(
            text.contains("connection to the server failed") && text.contains("may or may not have run"),
            "{tool}: {text}"
        );
        assert_eq!(
            received(&calls, tool),
            1,
            "{tool}: an untrusted server's hints never allow a re-send"
        );
    }
    manager.shutdown().await;

    let (manager, calls) = flaky(true).await;
    let (text, failed) = call(&manager, "write").await;
    assert!(failed && text.contains("may or may not have run"), "{text}");
    assert_eq!(
        received(&calls, "write"),
        1,
        "a trusted server's unhinted tool is not re-sent"
    );
    manager.shutdown().await;
}

#[tokio::test]
async fn a_trusted_read_only_or_idempotent_call_is_sent_again_after_a_transport_failure() {
    let (manager, calls) = flaky(true).await;
    for tool in ["read", "put"] {
        let (text, failed) = call(&manager, tool).await;
        assert!(!failed, "{tool}: {text}");
        assert_eq!(text, format!("ran {tool}"));
        assert_eq!(received(&calls, tool), 2, "{tool}: sent once more");
    }
    manager.shutdown().await;
}
