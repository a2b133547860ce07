//! Text views of file bytes: binary detection, line paging and bounded rendering.

/// How many leading bytes are checked for a NUL byte when deciding that a file is binary.
pub(crate) const BINARY_SNIFF_LEN: usize = 8192;

/// Whether `bytes` look binary: a NUL byte in the first 8 KiB (the rule
/// git and ripgrep use).
pub fn looks_binary(bytes: &[u8]) -> bool {
    bytes[..bytes.len().min(BINARY_SNIFF_LEN)].contains(&0)
}

/// A window of a text file's lines, as returned by
/// [`Filesystem::read_text`](crate::Filesystem::read_text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextPage {
    /// The lines of the window, without their line terminators (`\n` or `\r\n`). Invalid UTF-8
    /// is replaced with U+FFFD.
    pub lines: Vec<String>,
    /// 0-based index of the first line in `lines`.
    pub offset: usize,
    /// Number of lines in the whole file (a final line terminator does not start a new line).
    pub total_lines: usize,
}

impl TextPage {
    /// Whether lines follow the window.
    pub fn has_more(&self) -> bool {
        self.offset + self.lines.len() < self.total_lines
    }
}

/// Incremental builder of a [`TextPage`] from file bytes, fed in chunks, so a large local file
/// is paged without being held in memory.
#[derive(Debug)]
pub(crate) struct Pager {
    offset: usize,
    limit: usize,
    /// Complete lines seen so far.
    line_index: usize,
    /// Bytes of the current line, kept only while it is inside the window.
    current: Vec<u8>,
    /// Whether the current (unterminated) line has any bytes.
    pending: bool,
    lines: Vec<String>,
}

impl Pager {
    pub(crate) fn new(offset: usize, limit: usize) -> Self {
        Self {
            offset,
            limit,
            line_index: 0,
            current: Vec::new(),
            pending: false,
            lines: Vec::new(),
        }
    }

    fn in_window(&self) -> bool {
        self.line_index >= self.offset && self.line_index - self.offset < self.limit
    }

    fn push_current(&mut self) {
        let mut line = std::mem::take(&mut self.current);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        self.lines.push(String::from_utf8_lossy(&line).into_owned());
    }

    pub(crate) fn feed(&mut self, mut chunk: &[u8]) {
        while !chunk.is_empty() {
            let (part, terminated, rest) = match chunk.iter().position(|byte| *byte == b'\n') {
                Some(at) => (&chunk[..at], true, &chunk[at + 1..]),
                None => (chunk, false, &[][..]),
            };
            if self.in_window() {
                self.current.extend_from_slice(part);
            }
            if terminated {
                if self.in_window() {
                    self.push_current();
                }
                self.line_index += 1;
                self.pending = false;
            } else {
                self.pending = true;
            }
            chunk = rest;
        }
    }

    pub(crate) fn finish(mut self) -> TextPage {
        let mut total = self.line_index;
        if self.pending {
            if self.in_window() {
                self.push_current();
            }
            total += 1;
        }
        TextPage {
            lines: self.lines,
            offset: self.offset,
            total_lines: total,
        }
    }
}

/// Pages `bytes` (the whole file).
pub(crate) fn page(bytes: &[u8], offset: usize, limit: usize) -> TextPage {
    let mut pager = Pager::new(offset, limit);
    pager.feed(bytes);
    pager.finish()
}

/// At most `max` characters of `text`; when cut, ends with a marker saying how many characters
/// were dropped. Never splits a character.
pub fn truncate_chars(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(max) {
        None => std::borrow::Cow::Borrowed(text),
        Some((at, _)) => {
            let dropped = text[at..].chars().count();
            std::borrow::Cow::Owned(format!("{}… [{dropped} more characters]", &text[..at]))
        }
    }
}

/// The longest prefix of `bytes` that ends on a UTF-8 character boundary (drops a cut
/// character at the end).
pub(crate) fn utf8_head(bytes: &[u8]) -> &[u8] {
    match std::str::from_utf8(bytes) {
        Ok(_) => bytes,
        // `error_len() == None` means the input ended inside a character.
        Err(err) if err.error_len().is_none() => &bytes[..err.valid_up_to()],
        Err(_) => bytes,
    }
}

/// `bytes` without leading UTF-8 continuation bytes (drops a character cut at the start).
pub(crate) fn utf8_tail(bytes: &[u8]) -> &[u8] {
    let skip = bytes
        .iter()
        .take(3)
        .take_while(|byte| (**byte & 0b1100_0000) == 0b1000_0000)
        .count();
    &bytes[skip..]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, offset: usize, limit: usize, lines: &[&str], total: usize) {
        let whole = page(input.as_bytes(), offset, limit);
        assert_eq!(whole.lines, lines, "{input:?} {offset} {limit}");
        assert_eq!(whole.total_lines, total, "{input:?}");
        // Fed one byte at a time, the result is the same.
        let mut pager = Pager::new(offset, limit);
        for byte in input.as_bytes() {
            pager.feed(std::slice::from_ref(byte));
        }
        assert_eq!(pager.finish(), whole, "{input:?} bytewise");
    }

    #[test]
    fn pages_lines() {
        check("", 0, 10, &[], 0);
        check("a", 0, 10, &["a"], 1);
        check("a\n", 0, 10, &["a"], 1);
        check("a\nb", 0, 10, &["a", "b"], 2);
        check("a\r\nb\r\n", 0, 10, &["a", "b"], 2);
        check("a\nb\nc\nd\n", 1, 2, &["b", "c"], 4);
        check("a\nb\nc\nd", 1, 2, &["b", "c"], 4);
        check("a\nb\nc\nd", 3, 2, &["d"], 4);
        check("a\nb\n", 5, 2, &[], 2);
        check("\n\n", 0, 10, &["", ""], 2);
        check("a\n\nb", 0, 10, &["a", "", "b"], 3);
    }

    #[test]
    fn truncation_keeps_characters_whole() {
        assert_eq!(truncate_chars("héllo", 10), "héllo");
        assert_eq!(truncate_chars("héllo", 2), "hé… [3 more characters]");
        let snowman = "☃☃".as_bytes();
        assert_eq!(utf8_head(&snowman[..4]), "☃".as_bytes());
        assert_eq!(utf8_tail(&snowman[2..]), "☃".as_bytes());
        assert!(looks_binary(b"a\0b"));
        assert!(!looks_binary("ünï".as_bytes()));
    }
}
