//! The composition root: the one module that lists the built-in capabilities (in build
//! order) and gives the builder their settings. The seam ([`crate::capability`]) and the
//! agent know none of them; a capability of the caller's own joins through the same
//! [`Registration`] type ([`HarnessAgentBuilder::register`]).

use crate::HarnessAgentBuilder;
use crate::capability::{ConfigSection, Registration, Sections};
use crate::compaction::CompactionConfig;
use crate::config::{ConfigError, HarnessConfig};
use crate::eviction::ToolResultEvictionConfig;
use crate::plan_mode::PlanSection;
use harness_core::ChatModel;
use harness_memory::MemoryConfig;
use harness_policy::Policy;
use std::path::Path;
use std::sync::Arc;

/// The built-in capabilities, in build order (the onion order is each middleware's
/// [`Layer`](crate::capability::Layer)). A capability may read what an earlier one
/// [provided](crate::capability::Setup::provide); it shuts down before the ones registered
/// before it.
pub(crate) fn registrations() -> [Registration; 13] {
    [
        // Before the shell: it provides the confined shell's prompt.
        crate::sandbox::REGISTRATION,
        crate::tools::files::REGISTRATION,
        crate::tools::shell::REGISTRATION,
        // Before compaction: it provides the flush of what compaction replaces.
        crate::memory::REGISTRATION,
        crate::compaction::REGISTRATION,
        crate::eviction::REGISTRATION,
        // MCP tools, skills and tool groups; before subagents, so background children end
        // before the MCP servers they call stop.
        crate::extensions::REGISTRATION,
        // Before the task list: it says whether plan mode asks for it.
        crate::plan_mode::REGISTRATION,
        crate::permissions::REGISTRATION,
        crate::subagents::REGISTRATION,
        // After memory: it guides the model to the memory tools when they exist.
        crate::prompt::REGISTRATION,
        crate::task_list::REGISTRATION,
        // Structured output (`call_structured`): its tool and checks only on such a call.
        crate::structured::REGISTRATION,
    ]
}

impl Sections {
    /// The built-in capabilities' sections (what [`HarnessConfig::parse`](crate::HarnessConfig::parse)
    /// accepts beside the agent's own).
    pub fn builtin() -> Self {
        Self::of(registrations())
    }
}

/// Parsing with the built-in capabilities' sections.
impl HarnessConfig {
    /// Parses a configuration text; `path` is only used in messages.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the offending key.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        Self::parse_with(text, path, &Sections::builtin())
    }

    /// Loads `<workspace>/harness.toml`; a missing file is the default configuration.
    ///
    /// # Errors
    /// [`ConfigError`] for an unreadable or invalid file.
    pub fn load(workspace: &Path) -> Result<Self, ConfigError> {
        Self::load_with(workspace, &Sections::builtin())
    }
}

/// The built-in capabilities' builder settings.
impl HarnessAgentBuilder {
    /// Turns conversation compaction on with `config` (also `[compaction]` in harness.toml).
    pub fn compaction(self, config: CompactionConfig) -> Self {
        self.setting(crate::compaction::CompactionOverride(config))
    }

    /// The model that writes compaction summaries (default: the agent's model). The CLI
    /// resolves `[compaction] model` into this.
    pub fn compaction_model(self, model: Arc<dyn ChatModel>) -> Self {
        self.setting(crate::compaction::SummaryModel(model))
    }

    /// Tool-result eviction settings (on by default; also `[tool_result_eviction]` in
    /// harness.toml); `None` turns it off.
    pub fn tool_result_eviction(self, config: Option<ToolResultEvictionConfig>) -> Self {
        self.setting(crate::eviction::EvictionOverride(config))
    }

    /// Long-term memory settings (also `[memory]` in harness.toml; on by default).
    pub fn memory(self, config: MemoryConfig) -> Self {
        self.setting(crate::memory::MemoryOverride(config))
    }

    /// The model memory extraction and consolidation use (default: the agent's model). The
    /// CLI resolves `[memory] model` into this.
    pub fn memory_model(self, model: Arc<dyn ChatModel>) -> Self {
        self.setting(crate::memory::MemoryModel(model))
    }

