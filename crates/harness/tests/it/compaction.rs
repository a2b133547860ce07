//! Compaction acceptance tests: triggers, pair-safe cuts, summary records, failures, overflow
//! recovery in `call` and `stream`, the argument pre-pass, chunked summaries and a 200-turn
//! retention run.
#![allow(clippy::expect_used)]

use crate::doubles::{MemFs, TranscriptRecorder, collect, ctx_with, notices, outcome, text_tool, warnings};
use harness::compaction::{
    ArgsTruncatedNotice, Compaction, CompactionConfig, CompactionHook, CompactionNotice, CompactionOutcome,
    CompactionReason, NOTICE_ARGS_TRUNCATED, NOTICE_COMPACTION, SummaryRecord, TruncateArgsConfig,
    WARNING_SUMMARY_FAILED, compaction_history, is_summary, summary_record,
};
use harness_core::{
    AgentError, Block, ChatRequest, InMemoryStateStore, ModelError, Msg, ReActAgent, Role, RuntimeContext, StateStore,
    Tool, Turn, Usage, async_trait, error_chain,
};
use harness_models::{Fallback, Reply, ScriptedError, ScriptedModel, ScriptedToolCall};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// A summarizer answering `## Intent\nsummary <n>` and recording its requests.
fn summarizer() -> ScriptedModel {
    let count = AtomicUsize::new(0);
    ScriptedModel::from_fn(move |_| {
        Reply::text(format!(
            "## Intent\nsummary {}",
            count.fetch_add(1, Ordering::SeqCst) + 1
        ))
    })
}

fn agent_with(model: &ScriptedModel, compaction: Compaction, tools: Vec<Arc<dyn Tool>>) -> ReActAgent {
    ReActAgent::builder()
        .model(model.clone())
        .sys_prompt("SYS")
        .tools(tools)
        .middleware(Arc::new(compaction))
        .build()
        .expect("agent builds")
}

fn compaction(config: CompactionConfig, summaries: &ScriptedModel) -> Compaction {
    Compaction::new(config, Arc::new(summaries.clone())).expect("valid config")
}

fn texts(request: &ChatRequest) -> Vec<String> {
    request.messages.iter().map(|msg| msg.text()).collect()
}

