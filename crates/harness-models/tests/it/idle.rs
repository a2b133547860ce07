//! The idle timeout: a provider that accepts the connection and then goes silent ends the
//! attempt with an error naming the base URL, for streaming and non-streaming reads.

use crate::{chain, request_with_tool, stream};
use harness_core::{ChatModel, ModelError, Msg};
use harness_models::{ModelSpec, OpenAiClient, OpenAiConfig, RetryPolicy, TransportOptions, WireError};
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// What the silent server sends before going quiet.
#[derive(Clone, Copy)]
enum Silence {
    /// Accepts and never answers.
    BeforeHeaders,
    /// Sends SSE headers and one event, then nothing.
    MidStream,
}

/// A listener on 127.0.0.1 that keeps every connection open and says (almost) nothing.
async fn silent_server(silence: Silence) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut socket, _)) = listener.accept().await {
            if let Silence::MidStream = silence {
                let mut buf = vec![0u8; 64 * 1024];
                let _ = socket.read(&mut buf).await;
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
                let event = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n";
                let chunk = format!("{:x}\r\n{event}\r\n", event.len());
                let _ = socket.write_all(format!("{head}{chunk}").as_bytes()).await;
            }
            held.push(socket);
        }
    });
    format!("http://{addr}/v1")
}

fn client(base: &str) -> OpenAiClient {
    let mut config = OpenAiConfig::new("gpt-test", base);
    config.idle_timeout = Duration::from_millis(300);
    OpenAiClient::new(config).unwrap()
}

fn assert_idle(err: &ModelError, base: &str) {
    let text = chain(err);
    assert!(matches!(err, ModelError::Transient(_)), "{text}");
    assert!(text.contains(base) && text.contains("idle timeout"), "{text}");
}

#[tokio::test]
async fn a_server_that_never_answers_ends_a_call_naming_the_base_url() {
    let base = silent_server(Silence::BeforeHeaders).await;
    let err = client(&base)
        .call(request_with_tool(vec![Msg::user("hi")]))
        .await
        .err()
        .unwrap();
    assert_idle(&err, &base);
    let ModelError::Transient(source) = &err else {
        unreachable!()
    };
    assert!(matches!(
        source.downcast_ref::<WireError>(),
        Some(WireError::Idle { .. })
    ));
}

#[tokio::test]
async fn a_server_that_never_answers_ends_a_stream_naming_the_base_url() {
    let base = silent_server(Silence::BeforeHeaders).await;
    let err = stream(&client(&base), request_with_tool(vec![Msg::user("hi")]))
        .await
        .err()
        .unwrap();
    assert_idle(&err, &base);
}

#[tokio::test]
async fn a_stream_that_goes_silent_midway_ends_with_the_idle_error() {
    let base = silent_server(Silence::MidStream).await;
    let err = stream(&client(&base), request_with_tool(vec![Msg::user("hi")]))
        .await
        .err()
        .unwrap();
    assert_idle(&err, &base);
}

#[tokio::test]
async fn the_spec_applies_transport_options_and_names_the_variable() {
    let base = silent_server(Silence::BeforeHeaders).await;
    let env = |key: &str| match key {
        "OPENAI_BASE_URL" => Some(base.clone()),
        "OPENAI_API_KEY" => Some("x".to_owned()),
        _ => None,
    };
    let options = TransportOptions::default()
        .idle_timeout(Duration::from_millis(200))
        .retry(
            RetryPolicy::default()
                .max_retries(1)
                .base_delay(Duration::from_millis(10)),
        );
    let model = ModelSpec::parse("openai:gpt-test")
        .unwrap()
        .build_with_options(&env, &options)
        .unwrap();
    let err = model
        .call(request_with_tool(vec![Msg::user("hi")]))
        .await
        .err()
        .unwrap();
    let text = chain(&err);
    assert!(text.contains(&base) && text.contains("OPENAI_BASE_URL"), "{text}");
}
