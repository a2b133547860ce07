//! Summaries as derived data: the record each summary carries, the summary requests and the
//! summary message.

use super::estimate::estimate_text_tokens;
use harness_core::{Block, ChatRequest, MediaSource, Msg, Role, SystemPrompt, ToolChoice, meta};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::ops::Range;
use std::sync::Arc;

/// Metadata key of a summary message; its value is the [`SummaryRecord`].
pub const SUMMARY_META: &str = "harness.compaction";

/// The system prompt of a summary request.
const SUMMARY_SYSTEM: &str = "You write faithful, complete, structured summaries of conversations between a user and \
an AI agent. You never drop a rule, path, value or open task.";

/// A run of messages, by the ids of its first and last message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MsgRange {
    /// Id of the first message.
    pub first_id: String,
    /// Id of the last message.
    pub last_id: String,
    /// How many messages the range stands for.
    pub count: u64,
}

/// A pointer from a summary to one it folded in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SummaryLink {
    /// The earlier summary message's id.
    pub summary_id: String,
    /// Its [`SummaryRecord::sha256`].
    pub sha256: String,
}

/// What a summary stands for, stored in the summary message's metadata under
/// [`SUMMARY_META`] (and kept in the session's compaction history). Summaries are derived
/// data: the raw messages stay in the transcript, and this record says which ones a summary
/// was made from, so it can be checked against them or rebuilt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SummaryRecord {
    /// 1-based number of this compaction in the session.
    pub sequence: u64,
    /// Id of the summary message.
    pub summary_id: String,
    /// The raw messages this compaction summarized and replaced, in context order (pinned
    /// messages in between were kept, not summarized, and are not counted).
    pub range: MsgRange,
    /// SHA-256 (hex) of those messages as JSONL: each message's JSON and a newline. Equals the
    /// hash of the offload file.
    pub sha256: String,
    /// Everything summarized so far: from the first raw message of the earliest folded
    /// summary to the last message of `range`.
    pub covers: MsgRange,
    /// Earlier summaries folded into this one (their text was part of the request).
    pub previous: Vec<SummaryLink>,
    /// The model that wrote the summary.
    pub model: String,
    /// SHA-256 (hex, 16 digits) of the summary prompt template: its version.
    pub prompt_sha256: String,
    /// How many summary requests it took (more than one for a long history).
    pub requests: u32,
    /// Where the replaced messages were offloaded, when they were.
    pub offload_path: Option<String>,
}

/// Whether `msg` is a compaction summary.
pub fn is_summary(msg: &Msg) -> bool {
    msg.metadata.contains_key(SUMMARY_META)
}

/// The record of a summary message, when `msg` is one.
pub fn summary_record(msg: &Msg) -> Option<SummaryRecord> {
    serde_json::from_value(msg.metadata.get(SUMMARY_META)?.clone()).ok()
}

/// The summary text of a summary message (without its header).
pub(crate) fn summary_body(msg: &Msg) -> &str {
    msg.content.iter().rev().find_map(Block::as_text).unwrap_or_default()
}

/// `messages` as JSONL bytes: the hashed and offloaded form.
pub(crate) fn jsonl<'a>(messages: impl IntoIterator<Item = &'a Arc<Msg>>) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = Vec::new();
    for msg in messages {
        serde_json::to_writer(&mut out, &**msg)?;
        out.push(b'\n');
    }
    Ok(out)
}

/// Hex SHA-256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The text of one message as the summarizer reads it: everything but reasoning, whole.
pub(crate) fn render_message(number: usize, msg: &Msg) -> String {
    let role = match msg.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    let mut out = format!("[{number}] {role} · {}", msg.created_at);
    if msg.is_pinned() {
        out.push_str(" · pinned");
    }
    for block in &msg.content {
        out.push('\n');
        render_block(block, &mut out);
    }
    out
}

fn render_block(block: &Block, out: &mut String) {
    match block {
        Block::Text { text } => out.push_str(text),
        Block::Thinking { .. } => out.push_str("(reasoning omitted)"),
        Block::ToolUse { id, name, input } => {
            let arguments = match input {
                serde_json::Value::String(raw) => raw.clone(),
                other => other.to_string(),
            };
            out.push_str(&format!("→ tool call `{name}` (id {id}): {arguments}"));
        }
        Block::ToolResult {
            tool_use_id,
            content,
            is_error,
        } => {
            let status = if *is_error { " (error)" } else { "" };
            out.push_str(&format!("← result of {tool_use_id}{status}:"));
            for inner in content {
                out.push('\n');
                render_block(inner, out);
            }
        }
        Block::Image { source } => out.push_str(&format!("[image: {}]", describe(source))),
        Block::Audio { source } => out.push_str(&format!("[audio: {}]", describe(source))),
        Block::File { source, name } => {
            let shown = name.clone().unwrap_or_else(|| describe(source));
            out.push_str(&format!("[file: {shown}]"));
        }
        _ => out.push_str("[other content]"),
    }
}

fn describe(source: &MediaSource) -> String {
    match source {
        MediaSource::Base64 { media_type, .. } => format!("inline {media_type}"),
        MediaSource::Url { url } => url.clone(),
        MediaSource::Path { path } => path.clone(),
    }
}

