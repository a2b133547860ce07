//! Skills through the agent: layers, per-user skills, the catalogue, `load_skill_through_path`
//! and git skill repositories (a local bare repository driven with the `git` CLI).

use crate::support::{builder, ctx};
use harness::extensions::{Extensions, ExtensionsConfig};
use harness_core::{Block, ChatRequest};
use harness_mcp::HostEnv;
use harness_models::ScriptedModel;
use harness_skills::CATALOGUE_PART;
#[cfg(feature = "git")]
use harness_skills::SyncOutcome;
use serde_json::json;
use std::path::Path;
use std::sync::Arc;

fn skill(dir: &Path, name: &str, description: &str) {
    std::fs::create_dir_all(dir.join(name)).unwrap();
    std::fs::write(
        dir.join(name).join("SKILL.md"),
        format!("---\nname: {name}\ndescription: {description}\n---\n# {name}\nInstructions of {name}.\n"),
    )
    .unwrap();
}

async fn extensions(root: &Path, skills: harness_skills::SkillsConfig) -> Arc<Extensions> {
    let config = ExtensionsConfig {
        skills: Some(skills),
        ..ExtensionsConfig::default()
    };
    Arc::new(
        Extensions::start(config, &HostEnv::default(), root, false)
            .await
            .unwrap(),
    )
}

fn catalogue(request: &ChatRequest) -> String {
    request
        .system
        .parts
        .iter()
        .find(|part| part.name == CATALOGUE_PART)
        .map(|part| part.text.clone())
        .unwrap_or_default()
}

fn tool_result(request: &ChatRequest) -> (String, bool) {
    let msg = request.messages.last().unwrap();
    let Block::ToolResult { content, is_error, .. } = &msg.content[0] else {
        panic!("{msg:?}")
    };
    (harness_core::join_text(content), *is_error)
}

#[tokio::test]
async fn a_higher_layer_shadows_the_same_name_and_lower_unique_skills_stay() {
    let global = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    skill(global.path(), "shared", "global version");
    skill(global.path(), "only-global", "from the global dir");
    skill(&dir.path().join("skills"), "shared", "workspace version");
    let ext = extensions(
        dir.path(),
        harness_skills::SkillsConfig {
            global_dir: Some(global.path().to_owned()),
            ..Default::default()
        },
    )
    .await;
    let model = ScriptedModel::new().reply_text("ok");
    let agent = builder()
        .workspace(dir.path())
        .model(model.clone())
        .extensions(ext)
        .build()
        .unwrap();
    agent.call("hi", ctx("alice", "s1")).await.unwrap();
    let text = catalogue(&model.requests()[0]);
    assert!(text.contains("<description>workspace version</description>"), "{text}");
    assert!(!text.contains("global version"), "{text}");
    assert!(text.contains("<name>only-global</name>"), "{text}");
    assert!(!text.contains("<files-root>"), "no shell, no files-root: {text}");
    let names: Vec<_> = text
        .match_indices("<name>")
        .map(|(at, _)| &text[at + 6..at + 11])
        .collect();
    assert_eq!(names, ["only-", "share"], "stable name order");
}

#[tokio::test]
async fn a_per_user_skill_is_visible_only_to_that_user() {
    let dir = tempfile::tempdir().unwrap();
    skill(
        &dir.path().join("alice/skills"),
        "alice-notes",
        "Alice's private workflow",
    );
    skill(&dir.path().join("skills"), "team", "shared workflow");
    let ext = extensions(dir.path(), Default::default()).await;
    let model = ScriptedModel::new()
        .reply_text("a")
        .reply_tool_call(
            "load_skill_through_path",
            json!({"skillId": "alice-notes", "path": "SKILL.md"}),
        )
        .reply_text("b");
    let agent = builder()
        .workspace(dir.path())
        .model(model.clone())
        .extensions(ext)
        .build()
        .unwrap();
    agent.call("hi", ctx("alice", "s1")).await.unwrap();
    agent.call("hi", ctx("bob", "s1")).await.unwrap();
    let requests = model.requests();
    let alice = catalogue(&requests[0]);
    assert!(
        alice.contains("alice-notes") && alice.contains("<name>team</name>"),
        "{alice}"
    );
    let bob = catalogue(&requests[1]);
    assert!(
        !bob.contains("alice-notes") && bob.contains("<name>team</name>"),
        "{bob}"
    );
    let (text, is_error) = tool_result(&requests[2]);
    assert!(is_error, "bob cannot load alice's skill: {text}");
    assert!(
        text.contains("unknown skill `alice-notes`") && text.contains("team"),
        "{text}"
    );
}

