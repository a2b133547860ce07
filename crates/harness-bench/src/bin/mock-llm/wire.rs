//! The OpenAI Chat Completions shapes the mock sends: one `chat.completion` document, or
//! an SSE stream of `chat.completion.chunk`s ending with `data: [DONE]`.

use crate::policy::Reply;
use serde_json::{Value, json};

/// Token counts reported for one reply.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Usage {
    pub(crate) prompt: u64,
    pub(crate) completion: u64,
}

impl Usage {
    /// The benchmark contract: a quarter of the body's bytes for the prompt, 18 tokens for a
    /// tool call and 3 for a text.
    pub(crate) fn of(body_bytes: usize, reply: &Reply) -> Self {
        Self {
            prompt: (body_bytes as u64 / 4).max(1),
            completion: match reply {
                Reply::ToolCall { .. } => 18,
                Reply::Text(_) => 3,
            },
        }
    }

    fn json(self) -> Value {
        json!({
            "prompt_tokens": self.prompt,
            "completion_tokens": self.completion,
            "total_tokens": self.prompt + self.completion,
        })
    }
}

fn finish_reason(reply: &Reply) -> &'static str {
    match reply {
        Reply::ToolCall { .. } => "tool_calls",
        Reply::Text(_) => "stop",
    }
}

/// The `chat.completion` document for a non-streaming request.
pub(crate) fn completion(id: u64, model: &str, reply: &Reply, usage: Usage) -> Value {
    let message = match reply {
        Reply::Text(text) => json!({"role": "assistant", "content": text}),
        Reply::ToolCall { name, arguments } => json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [{"id": format!("call_{id}"), "type": "function",
                            "function": {"name": name, "arguments": arguments}}],
        }),
    };
    json!({
        "id": format!("chatcmpl-{id}"),
        "object": "chat.completion",
        "created": 1_764_000_000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason(reply)}],
        "usage": usage.json(),
    })
}

/// The SSE body for a streaming request: a role chunk, the content (text, or a tool call
/// whose arguments come in three pieces), a finish chunk, a usage chunk when asked for,
/// then `[DONE]`.
pub(crate) fn stream(id: u64, model: &str, reply: &Reply, usage: Usage, include_usage: bool) -> String {
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": format!("chatcmpl-{id}"),
            "object": "chat.completion.chunk",
            "created": 1_764_000_000,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
    };
    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}), Value::Null)];
    match reply {
        Reply::Text(text) => {
            // Two deltas, split on a character boundary, so clients really assemble text.
            let half = text
                .char_indices()
                .nth(text.chars().count() / 2)
                .map_or(0, |(at, _)| at);
            for piece in [&text[..half], &text[half..]] {
                events.push(chunk(json!({"content": piece}), Value::Null));
            }
        }
        Reply::ToolCall { name, arguments } => {
            let call_id = format!("call_{id}");
            events.push(chunk(
                json!({"tool_calls": [{"index": 0, "id": call_id, "type": "function",
                                       "function": {"name": name, "arguments": ""}}]}),
                Value::Null,
            ));
            let chars: Vec<char> = arguments.chars().collect();
            let third = chars.len().div_ceil(3).max(1);
            for piece in chars.chunks(third) {
                let piece: String = piece.iter().collect();
                events.push(chunk(
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
                    Value::Null,
                ));
            }
        }
    }
    events.push(chunk(json!({}), json!(finish_reason(reply))));
    if include_usage {
        events.push(json!({
            "id": format!("chatcmpl-{id}"),
            "object": "chat.completion.chunk",
            "created": 1_764_000_000,
            "model": model,
            "choices": [],
            "usage": usage.json(),
        }));
    }
    let mut body = String::new();
    for event in events {
        body.push_str("data: ");
        body.push_str(&event.to_string());
        body.push_str("\n\n");
    }
    body.push_str("data: [DONE]\n\n");
    body
}
