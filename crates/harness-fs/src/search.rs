//! Shared pieces of `glob` and `grep` for every backend: pattern compilation, ripgrep's
//! searcher with a collecting sink, and bounded merging of results.

use crate::error::FsError;
use crate::filesystem::{FileInfo, GrepMatch, GrepOptions};
use crate::path::WsPath;
use crate::text::truncate_chars;
use globset::{GlobBuilder, GlobMatcher};
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkContextKind, SinkMatch};
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Longest line text kept in a [`GrepMatch`], in characters.
pub(crate) const MAX_GREP_LINE_CHARS: usize = 2000;
/// Most context lines before or after a match.
pub(crate) const MAX_CONTEXT: usize = 20;

/// Compiles a glob: `*` and `?` stay within one segment, `**` crosses segments, `{a,b}` and
/// `[..]` work, and a leading `/` is ignored.
///
/// # Errors
/// [`FsError::InvalidArgument`] for a malformed pattern.
pub(crate) fn compile_glob(pattern: &str) -> Result<GlobMatcher, FsError> {
    let trimmed = pattern.trim_start_matches('/');
    GlobBuilder::new(if trimmed.is_empty() { "**" } else { trimmed })
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|glob| glob.compile_matcher())
        .map_err(|err| FsError::InvalidArgument {
            reason: format!("invalid glob pattern {pattern:?}: {}", err.kind()),
        })
}

/// The file filter of a grep: by file name for a glob without `/`, else by the path relative
/// to the search base.
#[derive(Debug, Clone)]
pub(crate) struct FileFilter {
    matcher: Option<GlobMatcher>,
    by_name: bool,
}

impl FileFilter {
    /// # Errors
    /// [`FsError::InvalidArgument`] for a malformed glob.
    pub(crate) fn new(glob: Option<&str>) -> Result<Self, FsError> {
        Ok(match glob.map(str::trim).filter(|glob| !glob.is_empty()) {
            None => Self {
                matcher: None,
                by_name: true,
            },
            Some(glob) => Self {
                matcher: Some(compile_glob(glob)?),
                by_name: !glob.trim_start_matches('/').contains('/'),
            },
        })
    }

    /// Whether the file at `relative` (to the search base) is searched.
    pub(crate) fn accepts(&self, relative: &WsPath) -> bool {
        match &self.matcher {
            None => true,
            Some(matcher) if self.by_name => matcher.is_match(relative.file_name()),
            Some(matcher) => matcher.is_match(relative.as_str()),
        }
    }
}

/// A compiled grep: matcher, searcher and file filter.
#[derive(Debug, Clone)]
pub(crate) struct GrepPlan {
    pub(crate) matcher: RegexMatcher,
    pub(crate) filter: FileFilter,
    pub(crate) context: usize,
    pub(crate) max_matches: usize,
}

impl GrepPlan {
    /// # Errors
    /// [`FsError::InvalidArgument`] for an empty pattern, a malformed regex or glob.
    pub(crate) fn new(options: &GrepOptions) -> Result<Self, FsError> {
        if options.pattern.is_empty() {
            return Err(FsError::InvalidArgument {
                reason: "the search pattern is empty".to_owned(),
            });
        }
        let matcher = RegexMatcherBuilder::new()
            .case_insensitive(options.case_insensitive)
            .fixed_strings(options.literal)
            .line_terminator(Some(b'\n'))
            .build(&options.pattern)
            .map_err(|err| FsError::InvalidArgument {
                reason: format!("invalid regular expression: {err}; set regex=false to search for literal text"),
            })?;
        Ok(Self {
            matcher,
            filter: FileFilter::new(options.glob.as_deref())?,
            context: options.context.min(MAX_CONTEXT),
            max_matches: options.max_matches.max(1),
        })
    }

    pub(crate) fn searcher(&self) -> Searcher {
        SearcherBuilder::new()
            .line_number(true)
            .before_context(self.context)
            .after_context(self.context)
            .binary_detection(BinaryDetection::quit(0))
            .build()
    }
}

/// Collects the matches of one file into `out`, stopping at `max` matches in total.
pub(crate) struct Collector<'a> {
    path: WsPath,
    out: &'a mut Vec<GrepMatch>,
    max: usize,
    before: Vec<String>,
    first_of_file: usize,
}

