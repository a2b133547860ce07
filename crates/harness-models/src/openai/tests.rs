//! Unit tests of the openai module: request mapping and event decoding.

use super::*;
use serde_json::json;

fn client(config: OpenAiConfig) -> OpenAiClient {
    OpenAiClient::new(config).unwrap_or_else(|e| panic!("{e}"))
}

fn body(request: &ChatRequest, stream: bool) -> Value {
    let client = client(OpenAiConfig::new("m", "http://127.0.0.1:1/v1"));
    let bytes = client.request_body(request, stream).unwrap_or_else(|e| panic!("{e}"));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{e}"))
}

fn request(messages: Vec<Msg>) -> ChatRequest {
    ChatRequest {
        messages: messages.into_iter().map(Arc::new).collect(),
        ..ChatRequest::default()
    }
}

fn decode(events: &[&str]) -> (Vec<ModelChunk>, Result<(), String>) {
    let mut decoder = StreamDecoder::default();
    let mut out = VecDeque::new();
    for data in events {
        let event = SseEvent {
            event: String::new(),
            data: (*data).to_owned(),
        };
        if let Err(err) = decoder.event(&event, &mut out) {
            return (out.into(), Err(err.to_string()));
        }
    }
    (out.into(), Ok(()))
}

#[test]
fn history_maps_to_chat_messages() {
    let mut assistant = Msg::new(
        Role::Assistant,
        vec![
            Block::Thinking {
                thinking: "hmm".into(),
                signature: None,
            },
            Block::text("checking"),
            Block::ToolUse {
                id: "c1".into(),
                name: "lookup".into(),
                input: json!({"key": "k1"}),
            },
            Block::ToolUse {
                id: "c2".into(),
                name: "lookup".into(),
                input: Value::String("{broken".into()),
            },
        ],
    );
    assistant.name = Some("ignored".into());
    let mut tools = Msg::tool_result("c1", vec![Block::text("v1")], false);
    tools.content.push(Block::ToolResult {
        tool_use_id: "c2".into(),
        content: vec![Block::text("a"), Block::text("b")],
        is_error: true,
    });
    let user = Msg::new(
        Role::User,
        vec![
            Block::text("see"),
            Block::Image {
                source: MediaSource::Base64 {
                    media_type: "image/png".into(),
                    data: "AAA".into(),
                },
            },
        ],
    );
    let mut req = request(vec![Msg::user("hi"), assistant, tools, user]);
    req.system = harness_core::SystemPrompt::new("be brief");
    let got = body(&req, false);
    assert_eq!(
        got["messages"],
        json!([
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "checking", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{\"key\":\"k1\"}"}},
                {"id": "c2", "type": "function", "function": {"name": "lookup", "arguments": "{broken"}},
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "v1"},
            {"role": "tool", "tool_call_id": "c2", "content": "a\nb"},
            {"role": "user", "content": [
                {"type": "text", "text": "see"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}},
            ]},
        ])
    );
    assert_eq!(got["stream"], json!(false));
    assert!(got.get("stream_options").is_none());
    assert!(got.get("tools").is_none() && got.get("tool_choice").is_none());
}

#[test]
fn tool_result_images_follow_as_one_user_message_of_image_parts() {
    let assistant = Msg::new(
        Role::Assistant,
        vec![
            Block::ToolUse {
                id: "c1".into(),
                name: "mcp__shots__take".into(),
                input: json!({}),
            },
            Block::ToolUse {
                id: "c2".into(),
                name: "plain".into(),
                input: json!({}),
            },
        ],
    );
    let png = Block::Image {
        source: MediaSource::Base64 {
            media_type: "image/png".into(),
            data: "iVBORw0KGgo=".into(),
        },
    };
    let mut tools = Msg::tool_result("c1", vec![Block::text("a screenshot"), png], false);
    tools.content.push(Block::ToolResult {
        tool_use_id: "c2".into(),
        content: vec![Block::text("ok")],
        is_error: false,
    });
    let got = body(&request(vec![Msg::user("shoot"), assistant, tools]), false);
    let messages = got["messages"].as_array().unwrap_or_else(|| panic!("{got}"));
    assert_eq!(
        messages[2],
        json!({"role": "tool", "tool_call_id": "c1", "content": "a screenshot\n[image 1: attached in the user message after the tool results]"})
    );
    assert_eq!(
        messages[3],
        json!({"role": "tool", "tool_call_id": "c2", "content": "ok"})
    );
    assert_eq!(
        messages[4],
        json!({"role": "user", "content": [
            {"type": "text", "text": "The 1 image(s) the tool results above returned, in order:"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        ]})
    );
    assert_eq!(messages.len(), 5);
    let text = got.to_string();
    assert_eq!(text.matches("iVBORw0KGgo=").count(), 1, "the data is sent once: {text}");
}

#[test]
fn reasoning_goes_back_only_when_configured() {
    let msg = Msg::new(
        Role::Assistant,
        vec![
            Block::Thinking {
                thinking: "why".into(),
                signature: None,
            },
            Block::ToolUse {
                id: "c1".into(),
                name: "t".into(),
                input: json!({}),
            },
        ],
    );
    let mut config = OpenAiConfig::new("m", "http://127.0.0.1:1/v1");
    config.reasoning_in_history = true;
    let bytes = client(config)
        .request_body(&request(vec![msg]), true)
        .unwrap_or_else(|e| panic!("{e}"));
    let got: Value = serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        got["messages"][0],
        json!({"role": "assistant", "content": null, "reasoning_content": "why", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}
        ]})
    );
}

