//! One skill: `SKILL.md` with YAML front matter, plus the files beside it.

use harness_fs::{Filesystem, FsError, WsPath};
use serde::Deserialize;
use std::collections::{HashMap, VecDeque};
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

/// Levels of directories below a layer's root searched for `SKILL.md` (`<name>/`,
/// `<catalog>/<name>/`, `skills/.curated/<name>/`, ...). A directory holding `SKILL.md` is a
/// skill and is not searched further.
pub const MAX_SKILL_DEPTH: usize = 4;

/// Most directories one layer's search visits; past it the rest is not searched (a warning).
const MAX_SEARCHED_DIRS: usize = 2000;

/// Directories never searched for skills.
const UNSEARCHED_DIRS: &[&str] = &[".git", "node_modules", ".skills-cache"];

/// Keys a line may begin with when front matter that strict YAML refuses is read line by
/// line: ours and the ones published skills carry.
const KNOWN_KEYS: &[&str] = &[
    "name",
    "description",
    "tool_groups",
    "disable-model-invocation",
    "user-invocable",
    "license",
    "allowed-tools",
    "argument-hint",
    "compatibility",
    "metadata",
    "model",
    "version",
];

/// The front matter of `SKILL.md`. Other keys are ignored (marketplace skills carry more).
#[derive(Debug, Clone, Deserialize)]
struct FrontMatter {
    /// `None` or empty: the folder's name is used.
    #[serde(default)]
    name: Option<String>,
    description: String,
    /// On-demand tool groups loading this skill activates.
    #[serde(default)]
    tool_groups: Vec<String>,
    /// Listed for people, never offered to or loadable by the model.
    #[serde(default, rename = "disable-model-invocation")]
    disable_model_invocation: bool,
}

/// A parsed `SKILL.md`: its name (given or derived) and what else it says, with the notes
/// about what was read differently from the file's words.
#[derive(Debug, Clone)]
struct Matter {
    name: String,
    description: String,
    tool_groups: Vec<String>,
    disable_model_invocation: bool,
    notes: Vec<String>,
}

/// Whether a [`SkillWarning`]'s file was loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkillWarningKind {
    /// The `SKILL.md` was not loaded: no skill comes from it.
    Skipped,
    /// The skill was loaded, but not quite as written (a derived name, front matter read line
    /// by line).
    Note,
}

/// Something a person should know about one `SKILL.md`: why it was skipped, or what was
/// read differently from its words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillWarning {
    /// The file, from its layer's root (`skills/pdf/SKILL.md`, `pdf/SKILL.md`).
    pub file: String,
    /// Skipped or loaded with a note.
    pub kind: SkillWarningKind,
    /// Why, in words a person acts on.
    pub reason: String,
}

impl std::fmt::Display for SkillWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            SkillWarningKind::Skipped => write!(f, "{}: skipped: {}", self.file, self.reason),
            SkillWarningKind::Note => write!(f, "{}: loaded: {}", self.file, self.reason),
        }
    }
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
    /// Another `SKILL.md` of the same layer has the same name (the first one found, nearer
    /// the layer's root, is kept).
    #[error("{path}: skill name `{name}` is already taken by {first}")]
    Duplicate {
        /// The file.
        path: String,
        /// The name.
        name: String,
        /// The file that has it.
        first: String,
    },
    /// Reading failed.
    #[error(transparent)]
    Fs(#[from] FsError),
}

impl SkillError {
    /// What went wrong, without the file's name (a [`SkillWarning`] carries it).
    fn reason(&self) -> String {
        match self {
            Self::NoFrontMatter { .. } => {
                "no YAML front matter (`---` lines around `name` and `description`)".to_owned()
            }
            Self::FrontMatter { message, .. } => format!("front matter: {message}"),
            Self::BadName { name, .. } => format!("skill name `{name}` must be letters, digits, `-`, `_` or `.`"),
            Self::Duplicate { name, first, .. } => format!("skill name `{name}` is already taken by {first}"),
            Self::Fs(err) => err.to_string(),
        }
    }
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
    /// `disable-model-invocation: true`: listed for people, never offered to the model, and
    /// the model cannot load it by name.
    pub disable_model_invocation: bool,
    /// The whole `SKILL.md`.
    pub(crate) text: String,
    /// Files besides `SKILL.md`, relative to the skill's directory, sorted.
    pub(crate) resources: Vec<String>,
    pub(crate) fs: Arc<dyn Filesystem>,
    pub(crate) dir: WsPath,
    /// The layer's root (the repository, the `skills/` directory): files anywhere below it
    /// are readable through the skill tool, so skills of one repository share files.
    pub(crate) root: WsPath,
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

