//! The SQLite side of the index. Every function here blocks; callers run them on
//! `spawn_blocking`.
//!
//! Schema (one database per namespace):
//!
//! - `lines`: FTS5, `unicode61` tokenizer. `body` is the indexed form of the text (see
//!   `terms`: CJK runs as bigrams); unindexed `shown` holds the text itself when it differs
//!   from `body`, plus `path`, `line`, `kind`. One row per non-blank line of a memory file
//!   (without its provenance comment), one per message of a transcript. Row ids are handed
//!   out from `meta.next_rowid`.
//! - `files`: one row per indexed file: its size and mtime when indexed, and the length,
//!   line count and SHA-256 of its complete-line prefix (everything up to the last newline).
//! - `segments`: the row-id ranges of each file's rows. `tail = 1` marks the rows of a
//!   trailing line without a newline, which the next append replaces.
//!
//! A changed file whose old prefix is unchanged (an append) only gets its new lines indexed;
//! any other change re-indexes the file. Each file is updated in one transaction.

use super::terms::{Terms, contains, indexed_form};
use crate::transcript::{RenderLimits, parse_transcript, render_message};
use rusqlite::{Connection, OptionalExtension, Transaction, params};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::Path;

/// Bumped when the schema changes; an older database is rebuilt from scratch.
const SCHEMA_VERSION: &str = "2";
/// A term found in more rows than this is "common": it does not drive retrieval (ranking
/// every row of a common word is what makes naive full-text search slow), it only adds to
/// the score of rows found through the other terms.
const COMMON_ROWS: i64 = 1000;

/// What kind of file a row came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// `MEMORY.md` or `memory/*.md`.
    Memory,
    /// A session transcript.
    Session,
}

impl Kind {
    fn code(self) -> i64 {
        match self {
            Self::Memory => 0,
            Self::Session => 1,
        }
    }
}

/// An indexed file as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileRecord {
    pub(crate) size: u64,
    pub(crate) mtime: Option<i64>,
    pub(crate) indexed_at: i64,
    pub(crate) prefix_len: u64,
    pub(crate) prefix_lines: u64,
    pub(crate) prefix_hash: Vec<u8>,
}

/// What an update did to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Applied {
    /// Content unchanged (only its recorded size/mtime were refreshed).
    Unchanged,
    /// New lines after an unchanged prefix were indexed.
    Appended,
    /// The whole file was re-indexed.
    Reindexed,
}

/// One row to insert.
struct Row {
    line: u64,
    text: String,
}

/// Opens (creating or rebuilding as needed) the database at `path`.
pub(crate) fn open(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    let mut conn = conn;
    // One writer sets the schema up, so two first opens cannot interleave drop and create.
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    tx.execute_batch("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);")?;
    let version: Option<String> = tx
        .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |row| row.get(0))
        .optional()?;
    if version.as_deref() != Some(SCHEMA_VERSION) {
        tx.execute_batch(
            "DROP TABLE IF EXISTS lines;
             DROP TABLE IF EXISTS files;
             DROP TABLE IF EXISTS segments;
             DELETE FROM meta;",
        )?;
    }
    tx.execute_batch(
        "CREATE VIRTUAL TABLE IF NOT EXISTS lines USING fts5(
             body, shown UNINDEXED, path UNINDEXED, line UNINDEXED, kind UNINDEXED,
             tokenize = 'unicode61 remove_diacritics 2');
         CREATE TABLE IF NOT EXISTS files(
             path TEXT PRIMARY KEY, kind INTEGER NOT NULL, size INTEGER NOT NULL, mtime INTEGER,
             indexed_at INTEGER NOT NULL, prefix_len INTEGER NOT NULL, prefix_lines INTEGER NOT NULL,
             prefix_hash BLOB NOT NULL);
         CREATE TABLE IF NOT EXISTS segments(
             path TEXT NOT NULL, first INTEGER NOT NULL, last INTEGER NOT NULL, tail INTEGER NOT NULL);
         CREATE INDEX IF NOT EXISTS segments_path ON segments(path);",
    )?;
    tx.execute(
        "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema', ?1)",
        params![SCHEMA_VERSION],
    )?;
    tx.commit()?;
    Ok(conn)
}