impl<'a> Collector<'a> {
    pub(crate) fn new(path: WsPath, out: &'a mut Vec<GrepMatch>, max: usize) -> Self {
        let first_of_file = out.len();
        Self {
            path,
            out,
            max,
            before: Vec::new(),
            first_of_file,
        }
    }
}

fn line_text(bytes: &[u8]) -> String {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    truncate_chars(&String::from_utf8_lossy(bytes), MAX_GREP_LINE_CHARS).into_owned()
}

impl Sink for Collector<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _searcher: &Searcher, found: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        let first = usize::try_from(found.line_number().unwrap_or(0)).unwrap_or(usize::MAX);
        for (index, line) in found.lines().enumerate() {
            if self.out.len() >= self.max {
                return Ok(false);
            }
            self.out.push(GrepMatch {
                path: self.path.clone(),
                line: first.saturating_add(index),
                text: line_text(line),
                before: std::mem::take(&mut self.before),
                after: Vec::new(),
            });
        }
        Ok(self.out.len() < self.max)
    }

    fn context(&mut self, _searcher: &Searcher, context: &SinkContext<'_>) -> Result<bool, Self::Error> {
        match context.kind() {
            SinkContextKind::Before => self.before.push(line_text(context.bytes())),
            SinkContextKind::After => {
                if self.out.len() > self.first_of_file
                    && let Some(last) = self.out.last_mut()
                {
                    last.after.push(line_text(context.bytes()));
                }
            }
            SinkContextKind::Other => {}
        }
        Ok(true)
    }
}

/// Greps one in-memory file into `out` (binary content is skipped).
pub(crate) fn grep_bytes(plan: &GrepPlan, path: WsPath, bytes: &[u8], out: &mut Vec<GrepMatch>) {
    if crate::text::looks_binary(bytes) || out.len() >= plan.max_matches {
        return;
    }
    let mut searcher = plan.searcher();
    let collector = Collector::new(path, out, plan.max_matches);
    // Searching a slice cannot fail with IO; a sink error is impossible here.
    let _ = searcher.search_slice(&plan.matcher, bytes, collector);
}

/// Sorts matches by path and line and keeps the first `max`.
pub(crate) fn finish_matches(mut matches: Vec<GrepMatch>, max: usize) -> Vec<GrepMatch> {
    matches.sort_by(|a, b| a.path.cmp(&b.path).then(a.line.cmp(&b.line)));
    matches.truncate(max);
    matches
}

/// Keeps the `limit` entries with the smallest paths, in O(n log limit).
pub(crate) struct SmallestPaths {
    heap: BinaryHeap<ByPath>,
    limit: usize,
}

struct ByPath(FileInfo);

impl PartialEq for ByPath {
    fn eq(&self, other: &Self) -> bool {
        self.0.path == other.0.path
    }
}
impl Eq for ByPath {}
impl PartialOrd for ByPath {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for ByPath {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.path.cmp(&other.0.path)
    }
}

impl SmallestPaths {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            heap: BinaryHeap::new(),
            limit,
        }
    }

    pub(crate) fn push(&mut self, info: FileInfo) {
        if self.limit == 0 {
            return;
        }
        if self.heap.len() < self.limit {
            self.heap.push(ByPath(info));
        } else if self.heap.peek().is_some_and(|largest| info.path < largest.0.path) {
            self.heap.pop();
            self.heap.push(ByPath(info));
        }
    }

    pub(crate) fn into_sorted(self) -> Vec<FileInfo> {
        self.heap.into_sorted_vec().into_iter().map(|entry| entry.0).collect()
    }
}

/// Sorted union of listings: the first occurrence of a path wins.
pub(crate) fn union_by_path(layers: impl IntoIterator<Item = Vec<FileInfo>>) -> Vec<FileInfo> {
    let mut merged: std::collections::BTreeMap<WsPath, FileInfo> = std::collections::BTreeMap::new();
    for layer in layers {
        for info in layer {
            merged.entry(info.path.clone()).or_insert(info);
        }
    }
    merged.into_values().collect()
}
