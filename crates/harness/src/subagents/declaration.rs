//! Subagent declarations: the built-in `general-purpose`, workspace files
//! `subagents/<id>.md` (YAML front matter + the child's AGENTS.md as the body) and
//! programmatic ones from the builder, merged at build (a later source replaces an earlier
//! declaration of the same id: built-in, then files, then the builder).

use serde::Deserialize;
use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::Path;

/// The id of the built-in declaration.
pub const GENERAL_PURPOSE: &str = "general-purpose";

/// Where a child's runtime data lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceMode {
    /// Its own agent id and a session keyed by (parent session, user, agent id, label)
    /// (default).
    #[default]
    Isolated,
    /// The parent's agent id: its state sits next to the parent's sessions.
    Shared,
}

/// One subagent the parent may spawn.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SubagentDeclaration {
    /// The id the model spawns it by (a file's name without `.md`).
    pub id: String,
    /// What it is for: the delegation signal the model reads.
    pub description: String,
    /// The child's persona (its AGENTS.md); empty for `general-purpose`.
    pub instructions: String,
    /// Isolated (default) or shared runtime data.
    pub workspace_mode: WorkspaceMode,
    /// Maximum reasoning-acting steps per spawn (default: the parent's).
    pub steps: Option<NonZeroU32>,
    /// Allow-list over the parent's tools (`None`: all of them).
    pub tools: Option<Vec<String>>,
    /// Not listed to the model (still spawnable by id).
    pub hidden: bool,
    /// The child's model, as a spec string (`provider:model`, `scripted:PATH`; the syntax
    /// of `--model`); `None`: the parent's model. Built at the first spawn: a spec that
    /// cannot be built (a missing key) makes that spawn an error result naming the file.
    pub model: Option<String>,
    /// Tokens one spawn of this child may use (see
    /// [`SubagentsConfig::child_token_budget`](super::SubagentsConfig::child_token_budget)).
    pub max_tokens: Option<u64>,
    /// Where the declaration came from (`subagents/<id>.md`), for messages; `None` for a
    /// programmatic one.
    pub origin: Option<String>,
    /// A remote subagent: the base URL of another `harness serve` (e.g.
    /// `http://host:8080`); spawns go to its native API instead of a local child.
    pub url: Option<String>,
    /// The remote agent's name (`None`: the declaration id). Only with `url`.
    pub agent: Option<String>,
    /// Extra request headers for a remote subagent (e.g. `Authorization`), values with
    /// `${VAR}` already substituted. Only with `url`.
    pub headers: BTreeMap<String, String>,
    /// Who wrote it: only the operator's declarations (root files, the builder) may name
    /// URLs, headers or variables, and only their model specs get keys for an `@URL`.
    pub source: super::SpecOrigin,
}

impl SubagentDeclaration {
    /// A declaration with defaults: isolated, every tool, listed.
    pub fn new(id: impl Into<String>, description: impl Into<String>, instructions: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            description: description.into(),
            instructions: instructions.into(),
            workspace_mode: WorkspaceMode::Isolated,
            steps: None,
            tools: None,
            hidden: false,
            model: None,
            max_tokens: None,
            origin: None,
            url: None,
            agent: None,
            headers: BTreeMap::new(),
            source: super::SpecOrigin::Operator,
        }
    }

    /// A remote subagent served by another `harness serve` at `url` (its agent of the same
    /// id unless [`agent`](Self::agent) says otherwise).
    pub fn remote(id: impl Into<String>, description: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            url: Some(url.into()),
            ..Self::new(id, description, "")
        }
    }

    /// Whether spawns go to a remote server.
    pub fn is_remote(&self) -> bool {
        self.url.is_some()
    }

    /// The built-in general-purpose subagent: the parent's tools, shared workspace.
    pub fn general_purpose() -> Self {
        Self {
            workspace_mode: WorkspaceMode::Shared,
            ..Self::new(
                GENERAL_PURPOSE,
                "A general-purpose agent with the same tools as you.",
                "",
            )
        }
    }
}

