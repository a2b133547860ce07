//! `tools.json` through the agent: allow/deny over every tool, on-demand MCP groups, and the
//! turn-1 request size with and without them.

use crate::mcp::{config, everything_server, host_env};
use crate::support::{builder, ctx};
use harness::extensions::{Extensions, ExtensionsConfig, ToolSource};
use harness_core::{Block, ChatRequest};
use harness_models::ScriptedModel;
use serde_json::json;
use std::sync::Arc;

async fn start(text: &str, root: &std::path::Path) -> Arc<Extensions> {
    let config = ExtensionsConfig {
        tools: config(text),
        ..ExtensionsConfig::default()
    };
    Arc::new(Extensions::start(config, &host_env(), root, false).await.unwrap())
}

fn tool_names(request: &ChatRequest) -> Vec<String> {
    request.tools.iter().map(|spec| spec.name.clone()).collect()
}

/// What a provider is sent on turn 1, as JSON bytes: system prompt, tool specs, messages.
fn request_bytes(request: &ChatRequest) -> usize {
    let messages: Vec<&harness_core::Msg> = request.messages.iter().map(|m| m.as_ref()).collect();
    // What a provider is sent of each tool: annotations stay local.
    let tools: Vec<serde_json::Value> = request
        .tools
        .iter()
        .map(|t| serde_json::json!({"name": t.name, "description": t.description, "parameters": t.input_schema}))
        .collect();
    request.system.render().len()
        + serde_json::to_vec(&tools).unwrap().len()
        + serde_json::to_vec(&messages).unwrap().len()
}

#[tokio::test]
async fn deny_wins_over_allow_and_allow_without_builtins_removes_them() {
    let dir = tempfile::tempdir().unwrap();
    let ext = start(
        &format!(
            r#"{{"allow": ["read_file", "mcp__e__echo", "mcp__e__get-sum"], "deny": ["mcp__e__get-sum"],
                 "mcpServers": {{{}}}}}"#,
            everything_server("e", "")
        ),
        dir.path(),
    )
    .await;
    let model = ScriptedModel::new()
        .reply_tool_call("mcp__e__echo", json!({"message": "hey"}))
        .reply_text("ok");
    let agent = builder()
        .workspace(dir.path())
        .model(model.clone())
        .extensions(Arc::clone(&ext))
        .build()
        .unwrap();
    agent.call("hi", ctx("alice", "s1")).await.unwrap();
    let requests = model.requests();
    assert_eq!(tool_names(&requests[0]), ["read_file", "mcp__e__echo"]);
    let Block::ToolResult { content, is_error, .. } = &requests[1].messages.last().unwrap().content[0] else {
        panic!()
    };
    assert!(!is_error && harness_core::join_text(content).contains("hey"));
    assert_eq!(ext.source_of("mcp__e__echo"), ToolSource::Mcp { server: "e".into() });
    assert_eq!(ext.source_of("read_file"), ToolSource::BuiltIn);
    ext.shutdown().await;
}

