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
//! A capability joins an agent through a [`Registration`]: its name, the section it owns and
//! the function that builds it for one agent from a [`Setup`] (the builder's settings, the
//! configuration, the model, the workspace, and what earlier capabilities
//! [provided](Setup::provide)). This module knows no capability: the built-in ones are listed
//! once, in build order, by the composition root (`crate::builtins`), and callers add their
//! own with [`HarnessAgentBuilder::register`](crate::HarnessAgentBuilder::register) (or an
//! already built one with [`HarnessAgentBuilder::capability`](crate::HarnessAgentBuilder::capability)).
//! Capabilities that need each other meet through typed facts ([`crate::facts`], values
//! provided at build time, or on the call context), never through imports; a tidy test keeps
//! it so.
//!
//! What a child agent keeps of its parent is explicit: a capability records its resolved
//! settings with [`Setup::inherit`], and a child built from the parent's [`Inherited`] starts
//! from them.

use crate::config::HarnessConfig;
use crate::workspace::WorkspaceManager;
use harness_core::{AgentId, ChatModel, Middleware, PromptPart, Tool};
use serde::de::DeserializeOwned;
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

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
    /// The sandbox: binds the call's sandbox (its shell and work tree) around the whole call.
    Sandbox,
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

    /// Narrows the agent's final tool list (every capability's tools and the builder's are
    /// in it), e.g. an allow/deny list. Called in registration order.
    fn filter_tools(&self, tools: &mut Vec<Arc<dyn Tool>>) {
        let _ = tools;
    }

    /// Finishes background work before `deadline`; what is left is abandoned (and logged).
    /// Capabilities shut down last registered first, so one that depends on an earlier one
    /// (background children on the MCP servers they call) ends before it.
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
/// (`#[serde(deny_unknown_fields)]`) under its own key. It is decoded once, when the file is
/// parsed; each reader gets a clone of that value.
pub trait ConfigSection: DeserializeOwned + Clone + Send + Sync + 'static {
    /// The section's key, e.g. `tool_result_eviction`.
    const KEY: &'static str;
}

/// Builds a registered capability for one agent, or `None` when it is turned off.
pub type BuildFn = fn(&mut Setup<'_>) -> Result<Option<Arc<dyn Capability>>, CapabilityError>;

/// A section as its type decoded it (kept by the parsed file, see
/// [`HarnessConfig::section`](crate::HarnessConfig::section)).
pub type DecodedSection = Arc<dyn std::any::Any + Send + Sync>;

/// A section check: decodes the value, or reports the parser's message.
pub type SectionCheck = fn(toml::Value) -> Result<DecodedSection, String>;

/// How a capability is made for one agent: its name, the `harness.toml` section it owns
/// (checked when the file is parsed) and its build function. Built-in capabilities and a
/// caller's own use the same type.
///
/// ```
/// use harness::capability::{Capability, ConfigSection, Registration};
/// #[derive(Clone, serde::Deserialize)]
/// #[serde(deny_unknown_fields)]
/// struct Greeting { text: String }
/// impl ConfigSection for Greeting { const KEY: &'static str = "greeting"; }
/// struct Greeter;
/// impl Capability for Greeter { fn name(&self) -> &'static str { "greeter" } }
/// const GREETER: Registration = Registration::new("greeter", |setup| {
///     let on = setup.section::<Greeting>()?.is_some();
///     Ok(on.then(|| std::sync::Arc::new(Greeter) as std::sync::Arc<dyn Capability>))
/// })
/// .with_section::<Greeting>();
/// assert_eq!(GREETER.section_key(), Some("greeting"));
/// ```
#[derive(Clone, Copy)]
pub struct Registration {
    name: &'static str,
    section: Option<(&'static str, SectionCheck)>,
    build: BuildFn,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("name", &self.name)
            .field("section", &self.section_key())
            .finish_non_exhaustive()
    }
}

impl Registration {
    /// A registration named `name` (for errors) owning no section.
    pub const fn new(name: &'static str, build: BuildFn) -> Self {
        Self {
            name,
            section: None,
            build,
        }
    }

    /// A registration that only owns `T`'s section and builds nothing (a section another
    /// layer reads, such as `harness-serve`'s `[serve]`).
    pub const fn section_only<T: ConfigSection>(name: &'static str) -> Self {
        Self::new(name, |_| Ok(None)).with_section::<T>()
    }

    /// This registration also owns `T`'s section.
    pub const fn with_section<T: ConfigSection>(mut self) -> Self {
        self.section = Some((T::KEY, check_section::<T>));
        self
    }

    /// The capability's name.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The key of the section it owns.
    pub const fn section_key(&self) -> Option<&'static str> {
        match self.section {
            Some((key, _)) => Some(key),
            None => None,
        }
    }

    /// Builds it for one agent.
    ///
    /// # Errors
    /// What the build function refuses.
    pub fn build(&self, setup: &mut Setup<'_>) -> Result<Option<Arc<dyn Capability>>, CapabilityError> {
        (self.build)(setup)
    }
}