#[tokio::test]
async fn load_skill_returns_skill_md_and_resources_and_refuses_other_paths_listing_them() {
    let dir = tempfile::tempdir().unwrap();
    let skills = dir.path().join("skills");
    skill(&skills, "pdf", "Use for PDFs");
    std::fs::create_dir_all(skills.join("pdf/references")).unwrap();
    std::fs::create_dir_all(skills.join("pdf/scripts")).unwrap();
    std::fs::write(skills.join("pdf/references/api.md"), "the API").unwrap();
    std::fs::write(skills.join("pdf/scripts/run.sh"), "#!/bin/sh\necho hi\n").unwrap();
    let ext = extensions(dir.path(), Default::default()).await;
    let model = ScriptedModel::new()
        .reply_tool_call("load_skill_through_path", json!({"skillId": "pdf", "path": "SKILL.md"}))
        .reply_tool_call(
            "load_skill_through_path",
            json!({"skillId": "pdf", "path": "references/api.md"}),
        )
        .reply_tool_call(
            "load_skill_through_path",
            json!({"skillId": "pdf", "path": "../AGENTS.md"}),
        )
        .reply_tool_call(
            "load_skill_through_path",
            json!({"skillId": "pdf", "path": "references"}),
        )
        .reply_text("done");
    let agent = builder()
        .workspace(dir.path())
        .model(model.clone())
        .extensions(ext)
        .build()
        .unwrap();
    agent.call("read the pdf skill", ctx("alice", "s1")).await.unwrap();
    let requests = model.requests();
    let (text, is_error) = tool_result(&requests[1]);
    assert!(!is_error && text.contains("Instructions of pdf."), "{text}");
    let (text, is_error) = tool_result(&requests[2]);
    assert!(!is_error);
    assert_eq!(text, "the API");
    for request in &requests[3..5] {
        let (text, is_error) = tool_result(request);
        assert!(is_error, "{text}");
        assert!(
            text.contains("available paths: SKILL.md, references/api.md, scripts/run.sh"),
            "{text}"
        );
    }
}

#[tokio::test]
async fn the_catalogue_is_byte_stable_across_steps_and_turns() {
    let dir = tempfile::tempdir().unwrap();
    skill(&dir.path().join("skills"), "b-skill", "second <one> & more");
    skill(&dir.path().join("skills"), "a-skill", "first");
    let ext = extensions(dir.path(), Default::default()).await;
    let model = ScriptedModel::new()
        .reply_tool_call("read_file", json!({"path": "skills/a-skill/SKILL.md"}))
        .reply_text("one")
        .reply_text("two");
    let agent = builder()
        .workspace(dir.path())
        .model(model.clone())
        .extensions(ext)
        .build()
        .unwrap();
    agent.call("hi", ctx("alice", "s1")).await.unwrap();
    agent.call("again", ctx("alice", "s1")).await.unwrap();
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    let first = catalogue(&requests[0]);
    assert!(first.contains("second &lt;one&gt; &amp; more"), "{first}");
    assert!(first.find("a-skill").unwrap() < first.find("b-skill").unwrap());
    for request in &requests[1..] {
        assert_eq!(catalogue(request).as_bytes(), first.as_bytes());
        assert_eq!(request.system.split_stable().0, requests[0].system.split_stable().0);
    }
}

