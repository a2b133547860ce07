//! Subagents as a [`Capability`]: delegation to child agents with their own sessions, run
//! synchronously (the spawn's tool result) or as background tasks (pushed back once, before
//! the parent's next reasoning step).
//!
//! - **Settings** (`settings.rs`): `[subagents]` and what the builder adds.
//! - **Declarations** ([`declaration`]: the `harness-agents` crate; the roster in `roster.rs`): the built-in
//!   `general-purpose` (the parent's model, tools, capabilities and prompt, its memory and
//!   session tools; shared), workspace files `subagents/<id>.md`, a caller's own
//!   `<ns>/subagents/<id>.md` (resolved per call, shadowing the shared one), and
//!   [`HarnessAgentBuilder::subagent`](crate::HarnessAgentBuilder::subagent). The prompt
//!   lists each listed one by id and description only.
//! - **Children** (`factory.rs`) are [`HarnessAgent`](crate::HarnessAgent)s built from the
//!   parent's recipe: the same model, workspace, filesystem, configuration, user middlewares
//!   and capabilities (so a permission capability or middleware on the parent applies to the
//!   child), no memory of their own, one level deeper. A leaf (depth = `max_depth`) gets no
//!   subagent tools. A child's shutdown never stops what it shares with its parent.
//! - **Spawning** (`spawn.rs`, limits in `limits.rs`, token budgets in `budget.rs`): a child's
//!   session id is bounded at any depth (`lineage.rs`), its readable path kept in the record.
//! - **Tasks** ([`records`]): every spawn is a task recorded in the parent session's task
//!   file with compare-and-set; `runtime.rs` is the registry of this process's tasks,
//!   `task.rs` one task's run, `events.rs` its recent events, `tools.rs` the model's tools,
//!   `pushback.rs` the delivery of background results, `control.rs` the application's API.

mod budget;
pub(crate) mod control;
pub use harness_agents as declaration;
mod events;
mod factory;
pub(crate) mod limits;
mod lineage;
mod pushback;
pub use harness_agents::records;
mod remote;
mod roster;
pub(crate) mod runtime;
mod settings;
pub(crate) mod spawn;
pub(crate) mod spawn_error;
pub(crate) mod takeover;
mod task;
mod tools;

use crate::capability::{Assembly, Capability, CapabilityError, Layer, Registration, Setup};
pub(crate) use crate::facts::IsolatedParent;
pub use control::{SpawnOutcome, SpawnRequest, TaskEvents};
pub use declaration::{
    DeclarationWarning, GENERAL_PURPOSE, ParseOptions, SpecOrigin, SubagentDeclaration, WarningKind, WorkspaceMode,
    parse_user_spec,
};
use factory::ChildFactory;
use harness_core::{Middleware, PromptPart, Tool};
pub use records::{TaskFile, TaskProgress, TaskRecord, TaskStatus, TaskStore, TaskStoreError};
use roster::Declarations;
use runtime::Runtime;
pub(crate) use settings::parse_spec_from;
pub(crate) use settings::{ConfigOverride, Declared, FilesSetting, ResolverSetting, VariablesSetting};
pub use settings::{ModelResolver, SubagentsConfig, VariableLookup};
pub use spawn_error::SpawnError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
pub use tools::ForceSync;

/// `ctx` for a call that is itself a subagent at `depth` (e.g. a remote child's turn,
/// [`harness_protocol::header::DEPTH_HEADER`]), served as `agent`: its spawns count from that depth.
pub fn delegated(mut ctx: harness_core::RuntimeContext, depth: u32, agent: &str) -> harness_core::RuntimeContext {
    ctx.insert(lineage::Lineage {
        depth,
        path: agent.to_owned(),
    });
    ctx
}

/// The largest `max_depth` accepted.
pub const MAX_DEPTH_LIMIT: u32 = 3;

