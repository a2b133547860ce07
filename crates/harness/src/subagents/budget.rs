//! A child's token budget: the smaller of its declaration's `max_tokens` and `[subagents]
//! child_token_budget`, enforced before each of the child's reasoning steps.

use super::declaration::SubagentDeclaration;
use super::records::TaskStatus;
use super::runtime::Runtime;
use super::task::Outcome;
use std::sync::{Arc, Mutex, PoisonError};

/// In a child's call context when its spawn has a token budget; checked by [`BudgetGuard`].
#[derive(Clone)]
pub(crate) struct ChildBudget {
    pub(crate) limit: u64,
    pub(crate) origin: String,
    pub(crate) stopped: Arc<Mutex<Option<Outcome>>>,
}

/// The child's middleware enforcing [`ChildBudget`]: before each reasoning step, a call
/// whose usage so far exceeds the budget is stopped (the task ends `failed`, naming the
/// limit), so no model call is made past the budget.
pub(crate) struct BudgetGuard;

#[harness_core::async_trait]
impl harness_core::Middleware for BudgetGuard {
    fn name(&self) -> &'static str {
        "subagent-budget"
    }

    fn hooks(&self) -> harness_core::Hooks {
        harness_core::Hooks::REASONING
    }

    async fn reasoning(
        &self,
        turn: &mut harness_core::Turn,
        next: harness_core::ReasoningNext<'_>,
    ) -> Result<(), harness_core::AgentError> {
        if let Some(budget) = turn.ctx().get::<ChildBudget>() {
            let used = turn.usage().input_tokens + turn.usage().output_tokens;
            if used > budget.limit {
                let mut stopped = budget.stopped.lock().unwrap_or_else(PoisonError::into_inner);
                if stopped.is_none() {
                    *stopped = Some(Outcome {
                        status: TaskStatus::Failed,
                        result: format!(
                            "stopped: token budget exceeded (used {used} tokens; the limit is {}, set by {})",
                            budget.limit, budget.origin
                        ),
                    });
                }
                return Err(harness_core::AgentError::Cancelled);
            }
        }
        next.run(turn).await
    }
}

impl Runtime {
    /// The token budget of a child of `declaration`: the smaller of its `max_tokens` and
    /// `[subagents] child_token_budget`, with where it comes from.
    pub(crate) fn budget_for(&self, declaration: &SubagentDeclaration) -> Option<(u64, String)> {
        let own = declaration.max_tokens.map(|limit| {
            let origin = declaration.origin.as_deref().unwrap_or("its declaration");
            (limit, format!("`max_tokens` of {origin}"))
        });
        let config = self
            .config
            .child_token_budget
            .map(|limit| (limit, "`[subagents] child_token_budget`".to_owned()));
        match (own, config) {
            (Some(own), Some(config)) => Some(if config.0 < own.0 { config } else { own }),
            (own, config) => own.or(config),
        }
    }
}
