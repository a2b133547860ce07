//! Skills: packaged know-how the model loads when it needs it.
//!
//! A skill is a directory with a `SKILL.md` (YAML front matter `name`, `description`, and
//! optionally `tool_groups`, then instructions) plus any files beside it. Layers, low to
//! high, a higher one shadowing the same name: the configured global directory, git skill
//! repositories (staged under `.skills-cache/<source>/`), the workspace's `skills/`, the
//! caller's `<user>/skills/`. Every step's system prompt carries the `<available_skills>`
//! catalogue ([`SkillsContext`]), and [`LoadSkill`] (`load_skill_through_path`) returns a
//! skill's `SKILL.md` or one of its files. Reading goes through the workspace
//! `Filesystem`; only the git cache is written directly.
//!
//! Git repositories ([`GitSkillRepository`], the `git` feature) are synced by
//! [`Skills::start`]: once before it returns, then every [`SyncSchedule::interval`] in the
//! background, each sync bounded by [`SyncSchedule::timeout`]. A turn never fetches: it
//! reads the last staged copy.
//!
//! Where to start: [`SkillsSection`] (`[skills]` in `harness.toml`) resolves to a
//! [`SkillsConfig`]; [`Skills::start`] sets the layers up; [`Skills::resolve`] gives one
//! caller's [`SkillSet`].
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use harness_skills::{Skills, SkillsConfig};
//! let dir = tempfile::tempdir()?;
//! std::fs::create_dir_all(dir.path().join("skills/pdf"))?;
//! std::fs::write(dir.path().join("skills/pdf/SKILL.md"), "---\nname: pdf\ndescription: Use for PDFs\n---\nSteps.\n")?;
//! let skills = Skills::start(SkillsConfig::default(), dir.path(), false).await?;
//! let fs: std::sync::Arc<dyn harness_fs::Filesystem> = std::sync::Arc::new(harness_fs::LocalFs::new(dir.path())?);
//! let workspace = harness_fs::CallWorkspace { user: fs.clone(), layered: fs.clone(), shared: fs.clone(), unfenced: fs };
//! let set = skills.resolve(&workspace, None).await;
//! assert_eq!(set.names(), ["pdf"]);
//! assert!(set.catalogue().contains("<description>Use for PDFs</description>"));
//! # Ok::<_, Box<dyn std::error::Error>>(()) }).unwrap();
//! ```

mod catalogue;
pub mod front_matter;
#[cfg(feature = "git")]
mod git;
mod library;
mod middleware;
#[cfg(not(feature = "git"))]
mod no_git;
pub mod tool_groups;
#[cfg(not(feature = "git"))]
use no_git as git;
mod repository;
mod section;
mod skill;
mod tool;

pub use library::{SKILLS_DIR, SkillRepositorySource, SkillSet, Skills, SkillsConfig, SkillsError, SyncSchedule};
pub use middleware::{CATALOGUE_PART, SkillsContext};
pub use repository::{DEFAULT_SYNC_TIMEOUT, GitSkillRepository, GitSyncError, SKILLS_CACHE, SyncOutcome, source_name};
pub use section::{SkillRepositoryEntry, SkillsSection};
pub use skill::{MAX_SKILL_DEPTH, SKILL_FILE, Skill, SkillError, SkillLayer, SkillWarning, SkillWarningKind};
pub use tool::{LOAD_SKILL, LoadSkill, LoadSkillArgs};
