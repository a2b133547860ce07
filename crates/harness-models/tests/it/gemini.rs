//! The Gemini client against an in-process fake speaking the documented wire shapes of
//! `generateContent` / `streamGenerateContent?alt=sse`: request bodies, stream chunks (each a
//! whole `GenerateContentResponse`), and `google.rpc.Status` error bodies.

use crate::server::{Mock, Server};
use crate::{request_with_tool, stream};
use harness_core::{Block, ChatModel, ChatRequest, FinishReason, ModelError, Msg, Usage};
use harness_models::{GeminiClient, GeminiConfig, ModelSpec, SYNTHETIC_ID_PREFIX, Secret, WireError};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::Duration;

/// One SSE event of a Gemini stream (the API ends events with CRLF pairs).
fn chunk(response: Value) -> String {
    format!("data: {response}\r\n\r\n")
}

fn parts(parts: Value) -> Value {
    json!({"candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}],
           "modelVersion": "gemini-test", "responseId": "r1"})
}

fn finish(reason: &str, usage: Value) -> Value {
    json!({"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": reason, "index": 0}],
           "usageMetadata": usage, "modelVersion": "gemini-test"})
}

fn client(server: &Server) -> GeminiClient {
    let mut config =
        GeminiConfig::new("gemini-test", format!("{}/v1beta", server.base)).api_key(Secret::new("AIza-test"));
    config.include_thoughts = true;
    GeminiClient::new(config).unwrap()
}

fn answer(text: &str) -> Mock {
    Mock::sse(
        &[
            chunk(parts(json!([{"text": text}]))),
            chunk(finish(
                "STOP",
                json!({"promptTokenCount": 80, "candidatesTokenCount": 4}),
            )),
        ],
        64,
    )
}

#[tokio::test]
async fn streams_a_parallel_tool_round_trip_with_thought_signatures() {
    let server = Server::start(vec![
        Mock::sse(
            &[
                chunk(parts(json!([{"text": "Two keys; call both.", "thought": true}]))),
                chunk(parts(json!([{"text": "Looking up "}]))),
                chunk(parts(json!([{"text": "both."}]))),
                chunk(parts(json!([
                    {"functionCall": {"name": "lookup", "args": {"key": "k1"}}, "thoughtSignature": "c2lnLTE="},
                    {"functionCall": {"id": "fc_b", "name": "lookup", "args": {"key": "k2"}}}
                ]))),
                chunk(finish(
                    "STOP",
                    json!({"promptTokenCount": 1500, "candidatesTokenCount": 30, "thoughtsTokenCount": 12,
                           "cachedContentTokenCount": 1024, "totalTokenCount": 1542}),
                )),
            ],
            17,
        ),
        answer("k1 is v1, k2 is v2."),
    ])
    .await;
    let model = client(&server);
    let response = stream(&model, request_with_tool(vec![Msg::user("k1 and k2")]))
        .await
        .unwrap();
    let content = &response.message.content;
    assert_eq!(
        content[0],
        Block::Thinking {
            thinking: "Two keys; call both.".into(),
            signature: Some("gemini:c2lnLTE=".into())
        }
    );
    assert_eq!(content[1], Block::text("Looking up both."));
    let calls: Vec<(String, Value)> = response
        .message
        .tool_calls()
        .map(|c| (c.id.to_owned(), c.input.clone()))
        .collect();
    assert_eq!(calls.len(), 2);
    assert!(calls[0].0.starts_with(SYNTHETIC_ID_PREFIX), "{calls:?}");
    assert_eq!(calls[0].1, json!({"key": "k1"}));
    assert_eq!(calls[1], ("fc_b".to_owned(), json!({"key": "k2"})));
    assert_eq!(response.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        response.usage,
        Some(Usage {
            input_tokens: 1500,
            output_tokens: 42,
            cache_read_tokens: 1024,
            cache_write_tokens: 0
        })
    );

    // The request: streaming endpoint, key header, system instruction, JSON-schema tools.
    let first = &server.requests()[0];
    assert_eq!(first.path, "/v1beta/models/gemini-test:streamGenerateContent");
    assert_eq!(first.query, "alt=sse");
    assert_eq!(first.headers["x-goog-api-key"], "AIza-test");
    assert_eq!(
        first.body["systemInstruction"],
        json!({"parts": [{"text": "You are terse."}]})
    );
    assert_eq!(
        first.body["contents"],
        json!([{"role": "user", "parts": [{"text": "k1 and k2"}]}])
    );
    assert_eq!(first.body["tools"][0]["functionDeclarations"][0]["name"], "lookup");
    assert_eq!(
        first.body["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"]["required"],
        json!(["key"])
    );
    assert_eq!(
        first.body["toolConfig"],
        json!({"functionCallingConfig": {"mode": "AUTO"}})
    );
    assert_eq!(
        first.body["generationConfig"],
        json!({"thinkingConfig": {"includeThoughts": true}})
    );

    // The round trip: the signature goes back on the first call, the made-up id does not,
    // results are functionResponse parts named after their calls.
    let (id_a, id_b) = (calls[0].0.clone(), calls[1].0.clone());
    let history = vec![
        Msg::user("k1 and k2"),
        response.message,
        Msg::tool_result(id_a, vec![Block::text("v1")], false),
        Msg::tool_result(id_b, vec![Block::text("no such key")], true),
    ];
    let done = stream(&model, request_with_tool(history)).await.unwrap();
    assert_eq!(done.message.text(), "k1 is v1, k2 is v2.");
    assert_eq!(done.finish_reason, Some(FinishReason::Stop));
    let second = &server.requests()[1];
    assert_eq!(
        second.body["contents"],
        json!([
            {"role": "user", "parts": [{"text": "k1 and k2"}]},
            {"role": "model", "parts": [
                {"text": "Looking up both."},
                {"functionCall": {"name": "lookup", "args": {"key": "k1"}}, "thoughtSignature": "c2lnLTE="},
                {"functionCall": {"id": "fc_b", "name": "lookup", "args": {"key": "k2"}}},
            ]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "lookup", "response": {"output": "v1"}}},
                {"functionResponse": {"id": "fc_b", "name": "lookup", "response": {"error": "no such key"}}},
            ]},
        ])
    );
}

