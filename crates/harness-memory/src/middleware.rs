//! [`MemoryMiddleware`]: the `agent` hook that hands a finished call to memory.

use crate::memory::Memory;
use harness_core::{AgentError, AgentNext, Hooks, Middleware, Turn, async_trait};

/// After a successful call, schedules background extraction and consolidation. It never
/// waits for them, so the reply is never delayed, and it does nothing for a failed or
/// cancelled call.
pub(crate) struct MemoryMiddleware {
    memory: Memory,
}

impl MemoryMiddleware {
    pub(crate) fn new(memory: Memory) -> Self {
        Self { memory }
    }
}

#[async_trait]
impl Middleware for MemoryMiddleware {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn hooks(&self) -> Hooks {
        Hooks::AGENT
    }

    async fn agent(&self, turn: &mut Turn, next: AgentNext<'_>) -> Result<(), AgentError> {
        let result = next.run(turn).await;
        if result.is_ok() {
            self.memory.after_call(turn);
        }
        result
    }
}
