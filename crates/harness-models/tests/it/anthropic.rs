//! The Anthropic client against recorded-style Messages streams.

use crate::server::{Mock, Server};
use crate::{request_with_tool, stream};
use harness_core::{Block, ChatModel, FinishReason, ModelError, Msg, Role, SystemPrompt, ToolChoice, Usage};
use harness_models::{ANTHROPIC_VERSION, AnthropicClient, AnthropicConfig, Secret, WireError};
use serde_json::{Value, json};
use std::time::Duration;

// ---- ev_* builders: one named event of a Messages stream each. ----

fn ev(name: &str, data: Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

fn ev_message_start(input: u64, cache_read: u64, cache_write: u64) -> String {
    ev(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": "msg_01", "type": "message", "role": "assistant", "content": [], "model": "claude-test",
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input, "cache_creation_input_tokens": cache_write,
                      "cache_read_input_tokens": cache_read, "output_tokens": 1, "service_tier": "standard"}}}),
    )
}

fn ev_block_start(index: usize, block: Value) -> String {
    ev(
        "content_block_start",
        json!({"type": "content_block_start", "index": index, "content_block": block}),
    )
}

fn ev_delta(index: usize, delta: Value) -> String {
    ev(
        "content_block_delta",
        json!({"type": "content_block_delta", "index": index, "delta": delta}),
    )
}

fn ev_thinking_start(index: usize) -> String {
    ev_block_start(index, json!({"type": "thinking", "thinking": "", "signature": ""}))
}

fn ev_thinking(index: usize, text: &str) -> String {
    ev_delta(index, json!({"type": "thinking_delta", "thinking": text}))
}

fn ev_signature(index: usize, signature: &str) -> String {
    ev_delta(index, json!({"type": "signature_delta", "signature": signature}))
}

fn ev_text_start(index: usize) -> String {
    ev_block_start(index, json!({"type": "text", "text": ""}))
}

fn ev_text(index: usize, text: &str) -> String {
    ev_delta(index, json!({"type": "text_delta", "text": text}))
}

fn ev_tool_start(index: usize, id: &str, name: &str) -> String {
    ev_block_start(index, json!({"type": "tool_use", "id": id, "name": name, "input": {}}))
}

fn ev_input_json(index: usize, partial: &str) -> String {
    ev_delta(index, json!({"type": "input_json_delta", "partial_json": partial}))
}

fn ev_block_stop(index: usize) -> String {
    ev(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": index}),
    )
}

fn ev_message_delta(stop_reason: &str, output: u64) -> String {
    ev(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null},
               "usage": {"output_tokens": output}}),
    )
}

fn ev_message_stop() -> String {
    ev("message_stop", json!({"type": "message_stop"}))
}

fn ev_ping() -> String {
    ev("ping", json!({"type": "ping"}))
}

fn ev_error(kind: &str, message: &str) -> String {
    ev(
        "error",
        json!({"type": "error", "error": {"type": kind, "message": message}}),
    )
}

fn client(server: &Server) -> AnthropicClient {
    AnthropicClient::new(AnthropicConfig::new("claude-test", &server.base).api_key(Secret::new("sk-ant-test"))).unwrap()
}

#[tokio::test]
async fn streams_signed_thinking_text_and_parallel_tool_calls() {
    let server = Server::start(vec![Mock::sse(
        &[
            ev_message_start(20, 1800, 0),
            ev_thinking_start(0),
            ev_thinking(0, "Two keys; "),
            ev_ping(),
            ev_thinking(0, "call both."),
            ev_signature(0, "EqQBCkYIARgCKkD=="),
            ev_block_stop(0),
            ev_text_start(1),
            ev_text(1, "Looking up "),
            ev_text(1, "both."),
            ev_block_stop(1),
            ev_tool_start(2, "toolu_a", "lookup"),
            ev_input_json(2, ""),
            ev_input_json(2, "{\"key\": \"k"),
            ev_input_json(2, "1\"}"),
            ev_block_stop(2),
            ev_tool_start(3, "toolu_b", "lookup"),
            ev_input_json(3, "{\"key\": \"k2\"}"),
            ev_block_stop(3),
            ev_message_delta("tool_use", 77),
            ev_message_stop(),
        ],
        13,
    )])
    .await;
    let response = stream(&client(&server), request_with_tool(vec![Msg::user("k1 and k2")]))
        .await
        .unwrap();
    assert_eq!(
        response.message.content,
        vec![
            Block::Thinking {
                thinking: "Two keys; call both.".into(),
                signature: Some("EqQBCkYIARgCKkD==".into())
            },
            Block::text("Looking up both."),
            Block::ToolUse {
                id: "toolu_a".into(),
                name: "lookup".into(),
                input: json!({"key": "k1"})
            },
            Block::ToolUse {
                id: "toolu_b".into(),
                name: "lookup".into(),
                input: json!({"key": "k2"})
            },
        ]
    );
    assert_eq!(response.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        response.usage,
        Some(Usage {
            input_tokens: 1820,
            output_tokens: 77,
            cache_read_tokens: 1800,
            cache_write_tokens: 0
        })
    );
    let request = server.only_request();
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.headers["x-api-key"], "sk-ant-test");
    assert_eq!(request.headers["anthropic-version"], ANTHROPIC_VERSION);
    assert_eq!(request.body["stream"], true);
    assert_eq!(request.body["max_tokens"], 4096);
    assert_eq!(
        request.body["tools"],
        json!([{"name": "lookup",
                "description": "Look up the record stored under a key and return it verbatim.",
                "input_schema": {"type": "object",
                                 "properties": {"key": {"type": "string", "description": "The key to look up, e.g. k1."}},
                                 "required": ["key"]}}])
    );
    assert_eq!(request.body["tool_choice"], json!({"type": "auto"}));
}

