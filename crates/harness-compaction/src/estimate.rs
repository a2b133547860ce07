//! Token estimates for budgets and triggers, used where the provider reported no usage.

use harness_core::{Msg, Role};
use std::sync::Arc;

/// Estimates the tokens of one message. The default is [`estimate_msg_tokens`]; the harness
/// may plug in a tokenizer-backed estimate with
/// [`Compaction::with_estimator`](super::Compaction::with_estimator).
pub type TokenEstimator = fn(&Msg) -> u64;

/// Tokens of `text` by the workspace's one estimator ([`harness_core::estimate_tokens`]:
/// one token per CJK character, four characters per token otherwise).
pub fn estimate_text_tokens(text: &str) -> u64 {
    u64::try_from(harness_core::estimate_tokens(text)).unwrap_or(u64::MAX)
}

/// The default [`TokenEstimator`]: [`harness_core::estimate_msg`] (text, reasoning, tool
/// calls and results, framing; media at a flat size).
pub fn estimate_msg_tokens(msg: &Msg) -> u64 {
    u64::try_from(harness_core::estimate_msg(msg)).unwrap_or(u64::MAX)
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
