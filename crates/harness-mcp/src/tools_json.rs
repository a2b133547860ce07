//! `tools.json`: which tools the agent offers and which MCP servers it connects.
//!
//! ```jsonc
//! {
//!   // deny wins over allow; a non-empty allow keeps only the listed tools (built-ins too)
//!   "allow": ["read_file", "mcp__time__get_current_time"],
//!   "deny": ["execute"],
//!   "mcpServers": {
//!     "time": { "transport": "stdio", "command": "mcp-server-time", "args": [], "env": {} },
//!     "docs": { "transport": "streamableHttp", "url": "https://${DOCS_HOST}/mcp",
//!               "headers": { "Authorization": "Bearer ${DOCS_TOKEN}" },
//!               "timeout_seconds": 30, "enabled": true, "on_demand": true }
//!   }
//! }
//! ```
//!
//! Comments (`//`, `/* */`) are allowed. Unknown keys are errors naming the key; a malformed
//! file names the line; `${VAR}` placeholders in strings are substituted through a lookup the
//! caller passes in (this library never reads the environment) and a missing variable is an
//! error naming the variable and the file. The workspace root's file may be given a second,
//! operator-side layer ([`ToolsConfig::layered`]): a higher layer replaces `allow` / `deny`
//! when it sets them and adds or replaces servers by name. A caller's own `<user>/tools.json`
//! (its layer in the workspace) is different: it can only narrow — its `deny` is added, its
//! `allow` intersected, and `mcpServers` is refused ([`ToolsConfig::parse_user_layer`],
//! applied per call by the `harness` crate's `user_tools` layer).
//!
//! [`ToolFilter`] applies `allow` / `deny` to the full tool list, after every tool (built-ins
//! included) is registered.

use harness_core::Tool;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// The default per-call timeout of an MCP server's tools.
pub const DEFAULT_MCP_TIMEOUT: Duration = Duration::from_secs(60);

/// The file name, at the workspace root.
pub const TOOLS_JSON: &str = "tools.json";

/// Claude Code's project file of MCP servers, at the workspace root: read below
/// `tools.json` ([`ToolsConfig::parse_mcp_json`]).
pub const MCP_JSON: &str = ".mcp.json";

/// Why a `tools.json` was refused. Every variant names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolsConfigError {
    /// Not JSON (after comments are removed), or a key or value has the wrong shape.
    #[error("{origin}: line {line}, column {column}: {message}")]
    Malformed {
        /// Where the text came from.
        origin: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong (serde's message names an unknown key).
        message: String,
    },
    /// `${VAR}` placeholders name variables that are not set: every one of them, so one
    /// fix makes the file load.
    #[error("{origin}: {}", unset_list(missing))]
    MissingVariable {
        /// Where the text came from.
        origin: String,
        /// Each unset variable with the JSON path of the string that uses it, e.g.
        /// (`DOCS_TOKEN`, `mcpServers.docs.url`), in the order of the file. Never empty.
        missing: Vec<(String, String)>,
    },
    /// A `${` without its closing `}`.
    #[error("{origin}: unterminated `${{` placeholder in {field}")]
    UnterminatedPlaceholder {
        /// Where the text came from.
        origin: String,
        /// The JSON path of the string.
        field: String,
    },
    /// `transport: "sse"`: the legacy transport is not supported.
    #[error(
        "{origin}: server `{server}` uses transport `sse`, which is not supported; \
         use `streamableHttp` (the server's streamable HTTP endpoint) instead"
    )]
    SseTransport {
        /// Where the text came from.
        origin: String,
        /// The server.
        server: String,
    },
    /// A caller's own `tools.json` declares MCP servers (only the workspace root's may).
    #[error(
        "{origin}: `mcpServers` is not allowed in a user's tools.json (a user can only narrow \
         the tool set with `allow` / `deny`); declare MCP servers in the workspace root's tools.json"
    )]
    ServersInUserLayer {
        /// Where the text came from.
        origin: String,
    },
    /// A `.mcp.json` with `allow` / `deny` (only `tools.json` filters tools).
    #[error("{origin}: `allow` and `deny` belong in tools.json; a .mcp.json holds only `mcpServers`")]
    FilterInMcpJson {
        /// Where the text came from.
        origin: String,
    },
    /// The file exists but could not be read.
    #[error("{origin}: cannot read: {message}")]
    Unreadable {
        /// Where the text came from.
        origin: String,
        /// Why.
        message: String,
    },
    /// A field the transport needs is missing, or one it cannot use is set.
    #[error("{origin}: server `{server}`: {message}")]
    InvalidServer {
        /// Where the text came from.
        origin: String,
        /// The server.
        server: String,
        /// What is wrong.
        message: String,
    },
}

