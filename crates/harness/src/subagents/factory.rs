//! Spawning children: each declaration's child agent, built once from the parent's recipe
//! (model, workspace, filesystem, configuration, inherited tools, middlewares and
//! capabilities, policy), one level deeper.

use super::declaration::{SubagentDeclaration, WorkspaceMode};
use super::settings::{ChildDepth, ModelResolver, SubagentsConfig};
use super::spawn_error::SpawnError;
use super::{Inherited, ToolAllowList};
use crate::config::HarnessConfig;
use crate::{BuildError, HarnessAgent};
use harness_core::{ChatModel, Tool};
use harness_fs::{Filesystem, IsolationScope};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

/// Builds (once per declaration) and keeps the child agents.
pub(crate) struct ChildFactory {
    pub(super) model: Arc<dyn ChatModel>,
    pub(super) config: HarnessConfig,
    pub(super) root: PathBuf,
    pub(super) filesystem: Arc<dyn Filesystem>,
    pub(super) isolation: IsolationScope,
    pub(super) parent_name: String,
    pub(super) depth: u32,
    pub(super) inherited: Inherited,
    /// The parent's memory and session tools (a child has no memory of its own).
    pub(super) memory_tools: Vec<Arc<dyn Tool>>,
    /// The parent's `[subagents]` settings, the child's too (so `max_depth` set on the
    /// builder holds below the first level).
    pub(super) subagents: SubagentsConfig,
    /// The parent's permission policy: a child keeps its deny and ask rules and its mode.
    pub(super) parent_policy: Option<Arc<crate::permissions::Policy>>,
    pub(super) resolver: ModelResolver,
    pub(super) built: Mutex<HashMap<SubagentDeclaration, HarnessAgent>>,
}

impl ChildFactory {
    fn built(&self) -> std::sync::MutexGuard<'_, HashMap<SubagentDeclaration, HarnessAgent>> {
        // Only inserts happen under the lock.
        self.built.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The child agent for `declaration`.
    ///
    /// # Errors
    /// The child's `model` cannot be built, or its build failed (e.g. its allow-list or
    /// configuration).
    pub(crate) fn child(&self, declaration: &SubagentDeclaration) -> Result<HarnessAgent, SpawnError> {
        if let Some(agent) = self.built().get(declaration) {
            return Ok(agent.clone());
        }
        let model = match &declaration.model {
            Some(spec) => (self.resolver)(spec, declaration.source).map_err(|message| SpawnError::Model {
                id: declaration.id.clone(),
                spec: spec.clone(),
                origin: declaration
                    .origin
                    .clone()
                    .unwrap_or_else(|| "its declaration".to_owned()),
                message,
            })?,
            None => Arc::clone(&self.model),
        };
        let agent = self.build_child(declaration, model).map_err(|err| SpawnError::Build {
            id: declaration.id.clone(),
            message: harness_core::error_chain(&err),
        })?;
        self.built().insert(declaration.clone(), agent.clone());
        Ok(agent)
    }

    fn build_child(
        &self,
        declaration: &SubagentDeclaration,
        model: Arc<dyn ChatModel>,
    ) -> Result<HarnessAgent, BuildError> {
        let name = match declaration.workspace_mode {
            WorkspaceMode::Isolated => declaration.id.clone(),
            WorkspaceMode::Shared => self.parent_name.clone(),
        };
        let inherited = &self.inherited;
        let prompt = if declaration.instructions.is_empty() {
            inherited.sys_prompt.clone().unwrap_or_default()
        } else {
            declaration.instructions.clone()
        };
        let mut builder = HarnessAgent::builder()
            .workspace(self.root.clone())
            .filesystem(Arc::clone(&self.filesystem))
            .shared_model(model)
            .config(self.config.clone())
            .name(name)
            .isolation(self.isolation)
            .sys_prompt(prompt)
            .memory(no_memory())
            .subagents(self.subagents.clone())
            .setting(ChildDepth(self.depth));
        if let Some(steps) = declaration.steps.or(inherited.max_iters) {
            builder = builder.max_iters(steps);
        }
        for tool in inherited.tools.iter().chain(&self.memory_tools) {
            builder = builder.tool(Arc::clone(tool));
        }
        for middleware in &inherited.middleware {
            builder = builder.middleware(Arc::clone(middleware));
        }
        for capability in &inherited.capabilities {
            builder = builder.capability(Arc::clone(capability));
        }
        if let Some(extensions) = &inherited.extensions {
            builder = builder.extensions(Arc::clone(extensions));
        }
        if let Some(lease) = &inherited.session_lease {
            builder = builder.session_lease(Arc::clone(lease));
        }
        if let Some(store) = &inherited.state_store {
            builder = builder.state_store(Arc::clone(store));
        }
        if let Some(tools) = &declaration.tools {
            builder = builder.setting(ToolAllowList(tools.clone()));
        }
        builder = crate::permissions::for_child(builder, self.parent_policy.as_deref());
        // A child's own children resolve their models the same way.
        builder
            .model_resolver(Arc::clone(&self.resolver))
            .middleware(Arc::new(super::budget::BudgetGuard))
            .build()
    }

    pub(super) fn children(&self) -> Vec<HarnessAgent> {
        self.built().values().cloned().collect()
    }
}

/// Children run no memory extraction of their own.
fn no_memory() -> harness_memory::MemoryConfig {
    let mut config = harness_memory::MemoryConfig::default();
    config.enabled = false;
    config
}
