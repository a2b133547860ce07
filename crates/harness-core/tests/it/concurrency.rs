//! One agent, many sessions at once: histories never mix.

use crate::support::{assert_paired, fn_tool, lines, render, saved};
use harness_core::{Block, ReActAgent, Role, RuntimeContext, ToolOutput};
use harness_models::{Reply, ScriptedModel};
use serde_json::json;

/// Calls `echo` with the last user text, then answers `done: <tool output>`.
fn echo_model() -> ScriptedModel {
    ScriptedModel::from_fn(|request| {
        let Some(last) = request.messages.last() else {
            return Reply::text("empty request");
        };
        match last.role {
            Role::User => Reply::tool_call("echo", json!({"text": last.text()})),
            _ => {
                let output = last
                    .content
                    .iter()
                    .filter_map(|block| match block {
                        Block::ToolResult { content, .. } => content.iter().find_map(Block::as_text),
                        _ => None,
                    })
                    .collect::<String>();
                Reply::text(format!("done: {output}"))
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_sessions_in_parallel_keep_their_own_histories() {
    let model = echo_model();
    let echo = fn_tool("echo", json!({"type": "object"}), |input, _ctx| async move {
        // Give other sessions a chance to interleave mid-call.
        tokio::task::yield_now().await;
        Ok(ToolOutput::text(input["text"].as_str().unwrap_or_default()))
    });
    let agent = ReActAgent::builder()
        .model(model.clone())
        .tool(echo.shared())
        .build()
        .unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..20 {
        let agent = agent.clone();
        tasks.spawn(async move {
            let ctx = RuntimeContext::for_user(harness_core::UserId::parse(format!("u{}", i % 3)).unwrap())
                .with_session(harness_core::SessionId::parse(format!("s{i}")).unwrap());
            let first = agent.call(format!("s{i} first"), ctx.clone()).await.unwrap();
            let second = agent.call(format!("s{i} second"), ctx.clone()).await.unwrap();
            (i, ctx, first.text(), second.text())
        });
    }
    let mut seen = 0;
    while let Some(joined) = tasks.join_next().await {
        let (i, ctx, first, second) = joined.unwrap();
        assert_eq!(
            (first, second),
            (format!("done: s{i} first"), format!("done: s{i} second"))
        );
        let state = saved(&agent, &ctx).await;
        assert_paired(&state.messages);
        assert_eq!(
            render(&state.messages),
            lines(&format!(
                r#"
                user: s{i} first
                assistant: call echo {{"text":"s{i} first"}}
                tool: ok: s{i} first
                assistant: done: s{i} first
                user: s{i} second
                assistant: call echo {{"text":"s{i} second"}}
                tool: ok: s{i} second
                assistant: done: s{i} second
                "#
            ))
        );
        seen += 1;
    }
    assert_eq!(seen, 20);
    assert_eq!(model.request_count(), 80);
    assert_eq!(model.violations(), Vec::<String>::new());
}
