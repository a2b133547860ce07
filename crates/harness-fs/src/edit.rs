//! Finding and replacing `old_string` in a file's text: exact first, then a line-ending
//! adaptation, then a whitespace- and indentation-insensitive line match, then a bounded
//! similarity match. Every step is linear in the file size except the last, which only scores
//! a handful of candidate windows.

use std::hash::{DefaultHasher, Hash, Hasher};

/// What an edit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditOutcome {
    /// How many replacements were made.
    pub replacements: usize,
    /// When the exact text was not found and a whitespace-tolerant match was used: a
    /// description of what was matched (lines and similarity).
    pub fuzzy: Option<String>,
    /// 1-based line of the first replacement.
    pub line: usize,
}

/// Minimum similarity (normalised Levenshtein over whitespace-collapsed text) for a fuzzy
/// replacement.
pub(crate) const SIMILARITY_THRESHOLD: f64 = 0.92;
/// Similarity below which no "closest text" hint is given.
const HINT_THRESHOLD: f64 = 0.5;
/// Most candidate windows scored by the similarity step.
const MAX_CANDIDATES: usize = 8;
/// Longest text (characters) compared by the similarity step.
const MAX_SIMILARITY_CHARS: usize = 8_000;
/// Most line numbers listed for an ambiguous match.
const MAX_LISTED_LINES: usize = 20;

/// Why an edit cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EditFailure {
    /// The arguments make no sense (empty or identical strings).
    Invalid(String),
    /// Nothing matched; the hint starts with `; ` when present.
    NoMatch { hint: String },
    /// Several matches and no `replace_all`.
    NotUnique { count: usize, lines: Vec<usize> },
}

/// The new text and what was done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EditPlan {
    pub(crate) text: String,
    pub(crate) outcome: EditOutcome,
}

/// Plans the replacement of `old` by `new` in `text`.
pub(crate) fn plan(text: &str, old: &str, new: &str, replace_all: bool) -> Result<EditPlan, EditFailure> {
    if old.is_empty() {
        return Err(EditFailure::Invalid(
            "old_string is empty; use write_file to create or replace a whole file".to_owned(),
        ));
    }
    if old == new {
        return Err(EditFailure::Invalid(
            "old_string and new_string are identical; there is nothing to change".to_owned(),
        ));
    }
    if let Some(plan) = exact(text, old, new, replace_all)? {
        return Ok(plan);
    }
    // The file uses CRLF but the model sent LF: adapt both strings.
    if text.contains("\r\n") && old.contains('\n') && !old.contains("\r\n") {
        let old_crlf = old.replace('\n', "\r\n");
        let new_crlf = new.replace("\r\n", "\n").replace('\n', "\r\n");
        if let Some(plan) = exact(text, &old_crlf, &new_crlf, replace_all)? {
            return Ok(plan);
        }
    }
    let lines = LineTable::new(text);
    let needle = Needle::new(old, new);
    if needle.lines.is_empty() {
        return Err(EditFailure::NoMatch { hint: String::new() });
    }
    if let Some(plan) = whitespace_insensitive(text, &lines, &needle, replace_all)? {
        return Ok(plan);
    }
    similar_window(text, &lines, &needle)
}

fn exact(text: &str, old: &str, new: &str, replace_all: bool) -> Result<Option<EditPlan>, EditFailure> {
    let starts: Vec<usize> = text.match_indices(old).map(|(at, _)| at).collect();
    let Some(&first) = starts.first() else {
        return Ok(None);
    };
    let lines = || LineTable::new(text);
    if starts.len() > 1 && !replace_all {
        let table = lines();
        return Err(EditFailure::NotUnique {
            count: starts.len(),
            lines: starts
                .iter()
                .take(MAX_LISTED_LINES)
                .map(|at| table.line_of(*at) + 1)
                .collect(),
        });
    }
    let mut out = String::with_capacity(text.len() + starts.len() * new.len().saturating_sub(old.len()));
    let mut copied = 0;
    for at in &starts {
        out.push_str(&text[copied..*at]);
        out.push_str(new);
        copied = at + old.len();
    }
    out.push_str(&text[copied..]);
    let line = text[..first].bytes().filter(|byte| *byte == b'\n').count() + 1;
    Ok(Some(EditPlan {
        text: out,
        outcome: EditOutcome {
            replacements: starts.len(),
            fuzzy: None,
            line,
        },
    }))
}

