//! `/v1`: models, completions (plain and streamed), sessions through the header, errors.

use super::support::{Server, SseReader};
use harness_serve::ServeOptions;
use serde_json::{Value, json};
use sha2::Digest;

#[tokio::test]
async fn models_lists_the_agents_by_name() {
    let server = Server::start(ServeOptions::default()).await;
    let body: Value = server.get("/v1/models").await.json().await.unwrap();
    assert_eq!(
        body,
        json!({"object": "list", "data": [{"id": "helper", "object": "model", "created": 0, "owned_by": "harness"}]})
    );
}

#[tokio::test]
async fn a_request_without_a_session_seeds_a_new_one_and_names_it() {
    let server = Server::start(ServeOptions::default()).await;
    let response = server
        .post(
            "/v1/chat/completions",
            json!({"model": "helper", "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "my name is Ann"},
                {"role": "assistant", "content": "hello Ann"},
                {"role": "user", "content": [{"type": "text", "text": "what is my name?"}]},
            ]}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let session = response.headers()["x-harness-session"].to_str().unwrap().to_owned();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(
        body["choices"][0]["message"],
        json!({"role": "assistant", "content": "turn 2: what is my name?"})
    );
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(body["harness"]["session_id"], session.as_str());
    // The request's messages are the session's context, in the history.
    let history = server.history(&session).await;
    assert_eq!(
        history,
        [
            ("user".into(), "my name is Ann".into()),
            ("assistant".into(), "hello Ann".into()),
            ("user".into(), "what is my name?".into()),
            ("assistant".into(), "turn 2: what is my name?".into()),
        ]
    );
}

#[tokio::test]
async fn the_session_header_continues_a_session_from_its_own_history() {
    let server = Server::start(ServeOptions::default()).await;
    for (turn, text) in [(1, "first"), (2, "second")] {
        let response = server
            .client
            .post(server.url("/v1/chat/completions"))
            .header("x-harness-session", "s1")
            // Earlier messages of the request are ignored: the session's history is the context.
            .json(&json!({"model": "helper", "messages": [
                {"role": "user", "content": "ignored"}, {"role": "user", "content": text}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.headers()["x-harness-session"], "s1");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["choices"][0]["message"]["content"], format!("turn {turn}: {text}"));
    }
}

#[tokio::test]
async fn a_streamed_completion_sends_chunks_tool_activity_usage_and_done() {
    let server = Server::start(ServeOptions::default()).await;
    let response = server
        .post(
            "/v1/chat/completions",
            json!({"model": "helper", "stream": true, "stream_options": {"include_usage": true},
                   "messages": [{"role": "user", "content": "use a tool"}]}),
        )
        .await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().contains_key("x-harness-session"));
    let events = SseReader::new(response).rest().await;
    let data: Vec<&str> = events.iter().map(|e| e.data.as_str()).collect();
    assert_eq!(data.last(), Some(&"[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "turn 1: listed");
    let finish: Vec<&Value> = chunks
        .iter()
        .map(|c| &c["choices"][0]["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, [&json!("stop")]);
    // Every chunk has exactly one choice; tool activity rides in `harness` on chunks with an
    // empty delta.
    assert!(chunks.iter().all(|c| c["choices"].as_array().map(Vec::len) == Some(1)));
    let tool_events: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["harness"]["type"].as_str())
        .filter(|t| t.starts_with("tool"))
        .collect();
    assert_eq!(tool_events, ["tool_call_start", "tool_call", "tool_result"]);
    let tool_call = chunks.iter().find(|c| c["harness"]["type"] == "tool_call").unwrap();
    assert_eq!(tool_call["choices"][0]["delta"], json!({}));
    assert_eq!(tool_call["harness"]["name"], "list_files");
    // The usage rides on the last chunk, the one with the finish reason.
    let usage = &chunks[chunks.len() - 1];
    assert_eq!(usage["choices"][0]["finish_reason"], "stop");
    assert!(usage["usage"]["total_tokens"].is_u64());
}

#[tokio::test]
async fn errors_use_openai_error_json_and_status() {
    let server = Server::start(ServeOptions::default()).await;
    let response = server
        .post(
            "/v1/chat/completions",
            json!({"model": "nope", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(response.status(), 404);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "model_not_found");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(
        body["error"]["message"],
        "no agent named `nope`; this server serves: helper"
    );

    let response = server.post("/v1/chat/completions", json!({"model": "helper"})).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("missing field `messages`"),
        "{body}"
    );

    let response = server
        .post(
            "/v1/chat/completions",
            json!({"model": "helper", "messages": [{"role": "assistant", "content": "hi"}]}),
        )
        .await;
    assert_eq!(response.status(), 400);
}

#[tokio::test]
async fn api_keys_decide_the_user_and_a_wrong_key_is_401() {
    let hash = hex::encode(sha2::Sha256::digest(b"secret-alice"));
    let mut options = ServeOptions::default();
    options.keys = vec![harness_serve::ServeKey {
        user: "alice".into(),
        sha256: hash,
    }];
    let server = Server::start(options).await;
    let ask = |key: &'static str| {
        server
            .client
            .post(server.url("/v1/chat/completions"))
            .bearer_auth(key)
            .header("x-harness-session", "private")
            .json(&json!({"model": "helper", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
    };
    let response = ask("wrong").await.unwrap();
    assert_eq!(response.status(), 401);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "authentication_error");
    assert_eq!(ask("secret-alice").await.unwrap().status(), 200);
    let unauthenticated = server.get("/v1/models").await;
    assert_eq!(unauthenticated.status(), 401);
}
