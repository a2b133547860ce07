//! [`CompactionConfig`] and [`TruncateArgsConfig`]: the `[compaction]` table of `harness.toml`.

use serde::{Deserialize, Serialize};

/// The summary prompt used when none is configured. `{messages}` is replaced by the previous
/// summary (when there is one) and the full text of every message being replaced.
///
/// The sections are fixed so that what users complain about losing — the standing rules they
/// stated, the files touched, the errors seen and the open tasks — has a named place.
pub const DEFAULT_SUMMARY_PROMPT: &str = "\
You are compacting the history of a conversation between a user and an AI agent. The agent will \
continue the work with only your summary, the pinned messages and the most recent messages, so \
anything you leave out is lost to it.

Write the summary in exactly these sections, with these headings, in this order:

## Intent
What the user wants overall and in the current task, in their terms.

## Standing rules and constraints
Every rule, preference, constraint and prohibition the user stated, verbatim where possible \
(\"always…\", \"never…\", \"don't…\", formats, limits, deadlines). Never drop or soften one.

## Decisions
What was decided or agreed, and why.

## Files and artefacts
Every file path, URL, identifier, command, name and number that matters, exactly as written, \
with what was done to it.

## Errors
Errors and failed attempts, what caused them and how they were resolved (or that they were not).

## Open tasks
What remains to do, including promises the agent made.

## Next step
The very next action the agent was about to take.

Rules: write \"none\" under a section with nothing to report. If a previous summary is given, \
carry forward everything in it that still holds and update what changed; the previous summary \
and the messages together are the whole history. Prefer exact quotes for rules, paths and values. \
Do not invent anything. Do not address the user.

{messages}";

/// Placeholder in a summary prompt that receives the messages to summarize.
pub const MESSAGES_PLACEHOLDER: &str = "{messages}";

/// Settings of conversation compaction (`[compaction]` in `harness.toml`).
///
/// Compaction runs before a reasoning step when either trigger fires (a trigger of `0` is
/// off): it replaces the older part of the model-visible context with one summary message,
/// keeping pinned messages and a recent tail verbatim. The raw transcript is never changed.
///
/// ```
/// use harness_compaction::CompactionConfig;
/// let config = CompactionConfig::default().trigger_messages(30).keep_messages(10);
/// assert_eq!((config.trigger_messages, config.keep_messages, config.trigger_tokens), (30, 10, 80_000));
/// let parsed: CompactionConfig = toml::from_str("trigger_messages = 30\nkeep_messages = 10").unwrap();
/// assert_eq!(parsed, config);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct CompactionConfig {
    /// Compact when the context holds at least this many messages (`0` = off). Default 50.
    pub trigger_messages: usize,
    /// Compact when the context reaches this many tokens (`0` = off). Default 80,000. The
    /// count is the provider-reported prompt size of the last model call plus an estimate of
    /// the messages added since.
    pub trigger_tokens: u64,
    /// Messages kept verbatim at the end of the context. Default 20. When only the token
    /// trigger is on, the kept tail is also capped at half of `trigger_tokens`, so one
    /// compaction always brings the context well under the trigger.
    pub keep_messages: usize,
    /// When non-zero, keep a tail of at most this many (estimated) tokens instead of
    /// `keep_messages` messages. Default 0.
    pub keep_tokens: u64,
    /// Call the [`CompactionHook`](super::CompactionHook) (memory flush) with the messages
    /// about to be replaced. Default true. Without a hook this does nothing.
    pub flush_before_compact: bool,
    /// Write the replaced messages as JSONL under
    /// `agents/<agentId>/compacted/<sessionId>/` in the caller's namespace before replacing
    /// them. Default true.
    pub offload_before_compact: bool,
    /// The summary prompt; must contain `{messages}`. Default [`DEFAULT_SUMMARY_PROMPT`].
    pub summary_prompt: String,
    /// A cheaper model for summaries, as a `provider:model` spec. `None` uses the agent's
    /// model. The harness resolves it; the middleware takes the resolved model.
    pub model: Option<String>,
    /// The largest (estimated) input of one summary request. A longer history is summarized
    /// in several requests, each folding the previous request's summary forward, so no
    /// message is ever dropped unread. Default 64,000.
    pub summary_chunk_tokens: u64,
    /// The argument-truncation pre-pass (no model call); `None` = off (default).
    pub truncate_args: Option<TruncateArgsConfig>,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        Self {
            trigger_messages: 50,
            trigger_tokens: 80_000,
            keep_messages: 20,
            keep_tokens: 0,
            flush_before_compact: true,
            offload_before_compact: true,
            summary_prompt: DEFAULT_SUMMARY_PROMPT.to_owned(),
            model: None,
            summary_chunk_tokens: 64_000,
            truncate_args: None,
        }
    }
}

