//! The spawn limits: depth, fan-out per step and spawns per call, counted per call (or per
//! session for programmatic spawns outside a call).

use super::lineage::Lineage;
use super::runtime::Runtime;
use super::spawn_error::SpawnError;
use harness_core::RuntimeContext;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// Spawn counters of one call, put into its context by the push-back middleware.
#[derive(Debug, Default)]
pub(crate) struct SpawnCounter {
    step: AtomicU32,
    in_step: AtomicU32,
    in_call: AtomicU32,
    /// Programmatic spawns outside a call: a finished task frees its fan-out slot.
    programmatic: bool,
}

impl SpawnCounter {
    /// The counter of programmatic spawns outside a call (a finished task frees its slot).
    pub(crate) fn programmatic() -> Self {
        Self {
            programmatic: true,
            ..Self::default()
        }
    }

    /// A new step began: its fan-out count starts at zero.
    pub(crate) fn begin_step(&self, step: u32) {
        self.step.store(step, Ordering::SeqCst);
        self.in_step.store(0, Ordering::SeqCst);
    }

    /// Frees the fan-out slot of a programmatic spawn (outside a call, fan-out counts the
    /// spawns running at once): its task ended, or it never started. A call's counter keeps
    /// its count until the next step.
    pub(crate) fn release_programmatic(&self) {
        if self.programmatic {
            // Saturating: a release never wraps the count around.
            let _ = self
                .in_step
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |count| count.checked_sub(1));
        }
    }
}

impl Runtime {
    /// The caller's depth: the lineage in its context, else this agent's own.
    pub(crate) fn caller_depth(&self, ctx: &RuntimeContext) -> u32 {
        ctx.get::<Lineage>().map_or(self.depth, |lineage| lineage.depth)
    }

    /// Checks depth, fan-out and the call budget, counting this spawn when it is allowed.
    pub(crate) fn admit(&self, ctx: &RuntimeContext) -> Result<(), SpawnError> {
        let counter = ctx.get::<Arc<SpawnCounter>>().cloned();
        self.admit_with(ctx, counter.as_ref())
    }

    /// [`admit`](Self::admit) with an explicit counter (`None`: refused, no budget).
    pub(crate) fn admit_with(
        &self,
        ctx: &RuntimeContext,
        counter: Option<&Arc<SpawnCounter>>,
    ) -> Result<(), SpawnError> {
        let depth = self.caller_depth(ctx);
        if depth >= self.config.max_depth {
            return Err(SpawnError::Depth {
                limit: self.config.max_depth,
                depth,
            });
        }
        // A call that did not pass the push-back middleware (a tool invoked directly) has
        // no counter: it is refused rather than unlimited.
        let counter = counter.ok_or(SpawnError::CallBudget {
            limit: self.config.max_spawns_per_call,
        })?;
        let in_step = counter.in_step.fetch_add(1, Ordering::SeqCst);
        if in_step >= self.config.max_fanout {
            counter.in_step.fetch_sub(1, Ordering::SeqCst);
            return Err(SpawnError::Fanout {
                limit: self.config.max_fanout,
            });
        }
        let in_call = counter.in_call.fetch_add(1, Ordering::SeqCst);
        if in_call >= self.config.max_spawns_per_call {
            counter.in_call.fetch_sub(1, Ordering::SeqCst);
            counter.in_step.fetch_sub(1, Ordering::SeqCst);
            return Err(SpawnError::CallBudget {
                limit: self.config.max_spawns_per_call,
            });
        }
        Ok(())
    }
}