/// Everything a summary request shows the model.
fn request_text(request: &ChatRequest) -> String {
    request
        .messages
        .iter()
        .map(|msg| msg.text())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The pieces of a message a summary request must contain: its texts, its tool calls'
/// arguments and its tool results' texts.
fn pieces(msg: &Msg) -> Vec<String> {
    fn walk(block: &Block, out: &mut Vec<String>) {
        match block {
            Block::Text { text } => out.push(text.clone()),
            Block::ToolUse { name, input, .. } => {
                out.push(name.clone());
                out.push(input.to_string());
            }
            Block::ToolResult { content, .. } => content.iter().for_each(|inner| walk(inner, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    msg.content.iter().for_each(|block| walk(block, &mut out));
    out
}

fn jsonl_sha256<'a>(messages: impl IntoIterator<Item = &'a Arc<Msg>>) -> String {
    let mut bytes = Vec::new();
    for msg in messages {
        bytes.extend(serde_json::to_vec(&**msg).expect("serializes"));
        bytes.push(b'\n');
    }
    hex::encode(Sha256::digest(&bytes))
}

fn call_reply(name: &str, id: &str, arguments: serde_json::Value) -> Reply {
    Reply {
        tool_calls: vec![ScriptedToolCall {
            name: name.to_owned(),
            arguments,
            id: Some(id.to_owned()),
        }],
        ..Reply::default()
    }
}

#[tokio::test]
async fn compacts_when_the_message_trigger_fires() {
    let model = ScriptedModel::new().fallback(Fallback::Echo);
    let summaries = summarizer();
    let config = CompactionConfig::default().trigger_messages(6).keep_messages(2);
    let agent = agent_with(&model, compaction(config, &summaries), vec![]);
    let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("u1"));
    for turn in 1..=3 {
        agent.call(format!("m{turn}"), ctx.clone()).await.expect("call");
    }
    assert_eq!(
        summaries.request_count(),
        0,
        "five messages stay under the trigger of six"
    );

    let events = collect(agent.stream("m4", ctx)).await;
    assert_eq!(outcome(&events), Ok("echo: m4".to_owned()));
    assert_eq!(summaries.request_count(), 1);
    let request = model.last_request().expect("a request");
    assert_eq!(request.system.render(), "SYS");
    assert!(is_summary(&request.messages[0]));
    assert_eq!(texts(&request)[1..], ["echo: m3", "m4"]);
    let summary_request = request_text(&summaries.requests()[0]);
    for replaced in ["m1", "echo: m1", "m2", "echo: m2", "m3"] {
        assert!(
            summary_request.contains(replaced),
            "{replaced} missing from the summary request"
        );
    }
    let notice: Vec<CompactionNotice> = notices(&events, NOTICE_COMPACTION);
    assert_eq!(notice.len(), 1);
    assert_eq!(
        (
            notice[0].outcome,
            notice[0].reason,
            notice[0].messages_before,
            notice[0].messages_after
        ),
        (CompactionOutcome::Compacted, CompactionReason::Messages, 7, 3)
    );
    assert_eq!((notice[0].replaced, notice[0].kept_verbatim, notice[0].tail), (5, 0, 2));
    // Tiny messages: the summary is longer than what it replaced, and the event says so.
    assert!(notice[0].tokens_before > 0 && notice[0].tokens_after > notice[0].tokens_before);
}

#[tokio::test]
async fn compacts_when_reported_tokens_reach_the_trigger_and_forgets_stale_usage() {
    let usage = |input_tokens| Usage {
        input_tokens,
        ..Usage::default()
    };
    let model = ScriptedModel::new()
        .reply(Reply::text("a1").with_usage(usage(100)))
        .reply(Reply::text("a2").with_usage(usage(5_000)))
        // No usage: the next check must not reuse the 5,000 reported before the compaction.
        .reply_text("a3")
        .reply_text("a4");
    let summaries = summarizer();
    let config = CompactionConfig::default()
        .trigger_messages(0)
        .trigger_tokens(1_000)
        .keep_messages(2);
    let agent = agent_with(&model, compaction(config, &summaries), vec![]);
    let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("u1"));
    agent.call("q1", ctx.clone()).await.expect("call 1");
    agent.call("q2", ctx.clone()).await.expect("call 2");
    assert_eq!(summaries.request_count(), 0, "100 reported tokens stay under 1,000");

    let events = collect(agent.stream("q3", ctx.clone())).await;
    assert_eq!(outcome(&events), Ok("a3".to_owned()));
    let notice: Vec<CompactionNotice> = notices(&events, NOTICE_COMPACTION);
    assert_eq!(notice.len(), 1);
    assert_eq!(notice[0].reason, CompactionReason::Tokens);
    assert!(notice[0].tokens_before >= 5_000, "{}", notice[0].tokens_before);
    assert!(notice[0].tokens_after < 1_000, "{}", notice[0].tokens_after);
    assert_eq!(texts(&model.last_request().expect("request"))[1..], ["a2", "q3"]);

    agent.call("q4", ctx).await.expect("call 4");
    assert_eq!(
        summaries.request_count(),
        1,
        "usage from before the compaction is not reused"
    );
}

#[tokio::test]
async fn the_cut_never_separates_a_tool_call_from_its_result() {
    let lookup = text_tool("lookup", |input| {
        format!("value of {}", input["key"].as_str().unwrap_or_default())
    });
    let model = ScriptedModel::new()
        .reply(call_reply("lookup", "c1", json!({"key": "k1"})))
        .reply_text("a1")
        .reply(call_reply("lookup", "c2", json!({"key": "k2"})))
        .reply(call_reply("lookup", "c3", json!({"key": "k3"})))
        .reply_text("a2");
    let summaries = summarizer();
    let config = CompactionConfig::default().trigger_messages(5).keep_messages(1);
    let agent = agent_with(&model, compaction(config, &summaries), vec![lookup]);
    let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("u1"));
    agent.call("q1", ctx.clone()).await.expect("call 1");
    assert_eq!(agent.call("q2", ctx).await.expect("call 2").text(), "a2");

    assert!(model.violations().is_empty(), "{:?}", model.violations());
    assert_eq!(summaries.request_count(), 2);
    // Keeping one message would have started the tail at the result of c3; the cut moved
    // back so that c3 and its result stay together.
    let last = model.last_request().expect("request");
    assert_eq!(last.messages.len(), 4);
    assert!(is_summary(&last.messages[0]));
    assert_eq!(last.messages[1].text(), "q2", "the newest user message is kept");
    let call_ids: Vec<&str> = last.messages[2].tool_calls().map(|call| call.id).collect();
    let result_ids: Vec<&str> = last.messages[3].tool_result_ids().collect();
    assert_eq!((call_ids, result_ids), (vec!["c3"], vec!["c3"]));
    let second = request_text(&summaries.requests()[1]);
    assert!(second.contains("summary 1"), "the previous summary is folded in");
    assert!(second.contains("→ tool call `lookup` (id c2): {\"key\":\"k2\"}"));
    assert!(second.contains("value of k2"));
    assert!(!second.contains("value of k3"), "the kept tail is not summarized");
}

/// A [`CompactionHook`] recording the ids of every batch of replaced messages.
#[derive(Default)]
struct RecordingHook {
    batches: Mutex<Vec<Vec<String>>>,
}

#[async_trait]
impl CompactionHook for RecordingHook {
    async fn before_compaction(&self, turn: &Turn, replaced: &[Arc<Msg>]) {
        // The context is unchanged when the hook runs.
        assert!(
            replaced
                .iter()
                .all(|msg| turn.state().messages.iter().any(|m| m.id == msg.id))
        );
        self.batches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(replaced.iter().map(|msg| msg.id.clone()).collect());
    }
}

#[tokio::test]
async fn summaries_record_their_range_and_hash_and_offload_the_raw_messages() {
    let model = ScriptedModel::new().fallback(Fallback::Echo);
    let summaries = summarizer();
    let store = Arc::new(InMemoryStateStore::default());
    let recorder = Arc::new(TranscriptRecorder::default());
    let hook = Arc::new(RecordingHook::default());
    let config = CompactionConfig::default().trigger_messages(6).keep_messages(2);
    let agent = ReActAgent::builder()
        .model(model.clone())
        .state_store(store.clone())
        .middleware(recorder.clone())
        .middleware(Arc::new(compaction(config, &summaries).with_hook(hook.clone())))
        .build()
        .expect("agent");
    let fs = MemFs::new();
    let ctx = ctx_with("alice", fs.clone());
    for turn in 1..=6 {
        agent.call(format!("m{turn}"), ctx.clone()).await.expect("call");
    }
    assert_eq!(summaries.request_count(), 2);

    let transcript = recorder.messages();
    let by_text = |text: &str| {
        transcript
            .iter()
            .find(|msg| msg.text() == text)
            .cloned()
            .expect("in the transcript")
    };
    // Compaction 1 (before the step of m4) replaced m1..m3; compaction 2 (before m6)
    // replaced echo: m3..m5 and folded summary 1 in.
    let first_batch: Vec<Arc<Msg>> = ["m1", "echo: m1", "m2", "echo: m2", "m3"].map(by_text).into();
    let second_batch: Vec<Arc<Msg>> = ["echo: m3", "m4", "echo: m4", "m5"].map(by_text).into();

    let key = agent.key_for(&ctx);
    let (state, _) = store.load(&key).await.expect("load").expect("saved");
    let history = compaction_history(&state);
    assert_eq!(history.len(), 2);
    let current = summary_record(&state.messages[0]).expect("the context starts with a summary");
    assert_eq!(current, history[1]);

    let check = |record: &SummaryRecord, batch: &[Arc<Msg>]| {
        assert_eq!(record.range.first_id, batch[0].id);
        assert_eq!(record.range.last_id, batch[batch.len() - 1].id);
        assert_eq!(record.range.count, batch.len() as u64);
        assert_eq!(record.sha256, jsonl_sha256(batch));
        let path = record.offload_path.as_deref().expect("offloaded");
        assert!(
            path.starts_with(&format!("agents/agent/compacted/default/{:04}-", record.sequence)),
            "{path}"
        );
        let offloaded = fs.text(path).expect("offload file exists");
        assert_eq!(hex::encode(Sha256::digest(offloaded.as_bytes())), record.sha256);
        let lines: Vec<Msg> = offloaded
            .lines()
            .map(|line| serde_json::from_str(line).expect("a message per line"))
            .collect();
        assert_eq!(lines, batch.iter().map(|msg| (**msg).clone()).collect::<Vec<_>>());
        assert_eq!(record.model, "scripted");
        assert_eq!(record.requests, 1);
    };
    check(&history[0], &first_batch);
    check(&history[1], &second_batch);
    assert_eq!(history[0].covers, history[0].range);
    assert_eq!(history[1].covers.first_id, first_batch[0].id);
    assert_eq!(history[1].covers.last_id, second_batch[3].id);
    assert_eq!(history[1].covers.count, 9);
    assert_eq!(history[1].previous.len(), 1);
    assert_eq!(history[1].previous[0].summary_id, history[0].summary_id);
    assert_eq!(history[1].previous[0].sha256, history[0].sha256);
    assert_eq!(history[0].prompt_sha256, history[1].prompt_sha256);

    let batches = hook.batches.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let ids = |batch: &[Arc<Msg>]| batch.iter().map(|msg| msg.id.clone()).collect::<Vec<_>>();
    assert_eq!(batches, vec![ids(&first_batch), ids(&second_batch)]);
    // The raw transcript holds every raw message and no summary.
    assert_eq!(transcript.len(), 12);
    assert!(!transcript.iter().any(|msg| is_summary(msg)));
}

#[tokio::test]
async fn a_failed_summary_leaves_the_context_unchanged_and_the_turn_goes_on() {
    let model = ScriptedModel::new().fallback(Fallback::Echo);
    let summaries = ScriptedModel::new()
        .reply_error(ScriptedError::Transient)
        .reply_text("   ")
        .reply_text("## Intent\nfinally");
    let config = CompactionConfig::default().trigger_messages(3).keep_messages(1);
    let agent = agent_with(&model, compaction(config, &summaries), vec![]);
    let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("u1"));
    agent.call("m1", ctx.clone()).await.expect("call 1");

    for (turn, expected_error) in [("m2", "summary model call failed"), ("m3", "empty summary")] {
        let events = collect(agent.stream(turn, ctx.clone())).await;
        assert_eq!(outcome(&events), Ok(format!("echo: {turn}")));
        assert_eq!(warnings(&events), [WARNING_SUMMARY_FAILED]);
        let notice: Vec<CompactionNotice> = notices(&events, NOTICE_COMPACTION);
        assert_eq!(notice.len(), 1);
        assert_eq!(notice[0].outcome, CompactionOutcome::Failed);
        assert_eq!(notice[0].messages_after, notice[0].messages_before);
        let error = notice[0].error.as_deref().unwrap_or_default();
        assert!(error.contains(expected_error), "{error}");
        let request = model.last_request().expect("request");
        assert!(!request.messages.iter().any(|msg| is_summary(msg)));
        assert_eq!(request.messages[0].text(), "m1", "nothing was dropped");
    }
    assert_eq!(texts(&model.last_request().expect("request")).len(), 5);

    agent.call("m4", ctx).await.expect("call 4");
    let request = model.last_request().expect("request");
    assert_eq!(request.messages.len(), 2);
    assert_eq!(request.messages[1].text(), "m4");
    let summary_request = request_text(&summaries.requests()[2]);
    for replaced in ["m1", "echo: m1", "m2", "echo: m2", "m3", "echo: m3"] {
        assert!(summary_request.contains(replaced), "{replaced}");
    }
}

