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
        }
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
