//! `harness.toml`: the optional configuration file at the workspace root.
//!
//! ```toml
//! [agent]
//! name = "assistant"                 # agent id: letters, digits, - _ . @ :
//! model = "openai:gpt-4o-mini"       # provider:model (see harness-models)
//! sys_prompt = "You are helpful."
//! max_iters = 10
//! max_context_tokens = 8000          # MEMORY.md budget in the prompt
//! additional_context_files = ["docs/api.md"]
//! isolation = "user"                 # session | user | agent | global
//! ```
//!
//! Unknown keys are errors that name the key. Values set on the builder (or by CLI flags)
//! override the file.

use crate::capability::{ConfigSection, Sections};
use crate::filesystem::FilesystemKind;
use crate::state::StateKind;
use harness_fs::IsolationScope;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The file name looked up at the workspace root.
pub const CONFIG_FILE: &str = "harness.toml";

/// Why the configuration could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file exists but could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid (syntax, types, unknown keys).
    #[error("{path} is invalid: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What the parser said (names the key and line; a syntax error keeps its caret
        /// diagram on the lines after the first).
        message: String,
    },
    /// A value parses but is out of range.
    #[error("{path}: [{section}] {message}")]
    Value {
        /// The file.
        path: PathBuf,
        /// The section, e.g. `agent`.
        section: &'static str,
        /// `key must be …`.
        message: String,
    },
    /// A model spec (from the file, an environment variable or a flag) cannot be used.
    #[error("{origin}")]
    Model {
        /// Where the spec came from, e.g. `ws/harness.toml [agent] model` or `HARNESS_MODEL`.
        origin: String,
        /// Why it cannot be used.
        #[source]
        source: harness_models::ModelConfigError,
    },
    /// `tools.json` exists but could not be read.
    #[error("cannot read {path}")]
    ToolsJsonRead {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// `tools.json` is invalid (names the file and the line, the key or the variable).
    #[error(transparent)]
    ToolsJson(#[from] harness_mcp::tools_json::ToolsConfigError),
    /// The `[skills]` layers cannot be set up.
    #[error("{path} [skills]")]
    Skills {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: harness_skills::SkillsError,
    },
    /// The `[filesystem]` section cannot be opened.
    #[error("{path} [filesystem]")]
    Filesystem {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: crate::filesystem::FilesystemError,
    },
    /// The `[state]` backend cannot be opened.
    #[error("{path} [state]")]
    State {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: crate::state::StateBackendError,
    },
}

/// The workspace used when neither the builder nor the caller names one.
pub const DEFAULT_WORKSPACE: &str = ".harness/workspace";
/// The agent name used when none is set.
pub const DEFAULT_AGENT_NAME: &str = "harness";

/// The whole file.
///
/// Sections owned by a registered [`Capability`](crate::capability::Capability) are kept as
/// raw values in [`capabilities`](Self::capabilities) and parsed by their capability;
/// [`parse`](Self::parse) checks them, so any unknown key or section is an error.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct HarnessConfig {
    /// `[agent]`.
    #[serde(default)]
    pub agent: AgentConfig,
    /// `[memory]`: long-term memory (on by default).
    #[serde(default)]
    pub memory: Option<harness_memory::MemoryConfig>,
    /// `[filesystem]`: which filesystem serves the workspace (local by default).
    #[serde(default)]
    pub filesystem: Option<crate::filesystem::FilesystemConfig>,
    /// `[state]`: where agent state and the session lease live (files by default).
    #[serde(default)]
    pub state: Option<crate::state::StateConfig>,
    /// The sections owned by registered capabilities, by key, unparsed (each capability
    /// parses its own; [`parse`](Self::parse) has checked them).
    #[serde(flatten)]
    pub capabilities: BTreeMap<String, toml::Value>,
    /// `[model]`: transport settings of every model (idle timeout, retries, context window).
    #[serde(default)]
    pub model: Option<crate::model_config::ModelSection>,
    /// `[skills]`: the global skills directory and git skill repositories (skills are on,
    /// with only the workspace's and the user's `skills/`, when absent).
    #[serde(default)]
    pub skills: Option<harness_skills::SkillsSection>,
    /// The capability sections as the parse decoded them.
    #[serde(skip)]
    decoded: Decoded,
}

