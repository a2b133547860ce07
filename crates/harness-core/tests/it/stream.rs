//! `stream()`: event order, the error event, and dropping the stream.

use crate::support::{Log, fn_tool, lines};
use futures::StreamExt;
use harness_core::{AgentEvent, EventKind, EventSink, EventSource, ReActAgent, RuntimeContext, ToolOutput};
use harness_models::{Reply, ScriptedError, ScriptedModel, ScriptedToolCall};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

fn describe(kind: &EventKind) -> String {
    match kind {
        EventKind::AgentStart { session_id } => format!("agent_start {session_id}"),
        EventKind::TextDelta { delta } => format!("text {delta}"),
        EventKind::ThinkingDelta { delta } => format!("thinking {delta}"),
        EventKind::ToolCallStart { id, name } => format!("tool_call_start {id} {name}"),
        EventKind::ToolCallArgs { index, delta } => format!("tool_call_args {index} {delta}"),
        EventKind::ToolCallEnd { id, name, input } => format!("tool_call_end {id} {name} {input}"),
        EventKind::ToolResult {
            id,
            name,
            content,
            is_error,
        } => {
            let text: Vec<&str> = content.iter().filter_map(|block| block.as_text()).collect();
            format!(
                "tool_result {id} {name} {} {}",
                if *is_error { "error" } else { "ok" },
                text.join(" ")
            )
        }
        EventKind::StepEnd { step, usage } => match usage {
            Some(usage) => format!("step_end {step} in={} out={}", usage.input_tokens, usage.output_tokens),
            None => format!("step_end {step}"),
        },
        EventKind::MaxIterations { limit } => format!("max_iterations {limit}"),
        EventKind::Error { message, kind } => format!("error {kind} {message}"),
        EventKind::Final { message } => format!("final {}", message.text()),
        other => format!("{other:?}"),
    }
}

fn echo() -> Arc<dyn harness_core::Tool> {
    fn_tool("echo", json!({"type": "object"}), |input, _ctx| async move {
        Ok(ToolOutput::text(input["text"].as_str().unwrap_or_default()))
    })
    .shared()
}

#[tokio::test]
async fn a_tool_using_call_yields_events_in_order_with_final_last() {
    let model = ScriptedModel::new()
        .reply(
            Reply {
                tool_calls: vec![ScriptedToolCall {
                    name: "echo".into(),
                    arguments: json!({"text": "hi"}),
                    id: Some("c1".into()),
                }],
                ..Reply::default()
            }
            .with_usage(harness_core::Usage {
                input_tokens: 10,
                output_tokens: 3,
                ..Default::default()
            }),
        )
        .reply(Reply {
            thinking: Some("hmm".into()),
            text: Some("done".into()),
            ..Reply::default()
        });
    let agent = ReActAgent::builder().model(model).tool(echo()).build().unwrap();
    let events: Vec<AgentEvent> = agent
        .stream(
            "go",
            RuntimeContext::for_user(harness_core::UserId::from_static("u1"))
                .with_session(harness_core::SessionId::from_static("s1")),
        )
        .collect()
        .await;
    assert!(
        events.iter().all(|event| event.source.is_none()),
        "top-level events have no source"
    );
    let described: Vec<String> = events.iter().map(|event| describe(&event.kind)).collect();
    assert_eq!(
        described.join("\n"),
        lines(
            r#"
            agent_start s1
            tool_call_start c1 echo
            tool_call_args 0 {"text"
            tool_call_args 0 :"hi"}
            tool_call_end c1 echo {"text":"hi"}
            tool_result c1 echo ok hi
            step_end 1 in=10 out=3
            thinking hmm
            text do
            text ne
            step_end 2
            final done
            "#
        )
    );
}

#[tokio::test]
async fn a_failed_call_ends_with_an_error_event() {
    let model = ScriptedModel::new().reply_error(ScriptedError::Auth);
    let agent = ReActAgent::builder().model(model).build().unwrap();
    let mut stream = agent.stream("go", RuntimeContext::for_user(harness_core::UserId::from_static("u1")));
    let mut described = Vec::new();
    while let Some(event) = stream.next().await {
        described.push(describe(&event.kind));
    }
    assert_eq!(
        described,
        [
            "agent_start default",
            "error auth model call failed: authentication rejected (status 401): scripted auth failure",
        ]
    );
    assert!(stream.next().await.is_none(), "the stream stays ended");
}

