//! Subagents as a [`Capability`]: delegation to child agents with their own sessions, run
//! synchronously (the spawn's tool result) or as background tasks (pushed back once, before
//! the parent's next reasoning step).
//!
//! - **Declarations** ([`declaration`]): the built-in `general-purpose` (the parent's model,
//!   tools, capabilities and prompt; shared), workspace files `subagents/<id>.md`, a
//!   caller's own `<ns>/subagents/<id>.md` (resolved per call, shadowing the shared one),
//!   and [`HarnessAgentBuilder::subagent`]. The prompt lists each listed one by id and
//!   description only.
//! - **Children** are [`HarnessAgent`]s built from the parent's recipe: the same model,
//!   workspace, filesystem, configuration, user middlewares and capabilities (so a
//!   permission capability or middleware on the parent applies to the child), memory
//!   extraction off, one level deeper. A leaf (depth = `max_depth`) gets no subagent tools.
//! - **Tasks** ([`records`]): every spawn is a task recorded in the parent session's task
//!   file with compare-and-set; see `runtime.rs` for the runner, `tools.rs` for the tools,
//!   `pushback.rs` for delivery.

pub mod declaration;
mod pushback;
pub mod records;
mod remote;
mod runtime;
mod tools;

use crate::HarnessAgent;
use crate::HarnessAgentBuilder;
use crate::capability::{
    Assembly, Capability, CapabilityError, ChildAgent, ChildSpec, ConfigSection, Layer, Recipe, Registration, Setup,
};
pub use declaration::{DeclarationWarning, GENERAL_PURPOSE, SubagentDeclaration, WorkspaceMode, parse_user_spec};
use harness_core::{ChatModel, Middleware, PromptPart, Tool};
pub use records::{TaskFile, TaskProgress, TaskRecord, TaskStatus, TaskStore, TaskStoreError};
use runtime::Runtime;
pub use runtime::SpawnError;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
pub use tools::ForceSync;

/// The request header a remote parent sends with a remote child's turn: the child's depth
/// in the delegation tree (a direct child is 1). A server that honours it
/// ([`delegated`]) refuses the child's own spawns past its `max_depth`, so a chain of remote
/// subagents cannot bypass the limit by accident (a caller that omits it is at depth 0: it
/// is a guard against loops, not an access control).
pub const DEPTH_HEADER: &str = "X-Harness-Depth";

/// `ctx` for a call that is itself a subagent at `depth` (e.g. a remote child's turn,
/// [`DEPTH_HEADER`]), served as `agent`: its spawns count from that depth.
pub fn delegated(mut ctx: harness_core::RuntimeContext, depth: u32, agent: &str) -> harness_core::RuntimeContext {
    ctx.insert(runtime::Lineage {
        depth,
        path: agent.to_owned(),
    });
    ctx
}

/// `ctx` for a turn of `agent` started by a remote parent that passed `inherited` down (the
/// native API's `inherit`): the turn's calls are decided by `agent`'s own policy narrowed by
/// it (the union of both sides' deny and ask rules, the stricter mode), and a planning parent's
/// child plans too. An agent without plan mode cannot plan, so a planning parent's child is
/// held to `explore` (read-only tools only) instead.
pub fn inherited_from_remote(
    mut ctx: harness_core::RuntimeContext,
    agent: &crate::HarnessAgent,
    mut inherited: harness_policy::Inheritance,
) -> harness_core::RuntimeContext {
    if inherited.plan && !agent.capabilities().contains(&"plan_mode") {
        inherited.mode = inherited.mode.stricter(harness_policy::Mode::Explore);
    }
    ctx.insert(inherited);
    ctx
}

/// The largest `max_depth` accepted.
pub const MAX_DEPTH_LIMIT: u32 = 3;

/// `[subagents]` in harness.toml.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SubagentsConfig {
    /// Master switch (default on).
    pub enabled: bool,
    /// How deep delegation may go: 1 (default) makes children leaves; at most 3.
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
        }
    }
}

mod seconds {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_secs)
    }
}

impl ConfigSection for SubagentsConfig {
    const KEY: &'static str = "subagents";
}

