//! Two-layer long-term memory for Harness agents.
//!
//! Layer one is the daily fact log `memory/YYYY-MM-DD.md` in the user's namespace:
//! append-only, one bullet per fact, each with its session and time. Layer two is the curated
//! `MEMORY.md`, rewritten now and then by consolidation within a token budget; it is what the
//! harness injects into the prompt (inside [`memory_block`]). Both live in the caller's
//! namespace of the workspace ([`CallWorkspace::user`](harness_fs::CallWorkspace)), keyed by
//! the call's [`CallScope`](harness_fs::CallScope) ([`NamespaceKey::for_scope`]), so one user
//! never sees another's memory. The tools read through the caller's layered view, where the
//! workspace's shared `MEMORY.md` shows through unless the namespace has its own.
//!
//! - **Extraction** ([`Memory::flush`], [`Memory::extract_pending`]): after a call, in the
//!   background, the model reads what of the session was not extracted yet (its transcript
//!   past a persisted watermark, `memory/.extraction/<agent>/<session>.json`, plus the call's
//!   new messages) with today's log and `MEMORY.md`, and replies with new facts only, or
//!   `NO_REPLY`. The watermark moves only after the facts are appended. The reply is never
//!   delayed; per-session throttling batches calls, and the throttle window is persisted, so
//!   it holds across processes; shutdown runs what is due and leaves the rest for a later
//!   process. With memory off no extraction model call happens at all.
//! - **Consolidation** ([`Memory::consolidate`]): daily entries past the watermark
//!   (`memory/.consolidation_state`) are merged into `MEMORY.md`, one consolidator per
//!   namespace ([`Lease`]); a crash leaves the old file intact. The replaced file is kept in
//!   [`HISTORY_DIR`] (the newest [`HISTORY_KEEP`]), and an output that drops most of it
//!   without a [`REMOVAL_NOTE`] is refused ([`MemoryError::DrasticRewrite`]).
//! - **Index**: SQLite FTS5 per namespace over memory files and session transcripts, refreshed
//!   incrementally by content hash; CJK text is indexed as character bigrams, so CJK terms of
//!   any length match. A stale index says so in [`SearchResults`].
//! - **Tools** ([`Memory::tools`]): `memory_search`, `memory_get`, `session_search`,
//!   `session_history`, `session_list`.
//!
//! # Facts, not instructions
//!
//! Memory is untrusted data fed back into every later prompt, so the writer does not take
//! the model's word for it. The extraction prompt asks for third-person facts, and the
//! screen (an allow-shape; see the `screen` module) keeps a reply line only if it reads as a
//! plain statement about the user, their work or the world, in English or Chinese. It first
//! decodes what hides text — Unicode tag characters, invisible characters, look-alike
//! letters folded to a Latin skeleton (NFKC and a Cyrillic/Greek/Cherokee/Armenian table,
//! after Unicode TR39), HTML entities, URL percent-encoding, escapes, hex and base64 — and
//! then refuses text addressed to the agent or describing what it should do (in any
//! grammatical person), text in another language or script, any URL, link, image or other
//! markup, a command or a path, an encoded blob and a credential
//! ([`harness_core::secret`]). A fact that hid or encoded anything is refused as a whole,
//! never cleaned and kept. What the screen refuses is not dropped: it is quarantined with
//! its reason in [`QUARANTINE_DIR`] ([`quarantined`], [`release_quarantined`],
//! [`delete_quarantined`]; `harness memory review`), which nothing that feeds a prompt reads:
//! not the index, `memory_search`, `memory_get`, extraction or consolidation. Consolidation
//! screens its input (the new daily-log entries and the current `MEMORY.md`) and its output
//! the same way, so every line it writes into `MEMORY.md` has passed the screen; a released
//! fact passes as it is. Duplicates of today's log or `MEMORY.md` are skipped, and a fact
//! cannot forge a provenance comment. Memory never writes anything but `memory/*.md`,
//! `memory/.history/`, `memory/.quarantine/`, its watermarks (`memory/.consolidation_state`,
//! `memory/.extraction/`) and `MEMORY.md`; in particular never `AGENTS.md`.
//!
//! # Example
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use harness_memory::{Memory, MemoryConfig, memory_block};
//! use harness_models::ScriptedModel;
//! use std::sync::Arc;
//! let dir = tempfile::tempdir()?;
//! let memory = Memory::new(MemoryConfig::default(), Arc::new(ScriptedModel::new()), dir.path().into());
//! let tools: Vec<_> = memory.tools().iter().map(|tool| tool.spec().name.clone()).collect();
//! assert_eq!(tools, ["memory_search", "memory_get", "session_search", "session_history", "session_list"]);
//! assert!(memory_block("- The user likes tea.").contains("not instructions"));
//! # Ok::<_, Box<dyn std::error::Error>>(()) }).unwrap();
//! ```
//!
//! Where to start: [`Memory`], then [`MemoryConfig`].

mod config;
mod consolidation;
mod directive;
mod error;
mod extraction;
mod extraction_mark;
mod facts;
mod history;
mod index;
mod injection;
mod layout;
mod lease;
mod memory;
mod middleware;
mod namespace;
mod quarantine;
mod screen;
mod tools;
mod transcript;

pub use config::{DEFAULT_MAX_MEMORY_TOKENS, IndexConfig, MemoryConfig, MemoryMode, format_duration, parse_duration};
pub use consolidation::{ConsolidationOutcome, merged_daily_logs};
pub use error::MemoryError;
pub use extraction::FlushOutcome;
pub use history::{HISTORY_DIR, HISTORY_KEEP, REMOVAL_NOTE};
pub use index::{IndexStats, SearchHit, SearchResults, SearchScope};
pub use injection::{CUT_MARKER, MEMORY_TAG, cut_to_tokens, memory_block};
pub use layout::{CONSOLIDATION_STATE, MEMORY_DIR, MEMORY_FILE, daily_log_path};
pub use lease::{Lease, LeaseError, LeaseGuard, LocalLease};
pub use memory::{Memory, MemoryStats, ShutdownReport};
pub use namespace::NamespaceKey;
pub use quarantine::{
    QUARANTINE_DIR, QuarantineEntry, RELEASE_SESSION, Released, delete_quarantined, quarantined, release_quarantined,
};
pub use tools::SESSIONS_GROUP;
