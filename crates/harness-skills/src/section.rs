//! `[skills]` in harness.toml: the skill layers below the workspace's and the user's.
//!
//! ```toml
//! [skills]
//! enabled = true                          # false: no catalogue, no load_skill_through_path
//! global_dir = "/opt/harness/skills"      # lowest layer; relative paths are from the workspace
//! repositories = [
//!   { url = "https://example.com/team-skills.git" },
//!   { path = "../shared-skills", ref = "stable" },  # a local git repository, a branch of it
//!   { url = "https://example.com/x.git", ref = "v1.2.0" },  # a tag (or a full commit id)
//! ]
//! sync_interval_seconds = 300             # repositories are synced in the background this often
//! sync_timeout_seconds = 60               # the most one repository's sync may take
//! ```
//!
//! A repository is staged from its remote HEAD, or from `ref`: a branch follows its new
//! commits at every sync, a tag or a commit id stays where it is. Syncs happen when the
//! agent starts and then every `sync_interval_seconds`, never inside a turn.

use crate::library::{SkillRepositorySource, SkillsConfig, SyncSchedule};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The longest `sync_interval_seconds` / `sync_timeout_seconds`: one day.
const MAX_SECONDS: u64 = 86_400;

/// `[skills]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SkillsSection {
    /// Whether skills are on. Default true.
    pub enabled: bool,
    /// The global skills directory (lowest layer).
    pub global_dir: Option<PathBuf>,
    /// Git skill repositories, in priority order (a later one shadows an earlier).
    pub repositories: Vec<SkillRepositoryEntry>,
    /// Seconds between background syncs of the repositories. Default 300.
    pub sync_interval_seconds: u64,
    /// The most one repository's sync may take, in seconds. Default 60.
    pub sync_timeout_seconds: u64,
}

impl Default for SkillsSection {
    fn default() -> Self {
        let schedule = SyncSchedule::default();
        Self {
            enabled: true,
            global_dir: None,
            repositories: Vec::new(),
            sync_interval_seconds: schedule.interval.as_secs(),
            sync_timeout_seconds: schedule.timeout.as_secs(),
        }
    }
}

/// One entry of `[skills] repositories`: exactly one of `url` or `path`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkillRepositoryEntry {
    /// A remote repository URL.
    pub url: Option<String>,
    /// A local repository path (relative to the workspace).
    pub path: Option<PathBuf>,
    /// A branch, tag or commit to stage instead of the remote HEAD.
    #[serde(default, rename = "ref")]
    pub reference: Option<String>,
}

impl SkillsSection {
    /// What is out of range, as `key: reason` (the caller names the file and the section).
    ///
    /// # Errors
    /// The first entry without exactly one of `url` / `path`, an empty `ref`, or a sync
    /// interval or timeout outside 1..=86400 seconds.
    pub fn check(&self) -> Result<(), String> {
        for (key, seconds) in [
            ("sync_interval_seconds", self.sync_interval_seconds),
            ("sync_timeout_seconds", self.sync_timeout_seconds),
        ] {
            if !(1..=MAX_SECONDS).contains(&seconds) {
                return Err(format!("{key} must be between 1 and {MAX_SECONDS}, got {seconds}"));
            }
        }
        for (index, entry) in self.repositories.iter().enumerate() {
            if entry.url.is_some() == entry.path.is_some() {
                return Err(format!("repositories[{index}] needs exactly one of `url` or `path`"));
            }
            if entry
                .reference
                .as_deref()
                .is_some_and(|reference| reference.trim().is_empty())
            {
                return Err(format!(
                    "repositories[{index}].ref is empty; name a branch, tag or commit, or leave `ref` out"
                ));
            }
        }
        Ok(())
    }

    /// The skill layers for a workspace at `workspace_root`, or `None` when skills are off.
    /// Relative paths are resolved against the workspace.
    pub fn resolve(&self, workspace_root: &Path) -> Option<SkillsConfig> {
        if !self.enabled {
            return None;
        }
        let repositories = self
            .repositories
            .iter()
            .filter_map(|entry| {
                let url = match (&entry.url, &entry.path) {
                    (Some(url), _) => url.clone(),
                    (None, Some(path)) => workspace_root.join(path).display().to_string(),
                    (None, None) => return None,
                };
                Some(SkillRepositorySource {
                    url,
                    reference: entry.reference.clone(),
                })
            })
            .collect();
        Some(SkillsConfig {
            global_dir: self.global_dir.as_ref().map(|dir| workspace_root.join(dir)),
            repositories,
            sync: SyncSchedule {
                interval: Duration::from_secs(self.sync_interval_seconds),
                timeout: Duration::from_secs(self.sync_timeout_seconds),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_resolve_against_the_workspace_and_bad_ones_are_named() {
        let section: SkillsSection =
            toml::from_str("global_dir = \"g\"\nrepositories = [{ url = \"https://h/x.git\" }, { path = \"../r\" }]\n")
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(section.check(), Ok(()));
        let config = section.resolve(Path::new("/ws")).unwrap_or_default();
        assert_eq!(config.global_dir, Some(PathBuf::from("/ws/g")));
        assert_eq!(
            config.repositories,
            [
                SkillRepositorySource::head("https://h/x.git"),
                SkillRepositorySource::head("/ws/../r")
            ]
        );
        let off: SkillsSection = toml::from_str("enabled = false\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(off.resolve(Path::new("/ws")), None);
        let both: SkillsSection =
            toml::from_str("repositories = [{ url = \"u\", path = \"p\" }]\n").unwrap_or_else(|e| panic!("{e}"));
        assert!(both.check().is_err_and(|e| e.contains("repositories[0]")));
        let pinned: SkillsSection =
            toml::from_str("repositories = [{ url = \"u\", ref = \"v1\" }]\n").unwrap_or_else(|e| panic!("{e}"));
        let config = pinned.resolve(Path::new("/ws")).unwrap_or_default();
        assert_eq!(config.repositories, [SkillRepositorySource::pinned("u", "v1")]);
        let empty: SkillsSection =
            toml::from_str("repositories = [{ url = \"u\", ref = \"\" }]\n").unwrap_or_else(|e| panic!("{e}"));
        assert!(empty.check().is_err_and(|e| e.contains("repositories[0].ref")));
    }

    #[test]
    fn the_sync_schedule_has_defaults_and_bounds() {
        let config = SkillsSection::default().resolve(Path::new("/ws")).unwrap_or_default();
        assert_eq!(config.sync, SyncSchedule::default());
        assert_eq!(config.sync.interval, Duration::from_secs(300));
        let set: SkillsSection =
            toml::from_str("sync_interval_seconds = 30\nsync_timeout_seconds = 5\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(set.check(), Ok(()));
        let config = set.resolve(Path::new("/ws")).unwrap_or_default();
        assert_eq!(
            config.sync,
            SyncSchedule {
                interval: Duration::from_secs(30),
                timeout: Duration::from_secs(5)
            }
        );
        for text in ["sync_interval_seconds = 0\n", "sync_timeout_seconds = 86401\n"] {
            let bad: SkillsSection = toml::from_str(text).unwrap_or_else(|e| panic!("{e}"));
            let key = text.split(' ').next().unwrap_or_default();
            assert!(bad.check().is_err_and(|e| e.contains(key)), "{text}");
        }
    }
}