/// The capability's registration.
pub(crate) const REGISTRATION: Registration = Registration::new("subagents", build).with_section::<SubagentsConfig>();

/// The builder's `[subagents]` override.
#[derive(Clone)]
struct ConfigOverride(SubagentsConfig);

/// Declarations added on the builder, in order.
#[derive(Default, Clone)]
struct Declared(Vec<SubagentDeclaration>);

pub(crate) use crate::capability::ToolAllowList;

pub(crate) use crate::facts::IsolatedParent;

/// Builds the model a `model` spec string names (a subagent's `model` key), with the same
/// syntax as `--model` and `[agent] model`. The error says why the spec cannot be used.
/// The [`SpecOrigin`] says who wrote the spec: a resolver sends a provider key to a base URL
/// named in the spec only for [`SpecOrigin::Operator`] ([`harness_models::ModelSpec::untrusted`]).
pub type ModelResolver = Arc<dyn Fn(&str, SpecOrigin) -> Result<Arc<dyn ChatModel>, String> + Send + Sync>;

/// Who wrote a model spec or a subagent declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SpecOrigin {
    /// The operator: harness.toml, `--model`, `HARNESS_MODEL`, a root `subagents/` file, the
    /// builder.
    #[default]
    Operator,
    /// Anyone else: a per-user `<user>/subagents/` file (which the model may have written).
    User,
}

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
fn default_resolver() -> ModelResolver {
    Arc::new(|spec: &str, origin: SpecOrigin| {
        parse_spec_from(spec, origin)
            .and_then(|parsed| parsed.build(&|_| None))
            .map_err(|err| err.to_string())
    })
}

/// The builder's resolver.
#[derive(Clone)]
struct ResolverSetting(ModelResolver);

/// Reads a variable for `${VAR}` in remote subagents' `headers` (libraries read no
/// environment: the caller decides what is visible).
pub type VariableLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The builder's variable lookup.
#[derive(Clone)]
struct VariablesSetting(VariableLookup);

impl HarnessAgentBuilder {
    /// Subagent settings (also `[subagents]` in harness.toml; on by default).
    pub fn subagents(self, config: SubagentsConfig) -> Self {
        self.setting(ConfigOverride(config))
    }

    /// How subagents' `model` spec strings are turned into models ([`from_workspace`]
    /// sets one that reads the provider variables it was given and the `[model]` transport
    /// settings; without one, specs are built with no environment).
    ///
    /// [`from_workspace`]: HarnessAgentBuilder::from_workspace
    pub fn model_resolver(self, resolver: ModelResolver) -> Self {
        self.setting(ResolverSetting(resolver))
    }

    /// Where `${VAR}` in the `headers` of remote subagent files (`subagents/<id>.md` with
    /// `url`) is read from ([`from_workspace`] passes the variables those files name);
    /// without one, every placeholder is unset and such a file is skipped with a warning
    /// naming the file and the `headers.<Name>` key. Programmatic declarations are used as
    /// given.
    ///
    /// [`from_workspace`]: HarnessAgentBuilder::from_workspace
    pub fn subagent_variables(self, lookup: VariableLookup) -> Self {
        self.setting(VariablesSetting(lookup))
    }

    /// Declares a subagent (replaces a workspace file or the built-in of the same id).
    pub fn subagent(mut self, declaration: SubagentDeclaration) -> Self {
        self.settings_mut().get_or_default::<Declared>().0.push(declaration);
        self
    }
}

