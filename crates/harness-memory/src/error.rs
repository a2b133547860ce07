//! [`MemoryError`]: why a memory operation failed.

use crate::lease::LeaseError;
use harness_core::{BoxError, ModelError};
use harness_fs::FsError;

/// Why a memory operation ([`Memory::flush`](crate::Memory::flush),
/// [`consolidate`](crate::Memory::consolidate), [`search`](crate::Memory::search)) failed.
/// Nothing was half-written: each operation writes its files with single whole-file writes or
/// one append, last.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// Reading or writing a memory file failed. A [`FsError::Conflict`] on `MEMORY.md` means
    /// someone edited it during consolidation: the next pass retries.
    #[error("memory file access failed")]
    Fs(#[from] FsError),
    /// The extraction or consolidation model failed. Nothing was written; the next pass
    /// retries.
    #[error("memory model call failed")]
    Model(#[from] ModelError),
    /// The model's reply could not be used (e.g. an empty consolidation). Nothing was written.
    #[error("unusable memory model reply: {detail}")]
    UnusableReply {
        /// What was wrong.
        detail: String,
    },
    /// The consolidation output would drop most of the current `MEMORY.md` without a
    /// removal note (see the crate's `history` rule). `MEMORY.md` was left unchanged.
    #[error(
        "the consolidated MEMORY.md would keep only {kept} of its {total} current lines and does not say why \
         (no `<!-- removed: ... -->` note); MEMORY.md was left unchanged (edit it by hand, or retry)"
    )]
    DrasticRewrite {
        /// Content lines of the current file the output kept.
        kept: usize,
        /// Content lines of the current file.
        total: usize,
    },
    /// The SQLite index failed. Searches fall back to a file scan and say so.
    #[error("memory index failed")]
    Index(#[source] BoxError),
    /// The consolidation lease backend failed.
    #[error("memory lease failed")]
    Lease(#[from] LeaseError),
    /// Memory is disabled in the configuration; nothing was done and no model was called.
    #[error("memory is disabled in the configuration")]
    Disabled,
    /// [`Memory::shutdown`](crate::Memory::shutdown) was called; no new work is accepted.
    #[error("memory is shutting down")]
    ShuttingDown,
    /// No quarantine entry has this id (`harness memory review` lists the ids).
    #[error("no quarantined memory entry {id}; `harness memory review` lists the entries")]
    NotQuarantined {
        /// The id asked for.
        id: String,
    },
    /// The work was cancelled (shutdown timeout) before it wrote anything.
    #[error("memory operation cancelled")]
    Cancelled,
}

impl MemoryError {
    pub(crate) fn index(err: impl Into<BoxError>) -> Self {
        Self::Index(err.into())
    }
}
