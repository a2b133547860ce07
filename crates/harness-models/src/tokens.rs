//! Token estimation for budgets.
//!
//! The heuristic is the workspace's one estimator and lives in `harness-core` (memory needs it
//! without a model crate): [`harness_core::estimate_tokens`]. Memory budgets, compaction
//! triggers, eviction and the prompt budget all count with it.
//!
//! Three levels, cheapest first:
//! - [`estimate_tokens`]: a heuristic (about one token per CJK character, four characters per
//!   token otherwise). Microseconds for a long history; always available.
//! - [`count_tokens`]: tiktoken's o200k BPE once [`warm_up`] has loaded it (about a second in
//!   debug builds, so call it on a background thread at startup); the heuristic until then.
//!   Qwen, DeepSeek and Claude tokenizers differ from o200k, so this is an estimate too.
//! - [`TokenCounter`]: the heuristic, corrected by what the provider last reported — the
//!   number budgets should use for whole requests.

use harness_core::{ChatRequest, Usage, estimate_request, estimate_tokens};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use tiktoken_rs::CoreBPE;

static O200K: OnceLock<Option<CoreBPE>> = OnceLock::new();

/// Loads the o200k tokenizer (blocking; about a second in a debug build). Safe to call from
/// any thread, any number of times; later calls return at once.
///
/// ```no_run
/// std::thread::spawn(harness_models::warm_up);
/// ```
pub fn warm_up() {
    O200K.get_or_init(|| match tiktoken_rs::o200k_base() {
        Ok(bpe) => Some(bpe),
        Err(err) => {
            tracing::warn!(error = %err, "o200k tokenizer unavailable; using the heuristic");
            None
        }
    });
}

/// Whether [`warm_up`] has finished loading the tokenizer.
pub fn is_warm() -> bool {
    matches!(O200K.get(), Some(Some(_)))
}

/// o200k token count of `text` when the tokenizer is loaded, else [`estimate_tokens`]. Never
/// loads the tokenizer itself, so it never stalls a hot path.
pub fn count_tokens(text: &str) -> usize {
    match O200K.get() {
        Some(Some(bpe)) => bpe.encode_ordinary(text).len(),
        _ => estimate_tokens(text),
    }
}

/// Fixed-point scale of the correction ratio.
const RATIO_ONE: u64 = 1 << 16;

/// A request estimator calibrated by provider usage.
///
/// After each model call, [`observe`](Self::observe) the heuristic estimate of the request
/// and the `input_tokens` the provider reported; later estimates are scaled by a smoothed
/// ratio of the two, so budgets converge on the real tokenizer of the model in use. Shared
/// freely (`&self`, lock-free); one counter per model.
#[derive(Debug)]
pub struct TokenCounter {
    /// reported / estimated, in 1/65536 units.
    ratio: AtomicU64,
}

impl Default for TokenCounter {
    fn default() -> Self {
        Self {
            ratio: AtomicU64::new(RATIO_ONE),
        }
    }
}

impl TokenCounter {
    /// The current correction ratio (reported / estimated); 1.0 before any observation.
    pub fn ratio(&self) -> f64 {
        self.ratio.load(Ordering::Relaxed) as f64 / RATIO_ONE as f64
    }

    /// Scales a heuristic estimate by the ratio.
    pub fn correct(&self, estimate: usize) -> usize {
        let scaled = (estimate as u128 * u128::from(self.ratio.load(Ordering::Relaxed))) / u128::from(RATIO_ONE);
        usize::try_from(scaled).unwrap_or(usize::MAX)
    }

    /// The corrected estimate of `request`.
    pub fn estimate_request(&self, request: &ChatRequest) -> usize {
        self.correct(estimate_request(request))
    }

    /// The corrected estimate of `text`.
    pub fn estimate_text(&self, text: &str) -> usize {
        self.correct(estimate_tokens(text))
    }

    /// Reconciles with a provider report: `estimated` is the heuristic estimate of the request
    /// ([`estimate_request`]), `usage` what the provider counted. Ignored when either is zero.
    /// The ratio moves halfway towards the new observation and stays within 0.25–4.
    pub fn observe(&self, estimated: usize, usage: &Usage) {
        if estimated == 0 || usage.input_tokens == 0 {
            return;
        }
        let observed = (u128::from(usage.input_tokens) * u128::from(RATIO_ONE)) / estimated as u128;
        let observed = u64::try_from(observed)
            .unwrap_or(u64::MAX)
            .clamp(RATIO_ONE / 4, RATIO_ONE * 4);
        // A lost race only drops one observation; the ratio stays a valid smoothed value.
        let old = self.ratio.load(Ordering::Relaxed);
        self.ratio.store(old / 2 + observed / 2, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn o200k_counts_after_warm_up() {
        warm_up();
        assert!(is_warm());
        assert_eq!(count_tokens("hello world"), 2);
        let chinese = count_tokens("今天天气很好，我们去公园散步吧。");
        assert!((8..=16).contains(&chinese), "{chinese}");
    }

    #[test]
    fn counter_converges_on_reported_usage() {
        let counter = TokenCounter::default();
        assert_eq!(counter.correct(1000), 1000);
        let usage = |input_tokens| Usage {
            input_tokens,
            ..Usage::default()
        };
        for _ in 0..20 {
            counter.observe(1000, &usage(1500));
        }
        assert!((counter.ratio() - 1.5).abs() < 0.01, "{}", counter.ratio());
        assert!((2990..=3000).contains(&counter.correct(2000)));
        counter.observe(0, &usage(10));
        counter.observe(10, &usage(0));
        assert!((counter.ratio() - 1.5).abs() < 0.01);
        for _ in 0..20 {
            counter.observe(1, &usage(1_000_000));
        }
        assert!((counter.ratio() - 4.0).abs() < 0.01, "clamped: {}", counter.ratio());
    }
}
