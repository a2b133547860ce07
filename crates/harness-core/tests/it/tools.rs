//! Tool calls: concurrency and order, and every way a tool can fail becoming an error result.

use crate::support::{check, echo_tool, fn_tool, sleep_tool, trailing_results};
use harness_core::{ReActAgent, ToolOutput};
use harness_models::{Reply, ScriptedModel, ScriptedToolCall};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

fn call(name: &str, id: &str, arguments: Value) -> ScriptedToolCall {
    ScriptedToolCall {
        name: name.to_owned(),
        arguments,
        id: Some(id.to_owned()),
    }
}

fn calls(calls: Vec<ScriptedToolCall>) -> Reply {
    Reply {
        tool_calls: calls,
        ..Reply::default()
    }
}

/// Three calls of 300, 100 and 200 ms in one step take ≈300 ms (virtual time), not 600, all
/// three are in flight at once, and the results keep call order although they finish in
/// another order.
#[tokio::test(start_paused = true)]
async fn three_tool_calls_of_one_step_run_concurrently_and_keep_call_order() {
    let in_flight = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let finished = crate::support::Log::default();
    let tool = {
        let (in_flight, peak, finished) = (in_flight.clone(), peak.clone(), finished.clone());
        fn_tool("sleep", json!({"type": "object"}), move |input, _ctx| {
            let (in_flight, peak, finished) = (in_flight.clone(), peak.clone(), finished.clone());
            async move {
                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                let label = input["label"].as_str().unwrap_or_default().to_owned();
                tokio::time::sleep(Duration::from_millis(input["ms"].as_u64().unwrap_or(0))).await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                finished.push(label.clone());
                Ok(ToolOutput::text(format!("slept {label}")))
            }
        })
        .read_only()
    };
    let model = ScriptedModel::new()
        .reply(calls(vec![
            call("sleep", "c_a", json!({"ms": 300, "label": "a"})),
            call("sleep", "c_b", json!({"ms": 100, "label": "b"})),
            call("sleep", "c_c", json!({"ms": 200, "label": "c"})),
        ]))
        .reply_text("all slept");
    let started = tokio::time::Instant::now();
    let checked = check(
        ReActAgent::builder().tool(tool.shared()),
        model,
        "sleep three times",
        r#"
        user: sleep three times
        assistant: call sleep {"label":"a","ms":300} | call sleep {"label":"b","ms":100} | call sleep {"label":"c","ms":200}
        tool: ok: slept a
        tool: ok: slept b
        tool: ok: slept c
        assistant: all slept
        "#,
    )
    .await;
    let wall = started.elapsed();
    assert_eq!(checked.reply().text(), "all slept");
    assert!(
        wall >= Duration::from_millis(300) && wall < Duration::from_millis(350),
        "wall {wall:?} should be the slowest call (300 ms), not the sum (600 ms)"
    );
    assert_eq!(peak.load(Ordering::SeqCst), 3, "all three calls were in flight at once");
    assert_eq!(finished.entries(), ["b", "c", "a"], "they finished out of call order");
    // The next request carries the results in call order, paired by id.
    let requests = checked.model.requests();
    assert_eq!(requests.len(), 2);
    let results: Vec<(String, String, bool)> = trailing_results(&requests[1]);
    assert_eq!(
        results,
        [
            ("c_a".to_owned(), "slept a".to_owned(), false),
            ("c_b".to_owned(), "slept b".to_owned(), false),
            ("c_c".to_owned(), "slept c".to_owned(), false),
        ]
    );
}

/// A tool that panics: the model reads an error result naming the tool and the panic text,
/// and the call goes on to the final answer.
#[tokio::test]
async fn a_panicking_tool_becomes_an_error_result() {
    let boom = fn_tool("boom", json!({"type": "object"}), |_input, _ctx| async {
        if true {
            panic!("kaboom");
        }
        Ok(ToolOutput::text("unreachable"))
    });
    let checked = check(
        ReActAgent::builder().tool(boom.shared()),
        ScriptedModel::new()
            .reply_tool_call("boom", json!({}))
            .reply_text("recovered"),
        "go",
        "
        user: go
        assistant: call boom {}
        tool: error: tool `boom` crashed: kaboom
        assistant: recovered
        ",
    )
    .await;
    assert_eq!(checked.reply().text(), "recovered");
    let seen = trailing_results(&checked.model.requests()[1]);
    assert_eq!(seen.len(), 1);
    assert_eq!((seen[0].1.as_str(), seen[0].2), ("tool `boom` crashed: kaboom", true));
}

