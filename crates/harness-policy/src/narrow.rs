//! What a child agent keeps of the agent that started it, and the one order of the modes.
//!
//! [`Inheritance`] is a typed value on the call context (local children) and a field of the
//! native API's requests (remote children, where the serving side applies it with
//! [`Policy::narrowed`]). It only ever narrows: the child's deny and ask rules are the union of
//! both sides', its mode the stricter of the two ([`Mode::stricter`]), and a planning parent's
//! child plans too.

use crate::policy::{Mode, Policy};
use crate::rule::Rule;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

impl Mode {
    /// The mode's place in the order `explore` < `dont_ask` < `default` = `accept_edits` <
    /// `bypass`: lower is stricter. The one definition every comparison of modes uses.
    pub fn permissiveness(self) -> u8 {
        match self {
            Self::Explore => 0,
            Self::DontAsk => 1,
            Self::Default | Self::AcceptEdits => 2,
            Self::Bypass => 3,
        }
    }

    /// The stricter of `self` and `other` (`self` when they are equally strict).
    #[must_use]
    pub fn stricter(self, other: Self) -> Self {
        if other.permissiveness() < self.permissiveness() {
            other
        } else {
            self
        }
    }
}

/// A session's own permission mode, switched at run time by code, the CLI or the API (never
/// by a tool the model can call). Saved with the session; it only narrows: the mode in force
/// is the stricter of it and the configured one, and [`SessionMode::check`] refuses a switch
/// to a mode more permissive than the configured one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionMode {
    /// The session's mode; `None` = the configured mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
}

impl harness_core::SessionSlot for SessionMode {
    const KEY: &'static str = "permission_mode";
}

impl SessionMode {
    /// Whether a session of an agent configured with `configured` may switch to `wanted`.
    ///
    /// # Errors
    /// A message naming both modes and the order when `wanted` is more permissive.
    pub fn check(configured: Mode, wanted: Mode) -> Result<(), String> {
        if wanted.permissiveness() > configured.permissiveness() {
            return Err(format!(
                "the permission mode `{}` is more permissive than harness.toml's `{}`; a session may only \
                 switch to a mode at most as permissive (explore < dont_ask < default = accept_edits < bypass)",
                wanted.name(),
                configured.name()
            ));
        }
        Ok(())
    }

    /// The mode in force for a session of an agent configured with `configured`.
    pub fn effective(self, configured: Mode) -> Mode {
        self.mode.map_or(configured, |mode| configured.stricter(mode))
    }
}

impl Mode {
    /// The mode as written in harness.toml (`accept_edits`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::AcceptEdits => "accept_edits",
            Self::Explore => "explore",
            Self::Bypass => "bypass",
            Self::DontAsk => "dont_ask",
        }
    }
}

/// What a child must keep of its parent: plan mode, the deny and ask rules and the mode (never
/// the allow rules). Travels as a typed value on the call context and, for a remote child, as
/// the `inherit` object of the native API's `messages` and `approvals` requests:
/// `{"plan": true, "mode": "default", "ask": ["execute"], "deny": ["execute(rm *)"]}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inheritance {
    /// The parent is planning: the child plans too and cannot leave plan mode.
    #[serde(default)]
    pub plan: bool,
    /// The parent's mode.
    #[serde(default)]
    pub mode: Mode,
    /// The parent's ask rules.
    #[serde(default, serialize_with = "rules_out", deserialize_with = "rules_in")]
    pub ask: Vec<Rule>,
    /// The parent's deny rules.
    #[serde(default, serialize_with = "rules_out", deserialize_with = "rules_in")]
    pub deny: Vec<Rule>,
}

impl Inheritance {
    /// What a child of an agent with `policy` keeps; `plan` when the parent is planning.
    pub fn of(policy: &Policy, plan: bool) -> Self {
        Self {
            plan,
            mode: policy.mode,
            ask: policy.ask.clone(),
            deny: policy.deny.clone(),
        }
    }