/// An agent with three finished turns and `then` scripted for the fourth.
async fn three_turns_then(then: &[Reply]) -> (ReActAgent, ScriptedModel, ScriptedModel, RuntimeContext) {
    let model = ScriptedModel::new().reply_text("a1").reply_text("a2").reply_text("a3");
    for reply in then {
        model.push(reply.clone());
    }
    let summaries = summarizer();
    let config = CompactionConfig::default().keep_messages(4);
    let agent = agent_with(&model, compaction(config, &summaries), vec![]);
    let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("u1"));
    for turn in 1..=3 {
        agent.call(format!("m{turn}"), ctx.clone()).await.expect("call");
    }
    (agent, model, summaries, ctx)
}

fn overflow() -> Reply {
    Reply::error(ScriptedError::ContextOverflow)
}

#[tokio::test]
async fn an_overflow_in_call_compacts_and_retries_exactly_once() {
    let (agent, model, summaries, ctx) = three_turns_then(&[overflow(), Reply::text("recovered")]).await;
    assert_eq!(agent.call("m4", ctx).await.expect("recovered").text(), "recovered");
    let requests = model.requests();
    assert_eq!(requests.len(), 5);
    assert_eq!(summaries.request_count(), 1);
    assert_eq!(requests[3].messages.len(), 7);
    // A forced compaction keeps at most half of the context.
    assert!(is_summary(&requests[4].messages[0]));
    assert_eq!(texts(&requests[4])[1..], ["m3", "a3", "m4"]);

    let (agent, model, summaries, ctx) = three_turns_then(&[overflow(), overflow(), Reply::text("never")]).await;
    let err = agent.call("m4", ctx).await.expect_err("the second overflow surfaces");
    assert!(
        matches!(err, AgentError::Model(ModelError::ContextOverflow { .. })),
        "{err:?}"
    );
    assert_eq!(model.request_count(), 5, "one retry, not more");
    assert_eq!(model.remaining(), 1);
    assert_eq!(summaries.request_count(), 1);
}

