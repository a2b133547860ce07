//! [`Policy`]: the decision — allow, ask or deny — for one tool call, from the rules, the
//! mode and the tool's declared effects ([`ToolAnnotations`]), in a fixed order:
//!
//! 1. a **deny** rule matches → deny;
//! 2. an **ask** rule matches → ask;
//! 3. **tool checks**: `plan_exit` (leaving plan mode) → ask, in every mode; in `explore`, a
//!    tool that is not read-only → deny; a write to a [`Protected`] path (`harness.toml`,
//!    `AGENTS.md`, `agents/`, … at the root and in every user's layer; the plan tools are
//!    exempt) → ask, in every mode, `bypass` too; a dangerous path (`.git/`, `.ssh/`, `.env`,
//!    shell rc files, ...) → ask, likewise; a command line whose words (globs count as every
//!    name they could match) or redirection targets name a dangerous or protected path → ask;
//!    an opaque command line (see [`crate::command_line`]) → ask. None of these asks offers
//!    an "always" rule;
//! 4. **allow** rules cover the call → allow;
//! 5. the **mode**: `bypass` → allow; a read-only tool → allow; a closed-world tool (it
//!    stays inside the caller's area) → allow; anything else → ask, which `dont_ask` turns
//!    into deny.
//!
//! "Read-only" and "closed-world" come from the annotations, never from a list of names.

use crate::command_line::{Analysis, analyse};
use crate::protected::Protected;
use crate::rule::{Rule, Subject, covers_all};
use crate::shell::Word;
use globset::GlobBuilder;
use harness_core::ToolAnnotations;
use serde::Deserialize;
use serde_json::Value;

/// The shell tool's name: its rules match simple commands.
pub const SHELL_TOOL: &str = "execute";

/// The tool that leaves plan mode: a person approves the plan, always (no rule allows it).
pub const PLAN_EXIT_TOOL: &str = "plan_exit";

/// The plan tools: they write `plans/` themselves, so they are exempt from the protected
/// paths (by tool, never by path: a file tool writing `plans/PLAN.md` asks).
pub const PLAN_TOOLS: &[&str] = &["plan_enter", "plan_write", PLAN_EXIT_TOOL];

/// Directories whose contents always need a person's approval.
const DANGEROUS_DIRS: &[&str] = &[".git", ".ssh", ".aws", ".kube", ".gnupg"];
/// Files that always need a person's approval (shell start-up files, git and package
/// manager configuration, keys and credentials).
const DANGEROUS_FILES: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".gitconfig",
    ".gitmodules",
    ".env",
    ".npmrc",
    ".pypirc",
    ".netrc",
    "id_rsa",
    "id_ecdsa",
    "id_ed25519",
    "authorized_keys",
];

/// How calls that no rule decides are treated (`[permissions] mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Read-only and closed-world tools run; everything else asks.
    #[default]
    Default,
    /// Like `default`. (File edits inside the caller's area already run in `default`,
    /// because the file tools are closed-world.)
    AcceptEdits,
    /// Read-only: only read-only tools run; every other call is denied.
    Explore,
    /// Everything runs, except what a deny or ask rule or a dangerous path stops.
    Bypass,
    /// Unattended: what would ask is denied.
    DontAsk,
}

/// The decision for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Run it.
    Allow,
    /// A person must approve it first.
    Ask {
        /// Why.
        reason: String,
        /// The rule that would allow calls like this one: the first of `suggestions`, empty
        /// when none is offered (leaving plan mode, a protected or sensitive path, an opaque
        /// command line).
        suggestion: String,
        /// Every rule "approve always" needs so that calls like this one are allowed: one
        /// per simple command of a command line that no allow rule covers yet (one for any
        /// other call), none when no rule may be offered.
        suggestions: Vec<String>,
    },
    /// Never run it.
    Deny {
        /// Why.
        reason: String,
    },
    /// The arguments are not acceptable to the tool (a path it refuses): an error result,
    /// never a question to a person.
    Invalid {
        /// The tool's complaint.
        message: String,
    },
}