#[tokio::test]
async fn the_request_round_trips_thinking_merges_results_and_places_cache_breakpoints() {
    let server = Server::start(vec![Mock::sse(
        &[
            ev_message_start(5, 0, 900),
            ev_text_start(0),
            ev_text(0, "k1 is v1, k2 is v2."),
            ev_block_stop(0),
            ev_message_delta("end_turn", 9),
            ev_message_stop(),
        ],
        4096,
    )])
    .await;
    let mut system = SystemPrompt::new("You are terse.");
    system.push_stable("persona", "You work for ACME.");
    system.push_volatile("date", "Today is 2026-11-29.");
    let assistant = Msg::new(
        Role::Assistant,
        vec![
            Block::Thinking {
                thinking: "Two keys.".into(),
                signature: Some("SIG-1".into()),
            },
            Block::ToolUse {
                id: "toolu_a".into(),
                name: "lookup".into(),
                input: json!({"key": "k1"}),
            },
            Block::ToolUse {
                id: "toolu_b".into(),
                name: "lookup".into(),
                input: json!({"key": "k2"}),
            },
        ],
    );
    let mut request = request_with_tool(vec![
        Msg::user("k1 and k2"),
        assistant,
        Msg::tool_result("toolu_a", vec![Block::text("v1")], false),
        Msg::tool_result("toolu_b", vec![Block::text("no such key")], true),
    ]);
    request.system = system;
    request.tool_choice = ToolChoice::Required;
    request.max_tokens = Some(1000);
    let response = stream(&client(&server), request).await.unwrap();
    assert_eq!(response.message.text(), "k1 is v1, k2 is v2.");
    assert_eq!(
        response.usage.map(|u| (u.input_tokens, u.cache_write_tokens)),
        Some((905, 900))
    );

    let body = server.only_request().body;
    assert_eq!(
        body["system"],
        json!([
            {"type": "text", "text": "You are terse.\n\nYou work for ACME.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Today is 2026-11-29."},
        ])
    );
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "k1 and k2"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Two keys.", "signature": "SIG-1"},
                {"type": "tool_use", "id": "toolu_a", "name": "lookup", "input": {"key": "k1"}},
                {"type": "tool_use", "id": "toolu_b", "name": "lookup", "input": {"key": "k2"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": [{"type": "text", "text": "v1"}]},
                {"type": "tool_result", "tool_use_id": "toolu_b", "content": [{"type": "text", "text": "no such key"}],
                 "is_error": true, "cache_control": {"type": "ephemeral"}},
            ]},
        ])
    );
    // `Required` with a single tool forces that tool by name (what structured output's
    // `generate_response` relies on); with several it is `any`.
    assert_eq!(body["tool_choice"], json!({"type": "tool", "name": "lookup"}));
    assert_eq!(body["max_tokens"], 1000);
}

