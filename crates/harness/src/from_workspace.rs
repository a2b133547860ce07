//! Configuration in the library: the builder a workspace's `harness.toml` describes.
//!
//! [`HarnessAgentBuilder::from_workspace`] (also [`HarnessAgent::from_workspace`]) resolves
//! every section — `[agent]`, `[filesystem]`, `[state]`, `[memory]`, `[compaction]`,
//! `[tool_result_eviction]`, `[model]` — and the models named there, with the precedence the
//! CLI uses: explicit overrides (flags) first, then `HARNESS_MODEL` for the main model, then
//! the file. The result is a builder, so a caller can still override anything.
//! [`WorkspaceLoader`] takes the overrides that must be known while resolving (the agent
//! name, which the filesystem needs; the main model spec; a retry observer).

use crate::agent::{DEFAULT_AGENT_NAME, HarnessAgent, HarnessAgentBuilder};
use crate::config::{CONFIG_FILE, ConfigError, HarnessConfig};
use harness_core::ChatModel;
use harness_models::{ModelSpec, RetryObserver, TransportOptions};
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
}

impl std::fmt::Debug for LoadedWorkspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedWorkspace")
            .field("config", &self.config)
            .field("name", &self.name)
            .field("model", &self.model)
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
        }
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

    fn lookup(&self, key: &str) -> Option<String> {
        (self.env)(key).filter(|value| !value.trim().is_empty())
    }

    /// Reads harness.toml and builds the models and the filesystem it names.
    ///
    /// # Errors
    /// [`ConfigError`]: an unreadable or invalid file, a value out of range, a model spec
    /// that cannot be used (naming where it came from), a filesystem that cannot be opened.
    pub async fn load(self) -> Result<LoadedWorkspace, ConfigError> {
        let config = HarnessConfig::load(&self.dir)?;
        let file = self.dir.join(CONFIG_FILE);
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
        if let Some(fs_config) = &config.filesystem {
            let fs = crate::filesystem::open(fs_config, &self.dir, &name)
                .await
                .map_err(|source| ConfigError::Filesystem {
                    path: file.clone(),
                    source,
                })?;
            builder = builder.filesystem(fs);
        }
        if let Some(state) = &config.state {
            let backend = crate::state::open(state).await.map_err(|source| ConfigError::State {
                path: file.clone(),
                source,
            })?;
            if let Some(backend) = backend {
                builder = builder.state_store(backend.store).session_lease(backend.lease);
                // Shared files are fenced only when they live where the lease's counter is.
                let composite = config
                    .filesystem
                    .as_ref()
                    .is_some_and(|fs| fs.kind == crate::filesystem::FilesystemKind::Composite);
                if let Some(fence) = backend.fence.filter(|_| composite) {
                    builder = builder.write_fence(fence);
                }
            }
        }
        if let Some(spec) = config.memory.as_ref().and_then(|m| m.model.as_deref()) {
            builder = builder.memory_model(build(spec, format!("{} [memory] model", file.display()))?);
        }
        if let Some(spec) = config.compaction.as_ref().and_then(|c| c.model.as_deref()) {
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
        let model = match main {
            Some((spec, source, origin)) => {
                builder = builder.shared_model(build(&spec, origin)?);
                Some((spec, source))
            }
            None => None,
        };
        Ok(LoadedWorkspace {
            builder: builder.config(config.clone()),
            config,
            name,
            model,
        })
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
