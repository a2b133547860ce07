//! Agent declaration files: the built-in `general-purpose` subagent, workspace files
//! `subagents/<id>.md` (YAML front matter + the child's persona as the body) and the
//! programmatic ones of the `harness` builder, merged there at build (a later source replaces
//! an earlier declaration of the same id: built-in, then files, then the builder).
//!
//! Files written for Claude Code load unchanged ([`claude`]): `name` is the id, `tools` and
//! `disallowedTools` take a list or a comma string of Claude tool names (mapped through a
//! table the operator extends), `model` takes `inherit` and aliases, and other keys (`color`,
//! ...) are ignored. Front matter that strict YAML refuses is read line by line. Every file
//! that is not loaded is a [`WarningKind::Skipped`] warning naming file, key and reason;
//! every key or tool name dropped from a file that did load is a [`WarningKind::Ignored`] one.
//!
//! ```
//! let text = "---\nname: reviewer\ndescription: Reviews code\ntools: Read, Grep, WebFetch\nmodel: sonnet\ncolor: blue\n---\nYou review.\n";
//! let parsed = harness_agents::parse_spec("code-reviewer", "subagents/code-reviewer.md", text, &Default::default())
//!     .unwrap_or_else(|w| panic!("{w}"));
//! assert_eq!(parsed.declaration.id, "reviewer");
//! assert_eq!(parsed.declaration.tools.as_deref(), Some(&["read_file".to_owned(), "grep_files".to_owned()][..]));
//! assert!(parsed.warnings.iter().all(|w| w.kind == harness_agents::WarningKind::Ignored));
//! ```

pub mod claude;
pub mod records;

use serde::Deserialize;
use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::Path;

/// The id of the built-in declaration.
pub const GENERAL_PURPOSE: &str = "general-purpose";

/// Who wrote a model spec or a subagent declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SpecOrigin {
    /// The operator: harness.toml, `--model`, `HARNESS_MODEL`, a root `subagents/` file, the
    /// builder.
    #[default]
    Operator,
    /// Anyone else: a per-user `<user>/subagents/` file (which the model may have written).
    User,
}

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
    /// The id the model spawns it by (the front matter's `name`, else the file's name
    /// without `.md`).
    pub id: String,
    /// What it is for: the delegation signal the model reads.
    pub description: String,
    /// The child's persona (the file's body); empty for `general-purpose`.
    pub instructions: String,
    /// Isolated (default) or shared runtime data.
    pub workspace_mode: WorkspaceMode,
    /// Maximum reasoning-acting steps per spawn (default: the parent's).
    pub steps: Option<NonZeroU32>,
    /// Allow-list over the parent's tools (`None`: all of them), in our tool names.
    pub tools: Option<Vec<String>>,
    /// Tools taken away from what the child would have (`disallowedTools`), in our names.
    pub denied_tools: Vec<String>,
    /// Not listed to the model (still spawnable by id).
    pub hidden: bool,
    /// The child's model, as a spec string (`provider:model`, `scripted:PATH`; the syntax
    /// of `--model`); `None`: the parent's model. Built at the first spawn: a spec that
    /// cannot be built (a missing key) makes that spawn an error result naming the file.
    pub model: Option<String>,
    /// Tokens one spawn of this child may use (`[subagents] child_token_budget` applies too).
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
    pub source: SpecOrigin,
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
            denied_tools: Vec::new(),
            hidden: false,
            model: None,
            max_tokens: None,
            origin: None,
            url: None,
            agent: None,
            headers: BTreeMap::new(),
            source: SpecOrigin::Operator,
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

/// Whether a warning's file was loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WarningKind {
    /// The file was not loaded: no subagent of that id comes from it.
    Skipped,
    /// The file loaded; one key, value or tool name in it was dropped.
    Ignored,
}

/// A declaration file that was skipped, or a part of one that was ignored, with the reason
/// (a warning: never a crash, never silent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclarationWarning {
    /// The file, relative to the workspace.
    pub file: String,
    /// The key at fault (`front matter` when the file has none).
    pub key: String,
    /// What is wrong.
    pub message: String,
    /// Skipped (the file) or ignored (a part of it).
    pub kind: WarningKind,
}

