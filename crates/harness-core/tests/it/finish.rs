//! Why the model stopped: a reply cut by the length limit is continued once, a content
//! filter ends the call with a typed error, and error events carry a kind.

use crate::support::{echo_tool, saved};
use futures::StreamExt;
use harness_core::{
    AgentError, Block, ErrorKind, EventKind, FinishReason, ModelError, ReActAgent, Role, RuntimeContext, StateError,
};
use harness_models::{Reply, ScriptedModel};

fn agent(model: &ScriptedModel) -> ReActAgent {
    ReActAgent::builder()
        .model(model.clone())
        .tool(echo_tool().shared())
        .build()
        .unwrap()
}

fn warnings(events: &[EventKind]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|kind| match kind {
            EventKind::Warning { code, message } => Some((code.clone(), message.clone())),
            _ => None,
        })
        .collect()
}

/// Cut by length: one continuation with the same request (same tools) plus the partial
/// reply; the parts are joined into one recorded message; a warning names the reason.
#[tokio::test]
async fn a_length_cut_reply_is_continued_once_and_joined() {
    let model = ScriptedModel::new()
        .reply(Reply::text("The answer is forty").with_finish_reason(FinishReason::Length))
        .reply(Reply::text("-two.").with_finish_reason(FinishReason::Stop));
    let agent = agent(&model);
    let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("u"))
        .with_session(harness_core::SessionId::from_static("len"));
    let events: Vec<EventKind> = agent.stream("question", ctx.clone()).map(|e| e.kind).collect().await;
    let Some(EventKind::Final { message }) = events.last() else {
        panic!("no final event: {events:?}");
    };
    assert_eq!(message.text(), "The answer is forty-two.");
    assert_eq!(message.finish_reason, Some(FinishReason::Stop));
    let warned = warnings(&events);
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert_eq!(warned[0].0, "finish_reason.length");
    assert!(warned[0].1.contains("finish_reason: length"), "{}", warned[0].1);
    let requests = model.requests();
    assert_eq!(requests.len(), 2, "exactly one continuation");
    assert_eq!(requests[1].tools, requests[0].tools, "same tools");
    assert_eq!(requests[1].messages.len(), requests[0].messages.len() + 1);
    let partial = requests[1].messages.last().unwrap();
    assert_eq!(
        (partial.role, partial.text()),
        (Role::Assistant, "The answer is forty".to_owned())
    );
    let state = saved(&agent, &ctx).await;
    let assistants: Vec<String> = state
        .messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .map(|m| m.text())
        .collect();
    assert_eq!(
        assistants,
        ["The answer is forty-two."],
        "one joined message, no partial"
    );
}

/// Cut again after the continuation: no second continuation, a second warning, and the
/// joined text is returned (not an error).
#[tokio::test]
async fn a_reply_cut_twice_is_continued_only_once() {
    let model = ScriptedModel::new()
        .reply(Reply::text("one ").with_finish_reason(FinishReason::Length))
        .reply(Reply::text("two").with_finish_reason(FinishReason::Length))
        .reply_text("never asked");
    let agent = agent(&model);
    let events: Vec<EventKind> = agent
        .stream("q", RuntimeContext::for_user(harness_core::UserId::from_static("u")))
        .map(|e| e.kind)
        .collect()
        .await;
    let Some(EventKind::Final { message }) = events.last() else {
        panic!("no final event: {events:?}");
    };
    assert_eq!(message.text(), "one two");
    assert_eq!(model.request_count(), 2);
    assert_eq!(warnings(&events).len(), 2);
}

/// A tool call cut by the length limit is not run: the continuation's complete call is.
#[tokio::test]
async fn a_cut_tool_call_is_replaced_by_the_continuations_call() {
    let mut cut = Reply::tool_call("echo", serde_json::Value::String("{\"text\": \"hal".into()));
    cut.finish_reason = Some(FinishReason::Length);
    let model = ScriptedModel::new()
        .reply(cut)
        .reply_tool_call("echo", serde_json::json!({"text": "whole"}))
        .reply_text("done");
    let agent = agent(&model);
    let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("u"))
        .with_session(harness_core::SessionId::from_static("cut"));
    let reply = agent.call("go", ctx.clone()).await.unwrap();
    assert_eq!(reply.text(), "done");
    assert_eq!(model.violations(), Vec::<String>::new());
    let state = saved(&agent, &ctx).await;
    let calls: Vec<serde_json::Value> = state
        .messages
        .iter()
        .flat_map(|m| m.tool_calls().map(|c| c.input.clone()).collect::<Vec<_>>())
        .collect();
    assert_eq!(calls, [serde_json::json!({"text": "whole"})]);
}