    /// The `SKILL.md` file, from its filesystem's root.
    pub fn file(&self) -> String {
        format!("{}/{SKILL_FILE}", self.dir)
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
    matter: Matter,
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

/// Splits `---\n<yaml>\n---\n<body>` and parses the YAML; YAML that strict parsing refuses
/// (an unquoted `:` in `description`) is read line by line, as agent files are
/// ([`crate::front_matter::lenient`]). A missing `name` is the folder's name.
fn front_matter(text: &str, path: &str, folder: &str) -> Result<Matter, SkillError> {
    let no_front = || SkillError::NoFrontMatter { path: path.to_owned() };
    let bad = |message: String| SkillError::FrontMatter {
        path: path.to_owned(),
        message,
    };
    let (yaml, _body) = crate::front_matter::split(text).ok_or_else(no_front)?;
    let mut notes = Vec::new();
    let map = match yaml_serde::from_str::<yaml_serde::Value>(yaml) {
        Ok(yaml_serde::Value::Mapping(map)) => map,
        Ok(yaml_serde::Value::Null) => yaml_serde::Mapping::new(),
        Ok(_) => return Err(bad("must be a mapping of keys to values".to_owned())),
        Err(err) => match crate::front_matter::lenient(yaml, KNOWN_KEYS, &["name", "description"]) {
            Some(map) => {
                notes.push(format!(
                    "front matter is not valid YAML ({err}); read line by line, a known key at the start of a line beginning its value"
                ));
                map
            }
            None => return Err(bad(err.to_string())),
        },
    };
    let matter: FrontMatter =
        yaml_serde::from_value(yaml_serde::Value::Mapping(map)).map_err(|err| bad(err.to_string()))?;
    let name = match matter.name.map(|name| name.trim().to_owned()) {
        Some(name) if !name.is_empty() => name,
        _ => {
            notes.push(format!(
                "no `name` in the front matter; the folder's name `{folder}` is used"
            ));
            folder.to_owned()
        }
    };
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !name.starts_with('.');
    if !valid {
        return Err(SkillError::BadName {
            path: path.to_owned(),
            name,
        });
    }
    Ok(Matter {
        name,
        description: matter.description.trim().to_owned(),
        tool_groups: matter.tool_groups,
        disable_model_invocation: matter.disable_model_invocation,
        notes,
    })
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

/// Every skill below `site.base`: each directory holding `SKILL.md`, to
/// [`MAX_SKILL_DEPTH`] levels, nearer ones first. A broken `SKILL.md` (or a second one of a
/// name) is skipped with a warning; a missing `base` is an empty layer.
pub(crate) async fn scan(site: ScanSite<'_>, cache: &SkillFileCache) -> (Vec<Skill>, Vec<SkillWarning>) {
    let ScanSite {
        fs,
        base,
        layer,
        host_base,
        cache_key,
    } = site;
    let mut skills: Vec<Skill> = Vec::new();
    let mut warnings = Vec::new();
    let mut names: HashMap<String, String> = HashMap::new();
    let mut queue = VecDeque::from([(base.clone(), 0)]);
    let mut searched = 0;
    while let Some((dir, depth)) = queue.pop_front() {
        searched += 1;
        if searched > MAX_SEARCHED_DIRS {
            tracing::warn!(layer = %layer, limit = MAX_SEARCHED_DIRS, "skills search stopped at its directory limit");
            break;
        }
        let entries = match fs.list(&dir).await {
            Ok(entries) => entries,
            Err(FsError::NotFound { .. } | FsError::NotDirectory { .. }) => continue,
            Err(err) => {
                tracing::warn!(layer = %layer, dir = %dir, error = %err, "cannot list skills");
                continue;
            }
        };
        let holds_skill = depth > 0
            && entries
                .iter()
                .any(|entry| !entry.is_dir && entry.path.file_name() == SKILL_FILE);
        if holds_skill {
            let file = format!("{dir}/{SKILL_FILE}");
            let key = cache_key.as_deref();
            let site = (fs, base, layer, host_base);
            let loaded = match load(site, &dir, key.map(|key| (key, cache))).await {
                Ok(Some((skill, notes))) => match names.get(&skill.name) {
                    Some(first) => Err(SkillError::Duplicate {
                        path: file.clone(),
                        name: skill.name,
                        first: first.clone(),
                    }),
                    None => Ok(Some((skill, notes))),
                },
                other => other,
            };
            match loaded {
                Ok(Some((skill, notes))) => {
                    names.insert(skill.name.clone(), file.clone());
                    warnings.extend(notes.into_iter().map(|reason| SkillWarning {
                        file: file.clone(),
                        kind: SkillWarningKind::Note,
                        reason,
                    }));
                    skills.push(skill);
                }
                Ok(None) => {}
                Err(err) => {
                    tracing::warn!(layer = %layer, error = %err, "skill skipped");
                    warnings.push(SkillWarning {
                        file,
                        kind: SkillWarningKind::Skipped,
                        reason: err.reason(),
                    });
                }
            }
            continue;
        }
        if depth < MAX_SKILL_DEPTH {
            for entry in entries {
                if entry.is_dir && !UNSEARCHED_DIRS.contains(&entry.path.file_name()) {
                    queue.push_back((entry.path, depth + 1));
                }
            }
        }
    }
    (skills, warnings)
}

/// Where a skill sits: its layer's filesystem, root, layer and host directory.
type Site<'a> = (
    &'a Arc<dyn Filesystem>,
    &'a WsPath,
    &'a SkillLayer,
    Option<&'a std::path::Path>,
);

async fn load(
    (fs, base, layer, host_base): Site<'_>,
    dir: &WsPath,
    cache: Option<(&str, &SkillFileCache)>,
) -> Result<Option<(Skill, Vec<String>)>, SkillError> {
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
            let matter = front_matter(&text, file.as_str(), dir.file_name())?;
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
    let Matter {
        name,
        description,
        tool_groups,
        disable_model_invocation,
        notes,
    } = matter;
    // The skill's host directory: its path below the layer's root, below the root's host
    // directory (nested layouts keep every level).
    let inside = dir.strip_prefix(base).unwrap_or_default();
    let files_root = host_base.map(|host| inside.segments().fold(host.to_owned(), |path, part| path.join(part)));
    let skill = Skill {
        name,
        description,
        layer: layer.clone(),
        tool_groups,
        files_root,
        disable_model_invocation,
        text,
        resources,
        fs: Arc::clone(fs),
        dir: dir.clone(),
        root: base.clone(),
    };
    Ok(Some((skill, notes)))
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
            "pdf",
        )
        .unwrap();
        assert_eq!(matter.name, "pdf-tools");
        assert_eq!(matter.description, "Use when a PDF must be read.");
        assert_eq!(matter.tool_groups, ["mcp__pdf"]);
        assert!(!matter.disable_model_invocation);
        assert!(matter.notes.is_empty(), "{:?}", matter.notes);
    }

