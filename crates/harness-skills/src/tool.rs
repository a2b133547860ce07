//! `load_skill_through_path(skillId, path)`.

use crate::library::Skills;
use crate::skill::{SKILL_FILE, Skill};
use async_trait::async_trait;
use harness_core::{JsonSchema, Tool, ToolAnnotations, ToolContext, ToolError, ToolOutput, TypedTool, typed};
use harness_fs::{CallScope, CallWorkspace, Filesystem, FsError, Namespaced, WsPath};
use serde::Deserialize;
use std::sync::Arc;

/// The tool's name.
pub const LOAD_SKILL: &str = "load_skill_through_path";

/// Arguments of `load_skill_through_path`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct LoadSkillArgs {
    /// The skill's id (its name, as listed in <available_skills>).
    #[serde(rename = "skillId")]
    pub skill_id: String,
    /// `SKILL.md`, or a file it names, relative to it.
    pub path: String,
}

/// Returns a skill's `SKILL.md` or one of its files; anything else is refused with the list
/// of available paths.
pub struct LoadSkill {
    skills: Arc<Skills>,
}

impl LoadSkill {
    /// The tool over these skills.
    pub fn tool(skills: Arc<Skills>) -> Arc<dyn Tool> {
        typed(Self { skills })
    }
}

#[async_trait]
impl TypedTool for LoadSkill {
    const NAME: &'static str = LOAD_SKILL;
    const DESCRIPTION: &'static str = "Read a skill of <available_skills>: its SKILL.md or a file it names.";
    type Args = LoadSkillArgs;
    // Only reads the caller's own skill layers. Not marked closed-world on purpose: its
    // `path` is relative to SKILL.md, not a workspace path, so the permission check must not
    // read it as one (the tool checks it itself); read-only is enough to run by default.
    const ANNOTATIONS: ToolAnnotations = ToolAnnotations::new().read_only();

    async fn call(&self, args: LoadSkillArgs, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let workspace = ctx
            .runtime
            .get::<CallWorkspace>()
            .ok_or_else(|| ToolError::failed("no workspace is bound to this call"))?;
        let namespace = ctx.runtime.get::<CallScope>().map(CallScope::namespace);
        let set = self.skills.resolve(workspace, namespace).await;
        let Some(skill) = set.get(&args.skill_id).filter(|skill| !skill.disable_model_invocation) else {
            let names: Vec<&str> = set.for_model().map(|skill| skill.name.as_str()).collect();
            let people_only = set
                .get(&args.skill_id)
                .map(|_| " (it is for people only: its SKILL.md says `disable-model-invocation: true`)")
                .unwrap_or_default();
            return Err(ToolError::failed(if names.is_empty() {
                format!(
                    "unknown skill `{}`{people_only}; no skills are available",
                    args.skill_id
                )
            } else {
                format!(
                    "unknown skill `{}`{people_only}; available skills: {}",
                    args.skill_id,
                    names.join(", ")
                )
            }));
        };
        let path = args.path.trim();
        let (file, repository) = resolve(skill, path).await.map_err(ToolError::failed)?;
        if file
            == skill
                .dir
                .join(SKILL_FILE)
                .map_err(|err| ToolError::failed(err.to_string()))?
        {
            return Ok(ToolOutput::text(skill.text()));
        }
        let relative = file.strip_prefix(&skill.root).unwrap_or_default();
        let bytes = repository
            .read(&relative)
            .await
            .map_err(|err| ToolError::failed(err.to_string()))?;
        match String::from_utf8(bytes) {
            Ok(text) => Ok(ToolOutput::text(text)),
            Err(_) => Err(ToolError::failed(format!(
                "`{path}` of skill `{}` is not text; run or read it with a shell{}",
                skill.name,
                skill
                    .files_root
                    .as_ref()
                    .map(|root| format!(" under {}", root.display()))
                    .unwrap_or_default()
            ))),
        }
    }
}

/// `path` as a skill's text writes it (`./reference/x.md`, `../shared/style.md`,
/// `Reference/X.md` for `reference/x.md`), resolved to a file below the skill's root (its
/// repository, its `skills/` directory): `.` dropped, `..` taken against the skill's
/// directory, and a name that matches no entry matched case-insensitively when exactly one
/// entry matches. Returns the path in the skill's filesystem and the view of that filesystem
/// rooted at the skill's root, through which the file must be read: it refuses symlinks
/// that lead out of the root.
async fn resolve(skill: &Skill, path: &str) -> Result<(WsPath, Namespaced), String> {
    let available = || format!("available paths: {}", skill.paths().join(", "));
    if path.starts_with('/') || path.starts_with('~') || path.contains('\\') || path.contains('\0') {
        return Err(format!(
            "`{path}` is not a path relative to the skill's SKILL.md; {}",
            available()
        ));
    }
    let mut segments: Vec<String> = skill
        .dir
        .strip_prefix(&skill.root)
        .map(|inside| inside.segments().map(str::to_owned).collect())
        .unwrap_or_default();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if segments.pop().is_none() {
                    return Err(format!(
                        "`{path}` leads out of the skill's repository; only files inside it can be read; {}",
                        available()
                    ));
                }
            }
            other => segments.push(other.to_owned()),
        }
    }
    let repository = Namespaced::new(Arc::clone(&skill.fs), skill.root.clone());
    let not_found = || format!("`{path}` is not a file of skill `{}`; {}", skill.name, available());
    let mut current = WsPath::root();
    for segment in segments {
        let exact = current.join(&segment).map_err(|err| err.to_string())?;
        match repository.stat(&exact).await {
            Ok(_) => {
                current = exact;
                continue;
            }
            Err(FsError::NotFound { .. }) => {}
            Err(err) => return Err(format!("`{path}`: {err}")),
        }
        let wanted = segment.to_lowercase();
        let entries = repository
            .list(&current)
            .await
            .map_err(|err| format!("`{path}`: {err}"))?;
        let mut matches = entries
            .into_iter()
            .filter(|entry| entry.path.file_name().to_lowercase() == wanted);
        match (matches.next(), matches.next()) {
            (Some(only), None) => current = only.path,
            (Some(first), Some(second)) => {
                return Err(format!(
                    "`{path}`: `{segment}` matches `{}` and `{}` (names differing only in case); give the exact name",
                    first.path.file_name(),
                    second.path.file_name()
                ));
            }
            (None, _) => return Err(not_found()),
        }
    }
    match repository.stat(&current).await {
        Ok(info) if !info.is_dir => Ok((skill.root.join_path(&current), repository)),
        Ok(_) => Err(format!("`{path}` is a directory, not a file; {}", available())),
        Err(FsError::NotFound { .. }) => Err(not_found()),
        Err(err) => Err(format!("`{path}`: {err}")),
    }
}