/// Byte ranges of a text's lines.
struct LineTable {
    /// `(start, end)` of each line, `end` excluding `\n` and a preceding `\r`.
    spans: Vec<(usize, usize)>,
}

impl LineTable {
    fn new(text: &str) -> Self {
        let mut spans = Vec::new();
        let mut start = 0;
        let bytes = text.as_bytes();
        while start <= bytes.len() {
            let end = bytes[start..]
                .iter()
                .position(|byte| *byte == b'\n')
                .map_or(bytes.len(), |at| start + at);
            let trimmed = if end > start && bytes[end - 1] == b'\r' {
                end - 1
            } else {
                end
            };
            if end == bytes.len() && start == end && !spans.is_empty() {
                break; // no extra empty line after a final newline
            }
            spans.push((start, trimmed));
            start = end + 1;
        }
        Self { spans }
    }

    fn len(&self) -> usize {
        self.spans.len()
    }

    fn line<'t>(&self, text: &'t str, index: usize) -> &'t str {
        let (start, end) = self.spans[index];
        &text[start..end]
    }

    /// 0-based line containing byte `at`.
    fn line_of(&self, at: usize) -> usize {
        self.spans.partition_point(|(start, _)| *start <= at).saturating_sub(1)
    }
}

/// `old_string` and `new_string` prepared for line matching: outer blank lines dropped.
struct Needle<'a> {
    lines: Vec<&'a str>,
    normalized: Vec<String>,
    hashes: Vec<u64>,
    replacement: Vec<&'a str>,
}

impl<'a> Needle<'a> {
    fn new(old: &'a str, new: &'a str) -> Self {
        let split = |text: &'a str| -> Vec<&'a str> {
            text.split('\n')
                .map(|line| line.strip_suffix('\r').unwrap_or(line))
                .collect()
        };
        let mut lines = split(old);
        let leading = lines.iter().take_while(|line| line.trim().is_empty()).count();
        lines.drain(..leading);
        while lines.last().is_some_and(|line| line.trim().is_empty()) {
            lines.pop();
        }
        // Drop as many outer empty lines from the replacement as were dropped from the old text.
        let mut replacement = split(new);
        let drop_front = leading.min(replacement.iter().take_while(|line| line.trim().is_empty()).count());
        replacement.drain(..drop_front);
        let trailing_old = split(old)
            .iter()
            .rev()
            .take_while(|line| line.trim().is_empty())
            .count();
        for _ in 0..trailing_old {
            if replacement.last().is_some_and(|line| line.trim().is_empty()) {
                replacement.pop();
            }
        }
        let normalized: Vec<String> = lines.iter().map(|line| normalize(line)).collect();
        let hashes = normalized.iter().map(|line| hash_of(line)).collect();
        Self {
            lines,
            normalized,
            hashes,
            replacement,
        }
    }
}