fn build(setup: &mut Setup<'_>) -> Result<Option<Arc<dyn Capability>>, CapabilityError> {
    let config = match setup.take::<ConfigOverride>() {
        Some(ConfigOverride(config)) => config,
        None => setup.section::<SubagentsConfig>()?.unwrap_or_default(),
    };
    let declared = setup.take::<Declared>().unwrap_or_default();
    // A child keeps the resolved settings and the programmatic declarations.
    setup.inherit(ConfigOverride(config.clone()));
    setup.inherit(declared.clone());
    let depth = setup.depth();
    let parent_policy = setup.provided::<Arc<harness_policy::Policy>>().cloned();
    let resolver = setup
        .take::<ResolverSetting>()
        .map_or_else(default_resolver, |ResolverSetting(resolver)| resolver);
    setup.inherit(ResolverSetting(Arc::clone(&resolver)));
    if config.child_token_budget == Some(0) {
        return Err(CapabilityError::new(
            "subagents",
            "child_token_budget = 0 would stop every child before it answers; remove it for no budget",
        ));
    }
    if config.max_depth > MAX_DEPTH_LIMIT {
        return Err(CapabilityError::new(
            "subagents",
            format!(
                "max_depth = {} is above the limit of {MAX_DEPTH_LIMIT}",
                config.max_depth
            ),
        ));
    }
    if !config.enabled || depth >= config.max_depth {
        return Ok(None);
    }
    let mut declarations = BTreeMap::new();
    let builtin = SubagentDeclaration::general_purpose();
    declarations.insert(builtin.id.clone(), builtin);
    let variables: VariableLookup = setup.take::<VariablesSetting>().map_or_else(
        || Arc::new(|_: &str| None) as VariableLookup,
        |VariablesSetting(lookup)| lookup,
    );
    setup.inherit(VariablesSetting(Arc::clone(&variables)));
    let (mut files, mut warnings) = declaration::load_dir(&setup.root.join("subagents"), "subagents");
    files.retain(
        |_, declaration| match declaration::substitute_headers(declaration, &*variables) {
            Ok(()) => true,
            Err(warning) => {
                warnings.push(warning);
                false
            }
        },
    );
    for warning in &warnings {
        tracing::warn!(file = %warning.file, key = %warning.key, "subagent spec skipped: {}", warning.message);
    }
    declarations.extend(files);
    for declaration in declared.0 {
        if !declaration::valid_id(&declaration.id) {
            return Err(CapabilityError::new(
                "subagents",
                format!(
                    "subagent id `{}` may hold letters, digits, `-`, `_` and `.` only",
                    declaration.id
                ),
            ));
        }
        declarations.insert(declaration.id.clone(), declaration);
    }
    let factory_policy = parent_policy.clone();
    let factory = ChildFactory {
        model: Arc::clone(setup.model()),
        parent_name: setup.agent_id().to_string(),
        recipe: setup.recipe(),
        parent_policy,
        resolver,
        built: Mutex::new(HashMap::new()),
    };
    let handle = Handle {
        runtime: Arc::new(Runtime::new(config, depth, setup.agent_id.to_string(), factory)),
        declarations: Arc::new(Declarations {
            shared: declarations,
            warnings,
            policy: factory_policy,
        }),
    };
    setup.provide(handle.clone());
    Ok(Some(Arc::new(SubagentsCapability(handle))))
}

/// The subagent runtime and declarations of one agent, kept by the agent for
/// [`HarnessAgent::wait_for_tasks`].
#[derive(Clone)]
pub(crate) struct Handle {
    runtime: Arc<Runtime>,
    declarations: Arc<Declarations>,
}

/// The merged declarations of one agent.
pub(crate) struct Declarations {
    shared: BTreeMap<String, SubagentDeclaration>,
    warnings: Vec<DeclarationWarning>,
    /// This agent's permission policy: a call of a remote subagent is open-world and is
    /// decided by it as such (it asks under the default permissions).
    policy: Option<Arc<harness_policy::Policy>>,
}

impl std::fmt::Debug for Declarations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Declarations")
            .field("shared", &self.shared)
            .field("warnings", &self.warnings)
            .finish_non_exhaustive()
    }
}

