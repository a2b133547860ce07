//! Query terms, the indexed form of a line, and snippets.
//!
//! The index is a word index: FTS5 with the `unicode61` tokenizer (case and diacritics
//! folded). CJK text has no spaces between words, so before a line is indexed every run of
//! CJK characters is rewritten as its overlapping bigrams followed by its last character
//! (`今天天气` → `今天 天天 天气 气`). A query term is rewritten the same way:
//!
//! - two or more CJK characters become the phrase of their bigrams (`天气预报` →
//!   `"天气 气预 预报"`), which matches exactly where those characters are adjacent;
//! - a single CJK character becomes a prefix query (`"茶"*`), which finds it as the first
//!   character of a bigram or as the last character of a run — every occurrence;
//! - a CJK term of five or more characters (a sentence typed without spaces) becomes its
//!   bigrams as separate terms, so lines sharing most of them rank first;
//! - other terms are phrases of their words (`node.js` → `"node js"`); when the exact word
//!   is rare, a final word of four or more letters also matches as a prefix (`deploy` finds
//!   `deployment`).
//!
//! Why not FTS5's `trigram` tokenizer: it cannot match two-character terms at all, and on
//! the 100,000-line benchmark corpus (`benches/memory-bench.rs`) an earlier trigram version
//! of this index built an 80 MB database (this one: 27.5 MB), indexed 24,000 lines/s (this
//! one: about 110,000) and answered one-word queries in 7.2 ms at the median (this one:
//! about 1.3 ms).

/// Whether `c` is written without spaces between words (Han, kana, Hangul).
pub(crate) fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // Hiragana, Katakana
        | 0x3400..=0x4DBF    // CJK Extension A
        | 0x4E00..=0x9FFF    // CJK Unified Ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0x1100..=0x11FF    // Hangul Jamo
        | 0xF900..=0xFAFF    // CJK Compatibility Ideographs
        | 0x20000..=0x2FA1F  // Extensions B–F, compatibility supplement
    )
}

/// Rewrites every CJK run of `text` with `run` and keeps everything else.
fn rewrite_runs(text: &str, mut run: impl FnMut(&[char], &mut String)) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    let mut current: Vec<char> = Vec::new();
    for c in text.chars() {
        if is_cjk(c) {
            current.push(c);
            continue;
        }
        if !current.is_empty() {
            run(&current, &mut out);
            current.clear();
        }
        out.push(c);
    }
    if !current.is_empty() {
        run(&current, &mut out);
    }
    out
}

/// The text the index tokenizes for a line, or `None` when it is the line itself (no CJK).
pub(crate) fn indexed_form(text: &str) -> Option<String> {
    if !text.chars().any(is_cjk) {
        return None;
    }
    Some(rewrite_runs(text, |run, out| {
        out.push(' ');
        for pair in run.windows(2) {
            out.extend(pair);
            out.push(' ');
        }
        if let Some(last) = run.last() {
            out.push(*last);
        }
        out.push(' ');
    }))
}

/// The FTS5 forms of one query term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TermQuery {
    /// The term as a phrase (`None` for a lone CJK character, which only has a prefix form).
    pub(crate) exact: Option<String>,
    /// The phrase with its last token as a prefix (`"deploy"*`), when the term allows it.
    pub(crate) prefix: Option<String>,
}

/// The FTS5 forms of one query term, or `None` when it has nothing searchable.
fn term_query(term: &str) -> Option<TermQuery> {
    if !term.chars().any(|c| c.is_alphanumeric() || is_cjk(c)) {
        return None;
    }
    let mut ends_with_single_cjk = false;
    let rewritten = rewrite_runs(term, |run, out| {
        out.push(' ');
        if let [single] = run {
            out.push(*single);
            ends_with_single_cjk = true;
        } else {
            for pair in run.windows(2) {
                out.extend(pair);
                out.push(' ');
            }
            ends_with_single_cjk = false;
        }
        out.push(' ');
    });
    let ends_in_cjk = term.chars().last().is_some_and(is_cjk);
    let last_word_len = term
        .rsplit(|c: char| !c.is_alphanumeric() || is_cjk(c))
        .next()
        .map_or(0, |word| word.chars().count());
    let phrase = format!(
        "\"{}\"",
        rewritten
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .replace('"', "\"\"")
    );
    Some(if ends_in_cjk && ends_with_single_cjk {
        TermQuery {
            exact: None,
            prefix: Some(format!("{phrase}*")),
        }
    } else if !ends_in_cjk && last_word_len >= 4 {
        TermQuery {
            prefix: Some(format!("{phrase}*")),
            exact: Some(phrase),
        }
    } else {
        TermQuery {
            exact: Some(phrase),
            prefix: None,
        }
    })
}

/// A parsed query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Terms {
    /// The FTS5 forms of each searchable term.
    pub(crate) queries: Vec<TermQuery>,
    /// The terms as typed (for snippets and the scan fallback), parallel to `queries`.
    pub(crate) all: Vec<String>,
}

