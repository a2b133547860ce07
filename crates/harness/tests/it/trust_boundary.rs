//! The trust boundary inside the library (issue 19): what the prompt tells the provider, what
//! the file tools refuse to read, which paths count as the harness's own, and how far an MCP
//! server's annotations are believed. The binary-level tests are in
//! `crates/harness-cli/tests/it/trust_boundary.rs`.

use crate::support::*;

use harness::permissions::{Decision, Policy};
use harness::tools::files::READ_PROTECTED;
use harness_fs::{CallScope, IsolationScope, RESERVED_NAMES};
use harness_models::ScriptedModel;
use serde_json::{Value, json};
use std::path::Path;

const SCOPES: [IsolationScope; 4] = [
    IsolationScope::User,
    IsolationScope::Session,
    IsolationScope::Agent,
    IsolationScope::Global,
];

fn write_tree(dir: &Path, files: &[(&str, &str)]) {
    for (path, text) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

/// The caller's layer on disk under `scope` for user `alice` in session `s1`.
fn layer(scope: IsolationScope) -> &'static str {
    match scope {
        IsolationScope::User => "alice/",
        IsolationScope::Session => "s1/",
        IsolationScope::Agent | IsolationScope::Global => "",
    }
}

/// Runs one turn in which the model calls `tool` with `args` once; returns the tool result
/// the model saw next (its JSON content) and every request sent.
async fn one_call(dir: &Path, scope: IsolationScope, tool: &str, args: Value) -> (String, ScriptedModel) {
    let model = ScriptedModel::new().reply_tool_call(tool, args).reply_text("done");
    let agent = builder()
        .workspace(dir)
        .isolation(scope)
        .model(model.clone())
        .build()
        .unwrap();
    agent.call("go", ctx("alice", "s1")).await.unwrap();
    let requests = model.requests();
    assert_eq!(requests.len(), 2, "the tool call did not complete a step");
    let last = requests[1].messages.last().unwrap();
    (serde_json::to_string(&last.content).unwrap(), model)
}

// ---- problem 6: no host paths in prompts ----

/// Every request (system prompt, messages, tool specs) names the workspace by its relative
/// layout only: neither the workspace's host path nor the home directory appears, under any
/// scope, including in tool results.
#[tokio::test]
async fn no_host_path_of_the_workspace_or_home_reaches_the_provider() {
    for scope in SCOPES {
        let dir = tempfile::tempdir().unwrap();
        write_tree(dir.path(), &[("AGENTS.md", "You are Ada."), ("notes/a.md", "hello")]);
        let model = ScriptedModel::new()
            .reply_tool_call("list_files", json!({"path": ""}))
            .reply_tool_call("read_file", json!({"path": "missing/file.md"}))
            .reply_text("done");
        let agent = builder()
            .workspace(dir.path())
            .isolation(scope)
            .model(model.clone())
            .build()
            .unwrap();
        agent.call("where am I?", ctx("alice", "s1")).await.unwrap();
        let requests = model.requests();
        assert_eq!(requests.len(), 3);
        let mut forbidden = vec![
            dir.path().display().to_string(),
            dir.path().canonicalize().unwrap().display().to_string(),
        ];
        if let Some(home) = std::env::var_os("HOME").filter(|home| home.len() > 1) {
            forbidden.push(Path::new(&home).display().to_string());
        }
        for request in &requests {
            let sent = format!(
                "{}\n{:?}\n{:?}",
                request.system.render(),
                request.messages,
                request.tools
            );
            for path in &forbidden {
                assert!(!sent.contains(path.as_str()), "{scope:?}: {path} was sent:\n{sent}");
            }
        }
        let system = requests[0].system.render();
        assert!(system.contains("## Workspace"), "{system}");
        if layer(scope).is_empty() {
            assert!(system.contains("Your files live in the workspace root"), "{system}");
        } else {
            assert!(system.contains(&format!("`{}`", layer(scope))), "{scope:?}: {system}");
        }
    }
}

