//! The argument-truncation pre-pass: cut oversized string values in the tool-call arguments
//! of older messages. No model call.

use super::config::TruncateArgsConfig;
use super::estimate::TokenEstimator;
use harness_core::{Block, Msg, Role};
use serde_json::Value;
use std::sync::Arc;

/// Metadata key set on a context message whose arguments were cut (the transcript keeps the
/// original); its value is how many values were cut.
pub const ARGS_TRUNCATED_META: &str = "harness.args_truncated";

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Truncation {
    /// Messages changed.
    pub(crate) messages: usize,
    /// Argument values cut.
    pub(crate) arguments: usize,
    /// Characters of the cut values before.
    pub(crate) chars_before: u64,
    /// Characters of the cut values after, markers included.
    pub(crate) chars_after: u64,
    /// Estimated tokens saved, by message index.
    pub(crate) saved: Vec<(usize, u64)>,
}

/// Cuts every string value longer than `max_param_chars` in the tool calls of assistant
/// messages older than the last `keep_messages`, replacing each changed message with a copy
/// (same id) so that shared copies — the transcript's — stay whole.
pub(crate) fn truncate_args(
    messages: &mut [Arc<Msg>],
    config: &TruncateArgsConfig,
    estimator: TokenEstimator,
) -> Truncation {
    let mut out = Truncation::default();
    let end = messages.len().saturating_sub(config.keep_messages);
    for (at, slot) in messages[..end].iter_mut().enumerate() {
        let oversized = slot.role == Role::Assistant
            && slot
                .tool_calls()
                .any(|call| has_long_string(call.input, config.max_param_chars));
        if !oversized {
            continue;
        }
        let mut msg = (**slot).clone();
        let mut cut = 0;
        for block in &mut msg.content {
            if let Block::ToolUse { input, .. } = block {
                cut_strings(input, config, &mut cut, &mut out);
            }
        }
        let previous = msg
            .metadata
            .get(ARGS_TRUNCATED_META)
            .and_then(Value::as_u64)
            .unwrap_or(0);
        msg.metadata
            .insert(ARGS_TRUNCATED_META.to_owned(), Value::from(previous + cut));
        let saved = estimator(slot).saturating_sub(estimator(&msg));
        out.saved.push((at, saved));
        out.messages += 1;
        *slot = Arc::new(msg);
    }
    out
}

fn longer_than(text: &str, max: usize) -> bool {
    // Byte length bounds the character count from above: most strings are decided here.
    text.len() > max && text.chars().count() > max
}

fn has_long_string(value: &Value, max: usize) -> bool {
    match value {
        Value::String(text) => longer_than(text, max),
        Value::Array(items) => items.iter().any(|item| has_long_string(item, max)),
        Value::Object(fields) => fields.values().any(|field| has_long_string(field, max)),
        _ => false,
    }
}

fn cut_strings(value: &mut Value, config: &TruncateArgsConfig, cut: &mut u64, out: &mut Truncation) {
    match value {
        Value::String(text) if longer_than(text, config.max_param_chars) => {
            let total = text.chars().count();
            let marker = config.marker.replace("{total}", &total.to_string());
            let keep = config.max_param_chars.saturating_sub(marker.chars().count());
            let mut shortened: String = text.chars().take(keep).collect();
            shortened.push_str(&marker);
            out.arguments += 1;
            out.chars_before += total as u64;
            out.chars_after += shortened.chars().count() as u64;
            *cut += 1;
            *text = shortened;
        }
        Value::Array(items) => {
            for item in items {
                cut_strings(item, config, cut, out);
            }
        }
        Value::Object(fields) => {
            for field in fields.values_mut() {
                cut_strings(field, config, cut, out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::estimate_msg_tokens;

    fn write_call(content: &str) -> Msg {
        Msg::new(
            Role::Assistant,
            vec![Block::ToolUse {
                id: "c1".into(),
                name: "write_file".into(),
                input: serde_json::json!({"path": "a.txt", "content": content, "nested": [content]}),
            }],
        )
    }

    #[test]
    fn long_values_in_old_calls_are_cut_and_the_original_is_untouched() {
        let config = TruncateArgsConfig::default().max_param_chars(100).keep_messages(1);
        let original = Arc::new(write_call(&"é".repeat(500)));
        let recent = Arc::new(write_call(&"x".repeat(500)));
        let mut messages = vec![Arc::clone(&original), Arc::new(Msg::user("ok")), Arc::clone(&recent)];
        let done = truncate_args(&mut messages, &config, estimate_msg_tokens);
        assert_eq!((done.messages, done.arguments, done.chars_before), (1, 2, 1000));
        assert_eq!(done.chars_after, 200);
        let call = messages[0]
            .tool_calls()
            .next()
            .map(|c| c.input.clone())
            .unwrap_or_default();
        let content = call["content"].as_str().unwrap_or_default();
        assert_eq!(content.chars().count(), 100);
        assert!(
            content.starts_with("éé") && content.contains("it had 500 characters"),
            "{content}"
        );
        assert_eq!(call["path"], "a.txt");
        assert_eq!(messages[0].id, original.id);
        assert_eq!(messages[0].metadata.get(ARGS_TRUNCATED_META), Some(&Value::from(2)));
        // The shared original and the protected recent message are unchanged.
        assert_eq!(
            original
                .tool_calls()
                .next()
                .map(|c| c.input["content"].as_str().map(str::len)),
            Some(Some(1000))
        );
        assert!(Arc::ptr_eq(&messages[2], &recent));
        assert!(done.saved[0].1 > 0);
        // A second pass finds nothing left to cut.
        assert_eq!(
            truncate_args(&mut messages, &config, estimate_msg_tokens),
            Truncation::default()
        );
    }
}