/// A content filter ends the call with a typed error; the filtered reply is not kept, and
/// the stream's error event says `content_filter`.
#[tokio::test]
async fn a_content_filtered_reply_ends_the_call_with_a_typed_error() {
    let model = ScriptedModel::new()
        .reply(Reply::text("I can't").with_finish_reason(FinishReason::ContentFilter))
        .reply(Reply::text("I can't").with_finish_reason(FinishReason::ContentFilter));
    let agent = agent(&model);
    let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("u"))
        .with_session(harness_core::SessionId::from_static("cf"));
    let err = agent.call("bad", ctx.clone()).await.unwrap_err();
    assert!(matches!(err, AgentError::ContentFiltered { .. }), "{err:?}");
    assert_eq!(err.kind(), ErrorKind::ContentFilter);
    let state = saved(&agent, &ctx).await;
    assert!(
        state.messages.iter().all(|m| m.role != Role::Assistant),
        "the filtered reply was kept"
    );
    let events: Vec<EventKind> = agent
        .stream("bad", ctx.with_session(harness_core::SessionId::from_static("cf2")))
        .map(|e| e.kind)
        .collect()
        .await;
    match events.last() {
        Some(EventKind::Error { kind, message }) => {
            assert_eq!(*kind, ErrorKind::ContentFilter);
            assert!(message.contains("content filter"), "{message}");
        }
        other => panic!("expected an error event, got {other:?}"),
    }
}

/// The finish reason is kept on the recorded assistant message (and survives a round trip
/// through the persisted JSON; old records without it still load).
#[tokio::test]
async fn the_finish_reason_is_kept_on_the_message() {
    let model = ScriptedModel::new().reply_text("hi");
    let agent = agent(&model);
    let reply = agent
        .call(
            "hello",
            RuntimeContext::for_user(harness_core::UserId::from_static("u")),
        )
        .await
        .unwrap();
    assert_eq!(reply.finish_reason, Some(FinishReason::Stop));
    let json = serde_json::to_value(&reply).unwrap();
    assert_eq!(json["finish_reason"], "stop");
    let mut old = json.clone();
    old.as_object_mut().unwrap().remove("finish_reason");
    let back: harness_core::Msg = serde_json::from_value(old).unwrap();
    assert_eq!(back.finish_reason, None);
    assert!(matches!(back.content[0], Block::Text { .. }));
}

/// Every typed error maps to its kind.
#[test]
fn error_kinds_follow_the_typed_error() {
    let cases: Vec<(AgentError, ErrorKind)> = vec![
        (
            ModelError::ContextOverflow { message: "x".into() }.into(),
            ErrorKind::Overflow,
        ),
        (
            ModelError::RateLimited { retry_after: None }.into(),
            ErrorKind::RateLimit,
        ),
        (
            ModelError::Auth {
                status: 401,
                message: "x".into(),
            }
            .into(),
            ErrorKind::Auth,
        ),
        (
            ModelError::Timeout {
                after: std::time::Duration::from_secs(1),
            }
            .into(),
            ErrorKind::Timeout,
        ),
        (ModelError::transient("reset").into(), ErrorKind::Provider),
        (ModelError::Malformed { detail: "x".into() }.into(), ErrorKind::Provider),
        (ModelError::Cancelled.into(), ErrorKind::Cancelled),
        (AgentError::Cancelled, ErrorKind::Cancelled),
        (
            StateError::Conflict {
                key: "a/b/c".into(),
                expected: 1,
                found: 2,
            }
            .into(),
            ErrorKind::Conflict,
        ),
        (StateError::Backend("disk".into()).into(), ErrorKind::Internal),
        (
            harness_core::UserId::parse("../x").unwrap_err().into(),
            ErrorKind::Configuration,
        ),
        (
            AgentError::ContentFiltered { model: "m".into() },
            ErrorKind::ContentFilter,
        ),
    ];
    for (err, kind) in cases {
        assert_eq!(err.kind(), kind, "{err:?}");
    }
    assert_eq!(serde_json::to_value(ErrorKind::RateLimit).unwrap(), "rate_limit");
}