/// The capability sections decoded by the parse, by key, each with the raw value it was
/// decoded from: [`HarnessConfig::section`] hands out a clone while
/// [`capabilities`](HarnessConfig::capabilities) still holds that value, and decodes an
/// edited one again.
#[derive(Clone, Default)]
struct Decoded(BTreeMap<String, (toml::Value, crate::capability::DecodedSection)>);

impl std::fmt::Debug for Decoded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

/// A cache of what `capabilities` holds: it never makes two files differ.
impl PartialEq for Decoded {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// `[agent]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// Agent name.
    pub name: Option<String>,
    /// Model spec, `provider:model`.
    pub model: Option<String>,
    /// Base system prompt.
    pub sys_prompt: Option<String>,
    /// Maximum reasoning-acting steps per call.
    pub max_iters: Option<u32>,
    /// Token budget of MEMORY.md in the prompt.
    pub max_context_tokens: Option<usize>,
    /// Files injected in full, relative to the workspace.
    #[serde(default)]
    pub additional_context_files: Vec<String>,
    /// How runtime data is partitioned.
    pub isolation: Option<IsolationScope>,
}

impl HarnessConfig {
    /// Parses a configuration text whose capability sections are those of `sections` (the
    /// built-in ones plus, e.g., `harness-serve`'s `[serve]` or a caller's own); `path` is
    /// only used in messages.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the offending key, or a section no registration owns.
    pub fn parse_with(text: &str, path: &Path, sections: &Sections) -> Result<Self, ConfigError> {
        Self::parse_checked(text, path, Some(sections))
    }

    /// Loads harness.toml for a reader that needs only the agent's own sections (`[agent]`,
    /// `[filesystem]`, `[state]`, `[model]`): capability sections are kept unchecked, so a
    /// section of a crate the reader does not link (such as `[serve]`) is no error.
    pub(crate) fn load_agent_sections(workspace: &Path) -> Result<Self, ConfigError> {
        let path = workspace.join(CONFIG_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => Self::parse_checked(&text, &path, None),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(source) => Err(ConfigError::Read { path, source }),
        }
    }