fn check_section<T: ConfigSection>(value: toml::Value) -> Result<DecodedSection, String> {
    value
        .try_into::<T>()
        .map(|section| Arc::new(section) as DecodedSection)
        .map_err(|err| err.message().to_owned())
}

/// The `harness.toml` sections a parse accepts beside the agent's own (`[agent]`,
/// `[filesystem]`, `[state]`, `[model]`): one per registration that owns one. A section no
/// registration owns is an error naming it.
#[derive(Debug, Clone, Default)]
pub struct Sections(Vec<Registration>);

impl Sections {
    /// The sections of `registrations`.
    pub fn of(registrations: impl IntoIterator<Item = Registration>) -> Self {
        Self(registrations.into_iter().filter(|r| r.section.is_some()).collect())
    }

    /// These sections and `registration`'s.
    #[must_use]
    pub fn with(mut self, registration: Registration) -> Self {
        if registration.section.is_some() {
            self.0.push(registration);
        }
        self
    }

    /// The check of `key`, if a registration owns it.
    pub(crate) fn check(&self, key: &str) -> Option<SectionCheck> {
        self.0
            .iter()
            .filter_map(|registration| registration.section)
            .find(|(owned, _)| *owned == key)
            .map(|(_, check)| check)
    }

    /// The owned keys, for messages.
    pub fn keys(&self) -> Vec<&'static str> {
        self.0.iter().filter_map(Registration::section_key).collect()
    }

    /// The first section key claimed twice: by two registrations, or by a registration and
    /// one of `harness.toml`'s own sections ([`OWN_SECTIONS`]). The later claim would be
    /// shadowed silently, so building or parsing with it is an error.
    pub fn clash(&self) -> Option<SectionClash> {
        self.0.iter().enumerate().find_map(|(at, later)| {
            let key = later.section_key()?;
            let first = if OWN_SECTIONS.contains(&key) {
                "harness.toml itself"
            } else {
                self.0[..at]
                    .iter()
                    .find(|earlier| earlier.section_key() == Some(key))?
                    .name
            };
            Some(SectionClash {
                key,
                first,
                second: later.name,
            })
        })
    }
}

/// The sections `HarnessConfig` reads itself; no registration may own one.
pub const OWN_SECTIONS: [&str; 6] = ["agent", "filesystem", "state", "model", "memory", "skills"];

/// Two owners of one `harness.toml` section ([`Sections::clash`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("section [{key}] is owned by both {first} and {second}; register each section once")]
pub struct SectionClash {
    /// The section key.
    pub key: &'static str,
    /// Its first owner.
    pub first: &'static str,
    /// The registration that claimed it again.
    pub second: &'static str,
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
/// the builder method that stores them ([`HarnessAgentBuilder::setting`](crate::HarnessAgentBuilder::setting)),
/// so the builder knows no capability.
#[derive(Default)]
pub struct Settings(HashMap<TypeId, Box<dyn Any + Send + Sync>>);

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings").field("values", &self.0.len()).finish()
    }
}

