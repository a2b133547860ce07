//! A POSIX `sh` parser for the permission check, in the dialect `execute` runs (`sh -c`, which
//! is dash on Debian). It finds every simple command a line runs — in lists, pipelines,
//! subshells, groups, `if`/`while`/`for` bodies, `$(…)` and backtick substitutions and the
//! expanding bodies of here-documents — with each word's value after quote and escape
//! removal, and it marks the line **opaque** when it meets a construct it cannot see through
//! or on which shells disagree (`$'…'`, `$"…"`, `[[`, brace expansion, `function`, `case`,
//! arithmetic, process substitution, `&>`, `|&`, `<<<`, a `(` inside a command, unbalanced
//! quotes or parentheses, an unterminated here-document). Parsing continues after most opaque
//! constructs, so the commands it can still recognise are checked against deny rules.
//!
//! Why our own parser and not a crate: `brush-parser` (MIT, maintained) parses the bash
//! dialect — its `sh_mode`/`posix_mode` switches tweak behaviour but do not make bash-only
//! syntax an error — and leaves words as unparsed text that needs a second parser, so proving
//! that its tree means what dash does would take as much code as this module, plus a large
//! dependency tree on a 2-core build. `tree-sitter-bash` is a C grammar for bash with error
//! recovery (it returns a tree for input dash rejects), the opposite of failing closed.
//! `yash-syntax` is GPL-3 and needs a newer Rust than this workspace's 1.95; `conch-parser`
//! has had no release since 2019. What matters here is knowing exactly which constructs are
//! recognised and treating everything else as opaque, which a small hand-written parser gives.

/// Deepest nesting of substitutions, subshells and `sh -c` strings that is analysed; deeper
/// lines are opaque.
pub(crate) const MAX_DEPTH: usize = 32;

/// One word after quote and escape removal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Word {
    /// The value; expansions and substitutions keep their source text (`$HOME`, `$(date)`).
    pub text: String,
    /// The word contains a parameter expansion or a command substitution: its value is only
    /// known when the shell runs.
    pub dynamic: bool,
    /// The word contains an unquoted `*`, `?` or `[`: the shell expands it to file names.
    pub glob: bool,
    /// The word is `NAME=value` with an unquoted name (an assignment before a command).
    pub assignment: bool,
    /// Some part of the word was quoted or escaped (so it is never a reserved word).
    pub quoted: bool,
}

/// A redirection: `2>&1`, `>file`, `<<EOF`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Redirect {
    /// The operator with its file descriptor (`2>`, `>>`, `<<`).
    pub op: String,
    /// The target (for a here-document, its delimiter).
    pub target: Word,
}

/// One simple command: its words (assignments first) and redirections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Command {
    pub words: Vec<Word>,
    pub redirects: Vec<Redirect>,
}

/// What the parser found in one line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Parsed {
    /// Every simple command, substitutions included (the order is not significant).
    pub commands: Vec<Command>,
    /// Why the line is opaque (empty when it is not).
    pub opaque: Vec<String>,
}

/// Parses `line` as dash would read it.
#[cfg(test)]
pub(crate) fn parse(line: &str) -> Parsed {
    parse_at(line, 0)
}

/// Parses `line` found at nesting `depth` (inside backticks or an `sh -c` string).
pub(crate) fn parse_at(line: &str, depth: usize) -> Parsed {
    let mut parser = Parser {
        chars: line.chars().collect(),
        pos: 0,
        out: Parsed::default(),
        heredocs: Vec::new(),
        depth,
        stopped: false,
    };
    if depth > MAX_DEPTH {
        parser.opaque("it nests substitutions or shells too deeply");
    } else {
        parser.list(false);
    }
    parser.out
}

struct Heredoc {
    delimiter: String,
    strip_tabs: bool,
    expands: bool,
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
    out: Parsed,
    heredocs: Vec<Heredoc>,
    depth: usize,
    /// Parsing cannot continue reliably: the rest of the line is not read.
    stopped: bool,
}

/// Words that start a compound command or continue one; they run nothing themselves.
const KEYWORDS: &[&str] = &[
    "!", "{", "}", "if", "then", "else", "elif", "fi", "while", "until", "do", "done",
];
/// Reserved words of other shells, or ones this parser does not follow: opaque.
const OPAQUE_KEYWORDS: &[&str] = &["[[", "]]", "function", "select", "coproc", "case", "esac", "((", "in"];

