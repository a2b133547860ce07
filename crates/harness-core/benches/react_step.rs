//! Micro-benchmark of one ReAct turn: `agent.call` = model (tool call) → tool → model (text),
//! with `ScriptedModel::from_fn`, one trivial typed tool and the in-memory state store.
//!
//! A dependency-free bench harness (criterion is not a workspace dependency): each scenario
//! runs warm-up turns, then N timed turns with `std::time::Instant`, and prints the median,
//! p10 and p90 in µs per turn.
//!
//! ```text
//! cargo bench -p harness-core --bench react_step            # default sizes
//! cargo bench -p harness-core --bench react_step -- 20000   # N timed turns per scenario
//! cargo bench -p harness-core --bench react_step -- growing # only scenarios naming `growing`
//! ```
//!
//! Scenarios:
//! - `call / fresh session`: every turn in a new session (load miss, save of 4 messages);
//!   the session is deleted after each turn, untimed, so the store stays small.
//! - `call / growing session`: every turn in the same session; the history grows by 4
//!   messages per turn, so this shows what the kernel costs per message of history.
//! - `stream / fresh session`: as the first, through `stream()` with every event drained.
//! - `call / fresh session / bare model`: a non-recording model double, to separate the
//!   kernel's cost from `ScriptedModel`'s own bookkeeping (it clones every request).

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used, missing_docs)]

use futures::StreamExt;
use harness_core::{
    ChatModel, ChatRequest, FinishReason, ModelChunk, ModelError, ModelStream, ReActAgent, Role, RuntimeContext,
    ToolContext, ToolError, ToolOutput, TypedTool, async_trait, typed,
};
use harness_models::{Reply, ScriptedModel};
use serde::Deserialize;
use std::time::{Duration, Instant};

const WARMUP: usize = 300;

/// Arguments of the trivial tool.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct AddArgs {
    /// First term.
    a: i64,
    /// Second term.
    b: i64,
}

struct Add;

#[async_trait]
impl TypedTool for Add {
    const NAME: &'static str = "add";
    const DESCRIPTION: &'static str = "Add two integers.";
    type Args = AddArgs;

    async fn call(&self, args: AddArgs, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text((args.a + args.b).to_string()))
    }
}

/// Tool call when the last message is the user's, text otherwise.
fn scripted() -> ScriptedModel {
    ScriptedModel::from_fn(|request| {
        if request.messages.last().is_some_and(|msg| msg.role == Role::User) {
            Reply::tool_call("add", serde_json::json!({"a": 2, "b": 3}))
        } else {
            Reply::text("2 + 3 = 5")
        }
    })
}

/// The same replies as [`scripted`], without recording requests or checking pairs.
struct BareModel;

#[async_trait]
impl ChatModel for BareModel {
    fn name(&self) -> &str {
        "bare"
    }

    async fn stream(&self, request: ChatRequest) -> Result<ModelStream, ModelError> {
        let chunks = if request.messages.last().is_some_and(|msg| msg.role == Role::User) {
            vec![
                Ok(ModelChunk::ToolCallDelta {
                    index: 0,
                    id: Some("call_1".to_owned()),
                    name: Some("add".to_owned()),
                    arguments: r#"{"a": 2, "b": 3}"#.to_owned(),
                }),
                Ok(ModelChunk::Finish(FinishReason::ToolCalls)),
            ]
        } else {
            vec![
                Ok(ModelChunk::TextDelta("2 + 3 = 5".to_owned())),
                Ok(ModelChunk::Finish(FinishReason::Stop)),
            ]
        };
        Ok(Box::pin(futures::stream::iter(chunks)))
    }
}

fn agent(model: impl ChatModel) -> ReActAgent {
    ReActAgent::builder()
        .model(model)
        .tool(typed(Add))
        .sys_prompt("You are a calculator.")
        .build()
        .unwrap()
}

struct Stats {
    median: f64,
    p10: f64,
    p90: f64,
}

fn stats(samples: &mut [Duration]) -> Stats {
    samples.sort_unstable();
    let at = |q: f64| {
        let index = ((samples.len() - 1) as f64 * q).round() as usize;
        samples[index].as_secs_f64() * 1e6
    };
    Stats {
        median: at(0.5),
        p10: at(0.1),
        p90: at(0.9),
    }
}

