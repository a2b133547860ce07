//! [`ToolAnnotations`]: what a tool does to the world, with the meaning of MCP's tool
//! annotations (`readOnlyHint`, `destructiveHint`, `idempotentHint`, `openWorldHint`) plus
//! `concurrency_safe`, which the kernel's scheduler reads.
//!
//! Every hint is optional. An unset hint takes MCP's default, the cautious one: a tool is
//! assumed to write (`read_only = false`), to be destructive, not idempotent and to reach the
//! open world; it is concurrency-safe exactly when it is read-only. Annotations are local
//! metadata: they are never sent to a provider.

use serde::{Deserialize, Serialize};

/// Hints about a tool's effects. Build with the `const` builder methods:
///
/// ```
/// use harness_core::ToolAnnotations;
/// const READ: ToolAnnotations = ToolAnnotations::new().read_only().closed_world();
/// assert!(READ.is_read_only() && READ.is_concurrency_safe() && !READ.is_open_world());
/// assert!(!READ.is_destructive());
/// let unset = ToolAnnotations::default();
/// assert!(!unset.is_read_only() && unset.is_destructive() && !unset.is_concurrency_safe());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolAnnotations {
    /// The tool does not change its environment (MCP `readOnlyHint`; unset = `false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// A write may destroy or overwrite data rather than only add (MCP `destructiveHint`;
    /// unset = `true`; meaningless for a read-only tool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive: Option<bool>,
    /// Repeating a call with the same arguments has no further effect (MCP
    /// `idempotentHint`; unset = `false`; meaningless for a read-only tool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    /// The tool reaches entities outside the agent's own environment, such as the web or a
    /// shell (MCP `openWorldHint`; unset = `true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world: Option<bool>,
    /// Calls of this tool may run at the same time as other calls of the same step (unset =
    /// the value of [`is_read_only`](Self::is_read_only)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_safe: Option<bool>,
    /// The tool acts only on the agent's own session: its plan, its task list, or child
    /// agents that inherit its restrictions (plan mode lets such tools run). Set only in
    /// code — never read from a tool server's claims, so it is not (de)serialised.
    #[serde(skip)]
    pub agent_local: bool,
}

impl ToolAnnotations {
    /// No hint set: every hint takes its cautious default.
    pub const fn new() -> Self {
        Self {
            read_only: None,
            destructive: None,
            idempotent: None,
            open_world: None,
            concurrency_safe: None,
            agent_local: false,
        }
    }

    /// Marks the tool as acting only on the agent's own session (see
    /// [`agent_local`](Self::agent_local)).
    #[must_use]
    pub const fn agent_local(mut self) -> Self {
        self.agent_local = true;
        self
    }

    /// Whether the tool acts only on the agent's own session.
    pub const fn is_agent_local(&self) -> bool {
        self.agent_local
    }

    /// Marks the tool read-only (and so, unless said otherwise, concurrency-safe).
    #[must_use]
    pub const fn read_only(mut self) -> Self {
        self.read_only = Some(true);
        self
    }

    /// Sets whether a write may destroy data.
    #[must_use]
    pub const fn destructive(mut self, destructive: bool) -> Self {
        self.destructive = Some(destructive);
        self
    }

    /// Marks repeated calls with the same arguments as harmless.
    #[must_use]
    pub const fn idempotent(mut self) -> Self {
        self.idempotent = Some(true);
        self
    }

    /// Marks the tool as reaching only the agent's own environment (workspace, memory).
    #[must_use]
    pub const fn closed_world(mut self) -> Self {
        self.open_world = Some(false);
        self
    }

    /// Sets whether the tool reaches the open world.
    #[must_use]
    pub const fn open_world(mut self, open: bool) -> Self {
        self.open_world = Some(open);
        self
    }

    /// Sets whether calls may overlap other calls of the same step.
    #[must_use]
    pub const fn concurrency_safe(mut self, safe: bool) -> Self {
        self.concurrency_safe = Some(safe);
        self
    }

    /// Whether the tool does not change its environment (default `false`).
    pub const fn is_read_only(&self) -> bool {
        matches!(self.read_only, Some(true))
    }

    /// Whether a call may destroy data: never for a read-only tool, else default `true`.
    pub const fn is_destructive(&self) -> bool {
        !self.is_read_only() && !matches!(self.destructive, Some(false))
    }

    /// Whether repeating a call is harmless: always for a read-only tool, else default
    /// `false`.
    pub const fn is_idempotent(&self) -> bool {
        self.is_read_only() || matches!(self.idempotent, Some(true))
    }

    /// Whether the tool reaches the open world (default `true`).
    pub const fn is_open_world(&self) -> bool {
        !matches!(self.open_world, Some(false))
    }

    /// Whether calls may run concurrently with others of the same step (default: read-only).
    pub const fn is_concurrency_safe(&self) -> bool {
        match self.concurrency_safe {
            Some(safe) => safe,
            None => self.is_read_only(),
        }
    }

    /// Whether no hint is set.
    pub const fn is_unset(&self) -> bool {
        self.read_only.is_none()
            && self.destructive.is_none()
            && self.idempotent.is_none()
            && self.open_world.is_none()
            && self.concurrency_safe.is_none()
            && !self.agent_local
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_hints_take_mcp_defaults() {
        let unset = ToolAnnotations::new();
        assert!(unset.is_unset());
        assert!(!unset.is_read_only());
        assert!(unset.is_destructive());
        assert!(!unset.is_idempotent());
        assert!(unset.is_open_world());
        assert!(!unset.is_concurrency_safe());
    }

    #[test]
    fn concurrency_safe_follows_read_only_unless_set() {
        assert!(ToolAnnotations::new().read_only().is_concurrency_safe());
        assert!(
            !ToolAnnotations::new()
                .read_only()
                .concurrency_safe(false)
                .is_concurrency_safe()
        );
        assert!(ToolAnnotations::new().concurrency_safe(true).is_concurrency_safe());
    }

    #[test]
    fn write_hints_do_not_apply_to_read_only_tools() {
        let read = ToolAnnotations::new().read_only().destructive(true);
        assert!(!read.is_destructive());
        assert!(read.is_idempotent());
        let append = ToolAnnotations::new().destructive(false).closed_world();
        assert!(!append.is_destructive() && !append.is_open_world() && !append.is_idempotent());
    }

    #[test]
    fn serialized_form_has_only_the_set_hints() {
        let hints = ToolAnnotations::new().read_only().closed_world();
        let json = serde_json::to_value(hints).unwrap_or_default();
        assert_eq!(json, serde_json::json!({"read_only": true, "open_world": false}));
        let back: ToolAnnotations = serde_json::from_value(json).unwrap_or_default();
        assert_eq!(back, hints);
    }
}
