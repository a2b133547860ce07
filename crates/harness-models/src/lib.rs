//! Model providers for Harness.
//!
//! Wire protocols only — no agent logic. Start with [`ScriptedModel`], the test double every
//! other crate's tests use.

mod scripted;

pub use scripted::{Fallback, Reply, ScriptError, ScriptedError, ScriptedModel, ScriptedToolCall};
