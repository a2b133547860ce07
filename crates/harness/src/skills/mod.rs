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

mod catalogue;
mod git;
mod library;
mod middleware;
mod section;
mod skill;
mod tool;

pub use git::{GitSkillRepository, GitSyncError, SKILLS_CACHE, SyncOutcome, source_name};
pub use library::{SKILLS_DIR, SkillRepositorySource, SkillSet, Skills, SkillsConfig, SkillsError};
pub use middleware::{CATALOGUE_PART, SkillsContext};
pub use section::{SkillRepositoryEntry, SkillsSection};
pub use skill::{SKILL_FILE, Skill, SkillError, SkillLayer};
pub use tool::{LOAD_SKILL, LoadSkill, LoadSkillArgs};
