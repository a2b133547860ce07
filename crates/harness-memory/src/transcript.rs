//! Reading what the harness writes: session transcripts (`<sid>.log.jsonl`, one
//! [`Msg`] per line) and the session index (`sessions.json`).

use harness_core::{Block, Msg, Role, excerpt};
use serde::Deserialize;
use std::collections::BTreeMap;

/// How much of each part of a message a rendering keeps, in characters.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RenderLimits {
    /// Text and thinking-free content of user and assistant messages.
    pub(crate) text: usize,
    /// Tool-call arguments.
    pub(crate) tool_input: usize,
    /// Tool-result text.
    pub(crate) tool_result: usize,
}

fn role_label(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

/// One message as plain text: `[role]: text`, tool calls as `[assistant → name]: {args}`,
/// tool results as `[tool result]: text`. Thinking is left out. Every part is cut to its
/// limit with a `…`.
pub(crate) fn render_message(msg: &Msg, limits: RenderLimits) -> String {
    let mut parts: Vec<String> = Vec::new();
    let text = msg.text();
    if !text.trim().is_empty() {
        parts.push(format!(
            "[{}]: {}",
            role_label(msg.role),
            excerpt(text.trim(), limits.text)
        ));
    }
    for block in &msg.content {
        match block {
            Block::ToolUse { name, input, .. } => {
                let args = match input {
                    serde_json::Value::String(raw) => raw.clone(),
                    other => other.to_string(),
                };
                parts.push(format!("[assistant → {name}]: {}", excerpt(&args, limits.tool_input)));
            }
            Block::ToolResult { content, is_error, .. } => {
                let mut out = String::new();
                for text in content.iter().filter_map(Block::as_text) {
                    if !out.is_empty() {
                        out.push('\n');
                    }
                    out.push_str(text);
                }
                let label = if *is_error { "tool error" } else { "tool result" };
                parts.push(format!("[{label}]: {}", excerpt(out.trim(), limits.tool_result)));
            }
            Block::Image { .. } => parts.push(format!("[{}]: (image)", role_label(msg.role))),
            Block::Audio { .. } => parts.push(format!("[{}]: (audio)", role_label(msg.role))),
            Block::File { name, .. } => parts.push(format!(
                "[{}]: (file {})",
                role_label(msg.role),
                name.as_deref().unwrap_or("attachment")
            )),
            _ => {}
        }
    }
    parts.join("\n")
}

/// The messages of a transcript with their 1-based line numbers. Lines that do not parse
/// (a torn last line after a crash, a foreign record) are skipped.
pub(crate) fn parse_transcript(bytes: &[u8]) -> Vec<(usize, Msg)> {
    let text = String::from_utf8_lossy(bytes);
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .filter_map(|(at, line)| serde_json::from_str::<Msg>(line).ok().map(|msg| (at + 1, msg)))
        .collect()
}

/// One session of `sessions.json`. Unknown fields are ignored; missing ones are empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct SessionEntry {
    #[serde(default)]
    pub(crate) summary: String,
    #[serde(default)]
    pub(crate) created: Option<String>,
    #[serde(default)]
    pub(crate) updated: Option<String>,
    #[serde(default)]
    pub(crate) message_count: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
struct SessionIndexFile {
    #[serde(default)]
    sessions: BTreeMap<String, SessionEntry>,
}

/// The sessions of an index file, most recently updated first. `None` when the file is not
/// a session index.
pub(crate) fn parse_session_index(bytes: &[u8]) -> Option<Vec<(String, SessionEntry)>> {
    let file: SessionIndexFile = serde_json::from_slice(bytes).ok()?;
    let mut sessions: Vec<(String, SessionEntry)> = file.sessions.into_iter().collect();
    let sort_key = |entry: &SessionEntry| {
        entry
            .updated
            .as_deref()
            .or(entry.created.as_deref())
            .and_then(|at| at.parse::<jiff::Timestamp>().ok())
    };
    sessions.sort_by(|a, b| sort_key(&b.1).cmp(&sort_key(&a.1)).then_with(|| a.0.cmp(&b.0)));
    Some(sessions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torn_lines_are_skipped() {
        let one = serde_json::to_string(&Msg::user("hello")).unwrap_or_default();
        let two = serde_json::to_string(&Msg::assistant("hi")).unwrap_or_default();
        let torn = &two[..two.len() / 2];
        let text = format!("{one}\n{two}\n{torn}");
        let parsed = parse_transcript(text.as_bytes());
        let lines: Vec<(usize, String)> = parsed.iter().map(|(at, msg)| (*at, msg.text())).collect();
        assert_eq!(lines, vec![(1, "hello".to_owned()), (2, "hi".to_owned())]);
    }

    #[test]
    fn index_sorts_by_update() {
        let json = r#"{"v":1,"sessions":{
            "a":{"summary":"old","created":"2026-11-01T00:00:00Z","updated":"2026-11-02T00:00:00Z","message_count":4},
            "b":{"summary":"new","created":"2026-11-03T00:00:00Z","updated":"2026-11-05T00:00:00Z","message_count":2,"extra":1}}}"#;
        let sessions = parse_session_index(json.as_bytes()).unwrap_or_default();
        let ids: Vec<&str> = sessions.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["b", "a"]);
        assert_eq!(parse_session_index(b"not json"), None);
    }
}