#[test]
fn options_tools_and_extra_overrides() {
    let mut req = request(vec![Msg::user("x")]);
    req.tools = Arc::from(vec![ToolSpec {
        name: "lookup".into(),
        description: "Look up.".into(),
        input_schema: json!({"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}),
        annotations: harness_core::ToolAnnotations::new(),
    }]);
    req.tool_choice = ToolChoice::Required;
    req.max_tokens = Some(100);
    req.temperature = Some(0.5);
    req.extra.insert("enable_thinking".into(), json!(true));
    req.extra.insert("temperature".into(), json!(0));
    let got = body(&req, true);
    assert_eq!(got["stream_options"], json!({"include_usage": true}));
    assert_eq!(
        got["tools"],
        json!([{"type": "function", "function": {"name": "lookup", "description": "Look up.",
            "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}}])
    );
    assert_eq!(got["tool_choice"], json!("required"));
    assert_eq!(got["max_tokens"], json!(100));
    assert_eq!(got["enable_thinking"], json!(true));
    assert_eq!(got["temperature"], json!(0), "extra overrides, and no duplicate key");
    let raw = String::from_utf8(
        client(OpenAiConfig::new("m", "http://127.0.0.1:1/v1"))
            .request_body(&req, true)
            .unwrap_or_default(),
    )
    .unwrap_or_default();
    assert_eq!(raw.matches("\"temperature\"").count(), 1);
}

#[test]
fn deltas_decode_with_index_less_tool_calls_and_unknown_fields() {
    let (chunks, result) = decode(&[
        r#"{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning_content":"think"},"logprobs":null,"finish_reason":null}],"system_fingerprint":"fp","x_unknown":{"a":[1]}}"#,
        r#"{"choices":[{"delta":{"content":"Hi"}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"id":"call_a","type":"function","function":{"name":"lookup","arguments":"{\"key\":"}}]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"\"a\"}"}}]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"id":"call_b","function":{"name":"lookup","arguments":{"key":"b"}}}]}}]}"#,
        r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}],"usage":null}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":4}}}"#,
        "[DONE]",
    ]);
    assert_eq!(result, Ok(()));
    let call = |index, id: Option<&str>, name: Option<&str>, arguments: &str| ModelChunk::ToolCallDelta {
        index,
        id: id.map(str::to_owned),
        name: name.map(str::to_owned),
        arguments: arguments.into(),
    };
    assert_eq!(
        chunks,
        vec![
            ModelChunk::ThinkingDelta {
                text: "think".into(),
                signature: None
            },
            ModelChunk::TextDelta("Hi".into()),
            call(0, Some("call_a"), Some("lookup"), "{\"key\":"),
            call(0, None, None, "\"a\"}"),
            call(1, Some("call_b"), Some("lookup"), "{\"key\":\"b\"}"),
            ModelChunk::Finish(FinishReason::ToolCalls),
            ModelChunk::Usage(Usage {
                input_tokens: 10,
                output_tokens: 5,
                cache_read_tokens: 4,
                cache_write_tokens: 0
            }),
        ]
    );
}

#[test]
fn a_malformed_chunk_is_a_clear_error() {
    let (_, result) = decode(&[
        r#"{"choices":[{"delta":{"content":"Hi"}}]}"#,
        r#"{"choices":[{"delta":"#,
    ]);
    let err = result.err().unwrap_or_default();
    assert!(
        err.starts_with("malformed model response: a stream chunk is not valid JSON"),
        "{err}"
    );
    assert!(err.ends_with(r#"{"choices":[{"delta":"#), "{err}");
}

#[test]
fn non_streaming_response_decodes() {
    let response = decode_response(
        br#"{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":null,"reasoning_content":"r","tool_calls":[{"id":"call_1","type":"function","function":{"name":"lookup","arguments":"{\"key\":\"k1\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":7,"completion_tokens":3,"prompt_cache_hit_tokens":2}}"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(response.finish_reason, Some(FinishReason::ToolCalls));
    let calls: Vec<_> = response
        .message
        .tool_calls()
        .map(|c| (c.id.to_owned(), c.input.clone()))
        .collect();
    assert_eq!(calls, [("call_1".to_owned(), json!({"key": "k1"}))]);
    assert_eq!(
        response.usage,
        Some(Usage {
            input_tokens: 7,
            output_tokens: 3,
            cache_read_tokens: 2,
            cache_write_tokens: 0
        })
    );
    assert!(matches!(
        response.message.content.first(),
        Some(Block::Thinking { thinking, .. }) if thinking == "r"
    ));
}