    fn parse_checked(text: &str, path: &Path, sections: Option<&Sections>) -> Result<Self, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            path: path.to_owned(),
            message,
        };
        let mut config: Self = toml::from_str(text).map_err(|err| invalid(err.to_string().trim().to_owned()))?;
        if let Some(sections) = sections {
            if let Some(clash) = sections.clash() {
                return Err(invalid(clash.to_string()));
            }
            for (key, value) in &config.capabilities {
                let check = sections.check(key).ok_or_else(|| {
                    invalid(format!(
                        "unknown section `{key}` (known: agent, filesystem, state, model, skills, {})",
                        sections.keys().join(", ")
                    ))
                })?;
                let decoded = check(value.clone()).map_err(|message| invalid(format!("[{key}]: {message}")))?;
                config.decoded.0.insert(key.clone(), (value.clone(), decoded));
            }
        }
        config.check(path)?;
        Ok(config)
    }

    /// The raw section `key` owned by a capability, if present.
    pub fn capability_section(&self, key: &str) -> Option<&toml::Value> {
        self.capabilities.get(key)
    }

    /// `T`'s section, parsed (`None` when absent): a clone of the value the parse decoded,
    /// while [`capabilities`](Self::capabilities) holds what it was decoded from.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] when it does not parse as `T` (a file checked by
    /// [`parse_with`](Self::parse_with) with `T`'s registration always does).
    pub fn section<T: ConfigSection>(&self) -> Result<Option<T>, ConfigError> {
        self.decoded_section::<T>().map_err(|err| ConfigError::Invalid {
            path: PathBuf::from(CONFIG_FILE),
            message: format!("[{}]: {}", T::KEY, err.message()),
        })
    }

    /// [`section`](Self::section) with the decoder's error.
    pub(crate) fn decoded_section<T: ConfigSection>(&self) -> Result<Option<T>, toml::de::Error> {
        let raw = self.capabilities.get(T::KEY);
        if let (Some(raw), Some((from, decoded))) = (raw, self.decoded.0.get(T::KEY))
            && raw == from
            && let Some(section) = decoded.downcast_ref::<T>()
        {
            return Ok(Some(section.clone()));
        }
        raw.cloned().map(toml::Value::try_into::<T>).transpose()
    }

    /// Sets `field` of `T`'s raw section (when it is a table) to `value`, and edits the
    /// decoded section with `edit` to match, so that the section is not decoded again.
    pub(crate) fn set_section_field<T: ConfigSection>(
        &mut self,
        field: &str,
        value: toml::Value,
        edit: impl FnOnce(&mut T),
    ) {
        let decoded = match (self.capabilities.get(T::KEY), self.decoded.0.get(T::KEY)) {
            (Some(raw), Some((from, decoded))) if raw == from => decoded.downcast_ref::<T>().cloned(),
            _ => None,
        };
        let Some(toml::Value::Table(table)) = self.capabilities.get_mut(T::KEY) else {
            return;
        };
        table.insert(field.to_owned(), value);
        let raw = toml::Value::Table(table.clone());
        match decoded {
            Some(mut section) => {
                edit(&mut section);
                self.decoded.0.insert(T::KEY.to_owned(), (raw, Arc::new(section)));
            }
            None => drop(self.decoded.0.remove(T::KEY)),
        }
    }

    /// Values that parse but cannot be used (`max_iters = 0`, a zero idle timeout).
    fn check(&self, path: &Path) -> Result<(), ConfigError> {
        let value = |section, message: String| ConfigError::Value {
            path: path.to_owned(),
            section,
            message,
        };
        if self.agent.max_iters == Some(0) {
            return Err(value("agent", "max_iters must be at least 1".into()));
        }
        if let Some(model) = &self.model {
            model.check().map_err(|message| value("model", message))?;
        }
        if let Some(skills) = &self.skills {
            skills.check().map_err(|message| value("skills", message))?;
        }
        let state = self.state.clone().unwrap_or_default();
        state.check().map_err(|message| value("state", message))?;
        if let Some(fs) = self
            .filesystem
            .as_ref()
            .filter(|fs| fs.kind == FilesystemKind::Composite)
        {
            fs.kv_backend().map_err(|err| value("filesystem", err.to_string()))?;
            match state.kind {
                StateKind::File => {
                    return Err(value(
                        "state",
                        "kind = \"file\" cannot serve [filesystem] kind = \"composite\": the state and the \
                         session lease would stay on one replica's disk; set [state] kind = \"redis\" or \"postgres\""
                            .into(),
                    ));
                }
                StateKind::Redis if state.url.as_deref() != Some(fs.kv_url()) => {
                    return Err(value(
                        "state",
                        "url must be the Redis of [filesystem] url (or redis_url), so a turn's shared writes are \
                         fenced by its lease"
                            .into(),
                    ));
                }
                StateKind::Postgres => {
                    let tables = state
                        .key_prefix
                        .clone()
                        .unwrap_or_else(|| crate::filesystem::harness_store_default_table_prefix().to_owned());
                    if state.url.as_deref() != Some(fs.kv_url()) || fs.table_prefix != tables {
                        return Err(value(
                            "filesystem",
                            format!(
                                "kind = \"composite\" with [state] kind = \"postgres\" keeps the shared files in the \
                                 state's PostgreSQL, so its lease fences them: set url = [state] url and \
                                 table_prefix = {tables:?} ([state] key_prefix)"
                            ),
                        ));
                    }
                }
                StateKind::Redis => {}
            }
        }
        Ok(())
    }

    /// [`load`](Self::load) with the capability sections of `sections`
    /// ([`parse_with`](Self::parse_with)).
    ///
    /// # Errors
    /// [`ConfigError`] for an unreadable or invalid file.
    pub fn load_with(workspace: &Path, sections: &Sections) -> Result<Self, ConfigError> {
        let path = workspace.join(CONFIG_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => Self::parse_with(&text, &path, sections),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(source) => Err(ConfigError::Read { path, source }),
        }
    }
}

