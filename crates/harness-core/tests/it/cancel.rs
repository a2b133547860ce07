//! Cancellation through the `RuntimeContext` token: prompt, and never a dangling tool call.

use crate::support::{assert_paired, lines, render, saved, sleep_tool};
use harness_core::{AgentError, CancellationToken, ReActAgent, RuntimeContext};
use harness_models::{Reply, ScriptedModel, ScriptedToolCall};
use serde_json::json;
use std::time::Duration;

fn cancel_after(token: &CancellationToken, after: Duration) {
    let token = token.clone();
    // Owned by the test runtime; ends after one sleep.
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        token.cancel();
    });
}

/// Cancelling while two tools sleep: the call returns `Cancelled` at once, both calls keep an
/// error result in the saved session, and the next call on the session works.
#[tokio::test(start_paused = true)]
async fn cancelling_during_tools_leaves_no_dangling_call_and_the_session_goes_on() {
    let model = ScriptedModel::new()
        .reply(Reply {
            tool_calls: vec![
                ScriptedToolCall {
                    name: "sleep".into(),
                    arguments: json!({"ms": 10_000, "label": "a"}),
                    id: Some("c1".into()),
                },
                ScriptedToolCall {
                    name: "sleep".into(),
                    arguments: json!({"ms": 20_000, "label": "b"}),
                    id: Some("c2".into()),
                },
            ],
            ..Reply::default()
        })
        .reply_text("welcome back");
    let agent = ReActAgent::builder()
        .model(model.clone())
        .tool(sleep_tool().shared())
        .build()
        .unwrap();
    let token = CancellationToken::new();
    let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("u1"))
        .with_session(harness_core::SessionId::from_static("s1"))
        .with_cancellation(token.clone());
    cancel_after(&token, Duration::from_millis(100));
    let started = tokio::time::Instant::now();
    let result = agent.call("sleep", ctx.clone()).await;
    let wall = started.elapsed();
    assert!(matches!(result, Err(AgentError::Cancelled)), "{result:?}");
    assert!(wall < Duration::from_millis(200), "cancellation took {wall:?}");
    assert_eq!(model.request_count(), 1, "no model call after the cancellation");

    let state = saved(&agent, &ctx).await;
    assert_paired(&state.messages);
    assert_eq!(
        render(&state.messages),
        lines(
            r#"
            user: sleep
            assistant: call sleep {"label":"a","ms":10000} | call sleep {"label":"b","ms":20000}
            tool: error: tool call cancelled before it finished
            tool: error: tool call cancelled before it finished
            "#
        )
    );

    // A fresh token for the next call on the same session.
    let next = RuntimeContext::for_user(harness_core::UserId::from_static("u1"))
        .with_session(harness_core::SessionId::from_static("s1"));
    let reply = agent.call("again", next.clone()).await.unwrap();
    assert_eq!(reply.text(), "welcome back");
    assert_eq!(model.violations(), Vec::<String>::new());
    let request = model.last_request().unwrap();
    assert_eq!(
        render(&request.messages),
        format!("{}\nuser: again", render(&state.messages))
    );
}

/// Cancelling while the model is thinking (a slow provider) returns at once and keeps the
/// user's message.
#[tokio::test(start_paused = true)]
async fn cancelling_during_the_model_call_returns_promptly() {
    let model = ScriptedModel::new().reply(Reply::text("too late").delayed(Duration::from_secs(30)));
    let agent = ReActAgent::builder().model(model.clone()).build().unwrap();
    let token = CancellationToken::new();
    let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("u1")).with_cancellation(token.clone());
    cancel_after(&token, Duration::from_millis(50));
    let started = tokio::time::Instant::now();
    let result = agent.call("hello", ctx.clone()).await;
    assert!(matches!(result, Err(AgentError::Cancelled)), "{result:?}");
    assert!(
        started.elapsed() < Duration::from_millis(100),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(render(&saved(&agent, &ctx).await.messages), "user: hello");
}

/// A token cancelled before the call: no model call at all, the input is still kept.
#[tokio::test]
async fn an_already_cancelled_call_makes_no_model_call() {
    let model = ScriptedModel::new().reply_text("unused");
    let agent = ReActAgent::builder().model(model.clone()).build().unwrap();
    let token = CancellationToken::new();
    token.cancel();
    let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("u1")).with_cancellation(token);
    let result = agent.call("hello", ctx.clone()).await;
    assert!(matches!(result, Err(AgentError::Cancelled)), "{result:?}");
    assert_eq!(model.request_count(), 0);
    assert_eq!(render(&saved(&agent, &ctx).await.messages), "user: hello");
}
