//! Tool annotations drive scheduling, and the offered tool set is enforced.

use crate::support::{check, fn_tool, trailing_results};
use async_trait::async_trait;
use harness_core::{
    AgentError, AgentNext, Hooks, Middleware, ReActAgent, ReasoningNext, ToolOutput, Turn, TypedTool, typed,
};
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

/// Counts how many calls are in flight and the peak, sleeping `ms` (virtual time) per call.
#[derive(Clone, Default)]
struct Gauge {
    in_flight: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
}

impl Gauge {
    fn tool(&self, name: &str) -> crate::support::FnTool {
        let gauge = self.clone();
        fn_tool(name, json!({"type": "object"}), move |input, _ctx| {
            let gauge = gauge.clone();
            async move {
                let now = gauge.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                gauge.peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(input["ms"].as_u64().unwrap_or(0))).await;
                gauge.in_flight.fetch_sub(1, Ordering::SeqCst);
                Ok(ToolOutput::text(format!(
                    "done {}",
                    input["label"].as_str().unwrap_or("")
                )))
            }
        })
    }

    fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

/// Two calls of a tool that is not concurrency-safe (no annotations: the cautious default)
/// never overlap: 100 + 200 ms take the sum, and the results keep call order.
#[tokio::test(start_paused = true)]
async fn two_unsafe_calls_in_one_step_never_overlap() {
    let gauge = Gauge::default();
    let started = tokio::time::Instant::now();
    let checked = check(
        ReActAgent::builder().tool(gauge.tool("write").shared()),
        ScriptedModel::new()
            .reply(calls(vec![
                call("write", "w1", json!({"ms": 200, "label": "a"})),
                call("write", "w2", json!({"ms": 100, "label": "b"})),
            ]))
            .reply_text("written"),
        "write twice",
        r#"
        user: write twice
        assistant: call write {"label":"a","ms":200} | call write {"label":"b","ms":100}
        tool: ok: done a
        tool: ok: done b
        assistant: written
        "#,
    )
    .await;
    assert_eq!(gauge.peak(), 1, "the two calls overlapped");
    assert_eq!(started.elapsed(), Duration::from_millis(300), "sequential: the sum");
    assert_eq!(checked.reply().text(), "written");
}

/// Read-only tools are concurrency-safe by default: three calls take the slowest one's time.
#[tokio::test(start_paused = true)]
async fn safe_calls_take_the_longest_not_the_sum() {
    let gauge = Gauge::default();
    let started = tokio::time::Instant::now();
    check(
        ReActAgent::builder().tool(gauge.tool("read").read_only().shared()),
        ScriptedModel::new()
            .reply(calls(vec![
                call("read", "r1", json!({"ms": 300, "label": "a"})),
                call("read", "r2", json!({"ms": 100, "label": "b"})),
                call("read", "r3", json!({"ms": 200, "label": "c"})),
            ]))
            .reply_text("read"),
        "read thrice",
        r#"
        user: read thrice
        assistant: call read {"label":"a","ms":300} | call read {"label":"b","ms":100} | call read {"label":"c","ms":200}
        tool: ok: done a
        tool: ok: done b
        tool: ok: done c
        assistant: read
        "#,
    )
    .await;
    assert_eq!(gauge.peak(), 3);
    assert_eq!(started.elapsed(), Duration::from_millis(300), "concurrent: the maximum");
}

/// Safe and unsafe calls mixed: consecutive safe calls run together, an unsafe call runs
/// alone between them, in call order. read(100)+read(100) ‖ → write(50) → read(100)+read(200) ‖
/// = 100 + 50 + 200.
#[tokio::test(start_paused = true)]
async fn an_unsafe_call_runs_alone_between_batches_of_safe_ones() {
    let reads = Gauge::default();
    let writes = Gauge::default();
    let both = Gauge {
        in_flight: Arc::new(AtomicUsize::new(0)),
        peak: Arc::new(AtomicUsize::new(0)),
    };
    // A shared gauge across both tools sees whether the write overlapped a read.
    let shared_read = {
        let (both, reads) = (both.clone(), reads.clone());
        fn_tool("read", json!({"type": "object"}), move |input, _ctx| {
            let (both, reads) = (both.clone(), reads.clone());
            async move {
                reads.in_flight.fetch_add(1, Ordering::SeqCst);
                let now = reads.in_flight.load(Ordering::SeqCst);
                reads.peak.fetch_max(now, Ordering::SeqCst);
                both.in_flight.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(input["ms"].as_u64().unwrap_or(0))).await;
                both.in_flight.fetch_sub(1, Ordering::SeqCst);
                reads.in_flight.fetch_sub(1, Ordering::SeqCst);
                Ok(ToolOutput::text("r"))
            }
        })
        .read_only()
    };
    let write = {
        let (both, writes) = (both.clone(), writes.clone());
        fn_tool("write", json!({"type": "object"}), move |input, _ctx| {
            let (both, writes) = (both.clone(), writes.clone());
            async move {
                let others = both.in_flight.load(Ordering::SeqCst);
                writes.peak.fetch_max(others + 1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(input["ms"].as_u64().unwrap_or(0))).await;
                Ok(ToolOutput::text("w"))
            }
        })
    };
    let started = tokio::time::Instant::now();
    let checked = check(
        ReActAgent::builder().tool(shared_read.shared()).tool(write.shared()),
        ScriptedModel::new()
            .reply(calls(vec![
                call("read", "1", json!({"ms": 100})),
                call("read", "2", json!({"ms": 100})),
                call("write", "3", json!({"ms": 50})),
                call("read", "4", json!({"ms": 100})),
                call("read", "5", json!({"ms": 200})),
            ]))
            .reply_text("ok"),
        "mix",
        r#"
        user: mix
        assistant: call read {"ms":100} | call read {"ms":100} | call write {"ms":50} | call read {"ms":100} | call read {"ms":200}
        tool: ok: r
        tool: ok: r
        tool: ok: w
        tool: ok: r
        tool: ok: r
        assistant: ok
        "#,
    )
    .await;
    assert_eq!(started.elapsed(), Duration::from_millis(350));
    assert_eq!(writes.peak(), 1, "the write ran while a read was in flight");
    assert_eq!(reads.peak(), 2, "reads of one batch ran together");
    let ids: Vec<String> = trailing_results(&checked.model.requests()[1])
        .into_iter()
        .map(|(id, _, _)| id)
        .collect();
    assert_eq!(ids, ["1", "2", "3", "4", "5"]);
}