impl Declarations {
    /// The declaration `id` for the caller in `ctx`: the caller's own
    /// `<ns>/subagents/<id>.md` when it has one, else the merged one.
    ///
    /// # Errors
    /// The caller's own file is malformed (the message names file and key), or no such id.
    pub(crate) async fn resolve(
        &self,
        ctx: &harness_core::RuntimeContext,
        id: &str,
    ) -> Result<SubagentDeclaration, String> {
        if declaration::valid_id(id)
            && let (Some(scope), Some(workspace)) = (
                ctx.get::<harness_fs::CallScope>(),
                ctx.get::<harness_fs::CallWorkspace>(),
            )
            && !scope.is_shared_namespace()
            && let Ok(path) = harness_fs::WsPath::parse(&format!("subagents/{id}.md"))
            && let Ok(bytes) = workspace.user.read(&path).await
        {
            let file = format!("{}/subagents/{id}.md", scope.namespace());
            let text = String::from_utf8_lossy(&bytes);
            // A per-user file may have been written by the model: it runs as a local child
            // on the operator's models, and never carries a URL, a header or a variable.
            let declaration = declaration::parse_user_spec(id, &file, &text).map_err(|warning| {
                tracing::warn!(file = %warning.file, key = %warning.key, "subagent spec skipped: {}", warning.message);
                format!("subagent `{id}` was not spawned: {warning}")
            })?;
            return Ok(declaration);
        }
        self.shared.get(id).cloned().ok_or_else(|| {
            SpawnError::Unknown {
                id: id.to_owned(),
                available: self.listed().map(|d| d.id.as_str()).collect::<Vec<_>>().join(", "),
            }
            .to_string()
        })
    }

    /// The decision for a call of a remote subagent (open-world: the task leaves the
    /// process): `None` when it may run, else the output that refuses it or asks a person.
    pub(crate) fn gate_remote(
        &self,
        ctx: &harness_core::ToolContext,
        call: &harness_core::ToolCall,
        declaration: &SubagentDeclaration,
    ) -> Option<harness_core::ToolOutput> {
        if !declaration.is_remote() || ctx.is_approved(call) {
            return None;
        }
        let policy = self.policy.as_deref().cloned().unwrap_or_default();
        let hints = harness_core::ToolAnnotations::new().open_world(true);
        let url = declaration.url.as_deref().unwrap_or_default();
        match policy.decide(&call.name, hints, &call.input) {
            harness_policy::Decision::Allow => None,
            harness_policy::Decision::Ask { reason, suggestion, .. } => {
                let reason = format!(
                    "subagent `{}` runs on the remote server {url}: {reason}",
                    declaration.id
                );
                Some(ctx.request_approval(call, &reason, (!suggestion.is_empty()).then_some(suggestion)))
            }
            harness_policy::Decision::Deny { reason } | harness_policy::Decision::Invalid { message: reason } => {
                Some(harness_core::ToolOutput::error(format!(
                    "Permission denied: subagent `{}` runs on the remote server {url} and {reason}. The call was not run; do not retry it.",
                    declaration.id
                )))
            }
        }
    }

    /// The declarations the model sees, by id.
    pub(crate) fn listed(&self) -> impl Iterator<Item = &SubagentDeclaration> {
        self.shared.values().filter(|declaration| !declaration.hidden)
    }
}

/// Builds (once per declaration) and keeps the child agents, from the parent's recipe
/// ([`Recipe`]: what every capability recorded for children) narrowed by the declaration.
pub(crate) struct ChildFactory {
    model: Arc<dyn ChatModel>,
    parent_name: String,
    recipe: Recipe,
    /// The parent's permission policy (remote children get its rules as `inherit`).
    pub(crate) parent_policy: Option<Arc<harness_policy::Policy>>,
    resolver: ModelResolver,
    built: Mutex<HashMap<SubagentDeclaration, Arc<dyn ChildAgent>>>,
}

impl ChildFactory {
    fn built(&self) -> std::sync::MutexGuard<'_, HashMap<SubagentDeclaration, Arc<dyn ChildAgent>>> {
        // Only inserts happen under the lock.
        self.built.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The child agent for `declaration`.
    ///
    /// # Errors
    /// The child's `model` cannot be built, or its build failed (e.g. its allow-list or
    /// configuration).
    pub(crate) fn child(&self, declaration: &SubagentDeclaration) -> Result<Arc<dyn ChildAgent>, SpawnError> {
        if let Some(agent) = self.built().get(declaration) {
            return Ok(Arc::clone(agent));
        }
        let model = match &declaration.model {
            Some(spec) => (self.resolver)(spec, declaration.source).map_err(|message| SpawnError::Model {
                id: declaration.id.clone(),
                spec: spec.clone(),
                origin: declaration
                    .origin
                    .clone()
                    .unwrap_or_else(|| "its declaration".to_owned()),
                message,
            })?,
            None => Arc::clone(&self.model),
        };
        let agent = self.build_child(declaration, model).map_err(|err| SpawnError::Build {
            id: declaration.id.clone(),
            message: harness_core::error_chain(&*err),
        })?;
        self.built().insert(declaration.clone(), Arc::clone(&agent));
        Ok(agent)
    }