impl DeclarationWarning {
    fn skipped(file: &str, key: &str, message: impl Into<String>) -> Self {
        Self {
            file: file.to_owned(),
            key: key.to_owned(),
            message: message.into(),
            kind: WarningKind::Skipped,
        }
    }

    fn ignored(file: &str, key: &str, message: impl Into<String>) -> Self {
        Self {
            kind: WarningKind::Ignored,
            ..Self::skipped(file, key, message)
        }
    }
}

impl std::fmt::Display for DeclarationWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            WarningKind::Skipped => "skipped",
            WarningKind::Ignored => "loaded, ignored",
        };
        write!(f, "{} ({kind}): `{}`: {}", self.file, self.key, self.message)
    }
}

/// What the operator adds to the parsing of declaration files (`[subagents]` in
/// harness.toml).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParseOptions {
    /// Tool names mapped to ours before the built-in Claude table ([`claude::TOOL_TABLE`]),
    /// e.g. `WebFetch = "mcp__fetch__fetch"` (`[subagents] tool_aliases`).
    pub tool_aliases: BTreeMap<String, String>,
    /// `model` aliases to model specs, e.g. `sonnet = "anthropic:claude-sonnet-4-5"`
    /// (`[subagents] model_aliases`). A `model` that is neither an alias, `inherit` nor a
    /// spec makes the child use the parent's model, with an ignored warning.
    pub model_aliases: BTreeMap<String, String>,
}

/// A parsed declaration and what was ignored in its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// The declaration.
    pub declaration: SubagentDeclaration,
    /// [`WarningKind::Ignored`] warnings: keys, values and tool names dropped.
    pub warnings: Vec<DeclarationWarning>,
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
    hidden: bool,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    agent: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

