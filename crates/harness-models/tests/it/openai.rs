//! The OpenAI-compatible client against recorded-style Chat Completions streams.

use crate::server::{Mock, Server};
use crate::{chain, request_with_tool, stream};
use harness_core::{Block, ChatModel, FinishReason, ModelError, Msg, Role, Usage};
use harness_models::{OpenAiClient, OpenAiConfig, RetryPolicy, Retrying, Secret, WireError};
use serde_json::{Value, json};
use std::time::Duration;

// ---- ev_* builders: one `data:` event of a chat.completion.chunk stream each. ----

fn ev(chunk: Value) -> String {
    format!("data: {chunk}\n\n")
}

fn ev_chunk(delta: Value, finish_reason: Value) -> String {
    ev(json!({
        "id": "chatcmpl-9x", "object": "chat.completion.chunk", "created": 1_764_000_000,
        "model": "gpt-test", "system_fingerprint": "fp_1",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}]
    }))
}

fn ev_role() -> String {
    ev_chunk(json!({"role": "assistant", "content": ""}), Value::Null)
}

fn ev_text(text: &str) -> String {
    ev_chunk(json!({"content": text}), Value::Null)
}

fn ev_reasoning(text: &str) -> String {
    ev_chunk(json!({"content": null, "reasoning_content": text}), Value::Null)
}

fn ev_tool_start(index: usize, id: &str, name: &str, arguments: &str) -> String {
    ev_chunk(
        json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                               "function": {"name": name, "arguments": arguments}}]}),
        Value::Null,
    )
}

fn ev_tool_args(index: usize, arguments: &str) -> String {
    ev_chunk(
        json!({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]}),
        Value::Null,
    )
}

/// A tool-call delta without `index`, as some compatible servers send.
fn ev_tool_no_index(id: Option<&str>, name: Option<&str>, arguments: &str) -> String {
    let mut call = json!({"function": {"arguments": arguments}});
    if let Some(id) = id {
        call["id"] = json!(id);
        call["type"] = json!("function");
    }
    if let Some(name) = name {
        call["function"]["name"] = json!(name);
    }
    ev_chunk(json!({"tool_calls": [call]}), Value::Null)
}

fn ev_finish(reason: &str) -> String {
    ev_chunk(json!({}), json!(reason))
}

fn ev_usage(prompt: u64, completion: u64, cached: u64) -> String {
    ev(json!({
        "id": "chatcmpl-9x", "object": "chat.completion.chunk", "created": 1_764_000_000, "model": "gpt-test",
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                  "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
                  "completion_tokens_details": {"reasoning_tokens": 0}}
    }))
}

fn ev_done() -> String {
    "data: [DONE]\n\n".to_owned()
}

fn client(server: &Server) -> OpenAiClient {
    OpenAiClient::new(OpenAiConfig::new("gpt-test", format!("{}/v1", server.base)).api_key(Secret::new("sk-test")))
        .unwrap()
}

fn tool_calls(message: &Msg) -> Vec<(String, String, Value)> {
    message
        .tool_calls()
        .map(|c| (c.id.to_owned(), c.name.to_owned(), c.input.clone()))
        .collect()
}

