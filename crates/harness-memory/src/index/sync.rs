//! Finding the files to index in a namespace, and the plain scan used when the index cannot
//! answer.

use super::store::Kind;
use super::terms::{Terms, count_matches};
use crate::layout::{AGENTS_DIR, MEMORY_DIR, MEMORY_FILE, path};
use crate::transcript::{RenderLimits, parse_transcript, render_message};
use harness_fs::{FileInfo, Filesystem, FsError, WsPath};

/// A file that should be in the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub(crate) path: WsPath,
    pub(crate) kind: Kind,
    pub(crate) size: u64,
    /// Modification time in milliseconds, when the backend knows it.
    pub(crate) mtime: Option<i64>,
}

impl Candidate {
    fn from_info(info: &FileInfo, kind: Kind) -> Self {
        Self {
            path: info.path.clone(),
            kind,
            size: info.size,
            mtime: info.modified.map(|at| at.as_millisecond()),
        }
    }
}

fn missing_is_empty(result: Result<Vec<FileInfo>, FsError>) -> Result<Vec<FileInfo>, FsError> {
    match result {
        Err(FsError::NotFound { .. }) => Ok(Vec::new()),
        other => other,
    }
}

/// The memory files and transcripts of a namespace. Problems with single directories are
/// returned as notes rather than failing the whole listing.
pub(crate) async fn gather(fs: &dyn Filesystem, kinds: &[Kind]) -> (Vec<Candidate>, Vec<String>) {
    let mut found = Vec::new();
    let mut problems = Vec::new();
    if kinds.contains(&Kind::Memory) {
        match fs.stat(&path(MEMORY_FILE)).await {
            Ok(info) if !info.is_dir => found.push(Candidate::from_info(&info, Kind::Memory)),
            Ok(_) | Err(FsError::NotFound { .. }) => {}
            Err(err) => problems.push(format!("{MEMORY_FILE}: {err}")),
        }
        match missing_is_empty(fs.list(&path(MEMORY_DIR)).await) {
            Ok(entries) => found.extend(
                entries
                    .iter()
                    .filter(|info| !info.is_dir && info.path.file_name().ends_with(".md"))
                    .filter(|info| !info.path.file_name().starts_with('.'))
                    .map(|info| Candidate::from_info(info, Kind::Memory)),
            ),
            Err(err) => problems.push(format!("{MEMORY_DIR}/: {err}")),
        }
    }
    if kinds.contains(&Kind::Session) {
        match missing_is_empty(fs.list(&path(AGENTS_DIR)).await) {
            Ok(agents) => {
                for agent in agents.iter().filter(|info| info.is_dir) {
                    let Ok(sessions) = agent.path.join("sessions") else {
                        continue;
                    };
                    match missing_is_empty(fs.list(&sessions).await) {
                        Ok(entries) => found.extend(
                            entries
                                .iter()
                                .filter(|info| !info.is_dir && info.path.file_name().ends_with(".log.jsonl"))
                                .map(|info| Candidate::from_info(info, Kind::Session)),
                        ),
                        Err(FsError::NotDirectory { .. }) => {}
                        Err(err) => problems.push(format!("{sessions}/: {err}")),
                    }
                }
            }
            Err(err) => problems.push(format!("{AGENTS_DIR}/: {err}")),
        }
    }
    (found, problems)
}

/// One hit of the plain scan.
pub(crate) struct ScanHit {
    pub(crate) path: String,
    pub(crate) line: u64,
    pub(crate) text: String,
    pub(crate) score: f64,
}

/// Searches the files themselves, line by line (case-insensitive substrings of any term),
/// ranked by how many terms a line contains. Used when the index is off or broken.
pub(crate) async fn scan(
    fs: &dyn Filesystem,
    kind: Kind,
    path_prefix: Option<&str>,
    terms: &Terms,
    limits: RenderLimits,
    limit: usize,
) -> (Vec<ScanHit>, Vec<String>) {
    let (candidates, mut problems) = gather(fs, &[kind]).await;
    let mut hits = Vec::new();
    for candidate in candidates {
        if path_prefix.is_some_and(|prefix| !candidate.path.as_str().starts_with(prefix)) {
            continue;
        }
        let bytes = match fs.read(&candidate.path).await {
            Ok(bytes) => bytes,
            Err(FsError::NotFound { .. }) => continue,
            Err(err) => {
                problems.push(format!("{}: {err}", candidate.path));
                continue;
            }
        };
        let lines: Vec<(u64, String)> = match kind {
            Kind::Memory => String::from_utf8_lossy(&bytes)
                .lines()
                .zip(1u64..)
                .map(|(text, line)| (line, text.to_owned()))
                .collect(),
            Kind::Session => parse_transcript(&bytes)
                .into_iter()
                .map(|(line, msg)| (u64::try_from(line).unwrap_or(0), render_message(&msg, limits)))
                .collect(),
        };
        for (line, text) in lines {
            let matched = count_matches(&text, &terms.all);
            if matched > 0 {
                hits.push(ScanHit {
                    path: candidate.path.as_str().to_owned(),
                    line,
                    text,
                    score: f64::from(u32::try_from(matched).unwrap_or(u32::MAX)),
                });
            }
        }
    }
    hits.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.path.cmp(&b.path))
            .then_with(|| a.line.cmp(&b.line))
    });
    hits.truncate(limit);
    (hits, problems)
}
