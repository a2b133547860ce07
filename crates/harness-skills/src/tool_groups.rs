//! On-demand tool groups: tools that cost no prompt bytes until they are needed.
//!
//! A [`ToolGroup`] names a set of tools (an MCP server declared `on_demand`, or any tools a
//! skill declares in its `tool_groups` front matter). Its tools are registered like any other
//! but left out of the tools offered to the model until the group is active in the session.
//! A group becomes active when the model calls `activate_tool_group(group)` or loads (with
//! `load_skill_through_path`) a skill that lists it; it then stays active for the session
//! (recorded in the [`ActiveGroups`] session slot, so it survives compaction and restarts;
//! each step looks for new activations only among the call's own messages).
//!
//! [`ToolGroupsLayer`] does both halves: before each reasoning step it records activations
//! found in the conversation, then narrows the step's `Turn::tools` to leave out inactive
//! groups' tools, so the kernel neither offers them to the model nor runs a call to one (a
//! guessed call gets the "not available on this step" error result).

use crate::{LOAD_SKILL, Skills};
use async_trait::async_trait;
use harness_core::{
    AgentError, AgentState, Block, Hooks, JsonSchema, Middleware, ReasoningNext, Role, Tool, ToolContext, ToolError,
    ToolOutput, ToolSpec, Turn, schema_of,
};
use harness_fs::CallWorkspace;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// The activation tool's name.
pub const ACTIVATE_TOOL_GROUP: &str = "activate_tool_group";

/// Key of the group state in `AgentState::extensions`.
pub const STATE_KEY: &str = "tool_groups";

/// A named set of tools offered only once activated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolGroup {
    /// The group's name, e.g. `mcp__github`.
    pub name: String,
    /// What the tools are for (shown in `activate_tool_group`'s description).
    pub description: String,
    /// Tool names.
    pub tools: BTreeSet<String>,
}

/// The on-demand groups of an agent.
#[derive(Debug, Clone, Default)]
pub struct ToolGroups {
    groups: BTreeMap<String, ToolGroup>,
}

/// What a session has activated.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActiveGroups {
    /// Active group names.
    #[serde(default)]
    pub groups: BTreeSet<String>,
    /// Skills whose groups were already taken into account.
    #[serde(default)]
    pub skills: BTreeSet<String>,
}

impl harness_core::SessionSlot for ActiveGroups {
    const KEY: &'static str = STATE_KEY;
}

impl ActiveGroups {
    /// The session's state (empty when none was recorded).
    pub fn of(state: &AgentState) -> Self {
        state
            .extensions
            .get(STATE_KEY)
            .and_then(|value| serde_json::from_value(value.clone()).ok())
            .unwrap_or_default()
    }

    /// Stores it in the session's state.
    pub fn store(&self, state: &mut AgentState) {
        if let Ok(value) = serde_json::to_value(self) {
            state.extensions.insert(STATE_KEY.to_owned(), value);
        }
    }
}

impl ToolGroups {
    /// No groups.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a group.
    pub fn add(&mut self, group: ToolGroup) {
        self.groups.insert(group.name.clone(), group);
    }

    /// The groups `tools` declare ([`Tool::group`]), each described by `describe(group)` or,
    /// when that has nothing to say, by its tools' names.
    pub fn declared_by(tools: &[Arc<dyn Tool>], describe: impl Fn(&str) -> Option<String>) -> Self {
        let mut by_group: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        for tool in tools {
            if let Some(group) = tool.group() {
                by_group.entry(group).or_default().insert(tool.spec().name.clone());
            }
        }
        let mut groups = Self::new();
        for (name, tools) in by_group {
            let description = describe(name).unwrap_or_else(|| {
                let names: Vec<&str> = tools.iter().map(String::as_str).collect();
                names.join(", ")
            });
            groups.add(ToolGroup {
                name: name.to_owned(),
                description,
                tools,
            });
        }
        groups
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// A group by name.
    pub fn get(&self, name: &str) -> Option<&ToolGroup> {
        self.groups.get(name)
    }

    /// The groups, by name.
    pub fn iter(&self) -> impl Iterator<Item = &ToolGroup> {
        self.groups.values()
    }

    /// Whether `tool` is offered while `active` groups are active: tools in no group always
    /// are; a grouped tool when any of its groups is active.
    pub fn offers(&self, tool: &str, active: &BTreeSet<String>) -> bool {
        let mut grouped = false;
        for group in self.groups.values() {
            if group.tools.contains(tool) {
                if active.contains(&group.name) {
                    return true;
                }
                grouped = true;
            }
        }
        !grouped
    }

    /// The `activate_tool_group` tool (for agents with at least one group); its description
    /// lists the groups.
    pub fn activation_tool(self: &Arc<Self>) -> Arc<dyn Tool> {
        let mut description = String::from("Offer a group's tools for the rest of the session:");
        for group in self.groups.values() {
            description.push_str(&format!("\n- {}: {}", group.name, group.description));
        }
        Arc::new(ActivateToolGroup {
            spec: ToolSpec {
                name: ACTIVATE_TOOL_GROUP.to_owned(),
                description,
                input_schema: schema_of::<ActivateArgs>(),
                // Changes only this session's offered tools: no side effect outside it.
                annotations: harness_core::ToolAnnotations::new()
                    .destructive(false)
                    .idempotent()
                    .closed_world(),
            },
            groups: Arc::clone(self),
        })
    }
}

/// Arguments of `activate_tool_group`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ActivateArgs {
    /// The group's name.
    pub group: String,
}

