//! `HarnessAgent`: the ReAct kernel plus a file-based workspace (persona, knowledge,
//! memory), durable sessions and per-user isolation.
//!
//! Where to start: [`HarnessAgent::builder`]. The built-in middlewares run inside the
//! user's, in this order (outermost first):
//!
//! 1. `session_persistence` — crash replay, transcript, session index ([`session`]).
//! 2. `memory` (on by default) — fact extraction after calls (`harness_memory`).
//! 3. `compaction` (when configured; else `overflow_hint`) — bounded context and overflow
//!    recovery ([`compaction`]).
//! 4. `tool_result_eviction` (on by default) — oversized tool results to files ([`eviction`]).
//! 5. `workspace_context` — the system prompt from the workspace ([`prompt`]).
//!
//! Built-in tools: the file tools (`read_file`, `write_file`, `edit_file`, `list_files`,
//! `glob_files`, `grep_files`), `execute` only when the filesystem has a shell, and the memory
//! tools (`memory_search`, `memory_get`, `session_search`, `session_history`, `session_list`)
//! while memory is on.
//!
//! Extensions without Rust ([`extensions`]): `tools.json` ([`tools_json`]: allow/deny, MCP
//! servers through [`mcp`]), skills ([`skills`]) and on-demand tool groups ([`tool_groups`]),
//! handed to [`HarnessAgentBuilder::extensions`].
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
//! let reply = agent.call("hi", RuntimeContext::for_user("u1")).await?;
//! assert_eq!(reply.text(), "hello");
//! assert!(model.requests()[0].system.render().contains("You are Ada"));
//! # Ok::<_, Box<dyn std::error::Error>>(()) }).unwrap();
//! ```

mod agent;
pub mod compaction;
pub mod config;
pub mod eviction;
pub mod extensions;
pub mod filesystem;
pub mod mcp;
pub mod prompt;
pub mod session;
pub mod skills;
pub mod tool_groups;
pub mod tools;
pub mod tools_json;
pub mod workspace;

pub use agent::{BuildError, DEFAULT_AGENT_NAME, DEFAULT_WORKSPACE, HarnessAgent, HarnessAgentBuilder};
pub use config::{ConfigError, HarnessConfig};
pub use workspace::{WorkspaceManager, init_workspace};
