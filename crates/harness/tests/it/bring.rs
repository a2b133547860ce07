//! Bring what you have: the fixture `tests/fixtures/bring/` (files we wrote in the shapes
//! published Claude Code agent files and `mcpServers` blocks have; its README names each
//! shape) loads unchanged.

use crate::support::{builder, ctx};
use harness::subagents::WarningKind;
use harness_core::{ChatRequest, Role};
use harness_mcp::tools_json::{McpTransport, ToolsConfig};
use harness_models::{Reply, ScriptedModel, ScriptedToolCall};
use serde_json::json;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};

fn fixture() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bring")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn system_text(request: &ChatRequest) -> String {
    request.system.parts.iter().map(|part| part.text.as_str()).collect()
}

fn names(request: &ChatRequest) -> BTreeSet<String> {
    request.tools.iter().map(|spec| spec.name.clone()).collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|item| (*item).to_owned()).collect()
}

#[tokio::test]
async fn claude_code_agent_files_load_with_the_expected_tools() {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixture(), dir.path());
    // The parent answers with one spawn of each fixture agent, then ends; each child's
    // request is recorded by the marker of its persona.
    let children: Arc<Mutex<Vec<ChatRequest>>> = Arc::default();
    let parent_calls: Arc<Mutex<Vec<ChatRequest>>> = Arc::default();
    let (kept, parents) = (Arc::clone(&children), Arc::clone(&parent_calls));
    let ids = [
        "code-reviewer",
        "code-explorer",
        "test-runner",
        "db-reader",
        "helper",
        "native",
    ];
    let model = ScriptedModel::from_fn(move |request| {
        if system_text(request).contains("CHILD-MARKER") {
            kept.lock().unwrap().push(request.clone());
            return Reply::text("child done");
        }
        let mut parents = parents.lock().unwrap();
        parents.push(request.clone());
        if parents.len() > 1 {
            return Reply::text("parent done");
        }
        Reply {
            tool_calls: ids
                .iter()
                .map(|id| ScriptedToolCall {
                    name: "agent_spawn".to_owned(),
                    arguments: json!({"agent_id": id, "task": "look around"}),
                    id: None,
                })
                .collect(),
            ..Reply::default()
        }
    });
    let agent = builder()
        .workspace(dir.path())
        .model(model)
        .subagents(harness::subagents::SubagentsConfig {
            max_fanout: 8,
            // The operator maps a Claude name we lack to a tool we have.
            tool_aliases: [("NotebookRead".to_owned(), "read_file".to_owned())].into(),
            ..Default::default()
        })
        .build()
        .unwrap();
    let warnings = agent.subagent_warnings();
    assert!(
        warnings.iter().all(|warning| warning.kind == WarningKind::Ignored),
        "no fixture file is skipped: {warnings:#?}"
    );
    // Every name we lack, every unmapped model alias and `color` is named, by file.
    let ignored: BTreeSet<(String, String)> = warnings
        .iter()
        .map(|warning| (warning.file.clone(), warning.key.clone()))
        .collect();
    for (file, key) in [
        ("subagents/reviewer.md", "tools"),
        ("subagents/reviewer.md", "model"),
        ("subagents/explorer.md", "front matter"),
        ("subagents/explorer.md", "tools"),
        ("subagents/explorer.md", "color"),
        ("subagents/db-reader.md", "model"),
        ("subagents/helper.md", "model"),
    ] {
        assert!(
            ignored.contains(&(file.to_owned(), key.to_owned())),
            "{file} {key}: {warnings:#?}"
        );
    }
    assert!(
        warnings
            .iter()
            .any(|w| w.message.contains("`WebSearch` is not a tool here")),
        "{warnings:#?}"
    );
    agent.call("go", ctx("u1", "s1")).await.unwrap();
    let parent_tools = names(&parent_calls.lock().unwrap()[0]);
    let children = children.lock().unwrap().clone();
    let child = |marker: &str| {
        children
            .iter()
            .find(|request| system_text(request).contains(&format!("CHILD-MARKER {marker}")))
            .unwrap_or_else(|| panic!("child {marker} was not spawned"))
            .clone()
    };
    let kept = |declared: &[&str]| -> BTreeSet<String> { set(declared).intersection(&parent_tools).cloned().collect() };
    let expected = [
        (
            "reviewer",
            kept(&[
                "read_file",
                "write_file",
                "edit_file",
                "execute",
                "glob_files",
                "grep_files",
            ]),
        ),
        (
            "explorer",
            kept(&["glob_files", "grep_files", "list_files", "read_file", "todo_write"]),
        ),
        ("runner", kept(&["read_file", "edit_file", "execute", "grep_files"])),
        ("native", set(&["read_file"])),
    ];
    for (marker, tools) in expected {
        let request = child(marker);
        assert!(tools.contains("read_file"), "{marker}: {tools:?}");
        assert_eq!(names(&request), tools, "{marker}");
    }
    // disallowedTools: every tool a local child gets but the three writers.
    let reader = names(&child("reader"));
    assert!(
        reader.contains("read_file") && reader.contains("grep_files"),
        "{reader:?}"
    );
    assert!(
        !reader.contains("write_file") && !reader.contains("edit_file"),
        "{reader:?}"
    );
    // No tools key: the child has tools (never silently toolless).
    assert!(names(&child("helper")).contains("read_file"));
    // The body is the persona; the parent's AGENTS.md is context, never "who you are".
    let explorer = system_text(&child("explorer"));
    assert!(explorer.starts_with("You are an expert code analyst"), "{explorer}");
    assert!(explorer.contains("PARENT-PERSONA"), "the parent's AGENTS.md is context");
    assert!(!explorer.contains("AGENTS.md defines who you are"), "{explorer}");
    assert!(explorer.contains("not your persona"), "{explorer}");
    // The lenient description reached the parent's listing, example dialogue and all.
    let listing = system_text(&parent_calls.lock().unwrap()[0]);
    assert!(listing.contains("`code-explorer`: Use this agent when"), "{listing}");
    let results = &parent_calls.lock().unwrap()[1];
    let errors = results
        .messages
        .iter()
        .filter(|msg| msg.role == Role::Tool)
        .flat_map(|msg| msg.content.iter())
        .filter(|block| matches!(block, harness_core::Block::ToolResult { is_error: true, .. }))
        .count();
    assert_eq!(errors, 0, "every spawn ran");
}

