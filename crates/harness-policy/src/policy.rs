//! [`Policy`]: the decision — allow, ask or deny — for one tool call, from the rules, the
//! mode and the tool's declared effects ([`ToolAnnotations`]), in a fixed order:
//!
//! 1. a **deny** rule matches → deny;
//! 2. an **ask** rule matches → ask;
//! 3. **tool checks**: `plan_exit` (leaving plan mode) → ask, in every mode; in `explore`, a
//!    tool that is not read-only → deny; a dangerous path
//!    (`.git/`, `.ssh/`, `.env`, shell rc files, ...) → ask, in every mode, `bypass` too; a
//!    command line the splitter cannot see through → ask;
//! 4. **allow** rules cover the call → allow;
//! 5. the **mode**: `bypass` → allow; a read-only tool → allow; a closed-world tool (it
//!    stays inside the caller's area) → allow; anything else → ask, which `dont_ask` turns
//!    into deny.
//!
//! "Read-only" and "closed-world" come from the annotations, never from a list of names.

use crate::command_line::{simple_commands, words};
use crate::rule::{Rule, Subject, covers_all};
use harness_core::ToolAnnotations;
use serde::Deserialize;
use serde_json::Value;

/// The shell tool's name: its rules match simple commands.
pub const SHELL_TOOL: &str = "execute";

/// The tool that leaves plan mode: a person approves the plan, always (no rule allows it).
pub const PLAN_EXIT_TOOL: &str = "plan_exit";

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
        /// The rule that would allow calls like this one (empty when no rule can: leaving
        /// plan mode always needs a person).
        suggestion: String,
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
        }
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
                },
                other => other,
            };
        }
        if self.mode == Mode::Explore && !hints.is_read_only() {
            return Decision::Deny {
                reason: "the permission mode is `explore` (read-only) and this tool is not read-only".to_owned(),
            };
        }
        if let Some(path) = dangerous_path(&subject, input, hints) {
            return self.ask_or_deny(format!("it touches `{path}`, a sensitive path"), tool, &subject);
        }
        if subject == Subject::Shell(None) {
            return self.ask_or_deny(
                "the command line uses constructs the permission check cannot see through".to_owned(),
                tool,
                &subject,
            );
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
        if self.mode == Mode::DontAsk {
            return Decision::Deny {
                reason: format!("{reason}, and the permission mode is `dont_ask` (no person to ask)"),
            };
        }
        Decision::Ask {
            reason,
            suggestion: suggestion(tool, subject),
        }
    }
}

/// What the rules match for this call.
fn subject_of(tool: &str, hints: ToolAnnotations, input: &Value) -> Result<Subject, String> {
    if tool == SHELL_TOOL {
        let command = input.get("command").and_then(Value::as_str).unwrap_or_default();
        return Ok(Subject::Shell(simple_commands(command)));
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
        Subject::Shell(Some(commands)) => commands
            .iter()
            .flat_map(|command| words(command))
            .flat_map(|word| {
                // `>~/.bashrc`, `--file=.env`: look at what follows a redirection or `=`.
                let trimmed = word.trim_start_matches(['<', '>', '&', '0', '1', '2']).to_owned();
                let after_equals = trimmed.rsplit_once('=').map(|(_, value)| value.to_owned());
                [Some(trimmed), after_equals]
            })
            .flatten()
            .find(|word| is_dangerous(word)),
        Subject::Shell(None) => None,
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

/// The rule that would allow calls like this one.
fn suggestion(tool: &str, subject: &Subject) -> String {
    match subject {
        Subject::Path(path) => format!("{tool}({path})"),
        Subject::Shell(Some(commands)) => {
            let first: Vec<String> = commands
                .first()
                .map(|command| words(command).into_iter().take(2).collect())
                .unwrap_or_default();
            if first.is_empty() {
                tool.to_owned()
            } else {
                format!("{tool}({}*)", first.join(" "))
            }
        }
        Subject::Shell(None) | Subject::Arguments(_) => tool.to_owned(),
    }
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
