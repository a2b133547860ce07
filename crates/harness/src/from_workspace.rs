//! Configuration in the library: the builder a workspace's `harness.toml` describes.
//!
//! [`HarnessAgentBuilder::from_workspace`] (also [`HarnessAgent::from_workspace`]) resolves
//! every section — `[agent]`, `[filesystem]`, `[state]`, `[memory]`, `[compaction]`,
//! `[tool_result_eviction]`, `[model]` — and the models named there, with the precedence the
//! CLI uses: explicit overrides (flags) first, then `HARNESS_MODEL` for the main model, then
//! the file. The result is a builder, so a caller can still override anything.
//! [`WorkspaceLoader`] takes the overrides that must be known while resolving (the agent
//! name, which the filesystem needs; the main model spec; a retry observer).
//!
//! The loader also reads `tools.json` at the workspace root, with Claude Code's `.mcp.json`
//! below it (`${VAR}` through the same
//! lookup) and the `[skills]` layers, starts the MCP servers and puts the resulting
//! [`Extensions`] on the builder (the agent's shutdown stops the servers); see
//! [`WorkspaceLoader::extensions`] to skip that.
//!
//! `[model] context_window` overrides the main model's window (the table of known models
//! otherwise; other models named in the file keep their own). When `[compaction]` is on
//! and sets no `trigger_tokens`, the token trigger follows the main model's window
//! ([`WINDOW_TRIGGER_PERCENT`] of it); a model with no known window keeps the default
//! trigger, and nothing is refused for its size.

use crate::agent::{HarnessAgent, HarnessAgentBuilder};
use crate::capability::{Registration, Sections};
use crate::config::DEFAULT_AGENT_NAME;
use crate::config::{CONFIG_FILE, ConfigError, HarnessConfig};
use crate::extensions::{Extensions, ExtensionsConfig};
use harness_core::ChatModel;
use harness_mcp::tools_json::{MCP_JSON, TOOLS_JSON, ToolsConfig};
use harness_mcp::{HostEnv, INHERITED_VARS};
use harness_models::{
    FallbackChain, FallbackEntry, FallbackObserver, ModelSpec, RetryObserver, TransportOptions, WithContextWindow,
    WithVision,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The environment variable naming the main model when no override is given.
pub const MODEL_VARIABLE: &str = "HARNESS_MODEL";

/// Resolves a workspace's configuration into a builder; see the module docs.
#[must_use = "a loader does nothing until `.load()`"]
pub struct WorkspaceLoader<'a> {
    dir: PathBuf,
    env: &'a dyn Fn(&str) -> Option<String>,
    model: Option<String>,
    name: Option<String>,
    observer: Option<RetryObserver>,
    fallback_observer: Option<FallbackObserver>,
    host_env: Option<HostEnv>,
    extensions: bool,
    stores: bool,
    sections: Sections,
    registrations: Vec<Registration>,
    parsed: Option<HarnessConfig>,
}

impl std::fmt::Debug for WorkspaceLoader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkspaceLoader")
            .field("dir", &self.dir)
            .field("model", &self.model)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Where the main model came from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModelSource {
    /// [`WorkspaceLoader::model`] (the CLI's `--model`).
    Override,
    /// The `HARNESS_MODEL` variable.
    Variable,
    /// `[agent] model` in harness.toml.
    File,
}

/// What [`WorkspaceLoader::load`] resolved.
#[non_exhaustive]
pub struct LoadedWorkspace {
    /// The builder with everything configured; it has a model when a spec was found.
    pub builder: HarnessAgentBuilder,
    /// The parsed file (defaults when there is none).
    pub config: HarnessConfig,
    /// The agent name in force.
    pub name: String,
    /// The main model's spec and where it came from, when one was configured.
    pub model: Option<(String, ModelSource)>,
    /// What `tools.json` and the skill layers add (already on the builder; the agent's
    /// shutdown stops the MCP servers). `None` when [`WorkspaceLoader::extensions`] was off.
    pub extensions: Option<Arc<Extensions>>,
}