impl Settings {
    /// Stores `value` (replacing one of the same type).
    pub fn insert<T: Any + Send + Sync>(&mut self, value: T) {
        self.0.insert(TypeId::of::<T>(), Box::new(value));
    }

    /// The value of type `T`.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.0.get(&TypeId::of::<T>()).and_then(|value| value.downcast_ref())
    }

    /// Moves every value of `other` in (replacing values of the same types).
    pub fn extend(&mut self, other: Settings) {
        self.0.extend(other.0);
    }

    /// Takes the value of type `T` out.
    pub fn remove<T: Any + Send + Sync>(&mut self) -> Option<T> {
        let value = self.0.remove(&TypeId::of::<T>())?;
        value.downcast().ok().map(|boxed| *boxed)
    }

    /// The value of type `T`, inserted as `T::default()` when missing (for settings that
    /// accumulate).
    pub fn get_or_default<T: Any + Send + Sync + Default>(&mut self) -> &mut T {
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

/// A setting a child agent starts from: cloned into each child's builder.
type InheritFn = Arc<dyn Fn(&mut Settings) + Send + Sync>;

/// What a child agent keeps of its parent, explicitly: the parent's own tools, middlewares,
/// capabilities and registrations, its base prompt and step limit, its lease and state
/// store, its configuration, and each capability's resolved settings as that capability
/// recorded them ([`Setup::inherit`]). A child is built with
/// [`HarnessAgentBuilder::inherit`](crate::HarnessAgentBuilder::inherit), then narrowed by its
/// declaration.
#[derive(Clone, Default)]
pub struct Inherited {
    pub(crate) tools: Vec<Arc<dyn Tool>>,
    pub(crate) middleware: Vec<Arc<dyn Middleware>>,
    pub(crate) capabilities: Vec<Arc<dyn Capability>>,
    pub(crate) registrations: Vec<Registration>,
    pub(crate) sys_prompt: Option<String>,
    pub(crate) max_iters: Option<std::num::NonZeroU32>,
    pub(crate) session_lease: Option<Arc<dyn harness_core::SessionLease>>,
    pub(crate) state_store: Option<Arc<dyn harness_core::StateStore>>,
    pub(crate) config: HarnessConfig,
    pub(crate) root: std::path::PathBuf,
    pub(crate) filesystem: Option<Arc<dyn harness_fs::Filesystem>>,
    pub(crate) isolation: harness_fs::IsolationScope,
    /// The parent's depth (0 for an agent that is nobody's child).
    pub(crate) depth: u32,
    pub(crate) settings: Vec<(TypeId, &'static str, InheritFn)>,
}

impl std::fmt::Debug for Inherited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inherited")
            .field("tools", &self.tools.len())
            .field("capabilities", &self.capabilities.len())
            .field("settings", &self.setting_names())
            .finish_non_exhaustive()
    }
}

impl Inherited {
    /// Records `value` as a setting children start from (replacing an earlier one of its
    /// type).
    pub fn insert<T: Any + Clone + Send + Sync>(&mut self, value: T) {
        let id = TypeId::of::<T>();
        self.settings.retain(|(other, _, _)| *other != id);
        self.settings.push((
            id,
            std::any::type_name::<T>(),
            Arc::new(move |settings: &mut Settings| settings.insert(value.clone())),
        ));
    }