#[test]
fn pasted_mcp_server_blocks_parse() {
    let env = |name: &str| (name == "GITHUB_TOKEN").then(|| "ghp-test".to_owned());
    let read = |file: &str| std::fs::read_to_string(fixture().join(file)).unwrap();
    let readme = ToolsConfig::parse(&read("mcp/readme.json"), "mcp/readme.json", &env).unwrap();
    assert!(matches!(
        &readme.mcp_servers["filesystem"].transport,
        McpTransport::Stdio { command, .. } if command == "npx"
    ));
    let desktop = ToolsConfig::parse(&read("mcp/claude-desktop.json"), "mcp/claude-desktop.json", &env).unwrap();
    let McpTransport::Stdio { env: vars, .. } = &desktop.mcp_servers["github"].transport else {
        panic!("stdio")
    };
    assert_eq!(vars["GITHUB_PERSONAL_ACCESS_TOKEN"], "ghp-test");
    let code = ToolsConfig::parse(&read("mcp/claude-code.json"), "mcp/claude-code.json", &env).unwrap();
    assert_eq!(
        code.mcp_servers["docs"].transport,
        McpTransport::StreamableHttp {
            url: "https://docs.example.test/mcp".to_owned(),
            headers: [("Authorization".to_owned(), "Bearer anonymous".to_owned())].into(),
        }
    );
    assert!(matches!(
        code.mcp_servers["local"].transport,
        McpTransport::Stdio { .. }
    ));
    let plugin = ToolsConfig::parse_mcp_json(&read(".mcp.json"), ".mcp.json", &env).unwrap();
    let McpTransport::Stdio { args, .. } = &plugin.mcp_servers["plugin-server"].transport else {
        panic!("stdio")
    };
    assert_eq!(args, &["./servers/index.js"]);
    assert!(!plugin.mcp_servers["plugin-server"].trust_annotations);
}

/// A declared allow-list that names none of the parent's tools is a spawn error saying so,
/// never a child without tools.
#[tokio::test]
async fn a_child_whose_tools_all_miss_is_an_error_never_toolless() {
    let dir = tempfile::tempdir().unwrap();
    let mut declaration = harness::subagents::SubagentDeclaration::new("ghost", "d", "CHILD-MARKER ghost");
    declaration.tools = Some(vec!["web_search_we_lack".to_owned()]);
    let parent_calls: Arc<Mutex<Vec<ChatRequest>>> = Arc::default();
    let seen = Arc::clone(&parent_calls);
    let model = ScriptedModel::from_fn(move |request| {
        let mut seen = seen.lock().unwrap();
        seen.push(request.clone());
        if seen.len() > 1 {
            return Reply::text("done");
        }
        Reply {
            tool_calls: vec![ScriptedToolCall {
                name: "agent_spawn".to_owned(),
                arguments: json!({"agent_id": "ghost", "task": "t"}),
                id: None,
            }],
            ..Reply::default()
        }
    });
    let agent = builder()
        .workspace(dir.path())
        .model(model)
        .subagent(declaration)
        .build()
        .unwrap();
    agent.call("go", ctx("u1", "s1")).await.unwrap();
    let last = parent_calls.lock().unwrap()[1].clone();
    let result = last
        .messages
        .iter()
        .flat_map(|msg| msg.content.iter())
        .find_map(|block| match block {
            harness_core::Block::ToolResult { content, is_error, .. } => {
                Some((harness_core::join_text(content), *is_error))
            }
            _ => None,
        })
        .unwrap();
    assert!(result.1, "{result:?}");
    assert!(result.0.contains("would have no tools"), "{}", result.0);
}

