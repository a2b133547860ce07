//! Structured output on the wire, per provider: what each client sends for
//! `ChatRequest::response_format` (OpenAI `response_format`, Gemini `responseMimeType` +
//! `responseJsonSchema`) and for one forced tool (Anthropic `tool_choice` by name), and the
//! GLM preset reaching its own endpoint with its own key.

use crate::server::{Mock, Server};
use harness_core::{ChatModel, ChatRequest, Msg, ResponseFormat, ToolChoice, ToolSpec};
use harness_models::{
    AnthropicClient, AnthropicConfig, GeminiClient, GeminiConfig, ModelSpec, OpenAiClient, OpenAiConfig, Secret,
};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;

fn openai_answer() -> Mock {
    Mock::status(
        200,
        json!({
            "id": "c1", "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "{\"n\": 1}"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2}
        })
        .to_string(),
    )
}

fn schema_format() -> ResponseFormat {
    ResponseFormat::JsonSchema {
        name: "answer".into(),
        schema: json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
        strict: true,
    }
}

fn request(format: Option<ResponseFormat>) -> ChatRequest {
    ChatRequest {
        messages: vec![Arc::new(Msg::user("n?"))],
        response_format: format,
        ..ChatRequest::default()
    }
}

#[tokio::test]
async fn openai_gets_response_format_json_schema_or_json_object() {
    let server = Server::start(vec![openai_answer(), openai_answer(), openai_answer()]).await;
    let client =
        OpenAiClient::new(OpenAiConfig::new("gpt-test", format!("{}/v1", server.base)).api_key(Secret::new("sk")))
            .unwrap();
    assert!(client.native_response_format());
    for format in [Some(schema_format()), Some(ResponseFormat::JsonObject), None] {
        let response = client.call(request(format)).await.unwrap();
        assert_eq!(response.message.text(), "{\"n\": 1}");
    }
    let bodies: Vec<serde_json::Value> = server.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(
        bodies[0]["response_format"],
        json!({"type": "json_schema", "json_schema": {
            "name": "answer",
            "schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
            "strict": true
        }})
    );
    assert_eq!(bodies[1]["response_format"], json!({"type": "json_object"}));
    assert!(bodies[2].get("response_format").is_none());
}

#[tokio::test]
async fn gemini_gets_a_response_mime_type_and_schema_in_generation_config() {
    let answer = Mock::status(
        200,
        json!({
            "candidates": [{"content": {"role": "model", "parts": [{"text": "{\"n\": 1}"}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2}
        })
        .to_string(),
    );
    let server = Server::start(vec![answer.clone(), answer]).await;
    let client = GeminiClient::new(
        GeminiConfig::new("gemini-2.5-flash", format!("{}/v1beta", server.base)).api_key(Secret::new("AIza")),
    )
    .unwrap();
    assert!(client.native_response_format());
    let mut structured = request(Some(schema_format()));
    structured.max_tokens = Some(100);
    client.call(structured).await.unwrap();
    client.call(request(Some(ResponseFormat::JsonObject))).await.unwrap();
    let bodies: Vec<serde_json::Value> = server.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(
        bodies[0]["generationConfig"],
        json!({
            "maxOutputTokens": 100,
            "responseMimeType": "application/json",
            "responseJsonSchema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
        })
    );
    assert_eq!(
        bodies[1]["generationConfig"],
        json!({"responseMimeType": "application/json"})
    );
}

#[tokio::test]
async fn anthropic_forces_a_single_required_tool_by_name() {
    let answer = Mock::status(
        200,
        json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "generate_response", "input": {"n": 1}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 5, "output_tokens": 2}
        })
        .to_string(),
    );
    let server = Server::start(vec![answer.clone(), answer]).await;
    let client =
        AnthropicClient::new(AnthropicConfig::new("claude-test", &server.base).api_key(Secret::new("sk-ant"))).unwrap();
    assert!(
        !client.native_response_format(),
        "structured output goes through a forced tool"
    );
    let tool = ToolSpec::new("generate_response", "answer", json!({"type": "object"}));
    let forced = ChatRequest {
        tools: Arc::from(vec![tool.clone()]),
        tool_choice: ToolChoice::Required,
        ..request(None)
    };
    let response = client.call(forced).await.unwrap();
    assert_eq!(
        response
            .message
            .tool_calls()
            .next()
            .map(|c| c.name.to_owned())
            .as_deref(),
        Some("generate_response")
    );
    let any = ChatRequest {
        tools: Arc::from(vec![tool, crate::lookup_tool()]),
        tool_choice: ToolChoice::Required,
        ..request(None)
    };
    client.call(any).await.unwrap();
    let bodies: Vec<serde_json::Value> = server.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(
        bodies[0]["tool_choice"],
        json!({"type": "tool", "name": "generate_response"})
    );
    assert_eq!(bodies[1]["tool_choice"], json!({"type": "any"}));
}

#[tokio::test]
async fn the_glm_preset_reaches_its_base_with_its_own_key() {
    let server = Server::start(vec![openai_answer()]).await;
    let env: HashMap<&str, String> = [
        ("ZHIPUAI_API_KEY", "zhipu-key".to_owned()),
        ("OPENAI_API_KEY", "sk-not-for-glm".to_owned()),
        ("GLM_BASE_URL", format!("{}/api/paas/v4", server.base)),
    ]
    .into_iter()
    .collect();
    let model = ModelSpec::parse("glm:glm-4.6")
        .unwrap()
        .build(&|key| env.get(key).cloned())
        .unwrap();
    let response = model.call(request(None)).await.unwrap();
    assert_eq!(response.message.text(), "{\"n\": 1}");
    let recorded = server.only_request();
    assert_eq!(recorded.path, "/api/paas/v4/chat/completions");
    assert_eq!(recorded.headers["authorization"], "Bearer zhipu-key");
    assert_eq!(recorded.body["model"], "glm-4.6");
    // GLM speaks OpenAI's dialect: `max_tokens`, and the native response format.
    assert!(model.native_response_format());
}
