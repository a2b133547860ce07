//! [`HarnessAgent`]: the kernel plus the workspace, sessions and isolation.

use crate::compaction::{Compaction, CompactionConfig, CompactionHook, OverflowHint};
use crate::config::HarnessConfig;
use crate::eviction::{ToolResultEviction, ToolResultEvictionConfig};
use crate::prompt::{WorkspaceContext, WorkspaceContextConfig};
use crate::session::{SessionPersistence, TurnGate};
use crate::workspace::WorkspaceManager;
use harness_core::{
    AgentError, AgentInput, AgentStream, ChatModel, EventKind, EventSink, Middleware, Msg, ReActAgent, RuntimeContext,
    SessionId, StateStore, Tool, UserId, error_chain,
};
use harness_fs::{Filesystem, IsolationScope, NamespaceFactory, WsPath};
use harness_memory::{Memory, MemoryConfig, NamespaceKey};
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::Arc;

/// The workspace used when neither the builder nor the caller names one.
pub const DEFAULT_WORKSPACE: &str = ".harness/workspace";
/// The agent name used when none is set.
pub const DEFAULT_AGENT_NAME: &str = "harness";

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
    /// An additional context file path is not a safe workspace path.
    #[error("additional context file: {0}")]
    ContextFile(#[source] harness_fs::FsError),
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
}

/// Assembles a [`HarnessAgent`]; nothing is checked until [`build`](Self::build).
#[derive(Default)]
#[must_use = "a builder does nothing until `.build()`"]
pub struct HarnessAgentBuilder {
    workspace: Option<PathBuf>,
    config: HarnessConfig,
    name: Option<String>,
    model: Option<Arc<dyn ChatModel>>,
    sys_prompt: Option<String>,
    max_iters: Option<NonZeroU32>,
    max_context_tokens: Option<usize>,
    additional_context_files: Vec<String>,
    isolation: Option<IsolationScope>,
    tools: Vec<Arc<dyn Tool>>,
    middleware: Vec<Arc<dyn Middleware>>,
    filesystem: Option<Arc<dyn Filesystem>>,
    state_store: Option<Arc<dyn StateStore>>,
    cross_process_lock: Option<bool>,
    compaction: Option<CompactionConfig>,
    compaction_model: Option<Arc<dyn ChatModel>>,
    eviction: Option<Option<ToolResultEvictionConfig>>,
    memory: Option<MemoryConfig>,
    memory_model: Option<Arc<dyn ChatModel>>,
    extensions: Option<Arc<crate::extensions::Extensions>>,
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

    /// Token budget of MEMORY.md in the prompt (default 8000).
    pub fn max_context_tokens(mut self, tokens: usize) -> Self {
        self.max_context_tokens = Some(tokens);
        self
    }