/// Unchanged `SKILL.md` files are not read again (one `stat` each); an edited one is, and
/// the next call's catalogue shows the new description. Per-user skills are cached per user.
#[tokio::test]
async fn skill_files_are_reread_only_when_they_change() {
    let dir = tempfile::tempdir().unwrap();
    let skills_dir = dir.path().join("skills");
    skill(&skills_dir, "a-skill", "first");
    skill(&skills_dir, "b-skill", "second");
    skill(&dir.path().join("alice/skills"), "mine", "alice's");
    skill(&dir.path().join("bob/skills"), "mine", "bob's");
    let ext = extensions(dir.path(), Default::default()).await;
    let skills = Arc::clone(ext.skills().unwrap());
    let model = ScriptedModel::new()
        .reply_text("1")
        .reply_text("2")
        .reply_text("3")
        .reply_text("4")
        .reply_text("5");
    let agent = builder()
        .workspace(dir.path())
        .model(model.clone())
        .extensions(ext)
        .build()
        .unwrap();
    agent.call("hi", ctx("alice", "s1")).await.unwrap();
    assert_eq!(skills.skill_file_reads(), 3, "first call reads every file once");
    agent.call("hi", ctx("alice", "s1")).await.unwrap();
    assert_eq!(skills.skill_file_reads(), 3, "nothing changed, nothing re-read");
    agent.call("hi", ctx("bob", "s1")).await.unwrap();
    assert_eq!(
        skills.skill_file_reads(),
        4,
        "bob's own skill is his, not alice's cached one"
    );
    // A new size (and modification time): re-read.
    std::fs::write(
        skills_dir.join("b-skill/SKILL.md"),
        "---\nname: b-skill\ndescription: second, edited\n---\nNew body.\n",
    )
    .unwrap();
    agent.call("hi", ctx("alice", "s1")).await.unwrap();
    assert_eq!(skills.skill_file_reads(), 5, "only the edited file is read");
    // The same size, a later modification time: re-read too.
    let edited = skills_dir.join("a-skill/SKILL.md");
    let before = std::fs::read_to_string(&edited).unwrap();
    std::fs::write(&edited, before.replace("first", "fir5t")).unwrap();
    let file = std::fs::File::options().write(true).open(&edited).unwrap();
    file.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5))
        .unwrap();
    agent.call("hi", ctx("alice", "s1")).await.unwrap();
    assert_eq!(skills.skill_file_reads(), 6);
    let requests = model.requests();
    let bob = catalogue(&requests[2]);
    assert!(bob.contains("bob's") && !bob.contains("alice's"), "{bob}");
    let after_edit = catalogue(&requests[3]);
    assert!(after_edit.contains("second, edited"), "{after_edit}");
    let last = catalogue(&requests[4]);
    assert!(last.contains("fir5t") && last.contains("alice's"), "{last}");
}

#[tokio::test]
async fn files_root_is_shown_only_with_a_shell() {
    let dir = tempfile::tempdir().unwrap();
    skill(&dir.path().join("skills"), "s", "d");
    let config = ExtensionsConfig {
        skills: Some(Default::default()),
        ..ExtensionsConfig::default()
    };
    let ext = Arc::new(
        Extensions::start(config, &HostEnv::default(), dir.path(), true)
            .await
            .unwrap(),
    );
    let fs = harness_fs::LocalFs::new(dir.path())
        .unwrap()
        .with_shell(harness_fs::LocalShellConfig::default());
    let model = ScriptedModel::new().reply_text("ok");
    let agent = builder()
        .workspace(dir.path())
        .filesystem(Arc::new(fs))
        .model(model.clone())
        .extensions(ext)
        .build()
        .unwrap();
    agent.call("hi", ctx("alice", "s1")).await.unwrap();
    let text = catalogue(&model.requests()[0]);
    // Relative to alice's layer, where her shell runs: no host path in the prompt.
    assert!(text.contains("<files-root>../skills/s</files-root>"), "{text}");
    assert!(!text.contains(&dir.path().display().to_string()), "{text}");
}

#[cfg(feature = "git")]
use harness_test_support::tools::git;

