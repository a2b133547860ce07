//! [`MemoryConfig`]: the `[memory]` section of `harness.toml`.
//!
//! Durations are written either as a whole number of seconds (`90`) or as a string of
//! number-unit pairs (`"90s"`, `"30m"`, `"6h"`, `"1h30m"`, `"500ms"`, `"2d"`). Units: `ms`,
//! `s`, `m`, `h`, `d`. They serialize back as strings in the same form.
//!
//! ```toml
//! [memory]
//! enabled = true
//! mode = "after_call"                 # off | after_call | before_compaction
//! extraction_throttle = "60s"
//! consolidation_min_interval = "30m"
//! maintenance_interval = "6h"
//! max_memory_tokens = 4000
//! model = "dashscope:qwen-turbo"      # optional cheaper model for extraction + consolidation
//!
//! [memory.index]
//! enabled = true
//! search_wait = "2s"
//! max_results = 30
//! ```

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

/// When facts are extracted from conversations automatically.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum MemoryMode {
    /// Never automatically: no extraction model call happens at all. The tools, the index and
    /// consolidation of entries written by hand or by [`Memory::flush`](crate::Memory::flush)
    /// keep working.
    Off,
    /// After every successful call, in the background, throttled per session (default).
    #[default]
    AfterCall,
    /// Only when the compaction capability calls [`Memory::flush`](crate::Memory::flush) (or
    /// [`Memory::spawn_flush`](crate::Memory::spawn_flush)) with the messages it is about to
    /// summarise. Cheapest; sessions that never compact are never extracted.
    BeforeCompaction,
}

/// Settings of the full-text index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct IndexConfig {
    /// Use the SQLite index. When off, searches scan the files (slower, unranked) and say so.
    pub enabled: bool,
    /// Where the index files go. `None`: the harness chooses (it passes the directory to
    /// [`Memory::new`](crate::Memory::new)).
    pub dir: Option<PathBuf>,
    /// How long a search waits for the index to catch up with changed files before it
    /// answers from the stale index (and says so in the result).
    #[serde(with = "duration_text")]
    pub search_wait: Duration,
    /// Cap on hits returned by one search (the tools' hard cap; `memory_search` returns at
    /// most this many).
    pub max_results: usize,
    /// Characters of one transcript message that are indexed; the rest is not searchable.
    pub max_message_chars: usize,
}

impl Default for IndexConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            dir: None,
            search_wait: Duration::from_secs(2),
            max_results: 30,
            max_message_chars: 4000,
        }
    }
}

/// Long-term memory settings (`[memory]` in `harness.toml`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct MemoryConfig {
    /// Master switch. Off: the middleware does nothing, no background task runs and no model
    /// call is made; the harness should not register the tools either.
    pub enabled: bool,
    /// When extraction runs.
    pub mode: MemoryMode,
    /// Minimum time between two extractions of one session, across processes (the last run
    /// is persisted with the session's extraction watermark). Messages of calls that end
    /// inside the window stay in the transcript past the watermark and are extracted
    /// together by the first extraction after it — in this process or a later one — so
    /// throttling batches work and never drops it. `0` extracts after every call.
    #[serde(with = "duration_text")]
    pub extraction_throttle: Duration,
    /// Minimum time between two consolidations of one namespace that are triggered by
    /// requests (the first request after the window triggers one). It holds across
    /// processes: the last consolidation's time is kept in its watermark.
    #[serde(with = "duration_text")]
    pub consolidation_min_interval: Duration,
    /// Period of the background maintenance pass (consolidation and index refresh of every
    /// namespace seen recently).
    #[serde(with = "duration_text")]
    pub maintenance_interval: Duration,
    /// Budget of `MEMORY.md`, in estimated tokens. Consolidation keeps the file within it and
    /// cuts with a visible marker if the model overshoots.
    pub max_memory_tokens: NonZeroU32,
    /// A `provider:model` spec for extraction and consolidation (usually a cheaper model).
    /// `None`: the agent's model. The harness resolves it and passes the model to
    /// [`Memory::new`](crate::Memory::new).
    pub model: Option<String>,
    /// Index settings.
    pub index: IndexConfig,
}

/// The default `MEMORY.md` budget (4000 tokens, about 16 000 characters).
pub const DEFAULT_MAX_MEMORY_TOKENS: NonZeroU32 = match NonZeroU32::new(4000) {
    Some(value) => value,
    None => NonZeroU32::MIN,
};

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            mode: MemoryMode::AfterCall,
            extraction_throttle: Duration::from_secs(60),
            consolidation_min_interval: Duration::from_secs(30 * 60),
            maintenance_interval: Duration::from_secs(6 * 60 * 60),
            max_memory_tokens: DEFAULT_MAX_MEMORY_TOKENS,
            model: None,
            index: IndexConfig::default(),
        }
    }
}

impl MemoryConfig {
    /// Whether extraction runs automatically after calls.
    pub fn extracts_after_call(&self) -> bool {
        self.enabled && self.mode == MemoryMode::AfterCall
    }
}

/// Parses `90`, `"90s"`, `"1h30m"`, `"500ms"`; see the module docs.
///
/// # Errors
/// A message naming the bad part.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration; write e.g. \"30s\", \"15m\" or \"6h\"".into());
    }
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("bad duration {text:?}: expected a number at {rest:?}"));
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("bad duration {text:?}: number too large"))?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let unit = rest[..unit_len].trim();
        rest = &rest[unit_len..];
        let part = match unit {
            "ms" => Duration::from_millis(number),
            "s" | "sec" | "secs" => Duration::from_secs(number),
            "m" | "min" | "mins" => Duration::from_secs(number.saturating_mul(60)),
            "h" | "hr" | "hrs" => Duration::from_secs(number.saturating_mul(3600)),
            "d" | "day" | "days" => Duration::from_secs(number.saturating_mul(86_400)),
            "" => {
                return Err(format!(
                    "bad duration {text:?}: missing unit after {number} (ms, s, m, h, d)"
                ));
            }
            other => {
                return Err(format!(
                    "bad duration {text:?}: unknown unit {other:?} (ms, s, m, h, d)"
                ));
            }
        };
        total = total.saturating_add(part);
    }
    Ok(total)
}

/// Formats a duration in the form [`parse_duration`] reads (`"1h30m"`, `"500ms"`, `"0s"`).
pub fn format_duration(duration: Duration) -> String {
    if duration.is_zero() {
        return "0s".into();
    }
    let millis = duration.as_millis();
    if !millis.is_multiple_of(1000) {
        return format!("{millis}ms");
    }
    let mut seconds = duration.as_secs();
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)] {
        if seconds >= size {
            out.push_str(&format!("{}{unit}", seconds / size));
            seconds %= size;
        }
    }
    out
}

mod duration_text {
    use super::*;

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Seconds(u64),
        Text(String),
    }

    pub(super) fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format_duration(*duration))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        match Raw::deserialize(deserializer)? {
            Raw::Seconds(seconds) => Ok(Duration::from_secs(seconds)),
            Raw::Text(text) => parse_duration(&text).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_format_round_trip() {
        let cases = [
            ("90", Duration::from_secs(90)),
            ("90s", Duration::from_secs(90)),
            ("30m", Duration::from_secs(1800)),
            ("1h30m", Duration::from_secs(5400)),
            ("500ms", Duration::from_millis(500)),
            ("2d", Duration::from_secs(172_800)),
            ("0s", Duration::ZERO),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_duration(text), Ok(expected), "{text}");
            assert_eq!(parse_duration(&format_duration(expected)), Ok(expected), "{text}");
        }
        for bad in ["", "m", "10x", "h5", "5 h 3"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