/// Every indexed file.
pub(crate) fn files(conn: &Connection) -> rusqlite::Result<HashMap<String, FileRecord>> {
    let mut statement =
        conn.prepare_cached("SELECT path, size, mtime, indexed_at, prefix_len, prefix_lines, prefix_hash FROM files")?;
    let rows = statement.query_map([], |row| {
        Ok((
            row.get::<_, String>(0)?,
            FileRecord {
                size: row.get::<_, i64>(1)?.max(0).unsigned_abs(),
                mtime: row.get(2)?,
                indexed_at: row.get(3)?,
                prefix_len: row.get::<_, i64>(4)?.max(0).unsigned_abs(),
                prefix_lines: row.get::<_, i64>(5)?.max(0).unsigned_abs(),
                prefix_hash: row.get(6)?,
            },
        ))
    })?;
    rows.collect()
}

fn next_rowid(tx: &Transaction<'_>) -> rusqlite::Result<i64> {
    let next: Option<String> = tx
        .query_row("SELECT value FROM meta WHERE key = 'next_rowid'", [], |row| row.get(0))
        .optional()?;
    Ok(next.and_then(|n| n.parse().ok()).unwrap_or(1))
}

fn delete_segments(tx: &Transaction<'_>, path: &str, only_tail: bool) -> rusqlite::Result<()> {
    let ranges: Vec<(i64, i64)> = {
        let mut statement = tx.prepare_cached("SELECT first, last FROM segments WHERE path = ?1 AND tail >= ?2")?;
        let rows = statement.query_map(params![path, i64::from(only_tail)], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    let mut delete = tx.prepare_cached("DELETE FROM lines WHERE rowid BETWEEN ?1 AND ?2")?;
    for (first, last) in ranges {
        delete.execute(params![first, last])?;
    }
    tx.execute(
        "DELETE FROM segments WHERE path = ?1 AND tail >= ?2",
        params![path, i64::from(only_tail)],
    )?;
    Ok(())
}

fn insert_rows(tx: &Transaction<'_>, path: &str, kind: Kind, rows: &[Row], tail: bool) -> rusqlite::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let first = next_rowid(tx)?;
    let mut rowid = first;
    {
        let mut insert = tx.prepare_cached(
            "INSERT INTO lines(rowid, body, shown, path, line, kind) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        for row in rows {
            let (body, shown) = match indexed_form(&row.text) {
                Some(body) => (body, Some(row.text.as_str())),
                None => (row.text.clone(), None),
            };
            insert.execute(params![
                rowid,
                body,
                shown,
                path,
                i64::try_from(row.line).unwrap_or(i64::MAX),
                kind.code()
            ])?;
            rowid += 1;
        }
    }
    let last = rowid - 1;
    // Extend the file's previous segment when the ranges touch (consecutive appends).
    let extended = if tail {
        0
    } else {
        tx.execute(
            "UPDATE segments SET last = ?3 WHERE path = ?1 AND tail = 0 AND last = ?2 - 1",
            params![path, first, last],
        )?
    };
    if extended == 0 {
        tx.execute(
            "INSERT INTO segments(path, first, last, tail) VALUES (?1, ?2, ?3, ?4)",
            params![path, first, last, i64::from(tail)],
        )?;
    }
    tx.execute(
        "INSERT OR REPLACE INTO meta(key, value) VALUES ('next_rowid', ?1)",
        params![rowid.to_string()],
    )?;
    Ok(())
}

/// Removes a file's rows.
pub(crate) fn remove_file(conn: &mut Connection, path: &str) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    delete_segments(&tx, path, false)?;
    tx.execute("DELETE FROM files WHERE path = ?1", params![path])?;
    tx.commit()
}

/// A daily-log line without its trailing provenance comment.
fn without_provenance(line: &str) -> &str {
    let line = line.trim_end();
    match line.rfind("<!--") {
        Some(at) if line.ends_with("-->") => line[..at].trim_end(),
        _ => line,
    }
}

/// The rows of `chunk` (complete lines, or a trailing partial line), numbered from
/// `first_line`.
fn rows_of(kind: Kind, chunk: &[u8], first_line: u64, limits: RenderLimits) -> Vec<Row> {
    match kind {
        Kind::Memory => String::from_utf8_lossy(chunk)
            .lines()
            .zip(first_line..)
            .filter(|(text, _)| !text.trim().is_empty())
            .map(|(text, line)| Row {
                line,
                text: without_provenance(text).to_owned(),
            })
            .collect(),
        Kind::Session => parse_transcript(chunk)
            .into_iter()
            .filter(|(_, msg)| msg.role != harness_core::Role::System)
            .map(|(at, msg)| Row {
                line: first_line + u64::try_from(at).unwrap_or(1) - 1,
                text: render_message(&msg, limits),
            })
            .filter(|row| !row.text.is_empty())
            .collect(),
    }
}

/// What is known about a file before an update.
pub(crate) struct FileInput<'a> {
    pub(crate) path: &'a str,
    pub(crate) kind: Kind,
    pub(crate) bytes: &'a [u8],
    pub(crate) mtime: Option<i64>,
    pub(crate) now: i64,
    pub(crate) known: Option<&'a FileRecord>,
    pub(crate) limits: RenderLimits,
}

