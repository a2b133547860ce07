//! Permission rules: `tool` (every call of the tool) or `tool(pattern)`, where the pattern is
//! a glob over what the call touches — the path for a file tool, each simple command for
//! `execute`, the arguments (compact JSON) for any other tool.

use crate::command_line::Analysis;
use globset::{Glob, GlobBuilder, GlobMatcher};
use std::fmt;

/// A rule that could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuleError {
    /// The rule is not `tool` or `tool(pattern)`.
    #[error("rule `{rule}` is not `tool` or `tool(pattern)`")]
    Syntax {
        /// The rule as written.
        rule: String,
    },
    /// The pattern is not a valid glob.
    #[error("rule `{rule}`: the pattern is not a valid glob")]
    Glob {
        /// The rule as written.
        rule: String,
        /// Why.
        #[source]
        source: globset::Error,
    },
    /// A `[permissions] protected` glob that cannot be used.
    #[error("protected path `{glob}`: {reason}")]
    Protected {
        /// The glob as written.
        glob: String,
        /// Why, and what to write instead.
        reason: String,
    },
}

/// One permission rule.
#[derive(Debug, Clone)]
pub struct Rule {
    text: String,
    tool: String,
    pattern: Option<Pattern>,
}

/// A rule's glob, compiled twice: `*` stops at `/` for paths, and crosses it for commands
/// and arguments (a command's words contain slashes).
#[derive(Debug, Clone)]
struct Pattern {
    path: GlobMatcher,
    text: GlobMatcher,
}

/// What a call touches, as the rules see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Subject {
    /// A file tool's path, normalized (relative to the workspace root).
    Path(String),
    /// A shell command line, analysed into its simple commands.
    Shell(Analysis),
    /// Any other tool's arguments, as compact JSON.
    Arguments(String),
}

impl Rule {
    /// Parses `tool` or `tool(pattern)`.
    ///
    /// # Errors
    /// [`RuleError`] when the text has neither form or the pattern is not a glob.
    pub fn parse(text: &str) -> Result<Self, RuleError> {
        let text = text.trim();
        let syntax = || RuleError::Syntax { rule: text.to_owned() };
        let (tool, pattern) = match text.split_once('(') {
            None => (text, None),
            Some((tool, rest)) => {
                let pattern = rest.strip_suffix(')').ok_or_else(syntax)?;
                if pattern.is_empty() {
                    return Err(syntax());
                }
                (tool, Some(pattern))
            }
        };
        let valid_name = !tool.is_empty()
            && tool
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'));
        if !valid_name {
            return Err(syntax());
        }
        let pattern = pattern
            .map(|glob| {
                let compile = |literal_separator: bool| {
                    GlobBuilder::new(glob)
                        .literal_separator(literal_separator)
                        .build()
                        .map(|compiled: Glob| compiled.compile_matcher())
                        .map_err(|source| RuleError::Glob {
                            rule: text.to_owned(),
                            source,
                        })
                };
                Ok::<_, RuleError>(Pattern {
                    path: compile(true)?,
                    text: compile(false)?,
                })
            })
            .transpose()?;
        Ok(Self {
            text: text.to_owned(),
            tool: tool.to_owned(),
            pattern,
        })
    }

    /// The tool the rule is about.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// Whether the rule has no pattern (it covers every call of its tool).
    pub fn is_whole_tool(&self) -> bool {
        self.pattern.is_none()
    }

    /// Whether the rule matches one part of what a call touches: a path, one simple command
    /// or the arguments.
    fn matches_part(&self, part: &str, is_path: bool) -> bool {
        match &self.pattern {
            None => true,
            Some(pattern) if is_path => pattern.path.is_match(part),
            Some(pattern) => pattern.text.is_match(part),
        }
    }

    /// Whether the rule matches any part of the call: what a deny or ask rule needs. For a
    /// command line, any view of any simple command it runs (opaque or not: being opaque is
    /// no way past a deny rule).
    pub(crate) fn matches_any(&self, tool: &str, subject: &Subject) -> bool {
        if tool != self.tool {
            return false;
        }
        match subject {
            Subject::Path(path) => self.matches_part(path, true),
            Subject::Arguments(arguments) => self.matches_part(arguments, false),
            Subject::Shell(analysis) => {
                self.is_whole_tool()
                    || analysis
                        .commands
                        .iter()
                        .flat_map(|command| &command.views)
                        .any(|view| self.matches_part(view, false))
            }
        }
    }
}

