//! Harness permissions as a leaf engine: permission [`Rule`]s (`tool` or `tool(pattern)`), the
//! [`Mode`]s, and the [`Policy`] that decides — allow, ask or deny — on one tool call from its
//! name, its declared effects ([`harness_core::ToolAnnotations`]) and its arguments. The shell
//! tool's command line is analysed into its simple commands first, so a rule is matched against
//! every command the line runs. No IO and no session knowledge: the `harness` crate's
//! permissions capability applies the decisions (pending approvals, "approve always").
//!
//! ```
//! use harness_core::ToolAnnotations;
//! use harness_policy::{Decision, Policy, Rule};
//! use serde_json::json;
//!
//! let policy = Policy {
//!     allow: vec![Rule::parse("execute(git status*)")?],
//!     ..Policy::default()
//! };
//! let shell = ToolAnnotations::new().destructive(true).open_world(true);
//! let decide = |line: &str| policy.decide("execute", shell, &json!({ "command": line }));
//! assert_eq!(decide("git status --short"), Decision::Allow);
//! assert!(matches!(decide("git status; rm -rf ~"), Decision::Ask { .. }));
//! # Ok::<_, harness_policy::RuleError>(())
//! ```
//!
//! Start with [`Policy::decide`] (the decision order is in its module docs).

mod command_line;
mod policy;
mod protected;
mod rule;
mod shell;

pub use policy::{Decision, Mode, PLAN_EXIT_TOOL, PLAN_TOOLS, Policy, SHELL_TOOL};
pub use protected::{DEFAULT_PROTECTED, DEFAULT_READ_PROTECTED, Protected};
pub use rule::{Rule, RuleError};
