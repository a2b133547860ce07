//! Where memory lives in a namespace, and the formats of its files.
//!
//! ```text
//! MEMORY.md                               curated memory (rewritten by consolidation only)
//! memory/YYYY-MM-DD.md                    daily fact log (UTC date; append-only)
//! memory/.consolidation_state             consolidation watermark (JSON, see `Watermark`)
//! memory/.extraction/<agent>/<sid>.json   extraction watermark and last run (`extraction_mark`)
//! memory/.history/MEMORY-<time>.md        previous MEMORY.md versions (`history`; newest 10)
//! agents/<agentId>/sessions/<sid>.log.jsonl   transcripts (written by the harness; read here)
//! agents/<agentId>/sessions/sessions.json     session index (written by the harness; read here)
//! ```
//!
//! A daily-log entry is one bullet per fact with its provenance in a trailing HTML comment,
//! which Markdown renderers hide:
//!
//! ```text
//! - The user's cat is called Miso. <!-- session=s1 at=2026-11-29T10:00:00Z -->
//! ```

use harness_fs::{FsError, WsPath};
use jiff::Timestamp;
use jiff::civil::Date;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The curated memory file, at the namespace root.
pub const MEMORY_FILE: &str = "MEMORY.md";
/// The directory of daily logs.
pub const MEMORY_DIR: &str = "memory";
/// The consolidation watermark.
pub const CONSOLIDATION_STATE: &str = "memory/.consolidation_state";
/// The directory of all agents' session data.
pub(crate) const AGENTS_DIR: &str = "agents";

/// `memory/YYYY-MM-DD.md` for `date`.
pub fn daily_log_path(date: Date) -> WsPath {
    path(&format!("{MEMORY_DIR}/{date}.md"))
}

/// The date of a daily log from its file name (`2026-11-29.md`), if it is one.
pub(crate) fn daily_log_date(file_name: &str) -> Option<Date> {
    let stem = file_name.strip_suffix(".md")?;
    if stem.len() != 10 {
        return None;
    }
    stem.parse::<Date>().ok()
}

/// Today's UTC date.
pub(crate) fn today(now: Timestamp) -> Date {
    now.to_zoned(jiff::tz::TimeZone::UTC).date()
}

/// `agents/<agent>/sessions`.
pub(crate) fn sessions_dir(agent: &str) -> Result<WsPath, FsError> {
    WsPath::parse(&format!("{AGENTS_DIR}/{agent}/sessions"))
}

/// `agents/<agent>/sessions/<session>.log.jsonl`.
pub(crate) fn transcript_path(agent: &str, session: &str) -> Result<WsPath, FsError> {
    WsPath::parse(&format!("{AGENTS_DIR}/{agent}/sessions/{session}.log.jsonl"))
}

/// `agents/<agent>/sessions/sessions.json`.
pub(crate) fn session_index_path(agent: &str) -> Result<WsPath, FsError> {
    WsPath::parse(&format!("{AGENTS_DIR}/{agent}/sessions/sessions.json"))
}

/// A constant path. Every caller passes a literal or an already checked id.
pub(crate) fn path(text: &str) -> WsPath {
    WsPath::parse(text).unwrap_or_default()
}

/// One fact line of the daily log, with provenance.
pub(crate) fn format_fact(fact: &str, session: &str, at: Timestamp) -> String {
    format!(
        "- {fact} <!-- session={session} at={} -->\n",
        at.strftime("%Y-%m-%dT%H:%M:%SZ")
    )
}

/// The fact text of a daily-log line without its bullet and provenance comment.
pub(crate) fn fact_text(line: &str) -> &str {
    let line = line.trim();
    let line = line
        .strip_prefix("- ")
        .or_else(|| line.strip_prefix("* "))
        .unwrap_or(line);
    match line.rfind("<!--") {
        Some(at) if line.ends_with("-->") => line[..at].trim_end(),
        _ => line,
    }
}

/// The consolidation watermark of a namespace: how many lines of each daily log were already
/// merged into `MEMORY.md`. Daily logs are append-only, so "newer than the watermark" is
/// "past that line", which is exact even when clocks disagree or appends race.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Watermark {
    /// Format version.
    #[serde(default)]
    pub(crate) v: u32,
    /// When the last consolidation finished.
    #[serde(default)]
    pub(crate) consolidated_at: Option<Timestamp>,
    /// Daily log file name → lines merged.
    #[serde(default)]
    pub(crate) files: BTreeMap<String, usize>,
    /// Daily log file name → its size in bytes when it was fully merged, so an unchanged log
    /// is not read again.
    #[serde(default)]
    pub(crate) sizes: BTreeMap<String, u64>,
    /// From a legacy plain-timestamp watermark: logs dated before this day count as merged.
    #[serde(skip)]
    pub(crate) legacy_before: Option<Date>,
}

impl Watermark {
    /// Reads the state file's text; a plain ISO instant (the reference system's format) is
    /// accepted. Unreadable state is treated as "nothing merged yet" (the model dedups).
    pub(crate) fn parse(text: &str) -> Self {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Self::default();
        }
        if let Ok(state) = serde_json::from_str::<Self>(trimmed) {
            return state;
        }
        if let Ok(at) = trimmed.parse::<Timestamp>() {
            return Self {
                consolidated_at: Some(at),
                legacy_before: Some(today(at)),
                ..Self::default()
            };
        }
        tracing::warn!("unreadable consolidation watermark; treating every daily entry as new");
        Self::default()
    }

    /// Lines of `file` already merged, given the file's date.
    pub(crate) fn merged_lines(&self, file: &str, date: Date, total: usize) -> usize {
        if let Some(&lines) = self.files.get(file) {
            // A log that shrank was rewritten by hand: read it again from the top.
            return if lines > total { 0 } else { lines };
        }
        match self.legacy_before {
            Some(before) if date < before => total,
            _ => 0,
        }
    }

    pub(crate) fn to_text(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fact_lines_round_trip() {
        let at: Timestamp = "2026-11-29T10:00:00Z".parse().unwrap_or_default();
        let line = format_fact("The user likes tea.", "s1", at);
        assert_eq!(
            line,
            "- The user likes tea. <!-- session=s1 at=2026-11-29T10:00:00Z -->\n"
        );
        assert_eq!(fact_text(&line), "The user likes tea.");
        assert_eq!(fact_text("* plain"), "plain");
    }

    #[test]
    fn daily_names_and_legacy_watermarks() {
        let date = daily_log_date("2026-11-29.md");
        assert_eq!(date.map(|d| d.to_string()), Some("2026-11-29".into()));
        assert_eq!(daily_log_date("notes.md"), None);
        let legacy = Watermark::parse("2026-11-29T10:00:00Z");
        let before: Date = "2026-11-28".parse().unwrap_or_default();
        let same: Date = "2026-11-29".parse().unwrap_or_default();
        assert_eq!(legacy.merged_lines("2026-11-28.md", before, 7), 7);
        assert_eq!(legacy.merged_lines("2026-11-29.md", same, 7), 0);
        let mut state = Watermark::default();
        state.files.insert("2026-11-29.md".into(), 3);
        let back = Watermark::parse(&state.to_text());
        assert_eq!(back.merged_lines("2026-11-29.md", same, 7), 3);
        assert_eq!(back.merged_lines("2026-11-29.md", same, 2), 0);
    }
}
