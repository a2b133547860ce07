//! `load_skill_through_path(skillId, path)`.

use crate::library::Skills;
use crate::skill::SKILL_FILE;
use async_trait::async_trait;
use harness_core::{JsonSchema, Tool, ToolAnnotations, ToolContext, ToolError, ToolOutput, TypedTool, typed};
use harness_fs::{CallScope, CallWorkspace, WsPath};
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
        let Some(skill) = set.get(&args.skill_id) else {
            let names = set.names();
            return Err(ToolError::failed(if names.is_empty() {
                format!("unknown skill `{}`; no skills are available", args.skill_id)
            } else {
                format!(
                    "unknown skill `{}`; available skills: {}",
                    args.skill_id,
                    names.join(", ")
                )
            }));
        };
        let path = args.path.trim();
        if path == SKILL_FILE {
            return Ok(ToolOutput::text(skill.text()));
        }
        if !skill.resources.iter().any(|resource| resource == path) {
            return Err(ToolError::failed(format!(
                "`{path}` is not a file of skill `{}`; available paths: {}",
                skill.name,
                skill.paths().join(", ")
            )));
        }
        let file = WsPath::parse(path)
            .map(|relative| skill.dir.join_path(&relative))
            .map_err(|err| ToolError::failed(err.to_string()))?;
        let bytes = skill
            .fs
            .read(&file)
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