#[tokio::test]
async fn deny_alone_removes_a_builtin() {
    let dir = tempfile::tempdir().unwrap();
    let ext = start(r#"{"deny": ["write_file"]}"#, dir.path()).await;
    let model = ScriptedModel::new().reply_text("ok");
    let agent = builder()
        .workspace(dir.path())
        .model(model.clone())
        .extensions(ext)
        .build()
        .unwrap();
    agent.call("hi", ctx("alice", "s1")).await.unwrap();
    let names = tool_names(&model.requests()[0]);
    assert!(
        names.contains(&"read_file".to_owned()) && !names.contains(&"write_file".to_owned()),
        "{names:?}"
    );
}

#[tokio::test]
async fn an_on_demand_server_is_offered_only_after_its_group_is_activated() {
    let dir = tempfile::tempdir().unwrap();
    let ext = start(
        &format!(
            r#"{{"mcpServers": {{{}}}}}"#,
            everything_server("e", r#", "on_demand": true"#)
        ),
        dir.path(),
    )
    .await;
    let model = ScriptedModel::new()
        .reply_tool_call("activate_tool_group", json!({"group": "mcp__e"}))
        .reply_tool_call("mcp__e__echo", json!({"message": "now"}))
        .reply_text("done")
        .reply_text("next turn");
    let agent = builder()
        .workspace(dir.path())
        .model(model.clone())
        .extensions(Arc::clone(&ext))
        .build()
        .unwrap();
    agent.call("hi", ctx("alice", "s1")).await.unwrap();
    agent.call("again", ctx("alice", "s1")).await.unwrap();
    let requests = model.requests();
    let first = tool_names(&requests[0]);
    assert!(first.contains(&"activate_tool_group".to_owned()));
    assert!(!first.iter().any(|name| name.starts_with("mcp__e__")), "{first:?}");
    assert!(
        requests[0]
            .tools
            .iter()
            .any(|spec| spec.description.contains("mcp__e: tools of MCP server `e`"))
    );
    assert!(
        tool_names(&requests[1]).contains(&"mcp__e__echo".to_owned()),
        "active from the next step"
    );
    let Block::ToolResult { content, is_error, .. } = &requests[2].messages.last().unwrap().content[0] else {
        panic!()
    };
    assert!(!is_error && harness_core::join_text(content).contains("now"));
    assert!(
        tool_names(&requests[3]).contains(&"mcp__e__echo".to_owned()),
        "stays active in the session"
    );
    // Another session starts without it.
    let model2 = ScriptedModel::new().reply_text("x");
    let agent2 = builder()
        .workspace(dir.path())
        .model(model2.clone())
        .extensions(Arc::clone(&ext))
        .build()
        .unwrap();
    agent2.call("hi", ctx("alice", "s2")).await.unwrap();
    assert!(
        !tool_names(&model2.requests()[0])
            .iter()
            .any(|n| n.starts_with("mcp__e__"))
    );
    ext.shutdown().await;
}

#[tokio::test]
async fn a_skill_activates_the_groups_it_declares() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("skills/echoing")).unwrap();
    std::fs::write(
        dir.path().join("skills/echoing/SKILL.md"),
        "---\nname: echoing\ndescription: when echoing\ntool_groups: [mcp__e]\n---\nUse mcp__e__echo.\n",
    )
    .unwrap();
    let config = ExtensionsConfig {
        tools: config(&format!(
            r#"{{"mcpServers": {{{}}}}}"#,
            everything_server("e", r#", "on_demand": true"#)
        )),
        skills: Some(Default::default()),
        ..ExtensionsConfig::default()
    };
    let ext = Arc::new(Extensions::start(config, &host_env(), dir.path(), false).await.unwrap());
    let model = ScriptedModel::new()
        .reply_tool_call(
            "load_skill_through_path",
            json!({"skillId": "echoing", "path": "SKILL.md"}),
        )
        .reply_text("done");
    let agent = builder()
        .workspace(dir.path())
        .model(model.clone())
        .extensions(Arc::clone(&ext))
        .build()
        .unwrap();
    agent.call("hi", ctx("alice", "s1")).await.unwrap();
    let requests = model.requests();
    assert!(!tool_names(&requests[0]).contains(&"mcp__e__echo".to_owned()));
    assert!(tool_names(&requests[1]).contains(&"mcp__e__echo".to_owned()));
    ext.shutdown().await;
}

#[tokio::test]
#[allow(clippy::print_stderr)]
async fn turn_one_request_bytes_with_and_without_on_demand_groups() {
    let (mut sizes, mut counts) = (Vec::new(), Vec::new());
    for (label, text) in [
        ("default tools", "{}".to_owned()),
        (
            "+ server-everything",
            format!(r#"{{"mcpServers": {{{}}}}}"#, everything_server("e", "")),
        ),
        (
            "+ server-everything on demand",
            format!(
                r#"{{"mcpServers": {{{}}}}}"#,
                everything_server("e", r#", "on_demand": true"#)
            ),
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let ext = start(&text, dir.path()).await;
        let model = ScriptedModel::new().reply_text("ok");
        let agent = builder()
            .workspace(dir.path())
            .model(model.clone())
            .extensions(Arc::clone(&ext))
            .build()
            .unwrap();
        agent.call("hi", ctx("alice", "s1")).await.unwrap();
        let request = &model.requests()[0];
        let bytes = request_bytes(request);
        eprintln!("turn-1 request bytes, {label}: {bytes} ({} tools)", request.tools.len());
        sizes.push(bytes);
        counts.push(request.tools.len());
        ext.shutdown().await;
    }
    assert!(sizes[1] > sizes[0] + 1000, "{sizes:?}");
    assert!(sizes[2] < sizes[1], "{sizes:?}");
    // On demand costs only a line of the activation tool's description (the tool is offered
    // anyway for the built-in `tasks` group), a small fraction of what the server's tools
    // cost.
    assert_eq!(counts[2], counts[0], "{counts:?}");
    assert!(
        (sizes[2] - sizes[0]) * 5 < sizes[1] - sizes[0],
        "on demand costs only the activation tool: {sizes:?}"
    );
}

/// Counts its calls; grouped, so hidden until its group is active.
struct Counted(harness_core::ToolSpec, Arc<std::sync::atomic::AtomicUsize>);

#[async_trait::async_trait]
impl harness_core::Tool for Counted {
    fn spec(&self) -> &harness_core::ToolSpec {
        &self.0
    }

    async fn call(
        &self,
        _input: serde_json::Value,
        _ctx: &harness_core::ToolContext,
    ) -> Result<harness_core::ToolOutput, harness_core::ToolError> {
        self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(harness_core::ToolOutput::text("ran"))
    }
}

#[tokio::test]
async fn a_guessed_call_to_a_hidden_group_tool_is_refused_and_never_runs() {
    use harness::tool_groups::{ToolGroup, ToolGroups, ToolGroupsLayer};
    let dir = tempfile::tempdir().unwrap();
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let spec = harness_core::ToolSpec {
        name: "secret_tool".into(),
        description: "hidden until its group is active".into(),
        input_schema: json!({"type": "object"}),
        annotations: harness_core::ToolAnnotations::new(),
    };
    let mut groups = ToolGroups::new();
    groups.add(ToolGroup {
        name: "secrets".into(),
        description: "secret tools".into(),
        tools: ["secret_tool".to_owned()].into(),
    });
    let groups = Arc::new(groups);
    let model = ScriptedModel::new()
        .reply_tool_call("secret_tool", json!({}))
        .reply_tool_call("activate_tool_group", json!({"group": "secrets"}))
        .reply_tool_call("secret_tool", json!({}))
        .reply_text("done");
    let agent = builder()
        .workspace(dir.path())
        .model(model.clone())
        .tool(Arc::new(Counted(spec, Arc::clone(&runs))))
        .tool(groups.activation_tool())
        .middleware(Arc::new(ToolGroupsLayer::new(Arc::clone(&groups), None)))
        // The tool has no hints (it would ask); this test is about offering, not approval.
        .permissions(crate::support::unattended())
        .build()
        .unwrap();
    agent.call("hi", ctx("alice", "s1")).await.unwrap();
    let requests = model.requests();
    assert!(!tool_names(&requests[0]).contains(&"secret_tool".to_owned()));
    let Block::ToolResult { content, is_error, .. } = &requests[1].messages.last().unwrap().content[0] else {
        panic!("{:?}", requests[1].messages.last())
    };
    let text = harness_core::join_text(content);
    assert!(
        *is_error && text.contains("secret_tool") && text.contains("not available"),
        "{text}"
    );
    // Once the group is active, the same call runs.
    assert!(tool_names(&requests[2]).contains(&"secret_tool".to_owned()));
    let Block::ToolResult { is_error, .. } = &requests[3].messages.last().unwrap().content[0] else {
        panic!()
    };
    assert!(!is_error);
    // Two calls were made; only the one after activation ran.
    assert_eq!(
        runs.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the guessed call never ran"
    );
}