#[tokio::test]
async fn an_overflow_in_stream_compacts_and_retries_exactly_once() {
    let (agent, model, summaries, ctx) = three_turns_then(&[overflow(), Reply::text("recovered")]).await;
    let events = collect(agent.stream("m4", ctx)).await;
    assert_eq!(outcome(&events), Ok("recovered".to_owned()));
    let notice: Vec<CompactionNotice> = notices(&events, NOTICE_COMPACTION);
    assert_eq!(notice.len(), 1);
    assert_eq!(
        (notice[0].reason, notice[0].outcome),
        (CompactionReason::Overflow, CompactionOutcome::Compacted)
    );
    assert_eq!((model.request_count(), summaries.request_count()), (5, 1));

    let (agent, model, summaries, ctx) = three_turns_then(&[overflow(), overflow(), Reply::text("never")]).await;
    let events = collect(agent.stream("m4", ctx)).await;
    let error = outcome(&events).expect_err("the second overflow surfaces");
    assert!(error.contains("context window exceeded"), "{error}");
    assert_eq!(
        (model.request_count(), model.remaining(), summaries.request_count()),
        (5, 1, 1)
    );
}

/// Without compaction an overflow is a typed error of kind `overflow`; the library adds no
/// front-end advice to it (what to enable is the front-end's to say).
#[tokio::test]
async fn without_compaction_an_overflow_is_a_typed_error_without_advice() {
    let model = ScriptedModel::new().reply(overflow()).reply(overflow());
    let agent = ReActAgent::builder().model(model).build().expect("agent");
    let err = agent
        .call("hi", RuntimeContext::for_user(harness_core::UserId::from_static("u1")))
        .await
        .expect_err("overflow");
    assert!(matches!(err, AgentError::Model(ModelError::ContextOverflow { .. })));
    assert_eq!(err.kind(), harness_core::ErrorKind::Overflow);
    let text = error_chain(&err);
    assert!(!text.contains("harness.toml") && !text.contains("enable"), "{text}");
    let events = collect(agent.stream("hi", RuntimeContext::for_user(harness_core::UserId::from_static("u1")))).await;
    let error = outcome(&events).expect_err("overflow");
    assert!(error.contains("context window exceeded"), "{error}");
}

