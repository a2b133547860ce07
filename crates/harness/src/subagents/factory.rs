//! Spawning children: each declaration's child agent, built once from the parent's recipe
//! ([`Recipe`]: the parent's own tools, middlewares, capabilities and registrations, and what
//! every capability recorded for children), narrowed by the declaration, one level deeper.

use super::declaration::{SubagentDeclaration, WorkspaceMode};
use super::settings::ModelResolver;
use super::spawn_error::SpawnError;
use crate::capability::{ChildAgent, ChildSpec, Recipe, ToolAllowList, ToolDenyList};
use harness_core::ChatModel;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Builds (once per declaration) and keeps the child agents.
pub(crate) struct ChildFactory {
    pub(crate) model: Arc<dyn ChatModel>,
    pub(crate) parent_name: String,
    pub(crate) recipe: Recipe,
    /// The parent's permission policy (a remote child gets its rules as `inherit`).
    pub(crate) parent_policy: Option<Arc<harness_policy::Policy>>,
    pub(crate) resolver: ModelResolver,
    pub(crate) built: Mutex<HashMap<SubagentDeclaration, Arc<dyn ChildAgent>>>,
}

impl ChildFactory {
    fn built(&self) -> std::sync::MutexGuard<'_, HashMap<SubagentDeclaration, Arc<dyn ChildAgent>>> {
        // Only inserts happen under the lock.
        self.built.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The child agent for `declaration`.
    ///
    /// # Errors
    /// The child's `model` cannot be built, or its build failed (e.g. its allow-list or
    /// configuration).
    pub(crate) fn child(&self, declaration: &SubagentDeclaration) -> Result<Arc<dyn ChildAgent>, SpawnError> {
        if let Some(agent) = self.built().get(declaration) {
            return Ok(Arc::clone(agent));
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
            message: harness_core::error_chain(&*err),
        })?;
        self.built().insert(declaration.clone(), Arc::clone(&agent));
        Ok(agent)
    }

    fn build_child(
        &self,
        declaration: &SubagentDeclaration,
        model: Arc<dyn ChatModel>,
    ) -> Result<Arc<dyn ChildAgent>, harness_core::BoxError> {
        let name = match declaration.workspace_mode {
            WorkspaceMode::Isolated => declaration.id.clone(),
            WorkspaceMode::Shared => self.parent_name.clone(),
        };
        // The recipe is complete once the parent is built, before any call can spawn.
        let inherited = self
            .recipe
            .get()
            .cloned()
            .ok_or("the parent agent is still being built")?;
        let own_persona = !declaration.instructions.is_empty();
        let prompt = if own_persona {
            declaration.instructions.clone()
        } else {
            inherited.sys_prompt_text()
        };
        let mut spec = ChildSpec::new(inherited, name, model, prompt);
        if own_persona {
            spec.settings.insert(crate::facts::OwnPersona);
        }
        spec.max_iters = declaration.steps;
        if let Some(tools) = &declaration.tools {
            spec.settings.insert(ToolAllowList(tools.clone()));
        }
        if !declaration.denied_tools.is_empty() {
            spec.settings.insert(ToolDenyList(declaration.denied_tools.clone()));
        }
        spec.middleware.push(Arc::new(super::budget::BudgetGuard));
        self.recipe.build_child(spec)
    }

    pub(crate) fn children(&self) -> Vec<Arc<dyn ChildAgent>> {
        self.built().values().cloned().collect()
    }
}
