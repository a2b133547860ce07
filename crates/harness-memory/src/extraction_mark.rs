//! The per-session extraction watermark: which messages of the session's transcript were
//! already extracted, and when extraction last ran (the persisted throttle).
//!
//! It is a small JSON file in the caller's layer, at
//! [`CallScope::memory_extraction_path`] (`memory/.extraction/<agent>/<session>.json`),
//! beside the facts it describes. Not the session's typed state: extraction runs after the
//! turn, outside the session lease and the turn's state save, and `harness memory extract`
//! reads it without running a turn; a file written after the facts keeps the crash order
//! simple (facts first, then the mark) and needs no lease.
//!
//! Messages are identified by their ids (UUID v7, which sort by creation time): the mark is
//! the greatest id extracted, so a transcript rewritten or a message not yet persisted never
//! moves it backwards, and what a crash left unmarked is extracted again (extraction drops
//! facts already in the log).

use crate::error::MemoryError;
use harness_core::Msg;
use harness_fs::{CallScope, Filesystem, FsError, WriteMode};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// The watermark file's contents.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ExtractionMark {
    /// Format version.
    #[serde(default)]
    pub(crate) v: u32,
    /// The greatest message id extracted.
    #[serde(default)]
    pub(crate) extracted_through: Option<String>,
    /// When the last extraction ran (asked the model).
    #[serde(default)]
    pub(crate) last_run: Option<jiff::Timestamp>,
}

impl ExtractionMark {
    /// Reads the session's mark. A missing or unreadable file is "nothing extracted yet".
    ///
    /// # Errors
    /// [`MemoryError::Fs`] when the file exists but cannot be read.
    pub(crate) async fn read(fs: &dyn Filesystem, scope: &CallScope) -> Result<Self, MemoryError> {
        match fs.read(&scope.memory_extraction_path()).await {
            Ok(bytes) => Ok(serde_json::from_slice(&bytes).unwrap_or_else(|err| {
                tracing::warn!(error = %err, "unreadable memory extraction watermark; extracting the whole transcript again");
                Self::default()
            })),
            Err(FsError::NotFound { .. }) => Ok(Self::default()),
            Err(err) => Err(err.into()),
        }
    }

    /// Writes the mark (one whole-file write).
    ///
    /// # Errors
    /// [`MemoryError::Fs`].
    pub(crate) async fn write(&self, fs: &dyn Filesystem, scope: &CallScope) -> Result<(), MemoryError> {
        let mut text = serde_json::to_string(self).unwrap_or_default();
        text.push('\n');
        fs.write(&scope.memory_extraction_path(), text.as_bytes(), WriteMode::Overwrite)
            .await?;
        Ok(())
    }

    /// Whether `id` is past the mark.
    pub(crate) fn is_new(&self, id: &str) -> bool {
        self.extracted_through.as_deref().is_none_or(|mark| id > mark)
    }

    /// How long until the throttle window that began at the last run ends (zero when it has).
    pub(crate) fn throttled_for(&self, throttle: Duration, now: jiff::Timestamp) -> Duration {
        let Some(last) = self.last_run else {
            return Duration::ZERO;
        };
        let elapsed = now.duration_since(last);
        let elapsed = Duration::try_from(elapsed).unwrap_or(Duration::ZERO);
        throttle.saturating_sub(elapsed)
    }

    /// The mark after extracting `messages` at `now`.
    pub(crate) fn advanced(&self, messages: &[Arc<Msg>], now: jiff::Timestamp) -> Self {
        let newest = messages.iter().map(|msg| msg.id.as_str()).max();
        let through = match (self.extracted_through.as_deref(), newest) {
            (Some(old), Some(new)) => Some(old.max(new).to_owned()),
            (old, new) => old.or(new).map(str::to_owned),
        };
        Self {
            v: 1,
            extracted_through: through,
            last_run: Some(now),
        }
    }
}

/// The messages of the session not yet extracted: the transcript's past the mark, then those
/// of `extra` (this process's calls, perhaps not persisted yet) that the transcript lacks.
///
/// # Errors
/// [`MemoryError::Fs`] when the transcript exists but cannot be read.
pub(crate) async fn pending_messages(
    fs: &dyn Filesystem,
    scope: &CallScope,
    mark: &ExtractionMark,
    extra: &[Arc<Msg>],
) -> Result<Vec<Arc<Msg>>, MemoryError> {
    let mut out: Vec<Arc<Msg>> = match fs.read(&scope.transcript_path()).await {
        Ok(bytes) => crate::transcript::parse_transcript(&bytes)
            .into_iter()
            .map(|(_, msg)| msg)
            .filter(|msg| mark.is_new(&msg.id))
            .map(Arc::new)
            .collect(),
        Err(FsError::NotFound { .. }) => Vec::new(),
        Err(err) => return Err(err.into()),
    };
    let seen: HashSet<String> = out.iter().map(|msg| msg.id.clone()).collect();
    out.extend(
        extra
            .iter()
            .filter(|msg| mark.is_new(&msg.id) && !seen.contains(&msg.id))
            .cloned(),
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mark_only_moves_forward_and_times_the_throttle() {
        let first = Arc::new(Msg::user("one"));
        let second = Arc::new(Msg::user("two"));
        let at: jiff::Timestamp = "2026-12-01T10:00:00Z".parse().unwrap_or_default();
        let mark = ExtractionMark::default().advanced(&[Arc::clone(&second)], at);
        assert!(!mark.is_new(&first.id), "ids sort by creation time");
        assert!(!mark.is_new(&second.id));
        let back = mark.advanced(&[first], at);
        assert_eq!(back.extracted_through, mark.extracted_through);
        let throttle = Duration::from_secs(60);
        let later: jiff::Timestamp = "2026-12-01T10:00:20Z".parse().unwrap_or_default();
        assert_eq!(mark.throttled_for(throttle, later), Duration::from_secs(40));
        let much_later: jiff::Timestamp = "2026-12-01T10:05:00Z".parse().unwrap_or_default();
        assert_eq!(mark.throttled_for(throttle, much_later), Duration::ZERO);
        assert_eq!(ExtractionMark::default().throttled_for(throttle, later), Duration::ZERO);
    }
}
