//! Permissions: every tool call gets a decision — allow, ask or deny — after its arguments
//! were checked against the schema and before the tool runs ([`Layer::Permissions`], the
//! innermost acting layer). The decision order and the rules are in [`policy`]; the
//! `[permissions]` section of `harness.toml` configures them:
//!
//! ```toml
//! [permissions]
//! mode = "default"            # default | accept_edits | explore | bypass | dont_ask
//! allow = ["execute(git status*)", "execute(cargo test*)"]
//! ask = ["write_file(src/**)"]
//! deny = ["execute(rm *)"]
//! ```
//!
//! Plan mode turns it on with the default policy when the section is absent (so leaving plan
//! mode asks).
//!
//! The capability is on when the section is present (or the builder sets a policy). There is
//! no way to ask a person yet: a call that needs approval gets an error result saying so
//! (with the rule that would allow it) and does not run. Denied calls and calls that needed
//! approval are also reported as warning events ([`WARNING_DENIED`], [`WARNING_APPROVAL`]).

mod command_line;
pub mod policy;
pub mod rule;

pub use policy::{Decision, Mode, Policy};
pub use rule::{Rule, RuleError};

use crate::HarnessAgentBuilder;
use crate::capability::{Assembly, Capability, CapabilityError, ConfigSection, Layer, Registration, Setup};
use harness_core::{ActingNext, Hooks, Middleware, ToolCall, ToolContext, ToolOutput};
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
}

impl ConfigSection for PermissionsSection {
    const KEY: &'static str = "permissions";
}

impl PermissionsSection {
    /// The policy these settings describe.
    ///
    /// # Errors
    /// [`RuleError`] for the first rule that cannot be read.
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
        })
    }
}

/// The permissions entry of the capability registry.
pub(crate) const REGISTRATION: Registration = Registration::new(build).with_section::<PermissionsSection>();

/// The builder's policy (overrides `[permissions]`).
struct PolicyOverride(Policy);

impl HarnessAgentBuilder {
    /// Checks every tool call against `policy` (also `[permissions]` in harness.toml).
    pub fn permissions(self, policy: Policy) -> Self {
        self.setting(PolicyOverride(policy))
    }
}

fn build(setup: &mut Setup<'_>) -> Result<Option<Arc<dyn Capability>>, CapabilityError> {
    let policy = match setup.take::<PolicyOverride>() {
        Some(PolicyOverride(policy)) => policy,
        None => match setup.section::<PermissionsSection>()? {
            Some(section) => section
                .policy()
                .map_err(|err| CapabilityError::new(PermissionsSection::KEY, err))?,
            // `plan_exit` must ask even when nothing else is configured.
            None if setup.provided::<crate::plan_mode::PlanModeEnabled>().is_some() => Policy::default(),
            None => return Ok(None),
        },
    };
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
}

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

/// Decides on each call before the tool runs.
struct PermissionGate {
    policy: Arc<Policy>,
}

#[async_trait::async_trait]
impl Middleware for PermissionGate {
    fn name(&self) -> &'static str {
        "permissions"
    }

    fn hooks(&self) -> Hooks {
        Hooks::ACTING
    }

    async fn acting(&self, call: ToolCall, ctx: &ToolContext, next: ActingNext<'_>) -> ToolOutput {
        // Schema first: a decision is taken on valid arguments only.
        let hints = match next.check(&call) {
            Ok(hints) => hints,
            Err(err) => return ToolOutput::error(err.to_string()),
        };
        match self.policy.decide(&call.name, hints, &call.input) {
            Decision::Allow => next.run(call, ctx).await,
            Decision::Invalid { message } => ToolOutput::error(message),
            Decision::Deny { reason } => {
                tracing::info!(tool = %call.name, %reason, "permission denied");
                warn(ctx, WARNING_DENIED, format!("`{}` was denied: {reason}", call.name)).await;
                ToolOutput::error(format!(
                    "Permission denied: {reason}. The call was not run; do not retry it."
                ))
            }
            Decision::Ask { reason, suggestion } => {
                tracing::info!(tool = %call.name, %reason, "call needs approval");
                // An empty suggestion: no rule can allow it (leaving plan mode).
                let (rule, how) = if suggestion.is_empty() {
                    (String::new(), String::new())
                } else {
                    (
                        format!(" Rule to allow it: {suggestion}"),
                        format!(
                            " A person can allow calls like it with the rule `{suggestion}` in [permissions] allow."
                        ),
                    )
                };
                warn(
                    ctx,
                    WARNING_APPROVAL,
                    format!("`{}` needs approval ({reason}); it was not run.{rule}", call.name),
                )
                .await;
                ToolOutput::error(format!(
                    "This call needs a person's approval ({reason}), and none can be asked here, so it was not run.{how}"
                ))
            }
        }
    }
}
