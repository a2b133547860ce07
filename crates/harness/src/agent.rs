//! [`HarnessAgent`]: the kernel plus the workspace, sessions and isolation.

use crate::capability::{
    Assembly, Capabilities, Capability, CapabilityError, ChildAgent, ChildSpec, Inherited, Layer, Recipe, Registration,
    Settings, Setup, ToolAllowList, ToolDenyList,
};
use crate::config::HarnessConfig;
use crate::session::SessionPersistence;
use crate::workspace::WorkspaceManager;
use harness_core::{
    AgentError, AgentInput, AgentStream, ChatModel, EventKind, EventSink, FencingToken, LeaseError, Middleware, Msg,
    ReActAgent, RuntimeContext, SessionLease, StateStore, Tool, error_chain,
};
use harness_fs::{Filesystem, IsolationScope, WsPath};
use harness_memory::Memory;
use std::any::Any;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::Arc;

use crate::config::{DEFAULT_AGENT_NAME, DEFAULT_WORKSPACE};

/// Why a [`HarnessAgent`] could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// No model was set.
    #[error("no model set; call `.model(...)` on the builder (the CLI takes --model or HARNESS_MODEL)")]
    MissingModel,
    /// The kernel refused the configuration (duplicate tools, bad schema, bad name).
    #[error(transparent)]
    Kernel(#[from] harness_core::BuildError),
    /// The workspace filesystem could not be opened.
    #[error("cannot open the workspace {path}")]
    Workspace {
        /// The workspace directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: harness_fs::FsError,
    },
    /// The agent name is not a valid id.
    #[error("agent name")]
    Name(#[from] harness_core::IdError),
    /// A capability's configuration is invalid.
    #[error("{capability} configuration")]
    Capability {
        /// The capability.
        capability: &'static str,
        /// What is wrong.
        #[source]
        source: harness_core::BoxError,
    },
    /// Two registrations own one `harness.toml` section.
    #[error(transparent)]
    SectionClash(#[from] crate::capability::SectionClash),
    /// The filesystem keeps files other replicas share while the state store keeps the
    /// state and the session lease on one host.
    #[error(
        "the filesystem {filesystem} shares files across replicas but the state store is replica-local: \
         give the builder a shared state store (.state_store(..), [state] kind = \"redis\" or \"postgres\")"
    )]
    ReplicaLocalState {
        /// The filesystem's description.
        filesystem: String,
    },
    /// Two capabilities keep their session state under one key.
    #[error("session slot `{slot}` is claimed by both {first} and {second}")]
    SlotClash {
        /// The key.
        slot: &'static str,
        /// The capability registered first.
        first: &'static str,
        /// The other one.
        second: &'static str,
    },
}

impl From<CapabilityError> for BuildError {
    fn from(err: CapabilityError) -> Self {
        Self::Capability {
            capability: err.capability,
            source: err.source,
        }
    }
}

/// Assembles a [`HarnessAgent`]; nothing is checked until [`build`](Self::build).
///
/// Settings of a capability (`.memory(..)`, `.compaction(..)`, `.tool_result_eviction(..)`,
/// ...) are defined in that capability's module; see [`crate::capability`].
#[derive(Default)]
#[must_use = "a builder does nothing until `.build()`"]
pub struct HarnessAgentBuilder {
    workspace: Option<PathBuf>,
    config: HarnessConfig,
    name: Option<String>,
    model: Option<Arc<dyn ChatModel>>,
    sys_prompt: Option<String>,
    max_iters: Option<NonZeroU32>,
    isolation: Option<IsolationScope>,
    tools: Vec<Arc<dyn Tool>>,
    middleware: Vec<Arc<dyn Middleware>>,
    capabilities: Vec<Arc<dyn Capability>>,
    /// Capabilities a parent shares with this child: used, never shut down by the child.
    shared_capabilities: Vec<Arc<dyn Capability>>,
    registrations: Vec<Registration>,
    filesystem: Option<Arc<dyn Filesystem>>,
    state_store: Option<Arc<dyn StateStore>>,
    cross_process_lock: Option<bool>,
    settings: Settings,
    session_lease: Option<Arc<dyn SessionLease>>,
    write_fence: Option<crate::state::WriteFence>,
    depth: u32,
}

