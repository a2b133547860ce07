//! Wire tests for the provider clients: in-process servers on 127.0.0.1 replay realistic
//! provider streams and error bodies; the request each server received is asserted.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs, unreachable_pub)]

mod anthropic;
mod gemini;
mod idle;
mod openai;
mod server;
mod spec;
mod structured;

use harness_core::{ChatModel, ChatRequest, ModelError, ModelResponse, Msg, ToolAnnotations, ToolSpec, collect};
use std::sync::Arc;

/// Streams `request` through `model` and collects the response.
pub async fn stream(model: &dyn ChatModel, request: ChatRequest) -> Result<ModelResponse, ModelError> {
    collect(model.stream(request).await?).await
}

/// A request with the given history and the `lookup` tool.
pub fn request_with_tool(messages: Vec<Msg>) -> ChatRequest {
    ChatRequest {
        system: harness_core::SystemPrompt::new("You are terse."),
        messages: messages.into_iter().map(Arc::new).collect(),
        tools: Arc::from(vec![lookup_tool()]),
        stream: true,
        ..ChatRequest::default()
    }
}

pub fn lookup_tool() -> ToolSpec {
    ToolSpec {
        name: "lookup".into(),
        description: "Look up the record stored under a key and return it verbatim.".into(),
        input_schema: serde_json::json!({
            "type": "object",
            "properties": {"key": {"type": "string", "description": "The key to look up, e.g. k1."}},
            "required": ["key"]
        }),
        annotations: ToolAnnotations::new(),
    }
}

/// Renders the source chain of an error, outermost first.
pub fn chain(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}
