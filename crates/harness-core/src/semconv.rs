//! OpenTelemetry GenAI semantic conventions: the span names and attribute keys the kernel's
//! `tracing` spans carry (pinned to the semconv-genai "Development" conventions of
//! `invoke_agent`, `chat` and `execute_tool`), and the process-wide content-capture switch.
//!
//! The spans are plain `tracing` spans whose `otel.name` field is the OpenTelemetry span name
//! (`invoke_agent {agent}`, `chat {model}`, `execute_tool {tool}`). Without an exporter
//! installed (the default) they cost what any disabled `tracing` span costs.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// `gen_ai.operation.name` of an agent call.
pub const OP_INVOKE_AGENT: &str = "invoke_agent";
/// `gen_ai.operation.name` of a model call.
pub const OP_CHAT: &str = "chat";
/// `gen_ai.operation.name` of a tool call.
pub const OP_EXECUTE_TOOL: &str = "execute_tool";

static CAPTURE_CONTENT: AtomicBool = AtomicBool::new(false);

/// Whether spans carry message content (tool arguments and results, the final answer):
/// off unless the operator opted in ([`set_capture_content`], `[telemetry] capture_content`).
pub fn capture_content() -> bool {
    CAPTURE_CONTENT.load(Ordering::Relaxed)
}

/// Turns content capture on or off for the process.
pub fn set_capture_content(on: bool) {
    CAPTURE_CONTENT.store(on, Ordering::Relaxed);
}

static TRACEPARENT: OnceLock<fn() -> Option<String>> = OnceLock::new();

/// Sets how [`traceparent`] reads the current span's W3C trace context: installed once, by
/// the binary's telemetry when spans are recorded (a later call changes nothing).
pub fn set_traceparent_source(source: fn() -> Option<String>) {
    let _ = TRACEPARENT.set(source);
}

/// The W3C `traceparent` of the current span, for a request that leaves the process (a
/// remote subagent's turn), so the remote spans join this trace; `None` when no telemetry
/// records spans.
pub fn traceparent() -> Option<String> {
    TRACEPARENT.get().and_then(|source| source())
}

/// Content for a span attribute, through the process's redaction path and cut to 4 KiB.
pub fn content(text: &str) -> String {
    const MAX: usize = 4096;
    let masked = crate::redact::redact(text);
    if masked.len() <= MAX {
        return masked;
    }
    let mut end = MAX;
    while !masked.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &masked[..end])
}

/// Records a response's token usage on a `chat` or `invoke_agent` span.
/// Takes the counts, not the `Usage` type, so this module stays a leaf of the crate.
pub(crate) fn record_usage(span: &tracing::Span, input_tokens: u64, output_tokens: u64, cache_read_tokens: u64) {
    span.record("gen_ai.usage.input_tokens", input_tokens);
    span.record("gen_ai.usage.output_tokens", output_tokens);
    if cache_read_tokens > 0 {
        span.record("gen_ai.usage.cache_read.input_tokens", cache_read_tokens);
    }
}

/// Marks a span failed with `error.type` (an [`ErrorKind`](crate::ErrorKind) name or
/// `tool_error`).
pub(crate) fn record_error(span: &tracing::Span, kind: &str) {
    span.record("error.type", kind);
    span.record("otel.status_code", "ERROR");
}

/// Records a tool call's outcome (and, when content is captured, its arguments and its
/// result's text, which `result` produces only then).
pub(crate) fn record_tool(
    span: &tracing::Span,
    arguments: &serde_json::Value,
    is_error: bool,
    result: impl FnOnce() -> String,
) {
    if is_error {
        record_error(span, "tool_error");
    }
    if capture_content() {
        span.record("gen_ai.tool.call.arguments", content(&arguments.to_string()).as_str());
        span.record("gen_ai.tool.call.result", content(&result()).as_str());
    }
}