struct ActivateToolGroup {
    spec: ToolSpec,
    groups: Arc<ToolGroups>,
}

#[async_trait]
impl Tool for ActivateToolGroup {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, input: serde_json::Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: ActivateArgs = serde_json::from_value(input).map_err(|err| ToolError::InvalidArguments {
            tool: ACTIVATE_TOOL_GROUP.to_owned(),
            message: err.to_string(),
        })?;
        let Some(group) = self.groups.get(&args.group) else {
            let names: Vec<&str> = self.groups.groups.keys().map(String::as_str).collect();
            return Err(ToolError::failed(format!(
                "unknown tool group `{}`; groups: {}",
                args.group,
                names.join(", ")
            )));
        };
        let tools: Vec<&str> = group.tools.iter().map(String::as_str).collect();
        Ok(ToolOutput::text(format!(
            "Tool group `{}` is active from the next step on: {}",
            group.name,
            tools.join(", ")
        )))
    }
}

/// Records activations and hides inactive groups' tools. See the module docs.
pub struct ToolGroupsLayer {
    groups: Arc<ToolGroups>,
    skills: Option<Arc<Skills>>,
}

impl ToolGroupsLayer {
    /// The layer over these groups; `skills` resolves the groups a loaded skill declares.
    pub fn new(groups: Arc<ToolGroups>, skills: Option<Arc<Skills>>) -> Self {
        Self { groups, skills }
    }
}

/// Successful `activate_tool_group` groups and `load_skill_through_path` skills in `messages`.
fn activations(messages: &[Arc<harness_core::Msg>]) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut calls: HashMap<&str, (&str, &serde_json::Value)> = HashMap::new();
    let (mut groups, mut skills) = (BTreeSet::new(), BTreeSet::new());
    for msg in messages {
        for block in &msg.content {
            match block {
                Block::ToolUse { id, name, input }
                    if msg.role == Role::Assistant && (name == ACTIVATE_TOOL_GROUP || name == LOAD_SKILL) =>
                {
                    calls.insert(id, (name, input));
                }
                Block::ToolResult {
                    tool_use_id, is_error, ..
                } if !is_error => {
                    let Some((name, input)) = calls.get(tool_use_id.as_str()) else {
                        continue;
                    };
                    let field = if *name == ACTIVATE_TOOL_GROUP {
                        "group"
                    } else {
                        "skillId"
                    };
                    if let Some(value) = input.get(field).and_then(|v| v.as_str()) {
                        if *name == ACTIVATE_TOOL_GROUP {
                            groups.insert(value.to_owned());
                        } else {
                            skills.insert(value.to_owned());
                        }
                    }
                }
                _ => {}
            }
        }
    }
    (groups, skills)
}

