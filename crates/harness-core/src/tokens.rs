//! The workspace's one token estimator: a heuristic of about one token per CJK character and
//! four characters per token otherwise, cheap enough for every step of a long conversation.
//! Memory budgets, compaction triggers, eviction and the prompt budget all use it;
//! `harness-models` re-exports it and adds a tokenizer and a usage-calibrated counter.

use crate::message::{Block, Msg};
use crate::model::ChatRequest;

/// Tokens charged for an image, audio clip or file reference (providers charge by size; this
/// is a middle value for budgets).
pub const MEDIA_TOKENS: usize = 800;

/// Tokens of framing per message (role markers, separators).
pub const MESSAGE_OVERHEAD_TOKENS: usize = 4;

/// Whether `c` is in a script tokenizers split about one token per character (Han, kana,
/// Hangul, CJK radicals and punctuation, full-width forms).
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x1100..=0x11FF      // Hangul Jamo
        | 0x2E80..=0x303F    // CJK radicals, Kangxi radicals, CJK symbols and punctuation
        | 0x3040..=0x30FF    // hiragana, katakana
        | 0x3130..=0x318F    // Hangul compatibility Jamo
        | 0x3400..=0x4DBF    // CJK extension A
        | 0x4E00..=0x9FFF    // CJK unified ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xF900..=0xFAFF    // CJK compatibility ideographs
        | 0xFF00..=0xFFEF    // half- and full-width forms
        | 0x20000..=0x2FFFF) // CJK extensions B and later
}

/// The heuristic estimate: about one token per CJK character, four characters per token for
/// the rest (rounded up). Cheap enough for every step of a long conversation.
pub fn estimate_tokens(text: &str) -> usize {
    if text.is_ascii() {
        return text.len().div_ceil(4);
    }
    let (mut cjk, mut other) = (0usize, 0usize);
    for c in text.chars() {
        if is_cjk(c) {
            cjk += 1;
        } else {
            other += 1;
        }
    }
    cjk + other.div_ceil(4)
}

/// The byte length of the longest prefix of `text` whose [`estimate_tokens`] is at most
/// `max_tokens`. Never splits a character; for cutting text to a budget.
pub fn prefix_within_tokens(text: &str, max_tokens: usize) -> usize {
    let (mut cjk, mut other) = (0usize, 0usize);
    let mut end = 0;
    for (at, c) in text.char_indices() {
        if is_cjk(c) {
            cjk += 1;
        } else {
            other += 1;
        }
        if cjk + other.div_ceil(4) > max_tokens {
            break;
        }
        end = at + c.len_utf8();
    }
    end
}

fn json_tokens(value: &serde_json::Value) -> usize {
    match value {
        serde_json::Value::String(text) => estimate_tokens(text),
        other => estimate_tokens(&other.to_string()),
    }
}

fn block_tokens(block: &Block) -> usize {
    match block {
        Block::Text { text } => estimate_tokens(text),
        Block::Thinking { thinking, .. } => estimate_tokens(thinking),
        Block::ToolUse { name, input, .. } => estimate_tokens(name) + json_tokens(input) + MESSAGE_OVERHEAD_TOKENS,
        Block::ToolResult { content, .. } => content.iter().map(block_tokens).sum::<usize>() + MESSAGE_OVERHEAD_TOKENS,
        Block::Image { .. } | Block::Audio { .. } | Block::File { .. } => MEDIA_TOKENS,
    }
}

/// Heuristic tokens of one message, framing included.
pub fn estimate_msg(msg: &Msg) -> usize {
    MESSAGE_OVERHEAD_TOKENS + msg.content.iter().map(block_tokens).sum::<usize>()
}

/// Heuristic tokens of a whole request: system prompt, messages and tool schemas.
pub fn estimate_request(request: &ChatRequest) -> usize {
    let system: usize = request.system.parts.iter().map(|p| estimate_tokens(&p.text)).sum();
    let messages: usize = request.messages.iter().map(|m| estimate_msg(m)).sum();
    let tools: usize = request
        .tools
        .iter()
        .map(|t| estimate_tokens(&t.name) + estimate_tokens(&t.description) + json_tokens(&t.input_schema))
        .sum();
    system + messages + tools
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn heuristic_counts_cjk_per_character() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("abcd"), 1);
        assert_eq!(estimate_tokens("abcde"), 2);
        assert_eq!(estimate_tokens("你好世界"), 4);
        assert_eq!(estimate_tokens("こんにちは"), 5);
        assert_eq!(estimate_tokens("Rust语言 ok"), 2 + 2); // 2 CJK + "Rust ok" (7 chars → 2)
        assert_eq!(estimate_tokens("héllo wörld"), 3);
    }

    #[test]
    fn hangul_jamo_and_radicals_count_per_character() {
        assert_eq!(estimate_tokens("\u{1100}\u{1161}"), 2);
        assert_eq!(estimate_tokens("\u{2F00}\u{3131}"), 2);
    }

    #[test]
    fn prefixes_fit_their_budget_and_never_split_a_character() {
        let text = "abcdabcd你好世界";
        assert_eq!(prefix_within_tokens(text, 0), 0);
        assert_eq!(prefix_within_tokens(text, 2), 8);
        assert_eq!(prefix_within_tokens(text, 4), 8 + 2 * 3);
        assert_eq!(prefix_within_tokens(text, 100), text.len());
        for budget in 0..8 {
            let end = prefix_within_tokens(text, budget);
            assert!(text.is_char_boundary(end));
            assert!(estimate_tokens(&text[..end]) <= budget);
        }
    }

    #[test]
    fn requests_count_system_messages_and_tools() {
        let request = ChatRequest {
            system: crate::model::SystemPrompt::new("a".repeat(40)),
            messages: vec![
                Arc::new(Msg::user("b".repeat(40))),
                Arc::new(Msg::tool_result("c1", vec![Block::text("c".repeat(8))], false)),
            ],
            ..ChatRequest::default()
        };
        // system 10 + user (4 + 10) + tool (4 + 2 + 4)
        assert_eq!(estimate_request(&request), 34);
    }
}
