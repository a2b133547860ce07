//! [`Extensions`]: what `tools.json` and the skill layers add to an agent, started once and
//! handed to [`HarnessAgentBuilder::extensions`](crate::HarnessAgentBuilder::extensions).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use harness::extensions::{Extensions, ExtensionsConfig};
//! use harness_mcp::HostEnv;
//! use harness_mcp::tools_json::ToolsConfig;
//! let root = std::path::Path::new("./workspace");
//! let env = HostEnv::from_vars(std::env::vars());
//! let text = std::fs::read_to_string(root.join("tools.json")).ok();
//! let tools = ToolsConfig::layered(text.as_deref().map(|t| ("tools.json", t)), None, &|v| env.get(v))?;
//! let config = ExtensionsConfig { tools, ..ExtensionsConfig::default() };
//! let extensions = std::sync::Arc::new(Extensions::start(config, &env, root, true).await?);
//! # let model = harness_models::ScriptedModel::new();
//! let agent = harness::HarnessAgent::builder()
//!     .workspace(root)
//!     .model(model)
//!     .extensions(std::sync::Arc::clone(&extensions))
//!     .build()?;
//! // ... serve calls ...
//! extensions.shutdown().await;
//! # Ok(()) }
//! ```

use crate::tool_groups::{ToolGroups, ToolGroupsLayer};
use harness_core::{Middleware, Tool};
use harness_mcp::tools_json::{ToolFilter, ToolsConfig};
use harness_mcp::{HostEnv, McpManager, RestartPolicy, ServerFailure};
use harness_skills::{LoadSkill, Skills, SkillsConfig, SkillsContext, SkillsError};
use std::path::Path;
use std::sync::Arc;

/// What to start.
#[derive(Debug, Clone, Default)]
pub struct ExtensionsConfig {
    /// The merged `tools.json` (`allow`, `deny`, `mcpServers`).
    pub tools: ToolsConfig,
    /// Skill layers; `None` turns skills off (no catalogue, no `load_skill_through_path`).
    pub skills: Option<SkillsConfig>,
    /// How dead MCP servers are restarted.
    pub restart: RestartPolicy,
}

/// Where a tool the agent offers comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolSource {
    /// Registered by the harness or the embedding program.
    BuiltIn,
    /// An MCP server.
    Mcp {
        /// The server.
        server: String,
    },
    /// The skills capability (`load_skill_through_path`).
    Skills,
    /// The on-demand groups (`activate_tool_group`).
    ToolGroups,
}

/// Connected MCP servers, skill layers, on-demand groups and the allow/deny filter.
pub struct Extensions {
    filter: ToolFilter,
    mcp: McpManager,
    skills: Option<Arc<Skills>>,
    groups: Arc<ToolGroups>,
}

impl std::fmt::Debug for Extensions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extensions")
            .field("filter", &self.filter)
            .field("mcp", &self.mcp)
            .field("skills", &self.skills)
            .field("groups", &self.groups)
            .finish()
    }
}

impl Extensions {
    /// Connects the MCP servers (concurrently; a broken one is a warning, see
    /// [`McpManager::failures`]) and sets up the skill layers of the workspace at
    /// `workspace_root` (`shell`: whether the agent has a shell there, for `<files-root>`):
    /// the skill repositories are synced once, then on their schedule in the background
    /// ([`Skills::start`]), never inside a turn.
    ///
    /// # Errors
    /// [`SkillsError`] when the global skills directory cannot be opened, or repositories
    /// are configured in a build without git support.
    pub async fn start(
        config: ExtensionsConfig,
        env: &HostEnv,
        workspace_root: &Path,
        shell: bool,
    ) -> Result<Self, SkillsError> {
        Self::start_with(config, env, workspace_root, shell, None).await
    }

    /// As [`start`](Self::start), with the stdio MCP servers started by `spawner` when given
    /// (a sandboxed agent's [`SandboxedServers`](crate::sandbox::SandboxedServers)); see
    /// [`McpManager::start_with`].
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub async fn start_with(
        config: ExtensionsConfig,
        env: &HostEnv,
        workspace_root: &Path,
        shell: bool,
        spawner: Option<Arc<dyn harness_mcp::StdioSpawner>>,
    ) -> Result<Self, SkillsError> {
        let skills = match config.skills {
            Some(skills) => Some(Arc::new(Skills::start(skills, workspace_root, shell).await?)),
            None => None,
        };
        let filter = config.tools.filter();
        let mcp = McpManager::start_with(config.tools.mcp_servers.into_values(), env, spawner, config.restart).await;
        let groups = ToolGroups::declared_by(&mcp.tools(), |group| {
            let tool = mcp.mcp_tools().iter().find(|tool| tool.group() == Some(group))?;
            Some(format!("tools of MCP server `{}`", tool.server()))
        });
        Ok(Self {
            filter,
            mcp,
            skills,
            groups: Arc::new(groups),
        })
    }