/// The capability's registration.
pub(crate) const REGISTRATION: Registration = Registration::new("subagents", build).with_section::<SubagentsConfig>();

fn build(setup: &mut Setup<'_>) -> Result<Option<Arc<dyn Capability>>, CapabilityError> {
    let config = match setup.take::<ConfigOverride>() {
        Some(ConfigOverride(config)) => config,
        None => setup.section::<SubagentsConfig>()?.unwrap_or_default(),
    };
    let declared = setup.take::<Declared>().unwrap_or_default();
    let depth = setup.depth();
    let parent_policy = setup.provided::<Arc<harness_policy::Policy>>().cloned();
    let resolver = setup
        .take::<ResolverSetting>()
        .map_or_else(settings::default_resolver, |ResolverSetting(resolver)| resolver);
    let variables: VariableLookup = setup.take::<VariablesSetting>().map_or_else(
        || Arc::new(|_: &str| None) as VariableLookup,
        |VariablesSetting(lookup)| lookup,
    );
    // A child keeps the resolved settings (so `max_depth` set on the builder holds below
    // the first level), the programmatic declarations, the resolver and the lookup.
    setup.inherit(ConfigOverride(config.clone()));
    setup.inherit(declared.clone());
    setup.inherit(ResolverSetting(Arc::clone(&resolver)));
    setup.inherit(VariablesSetting(Arc::clone(&variables)));
    let files = setup.take::<FilesSetting>();
    if let Some(files) = &files {
        setup.inherit(files.clone());
    }
    check(&config)?;
    if !config.enabled || depth >= config.max_depth {
        return Ok(None);
    }
    let files = files.filter(|FilesSetting(root, _)| root == setup.root());
    let declarations = Declarations::load(
        setup.root(),
        files.as_ref().map(|FilesSetting(_, files)| &**files),
        declared.0,
        &config.parse_options(),
        &*variables,
        parent_policy.clone(),
    )?;
    let factory = ChildFactory {
        model: Arc::clone(setup.model()),
        parent_name: setup.agent_id().to_string(),
        recipe: setup.recipe(),
        parent_policy,
        resolver,
        built: Mutex::new(HashMap::new()),
    };
    let handle = Handle {
        runtime: Arc::new(Runtime::new(config, depth, setup.agent_id().to_string(), factory)),
        declarations: Arc::new(declarations),
    };
    setup.provide(handle.clone());
    Ok(Some(Arc::new(SubagentsCapability(handle))))
}

/// Settings that parse but cannot be used (the builder's override is not parsed from
/// harness.toml, so `max_depth` is checked here too).
fn check(config: &SubagentsConfig) -> Result<(), CapabilityError> {
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
    Ok(())
}

/// The subagent runtime and declarations of one agent, kept by the agent for
/// [`HarnessAgent::wait_for_tasks`].
#[derive(Clone)]
pub(crate) struct Handle {
    pub(crate) runtime: Arc<Runtime>,
    pub(crate) declarations: Arc<Declarations>,
}

impl Handle {
    /// Stops this agent's running children, then shuts each built child down: its own
    /// children (recursively), its session-index writes and what else it owns — never what
    /// it shares with this agent (the inherited capabilities, the extensions and their MCP
    /// servers), which this agent's own shutdown stops, once.
    async fn shutdown(&self, deadline: tokio::time::Instant) {
        self.runtime.shutdown(deadline).await;
        for child in self.runtime.factory.children() {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            child.shutdown(left).await;
        }
    }
}

/// The capability.
struct SubagentsCapability(Handle);

impl SubagentsCapability {
    fn listing(&self) -> String {
        let mut text = String::from(
            "## Subagents\nDelegate independent, multi-step or context-heavy work with `agent_spawn` \
             (`timeout_seconds` 0: in the background, its result delivered to you before your next \
             step; do not poll). Subagents (`agent_id`: description):\n",
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
        self.0.shutdown(deadline).await;
    }
}
