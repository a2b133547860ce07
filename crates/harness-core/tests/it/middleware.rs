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
    let reply = agent
        .call("go", RuntimeContext::for_user(harness_core::UserId::from_static("u1")))
        .await
        .unwrap();
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
    agent
        .call("go", RuntimeContext::for_user(harness_core::UserId::from_static("u1")))
        .await
        .unwrap();
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

/// `ActingNext::check` validates the arguments against the schema before anything runs and
/// hands the layer the tool's effect hints, so a deciding layer never decides on bad input.
#[tokio::test]
async fn an_acting_layer_can_check_arguments_and_read_annotations_first() {
    struct Gate;
    #[harness_core::async_trait]
    impl harness_core::Middleware for Gate {
        fn name(&self) -> &'static str {
            "gate"
        }
        fn hooks(&self) -> Hooks {
            Hooks::ACTING
        }
        async fn acting(
            &self,
            call: harness_core::ToolCall,
            ctx: &harness_core::ToolContext,
            next: harness_core::ActingNext<'_>,
        ) -> harness_core::ToolOutput {
            match next.check(&call) {
                Err(err) => harness_core::ToolOutput::error(format!("checked: {err}")),
                Ok(hints) if hints.is_read_only() => next.run(call, ctx).await,
                Ok(_) => harness_core::ToolOutput::error("gate: writes are refused"),
            }
        }
    }
    let ran = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    let reader = {
        let ran = ran.clone();
        crate::support::fn_tool("look", schema.clone(), move |_input, _ctx| {
            ran.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { Ok(harness_core::ToolOutput::text("looked")) }
        })
        .read_only()
    };
    let writer = {
        let ran = ran.clone();
        crate::support::fn_tool("write", schema, move |_input, _ctx| {
            ran.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { Ok(harness_core::ToolOutput::text("wrote")) }
        })
    };
    let checked = crate::support::check(
        ReActAgent::builder()
            .tool(reader.shared())
            .tool(writer.shared())
            .middleware(std::sync::Arc::new(Gate)),
        ScriptedModel::new()
            .reply_tool_call("look", json!({"n": "x"}))
            .reply_tool_call("look", json!({"n": 1}))
            .reply_tool_call("write", json!({"n": 1}))
            .reply_text("ok"),
        "go",
        "
        user: go
        assistant: call look {\"n\":\"x\"}
        tool: error: checked: invalid arguments for `look`: at /n: \"x\" is not of type \"integer\"
        assistant: call look {\"n\":1}
        tool: ok: looked
        assistant: call write {\"n\":1}
        tool: error: gate: writes are refused
        assistant: ok
        ",
    )
    .await;
    drop(checked);
    assert_eq!(
        ran.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "only the valid read ran"
    );
}