fn report(name: &str, samples: &mut [Duration]) {
    let n = samples.len();
    let s = stats(samples);
    println!(
        "{name:<40} n={n:<6} median {:>8.1} µs   p10 {:>8.1} µs   p90 {:>8.1} µs",
        s.median, s.p10, s.p90
    );
}

async fn turn(agent: &ReActAgent, ctx: RuntimeContext) {
    let reply = agent.call("what is 2 + 3?", ctx).await.unwrap();
    assert_eq!(reply.text(), "2 + 3 = 5");
}

async fn fresh_sessions(agent: &ReActAgent, label: &str, n: usize) -> Vec<Duration> {
    let mut samples = Vec::with_capacity(n);
    for i in 0..WARMUP + n {
        let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("bench"))
            .with_session(harness_core::SessionId::parse(format!("{label}-{i}")).unwrap());
        let key = agent.key_for(&ctx);
        let started = Instant::now();
        turn(agent, ctx).await;
        if i >= WARMUP {
            samples.push(started.elapsed());
        }
        // Untimed: keep the store small, so the numbers are per turn, not per stored session.
        agent.state_store().delete(&key).await.unwrap();
    }
    samples
}

async fn streamed_fresh_sessions(agent: &ReActAgent, n: usize) -> Vec<Duration> {
    let mut samples = Vec::with_capacity(n);
    for i in 0..WARMUP + n {
        let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("bench"))
            .with_session(harness_core::SessionId::parse(format!("stream-{i}")).unwrap());
        let key = agent.key_for(&ctx);
        let started = Instant::now();
        let events = agent.stream("what is 2 + 3?", ctx).count().await;
        if i >= WARMUP {
            samples.push(started.elapsed());
        }
        agent.state_store().delete(&key).await.unwrap();
        assert!(events >= 8, "{events} events");
    }
    samples
}

async fn growing_session(agent: &ReActAgent, n: usize) -> Vec<Duration> {
    let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("bench"))
        .with_session(harness_core::SessionId::from_static("growing"));
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        turn(agent, ctx.clone()).await;
        samples.push(started.elapsed());
    }
    samples
}

fn main() {
    // `cargo bench` passes `--bench`; a bare number sets N, other words filter scenarios.
    let args: Vec<String> = std::env::args().skip(1).filter(|arg| !arg.starts_with("--")).collect();
    let n: usize = args.iter().find_map(|arg| arg.parse().ok()).unwrap_or(5_000);
    let filters: Vec<&String> = args.iter().filter(|arg| arg.parse::<usize>().is_err()).collect();
    let wanted = |name: &str| filters.is_empty() || filters.iter().any(|filter| name.contains(filter.as_str()));
    let growing_n = (n / 5).max(100);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        println!("one turn = 2 model calls + 1 tool call; current-thread runtime; N={n}");

        if wanted("call / fresh session") {
            let mut samples = fresh_sessions(&agent(scripted()), "fresh", n).await;
            report("call / fresh session", &mut samples);
        }
        if wanted("stream / fresh session") {
            let mut samples = streamed_fresh_sessions(&agent(scripted()), n).await;
            report("stream / fresh session", &mut samples);
        }
        if wanted("call / fresh session / bare model") {
            let mut samples = fresh_sessions(&agent(BareModel), "bare", n).await;
            report("call / fresh session / bare model", &mut samples);
        }
        for (label, model) in [("scripted", None), ("bare model", Some(BareModel))] {
            if !wanted(&format!("call / growing session ({label})")) {
                continue;
            }
            let agent = match model {
                Some(model) => agent(model),
                None => agent(scripted()),
            };
            let samples = growing_session(&agent, growing_n).await;
            let window = (growing_n / 10).max(10);
            let mut first = samples[..window].to_vec();
            let mut last = samples[growing_n - window..].to_vec();
            let mut all = samples;
            report(&format!("call / growing session ({label})"), &mut all);
            report(
                &format!("  first {window} turns (history < {})", 4 * window),
                &mut first,
            );
            report(
                &format!("  last {window} turns (history ≈ {})", 4 * growing_n),
                &mut last,
            );
        }
    });
}
