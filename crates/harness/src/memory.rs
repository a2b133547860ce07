//! Long-term memory as a [`Capability`]: the `memory` middleware (fact extraction after
//! calls), the memory tools, and draining pending extractions at shutdown. Settings come from
//! `[memory]` (on by default) or [`HarnessAgentBuilder::memory`]; the memory itself is
//! `harness_memory::Memory`.
//!
//! Memory is [provided](crate::capability::Setup::provide) to the capabilities built after
//! it: compaction flushes the messages it replaces into extraction, and the prompt guides
//! the model to the memory tools.

use crate::capability::{Assembly, Capability, CapabilityError, Layer, Registration, Setup};
use crate::facts::{BeforeCompaction, CompactionHook};
use harness_core::{ChatModel, Middleware, Msg, Tool};
use harness_memory::{Memory, MemoryConfig, NamespaceKey};
use std::sync::Arc;

/// Memory's entry in the capability registry.
pub(crate) const REGISTRATION: Registration = Registration::new("memory", build);

/// The builder's memory settings (override `[memory]`).
pub(crate) struct MemoryOverride(pub(crate) MemoryConfig);

/// The model extraction and consolidation use.
pub(crate) struct MemoryModel(pub(crate) Arc<dyn ChatModel>);

fn build(setup: &mut Setup<'_>) -> Result<Option<Arc<dyn Capability>>, CapabilityError> {
    let config = match setup.take::<MemoryOverride>() {
        Some(MemoryOverride(config)) => config,
        None => setup.config().memory.clone().unwrap_or_default(),
    };
    let model = setup.take::<MemoryModel>().map(|MemoryModel(model)| model);
    if setup.depth() > 0 {
        // Children run no memory of their own (no second extraction or consolidation of
        // the parent's facts) but search the parent's with its memory and session tools.
        let Some(ParentMemory(memory)) = setup.take::<ParentMemory>() else {
            return Ok(None);
        };
        setup.inherit(ParentMemory(memory.clone()));
        setup.provide(memory.clone());
        return Ok(Some(Arc::new(MemoryTools(memory))));
    }
    if !config.enabled {
        return Ok(None);
    }
    let index_dir = config
        .index
        .dir
        .clone()
        .unwrap_or_else(|| setup.root().join(".harness").join("index"));
    let model = model.unwrap_or_else(|| Arc::clone(setup.model()));
    let memory = Memory::new(config, model, index_dir);
    setup.provide(memory.clone());
    setup.provide(BeforeCompaction(Arc::new(MemoryFlush(memory.clone()))));
    setup.inherit(ParentMemory(memory.clone()));
    Ok(Some(Arc::new(MemoryCapability(memory))))
}

/// A child's view of its parent's memory: the tools, nothing that writes.
#[derive(Clone)]
struct ParentMemory(Memory);

/// A child's memory capability: the parent's memory and session tools only.
struct MemoryTools(Memory);

impl Capability for MemoryTools {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.0.tools()
    }
}

/// The capability: wraps the shared [`Memory`].
struct MemoryCapability(Memory);

#[async_trait::async_trait]
impl Capability for MemoryCapability {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.0.tools()
    }

    fn middleware(&self, _: &Assembly) -> Vec<(Layer, Arc<dyn Middleware>)> {
        vec![(Layer::Memory, self.0.middleware())]
    }

    async fn shutdown(&self, deadline: tokio::time::Instant) {
        let report = self
            .0
            .shutdown(deadline.saturating_duration_since(tokio::time::Instant::now()))
            .await;
        tracing::info!(
            completed = report.completed,
            abandoned = report.abandoned,
            "memory shut down"
        );
    }
}

/// Feeds the messages compaction is about to replace to memory extraction.
struct MemoryFlush(Memory);

#[async_trait::async_trait]
impl CompactionHook for MemoryFlush {
    async fn before_compaction(&self, turn: &harness_core::Turn, replaced: &[Arc<Msg>]) {
        let Some(call) = turn.ctx().get::<harness_fs::CallWorkspace>() else {
            return;
        };
        let Some(namespace) = NamespaceKey::for_call(turn.ctx()) else {
            return;
        };
        self.0.flush_before_compaction(
            Arc::clone(&call.user),
            &namespace,
            &turn.key().session_id,
            replaced.to_vec(),
        );
    }
}
