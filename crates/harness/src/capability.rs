//! [`Capability`]: the one seam through which a feature joins an agent.
//!
//! A capability contributes, each through one method of the trait:
//!
//! - its **tools** ([`Capability::tools`]);
//! - its **middleware**, each with its slot in the onion ([`Layer`]): the order is data, not
//!   the order of calls in `build()` ([`Capability::middleware`]);
//! - **prompt parts** for the stable section or the volatile tail of the system prompt the
//!   workspace context assembles ([`Capability::prompt_parts`]);
//! - the **session-state slots** it keeps in the session's state ([`Capability::session_slots`];
//!   two capabilities claiming one slot is a build error);
//! - **shutdown** within a deadline ([`Capability::shutdown`]).
//!
//! Its `harness.toml` section is a typed config it owns ([`ConfigSection`]: a serde type with
//! `deny_unknown_fields` and its key); [`HarnessConfig::parse`](crate::HarnessConfig::parse)
//! checks every registered section, so a typo is an error at load time that names the key.
//!
//! The built-in capabilities are listed once, in `REGISTRY`, in build order: a capability
//! may use what an earlier one provided (`Setup::provide`) (compaction asks for memory's
//! handle to flush facts before it replaces messages). Adding one means writing its module
//! (its `Registration`, its config section, its builder setting) and one line in
//! `REGISTRY`. Callers add their own with
//! [`HarnessAgentBuilder::capability`](crate::HarnessAgentBuilder::capability).

use crate::config::HarnessConfig;
use crate::workspace::WorkspaceManager;
use harness_core::{AgentId, ChatModel, Middleware, PromptPart, Tool};
use serde::de::DeserializeOwned;
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// The built-in capabilities, in build order (the onion order is each middleware's
/// [`Layer`]).
pub(crate) const REGISTRY: &[Registration] = &[
    crate::tools::files::REGISTRATION,
    crate::tools::shell::REGISTRATION,
    crate::memory::REGISTRATION,
    crate::compaction::capability::REGISTRATION,
    crate::eviction::REGISTRATION,
    // Before permissions: plan mode turns the permission check on.
    crate::plan_mode::REGISTRATION,
    // Before subagents: children are built with the parent's inherited policy.
    crate::permissions::REGISTRATION,
    crate::subagents::REGISTRATION,
    crate::prompt::REGISTRATION,
    crate::task_list::REGISTRATION,
    crate::structured::REGISTRATION,
];

/// The key of a typed session slot a capability keeps: only made from a
/// [`SessionSlot`](harness_core::SessionSlot) type, so a declaration names the type whose
/// `KEY` it stores under, never a free-standing string.
///
/// ```
/// use harness::capability::SlotKey;
/// #[derive(Default, serde::Serialize, serde::Deserialize)]
/// struct Todos(Vec<String>);
/// impl harness_core::SessionSlot for Todos {
///     const KEY: &'static str = "todos";
/// }
/// const SLOTS: &[SlotKey] = &[SlotKey::of::<Todos>()];
/// assert_eq!(SLOTS[0].key(), "todos");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlotKey(&'static str);

impl SlotKey {
    /// The key of slot type `S`.
    pub const fn of<S: harness_core::SessionSlot>() -> Self {
        Self(S::KEY)
    }

    /// The key in the session's state.
    pub const fn key(self) -> &'static str {
        self.0
    }
}

/// A middleware's slot in the onion, outermost first. Middlewares run in the order of their
/// layer (user middlewares outside all of them); two in one layer keep registration order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Layer {
    /// Session persistence: crash replay, transcript, session index (outermost built-in).
    Session,
    /// Long-term memory (fact extraction after calls).
    Memory,
    /// Context bounds: compaction, or the overflow hint.
    Compaction,
    /// Tool-result eviction (around each tool call).
    Eviction,
    /// Workspace extensions: the skills catalogue and the on-demand tool-group filter.
    Extensions,
    /// Subagents: spawn counters and the push-back of finished background tasks, before
    /// each reasoning step.
    Subagents,
    /// Plan mode (its gate and banner) and the task list reminder.
    Plan,
    /// Permissions: the allow / ask / deny decision on each tool call, after the schema
    /// check and right before the tool runs (the innermost acting layer).
    Permissions,
    /// The system prompt from the workspace (innermost).
    Context,
}

