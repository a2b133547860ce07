//! Issue 23: the turn-1 request of a fresh workspace (`harness init` defaults) stays within
//! its byte budget, every tool stays reachable, and the prefix a provider caches is the same
//! bytes on every fresh session.

use crate::cli::{harness, openai_server, text};
use std::path::Path;

/// The budget of a fresh workspace's turn-1 request body. Later features (sandbox, structured
/// output, exposure) add tools or prompt text within it, not on top of it.
const BUDGET: usize = 8 * 1024;

/// `harness init` in `dir/<name>`, then one `harness run` turn against a fake OpenAI server:
/// the body of the turn's first model request (the one offering tools), and the workspace.
fn turn_one(dir: &Path, name: &str) -> (serde_json::Value, String) {
    let ws = dir.join(name);
    let output = harness().arg("init").arg(&ws).output().unwrap();
    assert!(output.status.success(), "{:?}", text(&output));
    let (base, seen, _server) = openai_server::start();
    let output = harness()
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", &base)
        .args(["run", "--model", "openai:any-model", "--workspace"])
        .arg(&ws)
        .arg("hi")
        .output()
        .unwrap();
    assert!(output.status.success(), "{:?}", text(&output));
    let seen = seen.lock().unwrap();
    let first = seen
        .iter()
        .find(|request| request["tools"].as_array().is_some_and(|tools| !tools.is_empty()))
        .unwrap_or_else(|| panic!("no turn request in {seen:?}"))
        .clone();
    (first, ws.display().to_string())
}

fn tool_names(request: &serde_json::Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["function"]["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
#[allow(clippy::print_stderr)]
fn a_fresh_workspaces_turn_one_request_is_within_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let (request, _) = turn_one(dir.path(), "ws");
    let body = serde_json::to_string(&request).unwrap();
    let tools = request["tools"].as_array().unwrap();
    for tool in tools {
        eprintln!(
            "{:>6} B  {}",
            tool.to_string().len(),
            tool["function"]["name"].as_str().unwrap()
        );
    }
    let system = request["messages"][0]["content"].to_string().len();
    eprintln!(
        "turn-1 request: {} B ({} tools, {} B of them; system prompt {system} B)",
        body.len(),
        tools.len(),
        request["tools"].to_string().len()
    );
    assert!(
        body.len() <= BUDGET,
        "the turn-1 request is {} bytes, over the {BUDGET}-byte budget: tighten a description or \
         put a rarely used tool in an on-demand group",
        body.len()
    );
    // The grouped tools are reachable: the activation tool names their groups.
    let names = tool_names(&request);
    for hidden in ["session_search", "task_output", "wait_async_results"] {
        assert!(!names.iter().any(|name| name == hidden), "{hidden} in {names:?}");
    }
    let activate = tools
        .iter()
        .find(|tool| tool["function"]["name"] == "activate_tool_group")
        .unwrap_or_else(|| panic!("no activate_tool_group in {names:?}"));
    let description = activate["function"]["description"].as_str().unwrap();
    for group in ["- sessions: ", "- tasks: "] {
        assert!(description.contains(group), "{description}");
    }
    for tool in [
        "session_search",
        "session_history",
        "session_list",
        "task_output",
        "task_list",
        "task_cancel",
    ] {
        assert!(description.contains(tool), "{tool} not reachable: {description}");
    }
}

#[test]
fn two_fresh_sessions_send_the_same_tools_and_prompt_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let (one, ws_one) = turn_one(dir.path(), "one");
    let (two, ws_two) = turn_one(dir.path(), "two");
    assert_eq!(one["tools"].to_string(), two["tools"].to_string());
    // The system prompt up to its volatile tail (the workspace's path differs, nothing else
    // may).
    let prompt =
        |request: &serde_json::Value, ws: &str| request["messages"][0]["content"].as_str().unwrap().replace(ws, "<ws>");
    assert_eq!(prompt(&one, &ws_one), prompt(&two, &ws_two));
}
