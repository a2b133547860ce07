//! Large tool-result eviction as a [`Capability`]: its `[tool_result_eviction]` section
//! ([`EvictionSection`], on by default), its builder setting
//! ([`HarnessAgentBuilder::tool_result_eviction`](crate::HarnessAgentBuilder::tool_result_eviction))
//! and its middleware at [`Layer::Eviction`]. The engine ([`ToolResultEviction`]) is
//! `harness_compaction::eviction`, re-exported here.

pub use harness_compaction::eviction::*;

use crate::capability::{Assembly, Capability, CapabilityError, ConfigSection, Layer, Registration, Setup};
use harness_core::Middleware;
use serde::Deserialize;
use std::sync::Arc;

/// `[tool_result_eviction]`: the eviction settings plus an on/off switch (`enabled`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(try_from = "toml::Table")]
pub struct EvictionSection {
    /// Set to `false` to turn eviction off (default on).
    pub enabled: bool,
    /// The settings.
    pub config: ToolResultEvictionConfig,
}

impl ConfigSection for EvictionSection {
    const KEY: &'static str = "tool_result_eviction";
}

impl TryFrom<toml::Table> for EvictionSection {
    type Error = String;

    fn try_from(mut table: toml::Table) -> Result<Self, String> {
        let enabled = match table.remove("enabled") {
            None => true,
            Some(toml::Value::Boolean(enabled)) => enabled,
            Some(other) => return Err(format!("`enabled` must be true or false, not {other}")),
        };
        // The settings refuse unknown keys themselves.
        let config = toml::Value::Table(table)
            .try_into()
            .map_err(|err: toml::de::Error| err.message().to_owned())?;
        Ok(Self { enabled, config })
    }
}

/// Eviction's entry in the capability registry.
pub(crate) const REGISTRATION: Registration =
    Registration::new("tool_result_eviction", build).with_section::<EvictionSection>();

/// The builder's choice (overrides `[tool_result_eviction]`).
#[derive(Clone)]
pub(crate) struct EvictionOverride(pub(crate) Option<ToolResultEvictionConfig>);

fn build(setup: &mut Setup<'_>) -> Result<Option<Arc<dyn Capability>>, CapabilityError> {
    let config = match setup.take::<EvictionOverride>() {
        Some(EvictionOverride(choice)) => choice,
        None => match setup.section::<EvictionSection>()? {
            Some(section) => section.enabled.then_some(section.config),
            None => Some(ToolResultEvictionConfig::default()),
        },
    };
    setup.inherit(EvictionOverride(config.clone()));
    let Some(config) = config else {
        return Ok(None);
    };
    let layer = ToolResultEviction::new(config).map_err(|err| CapabilityError::new(EvictionSection::KEY, err))?;
    Ok(Some(Arc::new(EvictionCapability(Arc::new(layer)))))
}

/// The capability: the middleware at [`Layer::Eviction`].
struct EvictionCapability(Arc<ToolResultEviction>);

impl Capability for EvictionCapability {
    fn name(&self) -> &'static str {
        EvictionSection::KEY
    }

    fn middleware(&self, _: &Assembly) -> Vec<(Layer, Arc<dyn Middleware>)> {
        vec![(Layer::Eviction, Arc::clone(&self.0) as Arc<dyn Middleware>)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_parses_and_refuses_unknown_keys() {
        let config = crate::HarnessConfig::parse(
            "[tool_result_eviction]\nenabled = false\nmax_chars = 100\n",
            std::path::Path::new("t"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let section = config
            .capability_section(EvictionSection::KEY)
            .cloned()
            .map(toml::Value::try_into::<EvictionSection>)
            .and_then(Result::ok)
            .unwrap_or_default();
        assert_eq!((section.enabled, section.config.max_chars), (false, 100));
        for (bad, named) in [
            ("[tool_result_eviction]\nmax_char = 1\n", "max_char"),
            ("[tool_result_eviction]\nenabled = 1\n", "enabled"),
        ] {
            let message = crate::HarnessConfig::parse(bad, std::path::Path::new("t"))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                message.contains(named) && message.contains("tool_result_eviction"),
                "{message}"
            );
        }
    }
}