#[tokio::test]
async fn error_statuses_and_error_events_are_classified() {
    let server = Server::start(vec![
        Mock::status(
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"},"request_id":"req_1"}"#,
        ),
        Mock::status(
            429,
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization of 50,000 input tokens per minute."}}"#,
        )
        .header("retry-after", "12"),
        Mock::status(
            401,
            r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
        ),
        Mock::status(529, r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#),
        Mock::sse(
            &[ev_message_start(5, 0, 0), ev_text_start(0), ev_text(0, "Hi"), ev_error("overloaded_error", "Overloaded")],
            4096,
        ),
    ])
    .await;
    let model = client(&server);
    let request = || request_with_tool(vec![Msg::user("hi")]);
    let overflow = stream(&model, request()).await;
    assert!(
        matches!(&overflow, Err(ModelError::ContextOverflow { message }) if message == "prompt is too long: 208310 tokens > 200000 maximum"),
        "{overflow:?}"
    );
    let limited = stream(&model, request()).await;
    assert!(
        matches!(limited, Err(ModelError::RateLimited { retry_after: Some(wait) }) if wait == Duration::from_secs(12))
    );
    let auth = model.call(request()).await;
    assert!(
        matches!(&auth, Err(ModelError::Auth { status: 401, message }) if message == "invalid x-api-key"),
        "{auth:?}"
    );
    let overloaded = stream(&model, request()).await;
    assert!(
        matches!(overloaded, Err(ModelError::RateLimited { retry_after: None })),
        "{overloaded:?}"
    );
    let mid_stream = stream(&model, request()).await;
    assert!(
        matches!(mid_stream, Err(ModelError::RateLimited { .. })),
        "{mid_stream:?}"
    );
}

#[tokio::test]
async fn malformed_events_and_dropped_connections() {
    let server = Server::start(vec![
        Mock::sse(
            &[ev_message_start(5, 0, 0), "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\"\n\n".to_owned()],
            4096,
        ),
        Mock::sse_cut(&[ev_message_start(5, 0, 0), ev_text_start(0), ev_text(0, "Hel")]),
        Mock::sse(&[ev_message_start(5, 0, 0), ev_text_start(0), ev_text(0, "Hel")], 4096),
    ])
    .await;
    let model = client(&server);
    let request = || request_with_tool(vec![Msg::user("hi")]);
    let malformed = stream(&model, request()).await;
    match malformed {
        Err(ModelError::Malformed { detail }) => {
            assert!(
                detail.starts_with("a stream event is not valid JSON (EOF while parsing"),
                "{detail}"
            );
            assert!(detail.ends_with(r#""content_block":{"type":"text""#), "{detail}");
        }
        other => panic!("expected Malformed, got {other:?}"),
    }
    let cut = stream(&model, request()).await;
    match cut {
        Err(ModelError::Transient(source)) => {
            assert!(
                matches!(source.downcast_ref::<WireError>(), Some(WireError::StreamCut(_))),
                "{source}"
            );
        }
        other => panic!("expected Transient, got {other:?}"),
    }
    let ended = stream(&model, request()).await;
    match ended {
        Err(ModelError::Transient(source)) => {
            assert!(
                matches!(source.downcast_ref::<WireError>(), Some(WireError::Incomplete)),
                "{source}"
            );
        }
        other => panic!("expected Transient, got {other:?}"),
    }
}

#[tokio::test]
async fn non_streaming_call() {
    let server = Server::start(vec![Mock::status(
        200,
        json!({
            "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [
                {"type": "thinking", "thinking": "Easy.", "signature": "SIG-2"},
                {"type": "text", "text": "Calling."},
                {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"key": "k1"}},
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
            ],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 10, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 30, "output_tokens": 6}
        })
        .to_string(),
    )])
    .await;
    let response = client(&server)
        .call(request_with_tool(vec![Msg::user("k1")]))
        .await
        .unwrap();
    assert_eq!(
        response.message.content,
        vec![
            Block::Thinking {
                thinking: "Easy.".into(),
                signature: Some("SIG-2".into())
            },
            Block::text("Calling."),
            Block::ToolUse {
                id: "toolu_1".into(),
                name: "lookup".into(),
                input: json!({"key": "k1"})
            },
        ]
    );
    assert_eq!(
        response.usage,
        Some(Usage {
            input_tokens: 40,
            output_tokens: 6,
            cache_read_tokens: 30,
            cache_write_tokens: 0
        })
    );
    assert_eq!(server.only_request().body["stream"], false);
}

/// Anthropic's `max_tokens` (a length cut) and `refusal` (a content filter), streamed and in
/// one JSON response, reach the response and the assistant message.
#[tokio::test]
async fn max_tokens_and_refusal_stop_reasons_are_kept() {
    for (wire, expected) in [
        ("max_tokens", FinishReason::Length),
        ("refusal", FinishReason::ContentFilter),
    ] {
        let server = Server::start(vec![
            Mock::sse(
                &[
                    ev_message_start(5, 0, 0),
                    ev_text_start(0),
                    ev_text(0, "Partial"),
                    ev_block_stop(0),
                    ev_message_delta(wire, 3),
                    ev_message_stop(),
                ],
                1,
            ),
            Mock::status(
                200,
                json!({
                    "id": "msg_02", "type": "message", "role": "assistant", "model": "claude-test",
                    "content": [{"type": "text", "text": "Partial"}],
                    "stop_reason": wire, "stop_sequence": null,
                    "usage": {"input_tokens": 5, "output_tokens": 3}
                })
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

/// Every Claude model has a 200k window in the table unless overridden.
#[test]
fn the_client_reports_the_context_window() {
    let client = |model: &str| AnthropicClient::new(AnthropicConfig::new(model, "http://127.0.0.1:1")).unwrap();
    assert_eq!(client("claude-sonnet-4-5").context_window(), Some(200_000));
    assert_eq!(
        client("claude-sonnet-4-5")
            .with_context_window(1_000_000)
            .context_window(),
        Some(1_000_000)
    );
}