/// "environment variable `A` is not set (used in f)", or every one of several.
fn unset_list(missing: &[(String, String)]) -> String {
    let each: Vec<String> = missing
        .iter()
        .map(|(variable, field)| format!("`{variable}` (used in {field})"))
        .collect();
    match each.as_slice() {
        [one] => format!("environment variable {one} is not set"),
        _ => format!("environment variables are not set: {}; export them", each.join(", ")),
    }
}

/// How to reach one MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process speaking JSON-RPC on stdin/stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to the scrubbed environment.
        env: BTreeMap<String, String>,
    },
    /// Streamable HTTP.
    StreamableHttp {
        /// The endpoint.
        url: String,
        /// Headers sent with every request.
        headers: BTreeMap<String, String>,
    },
}

/// One entry of `mcpServers`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    /// The server's name (the key), used in tool names `mcp__<server>__<tool>`.
    pub name: String,
    /// How to reach it.
    pub transport: McpTransport,
    /// Per-call timeout.
    pub timeout: Duration,
    /// `false` skips the server.
    pub enabled: bool,
    /// Its tools form the on-demand group `mcp__<server>`, offered only once activated.
    pub on_demand: bool,
    /// `"trust_annotations": true`: the server's tool annotations (`readOnlyHint`, ...) are
    /// honoured for permissions, plan mode and re-sending a call after a transport failure.
    /// Otherwise (the default) they are claims the harness does not act on: the tools count
    /// as unhinted (they ask under the default permissions), and only the scheduler uses the
    /// read-only hint, to run calls side by side.
    pub trust_annotations: bool,
}

/// A parsed, substituted `tools.json` (possibly merged from two layers).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolsConfig {
    /// `allow`; `None` or empty keeps every tool.
    pub allow: Option<Vec<String>>,
    /// `deny`; wins over `allow`.
    pub deny: Option<Vec<String>>,
    /// Servers by name, in name order.
    pub mcp_servers: BTreeMap<String, McpServerConfig>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    allow: Option<Vec<String>>,
    #[serde(default)]
    deny: Option<Vec<String>>,
    #[serde(default, rename = "mcpServers")]
    mcp_servers: BTreeMap<String, RawServer>,
}

/// A caller's own layer: the same keys, but `mcpServers` is refused by name.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUserFile {
    #[serde(default)]
    allow: Option<Vec<String>>,
    #[serde(default)]
    deny: Option<Vec<String>>,
    #[serde(default, rename = "mcpServers")]
    mcp_servers: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    /// `stdio` | `streamableHttp` (ours); Claude Code's `type` (`stdio` | `http` | `sse`) is
    /// the same key; without either, `command` means stdio and `url` streamable HTTP.
    #[serde(default)]
    transport: Option<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    args: Option<Vec<String>>,
    #[serde(default)]
    env: Option<BTreeMap<String, String>>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    headers: Option<BTreeMap<String, String>>,
    #[serde(default)]
    timeout_seconds: Option<f64>,
    #[serde(default)]
    enabled: Option<bool>,
    #[serde(default)]
    on_demand: Option<bool>,
    #[serde(default)]
    trust_annotations: Option<bool>,
}

