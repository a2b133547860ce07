//! The context's transcript tail: each message is written once, to the transcript.
//!
//! Layout 2 of the saved state (the [`TranscriptTail`] slot present): the state's `messages`
//! hold only the part of the context that is not a run of the transcript (compaction
//! summaries, evicted results, messages of a layout-1 state), and the rest of the context is
//! the transcript's bytes `[from, transcript_offset)`. A turn that only appends to the
//! context saves the state with no message in it (the offset and the slot alone); a turn
//! that rewrites the context (compaction, eviction, clearing, a crash repair) keeps the whole
//! context inline and starts an empty tail at the transcript's end.
//!
//! Layout 1 (no slot: states written before layout 2) keeps every message inline and loads
//! as it is; its first save under layout 2 starts the tail at its offset.
//!
//! The messages of each session's tail are kept in a bounded cache, so a warm turn neither
//! reads nor parses the transcript.

use harness_core::{Msg, SessionSlot};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// The layout number the slot carries.
pub const TAIL_FORMAT: u32 = 2;

/// Sessions whose tails are cached, and their transcript bytes, before the cache is cleared
/// (the state store's cache no longer holds these messages; the same bounds as its).
const CACHED_TAILS: usize = harness_store::DEFAULT_CACHE_ENTRIES;
const CACHED_BYTES: u64 = harness_store::DEFAULT_CACHE_BYTES;

/// Session slot `transcript_tail`: where the context's transcript tail starts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TranscriptTail {
    /// [`TAIL_FORMAT`]; 0 (no slot) is layout 1, every message inline.
    #[serde(default)]
    pub format: u32,
    /// Byte offset of the tail's first message in the transcript; the tail runs to the
    /// state's `transcript_offset`.
    #[serde(default)]
    pub from: u64,
}

impl SessionSlot for TranscriptTail {
    const KEY: &'static str = "transcript_tail";
}

/// The context as the session layer found it at the start of a call, to tell at the end
/// whether the call only appended to it.
pub(super) struct Attached {
    /// The context's messages after the tail was attached (held, so their identities stay
    /// theirs while the call runs).
    pub(super) context: Vec<Arc<Msg>>,
    /// How many of them are inline in the state.
    pub(super) inline: usize,
    /// Where the tail starts in the transcript.
    pub(super) from: u64,
    /// The context was rewritten while attaching (a crash repair): keep it inline.
    pub(super) rewritten: bool,
}

impl Attached {
    /// What the state should keep inline when the call ends, and where the tail starts:
    /// the same split when the call only appended `appended` (all written to the transcript),
    /// otherwise the whole context inline and an empty tail at `end`.
    pub(super) fn split(
        &self,
        messages: &[Arc<Msg>],
        appended: &[Arc<Msg>],
        persisted: usize,
        end: u64,
    ) -> (usize, u64) {
        let only_appended = !self.rewritten
            && persisted == appended.len()
            && messages.len() == self.context.len() + appended.len()
            && messages
                .iter()
                .zip(self.context.iter().chain(appended))
                .all(|(now, then)| Arc::ptr_eq(now, then));
        if only_appended {
            (self.inline, self.from)
        } else {
            (messages.len(), end)
        }
    }
}

/// The messages of transcript bytes `[from, to)` (unreadable lines skipped, with a warning).
pub(crate) fn parse_range(bytes: &[u8], from: u64, to: u64) -> Vec<Arc<Msg>> {
    let range = usize::try_from(from).unwrap_or(usize::MAX)..usize::try_from(to).unwrap_or(usize::MAX);
    let (messages, torn) = super::parse_transcript(bytes.get(range).unwrap_or_default());
    if torn > 0 {
        tracing::warn!(torn, "transcript tail has unreadable lines; they are skipped");
    }
    messages.into_iter().map(Arc::new).collect()
}

/// Appends the tail to the context's inline part, leaving out messages the inline part
/// already holds (a state saved mid-turn, for an approval, holds them inline too). Returns
/// whether any was left out.
pub(crate) fn append_tail(messages: &mut Vec<Arc<Msg>>, tail: Vec<Arc<Msg>>) -> bool {
    if messages.is_empty() {
        *messages = tail;
        return false;
    }
    let known: std::collections::HashSet<&str> = messages.iter().map(|m| m.id.as_str()).collect();
    let count = tail.len();
    let tail: Vec<Arc<Msg>> = tail.into_iter().filter(|m| !known.contains(m.id.as_str())).collect();
    let dropped = tail.len() != count;
    messages.extend(tail);
    dropped
}

/// A session's tail as last seen: the messages of transcript bytes `[from, end)`.
#[derive(Clone)]
pub(super) struct CachedTail {
    pub(super) from: u64,
    pub(super) end: u64,
    pub(super) messages: Vec<Arc<Msg>>,
}

/// Tails by `<fs description>|<transcript path>`.
#[derive(Default)]
pub(super) struct TailCache {
    tails: Mutex<Tails>,
}

#[derive(Default)]
struct Tails {
    by_key: HashMap<String, CachedTail>,
    /// Transcript bytes of the cached tails.
    bytes: u64,
}

impl std::fmt::Debug for TailCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tails = self.tails.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("TailCache")
            .field("sessions", &tails.by_key.len())
            .field("bytes", &tails.bytes)
            .finish()
    }
}

impl TailCache {
    /// The cached tail of `key` when it starts at `from` and ends at or before `offset`.
    pub(super) fn get(&self, key: &str, from: u64, offset: u64) -> Option<CachedTail> {
        let tails = self.tails.lock().unwrap_or_else(PoisonError::into_inner);
        tails
            .by_key
            .get(key)
            .filter(|tail| tail.from == from && tail.end <= offset)
            .cloned()
    }

    pub(super) fn put(&self, key: String, tail: CachedTail) {
        let size = tail.end.saturating_sub(tail.from);
        let mut tails = self.tails.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(old) = tails.by_key.remove(&key) {
            tails.bytes = tails.bytes.saturating_sub(old.end.saturating_sub(old.from));
        }
        if size > CACHED_BYTES {
            return;
        }
        if tails.by_key.len() >= CACHED_TAILS || tails.bytes + size > CACHED_BYTES {
            tails.by_key.clear();
            tails.bytes = 0;
        }
        tails.bytes += size;
        tails.by_key.insert(key, tail);
    }

    pub(super) fn forget(&self, key: &str) {
        let mut tails = self.tails.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(old) = tails.by_key.remove(key) {
            tails.bytes = tails.bytes.saturating_sub(old.end.saturating_sub(old.from));
        }
    }
}