/// Settings of the argument-truncation pre-pass (`[compaction.truncate_args]`).
///
/// Before the compaction check of every step, and before a forced compaction, string values
/// longer than `max_param_chars` inside the tool-call arguments of older messages (typically
/// `write_file` / `edit_file` bodies) are cut to `max_param_chars` characters ending in a
/// marker. It needs no model call, so it runs first; often it makes a summary unnecessary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct TruncateArgsConfig {
    /// Run when the context holds at least this many messages (`0` = off). Default 25.
    pub trigger_messages: usize,
    /// Run when the context reaches this many tokens (`0` = off). Default 40,000.
    pub trigger_tokens: u64,
    /// The most recent messages are never truncated. Default 20.
    pub keep_messages: usize,
    /// The longest argument value kept whole, in characters; longer ones are cut to this
    /// length, marker included. Default 2,000; at least 64.
    pub max_param_chars: usize,
    /// The marker that ends a cut value. `{total}` becomes the original length in characters.
    pub marker: String,
}

impl Default for TruncateArgsConfig {
    fn default() -> Self {
        Self {
            trigger_messages: 25,
            trigger_tokens: 40_000,
            keep_messages: 20,
            max_param_chars: 2_000,
            marker: "…[argument truncated; it had {total} characters; the full call is in the session log]".to_owned(),
        }
    }
}

/// Why a [`CompactionConfig`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CompactionConfigError {
    /// The summary prompt has no `{messages}` placeholder. Add it where the history goes.
    #[error("compaction summary_prompt must contain the {{messages}} placeholder")]
    MissingPlaceholder,
    /// Both `keep_messages` and `keep_tokens` are zero: nothing would be kept verbatim.
    #[error("compaction keeps nothing verbatim; set keep_messages or keep_tokens above 0")]
    NothingKept,
    /// The kept tail is not smaller than the trigger, so every step would compact again.
    #[error("compaction {keep} ({kept}) must be below {trigger} ({at})")]
    KeepNotBelowTrigger {
        /// The keep setting's name.
        keep: &'static str,
        /// Its value.
        kept: u64,
        /// The trigger setting's name.
        trigger: &'static str,
        /// Its value.
        at: u64,
    },
    /// `summary_chunk_tokens` is too small to hold anything useful.
    #[error("compaction summary_chunk_tokens ({0}) must be at least 1000")]
    ChunkTooSmall(u64),
    /// `truncate_args.max_param_chars` is shorter than a marker.
    #[error("compaction truncate_args.max_param_chars ({0}) must be at least 64")]
    ParamLimitTooSmall(usize),
    /// The truncation marker is longer than `max_param_chars` allows.
    #[error("compaction truncate_args.marker must be shorter than max_param_chars / 2")]
    MarkerTooLong,
}

impl CompactionConfig {
    /// Sets [`trigger_messages`](Self::trigger_messages).
    pub fn trigger_messages(mut self, messages: usize) -> Self {
        self.trigger_messages = messages;
        self
    }

    /// Sets [`trigger_tokens`](Self::trigger_tokens).
    pub fn trigger_tokens(mut self, tokens: u64) -> Self {
        self.trigger_tokens = tokens;
        self
    }

    /// Sets [`keep_messages`](Self::keep_messages).
    pub fn keep_messages(mut self, messages: usize) -> Self {
        self.keep_messages = messages;
        self
    }

    /// Sets [`keep_tokens`](Self::keep_tokens).
    pub fn keep_tokens(mut self, tokens: u64) -> Self {
        self.keep_tokens = tokens;
        self
    }

    /// Sets [`flush_before_compact`](Self::flush_before_compact).
    pub fn flush_before_compact(mut self, flush: bool) -> Self {
        self.flush_before_compact = flush;
        self
    }

    /// Sets [`offload_before_compact`](Self::offload_before_compact).
    pub fn offload_before_compact(mut self, offload: bool) -> Self {
        self.offload_before_compact = offload;
        self
    }

    /// Sets [`summary_prompt`](Self::summary_prompt).
    pub fn summary_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.summary_prompt = prompt.into();
        self
    }

    /// Sets [`model`](Self::model).
    pub fn model(mut self, spec: impl Into<String>) -> Self {
        self.model = Some(spec.into());
        self
    }

    /// Sets [`summary_chunk_tokens`](Self::summary_chunk_tokens).
    pub fn summary_chunk_tokens(mut self, tokens: u64) -> Self {
        self.summary_chunk_tokens = tokens;
        self
    }

    /// Turns on the argument-truncation pre-pass.
    pub fn truncate_args(mut self, truncate: TruncateArgsConfig) -> Self {
        self.truncate_args = Some(truncate);
        self
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// [`CompactionConfigError`] naming the first setting that cannot work.
    pub fn validate(&self) -> Result<(), CompactionConfigError> {
        if !self.summary_prompt.contains(MESSAGES_PLACEHOLDER) {
            return Err(CompactionConfigError::MissingPlaceholder);
        }
        if self.keep_messages == 0 && self.keep_tokens == 0 {
            return Err(CompactionConfigError::NothingKept);
        }
        if self.keep_tokens == 0 && self.trigger_messages > 0 && self.keep_messages >= self.trigger_messages {
            return Err(CompactionConfigError::KeepNotBelowTrigger {
                keep: "keep_messages",
                kept: self.keep_messages as u64,
                trigger: "trigger_messages",
                at: self.trigger_messages as u64,
            });
        }
        if self.keep_tokens > 0 && self.trigger_tokens > 0 && self.keep_tokens >= self.trigger_tokens {
            return Err(CompactionConfigError::KeepNotBelowTrigger {
                keep: "keep_tokens",
                kept: self.keep_tokens,
                trigger: "trigger_tokens",
                at: self.trigger_tokens,
            });
        }
        if self.summary_chunk_tokens < 1_000 {
            return Err(CompactionConfigError::ChunkTooSmall(self.summary_chunk_tokens));
        }
        if let Some(truncate) = &self.truncate_args {
            truncate.validate()?;
        }
        Ok(())
    }
}

