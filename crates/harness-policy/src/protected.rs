//! [`Protected`]: the paths the model may not change on its own — every file the harness
//! injects into a prompt, reads as configuration or keeps as its own state. A write to one
//! asks a person in every mode (`bypass` included), `dont_ask` denies it, a deny rule refuses
//! it, and "approve always" is never offered for it. The plan tools write `plans/` by tool,
//! not by path, and are exempt ([`PLAN_TOOLS`](crate::PLAN_TOOLS)).
//!
//! Every glob applies at the workspace root **and** one level down, in every user's layer:
//! under the `user` and `session` scopes a caller's layer is `<user>/` or `<session>/` at the
//! root (see `harness_fs::CallScope`), so `AGENTS.md` is also `alice/AGENTS.md`. Isolated
//! subagents' layers lie under `agents/`, which is itself protected. Matching ignores ASCII
//! case (a case-insensitive disk would write `agents.md` to `AGENTS.md`).

use crate::rule::RuleError;
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

/// The default protected set (`[permissions] protected` replaces it).
pub const DEFAULT_PROTECTED: &[&str] = &[
    "harness.toml",
    "tools.json",
    ".mcp.json",
    "AGENTS.md",
    "knowledge/KNOWLEDGE.md",
    "subagents/**",
    "skills/**",
    "plans/**",
    "agents/**",
    "MEMORY.md",
    "memory/**",
    ".harness/**",
    ".skills-cache/**",
    "large_tool_results/**",
];

/// The part of the default set the file tools do not even read: configuration that can hold
/// credentials (a `[state] url` with a password) and, under shared scopes, other users'
/// conversations.
/// `memory/.quarantine/` is what the memory screen refused: only `harness memory review` shows it.
pub const DEFAULT_READ_PROTECTED: &[&str] = &[
    "harness.toml",
    "tools.json",
    ".mcp.json",
    ".harness/**",
    "agents/**",
    "memory/.quarantine/**",
];

/// A set of protected path globs.
#[derive(Debug, Clone)]
pub struct Protected {
    globs: Vec<String>,
    set: GlobSet,
}

impl Default for Protected {
    fn default() -> Self {
        Self::default_set()
    }
}

impl Protected {
    /// The default set ([`DEFAULT_PROTECTED`]).
    pub fn default_set() -> Self {
        Self::from_static(DEFAULT_PROTECTED)
    }

    /// The paths the file tools refuse to read ([`DEFAULT_READ_PROTECTED`]).
    pub fn read_protected_default() -> Self {
        Self::from_static(DEFAULT_READ_PROTECTED)
    }

    /// No protected paths.
    pub fn none() -> Self {
        Self {
            globs: Vec::new(),
            set: GlobSet::empty(),
        }
    }

    fn from_static(globs: &[&str]) -> Self {
        let owned: Vec<String> = globs.iter().map(|&glob| glob.to_owned()).collect();
        // The built-in globs are literals and `dir/**`, all valid: a test compiles them.
        Self::from_globs(&owned).unwrap_or_else(|_| Self::none())
    }

    /// A set from `[permissions] protected`: globs over paths relative to the workspace root
    /// (`*` stops at `/`, `**` crosses it; `dir/**` also covers `dir` itself).
    ///
    /// # Errors
    /// [`RuleError::Protected`] for an empty glob, an absolute one or one with `..`, and
    /// for one that does not compile.
    pub fn from_globs(globs: &[String]) -> Result<Self, RuleError> {
        let mut builder = GlobSetBuilder::new();
        for glob in globs {
            let bad = |reason: &str| RuleError::Protected {
                glob: glob.clone(),
                reason: reason.to_owned(),
            };
            let trimmed = glob.trim();
            if trimmed.is_empty() {
                return Err(bad("the glob is empty; write a path relative to the workspace root"));
            }
            if trimmed.starts_with('/') {
                return Err(bad("write it relative to the workspace root, without a leading `/`"));
            }
            if trimmed.split('/').any(|segment| segment == "..") {
                return Err(bad("`..` is not allowed; write a path inside the workspace"));
            }
            let trimmed = trimmed.trim_start_matches("./");
            let mut forms = vec![trimmed.to_owned(), format!("*/{trimmed}")];
            if let Some(dir) = trimmed.strip_suffix("/**") {
                forms.push(dir.to_owned());
                forms.push(format!("*/{dir}"));
            }
            for form in forms {
                let compiled = GlobBuilder::new(&form)
                    .literal_separator(true)
                    .case_insensitive(true)
                    .build()
                    .map_err(|err| bad(&format!("not a valid glob: {err}")))?;
                builder.add(compiled);
            }
        }
        let set = builder.build().map_err(|err| RuleError::Protected {
            glob: globs.join(", "),
            reason: format!("the globs do not compile together: {err}"),
        })?;
        Ok(Self {
            globs: globs.to_vec(),
            set,
        })
    }

