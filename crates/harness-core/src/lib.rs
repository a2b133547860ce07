//! The Harness kernel.
//!
//! `harness-core` runs the ReAct loop and knows nothing about workspaces, memory, files or
//! networks: it does no IO. The outside world reaches it only through traits —
//! [`ChatModel`] (a language model), [`Tool`] (something the model can call) and
//! [`StateStore`] (where sessions live) — and every capability plugs in as a [`Middleware`].
//!
//! Where to start: [`ReActAgent::builder`], then [`Middleware`] for the onion and [`Msg`] for
//! the persisted message format.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use harness_core::{ReActAgent, RuntimeContext};
//! use harness_models::ScriptedModel;
//! let model = ScriptedModel::new().reply_text("4");
//! let agent = ReActAgent::builder().model(model).sys_prompt("Be brief.").build()?;
//! let reply = agent.call("2 + 2?", RuntimeContext::for_user(harness_core::UserId::from_static("alice"))).await?;
//! assert_eq!(reply.text(), "4");
//! # Ok::<_, Box<dyn std::error::Error>>(()) }).unwrap();
//! ```

mod acting;
mod agent;
mod annotations;
mod approval;
mod context;
mod error_kind;
mod event;
mod id;
mod lease;
mod message;
mod middleware;
mod model;
mod owner;
mod reasoning;
pub mod redact;
pub mod secret;
pub mod semconv;
mod session_state;
mod state;
mod tokens;
mod tool;
mod turn;

pub use agent::{
    AgentError, AgentInput, AgentStream, BuildError, DEFAULT_MAX_ITERS, DEFAULT_SESSION, DEFAULT_SESSION_ID,
    DEFAULT_TOOL_TIMEOUT, DEFAULT_USER, DEFAULT_USER_ID, ReActAgent, ReActAgentBuilder, error_chain,
};
pub use annotations::ToolAnnotations;
pub use approval::{
    ApprovalDecision, ApprovalError, Approvals, ChildDecision, PendingApproval, PendingCall, PendingChild,
    TurnModelSpec, Verdict,
};
pub use context::RuntimeContext;
pub use error_kind::ErrorKind;
pub use event::{AgentEvent, EventKind, EventSink, EventSource};
pub use id::{AgentId, ID_RULE, IdError, MAX_ID_LEN, SessionId, UserId, check_id};
pub use lease::{FencingToken, LeaseError, LeaseGuard, LeaseKey, LeaseRelease, SessionLease};
pub use message::{Block, MSG_FORMAT, MediaSource, Msg, Role, ToolCallRef, Usage, join_text, meta};
pub use middleware::{ActingNext, AgentNext, Hooks, Middleware, ModelCallInfo, ModelNext, ReasoningNext};
pub use model::{
    BoxError, ChatModel, ChatRequest, FinishReason, ModelChunk, ModelError, ModelResponse, ModelStream, PromptPart,
    ResponseAccumulator, ResponseFormat, SystemPrompt, ToolChoice, ToolSpec, collect, parse_arguments,
};
pub use owner::{OWNER_SLOT, SessionOwners};
pub use session_state::{SessionSlot, SessionState, SessionStateError};
pub use state::{
    AgentState, InMemoryStateStore, STATE_FORMAT, StateError, StateKey, StateStore, Version, repair_tool_pairs,
    repair_tool_pairs_except,
};
pub use tokens::{
    MEDIA_TOKENS, MESSAGE_OVERHEAD_TOKENS, estimate_msg, estimate_request, estimate_tokens, prefix_within_tokens,
};
pub use tool::{
    Tool, ToolCall, ToolContext, ToolError, ToolOutput, Toolkit, ToolkitError, TypedTool, excerpt, schema_of, typed,
};
pub use turn::Turn;

/// Re-exported for middleware and tool implementations.
pub use async_trait::async_trait;
/// Re-exported for [`TypedTool`] argument types.
pub use schemars::JsonSchema;
/// Re-exported because it appears in public signatures.
pub use tokio_util::sync::CancellationToken;