#[async_trait]
impl Middleware for ToolGroupsLayer {
    fn name(&self) -> &'static str {
        "tool_groups"
    }

    fn hooks(&self) -> Hooks {
        Hooks::REASONING
    }

    async fn reasoning(&self, turn: &mut Turn, next: ReasoningNext<'_>) -> Result<(), AgentError> {
        let mut state: ActiveGroups = turn.session().get().unwrap_or_default();
        let before = state.clone();
        // Only this call's messages: earlier calls' activations are in the slot already
        // (each recorded at the step after it), so a step costs what the call added, not
        // the history.
        let (groups, skills) = activations(turn.appended());
        state
            .groups
            .extend(groups.into_iter().filter(|group| self.groups.get(group).is_some()));
        let new_skills: Vec<String> = skills.into_iter().filter(|s| !state.skills.contains(s)).collect();
        if !new_skills.is_empty() {
            if let (Some(library), Some(workspace)) = (&self.skills, turn.ctx().get::<CallWorkspace>()) {
                let namespace = turn
                    .ctx()
                    .get::<harness_fs::CallScope>()
                    .map(harness_fs::CallScope::namespace);
                let set = library.resolve(workspace, namespace).await;
                for name in &new_skills {
                    if let Some(skill) = set.get(name) {
                        state.groups.extend(
                            skill
                                .tool_groups
                                .iter()
                                .filter(|group| self.groups.get(group).is_some())
                                .cloned(),
                        );
                    }
                }
            }
            state.skills.extend(new_skills);
        }
        if state != before {
            let recorded = state.clone();
            if let Err(err) = turn.session().update::<ActiveGroups, _>(|slot| *slot = recorded) {
                tracing::warn!(error = %err, "tool group activations not recorded");
            }
        }
        // Narrow what the kernel offers (and so enforces) on this step, not just what the
        // provider sees: a guessed call to a hidden tool is refused like any tool not offered.
        // The call's full set is restored afterwards so a later step can widen it again.
        // Without the activation tool (denied, or left out of a child's allow-list) a hidden
        // tool could never be reached: nothing is hidden then.
        let active = state.groups;
        let offered = turn.tools();
        if !offered.iter().any(|spec| spec.name == ACTIVATE_TOOL_GROUP)
            || !offered.iter().any(|spec| !self.groups.offers(&spec.name, &active))
        {
            return next.run(turn).await;
        }
        let all = Arc::clone(turn.tools());
        turn.set_tools(
            all.iter()
                .filter(|spec| self.groups.offers(&spec.name, &active))
                .cloned()
                .collect(),
        );
        let result = next.run(turn).await;
        turn.set_tools(all);
        result
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use harness_core::Msg;
    use serde_json::json;

    fn groups() -> ToolGroups {
        let mut groups = ToolGroups::new();
        groups.add(ToolGroup {
            name: "mcp__gh".into(),
            description: "GitHub".into(),
            tools: ["mcp__gh__issue".to_owned(), "mcp__gh__pr".to_owned()].into(),
        });
        groups
    }

    #[test]
    fn grouped_tools_are_offered_only_while_active() {
        let groups = groups();
        let none = BTreeSet::new();
        assert!(groups.offers("read_file", &none));
        assert!(!groups.offers("mcp__gh__pr", &none));
        assert!(groups.offers("mcp__gh__pr", &["mcp__gh".to_owned()].into()));
    }

    #[test]
    fn activations_count_only_successful_calls() {
        let call = |id: &str, name: &str, input: serde_json::Value| {
            Arc::new(Msg::new(
                Role::Assistant,
                vec![Block::ToolUse {
                    id: id.into(),
                    name: name.into(),
                    input,
                }],
            ))
        };
        let result = |id: &str, is_error: bool| Arc::new(Msg::tool_result(id, vec![Block::text("x")], is_error));
        let messages = vec![
            call("1", ACTIVATE_TOOL_GROUP, json!({"group": "mcp__gh"})),
            result("1", false),
            call("2", ACTIVATE_TOOL_GROUP, json!({"group": "nope"})),
            result("2", true),
            call("3", LOAD_SKILL, json!({"skillId": "pdf", "path": "SKILL.md"})),
            result("3", false),
        ];
        let (groups, skills) = activations(&messages);
        assert_eq!(groups, ["mcp__gh".to_owned()].into());
        assert_eq!(skills, ["pdf".to_owned()].into());
    }

    #[test]
    fn state_round_trips_through_extensions() {
        let mut state = AgentState::default();
        assert_eq!(ActiveGroups::of(&state), ActiveGroups::default());
        let active = ActiveGroups {
            groups: ["g".to_owned()].into(),
            skills: ["s".to_owned()].into(),
        };
        active.store(&mut state);
        assert_eq!(ActiveGroups::of(&state), active);
    }
}
