//! Token estimates for budgets and triggers, used where the provider reported no usage.

use harness_core::{Block, Msg, Role};
use std::sync::Arc;

/// Estimates the tokens of one message. The default is [`estimate_msg_tokens`]; the harness
/// may plug in a tokenizer-backed estimate with
/// [`Compaction::with_estimator`](super::Compaction::with_estimator).
pub type TokenEstimator = fn(&Msg) -> u64;

/// Tokens per message for role and framing.
const PER_MESSAGE: u64 = 4;
/// Tokens per tool call or result for ids and framing.
const PER_TOOL_BLOCK: u64 = 8;
/// A flat guess for an image, audio clip or file reference.
const PER_MEDIA: u64 = 800;

/// A rough token count of `text`: one token per CJK ideograph, kana or hangul syllable (they
/// rarely share a token), one per four other characters.
pub fn estimate_text_tokens(text: &str) -> u64 {
    let mut wide = 0u64;
    let mut other = 0u64;
    for ch in text.chars() {
        if is_wide(ch) {
            wide += 1;
        } else {
            other += 1;
        }
    }
    wide + other.div_ceil(4)
}

fn is_wide(ch: char) -> bool {
    matches!(u32::from(ch),
        0x1100..=0x11FF      // Hangul Jamo
        | 0x2E80..=0x303F    // CJK radicals, punctuation
        | 0x3040..=0x30FF    // Hiragana, Katakana
        | 0x3130..=0x318F    // Hangul compatibility Jamo
        | 0x3400..=0x4DBF    // CJK extension A
        | 0x4E00..=0x9FFF    // CJK unified ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xF900..=0xFAFF    // CJK compatibility ideographs
        | 0xFF00..=0xFFEF    // Full-width forms
        | 0x20000..=0x2FA1F) // CJK extensions B–F, compatibility supplement
}

/// The default [`TokenEstimator`]: text, reasoning, tool calls (name and JSON arguments) and
/// tool results by [`estimate_text_tokens`], plus framing; media at a flat 800.
pub fn estimate_msg_tokens(msg: &Msg) -> u64 {
    PER_MESSAGE + msg.content.iter().map(block_tokens).sum::<u64>()
}

fn block_tokens(block: &Block) -> u64 {
    match block {
        Block::Text { text } => estimate_text_tokens(text),
        Block::Thinking { thinking, .. } => estimate_text_tokens(thinking),
        Block::ToolUse { name, input, .. } => {
            let arguments = match input {
                serde_json::Value::String(raw) => estimate_text_tokens(raw),
                other => estimate_text_tokens(&other.to_string()),
            };
            PER_TOOL_BLOCK + estimate_text_tokens(name) + arguments
        }
        Block::ToolResult { content, .. } => PER_TOOL_BLOCK + content.iter().map(block_tokens).sum::<u64>(),
        _ => PER_MEDIA,
    }
}

/// How big the context is, and what the number rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ContextSize {
    /// Tokens.
    pub(crate) tokens: u64,
    /// The index of the assistant message whose reported prompt size the count starts from;
    /// messages before it are counted by the provider, the rest by the estimator.
    pub(crate) usage_index: Option<usize>,
}

/// The context's size: the prompt size the provider reported for the last model call after
/// `boundary` (the last message present at the latest compaction: usage reported before a
/// compaction describes a context that no longer exists) plus an estimate of that reply and
/// everything after it. Without such a report, everything is estimated.
pub(crate) fn context_size(messages: &[Arc<Msg>], boundary: Option<&str>, estimator: TokenEstimator) -> ContextSize {
    let start = boundary
        .and_then(|id| messages.iter().rposition(|msg| msg.id == id))
        .map_or(0, |at| at + 1);
    let reported = messages.iter().enumerate().skip(start).rev().find_map(|(at, msg)| {
        let usage = msg.usage.filter(|usage| usage.input_tokens > 0)?;
        (msg.role == Role::Assistant).then_some((at, usage.input_tokens))
    });
    match reported {
        Some((at, input)) => ContextSize {
            tokens: input + estimate_all(&messages[at..], estimator),
            usage_index: Some(at),
        },
        None => ContextSize {
            tokens: estimate_all(messages, estimator),
            usage_index: None,
        },
    }
}

/// The sum of `estimator` over `messages`.
pub(crate) fn estimate_all(messages: &[Arc<Msg>], estimator: TokenEstimator) -> u64 {
    messages.iter().map(|msg| estimator(msg)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use harness_core::Usage;

    #[test]
    fn cjk_counts_one_token_per_character() {
        assert_eq!(estimate_text_tokens(""), 0);
        assert_eq!(estimate_text_tokens("abcdefgh"), 2);
        assert_eq!(estimate_text_tokens("你好世界"), 4);
        assert_eq!(estimate_text_tokens("こんにちは abcd"), 5 + 2);
    }

    #[test]
    fn reported_usage_after_the_boundary_wins() {
        let mut answer = Msg::assistant("abcd");
        answer.usage = Some(Usage {
            input_tokens: 1_000,
            ..Usage::default()
        });
        let messages: Vec<Arc<Msg>> = vec![
            Arc::new(Msg::user("first")),
            Arc::new(answer),
            Arc::new(Msg::user("abcdabcd")),
        ];
        let tail = estimate_msg_tokens(&messages[1]) + estimate_msg_tokens(&messages[2]);
        assert_eq!(
            context_size(&messages, None, estimate_msg_tokens),
            ContextSize {
                tokens: 1_000 + tail,
                usage_index: Some(1)
            }
        );
        // Usage reported before the latest compaction is stale.
        let boundary = messages[1].id.clone();
        assert_eq!(
            context_size(&messages, Some(&boundary), estimate_msg_tokens),
            ContextSize {
                tokens: estimate_all(&messages, estimate_msg_tokens),
                usage_index: None
            }
        );
    }
}