/// The rules and the mode of one agent (and, later, one session).
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// The protected paths (default: [`Protected::default_set`]).
    pub protected: Protected,
    /// The mode.
    pub mode: Mode,
    /// Rules that allow.
    pub allow: Vec<Rule>,
    /// Rules that ask.
    pub ask: Vec<Rule>,
    /// Rules that deny.
    pub deny: Vec<Rule>,
}

impl Policy {
    /// The rules a child agent must keep: the deny and ask rules and the mode, not the allow
    /// rules. A child can never be more permissive than its parent (the subagent capability
    /// builds the child's policy from this).
    pub fn inherited(&self) -> Self {
        Self {
            mode: self.mode,
            allow: Vec::new(),
            ask: self.ask.clone(),
            deny: self.deny.clone(),
            protected: self.protected.clone(),
        }
    }

    /// The same policy with `protected` as its protected paths.
    #[must_use]
    pub fn with_protected(mut self, protected: Protected) -> Self {
        self.protected = protected;
        self
    }

    /// Decides on a call of `tool` with `input` (already checked against its schema).
    pub fn decide(&self, tool: &str, hints: ToolAnnotations, input: &Value) -> Decision {
        let subject = match subject_of(tool, hints, input) {
            Ok(subject) => subject,
            Err(message) => return Decision::Invalid { message },
        };
        if let Some(rule) = self.deny.iter().find(|rule| rule.matches_any(tool, &subject)) {
            return Decision::Deny {
                reason: format!("the rule `{rule}` denies it"),
            };
        }
        if let Some(rule) = self.ask.iter().find(|rule| rule.matches_any(tool, &subject)) {
            return self.ask_or_deny(format!("the rule `{rule}` asks for approval"), tool, &subject);
        }
        // Leaving plan mode is the tool's own check: a person approves the plan, always.
        // No rule can allow it, so none is suggested.
        if tool == PLAN_EXIT_TOOL {
            return match self.ask_or_deny(
                "leaving plan mode needs a person to approve the plan".to_owned(),
                tool,
                &subject,
            ) {
                Decision::Ask { reason, .. } => Decision::Ask {
                    reason,
                    suggestion: String::new(),
                    suggestions: Vec::new(),
                },
                other => other,
            };
        }
        if self.mode == Mode::Explore && !hints.is_read_only() {
            return Decision::Deny {
                reason: "the permission mode is `explore` (read-only) and this tool is not read-only".to_owned(),
            };
        }
        if let Subject::Path(path) = &subject
            && !hints.is_read_only()
            && !PLAN_TOOLS.contains(&tool)
            && self.protected.matches(path)
        {
            return self.ask_without_rule(format!(
                "it writes `{path}`, a protected path (harness configuration, prompt or state); a person must approve every such write"
            ));
        }
        if let Some(path) = dangerous_path(&subject, input, hints) {
            return self.ask_without_rule(format!("it touches `{path}`, a sensitive path"));
        }
        if let Subject::Shell(analysis) = &subject {
            if let Some(path) = shell_path(analysis, &self.protected) {
                return self.ask_without_rule(format!(
                    "the command line names `{path}`, a sensitive or protected path (globs count as every name they could match)"
                ));
            }
            if analysis.is_opaque() {
                return self.ask_without_rule(format!(
                    "the permission check cannot see through the command line: {}",
                    analysis.opaque.join("; ")
                ));
            }
        }
        if covers_all(&self.allow, tool, &subject) {
            return Decision::Allow;
        }
        if self.mode == Mode::Bypass || hints.is_read_only() || !hints.is_open_world() {
            return Decision::Allow;
        }
        self.ask_or_deny(
            "this tool can change things outside your area".to_owned(),
            tool,
            &subject,
        )
    }

    fn ask_or_deny(&self, reason: String, tool: &str, subject: &Subject) -> Decision {
        // "Always" is never offered for a protected or sensitive path.
        let offer = match subject {
            Subject::Path(path) => !(self.protected.matches(path) || is_dangerous(path)),
            Subject::Shell(analysis) => shell_path(analysis, &self.protected).is_none(),
            Subject::Arguments(_) => true,
        };
        let suggestions = if offer {
            suggestions(tool, subject, &self.allow)
        } else {
            Vec::new()
        };
        self.ask_with(reason, suggestions)
    }