impl HarnessAgentBuilder {
    /// The workspace directory (default `./.harness/workspace`; the CLI also honours
    /// `HARNESS_WORKSPACE`).
    pub fn workspace(mut self, dir: impl Into<PathBuf>) -> Self {
        self.workspace = Some(dir.into());
        self
    }

    /// Values from `harness.toml`; anything set on the builder wins over them.
    pub fn config(mut self, config: HarnessConfig) -> Self {
        self.config = config;
        self
    }

    /// The agent name (a path segment under `agents/`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The model.
    pub fn model(mut self, model: impl ChatModel) -> Self {
        self.model = Some(Arc::new(model));
        self
    }

    /// The model, already shared.
    pub fn shared_model(mut self, model: Arc<dyn ChatModel>) -> Self {
        self.model = Some(model);
        self
    }

    /// The base system prompt (workspace sections are added after it).
    pub fn sys_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.sys_prompt = Some(prompt.into());
        self
    }

    /// Maximum reasoning-acting steps per call (default 10).
    pub fn max_iters(mut self, max: NonZeroU32) -> Self {
        self.max_iters = Some(max);
        self
    }

    /// How runtime data is partitioned (default: per user).
    pub fn isolation(mut self, scope: IsolationScope) -> Self {
        self.isolation = Some(scope);
        self
    }

    /// Adds a tool.
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Adds a middleware. User middlewares run outside the built-in ones, first added outermost.
    pub fn middleware(mut self, middleware: Arc<dyn Middleware>) -> Self {
        self.middleware.push(middleware);
        self
    }

    /// Adds a capability of the caller's own, already built, after the built-in and
    /// registered ones: its tools, its middlewares at their
    /// [`Layer`](crate::capability::Layer)s, its prompt parts, its session slots and its
    /// shutdown. Children share it.
    pub fn capability(mut self, capability: Arc<dyn Capability>) -> Self {
        self.capabilities.push(capability);
        self
    }

    /// Registers a capability of the caller's own, built for this agent (and for each of its
    /// children) after the built-in ones, exactly like them: its build function sees the
    /// [`Setup`] (its section of `harness.toml`, its builder settings, what earlier
    /// capabilities provided). Its section must also be known when the file is parsed
    /// ([`HarnessConfig::parse_with`], [`WorkspaceLoader::register`](crate::WorkspaceLoader::register)).
    pub fn register(mut self, registration: Registration) -> Self {
        self.registrations.push(registration);
        self
    }

    /// Stores a builder setting of type `T`, read by the capability that defines `T`
    /// ([`Setup::take`]).
    pub fn setting<T: Any + Send + Sync>(mut self, value: T) -> Self {
        self.settings.insert(value);
        self
    }

    /// Starts from what a parent agent's children keep of it ([`Inherited`]): its workspace,
    /// filesystem, configuration, tools, middlewares, capabilities, registrations, prompt,
    /// step limit, lease, state store and each capability's resolved settings. Used by the
    /// capabilities that build child agents.
    pub fn inherit(mut self, from: &Inherited) -> Self {
        self.workspace = Some(from.root.clone());
        self.filesystem = from.filesystem.clone();
        self.config = from.config.clone();
        self.isolation = Some(from.isolation);
        self.tools.extend(from.tools.iter().cloned());
        self.middleware.extend(from.middleware.iter().cloned());
        self.shared_capabilities.extend(from.capabilities.iter().cloned());
        self.registrations.extend(from.registrations.iter().copied());
        self.sys_prompt = from.sys_prompt.clone();
        self.max_iters = from.max_iters;
        self.session_lease = from.session_lease.clone();
        self.state_store = from.state_store.clone();
        self.depth = from.depth + 1;
        from.apply(&mut self.settings);
        self
    }

    /// The workspace filesystem (default: the local directory).
    pub fn filesystem(mut self, fs: Arc<dyn Filesystem>) -> Self {
        self.filesystem = Some(fs);
        self
    }

    /// Where agent state lives (default: JSON files in the workspace).
    pub fn state_store(mut self, store: Arc<dyn StateStore>) -> Self {
        self.state_store = Some(store);
        self
    }

    /// Whether turns of a session are also serialised across processes with lock files in
    /// the workspace's `.harness/locks/` (default: on whenever the workspace directory
    /// exists, whatever the filesystem kind). `false` keeps the in-process lease only.
    /// Ignored when [`session_lease`](Self::session_lease) is set.
    pub fn cross_process_lock(mut self, enabled: bool) -> Self {
        self.cross_process_lock = Some(enabled);
        self
    }

    /// Who may run a turn of a session now (default: a `FileLease` under the workspace's
    /// `.harness/locks/` when the workspace directory exists, else a `LocalLease`). A turn
    /// holds the lease from before its state is loaded until after it is saved.
    pub fn session_lease(mut self, lease: Arc<dyn SessionLease>) -> Self {
        self.session_lease = Some(lease);
        self
    }

    /// How a turn's writes to shared files carry its lease's fencing token: given the
    /// turn's lease key and token, the fence its filesystem writes check
    /// ([`Filesystem::fenced`](harness_fs::Filesystem::fenced)). Set by `[state] kind =
    /// "redis"` (`RedisLease::kv_fence`); without it only the state save is fenced.
    pub fn write_fence(mut self, fence: crate::state::WriteFence) -> Self {
        self.write_fence = Some(fence);
        self
    }

    /// The capability settings, for settings that accumulate.
    pub(crate) fn settings_mut(&mut self) -> &mut Settings {
        &mut self.settings
    }

    /// The configuration, for builder methods that set a capability's section (subagents
    /// are built from it, so they get the same setting).
    pub(crate) fn config_mut(&mut self) -> &mut HarnessConfig {
        &mut self.config
    }

    /// Validates and builds.
    ///
    /// # Errors
    /// [`BuildError`] when no model is set, the workspace cannot be opened, a capability
    /// refuses its configuration, two capabilities claim one session slot, or the kernel
    /// refuses the tools or the name.
    pub fn build(mut self) -> Result<HarnessAgent, BuildError> {
        let file = self.config.agent.clone();
        let model = self.model.ok_or(BuildError::MissingModel)?;
        let root = self.workspace.unwrap_or_else(|| PathBuf::from(DEFAULT_WORKSPACE));
        let name = self.name.or(file.name).unwrap_or_else(|| DEFAULT_AGENT_NAME.to_owned());
        let agent_id = harness_core::AgentId::parse(name.clone())?;
        let scope = self.isolation.or(file.isolation).unwrap_or_default();
        let local = self.filesystem.is_none();
        let fs: Arc<dyn Filesystem> = match self.filesystem {
            Some(fs) => fs,
            None => {
                std::fs::create_dir_all(&root).map_err(|err| BuildError::Workspace {
                    path: root.clone(),
                    source: harness_fs::FsError::Io {
                        path: WsPath::root(),
                        operation: "create",
                        source: Box::new(err),
                    },
                })?;
                // Atomic writes without fsync: a process crash loses nothing; `[filesystem]
                // fsync = true` (through `crate::filesystem::open`) also survives a power loss.
                let local = harness_fs::LocalFs::new(&root).map_err(|source| BuildError::Workspace {
                    path: root.clone(),
                    source,
                })?;
                Arc::new(local.fsync(false))
            }
        };
        let template: Option<Arc<dyn Filesystem>> = if local {
            None
        } else {
            harness_fs::LocalFs::new(&root)
                .ok()
                .map(|fs| Arc::new(fs) as Arc<dyn Filesystem>)
        };
        let workspace = Arc::new(WorkspaceManager::new(
            root.clone(),
            fs,
            template,
            scope,
            agent_id.clone(),
        ));
        let store: Arc<dyn StateStore> = self.state_store.clone().unwrap_or_else(|| {
            Arc::new(harness_store::FileStateStore::with_layout(
                root.clone(),
                harness_fs::state_layout(),
            ))
        });
        if workspace.filesystem().spans_replicas() && store.replica_local() {
            return Err(BuildError::ReplicaLocalState {
                filesystem: workspace.filesystem().describe(),
            });
        }

        // What a child inherits: the parent's own tools, middlewares, capabilities and
        // registrations (a permission capability or middleware on the parent applies to its
        // children), then each capability's resolved settings, recorded while it is built.
        let sys_prompt = self.sys_prompt.clone().or_else(|| file.sys_prompt.clone());
        let max_iters = self.max_iters.or_else(|| file.max_iters.and_then(NonZeroU32::new));
        let mut inherited = Inherited {
            tools: self.tools.clone(),
            middleware: self.middleware.clone(),
            capabilities: self
                .capabilities
                .iter()
                .chain(&self.shared_capabilities)
                .cloned()
                .collect(),
            registrations: self.registrations.clone(),
            sys_prompt: sys_prompt.clone(),
            max_iters,
            session_lease: self.session_lease.clone(),
            state_store: self.state_store.clone(),
            config: self.config.clone(),
            root: root.clone(),
            filesystem: Some(Arc::clone(workspace.filesystem())),
            isolation: scope,
            depth: self.depth,
            ..Inherited::default()
        };
        let recipe = Recipe::new(build_child);
        let allow = self.settings.remove::<ToolAllowList>();
        let deny = self.settings.remove::<ToolDenyList>();
        let registrations: Vec<Registration> = crate::builtins::registrations()
            .into_iter()
            .chain(self.registrations.iter().copied())
            .collect();
        if let Some(clash) = crate::capability::Sections::of(registrations.iter().copied()).clash() {
            return Err(clash.into());
        }
        let (capabilities, provided) = assemble_capabilities(
            Setup {
                config: &self.config,
                settings: &mut self.settings,
                model: &model,
                agent_id: &agent_id,
                workspace: &workspace,
                root: &root,
                isolation: scope,
                provided: Settings::default(),
                inherited: &mut inherited,
                recipe: recipe.clone(),
                depth: self.depth,
            },
            &registrations,
            self.capabilities,
            self.shared_capabilities,
        )?;
        recipe.set(inherited);
        let mut kernel = ReActAgent::builder()
            .name(name)
            .shared_model(model)
            .sys_prompt(sys_prompt.unwrap_or_default())
            .state_store(Arc::clone(&store));
        let mut tools = self.tools;
        for capability in capabilities.all.iter() {
            tools.extend(capability.tools());
        }
        // Filters (tools.json's allow/deny) apply after every tool is registered, built-ins
        // included.
        for capability in capabilities.all.iter() {
            capability.filter_tools(&mut tools);
        }
        // A child's declared allow-list narrows what it inherited.
        if let Some(ToolAllowList(allow)) = allow {
            let missing: Vec<&str> = allow
                .iter()
                .map(String::as_str)
                .filter(|name| !tools.iter().any(|tool| tool.spec().name == *name))
                .collect();
            if !missing.is_empty() {
                tracing::warn!(agent = %agent_id, "tools ignored, the agent has none of that name: {}", missing.join(", "));
            }
            tools.retain(|tool| allow.iter().any(|name| *name == tool.spec().name));
            if tools.is_empty() {
                return Err(CapabilityError::new(
                    "subagents",
                    format!(
                        "none of its tools ({}) exists here, so it would have no tools: name tools the parent has, \
                         or map them with `[subagents] tool_aliases`",
                        allow.join(", ")
                    ),
                )
                .into());
            }
        }
        if let Some(ToolDenyList(deny)) = deny {
            tools.retain(|tool| !deny.iter().any(|name| *name == tool.spec().name));
        }
        kernel = kernel.tools(tools);
        if let Some(max) = max_iters {
            kernel = kernel.max_iters(max);
        }
        // User middlewares outermost, then every capability's, ordered by layer.
        for layer in self.middleware {
            kernel = kernel.middleware(layer);
        }
        let sessions = Arc::new(SessionPersistence::default());
        let mut layers: Vec<(Layer, Arc<dyn Middleware>)> =
            vec![(Layer::Session, Arc::clone(&sessions) as Arc<dyn Middleware>), {
                // Right inside: control calls, the session inbox, the shutdown flag.
                let inbox = harness_store::control::SessionInbox::new(Arc::clone(&store));
                (
                    Layer::Session,
                    Arc::new(harness_store::control::SessionControl::new(inbox)),
                )
            }];
        let assembly = Assembly::new(capabilities.all.iter().flat_map(|c| c.prompt_parts()).collect());
        for capability in capabilities.all.iter() {
            layers.extend(capability.middleware(&assembly));
        }
        // A stable sort: one layer keeps registration order.
        layers.sort_by_key(|(layer, _)| *layer);
        let onion: Arc<[&'static str]> = layers.iter().map(|(_, layer)| layer.name()).collect();
        for (_, layer) in layers {
            kernel = kernel.middleware(layer);
        }
        // Lock files whenever there is a local workspace directory, whatever serves the
        // files: processes sharing the directory share the locks.
        let lease = self.session_lease.unwrap_or_else(|| {
            if self.cross_process_lock.unwrap_or_else(|| root.is_dir()) {
                Arc::new(harness_store::FileLease::new(root.join(".harness").join("locks")))
            } else {
                Arc::new(harness_store::LocalLease::default())
            }
        });
        Ok(HarnessAgent {
            kernel: kernel.build()?,
            workspace,
            lease,
            write_fence: self.write_fence,
            sessions,
            provided: Arc::new(provided),
            capabilities,
            onion,
        })
    }
}