#[tokio::test]
async fn oversized_arguments_are_cut_first_without_a_model_call() {
    let content = "x".repeat(5_000);
    let model = ScriptedModel::new()
        .reply(call_reply(
            "write_file",
            "w1",
            json!({"path": "a.txt", "content": content}),
        ))
        .reply_text("written")
        .reply_text("next");
    let summaries = summarizer();
    let truncate = TruncateArgsConfig::default()
        .trigger_messages(4)
        .keep_messages(1)
        .max_param_chars(300);
    let config = CompactionConfig::default().truncate_args(truncate);
    let store = Arc::new(InMemoryStateStore::default());
    let recorder = Arc::new(TranscriptRecorder::default());
    let agent = ReActAgent::builder()
        .model(model.clone())
        .state_store(store.clone())
        .tool(text_tool("write_file", |_| "ok".to_owned()))
        .middleware(recorder.clone())
        .middleware(Arc::new(compaction(config, &summaries)))
        .build()
        .expect("agent");
    let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("u1"));
    agent.call("write it", ctx.clone()).await.expect("call 1");
    let events = collect(agent.stream("and now?", ctx.clone())).await;
    assert_eq!(outcome(&events), Ok("next".to_owned()));

    let argument = |request: &ChatRequest| {
        request.messages[1]
            .tool_calls()
            .next()
            .and_then(|call| call.input["content"].as_str().map(str::to_owned))
            .expect("the write_file call")
    };
    let requests = model.requests();
    assert_eq!(argument(&requests[1]), content, "under the trigger nothing is cut");
    let cut = argument(&requests[2]);
    assert_eq!(cut.chars().count(), 300);
    assert!(
        cut.starts_with("xxx") && cut.contains("it had 5000 characters"),
        "{cut}"
    );
    assert_eq!(summaries.request_count(), 0, "no model call");
    let notice: Vec<ArgsTruncatedNotice> = notices(&events, NOTICE_ARGS_TRUNCATED);
    assert_eq!(notice.len(), 1);
    assert_eq!(
        (
            notice[0].messages,
            notice[0].arguments,
            notice[0].chars_before,
            notice[0].chars_after
        ),
        (1, 1, 5_000, 300)
    );
    assert!(notice[0].tokens_after + 1_000 < notice[0].tokens_before);

    // The raw transcript keeps the whole argument; the saved context keeps the cut one.
    let raw = recorder.messages();
    let raw_call = raw[1].tool_calls().next().map(|call| call.input["content"].clone());
    assert_eq!(raw_call, Some(json!(content)));
    let (state, _) = store.load(&agent.key_for(&ctx)).await.expect("load").expect("saved");
    assert_eq!(state.messages[1].id, raw[1].id);
    assert_eq!(
        state.messages[1]
            .tool_calls()
            .next()
            .map(|call| call.input["content"].clone()),
        Some(json!(cut))
    );
}