    /// Asks (or denies, in `dont_ask`) without offering an "always" rule.
    fn ask_without_rule(&self, reason: String) -> Decision {
        self.ask_with(reason, Vec::new())
    }

    fn ask_with(&self, reason: String, suggestions: Vec<String>) -> Decision {
        if self.mode == Mode::DontAsk {
            return Decision::Deny {
                reason: format!("{reason}, and the permission mode is `dont_ask` (no person to ask)"),
            };
        }
        Decision::Ask {
            reason,
            suggestion: suggestions.first().cloned().unwrap_or_default(),
            suggestions,
        }
    }
}

/// What the rules match for this call.
fn subject_of(tool: &str, hints: ToolAnnotations, input: &Value) -> Result<Subject, String> {
    if tool == SHELL_TOOL {
        let command = input.get("command").and_then(Value::as_str).unwrap_or_default();
        return Ok(Subject::Shell(analyse(command)));
    }
    if !hints.is_open_world()
        && let Some(raw) = input.get("path").and_then(Value::as_str)
    {
        return normalized_path(raw).map(Subject::Path);
    }
    Ok(Subject::Arguments(input.to_string()))
}

/// Longest path text a file tool accepts (as `harness_fs::WsPath`).
const MAX_PATH_LEN: usize = 4096;

/// A file tool's `path` argument as the rules see it: relative to the workspace root, with
/// empty and `.` segments dropped. The same lexical rules as `harness_fs::WsPath::parse` (a
/// test in `harness` keeps the two in step); the file tool checks the path again, after
/// resolving symlinks. The error is the message the model sees.
fn normalized_path(raw: &str) -> Result<String, String> {
    let invalid = |reason: &str| {
        let shown: String = raw.chars().take(200).collect();
        format!("invalid path {shown:?}: {reason}")
    };
    if raw.len() > MAX_PATH_LEN {
        return Err(invalid("the path is longer than 4096 bytes"));
    }
    if raw.contains('\0') {
        return Err(invalid("the path contains a NUL byte"));
    }
    if raw.contains('\\') {
        return Err(invalid("use '/' as the separator"));
    }
    if raw.starts_with('~') {
        return Err(invalid("'~' is not expanded; use a path relative to the workspace"));
    }
    let mut segments = Vec::new();
    for segment in raw.split('/') {
        match segment {
            "" | "." => {}
            ".." => return Err(invalid("'..' is not allowed; use a path inside the workspace")),
            other => segments.push(other),
        }
    }
    Ok(segments.join("/"))
}

/// The first dangerous path the call names, if any.
fn dangerous_path(subject: &Subject, input: &Value, hints: ToolAnnotations) -> Option<String> {
    match subject {
        Subject::Path(path) => is_dangerous(path).then(|| path.clone()),
        // The shell's words are checked with the protected paths (`shell_path`).
        Subject::Shell(_) => None,
        Subject::Arguments(_) if !hints.is_open_world() => ["glob", "pattern"]
            .iter()
            .filter_map(|key| input.get(key).and_then(Value::as_str))
            .find(|value| is_dangerous(value))
            .map(str::to_owned),
        Subject::Arguments(_) => None,
    }
}

/// Whether `path` lies in a dangerous directory or names a dangerous file.
fn is_dangerous(path: &str) -> bool {
    let segments: Vec<&str> = path.split('/').filter(|segment| !segment.is_empty()).collect();
    segments.iter().any(|segment| DANGEROUS_DIRS.contains(segment))
        || segments
            .last()
            .is_some_and(|name| DANGEROUS_FILES.contains(name) || name.starts_with(".env."))
}

