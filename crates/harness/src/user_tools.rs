//! A caller's own `tools.json`: `<user>/tools.json` in the caller's layer of the workspace
//! (the namespace of [`CallScope`]), read on every reasoning step on top of the workspace
//! root's file. It can only narrow the tool set: its `deny` is added to the root's, its
//! `allow` intersected with the root's ([`ToolFilter::narrow`]); `mcpServers` in it is an
//! error naming the key and the file. Under isolation `agent` and `global` the caller's
//! layer is the workspace root, so there is no per-caller file.
//!
//! [`CallerToolsLayer`] narrows the step's `Turn::tools`, so the kernel neither offers a
//! removed tool to the model nor runs a guessed call to one.

use async_trait::async_trait;
use harness_core::{AgentError, Hooks, Middleware, ReasoningNext, RuntimeContext, Turn};
use harness_fs::{CallScope, CallWorkspace, FsError, WsPath};
use harness_mcp::tools_json::{TOOLS_JSON, ToolFilter, ToolsConfig, ToolsConfigError};
use std::sync::Arc;

/// The caller's own filter, when the call has a caller's layer with a `tools.json` in it.
///
/// # Errors
/// [`ToolsConfigError`] naming the file (`<namespace>/tools.json`): unreadable, malformed,
/// an unknown key, or `mcpServers`.
pub async fn caller_tool_filter(ctx: &RuntimeContext) -> Result<Option<ToolFilter>, ToolsConfigError> {
    let (Some(scope), Some(workspace)) = (ctx.get::<CallScope>(), ctx.get::<CallWorkspace>()) else {
        return Ok(None);
    };
    if scope.is_shared_namespace() {
        return Ok(None);
    }
    let origin = format!("{}/{TOOLS_JSON}", scope.namespace());
    let path = WsPath::parse(TOOLS_JSON).map_err(|err| ToolsConfigError::Unreadable {
        origin: origin.clone(),
        message: err.to_string(),
    })?;
    // The caller's own layer only (not the layered view): the root's tools.json is the
    // workspace's, never the caller's.
    let bytes = match workspace.user.read(&path).await {
        Ok(bytes) => bytes,
        Err(FsError::NotFound { .. }) => return Ok(None),
        Err(err) => {
            return Err(ToolsConfigError::Unreadable {
                origin,
                message: harness_core::error_chain(&err),
            });
        }
    };
    let text = String::from_utf8_lossy(&bytes);
    ToolsConfig::parse_user_layer(&text, &origin).map(Some)
}

/// The caller's filter in force for a call, passed to the children it spawns (a child's
/// layer holds no `tools.json` of the caller's, and a model-written agent file must not get
/// back what the caller's file took away).
#[derive(Debug, Clone)]
pub(crate) struct InheritedCallerFilter(pub(crate) ToolFilter);

/// Narrows every step's tools by the caller's `tools.json`. See the module docs.
#[derive(Debug, Default)]
pub struct CallerToolsLayer;

#[async_trait]
impl Middleware for CallerToolsLayer {
    fn name(&self) -> &'static str {
        "caller_tools"
    }

    fn hooks(&self) -> Hooks {
        Hooks::REASONING
    }

    async fn reasoning(&self, turn: &mut Turn, next: ReasoningNext<'_>) -> Result<(), AgentError> {
        let own = caller_tool_filter(turn.ctx())
            .await
            .map_err(|err| AgentError::Capability {
                capability: "tools.json",
                source: Box::new(err),
            })?;
        // A child's layer is its own: its caller's file reaches it through the spawn.
        let filter = match (turn.ctx().get::<InheritedCallerFilter>(), own) {
            (Some(inherited), Some(own)) => Some(inherited.0.narrow(&own)),
            (Some(inherited), None) => Some(inherited.0.clone()),
            (None, own) => own,
        };
        let Some(filter) = filter.filter(|filter| !filter.is_open()) else {
            return next.run(turn).await;
        };
        // What the children this step spawns are narrowed by.
        turn.ctx_mut().insert(InheritedCallerFilter(filter.clone()));
        if turn.tools().iter().all(|spec| filter.permits(&spec.name)) {
            return next.run(turn).await;
        }
        let all = Arc::clone(turn.tools());
        turn.set_tools(all.iter().filter(|spec| filter.permits(&spec.name)).cloned().collect());
        let result = next.run(turn).await;
        turn.set_tools(all);
        result
    }
}
