//! `[model]` in harness.toml: how every model of the agent is reached.
//!
//! ```toml
//! [model]
//! context_window = 128000   # overrides the table of known models
//! vision = true             # the model takes images (default: guessed from its name)
//! idle_timeout = "120s"     # no byte for this long ends an attempt
//! max_retries = 3           # retries after the first attempt
//! max_retry_time = "300s"   # no retry starts after this much time on one call
//! fallback = ["anthropic:claude-sonnet-4-5", "gemini:gemini-2.5-flash"]  # tried in order when the main model is down
//! fallback_after = 1        # attempts on an unreachable provider before moving on
//! ```
//!
//! The main model's call goes to the next `fallback` model when it fails after its retries
//! with an outage, a 5xx or a rate limit, or when its provider cannot be reached
//! (connection failure, idle timeout) `fallback_after` times; never for rejected
//! credentials or a malformed request (see `harness_models::FallbackChain`). Each entry is
//! a spec the operator wrote, built like the main model: its own preset's key and base URL.
//!
//! Durations are whole seconds (`90`) or text (`"90s"`, `"2m"`, `"500ms"`).

use harness_models::{RetryObserver, RetryPolicy, TransportOptions};
use serde::{Deserialize, Deserializer};
use std::time::Duration;

/// `[model]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// The model's context window in tokens (overrides the known-models table).
    pub context_window: Option<u64>,
    /// Whether the model takes images (image parts of the OpenAI-compatible API are refused
    /// when it does not); unset, the provider client guesses from the model's name.
    pub vision: Option<bool>,
    /// No byte for this long (response headers or between reads) ends an attempt.
    #[serde(default, deserialize_with = "duration")]
    pub idle_timeout: Option<Duration>,
    /// Retries after the first attempt.
    pub max_retries: Option<u32>,
    /// The bound on one call's total time across retries.
    #[serde(default, deserialize_with = "duration")]
    pub max_retry_time: Option<Duration>,
    /// Models (`provider:model` specs) tried in order when the main model is down.
    #[serde(default)]
    pub fallback: Vec<String>,
    /// Attempts on an unreachable provider (connection failure, idle timeout) before the
    /// next fallback model is tried (default [`DEFAULT_FALLBACK_AFTER`]).
    pub fallback_after: Option<u32>,
}

/// The default of `[model] fallback_after`.
pub const DEFAULT_FALLBACK_AFTER: u32 = 1;

impl ModelSection {
    /// The transport settings for `harness_models`, defaults where unset.
    pub fn transport(&self, observer: Option<RetryObserver>) -> TransportOptions {
        let mut retry = RetryPolicy::default();
        if let Some(max) = self.max_retries {
            retry = retry.max_retries(max);
        }
        if let Some(total) = self.max_retry_time {
            retry = retry.max_elapsed(total);
        }
        TransportOptions::default()
            .retry(retry)
            .idle_timeout(self.idle_timeout.unwrap_or(harness_models::DEFAULT_IDLE_TIMEOUT))
            .observer(observer)
    }

    /// The transport of a model that has a fallback after it: an unreachable provider gets
    /// `fallback_after` attempts, not the whole retry budget.
    pub fn transport_with_fallback(&self, observer: Option<RetryObserver>) -> TransportOptions {
        let options = self.transport(observer);
        let retry = options
            .retry
            .unreachable_attempts(self.fallback_after.unwrap_or(DEFAULT_FALLBACK_AFTER));
        options.retry(retry)
    }

    /// What is out of range, as `key: reason`.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.fallback_after == Some(0) {
            return Err("fallback_after must be at least 1".into());
        }
        if let Some(bad) = self
            .fallback
            .iter()
            .find_map(|spec| harness_models::ModelSpec::parse(spec).err())
        {
            return Err(format!("fallback: {bad}"));
        }
        if self.idle_timeout.is_some_and(|d| d.is_zero()) {
            return Err("idle_timeout must be longer than 0s".into());
        }
        if self.max_retry_time.is_some_and(|d| d.is_zero()) {
            return Err("max_retry_time must be longer than 0s (use max_retries = 0 for no retries)".into());
        }
        if self.context_window == Some(0) {
            return Err("context_window must be at least 1".into());
        }
        Ok(())
    }
}

/// Deserialises an optional duration written as seconds (a number) or as text (`"30s"`,
/// `"2m"`), for sections that take durations.
///
/// # Errors
/// A value that is neither.
pub fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Duration>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Seconds(u64),
        Text(String),
    }
    match Raw::deserialize(deserializer)? {
        Raw::Seconds(seconds) => Ok(Some(Duration::from_secs(seconds))),
        Raw::Text(text) => harness_memory::parse_duration(&text)
            .map(Some)
            .map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_parses_durations_and_maps_onto_transport_options() {
        let section: ModelSection =
            toml::from_str("context_window = 128000\nidle_timeout = \"2s\"\nmax_retries = 1\nmax_retry_time = 30\n")
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(section.context_window, Some(128_000));
        let options = section.transport(None);
        assert_eq!(options.idle_timeout, Duration::from_secs(2));
        assert_eq!(options.retry.max_retries, 1);
        assert_eq!(options.retry.max_elapsed, Duration::from_secs(30));
        let defaults = ModelSection::default().transport(None);
        assert_eq!(defaults.idle_timeout, harness_models::DEFAULT_IDLE_TIMEOUT);
        assert_eq!(defaults.retry, RetryPolicy::default());
    }

    #[test]
    fn the_fallback_keys_parse_and_limit_attempts_on_an_unreachable_provider() {
        let section: ModelSection =
            toml::from_str("fallback = [\"anthropic:claude\", \"gemini:gemini-2.5-flash\"]\nfallback_after = 2\n")
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(section.fallback, ["anthropic:claude", "gemini:gemini-2.5-flash"]);
        assert_eq!(
            section.transport_with_fallback(None).retry.unreachable_attempts,
            Some(2)
        );
        assert_eq!(section.transport(None).retry.unreachable_attempts, None);
        let default = ModelSection::default().transport_with_fallback(None);
        assert_eq!(default.retry.unreachable_attempts, Some(DEFAULT_FALLBACK_AFTER));
        let zero: ModelSection = toml::from_str("fallback_after = 0\n").unwrap_or_default();
        assert!(zero.check().is_err_and(|e| e.contains("fallback_after")));
        let bad: ModelSection = toml::from_str("fallback = [\"nope\"]\n").unwrap_or_default();
        assert!(
            bad.check()
                .is_err_and(|e| e.starts_with("fallback: invalid model spec `nope`")),
            "{:?}",
            bad.check()
        );
    }

    #[test]
    fn bad_values_are_named() {
        let err = toml::from_str::<ModelSection>("idle_timeout = \"soon\"\n").err();
        assert!(err.map(|e| e.to_string()).unwrap_or_default().contains("soon"));
        let err = toml::from_str::<ModelSection>("idle_timeuot = 1\n").err();
        assert!(err.map(|e| e.to_string()).unwrap_or_default().contains("idle_timeuot"));
        let zero: ModelSection = toml::from_str("idle_timeout = 0\n").unwrap_or_default();
        assert!(zero.check().is_err_and(|e| e.contains("idle_timeout")));
    }
}