#[tokio::test]
async fn a_long_history_is_summarized_in_chunks_without_dropping_a_message() {
    let model = ScriptedModel::new().fallback(Fallback::Echo);
    let count = AtomicUsize::new(0);
    let summaries =
        ScriptedModel::from_fn(move |_| Reply::text(format!("part {}", count.fetch_add(1, Ordering::SeqCst) + 1)));
    let config = CompactionConfig::default()
        .trigger_messages(8)
        .keep_messages(2)
        .summary_chunk_tokens(1_000);
    let agent = agent_with(&model, compaction(config, &summaries), vec![]);
    let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("u1"));
    let message = |turn: usize| format!("m{turn} {}", "word ".repeat(320)); // ~400 tokens
    for turn in 1..=5 {
        agent.call(message(turn), ctx.clone()).await.expect("call");
    }
    let requests = summaries.requests();
    assert!(requests.len() >= 3, "{} requests", requests.len());
    for (at, request) in requests.iter().enumerate() {
        let text = request_text(request);
        if at > 0 {
            assert!(
                text.contains(&format!("<previous_summary>\npart {at}\n</previous_summary>")),
                "request {at}"
            );
        }
    }
    let all: String = requests.iter().map(request_text).collect();
    for turn in 1..=4 {
        assert!(all.contains(&message(turn)), "m{turn}");
        if turn < 4 {
            assert!(all.contains(&format!("echo: {}", message(turn))), "echo {turn}");
        }
    }
    let summary = &model.last_request().expect("request").messages[0];
    let record = summary_record(summary).expect("summary");
    assert_eq!(record.requests as usize, requests.len());
    assert!(summary.text().ends_with(&format!("part {}", requests.len())));
}

/// One entry of the shared request log: whether it went to the summarizer, and the request.
type Log = Arc<Mutex<Vec<(bool, ChatRequest)>>>;

fn turn_number(request: &ChatRequest) -> usize {
    request
        .messages
        .iter()
        .rev()
        .find(|msg| msg.role == Role::User && !is_summary(msg))
        .and_then(|msg| {
            let text = msg.text();
            text.strip_prefix("turn ")?.split(':').next()?.parse().ok()
        })
        .expect("the newest user message is always in the context")
}

/// The main model of the retention run: every third turn looks something up first.
fn retention_model(log: Log) -> ScriptedModel {
    ScriptedModel::from_fn(move |request| {
        log.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((false, request.clone()));
        let turn = turn_number(request);
        match request.messages.last().map(|msg| msg.role) {
            Some(Role::Tool) => Reply::text(format!("answer {turn} after lookup")),
            _ if turn.is_multiple_of(3) => {
                call_reply("lookup", &format!("call-{turn}"), json!({"key": format!("k{turn}")}))
            }
            _ => Reply::text(format!("answer {turn}")),
        }
    })
}

