//! The step limit: when reached, one last model call without tools asks for the answer.

use crate::support::{assert_paired, check, echo_tool, lines, render, saved};
use futures::StreamExt;
use harness_core::{DEFAULT_MAX_ITERS, EventKind, ReActAgent, RuntimeContext, ToolChoice};
use harness_models::{Reply, ScriptedModel};
use serde_json::json;
use std::num::NonZeroU32;

fn two() -> NonZeroU32 {
    NonZeroU32::new(2).unwrap()
}

/// A model that calls a tool whenever tools are offered, and answers when they are not.
fn tool_happy_model() -> ScriptedModel {
    ScriptedModel::from_fn(|request| {
        if request.tools.is_empty() {
            Reply::text("final answer")
        } else {
            Reply::tool_call("echo", json!({"text": "again"}))
        }
    })
}

#[tokio::test]
async fn reaching_the_limit_ends_with_one_last_call_without_tools() {
    let checked = check(
        ReActAgent::builder().tool(echo_tool().shared()).max_iters(two()),
        tool_happy_model(),
        "loop",
        r#"
        user: loop
        assistant: call echo {"text":"again"}
        tool: ok: again
        assistant: call echo {"text":"again"}
        tool: ok: again
        assistant: final answer
        "#,
    )
    .await;
    assert_eq!(checked.reply().text(), "final answer");
    let requests = checked.model.requests();
    assert_eq!(requests.len(), 3, "two steps and one last call");
    for request in &requests[..2] {
        assert_eq!(request.tools.len(), 1);
        assert_eq!(request.tool_choice, ToolChoice::Auto);
        assert!(request.system.parts.iter().all(|part| part.name != "step_note"));
    }
    let last = &requests[2];
    assert!(last.tools.is_empty(), "the last call offers no tools");
    assert_eq!(last.tool_choice, ToolChoice::None);
    let notes: Vec<&str> = last
        .system
        .parts
        .iter()
        .filter(|part| part.name == "step_note")
        .map(|part| part.text.as_str())
        .collect();
    assert_eq!(notes.len(), 1);
    assert!(
        notes[0].starts_with("You have used all 2 reasoning steps allowed for this request. Do not call tools."),
        "{notes:?}"
    );
    assert!(
        last.system
            .parts
            .iter()
            .filter(|part| part.name == "step_note")
            .all(|part| !part.stable),
        "the note is per-step, outside the cacheable prefix"
    );
}

/// A model that calls a tool even on the last call: the call is dropped (it cannot run), the
/// session keeps no dangling call, and the reply says the loop stopped.
#[tokio::test]
async fn a_tool_call_on_the_last_call_is_dropped() {
    let checked = check(
        ReActAgent::builder().tool(echo_tool().shared()).max_iters(two()),
        ScriptedModel::from_fn(|_request| Reply::tool_call("echo", json!({"text": "more"}))),
        "loop",
        r#"
        user: loop
        assistant: call echo {"text":"more"}
        tool: ok: more
        assistant: call echo {"text":"more"}
        tool: ok: more
        assistant: (stopped after 2 steps without a final answer)
        "#,
    )
    .await;
    assert_eq!(checked.reply().text(), "(stopped after 2 steps without a final answer)");
    assert!(!checked.reply().has_tool_calls());
}

/// The default limit is 10 steps, then the final call.
#[tokio::test]
async fn the_default_limit_is_ten_steps() {
    let model = tool_happy_model();
    let agent = ReActAgent::builder()
        .model(model.clone())
        .tool(echo_tool().shared())
        .build()
        .unwrap();
    let reply = agent
        .call(
            "loop",
            RuntimeContext::for_user(harness_core::UserId::from_static("u1")),
        )
        .await
        .unwrap();
    assert_eq!(reply.text(), "final answer");
    assert_eq!(model.request_count(), DEFAULT_MAX_ITERS as usize + 1);
    assert_eq!(model.violations(), Vec::<String>::new());
}

/// `stream()` reports the limit: `MaxIterations` after the last step; the last call ends its
/// own step (so its usage is reported like every other call's); the final answer comes last.
#[tokio::test]
async fn the_stream_reports_max_iterations() {
    let model = tool_happy_model();
    let agent = ReActAgent::builder()
        .model(model.clone())
        .tool(echo_tool().shared())
        .max_iters(two())
        .build()
        .unwrap();
    let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("u1"));
    let events: Vec<EventKind> = agent
        .stream("loop", ctx.clone())
        .map(|event| event.kind)
        .collect()
        .await;
    let tail: Vec<String> = events
        .iter()
        .filter_map(|kind| match kind {
            EventKind::StepEnd { step, .. } => Some(format!("step_end {step}")),
            EventKind::MaxIterations { limit } => Some(format!("max_iterations {limit}")),
            EventKind::Warning { code, .. } => Some(format!("warning {code}")),
            EventKind::TextDelta { delta } => Some(format!("text {delta}")),
            EventKind::Final { message } => Some(format!("final {}", message.text())),
            _ => None,
        })
        .collect();
    assert_eq!(
        tail.join("\n"),
        lines(
            "
            step_end 1
            step_end 2
            max_iterations 2
            warning max_iterations
            text fina
            text l an
            text swer
            step_end 3
            final final answer
            "
        )
    );
    let state = saved(&agent, &ctx).await;
    assert_paired(&state.messages);
    assert_eq!(
        render(&state.messages[state.messages.len() - 1..]),
        "assistant: final answer"
    );
}

/// The reply the caller receives on the max-iterations path is exactly the message the
/// session records (same id, same content): nothing is rewritten after it was appended.
#[tokio::test]
async fn the_max_iterations_reply_is_the_recorded_one() {
    let agent = ReActAgent::builder()
        .model(ScriptedModel::from_fn(|_request| {
            let mut reply = Reply::tool_call("echo", json!({"text": "more"}));
            reply.text = Some("partial answer".into());
            reply
        }))
        .tool(echo_tool().shared())
        .max_iters(two())
        .build()
        .unwrap();
    let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("u1"));
    let reply = agent.call("loop", ctx.clone()).await.unwrap();
    let state = saved(&agent, &ctx).await;
    let last = state.messages.last().unwrap();
    assert_eq!(**last, reply, "the caller's reply is the recorded one");
    assert_eq!(reply.text(), "partial answer");
    assert!(!reply.has_tool_calls());
    assert_paired(&state.messages);
}