/// The keys [`FrontMatter`] reads; `name`, `tools`, `disallowedTools` and `model` are read
/// apart (they take Claude Code's shapes).
const OWN_KEYS: &[&str] = &[
    "description",
    "workspace",
    "steps",
    "hidden",
    "max_tokens",
    "url",
    "agent",
    "headers",
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkspaceSpec {
    #[serde(default)]
    mode: WorkspaceMode,
}

/// Parses one declaration file's text: `stem` is the file's name without `.md` (the id
/// unless the front matter has a `name`), `file` names it in warnings.
///
/// # Errors
/// A [`WarningKind::Skipped`] [`DeclarationWarning`] naming the file and the key at fault.
pub fn parse_spec(stem: &str, file: &str, text: &str, options: &ParseOptions) -> Result<Parsed, DeclarationWarning> {
    let skip = |key: &str, message: String| DeclarationWarning::skipped(file, key, message);
    let mut warnings = Vec::new();
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (yaml, body) = harness_skills::front_matter::split(text)
        .ok_or_else(|| skip("front matter", "no `---` front matter block at the top".to_owned()))?;
    let mut map = match yaml_serde::from_str::<yaml_serde::Value>(yaml) {
        Ok(yaml_serde::Value::Mapping(map)) => map,
        Ok(yaml_serde::Value::Null) => yaml_serde::Mapping::new(),
        Ok(_) => return Err(skip("front matter", "must be a mapping of keys to values".to_owned())),
        Err(err) => match claude::lenient_front_matter(yaml) {
            Some(map) => {
                warnings.push(DeclarationWarning::ignored(
                    file,
                    "front matter",
                    format!("not valid YAML ({err}); read line by line, a known key at the start of a line beginning its value"),
                ));
                map
            }
            None => return Err(skip("front matter", err.to_string())),
        },
    };
    let mut take = |key: &str| map.remove(key);
    let name = take("name");
    let tools = take("tools");
    let denied = take("disallowedTools").or_else(|| take("disallowed_tools"));
    let model = take("model");
    let mut own = yaml_serde::Mapping::new();
    let keys: Vec<yaml_serde::Value> = map.keys().cloned().collect();
    for key in keys {
        let Some(value) = map.remove(&key) else { continue };
        match key.as_str() {
            Some(name) if OWN_KEYS.contains(&name) => {
                own.insert(key, value);
            }
            Some(name) => warnings.push(DeclarationWarning::ignored(
                file,
                name,
                claude::unknown_key_reason(name),
            )),
            None => warnings.push(DeclarationWarning::ignored(
                file,
                "front matter",
                "a key that is not a string",
            )),
        }
    }
    let matter: FrontMatter = yaml_serde::from_value(yaml_serde::Value::Mapping(own)).map_err(|err| {
        let message = err.to_string();
        let key = unknown_key(&message).unwrap_or("front matter").to_owned();
        skip(&key, message)
    })?;
    let id = match name.as_ref().map(claude::scalar_text) {
        None => stem.to_owned(),
        Some(Some(name)) if valid_id(name.trim()) => name.trim().to_owned(),
        Some(named) => {
            warnings.push(DeclarationWarning::ignored(
                file,
                "name",
                format!(
                    "{} is not an id (letters, digits, `-`, `_` and `.` only); the file's name `{stem}` is the id",
                    named.map_or_else(|| "the value".to_owned(), |name| format!("`{name}`"))
                ),
            ));
            stem.to_owned()
        }
    };
    if !valid_id(&id) {
        return Err(skip(
            "file name",
            "a subagent id may hold letters, digits, `-`, `_` and `.` only (or give an id as `name`)".to_owned(),
        ));
    }
    let tools = match tools {
        None | Some(yaml_serde::Value::Null) => None,
        Some(value) => {
            let mapped = claude::tool_names(&value, "tools", file, options, &mut warnings)?;
            if mapped.is_empty() {
                return Err(skip(
                    "tools",
                    "none of the listed tools is a tool here, so the child would have none: map the names with \
                     `[subagents] tool_aliases` in harness.toml, or remove `tools` to give it every tool"
                        .to_owned(),
                ));
            }
            Some(mapped)
        }
    };
    let denied_tools = match denied {
        None | Some(yaml_serde::Value::Null) => Vec::new(),
        Some(value) => claude::tool_names(&value, "disallowedTools", file, options, &mut warnings)?,
    };
    let model = match model {
        None | Some(yaml_serde::Value::Null) => None,
        Some(value) => claude::model(&value, file, options, &mut warnings)?,
    };
    if matter.max_tokens == Some(0) {
        return Err(skip(
            "max_tokens",
            "must be at least 1 (remove it for no budget)".to_owned(),
        ));
    }
    if let Some(url) = &matter.url
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(skip(
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
                return Err(skip(key, "only a remote subagent (with `url`) takes it".to_owned()));
            }
        }
    }
    if let Some(agent) = &matter.agent
        && !valid_id(agent)
    {
        return Err(skip(
            "agent",
            "an agent name may hold letters, digits, `-`, `_` and `.` only".to_owned(),
        ));
    }
    let description = matter
        .description
        .filter(|text| !text.trim().is_empty())
        .ok_or_else(|| skip("description", "required and must not be empty".to_owned()))?;
    let declaration = SubagentDeclaration {
        id,
        description: description.trim().to_owned(),
        instructions: body.trim().to_owned(),
        workspace_mode: matter.workspace.map(|spec| spec.mode).unwrap_or_default(),
        steps: matter.steps,
        tools,
        denied_tools,
        hidden: matter.hidden,
        model,
        max_tokens: matter.max_tokens,
        origin: Some(file.to_owned()),
        url: matter.url.map(|url| url.trim_end_matches('/').to_owned()),
        agent: matter.agent,
        headers: matter.headers,
        source: SpecOrigin::Operator,
    };
    Ok(Parsed { declaration, warnings })
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
/// been written by the model). The result is marked [`SpecOrigin::User`]. Its id is the
/// file's name whatever its `name` says (the caller asked for that file).
///
/// # Errors
/// A [`DeclarationWarning`] naming the file and the key at fault.
pub fn parse_user_spec(
    stem: &str,
    file: &str,
    text: &str,
    options: &ParseOptions,
) -> Result<Parsed, DeclarationWarning> {
    let mut parsed = parse_spec(stem, file, text, options)?;
    let declaration = &mut parsed.declaration;
    let refuse = |key: &str, what: &str| {
        DeclarationWarning::skipped(
            file,
            key,
            format!("a per-user declaration may not name {what}; only the workspace root's subagents/ files may"),
        )
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
    if harness_skills::front_matter::split(text.strip_prefix('\u{feff}').unwrap_or(text))
        .is_some_and(|(yaml, _)| yaml.contains("${"))
    {
        return Err(refuse("${VAR}", "a variable placeholder"));
    }
    stem.clone_into(&mut declaration.id);
    declaration.source = SpecOrigin::User;
    Ok(parsed)
}

/// Substitutes `${VAR}` in a remote declaration's header values through `lookup`.
///
/// # Errors
/// A warning naming the file and the `headers.<Name>` key: a variable that is not set or an
/// unterminated placeholder.
pub fn substitute_headers(
    declaration: &mut SubagentDeclaration,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(), DeclarationWarning> {
    let origin = declaration
        .origin
        .clone()
        .unwrap_or_else(|| format!("subagent `{}`", declaration.id));
    for (name, value) in &mut declaration.headers {
        let key = format!("headers.{name}");
        *value = harness_mcp::tools_json::substitute(value, &origin, &key, lookup)
            .map_err(|err| DeclarationWarning::skipped(&origin, &key, err.to_string()))?;
    }
    Ok(())
}

/// The `*.md` files of one declarations directory, read once: what [`load_files`] parses
/// and [`DeclarationFiles::referenced_variables`] scans.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeclarationFiles {
    /// `(stem, text or the read error)`, in file-name order.
    files: Vec<(String, Result<String, String>)>,
}

impl DeclarationFiles {
    /// Reads every `<dir>/*.md` (not recursive). A missing directory holds no files.
    pub fn read(dir: &Path) -> Self {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Self::default();
        };
        let mut paths: Vec<_> = entries.filter_map(Result::ok).map(|entry| entry.path()).collect();
        paths.sort();
        let files = paths
            .into_iter()
            .filter_map(|path| {
                let (Some(stem), Some("md")) = (
                    path.file_stem().and_then(|stem| stem.to_str()),
                    path.extension().and_then(|ext| ext.to_str()),
                ) else {
                    return None;
                };
                let text = std::fs::read_to_string(&path).map_err(|err| err.to_string());
                Some((stem.to_owned(), text))
            })
            .collect();
        Self { files }
    }

    /// The `${VAR}` names the files use (for a loader that snapshots them).
    pub fn referenced_variables(&self) -> Vec<String> {
        let mut names = Vec::new();
        for text in self.files.iter().filter_map(|(_, text)| text.as_ref().ok()) {
            let mut rest = text.as_str();
            while let Some(start) = rest.find("${") {
                let after = &rest[start + 2..];
                let Some(end) = after.find('}') else { break };
                let name = &after[..end];
                names.push(name.split_once(":-").map_or(name, |(name, _)| name).to_owned());
                rest = &after[end + 1..];
            }
        }
        names.sort();
        names.dedup();
        names
    }
}

/// Every `<dir>/*.md` (not recursive), parsed, by id; with a warning for each file skipped
/// and each part ignored. Two files of one id (a `name` that is another file's id): the
/// first in file-name order is loaded, the other skipped naming both. A missing directory
/// holds no declarations.
pub fn load_dir(
    dir: &Path,
    shown_as: &str,
    options: &ParseOptions,
) -> (BTreeMap<String, SubagentDeclaration>, Vec<DeclarationWarning>) {
    load_files(&DeclarationFiles::read(dir), shown_as, options)
}

/// [`load_dir`] on files already read.
pub fn load_files(
    files: &DeclarationFiles,
    shown_as: &str,
    options: &ParseOptions,
) -> (BTreeMap<String, SubagentDeclaration>, Vec<DeclarationWarning>) {
    let mut found: BTreeMap<String, SubagentDeclaration> = BTreeMap::new();
    let mut warnings = Vec::new();
    for (stem, text) in &files.files {
        let file = format!("{shown_as}/{stem}.md");
        match text {
            Ok(text) => match parse_spec(stem, &file, text, options) {
                Ok(parsed) => {
                    if let Some(earlier) = found.get(&parsed.declaration.id) {
                        warnings.push(DeclarationWarning::skipped(
                            &file,
                            "name",
                            format!(
                                "the id `{}` is already declared by {}; give one of them another `name`",
                                parsed.declaration.id,
                                earlier.origin.as_deref().unwrap_or("another file")
                            ),
                        ));
                        continue;
                    }
                    warnings.extend(parsed.warnings);
                    found.insert(parsed.declaration.id.clone(), parsed.declaration);
                }
                Err(warning) => warnings.push(warning),
            },
            Err(err) => warnings.push(DeclarationWarning::skipped(&file, "file", err.clone())),
        }
    }
    (found, warnings)
}

/// `label` as an id ([`valid_id`]): each run of other characters (spaces, `/`, `:`,
/// accents) becomes one `-`, leading `-` and `.` go, and it is cut at 64 characters.
/// `None` when nothing usable is left (a label of punctuation only).
pub fn slug(label: &str) -> Option<String> {
    let mut out = String::with_capacity(label.len().min(64));
    for c in label.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '_' | '.') {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let trimmed: String = out.trim_start_matches(['-', '.']).chars().take(64).collect();
    let trimmed = trimmed.trim_end_matches('-');
    valid_id(trimmed).then(|| trimmed.to_owned())
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

    fn parse(stem: &str, text: &str) -> Result<SubagentDeclaration, DeclarationWarning> {
        parse_spec(stem, &format!("subagents/{stem}.md"), text, &ParseOptions::default())
            .map(|parsed| parsed.declaration)
    }

    #[test]
    fn labels_are_slugged_into_ids() {
        for (label, slugged) in [
            ("auth-review", Some("auth-review")),
            ("Review the auth module", Some("Review-the-auth-module")),
            ("src/auth: login flow", Some("src-auth-login-flow")),
            ("..hidden", Some("hidden")),
            ("Ünïcode café", Some("n-code-caf")),
            ("!!!", None),
        ] {
            assert_eq!(slug(label).as_deref(), slugged, "{label}");
        }
        let long = "x".repeat(100);
        assert_eq!(slug(&long).unwrap().len(), 64);
    }

    #[test]
    fn a_spec_file_is_parsed() {
        let spec = parse(
            "researcher",
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
        let spec = parse("r", "---\ndescription: d\n---\n").unwrap();
        assert_eq!(spec.workspace_mode, WorkspaceMode::Isolated);
        assert!(spec.model.is_none() && spec.max_tokens.is_none());
        let spec = parse("r", "---\ndescription: d\nmodel: ollama:qwen3\nmax_tokens: 500\n---\n").unwrap();
        assert_eq!(
            (spec.model.as_deref(), spec.max_tokens),
            (Some("ollama:qwen3"), Some(500))
        );
        assert!(!spec.hidden && spec.tools.is_none() && spec.steps.is_none());
    }

    #[test]
    fn malformed_files_are_warnings_naming_file_and_key() {
        let missing = parse("r", "---\nhidden: true\n---\nbody").unwrap_err();
        assert_eq!(
            (missing.file.as_str(), missing.key.as_str()),
            ("subagents/r.md", "description")
        );
        let mode = parse("r", "---\ndescription: d\nworkspace:\n  mode: weird\n---\n").unwrap_err();
        assert!(mode.to_string().contains("weird"), "{mode}");
        let none = parse("r", "no front matter").unwrap_err();
        assert_eq!(none.key, "front matter");
        let model = parse("r", "---\ndescription: d\nmodel: nosuch:thing\n---\n").unwrap_err();
        assert_eq!(
            (model.file.as_str(), model.key.as_str()),
            ("subagents/r.md", "model"),
            "{model}"
        );
        let budget = parse("r", "---\ndescription: d\nmax_tokens: 0\n---\n").unwrap_err();
        assert_eq!(budget.key, "max_tokens");
        let bad_id = parse("a b", "---\ndescription: d\n---\n").unwrap_err();
        assert_eq!(bad_id.key, "file name");
    }

    #[test]
    fn remote_keys_are_parsed_and_checked() {
        let spec = parse(
            "r",
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
        let scheme = parse("r", "---\ndescription: d\nurl: ftp://x\n---\n").unwrap_err();
        assert_eq!(scheme.key, "url");
        let local = parse("r", "---\ndescription: d\nagent: x\n---\n").unwrap_err();
        assert_eq!(local.key, "agent");
    }

    fn parsed(stem: &str, text: &str, options: &ParseOptions) -> Parsed {
        parse_spec(stem, &format!("subagents/{stem}.md"), text, options).unwrap_or_else(|w| panic!("{w}"))
    }

    #[test]
    fn claude_code_keys_load_with_ignored_warnings() {
        let text = "---\nname: code-reviewer\ndescription: Reviews code\ntools: Read, Grep, Glob, Bash, WebFetch, MultiEdit, Edit\ndisallowedTools: [Write, Task]\nmodel: sonnet\ncolor: red\n---\nYou are a reviewer.\n";
        let parsed = parsed("reviewer-file", text, &ParseOptions::default());
        let declaration = &parsed.declaration;
        assert_eq!(declaration.id, "code-reviewer", "`name` is the id");
        assert_eq!(
            declaration.tools.as_deref().unwrap(),
            ["read_file", "grep_files", "glob_files", "execute", "edit_file"]
        );
        assert_eq!(declaration.denied_tools, ["write_file", "agent_spawn"]);
        assert_eq!(declaration.model, None, "an alias with no entry inherits");
        assert_eq!(declaration.instructions, "You are a reviewer.");
        let keys: Vec<(&str, WarningKind)> = parsed.warnings.iter().map(|w| (w.key.as_str(), w.kind)).collect();
        assert!(keys.contains(&("tools", WarningKind::Ignored)), "{keys:?}");
        assert!(keys.contains(&("model", WarningKind::Ignored)), "{keys:?}");
        assert!(keys.contains(&("color", WarningKind::Ignored)), "{keys:?}");
        assert!(
            parsed
                .warnings
                .iter()
                .all(|w| w.to_string().contains("(loaded, ignored)"))
        );
        assert!(
            parsed
                .warnings
                .iter()
                .any(|w| w.message.contains("`WebFetch` is not a tool here"))
        );
    }

    #[test]
    fn aliases_extend_the_tables() {
        let options = ParseOptions {
            tool_aliases: [("WebFetch".to_owned(), "mcp__fetch__fetch".to_owned())].into(),
            model_aliases: [("opus".to_owned(), "ollama:qwen3".to_owned())].into(),
        };
        let parsed = parsed(
            "a",
            "---\ndescription: d\ntools: [WebFetch, Read, mcp__docs__search, read_file]\nmodel: opus\n---\n",
            &options,
        );
        assert_eq!(
            parsed.declaration.tools.as_deref().unwrap(),
            ["mcp__fetch__fetch", "read_file", "mcp__docs__search"]
        );
        assert_eq!(parsed.declaration.model.as_deref(), Some("ollama:qwen3"));
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
        let inherit = parsed_inherit();
        assert_eq!(inherit, None);
        let bad = parse_spec(
            "a",
            "subagents/a.md",
            "---\ndescription: d\nmodel: opus\n---\n",
            &ParseOptions {
                model_aliases: [("opus".to_owned(), "nosuch:x".to_owned())].into(),
                ..ParseOptions::default()
            },
        )
        .unwrap_err();
        assert!(
            bad.message.contains("alias `opus`") && bad.kind == WarningKind::Skipped,
            "{bad}"
        );
    }

    fn parsed_inherit() -> Option<String> {
        parsed(
            "a",
            "---\ndescription: d\nmodel: inherit\n---\n",
            &ParseOptions::default(),
        )
        .declaration
        .model
    }

    #[test]
    fn a_child_is_never_silently_toolless() {
        let err = parse("a", "---\ndescription: d\ntools: WebFetch, WebSearch\n---\n").unwrap_err();
        assert_eq!((err.key.as_str(), err.kind), ("tools", WarningKind::Skipped));
        assert!(err.message.contains("tool_aliases"), "{err}");
        let pattern = parsed(
            "a",
            "---\ndescription: d\ntools: Bash(git add:*), Read\n---\n",
            &ParseOptions::default(),
        );
        assert_eq!(pattern.declaration.tools.as_deref().unwrap(), ["execute", "read_file"]);
        assert!(
            pattern.warnings[0].message.contains("is not applied"),
            "{:?}",
            pattern.warnings
        );
    }

    #[test]
    fn strict_yaml_refusals_are_read_line_by_line() {
        // The shape of Anthropic's plugin agents: an unquoted description over several lines
        // whose example dialogue lines (`Context:`, `user:`, `assistant:`) look like keys.
        let text = "---\nname: explorer\ndescription: Use this agent when the user asks: where is X? Examples:\n\n<example>\nContext: a large repo\nuser: \"Where is auth handled?\"\nassistant: \"I'll use the explorer agent.\"\n</example>\ntools: Glob, Grep, LS, Read\nmodel: inherit\ncolor: yellow\n---\nYou explore.\n";
        assert!(
            yaml_serde::from_str::<yaml_serde::Value>(harness_skills::front_matter::split(text).unwrap().0).is_err()
        );
        let parsed = parsed("explorer", text, &ParseOptions::default());
        assert!(
            parsed
                .declaration
                .description
                .starts_with("Use this agent when the user asks: where is X?")
        );
        assert!(
            parsed
                .declaration
                .description
                .contains("user: \"Where is auth handled?\"")
        );
        assert!(parsed.declaration.description.ends_with("</example>"));
        assert_eq!(
            parsed.declaration.tools.as_deref().unwrap(),
            ["glob_files", "grep_files", "list_files", "read_file"]
        );
        assert!(
            parsed
                .warnings
                .iter()
                .any(|w| w.key == "front matter" && w.kind == WarningKind::Ignored),
            "{:?}",
            parsed.warnings
        );
        // Nothing a known key begins: skipped, with the YAML error.
        let err = parse("x", "---\n: : :\n  - [\n---\n").unwrap_err();
        assert_eq!((err.key.as_str(), err.kind), ("front matter", WarningKind::Skipped));
    }

    #[test]
    fn names_that_collide_skip_the_second_file_naming_both() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.md"), "---\nname: same\ndescription: first\n---\n").unwrap();
        std::fs::write(dir.path().join("b.md"), "---\nname: same\ndescription: second\n---\n").unwrap();
        std::fs::write(
            dir.path().join("c.md"),
            "---\nname: Not An Id\ndescription: third\n---\n",
        )
        .unwrap();
        let (found, warnings) = load_dir(dir.path(), "subagents", &ParseOptions::default());
        assert_eq!(found["same"].description, "first");
        assert_eq!(
            found["c"].description, "third",
            "a `name` that is no id leaves the file's name"
        );
        let skipped: Vec<&DeclarationWarning> = warnings.iter().filter(|w| w.kind == WarningKind::Skipped).collect();
        assert_eq!(skipped.len(), 1, "{warnings:?}");
        assert_eq!(skipped[0].file, "subagents/b.md");
        assert!(skipped[0].message.contains("subagents/a.md"), "{}", skipped[0]);
    }

    #[test]
    fn a_user_file_keeps_its_file_name_as_id() {
        let parsed = parse_user_spec(
            "mine",
            "u/subagents/mine.md",
            "---\nname: other\ndescription: d\n---\n",
            &ParseOptions::default(),
        )
        .unwrap();
        assert_eq!(
            (parsed.declaration.id.as_str(), parsed.declaration.source),
            ("mine", SpecOrigin::User)
        );
    }
}