fn retention_summarizer(log: Log) -> ScriptedModel {
    let count = AtomicUsize::new(0);
    ScriptedModel::from_fn(move |request| {
        log.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((true, request.clone()));
        Reply::text(format!(
            "## Intent\nsummary {}",
            count.fetch_add(1, Ordering::SeqCst) + 1
        ))
    })
}

#[tokio::test]
async fn retention_over_two_hundred_turns() {
    let log: Log = Arc::default();
    let model = retention_model(Arc::clone(&log));
    let summaries = retention_summarizer(Arc::clone(&log));
    let recorder = Arc::new(TranscriptRecorder::default());
    let config = CompactionConfig::default().trigger_messages(30).keep_messages(10);
    let lookup = text_tool("lookup", |input| {
        format!("value of {}", input["key"].as_str().unwrap_or_default())
    });
    let agent = ReActAgent::builder()
        .model(model.clone())
        .sys_prompt("SYS")
        .tool(lookup)
        .middleware(recorder.clone())
        .middleware(Arc::new(compaction(config, &summaries)))
        .build()
        .expect("agent");
    let fs = MemFs::new();
    let ctx = ctx_with("alice", fs.clone());
    for turn in 1..=200_u32 {
        let input = if turn.is_multiple_of(25) {
            Msg::user(format!("turn {turn}: RULE-{turn}: never delete files under /data")).pinned()
        } else {
            Msg::user(format!("turn {turn}: fact-{turn} is {}", turn * 7))
        };
        agent.call(input, ctx.clone()).await.expect("turn");
    }
    assert!(model.violations().is_empty(), "{:?}", model.violations());

    // The raw transcript: every message appended by every call, never a summary.
    let transcript = recorder.messages();
    assert_eq!(transcript.len(), 200 * 2 + 66 * 2);
    assert!(!transcript.iter().any(|msg| is_summary(msg)));
    let position: HashMap<&str, usize> = transcript
        .iter()
        .enumerate()
        .map(|(at, msg)| (msg.id.as_str(), at))
        .collect();
    assert_eq!(position.len(), transcript.len(), "ids are unique");

    let log = log.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let mut previous: Option<&ChatRequest> = None;
    let mut pending: Vec<&ChatRequest> = Vec::new();
    let mut compactions = 0;
    for (to_summarizer, request) in &log {
        if *to_summarizer {
            pending.push(request);
            continue;
        }
        let messages = &request.messages;
        assert_eq!(request.system.render(), "SYS");
        let last = position[messages.last().expect("non-empty").id.as_str()];
        let newest_user = transcript[..=last]
            .iter()
            .rposition(|msg| msg.role == Role::User)
            .expect("a user message");

        // After a compaction: system prompt + summary + pinned messages + kept tail, nothing else.
        if is_summary(&messages[0]) {
            let rest = &messages[1..];
            assert!(!rest.iter().any(|msg| is_summary(msg)), "one summary, first");
            let mut tail_start = rest.len();
            while tail_start > 0
                && position.get(rest[tail_start - 1].id.as_str()) == Some(&(last - (rest.len() - tail_start)))
            {
                tail_start -= 1;
            }
            let mut previous_at = None;
            for msg in &rest[..tail_start] {
                let at = position[msg.id.as_str()];
                assert!(
                    msg.is_pinned() || at == newest_user,
                    "unexpected message kept: {}",
                    msg.text()
                );
                assert!(previous_at < Some(at), "kept messages stay in order");
                previous_at = Some(at);
            }
        } else {
            let in_order = messages
                .iter()
                .enumerate()
                .all(|(at, msg)| position.get(msg.id.as_str()) == Some(&at));
            assert!(
                in_order && messages.len() == last + 1,
                "before any compaction the context is the transcript"
            );
        }
        // Every message is the raw one, verbatim; every pinned message so far is there.
        for msg in messages.iter().filter(|msg| !is_summary(msg)) {
            assert_eq!(**msg, *transcript[position[msg.id.as_str()]]);
        }
        let ids: HashSet<&str> = messages.iter().map(|msg| msg.id.as_str()).collect();
        for pinned in transcript[..=last].iter().filter(|msg| msg.is_pinned()) {
            assert!(ids.contains(pinned.id.as_str()), "pinned {} was dropped", pinned.text());
        }

        // A compaction happened since the previous request: check what it replaced.
        if !pending.is_empty() {
            let before = previous.expect("a compaction follows a model call");
            let before_last = position[before.messages.last().expect("non-empty").id.as_str()];
            let context: Vec<&Arc<Msg>> = before
                .messages
                .iter()
                .chain(&transcript[before_last + 1..=last])
                .collect();
            let replaced: Vec<&Arc<Msg>> = context
                .iter()
                .copied()
                .filter(|msg| !ids.contains(msg.id.as_str()) && !is_summary(msg))
                .collect();
            assert!(!replaced.is_empty(), "a summary is never made from summaries alone");
            let summary_text: String = pending.iter().map(|request| request_text(request)).collect();
            for msg in &replaced {
                for piece in pieces(msg) {
                    assert!(
                        summary_text.contains(&piece),
                        "{piece:?} was replaced without being summarized"
                    );
                }
            }
            if let Some(old) = before.messages.first().filter(|msg| is_summary(msg)) {
                let body = old.content.last().and_then(Block::as_text).expect("summary text");
                assert!(summary_text.contains(body), "the previous summary is folded in");
            }
            let record = summary_record(&messages[0]).expect("a new summary leads the context");
            assert_eq!(record.range.count, replaced.len() as u64);
            assert_eq!(record.sha256, jsonl_sha256(replaced.iter().copied()));
            let offloaded = fs
                .text(record.offload_path.as_deref().expect("offloaded"))
                .expect("file");
            assert_eq!(hex::encode(Sha256::digest(offloaded.as_bytes())), record.sha256);
            compactions += 1;
            pending.clear();
        }
        previous = Some(request);
    }
    assert!(pending.is_empty());
    assert!(compactions >= 5, "{compactions} compactions");
    assert_eq!(compactions, summaries.request_count());
}