    /// Tools to register: the MCP tools and `load_skill_through_path` (with skills).
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        let mut tools = self.mcp.tools();
        if let Some(skills) = &self.skills {
            tools.push(LoadSkill::tool(Arc::clone(skills)));
        }
        tools
    }

    /// The on-demand groups `tools` declare ([`Tool::group`], MCP servers' described by
    /// their server) and `activate_tool_group` over them; `None` without groups.
    pub fn groups_of(&self, tools: &[Arc<dyn Tool>]) -> Option<(Arc<ToolGroups>, Arc<dyn Tool>)> {
        let groups = ToolGroups::declared_by(tools, |name| self.groups.get(name).map(|g| g.description.clone()));
        let groups = Arc::new(groups);
        (!groups.is_empty()).then(|| (Arc::clone(&groups), groups.activation_tool()))
    }

    /// Middlewares to install (inside the user's): the caller's `tools.json` filter, the
    /// skills catalogue, the filter of `groups` (from [`groups_of`](Self::groups_of)).
    pub fn middlewares(&self, groups: Option<&Arc<ToolGroups>>) -> Vec<Arc<dyn Middleware>> {
        let mut layers: Vec<Arc<dyn Middleware>> = vec![Arc::new(crate::user_tools::CallerToolsLayer)];
        if let Some(skills) = &self.skills {
            layers.push(Arc::new(SkillsContext::new(Arc::clone(skills))));
        }
        if let Some(groups) = groups {
            layers.push(Arc::new(ToolGroupsLayer::new(Arc::clone(groups), self.skills.clone())));
        }
        layers
    }

    /// `tools.json`'s allow/deny, applied to every registered tool.
    pub fn filter(&self) -> &ToolFilter {
        &self.filter
    }

    /// The MCP servers.
    pub fn mcp(&self) -> &McpManager {
        &self.mcp
    }

    /// MCP servers that offer no tools, and why.
    pub fn failures(&self) -> &[ServerFailure] {
        self.mcp.failures()
    }

    /// The skill layers, when skills are on.
    pub fn skills(&self) -> Option<&Arc<Skills>> {
        self.skills.as_ref()
    }

    /// The MCP servers' on-demand groups (the agent's also hold its built-in tools' groups).
    pub fn groups(&self) -> &ToolGroups {
        &self.groups
    }

    /// Where a tool named `name` comes from, if the extensions know it.
    pub fn source_of(&self, name: &str) -> ToolSource {
        if let Some(tool) = self.mcp.mcp_tools().iter().find(|tool| tool.spec().name == name) {
            return ToolSource::Mcp {
                server: tool.server().to_owned(),
            };
        }
        match name {
            harness_skills::LOAD_SKILL if self.skills.is_some() => ToolSource::Skills,
            crate::tool_groups::ACTIVATE_TOOL_GROUP => ToolSource::ToolGroups,
            _ => ToolSource::BuiltIn,
        }
    }

    /// Stops the skill repositories' background syncs and the MCP servers (their process
    /// groups are gone when this returns).
    pub async fn shutdown(&self) {
        if let Some(skills) = &self.skills {
            skills.stop().await;
        }
        self.mcp.shutdown().await;
    }
}

/// The builder's extensions ([`HarnessAgentBuilder::extensions`](crate::HarnessAgentBuilder::extensions)).
#[derive(Clone)]
pub(crate) struct ExtensionsSetting(pub(crate) Arc<Extensions>);

/// Extensions' entry in the capability registry: on when the builder was given some.
pub(crate) const REGISTRATION: crate::capability::Registration =
    crate::capability::Registration::new("extensions", |setup| {
        let Some(ExtensionsSetting(extensions)) = setup.take::<ExtensionsSetting>() else {
            return Ok(None);
        };
        setup.inherit(ExtensionsSetting(Arc::clone(&extensions)));
        // A child shares its parent's servers: the parent stops them.
        let owner = setup.depth() == 0;
        Ok(Some(Arc::new(ExtensionsCapability {
            extensions,
            owner,
            groups: std::sync::OnceLock::new(),
        }) as Arc<dyn crate::capability::Capability>))
    });

/// [`Extensions`] as a [`Capability`](crate::capability::Capability): their tools, their
/// middlewares at [`Layer::Extensions`](crate::capability::Layer::Extensions), `tools.json`'s
/// allow/deny over every tool, and the MCP servers stopped at shutdown by the agent that
/// owns them (not by its children, which share them).
struct ExtensionsCapability {
    extensions: Arc<Extensions>,
    owner: bool,
    /// The agent's on-demand groups, known once every tool is (at `filter_tools`).
    groups: std::sync::OnceLock<Arc<ToolGroups>>,
}

#[async_trait::async_trait]
impl crate::capability::Capability for ExtensionsCapability {
    fn name(&self) -> &'static str {
        "extensions"
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.extensions.tools()
    }

    fn filter_tools(&self, tools: &mut Vec<Arc<dyn Tool>>) {
        // Groups before the filter, so `tools.json` may deny `activate_tool_group` too.
        if let Some((groups, activation)) = self.extensions.groups_of(tools) {
            tools.push(activation);
            let _ = self.groups.set(groups);
        }
        *tools = self.extensions.filter().apply(std::mem::take(tools));
    }

    fn session_slots(&self) -> &'static [crate::capability::SlotKey] {
        const SLOTS: &[crate::capability::SlotKey] =
            &[crate::capability::SlotKey::of::<crate::tool_groups::ActiveGroups>()];
        SLOTS
    }

    fn middleware(
        &self,
        _assembly: &crate::capability::Assembly,
    ) -> Vec<(crate::capability::Layer, Arc<dyn Middleware>)> {
        self.extensions
            .middlewares(self.groups.get())
            .into_iter()
            .map(|layer| (crate::capability::Layer::Extensions, layer))
            .collect()
    }

    async fn shutdown(&self, deadline: tokio::time::Instant) {
        if !self.owner {
            return;
        }
        if tokio::time::timeout_at(deadline, self.extensions.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("MCP servers not stopped within the shutdown deadline");
        }
    }
}
