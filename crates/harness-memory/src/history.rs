//! What consolidation keeps of the `MEMORY.md` it replaces: a bounded history of previous
//! versions (`memory/.history/MEMORY-<timestamp>.md`, the newest [`HISTORY_KEEP`]) and the
//! rule that refuses an output dropping most of the existing content without saying so.
//!
//! The rule: every non-empty, non-heading line of the current file is one piece of content;
//! it is *kept* when at least half of its words (three characters or more, common words
//! such as "the user" left out; every character for text without spaces, such as Chinese) appear in the new output. When fewer than half
//! of the pieces are kept (and there are at least [`MIN_LINES_CHECKED`]), the output must
//! carry a removal note — a line starting with [`REMOVAL_NOTE`], e.g.
//! `<!-- removed: the old project notes are obsolete -->` — or it is refused and the old
//! file stays.

use crate::error::MemoryError;
use crate::layout::{fact_text, path};
use harness_fs::{Filesystem, FsError, WriteMode};
use std::collections::HashSet;

/// The directory of previous `MEMORY.md` versions.
pub const HISTORY_DIR: &str = "memory/.history";
/// Previous versions kept.
pub const HISTORY_KEEP: usize = 10;
/// How a consolidation output says it removed content on purpose (an HTML comment, hidden
/// when rendered).
pub const REMOVAL_NOTE: &str = "<!-- removed:";
/// Files with fewer content lines than this are not checked (a rewrite of two lines is not
/// drastic).
pub(crate) const MIN_LINES_CHECKED: usize = 4;

/// Words too common in facts to show that one was kept.
const COMMON: &[&str] = &[
    "the", "user", "users", "and", "with", "that", "this", "for", "has", "have", "are", "was", "were", "they", "their",
    "from", "into", "about",
];

/// The words of `text` that count for retention.
fn words(text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    let mut out: Vec<String> = lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| word.chars().count() >= 3 && !COMMON.contains(word))
        .map(str::to_owned)
        .collect();
    // Text without ASCII word boundaries (CJK): every character is a word.
    out.extend(
        lower
            .chars()
            .filter(|c| c.is_alphanumeric() && !c.is_ascii())
            .map(|c| c.to_string()),
    );
    out
}

/// The content lines of a `MEMORY.md`: non-empty, not headings, not comments.
fn content_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#') && !line.starts_with("<!--"))
}

/// How many of the current file's content lines the new output keeps, of how many.
pub(crate) fn retention(current: &str, output: &str) -> (usize, usize) {
    let kept_words: HashSet<String> = words(output).into_iter().collect();
    let mut total = 0usize;
    let mut kept = 0usize;
    for line in content_lines(current) {
        let line_words = words(fact_text(line));
        if line_words.is_empty() {
            continue;
        }
        total += 1;
        let present = line_words.iter().filter(|word| kept_words.contains(*word)).count();
        if present * 2 >= line_words.len() {
            kept += 1;
        }
    }
    (kept, total)
}

/// Refuses `output` when it drops most of `current` without a removal note.
///
/// # Errors
/// [`MemoryError::DrasticRewrite`].
pub(crate) fn check_retention(current: &str, output: &str) -> Result<(), MemoryError> {
    let (kept, total) = retention(current, output);
    if total < MIN_LINES_CHECKED || kept * 2 >= total {
        return Ok(());
    }
    if output.lines().any(|line| line.trim_start().starts_with(REMOVAL_NOTE)) {
        return Ok(());
    }
    Err(MemoryError::DrasticRewrite { kept, total })
}

/// Saves `current` as `memory/.history/MEMORY-<timestamp>.md` (unless the newest saved
/// version is identical) and deletes the oldest beyond [`HISTORY_KEEP`]. Called before
/// `MEMORY.md` is replaced, so a crash in between leaves the copy, never a loss.
///
/// # Errors
/// [`MemoryError::Fs`] when the copy cannot be written (then `MEMORY.md` is not replaced).
pub(crate) async fn save(fs: &dyn Filesystem, current: &str) -> Result<(), MemoryError> {
    if current.trim().is_empty() {
        return Ok(());
    }
    let mut versions = list(fs).await?;
    if let Some(newest) = versions.last()
        && let Ok(bytes) = fs.read(&path(&format!("{HISTORY_DIR}/{newest}"))).await
        && bytes == current.as_bytes()
    {
        return Ok(());
    }
    let stamp = jiff::Timestamp::now().strftime("%Y%m%dT%H%M%S%.9fZ").to_string();
    let name = format!("MEMORY-{stamp}.md");
    match fs
        .write(
            &path(&format!("{HISTORY_DIR}/{name}")),
            current.as_bytes(),
            WriteMode::CreateNew,
        )
        .await
    {
        Ok(()) | Err(FsError::AlreadyExists { .. }) => {}
        Err(err) => return Err(err.into()),
    }
    versions.push(name);
    versions.sort();
    let excess = versions.len().saturating_sub(HISTORY_KEEP);
    for old in &versions[..excess] {
        if let Err(err) = fs.delete(&path(&format!("{HISTORY_DIR}/{old}"))).await {
            tracing::warn!(file = %old, error = %err, "could not prune an old MEMORY.md version");
        }
    }
    Ok(())
}

/// The saved versions' file names, oldest first.
async fn list(fs: &dyn Filesystem) -> Result<Vec<String>, MemoryError> {
    let mut names: Vec<String> = match fs.list(&path(HISTORY_DIR)).await {
        Ok(entries) => entries
            .into_iter()
            .filter(|info| !info.is_dir)
            .map(|info| info.path.file_name().to_owned())
            .filter(|name| name.starts_with("MEMORY-") && name.ends_with(".md"))
            .collect(),
        Err(FsError::NotFound { .. }) => Vec::new(),
        Err(err) => return Err(err.into()),
    };
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CURRENT: &str = "# Memory\n\n## Work\n- The user works on Harness, a Rust runtime.\n\
        - The user prefers green tea.\n- The user's cat is called Miso.\n- The user lives in Lyon.\n";

    #[test]
    fn a_merge_that_keeps_the_facts_passes() {
        let output = "# Memory\n- The user works on Harness (Rust runtime).\n- The user prefers green tea.\n\
            - The user's cat is called Miso.\n- The user lives in Lyon, France.\n- New: the user likes jazz.\n";
        assert_eq!(retention(CURRENT, output), (4, 4));
        assert!(check_retention(CURRENT, output).is_ok());
    }

    #[test]
    fn a_drastic_output_is_refused_unless_it_says_so() {
        let output = "# Memory\n- The user likes jazz.\n";
        assert_eq!(retention(CURRENT, output), (0, 4));
        assert!(matches!(
            check_retention(CURRENT, output),
            Err(MemoryError::DrasticRewrite { kept: 0, total: 4 })
        ));
        let noted = "# Memory\n<!-- removed: everything before was obsolete -->\n- The user likes jazz.\n";
        assert!(check_retention(CURRENT, noted).is_ok());
        // Tiny files are not checked.
        assert!(check_retention("- one fact here\n", "- another thing\n").is_ok());
    }

    #[test]
    fn chinese_text_counts_by_character() {
        let current = "- 用户喜欢绿茶\n- 用户住在上海\n- 用户养了一只猫\n- 用户是工程师\n";
        assert_eq!(
            retention(current, "- 用户喜欢绿茶，住在上海，养了一只猫，是工程师\n"),
            (4, 4)
        );
        assert_eq!(retention(current, "- 天气\n").0, 0);
    }
}
