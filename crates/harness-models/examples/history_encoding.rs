//! Measures request encoding for a W4-sized history (2,000 messages, 2,000-byte system prompt,
//! one tool): `cargo run --release -p harness-models --example history_encoding`.

#![allow(clippy::unwrap_used, clippy::print_stdout)]
use harness_core::{ChatRequest, Msg, SystemPrompt, ToolSpec};
use harness_models::{AnthropicClient, AnthropicConfig, OpenAiClient, OpenAiConfig};
use std::sync::Arc;
use std::time::Instant;

fn main() {
    let result = "r".repeat(200);
    let mut messages = Vec::new();
    for n in 1..=1000 {
        messages.push(Arc::new(Msg::user(format!(
            "Turn {n}: look up key k{n} and report the value."
        ))));
        messages.push(Arc::new(Msg::assistant(format!("done {n}. {result}"))));
    }
    messages.push(Arc::new(Msg::user(
        "Turn 1001: look up key k1001 and report the value.",
    )));
    let request = ChatRequest {
        system: SystemPrompt::new("s".repeat(2000)),
        messages,
        tools: Arc::from(vec![ToolSpec {
            name: "lookup".into(),
            description: "Look up the record stored under a key and return it verbatim.".into(),
            input_schema: serde_json::json!({"type":"object","properties":{"key":{"type":"string","description":"The key to look up, e.g. k1."}},"required":["key"]}),
            annotations: harness_core::ToolAnnotations::new(),
        }]),
        ..ChatRequest::default()
    };
    let base = "http://127.0.0.1:1";
    let openai = OpenAiClient::new(OpenAiConfig::new("mock-model", format!("{base}/v1"))).unwrap();
    let anthropic = AnthropicClient::new(AnthropicConfig::new("mock-model", base)).unwrap();
    let iters = 200;
    let start = Instant::now();
    let mut bytes = 0;
    for _ in 0..iters {
        bytes = openai.request_body(&request, true).unwrap().len();
    }
    println!("openai body {bytes} B: {:?}/serialize", start.elapsed() / iters);
    let start = Instant::now();
    for _ in 0..iters {
        bytes = anthropic.request_body(&request, true).unwrap().len();
    }
    println!("anthropic body {bytes} B: {:?}/serialize", start.elapsed() / iters);
    let start = Instant::now();
    for _ in 0..iters {
        std::hint::black_box(harness_core::estimate_request(&request));
    }
    println!("estimate_request: {:?}", start.elapsed() / iters);
}