/// A spec file that was skipped, with the reason (a warning: never a crash, never silent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclarationWarning {
    /// The file, relative to the workspace.
    pub file: String,
    /// The key at fault (`front matter` when the file has none).
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for DeclarationWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: `{}`: {}", self.file, self.key, self.message)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FrontMatter {
    description: Option<String>,
    #[serde(default)]
    workspace: Option<WorkspaceSpec>,
    #[serde(default)]
    steps: Option<NonZeroU32>,
    #[serde(default)]
    tools: Option<Vec<String>>,
    #[serde(default)]
    hidden: bool,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    agent: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkspaceSpec {
    #[serde(default)]
    mode: WorkspaceMode,
}

/// Parses one spec file's text; `file` names it in warnings.
///
/// # Errors
/// A [`DeclarationWarning`] naming the file and the key at fault.
pub fn parse_spec(id: &str, file: &str, text: &str) -> Result<SubagentDeclaration, DeclarationWarning> {
    let warn = |key: &str, message: String| DeclarationWarning {
        file: file.to_owned(),
        key: key.to_owned(),
        message,
    };
    if !valid_id(id) {
        return Err(warn(
            "file name",
            "a subagent id may hold letters, digits, `-`, `_` and `.` only".to_owned(),
        ));
    }
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (yaml, body) = split_front_matter(text)
        .ok_or_else(|| warn("front matter", "no `---` front matter block at the top".to_owned()))?;
    let matter: FrontMatter = yaml_serde::from_str(yaml).map_err(|err| {
        let message = err.to_string();
        let key = unknown_key(&message).unwrap_or("front matter").to_owned();
        warn(&key, message)
    })?;
    if let Some(spec) = &matter.model
        && let Err(err) = harness_models::ModelSpec::parse(spec)
    {
        return Err(warn("model", format!("`{spec}` is not a model spec: {err}")));
    }
    if matter.max_tokens == Some(0) {
        return Err(warn(
            "max_tokens",
            "must be at least 1 (remove it for no budget)".to_owned(),
        ));
    }
    if let Some(url) = &matter.url
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(warn(
            "url",
            format!("`{url}` must be an http:// or https:// base URL of a `harness serve`"),
        ));
    }
    if matter.url.is_none() {
        for key in ["agent", "headers"] {
            let given = if key == "agent" {
                matter.agent.is_some()
            } else {
                !matter.headers.is_empty()
            };
            if given {
                return Err(warn(key, "only a remote subagent (with `url`) takes it".to_owned()));
            }
        }
    }
    if let Some(agent) = &matter.agent
        && !valid_id(agent)
    {
        return Err(warn(
            "agent",
            "an agent name may hold letters, digits, `-`, `_` and `.` only".to_owned(),
        ));
    }
    let description = matter
        .description
        .filter(|text| !text.trim().is_empty())
        .ok_or_else(|| warn("description", "required and must not be empty".to_owned()))?;
    Ok(SubagentDeclaration {
        id: id.to_owned(),
        description: description.trim().to_owned(),
        instructions: body.trim().to_owned(),
        workspace_mode: matter.workspace.map(|spec| spec.mode).unwrap_or_default(),
        steps: matter.steps,
        tools: matter.tools,
        hidden: matter.hidden,
        model: matter.model,
        max_tokens: matter.max_tokens,
        origin: Some(file.to_owned()),
        url: matter.url.map(|url| url.trim_end_matches('/').to_owned()),
        agent: matter.agent,
        headers: matter.headers,
        source: super::SpecOrigin::Operator,
    })
}

/// The keys only the workspace root's declarations may carry, as `(key, what it is)`.
const OPERATOR_ONLY: &[(&str, &str)] = &[
    ("url", "a remote server"),
    ("agent", "a remote agent"),
    ("headers", "request headers"),
];