impl TruncateArgsConfig {
    /// Sets [`trigger_messages`](Self::trigger_messages).
    pub fn trigger_messages(mut self, messages: usize) -> Self {
        self.trigger_messages = messages;
        self
    }

    /// Sets [`trigger_tokens`](Self::trigger_tokens).
    pub fn trigger_tokens(mut self, tokens: u64) -> Self {
        self.trigger_tokens = tokens;
        self
    }

    /// Sets [`keep_messages`](Self::keep_messages).
    pub fn keep_messages(mut self, messages: usize) -> Self {
        self.keep_messages = messages;
        self
    }

    /// Sets [`max_param_chars`](Self::max_param_chars).
    pub fn max_param_chars(mut self, chars: usize) -> Self {
        self.max_param_chars = chars;
        self
    }

    /// Sets [`marker`](Self::marker).
    pub fn marker(mut self, marker: impl Into<String>) -> Self {
        self.marker = marker.into();
        self
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// [`CompactionConfigError::ParamLimitTooSmall`] or [`CompactionConfigError::MarkerTooLong`].
    pub fn validate(&self) -> Result<(), CompactionConfigError> {
        if self.max_param_chars < 64 {
            return Err(CompactionConfigError::ParamLimitTooSmall(self.max_param_chars));
        }
        // The marker plus a 20-digit total must leave room for some of the value.
        if (self.marker.chars().count() + 20) * 2 > self.max_param_chars {
            return Err(CompactionConfigError::MarkerTooLong);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_reference() {
        let config = CompactionConfig::default();
        assert_eq!(
            (
                config.trigger_messages,
                config.trigger_tokens,
                config.keep_messages,
                config.keep_tokens,
                config.flush_before_compact,
                config.offload_before_compact,
                config.truncate_args.is_none()
            ),
            (50, 80_000, 20, 0, true, true, true)
        );
        assert_eq!(config.validate(), Ok(()));
        let truncate = TruncateArgsConfig::default();
        assert_eq!(
            (
                truncate.trigger_messages,
                truncate.trigger_tokens,
                truncate.keep_messages,
                truncate.max_param_chars
            ),
            (25, 40_000, 20, 2_000)
        );
        assert_eq!(truncate.validate(), Ok(()));
    }

    #[test]
    fn impossible_settings_are_refused() {
        let check = |config: CompactionConfig| config.validate().err();
        assert_eq!(
            check(CompactionConfig::default().summary_prompt("summarize")),
            Some(CompactionConfigError::MissingPlaceholder)
        );
        assert_eq!(
            check(CompactionConfig::default().keep_messages(0)),
            Some(CompactionConfigError::NothingKept)
        );
        assert!(matches!(
            check(CompactionConfig::default().keep_messages(50)),
            Some(CompactionConfigError::KeepNotBelowTrigger { .. })
        ));
        assert!(matches!(
            check(CompactionConfig::default().keep_tokens(90_000)),
            Some(CompactionConfigError::KeepNotBelowTrigger { .. })
        ));
        assert_eq!(
            check(CompactionConfig::default().truncate_args(TruncateArgsConfig::default().max_param_chars(10))),
            Some(CompactionConfigError::ParamLimitTooSmall(10))
        );
        assert_eq!(
            check(CompactionConfig::default().trigger_messages(0).keep_messages(200)),
            None
        );
    }

    #[test]
    fn the_toml_table_parses_and_rejects_unknown_keys() {
        let text = r#"
            trigger_messages = 40
            keep_tokens = 6000
            model = "openai:gpt-4o-mini"
            offload_before_compact = false

            [truncate_args]
            max_param_chars = 1000
        "#;
        let config: CompactionConfig = toml::from_str(text).unwrap_or_else(|err| panic!("{err}"));
        let expected = CompactionConfig::default()
            .trigger_messages(40)
            .keep_tokens(6_000)
            .model("openai:gpt-4o-mini")
            .offload_before_compact(false)
            .truncate_args(TruncateArgsConfig::default().max_param_chars(1_000));
        assert_eq!(config, expected);
        assert_eq!(config.validate(), Ok(()));
        assert!(toml::from_str::<CompactionConfig>("trigger_msgs = 3").is_err());
        assert!(toml::from_str::<CompactionConfig>("[truncate_args]\nmax_chars = 3").is_err());
    }
}