impl std::fmt::Debug for LoadedWorkspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedWorkspace")
            .field("config", &self.config)
            .field("name", &self.name)
            .field("model", &self.model)
            .field("extensions", &self.extensions)
            .finish_non_exhaustive()
    }
}

impl<'a> WorkspaceLoader<'a> {
    /// A loader for the workspace at `dir`; `env` looks up variables (`HARNESS_MODEL`,
    /// provider keys and base URLs). The library never reads the process environment itself.
    pub fn new(dir: impl Into<PathBuf>, env: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Self {
            dir: dir.into(),
            env,
            model: None,
            name: None,
            observer: None,
            fallback_observer: None,
            host_env: None,
            extensions: true,
            stores: true,
            sections: Sections::builtin(),
            registrations: Vec::new(),
            parsed: None,
        }
    }

    /// The workspace's harness.toml as the caller already parsed it, with the sections this
    /// loader accepts (the built-in ones and those [registered](Self::register), e.g.
    /// [`HarnessConfig::load_with`]): [`load`](Self::load) uses it instead of reading and
    /// parsing the file again.
    pub fn parsed(mut self, config: HarnessConfig) -> Self {
        self.parsed = Some(config);
        self
    }

    /// Registers a capability (or a section-only registration such as `harness-serve`'s
    /// `[serve]`): its section is accepted in harness.toml, and the capability is
    /// [registered](HarnessAgentBuilder::register) on the builder.
    pub fn register(mut self, registration: Registration) -> Self {
        self.sections = self.sections.with(registration);
        self.registrations.push(registration);
        self
    }

    /// The host environment stdio MCP servers inherit from (scrubbed, see
    /// [`HostEnv::scrubbed`]). Without it, the variables of [`INHERITED_VARS`] (and `LC_ALL`,
    /// `LC_CTYPE`) are looked up through `env`.
    pub fn host_env(mut self, env: HostEnv) -> Self {
        self.host_env = Some(env);
        self
    }

    /// Whether to read `tools.json` and the skill layers and start the MCP servers (default
    /// true). Off for callers that only need the configuration and the models.
    pub fn extensions(mut self, load: bool) -> Self {
        self.extensions = load;
        self
    }

    /// Whether to open `[state]`'s backend and a composite `[filesystem]` (default true).
    /// Off for callers that must not write to them: connecting migrates a PostgreSQL
    /// schema (`harness doctor` reads the schema version without migrating).
    pub fn stores(mut self, open: bool) -> Self {
        self.stores = open;
        self
    }

    /// The main model spec, over `HARNESS_MODEL` and `[agent] model`.
    pub fn model(mut self, spec: Option<String>) -> Self {
        self.model = spec;
        self
    }

    /// The agent name, over `[agent] name`.
    pub fn name(mut self, name: Option<String>) -> Self {
        self.name = name;
        self
    }

    /// Told of each model retry as it happens (every model the workspace names).
    pub fn on_retry(mut self, observer: Option<RetryObserver>) -> Self {
        self.observer = observer;
        self
    }

    /// Told of each switch of the main model to a `[model] fallback` model.
    pub fn on_fallback(mut self, observer: Option<FallbackObserver>) -> Self {
        self.fallback_observer = observer;
        self
    }

    fn lookup(&self, key: &str) -> Option<String> {
        (self.env)(key).filter(|value| !value.trim().is_empty())
    }