#[tokio::test]
async fn streams_reasoning_text_and_usage_split_across_writes() {
    let server = Server::start(vec![Mock::sse(
        &[
            ": OPENROUTER PROCESSING\n\n".to_owned(),
            ev_role(),
            ev_reasoning("The user greets; "),
            ev_reasoning("answer briefly."),
            ev_text("Hello"),
            ev_text(", 世界!"),
            ev_finish("stop"),
            ev_usage(120, 9, 64),
            ev_done(),
        ],
        7,
    )])
    .await;
    let response = stream(&client(&server), request_with_tool(vec![Msg::user("hi")]))
        .await
        .unwrap();
    assert_eq!(
        response.message.content,
        vec![
            Block::Thinking {
                thinking: "The user greets; answer briefly.".into(),
                signature: None
            },
            Block::text("Hello, 世界!"),
        ]
    );
    assert_eq!(response.finish_reason, Some(FinishReason::Stop));
    assert_eq!(
        response.usage,
        Some(Usage {
            input_tokens: 120,
            output_tokens: 9,
            cache_read_tokens: 64,
            cache_write_tokens: 0
        })
    );

    let request = server.only_request();
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.headers["authorization"], "Bearer sk-test");
    assert_eq!(request.body["model"], "gpt-test");
    assert_eq!(request.body["stream"], true);
    assert_eq!(request.body["stream_options"], json!({"include_usage": true}));
    assert_eq!(
        request.body["messages"],
        json!([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"}])
    );
    assert_eq!(
        request.body["tools"],
        json!([{"type": "function", "function": {
            "name": "lookup",
            "description": "Look up the record stored under a key and return it verbatim.",
            "parameters": {"type": "object",
                           "properties": {"key": {"type": "string", "description": "The key to look up, e.g. k1."}},
                           "required": ["key"]}}}])
    );
    assert_eq!(request.body["tool_choice"], "auto");
}

#[tokio::test]
async fn two_parallel_tool_calls_with_split_arguments() {
    let server = Server::start(vec![Mock::sse(
        &[
            ev_role(),
            ev_tool_start(0, "call_a", "lookup", ""),
            ev_tool_args(0, "{\"ke"),
            ev_tool_start(1, "call_b", "lookup", "{\"key\""),
            ev_tool_args(0, "y\": \"k1\"}"),
            ev_tool_args(1, ": \"k2\"}"),
            ev_finish("tool_calls"),
            ev_usage(50, 30, 0),
            ev_done(),
        ],
        11,
    )])
    .await;
    // The history carries an earlier call and its result: tool_call_id must pair them.
    let earlier = Msg::new(
        Role::Assistant,
        vec![Block::ToolUse {
            id: "call_0".into(),
            name: "lookup".into(),
            input: json!({"key": "k0"}),
        }],
    );
    let history = vec![
        Msg::user("look up k0"),
        earlier,
        Msg::tool_result("call_0", vec![Block::text("v0")], false),
        Msg::user("now k1 and k2"),
    ];
    let response = stream(&client(&server), request_with_tool(history)).await.unwrap();
    assert_eq!(
        tool_calls(&response.message),
        vec![
            ("call_a".into(), "lookup".into(), json!({"key": "k1"})),
            ("call_b".into(), "lookup".into(), json!({"key": "k2"})),
        ]
    );
    assert_eq!(response.finish_reason, Some(FinishReason::ToolCalls));

    let body = server.only_request().body;
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "look up k0"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_0", "type": "function", "function": {"name": "lookup", "arguments": "{\"key\":\"k0\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_0", "content": "v0"},
            {"role": "user", "content": "now k1 and k2"},
        ])
    );
}

#[tokio::test]
async fn index_less_tool_calls_and_unknown_fields_are_understood() {
    let server = Server::start(vec![Mock::sse(
        &[
            // Gemini-style: no `object`, no `index`, extra fields everywhere.
            ev(
                json!({"choices": [{"delta": {"role": "assistant", "extra_content": {"google": {}}},
                                   "index": 0}], "created": 1, "model": "gemini", "weird": [1, 2]}),
            ),
            ev_tool_no_index(Some("fc_1"), Some("lookup"), "{\"key\":"),
            ev_tool_no_index(None, None, "\"k1\"}"),
            ev_tool_no_index(Some("fc_2"), Some("lookup"), "{\"key\":\"k2\"}"),
            ev(
                json!({"choices": [{"delta": {}, "finish_reason": "tool_calls", "native_finish_reason": "STOP"}],
                      "usage": null}),
            ),
            ev_done(),
        ],
        5,
    )])
    .await;
    let response = stream(&client(&server), request_with_tool(vec![Msg::user("k1, k2")]))
        .await
        .unwrap();
    assert_eq!(
        tool_calls(&response.message),
        vec![
            ("fc_1".into(), "lookup".into(), json!({"key": "k1"})),
            ("fc_2".into(), "lookup".into(), json!({"key": "k2"})),
        ]
    );
}

#[tokio::test]
async fn error_statuses_are_classified() {
    let server = Server::start(vec![
        Mock::status(
            400,
            r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130310 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
        ),
        Mock::status(
            429,
            r#"{"error":{"message":"Rate limit reached for gpt-test on requests per min (RPM): Limit 3, Used 3, Requested 1.","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#,
        )
        .header("retry-after", "3"),
        Mock::status(
            401,
            r#"{"error":{"message":"Incorrect API key provided: sk-test. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#,
        ),
        Mock::status(
            400,
            r#"{"error":{"code":"invalid_parameter_error","param":null,"message":"<400> InternalError.Algo.InvalidParameter: Range of input length should be [1, 129024]","type":"invalid_request_error"},"id":"chatcmpl-1","request_id":"1"}"#,
        ),
    ])
    .await;
    let model = client(&server);
    let request = || request_with_tool(vec![Msg::user("hi")]);
    let overflow = stream(&model, request()).await;
    assert!(
        matches!(&overflow, Err(ModelError::ContextOverflow { message }) if message.starts_with("This model's maximum context length is 128000")),
        "{overflow:?}"
    );
    let limited = stream(&model, request()).await;
    assert!(
        matches!(limited, Err(ModelError::RateLimited { retry_after: Some(wait) }) if wait == Duration::from_secs(3))
    );
    let auth = model.call(request()).await;
    assert!(matches!(auth, Err(ModelError::Auth { status: 401, .. })), "{auth:?}");
    let qwen = stream(&model, request()).await;
    assert!(matches!(qwen, Err(ModelError::ContextOverflow { .. })), "{qwen:?}");
}