/// The rules that would allow calls like this one: for a command line, one per simple
/// command no allow rule covers yet (in order, without repeats).
fn suggestions(tool: &str, subject: &Subject, allow: &[Rule]) -> Vec<String> {
    match subject {
        Subject::Path(path) => vec![format!("{tool}({path})")],
        Subject::Shell(analysis) if analysis.is_opaque() => Vec::new(),
        Subject::Shell(analysis) => {
            let mut rules: Vec<String> = Vec::new();
            for command in &analysis.commands {
                if command.allow_view.is_none() {
                    continue;
                }
                let single = Subject::Shell(Analysis {
                    commands: vec![command.clone()],
                    opaque: Vec::new(),
                });
                if covers_all(allow, tool, &single) {
                    continue;
                }
                let Some(pattern) = &command.suggestion else {
                    // A command no rule pattern can name safely: no "always" for the line.
                    return Vec::new();
                };
                let rule = format!("{tool}({pattern})");
                if !rules.contains(&rule) {
                    rules.push(rule);
                }
            }
            rules
        }
        Subject::Arguments(_) => vec![tool.to_owned()],
    }
}

/// Names that a glob in a shell argument is tried against: the dangerous names, and the
/// literal segments of the protected globs.
fn glob_candidates(protected: &Protected) -> Vec<String> {
    let mut names: Vec<String> = DANGEROUS_DIRS
        .iter()
        .chain(DANGEROUS_FILES)
        .map(|&name| name.to_owned())
        .collect();
    names.push(".env.local".to_owned());
    for glob in protected.globs() {
        for segment in glob.split('/') {
            if !segment.is_empty() && !segment.contains(['*', '?', '[', '{']) && !names.iter().any(|n| n == segment) {
                names.push(segment.to_owned());
            }
        }
    }
    // Any other name: a glob can always match something harmless too, and what follows it
    // may still be protected (`skills/*` is `skills/x`).
    names.push("x".to_owned());
    names
}

/// The names among `candidates` that the glob `pattern` (one path segment) could match, as
/// `sh` expands it: a leading `.` must be matched literally. A pattern that does not compile
/// could match anything.
fn segment_matches<'a>(pattern: &str, candidates: &'a [String]) -> Vec<&'a String> {
    let glob = GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|glob| glob.compile_matcher());
    candidates
        .iter()
        .filter(|name| !name.starts_with('.') || pattern.starts_with('.'))
        .filter(|name| glob.as_ref().map_or(true, |glob| glob.is_match(name.as_str())))
        .collect()
}

/// Most concrete paths one glob word is expanded to for the check; a word with more could
/// be anything and counts as sensitive.
const MAX_EXPANSIONS: usize = 4096;

/// The concrete paths a shell word could name: itself, or for a glob every combination of
/// the candidate names its segments could match. `None` when there are too many.
fn word_paths(word: &Word, candidates: &[String]) -> Option<Vec<String>> {
    let mut texts = vec![word.text.clone()];
    // `--file=.env`, `FOO=~/.ssh/key`: what follows the `=` is a path too.
    if let Some((_, value)) = word.text.split_once('=') {
        texts.push(value.to_owned());
    }
    if !word.glob {
        return Some(texts);
    }
    let mut all = Vec::new();
    for text in texts {
        let mut paths = vec![String::new()];
        for (index, segment) in text.split('/').enumerate() {
            let options: Vec<String> = if segment.contains(['*', '?', '[']) {
                segment_matches(segment, candidates).into_iter().cloned().collect()
            } else {
                vec![segment.to_owned()]
            };
            if paths.len() * options.len().max(1) > MAX_EXPANSIONS {
                return None;
            }
            paths = paths
                .iter()
                .flat_map(|prefix| {
                    options.iter().map(move |option| {
                        if index == 0 {
                            option.clone()
                        } else {
                            format!("{prefix}/{option}")
                        }
                    })
                })
                .collect();
        }
        all.extend(paths);
    }
    Some(all)
}

/// The first word or redirection target of a command line that names a dangerous or a
/// protected path.
fn shell_path(analysis: &Analysis, protected: &Protected) -> Option<String> {
    let candidates = glob_candidates(protected);
    for word in analysis.commands.iter().flat_map(|command| &command.paths) {
        let Some(paths) = word_paths(word, &candidates) else {
            return Some(word.text.clone());
        };
        if paths
            .iter()
            .any(|path| is_dangerous(path) || protected.matches_any_tail(path))
        {
            return Some(word.text.clone());
        }
    }
    None
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