/// The command being read.
#[derive(Default)]
struct Current {
    command: Command,
    /// A `for` header: its words run nothing (their substitutions do).
    for_header: bool,
    /// A subshell was closed in this command: only redirections may follow.
    after_subshell: bool,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, offset: usize) -> Option<char> {
        self.chars.get(self.pos + offset).copied()
    }

    fn opaque(&mut self, reason: &str) {
        if !self.out.opaque.iter().any(|known| known == reason) {
            self.out.opaque.push(reason.to_owned());
        }
    }

    fn stop(&mut self, reason: &str) {
        self.opaque(reason);
        self.stopped = true;
    }

    fn finish(&mut self, current: &mut Current) {
        let done = std::mem::take(current);
        if done.for_header {
            return;
        }
        if !done.command.words.is_empty() || !done.command.redirects.is_empty() {
            self.out.commands.push(done.command);
        }
    }

    /// Skips blanks and line continuations.
    fn skip_blanks(&mut self) {
        loop {
            match self.peek() {
                Some(' ' | '\t') => self.pos += 1,
                Some('\\') if self.peek_at(1) == Some('\n') => self.pos += 2,
                _ => return,
            }
        }
    }

    /// Reads a command list up to the end of the input or, inside `$(…)` or a subshell
    /// (`nested`), up to its closing `)`, which is consumed.
    fn list(&mut self, nested: bool) {
        let mut current = Current::default();
        loop {
            if self.stopped {
                return;
            }
            self.skip_blanks();
            let Some(c) = self.peek() else {
                self.finish(&mut current);
                if nested {
                    self.stop("a `(` or `$(` is not closed");
                }
                if !self.heredocs.is_empty() {
                    self.heredocs.clear();
                    self.opaque("a here-document has no body");
                }
                return;
            };
            match c {
                '#' => {
                    while self.peek().is_some_and(|c| c != '\n') {
                        self.pos += 1;
                    }
                }
                '\n' => {
                    self.pos += 1;
                    self.finish(&mut current);
                    self.heredoc_bodies();
                }
                ';' => {
                    self.pos += 1;
                    if self.peek() == Some(';') {
                        self.stop("`;;` outside a `case`");
                        return;
                    }
                    self.finish(&mut current);
                }
                '&' => {
                    self.pos += 1;
                    match self.peek() {
                        Some('&') => self.pos += 1,
                        Some('>') => {
                            self.opaque("`&>` (bash redirects both outputs, dash runs the command in the background)")
                        }
                        _ => {}
                    }
                    self.finish(&mut current);
                }
                '|' => {
                    self.pos += 1;
                    match self.peek() {
                        Some('|') => self.pos += 1,
                        Some('&') => {
                            self.pos += 1;
                            self.opaque("`|&` (a bash pipe)");
                        }
                        _ => {}
                    }
                    self.finish(&mut current);
                }
                '(' => {
                    self.pos += 1;
                    let starts_command = current.command.words.is_empty()
                        && current.command.redirects.is_empty()
                        && !current.after_subshell;
                    if !starts_command || current.for_header {
                        self.opaque("a `(` inside a command (a function definition or a bash pattern)");
                    }
                    if self.peek() == Some('(') {
                        self.opaque("`((` (bash arithmetic)");
                    }
                    self.finish(&mut current);
                    self.list(true);
                    current.after_subshell = true;
                }
                ')' => {
                    self.pos += 1;
                    self.finish(&mut current);
                    if nested {
                        return;
                    }
                    self.opaque("a `)` without its `(`");
                }
                '<' | '>' => self.redirect(&mut current, String::new()),
                _ => {
                    let word = self.word();
                    if self.stopped {
                        return;
                    }
                    // `2>file`: digits right before a redirection are its file descriptor.
                    if !word.quoted
                        && !word.text.is_empty()
                        && word.text.chars().all(|c| c.is_ascii_digit())
                        && matches!(self.peek(), Some('<' | '>'))
                    {
                        self.redirect(&mut current, word.text);
                        continue;
                    }
                    self.place(&mut current, word);
                }
            }
        }
    }

    /// Puts a word into the current command, handling reserved words.
    fn place(&mut self, current: &mut Current, word: Word) {
        if current.after_subshell {
            self.opaque("words after a subshell");
        }
        let at_start = current.command.words.is_empty() && current.command.redirects.is_empty();
        let reserved = !word.quoted && !word.dynamic;
        if current.for_header {
            if reserved && word.text == "do" {
                // `for i do …`: the body starts here.
                self.finish(current);
            }
            return;
        }
        if at_start && reserved {
            if KEYWORDS.contains(&word.text.as_str()) {
                return;
            }
            if word.text == "for" {
                current.for_header = true;
                return;
            }
            if OPAQUE_KEYWORDS.contains(&word.text.as_str()) {
                self.opaque(&format!("`{}` (a construct this check does not follow)", word.text));
            }
        }
        if current.command.words.iter().all(|w| w.assignment) && word.text == "[[" && reserved {
            self.opaque("`[[` (a bash test)");
        }
        current.command.words.push(word);
    }

    /// Reads a redirection operator (the file descriptor already read) and its target.
    fn redirect(&mut self, current: &mut Current, fd: String) {
        let first = self.peek().unwrap_or('>');
        self.pos += 1;
        let mut op = format!("{fd}{first}");
        let mut heredoc = None;
        match (first, self.peek()) {
            (_, Some('(')) => {
                self.opaque("process substitution `<(…)`/`>(…)` (bash)");
            }
            ('<', Some('<')) => {
                self.pos += 1;
                op.push('<');
                match self.peek() {
                    Some('<') => {
                        self.pos += 1;
                        op.push('<');
                        self.opaque("`<<<` (a bash here-string)");
                    }
                    Some('-') => {
                        self.pos += 1;
                        op.push('-');
                        heredoc = Some(true);
                    }
                    _ => heredoc = Some(false),
                }
            }
            ('>', Some('>' | '|' | '&')) | ('<', Some('>' | '&')) => {
                op.push(self.peek().unwrap_or_default());
                self.pos += 1;
            }
            _ => {}
        }
        self.skip_blanks();
        let starts_word = self
            .peek()
            .is_some_and(|c| !matches!(c, ' ' | '\t' | '\n' | ';' | '&' | '|' | '<' | '>' | '(' | ')'));
        if !starts_word {
            self.stop("a redirection without a target");
            return;
        }
        let target = self.word();
        if let Some(strip_tabs) = heredoc {
            if target.dynamic {
                self.opaque("a here-document delimiter with an expansion");
            }
            self.heredocs.push(Heredoc {
                delimiter: target.text.clone(),
                strip_tabs,
                expands: !target.quoted,
            });
        }
        current.command.redirects.push(Redirect { op, target });
    }

    /// Reads the bodies of the here-documents opened on the line that just ended.
    fn heredoc_bodies(&mut self) {
        for heredoc in std::mem::take(&mut self.heredocs) {
            let mut body = String::new();
            let mut closed = false;
            while self.pos < self.chars.len() {
                let mut line = String::new();
                while let Some(c) = self.peek() {
                    self.pos += 1;
                    if c == '\n' {
                        break;
                    }
                    line.push(c);
                }
                let compared = if heredoc.strip_tabs {
                    line.trim_start_matches('\t')
                } else {
                    line.as_str()
                };
                if compared == heredoc.delimiter {
                    closed = true;
                    break;
                }
                body.push_str(&line);
                body.push('\n');
            }
            if !closed {
                self.opaque("a here-document is not terminated");
            }
            if heredoc.expands {
                // An unquoted delimiter: the body expands like a double-quoted string, so
                // its substitutions run.
                let mut inner = Parser {
                    chars: body.chars().collect(),
                    pos: 0,
                    out: Parsed::default(),
                    heredocs: Vec::new(),
                    depth: self.depth + 1,
                    stopped: false,
                };
                let mut word = Word::default();
                inner.double_quoted(&mut word, false);
                self.merge(inner.out);
            }
        }
    }

    fn merge(&mut self, inner: Parsed) {
        self.out.commands.extend(inner.commands);
        for reason in inner.opaque {
            self.opaque(&reason);
        }
    }

    /// Reads one word (the caller saw it start).
    fn word(&mut self) -> Word {
        let mut word = Word::default();
        // The unquoted characters, with quoted ones as NUL, for the brace-expansion check.
        let mut shadow = String::new();
        let mut name_so_far = true;
        while let Some(c) = self.peek() {
            if self.stopped {
                break;
            }
            match c {
                ' ' | '\t' | '\n' | ';' | '&' | '|' | '<' | '>' | '(' | ')' => break,
                '\\' => {
                    self.pos += 1;
                    match self.peek() {
                        Some('\n') => self.pos += 1,
                        Some(escaped) => {
                            self.pos += 1;
                            word.text.push(escaped);
                            word.quoted = true;
                            shadow.push('\0');
                            name_so_far = false;
                        }
                        None => word.text.push('\\'),
                    }
                }
                '\'' => {
                    self.pos += 1;
                    word.quoted = true;
                    name_so_far = false;
                    loop {
                        match self.peek() {
                            None => {
                                self.stop("a `'` is not closed");
                                return word;
                            }
                            Some('\'') => {
                                self.pos += 1;
                                break;
                            }
                            Some(quoted) => {
                                self.pos += 1;
                                word.text.push(quoted);
                                shadow.push('\0');
                            }
                        }
                    }
                }
                '"' => {
                    self.pos += 1;
                    word.quoted = true;
                    name_so_far = false;
                    shadow.push('\0');
                    self.double_quoted(&mut word, true);
                }
                '$' => {
                    name_so_far = false;
                    shadow.push('\0');
                    self.dollar(&mut word, false);
                }
                '`' => {
                    name_so_far = false;
                    shadow.push('\0');
                    self.backticks(&mut word, false);
                }
                _ => {
                    self.pos += 1;
                    if matches!(c, '*' | '?' | '[') {
                        word.glob = true;
                    }
                    if c == '=' && name_so_far && !word.text.is_empty() && !word.assignment {
                        let valid = word
                            .text
                            .chars()
                            .next()
                            .is_some_and(|first| first.is_ascii_alphabetic() || first == '_');
                        word.assignment = valid;
                    }
                    if !(c.is_ascii_alphanumeric() || c == '_') {
                        name_so_far = false;
                    }
                    word.text.push(c);
                    shadow.push(c);
                }
            }
        }
        if has_brace_expansion(&shadow) {
            self.opaque("brace expansion `{a,b}` (bash; dash keeps the braces)");
        }
        word
    }

    /// Reads a double-quoted string after its `"` (with `closing`), or a here-document body
    /// to its end (without).
    fn double_quoted(&mut self, word: &mut Word, closing: bool) {
        loop {
            if self.stopped {
                return;
            }
            let Some(c) = self.peek() else {
                if closing {
                    self.stop("a `\"` is not closed");
                }
                return;
            };
            match c {
                '"' if closing => {
                    self.pos += 1;
                    return;
                }
                '\\' => {
                    self.pos += 1;
                    match self.peek() {
                        Some('\n') => self.pos += 1,
                        Some(escaped @ ('$' | '`' | '\\')) => {
                            self.pos += 1;
                            word.text.push(escaped);
                        }
                        Some('"') if closing => {
                            self.pos += 1;
                            word.text.push('"');
                        }
                        _ => word.text.push('\\'),
                    }
                }
                '$' => self.dollar(word, true),
                '`' => self.backticks(word, closing),
                other => {
                    self.pos += 1;
                    word.text.push(other);
                }
            }
        }
    }

    /// Reads an expansion starting at `$`.
    fn dollar(&mut self, word: &mut Word, in_double_quotes: bool) {
        let start = self.pos;
        self.pos += 1;
        match self.peek() {
            Some('(') => {
                self.pos += 1;
                word.dynamic = true;
                if self.peek() == Some('(') {
                    self.opaque("arithmetic expansion `$((…))`");
                }
                self.depth += 1;
                if self.depth > MAX_DEPTH {
                    self.stop("it nests substitutions or shells too deeply");
                    return;
                }
                // dash reads a pending here-document after the newline that ends the
                // outer line, never at a newline inside `$(…)`: the lines inside are commands.
                let outer = std::mem::take(&mut self.heredocs);
                self.list(true);
                let opened_inside = std::mem::replace(&mut self.heredocs, outer);
                self.heredocs.extend(opened_inside);
                self.depth -= 1;
                word.text.extend(&self.chars[start..self.pos.min(self.chars.len())]);
            }
            Some('{') => {
                self.pos += 1;
                word.dynamic = true;
                word.text.push_str("${");
                self.braced_parameter(word, in_double_quotes);
            }
            Some('\'' | '"') if !in_double_quotes => {
                // dash reads `$'…'` as `$` and a quoted string; bash decodes escapes.
                self.opaque("`$'…'`/`$\"…\"` (bash quoting; dash reads it differently)");
                word.text.push('$');
            }
            Some(c) if c.is_ascii_alphabetic() || c == '_' => {
                word.dynamic = true;
                word.text.push('$');
                while let Some(c) = self.peek().filter(|c| c.is_ascii_alphanumeric() || *c == '_') {
                    self.pos += 1;
                    word.text.push(c);
                }
            }
            Some(c) if c.is_ascii_digit() || matches!(c, '@' | '*' | '#' | '?' | '-' | '$' | '!') => {
                self.pos += 1;
                word.dynamic = true;
                word.text.push('$');
                word.text.push(c);
            }
            _ => word.text.push('$'),
        }
    }

    /// Reads `${…}` after its `${`.
    fn braced_parameter(&mut self, word: &mut Word, in_double_quotes: bool) {
        loop {
            if self.stopped {
                return;
            }
            match self.peek() {
                None => {
                    self.stop("a `${` is not closed");
                    return;
                }
                Some('}') => {
                    self.pos += 1;
                    word.text.push('}');
                    return;
                }
                Some('\'' | '"') => {
                    // Quotes inside `${…}` are read differently by dash and bash.
                    self.stop("quotes inside `${…}`");
                    return;
                }
                Some('\\') => {
                    self.pos += 1;
                    if let Some(escaped) = self.peek() {
                        self.pos += 1;
                        word.text.push(escaped);
                    }
                }
                Some('$') => self.dollar(word, in_double_quotes),
                Some('`') => self.backticks(word, in_double_quotes),
                Some(c) => {
                    self.pos += 1;
                    word.text.push(c);
                }
            }
        }
    }

    /// Reads a backtick substitution starting at its opening `` ` ``; its text is parsed as a
    /// command line of its own.
    fn backticks(&mut self, word: &mut Word, in_double_quotes: bool) {
        self.pos += 1;
        word.dynamic = true;
        let mut inner = String::new();
        loop {
            match self.peek() {
                None => {
                    self.stop("a backtick is not closed");
                    return;
                }
                Some('`') => {
                    self.pos += 1;
                    break;
                }
                Some('\\') => {
                    self.pos += 1;
                    match self.peek() {
                        Some(escaped @ ('$' | '`' | '\\')) => {
                            self.pos += 1;
                            inner.push(escaped);
                        }
                        Some('"') if in_double_quotes => {
                            self.pos += 1;
                            inner.push('"');
                        }
                        _ => inner.push('\\'),
                    }
                }
                Some(c) => {
                    self.pos += 1;
                    inner.push(c);
                }
            }
        }
        word.text.push('`');
        word.text.push_str(&inner);
        word.text.push('`');
        let parsed = parse_at(&inner, self.depth + 1);
        self.merge(parsed);
    }
}

/// Whether the unquoted characters of a word hold `{…,…}` or `{…..…}`.
fn has_brace_expansion(shadow: &str) -> bool {
    let mut rest = shadow;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        // The innermost candidate: up to the next `}` with no `{` in between.
        match after.find(['}', '{']) {
            Some(end) if after.as_bytes().get(end) == Some(&b'}') => {
                let inside = &after[..end];
                if inside.contains(',') || inside.contains("..") {
                    return true;
                }
                rest = &after[end + 1..];
            }
            Some(end) => rest = &after[end..],
            None => return false,
        }
    }
    false
}

#[cfg(test)]
#[path = "shell_tests.rs"]
mod tests;
