//! MCP tool annotations, kept alongside each wrapped tool.

use serde::Serialize;

/// The hints an MCP server gives about a tool (MCP `ToolAnnotations`). All are hints, not
/// guarantees; `None` means the server did not say.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct McpToolAnnotations {
    /// A human-readable title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The tool does not modify its environment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// The tool may perform destructive updates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destructive: Option<bool>,
    /// Calling it again with the same arguments has no further effect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    /// The tool interacts with an open world of external entities.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_world: Option<bool>,
}

impl McpToolAnnotations {
    /// From the server's annotations (absent → all `None`).
    pub fn from_mcp(annotations: Option<&rmcp::model::ToolAnnotations>) -> Self {
        let Some(a) = annotations else {
            return Self::default();
        };
        Self {
            title: a.title.clone(),
            read_only: a.read_only_hint,
            destructive: a.destructive_hint,
            idempotent: a.idempotent_hint,
            open_world: a.open_world_hint,
        }
    }

    /// The hints as the kernel's [`harness_core::ToolAnnotations`] (same meanings; MCP has no
    /// concurrency hint, so a tool is concurrency-safe exactly when it says it is read-only).
    pub fn to_core(&self) -> harness_core::ToolAnnotations {
        harness_core::ToolAnnotations {
            read_only: self.read_only,
            destructive: self.destructive,
            idempotent: self.idempotent,
            open_world: self.open_world,
            concurrency_safe: None,
            // Never a server's claim.
            agent_local: false,
        }
    }

    /// The hints the harness acts on: all of them when the server is trusted
    /// (`"trust_annotations": true` in tools.json); otherwise none — the tool counts as
    /// unhinted for permissions, plan mode and re-sending — except that a claimed read-only
    /// tool may still run side by side with others in one step (a scheduling choice only).
    pub fn effective(&self, trusted: bool) -> harness_core::ToolAnnotations {
        if trusted {
            return self.to_core();
        }
        let mut unhinted = harness_core::ToolAnnotations::new();
        if self.read_only == Some(true) {
            unhinted = unhinted.concurrency_safe(true);
        }
        unhinted
    }

    /// A short human summary, e.g. `read-only, idempotent`; empty when nothing is known.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        let mut flag = |value: Option<bool>, yes: &'static str, no: &'static str| match value {
            Some(true) => parts.push(yes),
            Some(false) if !no.is_empty() => parts.push(no),
            _ => {}
        };
        flag(self.read_only, "read-only", "writes");
        flag(self.destructive, "destructive", "");
        flag(self.idempotent, "idempotent", "");
        flag(self.open_world, "open-world", "closed-world");
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::McpToolAnnotations;

    fn claims_read_only() -> McpToolAnnotations {
        McpToolAnnotations {
            read_only: Some(true),
            open_world: Some(false),
            idempotent: Some(true),
            ..McpToolAnnotations::default()
        }
    }

    #[test]
    fn an_untrusted_servers_hints_are_claims_only_the_scheduler_uses() {
        let hints = claims_read_only().effective(false);
        assert!(!hints.is_read_only(), "{hints:?}");
        assert!(hints.is_open_world(), "{hints:?}");
        assert!(!hints.is_idempotent(), "{hints:?}");
        assert!(hints.is_concurrency_safe(), "{hints:?}");
        let writes = McpToolAnnotations {
            read_only: Some(false),
            ..McpToolAnnotations::default()
        };
        assert!(!writes.effective(false).is_concurrency_safe());
    }

    #[test]
    fn a_trusted_servers_hints_are_honoured() {
        let hints = claims_read_only().effective(true);
        assert!(hints.is_read_only() && !hints.is_open_world() && hints.is_idempotent());
    }
}