/// What a capability adds to an agent. Every method has an empty default, so a capability
/// implements only what it contributes.
#[async_trait::async_trait]
pub trait Capability: Send + Sync + 'static {
    /// A short name (`memory`, `compaction`, ...), for errors and logs.
    fn name(&self) -> &'static str;

    /// Tools offered to the model.
    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        Vec::new()
    }

    /// Middlewares, each with its [`Layer`]. `assembly` holds what every capability of the
    /// agent contributed (the prompt builder reads the prompt parts from it).
    fn middleware(&self, assembly: &Assembly) -> Vec<(Layer, Arc<dyn Middleware>)> {
        let _ = assembly;
        Vec::new()
    }

    /// Parts of the system prompt, fixed for the agent's life: `stable` parts join the
    /// cacheable section (after the workspace guide), the others the volatile tail.
    fn prompt_parts(&self) -> Vec<PromptPart> {
        Vec::new()
    }

    /// The session-state slots this capability keeps, by type ([`SlotKey::of`]). No two
    /// capabilities may claim one key (a build error).
    fn session_slots(&self) -> &'static [SlotKey] {
        &[]
    }

    /// Finishes background work before `deadline`; what is left is abandoned (and logged).
    async fn shutdown(&self, deadline: tokio::time::Instant) {
        let _ = deadline;
    }
}

/// What every capability of one agent contributed, given to [`Capability::middleware`].
#[derive(Debug, Default)]
pub struct Assembly {
    prompt_parts: Vec<PromptPart>,
}

impl Assembly {
    pub(crate) fn new(prompt_parts: Vec<PromptPart>) -> Self {
        Self { prompt_parts }
    }

    /// Every capability's prompt parts, in registration order.
    pub fn prompt_parts(&self) -> &[PromptPart] {
        &self.prompt_parts
    }
}

/// A capability's `harness.toml` section: a serde type that refuses unknown keys
/// (`#[serde(deny_unknown_fields)]`) under its own key.
pub trait ConfigSection: DeserializeOwned + Send + Sync + 'static {
    /// The section's key, e.g. `tool_result_eviction`.
    const KEY: &'static str;
}