/// `TypedTool::ANNOTATIONS` reach the spec; they are local metadata.
#[tokio::test]
async fn typed_tools_declare_annotations() {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct NoArgs {}
    struct Look;
    #[async_trait]
    impl TypedTool for Look {
        const NAME: &'static str = "look";
        const DESCRIPTION: &'static str = "Looks.";
        const ANNOTATIONS: harness_core::ToolAnnotations =
            harness_core::ToolAnnotations::new().read_only().closed_world();
        type Args = NoArgs;
        async fn call(
            &self,
            _args: NoArgs,
            _ctx: &harness_core::ToolContext,
        ) -> Result<ToolOutput, harness_core::ToolError> {
            Ok(ToolOutput::text("seen"))
        }
    }
    let tool = typed(Look);
    let hints = tool.spec().annotations;
    assert!(hints.is_read_only() && hints.is_concurrency_safe() && !hints.is_open_world());
}

/// Narrows the offered tools to `keep` on every step.
struct Narrow {
    keep: &'static str,
    hook: Hooks,
}

#[async_trait]
impl Middleware for Narrow {
    fn name(&self) -> &'static str {
        "narrow"
    }

    fn hooks(&self) -> Hooks {
        self.hook
    }

    async fn agent(&self, turn: &mut Turn, next: AgentNext<'_>) -> Result<(), AgentError> {
        turn.set_tools(turn.tools().iter().filter(|t| t.name == self.keep).cloned().collect());
        next.run(turn).await
    }

    async fn reasoning(&self, turn: &mut Turn, next: ReasoningNext<'_>) -> Result<(), AgentError> {
        let all = Arc::clone(turn.tools());
        turn.set_tools(all.iter().filter(|t| t.name == self.keep).cloned().collect());
        let result = next.run(turn).await;
        // Restoring the full set after the step must not widen what was offered.
        turn.set_tools(all);
        result
    }
}

/// A call to a tool a middleware did not offer on this step (per step, from `reasoning`,
/// or for the whole session, from `agent`) gets an error result naming it and never runs.
#[tokio::test]
async fn a_call_to_a_tool_not_offered_is_refused_and_never_runs() {
    for hook in [Hooks::REASONING, Hooks::AGENT] {
        let ran = Arc::new(AtomicUsize::new(0));
        let secret = {
            let ran = ran.clone();
            fn_tool("delete_everything", json!({"type": "object"}), move |_input, _ctx| {
                ran.fetch_add(1, Ordering::SeqCst);
                async { Ok(ToolOutput::text("deleted")) }
            })
        };
        let checked = check(
            ReActAgent::builder()
                .tool(crate::support::echo_tool().shared())
                .tool(secret.shared())
                .middleware(Arc::new(Narrow { keep: "echo", hook })),
            ScriptedModel::new()
                .reply_tool_call("delete_everything", json!({}))
                .reply_text("refused"),
            "go",
            "
            user: go
            assistant: call delete_everything {}
            tool: error: tool `delete_everything` is not available on this step; available tools: echo
            assistant: refused
            ",
        )
        .await;
        assert_eq!(ran.load(Ordering::SeqCst), 0, "the tool ran ({hook:?})");
        let offered: Vec<String> = checked.model.requests()[0]
            .tools
            .iter()
            .map(|t| t.name.clone())
            .collect();
        assert_eq!(offered, ["echo"]);
    }
}

/// The annotations never reach a provider's request body.
#[test]
fn annotations_are_not_sent_to_providers() {
    let spec = harness_core::ToolSpec::new("look", "Looks.", json!({"type": "object"}))
        .read_only()
        .closed_world();
    let request = harness_core::ChatRequest {
        tools: Arc::from(vec![spec]),
        ..harness_core::ChatRequest::default()
    };
    let openai =
        harness_models::OpenAiClient::new(harness_models::OpenAiConfig::new("gpt-4o", "http://127.0.0.1:1")).unwrap();
    let anthropic = harness_models::AnthropicClient::new(harness_models::AnthropicConfig::new(
        "claude-sonnet-4-5",
        "http://127.0.0.1:1",
    ))
    .unwrap();
    for body in [
        openai.request_body(&request, false).unwrap(),
        anthropic.request_body(&request, false).unwrap(),
    ] {
        let text = String::from_utf8(body).unwrap();
        assert!(text.contains("\"look\""), "{text}");
        for hint in ["read_only", "open_world", "annotations", "readOnlyHint"] {
            assert!(!text.contains(hint), "{hint} leaked: {text}");
        }
    }
}
