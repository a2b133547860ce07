//! Compaction as a [`Capability`] (the engine is the `harness-compaction` crate, re-exported
//! here): [`Compaction`] at [`Layer::Compaction`] when
//! `[compaction]` (or [`HarnessAgentBuilder::compaction`]) turns it on. When memory is on, the messages a compaction replaces are flushed into
//! memory extraction first.

use crate::capability::SlotKey;
use crate::capability::{Assembly, Capability, CapabilityError, Layer, Registration, Setup};
pub use harness_compaction::*;
use harness_core::{ChatModel, Middleware};
use std::sync::Arc;

/// Compaction's entry in the capability registry.
pub(crate) const REGISTRATION: Registration = Registration::new("compaction", build).with_section::<CompactionConfig>();

/// `[compaction]`: present = compaction on (off when absent).
impl crate::capability::ConfigSection for CompactionConfig {
    const KEY: &'static str = "compaction";
}

/// The builder's compaction settings (override `[compaction]`).
#[derive(Clone)]
pub(crate) struct CompactionOverride(pub(crate) CompactionConfig);

/// The model that writes summaries.
#[derive(Clone)]
pub(crate) struct SummaryModel(pub(crate) Arc<dyn ChatModel>);

fn build(setup: &mut Setup<'_>) -> Result<Option<Arc<dyn Capability>>, CapabilityError> {
    let config = match setup.take::<CompactionOverride>() {
        Some(CompactionOverride(config)) => Some(config),
        None => setup.section::<CompactionConfig>()?,
    };
    let summary_model = setup.take::<SummaryModel>().map(|SummaryModel(model)| model);
    let Some(config) = config else {
        return Ok(None);
    };
    let summary_model = summary_model.unwrap_or_else(|| Arc::clone(setup.model()));
    setup.inherit(CompactionOverride(config.clone()));
    setup.inherit(SummaryModel(Arc::clone(&summary_model)));
    let mut layer = Compaction::new(config, summary_model)
        .map_err(|err| CapabilityError::new("compaction", err))?
        .with_estimator(|msg| harness_core::estimate_msg(msg) as u64);
    if let Some(crate::facts::BeforeCompaction(hook)) = setup.provided::<crate::facts::BeforeCompaction>() {
        layer = layer.with_hook(Arc::clone(hook));
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
