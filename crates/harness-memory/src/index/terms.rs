//! Query terms, the short-token column, and snippets.
//!
//! The index has two FTS5 columns, both with the `trigram` tokenizer (case-insensitive):
//!
//! - `text`, the line itself: any term of three or more characters is a substring match
//!   (`"Rust语言"`, `"postgres"`, `"天气预报"`).
//! - `grams`, the line's short tokens, each padded with spaces: every two-character CJK
//!   bigram and every two-character ASCII word that is not a stopword (`" 天气 "`, `" go "`).
//!   A two-character term is matched as the padded phrase `" 天气 "` in this column, which is
//!   at least three characters long and so reaches the trigram index. FTS5's trigram
//!   tokenizer alone finds nothing for two-character queries.
//!
//! Pure CJK terms of five or more characters (a sentence typed without spaces) are split
//! into their overlapping trigrams, OR-ed, so ranking rewards lines that share most of them.
//! Single characters and two-character stopwords cannot use the index; when a query has only
//! such terms it falls back to a `LIKE` scan over the lines.

use std::fmt::Write as _;

/// Two-letter ASCII words too common to index.
const STOPWORDS: &[&str] = &[
    "am", "an", "as", "at", "be", "by", "do", "he", "if", "in", "is", "it", "me", "my", "no", "of", "on", "or", "so",
    "to", "up", "us", "we",
];

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

fn is_short_ascii_word(word: &str) -> bool {
    word.len() == 2
        && word.bytes().all(|b| b.is_ascii_alphanumeric())
        && !STOPWORDS.iter().any(|stop| stop.eq_ignore_ascii_case(word))
}

/// The `grams` column of a line: its short tokens, space-padded (empty when none).
pub(crate) fn grams_of(text: &str) -> String {
    let mut tokens: Vec<String> = Vec::new();
    for word in text.split(|c: char| !(c.is_alphanumeric() || is_cjk(c))) {
        if word.is_empty() {
            continue;
        }
        if is_short_ascii_word(word) {
            tokens.push(word.to_ascii_lowercase());
            continue;
        }
        let chars: Vec<char> = word.chars().collect();
        let mut run_start = None;
        for at in 0..=chars.len() {
            let inside = chars.get(at).is_some_and(|c| is_cjk(*c));
            match (inside, run_start) {
                (true, None) => run_start = Some(at),
                (false, Some(start)) => {
                    for pair in chars[start..at].windows(2) {
                        tokens.push(pair.iter().collect());
                    }
                    run_start = None;
                }
                _ => {}
            }
        }
    }
    if tokens.is_empty() {
        return String::new();
    }
    tokens.sort_unstable();
    tokens.dedup();
    let mut out = String::from(" ");
    for token in tokens {
        out.push_str(&token);
        out.push(' ');
    }
    out
}

/// A parsed query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Terms {
    /// Terms for the `text` column (three or more characters).
    pub(crate) long: Vec<String>,
    /// Two-character terms for the `grams` column.
    pub(crate) short: Vec<String>,
    /// Terms the index cannot serve (single characters, stopwords): `LIKE` scan only.
    pub(crate) scan: Vec<String>,
    /// Every term, for snippets and the scan fallback.
    pub(crate) all: Vec<String>,
}

impl Terms {
    /// Splits a query on whitespace, trims punctuation around each term, and classifies.
    pub(crate) fn parse(query: &str) -> Self {
        let mut terms = Self::default();
        for raw in query.split_whitespace() {
            let term = raw.trim_matches(|c: char| {
                matches!(
                    c,
                    '"' | '\'' | '`' | ',' | '.' | '?' | '!' | '(' | ')' | '[' | ']' | '{' | '}' | ':' | ';' | '，'
                        | '。' | '？' | '！' | '、' | '：' | '；' | '“' | '”' | '《' | '》'
                )
            });
            if term.is_empty() || terms.all.iter().any(|t| t.eq_ignore_ascii_case(term)) {
                continue;
            }
            terms.all.push(term.to_owned());
            let chars: Vec<char> = term.chars().collect();
            if chars.len() >= 5 && chars.iter().all(|c| is_cjk(*c)) {
                for window in chars.windows(3) {
                    let trigram: String = window.iter().collect();
                    if !terms.long.contains(&trigram) {
                        terms.long.push(trigram);
                    }
                }
            } else if chars.len() >= 3 {
                terms.long.push(term.to_owned());
            } else if chars.len() == 2 && (chars.iter().all(|c| is_cjk(*c)) || is_short_ascii_word(term)) {
                terms.short.push(term.to_owned());
            } else {
                terms.scan.push(term.to_owned());
            }
        }
        terms
    }

    /// Whether nothing searchable was given.
    pub(crate) fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    /// The FTS5 MATCH expression, or `None` when no term can use the index.
    pub(crate) fn match_expression(&self) -> Option<String> {
        let mut out = String::new();
        for term in &self.long {
            if !out.is_empty() {
                out.push_str(" OR ");
            }
            let _ = write!(out, "text : {}", quote(term));
        }
        for term in &self.short {
            if !out.is_empty() {
                out.push_str(" OR ");
            }
            let _ = write!(out, "grams : {}", quote(&format!(" {} ", term.to_lowercase())));
        }
        (!out.is_empty()).then_some(out)
    }
}

fn quote(term: &str) -> String {
    format!("\"{}\"", term.replace('"', "\"\""))
}

/// A `LIKE` pattern matching `term` anywhere, with `\` as the escape character.
pub(crate) fn like_pattern(term: &str) -> String {
    let mut out = String::from("%");
    for c in term.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('%');
    out
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
        let found = (0..=chars.len() - needle.len())
            .find(|&at| chars[at..at + needle.len()].iter().zip(&needle).all(|(a, b)| fold(*a) == *b));
        if let Some(at) = found
            && best.is_none_or(|(b, _)| at < b)
        {
            best = Some((at, needle.len()));
        }
    }
    best
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
    fn grams_hold_cjk_bigrams_and_short_words() {
        assert_eq!(grams_of("今天天气很好"), " 今天 天天 天气 很好 气很 ");
        assert_eq!(grams_of("I use Go and AI in 绿茶x"), " ai go 绿茶 ");
        assert_eq!(grams_of("nothing short here"), "");
    }

    #[test]
    fn terms_are_classified() {
        let terms = Terms::parse("天气 Rust语言 \"postgres\" go is 茶 用户喜欢喝什么茶");
        assert_eq!(terms.long[..2], ["Rust语言".to_owned(), "postgres".to_owned()]);
        assert!(terms.long.contains(&"喝什么".to_owned()));
        assert_eq!(terms.short, ["天气", "go"]);
        assert_eq!(terms.scan, ["is", "茶"]);
        assert_eq!(
            Terms::parse("go \"x").match_expression().as_deref(),
            Some("grams : \" go \"")
        );
        assert_eq!(Terms::parse("a\"b\"c").match_expression().as_deref(), Some("text : \"a\"\"b\"\"c\""));
    }

    #[test]
    fn snippets_centre_on_the_match() {
        let text = format!("{}needle{}", "x".repeat(300), "y".repeat(300));
        let cut = snippet(&text, &["NEEDLE".to_owned()], 60);
        assert!(cut.starts_with('…') && cut.ends_with('…') && cut.contains("needle"), "{cut}");
        assert_eq!(snippet("短い", &[], 60), "短い");
        assert_eq!(like_pattern("50%_a"), "%50\\%\\_a%");
    }
}
