//! The fake OpenAI-compatible server: what it answers, what it records, and that it stops.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use harness_test_support::openai::{FakeOpenAi, Reply};
use std::io::{Read, Write};

/// One HTTP/1.1 POST of `body` to the server; the whole response as text.
fn post(base: &str, body: &str) -> String {
    let address = base.trim_start_matches("http://").trim_end_matches("/v1");
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

#[test]
fn it_answers_plain_and_streaming_requests_and_records_them() {
    let server = FakeOpenAi::start(|request| Reply::text(format!("you said {}", request["messages"][0]["content"])));
    let plain = post(
        server.base_url(),
        r#"{"messages": [{"role": "user", "content": "hi"}]}"#,
    );
    assert!(plain.contains("application/json"), "{plain}");
    assert!(plain.contains(r#""content":"you said \"hi\"""#), "{plain}");
    let streamed = post(
        server.base_url(),
        r#"{"stream": true, "messages": [{"role": "user", "content": "again"}]}"#,
    );
    assert!(streamed.contains("text/event-stream"), "{streamed}");
    assert!(streamed.contains(r#""content":"you said \"again\"""#), "{streamed}");
    assert!(
        streamed.contains(r#""finish_reason":"stop""#) && streamed.contains("data: [DONE]"),
        "{streamed}"
    );
    let seen: Vec<_> = server
        .requests()
        .iter()
        .map(|r| r["messages"][0]["content"].clone())
        .collect();
    assert_eq!(seen, ["hi", "again"]);
}

#[test]
fn a_dropped_server_stops_listening() {
    let server = FakeOpenAi::replying("x");
    let address = server
        .base_url()
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_owned();
    drop(server);
    assert!(
        std::net::TcpStream::connect(&address).is_err(),
        "still listening on {address}"
    );
}
