//! The middleware onion: every hook, in the right nesting and order.

use crate::support::{Log, LoggedModel, Recorder, echo_tool, lines};
use harness_core::{Hooks, ReActAgent, RuntimeContext};
use harness_models::ScriptedModel;
use serde_json::json;

/// model → tool → model with one middleware on every hook; the tool and the provider log too.
#[tokio::test]
async fn one_middleware_sees_every_hook_nested_for_model_tool_model() {
    let log = Log::default();
    let script = ScriptedModel::new()
        .reply_tool_call("echo", json!({"text": "hi"}))
        .reply_text("done");
    let tool = {
        let log = log.clone();
        crate::support::fn_tool("echo", json!({"type": "object"}), move |_input, _ctx| {
            let log = log.clone();
            async move {
                log.push("tool echo");
                Ok(harness_core::ToolOutput::text("hi"))
            }
        })
        .shared()
    };
    let agent = ReActAgent::builder()
        .model(LoggedModel {
            inner: script.clone(),
            log: log.clone(),
        })
        .tool(tool)
        .middleware(Recorder::shared("rec", Hooks::ALL, &log))
        .build()
        .unwrap();
    let reply = agent.call("go", RuntimeContext::for_user("u1")).await.unwrap();
    assert_eq!(reply.text(), "done");
    assert_eq!(
        log.entries().join("\n"),
        lines(
            "
            rec agent>
            rec reasoning> 1
            rec system_prompt 1
            rec model_call> 1
            model
            rec model_call< 1
            rec reasoning< 1
            rec acting> echo
            tool echo
            rec acting< echo
            rec reasoning> 2
            rec system_prompt 2
            rec model_call> 2
            model
            rec model_call< 2
            rec reasoning< 2
            rec agent<
            "
        )
    );
    assert_eq!(script.violations(), Vec::<String>::new());
}

/// Registration order is nesting order (first = outermost); the system-prompt pipeline runs
/// in registration order; a middleware is called only on the hooks it declares.
#[tokio::test]
async fn registration_order_is_nesting_order_and_undeclared_hooks_are_skipped() {
    let log = Log::default();
    let script = ScriptedModel::new()
        .reply_tool_call("echo", json!({"text": "hi"}))
        .reply_text("done");
    let agent = ReActAgent::builder()
        .model(LoggedModel {
            inner: script.clone(),
            log: log.clone(),
        })
        .tool(echo_tool().shared())
        .middleware(Recorder::shared("outer", Hooks::ALL, &log))
        .middleware(Recorder::shared("partial", Hooks::ACTING | Hooks::SYSTEM_PROMPT, &log))
        .middleware(Recorder::shared("silent", Hooks::NONE, &log))
        .middleware(Recorder::shared("inner", Hooks::ALL, &log))
        .build()
        .unwrap();
    agent.call("go", RuntimeContext::for_user("u1")).await.unwrap();
    let step = |n: u32| {
        format!(
            "outer reasoning> {n}
             inner reasoning> {n}
             outer system_prompt {n}
             partial system_prompt {n}
             inner system_prompt {n}
             outer model_call> {n}
             inner model_call> {n}
             model
             inner model_call< {n}
             outer model_call< {n}
             inner reasoning< {n}
             outer reasoning< {n}"
        )
    };
    let expected = format!(
        "outer agent>
         inner agent>
         {}
         outer acting> echo
         partial acting> echo
         inner acting> echo
         inner acting< echo
         partial acting< echo
         outer acting< echo
         {}
         inner agent<
         outer agent<",
        step(1),
        step(2)
    );
    assert_eq!(log.entries().join("\n"), lines(&expected));
    // The pipeline's output reaches the provider, in registration order after the base prompt.
    let request = script.last_request().unwrap();
    let parts: Vec<&str> = request.system.parts.iter().map(|part| part.name).collect();
    assert_eq!(
        parts,
        ["outer", "partial", "inner"],
        "no base part: the base prompt is empty"
    );
}

/// An `acting` layer that answers without calling `next` short-circuits the tool, and its
/// answer is what the model sees.
#[tokio::test]
async fn an_acting_layer_can_short_circuit_the_tool() {
    struct Deny;
    #[harness_core::async_trait]
    impl harness_core::Middleware for Deny {
        fn name(&self) -> &'static str {
            "deny"
        }
        fn hooks(&self) -> Hooks {
            Hooks::ACTING
        }
        async fn acting(
            &self,
            call: harness_core::ToolCall,
            _ctx: &harness_core::ToolContext,
            _next: harness_core::ActingNext<'_>,
        ) -> harness_core::ToolOutput {
            harness_core::ToolOutput::error(format!("{} is not allowed here", call.name))
        }
    }
    let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tool = {
        let ran = ran.clone();
        crate::support::fn_tool("echo", json!({"type": "object"}), move |_input, _ctx| {
            ran.store(true, std::sync::atomic::Ordering::SeqCst);
            async { Ok(harness_core::ToolOutput::text("ran")) }
        })
    };
    crate::support::check(
        ReActAgent::builder()
            .tool(tool.shared())
            .middleware(std::sync::Arc::new(Deny)),
        ScriptedModel::new().reply_tool_call("echo", json!({})).reply_text("ok"),
        "go",
        "
        user: go
        assistant: call echo {}
        tool: error: echo is not allowed here
        assistant: ok
        ",
    )
    .await;
    assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
}
