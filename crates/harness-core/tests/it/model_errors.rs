//! Model failures surface as `AgentError::Model` with the variant intact; the session keeps
//! the user's message and every finished step.

use crate::support::{check, echo_tool};
use harness_core::{AgentError, ModelError, ReActAgent, error_chain};
use harness_models::{ScriptedError, ScriptedModel};
use serde_json::json;
use std::time::Duration;

async fn failing_call(error: ScriptedError) -> AgentError {
    let checked = check(
        ReActAgent::builder(),
        ScriptedModel::new().reply_error(error),
        "hello",
        "user: hello",
    )
    .await;
    match checked.result {
        Ok(reply) => panic!("expected an error, got {reply:?}"),
        Err(err) => err,
    }
}

#[tokio::test]
async fn each_model_error_keeps_its_variant_and_the_users_message() {
    let err = failing_call(ScriptedError::ContextOverflow).await;
    assert!(
        matches!(&err, AgentError::Model(ModelError::ContextOverflow { message }) if message == "scripted context overflow"),
        "{err:?}"
    );

    let err = failing_call(ScriptedError::RateLimited {
        retry_after_secs: Some(7),
    })
    .await;
    assert!(
        matches!(&err, AgentError::Model(ModelError::RateLimited { retry_after: Some(after) }) if *after == Duration::from_secs(7)),
        "{err:?}"
    );

    let err = failing_call(ScriptedError::Transient).await;
    assert!(matches!(&err, AgentError::Model(ModelError::Transient(_))), "{err:?}");
    assert_eq!(
        error_chain(&err),
        "model call failed: transient provider failure: scripted transient failure"
    );
    assert!(matches!(&err, AgentError::Model(inner) if inner.is_retryable()));

    let err = failing_call(ScriptedError::Auth).await;
    assert!(
        matches!(&err, AgentError::Model(ModelError::Auth { status: 401, .. })),
        "{err:?}"
    );

    let err = failing_call(ScriptedError::InvalidRequest).await;
    assert!(
        matches!(&err, AgentError::Model(ModelError::InvalidRequest { status: 400, .. })),
        "{err:?}"
    );
}

/// A failure on the second model call keeps the finished first step (call and result).
#[tokio::test]
async fn a_later_model_failure_keeps_the_finished_steps() {
    let checked = check(
        ReActAgent::builder().tool(echo_tool().shared()),
        ScriptedModel::new()
            .reply_tool_call("echo", json!({"text": "a"}))
            .reply_error(ScriptedError::Transient),
        "hello",
        r#"
        user: hello
        assistant: call echo {"text":"a"}
        tool: ok: a
        "#,
    )
    .await;
    assert!(
        matches!(checked.result, Err(AgentError::Model(ModelError::Transient(_)))),
        "{:?}",
        checked.result
    );
    assert_eq!(checked.model.request_count(), 2);
    // The session goes on from the kept steps.
    checked.model.push(harness_models::Reply::text("second try"));
    let reply = checked.agent.call("again", checked.ctx.clone()).await.unwrap();
    assert_eq!(reply.text(), "second try");
    assert_eq!(
        crate::support::render(&checked.model.last_request().unwrap().messages),
        crate::support::lines(
            r#"
            user: hello
            assistant: call echo {"text":"a"}
            tool: ok: a
            user: again
            "#
        )
    );
}
