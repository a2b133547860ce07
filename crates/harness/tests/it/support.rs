//! Shared helpers.

use harness::HarnessAgent;
use harness_core::{
    AgentEvent, JsonSchema, RuntimeContext, ToolContext, ToolError, ToolOutput, TypedTool, async_trait,
};
use harness_models::ScriptedModel;
use serde::Deserialize;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub fn agent(dir: &Path, model: &ScriptedModel) -> HarnessAgent {
    builder().workspace(dir).model(model.clone()).build().unwrap()
}

/// `text` parsed as a harness.toml.
pub fn parse(text: &str) -> harness::HarnessConfig {
    harness::HarnessConfig::parse(text, Path::new("harness.toml")).unwrap()
}

/// An agent on `dir` with a host shell (`execute`) and `config` as its harness.toml.
pub fn shell_agent(dir: &Path, config: &str, model: &ScriptedModel) -> HarnessAgent {
    let fs = harness_fs::LocalFs::new(dir)
        .unwrap()
        .with_shell(harness_fs::LocalShellConfig::default());
    builder()
        .workspace(dir)
        .filesystem(Arc::new(fs))
        .config(parse(config))
        .model(model.clone())
        .build()
        .unwrap()
}

/// Every tool result the model was sent on its latest request, as debug text.
pub fn last_tool_results(model: &ScriptedModel) -> Vec<String> {
    model
        .requests()
        .last()
        .unwrap()
        .messages
        .iter()
        .flat_map(|msg| msg.content.iter())
        .filter_map(|block| match block {
            block @ harness_core::Block::ToolResult { .. } => Some(format!("{block:?}")),
            _ => None,
        })
        .collect()
}

/// A builder with memory off, so scripted replies are only consumed by the turns a test
/// drives (memory tests turn it on with a model of their own).
pub fn builder() -> harness::HarnessAgentBuilder {
    let mut memory = harness_memory::MemoryConfig::default();
    memory.enabled = false;
    HarnessAgent::builder().memory(memory)
}

/// Permissions for a test that runs the shell or MCP tools unattended and is not about
/// permissions: mode `bypass` (the built-in defaults would ask).
pub fn unattended() -> harness::permissions::Policy {
    harness::permissions::Policy {
        mode: harness::permissions::Mode::Bypass,
        ..Default::default()
    }
}

pub fn ctx(user: &str, session: &str) -> RuntimeContext {
    RuntimeContext::for_user(harness_core::UserId::parse(user).unwrap())
        .with_session(harness_core::SessionId::parse(session).unwrap())
}

pub async fn collect(stream: harness_core::AgentStream) -> Vec<AgentEvent> {
    use futures::StreamExt;
    stream.collect().await
}

/// Arguments of `write_note`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WriteNoteArgs {
    /// Workspace-relative path.
    pub path: String,
    /// Text to write.
    pub text: String,
}

/// Writes a file into the caller's workspace view (the shared root), like an operator edit
/// happening between two steps.
pub struct WriteNote {
    pub root: std::path::PathBuf,
}

#[async_trait]
impl TypedTool for WriteNote {
    const NAME: &'static str = "write_note";
    const DESCRIPTION: &'static str = "Write a file.";
    // It writes inside the test's workspace: closed-world, so the default permissions run it.
    const ANNOTATIONS: harness_core::ToolAnnotations = harness_core::ToolAnnotations::new().closed_world();
    type Args = WriteNoteArgs;

    async fn call(&self, args: WriteNoteArgs, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        std::fs::write(self.root.join(&args.path), args.text).map_err(|e| ToolError::failed(e.to_string()))?;
        Ok(ToolOutput::text("written"))
    }
}

/// Arguments of `sleep`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SleepArgs {
    /// Milliseconds.
    pub ms: u64,
}

/// Sleeps, for crash and cancellation tests.
pub struct Sleep;

#[async_trait]
impl TypedTool for Sleep {
    const NAME: &'static str = "sleep";
    const DESCRIPTION: &'static str = "Sleep.";
    // No effect outside the process: closed-world, so the default permissions run it.
    const ANNOTATIONS: harness_core::ToolAnnotations = harness_core::ToolAnnotations::new().closed_world();
    type Args = SleepArgs;

    async fn call(&self, args: SleepArgs, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        tokio::time::sleep(Duration::from_millis(args.ms)).await;
        Ok(ToolOutput::text("slept"))
    }
}

pub fn tool<T: TypedTool>(tool: T) -> Arc<dyn harness_core::Tool> {
    harness_core::typed(tool)
}

/// `user`'s `session` as saved in the workspace at `dir`, its messages the whole context
/// (the inline part and the transcript's tail).
pub async fn saved_context(dir: &Path, user: &str, session: &str) -> harness_core::AgentState {
    let reader = harness::history::SessionReader::open(dir, None).await.unwrap();
    let (user, session) = (
        harness_core::UserId::parse(user).unwrap(),
        harness_core::SessionId::parse(session).unwrap(),
    );
    reader.state(&user, &session).await.unwrap().unwrap()
}