/// The prompt no longer invites the model to make its own copy of the shared files; it says
/// the harness's files are not the model's to change.
#[tokio::test]
async fn the_prompt_offers_no_own_copy_of_the_shared_files() {
    for scope in SCOPES {
        let dir = tempfile::tempdir().unwrap();
        let model = ScriptedModel::new().reply_text("ok");
        let agent = builder()
            .workspace(dir.path())
            .isolation(scope)
            .model(model.clone())
            .build()
            .unwrap();
        agent.call("hi", ctx("alice", "s1")).await.unwrap();
        let system = model.requests()[0].system.render();
        assert!(!system.contains("own copy"), "{scope:?}: {system}");
        assert!(!system.contains("shadows the shared file"), "{scope:?}: {system}");
        assert!(system.contains(harness::prompt::PROTECTED_CLAIM), "{scope:?}: {system}");
    }
}

// ---- the file tools do not read the harness's configuration and state ----

const SECRET: &str = "postgres-password-s3cr3t";

/// The configuration and state files of a workspace, in the caller's layer under `scope`,
/// each holding [`SECRET`]; under the shared scopes also another user's state from an earlier
/// run under scope `user` (`bob/agents/...`).
fn plant_secrets(dir: &Path, scope: IsolationScope) -> Vec<String> {
    let layer = layer(scope);
    let mut files: Vec<String> = [
        "harness.toml",
        "tools.json",
        ".mcp.json",
        ".harness/credentials",
        "agents/harness/sessions/old.log.jsonl",
        "memory/.quarantine/q1.txt",
    ]
    .iter()
    .map(|path| format!("{layer}{path}"))
    .collect();
    if layer.is_empty() {
        files.push("bob/agents/harness/sessions/bob-1.log.jsonl".into());
        files.push("bob/tools.json".into());
    }
    for file in &files {
        // tools.json stays valid JSON (a caller's own layer is read at call time).
        let text = if file.ends_with(".json") {
            format!("// {SECRET}\n{{}}\n")
        } else {
            format!("[state]\nurl = \"{SECRET}\"\n")
        };
        write_tree(dir, &[(file.as_str(), &text)]);
    }
    // An ordinary file next to them stays readable.
    write_tree(dir, &[(&format!("{layer}notes/plain.md"), SECRET)]);
    files
        .iter()
        .map(|file| file.strip_prefix(layer).unwrap_or(file).to_owned())
        .collect()
}

#[tokio::test]
async fn read_file_refuses_the_harness_config_and_state_under_every_scope() {
    for scope in SCOPES {
        let dir = tempfile::tempdir().unwrap();
        for path in plant_secrets(dir.path(), scope) {
            // Also respelled: case, `./`, doubled slashes.
            for spelled in [
                path.clone(),
                format!("./{path}"),
                path.replace('/', "//"),
                path.to_uppercase(),
            ] {
                let (result, _) = one_call(dir.path(), scope, "read_file", json!({"path": spelled})).await;
                assert!(!result.contains(SECRET), "{scope:?}: {spelled} was read: {result}");
                if spelled == path {
                    assert!(
                        result.contains("is refused") && result.contains("harness's own configuration or state"),
                        "{scope:?}: {spelled}: {result}"
                    );
                }
            }
        }
        let (result, _) = one_call(dir.path(), scope, "read_file", json!({"path": "notes/plain.md"})).await;
        assert!(
            result.contains(SECRET),
            "{scope:?}: an ordinary file must stay readable: {result}"
        );
    }
}

/// A glob or grep result names the ordinary file and none of the planted harness files.
fn shows_only_the_plain_file(result: &str, planted: &[String], what: &str) {
    assert!(result.contains("notes/plain.md"), "{what}: {result}");
    for path in planted {
        assert!(!result.contains(path.as_str()), "{what} showed {path}: {result}");
    }
}