/// A tool's own time limit wins over the agent's default.
#[tokio::test(start_paused = true)]
async fn a_tool_past_its_own_timeout_becomes_an_error_result() {
    let started = tokio::time::Instant::now();
    let checked = check(
        ReActAgent::builder()
            .tool(sleep_tool().timeout(Duration::from_secs(2)).shared())
            .tool_timeout(Duration::from_secs(60)),
        ScriptedModel::new()
            .reply_tool_call("sleep", json!({"ms": 3_600_000}))
            .reply_text("gave up waiting"),
        "go",
        r#"
        user: go
        assistant: call sleep {"ms":3600000}
        tool: error: tool `sleep` timed out after 2s
        assistant: gave up waiting
        "#,
    )
    .await;
    assert_eq!(checked.reply().text(), "gave up waiting");
    let wall = started.elapsed();
    assert!(
        wall >= Duration::from_secs(2) && wall < Duration::from_secs(3),
        "{wall:?}"
    );
}

/// Without a per-tool limit the agent's default applies.
#[tokio::test(start_paused = true)]
async fn a_tool_past_the_agent_default_timeout_becomes_an_error_result() {
    let checked = check(
        ReActAgent::builder()
            .tool(sleep_tool().shared())
            .tool_timeout(Duration::from_millis(1500)),
        ScriptedModel::new()
            .reply_tool_call("sleep", json!({"ms": 3_600_000}))
            .reply_text("ok"),
        "go",
        r#"
        user: go
        assistant: call sleep {"ms":3600000}
        tool: error: tool `sleep` timed out after 1.5s
        assistant: ok
        "#,
    )
    .await;
    assert_eq!(checked.reply().text(), "ok");
}

/// Arguments that break the schema never reach the tool; the model is told what is wrong.
#[tokio::test]
async fn arguments_violating_the_schema_become_an_error_result() {
    let calls_made = Arc::new(AtomicUsize::new(0));
    let tool = {
        let calls_made = calls_made.clone();
        fn_tool(
            "echo",
            json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
            move |_input, _ctx| {
                calls_made.fetch_add(1, Ordering::SeqCst);
                async { Ok(ToolOutput::text("ran")) }
            },
        )
    };
    let checked = check(
        ReActAgent::builder().tool(tool.shared()),
        ScriptedModel::new()
            .reply_tool_call("echo", json!({"text": 42}))
            .reply_tool_call("echo", json!({"other": "x"}))
            .reply_text("fine"),
        "go",
        r#"
        user: go
        assistant: call echo {"text":42}
        tool: error: invalid arguments for `echo`: at /text: 42 is not of type "string"
        assistant: call echo {"other":"x"}
        tool: error: invalid arguments for `echo`: "text" is a required property
        assistant: fine
        "#,
    )
    .await;
    assert_eq!(checked.reply().text(), "fine");
    assert_eq!(calls_made.load(Ordering::SeqCst), 0, "the tool never ran");
    assert!(trailing_results(&checked.model.requests()[1])[0].2, "an error result");
}

