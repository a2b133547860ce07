//! One skill: `SKILL.md` with YAML front matter, plus the files beside it.

use harness_fs::{Filesystem, FsError, WsPath};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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

/// Most `SKILL.md` files remembered by a [`SkillFileCache`]; past this the cache starts over.
const MAX_CACHED_FILES: usize = 4096;

/// The front matter of `SKILL.md`. Other keys are ignored (marketplace skills carry more).
#[derive(Debug, Clone, Deserialize)]
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

/// Parsed `SKILL.md` files, by where they were read (layer, namespace and path), kept while
/// the file's size and modification time stay the same: a call re-reads and re-parses only
/// the files that changed (one `stat` per skill otherwise). A filesystem that reports no
/// modification time is read every time.
#[derive(Default)]
pub(crate) struct SkillFileCache {
    entries: Mutex<HashMap<String, CachedSkillFile>>,
    reads: AtomicU64,
}

#[derive(Clone)]
struct CachedSkillFile {
    size: u64,
    modified: jiff::Timestamp,
    text: String,
    matter: FrontMatter,
}

impl SkillFileCache {
    /// How many times a `SKILL.md` was read and parsed (a diagnostic).
    pub(crate) fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    fn get(&self, key: &str, size: u64, modified: Option<jiff::Timestamp>) -> Option<CachedSkillFile> {
        let modified = modified?;
        // A poisoned lock only means another call panicked mid-insert; the map is still a
        // valid cache (each entry is inserted whole).
        let entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        entries
            .get(key)
            .filter(|entry| entry.size == size && entry.modified == modified)
            .cloned()
    }

    fn put(&self, key: String, entry: CachedSkillFile) {
        let mut entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if entries.len() >= MAX_CACHED_FILES && !entries.contains_key(&key) {
            entries.clear();
        }
        entries.insert(key, entry);
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

/// Where one layer's skills are scanned: the filesystem, the directory holding the skills,
/// the layer, the host directory for shell commands, and the cache key prefix that tells
/// this layer's files apart from another's with the same paths (another user's).
pub(crate) struct ScanSite<'a> {
    pub(crate) fs: &'a Arc<dyn Filesystem>,
    pub(crate) base: &'a WsPath,
    pub(crate) layer: &'a SkillLayer,
    pub(crate) host_base: Option<&'a std::path::Path>,
    /// `None`: do not cache (the layer's owner is unknown).
    pub(crate) cache_key: Option<String>,
}

/// Every skill directly under `site.base` (each a directory holding `SKILL.md`). Broken
/// skills are skipped with a warning; a missing `base` is an empty layer.
pub(crate) async fn scan(site: ScanSite<'_>, cache: &SkillFileCache) -> Vec<Skill> {
    let ScanSite {
        fs,
        base,
        layer,
        host_base,
        cache_key,
    } = site;
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
        let key = cache_key.as_deref();
        match load(fs, &entry.path, layer, host_base, key.map(|key| (key, cache))).await {
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
    cache: Option<(&str, &SkillFileCache)>,
) -> Result<Option<Skill>, SkillError> {
    let file = dir.join(SKILL_FILE)?;
    let info = match fs.stat(&file).await {
        Ok(info) if !info.is_dir => info,
        Ok(_) | Err(FsError::NotFound { .. }) => return Ok(None),
        Err(err) => return Err(err.into()),
    };
    let key = cache.map(|(prefix, cache)| (format!("{prefix}\u{0}{file}"), cache));
    let cached = key
        .as_ref()
        .and_then(|(key, cache)| cache.get(key, info.size, info.modified));
    let CachedSkillFile { text, matter, .. } = match cached {
        Some(entry) => entry,
        None => {
            let bytes = match fs.read(&file).await {
                Ok(bytes) => bytes,
                Err(FsError::NotFound { .. }) => return Ok(None),
                Err(err) => return Err(err.into()),
            };
            let text = String::from_utf8_lossy(&bytes).into_owned();
            if let Some((_, cache)) = &key {
                cache.reads.fetch_add(1, Ordering::Relaxed);
            }
            let matter = front_matter(&text, file.as_str())?;
            let entry = CachedSkillFile {
                // The stat taken before the read: if the file changed in between, the next
                // call sees a different stat and reads it again.
                size: info.size,
                modified: info.modified.unwrap_or_default(),
                text,
                matter,
            };
            if let (Some((key, cache)), Some(_)) = (key, info.modified) {
                cache.put(key, entry.clone());
            }
            entry
        }
    };
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