/// Builds a child agent for a capability that runs children ([`Recipe::build_child`]).
fn build_child(spec: ChildSpec) -> Result<Arc<dyn ChildAgent>, harness_core::BoxError> {
    let mut builder = HarnessAgent::builder()
        .inherit(&spec.inherited)
        .name(spec.name)
        .shared_model(spec.model)
        .sys_prompt(spec.sys_prompt);
    if let Some(steps) = spec.max_iters {
        builder = builder.max_iters(steps);
    }
    builder.settings.extend(spec.settings);
    for middleware in spec.middleware {
        builder = builder.middleware(middleware);
    }
    Ok(Arc::new(builder.build()?))
}

#[async_trait::async_trait]
impl ChildAgent for HarnessAgent {
    fn stream(&self, input: AgentInput, ctx: RuntimeContext) -> AgentStream {
        HarnessAgent::stream(self, input, ctx)
    }

    fn resume_stream(&self, decisions: Vec<harness_core::ApprovalDecision>, ctx: RuntimeContext) -> AgentStream {
        HarnessAgent::resume_stream(self, decisions, ctx)
    }

    async fn shutdown(&self, timeout: std::time::Duration) {
        HarnessAgent::shutdown(self, timeout).await;
    }
}

/// Builds the registered capabilities in order, then the caller's; checks that no session
/// slot is claimed twice. Also returns what the capabilities provided (memory's handle when
/// memory is on, the permission policy when permissions are on).
fn assemble_capabilities(
    mut setup: Setup<'_>,
    registrations: &[Registration],
    extra: Vec<Arc<dyn Capability>>,
    shared: Vec<Arc<dyn Capability>>,
) -> Result<(Capabilities, Settings), BuildError> {
    let mut built = Vec::new();
    for registration in registrations {
        if let Some(capability) = registration.build(&mut setup)? {
            built.push(capability);
        }
    }
    built.extend(extra);
    let owned = built.len();
    built.extend(shared);
    let mut slots: std::collections::HashMap<&'static str, &'static str> = std::collections::HashMap::new();
    for capability in &built {
        for slot in capability.session_slots() {
            let slot = slot.key();
            if let Some(first) = slots.insert(slot, capability.name()) {
                return Err(BuildError::SlotClash {
                    slot,
                    first,
                    second: capability.name(),
                });
            }
        }
    }
    Ok((
        Capabilities {
            all: built.into(),
            owned,
        },
        setup.provided,
    ))
}

