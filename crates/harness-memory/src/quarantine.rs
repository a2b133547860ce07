//! The quarantine: what the screen ([`crate::screen`]) did not keep, with its reason, in
//! `memory/.quarantine/` — outside `MEMORY.md`, the daily logs, the search index and
//! everything `memory_search` and `memory_get` serve, so none of it reaches a prompt.
//! Nothing the screen refuses is dropped silently: it is here until a person releases or
//! deletes it (`harness memory review`).
//!
//! ```text
//! memory/.quarantine/<id>.json    one entry: id, text, reason, source, session, at
//! memory/.quarantine/.released    the dedup keys of released facts, one per line
//! ```
//!
//! The id is derived from the text, so the same text quarantined twice is one entry. A
//! released fact goes back through the normal write path — appended to today's daily log
//! with its provenance (session `review`) unless the log or `MEMORY.md` already holds it —
//! and its key is remembered, so consolidation keeps it instead of quarantining it again.

use crate::error::MemoryError;
use crate::facts::{MAX_FACT_CHARS, normalise};
use crate::layout::{MEMORY_FILE, daily_log_path, fact_text, format_fact, path, today};
use harness_fs::{Filesystem, FsError, WriteMode, WsPath};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use std::collections::HashSet;

/// The quarantine directory of a namespace.
pub const QUARANTINE_DIR: &str = "memory/.quarantine";
/// The dedup keys of released facts.
const RELEASED: &str = "memory/.quarantine/.released";
/// The session recorded as the provenance of a released fact.
pub const RELEASE_SESSION: &str = "review";

/// One quarantined text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct QuarantineEntry {
    /// Stable id (from the text).
    pub id: String,
    /// The text as the model wrote it (bullet removed).
    pub text: String,
    /// Why the screen did not keep it.
    pub reason: String,
    /// Where it came from: `extraction`, `consolidation input` or `consolidation output`.
    pub source: String,
    /// The session it was extracted from, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// When it was quarantined.
    pub at: jiff::Timestamp,
}

fn id_of(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().take(6).map(|b| format!("{b:02x}")).collect()
}

fn entry_path(id: &str) -> Result<WsPath, MemoryError> {
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(MemoryError::NotQuarantined { id: id.to_owned() });
    }
    Ok(path(&format!("{QUARANTINE_DIR}/{id}.json")))
}

