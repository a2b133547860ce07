//! The `<available_skills>` block of the system prompt.

use crate::skill::Skill;
use harness_fs::WsPath;
use std::path::{Path, PathBuf};

/// `root` as the caller's shell reaches it: relative to the caller's layer (the shell's
/// working directory, `namespace` under `host_root`) when it lies inside the workspace, so
/// the prompt never carries the workspace's host path; as given otherwise (a global skills
/// directory outside the workspace).
pub(super) fn relative_root(root: &Path, host_root: Option<&Path>, namespace: Option<&WsPath>) -> String {
    let Some(inside) = host_root.and_then(|host| root.strip_prefix(host).ok()) else {
        return root.display().to_string();
    };
    let depth = namespace.map_or(0, |namespace| namespace.segments().count());
    let mut relative = PathBuf::new();
    for _ in 0..depth {
        relative.push("..");
    }
    relative.push(inside);
    if relative.as_os_str().is_empty() {
        ".".to_owned()
    } else {
        relative.display().to_string()
    }
}

/// Renders the catalogue: one `<skill>` per skill in the given (name) order, with name,
/// description and id, and `<files-root>` (as `show_root` writes it) only when the skill has
/// a host directory. The same skills always give the same bytes, so the prompt prefix stays
/// cacheable.
pub(super) fn render<'a>(skills: impl IntoIterator<Item = &'a Skill>, show_root: &dyn Fn(&Path) -> String) -> String {
    let mut out = String::from(
        "<available_skills>\nSkills are packaged instructions. When a task matches a skill's \
         description, first read it with load_skill_through_path(skillId, \"SKILL.md\"); it names \
         any other files to read the same way.\n",
    );
    let mut any = false;
    for skill in skills {
        any = true;
        out.push_str("<skill>\n<name>");
        out.push_str(&escape(&skill.name));
        out.push_str("</name>\n<description>");
        out.push_str(&escape(&skill.description));
        out.push_str("</description>\n<skill-id>");
        out.push_str(&escape(&skill.name));
        out.push_str("</skill-id>\n");
        if let Some(root) = &skill.files_root {
            out.push_str("<files-root>");
            out.push_str(&escape(&show_root(root)));
            out.push_str("</files-root>\n");
        }
        out.push_str("</skill>\n");
    }
    if !any {
        return String::new();
    }
    out.push_str("</available_skills>");
    out
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::relative_root;
    use harness_fs::WsPath;
    use std::path::Path;

    #[test]
    fn a_root_inside_the_workspace_is_shown_from_the_callers_layer() {
        let host = Path::new("/srv/ws");
        let skill = Path::new("/srv/ws/skills/pdf");
        let alice = WsPath::parse("alice").unwrap();
        assert_eq!(relative_root(skill, Some(host), Some(&alice)), "../skills/pdf");
        assert_eq!(relative_root(skill, Some(host), Some(&WsPath::root())), "skills/pdf");
        let deep = WsPath::parse("alice/agents/a/subagents/c/s1").unwrap();
        assert_eq!(
            relative_root(skill, Some(host), Some(&deep)),
            "../../../../../../skills/pdf"
        );
        assert_eq!(
            relative_root(Path::new("/opt/skills/x"), Some(host), Some(&alice)),
            "/opt/skills/x"
        );
    }
}