/// A ReAct agent with a file-based workspace, durable sessions and per-user isolation.
///
/// Immutable and cheap to clone: one agent serves any number of users and sessions at
/// once. Turns of one session are served one at a time in arrival order (also across
/// processes sharing a local workspace); different sessions run in parallel.
///
/// A call without a user id runs as user `default`; without a session id, in session
/// `default`. Ids must be safe path segments (letters, digits, `-_.@:`).
#[derive(Clone)]
pub struct HarnessAgent {
    kernel: ReActAgent,
    workspace: Arc<WorkspaceManager>,
    lease: Arc<dyn SessionLease>,
    write_fence: Option<crate::state::WriteFence>,
    sessions: Arc<SessionPersistence>,
    /// What the capabilities provided while the agent was built (typed facts: memory's
    /// handle, the permission policy, ...).
    provided: Arc<Settings>,
    capabilities: Capabilities,
    onion: Arc<[&'static str]>,
}

/// The session lease was lost while the turn ran.
#[derive(Debug, thiserror::Error)]
#[error("the session lease was lost while the turn ran (another holder took the session); the turn was cancelled")]
struct LeaseLost;

fn lease_error(err: impl Into<harness_core::BoxError>) -> AgentError {
    AgentError::Capability {
        capability: "session_lease",
        source: err.into(),
    }
}

const _: fn() = || {
    fn shared<T: Send + Sync + 'static>() {}
    shared::<HarnessAgent>();
};

impl std::fmt::Debug for HarnessAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HarnessAgent")
            .field("kernel", &self.kernel)
            .field("workspace", &self.workspace)
            .field("capabilities", &self.capabilities.names())
            .finish()
    }
}

