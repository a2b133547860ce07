//! The host environment as a value: the binary captures it, the library only reads this.

use std::collections::BTreeMap;

/// Variables of the host process, captured by the binary (libraries never read the
/// environment themselves). Used for `${VAR}` in `tools.json` and for the few variables a
/// stdio MCP server inherits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostEnv {
    vars: BTreeMap<String, String>,
}

/// Variables a stdio server inherits from the host; everything else (API keys included) is
/// dropped. `LC_*` is matched by prefix.
pub const INHERITED_VARS: &[&str] = &["PATH", "HOME", "USER", "LANG", "TZ", "TMPDIR"];

impl HostEnv {
    /// From `(name, value)` pairs, e.g. `std::env::vars()` in a binary.
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> Self {
        Self {
            vars: vars.into_iter().collect(),
        }
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<String> {
        self.vars.get(name).cloned()
    }

    /// The variables a stdio server inherits: [`INHERITED_VARS`] and `LC_*`.
    pub fn scrubbed(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars
            .iter()
            .filter(|(name, _)| INHERITED_VARS.contains(&name.as_str()) || name.starts_with("LC_"))
            .map(|(name, value)| (name.as_str(), value.as_str()))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn scrubbed_keeps_only_the_listed_variables() {
        let env = HostEnv::from_vars(
            [
                ("PATH", "/bin"),
                ("LC_ALL", "C"),
                ("OPENAI_API_KEY", "sk"),
                ("TZ", "UTC"),
                ("HOMEX", "x"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned())),
        );
        let kept: Vec<_> = env.scrubbed().map(|(k, _)| k).collect();
        assert_eq!(kept, ["LC_ALL", "PATH", "TZ"]);
        assert_eq!(env.get("OPENAI_API_KEY").as_deref(), Some("sk"));
    }
}
