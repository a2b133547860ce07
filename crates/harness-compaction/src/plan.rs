//! Choosing what a compaction replaces: the cut point and the fate of every message before it.
//!
//! Pure functions over the message list; no IO, no model.

use super::estimate::TokenEstimator;
use super::summary::is_summary;
use harness_core::{Msg, Role};
use std::collections::HashMap;
use std::sync::Arc;

/// How much of the end of the context to keep verbatim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Keep {
    /// Keep this many messages (used when `tokens` is 0).
    pub(crate) messages: usize,
    /// When non-zero, keep the longest tail of at most this many tokens.
    pub(crate) tokens: u64,
    /// Shrink the tail until it is at most this many tokens (never below one message).
    pub(crate) token_cap: Option<u64>,
    /// Keep at most this many messages (a forced compaction halves the context).
    pub(crate) max_messages: Option<usize>,
}

/// What one compaction does, by index into the context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The kept tail is `messages[cut..]`.
    pub(crate) cut: usize,
    /// Earlier summaries before the cut: folded into the new summary.
    pub(crate) previous: Vec<usize>,
    /// Raw messages before the cut that the new summary replaces.
    pub(crate) replaced: Vec<usize>,
    /// Messages before the cut kept verbatim (pinned, the newest user message, and the
    /// tool calls and results that belong with them), placed after the summary in order.
    pub(crate) protected: Vec<usize>,
}

/// Plans a compaction of `messages`, or `None` when nothing raw can be replaced.
///
/// Invariants of the result: the cut never separates a tool call from its result; a pinned
/// message, and the newest user message, are never replaced (nor is any message sharing a
/// tool call with them); an earlier summary is only ever replaced together with at least
/// one raw message, so a summary is never summarized alone.
pub(crate) fn plan(messages: &[Arc<Msg>], keep: Keep, estimator: TokenEstimator) -> Option<Plan> {
    let total = messages.len();
    if total < 2 {
        return None;
    }
    let tail = tail_len(messages, keep, estimator);
    let desired = total.checked_sub(tail).filter(|cut| *cut > 0)?;
    let cut = pair_safe_cut(messages, desired)?;

    // Group the prefix into units: a tool call and its results stand or fall together.
    let mut unit_of = Vec::with_capacity(cut);
    let mut call_unit: HashMap<&str, usize> = HashMap::new();
    let mut units = 0;
    for msg in &messages[..cut] {
        let unit = msg
            .tool_result_ids()
            .find_map(|id| call_unit.get(id).copied())
            .unwrap_or_else(|| {
                units += 1;
                units - 1
            });
        for call in msg.tool_calls() {
            call_unit.insert(call.id, unit);
        }
        unit_of.push(unit);
    }
    let newest_user = messages
        .iter()
        .rposition(|msg| msg.role == Role::User && !is_summary(msg));
    let mut protected_unit = vec![false; units];
    for (at, msg) in messages[..cut].iter().enumerate() {
        if msg.is_pinned() || Some(at) == newest_user {
            protected_unit[unit_of[at]] = true;
        }
    }
    let mut plan = Plan {
        cut,
        previous: Vec::new(),
        replaced: Vec::new(),
        protected: Vec::new(),
    };
    for (at, msg) in messages[..cut].iter().enumerate() {
        if protected_unit[unit_of[at]] {
            plan.protected.push(at);
        } else if is_summary(msg) {
            plan.previous.push(at);
        } else {
            plan.replaced.push(at);
        }
    }
    (!plan.replaced.is_empty()).then_some(plan)
}

fn tail_len(messages: &[Arc<Msg>], keep: Keep, estimator: TokenEstimator) -> usize {
    let total = messages.len();
    let mut tail = if keep.tokens > 0 {
        let mut sum = 0;
        let mut count = 0;
        for msg in messages.iter().rev() {
            let tokens = estimator(msg);
            if count > 0 && sum + tokens > keep.tokens {
                break;
            }
            sum += tokens;
            count += 1;
        }
        count
    } else {
        keep.messages.min(total)
    };
    if let Some(cap) = keep.token_cap {
        let mut sum: u64 = messages[total - tail..].iter().map(|msg| estimator(msg)).sum();
        while tail > 1 && sum > cap {
            sum -= estimator(&messages[total - tail]);
            tail -= 1;
        }
    }
    if let Some(max) = keep.max_messages {
        tail = tail.min(max);
    }
    tail.max(1)
}