impl HarnessAgent {
    /// A new builder.
    pub fn builder() -> HarnessAgentBuilder {
        HarnessAgentBuilder::default()
    }

    /// The kernel agent.
    pub fn kernel(&self) -> &ReActAgent {
        &self.kernel
    }

    /// The workspace.
    pub fn workspace(&self) -> &Arc<WorkspaceManager> {
        &self.workspace
    }

    /// The names of the capabilities this agent was built with, in registration order.
    pub fn capabilities(&self) -> Vec<&'static str> {
        self.capabilities.names()
    }

    /// The names of the capabilities' middlewares in onion order, outermost first (the
    /// builder's own middlewares, which run outside all of them, are not listed).
    pub fn middleware_order(&self) -> &[&'static str] {
        &self.onion
    }

    /// A value of type `T` a capability provided while this agent was built (a typed
    /// fact, e.g. memory's [`Memory`] handle).
    pub fn provided<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.provided.get::<T>()
    }

    /// Long-term memory, when enabled.
    pub fn memory(&self) -> Option<&Memory> {
        self.provided::<Memory>()
    }

    /// The permission policy, when permissions are on. A child agent built from this one
    /// keeps [`Policy::inherited`](harness_policy::Policy::inherited).
    pub fn permission_policy(&self) -> Option<&Arc<harness_policy::Policy>> {
        self.provided::<Arc<harness_policy::Policy>>()
    }

    /// Writes the queued session-index updates (`sessions.json` is written behind, at most
    /// [`INDEX_FLUSH_INTERVAL`](crate::session::INDEX_FLUSH_INTERVAL) after a call; see
    /// [`SessionPersistence`]). Transcripts and state are always on disk when a call returns.
    ///
    /// # Errors
    /// [`AgentError::Capability`] when an index file cannot be written (the updates stay
    /// queued).
    pub async fn flush_sessions(&self) -> Result<(), AgentError> {
        self.sessions.flush_index().await
    }

    /// Finishes background work (queued session-index updates, then every capability's:
    /// pending memory extractions, ...) within `timeout` in all. Call it before the process
    /// exits; calls made afterwards still work but schedule nothing new.
    pub async fn shutdown(&self, timeout: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        match tokio::time::timeout_at(deadline, self.flush_sessions()).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::warn!(error = %error_chain(&err), "session index not written at shutdown"),
            Err(_) => tracing::warn!("session index not written within the shutdown timeout"),
        }
        self.capabilities.shutdown(deadline).await;
    }

    /// Fills in default ids, checks them, and attaches the call's [`CallScope`], its
    /// workspace view ([`harness_fs::CallWorkspace`]) and its state key.
    ///
    /// # Errors
    /// [`AgentError::Identity`] for unsafe ids; [`AgentError::Capability`] when an id is a
    /// reserved workspace name where it would name the caller's namespace.
    pub fn bind(&self, ctx: RuntimeContext) -> Result<RuntimeContext, AgentError> {
        self.bind_scoped(ctx).map(|(ctx, _)| ctx)
    }

    /// [`bind`](Self::bind), also returning the call's lease key.
    fn bind_scoped(&self, mut ctx: RuntimeContext) -> Result<(RuntimeContext, harness_core::LeaseKey), AgentError> {
        ctx.user_id.get_or_insert(harness_core::DEFAULT_USER_ID);
        ctx.session_id.get_or_insert(harness_core::DEFAULT_SESSION_ID);
        let scope = self.workspace.call_scope(&ctx).map_err(|err| match err {
            harness_fs::ScopeError::Id(err) => AgentError::Identity(err),
            // A reserved name is the caller's mistake: say so (400 / exit 2), not a failure.
            other => AgentError::Refused {
                what: format!("{}; use another id", harness_core::error_chain(&other)),
            },
        })?;
        ctx.insert(self.workspace.call_workspace(&scope));
        ctx.insert(scope.state_key());
        // The session tools read other sessions' owners through this (with API keys a
        // session belongs to the user whose turn first ran it).
        ctx.insert(harness_core::SessionOwners::new(Arc::clone(
            self.kernel().state_store(),
        )));
        let key = scope.lease_key();
        ctx.insert(scope);
        Ok((ctx, key))
    }

    pub(crate) async fn run(
        &self,
        input: AgentInput,
        ctx: RuntimeContext,
        events: EventSink,
    ) -> Result<Msg, AgentError> {
        let (mut ctx, key) = self.bind_scoped(ctx)?;
        let guard = match self.lease.acquire(&key, ctx.cancellation()).await {
            Ok(guard) => guard,
            Err(LeaseError::Cancelled) => return Err(AgentError::Cancelled),
            Err(err) => return Err(lease_error(err)),
        };
        if let Some(token) = guard.token() {
            ctx.insert::<FencingToken>(token);
            // Every shared write of the turn carries the token: a replica whose lease passed
            // to another holder writes nothing.
            if let (Some(fence_of), Some(scope)) = (&self.write_fence, ctx.get::<harness_fs::CallScope>()) {
                let fenced = self.workspace.call_workspace_fenced(scope, &fence_of(&key, token));
                ctx.insert(fenced);
            }
        }
        // Losing the lease cancels the turn (the kernel still saves, and a fenced store
        // refuses that save); the caller gets an error that says why.
        let lost = guard.lost();
        let turn_cancel = ctx.cancellation().child_token();
        let ctx = ctx.with_cancellation(turn_cancel.clone());
        let run = self.kernel.run(input, ctx, events);
        tokio::pin!(run);
        let result = tokio::select! {
            result = &mut run => result,
            () = lost.cancelled() => {
                turn_cancel.cancel();
                run.await
            }
        };
        guard.release().await;
        if lost.is_cancelled() {
            return Err(AgentError::Busy {
                what: LeaseLost.to_string(),
                retry_after: None,
            });
        }
        result
    }

    /// Runs one turn and returns the final assistant message.
    ///
    /// # Errors
    /// [`AgentError`] from the model, the session store, or bad ids. The session is saved in
    /// every case (the user's message and finished tool results are kept).
    pub async fn call(&self, input: impl Into<AgentInput>, ctx: RuntimeContext) -> Result<Msg, AgentError> {
        self.run(input.into(), ctx, EventSink::disabled()).await
    }

    /// [`call`](Self::call), sending the turn's events to `events`: with
    /// [`EventSink::warnings`] a caller that prints only the answer still learns what was
    /// degraded (a workspace file not injected, a reply cut by the length limit) without
    /// turning on streaming. Keep receiving while it runs: the sink's channel is bounded.
    ///
    /// # Errors
    /// Those of [`call`](Self::call).
    pub async fn call_with_events(
        &self,
        input: impl Into<AgentInput>,
        ctx: RuntimeContext,
        events: EventSink,
    ) -> Result<Msg, AgentError> {
        self.run(input.into(), ctx, events).await
    }

    /// The calls of `ctx`'s session that wait for a person's approval (empty when none).
    /// Reads the saved state without taking the session, so any process may ask.
    ///
    /// # Errors
    /// [`AgentError::Identity`] for unsafe ids, [`AgentError::State`] when the state cannot
    /// be loaded, [`AgentError::Capability`] when the record is corrupt.
    pub async fn pending_approval(&self, ctx: RuntimeContext) -> Result<harness_core::PendingApproval, AgentError> {
        let ctx = self.bind(ctx)?;
        let key = self.kernel.key_for(&ctx);
        let Some((state, _)) = self.kernel.state_store().load(&key).await? else {
            return Ok(harness_core::PendingApproval::default());
        };
        harness_core::SessionState::from_extensions(&state.extensions)
            .get::<harness_core::PendingApproval>()
            .map_err(|err| AgentError::Capability {
                capability: "approval",
                source: Box::new(err),
            })
    }

    /// Resumes a turn that waits for approval with a person's decisions (from this process
    /// or another one) and runs it to its end: refused calls get an error result saying a
    /// person refused, approved ones run exactly once (edited arguments are checked and
    /// decided again), then the loop goes on. Returns like [`call`](Self::call); when calls
    /// are still (or again) waiting, the returned message is the one that asked and
    /// [`pending_approval`](Self::pending_approval) lists them.
    ///
    /// # Errors
    /// [`AgentError::Approval`] when nothing is pending or a decision names an unknown call
    /// (nothing runs then), and the errors of [`call`](Self::call).
    pub async fn resume(
        &self,
        decisions: Vec<harness_core::ApprovalDecision>,
        ctx: RuntimeContext,
    ) -> Result<Msg, AgentError> {
        self.resume_with_events(decisions, ctx, EventSink::disabled()).await
    }

    /// [`resume`](Self::resume), sending the turn's events to `events` like
    /// [`call_with_events`](Self::call_with_events).
    ///
    /// # Errors
    /// Those of [`resume`](Self::resume).
    pub async fn resume_with_events(
        &self,
        decisions: Vec<harness_core::ApprovalDecision>,
        ctx: RuntimeContext,
        events: EventSink,
    ) -> Result<Msg, AgentError> {
        self.run(AgentInput(Vec::new()), with_decisions(ctx, decisions), events)
            .await
    }

    /// [`resume`](Self::resume), yielding the turn's events like [`stream`](Self::stream).
    pub fn resume_stream(&self, decisions: Vec<harness_core::ApprovalDecision>, ctx: RuntimeContext) -> AgentStream {
        self.stream(AgentInput(Vec::new()), with_decisions(ctx, decisions))
    }

    /// Runs one turn, yielding its events; the last is `Final` or `Error`. A turn that
    /// waits for approval yields `ApprovalRequired` before its `Final`.
    pub fn stream(&self, input: impl Into<AgentInput>, ctx: RuntimeContext) -> AgentStream {
        let (sink, rx) = AgentStream::channel();
        let agent = self.clone();
        let input = input.into();
        AgentStream::new(
            async move {
                match agent.run(input, ctx, sink.clone()).await {
                    Ok(message) => sink.emit(EventKind::Final { message }).await,
                    Err(err) => {
                        sink.emit(EventKind::Error {
                            message: error_chain(&err),
                            kind: err.kind(),
                        })
                        .await
                    }
                }
            },
            rx,
        )
    }
}

fn with_decisions(mut ctx: RuntimeContext, decisions: Vec<harness_core::ApprovalDecision>) -> RuntimeContext {
    ctx.insert(harness_core::Approvals(decisions));
    ctx
}