#[tokio::test]
async fn a_malformed_chunk_is_a_clear_error() {
    let server = Server::start(vec![Mock::sse(
        &[
            ev_role(),
            ev_text("Hel"),
            "data: {\"choices\": [{\"delta\": {\"content\": \"lo\"}\n\n".to_owned(),
            ev_done(),
        ],
        64,
    )])
    .await;
    let mut chunks = client(&server)
        .stream(request_with_tool(vec![Msg::user("hi")]))
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut error = None;
    while let Some(item) = futures::StreamExt::next(&mut chunks).await {
        match item {
            Ok(chunk) => seen.push(chunk),
            Err(err) => error = Some(err),
        }
    }
    assert_eq!(seen, vec![harness_core::ModelChunk::TextDelta("Hel".into())]);
    let message = error.map(|e| e.to_string()).unwrap_or_default();
    assert!(
        message.starts_with("malformed model response: a stream chunk is not valid JSON (EOF while parsing"),
        "{message}"
    );
    assert!(
        message.ends_with(r#"{"choices": [{"delta": {"content": "lo"}"#),
        "{message}"
    );
}

#[tokio::test]
async fn a_connection_dropped_mid_stream_is_transient() {
    let server = Server::start(vec![
        Mock::sse_cut(&[ev_role(), ev_text("partial answer")]),
        // A body that ends cleanly but before any finish or [DONE] is incomplete too.
        Mock::sse(&[ev_role(), ev_text("partial answer")], 1000),
    ])
    .await;
    let model = client(&server);
    let mut chunks = model.stream(request_with_tool(vec![Msg::user("hi")])).await.unwrap();
    let mut items = Vec::new();
    while let Some(item) = futures::StreamExt::next(&mut chunks).await {
        items.push(item);
    }
    assert!(
        matches!(items.first(), Some(Ok(harness_core::ModelChunk::TextDelta(text))) if text == "partial answer"),
        "{items:?}"
    );
    match items.pop() {
        Some(Err(ModelError::Transient(source))) => {
            assert!(
                matches!(source.downcast_ref::<WireError>(), Some(WireError::StreamCut(_))),
                "{source}"
            );
        }
        other => panic!("expected Transient, got {other:?}"),
    }
    assert_eq!(items.len(), 1, "the error ends the stream");
    let ended = stream(&model, request_with_tool(vec![Msg::user("hi")])).await;
    match ended {
        Err(err @ ModelError::Transient(_)) => assert_eq!(
            chain(&err),
            "transient provider failure: the response stream ended before the response was complete"
        ),
        other => panic!("expected Transient, got {other:?}"),
    }
}

#[tokio::test]
async fn non_streaming_call_uses_stream_false() {
    let server = Server::start(vec![Mock::status(
        200,
        json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-test",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": null,
                "message": {"role": "assistant", "content": "Checking.", "refusal": null,
                    "reasoning_content": "need k1",
                    "tool_calls": [{"id": "call_1", "type": "function",
                                    "function": {"name": "lookup", "arguments": "{\"key\":\"k1\"}"}}]}}],
            "usage": {"prompt_tokens": 80, "completion_tokens": 12, "total_tokens": 92,
                      "prompt_tokens_details": {"cached_tokens": 0}}
        })
        .to_string(),
    )])
    .await;
    let response = client(&server)
        .call(request_with_tool(vec![Msg::user("k1?")]))
        .await
        .unwrap();
    assert_eq!(response.message.text(), "Checking.");
    assert_eq!(
        tool_calls(&response.message),
        vec![("call_1".into(), "lookup".into(), json!({"key": "k1"}))]
    );
    assert_eq!(
        response.usage.map(|u| (u.input_tokens, u.output_tokens)),
        Some((80, 12))
    );
    let body = server.only_request().body;
    assert_eq!(body["stream"], false);
    assert!(body.get("stream_options").is_none());
}

#[tokio::test]
async fn an_unwatched_stream_asks_for_one_json_response() {
    let server = Server::start(vec![Mock::status(
        200,
        json!({
            "id": "c2", "object": "chat.completion",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "whole"}}]
        })
        .to_string(),
    )])
    .await;
    let request = harness_core::ChatRequest {
        stream: false,
        ..request_with_tool(vec![Msg::user("hi")])
    };
    let response = stream(&client(&server), request).await.unwrap();
    assert_eq!(response.message.text(), "whole");
    assert_eq!(server.only_request().body["stream"], false);
}

