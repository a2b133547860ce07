//! Permissions: every tool call gets a decision — allow, ask or deny — after its arguments
//! were checked against the schema and before the tool runs ([`Layer::Permissions`], the
//! innermost acting layer). The decision order and the rules are in [`harness_policy`]; the
//! `[permissions]` section of `harness.toml` configures them:
//!
//! ```toml
//! [permissions]
//! mode = "default"            # default | accept_edits | explore | bypass | dont_ask
//! allow = ["execute(git status*)", "execute(cargo test*)"]
//! ask = ["write_file(src/**)"]
//! deny = ["execute(rm *)"]
//! # protected = ["harness.toml", "agents/**", ...]   # default: the full set (below)
//! ```
//!
//! `protected` lists the globs of the paths the model may not change on its own
//! ([`Protected`]; each applies at the root and in every user's layer). Absent, it is the
//! full default set ([`DEFAULT_PROTECTED`]); written, it replaces that set. A bad glob
//! fails the build naming the glob and what to write instead.
//!
//! The capability is always on. Without the section the built-in defaults apply: mode
//! `default` and no rules, so read-only tools and closed-world tools (the file, memory and
//! session tools inside the caller's area, `agent_*`, `task_*`, `todo_write`, ...) run, and
//! everything else (`execute`, MCP tools without hints or with side effects) asks. A call
//! that needs approval does not run: it is recorded as pending in the session
//! ([`harness_core::PendingApproval`]) and the turn ends after its step with an
//! `ApprovalRequired` event; [`HarnessAgent::resume`](crate::HarnessAgent::resume) continues
//! it with a person's decisions, from this process or another. "Approve always" adds the
//! pending call's suggested rule to the session's [`SessionRules`] (allow rules consulted
//! after the configured ones). A subagent's ask waits in the child's session and becomes its
//! parent's pending approval (the parent's `agent_spawn`/`agent_send` call carries the
//! child's pending calls; see [`crate::subagents`]). Denied calls are also reported as
//! warning events ([`WARNING_DENIED`]).

// The engine is the `harness-policy` crate; its types appear in this module's signatures
// (`permissions(Policy)`, `PermissionsSection::policy`), hence the re-export.
pub use harness_policy::{
    DEFAULT_PROTECTED, Decision, Inheritance, Mode, Policy, Protected, Rule, RuleError, SessionMode,
};

use crate::capability::{Assembly, Capability, CapabilityError, ConfigSection, Layer, Registration, Setup};
use harness_core::{
    ActingNext, AgentError, AgentNext, Approvals, Hooks, Middleware, PendingApproval, ToolCall, ToolContext,
    ToolOutput, Turn, Verdict,
};
use serde::Deserialize;
use std::sync::Arc;

/// `[permissions]` in harness.toml.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermissionsSection {
    /// How calls no rule decides are treated.
    #[serde(default)]
    pub mode: Mode,
    /// Rules that allow (`tool` or `tool(pattern)`).
    #[serde(default)]
    pub allow: Vec<String>,
    /// Rules that ask.
    #[serde(default)]
    pub ask: Vec<String>,
    /// Rules that deny.
    #[serde(default)]
    pub deny: Vec<String>,
    /// Globs of the protected paths (absent: [`DEFAULT_PROTECTED`]; written: replaces it).
    #[serde(default)]
    pub protected: Option<Vec<String>>,
}

impl ConfigSection for PermissionsSection {
    const KEY: &'static str = "permissions";
}

impl PermissionsSection {
    /// The policy these settings describe.
    ///
    /// # Errors
    /// [`RuleError`] for the first rule or protected glob that cannot be read.
    pub fn policy(&self) -> Result<Policy, RuleError> {
        let parse = |texts: &[String]| {
            texts
                .iter()
                .map(|text| Rule::parse(text))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(Policy {
            mode: self.mode,
            allow: parse(&self.allow)?,
            ask: parse(&self.ask)?,
            deny: parse(&self.deny)?,
            ..Policy::default()
        }
        .with_protected(match &self.protected {
            Some(globs) => Protected::from_globs(globs)?,
            None => Protected::default_set(),
        }))
    }
}

/// The permissions entry of the capability registry.
pub(crate) const REGISTRATION: Registration =
    Registration::new("permissions", build).with_section::<PermissionsSection>();

/// The builder's policy (overrides `[permissions]`).
#[derive(Clone)]
pub(crate) struct PolicyOverride(pub(crate) Policy);

fn build(setup: &mut Setup<'_>) -> Result<Option<Arc<dyn Capability>>, CapabilityError> {
    let policy = match setup.take::<PolicyOverride>() {
        Some(PolicyOverride(policy)) => policy,
        None => match setup.section::<PermissionsSection>()? {
            Some(section) => section
                .policy()
                .map_err(|err| CapabilityError::new(PermissionsSection::KEY, err))?,
            // The built-in defaults: mode `default`, no rules.
            None => Policy::default(),
        },
    };
    // A child keeps the parent's deny and ask rules and its mode: never more permissive.
    setup.inherit(PolicyOverride(policy.inherited()));
    let gate = Arc::new(PermissionGate {
        policy: Arc::new(policy),
    });
    setup.provide(Arc::clone(&gate.policy));
    Ok(Some(Arc::new(Permissions(gate))))
}

/// The capability: one acting middleware.
struct Permissions(Arc<PermissionGate>);

impl Capability for Permissions {
    fn name(&self) -> &'static str {
        "permissions"
    }

    fn middleware(&self, _assembly: &Assembly) -> Vec<(Layer, Arc<dyn Middleware>)> {
        vec![(Layer::Permissions, Arc::clone(&self.0) as Arc<dyn Middleware>)]
    }