/// Whether `rules` together cover the whole call: what allowing needs. Every simple command
/// of a command line must match some rule with its allow view; an opaque line is covered
/// only by a whole-tool rule (and [`Policy::decide`](crate::Policy::decide) asks for it
/// before allow rules are consulted).
pub(crate) fn covers_all(rules: &[Rule], tool: &str, subject: &Subject) -> bool {
    let mut mine = rules.iter().filter(|rule| rule.tool == tool).peekable();
    if mine.peek().is_none() {
        return false;
    }
    let mine: Vec<&Rule> = mine.collect();
    if mine.iter().any(|rule| rule.is_whole_tool()) {
        return true;
    }
    match subject {
        Subject::Path(path) => mine.iter().any(|rule| rule.matches_part(path, true)),
        Subject::Arguments(arguments) => mine.iter().any(|rule| rule.matches_part(arguments, false)),
        Subject::Shell(analysis) if analysis.is_opaque() => false,
        Subject::Shell(analysis) => analysis.commands.iter().all(|command| match &command.allow_view {
            // A shell wrapper (`sh -c '…'`): its inner commands are listed themselves.
            None => true,
            Some(view) => mine.iter().any(|rule| rule.matches_part(view, false)),
        }),
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for Rule {
    type Err = RuleError;
    fn from_str(text: &str) -> Result<Self, RuleError> {
        Self::parse(text)
    }
}

#[cfg(test)]
mod tests {
    use super::{Rule, Subject, covers_all};
    use crate::command_line::analyse;

    fn rule(text: &str) -> Rule {
        Rule::parse(text).unwrap_or_else(|err| panic!("{text}: {err}"))
    }

    fn shell(line: &str) -> Subject {
        Subject::Shell(analyse(line))
    }

    #[test]
    fn rules_parse_and_bad_ones_are_refused() {
        assert!(rule("execute").is_whole_tool());
        assert_eq!(rule(" execute(git status*) ").tool(), "execute");
        assert_eq!(rule("execute(git status*)").to_string(), "execute(git status*)");
        for bad in [
            "",
            "(x)",
            "execute(",
            "execute()",
            "exe cute",
            "execute(x",
            "write_file(a[)",
        ] {
            assert!(Rule::parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn path_globs_stop_at_slashes_and_double_star_crosses_them() {
        let src = rule("write_file(src/*)");
        assert!(src.matches_any("write_file", &Subject::Path("src/a.rs".into())));
        assert!(!src.matches_any("write_file", &Subject::Path("src/deep/a.rs".into())));
        assert!(!src.matches_any("edit_file", &Subject::Path("src/a.rs".into())));
        let deep = rule("write_file(src/**)");
        assert!(deep.matches_any("write_file", &Subject::Path("src/deep/a.rs".into())));
    }

    #[test]
    fn shell_rules_match_each_simple_command() {
        let status = [rule("execute(git status*)")];
        assert!(covers_all(&status, "execute", &shell("git status --short")));
        assert!(!covers_all(&status, "execute", &shell("git status; rm -rf ~")));
        let both = [rule("execute(git status*)"), rule("execute(ls *)")];
        assert!(covers_all(&both, "execute", &shell("git status && ls /tmp")));
        let opaque = shell("git status $'x'");
        assert!(!covers_all(&status, "execute", &opaque));
        assert!(covers_all(&[rule("execute")], "execute", &opaque));
        let rm = rule("execute(rm *)");
        assert!(rm.matches_any("execute", &shell("git status; rm -rf ~")));
        // Opaque or not, a recognisable command still matches a deny rule.
        assert!(rm.matches_any("execute", &shell("echo $'x'; rm -rf ~")));
        assert!(!rm.matches_any("execute", &shell("echo $'rm -rf'")));
        // `*` matches within one simple command, never across commands.
        assert!(!rule("execute(git *)").matches_any("execute", &shell("ls; rm git")));
    }

    #[test]
    fn other_tools_match_their_arguments() {
        let query = rule("mcp__db__query(*DROP*)");
        assert!(query.matches_any(
            "mcp__db__query",
            &Subject::Arguments(r#"{"sql":"DROP TABLE x"}"#.into())
        ));
        assert!(!query.matches_any("mcp__db__query", &Subject::Arguments(r#"{"sql":"SELECT 1"}"#.into())));
    }
}
