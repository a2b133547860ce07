//! Harness permissions as a leaf engine: permission [`Rule`]s (`tool` or `tool(pattern)`), the
//! [`Mode`]s, and the [`Policy`] that decides — allow, ask or deny — on one tool call from its
//! name, its declared effects ([`harness_core::ToolAnnotations`]) and its arguments. The shell
//! tool's command line is parsed as `sh` (dash) reads it into its simple commands first — in
//! lists, pipelines, subshells, substitutions, here-documents and behind wrappers such as
//! `env`, `sudo`, `xargs` and `sh -c '…'` — so a rule is matched against every command the
//! line runs; what the parser cannot see through is opaque and asks. [`Protected`] paths (the
//! harness's own configuration, prompt files and state) ask for every write. Rules are a
//! convenience, not a security boundary: the sandbox is. No IO and no session knowledge: the
//! `harness` crate's permissions capability applies the decisions (pending approvals,
//! "approve always").
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
//! assert!(matches!(decide("git status # '\nrm -rf ~"), Decision::Ask { .. }));
//!
//! let deny = Policy {
//!     deny: vec![Rule::parse("execute(rm *)")?],
//!     mode: harness_policy::Mode::Bypass,
//!     ..Policy::default()
//! };
//! let denied = |line: &str| matches!(deny.decide("execute", shell, &json!({ "command": line })), Decision::Deny { .. });
//! assert!(denied("/bin/rm -rf x") && denied("r\\m -rf x") && denied("env sh -c 'rm -rf x'"));
//!
//! // A write to a protected path asks, even in bypass.
//! let write = ToolAnnotations::new().destructive(true).closed_world();
//! let edit = deny.decide("write_file", write, &json!({ "path": "alice/AGENTS.md", "content": "x" }));
//! assert!(matches!(edit, Decision::Ask { .. }));
//! # Ok::<_, harness_policy::RuleError>(())
//! ```
//!
//! Start with [`Policy::decide`] (the decision order is in its module docs).

mod command_line;
mod narrow;
mod policy;
mod protected;
mod rule;
mod shell;

pub use narrow::{Inheritance, SessionMode};
pub use policy::{Decision, Mode, PLAN_EXIT_TOOL, PLAN_TOOLS, Policy, SHELL_TOOL};
pub use protected::{DEFAULT_PROTECTED, DEFAULT_READ_PROTECTED, Protected};
pub use rule::{Rule, RuleError};