/// Builds a registered capability, or `None` when it is turned off.
pub(crate) type BuildFn = fn(&mut Setup<'_>) -> Result<Option<Arc<dyn Capability>>, CapabilityError>;

/// A section check: parses the value, reports the parser's message.
pub(crate) type SectionCheck = fn(toml::Value) -> Result<(), String>;

/// How a built-in capability is made for one agent: an entry of `REGISTRY`.
#[derive(Clone, Copy)]
pub(crate) struct Registration {
    /// The `harness.toml` key it owns, with its check; `None` when it owns none (or its
    /// section is still a typed field of [`HarnessConfig`]).
    pub(crate) section: Option<(&'static str, SectionCheck)>,
    /// Builds the capability, or `None` when it is turned off.
    pub(crate) build: BuildFn,
}

impl Registration {
    /// A registration owning no section.
    pub(crate) const fn new(build: BuildFn) -> Self {
        Self { section: None, build }
    }

    /// A registration owning `T`'s section.
    pub(crate) const fn with_section<T: ConfigSection>(mut self) -> Self {
        self.section = Some((T::KEY, check_section::<T>));
        self
    }
}

fn check_section<T: ConfigSection>(value: toml::Value) -> Result<(), String> {
    value.try_into::<T>().map(drop).map_err(|err| err.message().to_owned())
}

/// The registered section check for `key`, if a capability owns it.
pub(crate) fn section_check(key: &str) -> Option<SectionCheck> {
    REGISTRY
        .iter()
        .filter_map(|registration| registration.section)
        .find(|(owned, _)| *owned == key)
        .map(|(_, check)| check)
}

/// Why a capability could not be built.
#[derive(Debug, thiserror::Error)]
#[error("{capability} configuration")]
pub struct CapabilityError {
    /// The capability.
    pub capability: &'static str,
    /// What is wrong.
    #[source]
    pub source: harness_core::BoxError,
}

impl CapabilityError {
    /// `capability` refused its configuration because of `source`.
    pub fn new(capability: &'static str, source: impl Into<harness_core::BoxError>) -> Self {
        Self {
            capability,
            source: source.into(),
        }
    }
}

/// Builder-level values keyed by type: each capability defines its own setting types and
/// the builder method that stores them, so the builder knows no capability.
#[derive(Default)]
pub(crate) struct Settings(HashMap<TypeId, Box<dyn Any + Send + Sync>>);

impl Settings {
    pub(crate) fn insert<T: Any + Send + Sync>(&mut self, value: T) {
        self.0.insert(TypeId::of::<T>(), Box::new(value));
    }

    pub(crate) fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.0.get(&TypeId::of::<T>()).and_then(|value| value.downcast_ref())
    }

    pub(crate) fn remove<T: Any + Send + Sync>(&mut self) -> Option<T> {
        let value = self.0.remove(&TypeId::of::<T>())?;
        value.downcast().ok().map(|boxed| *boxed)
    }

    pub(crate) fn get_or_default<T: Any + Send + Sync + Default>(&mut self) -> &mut T {
        let slot = self
            .0
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Box::new(T::default()));
        match slot.downcast_mut() {
            Some(value) => value,
            // The entry is keyed by `TypeId::of::<T>()`, so it always holds a `T`.
            None => unreachable!("settings entry of the wrong type"),
        }
    }
}

/// What a `Registration` sees while the agent is built.
pub(crate) struct Setup<'a> {
    pub(crate) config: &'a HarnessConfig,
    pub(crate) settings: &'a mut Settings,
    pub(crate) model: &'a Arc<dyn ChatModel>,
    pub(crate) agent_id: &'a AgentId,
    pub(crate) workspace: &'a Arc<WorkspaceManager>,
    pub(crate) root: &'a Path,
    pub(crate) isolation: harness_fs::IsolationScope,
    pub(crate) provided: Settings,
}

impl Setup<'_> {
    /// The builder's value of type `T`, taken (each setting has one reader).
    pub(crate) fn take<T: Any + Send + Sync>(&mut self) -> Option<T> {
        self.settings.remove::<T>()
    }

    /// `T`'s section of `harness.toml`, parsed (`None` when absent).
    pub(crate) fn section<T: ConfigSection>(&self) -> Result<Option<T>, CapabilityError> {
        self.config
            .capability_section(T::KEY)
            .cloned()
            .map(toml::Value::try_into::<T>)
            .transpose()
            .map_err(|err| CapabilityError::new(T::KEY, err.message().to_owned()))
    }

    /// Makes `value` available to capabilities built later.
    pub(crate) fn provide<T: Any + Send + Sync>(&mut self, value: T) {
        self.provided.insert(value);
    }

    /// A value an earlier capability provided.
    pub(crate) fn provided<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.provided.get::<T>()
    }
}

/// The capabilities of one agent, in registration order.
#[derive(Clone, Default)]
pub(crate) struct Capabilities(pub(crate) Arc<[Arc<dyn Capability>]>);

impl Capabilities {
    /// Shuts every capability down, last registered first, each within `deadline`.
    pub(crate) async fn shutdown(&self, deadline: tokio::time::Instant) {
        for capability in self.0.iter().rev() {
            if tokio::time::timeout_at(deadline, capability.shutdown(deadline))
                .await
                .is_err()
            {
                tracing::warn!(
                    capability = capability.name(),
                    "capability not shut down before the deadline"
                );
            }
        }
    }

    /// The names, for `Debug`.
    pub(crate) fn names(&self) -> Vec<&'static str> {
        self.0.iter().map(|capability| capability.name()).collect()
    }
}