    /// Reads harness.toml and builds the models and the filesystem it names.
    ///
    /// # Errors
    /// [`ConfigError`]: an unreadable or invalid file, a value out of range, a model spec
    /// that cannot be used (naming where it came from), a filesystem that cannot be opened.
    pub async fn load(mut self) -> Result<LoadedWorkspace, ConfigError> {
        let file = self.dir.join(CONFIG_FILE);
        let mut config = match self.parsed.take() {
            Some(config) => config,
            None => HarnessConfig::load_with(&self.dir, &self.sections)?,
        };
        let window = config.model.as_ref().and_then(|model| model.context_window);
        let transport = config
            .model
            .clone()
            .unwrap_or_default()
            .transport(self.observer.clone());
        let build = |spec: &str, origin: String| build_model(spec, origin, self.env, &transport);
        let name = self
            .name
            .clone()
            .or_else(|| config.agent.name.clone())
            .unwrap_or_else(|| DEFAULT_AGENT_NAME.to_owned());
        let mut builder = HarnessAgentBuilder::default().workspace(&self.dir).name(name.as_str());
        for registration in &self.registrations {
            builder = builder.register(*registration);
        }
        // Subagents' `model` keys are built at spawn, after `env` is gone: snapshot the
        // variables a model spec can read.
        let snapshot: std::collections::HashMap<&'static str, String> = harness_models::spec_variables()
            .into_iter()
            .filter_map(|var| (self.env)(var).map(|value| (var, value)))
            .collect();
        let resolver_transport = transport.clone();
        builder = builder.model_resolver(Arc::new(move |spec: &str, origin| {
            crate::subagents::parse_spec_from(spec, origin)
                .and_then(|parsed| parsed.build_with_options(&|var| snapshot.get(var).cloned(), &resolver_transport))
                .map_err(|err| err.to_string())
        }));
        // `${VAR}` in remote subagents' headers: snapshot the variables their files name.
        // The files are read once here; the build parses these texts.
        let files = crate::subagents::declaration::DeclarationFiles::read(&self.dir.join("subagents"));
        let variables: std::collections::HashMap<String, String> = files
            .referenced_variables()
            .into_iter()
            .filter_map(|var| (self.env)(&var).map(|value| (var, value)))
            .collect();
        builder = builder
            .subagent_variables(Arc::new(move |var: &str| variables.get(var).cloned()))
            .subagent_files(self.dir.clone(), files);
        let mut shell = false;
        let mut servers = None;
        if let Some(fs_config) = config.filesystem.as_ref().filter(|_| self.stores) {
            let fs = crate::filesystem::open(fs_config, &self.dir, &name)
                .await
                .map_err(|source| ConfigError::Filesystem {
                    path: file.clone(),
                    source,
                })?;
            shell = fs.shell().is_some();
            builder = builder.filesystem(fs);
        }
        // Fails closed before anything runs, naming the cause and the fix.
        if let Some(section) = config.section::<harness_sandbox::SandboxSection>()? {
            let refuse = |message: String| ConfigError::Value {
                path: file.clone(),
                section: "sandbox",
                message,
            };
            if shell {
                return Err(refuse(crate::sandbox::LOCAL_SHELL_CONFLICT.to_owned()));
            }
            let provider = section.probed_provider(&self.dir).await.map_err(refuse)?;
            servers = Some(self.servers_sandbox(&section, Arc::clone(&provider), &name));
            builder = builder.setting(crate::sandbox::SandboxProviderSetting(provider));
            if section.snapshots.is_some() && self.stores {
                let heads = match &config.state {
                    Some(state) => {
                        crate::state::open_kv(state, "sandbox")
                            .await
                            .map_err(|source| ConfigError::State {
                                path: file.clone(),
                                source,
                            })?
                    }
                    None => None,
                };
                let heads = heads.ok_or_else(|| refuse(crate::sandbox::SNAPSHOTS_NEED_STATE.to_owned()))?;
                builder = builder.setting(crate::sandbox::SnapshotHeads(heads));
            }
        }
        if let Some(state) = config.state.as_ref().filter(|_| self.stores) {
            let backend = crate::state::open(state).await.map_err(|source| ConfigError::State {
                path: file.clone(),
                source,
            })?;
            if let Some(backend) = backend {
                builder = builder.state_store(backend.store).session_lease(backend.lease);
                // Shared files are fenced only when they live where the lease's counter is.
                let fenced = crate::filesystem::fences_shared_files(config.filesystem.as_ref(), state);
                if let Some(fence) = backend.fence.filter(|_| fenced) {
                    builder = builder.write_fence(fence);
                }
            }
        }
        if let Some(spec) = config.memory.as_ref().and_then(|m| m.model.as_deref()) {
            builder = builder.memory_model(build(spec, format!("{} [memory] model", file.display()))?);
        }
        let compaction = config.section::<crate::compaction::CompactionConfig>()?;
        if let Some(spec) = compaction.as_ref().and_then(|c| c.model.as_deref()) {
            builder = builder.compaction_model(build(spec, format!("{} [compaction] model", file.display()))?);
        }
        let main = match (&self.model, self.lookup(MODEL_VARIABLE), &config.agent.model) {
            (Some(spec), _, _) => Some((spec.clone(), ModelSource::Override, "--model".to_owned())),
            (None, Some(spec), _) => Some((spec, ModelSource::Variable, MODEL_VARIABLE.to_owned())),
            (None, None, Some(spec)) => Some((
                spec.clone(),
                ModelSource::File,
                format!("{} [agent] model", file.display()),
            )),
            (None, None, None) => None,
        };
        let section = config.model.clone().unwrap_or_default();
        let model = match main {
            Some((spec, source, origin)) => {
                let fallback = &section.fallback;
                let main_transport = if fallback.is_empty() {
                    transport.clone()
                } else {
                    section.transport_with_fallback(self.observer.clone())
                };
                let mut model = build_model(&spec, origin, self.env, &main_transport)?;
                if let Some(tokens) = window {
                    model = Arc::new(WithContextWindow::new(model, tokens));
                }
                if !fallback.is_empty() {
                    let entries = fallback
                        .iter()
                        .enumerate()
                        .map(|(at, spec)| {
                            // The last model has nothing to move on to: it keeps every retry.
                            let options = if at + 1 < fallback.len() {
                                &main_transport
                            } else {
                                &transport
                            };
                            let origin = format!("{} [model] fallback[{at}]", file.display());
                            fallback_entry(spec, origin, self.env, options)
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    let main = fallback_entry_of(&spec, model);
                    model = Arc::new(FallbackChain::new(main, entries).with_observer(self.fallback_observer.clone()));
                }
                if let Some(vision) = section.vision {
                    // The operator's word on the agent's model, fallbacks included.
                    model = Arc::new(WithVision::new(model, vision));
                }
                // Whether the file sets `trigger_tokens` itself (the decoded section cannot
                // tell an explicit value from the default; the raw one can).
                let explicit = config
                    .capability_section("compaction")
                    .and_then(|section| section.get("trigger_tokens"))
                    .is_some();
                if !explicit && let Some(tokens) = model.context_window() {
                    let tokens = window_trigger(tokens);
                    let raw = toml::Value::Integer(i64::try_from(tokens).unwrap_or(i64::MAX));
                    config.set_section_field::<crate::compaction::CompactionConfig>("trigger_tokens", raw, |section| {
                        section.trigger_tokens = tokens;
                    });
                }
                builder = builder.shared_model(model);
                Some((spec, source))
            }
            None => None,
        };
        let extensions = if self.extensions {
            let extensions = Arc::new(self.start_extensions_with(&config, shell, servers).await?);
            builder = builder.extensions(Arc::clone(&extensions));
            Some(extensions)
        } else {
            None
        };
        Ok(LoadedWorkspace {
            builder: builder.config(config.clone()),
            config,
            name,
            model,
            extensions,
        })
    }

    /// Reads `<dir>/tools.json` (`${VAR}` through `env`), sets up `config`'s `[skills]`
    /// layers and connects the MCP servers (a broken server is a warning, see
    /// [`Extensions::failures`]); `shell` says whether the agent has a shell on the workspace
    /// (for `<files-root>`). [`load`](Self::load) calls this; it is public for tools that
    /// list the extensions without building models. With `[sandbox]`, the stdio MCP servers
    /// start in the agent's servers' sandbox (the host proves it can provide it first).
    ///
    /// # Errors
    /// [`ConfigError::ToolsJsonRead`], [`ConfigError::ToolsJson`] (naming the file and the
    /// line, key or variable), [`ConfigError::Skills`]; [`ConfigError::Value`] naming
    /// `[sandbox]` when the host cannot provide the sandbox.
    pub async fn start_extensions(&self, config: &HarnessConfig, shell: bool) -> Result<Extensions, ConfigError> {
        let mut servers = None;
        if let Some(section) = config.section::<harness_sandbox::SandboxSection>()? {
            let provider = section
                .probed_provider(&self.dir)
                .await
                .map_err(|message| ConfigError::Value {
                    path: self.dir.join(CONFIG_FILE),
                    section: "sandbox",
                    message,
                })?;
            let name = (self.name.clone().or_else(|| config.agent.name.clone()))
                .unwrap_or_else(|| DEFAULT_AGENT_NAME.to_owned());
            servers = Some(self.servers_sandbox(&section, provider, &name));
        }
        self.start_extensions_with(config, shell, servers).await
    }

    /// The spawner of the MCP stdio servers of agent `name` under `section`.
    fn servers_sandbox(
        &self,
        section: &harness_sandbox::SandboxSection,
        provider: Arc<dyn harness_sandbox::SandboxProvider>,
        name: &str,
    ) -> Arc<dyn harness_mcp::StdioSpawner> {
        let sandbox = harness_sandbox::ServersSandbox::new(section, provider, &self.dir, name);
        Arc::new(crate::sandbox::SandboxedServers(Arc::new(sandbox)))
    }

    async fn start_extensions_with(
        &self,
        config: &HarnessConfig,
        shell: bool,
        servers: Option<Arc<dyn harness_mcp::StdioSpawner>>,
    ) -> Result<Extensions, ConfigError> {
        let path = self.dir.join(TOOLS_JSON);
        let text = match tokio::fs::read_to_string(&path).await {
            Ok(text) => Some(text),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => return Err(ConfigError::ToolsJsonRead { path, source }),
        };
        let origin = path.display().to_string();
        let mut tools = ToolsConfig::layered(text.as_deref().map(|text| (origin.as_str(), text)), None, self.env)?;
        // Claude Code's `.mcp.json` below tools.json (which wins a name clash).
        let path = self.dir.join(MCP_JSON);
        match tokio::fs::read_to_string(&path).await {
            Ok(text) => tools = ToolsConfig::parse_mcp_json(&text, &path.display().to_string(), self.env)?.merge(tools),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(ConfigError::ToolsJsonRead { path, source }),
        }
        let skills = config.skills.clone().unwrap_or_default().resolve(&self.dir);
        let host = self.host_env.clone().unwrap_or_else(|| {
            let names = INHERITED_VARS.iter().copied().chain(["LC_ALL", "LC_CTYPE"]);
            HostEnv::from_vars(names.filter_map(|name| (self.env)(name).map(|value| (name.to_owned(), value))))
        });
        let extensions = ExtensionsConfig {
            tools,
            skills,
            ..ExtensionsConfig::default()
        };
        Extensions::start_with(extensions, &host, &self.dir, shell, servers)
            .await
            .map_err(|source| ConfigError::Skills {
                path: self.dir.join(CONFIG_FILE),
                source,
            })
    }
}

/// The percentage of the main model's context window at which compaction starts when
/// `[compaction]` sets no `trigger_tokens`.
pub const WINDOW_TRIGGER_PERCENT: u64 = 80;

/// [`WINDOW_TRIGGER_PERCENT`] of `window` tokens (at least 1).
fn window_trigger(window: u64) -> u64 {
    (window / 100 * WINDOW_TRIGGER_PERCENT + window % 100 * WINDOW_TRIGGER_PERCENT / 100).max(1)
}

/// One `[model] fallback` entry: built like the main model (an operator's spec: its own
/// preset's key and base URL), labelled with its spec.
fn fallback_entry(
    spec: &str,
    origin: String,
    env: &dyn Fn(&str) -> Option<String>,
    transport: &TransportOptions,
) -> Result<FallbackEntry, ConfigError> {
    let model = build_model(spec, origin, env, transport)?;
    Ok(fallback_entry_of(spec, model))
}

/// `model`, built from `spec` (which parsed), as a chain entry.
fn fallback_entry_of(spec: &str, model: Arc<dyn ChatModel>) -> FallbackEntry {
    match ModelSpec::parse(spec) {
        Ok(parsed) => FallbackEntry::new(parsed.to_string(), parsed.provider(), model),
        Err(_) => FallbackEntry::new(spec, spec, model),
    }
}

/// Parses and builds one model spec; errors name `origin`.
fn build_model(
    spec: &str,
    origin: String,
    env: &dyn Fn(&str) -> Option<String>,
    transport: &TransportOptions,
) -> Result<Arc<dyn ChatModel>, ConfigError> {
    ModelSpec::parse(spec)
        .and_then(|parsed| parsed.build_with_options(env, transport))
        .map_err(|source| ConfigError::Model { origin, source })
}

impl HarnessAgentBuilder {
    /// The builder `dir/harness.toml` describes (see the [module docs](crate::from_workspace)):
    /// every section and the models it names, `HARNESS_MODEL` (through `env`) over
    /// `[agent] model`. Methods called on the result override the file.
    ///
    /// # Errors
    /// As [`WorkspaceLoader::load`].
    pub async fn from_workspace(
        dir: impl AsRef<Path>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<HarnessAgentBuilder, ConfigError> {
        Ok(WorkspaceLoader::new(dir.as_ref(), env).load().await?.builder)
    }
}

impl HarnessAgent {
    /// Same as [`HarnessAgentBuilder::from_workspace`].
    ///
    /// # Errors
    /// As [`WorkspaceLoader::load`].
    pub async fn from_workspace(
        dir: impl AsRef<Path>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<HarnessAgentBuilder, ConfigError> {
        HarnessAgentBuilder::from_workspace(dir, env).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn trigger(toml: &str) -> Option<u64> {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.path().join(CONFIG_FILE), toml).unwrap_or_else(|e| panic!("{e}"));
        let env = |key: &str| (key == "OPENAI_API_KEY").then(|| "sk-test".to_owned());
        let loaded = WorkspaceLoader::new(dir.path(), &env)
            .load()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let section = loaded.config.section::<crate::compaction::CompactionConfig>();
        section.unwrap_or_else(|e| panic!("{e}")).map(|c| c.trigger_tokens)
    }

    #[tokio::test]
    async fn the_token_trigger_follows_the_main_models_window_unless_set() {
        // gpt-4o's window is in the table: 80% of 128,000.
        let known = "[agent]\nmodel = \"openai:gpt-4o\"\n[compaction]\n";
        assert_eq!(trigger(known).await, Some(102_400));
        // `[model] context_window` overrides the table and reaches the model.
        let overridden = "[agent]\nmodel = \"openai:gpt-4o\"\n[model]\ncontext_window = 10000\n[compaction]\n";
        assert_eq!(trigger(overridden).await, Some(8_000));
        // An explicit trigger wins over the window.
        let explicit = "[agent]\nmodel = \"openai:gpt-4o\"\n[compaction]\ntrigger_tokens = 5000\n";
        assert_eq!(trigger(explicit).await, Some(5_000));
        // An unknown model has no window: the default trigger stays.
        let unknown = "[agent]\nmodel = \"openai:my-finetune\"\n[compaction]\n";
        assert_eq!(
            trigger(unknown).await,
            Some(crate::compaction::CompactionConfig::default().trigger_tokens)
        );
        // ... unless the file gives its window.
        let unknown_sized = "[agent]\nmodel = \"openai:my-finetune\"\n[model]\ncontext_window = 32000\n[compaction]\n";
        assert_eq!(trigger(unknown_sized).await, Some(25_600));
        // A fallback chain: compaction follows the smallest window of its models.
        let chained = "[agent]\nmodel = \"openai:gpt-4o\"\n[model]\nfallback = [\"openai:gpt-4\"]\n[compaction]\n";
        assert_eq!(trigger(chained).await, Some(6_553));
        // No [compaction]: nothing to follow.
        assert_eq!(trigger("[agent]\nmodel = \"openai:gpt-4o\"\n").await, None);
    }

    #[test]
    fn the_window_trigger_is_eighty_percent_without_overflow() {
        assert_eq!(window_trigger(128_000), 102_400);
        assert_eq!(window_trigger(1), 1);
        assert_eq!(window_trigger(u64::MAX), u64::MAX / 100 * 80 + 12);
    }

    #[tokio::test]
    async fn tools_json_and_the_skills_section_reach_the_agent() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let global = dir.path().join("global-skills/pdf");
        std::fs::create_dir_all(&global).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(
            global.join("SKILL.md"),
            "---\nname: pdf\ndescription: PDFs\n---\nHow.\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(
            dir.path().join(CONFIG_FILE),
            "[agent]\nmodel = \"openai:gpt-4o\"\n[skills]\nglobal_dir = \"global-skills\"\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(
            dir.path().join(TOOLS_JSON),
            "// comment\n{\"deny\": [\"write_file\"]}\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let env = |key: &str| (key == "OPENAI_API_KEY").then(|| "sk-test".to_owned());
        let loaded = WorkspaceLoader::new(dir.path(), &env)
            .load()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let extensions = loaded.extensions.clone().unwrap_or_else(|| panic!("loaded by default"));
        let agent = loaded.builder.build().unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<String> = agent.kernel().tool_specs().iter().map(|s| s.name.clone()).collect();
        assert!(!names.contains(&"write_file".to_owned()), "{names:?}");
        assert!(names.contains(&harness_skills::LOAD_SKILL.to_owned()), "{names:?}");
        let skills = extensions.skills().unwrap_or_else(|| panic!("skills on"));
        assert!(format!("{skills:?}").contains("global-skills"), "{skills:?}");
        // Off: nothing is read or started.
        let bare = WorkspaceLoader::new(dir.path(), &env)
            .extensions(false)
            .load()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(bare.extensions.is_none());
    }

    #[tokio::test]
    async fn a_bad_tools_json_or_skills_section_is_a_configuration_error() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let env = |_: &str| None;
        std::fs::write(
            dir.path().join(TOOLS_JSON),
            r#"{"mcpServers": {"s": {"transport": "streamableHttp", "url": "${NOPE_URL}"}}}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let err = WorkspaceLoader::new(dir.path(), &env).load().await.err();
        assert!(
            matches!(&err, Some(ConfigError::ToolsJson(_)))
                && err.as_ref().is_some_and(|e| e.to_string().contains("NOPE_URL")),
            "{err:?}"
        );
        std::fs::remove_file(dir.path().join(TOOLS_JSON)).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(
            dir.path().join(CONFIG_FILE),
            "[skills]\nrepositories = [{ url = \"u\", path = \"p\" }]\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let message = WorkspaceLoader::new(dir.path(), &env)
            .load()
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(message.contains("[skills] repositories[0]"), "{message}");
        std::fs::write(dir.path().join(CONFIG_FILE), "[skills]\nenabled = false\n").unwrap_or_else(|e| panic!("{e}"));
        let loaded = WorkspaceLoader::new(dir.path(), &env)
            .load()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(loaded.extensions.is_some_and(|e| e.skills().is_none()));
    }
}
