//! Unit tests of the anthropic module: request mapping and event decoding.

use super::*;
use harness_core::SystemPrompt;
use serde_json::json;
use std::sync::Arc;

fn body(request: &ChatRequest) -> Value {
    let client =
        AnthropicClient::new(AnthropicConfig::new("claude", "http://127.0.0.1:1")).unwrap_or_else(|e| panic!("{e}"));
    let bytes = client.request_body(request, true).unwrap_or_else(|e| panic!("{e}"));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{e}"))
}

fn call_msg(ids: &[&str]) -> Msg {
    let mut content = vec![Block::Thinking {
        thinking: "plan".into(),
        signature: Some("sig==".into()),
    }];
    content.extend(ids.iter().map(|id| Block::ToolUse {
        id: (*id).into(),
        name: "lookup".into(),
        input: json!({"key": id}),
    }));
    Msg::new(Role::Assistant, content)
}

#[test]
fn tool_results_merge_and_thinking_round_trips() {
    let mut system = SystemPrompt::new("persona");
    system.push_volatile("date", "today");
    let request = ChatRequest {
        system,
        messages: [
            Msg::user("go"),
            call_msg(&["a", "b"]),
            Msg::tool_result("a", vec![Block::text("ra")], false),
            Msg::tool_result("b", vec![], true),
            Msg::user("and?"),
            Msg::new(
                Role::Assistant,
                vec![
                    Block::Thinking {
                        thinking: "unsigned".into(),
                        signature: None,
                    },
                    Block::text("done"),
                ],
            ),
            Msg::user("thanks"),
        ]
        .into_iter()
        .map(Arc::new)
        .collect(),
        ..ChatRequest::default()
    };
    let got = body(&request);
    assert_eq!(
        got["system"],
        json!([
            {"type": "text", "text": "persona", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "today"},
        ])
    );
    assert_eq!(got["max_tokens"], json!(DEFAULT_MAX_TOKENS));
    assert_eq!(
        got["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "go"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "plan", "signature": "sig=="},
                {"type": "tool_use", "id": "a", "name": "lookup", "input": {"key": "a"}},
                {"type": "tool_use", "id": "b", "name": "lookup", "input": {"key": "b"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": [{"type": "text", "text": "ra"}]},
                {"type": "tool_result", "tool_use_id": "b", "is_error": true},
                {"type": "text", "text": "and?"},
            ]},
            {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
            {"role": "user", "content": [
                {"type": "text", "text": "thanks", "cache_control": {"type": "ephemeral"}}
            ]},
        ])
    );
    assert!(got.get("tools").is_none());
}

#[test]
fn stream_events_decode() {
    let mut decoder = StreamDecoder::default();
    let mut out = VecDeque::new();
    for data in [
        r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude","usage":{"input_tokens":10,"cache_read_input_tokens":100,"cache_creation_input_tokens":5,"output_tokens":1}}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"SIG"}}"#,
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"lookup","input":{}}}"#,
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"key\":"}}"#,
        r#"{"type":"ping"}"#,
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"k1\"}"}}"#,
        r#"{"type":"content_block_stop","index":1}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":20}}"#,
        r#"{"type":"message_stop"}"#,
    ] {
        let done = decoder
            .event(
                &SseEvent {
                    event: String::new(),
                    data: data.into(),
                },
                &mut out,
            )
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(done, data.contains("message_stop"));
    }
    let mut acc = ResponseAccumulator::default();
    for chunk in &out {
        acc.push(chunk);
    }
    let response = acc.finish();
    assert_eq!(
        response.usage,
        Some(Usage {
            input_tokens: 115,
            output_tokens: 20,
            cache_read_tokens: 100,
            cache_write_tokens: 5
        })
    );
    assert_eq!(response.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        response.message.content,
        vec![
            Block::Thinking {
                thinking: "hm".into(),
                signature: Some("SIG".into())
            },
            Block::ToolUse {
                id: "toolu_1".into(),
                name: "lookup".into(),
                input: json!({"key": "k1"})
            },
        ]
    );
}

#[test]
fn non_streaming_response_decodes() {
    let response = decode_response(
        br#"{"id":"msg_1","type":"message","role":"assistant","model":"claude","content":[{"type":"text","text":"Hi"},{"type":"tool_use","id":"toolu_1","name":"lookup","input":{"key":"k1"}}],"stop_reason":"tool_use","usage":{"input_tokens":3,"output_tokens":4}}"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(response.message.text(), "Hi");
    assert_eq!(
        response
            .message
            .tool_calls()
            .map(|c| c.input.clone())
            .collect::<Vec<_>>(),
        [json!({"key": "k1"})]
    );
}

#[test]
fn thinking_signed_by_gemini_is_not_replayed() {
    let request = ChatRequest {
        messages: [
            Msg::user("go"),
            Msg::new(
                Role::Assistant,
                vec![
                    Block::Thinking {
                        thinking: "plan".into(),
                        signature: Some(format!("{}c2ln", crate::gemini::SIGNATURE_PREFIX)),
                    },
                    Block::text("done"),
                ],
            ),
            Msg::user("thanks"),
        ]
        .into_iter()
        .map(Arc::new)
        .collect(),
        ..ChatRequest::default()
    };
    let got = body(&request);
    assert_eq!(
        got["messages"][1],
        json!({"role": "assistant", "content": [{"type": "text", "text": "done"}]})
    );
}