/// Dropping the stream while a tool runs drops the tool's future: it never finishes, and no
/// further model call is made. (A dropped call is not saved: `AgentStream` documents that the
/// state is saved only when the call reaches its end.)
#[tokio::test(start_paused = true)]
async fn dropping_the_stream_mid_call_stops_it() {
    struct Guard(Log);
    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.push("tool dropped");
        }
    }
    let log = Log::default();
    let finished = Arc::new(AtomicBool::new(false));
    let tool = {
        let (log, finished) = (log.clone(), finished.clone());
        fn_tool("wait", json!({"type": "object"}), move |_input, _ctx| {
            let (log, finished) = (log.clone(), finished.clone());
            async move {
                let _guard = Guard(log.clone());
                log.push("tool started");
                tokio::time::sleep(Duration::from_secs(10)).await;
                finished.store(true, Ordering::SeqCst);
                Ok(ToolOutput::text("waited"))
            }
        })
        .shared()
    };
    let model = ScriptedModel::new()
        .reply_tool_call("wait", json!({}))
        .reply_text("never");
    let agent = ReActAgent::builder().model(model.clone()).tool(tool).build().unwrap();
    let ctx = RuntimeContext::for_user(harness_core::UserId::from_static("u1"));
    let mut stream = agent.stream("go", ctx.clone());
    loop {
        let event = stream.next().await.unwrap();
        if matches!(event.kind, EventKind::ToolCallEnd { .. }) {
            break;
        }
    }
    // Drive the call until the tool is running, then walk away.
    let pending = tokio::time::timeout(Duration::from_millis(10), stream.next()).await;
    assert!(pending.is_err(), "no event while the tool sleeps: {pending:?}");
    assert_eq!(log.entries(), ["tool started"]);
    drop(stream);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(log.entries(), ["tool started", "tool dropped"]);
    assert!(!finished.load(Ordering::SeqCst));
    assert_eq!(model.request_count(), 1);
    let key = agent.key_for(&ctx);
    assert!(agent.state_store().load(&key).await.unwrap().is_none());
}

/// A caller-made sink tags every event with the child's source.
#[tokio::test]
async fn stream_with_a_tagged_sink_tags_every_event() {
    let source = EventSource {
        agent_id: "researcher".into(),
        session_id: "child-1".into(),
        depth: 1,
        path: "main/researcher".into(),
    };
    let model = ScriptedModel::new()
        .reply_tool_call("echo", json!({"text": "x"}))
        .reply_text("ok");
    let agent = ReActAgent::builder().model(model).tool(echo()).build().unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let sink = EventSink::new(tx).with_source(source.clone());
    let events: Vec<AgentEvent> = agent
        .stream_with(
            "go".into(),
            RuntimeContext::for_user(harness_core::UserId::from_static("u1")),
            sink,
            rx,
        )
        .collect()
        .await;
    assert!(events.len() > 5, "{events:?}");
    assert!(events.iter().all(|event| event.source.as_ref() == Some(&source)));
    assert!(matches!(
        events.last().map(|event| &event.kind),
        Some(EventKind::Final { .. })
    ));
}

/// A tool may hand its event sink to background work that outlives the call; the stream
/// still ends right after `Final`.
#[tokio::test]
async fn the_stream_ends_after_final_even_if_a_sink_clone_lives_on() {
    let (release, held) = tokio::sync::oneshot::channel::<()>();
    let held = std::sync::Mutex::new(Some(held));
    let tool = fn_tool("background", json!({"type": "object"}), move |_input, ctx| {
        let held = held.lock().unwrap().take();
        async move {
            let events = ctx.events.clone();
            // Background work owned by the test (released below), keeping a sink clone.
            tokio::spawn(async move {
                if let Some(held) = held {
                    let _ = held.await;
                }
                drop(events);
            });
            Ok(ToolOutput::text("started in background"))
        }
    })
    .shared();
    let model = ScriptedModel::new()
        .reply_tool_call("background", json!({}))
        .reply_text("ok");
    let agent = ReActAgent::builder().model(model).tool(tool).build().unwrap();
    let events = tokio::time::timeout(
        Duration::from_secs(5),
        agent
            .stream("go", RuntimeContext::for_user(harness_core::UserId::from_static("u1")))
            .collect::<Vec<_>>(),
    )
    .await;
    let _ = release.send(());
    let events = events.expect("the stream ended");
    assert!(matches!(
        events.last().map(|event| &event.kind),
        Some(EventKind::Final { .. })
    ));
}