/// Parses a per-user declaration (`<user>/subagents/<id>.md`): as [`parse_spec`], but a file
/// that carries `url`, `agent`, `headers`, a `${VAR}` placeholder or a `model` with its own
/// `@URL` is refused (only the workspace root's declarations may: a per-user file may have
/// been written by the model). The result is marked [`SpecOrigin::User`](super::SpecOrigin::User).
///
/// # Errors
/// A [`DeclarationWarning`] naming the file and the key at fault.
pub fn parse_user_spec(id: &str, file: &str, text: &str) -> Result<SubagentDeclaration, DeclarationWarning> {
    let mut declaration = parse_spec(id, file, text)?;
    let refuse = |key: &str, what: &str| DeclarationWarning {
        file: file.to_owned(),
        key: key.to_owned(),
        message: format!("a per-user declaration may not name {what}; only the workspace root's subagents/ files may"),
    };
    for (key, what) in OPERATOR_ONLY {
        let given = match *key {
            "url" => declaration.url.is_some(),
            "agent" => declaration.agent.is_some(),
            _ => !declaration.headers.is_empty(),
        };
        if given {
            return Err(refuse(key, what));
        }
    }
    if let Some(spec) = &declaration.model
        && harness_models::ModelSpec::parse(spec).is_ok_and(|parsed| parsed.explicit_base_url().is_some())
    {
        return Err(refuse("model", "a model with its own base URL (`@URL`)"));
    }
    if split_front_matter(text.strip_prefix('\u{feff}').unwrap_or(text)).is_some_and(|(yaml, _)| yaml.contains("${")) {
        return Err(refuse("${VAR}", "a variable placeholder"));
    }
    declaration.source = super::SpecOrigin::User;
    Ok(declaration)
}

/// Substitutes `${VAR}` in a remote declaration's header values through `lookup`.
///
/// # Errors
/// A warning naming the file and the `headers.<Name>` key: a variable that is not set or an
/// unterminated placeholder.
pub(crate) fn substitute_headers(
    declaration: &mut SubagentDeclaration,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(), DeclarationWarning> {
    let origin = declaration
        .origin
        .clone()
        .unwrap_or_else(|| format!("subagent `{}`", declaration.id));
    for (name, value) in &mut declaration.headers {
        let key = format!("headers.{name}");
        *value =
            harness_mcp::tools_json::substitute(value, &origin, &key, lookup).map_err(|err| DeclarationWarning {
                file: origin.clone(),
                key: key.clone(),
                message: err.to_string(),
            })?;
    }
    Ok(())
}

/// The `${VAR}` names used in the files of `dir` (for a loader that snapshots them).
pub fn referenced_variables(dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return names;
    };
    for entry in entries.filter_map(Result::ok) {
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let mut rest = text.as_str();
        while let Some(start) = rest.find("${") {
            let after = &rest[start + 2..];
            let Some(end) = after.find('}') else { break };
            names.push(after[..end].to_owned());
            rest = &after[end + 1..];
        }
    }
    names.sort();
    names.dedup();
    names
}

/// Every `<dir>/*.md` (not recursive), parsed, by id; with a warning for each file skipped.
/// A missing directory holds no declarations.
pub fn load_dir(dir: &Path, shown_as: &str) -> (BTreeMap<String, SubagentDeclaration>, Vec<DeclarationWarning>) {
    let mut found = BTreeMap::new();
    let mut warnings = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (found, warnings);
    };
    let mut paths: Vec<_> = entries.filter_map(Result::ok).map(|entry| entry.path()).collect();
    paths.sort();
    for path in paths {
        let (Some(id), Some("md")) = (
            path.file_stem().and_then(|stem| stem.to_str()),
            path.extension().and_then(|ext| ext.to_str()),
        ) else {
            continue;
        };
        let file = format!("{shown_as}/{id}.md");
        match std::fs::read_to_string(&path) {
            Ok(text) => match parse_spec(id, &file, &text) {
                Ok(declaration) => {
                    found.insert(declaration.id.clone(), declaration);
                }
                Err(warning) => warnings.push(warning),
            },
            Err(err) => warnings.push(DeclarationWarning {
                file,
                key: "file".to_owned(),
                message: err.to_string(),
            }),
        }
    }
    (found, warnings)
}

/// Whether `id` may name a subagent (it becomes a path segment and part of a session id).
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn split_front_matter(text: &str) -> Option<(&str, &str)> {
    let rest = text.strip_prefix("---\n").or_else(|| text.strip_prefix("---\r\n"))?;
    if let Some(body) = rest.strip_prefix("---") {
        return Some(("", body));
    }
    let at = rest.match_indices("\n---").map(|(at, _)| at).find(|&at| {
        let after = &rest[at + 4..];
        after.is_empty() || after.starts_with('\n') || after.starts_with("\r\n")
    })?;
    Some((&rest[..at], &rest[at + 4..]))
}