    fn build_child(
        &self,
        declaration: &SubagentDeclaration,
        model: Arc<dyn ChatModel>,
    ) -> Result<Arc<dyn ChildAgent>, harness_core::BoxError> {
        let name = match declaration.workspace_mode {
            WorkspaceMode::Isolated => declaration.id.clone(),
            WorkspaceMode::Shared => self.parent_name.clone(),
        };
        // The recipe is complete once the parent is built, before any call can spawn.
        let inherited = self
            .recipe
            .get()
            .cloned()
            .ok_or("the parent agent is still being built")?;
        let prompt = if declaration.instructions.is_empty() {
            inherited.sys_prompt_text()
        } else {
            declaration.instructions.clone()
        };
        let mut spec = ChildSpec::new(inherited, name, model, prompt);
        spec.max_iters = declaration.steps;
        if let Some(tools) = &declaration.tools {
            spec.settings.insert(ToolAllowList(tools.clone()));
        }
        spec.middleware.push(Arc::new(runtime::BudgetGuard));
        self.recipe.build_child(spec)
    }

    fn children(&self) -> Vec<Arc<dyn ChildAgent>> {
        self.built().values().cloned().collect()
    }
}

/// The capability.
struct SubagentsCapability(Handle);

impl SubagentsCapability {
    fn listing(&self) -> String {
        let mut text = String::from(
            "## Subagents\n\nDelegate independent, multi-step or context-heavy work with `agent_spawn` \
             (`timeout_seconds` 0 runs it in the background; its result is delivered to you \
             automatically before your next step, so do not poll). Several spawns in one step run \
             in parallel. Available subagents (`agent_id`: description):\n",
        );
        for declaration in self.0.declarations.listed() {
            text.push_str(&format!("- `{}`: {}\n", declaration.id, declaration.description));
        }
        text
    }
}

#[async_trait::async_trait]
impl Capability for SubagentsCapability {
    fn name(&self) -> &'static str {
        "subagents"
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        tools::all(&self.0.runtime, &self.0.declarations)
    }

    fn middleware(&self, _assembly: &Assembly) -> Vec<(Layer, Arc<dyn Middleware>)> {
        vec![(
            Layer::Subagents,
            Arc::new(pushback::PushBack::new(Arc::clone(&self.0.runtime))),
        )]
    }

    fn prompt_parts(&self) -> Vec<PromptPart> {
        vec![PromptPart {
            name: "subagents",
            text: self.listing(),
            stable: true,
        }]
    }

    async fn shutdown(&self, deadline: tokio::time::Instant) {
        self.0.runtime.shutdown(deadline).await;
        for child in self.0.runtime.factory.children() {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            child.shutdown(left).await;
        }
    }
}

impl HarnessAgent {
    /// Waits until every subagent task this agent started in this process has finished
    /// (`harness run --wait-tasks`). Returns at once when subagents are off.
    pub async fn wait_for_tasks(&self) {
        if let Some(handle) = self.provided::<Handle>() {
            handle.runtime.wait_idle().await;
        }
    }

    /// The subagent tasks of the session in `ctx` (bound like a call: default ids apply), as
    /// recorded in its task file; empty when subagents are off or none ran.
    ///
    /// # Errors
    /// [`harness_core::AgentError`] for bad ids, or when the task file cannot be read.
    pub async fn tasks(&self, ctx: harness_core::RuntimeContext) -> Result<Vec<TaskRecord>, harness_core::AgentError> {
        if self.provided::<Handle>().is_none() {
            return Ok(Vec::new());
        }
        let ctx = self.bind(ctx)?;
        let capability_error = |err: SpawnError| harness_core::AgentError::Capability {
            capability: "subagents",
            source: Box::new(err),
        };
        let store = Runtime::store_for(&ctx).map_err(capability_error)?;
        let file = store
            .load()
            .await
            .map_err(|err| capability_error(SpawnError::Store(err)))?;
        Ok(file.tasks.into_values().collect())
    }

