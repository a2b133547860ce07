//! The load path of [`FileStateStore`]: snapshot plus log, reusing the cached state when the
//! files' stamps show nothing changed and reading only the log records appended since.

use super::{FileStateStore, LOG_FILE, LogRecord, OwnedEnvelope, STATE_FILE, complete_records};
use crate::state_cache::CacheEntry;
use harness_core::{StateError, StateKey};
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Identifies one version of a file: a rename or a rewrite changes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    dev: u64,
    pub(super) ino: u64,
    pub(super) len: u64,
    modified_ns: i128,
}

impl Stamp {
    pub(super) fn of(meta: &fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            modified_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        }
    }
}

/// What a cached state was read from: the snapshot file, and the log file (its inode) up to
/// the end of the last record applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FileCursor {
    pub(super) snapshot: Stamp,
    pub(super) log: Option<u64>,
    pub(super) log_offset: u64,
}

impl FileStateStore {
    /// Loads a session, reusing `cached` when the files did not change since and reading
    /// only the appended log records when only the log grew.
    pub(super) fn load_blocking(
        dir: &Path,
        key: &StateKey,
        cached: Option<CacheEntry<FileCursor>>,
    ) -> Result<Option<CacheEntry<FileCursor>>, StateError> {
        let backend = |err: std::io::Error| StateError::Backend(Box::new(err));
        let mut snapshot = match File::open(dir.join(STATE_FILE)) {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(backend(err)),
        };
        let snapshot_stamp = Stamp::of(&snapshot.metadata().map_err(backend)?);
        let log = match File::open(dir.join(LOG_FILE)) {
            Ok(file) => {
                let stamp = Stamp::of(&file.metadata().map_err(backend)?);
                Some((file, stamp))
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
            Err(err) => return Err(backend(err)),
        };
        let reusable = cached.filter(|c| c.cursor.snapshot == snapshot_stamp);
        let mut entry = match reusable {
            Some(entry) => entry,
            None => {
                let mut bytes = Vec::new();
                snapshot.read_to_end(&mut bytes).map_err(backend)?;
                let envelope: OwnedEnvelope = serde_json::from_slice(&bytes).map_err(|err| StateError::Corrupt {
                    key: key.display(),
                    message: err.to_string(),
                })?;
                CacheEntry {
                    state: envelope.state,
                    version: envelope.version,
                    cursor: FileCursor {
                        snapshot: snapshot_stamp,
                        log: None,
                        log_offset: 0,
                    },
                    bytes: bytes.len() as u64,
                }
            }
        };
        let Some((mut log, log_stamp)) = log else {
            entry.cursor.log = None;
            entry.cursor.log_offset = 0;
            return Ok(Some(entry));
        };
        // Read the log from where this entry stopped when it is the same file, else whole.
        let from = match entry.cursor.log {
            Some(ino) if ino == log_stamp.ino && entry.cursor.log_offset <= log_stamp.len => entry.cursor.log_offset,
            Some(_) => {
                // Another log than the one this entry applied: start from the snapshot.
                return Self::load_blocking(dir, key, None);
            }
            None => 0,
        };
        if from == log_stamp.len {
            return Ok(Some(entry));
        }
        log.seek(SeekFrom::Start(from)).map_err(backend)?;
        let mut tail = Vec::new();
        log.read_to_end(&mut tail).map_err(backend)?;
        let mut consumed = 0usize;
        for record in complete_records(&tail) {
            // Records at or below the snapshot's version predate it; a torn or unreadable
            // record or a gap ends the log.
            let Ok(parsed) = serde_json::from_slice::<LogRecord>(record) else {
                break;
            };
            let record_end = record.as_ptr() as usize - tail.as_ptr() as usize + record.len() + 1;
            if parsed.version <= entry.version {
                consumed = record_end;
                continue;
            }
            if parsed.version != entry.version + 1 {
                break;
            }
            entry.state.messages.extend(parsed.messages);
            entry.state.transcript_offset = parsed.transcript_offset;
            entry.version = parsed.version;
            consumed = record_end;
        }
        entry.cursor.log = Some(log_stamp.ino);
        entry.cursor.log_offset = from + consumed as u64;
        entry.bytes += consumed as u64;
        Ok(Some(entry))
    }
}