/// Brings one file's rows up to date with `input.bytes`.
pub(crate) fn update_file(conn: &mut Connection, input: &FileInput<'_>) -> rusqlite::Result<Applied> {
    let bytes = input.bytes;
    let prefix_len = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |at| at + 1);
    let (prefix, tail) = bytes.split_at(prefix_len);
    let prefix_lines = u64::try_from(prefix.iter().filter(|b| **b == b'\n').count()).unwrap_or(u64::MAX);

    // Hash the old prefix length first, so an append is recognised without a second pass.
    let mut hasher = Sha256::new();
    let appended_after = input.known.and_then(|known| {
        let old_len = usize::try_from(known.prefix_len).ok()?;
        if old_len > prefix_len {
            return None;
        }
        hasher.update(&prefix[..old_len]);
        (hasher.clone().finalize().as_slice() == known.prefix_hash.as_slice()).then_some((old_len, known))
    });
    let hashed_upto = appended_after.map_or(0, |(old_len, _)| old_len);
    if appended_after.is_none() {
        hasher = Sha256::new();
    }
    hasher.update(&prefix[hashed_upto..]);
    let prefix_hash = hasher.finalize().to_vec();

    let tx = conn.transaction()?;
    let applied = match appended_after {
        Some((old_len, known)) => {
            let unchanged = old_len == prefix_len && known.size == u64::try_from(bytes.len()).unwrap_or(u64::MAX);
            delete_segments(&tx, input.path, true)?;
            let rows = rows_of(input.kind, &prefix[old_len..], known.prefix_lines + 1, input.limits);
            insert_rows(&tx, input.path, input.kind, &rows, false)?;
            if unchanged {
                Applied::Unchanged
            } else {
                Applied::Appended
            }
        }
        None => {
            delete_segments(&tx, input.path, false)?;
            let rows = rows_of(input.kind, prefix, 1, input.limits);
            insert_rows(&tx, input.path, input.kind, &rows, false)?;
            Applied::Reindexed
        }
    };
    let tail_rows = rows_of(input.kind, tail, prefix_lines + 1, input.limits);
    insert_rows(&tx, input.path, input.kind, &tail_rows, true)?;
    tx.execute(
        "INSERT OR REPLACE INTO files(path, kind, size, mtime, indexed_at, prefix_len, prefix_lines, prefix_hash)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            input.path,
            input.kind.code(),
            i64::try_from(bytes.len()).unwrap_or(i64::MAX),
            input.mtime,
            input.now,
            i64::try_from(prefix_len).unwrap_or(i64::MAX),
            i64::try_from(prefix_lines).unwrap_or(i64::MAX),
            prefix_hash
        ],
    )?;
    tx.commit()?;
    Ok(applied)
}

/// One raw hit.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RawHit {
    pub(crate) path: String,
    pub(crate) line: u64,
    pub(crate) text: String,
    pub(crate) score: f64,
}