#[tokio::test]
async fn a_tool_round_trip_without_streaming_uses_generate_content() {
    let call = json!({
        "candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"id": "fc_1", "name": "lookup", "args": {"key": "k1"}}, "thoughtSignature": "U0lH"}
        ]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 60, "candidatesTokenCount": 7, "totalTokenCount": 67}
    });
    let text = json!({
        "candidates": [{"content": {"role": "model", "parts": [{"text": "v1"}]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 90, "candidatesTokenCount": 1, "totalTokenCount": 91}
    });
    let server = Server::start(vec![
        Mock::status(200, call.to_string()),
        Mock::status(200, text.to_string()),
    ])
    .await;
    let model = client(&server);
    let mut request = request_with_tool(vec![Msg::user("k1?")]);
    request.stream = false;
    request.max_tokens = Some(256);
    // Structured output passes through `extra`: merged into generationConfig, cap kept.
    request.extra.insert(
        "generationConfig".into(),
        json!({"responseMimeType": "application/json", "responseJsonSchema": {"type": "object"}}),
    );
    // `stream` with nobody watching takes the non-streaming endpoint too.
    let first = stream(&model, request.clone()).await.unwrap();
    assert_eq!(first.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        first.message.tool_calls().map(|c| c.id.to_owned()).collect::<Vec<_>>(),
        ["fc_1"]
    );
    let recorded = &server.requests()[0];
    assert_eq!(recorded.path, "/v1beta/models/gemini-test:generateContent");
    assert_eq!(recorded.query, "");
    assert_eq!(
        recorded.body["generationConfig"],
        json!({"maxOutputTokens": 256, "thinkingConfig": {"includeThoughts": true},
               "responseMimeType": "application/json", "responseJsonSchema": {"type": "object"}})
    );

    request.messages = vec![
        Msg::user("k1?"),
        first.message,
        Msg::tool_result("fc_1", vec![Block::text("v1")], false),
    ]
    .into_iter()
    .map(std::sync::Arc::new)
    .collect();
    let second = model.call(request).await.unwrap();
    assert_eq!(second.message.text(), "v1");
    assert_eq!(second.usage.map(|u| u.input_tokens), Some(90));
    let recorded = &server.requests()[1];
    assert_eq!(recorded.path, "/v1beta/models/gemini-test:generateContent");
    assert_eq!(
        recorded.body["contents"][1],
        json!({"role": "model", "parts": [
            {"functionCall": {"id": "fc_1", "name": "lookup", "args": {"key": "k1"}}, "thoughtSignature": "U0lH"}
        ]})
    );
    assert_eq!(
        recorded.body["contents"][2],
        json!({"role": "user", "parts": [
            {"functionResponse": {"id": "fc_1", "name": "lookup", "response": {"output": "v1"}}}
        ]})
    );
}

#[tokio::test]
async fn overflow_and_rate_limits_are_classified() {
    let overflow = json!({"error": {"code": 400, "status": "INVALID_ARGUMENT",
        "message": "The input token count (1239813) exceeds the maximum number of tokens allowed (1048576)."}});
    let limited = json!({"error": {"code": 429, "status": "RESOURCE_EXHAUSTED",
        "message": "You exceeded your current quota, please check your plan and billing details.",
        "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"}]}});
    let auth = json!({"error": {"code": 400, "status": "INVALID_ARGUMENT",
        "message": "API key not valid. Please pass a valid API key.",
        "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}]}});
    let server = Server::start(vec![
        Mock::status(400, overflow.to_string()),
        Mock::status(429, limited.to_string()),
        // A mid-stream error chunk.
        Mock::sse(
            &[
                chunk(parts(json!([{"text": "partial"}]))),
                chunk(json!({"error": {"code": 503, "status": "UNAVAILABLE", "message": "The model is overloaded."}})),
            ],
            1024,
        ),
        Mock::status(400, auth.to_string()),
    ])
    .await;
    let model = client(&server);
    let request = || request_with_tool(vec![Msg::user("hi")]);
    let err = stream(&model, request()).await.err();
    assert!(
        matches!(&err, Some(ModelError::ContextOverflow { message }) if message.contains("1048576")),
        "{err:?}"
    );
    let err = stream(&model, request()).await.err();
    assert!(
        matches!(err, Some(ModelError::RateLimited { retry_after: Some(wait) }) if wait == Duration::from_secs(37)),
        "{err:?}"
    );
    let err = stream(&model, request()).await.err();
    assert!(matches!(&err, Some(ModelError::Transient(_))), "{err:?}");
    assert!(
        err.map(|e| crate::chain(&e))
            .unwrap_or_default()
            .contains("The model is overloaded.")
    );
    // A bad key is a 400 on this API; its ErrorInfo reason makes it an auth failure.
    let err = stream(&model, request()).await.err();
    assert!(
        matches!(&err, Some(ModelError::Auth { status: 400, message }) if message.contains("API key not valid")),
        "{err:?}"
    );
}

#[tokio::test]
async fn safety_blocks_end_with_a_content_filter_finish() {
    let server = Server::start(vec![
        // The answer is stopped midway.
        Mock::sse(
            &[
                chunk(parts(json!([{"text": "Here is how"}]))),
                chunk(
                    json!({"candidates": [{"finishReason": "SAFETY", "index": 0, "safetyRatings": [
                    {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": true}]}],
                    "usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 3}}),
                ),
            ],
            1024,
        ),
        // The prompt itself is blocked: no candidate at all.
        Mock::sse(
            &[chunk(json!({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
                           "usageMetadata": {"promptTokenCount": 12, "totalTokenCount": 12}}))],
            1024,
        ),
    ])
    .await;
    let model = client(&server);
    let cut = stream(&model, request_with_tool(vec![Msg::user("how?")]))
        .await
        .unwrap();
    assert_eq!(cut.finish_reason, Some(FinishReason::ContentFilter));
    assert_eq!(cut.message.text(), "Here is how");
    let blocked = stream(&model, request_with_tool(vec![Msg::user("how?")]))
        .await
        .unwrap();
    assert_eq!(blocked.finish_reason, Some(FinishReason::ContentFilter));
    assert!(blocked.message.content.is_empty());
}

#[tokio::test]
async fn a_stream_that_ends_before_its_finish_is_incomplete() {
    let server = Server::start(vec![
        Mock::sse(&[chunk(parts(json!([{"text": "half"}])))], 1024),
        Mock::sse_cut(&[chunk(parts(json!([{"text": "half"}])))]),
    ])
    .await;
    let model = client(&server);
    let err = stream(&model, request_with_tool(vec![Msg::user("hi")])).await.err();
    assert!(
        matches!(&err, Some(ModelError::Transient(source))
            if matches!(source.downcast_ref::<WireError>(), Some(WireError::Incomplete))),
        "{err:?}"
    );
    let err = stream(&model, request_with_tool(vec![Msg::user("hi")])).await.err();
    assert!(matches!(&err, Some(ModelError::Transient(_))), "{err:?}");
}

#[tokio::test]
async fn the_gemini_spec_reads_its_key_and_base_variables() {
    let server = Server::start(vec![answer("hello")]).await;
    let env: HashMap<&str, String> = [
        ("GOOGLE_API_KEY", "AIza-google".to_owned()),
        ("GEMINI_BASE_URL", server.base.clone()),
    ]
    .into_iter()
    .collect();
    let model = ModelSpec::parse("gemini:models/gemini-2.5-flash")
        .unwrap()
        .build(&|key| env.get(key).cloned())
        .unwrap();
    assert_eq!(model.context_window(), Some(1_048_576));
    let request = ChatRequest {
        messages: vec![std::sync::Arc::new(Msg::user("hi"))],
        stream: true,
        ..ChatRequest::default()
    };
    let response = stream(model.as_ref(), request).await.unwrap();
    assert_eq!(response.message.text(), "hello");
    let recorded = server.only_request();
    // A base without a path gets the API version; `models/` is not doubled.
    assert_eq!(recorded.path, "/v1beta/models/gemini-2.5-flash:streamGenerateContent");
    assert_eq!(recorded.headers["x-goog-api-key"], "AIza-google");
    // No system prompt, no tools: neither field is sent.
    assert!(recorded.body.get("systemInstruction").is_none());
    assert!(recorded.body.get("tools").is_none());
}

#[tokio::test]
async fn an_untrusted_spec_sends_no_key_to_a_base_it_names() {
    let server = Server::start(vec![answer("hello"), answer("hello")]).await;
    let env: HashMap<&str, String> = [("GEMINI_API_KEY", "AIza-secret".to_owned())].into_iter().collect();
    let spec = format!("gemini:gemini-2.5-flash@{}/v1beta", server.base);
    let request = || ChatRequest {
        messages: vec![std::sync::Arc::new(Msg::user("hi"))],
        stream: true,
        ..ChatRequest::default()
    };
    let untrusted = ModelSpec::parse(&spec)
        .unwrap()
        .untrusted()
        .build(&|key| env.get(key).cloned())
        .unwrap();
    stream(untrusted.as_ref(), request()).await.unwrap();
    let operator = ModelSpec::parse(&spec)
        .unwrap()
        .build(&|key| env.get(key).cloned())
        .unwrap();
    stream(operator.as_ref(), request()).await.unwrap();
    let requests = server.requests();
    assert!(requests[0].headers.get("x-goog-api-key").is_none());
    assert_eq!(requests[1].headers["x-goog-api-key"], "AIza-secret");
}

/// Through the agent: a Gemini safety block ends the call with the typed content-filter error.
#[tokio::test]
async fn an_agent_reports_a_gemini_safety_block_as_content_filtered() {
    let blocked = || {
        Mock::sse(
            &[chunk(json!({"candidates": [{"finishReason": "SAFETY", "index": 0}],
                           "usageMetadata": {"promptTokenCount": 12}}))],
            1024,
        )
    };
    let server = Server::start(vec![blocked(), blocked()]).await;
    let agent = harness_core::ReActAgent::builder()
        .model(client(&server))
        .build()
        .unwrap();
    let ctx = harness_core::RuntimeContext::for_user(harness_core::UserId::from_static("u"))
        .with_session(harness_core::SessionId::from_static("gemini-safety"));
    let err = agent.call("how?", ctx).await.unwrap_err();
    assert!(
        matches!(&err, harness_core::AgentError::ContentFiltered { model } if model == "gemini-test"),
        "{err:?}"
    );
    assert_eq!(err.kind(), harness_core::ErrorKind::ContentFilter);
}