    /// Both parents' constraints at once (a child of a child): plan if either plans, the
    /// stricter mode, the union of the rules.
    #[must_use]
    pub fn and(&self, other: &Self) -> Self {
        let mut both = self.clone();
        both.plan |= other.plan;
        both.mode = self.mode.stricter(other.mode);
        extend_unique(&mut both.ask, &other.ask);
        extend_unique(&mut both.deny, &other.deny);
        both
    }
}

impl Policy {
    /// This policy, narrowed by what a parent passed down: its deny and ask rules added to
    /// this policy's, the stricter of the two modes. Allow rules stay this side's own, so the
    /// result never allows what this policy alone would not.
    #[must_use]
    pub fn narrowed(&self, parent: &Inheritance) -> Self {
        let mut narrowed = self.clone();
        narrowed.mode = self.mode.stricter(parent.mode);
        extend_unique(&mut narrowed.ask, &parent.ask);
        extend_unique(&mut narrowed.deny, &parent.deny);
        narrowed
    }
}

fn extend_unique(mine: &mut Vec<Rule>, theirs: &[Rule]) {
    for rule in theirs {
        if !mine.iter().any(|own| own.to_string() == rule.to_string()) {
            mine.push(rule.clone());
        }
    }
}

fn rules_out<S: Serializer>(rules: &[Rule], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(rules.iter().map(ToString::to_string))
}

