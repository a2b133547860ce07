//! Permissions through the whole agent: `[permissions]` from harness.toml, the decision before
//! the tool runs, the schema checked first, bad rules refused at build time.

use crate::support::{builder, ctx, last_tool_results, parse, shell_agent};
use harness_models::ScriptedModel;
use serde_json::json;

/// In mode `default` the shell asks: the command does not run and the turn waits for a
/// person, with the rule that would allow it (the approval tests resume such turns).
#[tokio::test]
async fn the_shell_asks_by_default_and_nothing_runs() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new().reply_tool_call("execute", json!({"command": "touch marker"}));
    let agent = shell_agent(dir.path(), "[permissions]\n", &model);
    assert!(agent.middleware_order().contains(&"permissions"));
    let events = crate::support::collect(agent.stream("make a marker", ctx("alice", "s1"))).await;
    let asked: Vec<harness_core::PendingCall> = events
        .iter()
        .filter_map(|event| match &event.kind {
            harness_core::EventKind::ApprovalRequired { calls } => Some(calls.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(asked.len(), 1, "{events:?}");
    assert_eq!(asked[0].suggestion.as_deref(), Some("execute(touch marker*)"));
    assert!(!dir.path().join("alice/marker").exists() && !dir.path().join("marker").exists());
    assert_eq!(model.requests().len(), 1, "the turn ended after the asking step");
}

/// An allow rule lets exactly the commands it covers run; a list that hides another command
/// behind an allowed one does not run; `dont_ask` denies; a deny rule wins over bypass.
#[tokio::test]
async fn rules_and_modes_decide_before_the_tool_runs() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("execute", json!({"command": "touch allowed"}))
        .reply_tool_call("execute", json!({"command": "touch allowed2; touch hidden"}))
        .reply_text("done");
    let agent = shell_agent(
        dir.path(),
        "[permissions]\nallow = [\"execute(touch allowed*)\"]\n",
        &model,
    );
    agent.call("go", ctx("alice", "s1")).await.unwrap();
    let created = |name: &str| walk(dir.path()).iter().any(|path| path.ends_with(name));
    assert!(created("allowed"), "{:?}", walk(dir.path()));
    assert!(!created("allowed2") && !created("hidden"), "{:?}", walk(dir.path()));

    let model = ScriptedModel::new()
        .reply_tool_call("execute", json!({"command": "touch unattended"}))
        .reply_tool_call("write_file", json!({"path": "kept.txt", "content": "x"}))
        .reply_text("done");
    let agent = shell_agent(dir.path(), "[permissions]\nmode = \"dont_ask\"\n", &model);
    let events = crate::support::collect(agent.stream("go", ctx("alice", "s2"))).await;
    assert!(
        events.iter().any(|event| matches!(&event.kind,
            harness_core::EventKind::Warning { code, .. } if code == harness::permissions::WARNING_DENIED)),
        "{events:?}"
    );
    assert!(!created("unattended"));
    assert!(created("kept.txt"), "closed-world writes run in dont_ask");
    let results = last_tool_results(&model);
    assert!(
        results[0].contains("Permission denied") && results[0].contains("dont_ask"),
        "{results:?}"
    );

    let model = ScriptedModel::new()
        .reply_tool_call("write_file", json!({"path": "src/a.rs", "content": "x"}))
        .reply_tool_call("execute", json!({"command": "touch bypassed"}))
        .reply_text("done");
    let agent = shell_agent(
        dir.path(),
        "[permissions]\nmode = \"bypass\"\ndeny = [\"write_file(src/**)\"]\n",
        &model,
    );
    agent.call("go", ctx("alice", "s3")).await.unwrap();
    assert!(!created("a.rs"));
    assert!(created("bypassed"));
}

/// Arguments are checked against the schema before any decision: an invalid call gets the
/// schema error, not a question. A path the file tool refuses is an error, not a question.
#[tokio::test]
async fn schema_errors_and_refused_paths_are_errors_not_asks() {
    let dir = tempfile::tempdir().unwrap();
    let model = ScriptedModel::new()
        .reply_tool_call("execute", json!({"command": 5}))
        .reply_tool_call("write_file", json!({"path": "../bob/x", "content": "x"}))
        .reply_text("done");
    let agent = shell_agent(dir.path(), "[permissions]\n", &model);
    agent.call("go", ctx("alice", "s1")).await.unwrap();
    let results = last_tool_results(&model);
    assert!(results[0].contains("invalid arguments"), "{results:?}");
    assert!(!results[0].contains("approval"), "{results:?}");
    assert!(
        !results[1].contains("approval") && results[1].contains("is_error: true"),
        "{results:?}"
    );
}

/// A rule that cannot be read, or an unknown key, fails the build and names the section.
#[test]
fn bad_permission_settings_fail_the_build() {
    let dir = tempfile::tempdir().unwrap();
    let err = builder()
        .workspace(dir.path())
        .model(ScriptedModel::new())
        .config(parse("[permissions]\nallow = [\"execute(\"]\n"))
        .build()
        .err()
        .unwrap();
    assert!(
        matches!(
            err,
            harness::BuildError::Capability {
                capability: "permissions",
                ..
            }
        ),
        "{err:?}"
    );
    let err = harness::HarnessConfig::parse(
        "[permissions]\nmod = \"bypass\"\n",
        std::path::Path::new("harness.toml"),
    )
    .err()
    .unwrap();
    assert!(harness_core::error_chain(&err).contains("mod"), "{err}");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(next) = stack.pop() {
        for entry in std::fs::read_dir(next).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path.clone());
            }
            found.push(path);
        }
    }
    found
}