impl ToolsConfig {
    /// Parses one layer. `origin` names the file in errors; `lookup` resolves `${VAR}`.
    ///
    /// # Errors
    /// [`ToolsConfigError`] naming the file: the line of a syntax error, an unknown key, a
    /// missing variable, `sse`, or a server without what its transport needs.
    pub fn parse(text: &str, origin: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ToolsConfigError> {
        let clean = strip_comments(text);
        let raw: RawFile = serde_json::from_str(&clean).map_err(|err| ToolsConfigError::Malformed {
            origin: origin.to_owned(),
            line: err.line(),
            column: err.column(),
            message: strip_position(&err.to_string()),
        })?;
        // Every unset variable of the file is collected, so the error names them all.
        let unset = std::cell::RefCell::new(Vec::new());
        let subst = |value: &str, field: &str| match substitute(value, origin, field, lookup) {
            Err(ToolsConfigError::MissingVariable { missing, .. }) => {
                unset.borrow_mut().extend(missing);
                Ok(String::new())
            }
            other => other,
        };
        let mut servers = BTreeMap::new();
        for (name, server) in raw.mcp_servers {
            let invalid = |message: String| ToolsConfigError::InvalidServer {
                origin: origin.to_owned(),
                server: name.clone(),
                message,
            };
            let field = |key: &str| format!("mcpServers.{name}.{key}");
            let named = match (server.transport.as_deref(), server.kind.as_deref()) {
                (Some(a), Some(b)) if a != b && !(a == "streamableHttp" && b == "http") => {
                    return Err(invalid(format!(
                        "`transport` = `{a}` and `type` = `{b}` disagree; keep one of them"
                    )));
                }
                (Some(named), _) | (None, Some(named)) => named.to_owned(),
                (None, None) if server.command.is_some() => "stdio".to_owned(),
                (None, None) if server.url.is_some() => "streamableHttp".to_owned(),
                (None, None) => {
                    return Err(invalid(
                        "no `command` (a stdio server) and no `url` (a streamable HTTP server)".into(),
                    ));
                }
            };
            let transport = match named.as_str() {
                "stdio" => {
                    if server.url.is_some() || server.headers.is_some() {
                        return Err(invalid(
                            "`url` and `headers` belong to `streamableHttp`, not `stdio`".into(),
                        ));
                    }
                    let command = server
                        .command
                        .ok_or_else(|| invalid("transport `stdio` needs `command`".into()))?;
                    let mut args = Vec::new();
                    for (i, arg) in server.args.unwrap_or_default().iter().enumerate() {
                        args.push(subst(arg, &field(&format!("args[{i}]")))?);
                    }
                    let mut env = BTreeMap::new();
                    for (key, value) in server.env.unwrap_or_default() {
                        let value = subst(&value, &field(&format!("env.{key}")))?;
                        env.insert(key, value);
                    }
                    McpTransport::Stdio {
                        command: subst(&command, &field("command"))?,
                        args,
                        env,
                    }
                }
                "streamableHttp" | "http" | "streamable-http" => {
                    if server.command.is_some() || server.args.is_some() || server.env.is_some() {
                        return Err(invalid(
                            "`command`, `args` and `env` belong to `stdio`, not `streamableHttp`".into(),
                        ));
                    }
                    let url = server
                        .url
                        .ok_or_else(|| invalid("transport `streamableHttp` needs `url`".into()))?;
                    let mut headers = BTreeMap::new();
                    for (key, value) in server.headers.unwrap_or_default() {
                        let value = subst(&value, &field(&format!("headers.{key}")))?;
                        headers.insert(key, value);
                    }
                    McpTransport::StreamableHttp {
                        url: subst(&url, &field("url"))?,
                        headers,
                    }
                }
                "sse" => {
                    return Err(ToolsConfigError::SseTransport {
                        origin: origin.to_owned(),
                        server: name,
                    });
                }
                other => {
                    return Err(invalid(format!(
                        "unknown transport `{other}`; use `stdio` or `streamableHttp` (`http`)"
                    )));
                }
            };
            let timeout = match server.timeout_seconds {
                None => DEFAULT_MCP_TIMEOUT,
                Some(secs) if secs.is_finite() && secs > 0.0 && secs <= 86_400.0 => Duration::from_secs_f64(secs),
                Some(secs) => return Err(invalid(format!("`timeout_seconds` must be in (0, 86400], got {secs}"))),
            };
            servers.insert(
                name.clone(),
                McpServerConfig {
                    name,
                    transport,
                    timeout,
                    enabled: server.enabled.unwrap_or(true),
                    on_demand: server.on_demand.unwrap_or(false),
                    trust_annotations: server.trust_annotations.unwrap_or(false),
                },
            );
        }
        let missing = unset.into_inner();
        if !missing.is_empty() {
            return Err(ToolsConfigError::MissingVariable {
                origin: origin.to_owned(),
                missing,
            });
        }
        Ok(Self {
            allow: raw.allow,
            deny: raw.deny,
            mcp_servers: servers,
        })
    }

    /// Parses a `.mcp.json` as Claude Code reads it (`mcpServers` only, the shapes of
    /// [`parse`](Self::parse)). Its servers' annotations are never trusted
    /// (`trust_annotations` is cleared): to trust a server, declare it in `tools.json`,
    /// which wins a name clash ([`merge`](Self::merge) it below `tools.json`).
    ///
    /// # Errors
    /// As [`parse`](Self::parse), and [`ToolsConfigError::FilterInMcpJson`].
    pub fn parse_mcp_json(
        text: &str,
        origin: &str,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ToolsConfigError> {
        let mut config = Self::parse(text, origin, lookup)?;
        if config.allow.is_some() || config.deny.is_some() {
            return Err(ToolsConfigError::FilterInMcpJson {
                origin: origin.to_owned(),
            });
        }
        for server in config.mcp_servers.values_mut() {
            server.trust_annotations = false;
        }
        Ok(config)
    }

    /// Parses a caller's own `tools.json` (`<user>/tools.json`, in the caller's layer): only
    /// `allow` and `deny`, which narrow the workspace root's set (see [`ToolFilter::narrow`]).
    ///
    /// # Errors
    /// [`ToolsConfigError::ServersInUserLayer`] when it has `mcpServers`; otherwise as
    /// [`parse`](Self::parse) (the line of a syntax error, an unknown key).
    pub fn parse_user_layer(text: &str, origin: &str) -> Result<ToolFilter, ToolsConfigError> {
        let clean = strip_comments(text);
        let raw: RawUserFile = serde_json::from_str(&clean).map_err(|err| ToolsConfigError::Malformed {
            origin: origin.to_owned(),
            line: err.line(),
            column: err.column(),
            message: strip_position(&err.to_string()),
        })?;
        if raw.mcp_servers.is_some() {
            return Err(ToolsConfigError::ServersInUserLayer {
                origin: origin.to_owned(),
            });
        }
        Ok(ToolFilter::new(
            raw.allow.unwrap_or_default(),
            raw.deny.unwrap_or_default(),
        ))
    }

    /// Reads the two layers, low to high: `(origin, text)` of the workspace root's file and of
    /// the caller's layer, either possibly absent.
    ///
    /// # Errors
    /// The first layer's [`ToolsConfigError`].
    pub fn layered(
        base: Option<(&str, &str)>,
        overlay: Option<(&str, &str)>,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ToolsConfigError> {
        let mut merged = Self::default();
        for (origin, text) in [base, overlay].into_iter().flatten() {
            merged = merged.merge(Self::parse(text, origin, lookup)?);
        }
        Ok(merged)
    }

    /// `self` overridden by `higher`: `allow` / `deny` when it sets them, servers by name.
    #[must_use]
    pub fn merge(mut self, higher: Self) -> Self {
        if higher.allow.is_some() {
            self.allow = higher.allow;
        }
        if higher.deny.is_some() {
            self.deny = higher.deny;
        }
        self.mcp_servers.extend(higher.mcp_servers);
        self
    }

    /// The `allow` / `deny` filter.
    pub fn filter(&self) -> ToolFilter {
        ToolFilter::new(
            self.allow.clone().unwrap_or_default(),
            self.deny.clone().unwrap_or_default(),
        )
    }
}

/// `allow` / `deny` over tool names: deny wins; a non-empty allow keeps only what it lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolFilter {
    allow: BTreeSet<String>,
    deny: BTreeSet<String>,
}

impl ToolFilter {
    /// A filter from the two lists.
    pub fn new(allow: impl IntoIterator<Item = String>, deny: impl IntoIterator<Item = String>) -> Self {
        Self {
            allow: allow.into_iter().collect(),
            deny: deny.into_iter().collect(),
        }
    }

    /// Whether the filter keeps everything (no `allow`, no `deny`).
    pub fn is_open(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }

    /// `self` narrowed by a caller's own filter: a tool is kept when both keep it (deny is
    /// the union, a non-empty allow the intersection), so a caller can only take tools
    /// away, never add one the workspace's `tools.json` removed.
    pub fn narrow(&self, caller: &ToolFilter) -> ToolFilter {
        let allow = match (self.allow.is_empty(), caller.allow.is_empty()) {
            (true, _) => caller.allow.clone(),
            (false, true) => self.allow.clone(),
            (false, false) => {
                let both: BTreeSet<String> = self.allow.intersection(&caller.allow).cloned().collect();
                if both.is_empty() {
                    // Nothing is allowed by both: an allow list no tool name can match (tool
                    // names are never empty; an empty list would mean "everything").
                    BTreeSet::from([String::new()])
                } else {
                    both
                }
            }
        };
        ToolFilter {
            allow,
            deny: self.deny.union(&caller.deny).cloned().collect(),
        }
    }

    /// Whether a tool with this name is offered.
    pub fn permits(&self, name: &str) -> bool {
        !self.deny.contains(name) && (self.allow.is_empty() || self.allow.contains(name))
    }

    /// Keeps the permitted tools, in order. Names in `allow` / `deny` that match no tool are
    /// logged as a warning (usually a typo).
    pub fn apply(&self, tools: Vec<Arc<dyn Tool>>) -> Vec<Arc<dyn Tool>> {
        let names: BTreeSet<&str> = tools.iter().map(|tool| tool.spec().name.as_str()).collect();
        for unknown in self.unknown_names(&names) {
            tracing::warn!(tool = unknown, "tools.json names a tool that does not exist");
        }
        tools
            .into_iter()
            .filter(|tool| self.permits(&tool.spec().name))
            .collect()
    }

    /// Names in `allow` or `deny` that are not in `names`.
    pub fn unknown_names<'a>(&'a self, names: &BTreeSet<&str>) -> Vec<&'a str> {
        self.allow
            .iter()
            .chain(&self.deny)
            .map(String::as_str)
            .filter(|name| !names.contains(name))
            .collect()
    }
}