    fn session_slots(&self) -> &'static [crate::capability::SlotKey] {
        SLOTS
    }
}

/// The session's "approve always" rules live in one slot (the pending calls themselves are
/// the kernel's `pending_approval`).
const SLOTS: &[crate::capability::SlotKey] = &[crate::capability::SlotKey::of::<SessionRules>()];

/// Code of the warning event sent when a call is denied.
pub const WARNING_DENIED: &str = "permissions.denied";
/// Code of the warning event sent when a call needed a person's approval and was not run.
pub const WARNING_APPROVAL: &str = "permissions.approval_needed";

async fn warn(ctx: &ToolContext, code: &str, message: String) {
    if ctx.events.is_active() {
        ctx.events
            .emit(harness_core::EventKind::Warning {
                code: code.to_owned(),
                message,
            })
            .await;
    }
}

/// The rules a person added to one session with "approve always" (saved with the session,
/// consulted after the configured rules: they only allow, and never beat a deny or ask rule
/// or a dangerous path).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct SessionRules {
    /// Allow rules, as written (`tool` or `tool(pattern)`).
    #[serde(default)]
    pub allow: Vec<String>,
}

impl harness_core::SessionSlot for SessionRules {
    const KEY: &'static str = "permission_rules";
}

/// Decides on each call before the tool runs.
struct PermissionGate {
    policy: Arc<Policy>,
}

impl PermissionGate {
    /// The configured policy plus the session's "approve always" rules, narrowed by what the
    /// agent that started this one passed down ([`harness_policy::Inheritance`] on the call
    /// context: a remote parent's mode and deny/ask rules).
    fn effective(&self, ctx: &ToolContext) -> Arc<Policy> {
        let added = match ctx.session.get::<SessionRules>() {
            Ok(rules) => rules.allow,
            Err(err) => {
                tracing::warn!(error = %err, "session permission rules unreadable; using the configured rules only");
                Vec::new()
            }
        };
        let inherited = ctx.runtime.get::<harness_policy::Inheritance>();
        if added.is_empty() && inherited.is_none() {
            return Arc::clone(&self.policy);
        }
        let mut policy = match inherited {
            Some(inherited) => self.policy.narrowed(inherited),
            None => (*self.policy).clone(),
        };
        policy
            .allow
            .extend(added.iter().filter_map(|text| Rule::parse(text).ok()));
        Arc::new(policy)
    }
}

#[async_trait::async_trait]
impl Middleware for PermissionGate {
    fn name(&self) -> &'static str {
        "permissions"
    }

    fn hooks(&self) -> Hooks {
        Hooks::ACTING | Hooks::AGENT
    }

    async fn agent(&self, turn: &mut Turn, next: AgentNext<'_>) -> Result<(), AgentError> {
        // "Approve always": the pending call's suggested rule joins the session's rules
        // before the decisions are applied, so it covers the approved call's successors.
        if let Some(Approvals(decisions)) = turn.ctx().get::<Approvals>() {
            let pending = turn.session().get::<PendingApproval>().unwrap_or_default();
            let added: Vec<String> = decisions
                .iter()
                .filter(|decision| decision.verdict == Verdict::ApproveAlways)
                .filter_map(|decision| pending.call(&decision.call_id))
                .filter_map(|call| call.suggestion.clone())
                .filter(|rule| Rule::parse(rule).is_ok())
                .collect();
            if !added.is_empty() {
                turn.session()
                    .update::<SessionRules, _>(|rules| {
                        for rule in added {
                            if !rules.allow.contains(&rule) {
                                rules.allow.push(rule);
                            }
                        }
                    })
                    .map_err(|err| AgentError::Capability {
                        capability: "permissions",
                        source: Box::new(err),
                    })?;
            }
        }
        // The session's own mode (switched by code, the CLI or the API) narrows this turn
        // like a parent's would, and so every child it starts.
        if let Some(mode) = turn.session().get::<SessionMode>().ok().and_then(|m| m.mode) {
            let mut narrowed = turn.ctx().get::<Inheritance>().cloned().unwrap_or_else(|| Inheritance {
                mode: self.policy.mode,
                ..Inheritance::default()
            });
            narrowed.mode = narrowed.mode.stricter(mode);
            turn.ctx_mut().insert(narrowed);
        }
        next.run(turn).await
    }

    async fn acting(&self, call: ToolCall, ctx: &ToolContext, next: ActingNext<'_>) -> ToolOutput {
        // Schema first: a decision is taken on valid arguments only.
        let hints = match next.check(&call) {
            Ok(hints) => hints,
            Err(err) => return ToolOutput::error(err.to_string()),
        };
        match self.effective(ctx).decide(&call.name, hints, &call.input) {
            Decision::Allow => next.run(call, ctx).await,
            Decision::Invalid { message } => ToolOutput::error(message),
            Decision::Deny { reason } => {
                tracing::info!(tool = %call.name, %reason, "permission denied");
                warn(ctx, WARNING_DENIED, format!("`{}` was denied: {reason}", call.name)).await;
                ToolOutput::error(format!(
                    "Permission denied: {reason}. The call was not run; do not retry it."
                ))
            }
            // A person approved exactly this call (resumed after the decision).
            Decision::Ask { .. } if ctx.is_approved(&call) => next.run(call, ctx).await,
            Decision::Ask { reason, suggestion, .. } => {
                tracing::info!(tool = %call.name, %reason, "call waits for a person's approval");
                // An empty suggestion: no rule can allow it (leaving plan mode).
                let suggestion = (!suggestion.is_empty()).then_some(suggestion);
                ctx.request_approval(&call, &reason, suggestion)
            }
        }
    }
}