    /// A file injected in full into the prompt, relative to the workspace.
    pub fn additional_context_file(mut self, path: impl Into<String>) -> Self {
        self.additional_context_files.push(path.into());
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
    /// the workspace (default: on for a local workspace).
    pub fn cross_process_lock(mut self, enabled: bool) -> Self {
        self.cross_process_lock = Some(enabled);
        self
    }

    /// Turns conversation compaction on with `config` (also `[compaction]` in harness.toml).
    pub fn compaction(mut self, config: CompactionConfig) -> Self {
        self.compaction = Some(config);
        self
    }

    /// The model that writes compaction summaries (default: the agent's model). The CLI
    /// resolves `[compaction] model` into this.
    pub fn compaction_model(mut self, model: Arc<dyn ChatModel>) -> Self {
        self.compaction_model = Some(model);
        self
    }

    /// Tool-result eviction settings (on by default); `None` turns it off.
    pub fn tool_result_eviction(mut self, config: Option<ToolResultEvictionConfig>) -> Self {
        self.eviction = Some(config);
        self
    }

    /// Long-term memory settings (also `[memory]` in harness.toml; on by default).
    pub fn memory(mut self, config: MemoryConfig) -> Self {
        self.memory = Some(config);
        self
    }

    /// The model memory extraction and consolidation use (default: the agent's model). The
    /// CLI resolves `[memory] model` into this.
    pub fn memory_model(mut self, model: Arc<dyn ChatModel>) -> Self {
        self.memory_model = Some(model);
        self
    }

    /// MCP tools, skills, on-demand groups and `tools.json`'s allow/deny (applied to every
    /// tool, built-ins included). The caller owns the extensions and shuts them down.
    pub fn extensions(mut self, extensions: Arc<crate::extensions::Extensions>) -> Self {
        self.extensions = Some(extensions);
        self
    }

    /// Validates and builds.
    ///
    /// # Errors
    /// [`BuildError`] when no model is set, the workspace cannot be opened, or the kernel
    /// refuses the tools or the name.
    pub fn build(self) -> Result<HarnessAgent, BuildError> {
        let file = self.config.agent;
        let compaction = self.compaction.or(self.config.compaction);
        let memory_config = self.memory.or(self.config.memory).unwrap_or_default();
        let eviction = match (self.eviction, self.config.tool_result_eviction) {
            (Some(choice), _) => choice,
            (None, Some(section)) => section.enabled.then_some(section.config),
            (None, None) => Some(ToolResultEvictionConfig::default()),
        };
        let model = self.model.ok_or(BuildError::MissingModel)?;
        let root = self.workspace.unwrap_or_else(|| PathBuf::from(DEFAULT_WORKSPACE));
        let name = self.name.or(file.name).unwrap_or_else(|| DEFAULT_AGENT_NAME.to_owned());
        let agent_id = harness_core::AgentId::parse(name.clone())?;
        let eviction = eviction
            .map(|config| ToolResultEviction::new(&agent_id, config))
            .transpose()
            .map_err(|err| BuildError::Capability {
                capability: "tool_result_eviction",
                source: Box::new(err),
            })?;
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
            NamespaceFactory::new(scope, agent_id.clone()),
        ));
        let mut context_files = Vec::new();
        for path in file
            .additional_context_files
            .iter()
            .chain(&self.additional_context_files)
        {
            context_files.push(WsPath::parse(path).map_err(BuildError::ContextFile)?);
        }
        let memory = memory_config.enabled.then(|| {
            let index_dir = memory_config
                .index
                .dir
                .clone()
                .unwrap_or_else(|| root.join(".harness").join("index"));
            let memory_model = self.memory_model.unwrap_or_else(|| Arc::clone(&model));
            Memory::new(memory_config, memory_model, index_dir)
        });
        let context = WorkspaceContextConfig {
            max_context_tokens: self
                .max_context_tokens
                .or(file.max_context_tokens)
                .unwrap_or(crate::prompt::DEFAULT_MAX_CONTEXT_TOKENS),
            additional_context_files: context_files,
            memory_tools: memory.is_some(),
        };
        let store: Arc<dyn StateStore> = self
            .state_store
            .unwrap_or_else(|| Arc::new(harness_store::FileStateStore::new(root.clone())));

        let compaction = match compaction {
            Some(config) => {
                let summary_model = self.compaction_model.unwrap_or_else(|| Arc::clone(&model));
                let mut layer = Compaction::new(config, summary_model)
                    .map_err(|err| BuildError::Capability {
                        capability: "compaction",
                        source: Box::new(err),
                    })?
                    .with_estimator(|msg| harness_models::estimate_msg(msg) as u64);
                if let Some(memory) = &memory {
                    layer = layer.with_hook(Arc::new(MemoryFlush(memory.clone())));
                }
                Arc::new(layer) as Arc<dyn Middleware>
            }
            None => Arc::new(OverflowHint),
        };
        let mut kernel = ReActAgent::builder()
            .name(name)
            .shared_model(model)
            .sys_prompt(self.sys_prompt.or(file.sys_prompt).unwrap_or_default())
            .state_store(store);
        let mut tools = self.tools;
        tools.extend(crate::tools::file_tools());
        if workspace.filesystem().shell().is_some() {
            tools.push(crate::tools::shell_tool());
        }
        if let Some(memory) = &memory {
            tools.extend(memory.tools());
        }
        if let Some(extensions) = &self.extensions {
            tools.extend(extensions.tools());
            tools = extensions.filter().apply(tools);
        }
        kernel = kernel.tools(tools);
        if let Some(max) = self.max_iters.or_else(|| file.max_iters.and_then(NonZeroU32::new)) {
            kernel = kernel.max_iters(max);
        }
        // User middlewares outermost, then the built-ins in their documented order.
        for layer in self.middleware {
            kernel = kernel.middleware(layer);
        }
        let sessions = Arc::new(SessionPersistence::default());
        kernel = kernel.middleware(Arc::clone(&sessions) as Arc<dyn Middleware>);
        if let Some(memory) = &memory {
            kernel = kernel.middleware(memory.middleware());
        }
        kernel = kernel.middleware(compaction);
        if let Some(eviction) = eviction {
            kernel = kernel.middleware(Arc::new(eviction));
        }
        for layer in self.extensions.iter().flat_map(|extensions| extensions.middlewares()) {
            kernel = kernel.middleware(layer);
        }
        kernel = kernel.middleware(Arc::new(WorkspaceContext::new(Arc::clone(&workspace), context)));
        let lock_dir = (self.cross_process_lock.unwrap_or(local)).then(|| root.join(".harness").join("locks"));
        Ok(HarnessAgent {
            kernel: kernel.build()?,
            workspace,
            gate: Arc::new(TurnGate::new(lock_dir)),
            sessions,
            memory,
        })
    }
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
    gate: Arc<TurnGate>,
    sessions: Arc<SessionPersistence>,
    memory: Option<Memory>,
}