/// The commented `harness.toml` written by `harness init`.
pub const CONFIG_TEMPLATE: &str = r#"# Harness configuration. Every key is optional; CLI flags override these values.

[agent]
# name = "assistant"              # agent id: letters, digits, - _ . @ :
# model = "openai:gpt-4o-mini"    # or anthropic:..., deepseek:..., dashscope:..., ollama:..., scripted:PATH
# sys_prompt = "You are a helpful assistant."
# max_iters = 10                  # reasoning-acting steps per call
# max_context_tokens = 8000       # MEMORY.md budget in the system prompt
# additional_context_files = []   # extra files injected in full, relative to the workspace
# isolation = "user"              # session | user | agent | global

# Conversation compaction is off until this section exists (uncomment to enable).
# [compaction]
# trigger_messages = 50           # compact at this many messages (0 = off)
# trigger_tokens = 80000          # ... or at this many prompt tokens (0 = off)
# keep_messages = 20              # recent messages kept verbatim
# model = "openai:gpt-4o-mini"    # optional cheaper summary model

# Long-term memory: facts extracted after calls into memory/YYYY-MM-DD.md, consolidated into MEMORY.md.
# [memory]
# enabled = true
# mode = "after_call"             # off | after_call | before_compaction
# extraction_throttle = "60s"
# model = "openai:gpt-4o-mini"    # optional cheaper model for extraction and consolidation

# How models are reached (every key optional).
# [model]
# context_window = 128000         # tokens; overrides the table of known models
# vision = true                   # the model takes images (default: guessed from its name)
# idle_timeout = "120s"           # no byte for this long ends an attempt
# max_retries = 3                 # retries after the first attempt
# max_retry_time = "300s"         # no retry starts after this much time on one call

# Skill layers below the workspace's skills/ and the user's <user>/skills/ (on by default).
# [skills]
# enabled = true
# global_dir = "/opt/harness/skills"      # relative paths are from the workspace
# repositories = [{ url = "https://example.com/skills.git" }, { path = "../team-skills" }]

# Which filesystem serves the workspace. The host shell (`execute`) is only exposed with local_shell.
# [filesystem]
# kind = "local"                  # local | local_shell | composite (shared prefixes in a KV store)
# url = "redis://127.0.0.1:6379"  # composite's KV store: redis://… or postgres://… (by scheme)
# table_prefix = "harness_"       # postgres only: the same as [state] key_prefix

# A sandbox for `execute` and the file tools (not with local_shell), a work tree per scope under .harness/work/.
# Fails closed: a host that cannot provide it stops the start (`harness sandbox check` shows what it proves).
# [sandbox]
# kind = "namespace"
# scope = "user"                  # session | user | agent | global (default: the agent's isolation scope)
# network = "offline"             # offline | proxy | full
# allow_hosts = ["pypi.org"]      # network = "proxy": the only hosts reachable (host, *.domain, IP, each [:port])
# uid_range = [200000, 200999]    # required as root: host uids nobody else uses
# read_only = []                  # host toolchain dirs outside /usr, offered read-only (never /root, /home)
# projection_roots = ["AGENTS.md", "skills"]  # workspace files copied into every new sandbox instance
# Snapshots: a work tree saved when a call ends and restored inside a new sandbox, in a later process or on
# another replica. Heads live in the shared [state] (redis or postgres); objects in `dir`, shared by the replicas.
# [sandbox.snapshots]
# dir = "/srv/harness-snapshots"  # default .harness/snapshots
# url = "s3://bucket/prefix"      # instead of dir: S3-compatible (endpoint = "http://…", region); AWS_* env credentials
# on_release = true               # persist when a call ends
# on_evict = true                 # persist an idle sandbox before it stops
# on_idle = "10m"                 # persist a sandbox unsaved and unused this long
# keep = 3                        # heads kept per scope, with every snapshot they reach