#[tokio::test]
async fn listing_globbing_and_grepping_leave_the_harness_files_out() {
    for scope in SCOPES {
        let dir = tempfile::tempdir().unwrap();
        let planted = plant_secrets(dir.path(), scope);
        for listed in ["agents", ".harness", "agents/harness/sessions"] {
            let (result, _) = one_call(dir.path(), scope, "list_files", json!({"path": listed})).await;
            assert!(
                result.contains("is refused"),
                "{scope:?}: list_files {listed}: {result}"
            );
        }
        let (result, _) = one_call(dir.path(), scope, "glob_files", json!({"pattern": "**/*"})).await;
        shows_only_the_plain_file(&result, &planted, &format!("{scope:?}: glob"));
        let (result, _) = one_call(
            dir.path(),
            scope,
            "glob_files",
            json!({"pattern": "*", "path": "agents"}),
        )
        .await;
        assert!(result.contains("is refused"), "{scope:?}: {result}");
        let (result, _) = one_call(dir.path(), scope, "grep_files", json!({"pattern": SECRET})).await;
        shows_only_the_plain_file(&result, &planted, &format!("{scope:?}: grep"));
        let (result, _) = one_call(
            dir.path(),
            scope,
            "grep_files",
            json!({"pattern": SECRET, "path": "harness.toml"}),
        )
        .await;
        assert!(
            result.contains("is refused") && !result.contains(SECRET),
            "{scope:?}: {result}"
        );
    }
}

/// Under a shared root, `knowledge/agents/` is a knowledge file, not a user's state: only a
/// user's layer (a name that is not a workspace entry) protects its `agents/`.
#[tokio::test]
async fn an_agents_directory_inside_a_workspace_entry_stays_readable() {
    let dir = tempfile::tempdir().unwrap();
    write_tree(dir.path(), &[("knowledge/agents/roles.md", "the roles")]);
    let (result, _) = one_call(
        dir.path(),
        IsolationScope::Agent,
        "read_file",
        json!({"path": "knowledge/agents/roles.md"}),
    )
    .await;
    assert!(result.contains("the roles"), "{result}");
}

// ---- which paths are the harness's own ----

/// Every path the loaders and the prompt builder read, or the harness keeps as its own state,
/// named through the constants and functions that produce them, so a moved file moves here.
fn harness_paths() -> Vec<(&'static str, String)> {
    let scope = CallScope::parse(IsolationScope::User, "harness", "alice", "s1").unwrap();
    let state_dir = {
        let key = scope.state_key();
        (harness_fs::state_layout())(&key).display().to_string()
    };
    vec![
        (
            "config (from_workspace, config.rs)",
            harness::config::CONFIG_FILE.to_owned(),
        ),
        (
            "tools.json (tools_json.rs)",
            harness_mcp::tools_json::TOOLS_JSON.to_owned(),
        ),
        ("MCP servers", ".mcp.json".to_owned()),
        ("persona (prompt.rs)", "AGENTS.md".to_owned()),
        ("knowledge entry (prompt.rs)", "knowledge/KNOWLEDGE.md".to_owned()),
        (
            "memory (prompt.rs, harness-memory)",
            harness_memory::MEMORY_FILE.to_owned(),
        ),
        ("daily memory", format!("{}/2026-01-01.md", harness_memory::MEMORY_DIR)),
        ("memory history", format!("{}/x", harness_memory::HISTORY_DIR)),
        ("memory extraction", scope.memory_extraction_path().to_string()),
        (
            "memory quarantine (harness-memory)",
            format!("{}/q1.json", harness_memory::QUARANTINE_DIR),
        ),
        (
            "skills",
            format!("{}/pdf/{}", harness_skills::SKILLS_DIR, harness_skills::SKILL_FILE),
        ),
        ("skills cache", format!("{}/repo/x", harness_skills::SKILLS_CACHE)),
        ("subagents", "subagents/reviewer.md".to_owned()),
        ("plan", harness::plan_mode::PLAN_FILE.to_owned()),
        ("state (state_layout)", format!("{state_dir}/agent_state.json")),
        ("transcript", scope.transcript_path().to_string()),
        ("session index", scope.session_index_path().to_string()),
        ("task records", scope.task_records_path().to_string()),
        ("compacted", format!("{}/0.json", scope.compacted_dir())),
        ("harness dir", ".harness/x".to_owned()),
    ]
}