/// Replaces `//` and `/* */` comments outside strings with spaces, keeping newlines so error
/// positions still point at the right line.
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                '\\' => {
                    if let Some(escaped) = chars.next() {
                        out.push(escaped);
                    }
                }
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_string = true;
                out.push(c);
            }
            ('/', Some('/')) => {
                for next in chars.by_ref() {
                    if next == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut last = ' ';
                for next in chars.by_ref() {
                    if next == '\n' {
                        out.push('\n');
                    }
                    if last == '*' && next == '/' {
                        break;
                    }
                    last = next;
                }
                out.push(' ');
            }
            _ => out.push(c),
        }
    }
    out
}

/// serde_json appends " at line L column C"; the error carries them separately.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message.to_owned(),
    }
}

/// Replaces every `${VAR}` in `value` through `lookup`, for the string at `field` (a JSON
/// path, e.g. `mcpServers.docs.url`) of the file `origin`. Every substituted value, and a
/// whole header or `env` value, is remembered for redaction ([`harness_core::redact`]).
///
/// # Errors
/// [`ToolsConfigError::MissingVariable`] or [`ToolsConfigError::UnterminatedPlaceholder`],
/// naming the file and the field.
pub fn substitute(
    value: &str,
    origin: &str,
    field: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ToolsConfigError> {
    let mut out = String::with_capacity(value.len());
    let mut missing = Vec::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| ToolsConfigError::UnterminatedPlaceholder {
                origin: origin.to_owned(),
                field: field.to_owned(),
            })?;
        // `${VAR:-default}` (the shell's and Claude Code's form): the default when unset or empty.
        let (variable, default) = match after[..end].split_once(":-") {
            Some((variable, default)) => (variable, Some(default)),
            None => (&after[..end], None),
        };
        let resolved = match (
            lookup(variable).filter(|value| !value.is_empty() || default.is_none()),
            default,
        ) {
            (Some(value), _) => value,
            (None, Some(default)) => default.to_owned(),
            (None, None) => {
                missing.push((variable.to_owned(), field.to_owned()));
                rest = &after[end + 1..];
                continue;
            }
        };
        // What a configuration expanded is kept out of every text the process shows.
        harness_core::redact::remember(&resolved);
        out.push_str(&resolved);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    if !missing.is_empty() {
        return Err(ToolsConfigError::MissingVariable {
            origin: origin.to_owned(),
            missing,
        });
    }
    if field.contains("headers.") || field.contains("env.") {
        // A configured header or server environment value (a token, written inline).
        harness_core::redact::remember(&out);
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "TOKEN" => Some("s3cret".into()),
            "HOST" => Some("example.test".into()),
            _ => None,
        }
    }

    fn parse(text: &str) -> Result<ToolsConfig, ToolsConfigError> {
        ToolsConfig::parse(text, "/ws/tools.json", &env)
    }

    #[test]
    fn full_file_with_comments_parses_and_substitutes() {
        let config = parse(
            r#"{
              // line comment
              "allow": ["read_file", "mcp__docs__search"], /* block
              comment */ "deny": ["execute"],
              "mcpServers": {
                "time": {"transport": "stdio", "command": "mcp-server-time", "args": ["--tz", "UTC"],
                         "env": {"KEY": "${TOKEN}"}, "timeout_seconds": 5},
                "docs": {"transport": "streamableHttp", "url": "https://${HOST}/mcp // not a comment",
                         "headers": {"Authorization": "Bearer ${TOKEN}"}, "enabled": false, "on_demand": true}
              }
            }"#,
        )
        .unwrap();
        assert_eq!(config.allow.as_deref().unwrap(), ["read_file", "mcp__docs__search"]);
        assert_eq!(config.deny.as_deref().unwrap(), ["execute"]);
        let time = &config.mcp_servers["time"];
        assert_eq!(time.timeout, Duration::from_secs(5));
        assert!(time.enabled && !time.on_demand);
        let McpTransport::Stdio { command, args, env } = &time.transport else {
            panic!("stdio expected")
        };
        assert_eq!(command, "mcp-server-time");
        assert_eq!(args, &["--tz", "UTC"]);
        assert_eq!(env["KEY"], "s3cret");
        let docs = &config.mcp_servers["docs"];
        assert!(!docs.enabled && docs.on_demand);
        assert_eq!(docs.timeout, DEFAULT_MCP_TIMEOUT);
        assert_eq!(
            docs.transport,
            McpTransport::StreamableHttp {
                url: "https://example.test/mcp // not a comment".into(),
                headers: [("Authorization".to_owned(), "Bearer s3cret".to_owned())].into(),
            }
        );
    }

    #[test]
    fn missing_variable_names_the_variable_and_the_file() {
        let err = parse(r#"{"mcpServers": {"a": {"transport": "stdio", "command": "x", "env": {"K": "${NOPE}"}}}}"#)
            .unwrap_err();
        assert!(matches!(&err, ToolsConfigError::MissingVariable { missing, .. } if missing[0].0 == "NOPE"));
        let text = err.to_string();
        assert!(
            text.contains("NOPE") && text.contains("/ws/tools.json") && text.contains("mcpServers.a.env.K"),
            "{text}"
        );
    }

    #[test]
    fn every_missing_variable_of_the_file_is_named_in_one_error() {
        let err = parse(
            r#"{"mcpServers": {
                "a": {"command": "${NOPE_A}", "args": ["${NOPE_B}-${NOPE_C}"]},
                "b": {"url": "https://x.test/${NOPE_D:-}", "headers": {"H": "${NOPE_E}"}}}}"#,
        )
        .unwrap_err();
        let text = err.to_string();
        for (variable, field) in [
            ("NOPE_A", "mcpServers.a.command"),
            ("NOPE_B", "mcpServers.a.args[0]"),
            ("NOPE_C", "mcpServers.a.args[0]"),
            ("NOPE_E", "mcpServers.b.headers.H"),
        ] {
            assert!(
                text.contains(&format!("`{variable}` (used in {field})")),
                "{variable}: {text}"
            );
        }
        // A variable with a default is not missing.
        assert!(!text.contains("NOPE_D"), "{text}");
        assert!(text.contains("environment variables are not set"), "{text}");
    }

    #[test]
    fn unterminated_placeholder_is_an_error() {
        let err =
            parse(r#"{"mcpServers": {"a": {"transport": "streamableHttp", "url": "http://${HOST"}}}"#).unwrap_err();
        assert!(matches!(err, ToolsConfigError::UnterminatedPlaceholder { .. }), "{err}");
    }

    #[test]
    fn malformed_file_names_the_line() {
        let err = parse("{\n  \"allow\": [\"a\",\n  \"deny\": []\n}").unwrap_err();
        let ToolsConfigError::Malformed { line, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!(*line, 3);
        assert!(err.to_string().starts_with("/ws/tools.json: line 3"), "{err}");
    }

    #[test]
    fn comment_lines_do_not_shift_reported_lines() {
        let err = parse("{\n/* one\n two */\n // three\n  \"allow\": 5\n}").unwrap_err();
        assert!(matches!(err, ToolsConfigError::Malformed { line: 5, .. }), "{err}");
    }

    #[test]
    fn annotations_are_trusted_only_where_the_file_says_so() {
        let config = parse(
            r#"{"mcpServers": {
                "mine": {"transport": "stdio", "command": "x", "trust_annotations": true},
                "theirs": {"transport": "stdio", "command": "y"},
                "said_no": {"transport": "streamableHttp", "url": "http://h/mcp", "trust_annotations": false}}}"#,
        )
        .unwrap();
        let trusted = |name: &str| config.mcp_servers[name].trust_annotations;
        assert!(trusted("mine"));
        assert!(!trusted("theirs"));
        assert!(!trusted("said_no"));
        let err = parse(r#"{"mcpServers": {"a": {"transport": "stdio", "command": "x", "trust_annotations": "yes"}}}"#)
            .unwrap_err();
        assert!(err.to_string().contains("boolean"), "{err}");
    }

    #[test]
    fn unknown_keys_are_named() {
        let err = parse(r#"{"alow": []}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `alow`"), "{err}");
        let err = parse(r#"{"mcpServers": {"a": {"transport": "stdio", "command": "x", "cwd": "/"}}}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `cwd`"), "{err}");
    }

    #[test]
    fn pasted_shapes_parse_claude_desktop_code_and_readme() {
        // Claude Desktop / server README: `command` + `args` + `env`, no transport key.
        // Claude Code (`claude mcp add`, `.mcp.json`): `"type": "stdio" | "http"`.
        let config = parse(
            r#"{"mcpServers": {
                "desktop": {"command": "npx", "args": ["-y", "@scope/server"], "env": {"K": "${TOKEN}"}},
                "code_stdio": {"type": "stdio", "command": "uvx", "args": ["srv"]},
                "code_http": {"type": "http", "url": "https://${HOST:-fallback.test}/mcp",
                              "headers": {"Authorization": "Bearer ${UNSET_VAR:-anon}"}},
                "bare_url": {"url": "http://h/mcp"}}}"#,
        )
        .unwrap();
        let stdio = |name: &str| matches!(&config.mcp_servers[name].transport, McpTransport::Stdio { .. });
        assert!(stdio("desktop") && stdio("code_stdio"));
        assert_eq!(
            config.mcp_servers["code_http"].transport,
            McpTransport::StreamableHttp {
                url: "https://example.test/mcp".into(),
                headers: [("Authorization".to_owned(), "Bearer anon".to_owned())].into(),
            },
            "a set variable wins over its default, an unset one takes it"
        );
        assert!(!stdio("bare_url"));
        let err = parse(r#"{"mcpServers": {"a": {"type": "sse", "url": "http://x"}}}"#).unwrap_err();
        assert!(matches!(err, ToolsConfigError::SseTransport { .. }), "{err}");
        let err = parse(r#"{"mcpServers": {"a": {"type": "stdio", "transport": "streamableHttp", "command": "x"}}}"#)
            .unwrap_err();
        assert!(err.to_string().contains("disagree"), "{err}");
        let err = parse(r#"{"mcpServers": {"a": {"args": []}}}"#).unwrap_err();
        assert!(err.to_string().contains("no `command`"), "{err}");
    }

    #[test]
    fn mcp_json_is_below_tools_json_and_never_trusted() {
        // The shape of a plugin's `.mcp.json`: `mcpServers` with `type` and `${VAR:-default}`.
        let project = ToolsConfig::parse_mcp_json(
            r#"{"mcpServers": {
                "shared": {"type": "stdio", "command": "from-mcp-json"},
                "extra": {"command": "npx", "args": ["-y", "srv", "--root", "${ROOT:-.}"], "trust_annotations": true}}}"#,
            "/ws/.mcp.json",
            &env,
        )
        .unwrap();
        assert!(
            !project.mcp_servers["extra"].trust_annotations,
            "a .mcp.json server is never trusted"
        );
        let tools = parse(r#"{"mcpServers": {"shared": {"transport": "stdio", "command": "from-tools-json", "trust_annotations": true}}}"#).unwrap();
        let merged = project.merge(tools);
        let McpTransport::Stdio { command, .. } = &merged.mcp_servers["shared"].transport else {
            panic!("stdio")
        };
        assert_eq!(command, "from-tools-json", "tools.json wins a name clash");
        assert!(merged.mcp_servers["shared"].trust_annotations);
        let McpTransport::Stdio { args, .. } = &merged.mcp_servers["extra"].transport else {
            panic!("stdio")
        };
        assert_eq!(args.last().map(String::as_str), Some("."));
        let err = ToolsConfig::parse_mcp_json(r#"{"allow": ["x"]}"#, "/ws/.mcp.json", &env).unwrap_err();
        assert!(matches!(err, ToolsConfigError::FilterInMcpJson { .. }), "{err}");
    }

    #[test]
    fn sse_points_to_streamable_http() {
        let err = parse(r#"{"mcpServers": {"old": {"transport": "sse", "url": "http://x"}}}"#).unwrap_err();
        assert!(matches!(&err, ToolsConfigError::SseTransport { server, .. } if server == "old"));
        assert!(err.to_string().contains("streamableHttp"), "{err}");
    }

    #[test]
    fn transports_need_their_fields() {
        for (text, needle) in [
            (r#"{"mcpServers": {"a": {"transport": "stdio"}}}"#, "needs `command`"),
            (
                r#"{"mcpServers": {"a": {"transport": "streamableHttp"}}}"#,
                "needs `url`",
            ),
            (
                r#"{"mcpServers": {"a": {"transport": "stdio", "command": "x", "url": "u"}}}"#,
                "belong to `streamableHttp`",
            ),
            (
                r#"{"mcpServers": {"a": {"transport": "streamableHttp", "url": "u", "args": []}}}"#,
                "belong to `stdio`",
            ),
            (
                r#"{"mcpServers": {"a": {"transport": "websocket"}}}"#,
                "unknown transport",
            ),
            (
                r#"{"mcpServers": {"a": {"transport": "stdio", "command": "x", "timeout_seconds": 0}}}"#,
                "timeout_seconds",
            ),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.to_string().contains(needle), "{text}: {err}");
        }
    }

    #[test]
    fn higher_layer_overrides_lists_and_servers_by_name() {
        let merged = ToolsConfig::layered(
            Some((
                "root/tools.json",
                r#"{"allow": ["a"], "deny": ["b"], "mcpServers": {
                    "x": {"transport": "stdio", "command": "one"},
                    "y": {"transport": "stdio", "command": "two"}}}"#,
            )),
            Some((
                "user/tools.json",
                r#"{"deny": ["c"], "mcpServers": {"y": {"transport": "stdio", "command": "three"}}}"#,
            )),
            &env,
        )
        .unwrap();
        assert_eq!(merged.allow.as_deref().unwrap(), ["a"]);
        assert_eq!(merged.deny.as_deref().unwrap(), ["c"]);
        let command = |name: &str| match &merged.mcp_servers[name].transport {
            McpTransport::Stdio { command, .. } => command.clone(),
            McpTransport::StreamableHttp { .. } => String::new(),
        };
        assert_eq!((command("x"), command("y")), ("one".into(), "three".into()));
        assert_eq!(ToolsConfig::layered(None, None, &env).unwrap(), ToolsConfig::default());
    }

    #[test]
    fn a_user_layer_can_only_narrow() {
        let root = ToolFilter::new(["a".into(), "b".into(), "c".into()], ["x".into()]);
        let user = ToolsConfig::parse_user_layer(
            r#"{ // alice
                "allow": ["b", "c", "z"], "deny": ["c"] }"#,
            "alice/tools.json",
        )
        .unwrap();
        let both = root.narrow(&user);
        assert!(both.permits("b"));
        assert!(!both.permits("a"), "allow is the intersection");
        assert!(!both.permits("c"), "deny is the union");
        assert!(!both.permits("z"), "a user cannot add a tool the root did not allow");
        assert!(!both.permits("x"));
        let open = ToolFilter::default().narrow(&user);
        assert!(open.permits("b") && !open.permits("a") && !open.permits("c"));
        let disjoint = root.narrow(&ToolFilter::new(["q".into()], Vec::new()));
        assert!(!disjoint.permits("a") && !disjoint.permits("q"));
        let err = ToolsConfig::parse_user_layer(r#"{"mcpServers": {}}"#, "alice/tools.json").unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("alice/tools.json") && text.contains("`mcpServers`"),
            "{text}"
        );
        let err = ToolsConfig::parse_user_layer("{\n \"allwo\": []}", "alice/tools.json").unwrap_err();
        assert!(
            err.to_string().contains("line 2") && err.to_string().contains("allwo"),
            "{err}"
        );
    }

    #[test]
    fn deny_wins_and_allow_without_builtins_removes_them() {
        let filter = ToolFilter::new(["read_file".into(), "mcp__t__now".into()], ["mcp__t__now".into()]);
        assert!(filter.permits("read_file"));
        assert!(!filter.permits("mcp__t__now"), "deny wins over allow");
        assert!(!filter.permits("write_file"), "a built-in not in allow is removed");
        let open = ToolFilter::new(Vec::new(), ["execute".into()]);
        assert!(
            open.permits("write_file") && !open.permits("execute"),
            "empty allow keeps everything"
        );
        let names: BTreeSet<&str> = ["read_file"].into();
        assert_eq!(filter.unknown_names(&names), ["mcp__t__now", "mcp__t__now"]);
    }
}