/// The key a serde message names (`unknown field `x``, `invalid type ... for key `x``), so
/// the warning can name it.
fn unknown_key(message: &str) -> Option<&str> {
    let start = message.find('`')? + 1;
    let end = start + message[start..].find('`')?;
    Some(&message[start..end])
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_file_is_parsed() {
        let spec = parse_spec(
            "researcher",
            "subagents/researcher.md",
            "---\ndescription: Finds facts\nworkspace:\n  mode: shared\nsteps: 4\ntools: [read_file]\nhidden: true\n---\nYou research.\n",
        )
        .unwrap();
        assert_eq!(spec.description, "Finds facts");
        assert_eq!(spec.workspace_mode, WorkspaceMode::Shared);
        assert_eq!(spec.steps, NonZeroU32::new(4));
        assert_eq!(spec.tools, Some(vec!["read_file".to_owned()]));
        assert!(spec.hidden);
        assert_eq!(spec.instructions, "You research.");
    }

    #[test]
    fn defaults_are_isolated_listed_and_unrestricted() {
        let spec = parse_spec("r", "subagents/r.md", "---\ndescription: d\n---\n").unwrap();
        assert_eq!(spec.workspace_mode, WorkspaceMode::Isolated);
        assert!(spec.model.is_none() && spec.max_tokens.is_none());
        let spec = parse_spec(
            "r",
            "subagents/r.md",
            "---\ndescription: d\nmodel: ollama:qwen3\nmax_tokens: 500\n---\n",
        )
        .unwrap();
        assert_eq!(
            (spec.model.as_deref(), spec.max_tokens),
            (Some("ollama:qwen3"), Some(500))
        );
        assert!(!spec.hidden && spec.tools.is_none() && spec.steps.is_none());
    }

    #[test]
    fn malformed_files_are_warnings_naming_file_and_key() {
        let missing = parse_spec("r", "subagents/r.md", "---\nhidden: true\n---\nbody").unwrap_err();
        assert_eq!(
            (missing.file.as_str(), missing.key.as_str()),
            ("subagents/r.md", "description")
        );
        let unknown = parse_spec("r", "subagents/r.md", "---\ndescription: d\ncolour: red\n---\n").unwrap_err();
        assert_eq!(unknown.key, "colour", "{unknown}");
        let mode = parse_spec(
            "r",
            "subagents/r.md",
            "---\ndescription: d\nworkspace:\n  mode: weird\n---\n",
        )
        .unwrap_err();
        assert!(mode.to_string().contains("weird"), "{mode}");
        let none = parse_spec("r", "subagents/r.md", "no front matter").unwrap_err();
        assert_eq!(none.key, "front matter");
        let model = parse_spec("r", "subagents/r.md", "---\ndescription: d\nmodel: nosuch:thing\n---\n").unwrap_err();
        assert_eq!(
            (model.file.as_str(), model.key.as_str()),
            ("subagents/r.md", "model"),
            "{model}"
        );
        let budget = parse_spec("r", "subagents/r.md", "---\ndescription: d\nmax_tokens: 0\n---\n").unwrap_err();
        assert_eq!(budget.key, "max_tokens");
        let bad_id = parse_spec("a b", "subagents/a b.md", "---\ndescription: d\n---\n").unwrap_err();
        assert_eq!(bad_id.key, "file name");
    }

    #[test]
    fn remote_keys_are_parsed_and_checked() {
        let spec = parse_spec(
            "r",
            "subagents/r.md",
            "---\ndescription: d\nurl: http://h:1/\nagent: helper\nheaders:\n  Authorization: Bearer ${K}\n---\n",
        )
        .unwrap();
        assert_eq!(
            (spec.url.as_deref(), spec.agent.as_deref()),
            (Some("http://h:1"), Some("helper"))
        );
        let mut substituted = spec.clone();
        substitute_headers(&mut substituted, &|var| (var == "K").then(|| "sekrit".to_owned())).unwrap();
        assert_eq!(substituted.headers["Authorization"], "Bearer sekrit");
        let missing = substitute_headers(&mut spec.clone(), &|_| None).unwrap_err();
        assert_eq!(
            (missing.file.as_str(), missing.key.as_str()),
            ("subagents/r.md", "headers.Authorization")
        );
        let scheme = parse_spec("r", "subagents/r.md", "---\ndescription: d\nurl: ftp://x\n---\n").unwrap_err();
        assert_eq!(scheme.key, "url");
        let local = parse_spec("r", "subagents/r.md", "---\ndescription: d\nagent: x\n---\n").unwrap_err();
        assert_eq!(local.key, "agent");
    }
}
