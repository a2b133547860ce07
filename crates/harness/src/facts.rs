//! Typed facts through which capabilities that need each other meet, without importing each
//! other: values one capability [provides](crate::capability::Setup::provide) at build time
//! and another reads, or values on the call context. This module imports no capability.

use std::sync::Arc;

/// Provided when plan mode is enabled: the permission check is then on even without
/// `[permissions]`, and so is the task list (its tool runs while planning).
#[derive(Debug, Clone, Copy)]
pub struct PlanModeEnabled;

/// Provided by plan mode when `[plan] task_list` asks for the task list.
#[derive(Debug, Clone, Copy)]
pub struct TaskListRequested;

/// On the call context of an isolated child's turn: the parent's scope, from which the
/// child's own layer is derived.
#[derive(Debug, Clone)]
pub struct IsolatedParent(pub harness_fs::CallScope);

/// A builder setting of a child whose declaration brings its own persona: the workspace's
/// AGENTS.md reaches it as its parent's context, never as who it is.
#[derive(Debug, Clone, Copy)]
pub struct OwnPersona;

pub use harness_compaction::CompactionHook;

/// Provided by a capability that wants to see what compaction replaces.
#[derive(Clone)]
pub struct BeforeCompaction(pub Arc<dyn CompactionHook>);

impl std::fmt::Debug for BeforeCompaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BeforeCompaction")
    }
}

/// Provided by the sandbox capability: `execute` is offered, confined, and this is its prompt
/// part (what is enforced) instead of the host shell's.
#[derive(Debug, Clone)]
pub struct SandboxedShell(pub String);

/// On the call context of a sandboxed turn: its binding; a child's turn gets a clone.
pub use harness_sandbox::CallSandbox as SandboxedCall;