/// The policy is readable from the built agent, so a child built from it keeps the parent's
/// deny and ask rules and mode (`Policy::inherited`).
#[test]
fn the_policy_is_readable_for_children() {
    let dir = tempfile::tempdir().unwrap();
    let build = |config: &str| {
        builder()
            .workspace(dir.path())
            .config(parse(config))
            .model(ScriptedModel::new())
            .build()
            .unwrap()
    };
    // Without [permissions] the built-in defaults apply: mode `default`, no rules.
    let defaults = build("").permission_policy().cloned().unwrap();
    assert_eq!(defaults.mode, harness::permissions::Mode::Default);
    assert!(defaults.allow.is_empty() && defaults.ask.is_empty() && defaults.deny.is_empty());
    let agent = build("[permissions]\nmode = \"explore\"\nallow = [\"execute\"]\ndeny = [\"write_file(src/**)\"]\n");
    let child = agent.permission_policy().unwrap().inherited();
    assert_eq!(child.mode, harness::permissions::Mode::Explore);
    assert!(child.allow.is_empty());
    assert_eq!(
        child.deny.iter().map(ToString::to_string).collect::<Vec<_>>(),
        ["write_file(src/**)"]
    );
}

/// The policy reads a file tool's path with the same lexical rules as `harness_fs::WsPath`:
/// the same paths are refused with the same message, and an accepted path is matched by the
/// rules in its normalized form.
#[test]
fn the_policy_reads_paths_as_the_filesystem_does() {
    use harness::permissions::{Decision, Policy, Rule};
    let write = harness_core::ToolAnnotations::new().destructive(true).closed_world();
    let long = "a/".repeat(2100);
    for raw in [
        "a.txt",
        "./src//a.rs",
        "/abs/x",
        "src/./deep/",
        "..",
        "a/../b",
        "~/x",
        "a\\b",
        "nul\0x",
        &long,
    ] {
        let input = json!({ "path": raw, "content": "x" });
        match harness_fs::WsPath::parse(raw) {
            Err(err) => assert_eq!(
                Policy::default().decide("write_file", write, &input),
                Decision::Invalid {
                    message: err.to_string()
                },
                "{raw:?}"
            ),
            Ok(path) => {
                let deny = Policy {
                    deny: vec![Rule::parse(&format!("write_file({})", path.as_str())).unwrap()],
                    ..Policy::default()
                };
                assert!(
                    matches!(deny.decide("write_file", write, &input), Decision::Deny { .. }),
                    "{raw:?} is not read as {:?}",
                    path.as_str()
                );
            }
        }
    }
}