/// Each of them: its top entry is a reserved name (no user or session can be named so), the
/// prompt names it as the harness's own, and the configuration and state ones are refused to
/// the file tools' reads.
#[test]
fn every_file_the_harness_reads_is_protected() {
    let read_protected_sources = [
        "config",
        "tools.json",
        "MCP servers",
        "state",
        "transcript",
        "session index",
        "task records",
        "compacted",
        "harness dir",
        "memory quarantine",
    ];
    for (source, path) in harness_paths() {
        // The state layout puts a user's state under its own layer: strip it.
        let path = path.strip_prefix("alice/").unwrap_or(&path).to_owned();
        let top = path.split('/').next().unwrap();
        assert!(
            RESERVED_NAMES.contains(&top),
            "{source}: `{top}` (of {path}) is missing from harness_fs::RESERVED_NAMES"
        );
        let named = harness::prompt::PROTECTED_CLAIM.contains(top)
            || harness::prompt::PROTECTED_CLAIM.contains(&format!("{top}/"));
        assert!(named, "{source}: the prompt does not name `{top}` as the harness's own");
        let protected = harness::permissions::Protected::default_set();
        for layered in [path.clone(), format!("alice/{path}")] {
            assert!(
                protected.matches(&layered),
                "{source}: {layered} is not in the default protected set"
            );
        }
        let must_be_unreadable = read_protected_sources.iter().any(|prefix| source.starts_with(prefix));
        let unreadable = READ_PROTECTED
            .iter()
            .any(|entry| path == *entry || path.starts_with(&format!("{entry}/")));
        assert_eq!(unreadable, must_be_unreadable, "{source}: `{top}` read protection");
    }
}

/// The file tools' read refusal and the policy's read-protected subset name the same entries.
#[test]
fn the_read_refusal_and_the_policys_read_protected_set_agree() {
    let policy: Vec<&str> = harness_policy::DEFAULT_READ_PROTECTED
        .iter()
        .map(|glob| glob.trim_end_matches("/**"))
        .collect();
    assert_eq!(policy, READ_PROTECTED);
}

// ---- problem 7: MCP annotations are claims ----

/// The permission check sees an untrusted server's "read-only, closed-world" tool as
/// unhinted: it asks under the default permissions (and a trusted one runs).
#[test]
fn an_untrusted_read_only_claim_asks_under_the_default_permissions() {
    let claim = harness_mcp::McpToolAnnotations {
        read_only: Some(true),
        open_world: Some(false),
        ..Default::default()
    };
    let policy = Policy::default();
    let decide = |trusted: bool| policy.decide("mcp__notes__save", claim.effective(trusted), &json!({"text": "x"}));
    assert!(matches!(decide(false), Decision::Ask { .. }), "{:?}", decide(false));
    assert_eq!(decide(true), Decision::Allow);
}

// ---- `[permissions] protected` ----

fn config(text: &str) -> harness::HarnessConfig {
    harness::HarnessConfig::parse(text, Path::new("harness.toml")).unwrap()
}

