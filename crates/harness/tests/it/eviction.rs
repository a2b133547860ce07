//! Tool-result eviction acceptance tests: placeholder and paging through the recorded file,
//! re-runs, exclusions, and write failures.
#![allow(clippy::expect_used)]

use crate::doubles::{FailingFs, MemFs, ReadFile, collect, ctx_in, ctx_with, notices, outcome, text_tool, warnings};
use harness::eviction::{
    EvictionNotice, EvictionOutcome, NOTICE_TOOL_RESULT_EVICTED, ToolResultEviction, ToolResultEvictionConfig,
    WARNING_EVICTION_FAILED,
};
use harness_core::{Block, ChatRequest, Msg, ReActAgent, Role, RuntimeContext, Tool};
use harness_models::{Reply, ScriptedModel, ScriptedToolCall};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// 5,000 numbered lines, about 130,000 characters.
fn big_text() -> String {
    (0..5_000)
        .map(|n| format!("row {n:05} {}\n", "data ".repeat(3)))
        .collect()
}

fn call_reply(name: &str, id: &str, arguments: serde_json::Value) -> Reply {
    Reply {
        tool_calls: vec![ScriptedToolCall {
            name: name.to_owned(),
            arguments,
            id: Some(id.to_owned()),
        }],
        ..Reply::default()
    }
}

/// The text of the tool result in `msg`.
fn result_text(msg: &Msg) -> String {
    msg.content
        .iter()
        .filter_map(|block| match block {
            Block::ToolResult { content, .. } => Some(content.iter().filter_map(Block::as_text).collect::<String>()),
            _ => None,
        })
        .collect()
}

/// The path between the first pair of backticks.
fn quoted_path(text: &str) -> Option<String> {
    let start = text.find('`')? + 1;
    let end = start + text[start..].find('`')?;
    Some(text[start..end].to_owned())
}

/// A model that runs `dump`, then pages the evicted file with read_file, then answers with
/// the page it read.
fn paging_model() -> ScriptedModel {
    ScriptedModel::from_fn(|request: &ChatRequest| {
        let last = request.messages.last().expect("a message");
        if last.role != Role::Tool {
            return call_reply("dump", "c1", json!({}));
        }
        let text = result_text(last);
        match quoted_path(&text).filter(|_| text.starts_with("[Tool output too large")) {
            Some(path) => call_reply("read_file", "c2", json!({"path": path, "offset": 100, "limit": 3})),
            None => Reply::text(format!("page: {text}")),
        }
    })
}

fn agent(model: &ScriptedModel, tools: Vec<Arc<dyn Tool>>, config: ToolResultEvictionConfig) -> ReActAgent {
    let eviction = ToolResultEviction::new(config).expect("valid config");
    ReActAgent::builder()
        .model(model.clone())
        .tools(tools)
        .middleware(Arc::new(eviction))
        .build()
        .expect("agent")
}

#[tokio::test]
async fn a_large_result_is_evicted_to_a_file_and_paged_with_read_file() {
    let full = big_text();
    let output = full.clone();
    let model = paging_model();
    let tools = vec![text_tool("dump", move |_| output.clone()), ReadFile::tool()];
    let agent = agent(&model, tools, ToolResultEvictionConfig::default());
    let fs = MemFs::new();
    let events = collect(agent.stream("dump it", ctx_with("alice", fs.clone()))).await;

    let expected_page = full.lines().skip(100).take(3).collect::<Vec<_>>().join("\n");
    assert_eq!(outcome(&events), Ok(format!("page: {expected_page}")));

    let requests = model.requests();
    let placeholder = result_text(requests[1].messages.last().expect("result"));
    let path = quoted_path(&placeholder).expect("the placeholder names the file");
    assert!(
        path.starts_with("large_tool_results/agent/c1-") && path.ends_with(".txt"),
        "{path}"
    );
    assert_eq!(fs.text(&path), Some(full.clone()), "the file holds the whole result");
    assert!(placeholder.chars().count() < 6_000, "{}", placeholder.chars().count());
    assert!(placeholder.contains(&format!("{} characters, 5,000 lines", thousands(full.chars().count()))));
    assert!(placeholder.contains("read_file") && placeholder.contains("offset") && placeholder.contains("limit"));
    assert!(
        placeholder.contains("row 00000") && placeholder.contains("row 04999"),
        "head and tail previews"
    );
    assert!(!placeholder.contains("row 02500"));

    let notice: Vec<EvictionNotice> = notices(&events, NOTICE_TOOL_RESULT_EVICTED);
    assert_eq!(notice.len(), 1, "read_file results are never evicted");
    assert_eq!(notice[0].outcome, EvictionOutcome::Evicted);
    assert_eq!(notice[0].path.as_deref(), Some(path.as_str()));
    assert_eq!(
        (notice[0].chars, notice[0].bytes, notice[0].lines),
        (full.len() as u64, full.len() as u64, 5_000)
    );
    assert!(notice[0].tokens_after * 10 < notice[0].tokens_before);
    assert_eq!((notice[0].tool.as_str(), notice[0].call_id.as_str()), ("dump", "c1"));
}

fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (at, ch) in digits.chars().enumerate() {
        if at > 0 && (digits.len() - at).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[tokio::test]
async fn running_the_same_call_again_does_not_fail() {
    let full = big_text();
    let runs = AtomicUsize::new(0);
    let dump = text_tool("dump", move |_| {
        if runs.fetch_add(1, Ordering::SeqCst) < 2 {
            full.clone()
        } else {
            format!("{full}changed\n")
        }
    });
    let model = paging_model();
    let agent = agent(
        &model,
        vec![dump, ReadFile::tool()],
        ToolResultEvictionConfig::default(),
    );
    let fs = MemFs::new();
    let mut paths = Vec::new();
    for session in ["s1", "s2", "s3"] {
        let ctx = ctx_in("alice", session, fs.clone());
        let events = collect(agent.stream("dump it", ctx)).await;
        assert!(outcome(&events).is_ok(), "{:?}", outcome(&events));
        assert!(warnings(&events).is_empty());
        let notice: Vec<EvictionNotice> = notices(&events, NOTICE_TOOL_RESULT_EVICTED);
        paths.push(notice[0].path.clone().expect("evicted"));
    }
    // The same call id and content map to the same file (overwritten); new content to a new one.
    assert_eq!(paths[0], paths[1]);
    assert_ne!(paths[1], paths[2]);
    assert_eq!(fs.paths().len(), 2);
}

#[tokio::test]
async fn excluded_tools_and_small_results_are_left_alone() {
    let full = big_text();
    let output = full.clone();
    let model = ScriptedModel::new()
        .reply(call_reply("dump", "c1", json!({})))
        .reply(call_reply("small", "c2", json!({})))
        .reply_text("done");
    let tools = vec![
        text_tool("dump", move |_| output.clone()),
        text_tool("small", |_| "tiny".to_owned()),
    ];
    let agent = agent(&model, tools, ToolResultEvictionConfig::default().exclude("dump"));
    let fs = MemFs::new();
    let events = collect(agent.stream("go", ctx_with("alice", fs.clone()))).await;
    assert_eq!(outcome(&events), Ok("done".to_owned()));
    let requests = model.requests();
    assert_eq!(result_text(requests[1].messages.last().expect("result")), full);
    assert_eq!(result_text(requests[2].messages.last().expect("result")), "tiny");
    assert!(notices::<EvictionNotice>(&events, NOTICE_TOOL_RESULT_EVICTED).is_empty());
    assert!(fs.paths().is_empty());
}

#[tokio::test]
async fn a_failed_write_cuts_the_result_in_place_and_warns() {
    let full = big_text();
    for (ctx, reason) in [
        (ctx_with("alice", Arc::new(FailingFs)), "no space left on device"),
        (
            RuntimeContext::for_user(harness_core::UserId::from_static("alice")),
            "no workspace",
        ),
    ] {
        let output = full.clone();
        let model = ScriptedModel::new()
            .reply(call_reply("dump", "c1", json!({})))
            .reply_text("done");
        let agent = agent(
            &model,
            vec![text_tool("dump", move |_| output.clone())],
            ToolResultEvictionConfig::default(),
        );
        let events = collect(agent.stream("go", ctx)).await;
        assert_eq!(outcome(&events), Ok("done".to_owned()), "the turn goes on");
        let cut = result_text(model.requests()[1].messages.last().expect("result"));
        assert!(cut.chars().count() <= 80_000, "{}", cut.chars().count());
        assert!(cut.starts_with("row 00000"));
        assert!(cut.trim_end().ends_with("row 04999 data data data"));
        assert!(
            cut.contains("the full output could not be saved") && cut.contains(reason),
            "{reason}"
        );
        assert_eq!(warnings(&events), [WARNING_EVICTION_FAILED]);
        let notice: Vec<EvictionNotice> = notices(&events, NOTICE_TOOL_RESULT_EVICTED);
        assert_eq!(notice[0].outcome, EvictionOutcome::Truncated);
        assert_eq!(notice[0].path, None);
        assert!(notice[0].error.as_deref().unwrap_or_default().contains(reason));
    }
}