/// Issue 19, problem 4, through the agent and a real shell: an allow rule is not beaten by a
/// second command hidden behind a comment that opens a quote, a deny rule is not beaten by a
/// respelled command word (quote, backslash, wrapper, absolute path), and a glob that reaches
/// `.env` asks like the literal name. Nothing of it runs.
#[tokio::test]
async fn shell_rules_hold_against_comments_respellings_and_globs() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("alice")).unwrap();
    std::fs::write(dir.path().join("alice/keep"), "x").unwrap();
    std::fs::write(dir.path().join("alice/.env"), "SECRET=1").unwrap();
    let call = |id: &str, command: &str| harness_models::ScriptedToolCall {
        name: "execute".into(),
        arguments: json!({ "command": command }),
        id: Some(id.into()),
    };
    let model = ScriptedModel::new().reply(harness_models::Reply {
        tool_calls: vec![
            call("comment", "echo hi # '\ntouch smuggled #'"),
            call("quote", "r'm' -f keep"),
            call("backslash", "r\\m -f keep"),
            call("wrapper", "env nice -n 1 rm -f keep"),
            call("absolute", "/bin/rm -f keep"),
            call("shell", "sh -c 'rm -f keep'"),
            call("glob", "cp .en* leaked"),
            call("allowed", "echo ran > allowed.txt"),
        ],
        ..harness_models::Reply::default()
    });
    let config = "[permissions]\nallow = [\"execute(echo *)\", \"execute(cp *)\"]\ndeny = [\"execute(rm *)\"]\n";
    let agent = shell_agent(dir.path(), config, &model);
    let events = crate::support::collect(agent.stream("go", ctx("alice", "s1"))).await;
    let denied = events
        .iter()
        .filter(|event| {
            matches!(&event.kind,
            harness_core::EventKind::Warning { code, message, .. }
                if code == harness::permissions::WARNING_DENIED && message.contains("`execute(rm *)`"))
        })
        .count();
    assert_eq!(
        denied, 5,
        "the five respellings of rm are denied by the rule: {events:?}"
    );
    assert!(dir.path().join("alice/keep").exists(), "a deny rule was beaten");
    assert!(!dir.path().join("alice/smuggled").exists(), "a hidden command ran");
    assert!(!dir.path().join("alice/leaked").exists(), "a glob reached .env");
    assert!(
        dir.path().join("alice/allowed.txt").exists(),
        "the allowed command did not run"
    );
    let pending = agent.pending_approval(ctx("alice", "s1")).await.unwrap();
    let mut asked: Vec<&str> = pending.calls.iter().map(|call| call.id.as_str()).collect();
    asked.sort_unstable();
    assert_eq!(asked, ["comment", "glob"]);
    // Neither offers an "always" rule that would allow the line next time.
    let glob = pending.calls.iter().find(|call| call.id == "glob").unwrap();
    assert_eq!(glob.suggestion, None);
}

/// The protected set keeps in step with the workspace's reserved entries: every reserved
/// name that is a file or directory the harness reads or keeps (not a namespace word such
/// as `users`) is protected, at the root and in a user's layer. (`knowledge/` holds the
/// knowledge files the tools manage; only `knowledge/KNOWLEDGE.md` goes into the prompt.)
#[test]
fn every_reserved_workspace_entry_is_protected() {
    let protected = harness::permissions::Protected::default_set();
    let namespace_words = ["users", "sessions", "shared", "global", "rules"];
    for name in harness_fs::RESERVED_NAMES {
        if namespace_words.contains(name) {
            continue;
        }
        let inside = match *name {
            "knowledge" => format!("{name}/KNOWLEDGE.md"),
            file if file.contains('.') => file.to_owned(),
            dir => format!("{dir}/x"),
        };
        for path in [inside.clone(), format!("alice/{inside}")] {
            assert!(protected.matches(&path), "{path} is reserved but not protected");
        }
    }
}
