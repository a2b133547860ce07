//! The capability's settings: `[subagents]` in harness.toml and what the builder adds (its
//! override of that section, declarations, the model resolver, the variables of remote
//! subagents' headers).

use super::MAX_DEPTH_LIMIT;
use super::declaration::{ParseOptions, SpecOrigin, SubagentDeclaration};
use crate::capability::ConfigSection;
use harness_core::ChatModel;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// `[subagents]` in harness.toml.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SubagentsConfig {
    /// Master switch (default on).
    pub enabled: bool,
    /// How deep delegation may go: 1 (default) makes children leaves; at most
    /// [`MAX_DEPTH_LIMIT`] (a larger value is refused when harness.toml is parsed).
    #[serde(deserialize_with = "depth_limit")]
    pub max_depth: u32,
    /// Spawns per reasoning step (default 4).
    pub max_fanout: u32,
    /// Spawns per call (default 16).
    pub max_spawns_per_call: u32,
    /// How long a task may run in all, sync or background, before it is stopped and ends
    /// `timeout` (default 600 s).
    #[serde(with = "seconds")]
    pub task_timeout: Duration,
    /// Tokens (input + output of every model call) one child may use per spawn; past it the
    /// child is stopped at its next step boundary and the task ends `failed` saying so.
    /// A declaration's `max_tokens` applies too (the smaller wins). Default: no budget.
    pub child_token_budget: Option<u64>,
    /// Tool names of agent files mapped to ours, before the built-in Claude Code table
    /// (`WebFetch = "mcp__fetch__fetch"`; see `harness_agents::claude::TOOL_TABLE`).
    pub tool_aliases: BTreeMap<String, String>,
    /// `model` aliases of agent files: `sonnet = "anthropic:claude-sonnet-4-5"`. A `model`
    /// that is neither an alias, `inherit` nor a spec uses the parent's model, with a warning.
    pub model_aliases: BTreeMap<String, String>,
    /// How long `agent_spawn` / `agent_send` wait for an answer when the model gives no
    /// `timeout_seconds` (default 30 s, at most 600): a slow local child needs more.
    #[serde(with = "seconds")]
    pub default_wait: Duration,
}

impl SubagentsConfig {
    /// What the declaration files are parsed with.
    pub fn parse_options(&self) -> ParseOptions {
        ParseOptions {
            tool_aliases: self.tool_aliases.clone(),
            model_aliases: self.model_aliases.clone(),
        }
    }
}

impl Default for SubagentsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_depth: 1,
            max_fanout: 4,
            max_spawns_per_call: 16,
            task_timeout: Duration::from_secs(600),
            child_token_budget: None,
            tool_aliases: BTreeMap::new(),
            model_aliases: BTreeMap::new(),
            default_wait: Duration::from_secs(30),
        }
    }
}

/// `max_depth`, refused past [`MAX_DEPTH_LIMIT`] with a message naming the key and the limit.
fn depth_limit<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
    let depth = u32::deserialize(deserializer)?;
    if depth > MAX_DEPTH_LIMIT {
        return Err(serde::de::Error::custom(format!(
            "max_depth = {depth} is above the limit of {MAX_DEPTH_LIMIT}; set max_depth to at most {MAX_DEPTH_LIMIT}"
        )));
    }
    Ok(depth)
}

mod seconds {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_secs)
    }
}

impl ConfigSection for SubagentsConfig {
    const KEY: &'static str = "subagents";
}

/// The builder's `[subagents]` override.
#[derive(Clone)]
pub(crate) struct ConfigOverride(pub(crate) SubagentsConfig);

/// Declarations added on the builder, in order.
#[derive(Default, Clone)]
pub(crate) struct Declared(pub(crate) Vec<SubagentDeclaration>);

/// Builds the model a `model` spec string names (a subagent's `model` key), with the same
/// syntax as `--model` and `[agent] model`. The error says why the spec cannot be used.
/// The [`SpecOrigin`] says who wrote the spec: a resolver sends a provider key to a base URL
/// named in the spec only for [`SpecOrigin::Operator`] ([`harness_models::ModelSpec::untrusted`]).
pub type ModelResolver = Arc<dyn Fn(&str, SpecOrigin) -> Result<Arc<dyn ChatModel>, String> + Send + Sync>;

/// The spec as parsed, marked untrusted when the operator did not write it.
pub(crate) fn parse_spec_from(
    spec: &str,
    origin: SpecOrigin,
) -> Result<harness_models::ModelSpec, harness_models::ModelConfigError> {
    let parsed = harness_models::ModelSpec::parse(spec)?;
    Ok(match origin {
        SpecOrigin::Operator => parsed,
        SpecOrigin::User => parsed.untrusted(),
    })
}

/// The resolver of a builder that was given none: [`harness_models::ModelSpec`] with no
/// environment (libraries read no variables), so `scripted:PATH`, `ollama:MODEL` and
/// explicit base URLs work and a provider that needs a key says which variable is missing.
pub(crate) fn default_resolver() -> ModelResolver {
    Arc::new(|spec: &str, origin: SpecOrigin| {
        parse_spec_from(spec, origin)
            .and_then(|parsed| parsed.build(&|_| None))
            .map_err(|err| err.to_string())
    })
}

/// The builder's resolver.
#[derive(Clone)]
pub(crate) struct ResolverSetting(pub(crate) ModelResolver);

/// Reads a variable for `${VAR}` in remote subagents' `headers` (libraries read no
/// environment: the caller decides what is visible).
pub type VariableLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The builder's variable lookup.
#[derive(Clone)]
pub(crate) struct VariablesSetting(pub(crate) VariableLookup);

/// The `subagents/` files of the workspace at `.0`, as the loader read them (so the build
/// does not read them again).
#[derive(Clone)]
pub(crate) struct FilesSetting(
    pub(crate) std::path::PathBuf,
    pub(crate) Arc<harness_agents::DeclarationFiles>,
);