    /// Spawns a subagent from application code, under the same limits as the model's
    /// `agent_spawn`: depth (a `ctx` from inside a child's call carries its depth), fan-out,
    /// the spawn budget, the token budget and the task time limit. Called from inside a call
    /// (a tool's `ctx.runtime`), the spawn counts against that call's fan-out and budget;
    /// outside one, against the session's programmatic counter in this process (fan-out:
    /// programmatic spawns running at once; budget: `max_spawns_per_call` programmatic
    /// spawns per session per process). The task is recorded like any other: a background
    /// or promoted one is pushed back to the session's next call.
    ///
    /// # Errors
    /// [`SpawnError`]: which limit refused it, an unknown id, bad ids, a child that cannot
    /// be built, a task file that cannot be written.
    pub async fn spawn_subagent(
        &self,
        ctx: harness_core::RuntimeContext,
        request: SpawnRequest,
    ) -> Result<SpawnOutcome, SpawnError> {
        let handle = self.provided::<Handle>().ok_or(SpawnError::Disabled)?;
        let runtime = &handle.runtime;
        let task = request.task.trim().to_owned();
        if task.is_empty() {
            return Err(SpawnError::Build {
                id: request.agent_id,
                message: "`task` is empty: give the subagent a self-contained task".to_owned(),
            });
        }
        let mut ctx = self.bind(ctx).map_err(|err| SpawnError::Bind(err.to_string()))?;
        let declaration = handle
            .declarations
            .resolve(&ctx, &request.agent_id)
            .await
            .map_err(|message| SpawnError::Build {
                id: request.agent_id.clone(),
                message,
            })?;
        let counter = match ctx.get::<Arc<runtime::SpawnCounter>>() {
            Some(counter) => Arc::clone(counter),
            None => {
                let counter = runtime.programmatic_counter(Runtime::store_for(&ctx)?.path());
                ctx.insert(Arc::clone(&counter));
                counter
            }
        };
        runtime.admit_with(&ctx, Some(&counter))?;
        let sink = request.wait.map(|_| harness_core::EventSink::disabled());
        let started = runtime
            .start(
                &ctx,
                &declaration,
                runtime::ChildInput::Task(task),
                request.label.as_deref(),
                sink,
            )
            .await?;
        let task_id = started.task.id().to_owned();
        let (status, result) = match request.wait {
            None => (TaskStatus::Running, None),
            Some(wait) => match runtime.wait_sync(&started.task, wait).await {
                runtime::Waited::Done(outcome) => (outcome.status, Some(outcome.result)),
                runtime::Waited::Promoted => (TaskStatus::Running, None),
            },
        };
        Ok(SpawnOutcome {
            task_id,
            agent_key: started.agent_key,
            status,
            result,
        })
    }