/// The calls a turn of `write_file(path)` waits for, under `config`.
async fn asked_for_write(config_text: &str, path: &str) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("write_file", json!({"path": path, "content": "x"}))
        .reply_text("done");
    let agent = builder()
        .workspace(dir.path())
        .config(config(config_text))
        .model(model.clone())
        .build()
        .unwrap();
    let events = collect(agent.stream("go", ctx("alice", "s1"))).await;
    events
        .iter()
        .filter_map(|event| match &event.kind {
            harness_core::EventKind::ApprovalRequired { calls } => Some(calls.len()),
            _ => None,
        })
        .sum()
}

/// Absent, `protected` is the full default set: writing harness.toml asks even in
/// `bypass`. Written, it replaces the set: the listed glob asks, harness.toml no longer.
#[tokio::test]
async fn permissions_protected_defaults_to_the_full_set_and_can_be_replaced() {
    assert_eq!(
        asked_for_write("[permissions]\nmode = \"bypass\"\n", "harness.toml").await,
        1
    );
    assert_eq!(
        asked_for_write("[permissions]\nmode = \"bypass\"\n", "notes.md").await,
        0
    );
    let custom = "[permissions]\nmode = \"bypass\"\nprotected = [\"secret/**\"]\n";
    assert_eq!(asked_for_write(custom, "secret/deep/x.md").await, 1);
    assert_eq!(asked_for_write(custom, "harness.toml").await, 0);
    let section: harness::permissions::PermissionsSection = toml::from_str("protected = [\"secret/**\"]").unwrap();
    assert!(section.policy().unwrap().protected.matches("alice/secret/x"));
    let default: harness::permissions::PermissionsSection = toml::from_str("").unwrap();
    let policy = default.policy().unwrap();
    for glob in harness::permissions::DEFAULT_PROTECTED {
        let path = glob.trim_end_matches("/**");
        assert!(policy.protected.matches(path), "{path}");
    }
}

/// A bad glob fails the build with an error naming the glob and what to write instead.
#[test]
fn a_bad_protected_glob_is_a_clear_config_error() {
    for (glob, hint) in [
        ("", "empty"),
        ("/etc/passwd", "relative to the workspace root"),
        ("../x", "`..`"),
        ("a[", "not a valid glob"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let err = builder()
            .workspace(dir.path())
            .model(ScriptedModel::new())
            .config(config(&format!("[permissions]\nprotected = [{glob:?}]\n")))
            .build()
            .err()
            .unwrap();
        let message = harness_core::error_chain(&err);
        assert!(
            message.contains("permissions") && message.contains(&format!("`{glob}`")) && message.contains(hint),
            "{glob}: {message}"
        );
    }
}

/// With a host shell (`[filesystem] kind = "local_shell"`), the prompt says plainly that the
/// protected paths do not hold it; without one it says nothing about a shell.
#[tokio::test]
async fn the_prompt_says_the_host_shell_is_not_held_by_protected_paths() {
    let dir = tempfile::tempdir().unwrap();
    let shell_fs = harness_fs::LocalFs::new(dir.path())
        .unwrap()
        .with_shell(harness_fs::LocalShellConfig::default());
    let model = ScriptedModel::new().reply_text("ok");
    let agent = builder()
        .workspace(dir.path())
        .filesystem(std::sync::Arc::new(shell_fs))
        .model(model.clone())
        .build()
        .unwrap();
    agent.call("hi", ctx("alice", "s1")).await.unwrap();
    let prompt = model.requests()[0].system.render();
    assert!(prompt.contains("Protected paths do not hold it either"), "{prompt}");
    assert!(prompt.contains("only a sandbox would confine it"), "{prompt}");

    let model = ScriptedModel::new().reply_text("ok");
    agent_without_shell(dir.path(), &model).await;
    assert!(
        !model.requests()[0]
            .system
            .render()
            .contains("Protected paths do not hold it")
    );
}

async fn agent_without_shell(dir: &Path, model: &ScriptedModel) {
    builder()
        .workspace(dir)
        .model(model.clone())
        .build()
        .unwrap()
        .call("hi", ctx("alice", "s2"))
        .await
        .unwrap();
}