    /// The type names of the inherited settings, in the order they were recorded (for
    /// tests and `Debug`).
    pub fn setting_names(&self) -> Vec<&'static str> {
        self.settings.iter().map(|(_, name, _)| *name).collect()
    }

    /// Whether a setting of type `T` is inherited.
    pub fn has<T: Any>(&self) -> bool {
        self.settings.iter().any(|(id, _, _)| *id == TypeId::of::<T>())
    }

    /// The parent's configuration (a child is built from it).
    pub fn config(&self) -> &HarnessConfig {
        &self.config
    }

    /// The parent's base prompt (empty when it has none).
    pub fn sys_prompt_text(&self) -> String {
        self.sys_prompt.clone().unwrap_or_default()
    }

    /// The parent's depth: 0 for an agent that is nobody's child.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Seeds a child's builder settings.
    pub(crate) fn apply(&self, settings: &mut Settings) {
        for (_, _, apply) in &self.settings {
            apply(settings);
        }
    }
}

/// What a [`Registration`] sees while the agent is built.
pub struct Setup<'a> {
    pub(crate) config: &'a HarnessConfig,
    pub(crate) settings: &'a mut Settings,
    pub(crate) model: &'a Arc<dyn ChatModel>,
    pub(crate) agent_id: &'a AgentId,
    pub(crate) workspace: &'a Arc<WorkspaceManager>,
    pub(crate) root: &'a Path,
    pub(crate) isolation: harness_fs::IsolationScope,
    pub(crate) provided: Settings,
    pub(crate) inherited: &'a mut Inherited,
    pub(crate) recipe: Recipe,
    pub(crate) depth: u32,
}

/// The parent's [`Inherited`], complete once the agent is built, and how to build a child
/// from it: a capability that runs child agents keeps this and uses it at spawn time.
#[derive(Clone)]
pub struct Recipe {
    inherited: Arc<std::sync::OnceLock<Inherited>>,
    build: BuildChildFn,
}

impl std::fmt::Debug for Recipe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Recipe").field(&self.inherited.get()).finish()
    }
}

/// Builds a child agent from a [`ChildSpec`] (the agent module's builder).
pub type BuildChildFn = fn(ChildSpec) -> Result<Arc<dyn ChildAgent>, harness_core::BoxError>;

/// A child agent to build: the parent's recipe, narrowed by the child's declaration.
#[non_exhaustive]
pub struct ChildSpec {
    /// The parent's recipe.
    pub inherited: Inherited,
    /// The child's agent name.
    pub name: String,
    /// Its model.
    pub model: Arc<dyn ChatModel>,
    /// Its base prompt (its persona).
    pub sys_prompt: String,
    /// Its step limit, over the inherited one.
    pub max_iters: Option<std::num::NonZeroU32>,
    /// Builder settings over the inherited ones (e.g. a tool allow-list).
    pub settings: Settings,
    /// Middlewares outside the inherited ones.
    pub middleware: Vec<Arc<dyn Middleware>>,
}

impl ChildSpec {
    /// A child named `name` on `model` with the persona `sys_prompt`, from `inherited`.
    pub fn new(inherited: Inherited, name: String, model: Arc<dyn ChatModel>, sys_prompt: String) -> Self {
        Self {
            inherited,
            name,
            model,
            sys_prompt,
            max_iters: None,
            settings: Settings::default(),
            middleware: Vec::new(),
        }
    }
}

/// A built child agent as the capability that runs it sees it.
#[async_trait::async_trait]
pub trait ChildAgent: Send + Sync {
    /// Runs one turn, yielding its events.
    fn stream(&self, input: harness_core::AgentInput, ctx: harness_core::RuntimeContext) -> harness_core::AgentStream;
    /// Resumes a turn that waits for approval, yielding its events.
    fn resume_stream(
        &self,
        decisions: Vec<harness_core::ApprovalDecision>,
        ctx: harness_core::RuntimeContext,
    ) -> harness_core::AgentStream;
    /// Finishes the child's own background work within `timeout`.
    async fn shutdown(&self, timeout: std::time::Duration);
}

impl Recipe {
    pub(crate) fn new(build: BuildChildFn) -> Self {
        Self {
            inherited: Arc::default(),
            build,
        }
    }

    /// The parent's recipe; `None` only while the parent is still being built.
    pub fn get(&self) -> Option<&Inherited> {
        self.inherited.get()
    }

