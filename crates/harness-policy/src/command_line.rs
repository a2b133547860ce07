//! Splitting a shell command line into its simple commands, so a rule such as
//! `execute(git status*)` is matched against every command the line runs, never against the
//! line as a whole (`git status; rm -rf ~` is two commands, and the second one matters).
//!
//! The splitter understands quotes, escapes and the list and pipeline operators (`;`, `&&`,
//! `||`, `|`, `|&`, `&`, newlines). Anything it cannot see through (command substitution,
//! process substitution, subshells and groups, here-documents, unbalanced quotes) makes the
//! whole line unparseable: the caller then asks a person instead of guessing.

/// The simple commands of `line`, trimmed, in order; `None` when the line uses a construct
/// the splitter cannot see through, or runs no command at all.
pub(crate) fn simple_commands(line: &str) -> Option<Vec<String>> {
    let mut commands = Vec::new();
    let mut current = String::new();
    let mut chars = line.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match quote {
            Some('\'') => {
                current.push(c);
                if c == '\'' {
                    quote = None;
                }
                continue;
            }
            Some(_) => {
                match c {
                    '"' => quote = None,
                    '\\' => {
                        current.push(c);
                        current.push(chars.next()?);
                        continue;
                    }
                    '`' => return None,
                    '$' if chars.peek() == Some(&'(') => return None,
                    _ => {}
                }
                current.push(c);
                continue;
            }
            None => {}
        }
        match c {
            '\'' | '"' => {
                quote = Some(c);
                current.push(c);
            }
            '\\' => {
                let escaped = chars.next()?;
                if escaped != '\n' {
                    current.push(c);
                    current.push(escaped);
                }
            }
            '`' | '(' | ')' | '{' | '}' => return None,
            '$' if chars.peek() == Some(&'(') => return None,
            '<' | '>' if chars.peek() == Some(&'(') => return None,
            '<' if chars.peek() == Some(&'<') => return None,
            ';' | '\n' => finish(&mut commands, &mut current),
            '|' => {
                if matches!(chars.peek(), Some('|' | '&')) {
                    chars.next();
                }
                finish(&mut commands, &mut current);
            }
            '&' => {
                if current.ends_with(['>', '<']) || chars.peek() == Some(&'>') {
                    // A redirection (`2>&1`, `&>file`), not a separator.
                    current.push(c);
                } else {
                    if chars.peek() == Some(&'&') {
                        chars.next();
                    }
                    finish(&mut commands, &mut current);
                }
            }
            _ => current.push(c),
        }
    }
    if quote.is_some() {
        return None;
    }
    finish(&mut commands, &mut current);
    (!commands.is_empty()).then_some(commands)
}

fn finish(commands: &mut Vec<String>, current: &mut String) {
    let command = current.trim();
    if !command.is_empty() {
        commands.push(command.to_owned());
    }
    current.clear();
}

/// The words of one simple command, with quotes removed (a rough split: good enough to spot
/// a path argument, never used to decide that something is safe).
pub(crate) fn words(command: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    for c in command.chars() {
        match (quote, c) {
            (Some(open), c) if c == open => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => quote = Some(c),
            (None, c) if c.is_whitespace() => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            (None, c) => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::{simple_commands, words};

    fn split(line: &str) -> Option<Vec<String>> {
        simple_commands(line)
    }

    fn owned(commands: &[&str]) -> Option<Vec<String>> {
        Some(commands.iter().map(|&command| command.to_owned()).collect())
    }

    #[test]
    fn lists_and_pipelines_are_split_into_simple_commands() {
        assert_eq!(split("git status; rm -rf ~"), owned(&["git status", "rm -rf ~"]));
        assert_eq!(
            split("a && b || c | d |& e & f\ng"),
            owned(&["a", "b", "c", "d", "e", "f", "g"])
        );
        assert_eq!(split("  ls -la  "), owned(&["ls -la"]));
    }

    #[test]
    fn quotes_escapes_and_redirections_do_not_split() {
        assert_eq!(split("echo 'a; b' \"c && d\""), owned(&["echo 'a; b' \"c && d\""]));
        assert_eq!(split("echo a\\;b"), owned(&["echo a\\;b"]));
        assert_eq!(split("make 2>&1 &>log"), owned(&["make 2>&1 &>log"]));
        assert_eq!(split("echo '$(x)' `"), None, "a backtick outside quotes");
        assert_eq!(split("echo '$(not run)'"), owned(&["echo '$(not run)'"]));
    }

    #[test]
    fn constructs_it_cannot_see_through_are_unparseable() {
        for line in [
            "echo $(rm -rf ~)",
            "echo \"$(rm -rf ~)\"",
            "echo `rm -rf ~`",
            "echo \"`id`\"",
            "(rm -rf ~)",
            "{ rm -rf ~; }",
            "diff <(ls) >(cat)",
            "cat <<EOF\nrm\nEOF",
            "echo 'unterminated",
            "echo \"unterminated",
            "trailing \\",
            "",
            " ; ; ",
        ] {
            assert_eq!(simple_commands(line), None, "{line:?}");
        }
    }

    #[test]
    fn words_drop_quotes() {
        assert_eq!(
            words("cat  'my file' \"~/.bashrc\" x"),
            ["cat", "my file", "~/.bashrc", "x"]
        );
    }
}