/// Reports the compactions the session's typed slot holds, as the tool sees it.
struct SlotReader(harness_core::ToolSpec);

#[async_trait]
impl Tool for SlotReader {
    fn spec(&self) -> &harness_core::ToolSpec {
        &self.0
    }

    async fn call(
        &self,
        _: serde_json::Value,
        ctx: &harness_core::ToolContext,
    ) -> Result<harness_core::ToolOutput, harness_core::ToolError> {
        let state = ctx
            .session
            .get::<harness::compaction::CompactionState>()
            .map_err(|err| harness_core::ToolError::failed(err.to_string()))?;
        Ok(harness_core::ToolOutput::text(format!(
            "compactions={} records={}",
            state.compactions(),
            state.history().len()
        )))
    }
}

#[tokio::test]
async fn a_compaction_is_kept_in_the_typed_slot_the_turns_tools_read() {
    let model = ScriptedModel::new()
        .reply_text("a1")
        .reply_text("a2")
        .reply_tool_call("slot", json!({}))
        .reply_text("done");
    let summaries = summarizer();
    let config = CompactionConfig::default().trigger_messages(4).keep_messages(2);
    let spec = harness_core::ToolSpec {
        name: "slot".to_owned(),
        description: "reads the compaction slot".to_owned(),
        input_schema: json!({"type": "object"}),
        annotations: harness_core::ToolAnnotations::new(),
    };
    let store = Arc::new(InMemoryStateStore::default());
    let agent = ReActAgent::builder()
        .model(model.clone())
        .sys_prompt("SYS")
        .tools(vec![Arc::new(SlotReader(spec)) as Arc<dyn Tool>])
        .middleware(Arc::new(compaction(config, &summaries)))
        .state_store(store.clone())
        .build()
        .expect("agent builds");
    let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("u1"));
    agent.call("m1", ctx.clone()).await.expect("call");
    agent.call("m2", ctx.clone()).await.expect("call");
    // Five messages reach the trigger: compacted before the step, then the tool runs.
    agent.call("m3", ctx.clone()).await.expect("call");
    let compactions = summaries.request_count();
    assert!(compactions >= 1);
    let result = model.requests()[3]
        .messages
        .iter()
        .rev()
        .find(|m| m.role == Role::Tool)
        .map(|m| format!("{:?}", m.content))
        .unwrap_or_default();
    assert!(result.contains("compactions=1 records=1"), "{result}");
    // The kernel saved the slot under the key earlier releases wrote.
    let key = agent.key_for(&ctx);
    let (saved, _) = store.load(&key).await.expect("load").expect("saved");
    assert_eq!(compaction_history(&saved).len(), compactions);
    assert_eq!(saved.extensions["compaction"]["compactions"], compactions);
}