    /// The globs as configured.
    pub fn globs(&self) -> &[String] {
        &self.globs
    }

    /// Whether `path` (relative to the workspace root or to a caller's layer; empty and `.`
    /// segments and a leading `/` are ignored) is protected.
    pub fn matches(&self, path: &str) -> bool {
        let normalized: Vec<&str> = path
            .split('/')
            .filter(|segment| !segment.is_empty() && *segment != ".")
            .collect();
        !normalized.is_empty() && self.set.is_match(normalized.join("/"))
    }

    /// Whether any tail of `path` is protected: for a shell argument, whose directory is not
    /// known (`../harness.toml`, `/abs/ws/AGENTS.md`, `~/ws/tools.json`).
    pub(crate) fn matches_any_tail(&self, path: &str) -> bool {
        let segments: Vec<&str> = path
            .split('/')
            .filter(|segment| !segment.is_empty() && *segment != ".")
            .collect();
        (0..segments.len()).any(|start| self.set.is_match(segments[start..].join("/")))
    }
}

#[cfg(test)]
mod tests {
    use super::{DEFAULT_PROTECTED, DEFAULT_READ_PROTECTED, Protected};

    #[test]
    fn the_built_in_sets_compile() {
        let owned = |globs: &[&str]| globs.iter().map(|&glob| glob.to_owned()).collect::<Vec<_>>();
        assert!(Protected::from_globs(&owned(DEFAULT_PROTECTED)).is_ok());
        assert!(Protected::from_globs(&owned(DEFAULT_READ_PROTECTED)).is_ok());
        assert_eq!(Protected::default_set().globs().len(), DEFAULT_PROTECTED.len());
    }

    #[test]
    fn the_default_set_covers_the_root_and_every_user_layer() {
        let protected = Protected::default_set();
        for path in [
            "harness.toml",
            "tools.json",
            ".mcp.json",
            "AGENTS.md",
            "knowledge/KNOWLEDGE.md",
            "subagents/x.md",
            "skills",
            "skills/a/SKILL.md",
            "plans/PLAN.md",
            "agents/main/agent_state.json",
            "agents",
            "MEMORY.md",
            "memory/notes.md",
            ".harness/state",
            ".skills-cache/x",
            "large_tool_results/main/c1-00.txt",
            "alice/AGENTS.md",
            "alice/memory/x.md",
            "alice/agents/main/users/alice/agent_state.json",
            "s1/subagents/evil.md",
            "/harness.toml",
            "./tools.json",
            "agents.md",
            "Harness.TOML",
        ] {
            assert!(protected.matches(path), "{path} is not protected");
        }
        for path in [
            "src/main.rs",
            "notes/AGENTS.txt",
            "a/b/AGENTS.md",
            "knowledge/other.md",
            "README.md",
            "",
            ".",
        ] {
            assert!(!protected.matches(path), "{path} is protected");
        }
    }

    #[test]
    fn the_read_protected_default_is_the_configuration_and_state_subset() {
        let read = Protected::read_protected_default();
        for path in [
            "harness.toml",
            "tools.json",
            ".mcp.json",
            ".harness/x",
            "agents/a/s.json",
            "bob/agents/x",
            "memory/.quarantine/q1.json",
            "bob/memory/.quarantine/q1.json",
        ] {
            assert!(read.matches(path), "{path}");
        }
        for path in ["AGENTS.md", "skills/x", "MEMORY.md", "memory/2026-12-03.md"] {
            assert!(!read.matches(path), "{path}");
        }
    }

    #[test]
    fn configured_globs_replace_the_default_and_bad_ones_are_refused() {
        let custom = Protected::from_globs(&["secrets/**".to_owned(), "*.lock".to_owned()])
            .unwrap_or_else(|err| panic!("{err}"));
        assert!(custom.matches("secrets/a"));
        assert!(custom.matches("u/secrets/a"));
        assert!(custom.matches("Cargo.lock"));
        assert!(!custom.matches("harness.toml"));
        assert!(Protected::none().globs().is_empty());
        assert!(!Protected::none().matches("harness.toml"));
        for bad in ["", "  ", "/etc/passwd", "../x", "a/../b", "a[", "{a"] {
            let Err(err) = Protected::from_globs(&[bad.to_owned()]) else {
                panic!("{bad:?} was accepted");
            };
            assert!(err.to_string().contains("protected"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_shell_argument_matches_by_any_tail() {
        let protected = Protected::default_set();
        assert!(protected.matches_any_tail("/srv/ws/harness.toml"));
        assert!(protected.matches_any_tail("../../AGENTS.md"));
        assert!(protected.matches_any_tail("~/ws/alice/skills/x/SKILL.md"));
        assert!(!protected.matches_any_tail("/srv/ws/src/lib.rs"));
    }
}
