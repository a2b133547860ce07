//! The skills middleware: puts the `<available_skills>` catalogue into every step's system
//! prompt. It never syncs a repository (that is [`Skills::start`]'s schedule): a turn reads
//! the last staged copy.

use crate::library::Skills;
use async_trait::async_trait;
use harness_core::{Hooks, Middleware, SystemPrompt, Turn};
use harness_fs::{CallScope, CallWorkspace};
use std::sync::Arc;

/// Name of the prompt part holding the catalogue.
pub const CATALOGUE_PART: &str = "skills";

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
        Hooks::SYSTEM_PROMPT
    }

    async fn system_prompt(&self, prompt: &mut SystemPrompt, turn: &Turn) {
        if let Some(workspace) = turn.ctx().get::<CallWorkspace>() {
            let namespace = turn.ctx().get::<CallScope>().map(CallScope::namespace);
            let set = self.skills.resolve(workspace, namespace).await;
            prompt.push_stable(CATALOGUE_PART, set.catalogue_for(self.skills.host_root(), namespace));
        }
    }
}