#[cfg(feature = "git")]
#[tokio::test]
async fn a_git_repository_skill_updates_when_a_commit_lands() {
    let origin = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bare = origin.path().join("team-skills.git");
    git(origin.path(), &["init", "--bare", "-q", bare.to_str().unwrap()]);
    git(work.path(), &["init", "-q", "."]);
    skill(&work.path().join("skills"), "deploy", "deploy v1");
    skill(&work.path().join("skills"), "retired", "goes away");
    std::fs::write(work.path().join("README.md"), "not a skill").unwrap();
    git(work.path(), &["add", "-A"]);
    git(work.path(), &["commit", "-qm", "one"]);
    git(
        work.path(),
        &["push", "-q", bare.to_str().unwrap(), "HEAD:refs/heads/main"],
    );
    // The workspace layer still shadows a repository skill of the same name.
    skill(&dir.path().join("skills"), "retired", "workspace wins");

    let ext = extensions(
        dir.path(),
        harness_skills::SkillsConfig {
            global_dir: None,
            repositories: vec![harness_skills::SkillRepositorySource::head(bare.display().to_string())],
            ..Default::default()
        },
    )
    .await;
    let model = ScriptedModel::new().reply_text("1").reply_text("2").reply_text("3");
    let agent = builder()
        .workspace(dir.path())
        .model(model.clone())
        .extensions(Arc::clone(&ext))
        .build()
        .unwrap();
    agent.call("hi", ctx("alice", "s1")).await.unwrap();
    let first = catalogue(&model.requests()[0]);
    assert!(
        first.contains("deploy v1") && first.contains("workspace wins"),
        "{first}"
    );
    let staged = dir.path().join(".skills-cache/team-skills/deploy/SKILL.md");
    assert!(std::fs::read_to_string(&staged).unwrap().contains("deploy v1"));
    let repo = &ext.skills().unwrap().repositories()[0];
    assert_eq!(repo.fetches(), 1, "synced once, when the extensions started");
    assert_eq!(repo.sync().await.unwrap(), SyncOutcome::Unchanged, "HEAD did not move");

    skill(&work.path().join("skills"), "deploy", "deploy v2");
    skill(&work.path().join("skills"), "rollback", "new skill");
    std::fs::remove_dir_all(work.path().join("skills/retired")).unwrap();
    git(work.path(), &["add", "-A"]);
    git(work.path(), &["commit", "-qm", "two"]);
    git(
        work.path(),
        &["push", "-q", bare.to_str().unwrap(), "HEAD:refs/heads/main"],
    );

    // A turn never syncs: it reads the last staged copy.
    agent.call("again", ctx("alice", "s1")).await.unwrap();
    assert!(catalogue(&model.requests()[1]).contains("deploy v1"));
    assert_eq!(repo.fetches(), 2, "only the explicit sync above fetched");
    // The next sync (the schedule's, here called directly) stages the new commit.
    ext.skills().unwrap().sync().await;
    agent.call("and again", ctx("alice", "s1")).await.unwrap();
    let second = catalogue(&model.requests()[2]);
    assert!(
        second.contains("deploy v2") && second.contains("<name>rollback</name>"),
        "{second}"
    );
    assert!(!second.contains("deploy v1"));
    assert!(second.contains("workspace wins"), "the workspace skill stays: {second}");
    assert!(
        !dir.path().join(".skills-cache/team-skills/retired").exists(),
        "orphans are removed"
    );
}

#[cfg(feature = "git")]
/// A git:// server that accepts connections and never answers (held until the task ends).
async fn silent_git_server() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    (format!("git://127.0.0.1:{port}/skills.git"), task)
}