/// The cut nearest to `desired` (preferring a longer tail) that no tool call and its result
/// straddle, or `None` when there is none between the first and the last message.
fn pair_safe_cut(messages: &[Arc<Msg>], desired: usize) -> Option<usize> {
    let total = messages.len();
    // A call at `a` answered at `b > a` forbids every cut in `a+1..=b`.
    let mut called_at: HashMap<&str, usize> = HashMap::new();
    let mut forbidden = vec![0i64; total + 2];
    for (at, msg) in messages.iter().enumerate() {
        for call in msg.tool_calls() {
            called_at.insert(call.id, at);
        }
        for id in msg.tool_result_ids() {
            if let Some(&call) = called_at.get(id)
                && call < at
            {
                forbidden[call + 1] += 1;
                forbidden[at + 1] -= 1;
            }
        }
    }
    let mut open = 0;
    let valid: Vec<bool> = forbidden[..=total]
        .iter()
        .map(|delta| {
            open += delta;
            open == 0
        })
        .collect();
    (1..=desired).rev().chain(desired + 1..total).find(|cut| valid[*cut])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::estimate_msg_tokens;
    use harness_core::Block;

    fn call(id: &str) -> Msg {
        Msg::new(
            Role::Assistant,
            vec![Block::ToolUse {
                id: id.into(),
                name: "t".into(),
                input: serde_json::json!({}),
            }],
        )
    }

    fn result(id: &str) -> Msg {
        Msg::tool_result(id, vec![Block::text("r")], false)
    }

    fn keep(messages: usize) -> Keep {
        Keep {
            messages,
            tokens: 0,
            token_cap: None,
            max_messages: None,
        }
    }

    /// A plan with each message named: (cut, previous, replaced, protected).
    type Named = (usize, Vec<String>, Vec<String>, Vec<String>);

    /// Runs a plan and names each message by its text (or call id) for readable asserts.
    fn check(messages: Vec<Msg>, keep: Keep) -> Option<Named> {
        let messages: Vec<Arc<Msg>> = messages.into_iter().map(Arc::new).collect();
        let name = |at: &usize| {
            let msg = &messages[*at];
            let text = msg.text();
            if text.is_empty() {
                msg.tool_calls()
                    .map(|c| format!("call:{}", c.id))
                    .chain(msg.tool_result_ids().map(|id| format!("result:{id}")))
                    .collect::<Vec<_>>()
                    .join(",")
            } else {
                text
            }
        };
        let plan = plan(&messages, keep, estimate_msg_tokens)?;
        Some((
            plan.cut,
            plan.previous.iter().map(name).collect(),
            plan.replaced.iter().map(name).collect(),
            plan.protected.iter().map(name).collect(),
        ))
    }

    #[test]
    fn the_cut_never_splits_a_call_from_its_result() {
        // Keeping 2 would start the tail at result:c2; the cut moves back before call:c2.
        let messages = vec![
            Msg::user("u1"),
            Msg::assistant("a1"),
            Msg::user("u2"),
            call("c2"),
            result("c2"),
            Msg::assistant("a2"),
        ];
        let (cut, _, replaced, protected) = check(messages, keep(2)).unwrap_or_default();
        assert_eq!(cut, 3);
        assert_eq!(replaced, ["u1", "a1"]);
        assert_eq!(protected, ["u2"]);
    }

    #[test]
    fn without_a_safe_cut_behind_the_tail_the_cut_moves_forward() {
        let mut parallel = call("c1");
        parallel.content.extend(call("c2").content);
        let messages = vec![
            parallel,
            result("c1"),
            result("c2"),
            Msg::assistant("done"),
            Msg::user("u"),
        ];
        // Desired cut 1 or 2 splits c1/c2; the first safe one behind is none, ahead it is 3.
        let (cut, _, replaced, protected) = check(messages, keep(4)).unwrap_or_default();
        assert_eq!(cut, 3);
        assert_eq!(replaced, ["call:c1,call:c2", "result:c1", "result:c2"]);
        assert!(protected.is_empty());
    }

    #[test]
    fn pinned_units_and_the_newest_user_message_are_kept() {
        let mut pinned_result = result("c1");
        pinned_result
            .metadata
            .insert(harness_core::meta::PINNED.into(), true.into());
        let messages = vec![
            Msg::user("rule: always answer in French").pinned(),
            Msg::assistant("ok"),
            call("c1"),
            pinned_result,
            Msg::user("newest"),
            call("c3"),
            result("c3"),
            Msg::assistant("a"),
        ];
        let (cut, _, replaced, protected) = check(messages, keep(2)).unwrap_or_default();
        assert_eq!(cut, 5);
        assert_eq!(replaced, ["ok"]);
        assert_eq!(
            protected,
            ["rule: always answer in French", "call:c1", "result:c1", "newest"]
        );
    }

    #[test]
    fn a_summary_is_never_summarized_alone() {
        let mut summary = Msg::user("old summary");
        summary
            .metadata
            .insert(crate::SUMMARY_META.into(), serde_json::json!({}));
        let alone = vec![summary.clone(), Msg::user("u"), Msg::assistant("a")];
        assert_eq!(check(alone, keep(2)), None);
        let with_raw = vec![summary, Msg::assistant("raw"), Msg::user("u"), Msg::assistant("a")];
        let (_, previous, replaced, _) = check(with_raw, keep(2)).unwrap_or_default();
        assert_eq!(
            (previous, replaced),
            (vec!["old summary".to_owned()], vec!["raw".to_owned()])
        );
    }

    #[test]
    fn token_budgets_shape_the_tail() {
        let long = "x".repeat(400); // ~100 tokens
        let messages = || {
            vec![
                Msg::user("u1"),
                Msg::assistant(long.clone()),
                Msg::user("u2"),
                Msg::assistant(long.clone()),
                Msg::user("u3"),
            ]
        };
        let by_tokens = Keep { tokens: 120, ..keep(0) };
        assert_eq!(check(messages(), by_tokens).map(|p| p.0), Some(2));
        let capped = Keep {
            token_cap: Some(10),
            ..keep(4)
        };
        assert_eq!(check(messages(), capped).map(|p| p.0), Some(4));
        let halved = Keep {
            max_messages: Some(2),
            ..keep(4)
        };
        assert_eq!(check(messages(), halved).map(|p| p.0), Some(3));
    }
}