    /// Checks every tool call against `policy` (also `[permissions]` in harness.toml).
    pub fn permissions(self, policy: Policy) -> Self {
        self.setting(crate::permissions::PolicyOverride(policy))
    }

    /// Sets `[plan]` in the builder's configuration, as harness.toml would (so subagents,
    /// which are built from the parent's configuration, get the same plan mode). A later
    /// [`config`](Self::config) replaces the whole configuration, this included.
    pub fn plan(mut self, section: PlanSection) -> Self {
        let table = [
            ("enabled", section.enabled),
            ("allow_shell", section.allow_shell),
            ("task_list", section.task_list),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), toml::Value::Boolean(value)))
        .collect();
        self.config_mut()
            .capabilities
            .insert(PlanSection::KEY.to_owned(), toml::Value::Table(table));
        self
    }

    /// Token budget of MEMORY.md in the prompt (default 8000).
    pub fn max_context_tokens(self, tokens: usize) -> Self {
        self.setting(crate::prompt::MaxContextTokens(tokens))
    }

    /// A file injected in full into the prompt, relative to the workspace.
    pub fn additional_context_file(mut self, path: impl Into<String>) -> Self {
        self.settings_mut()
            .get_or_default::<crate::prompt::ContextFiles>()
            .0
            .push(path.into());
        self
    }

    /// MCP tools, skills, on-demand groups and `tools.json`'s allow/deny (applied to every
    /// tool, built-ins included). They join the agent as a capability:
    /// [`HarnessAgent::shutdown`](crate::HarnessAgent::shutdown) stops their MCP servers
    /// (children share them and leave them running).
    pub fn extensions(self, extensions: Arc<crate::extensions::Extensions>) -> Self {
        self.setting(crate::extensions::ExtensionsSetting(extensions))
    }

    /// Offers `todo_write` and shows the task list before each step (also `[plan] task_list`
    /// in harness.toml). Plan mode turns it on whatever this says.
    pub fn task_list(self, enabled: bool) -> Self {
        self.setting(crate::task_list::TaskListOverride(enabled))
    }

    /// Subagent settings (also `[subagents]` in harness.toml; on by default).
    pub fn subagents(self, config: crate::subagents::SubagentsConfig) -> Self {
        self.setting(crate::subagents::ConfigOverride(config))
    }

    /// How subagents' `model` spec strings are turned into models ([`from_workspace`]
    /// sets one that reads the provider variables it was given and the `[model]` transport
    /// settings; without one, specs are built with no environment).
    ///
    /// [`from_workspace`]: HarnessAgentBuilder::from_workspace
    pub fn model_resolver(self, resolver: crate::subagents::ModelResolver) -> Self {
        self.setting(crate::subagents::ResolverSetting(resolver))
    }

    /// Where `${VAR}` in the `headers` of remote subagent files (`subagents/<id>.md` with
    /// `url`) is read from ([`from_workspace`] passes the variables those files name);
    /// without one, every placeholder is unset and such a file is skipped with a warning
    /// naming the file and the `headers.<Name>` key. Programmatic declarations are used as
    /// given.
    ///
    /// [`from_workspace`]: HarnessAgentBuilder::from_workspace
    pub fn subagent_variables(self, lookup: crate::subagents::VariableLookup) -> Self {
        self.setting(crate::subagents::VariablesSetting(lookup))
    }

    /// The workspace's `subagents/` files, already read (by the loader).
    pub(crate) fn subagent_files(self, root: std::path::PathBuf, files: harness_agents::DeclarationFiles) -> Self {
        self.setting(crate::subagents::FilesSetting(root, Arc::new(files)))
    }

    /// Declares a subagent (replaces a workspace file or the built-in of the same id).
    pub fn subagent(mut self, declaration: crate::subagents::SubagentDeclaration) -> Self {
        self.settings_mut()
            .get_or_default::<crate::subagents::Declared>()
            .0
            .push(declaration);
        self
    }
}