/// Hits for `terms` among rows of `kind` (and under `path_prefix`), best first, at most
/// `limit`.
///
/// Terms found in more than [`COMMON_ROWS`] rows only add to the score; the others are
/// OR-ed and ranked by BM25 (a term's prefix form is used only when its exact form finds
/// fewer rows than are fetched). When every term is common, the newest rows containing all
/// terms (then any term) are ranked instead. Either way the work is bounded by the rare
/// terms' matches, not by the size of the index.
pub(crate) fn query(
    conn: &Connection,
    terms: &Terms,
    kind: Kind,
    path_prefix: Option<&str>,
    limit: usize,
) -> rusqlite::Result<Vec<RawHit>> {
    let prefix = path_prefix.unwrap_or("");
    let prefix_len = i64::try_from(prefix.chars().count()).unwrap_or(0);
    let fetch = i64::try_from(limit.saturating_mul(5).max(50)).unwrap_or(i64::MAX);

    let mut rare: Vec<&str> = Vec::new();
    let mut common: Vec<(&str, &str)> = Vec::new();
    {
        let mut count =
            conn.prepare_cached("SELECT count(*) FROM (SELECT 1 FROM lines WHERE lines MATCH ?1 LIMIT ?2)")?;
        for (query, term) in terms.queries.iter().zip(&terms.all) {
            // Judge a term by its exact form: counting a prefix form first merges the posting
            // lists of every word it starts, which is what makes prefix queries on common
            // words slow.
            let Some(probe) = query.exact.as_deref().or(query.prefix.as_deref()) else {
                continue;
            };
            let rows: i64 = count.query_row(params![probe, COMMON_ROWS + 1], |row| row.get(0))?;
            if rows > COMMON_ROWS {
                common.push((term.as_str(), probe));
            } else if rows >= fetch {
                // Enough lines have the exact word; widening it to a prefix only adds work.
                rare.push(probe);
            } else if rows > 0 || query.prefix.is_some() {
                rare.push(query.prefix.as_deref().unwrap_or(probe));
            }
        }
    }
    let map_row = |row: &rusqlite::Row<'_>| {
        Ok(RawHit {
            path: row.get(0)?,
            line: row.get::<_, i64>(1)?.max(0).unsigned_abs(),
            text: row.get(2)?,
            score: row.get(3)?,
        })
    };
    // `score` is BM25 for rare terms. For common terms it is 0 (plus the bonus below): BM25
    // needs document counts that cost a pass over the whole posting list.
    let select = |expression: &str, score: &str, order: &str| -> rusqlite::Result<Vec<RawHit>> {
        let mut statement = conn.prepare_cached(&format!(
            "SELECT path, line, coalesce(shown, body), {score} FROM lines
             WHERE lines MATCH ?1 AND kind = ?2 AND substr(path, 1, ?3) = ?4
             ORDER BY {order} LIMIT ?5"
        ))?;
        let rows = statement.query_map(params![expression, kind.code(), prefix_len, prefix, fetch], map_row)?;
        rows.collect()
    };
    let mut hits = if !rare.is_empty() {
        select(&rare.join(" OR "), "-bm25(lines)", "bm25(lines)")?
    } else if !common.is_empty() {
        let all: Vec<&str> = common.iter().map(|(_, probe)| *probe).collect();
        let mut hits = select(&all.join(" AND "), "0.0", "rowid DESC")?;
        if hits.len() < limit && all.len() > 1 {
            for hit in select(&all.join(" OR "), "0.0", "rowid DESC")? {
                if !hits.iter().any(|h| h.path == hit.path && h.line == hit.line) {
                    hits.push(hit);
                }
            }
        }
        hits
    } else {
        Vec::new()
    };
    for hit in &mut hits {
        let bonus = common.iter().filter(|(term, _)| contains(&hit.text, term)).count();
        hit.score += f64::from(u32::try_from(bonus).unwrap_or(u32::MAX));
    }
    hits.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.path.cmp(&b.path))
            .then_with(|| a.line.cmp(&b.line))
    });
    hits.truncate(limit);
    Ok(hits)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: RenderLimits = RenderLimits {
        text: 4000,
        tool_input: 300,
        tool_result: 1000,
    };

    fn db() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let conn = open(&dir.path().join("index.sqlite")).unwrap_or_else(|err| panic!("{err}"));
        (dir, conn)
    }

    fn update(conn: &mut Connection, path: &str, text: &str) -> Applied {
        let known = files(conn).unwrap_or_default();
        update_file(
            conn,
            &FileInput {
                path,
                kind: Kind::Memory,
                bytes: text.as_bytes(),
                mtime: None,
                now: 0,
                known: known.get(path),
                limits: LIMITS,
            },
        )
        .unwrap_or_else(|err| panic!("{err}"))
    }

    fn lines_of(conn: &Connection, query_text: &str) -> Vec<(String, u64)> {
        let hits = query(conn, &Terms::parse(query_text), Kind::Memory, None, 50).unwrap_or_else(|err| panic!("{err}"));
        let mut out: Vec<(String, u64)> = hits.into_iter().map(|h| (h.path, h.line)).collect();
        out.sort();
        out
    }

    #[test]
    fn appends_index_only_new_lines_and_cjk_queries_work() {
        let (_dir, mut conn) = db();
        assert_eq!(
            update(&mut conn, "memory/a.md", "今天天气很好\nI write Rust语言 code\npartial"),
            Applied::Reindexed
        );
        assert_eq!(lines_of(&conn, "天气"), [("memory/a.md".to_owned(), 1)]);
        assert_eq!(lines_of(&conn, "Rust语言"), [("memory/a.md".to_owned(), 2)]);
        assert_eq!(lines_of(&conn, "partial"), [("memory/a.md".to_owned(), 3)]);
        assert_eq!(lines_of(&conn, "天"), [("memory/a.md".to_owned(), 1)]);
        assert_eq!(
            update(
                &mut conn,
                "memory/a.md",
                "今天天气很好\nI write Rust语言 code\npartial line\nmore go\n"
            ),
            Applied::Appended
        );
        assert_eq!(lines_of(&conn, "partial"), [("memory/a.md".to_owned(), 3)]);
        assert_eq!(lines_of(&conn, "go"), [("memory/a.md".to_owned(), 4)]);
        assert_eq!(
            update(
                &mut conn,
                "memory/a.md",
                "今天天气很好\nI write Rust语言 code\npartial line\nmore go\n"
            ),
            Applied::Unchanged
        );
        assert_eq!(update(&mut conn, "memory/a.md", "rewritten\n"), Applied::Reindexed);
        assert_eq!(lines_of(&conn, "天气"), []);
        assert_eq!(lines_of(&conn, "rewritten"), [("memory/a.md".to_owned(), 1)]);
        remove_file(&mut conn, "memory/a.md").unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(lines_of(&conn, "rewritten"), []);
        assert!(files(&conn).unwrap_or_default().is_empty());
    }

    #[test]
    fn provenance_is_not_indexed_and_common_words_stay_cheap() {
        let (_dir, mut conn) = db();
        let mut text: String = (1..=1500)
            .map(|n| format!("- The user mentioned item {n} <!-- session=s1 at=2026-01-01T00:00:00Z -->\n"))
            .collect();
        text.push_str("- The user mentioned a zebra <!-- session=s2 at=2026-01-02T00:00:00Z -->\n");
        update(&mut conn, "memory/b.md", &text);
        assert_eq!(lines_of(&conn, "session"), []);
        let hits = query(&conn, &Terms::parse("mentioned zebra"), Kind::Memory, None, 3).unwrap_or_default();
        assert_eq!(hits[0].line, 1501, "the rare term decides");
        assert_eq!(hits[0].text, "- The user mentioned a zebra");
        assert!(hits[0].score > 1.0, "the common term adds to the score");
        let newest = query(&conn, &Terms::parse("mentioned user"), Kind::Memory, None, 3).unwrap_or_default();
        let lines: Vec<u64> = newest.iter().map(|hit| hit.line).collect();
        assert_eq!(lines.len(), 3);
        assert!(
            lines.iter().all(|line| *line > 1400),
            "only common terms: the newest rows, {lines:?}"
        );
    }
}