# Where agent state and the session lease live. redis/postgres let several replicas share sessions
# (required with [filesystem] kind = "composite", on the same server as [filesystem] url, so the
# lease fences every shared write).
# [state]
# kind = "file"                   # file | redis | postgres
# url = "redis://127.0.0.1:6379"  # or postgres://user@host:5432/db
# key_prefix = "harness:state:"   # Redis key prefix; for postgres the table prefix (default harness_)
# lease_ttl = "30s"               # a crashed or paused replica loses the session after this long

# Permissions: an allow / ask / deny decision before every tool call. Without this section the
# defaults apply: read-only tools and tools that stay in your area (file tools, memory, subagents)
# run; the shell (`execute`) and MCP tools without hints ask a person: `harness run` exits 3 and
# `harness approve` continues the turn. Order: deny, ask, sensitive paths (.git/, .env, ...), allow, mode.
# [permissions]
# mode = "default"                # default | accept_edits | explore (read-only) | bypass | dont_ask (unattended: ask = deny)
# allow = ["execute(git status*)", "execute(cargo test*)"]
# ask = ["write_file(src/**)"]
# deny = ["execute(rm *)"]
# protected = ["harness.toml", "tools.json", "agents/**"]  # default: every file the harness reads or keeps
#                                 # (a write to one asks in every mode; replaces the default set when written)

# Plan mode: a read-only "think first" phase (plan_enter, plan_write, plan_exit; plan_exit asks a person).
# [plan]
# enabled = true
# allow_shell = false             # let `execute` run while plan mode is active
# task_list = false               # todo_write and the task list before each step (always on with plan mode)

# Subagents: agent files in subagents/ (Claude Code's format works as is), spawned by agent_spawn (on by default).
# [subagents]
# enabled = true
# max_depth = 1                   # 1: children cannot delegate further
# task_timeout = 600              # seconds a task may run in all
# default_wait = 30               # seconds agent_spawn / agent_send wait when the model names no timeout
# child_token_budget = 200000     # tokens one child may use per spawn (default: no budget)
# model_aliases = { sonnet = "anthropic:claude-sonnet-4-5" }   # `model:` names of agent files
# tool_aliases = { WebFetch = "mcp__fetch__fetch" }             # `tools:` names of agent files

# `harness serve` (the HTTP API and the chat page).
# [serve]
# bind = "127.0.0.1:8080"         # --bind overrides it
# keys = [{ user = "alice", sha256 = "..." }]   # the hex SHA-256 of the key (printf %s KEY | sha256sum); none: no auth, loopback only
# cors_origins = []               # pages on other origins that may call the API
# max_turns = 256                 # running or queued turns on the server; more get 429

# OpenTelemetry export (the OTEL_EXPORTER_OTLP_* variables win over these keys).
# [telemetry]
# endpoint = "http://127.0.0.1:4318"   # OTLP/HTTP; /v1/traces is appended
# service_name = "harness"
# capture_content = false         # message content in spans: opt in

# Large tool results are moved to large_tool_results/ and replaced by a preview (on by default).
# [tool_result_eviction]
# enabled = true
# max_chars = 80000

# What `harness maintenance` (and `harness serve`, every interval, on one replica) may delete,
# by time idle as the session index records it. A kind left out is never deleted.
# [retention]
# sessions = "90d"       # idle sessions: transcript, state, index entry, offloads, task records
# offloads = "30d"       # compaction offloads of sessions idle this long
# tool_results = "30d"   # evicted large tool results whose sessions are all idle this long
# daily_logs = "180d"    # memory/YYYY-MM-DD.md older than this, once consolidated into MEMORY.md
# interval = "1h"
"#;