    /// Resumes the task `task_id` of the session in `ctx` whose child waits for a person
    /// (status `awaiting_approval`, e.g. a background child that asked): the child's turn
    /// continues with `decisions` on its pending calls ([`TaskRecord::pending`]; a denied
    /// call gives the child's model a result saying a person refused). The same task runs
    /// again and is recorded like any other (a background one is pushed back to the
    /// session's next call). `wait`: how long to wait for it (`None`: background).
    ///
    /// # Errors
    /// [`SpawnError`]: subagents off, bad ids, no such task or it is not awaiting approval
    /// ([`SpawnError::NotWaiting`]), a child that cannot be built, a task file that cannot
    /// be read or written.
    pub async fn resume_task(
        &self,
        ctx: harness_core::RuntimeContext,
        task_id: &str,
        decisions: Vec<harness_core::ApprovalDecision>,
        wait: Option<Duration>,
    ) -> Result<SpawnOutcome, SpawnError> {
        let handle = self.provided::<Handle>().ok_or(SpawnError::Disabled)?;
        let runtime = &handle.runtime;
        let ctx = self.bind(ctx).map_err(|err| SpawnError::Bind(err.to_string()))?;
        let store = Runtime::store_for(&ctx)?;
        let record = store.load().await?.tasks.get(task_id).cloned();
        let Some(record) = record.filter(|record| record.status == TaskStatus::AwaitingApproval) else {
            return Err(SpawnError::NotWaiting(task_id.to_owned()));
        };
        let declaration = handle
            .declarations
            .resolve(&ctx, &record.agent_id)
            .await
            .map_err(|message| SpawnError::Build {
                id: record.agent_id.clone(),
                message,
            })?;
        let instance = record.label.clone().unwrap_or_else(|| record.task_id.clone());
        let input = runtime::ChildInput::Resume(runtime::ResumeChild {
            task_id: record.task_id.clone(),
            instance,
            decisions,
        });
        let sink = wait.map(|_| harness_core::EventSink::disabled());
        let started = runtime
            .start(&ctx, &declaration, input, record.label.as_deref(), sink)
            .await?;
        let (status, result) = match wait {
            None => (TaskStatus::Running, None),
            Some(wait) => match runtime.wait_sync(&started.task, wait).await {
                runtime::Waited::Done(outcome) => (outcome.status, Some(outcome.result)),
                runtime::Waited::Promoted => (TaskStatus::Running, None),
            },
        };
        Ok(SpawnOutcome {
            task_id: record.task_id,
            agent_key: started.agent_key,
            status,
            result,
        })
    }

    /// Stops the task `task_id` of the session in `ctx`, also when another process runs it
    /// (its record gets a cancel request; that runner stops the child at its next tool or
    /// chunk boundary and records `cancelled`). Waits up to `wait` for the record to end.
    /// Returns the record (still `running` when the other runner has not answered within
    /// `wait`), or `None` when the session has no such task.
    ///
    /// # Errors
    /// [`SpawnError`]: subagents off, bad ids, a task file that cannot be read or written.
    pub async fn cancel_task(
        &self,
        ctx: harness_core::RuntimeContext,
        task_id: &str,
        wait: Duration,
    ) -> Result<Option<TaskRecord>, SpawnError> {
        let handle = self.provided::<Handle>().ok_or(SpawnError::Disabled)?;
        let ctx = self.bind(ctx).map_err(|err| SpawnError::Bind(err.to_string()))?;
        let store = Runtime::store_for(&ctx)?;
        handle.runtime.cancel_task(&store, task_id, wait).await
    }

    /// What is known of the task `task_id` of the session in `ctx`: its record (with the
    /// persisted [`TaskProgress`], readable from any process) and, when this process runs
    /// or recently ran it, its recent events (at most 256, oldest dropped first), each
    /// tagged with the child's [`EventSource`](harness_core::EventSource). `None` when the
    /// session has no such task.
    ///
    /// # Errors
    /// [`SpawnError`]: subagents off, bad ids, a task file that cannot be read.
    pub async fn task_events(
        &self,
        ctx: harness_core::RuntimeContext,
        task_id: &str,
    ) -> Result<Option<TaskEvents>, SpawnError> {
        let handle = self.provided::<Handle>().ok_or(SpawnError::Disabled)?;
        let ctx = self.bind(ctx).map_err(|err| SpawnError::Bind(err.to_string()))?;
        let store = Runtime::store_for(&ctx)?;
        let Some(record) = store.load().await?.tasks.get(task_id).cloned() else {
            return Ok(None);
        };
        let (events, dropped) = handle
            .runtime
            .event_log(task_id)
            .map(|log| log.snapshot())
            .unwrap_or_default();
        let local = handle.runtime.event_log(task_id).is_some();
        Ok(Some(TaskEvents {
            record,
            events,
            dropped,
            local,
        }))
    }