impl Terms {
    /// Splits a query on whitespace, trims punctuation around each term, and rewrites each.
    pub(crate) fn parse(query: &str) -> Self {
        let mut terms = Self::default();
        for raw in query.split_whitespace() {
            let term = raw.trim_matches(|c: char| {
                matches!(
                    c,
                    '"' | '\''
                        | '`'
                        | ','
                        | '.'
                        | '?'
                        | '!'
                        | '('
                        | ')'
                        | '['
                        | ']'
                        | '{'
                        | '}'
                        | ':'
                        | ';'
                        | '，'
                        | '。'
                        | '？'
                        | '！'
                        | '、'
                        | '：'
                        | '；'
                        | '“'
                        | '”'
                        | '《'
                        | '》'
                        | '*'
                )
            });
            if term.is_empty() || terms.all.iter().any(|t| t.to_lowercase() == term.to_lowercase()) {
                continue;
            }
            let chars: Vec<char> = term.chars().collect();
            if chars.len() >= 5 && chars.iter().all(|c| is_cjk(*c)) {
                // A sentence typed without spaces: any of its bigrams, ranked by how many match.
                for pair in chars.windows(2) {
                    let bigram: String = pair.iter().collect();
                    if !terms.all.contains(&bigram) {
                        terms.queries.push(TermQuery {
                            exact: Some(format!("\"{bigram}\"")),
                            prefix: None,
                        });
                        terms.all.push(bigram);
                    }
                }
                continue;
            }
            if let Some(query) = term_query(term) {
                terms.queries.push(query);
                terms.all.push(term.to_owned());
            }
        }
        terms
    }

    /// Whether nothing searchable was given.
    pub(crate) fn is_empty(&self) -> bool {
        self.queries.is_empty()
    }
}

fn fold(c: char) -> char {
    c.to_lowercase().next().unwrap_or(c)
}

/// Where the first of `terms` occurs in `chars` (case-insensitive), as a char index.
fn first_match(chars: &[char], terms: &[String]) -> Option<(usize, usize)> {
    let mut best: Option<(usize, usize)> = None;
    for term in terms {
        let needle: Vec<char> = term.chars().map(fold).collect();
        if needle.is_empty() || needle.len() > chars.len() {
            continue;
        }
        let found = (0..=chars.len() - needle.len()).find(|&at| {
            chars[at..at + needle.len()]
                .iter()
                .zip(&needle)
                .all(|(a, b)| fold(*a) == *b)
        });
        if let Some(at) = found
            && best.is_none_or(|(b, _)| at < b)
        {
            best = Some((at, needle.len()));
        }
    }
    best
}

/// Whether `text` contains `term`, case-insensitively.
pub(crate) fn contains(text: &str, term: &str) -> bool {
    let chars: Vec<char> = text.chars().collect();
    first_match(&chars, std::slice::from_ref(&term.to_owned())).is_some()
}

/// Count of `terms` found in `text`, case-insensitively.
pub(crate) fn count_matches(text: &str, terms: &[String]) -> usize {
    let chars: Vec<char> = text.chars().collect();
    terms
        .iter()
        .filter(|term| first_match(&chars, std::slice::from_ref(*term)).is_some())
        .count()
}

/// At most `width` characters of `text` around the first match of any term, with `…` where
/// it was cut. Never splits a character.
pub(crate) fn snippet(text: &str, terms: &[String], width: usize) -> String {
    let chars: Vec<char> = text.trim().chars().collect();
    if chars.len() <= width {
        return chars.into_iter().collect();
    }
    let (at, len) = first_match(&chars, terms).unwrap_or((0, 0));
    let lead = width.saturating_sub(len) / 3;
    let start = at.saturating_sub(lead).min(chars.len() - width);
    let end = (start + width).min(chars.len());
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    out.extend(&chars[start..end]);
    if end < chars.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cjk_runs_become_bigrams_and_a_last_character() {
        assert_eq!(
            indexed_form("今天天气很好").as_deref().map(str::trim),
            Some("今天 天天 天气 气很 很好 好")
        );
        assert_eq!(indexed_form("I use Rust语言!").as_deref(), Some("I use Rust 语言 言 !"));
        assert_eq!(indexed_form("plain text"), None);
    }

    #[test]
    fn terms_become_phrases_and_prefixes() {
        let forms = |query: &str| -> Vec<(Option<String>, Option<String>)> {
            Terms::parse(query)
                .queries
                .into_iter()
                .map(|query| (query.exact, query.prefix))
                .collect()
        };
        let some = |text: &str| Some(text.to_owned());
        assert_eq!(
            forms("天气 Rust语言 \"postgres\" go 茶 天气预报 node.js -- 天气"),
            [
                (some("\"天气\""), None),
                (some("\"Rust 语言\""), None),
                (some("\"postgres\""), some("\"postgres\"*")),
                (some("\"go\""), None),
                (None, some("\"茶\"*")),
                (some("\"天气 气预 预报\""), None),
                (some("\"node.js\""), None),
            ]
        );
        let terms = Terms::parse("天气 Rust语言 postgres go 茶 天气预报 node.js -- 天气");
        assert_eq!(
            terms.all,
            ["天气", "Rust语言", "postgres", "go", "茶", "天气预报", "node.js"]
        );
        assert_eq!(forms("a\"b"), [(some("\"a\"\"b\""), None)]);
        assert!(Terms::parse(" -- ** ").is_empty());
        assert_eq!(Terms::parse("用户喜欢用户").all, ["用户", "户喜", "喜欢", "欢用"]);
    }

    #[test]
    fn snippets_centre_on_the_match() {
        let text = format!("{}needle{}", "x".repeat(300), "y".repeat(300));
        let cut = snippet(&text, &["NEEDLE".to_owned()], 60);
        assert!(
            cut.starts_with('…') && cut.ends_with('…') && cut.contains("needle"),
            "{cut}"
        );
        assert_eq!(snippet("短い", &[], 60), "短い");
        assert!(contains("The User", "user") && !contains("The User", "users"));
    }
}