/// Splits rendered messages into runs whose estimated size (plus the running summary) fits
/// `budget` tokens. A run holds at least one message, so an oversized message goes alone.
pub(crate) fn chunks(rendered: &[String], previous_tokens: u64, budget: u64) -> Vec<Range<usize>> {
    // The running summary of a later run is assumed as long as the first one's input.
    let mut out = Vec::new();
    let mut start = 0;
    let mut used = previous_tokens;
    for (at, text) in rendered.iter().enumerate() {
        let tokens = estimate_text_tokens(text);
        if at > start && used + tokens > budget {
            out.push(start..at);
            start = at;
            used = previous_tokens;
        }
        used += tokens;
    }
    if start < rendered.len() {
        out.push(start..rendered.len());
    }
    out
}

/// One summary request: the template with `{messages}` replaced by the previous summary (if
/// any) and the rendered messages.
pub(crate) fn request(template: &str, previous: Option<&str>, rendered: &[String]) -> ChatRequest {
    let mut block = String::new();
    if let Some(previous) = previous.filter(|text| !text.is_empty()) {
        block.push_str("<previous_summary>\n");
        block.push_str(previous);
        block.push_str("\n</previous_summary>\n\n");
    }
    block.push_str("<messages>\n");
    block.push_str(&rendered.join("\n\n"));
    block.push_str("\n</messages>");
    let text = template.replace(super::config::MESSAGES_PLACEHOLDER, &block);
    ChatRequest {
        system: SystemPrompt::new(SUMMARY_SYSTEM),
        messages: vec![Arc::new(Msg::user(text))],
        tools: Arc::from(Vec::new()),
        tool_choice: ToolChoice::None,
        ..ChatRequest::default()
    }
}

/// The summary message: a synthetic user message with a header and the summary, carrying
/// its record. The record's `summary_id` is set to the message's id.
pub(crate) fn summary_message(body: String, mut record: SummaryRecord) -> (Msg, SummaryRecord) {
    let kept_at = match &record.offload_path {
        Some(path) => format!(" and in {path}"),
        None => String::new(),
    };
    let header = format!(
        "[Summary of the conversation before this point (compaction {}). It replaces {} earlier messages, which \
         remain in the session log{kept_at}. Pinned messages and the most recent messages follow verbatim.]",
        record.sequence, record.covers.count
    );
    let mut msg = Msg::new(Role::User, vec![Block::text(header), Block::text(body)]);
    record.summary_id.clone_from(&msg.id);
    msg.metadata
        .insert(meta::SYNTHETIC.to_owned(), serde_json::Value::Bool(true));
    msg.metadata.insert(
        SUMMARY_META.to_owned(),
        serde_json::to_value(&record).unwrap_or(serde_json::Value::Null),
    );
    (msg, record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendering_keeps_every_text_call_and_result() {
        let mut msg = Msg::new(
            Role::Assistant,
            vec![
                Block::text("let me look"),
                Block::Thinking {
                    thinking: "secret".into(),
                    signature: None,
                },
                Block::ToolUse {
                    id: "c1".into(),
                    name: "read_file".into(),
                    input: serde_json::json!({"path": "src/main.rs"}),
                },
            ],
        );
        msg = msg.pinned();
        let text = render_message(3, &msg);
        assert!(text.starts_with("[3] assistant · "), "{text}");
        assert!(
            text.contains(
                "pinned\nlet me look\n(reasoning omitted)\n→ tool call `read_file` (id c1): {\"path\":\"src/main.rs\"}"
            ),
            "{text}"
        );
        let result = Msg::tool_result("c1", vec![Block::text("fn main() {}")], true);
        assert!(render_message(4, &result).ends_with("← result of c1 (error):\nfn main() {}"));
    }

    #[test]
    fn chunks_fit_the_budget_and_never_drop_a_message() {
        let rendered: Vec<String> = ["a".repeat(400), "b".repeat(400), "c".repeat(4000), "d".repeat(40)].into();
        // ~100, ~100, ~1000, ~10 tokens; budget 250 with a 20-token running summary.
        assert_eq!(chunks(&rendered, 20, 250), vec![0..2, 2..3, 3..4]);
        assert_eq!(chunks(&rendered, 0, 10_000), vec![0..4]);
        assert!(chunks(&[], 0, 10).is_empty());
    }

    #[test]
    fn a_summary_message_carries_its_record() {
        let range = MsgRange {
            first_id: "m1".into(),
            last_id: "m9".into(),
            count: 9,
        };
        let record = SummaryRecord {
            sequence: 2,
            summary_id: String::new(),
            range: range.clone(),
            sha256: "ab".into(),
            covers: range,
            previous: Vec::new(),
            model: "scripted".into(),
            prompt_sha256: "cd".into(),
            requests: 1,
            offload_path: None,
        };
        let (msg, record) = summary_message("## Intent\nx".into(), record);
        assert!(is_summary(&msg));
        assert_eq!(record.summary_id, msg.id);
        assert_eq!(summary_record(&msg), Some(record));
        assert_eq!(summary_body(&msg), "## Intent\nx");
        assert_eq!(msg.role, Role::User);
    }
}
