//! `HarnessAgent`: the ReAct kernel plus a file-based workspace (persona, knowledge,
//! memory), durable sessions and per-user isolation.
//!
//! Where to start: [`HarnessAgent::builder`], or [`HarnessAgent::from_workspace`] for the
//! builder a workspace's `harness.toml` describes (what the CLI uses). Sessions can be read
//! without an agent through [`SessionReader`]. Everything the agent adds to the kernel comes
//! from a [`Capability`](capability::Capability) (tools, middleware, prompt parts, a
//! `harness.toml` section, session slots, shutdown); `build()` is a loop over the registered
//! ones, and the middleware order is each one's [`Layer`](capability::Layer), inside the
//! user's middlewares, outermost first:
//!
//! 1. `Session`: `session_persistence` — crash replay, transcript, session index ([`session`]);
//!    then `session_control` — control calls, the session inbox, the shutdown flag ([`control`]).
//! 2. `Memory`: `memory` (on by default) — fact extraction after calls (`harness_memory`).
//! 3. `Compaction`: `compaction` (when configured) — bounded context and
//!    overflow recovery ([`compaction`]).
//! 4. `Eviction`: `tool_result_eviction` (on by default) — oversized tool results to files
//!    ([`eviction`]).
//! 5. `Context`: `workspace_context` — the system prompt from the workspace and the
//!    capabilities' prompt parts ([`prompt`]).
//!
//! Built-in tools: the file tools (`read_file`, `write_file`, `edit_file`, `list_files`,
//! `glob_files`, `grep_files`), `execute` only when the filesystem has a shell, and the memory
//! tools (`memory_search`, `memory_get`, `session_search`, `session_history`, `session_list`)
//! while memory is on.
//!
//! Extensions without Rust ([`extensions`]): `tools.json` (`harness_mcp::tools_json`:
//! allow/deny, MCP servers through `harness_mcp`), skills (`harness_skills`), the caller's
//! own `tools.json` ([`user_tools`]) and on-demand tool groups ([`tool_groups`]), handed to
//! [`HarnessAgentBuilder::extensions`].
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use harness::HarnessAgent;
//! use harness_core::RuntimeContext;
//! use harness_models::ScriptedModel;
//! let dir = tempfile::tempdir()?;
//! std::fs::write(dir.path().join("AGENTS.md"), "You are Ada, a terse assistant.")?;
//! let model = ScriptedModel::new().reply_text("hello");
//! let agent = HarnessAgent::builder().workspace(dir.path()).model(model.clone()).build()?;
//! let reply = agent.call("hi", RuntimeContext::for_user(harness_core::UserId::from_static("u1"))).await?;
//! assert_eq!(reply.text(), "hello");
//! assert!(model.requests()[0].system.render().contains("You are Ada"));
//! # Ok::<_, Box<dyn std::error::Error>>(()) }).unwrap();
//! ```

mod agent;
mod builtins;
pub mod capability;
pub mod compaction;
pub mod config;
pub mod control;
pub mod eviction;
pub mod extensions;
pub mod facts;
pub mod filesystem;
pub mod from_workspace;
pub mod history;
mod memory;
pub mod model_config;
pub mod permissions;
pub mod plan_mode;
pub mod prompt;
pub mod sandbox;
pub mod session;
pub mod state;
pub mod structured;
mod structured_call;
mod subagent_control;
pub mod subagents;
pub mod task_list;
/// On-demand tool groups (the engine lives in `harness-skills`).
pub use harness_skills::tool_groups;
pub mod tools;
pub mod user_tools;
pub mod workspace;

pub use agent::{BuildError, HarnessAgent, HarnessAgentBuilder};
pub use config::{CONFIG_FILE, DEFAULT_AGENT_NAME, DEFAULT_WORKSPACE};
pub use config::{ConfigError, HarnessConfig};
pub use from_workspace::{LoadedWorkspace, ModelSource, WorkspaceLoader};
pub use history::{HistoryError, SessionHit, SessionListing, SessionReader};
pub use model_config::ModelSection;
pub use workspace::{WorkspaceManager, init_workspace};
