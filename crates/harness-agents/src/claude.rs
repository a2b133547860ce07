//! Claude Code agent files, read as Claude Code writes them: its tool names mapped to ours,
//! `tools` as a list or a comma string, `model` aliases, and front matter that strict YAML
//! refuses (a multi-line description whose example dialogue has `user:` lines) read line by
//! line.

use super::{DeclarationWarning, ParseOptions};
use yaml_serde::{Mapping, Value};

/// Claude Code's tool names and ours. `[subagents] tool_aliases` is consulted first, so an
/// operator can add (`WebFetch = "mcp__fetch__fetch"`) or redirect a name. `execute` exists
/// only where the agent has a shell; a name the parent lacks is dropped from the child with
/// a warning when the child is built.
pub const TOOL_TABLE: &[(&str, &str)] = &[
    ("Read", "read_file"),
    ("Write", "write_file"),
    ("Edit", "edit_file"),
    ("MultiEdit", "edit_file"),
    ("Glob", "glob_files"),
    ("Grep", "grep_files"),
    ("LS", "list_files"),
    ("Bash", "execute"),
    ("TodoWrite", "todo_write"),
    ("Task", "agent_spawn"),
    ("Agent", "agent_spawn"),
];

/// Keys a line may begin with when front matter is read line by line: ours and Claude
/// Code's.
const KNOWN_KEYS: &[&str] = &[
    "name",
    "description",
    "tools",
    "disallowedTools",
    "disallowed_tools",
    "model",
    "color",
    "permissionMode",
    "skills",
    "hooks",
    "workspace",
    "steps",
    "hidden",
    "max_tokens",
    "url",
    "agent",
    "headers",
];

/// Why an unknown key is ignored (a warning's message).
pub(crate) fn unknown_key_reason(key: &str) -> String {
    match key {
        "color" => "a display colour in Claude Code; the harness has no use for it".to_owned(),
        "permissionMode" | "hooks" | "skills" | "mcpServers" => {
            format!("a Claude Code setting the harness does not take from agent files (`{key}`)")
        }
        _ => format!("not a key of a subagent file (`{key}`)"),
    }
}

/// A scalar's text (a string, number or boolean).
pub(crate) fn scalar_text(value: &Value) -> Option<&str> {
    value.as_str()
}

/// The tool names of `tools` / `disallowedTools` (`key`), mapped to ours and deduplicated.
/// A name no table maps and that is not one of ours (an upper-case Claude name such as
/// `WebFetch`) is an ignored warning; `Bash(git:*)` is `Bash` with an ignored warning for
/// the pattern.
///
/// # Errors
/// A skipped warning when the value is neither a list nor a string.
pub(crate) fn tool_names(
    value: &Value,
    key: &str,
    file: &str,
    options: &ParseOptions,
    warnings: &mut Vec<DeclarationWarning>,
) -> Result<Vec<String>, DeclarationWarning> {
    let raw: Vec<String> = match value {
        Value::String(text) => split_names(text),
        Value::Sequence(items) => {
            let mut names = Vec::new();
            for item in items {
                match item.as_str() {
                    Some(text) => names.extend(split_names(text)),
                    None => {
                        return Err(DeclarationWarning::skipped(
                            file,
                            key,
                            "every entry must be a tool name (a string)",
                        ));
                    }
                }
            }
            names
        }
        _ => {
            return Err(DeclarationWarning::skipped(
                file,
                key,
                "expected a list of tool names or a comma-separated string (`Read, Grep, Glob`)",
            ));
        }
    };
    let mut mapped: Vec<String> = Vec::new();
    for name in raw {
        let base = match name.split_once('(') {
            Some((base, pattern)) => {
                warnings.push(DeclarationWarning::ignored(
                    file,
                    key,
                    format!(
                        "the pattern `({pattern}` of `{name}` is not applied: the child gets `{base}` whole (the permission rules still apply)"
                    ),
                ));
                base.trim().to_owned()
            }
            None => name,
        };
        let ours = options.tool_aliases.get(&base).cloned().or_else(|| {
            TOOL_TABLE
                .iter()
                .find(|(claude, _)| *claude == base)
                .map(|(_, ours)| (*ours).to_owned())
        });
        let ours = match ours {
            Some(ours) => ours,
            None if base.starts_with(|c: char| c.is_ascii_uppercase()) => {
                warnings.push(DeclarationWarning::ignored(
                    file,
                    key,
                    format!(
                        "`{base}` is not a tool here; map it to one with `[subagents] tool_aliases` in harness.toml \
                         (e.g. `{base} = \"mcp__server__tool\"`)"
                    ),
                ));
                continue;
            }
            None => base,
        };
        if !mapped.contains(&ours) {
            mapped.push(ours);
        }
    }
    Ok(mapped)
}

/// `Read, Grep` / `Read Grep`: names split at commas, and at spaces outside a `(...)` pattern.
fn split_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for piece in text.split(',') {
        let piece = piece.trim();
        if piece.contains('(') {
            names.push(piece.to_owned());
        } else {
            names.extend(piece.split_whitespace().map(str::to_owned));
        }
    }
    names.retain(|name| !name.is_empty());
    names
}

/// `model`: `inherit` is the parent's model, an alias of `[subagents] model_aliases` its
/// spec, a `provider:model` spec itself; any other word (`sonnet` with no alias) is the
/// parent's model with an ignored warning.
///
/// # Errors
/// A skipped warning: a value that is not a string, a `provider:model` that does not
/// parse, an alias whose spec does not parse.
pub(crate) fn model(
    value: &Value,
    file: &str,
    options: &ParseOptions,
    warnings: &mut Vec<DeclarationWarning>,
) -> Result<Option<String>, DeclarationWarning> {
    let Some(text) = value.as_str().map(str::trim) else {
        return Err(DeclarationWarning::skipped(
            file,
            "model",
            "expected a model spec (`provider:model`), an alias or `inherit`",
        ));
    };
    if text.is_empty() || text == "inherit" {
        return Ok(None);
    }
    let (spec, via) = match options.model_aliases.get(text) {
        Some(spec) => (spec.as_str(), Some(text)),
        None => (text, None),
    };
    if via.is_none() && !spec.contains(':') {
        warnings.push(DeclarationWarning::ignored(
            file,
            "model",
            format!(
                "`{text}` is neither a model spec nor an alias of `[subagents] model_aliases` (e.g. `{text} = \"anthropic:claude-…\"`); \
                 the child uses the parent's model"
            ),
        ));
        return Ok(None);
    }
    match harness_models::ModelSpec::parse(spec) {
        Ok(_) => Ok(Some(spec.to_owned())),
        Err(err) => Err(DeclarationWarning::skipped(
            file,
            "model",
            match via {
                Some(alias) => {
                    format!("the alias `{alias}` of `[subagents] model_aliases` is `{spec}`, not a model spec: {err}")
                }
                None => format!("`{spec}` is not a model spec: {err}"),
            },
        )),
    }
}

/// Front matter read line by line, for text strict YAML refuses (the reader
/// `harness_skills::front_matter::lenient` shared with `SKILL.md`): a line that starts at
/// column 0 with a known key and `:` begins that key, every other line continues the
/// previous key's value. `name` and `description` are taken as text.
pub(crate) fn lenient_front_matter(yaml: &str) -> Option<Mapping> {
    harness_skills::front_matter::lenient(yaml, KNOWN_KEYS, &["name", "description"])
}