#[tokio::test]
async fn retrying_recovers_from_server_errors_and_early_cuts() {
    let server = Server::start(vec![
        Mock::status(
            503,
            r#"{"error":{"message":"The server is overloaded or not ready yet.","type":"server_error"}}"#,
        ),
        Mock::status(429, r#"{"error":{"message":"slow down","code":"rate_limit_exceeded"}}"#)
            .header("retry-after", "0"),
        Mock::sse_cut(&[]),
        Mock::sse(&[ev_role(), ev_text("ok"), ev_finish("stop"), ev_done()], 9),
        Mock::status(
            400,
            r#"{"error":{"message":"Invalid value for 'temperature'","type":"invalid_request_error"}}"#,
        ),
    ])
    .await;
    let model = Retrying::new(
        client(&server),
        RetryPolicy::default().base_delay(Duration::from_millis(1)),
    );
    let response = stream(&model, request_with_tool(vec![Msg::user("hi")])).await.unwrap();
    assert_eq!(response.message.text(), "ok");
    assert_eq!(server.requests().len(), 4);
    let invalid = stream(&model, request_with_tool(vec![Msg::user("hi")])).await;
    assert!(
        matches!(invalid, Err(ModelError::InvalidRequest { status: 400, .. })),
        "{invalid:?}"
    );
    assert_eq!(server.requests().len(), 5, "a 400 is never retried");
}

#[tokio::test]
async fn a_json_answer_to_a_stream_request_is_replayed_or_classified() {
    let server = Server::start(vec![
        Mock::status(
            200,
            r#"{"choices":[{"message":{"role":"assistant","content":"whole"},"finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":1}}"#,
        ),
        Mock::status(
            200,
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens","type":"invalid_request_error"}}"#,
        ),
    ])
    .await;
    let model = client(&server);
    let response = stream(&model, request_with_tool(vec![Msg::user("hi")])).await.unwrap();
    assert_eq!(
        (
            response.message.text(),
            response.finish_reason,
            response.usage.map(|u| u.input_tokens)
        ),
        ("whole".to_owned(), Some(FinishReason::Stop), Some(4))
    );
    let overflow = stream(&model, request_with_tool(vec![Msg::user("hi")])).await;
    assert!(
        matches!(overflow, Err(ModelError::ContextOverflow { .. })),
        "{overflow:?}"
    );
}

/// OpenAI's `length` and `content_filter`, streamed and in one JSON response, reach the
/// response and the assistant message.
#[tokio::test]
async fn length_and_content_filter_finish_reasons_are_kept() {
    for (wire, expected) in [
        ("length", FinishReason::Length),
        ("content_filter", FinishReason::ContentFilter),
    ] {
        let server = Server::start(vec![
            Mock::sse(&[ev_role(), ev_text("Partial"), ev_finish(wire), ev_done()], 1),
            Mock::status(
                200,
                json!({"choices": [{"index": 0, "finish_reason": wire,
                                    "message": {"role": "assistant", "content": "Partial"}}]})
                .to_string(),
            ),
        ])
        .await;
        let client = client(&server);
        let streamed = stream(&client, request_with_tool(vec![Msg::user("hi")])).await.unwrap();
        let whole = client.call(request_with_tool(vec![Msg::user("hi")])).await.unwrap();
        for response in [streamed, whole] {
            assert_eq!(response.finish_reason.as_ref(), Some(&expected), "{wire}");
            assert_eq!(response.message.finish_reason.as_ref(), Some(&expected), "{wire}");
            assert_eq!(response.message.text(), "Partial");
        }
    }
}

/// Known models report their context window; an override wins; unknown models have none.
#[test]
fn the_client_reports_the_context_window() {
    let client = |model: &str| OpenAiClient::new(OpenAiConfig::new(model, "http://127.0.0.1:1/v1")).unwrap();
    assert_eq!(client("gpt-4o").context_window(), Some(128_000));
    assert_eq!(client("my-local-model").context_window(), None);
    assert_eq!(
        client("my-local-model").with_context_window(32_000).context_window(),
        Some(32_000)
    );
    let retrying = Retrying::new(client("gpt-4.1"), RetryPolicy::default());
    assert_eq!(
        retrying.context_window(),
        Some(1_047_576),
        "the retry wrapper forwards it"
    );
    let shared: std::sync::Arc<dyn ChatModel> = std::sync::Arc::new(retrying);
    let overridden = harness_models::WithContextWindow::new(shared, 64_000);
    assert_eq!(overridden.context_window(), Some(64_000));
    assert_eq!(overridden.name(), "gpt-4.1");
}
