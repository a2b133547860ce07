//! The `<available_skills>` block of the system prompt.

use super::skill::Skill;

/// Renders the catalogue: one `<skill>` per skill in the given (name) order, with name,
/// description and id, and `<files-root>` only when the skill has a host directory. The
/// same skills always give the same bytes, so the prompt prefix stays cacheable.
pub(super) fn render<'a>(skills: impl IntoIterator<Item = &'a Skill>) -> String {
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
            out.push_str(&escape(&root.display().to_string()));
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