    /// Builds a child agent.
    ///
    /// # Errors
    /// What the child's build refuses (its configuration, its tools).
    pub fn build_child(&self, spec: ChildSpec) -> Result<Arc<dyn ChildAgent>, harness_core::BoxError> {
        (self.build)(spec)
    }

    pub(crate) fn set(&self, inherited: Inherited) {
        // Set once, by the build that made this recipe.
        let _ = self.inherited.set(inherited);
    }
}

/// A child's allow-list over the tools it inherited: a builder setting the agent applies
/// after every capability's tools and filters. A name the agent lacks is a warning; a list
/// that leaves no tool is a build error (a child is never silently toolless).
#[derive(Debug, Clone)]
pub struct ToolAllowList(pub Vec<String>);

/// A child's deny-list (a declaration's `disallowedTools`), applied with [`ToolAllowList`].
#[derive(Debug, Clone)]
pub struct ToolDenyList(pub Vec<String>);

impl Setup<'_> {
    /// The builder's value of type `T`, taken (each setting has one reader).
    pub fn take<T: Any + Send + Sync>(&mut self) -> Option<T> {
        self.settings.remove::<T>()
    }

    /// `T`'s section of `harness.toml`, parsed (`None` when absent).
    ///
    /// # Errors
    /// [`CapabilityError`] naming the section when it does not parse.
    pub fn section<T: ConfigSection>(&self) -> Result<Option<T>, CapabilityError> {
        self.config
            .decoded_section::<T>()
            .map_err(|err| CapabilityError::new(T::KEY, err.message().to_owned()))
    }

    /// Makes `value` available to capabilities built later (a typed fact).
    pub fn provide<T: Any + Send + Sync>(&mut self, value: T) {
        self.provided.insert(value);
    }

    /// A value an earlier capability provided.
    pub fn provided<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.provided.get::<T>()
    }

    /// Records `value` as the setting a child agent of this one starts from.
    pub fn inherit<T: Any + Clone + Send + Sync>(&mut self, value: T) {
        self.inherited.insert(value);
    }

    /// This agent's recipe for its children (complete once the agent is built).
    pub fn recipe(&self) -> Recipe {
        self.recipe.clone()
    }

    /// The whole configuration.
    pub fn config(&self) -> &HarnessConfig {
        self.config
    }

    /// The agent's model.
    pub fn model(&self) -> &Arc<dyn ChatModel> {
        self.model
    }

    /// The agent's id.
    pub fn agent_id(&self) -> &AgentId {
        self.agent_id
    }

    /// The workspace.
    pub fn workspace(&self) -> &Arc<WorkspaceManager> {
        self.workspace
    }

    /// The workspace directory.
    pub fn root(&self) -> &Path {
        self.root
    }

    /// The agent's session lease, when the builder was given one.
    pub fn session_lease(&self) -> Option<&Arc<dyn harness_core::SessionLease>> {
        self.inherited.session_lease.as_ref()
    }

    /// How runtime data is partitioned.
    pub fn isolation(&self) -> harness_fs::IsolationScope {
        self.isolation
    }

    /// How deep this agent is: 0 for an agent that is nobody's child, 1 for its children...
    pub fn depth(&self) -> u32 {
        self.depth
    }
}

/// The capabilities of one agent, in registration order.
#[derive(Clone, Default)]
pub(crate) struct Capabilities {
    /// Every capability, in registration order: the agent's own, then those its parent
    /// shares with it.
    pub(crate) all: Arc<[Arc<dyn Capability>]>,
    /// How many of `all` are the agent's own (the rest belong to its parent).
    pub(crate) owned: usize,
}

impl Capabilities {
    /// Shuts the agent's own capabilities down, last registered first, each within
    /// `deadline` (what a parent shares with it is the parent's to stop).
    pub(crate) async fn shutdown(&self, deadline: tokio::time::Instant) {
        for capability in self.all[..self.owned].iter().rev() {
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
        self.all.iter().map(|capability| capability.name()).collect()
    }
}