    /// The events of the task `task_id` of the session in `ctx` as a stream: the buffered
    /// ones, then each new one live, ending when the task ends. `None` when this process
    /// does not run (or recently ran) that task of the session; use
    /// [`task_events`](Self::task_events) for the persisted summary then. A subscriber that
    /// falls more than 256 events behind skips the ones it missed.
    ///
    /// # Errors
    /// [`SpawnError`]: subagents off, bad ids, a task file that cannot be read.
    pub async fn watch_task(
        &self,
        ctx: harness_core::RuntimeContext,
        task_id: &str,
    ) -> Result<Option<futures::stream::BoxStream<'static, harness_core::AgentEvent>>, SpawnError> {
        use futures::StreamExt;
        let handle = self.provided::<Handle>().ok_or(SpawnError::Disabled)?;
        let ctx = self.bind(ctx).map_err(|err| SpawnError::Bind(err.to_string()))?;
        let store = Runtime::store_for(&ctx)?;
        if !store.load().await?.tasks.contains_key(task_id) {
            return Ok(None);
        }
        let Some(log) = handle.runtime.event_log(task_id) else {
            return Ok(None);
        };
        let done = handle.runtime.live_task(task_id).map(|task| task.done_signal());
        let (buffered, rx) = log.subscribe();
        let live = futures::stream::unfold((rx, done), |(mut rx, mut done)| async move {
            use tokio::sync::broadcast::error::{RecvError, TryRecvError};
            enum Next {
                Event(Box<harness_core::AgentEvent>),
                Skip,
                End,
                TaskEnded,
            }
            loop {
                let next = match done.as_mut() {
                    // The task ended: what was sent before, then the end.
                    None => match rx.try_recv() {
                        Ok(event) => Next::Event(Box::new(event)),
                        Err(TryRecvError::Lagged(_)) => Next::Skip,
                        Err(_) => Next::End,
                    },
                    Some(signal) => tokio::select! {
                        biased;
                        event = rx.recv() => match event {
                            Ok(event) => Next::Event(Box::new(event)),
                            Err(RecvError::Lagged(_)) => Next::Skip,
                            Err(RecvError::Closed) => Next::End,
                        },
                        _ = signal.wait_for(Option::is_some) => Next::TaskEnded,
                    },
                };
                match next {
                    Next::Event(event) => return Some((*event, (rx, done))),
                    Next::Skip => {}
                    Next::End => return None,
                    Next::TaskEnded => done = None,
                }
            }
        });
        Ok(Some(futures::stream::iter(buffered).chain(live).boxed()))
    }

    /// The malformed subagent spec files skipped at build (each names its file and key).
    pub fn subagent_warnings(&self) -> Vec<DeclarationWarning> {
        self.provided::<Handle>()
            .map(|handle| handle.declarations.warnings.clone())
            .unwrap_or_default()
    }
}

/// A programmatic spawn ([`HarnessAgent::spawn_subagent`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnRequest {
    /// The subagent's id.
    pub agent_id: String,
    /// Its task.
    pub task: String,
    /// The instance label (the same label continues the instance's session).
    pub label: Option<String>,
    /// How long to wait for the answer; `None` runs it in the background. A wait that
    /// expires leaves the task running in the background (its result is pushed back).
    pub wait: Option<Duration>,
}

impl SpawnRequest {
    /// A background spawn of `agent_id` on `task`.
    pub fn new(agent_id: impl Into<String>, task: impl Into<String>) -> Self {
        Self {
            agent_id: agent_id.into(),
            task: task.into(),
            label: None,
            wait: None,
        }
    }

    /// Waits up to `wait` for the answer.
    #[must_use]
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Names the instance.
    #[must_use]
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }
}

/// What a programmatic spawn returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnOutcome {
    /// The task.
    pub task_id: String,
    /// The instance handle (`agent:<id>:<instance>`).
    pub agent_key: String,
    /// `running` for a background (or promoted) task, else how it ended.
    pub status: TaskStatus,
    /// The answer or what went wrong, when it ended within the wait.
    pub result: Option<String>,
}

/// A task's record and the events this process kept of it ([`HarnessAgent::task_events`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskEvents {
    /// The record, with its persisted progress.
    pub record: TaskRecord,
    /// Recent events, oldest first (empty when another process runs the task).
    pub events: Vec<harness_core::AgentEvent>,
    /// Older events dropped from the buffer.
    pub dropped: u64,
    /// Whether this process runs or ran the task (so `events` is its own record).
    pub local: bool,
}
