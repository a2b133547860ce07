//! The roster: the merged declarations one agent may spawn (the built-in, workspace files,
//! the builder's), a caller's own `<ns>/subagents/<id>.md` resolved per call, and the
//! permission gate on remote ones.

use super::declaration::{self, DeclarationWarning, SubagentDeclaration};
use super::spawn_error::SpawnError;
use crate::capability::CapabilityError;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The merged declarations of one agent.
pub(crate) struct Declarations {
    pub(crate) shared: BTreeMap<String, SubagentDeclaration>,
    pub(crate) warnings: Vec<DeclarationWarning>,
    /// What a caller's own files are parsed with (`[subagents]`).
    options: declaration::ParseOptions,
    /// This agent's permission policy: a call of a remote subagent is open-world and is
    /// decided by it as such (it asks under the default permissions).
    pub(crate) policy: Option<Arc<harness_policy::Policy>>,
}

impl std::fmt::Debug for Declarations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Declarations")
            .field("shared", &self.shared)
            .field("warnings", &self.warnings)
            .finish_non_exhaustive()
    }
}

impl Declarations {
    /// The merged declarations of an agent at `root`: the built-in `general-purpose`, then
    /// the workspace's `subagents/<id>.md` files (`files` when the loader read them; a
    /// malformed one is skipped with a warning),
    /// then `declared` on the builder; a later one of the same id replaces an earlier one.
    ///
    /// # Errors
    /// A declared id that cannot be part of a session id.
    pub(crate) fn load(
        root: &std::path::Path,
        files: Option<&declaration::DeclarationFiles>,
        declared: Vec<SubagentDeclaration>,
        options: &declaration::ParseOptions,
        variables: &(dyn Fn(&str) -> Option<String> + Send + Sync),
        policy: Option<Arc<harness_policy::Policy>>,
    ) -> Result<Self, CapabilityError> {
        let mut shared = BTreeMap::new();
        let builtin = SubagentDeclaration::general_purpose();
        shared.insert(builtin.id.clone(), builtin);
        // The files the loader read, else the directory now.
        let (mut files, mut warnings) = match files {
            Some(files) => declaration::load_files(files, "subagents", options),
            None => declaration::load_dir(&root.join("subagents"), "subagents", options),
        };
        files.retain(
            |_, declaration| match declaration::substitute_headers(declaration, variables) {
                Ok(()) => true,
                Err(warning) => {
                    warnings.push(warning);
                    false
                }
            },
        );
        for warning in &warnings {
            tracing::warn!(file = %warning.file, key = %warning.key, "subagent file: {warning}");
        }
        shared.extend(files);
        for declaration in declared {
            if !declaration::valid_id(&declaration.id) {
                return Err(CapabilityError::new(
                    "subagents",
                    format!(
                        "subagent id `{}` may hold letters, digits, `-`, `_` and `.` only",
                        declaration.id
                    ),
                ));
            }
            shared.insert(declaration.id.clone(), declaration);
        }
        Ok(Self {
            shared,
            warnings,
            options: options.clone(),
            policy,
        })
    }

    /// The declaration `id` for the caller in `ctx`: the caller's own
    /// `<ns>/subagents/<id>.md` when it has one, else the merged one.
    ///
    /// # Errors
    /// The caller's own file is malformed (the message names file and key), or no such id.
    pub(crate) async fn resolve(
        &self,
        ctx: &harness_core::RuntimeContext,
        id: &str,
    ) -> Result<SubagentDeclaration, String> {
        if declaration::valid_id(id)
            && let (Some(scope), Some(workspace)) = (
                ctx.get::<harness_fs::CallScope>(),
                ctx.get::<harness_fs::CallWorkspace>(),
            )
            && !scope.is_shared_namespace()
            && let Ok(path) = harness_fs::WsPath::parse(&format!("subagents/{id}.md"))
            && let Ok(bytes) = workspace.user.read(&path).await
        {
            let file = format!("{}/subagents/{id}.md", scope.namespace());
            let text = String::from_utf8_lossy(&bytes);
            // A per-user file may have been written by the model: it runs as a local child
            // on the operator's models, and never carries a URL, a header or a variable.
            let parsed = declaration::parse_user_spec(id, &file, &text, &self.options).map_err(|warning| {
                tracing::warn!(file = %warning.file, key = %warning.key, "subagent file: {warning}");
                format!("subagent `{id}` was not spawned: {warning}")
            })?;
            for warning in &parsed.warnings {
                tracing::warn!(file = %warning.file, key = %warning.key, "subagent file: {warning}");
            }
            return Ok(parsed.declaration);
        }
        self.shared.get(id).cloned().ok_or_else(|| {
            SpawnError::Unknown {
                id: id.to_owned(),
                available: self.listed().map(|d| d.id.as_str()).collect::<Vec<_>>().join(", "),
            }
            .to_string()
        })
    }

    /// The decision for a call of a remote subagent (open-world: the task leaves the
    /// process): `None` when it may run, else the output that refuses it or asks a person.
    pub(crate) fn gate_remote(
        &self,
        ctx: &harness_core::ToolContext,
        call: &harness_core::ToolCall,
        declaration: &SubagentDeclaration,
    ) -> Option<harness_core::ToolOutput> {
        if !declaration.is_remote() || ctx.is_approved(call) {
            return None;
        }
        let policy = self.policy.as_deref().cloned().unwrap_or_default();
        let hints = harness_core::ToolAnnotations::new().open_world(true);
        let url = declaration.url.as_deref().unwrap_or_default();
        match policy.decide(&call.name, hints, &call.input) {
            harness_policy::Decision::Allow => None,
            harness_policy::Decision::Ask { reason, suggestion, .. } => {
                let reason = format!(
                    "subagent `{}` runs on the remote server {url}: {reason}",
                    declaration.id
                );
                Some(ctx.request_approval(call, &reason, (!suggestion.is_empty()).then_some(suggestion)))
            }
            harness_policy::Decision::Deny { reason } | harness_policy::Decision::Invalid { message: reason } => {
                Some(harness_core::ToolOutput::error(format!(
                    "Permission denied: subagent `{}` runs on the remote server {url} and {reason}. The call was not run; do not retry it.",
                    declaration.id
                )))
            }
        }
    }

    /// The declarations the model sees, by id.
    pub(crate) fn listed(&self) -> impl Iterator<Item = &SubagentDeclaration> {
        self.shared.values().filter(|declaration| !declaration.hidden)
    }
}
