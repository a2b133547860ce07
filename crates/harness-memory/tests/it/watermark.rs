//! The persisted extraction watermark and throttle, and the persisted consolidation gap:
//! what one process leaves pending, a later one catches up on.

use crate::support::{
    MemFs, ctx, dyn_fs, extraction_requests, is_consolidation, memory, request_text, routed_model, today_log,
};
use harness_core::{Msg, ReActAgent};
use harness_fs::{CallScope, IsolationScope};
use harness_memory::{CONSOLIDATION_STATE, FlushOutcome, MemoryConfig};
use harness_models::{Reply, ScriptedModel};
use std::time::Duration;

const TRANSCRIPT: &str = "agents/main/sessions/s1.log.jsonl";
const MARK: &str = "memory/.extraction/main/s1.json";

fn scope() -> CallScope {
    CallScope::parse(IsolationScope::User, "main", "ana", "s1").unwrap()
}

fn append_transcript(fs: &MemFs, messages: &[Msg]) {
    let mut text = fs.text(TRANSCRIPT).unwrap_or_default();
    for msg in messages {
        text.push_str(&serde_json::to_string(msg).unwrap());
        text.push('\n');
    }
    fs.put(TRANSCRIPT, &text);
}

fn mark_with_last_run(at: jiff::Timestamp) -> String {
    format!("{{\"v\":1,\"extracted_through\":null,\"last_run\":\"{at}\"}}\n")
}

#[tokio::test]
async fn a_later_process_catches_up_from_the_transcript() {
    let fs = MemFs::new();
    append_transcript(&fs, &[Msg::user("I am Ana."), Msg::assistant("Hi Ana")]);
    let first = routed_model(
        vec![Reply::text("- The user is called Ana.")],
        vec![Reply::text("- The user is called Ana.")],
    );
    let (memory, _dir) = memory(&first, MemoryConfig::default());
    let outcome = memory.extract_pending(dyn_fs(&fs), &scope()).await.unwrap();
    assert!(matches!(outcome, FlushOutcome::Written { facts: 1, .. }), "{outcome:?}");
    assert!(fs.text(MARK).is_some(), "the watermark is written");
    assert!(memory.shutdown(Duration::from_secs(5)).await.completed);

    // A later process: only what the transcript gained since is sent.
    append_transcript(&fs, &[Msg::user("I like jazz."), Msg::assistant("Nice")]);
    let later = routed_model(vec![Reply::text("- The user likes jazz.")], vec![]);
    let (memory, _dir2) = crate::support::memory(&later, MemoryConfig::default());
    memory.extract_pending(dyn_fs(&fs), &scope()).await.unwrap();
    let request = request_text(&extraction_requests(&later)[0]);
    assert!(request.contains("[user]: I like jazz."), "{request}");
    assert!(!request.contains("[user]: I am Ana."), "already extracted: {request}");
    // Nothing left: no model call.
    assert_eq!(
        memory.extract_pending(dyn_fs(&fs), &scope()).await.unwrap(),
        FlushOutcome::Empty
    );
    assert_eq!(extraction_requests(&later).len(), 1);
    let log = fs.text(&today_log()).unwrap();
    assert!(
        log.contains("The user is called Ana.") && log.contains("The user likes jazz."),
        "{log}"
    );
    let sessions = memory.sessions_with_transcripts(&*dyn_fs(&fs), &scope()).await.unwrap();
    assert_eq!(sessions.iter().map(|s| s.as_str()).collect::<Vec<_>>(), ["s1"]);
}

#[tokio::test]
async fn the_watermark_moves_only_after_the_facts_are_written() {
    let fs = MemFs::new();
    append_transcript(&fs, &[Msg::user("I am Ana."), Msg::assistant("Hi Ana")]);
    let model = routed_model(
        vec![
            Reply::text("- The user is called Ana."),
            Reply::text("- The user is called Ana."),
        ],
        vec![],
    );
    let (memory, _dir) = memory(&model, MemoryConfig::default());
    fs.fail_writes_to(&today_log());
    assert!(memory.extract_pending(dyn_fs(&fs), &scope()).await.is_err());
    assert_eq!(fs.text(MARK), None, "no facts written, so no watermark");
    fs.heal();
    memory.extract_pending(dyn_fs(&fs), &scope()).await.unwrap();
    let retry = request_text(&extraction_requests(&model)[1]);
    assert!(
        retry.contains("[user]: I am Ana."),
        "the failed part is extracted again: {retry}"
    );
    assert!(fs.text(MARK).is_some());
}

