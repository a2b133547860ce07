//! Git skill repositories (a local bare repository driven with the `git` CLI): staging,
//! pinned refs, fetching only the ref staged, timeouts, and the sync schedule.

use harness_fs::{CallWorkspace, Filesystem, LocalFs};
use harness_skills::{
    GitSkillRepository, GitSyncError, SkillRepositorySource, Skills, SkillsConfig, SyncOutcome, SyncSchedule,
};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

fn skill(dir: &Path, name: &str, description: &str) {
    std::fs::create_dir_all(dir.join(name)).unwrap();
    std::fs::write(
        dir.join(name).join("SKILL.md"),
        format!("---\nname: {name}\ndescription: {description}\n---\n# {name}\nInstructions of {name}.\n"),
    )
    .unwrap();
}

use harness_test_support::tools::git;

#[tokio::test]
async fn a_sync_rewrites_only_changed_files() {
    let origin = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    git(work.path(), &["init", "-q", "."]);
    skill(work.path(), "one", "first");
    skill(work.path(), "two", "second");
    git(work.path(), &["add", "-A"]);
    git(work.path(), &["commit", "-qm", "one"]);
    let bare = origin.path().join("flat");
    git(
        origin.path(),
        &[
            "clone",
            "-q",
            "--bare",
            work.path().to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    );
    let repo = GitSkillRepository::new(bare.display().to_string(), "flat", cache.path());
    let SyncOutcome::Updated { written, removed, .. } = repo.sync().await.unwrap() else {
        panic!("first sync stages")
    };
    assert_eq!((written, removed), (2, 0), "skills at the repository root");

    skill(work.path(), "two", "second, edited");
    git(work.path(), &["commit", "-qam", "two"]);
    git(
        work.path(),
        &["push", "-q", bare.to_str().unwrap(), "HEAD:refs/heads/main"],
    );
    let SyncOutcome::Updated { written, removed, .. } = repo.sync().await.unwrap() else {
        panic!("HEAD moved")
    };
    assert_eq!((written, removed), (1, 0), "only the changed file is rewritten");
    assert!(
        std::fs::read_to_string(cache.path().join("flat/two/SKILL.md"))
            .unwrap()
            .contains("edited")
    );
}

/// `ref` pins a branch (which follows its new commits), a tag or a full commit id (which stay
/// put while `main` moves on); a ref the repository does not have is an error naming it.
#[tokio::test]
async fn a_pinned_ref_follows_its_branch_and_a_tag_or_commit_stays() {
    let origin = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let bare = origin.path().join("pinned.git");
    git(origin.path(), &["init", "--bare", "-q", bare.to_str().unwrap()]);
    git(work.path(), &["init", "-q", "."]);
    let push = |refspec: &str| git(work.path(), &["push", "-q", "-f", bare.to_str().unwrap(), refspec]);
    let commit = |description: &str| {
        skill(work.path(), "tool", description);
        git(work.path(), &["add", "-A"]);
        git(work.path(), &["commit", "-qm", description]);
    };
    let head = || {
        let output = Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(work.path())
            .output()
            .unwrap();
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    };
    commit("v1");
    let first_commit = head();
    git(work.path(), &["tag", "v1"]);
    push("HEAD:refs/heads/main");
    push("HEAD:refs/heads/stable");
    push("refs/tags/v1:refs/tags/v1");
    let url = bare.display().to_string();
    let staged = |source: &str| std::fs::read_to_string(cache.path().join(source).join("tool/SKILL.md")).unwrap();
    let pinned = |source: &str, reference: &str| {
        GitSkillRepository::new(url.clone(), source, cache.path()).pinned(Some(reference.to_owned()))
    };
    let (branch, tag, by_id) = (
        pinned("branch", "stable"),
        pinned("tag", "v1"),
        pinned("commit", &first_commit),
    );
    for repo in [&branch, &tag, &by_id] {
        assert!(
            matches!(repo.sync().await.unwrap(), SyncOutcome::Updated { .. }),
            "{repo:?}"
        );
        assert!(staged(repo.source()).contains("description: v1"));
    }

    // main and stable move on; the tag and the commit do not.
    commit("v2");
    push("HEAD:refs/heads/main");
    push("HEAD:refs/heads/stable");
    assert!(matches!(branch.sync().await.unwrap(), SyncOutcome::Updated { .. }));
    assert!(staged("branch").contains("description: v2"), "the branch followed");
    for repo in [&tag, &by_id] {
        assert_eq!(repo.sync().await.unwrap(), SyncOutcome::Unchanged, "{repo:?}");
        assert!(staged(repo.source()).contains("description: v1"));
    }

    let missing = pinned("missing", "no-such-branch");
    let err = missing.sync().await.unwrap_err();
    assert!(err.to_string().contains("`ref = \"no-such-branch\"`"), "{err}");
}

/// The refs in a repository's bare clone under `cache`.
fn clone_refs(cache: &Path, source: &str) -> Vec<String> {
    let output = Command::new("git")
        .args(["for-each-ref", "--format=%(refname)"])
        .env("GIT_DIR", cache.join(".git").join(source))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A bare repository `name.git` under `origin` with one skill `tool` (description `v1`) on
/// `main` (its HEAD), a branch `stable`, a branch `other` and a tag `v1`; returns its path.
fn repository(origin: &Path, work: &Path, name: &str) -> std::path::PathBuf {
    let bare = origin.join(format!("{name}.git"));
    git(origin, &["init", "--bare", "-q", bare.to_str().unwrap()]);
    git(work, &["init", "-q", "."]);
    skill(&work.join("skills"), "tool", "v1");
    git(work, &["add", "-A"]);
    git(work, &["commit", "-qm", "one"]);
    git(work, &["tag", "v1"]);
    for refspec in [
        "HEAD:refs/heads/main",
        "HEAD:refs/heads/stable",
        "HEAD:refs/heads/other",
        "refs/tags/v1:refs/tags/v1",
    ] {
        git(work, &["push", "-q", bare.to_str().unwrap(), refspec]);
    }
    bare
}

/// Pushes a new commit of `tool` with `description` to `main`.
fn push_commit(work: &Path, bare: &Path, description: &str) {
    skill(&work.join("skills"), "tool", description);
    git(work, &["add", "-A"]);
    git(work, &["commit", "-qm", description]);
    git(work, &["push", "-q", bare.to_str().unwrap(), "HEAD:refs/heads/main"]);
}

/// A `git://` server that accepts connections and never answers (held until the task ends).
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

fn workspace(dir: &Path) -> CallWorkspace {
    let fs: Arc<dyn Filesystem> = Arc::new(LocalFs::new(dir).unwrap());
    CallWorkspace {
        user: Arc::clone(&fs),
        layered: Arc::clone(&fs),
        shared: Arc::clone(&fs),
        unfenced: fs,
    }
}

/// The description of skill `tool` as a caller of the workspace at `dir` sees it.
async fn description(skills: &Skills, dir: &Path) -> Option<String> {
    let set = skills.resolve(&workspace(dir), None).await;
    set.get("tool").map(|skill| skill.description.clone())
}

/// Each sync fetches only the ref it stages: the remote HEAD, or the pinned branch or tag,
/// never the repository's other branches and tags.
#[tokio::test]
async fn a_sync_fetches_only_the_ref_it_stages() {
    let (origin, work, cache) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let bare = repository(origin.path(), work.path(), "refs");
    let url = bare.display().to_string();
    for (source, reference, expected) in [
        ("head", None, "refs/remotes/origin/HEAD"),
        ("branch", Some("stable"), "refs/heads/stable"),
        ("tag", Some("v1"), "refs/tags/v1"),
    ] {
        let repo = GitSkillRepository::new(url.clone(), source, cache.path()).pinned(reference.map(str::to_owned));
        assert!(
            matches!(repo.sync().await.unwrap(), SyncOutcome::Updated { .. }),
            "{source}"
        );
        assert_eq!(clone_refs(cache.path(), source), [expected], "{source}");
        assert_eq!(repo.sync().await.unwrap(), SyncOutcome::Unchanged, "{source}");
        assert_eq!(
            clone_refs(cache.path(), source),
            [expected],
            "{source}: a refetch adds nothing"
        );
        assert_eq!(repo.fetches(), 2, "{source}");
    }
}

/// A pinned commit never moves: once the clone has it, a sync does not fetch.
#[tokio::test]
async fn a_pinned_commit_the_clone_has_is_not_fetched_again() {
    let (origin, work, cache) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let bare = repository(origin.path(), work.path(), "commit");
    let output = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(work.path())
        .output()
        .unwrap();
    let commit = String::from_utf8(output.stdout).unwrap().trim().to_owned();
    let repo = GitSkillRepository::new(bare.display().to_string(), "commit", cache.path()).pinned(Some(commit));
    assert!(matches!(repo.sync().await.unwrap(), SyncOutcome::Updated { .. }));
    assert_eq!(repo.fetches(), 1);
    push_commit(work.path(), &bare, "v2");
    assert_eq!(repo.sync().await.unwrap(), SyncOutcome::Unchanged);
    assert_eq!(repo.fetches(), 1, "nothing to fetch for a commit already there");
}

/// A remote that never answers: the sync is a timeout error naming the setting, and the
/// skills staged earlier stay in place.
#[tokio::test]
async fn a_repository_that_never_answers_times_out_and_the_staged_copy_stays() {
    let (origin, work, cache) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let bare = repository(origin.path(), work.path(), "team");
    let good = GitSkillRepository::new(bare.display().to_string(), "team", cache.path());
    assert!(matches!(good.sync().await.unwrap(), SyncOutcome::Updated { .. }));
    let staged = cache.path().join("team/tool/SKILL.md");
    assert!(std::fs::read_to_string(&staged).unwrap().contains("v1"));

    let (url, server) = silent_git_server().await;
    let silent = GitSkillRepository::new(url, "team", cache.path()).with_timeout(Duration::from_millis(300));
    let err = silent.sync().await.unwrap_err();
    assert!(
        matches!(&err, GitSyncError::TimedOut { after, .. } if *after == Duration::from_millis(300)),
        "{err}"
    );
    assert!(err.to_string().contains("sync_timeout_seconds"), "{err}");
    assert_eq!(silent.fetches(), 1);
    assert!(
        std::fs::read_to_string(&staged).unwrap().contains("v1"),
        "the staged copy stays"
    );
    server.abort();
    let _ = server.await;
}

/// `Skills::start` syncs once before it returns, then on the schedule in the background: a
/// commit pushed later shows up after the next rounds, without anyone calling `sync`.
#[tokio::test]
async fn skills_sync_at_start_and_then_on_their_schedule() {
    let (origin, work, dir) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let bare = repository(origin.path(), work.path(), "scheduled");
    let config = SkillsConfig {
        repositories: vec![SkillRepositorySource::head(bare.display().to_string())],
        sync: SyncSchedule {
            interval: Duration::from_millis(20),
            timeout: Duration::from_secs(60),
        },
        ..SkillsConfig::default()
    };
    let skills = Skills::start(config, dir.path(), false).await.unwrap();
    let mut rounds = skills.sync_rounds();
    assert!(*rounds.borrow() >= 1, "the first round ran before start returned");
    assert_eq!(description(&skills, dir.path()).await.as_deref(), Some("v1"));

    push_commit(work.path(), &bare, "v2");
    // A round that started after the push has completed once two more rounds are done.
    let seen = *rounds.borrow();
    tokio::time::timeout(Duration::from_secs(120), rounds.wait_for(|n| *n >= seen + 2))
        .await
        .expect("the schedule keeps syncing")
        .unwrap();
    assert_eq!(description(&skills, dir.path()).await.as_deref(), Some("v2"));
    assert!(skills.repositories()[0].fetches() >= 3);
    skills.stop().await;
}