/// A `.mcp.json` at the workspace root is read as Claude Code reads it, below tools.json:
/// its servers start beside tools.json's, and tools.json wins a name clash.
#[tokio::test]
async fn a_workspace_mcp_json_is_read_below_tools_json() {
    let dir = tempfile::tempdir().unwrap();
    let js = crate::mcp::everything_js();
    std::fs::write(
        dir.path().join(".mcp.json"),
        json!({"mcpServers": {
            "plugin": {"type": "stdio", "command": "node", "args": [js, "stdio"]},
            "clash": {"command": "node", "args": ["/nonexistent/server.js"]}
        }})
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("tools.json"),
        json!({"mcpServers": {"clash": {"transport": "stdio", "command": "node", "args": [js, "stdio"]}}}).to_string(),
    )
    .unwrap();
    let env = |_: &str| None;
    let extensions = harness::WorkspaceLoader::new(dir.path(), &env)
        .host_env(crate::mcp::host_env())
        .start_extensions(&harness::HarnessConfig::default(), false)
        .await
        .unwrap();
    let names: BTreeSet<String> = extensions
        .mcp()
        .tools()
        .iter()
        .map(|tool| tool.spec().name.clone())
        .collect();
    let failures = format!("{:?}", extensions.failures());
    extensions.shutdown().await;
    assert!(failures == "[]", "{failures}");
    assert!(
        names.contains("mcp__plugin__echo") && names.contains("mcp__clash__echo"),
        "{names:?}"
    );
}

#[test]
fn the_subagents_section_takes_aliases_and_a_default_wait() {
    let config: harness::subagents::SubagentsConfig = toml::from_str(
        "default_wait = 120\ntool_aliases = { WebFetch = \"mcp__fetch__fetch\" }\nmodel_aliases = { sonnet = \"ollama:qwen3\" }\n",
    )
    .unwrap();
    assert_eq!(config.default_wait, std::time::Duration::from_secs(120));
    let options = config.parse_options();
    assert_eq!(options.tool_aliases["WebFetch"], "mcp__fetch__fetch");
    assert_eq!(options.model_aliases["sonnet"], "ollama:qwen3");
}

fn tool_results(request: &ChatRequest) -> Vec<(String, bool)> {
    request
        .messages
        .iter()
        .filter(|msg| msg.role == Role::Tool)
        .flat_map(|msg| msg.content.iter())
        .filter_map(|block| match block {
            harness_core::Block::ToolResult { content, is_error, .. } => {
                Some((harness_core::join_text(content), *is_error))
            }
            _ => None,
        })
        .collect()
}