#[tokio::test]
async fn the_throttle_window_survives_processes() {
    let fs = MemFs::new();
    let mut config = MemoryConfig::default();
    config.extraction_throttle = Duration::from_secs(3600);

    // An earlier process ran an extraction just now: this one's call starts none, and its
    // shutdown leaves the work pending instead of running it.
    fs.put(MARK, &mark_with_last_run(jiff::Timestamp::now()));
    let model = routed_model(vec![Reply::text("- The user likes jazz.")], vec![]);
    let (memory, _dir) = memory(&model, config.clone());
    let agent = ReActAgent::builder()
        .model(ScriptedModel::new().reply_text("Nice"))
        .middleware(memory.middleware())
        .build()
        .unwrap();
    agent.call("I like jazz.", ctx("ana", "s1", &fs)).await.unwrap();
    append_transcript(&fs, &[Msg::user("I like jazz."), Msg::assistant("Nice")]);
    let report = memory.shutdown(Duration::from_secs(5)).await;
    assert!(report.completed);
    assert!(
        extraction_requests(&model).is_empty(),
        "inside the persisted throttle window"
    );

    // The window has passed (the last run was two hours ago): the next process extracts
    // the pending turn from the transcript along with its own.
    let two_hours_ago = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(2);
    fs.put(MARK, &mark_with_last_run(two_hours_ago));
    let model = routed_model(
        vec![Reply::text("- The user likes jazz.\n- The user cycles.")],
        vec![Reply::text("- x")],
    );
    let (memory, _dir2) = crate::support::memory(&model, config);
    let agent = ReActAgent::builder()
        .model(ScriptedModel::new().reply_text("Good"))
        .middleware(memory.middleware())
        .build()
        .unwrap();
    agent.call("I cycle to work.", ctx("ana", "s1", &fs)).await.unwrap();
    assert!(memory.shutdown(Duration::from_secs(5)).await.completed);
    let requests = extraction_requests(&model);
    assert_eq!(requests.len(), 1);
    let text = request_text(&requests[0]);
    assert!(
        text.contains("[user]: I like jazz.") && text.contains("[user]: I cycle to work."),
        "{text}"
    );
}

#[tokio::test]
async fn the_consolidation_gap_survives_processes() {
    let fs = MemFs::new();
    append_transcript(&fs, &[Msg::user("I am Ana.")]);
    fs.put(
        CONSOLIDATION_STATE,
        &format!(
            "{{\"v\":1,\"consolidated_at\":\"{}\",\"files\":{{}}}}",
            jiff::Timestamp::now()
        ),
    );
    let model = routed_model(
        vec![Reply::text("- The user is called Ana.")],
        vec![Reply::text("- merged")],
    );
    let (memory, _dir) = memory(&model, MemoryConfig::default());
    let outcome = memory.extract_pending(dyn_fs(&fs), &scope()).await.unwrap();
    assert!(matches!(outcome, FlushOutcome::Written { .. }));
    assert!(memory.shutdown(Duration::from_secs(5)).await.completed);
    assert!(
        !model.requests().iter().any(is_consolidation),
        "a consolidation recorded a moment ago by another process holds the gap"
    );

    // Without a recent consolidation on record, the same extraction asks for one.
    let fs = MemFs::new();
    append_transcript(&fs, &[Msg::user("I am Ana.")]);
    let model = routed_model(
        vec![Reply::text("- The user is called Ana.")],
        vec![Reply::text("- merged")],
    );
    let (memory, _dir2) = crate::support::memory(&model, MemoryConfig::default());
    memory.extract_pending(dyn_fs(&fs), &scope()).await.unwrap();
    assert!(memory.shutdown(Duration::from_secs(5)).await.completed);
    assert!(model.requests().iter().any(is_consolidation));
}
