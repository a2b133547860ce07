//! One skill: `SKILL.md` with YAML front matter, plus the files beside it.

use harness_fs::{Filesystem, FsError, WsPath};
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::Arc;

/// The file that makes a directory a skill.
pub const SKILL_FILE: &str = "SKILL.md";

/// Most files listed per skill (resources beyond this are not offered).
const MAX_RESOURCES: usize = 500;

/// Where a skill comes from, low to high priority: a higher layer shadows a lower one's
/// skill of the same name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum SkillLayer {
    /// The configured global directory.
    Global,
    /// A skill repository, by its source name (its `.skills-cache/<source>/` directory).
    Repository(String),
    /// The workspace's `skills/`.
    Workspace,
    /// The caller's `<user>/skills/`.
    User,
}

impl std::fmt::Display for SkillLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Global => f.write_str("global"),
            Self::Repository(source) => write!(f, "repository {source}"),
            Self::Workspace => f.write_str("workspace"),
            Self::User => f.write_str("user"),
        }
    }
}

/// The front matter of `SKILL.md`. Other keys are ignored (marketplace skills carry more).
#[derive(Debug, Deserialize)]
struct FrontMatter {
    name: String,
    description: String,
    /// On-demand tool groups loading this skill activates.
    #[serde(default)]
    tool_groups: Vec<String>,
}

/// Why a `SKILL.md` was skipped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SkillError {
    /// No `---` front matter at the top.
    #[error("{path}: no YAML front matter (`---` lines around `name` and `description`)")]
    NoFrontMatter {
        /// The file.
        path: String,
    },
    /// The front matter is not valid YAML or lacks a field.
    #[error("{path}: front matter: {message}")]
    FrontMatter {
        /// The file.
        path: String,
        /// The parser's message.
        message: String,
    },
    /// The name is empty or has characters other than letters, digits, `-`, `_`, `.`.
    #[error("{path}: skill name `{name}` must be letters, digits, `-`, `_` or `.`")]
    BadName {
        /// The file.
        path: String,
        /// The name.
        name: String,
    },
    /// Reading failed.
    #[error(transparent)]
    Fs(#[from] FsError),
}

/// A skill found in one layer.
#[derive(Clone)]
pub struct Skill {
    /// The name (the `skillId` of `load_skill_through_path`).
    pub name: String,
    /// When to use it.
    pub description: String,
    /// Where it comes from.
    pub layer: SkillLayer,
    /// On-demand tool groups that loading it activates.
    pub tool_groups: Vec<String>,
    /// The host directory for shell commands, when there is one.
    pub files_root: Option<PathBuf>,
    /// The whole `SKILL.md`.
    pub(crate) text: String,
    /// Files besides `SKILL.md`, relative to the skill's directory, sorted.
    pub(crate) resources: Vec<String>,
    pub(crate) fs: Arc<dyn Filesystem>,
    pub(crate) dir: WsPath,
}

impl std::fmt::Debug for Skill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Skill")
            .field("name", &self.name)
            .field("layer", &self.layer)
            .field("dir", &self.dir)
            .field("resources", &self.resources)
            .finish_non_exhaustive()
    }
}

impl Skill {
    /// Every path `load_skill_through_path` accepts: `SKILL.md` first, then the resources.
    pub fn paths(&self) -> Vec<&str> {
        std::iter::once(SKILL_FILE)
            .chain(self.resources.iter().map(String::as_str))
            .collect()
    }

    /// The `SKILL.md` text.
    pub fn text(&self) -> &str {
        &self.text
    }
}