#[cfg(feature = "git")]
/// Turns never fetch skill repositories: a repository that never answers and one that does
/// not exist cost the agent's start one bounded sync each, and no turn waits for them, fails
/// because of them, or fetches at all; the skills of the working repository are served from
/// their staged copy.
#[tokio::test]
async fn a_turn_never_fetches_and_a_broken_repository_does_not_delay_or_fail_it() {
    let origin = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bare = origin.path().join("good.git");
    git(origin.path(), &["init", "--bare", "-q", bare.to_str().unwrap()]);
    git(work.path(), &["init", "-q", "."]);
    skill(&work.path().join("skills"), "deploy", "deploy v1");
    git(work.path(), &["add", "-A"]);
    git(work.path(), &["commit", "-qm", "one"]);
    git(
        work.path(),
        &["push", "-q", bare.to_str().unwrap(), "HEAD:refs/heads/main"],
    );
    let (silent, server) = silent_git_server().await;
    let missing = origin.path().join("missing.git");
    let ext = extensions(
        dir.path(),
        harness_skills::SkillsConfig {
            repositories: vec![
                harness_skills::SkillRepositorySource::head(bare.display().to_string()),
                harness_skills::SkillRepositorySource::head(silent),
                harness_skills::SkillRepositorySource::head(missing.display().to_string()),
            ],
            sync: harness_skills::SyncSchedule {
                timeout: std::time::Duration::from_millis(500),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .await;
    let skills = Arc::clone(ext.skills().unwrap());
    let fetches = || {
        skills
            .repositories()
            .iter()
            .map(|repo| repo.fetches())
            .collect::<Vec<_>>()
    };
    assert_eq!(fetches(), [1, 1, 1], "one sync each when the extensions started");
    let model = ScriptedModel::new().reply_text("1").reply_text("2").reply_text("3");
    let agent = builder()
        .workspace(dir.path())
        .model(model.clone())
        .extensions(Arc::clone(&ext))
        .build()
        .unwrap();
    for (turn, text) in ["1", "2", "3"].into_iter().enumerate() {
        let reply = agent.call("hi", ctx("alice", "s1")).await.unwrap();
        assert_eq!(reply.text(), text);
        let listed = catalogue(&model.requests()[turn]);
        assert!(listed.contains("deploy v1"), "{listed}");
    }
    assert_eq!(fetches(), [1, 1, 1], "no turn fetched");
    ext.shutdown().await;
    server.abort();
    let _ = server.await;
}

/// A skill's paths may climb with `..` inside the skill's repository (its layer's root: here
/// the workspace's `skills/`), never out of it, and a symlink that leads out is refused even
/// when it points inside the workspace. A name matching two entries case-insensitively is
/// refused as ambiguous rather than guessed.
#[tokio::test]
async fn skill_paths_cannot_leave_the_repository_root() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let skills = dir.path().join("skills");
    skill(&skills, "pdf", "Use for PDFs");
    std::fs::write(dir.path().join("secret.md"), "WORKSPACE-SECRET").unwrap();
    std::fs::write(outside.path().join("host.md"), "HOST-SECRET").unwrap();
    std::os::unix::fs::symlink(dir.path().join("secret.md"), skills.join("pdf/inside.md")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("host.md"), skills.join("pdf/host.md")).unwrap();
    std::os::unix::fs::symlink(dir.path(), skills.join("pdf/up")).unwrap();
    std::fs::write(skills.join("pdf/Notes.md"), "one").unwrap();
    std::fs::write(skills.join("pdf/notes.md"), "two").unwrap();
    let attempts = [
        ("../../secret.md", "leads out of the skill's repository"),
        ("../../../../../../etc/passwd", "leads out of the skill's repository"),
        ("/etc/passwd", "not a path relative"),
        ("inside.md", ""),
        ("host.md", ""),
        ("up/secret.md", ""),
        ("NOTES.md", "names differing only in case"),
    ];
    let mut model = ScriptedModel::new();
    for (path, _) in attempts {
        model = model.reply_tool_call("load_skill_through_path", json!({"skillId": "pdf", "path": path}));
    }
    let model = model.reply_text("done");
    let ext = extensions(dir.path(), Default::default()).await;
    let agent = builder()
        .workspace(dir.path())
        .model(model.clone())
        .extensions(ext)
        .build()
        .unwrap();
    agent.call("escape", ctx("alice", "s1")).await.unwrap();
    let requests = model.requests();
    for (step, (path, expected)) in attempts.iter().enumerate() {
        let (text, is_error) = tool_result(&requests[step + 1]);
        assert!(is_error, "{path}: {text}");
        assert!(!text.contains("SECRET"), "{path}: {text}");
        assert!(text.contains(expected), "{path}: {text}");
    }
}

/// With a relative workspace directory (`--workspace ./ws`), a skill's `<files-root>` is
/// still the one a shell in the workspace reaches, at every level of a nested layout, and
/// `load_skill` finds its files.
#[tokio::test]
async fn a_relative_workspace_gives_shell_paths_that_resolve() {
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("skills/repo/skills/.curated");
    skill(&nested, "pdf", "Use for PDFs");
    std::fs::create_dir_all(nested.join("pdf/scripts")).unwrap();
    std::fs::write(nested.join("pdf/scripts/run.sh"), "#!/bin/sh\n").unwrap();
    // The same directory, written relative to the current directory.
    let cwd = std::env::current_dir().unwrap();
    let mut relative = std::path::PathBuf::new();
    for _ in cwd.components().skip(1) {
        relative.push("..");
    }
    relative.push(dir.path().strip_prefix("/").unwrap());
    assert!(relative.is_relative());
    let config = ExtensionsConfig {
        skills: Some(Default::default()),
        ..ExtensionsConfig::default()
    };
    let ext = Extensions::start(config, &HostEnv::default(), &relative, true)
        .await
        .unwrap();
    let skills = ext.skills().unwrap();
    let fs: Arc<dyn harness_fs::Filesystem> = Arc::new(harness_fs::LocalFs::new(&relative).unwrap());
    let workspace = harness_fs::CallWorkspace {
        user: fs.clone(),
        layered: fs.clone(),
        shared: fs.clone(),
        unfenced: fs,
    };
    let set = skills.resolve(&workspace, None).await;
    let root = set.get("pdf").unwrap().files_root.clone().unwrap();
    assert!(root.is_absolute(), "{}", root.display());
    assert!(root.join("scripts/run.sh").is_file(), "{}", root.display());
    // The catalogue names it from the shell's working directory (the workspace).
    let catalogue = set.catalogue_for(skills.host_root(), Some(&harness_fs::WsPath::root()));
    assert!(
        catalogue.contains("<files-root>skills/repo/skills/.curated/pdf</files-root>"),
        "{catalogue}"
    );
}
