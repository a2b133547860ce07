//! The OpenAI-compatible API as clients use it: client tools (streamed and not, with and
//! without the session header), `response_format`, stateless histories, one choice per
//! chunk, the same content streamed and not, and what is refused.

use super::support::{Server, SseReader};
use harness_serve::ServeOptions;
use serde_json::{Value, json};

fn weather_tool() -> Value {
    json!([{"type": "function", "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }}])
}

async fn complete(server: &Server, body: Value) -> (u16, Option<String>, Value) {
    let response = server.post("/v1/chat/completions", body).await;
    let status = response.status().as_u16();
    let session = response
        .headers()
        .get("x-harness-session")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, session, response.json().await.unwrap())
}

/// The chunks of a streamed completion (without `[DONE]`, which must end it).
async fn chunks(server: &Server, body: Value) -> Vec<Value> {
    let response = server.post("/v1/chat/completions", body).await;
    assert_eq!(response.status(), 200);
    let events = SseReader::new(response).rest().await;
    assert_eq!(events.last().map(|e| e.data.as_str()), Some("[DONE]"));
    events[..events.len() - 1].iter().map(|e| e.json()).collect()
}

async fn sessions(server: &Server) -> Vec<String> {
    let body: Value = server.get("/api/agents/helper/sessions").await.json().await.unwrap();
    let list = body.get("sessions").unwrap_or(&body);
    list.as_array()
        .unwrap_or_else(|| panic!("{body}"))
        .iter()
        .map(|s| s["id"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn a_client_tool_call_ends_the_reply_and_its_result_resumes_the_turn_without_a_header() {
    let server = Server::start(ServeOptions::default()).await;
    let ask = json!({"role": "user", "content": "weather:Paris"});
    let (status, session, body) = complete(
        &server,
        json!({"model": "helper", "tools": weather_tool(), "messages": [ask]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let choice = &body["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{body}");
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "get_weather");
    let arguments: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, json!({"city": "Paris"}));
    assert_eq!(choice["message"]["content"], Value::Null);
    assert_eq!(body["harness"]["status"], "awaiting_tool_results");
    // The turn waits durably, like an approval.
    let session = session.unwrap();
    let state: Value = server
        .get(&format!("/api/agents/helper/sessions/{session}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(state["pending_approvals"][0]["tool"], "get_weather", "{state}");

    // What an SDK sends next: the whole history, the call echoed with extra null fields.
    let echoed = json!({"role": "assistant", "content": null, "refusal": null, "tool_calls": [{
        "id": call["id"], "type": "function",
        "function": {"name": "get_weather", "arguments": " {\"city\": \"Paris\"} "}}]});
    let result = json!({"role": "tool", "tool_call_id": call["id"], "content": "sunny, 21 C"});
    let (status, again, body) = complete(
        &server,
        json!({"model": "helper", "tools": weather_tool(), "messages": [ask, echoed, result]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(again.as_deref(), Some(session.as_str()), "the same session resumes");
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(
        content.starts_with("weather done:") && content.contains("sunny, 21 C"),
        "{content}"
    );
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(sessions(&server).await, vec![session.clone()]);
    let state: Value = server
        .get(&format!("/api/agents/helper/sessions/{session}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(state["pending_approvals"], json!([]), "{state}");
}

#[tokio::test]
async fn a_client_tool_turn_resumes_through_the_session_header_too() {
    let server = Server::start(ServeOptions::default()).await;
    let post = |messages: Value| {
        server
            .client
            .post(server.url("/v1/chat/completions"))
            .header("x-harness-session", "tools-1")
            .json(&json!({"model": "helper", "tools": weather_tool(), "messages": messages}))
            .send()
    };
    let body: Value = post(json!([{"role": "user", "content": "weather:Oslo"}]))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = body["choices"][0]["message"]["tool_calls"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Only the result is sent: the session's history is the context.
    let body: Value = post(json!([{"role": "tool", "tool_call_id": id, "content": "snow"}]))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(content.contains("snow"), "{body}");
}

#[tokio::test]
async fn a_streamed_client_tool_call_sends_tool_calls_and_every_chunk_has_one_choice() {
    let server = Server::start(ServeOptions::default()).await;
    let chunks = chunks(
        &server,
        json!({"model": "helper", "stream": true, "stream_options": {"include_usage": true},
               "tools": weather_tool(), "messages": [{"role": "user", "content": "weather:Rome"}]}),
    )
    .await;
    for chunk in &chunks {
        assert_eq!(chunk["choices"].as_array().map(Vec::len), Some(1), "{chunk}");
    }
    let calls: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"].get("tool_calls"))
        .collect();
    assert_eq!(calls.len(), 1, "{chunks:?}");
    assert_eq!(calls[0][0]["index"], 0);
    assert_eq!(calls[0][0]["function"]["name"], "get_weather");
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "tool_calls");
    assert!(
        last["usage"]["total_tokens"].is_u64(),
        "usage rides on the finish chunk: {last}"
    );
}

#[tokio::test]
async fn streamed_and_plain_replies_of_a_turn_carry_the_same_content() {
    let server = Server::start(ServeOptions::default()).await;
    let (_, _, body) = complete(
        &server,
        json!({"model": "helper", "messages": [{"role": "user", "content": "steps"}]}),
    )
    .await;
    let plain = body["choices"][0]["message"]["content"].as_str().unwrap().to_owned();
    assert_eq!(plain, "Let me look.\n\nFound it.");
    let chunks = chunks(
        &server,
        json!({"model": "helper", "stream": true, "messages": [{"role": "user", "content": "steps"}]}),
    )
    .await;
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(streamed, plain);
}

#[tokio::test]
async fn a_stateless_three_turn_chat_is_one_stored_session() {
    let server = Server::start(ServeOptions::default()).await;
    let mut messages = vec![json!({"role": "system", "content": "be brief"})];
    let mut ids = Vec::new();
    for text in ["one", "two", "three"] {
        messages.push(json!({"role": "user", "content": text, "name": "ann"}));
        let (status, session, body) = complete(&server, json!({"model": "helper", "messages": messages})).await;
        assert_eq!(status, 200, "{body}");
        ids.push(session.unwrap());
        // Clients echo the reply with fields of their own and trailing whitespace.
        let content = body["choices"][0]["message"]["content"].as_str().unwrap();
        messages
            .push(json!({"role": "assistant", "content": format!("{content}\n"), "refusal": null, "tool_calls": null}));
    }
    assert_eq!(ids[0], ids[1]);
    assert_eq!(ids[1], ids[2]);
    assert_eq!(sessions(&server).await, [ids[0].clone()]);
    let history = server.history(&ids[0]).await;
    assert_eq!(
        history,
        [
            ("user".into(), "one".into()),
            ("assistant".into(), "turn 1: one".into()),
            ("user".into(), "two".into()),
            ("assistant".into(), "turn 2: two".into()),
            ("user".into(), "three".into()),
            ("assistant".into(), "turn 3: three".into()),
        ]
    );
    // A different history is another conversation.
    let (_, other, _) = complete(
        &server,
        json!({"model": "helper", "messages": [{"role": "user", "content": "one"},
            {"role": "assistant", "content": "something else"}, {"role": "user", "content": "two"}]}),
    )
    .await;
    assert_ne!(other.unwrap(), ids[0]);
}

#[tokio::test]
async fn response_format_json_schema_answers_only_the_validated_json() {
    let server = Server::start(ServeOptions::default()).await;
    let format = json!({"type": "json_schema", "json_schema": {"name": "person", "strict": true, "schema": {
        "type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"], "additionalProperties": false}}});
    let (status, _, body) = complete(
        &server,
        json!({"model": "helper", "response_format": format,
               "messages": [{"role": "user", "content": "profile of Ann"}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(content).unwrap(),
        json!({"name": "Ann", "age": 3})
    );
    // Streamed: the prose of the first attempt is never sent.
    let chunks = chunks(
        &server,
        json!({"model": "helper", "stream": true, "response_format": format,
               "messages": [{"role": "user", "content": "profile of Ann"}]}),
    )
    .await;
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&streamed).unwrap(),
        json!({"name": "Ann", "age": 3})
    );
    // json_object takes any object.
    let (status, _, body) = complete(
        &server,
        json!({"model": "helper", "response_format": {"type": "json_object"},
               "messages": [{"role": "user", "content": "profile again"}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(serde_json::from_str::<Value>(content).unwrap().is_object());
}

#[tokio::test]
async fn a_format_the_model_never_meets_is_a_clear_error_not_prose() {
    let server = Server::start(ServeOptions::default()).await;
    let (status, _, body) = complete(
        &server,
        json!({"model": "helper", "response_format": {"type": "json_object"},
               "messages": [{"role": "user", "content": "never-profile"}]}),
    )
    .await;
    assert_eq!(status, 500, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("did not match the output schema after 3 attempts"),
        "{message}"
    );
    let (status, _, body) = complete(
        &server,
        json!({"model": "helper", "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 12}}},
               "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("response_format"),
        "{body}"
    );
}

#[tokio::test]
async fn what_the_agent_cannot_honour_is_a_clear_400() {
    let server = Server::start(ServeOptions::default()).await;
    let user = json!([{"role": "user", "content": "hi"}]);
    let cases = [
        (
            json!({"model": "helper", "n": 2, "messages": user}),
            "n: only one choice",
        ),
        (
            json!({"model": "helper", "messages": [{"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.png"}}]}]}),
            "the model of agent `helper` takes no images",
        ),
        (
            json!({"model": "helper", "tools": [{"type": "function", "function": {"name": "list_files"}}], "messages": user}),
            "`list_files` is also a tool of agent `helper`",
        ),
        (
            json!({"model": "helper", "tool_choice": "required", "messages": user}),
            "tool_choice \"required\" needs function tools",
        ),
        (
            json!({"model": "helper", "tools": weather_tool(), "messages": user,
                   "tool_choice": {"type": "function", "function": {"name": "get_time"}}}),
            "names the function `get_time`, which is not in `tools`",
        ),
        (
            // tool_choice cannot force one of the agent's own tools.
            json!({"model": "helper", "tools": weather_tool(), "messages": user,
                   "tool_choice": {"type": "function", "function": {"name": "list_files"}}}),
            "names the function `list_files`, which is not in `tools`",
        ),
        (
            json!({"model": "helper", "tools": weather_tool(), "messages": user,
                   "tool_choice": {"type": "allowed_tools", "tools": []}}),
            "tool_choice {\"tools\":[],\"type\":\"allowed_tools\"} is not supported",
        ),
        (
            json!({"model": "helper", "response_format": {"type": "yaml"}, "messages": user}),
            "use text, json_object or json_schema",
        ),
        (
            json!({"model": "helper", "tools": [{"type": "web_search"}], "messages": user}),
            "send function tools",
        ),
    ];
    for (body, expected) in cases {
        let (status, _, answer) = complete(&server, body.clone()).await;
        assert_eq!(status, 400, "{body} -> {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(expected), "{message}");
    }
    assert!(sessions(&server).await.is_empty(), "nothing ran");
}

#[tokio::test]
async fn a_client_tool_call_with_arguments_off_its_schema_never_reaches_the_client() {
    let server = Server::start(ServeOptions::default()).await;
    let (status, _, body) = complete(
        &server,
        json!({"model": "helper", "tools": weather_tool(), "messages": [{"role": "user", "content": "weather:?"}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["finish_reason"], "stop", "{body}");
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(content.contains("invalid arguments for `get_weather`"), "{content}");
}

/// `get_weather` and `get_time`, both taking a city.
fn two_tools() -> Value {
    let mut tools = weather_tool();
    let mut time = tools[0].clone();
    time["function"]["name"] = json!("get_time");
    tools.as_array_mut().unwrap().push(time);
    tools
}

#[tokio::test]
async fn tool_choice_naming_a_function_or_required_forces_the_first_model_call() {
    let server = Server::start(ServeOptions::default()).await;
    let hi = json!([{"role": "user", "content": "hi"}]);
    // Named: only that function is offered, and it must be called.
    for choice in [
        json!({"type": "function", "function": {"name": "get_time"}}),
        json!({"type": "function", "name": "get_time"}),
    ] {
        let (status, _, body) = complete(
            &server,
            json!({"model": "helper", "tools": two_tools(), "tool_choice": choice, "messages": hi}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["choices"][0]["finish_reason"], "tool_calls", "{body}");
        let call = &body["choices"][0]["message"]["tool_calls"][0]["function"];
        assert_eq!(call["name"], "get_time", "{body}");
        assert_eq!(call["arguments"], json!({"city": "forced among get_time"}).to_string());
    }
    // Required: the caller's tools only (not the agent's `list_files`), one must be called.
    let (status, session, body) = complete(
        &server,
        json!({"model": "helper", "tools": two_tools(), "tool_choice": "required", "messages": hi}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let call = &body["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(
        call["function"]["arguments"],
        json!({"city": "forced among get_weather,get_time"}).to_string()
    );
    // The results resume the turn, whose next step chooses freely.
    let (status, resumed, body) = complete(
        &server,
        json!({"model": "helper", "tools": two_tools(), "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "sunny"}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(resumed, session);
    assert_eq!(body["choices"][0]["finish_reason"], "stop", "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "turn 1: listed");
    // The Responses API takes the same choices.
    let body = respond(
        &server,
        json!({"model": "helper", "input": "hi", "tool_choice": {"type": "function", "name": "get_time"},
               "tools": [{"type": "function", "name": "get_weather", "parameters": weather_tool()[0]["function"]["parameters"]},
                         {"type": "function", "name": "get_time", "parameters": weather_tool()[0]["function"]["parameters"]}]}),
    )
    .await;
    assert_eq!(body["output"][0]["type"], "function_call", "{body}");
    assert_eq!(body["output"][0]["name"], "get_time", "{body}");
}

/// A stateless 3-turn chat with memory on is one extraction context: one watermark, the
/// session's, however often extraction ran.
#[tokio::test]
async fn a_stateless_three_turn_chat_is_one_memory_extraction_context() {
    let mut server = Server::start_built(ServeOptions::default(), |dir, model| {
        let mut memory = harness_memory::MemoryConfig::default();
        memory.extraction_throttle = std::time::Duration::ZERO;
        harness::HarnessAgent::builder()
            .memory(memory)
            .workspace(dir)
            .name("helper")
            .model(model)
            .build()
            .unwrap()
    })
    .await;
    let mut messages = Vec::new();
    let mut ids = Vec::new();
    for text in ["one", "two", "three"] {
        messages.push(json!({"role": "user", "content": text}));
        let (status, session, body) = complete(&server, json!({"model": "helper", "messages": messages})).await;
        assert_eq!(status, 200, "{body}");
        ids.push(session.unwrap());
        messages.push(body["choices"][0]["message"].clone());
    }
    assert!(ids.iter().all(|id| id == &ids[0]), "{ids:?}");
    // Shutting down flushes memory: every extraction has run.
    server.shutdown().await.unwrap().unwrap();
    let mut marks = Vec::new();
    let mut dirs = vec![server.workspace().to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().map(Result::unwrap) {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.to_string_lossy().contains(".extraction") {
                marks.push(path);
            }
        }
    }
    assert_eq!(marks.len(), 1, "{marks:?}");
    assert!(marks[0].ends_with(format!("{}.json", ids[0])), "{marks:?}");
}

#[tokio::test]
async fn tool_choice_none_offers_no_client_tool() {
    let server = Server::start(ServeOptions::default()).await;
    let (status, _, body) = complete(
        &server,
        json!({"model": "helper", "tools": weather_tool(), "tool_choice": "none",
               "messages": [{"role": "user", "content": "weather:Paris"}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // The model's call of the tool it was not offered got an error result; nothing waits.
    assert_eq!(body["choices"][0]["finish_reason"], "stop", "{body}");
    assert!(body["choices"][0]["message"].get("tool_calls").is_none(), "{body}");
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(content.contains("not available"), "{content}");
}

#[tokio::test]
async fn image_parts_reach_a_model_that_takes_images() {
    let server = Server::start_built(ServeOptions::default(), |dir, model| {
        super::support::agent(dir, model.with_images(), "helper")
    })
    .await;
    let (status, _, body) = complete(
        &server,
        json!({"model": "helper", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.png", "detail": "low"}}]}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "saw an image (https://example.invalid/cat.png) and: what is this?"
    );
    let body = respond(
        &server,
        json!({"model": "helper", "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "and this?"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}]}]}),
    )
    .await;
    assert_eq!(
        body["output"][0]["content"][0]["text"],
        "saw an image (image/png) and: and this?"
    );
    let (status, _, body) = complete(
        &server,
        json!({"model": "helper", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]}]}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("http(s)"), "{body}");
}

async fn respond(server: &Server, body: Value) -> Value {
    let response = server.post("/v1/responses", body).await;
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    body
}

#[tokio::test]
async fn the_responses_api_continues_a_session_through_previous_response_id() {
    let server = Server::start(ServeOptions::default()).await;
    let first = respond(&server, json!({"model": "helper", "input": "hello"})).await;
    assert_eq!(first["object"], "response");
    assert_eq!(first["status"], "completed");
    assert_eq!(first["output"][0]["type"], "message");
    assert_eq!(first["output"][0]["content"][0]["type"], "output_text");
    assert_eq!(first["output"][0]["content"][0]["text"], "turn 1: hello");
    let second = respond(
        &server,
        json!({"model": "helper", "previous_response_id": first["id"],
               "input": [{"role": "user", "content": [{"type": "input_text", "text": "again"}]}]}),
    )
    .await;
    assert_eq!(second["output"][0]["content"][0]["text"], "turn 2: again");
    assert_eq!(second["previous_response_id"], first["id"]);
    assert_eq!(sessions(&server).await.len(), 1);
    // An `item_reference` to one of our messages names its session too (the Vercel AI SDK).
    let third = respond(
        &server,
        json!({"model": "helper", "input": [
            {"role": "user", "content": "hello"},
            {"type": "item_reference", "id": second["output"][0]["id"]},
            {"role": "user", "content": "third"}]}),
    )
    .await;
    assert_eq!(third["output"][0]["content"][0]["text"], "turn 3: third", "{third}");
    assert_eq!(sessions(&server).await.len(), 1);
    // An id this server never gave is a 404 that says so.
    let response = server
        .post(
            "/v1/responses",
            json!({"model": "helper", "previous_response_id": "resp_nope", "input": "x"}),
        )
        .await;
    assert_eq!(response.status(), 404);
}

#[tokio::test]
async fn the_responses_api_does_function_calls_and_text_format() {
    let server = Server::start(ServeOptions::default()).await;
    let tools = json!([{"type": "function", "name": "get_weather", "description": "weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    let first = respond(
        &server,
        json!({"model": "helper", "tools": tools, "input": "weather:Lima"}),
    )
    .await;
    let call = first["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|item| item["type"] == "function_call")
        .unwrap_or_else(|| panic!("{first}"))
        .clone();
    assert_eq!(call["name"], "get_weather");
    let second = respond(
        &server,
        json!({"model": "helper", "tools": tools, "previous_response_id": first["id"], "input": [
            {"type": "function_call_output", "call_id": call["call_id"], "output": "warm"}]}),
    )
    .await;
    let text = second["output"][0]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("warm"), "{second}");

    let format = json!({"format": {"type": "json_schema", "name": "person", "strict": true, "schema": {
        "type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"]}}});
    let answer = respond(&server, json!({"model": "helper", "text": format, "input": "profile"})).await;
    let text = answer["output"][0]["content"][0]["text"].as_str().unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(text).unwrap(),
        json!({"name": "Ann", "age": 3})
    );
}

#[tokio::test]
async fn a_streamed_response_sends_the_responses_event_types() {
    let server = Server::start(ServeOptions::default()).await;
    let response = server
        .post(
            "/v1/responses",
            json!({"model": "helper", "stream": true, "input": "steps"}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let events = SseReader::new(response).rest().await;
    let types: Vec<String> = events
        .iter()
        .map(|e| e.json()["type"].as_str().unwrap().to_owned())
        .collect();
    for (event, data) in events.iter().zip(&types) {
        assert_eq!(event.event.as_deref(), Some(data.as_str()));
    }
    assert_eq!(types.first().map(String::as_str), Some("response.created"));
    assert_eq!(types.last().map(String::as_str), Some("response.completed"));
    for expected in [
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.output_item.done",
    ] {
        assert!(types.iter().any(|t| t == expected), "{expected} in {types:?}");
    }
    let deltas: String = events
        .iter()
        .map(|e| e.json())
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(deltas, "Let me look.\n\nFound it.");
    let done = events.last().unwrap().json();
    assert_eq!(done["response"]["output"][0]["content"][0]["text"], deltas);
    let numbers: Vec<u64> = events
        .iter()
        .map(|e| e.json()["sequence_number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, (0..numbers.len() as u64).collect::<Vec<_>>());
}
