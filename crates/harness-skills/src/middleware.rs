//! The skills middleware: puts the `<available_skills>` catalogue into every step's system
//! prompt, and leaves `load_skill_through_path` out of a step that has no skill to load (a
//! fresh workspace pays no bytes for it). It never syncs a repository (that is
//! [`Skills::start`]'s schedule): a turn reads the last staged copy.

use crate::LOAD_SKILL;
use crate::library::Skills;
use async_trait::async_trait;
use harness_core::{AgentError, Hooks, Middleware, ReasoningNext, SystemPrompt, Turn};
use harness_fs::{CallScope, CallWorkspace};
use std::sync::Arc;

/// Name of the prompt part holding the catalogue.
pub const CATALOGUE_PART: &str = "skills";

/// The step's catalogue, resolved once in the `reasoning` hook for the `system_prompt` one.
struct StepCatalogue(String);

/// See the module docs.
pub struct SkillsContext {
    skills: Arc<Skills>,
}

impl SkillsContext {
    /// The middleware over these skills.
    pub fn new(skills: Arc<Skills>) -> Self {
        Self { skills }
    }
}

#[async_trait]
impl Middleware for SkillsContext {
    fn name(&self) -> &'static str {
        "skills"
    }

    fn hooks(&self) -> Hooks {
        Hooks::REASONING | Hooks::SYSTEM_PROMPT
    }

    async fn reasoning(&self, turn: &mut Turn, next: ReasoningNext<'_>) -> Result<(), AgentError> {
        let Some(workspace) = turn.ctx().get::<CallWorkspace>() else {
            return next.run(turn).await;
        };
        let namespace = turn.ctx().get::<CallScope>().map(CallScope::namespace);
        let set = self.skills.resolve(workspace, namespace).await;
        let catalogue = set.catalogue_for(self.skills.host_root(), namespace);
        turn.ctx_mut().insert(StepCatalogue(catalogue));
        if !set.is_empty() || !turn.tools().iter().any(|spec| spec.name == LOAD_SKILL) {
            return next.run(turn).await;
        }
        let all = Arc::clone(turn.tools());
        turn.set_tools(all.iter().filter(|spec| spec.name != LOAD_SKILL).cloned().collect());
        let result = next.run(turn).await;
        turn.set_tools(all);
        result
    }

    async fn system_prompt(&self, prompt: &mut SystemPrompt, turn: &Turn) {
        if let Some(StepCatalogue(catalogue)) = turn.ctx().get::<StepCatalogue>() {
            prompt.push_stable(CATALOGUE_PART, catalogue.clone());
        } else if let Some(workspace) = turn.ctx().get::<CallWorkspace>() {
            let namespace = turn.ctx().get::<CallScope>().map(CallScope::namespace);
            let set = self.skills.resolve(workspace, namespace).await;
            prompt.push_stable(CATALOGUE_PART, set.catalogue_for(self.skills.host_root(), namespace));
        }
    }
}