/// The three skill-repository layouts of the fixture (`skill-repos/`): a catalogue
/// repository as the global directory, a curated one and a flat one cloned into the
/// workspace's `skills/`. Every skill loads (no "skipped" warning), links as the skills write
/// them resolve (`./`, wrong case, files shared through `../`), and the skill for people only
/// is neither offered to the model nor loadable by it.
#[tokio::test]
async fn skill_repositories_load_in_their_three_layouts() {
    let dir = tempfile::tempdir().unwrap();
    let global = tempfile::tempdir().unwrap();
    copy_dir(&fixture().join("skill-repos/catalog"), global.path());
    copy_dir(
        &fixture().join("skill-repos/curated"),
        &dir.path().join("skills/curated"),
    );
    copy_dir(&fixture().join("skill-repos/flat"), &dir.path().join("skills/flat"));
    let loads = [
        ("pdf-forms", "./reference/forms.md", "FORMS-GUIDE"),
        ("pdf-forms", "Reference/Fields.md", "FIELD-TYPES"),
        ("pdf-forms", "./skill.md", "# PDF forms"),
        ("docx", "../shared/ooxml.md", "OOXML-NOTES"),
        ("xlsx", "../shared/OOXML.md", "OOXML-NOTES"),
        ("changelog", "../common/style.md", "HOUSE-STYLE"),
        ("brand-voice", "./examples.md", "EXAMPLES"),
    ];
    let mut model = ScriptedModel::new();
    for (skill, path, _) in loads {
        model = model.reply_tool_call("load_skill_through_path", json!({"skillId": skill, "path": path}));
    }
    let model = model
        .reply_tool_call(
            "load_skill_through_path",
            json!({"skillId": "commit-all", "path": "SKILL.md"}),
        )
        .reply_text("done");
    let config = harness::extensions::ExtensionsConfig {
        skills: Some(harness_skills::SkillsConfig {
            global_dir: Some(global.path().to_owned()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let extensions = Arc::new(
        harness::extensions::Extensions::start(config, &harness_mcp::HostEnv::default(), dir.path(), false)
            .await
            .unwrap(),
    );
    let fs: Arc<dyn harness_fs::Filesystem> = Arc::new(harness_fs::LocalFs::new(dir.path()).unwrap());
    let workspace = harness_fs::CallWorkspace {
        user: fs.clone(),
        layered: fs.clone(),
        shared: fs.clone(),
        unfenced: fs,
    };
    let set = extensions.skills().unwrap().resolve(&workspace, None).await;
    assert_eq!(
        set.names(),
        ["brand-voice", "changelog", "commit-all", "docx", "pdf-forms", "xlsx"]
    );
    let warnings = set.warnings();
    assert!(
        warnings
            .iter()
            .all(|warning| warning.kind == harness_skills::SkillWarningKind::Note),
        "no fixture SKILL.md is skipped: {warnings:#?}"
    );
    // The two quirks are loaded with a note naming the file: a name from the folder, and a
    // description with an unquoted colon read line by line.
    let noted: BTreeSet<&str> = warnings.iter().map(|warning| warning.file.as_str()).collect();
    assert_eq!(
        noted,
        BTreeSet::from(["skills/flat/changelog/SKILL.md", "document-skills/xlsx/SKILL.md"]),
        "{warnings:#?}"
    );
    assert_eq!(
        set.get("xlsx").unwrap().description,
        "Spreadsheets: create, edit and analyse them. Use when: a .xlsx, .csv or .tsv file is named"
    );
    let agent = builder()
        .workspace(dir.path())
        .model(model.clone())
        .extensions(extensions)
        .build()
        .unwrap();
    agent.call("use the skills", ctx("u1", "s1")).await.unwrap();
    let requests = model.requests();
    let catalogue = system_text(&requests[0]);
    for name in ["pdf-forms", "docx", "xlsx", "changelog", "brand-voice"] {
        assert!(
            catalogue.contains(&format!("<name>{name}</name>")),
            "{name}: {catalogue}"
        );
    }
    assert!(
        !catalogue.contains("commit-all"),
        "a skill for people only is not offered: {catalogue}"
    );
    for (step, (skill, path, expected)) in loads.iter().enumerate() {
        let results = tool_results(&requests[step + 1]);
        let (text, is_error) = results.last().unwrap();
        assert!(!is_error && text.contains(expected), "{skill} {path}: {text}");
    }
    let (text, is_error) = tool_results(requests.last().unwrap()).pop().unwrap();
    assert!(is_error, "{text}");
    assert!(text.contains("for people only"), "{text}");
    assert!(!text.contains("git push"), "{text}");
}

/// A `label` that is not an id (a small model writes a phrase) is slugged, the spawn runs,
/// and the result names the slug; `agent_send` with the same phrase reaches that instance.
#[tokio::test]
async fn a_label_that_is_no_id_is_slugged_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let declaration = harness::subagents::SubagentDeclaration::new("helper", "d", "CHILD-MARKER helper");
    let model = ScriptedModel::from_fn(move |request| {
        if system_text(request).contains("CHILD-MARKER") {
            return Reply::text("child done");
        }
        let results = request.messages.iter().filter(|msg| msg.role == Role::Tool).count();
        let call = |name: &str, arguments| Reply {
            tool_calls: vec![ScriptedToolCall {
                name: name.to_owned(),
                arguments,
                id: None,
            }],
            ..Reply::default()
        };
        match results {
            0 => call(
                "agent_spawn",
                json!({"agent_id": "helper", "task": "t", "label": "Review the auth module"}),
            ),
            1 => call(
                "agent_send",
                json!({"label": "Review the auth module", "message": "more"}),
            ),
            _ => Reply::text("parent done"),
        }
    });
    let agent = builder()
        .workspace(dir.path())
        .model(model.clone())
        .subagent(declaration)
        .build()
        .unwrap();
    agent.call("go", ctx("u1", "s1")).await.unwrap();
    let last = model
        .requests()
        .into_iter()
        .filter(|request| !system_text(request).contains("CHILD-MARKER"))
        .last()
        .unwrap();
    let results = tool_results(&last);
    assert_eq!(results.len(), 2, "{results:?}");
    let (spawned, is_error) = &results[0];
    assert!(!is_error, "{spawned}");
    assert!(spawned.contains("child done"), "{spawned}");
    assert!(
        spawned.contains("the label `Review the auth module` was changed to `Review-the-auth-module`"),
        "{spawned}"
    );
    let (sent, is_error) = &results[1];
    assert!(!is_error && sent.contains("child done"), "{sent}");
}