fn rules_in<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Rule>, D::Error> {
    Vec::<String>::deserialize(deserializer)?
        .iter()
        .map(|text| Rule::parse(text).map_err(serde::de::Error::custom))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::Decision;
    use harness_core::ToolAnnotations;
    use serde_json::json;

    #[test]
    fn a_session_mode_never_goes_above_the_configured_one() {
        for (configured, wanted, ok) in [
            (Mode::Default, Mode::Explore, true),
            (Mode::Default, Mode::DontAsk, true),
            (Mode::Default, Mode::AcceptEdits, true),
            (Mode::Default, Mode::Bypass, false),
            (Mode::Explore, Mode::DontAsk, false),
            (Mode::Bypass, Mode::Bypass, true),
        ] {
            assert_eq!(
                SessionMode::check(configured, wanted).is_ok(),
                ok,
                "{configured:?} -> {wanted:?}"
            );
        }
        let refused = SessionMode::check(Mode::Default, Mode::Bypass).unwrap_err();
        assert!(
            refused.contains("`bypass`") && refused.contains("`default`"),
            "{refused}"
        );
        let session = SessionMode {
            mode: Some(Mode::Bypass),
        };
        assert_eq!(session.effective(Mode::Explore), Mode::Explore, "it only narrows");
        assert_eq!(SessionMode::default().effective(Mode::DontAsk), Mode::DontAsk);
    }

    const ALL: [Mode; 5] = [
        Mode::Explore,
        Mode::DontAsk,
        Mode::Default,
        Mode::AcceptEdits,
        Mode::Bypass,
    ];

    #[test]
    fn the_mode_order_is_explore_dont_ask_default_bypass() {
        assert_eq!(Mode::Bypass.stricter(Mode::Explore), Mode::Explore);
        assert_eq!(Mode::Explore.stricter(Mode::Bypass), Mode::Explore);
        assert_eq!(Mode::Default.stricter(Mode::DontAsk), Mode::DontAsk);
        assert_eq!(Mode::DontAsk.stricter(Mode::Explore), Mode::Explore);
        assert_eq!(Mode::Bypass.stricter(Mode::AcceptEdits), Mode::AcceptEdits);
        assert_eq!(Mode::Default.permissiveness(), Mode::AcceptEdits.permissiveness());
        // Symmetric in strictness and never more permissive than either side.
        for a in ALL {
            for b in ALL {
                let s = a.stricter(b);
                assert_eq!(s.permissiveness(), b.stricter(a).permissiveness(), "{a:?} {b:?}");
                assert!(s.permissiveness() <= a.permissiveness().min(b.permissiveness()));
            }
        }
    }

    fn shell(policy: &Policy, line: &str) -> Decision {
        let hints = ToolAnnotations::new().destructive(true).open_world(true);
        policy.decide("execute", hints, &json!({ "command": line }))
    }

    #[test]
    fn a_narrowed_policy_keeps_its_allow_rules_and_adds_the_parents_deny_and_ask() {
        let own = Policy {
            mode: Mode::Bypass,
            allow: vec![Rule::parse("execute(ls*)").unwrap()],
            ..Policy::default()
        };
        let parent = Inheritance {
            plan: false,
            mode: Mode::Default,
            ask: vec![Rule::parse("execute(git*)").unwrap()],
            deny: vec![Rule::parse("execute(rm *)").unwrap()],
        };
        let narrowed = own.narrowed(&parent);
        assert_eq!(narrowed.mode, Mode::Default);
        assert_eq!(shell(&narrowed, "ls -la"), Decision::Allow);
        assert!(matches!(shell(&narrowed, "rm -rf /tmp/x"), Decision::Deny { .. }));
        assert!(matches!(shell(&narrowed, "git push"), Decision::Ask { .. }));
        // Bypass on this side no longer lets an unlisted command run.
        assert!(matches!(shell(&narrowed, "curl example.com"), Decision::Ask { .. }));
        assert!(matches!(shell(&own, "curl example.com"), Decision::Allow));
    }

    #[test]
    fn a_parent_cannot_widen() {
        let own = Policy {
            mode: Mode::DontAsk,
            deny: vec![Rule::parse("execute(rm *)").unwrap()],
            ..Policy::default()
        };
        let parent = Inheritance {
            mode: Mode::Bypass,
            ..Inheritance::default()
        };
        let narrowed = own.narrowed(&parent);
        assert_eq!(narrowed.mode, Mode::DontAsk);
        assert!(matches!(shell(&narrowed, "rm -rf x"), Decision::Deny { .. }));
    }

    #[test]
    fn inheritance_travels_as_json_and_bad_rules_are_refused() {
        let parent = Inheritance {
            plan: true,
            mode: Mode::DontAsk,
            ask: vec![Rule::parse("execute").unwrap()],
            deny: vec![Rule::parse("write_file(secrets/*)").unwrap()],
        };
        let wire = serde_json::to_value(&parent).unwrap();
        assert_eq!(
            wire,
            json!({"plan": true, "mode": "dont_ask", "ask": ["execute"], "deny": ["write_file(secrets/*)"]})
        );
        let back: Inheritance = serde_json::from_value(wire).unwrap();
        assert!(back.plan);
        assert_eq!(back.mode, Mode::DontAsk);
        assert_eq!(back.deny[0].to_string(), "write_file(secrets/*)");
        let bad = serde_json::from_value::<Inheritance>(json!({"deny": ["execute(["]}));
        assert!(bad.is_err());
        let unknown = serde_json::from_value::<Inheritance>(json!({"allow": ["execute"]}));
        assert!(unknown.is_err(), "a parent cannot send allow rules");
    }

    #[test]
    fn two_parents_combine_to_the_stricter() {
        let a = Inheritance {
            plan: true,
            mode: Mode::Bypass,
            deny: vec![Rule::parse("execute(rm *)").unwrap()],
            ..Inheritance::default()
        };
        let b = Inheritance {
            mode: Mode::DontAsk,
            deny: vec![
                Rule::parse("execute(rm *)").unwrap(),
                Rule::parse("execute(dd *)").unwrap(),
            ],
            ..Inheritance::default()
        };
        let both = a.and(&b);
        assert!(both.plan);
        assert_eq!(both.mode, Mode::DontAsk);
        assert_eq!(both.deny.len(), 2);
    }
}
