//! Compaction as a [`Capability`]: [`Compaction`] at [`Layer::Compaction`] when
//! `[compaction]` (or [`HarnessAgentBuilder::compaction`]) turns it on. When memory is on, the messages a compaction replaces are flushed into
//! memory extraction first.

use super::{Compaction, CompactionConfig, CompactionState};
use crate::HarnessAgentBuilder;
use crate::capability::SlotKey;
use crate::capability::{Assembly, Capability, CapabilityError, Layer, Registration, Setup};
use harness_core::{ChatModel, Middleware};
use harness_memory::Memory;
use std::sync::Arc;

/// Compaction's entry in the capability registry.
pub(crate) const REGISTRATION: Registration = Registration::new(build);

/// The builder's compaction settings (override `[compaction]`).
struct CompactionOverride(CompactionConfig);

/// The model that writes summaries.
struct SummaryModel(Arc<dyn ChatModel>);

impl HarnessAgentBuilder {
    /// Turns conversation compaction on with `config` (also `[compaction]` in harness.toml).
    pub fn compaction(self, config: CompactionConfig) -> Self {
        self.setting(CompactionOverride(config))
    }

    /// The model that writes compaction summaries (default: the agent's model). The CLI
    /// resolves `[compaction] model` into this.
    pub fn compaction_model(self, model: Arc<dyn ChatModel>) -> Self {
        self.setting(SummaryModel(model))
    }
}

fn build(setup: &mut Setup<'_>) -> Result<Option<Arc<dyn Capability>>, CapabilityError> {
    let config = setup
        .take::<CompactionOverride>()
        .map(|CompactionOverride(config)| config)
        .or_else(|| setup.config.compaction.clone());
    let summary_model = setup.take::<SummaryModel>().map(|SummaryModel(model)| model);
    let Some(config) = config else {
        return Ok(None);
    };
    let summary_model = summary_model.unwrap_or_else(|| Arc::clone(setup.model));
    let mut layer = Compaction::new(config, summary_model)
        .map_err(|err| CapabilityError::new("compaction", err))?
        .with_estimator(|msg| harness_core::estimate_msg(msg) as u64);
    if let Some(memory) = setup.provided::<Memory>() {
        layer = layer.with_hook(Arc::new(crate::memory::MemoryFlush(memory.clone())));
    }
    Ok(Some(Arc::new(CompactionCapability {
        layer: Arc::new(layer),
        slots: SLOTS,
    })))
}

/// Compaction keeps its summaries and boundary in one session slot.
const SLOTS: &[SlotKey] = &[SlotKey::of::<CompactionState>()];

/// The capability: compaction.
struct CompactionCapability {
    layer: Arc<dyn Middleware>,
    slots: &'static [SlotKey],
}

impl Capability for CompactionCapability {
    fn name(&self) -> &'static str {
        "compaction"
    }

    fn middleware(&self, _: &Assembly) -> Vec<(Layer, Arc<dyn Middleware>)> {
        vec![(Layer::Compaction, Arc::clone(&self.layer))]
    }

    fn session_slots(&self) -> &'static [SlotKey] {
        self.slots
    }
}