/// Splits `---\n<yaml>\n---\n<body>` and parses the YAML.
fn front_matter(text: &str, path: &str) -> Result<FrontMatter, SkillError> {
    let no_front = || SkillError::NoFrontMatter { path: path.to_owned() };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
        .ok_or_else(no_front)?;
    let end = rest
        .match_indices("\n---")
        .map(|(at, _)| at)
        .find(|&at| {
            let after = &rest[at + 4..];
            after.is_empty() || after.starts_with('\n') || after.starts_with("\r\n")
        })
        .ok_or_else(no_front)?;
    let yaml = &rest[..end];
    let matter: FrontMatter = yaml_serde::from_str(yaml).map_err(|err| SkillError::FrontMatter {
        path: path.to_owned(),
        message: err.to_string(),
    })?;
    let valid = !matter.name.is_empty()
        && matter
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !matter.name.starts_with('.');
    if !valid {
        return Err(SkillError::BadName {
            path: path.to_owned(),
            name: matter.name,
        });
    }
    Ok(matter)
}

/// Every skill directly under `base` (each a directory holding `SKILL.md`). Broken skills
/// are skipped with a warning; a missing `base` is an empty layer.
pub(crate) async fn scan(
    fs: &Arc<dyn Filesystem>,
    base: &WsPath,
    layer: &SkillLayer,
    host_base: Option<&std::path::Path>,
) -> Vec<Skill> {
    let entries = match fs.list(base).await {
        Ok(entries) => entries,
        Err(FsError::NotFound { .. } | FsError::NotDirectory { .. }) => return Vec::new(),
        Err(err) => {
            tracing::warn!(layer = %layer, error = %err, "cannot list skills");
            return Vec::new();
        }
    };
    let mut skills = Vec::new();
    for entry in entries.into_iter().filter(|entry| entry.is_dir) {
        match load(fs, &entry.path, layer, host_base).await {
            Ok(Some(skill)) => skills.push(skill),
            Ok(None) => {}
            Err(err) => tracing::warn!(layer = %layer, error = %err, "skill skipped"),
        }
    }
    skills
}

async fn load(
    fs: &Arc<dyn Filesystem>,
    dir: &WsPath,
    layer: &SkillLayer,
    host_base: Option<&std::path::Path>,
) -> Result<Option<Skill>, SkillError> {
    let file = dir.join(SKILL_FILE)?;
    let bytes = match fs.read(&file).await {
        Ok(bytes) => bytes,
        Err(FsError::NotFound { .. }) => return Ok(None),
        Err(err) => return Err(err.into()),
    };
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let matter = front_matter(&text, file.as_str())?;
    let mut resources = Vec::new();
    for info in fs.glob(dir, "**/*", MAX_RESOURCES + 1).await? {
        if info.is_dir {
            continue;
        }
        if let Some(relative) = info.path.strip_prefix(dir)
            && relative.as_str() != SKILL_FILE
        {
            resources.push(relative.as_str().to_owned());
        }
    }
    resources.sort();
    resources.truncate(MAX_RESOURCES);
    Ok(Some(Skill {
        name: matter.name,
        description: matter.description.trim().to_owned(),
        layer: layer.clone(),
        tool_groups: matter.tool_groups,
        files_root: host_base.map(|base| base.join(dir.file_name())),
        text,
        resources,
        fs: Arc::clone(fs),
        dir: dir.clone(),
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_is_parsed() {
        let matter = front_matter(
            "---\nname: pdf-tools\ndescription: >\n  Use when a PDF must be read.\ntool_groups: [mcp__pdf]\nlicense: MIT\n---\n# Body\n",
            "skills/pdf/SKILL.md",
        )
        .unwrap();
        assert_eq!(matter.name, "pdf-tools");
        assert_eq!(matter.description.trim(), "Use when a PDF must be read.");
        assert_eq!(matter.tool_groups, ["mcp__pdf"]);
    }

    #[test]
    fn broken_front_matter_is_explained() {
        for (text, needle) in [
            ("# no front matter", "no YAML front matter"),
            ("---\nname: x\n", "no YAML front matter"),
            ("---\nname: x\n---\n", "description"),
            ("---\nname: [x\ndescription: y\n---\n", "front matter"),
            ("---\nname: ../x\ndescription: y\n---\n", "must be letters"),
        ] {
            let err = front_matter(text, "s/SKILL.md").unwrap_err().to_string();
            assert!(err.contains(needle) && err.contains("s/SKILL.md"), "{text:?}: {err}");
        }
    }
}