/// A line with whitespace runs collapsed and the ends trimmed.
fn normalize(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    for word in line.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

fn hash_of(text: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

fn indent_of(line: &str) -> &str {
    &line[..line.len() - line.trim_start().len()]
}

/// Starts of non-overlapping windows of the file whose normalised lines equal the needle's,
/// found with a rolling hash over line hashes (linear in the number of lines).
fn find_normalized(text: &str, table: &LineTable, needle: &Needle<'_>) -> Vec<usize> {
    let m = needle.hashes.len();
    let n = table.len();
    if m == 0 || m > n {
        return Vec::new();
    }
    const BASE: u64 = 1_000_003;
    let file_normalized: Vec<String> = (0..n).map(|index| normalize(table.line(text, index))).collect();
    let file_hashes: Vec<u64> = file_normalized.iter().map(|line| hash_of(line)).collect();
    let roll = |hashes: &[u64]| {
        hashes
            .iter()
            .fold(0u64, |acc, h| acc.wrapping_mul(BASE).wrapping_add(*h))
    };
    let target = roll(&needle.hashes);
    let top = (1..m).fold(1u64, |acc, _| acc.wrapping_mul(BASE));
    let mut current = roll(&file_hashes[..m]);
    let mut found = Vec::new();
    let mut start = 0;
    let mut next_allowed = 0;
    loop {
        if start >= next_allowed
            && current == target
            && file_normalized[start..start + m]
                .iter()
                .zip(&needle.normalized)
                .all(|(a, b)| a == b)
        {
            found.push(start);
            next_allowed = start + m;
        }
        if start + m >= n {
            break;
        }
        current = current
            .wrapping_sub(file_hashes[start].wrapping_mul(top))
            .wrapping_mul(BASE)
            .wrapping_add(file_hashes[start + m]);
        start += 1;
    }
    found
}

/// The replacement for lines `first..first + m` of the file: the new lines re-indented from
/// the old text's indentation to the file's, with the file's line ending.
///
/// Each old line is aligned with its file line, which maps old indentation strings to the
/// file's (e.g. two spaces → four, four → a tab). A new line's indentation is rewritten with
/// the longest mapped old indentation it starts with; the rest of it is kept.
fn replacement_for(text: &str, table: &LineTable, needle: &Needle<'_>, first: usize) -> String {
    let mut indents: Vec<(&str, &str)> = Vec::new();
    for (offset, old_line) in needle.lines.iter().enumerate() {
        let file_line = table.line(text, first + offset);
        if old_line.trim().is_empty() || file_line.trim().is_empty() {
            continue;
        }
        let old_indent = indent_of(old_line);
        if !indents.iter().any(|(known, _)| *known == old_indent) {
            indents.push((old_indent, indent_of(file_line)));
        }
    }
    // Longest old indentation first, so the most specific mapping wins.
    indents.sort_by_key(|(old_indent, _)| std::cmp::Reverse(old_indent.len()));
    let (start, _) = table.spans[first];
    let crlf = text[start..]
        .find('\n')
        .is_some_and(|at| at > 0 && text.as_bytes()[start + at - 1] == b'\r');
    let mut out = String::new();
    for (index, line) in needle.replacement.iter().enumerate() {
        if index > 0 {
            out.push_str(if crlf { "\r\n" } else { "\n" });
        }
        let mapped = (!line.trim().is_empty())
            .then(|| indents.iter().find(|(old_indent, _)| line.starts_with(old_indent)))
            .flatten();
        match mapped {
            Some((old_indent, file_indent)) if old_indent != file_indent => {
                out.push_str(file_indent);
                out.push_str(&line[old_indent.len()..]);
            }
            _ => out.push_str(line),
        }
    }
    out
}

fn splice(text: &str, table: &LineTable, needle: &Needle<'_>, starts: &[usize]) -> String {
    let m = needle.lines.len();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for first in starts {
        let (start, _) = table.spans[*first];
        let (_, end) = table.spans[first + m - 1];
        out.push_str(&text[copied..start]);
        out.push_str(&replacement_for(text, table, needle, *first));
        copied = end;
    }
    out.push_str(&text[copied..]);
    out
}

fn whitespace_insensitive(
    text: &str,
    table: &LineTable,
    needle: &Needle<'_>,
    replace_all: bool,
) -> Result<Option<EditPlan>, EditFailure> {
    let starts = find_normalized(text, table, needle);
    let Some(&first) = starts.first() else {
        return Ok(None);
    };
    if starts.len() > 1 && !replace_all {
        return Err(EditFailure::NotUnique {
            count: starts.len(),
            lines: starts.iter().take(MAX_LISTED_LINES).map(|at| at + 1).collect(),
        });
    }
    let m = needle.lines.len();
    let where_ = starts
        .iter()
        .take(MAX_LISTED_LINES)
        .map(|at| line_range(at + 1, at + m))
        .collect::<Vec<_>>()
        .join(", ");
    Ok(Some(EditPlan {
        text: splice(text, table, needle, &starts),
        outcome: EditOutcome {
            replacements: starts.len(),
            fuzzy: Some(format!(
                "old_string did not match exactly; replaced line(s) {where_}, which match it when whitespace and indentation are ignored"
            )),
            line: first + 1,
        },
    }))
}

fn line_range(first: usize, last: usize) -> String {
    if first == last {
        first.to_string()
    } else {
        format!("{first}-{last}")
    }
}

/// Scores at most [`MAX_CANDIDATES`] windows (chosen by how many of their lines occur in the
/// needle) by normalised Levenshtein similarity, and replaces the best one when it clears
/// [`SIMILARITY_THRESHOLD`] and is unambiguous.
fn similar_window(text: &str, table: &LineTable, needle: &Needle<'_>) -> Result<EditPlan, EditFailure> {
    let m = needle.lines.len();
    let n = table.len();
    let needle_text = needle.normalized.join("\n");
    let mut scored: Vec<(f64, usize)> = Vec::new();
    if m <= n && needle_text.chars().count() <= MAX_SIMILARITY_CHARS {
        let wanted: std::collections::HashSet<u64> = needle.hashes.iter().copied().collect();
        let hits: Vec<bool> = (0..n)
            .map(|index| wanted.contains(&hash_of(&normalize(table.line(text, index)))))
            .collect();
        // Sliding count of needle lines per window.
        let mut count = hits[..m].iter().filter(|hit| **hit).count();
        let mut windows: Vec<(usize, usize)> = Vec::new();
        for start in 0..=n - m {
            if start > 0 {
                count -= usize::from(hits[start - 1]);
                count += usize::from(hits[start + m - 1]);
            }
            if count > 0 {
                windows.push((count, start));
            }
        }
        if m == 1 && windows.is_empty() {
            // A single line with no normalised twin: score the lines sharing its longest word.
            if let Some(word) = needle.normalized[0].split(' ').max_by_key(|word| word.len()) {
                windows.extend(
                    (0..n)
                        .filter(|index| word.len() >= 3 && table.line(text, *index).contains(word))
                        .take(MAX_CANDIDATES * 4)
                        .map(|index| (1, index)),
                );
            }
        }
        windows.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for (_, start) in windows.into_iter().take(MAX_CANDIDATES * 4) {
            if scored.len() >= MAX_CANDIDATES {
                break;
            }
            let window: Vec<String> = (start..start + m)
                .map(|index| normalize(table.line(text, index)))
                .collect();
            let window_text = window.join("\n");
            if window_text.chars().count() > MAX_SIMILARITY_CHARS {
                continue;
            }
            scored.push((strsim::normalized_levenshtein(&window_text, &needle_text), start));
        }
    }
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let Some(&(best, start)) = scored.first() else {
        return Err(EditFailure::NoMatch { hint: String::new() });
    };
    let excerpt = |start: usize| harness_core::excerpt(table.line(text, start).trim(), 80);
    if best < SIMILARITY_THRESHOLD {
        let hint = if best >= HINT_THRESHOLD {
            format!(
                "; the closest text is at line(s) {} ({:.0}% similar, starting `{}`); read the file and copy the text exactly",
                line_range(start + 1, start + m),
                best * 100.0,
                excerpt(start)
            )
        } else {
            "; read the file and copy the text to replace exactly".to_owned()
        };
        return Err(EditFailure::NoMatch { hint });
    }
    let rivals: Vec<usize> = scored
        .iter()
        .filter(|(score, other)| *score >= SIMILARITY_THRESHOLD && other.abs_diff(start) >= m)
        .map(|(_, other)| *other)
        .collect();
    if !rivals.is_empty() {
        let mut lines: Vec<usize> = std::iter::once(start).chain(rivals).map(|at| at + 1).collect();
        lines.sort_unstable();
        return Err(EditFailure::NotUnique {
            count: lines.len(),
            lines,
        });
    }
    Ok(EditPlan {
        text: splice(text, table, needle, &[start]),
        outcome: EditOutcome {
            replacements: 1,
            fuzzy: Some(format!(
                "old_string did not match exactly; replaced line(s) {} ({:.0}% similar, starting `{}`); check the result",
                line_range(start + 1, start + m),
                best * 100.0,
                excerpt(start)
            )),
            line: start + 1,
        },
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn check(text: &str, old: &str, new: &str, replace_all: bool) -> Result<(String, EditOutcome), EditFailure> {
        plan(text, old, new, replace_all).map(|plan| (plan.text, plan.outcome))
    }

    #[test]
    fn exact_unique_and_all() {
        let (text, outcome) = check("a b a", "b", "c", false).unwrap();
        assert_eq!((text.as_str(), outcome.replacements, outcome.fuzzy), ("a c a", 1, None));
        assert_eq!(
            check("x\na\ny\na\n", "a", "b", false),
            Err(EditFailure::NotUnique {
                count: 2,
                lines: vec![2, 4]
            })
        );
        let (text, outcome) = check("x\na\ny\na\n", "a", "b", true).unwrap();
        assert_eq!(
            (text.as_str(), outcome.replacements, outcome.line),
            ("x\nb\ny\nb\n", 2, 2)
        );
        assert!(matches!(check("abc", "", "x", false), Err(EditFailure::Invalid(_))));
        assert!(matches!(check("abc", "b", "b", false), Err(EditFailure::Invalid(_))));
    }

    #[test]
    fn crlf_files_keep_their_endings() {
        let (text, outcome) = check("a\r\nb\r\nc\r\n", "a\nb\n", "x\ny\n", false).unwrap();
        assert_eq!(text, "x\r\ny\r\nc\r\n");
        assert_eq!(outcome.fuzzy, None);
    }

    #[test]
    fn whitespace_and_indentation_are_tolerated_and_reported() {
        let file = "fn main() {\n\tif x {\n\t\tcall(1,  2);\n\t}\n}\n";
        let old = "    if x {\n        call(1, 2);\n    }";
        let new = "    if y {\n        call(3);\n    }";
        let (text, outcome) = check(file, old, new, false).unwrap();
        assert_eq!(text, "fn main() {\n\tif y {\n\t\tcall(3);\n\t}\n}\n");
        assert_eq!(outcome.line, 2);
        assert!(outcome.fuzzy.unwrap().contains("2-4"));
    }

    #[test]
    fn ambiguous_fuzzy_matches_list_lines() {
        let file = "  a  b\nx\na b\n";
        assert_eq!(
            check(file, "a b ", "c", false),
            Err(EditFailure::NotUnique {
                count: 2,
                lines: vec![1, 3]
            })
        );
    }

    #[test]
    fn similar_text_above_threshold_is_replaced_below_it_hints() {
        let file = "one\nlet total = compute_sum(values, options);\nreturn total;\nthree\n";
        let old = "let total = compute_sums(values, options);\nreturn total;";
        let (text, outcome) = check(file, old, "done();", false).unwrap();
        assert_eq!(text, "one\ndone();\nthree\n");
        assert!(outcome.fuzzy.unwrap().contains("similar"));
        match check(file, "let total = something_else(1);\nreturn total;", "x", false) {
            Err(EditFailure::NoMatch { hint }) => assert!(hint.contains("closest text is at line(s) 2-3"), "{hint}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            check(file, "zzz qqq", "x", false),
            Err(EditFailure::NoMatch { hint: String::new() })
        );
    }

    #[test]
    fn large_files_stay_linear() {
        // 200k identical lines: exact, normalised and similarity steps all stay fast.
        let file = "    same line here\n".repeat(200_000);
        let started = std::time::Instant::now();
        assert!(matches!(
            check(&file, "same line here", "x", false),
            Err(EditFailure::NotUnique { count: 200_000, .. })
        ));
        assert!(matches!(
            check(&file, "same  line  here\nsame line here\nnot here at all", "x", false),
            Err(EditFailure::NoMatch { .. })
        ));
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }
}