/// Argument text that is not JSON at all is refused with an excerpt of what was sent.
#[tokio::test]
async fn argument_text_that_is_not_json_becomes_an_error_result() {
    let checked = check(
        ReActAgent::builder().tool(echo_tool().shared()),
        ScriptedModel::new()
            .reply_tool_call("echo", Value::String("{\"text\": \"unterminated".into()))
            .reply_text("sorry"),
        "go",
        r#"
        user: go
        assistant: call echo "{\"text\": \"unterminated"
        tool: error: invalid arguments for `echo`: arguments must be a JSON object, got text that is not JSON: {"text": "unterminated
        assistant: sorry
        "#,
    )
    .await;
    assert_eq!(checked.reply().text(), "sorry");
}

/// A tool that returns its own `ToolError` is an error result carrying the tool's message.
#[tokio::test]
async fn a_failing_tool_becomes_an_error_result() {
    let failing = fn_tool("fetch", json!({"type": "object"}), |_input, _ctx| async {
        Err(harness_core::ToolError::failed("host unreachable; try again later"))
    });
    check(
        ReActAgent::builder().tool(failing.shared()),
        ScriptedModel::new()
            .reply_tool_call("fetch", json!({}))
            .reply_text("it failed"),
        "go",
        "
        user: go
        assistant: call fetch {}
        tool: error: host unreachable; try again later
        assistant: it failed
        ",
    )
    .await;
}

/// Calling a tool that does not exist is an error result listing the tools there are.
#[tokio::test]
async fn an_unknown_tool_becomes_an_error_result_listing_the_available_tools() {
    let checked = check(
        ReActAgent::builder()
            .tool(echo_tool().shared())
            .tool(sleep_tool().shared()),
        ScriptedModel::new()
            .reply_tool_call("ech0", json!({"text": "hi"}))
            .reply_text("typo"),
        "go",
        r#"
        user: go
        assistant: call ech0 {"text":"hi"}
        tool: error: tool `ech0` is not available on this step; available tools: echo, sleep
        assistant: typo
        "#,
    )
    .await;
    assert_eq!(checked.reply().text(), "typo");
}

/// Each failure kind in one step: the good call still succeeds, and the order holds.
#[tokio::test(start_paused = true)]
async fn mixed_failures_in_one_step_do_not_disturb_each_other() {
    let boom = fn_tool("boom", json!({"type": "object"}), |_input, _ctx| async {
        if true {
            panic!("bad");
        }
        Ok(ToolOutput::text(""))
    })
    .read_only();
    let checked = check(
        ReActAgent::builder()
            .tool(echo_tool().shared())
            .tool(sleep_tool().shared())
            .tool(boom.shared())
            .tool_timeout(Duration::from_secs(1)),
        ScriptedModel::new()
            .reply(calls(vec![
                call("sleep", "c1", json!({"ms": 5000})),
                call("boom", "c2", json!({})),
                call("missing", "c3", json!({})),
                call("echo", "c4", json!({"text": "fine"})),
                call("echo", "c5", json!({"text": 1})),
            ]))
            .reply_text("done"),
        "go",
        r#"
        user: go
        assistant: call sleep {"ms":5000} | call boom {} | call missing {} | call echo {"text":"fine"} | call echo {"text":1}
        tool: error: tool `sleep` timed out after 1s
        tool: error: tool `boom` crashed: bad
        tool: error: tool `missing` is not available on this step; available tools: echo, sleep, boom
        tool: ok: fine
        tool: error: invalid arguments for `echo`: at /text: 1 is not of type "string"
        assistant: done
        "#,
    )
    .await;
    let ids: Vec<String> = trailing_results(&checked.model.requests()[1])
        .into_iter()
        .map(|(id, _, _)| id)
        .collect();
    assert_eq!(ids, ["c1", "c2", "c3", "c4", "c5"]);
}

/// A hand-written `Tool` (no `async_trait` body) that panics before it even returns its
/// future must not take the loop down either.
#[tokio::test]
async fn a_tool_panicking_before_its_future_exists_becomes_an_error_result() {
    struct Eager(harness_core::ToolSpec);
    impl harness_core::Tool for Eager {
        fn spec(&self) -> &harness_core::ToolSpec {
            &self.0
        }
        fn call<'a, 'b, 'f>(
            &'a self,
            _input: Value,
            _ctx: &'b harness_core::ToolContext,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<ToolOutput, harness_core::ToolError>> + Send + 'f>>
        where
            'a: 'f,
            'b: 'f,
            Self: 'f,
        {
            panic!("eager panic")
        }
    }
    let eager = Eager(harness_core::ToolSpec {
        name: "eager".into(),
        description: "panics at once".into(),
        input_schema: json!({"type": "object"}),
        annotations: harness_core::ToolAnnotations::new(),
    });
    check(
        ReActAgent::builder().tool(Arc::new(eager)),
        ScriptedModel::new()
            .reply_tool_call("eager", json!({}))
            .reply_text("survived"),
        "go",
        "
        user: go
        assistant: call eager {}
        tool: error: tool `eager` crashed: eager panic
        assistant: survived
        ",
    )
    .await;
}