/// Feeds the messages compaction is about to replace to memory extraction.
struct MemoryFlush(Memory);

#[async_trait::async_trait]
impl CompactionHook for MemoryFlush {
    async fn before_compaction(&self, turn: &harness_core::Turn, replaced: &[Arc<Msg>]) {
        let Some(call) = turn.ctx.get::<harness_fs::CallWorkspace>() else {
            return;
        };
        let namespace = NamespaceKey::for_call(&turn.ctx);
        self.0.flush_before_compaction(
            Arc::clone(&call.user),
            &namespace,
            &turn.key.session_id,
            replaced.to_vec(),
        );
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

    /// Long-term memory, when enabled.
    pub fn memory(&self) -> Option<&Memory> {
        self.memory.as_ref()
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

    /// Finishes background work (queued session-index updates, pending memory
    /// extractions) within `timeout`. Call it before the process exits; calls made
    /// afterwards still work but schedule nothing new.
    pub async fn shutdown(&self, timeout: std::time::Duration) {
        match tokio::time::timeout(timeout, self.flush_sessions()).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::warn!(error = %error_chain(&err), "session index not written at shutdown"),
            Err(_) => tracing::warn!("session index not written within the shutdown timeout"),
        }
        if let Some(memory) = &self.memory {
            let report = memory.shutdown(timeout).await;
            tracing::info!(
                completed = report.completed,
                abandoned = report.abandoned,
                "memory shut down"
            );
        }
    }

    /// Fills in default ids, checks them, and attaches the call's workspace view.
    ///
    /// # Errors
    /// [`AgentError::Identity`] for unsafe ids; [`AgentError::Capability`] when the caller's
    /// namespace cannot be formed.
    pub fn bind(&self, mut ctx: RuntimeContext) -> Result<RuntimeContext, AgentError> {
        let user = ctx
            .user_id
            .get_or_insert_with(|| UserId::new(harness_core::DEFAULT_USER));
        user.validate()?;
        let session = ctx
            .session_id
            .get_or_insert_with(|| SessionId::new(harness_core::DEFAULT_SESSION));
        session.validate()?;
        let call = self
            .workspace
            .call_workspace(&ctx)
            .map_err(|err| AgentError::Capability {
                capability: "workspace",
                source: Box::new(err),
            })?;
        ctx.insert(call);
        Ok(ctx)
    }

    async fn run(&self, input: AgentInput, ctx: RuntimeContext, events: EventSink) -> Result<Msg, AgentError> {
        let ctx = self.bind(ctx)?;
        let key = self.kernel.key_for(&ctx)?;
        let _permit = self
            .gate
            .enter([key.agent_id.as_str(), key.user_id.as_str(), key.session_id.as_str()])
            .await
            .map_err(|err| AgentError::Capability {
                capability: "turn_gate",
                source: Box::new(err),
            })?;
        self.kernel.run(input, ctx, events).await
    }

    /// Runs one turn and returns the final assistant message.
    ///
    /// # Errors
    /// [`AgentError`] from the model, the session store, or bad ids. The session is saved in
    /// every case (the user's message and finished tool results are kept).
    pub async fn call(&self, input: impl Into<AgentInput>, ctx: RuntimeContext) -> Result<Msg, AgentError> {
        self.run(input.into(), ctx, EventSink::disabled()).await
    }

    /// Runs one turn, yielding its events; the last is `Final` or `Error`.
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
                        })
                        .await
                    }
                }
            },
            rx,
        )
    }
}