    #[test]
    fn broken_front_matter_is_explained() {
        for (text, needle) in [
            ("# no front matter", "no YAML front matter"),
            ("---\nname: x\n", "no YAML front matter"),
            ("---\nname: x\n---\n", "description"),
            ("---\n[x\n---\n", "front matter"),
            ("---\nname: ../x\ndescription: y\n---\n", "must be letters"),
            ("---\n- a list\n---\n", "must be a mapping"),
        ] {
            let err = front_matter(text, "s/SKILL.md", "s").unwrap_err().to_string();
            assert!(err.contains(needle) && err.contains("s/SKILL.md"), "{text:?}: {err}");
        }
    }

    #[test]
    fn a_missing_name_is_the_folders_with_a_note() {
        let matter = front_matter("---\ndescription: Fill forms\n---\n", "skills/forms/SKILL.md", "forms").unwrap();
        assert_eq!(matter.name, "forms");
        assert_eq!(matter.notes.len(), 1);
        assert!(matter.notes[0].contains("folder's name `forms`"), "{:?}", matter.notes);
        // A folder name that is no skill name is still refused.
        let err = front_matter("---\ndescription: x\n---\n", "s/.hidden/SKILL.md", ".hidden").unwrap_err();
        assert!(matches!(err, SkillError::BadName { .. }), "{err}");
    }

    #[test]
    fn an_unquoted_colon_in_the_description_loads_line_by_line() {
        let matter = front_matter(
            "---\nname: xlsx\ndescription: Spreadsheets: read, edit and chart them. Use when: a .xlsx is named\nlicense: Proprietary\ndisable-model-invocation: true\n---\nBody\n",
            "skills/xlsx/SKILL.md",
            "xlsx",
        )
        .unwrap();
        assert_eq!(matter.name, "xlsx");
        assert_eq!(
            matter.description,
            "Spreadsheets: read, edit and chart them. Use when: a .xlsx is named"
        );
        assert!(matter.disable_model_invocation);
        assert!(matter.notes[0].contains("read line by line"), "{:?}", matter.notes);
    }
}