/// Quarantines `text` with `reason`. The same text again keeps the first entry.
pub(crate) async fn put(
    fs: &dyn Filesystem,
    text: &str,
    reason: &str,
    source: &str,
    session: Option<&str>,
) -> Result<(), MemoryError> {
    let entry = QuarantineEntry {
        id: id_of(text),
        text: text.to_owned(),
        reason: reason.to_owned(),
        source: source.to_owned(),
        session: session.map(str::to_owned),
        at: jiff::Timestamp::now(),
    };
    let body = serde_json::to_vec_pretty(&entry).map_err(|err| MemoryError::UnusableReply {
        detail: format!("cannot serialise a quarantine entry: {err}"),
    })?;
    match fs.write(&entry_path(&entry.id)?, &body, WriteMode::CreateNew).await {
        Ok(_) | Err(FsError::AlreadyExists { .. }) => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// Every quarantined entry of a namespace, oldest first.
///
/// # Errors
/// [`MemoryError::Fs`] when the directory or an entry cannot be read.
pub async fn quarantined(fs: &dyn Filesystem) -> Result<Vec<QuarantineEntry>, MemoryError> {
    let listed = match fs.list(&path(QUARANTINE_DIR)).await {
        Ok(listed) => listed,
        Err(FsError::NotFound { .. }) => return Ok(Vec::new()),
        Err(err) => return Err(err.into()),
    };
    let mut entries = Vec::new();
    for info in listed
        .iter()
        .filter(|info| !info.is_dir && info.path.file_name().ends_with(".json"))
    {
        let bytes = match fs.read(&info.path).await {
            Ok(bytes) => bytes,
            Err(FsError::NotFound { .. }) => continue,
            Err(err) => return Err(err.into()),
        };
        match serde_json::from_slice::<QuarantineEntry>(&bytes) {
            Ok(entry) => entries.push(entry),
            Err(err) => tracing::warn!(path = %info.path, %err, "unreadable quarantine entry skipped"),
        }
    }
    entries.sort_by(|a, b| a.at.cmp(&b.at).then_with(|| a.id.cmp(&b.id)));
    Ok(entries)
}

async fn read_entry(fs: &dyn Filesystem, id: &str) -> Result<(WsPath, QuarantineEntry), MemoryError> {
    let file = entry_path(id)?;
    let bytes = match fs.read(&file).await {
        Ok(bytes) => bytes,
        Err(FsError::NotFound { .. }) => return Err(MemoryError::NotQuarantined { id: id.to_owned() }),
        Err(err) => return Err(err.into()),
    };
    let entry = serde_json::from_slice(&bytes).map_err(|err| MemoryError::UnusableReply {
        detail: format!("quarantine entry {id} is not readable: {err}"),
    })?;
    Ok((file, entry))
}

async fn read_text(fs: &dyn Filesystem, file: &WsPath) -> Result<String, MemoryError> {
    match fs.read(file).await {
        Ok(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        Err(FsError::NotFound { .. }) => Ok(String::new()),
        Err(err) => Err(err.into()),
    }
}

/// A released fact as one line: whitespace collapsed, comment delimiters removed (so the
/// provenance cannot be forged), cut to the fact length.
fn as_fact(text: &str) -> String {
    let plain = text.replace("<!--", "").replace("-->", "");
    let collapsed = plain.split_whitespace().collect::<Vec<_>>().join(" ");
    harness_core::excerpt(&collapsed, MAX_FACT_CHARS)
}

/// What releasing an entry did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Released {
    /// The fact was appended to this daily log.
    Written {
        /// The daily log.
        path: String,
    },
    /// The log or `MEMORY.md` already held the fact; nothing was appended.
    AlreadyKnown,
}

/// Releases entry `id`: a person decided it is a fact. It is appended to today's daily log
/// (unless already known), remembered as released, and removed from the quarantine.
///
/// # Errors
/// [`MemoryError::NotQuarantined`] for an unknown id; [`MemoryError::Fs`] when a file
/// cannot be read or written (the entry then stays quarantined).
pub async fn release_quarantined(fs: &dyn Filesystem, id: &str) -> Result<Released, MemoryError> {
    let (file, entry) = read_entry(fs, id).await?;
    let fact = as_fact(&entry.text);
    let key = normalise(&fact);
    let log_path = daily_log_path(today(jiff::Timestamp::now()));
    let log = read_text(fs, &log_path).await?;
    let memory = read_text(fs, &path(MEMORY_FILE)).await?;
    let known = log
        .lines()
        .chain(memory.lines())
        .any(|line| normalise(fact_text(line)) == key);
    let mut released = read_text(fs, &path(RELEASED)).await?;
    if !released.lines().any(|line| line == key) {
        released.push_str(&key);
        released.push('\n');
        fs.write(&path(RELEASED), released.as_bytes(), WriteMode::Overwrite)
            .await?;
    }
    let outcome = if known || key.is_empty() {
        Released::AlreadyKnown
    } else {
        let mut block = String::new();
        if !log.is_empty() && !log.ends_with('\n') {
            block.push('\n');
        }
        block.push_str(&format_fact(&fact, RELEASE_SESSION, jiff::Timestamp::now()));
        fs.append(&log_path, block.as_bytes()).await?;
        Released::Written {
            path: log_path.as_str().to_owned(),
        }
    };
    fs.delete(&file).await?;
    Ok(outcome)
}

/// Deletes entry `id` for good.
///
/// # Errors
/// [`MemoryError::NotQuarantined`] for an unknown id; [`MemoryError::Fs`] when it cannot
/// be deleted.
pub async fn delete_quarantined(fs: &dyn Filesystem, id: &str) -> Result<QuarantineEntry, MemoryError> {
    let (file, entry) = read_entry(fs, id).await?;
    fs.delete(&file).await?;
    Ok(entry)
}

/// The dedup keys of released facts.
pub(crate) async fn released_keys(fs: &dyn Filesystem) -> Result<HashSet<String>, MemoryError> {
    Ok(read_text(fs, &path(RELEASED))
        .await?
        .lines()
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect())
}
