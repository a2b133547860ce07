//! Everything here must be refused with a clear error: traversal, absolute paths, symlinks
//! leading out, cross-namespace access, overlong paths and NUL bytes. (Weak spots 3 and 4 of
//! the reference: string-based path policy, advisory namespaces.)

use super::p;
use harness_core::{AgentId, SessionId, UserId};
use harness_fs::{
    CallScope, CallWorkspace, CompositeFs, Filesystem, FsError, GrepOptions, IsolationScope, KvFs, LocalFs, Namespaced,
    ScopeError, WriteMode, WsPath,
};
use harness_store::InMemoryKv;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    fs: LocalFs,
}

/// A workspace `root/` next to a directory `outside/` holding `secret.txt`.
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "TOP SECRET\n").unwrap();
    let fs = LocalFs::new(&root).unwrap();
    Fixture {
        root: std::fs::canonicalize(&root).unwrap(),
        outside: std::fs::canonicalize(&outside).unwrap(),
        _dir: dir,
        fs,
    }
}

fn assert_denied<T: std::fmt::Debug>(result: Result<T, FsError>, what: &str) {
    match result {
        Err(err @ FsError::PermissionDenied { .. }) => {
            let message = err.to_string();
            assert!(message.contains("permission denied"), "{what}: {message}");
            assert!(!message.contains("/tmp"), "{what}: the host path leaked: {message}");
        }
        other => panic!("{what}: expected permission denied, got {other:?}"),
    }
}

#[test]
fn traversal_absolute_nul_and_overlong_paths_are_refused_when_parsed() {
    for (raw, reason) in [
        ("../etc/passwd", "'..' is not allowed"),
        ("a/../../b", "'..' is not allowed"),
        ("a/..", "'..' is not allowed"),
        ("a\0b", "NUL"),
        ("~/x", "'~' is not expanded"),
        ("a\\..\\b", "separator"),
    ] {
        match WsPath::parse(raw) {
            Err(err @ FsError::InvalidPath { .. }) => assert!(err.to_string().contains(reason), "{raw:?}: {err}"),
            other => panic!("{raw:?}: {other:?}"),
        }
    }
    let long = "a/".repeat(2100);
    assert!(
        WsPath::parse(&long)
            .unwrap_err()
            .to_string()
            .contains("longer than 4096 bytes")
    );
    // Absolute paths are re-rooted, never the host's.
    assert_eq!(p("/etc/passwd").as_str(), "etc/passwd");
    // `..` inside a name is just a name (the reference refused `a..b`).
    assert_eq!(p("a..b/c..").as_str(), "a..b/c..");
}

#[tokio::test]
async fn absolute_paths_stay_inside_the_root() {
    let fx = fixture();
    assert!(matches!(
        fx.fs.read(&p("/etc/passwd")).await,
        Err(FsError::NotFound { .. })
    ));
    fx.fs
        .write(&p("/etc/passwd"), b"mine", WriteMode::CreateNew)
        .await
        .unwrap();
    assert_eq!(std::fs::read(fx.root.join("etc/passwd")).unwrap(), b"mine");
}

#[tokio::test]
async fn a_segment_longer_than_the_os_allows_is_a_clear_error() {
    let fx = fixture();
    let long = p(&"x".repeat(300));
    match fx.fs.write(&long, b"x", WriteMode::CreateNew).await {
        Err(err @ FsError::InvalidPath { .. }) => assert!(err.to_string().contains("longer than"), "{err}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn symlink_to_an_outside_file_is_refused_for_every_operation() {
    let fx = fixture();
    symlink(fx.outside.join("secret.txt"), fx.root.join("link.txt")).unwrap();
    let link = p("link.txt");
    assert_denied(fx.fs.read(&link).await, "read");
    assert_denied(fx.fs.read_versioned(&link).await, "read_versioned");
    assert_denied(fx.fs.read_text(&link, 0, 10).await, "read_text");
    assert_denied(fx.fs.write(&link, b"pwned", WriteMode::Overwrite).await, "write");
    assert_denied(fx.fs.append(&link, b"pwned").await, "append");
    assert_denied(fx.fs.stat(&link).await, "stat");
    assert_denied(fx.fs.exists(&link).await, "exists");
    assert_denied(fx.fs.edit(&link, "TOP", "NOT", false).await, "edit");
    // Listing, globbing and grepping do not show or search it.
    assert!(fx.fs.list(&WsPath::root()).await.unwrap().is_empty());
    assert!(fx.fs.glob(&WsPath::root(), "**", 100).await.unwrap().is_empty());
    assert!(
        fx.fs
            .grep(&WsPath::root(), &GrepOptions::literal("SECRET"))
            .await
            .unwrap()
            .is_empty()
    );
    // Deleting removes the link, never the target.
    fx.fs.delete(&link).await.unwrap();
    assert!(!fx.root.join("link.txt").exists());
    assert_eq!(
        std::fs::read_to_string(fx.outside.join("secret.txt")).unwrap(),
        "TOP SECRET\n"
    );
}

#[tokio::test]
async fn symlink_to_an_outside_directory_is_refused() {
    let fx = fixture();
    symlink(&fx.outside, fx.root.join("out")).unwrap();
    assert_denied(fx.fs.read(&p("out/secret.txt")).await, "read through a dir link");
    assert_denied(
        fx.fs.write(&p("out/new.txt"), b"x", WriteMode::CreateNew).await,
        "write through a dir link",
    );
    assert!(!fx.outside.join("new.txt").exists());
    assert_denied(fx.fs.mkdir(&p("out/sub")).await, "mkdir through a dir link");
    assert!(!fx.outside.join("sub").exists());
    assert_denied(fx.fs.list(&p("out")).await, "list");
    assert_denied(fx.fs.glob(&p("out"), "**", 10).await, "glob");
    assert_denied(fx.fs.grep(&p("out"), &GrepOptions::literal("SECRET")).await, "grep");
    assert_denied(fx.fs.delete(&p("out/secret.txt")).await, "delete through a dir link");
    assert!(fx.outside.join("secret.txt").exists());
    // A root-level walk does not descend into it.
    assert!(
        fx.fs
            .grep(&WsPath::root(), &GrepOptions::literal("SECRET"))
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn dangling_and_intermediate_symlinks_are_refused() {
    let fx = fixture();
    // Dangling, pointing outside: writing through it must not create the target.
    symlink(fx.outside.join("created-by-attacker"), fx.root.join("dangling")).unwrap();
    assert_denied(
        fx.fs.write(&p("dangling"), b"x", WriteMode::CreateNew).await,
        "dangling write",
    );
    assert!(!fx.outside.join("created-by-attacker").exists());
    // An intermediate directory link with a relative target that climbs out.
    std::fs::create_dir_all(fx.root.join("a/b")).unwrap();
    symlink("../../../outside", fx.root.join("a/b/up")).unwrap();
    assert_denied(fx.fs.read(&p("a/b/up/secret.txt")).await, "intermediate relative link");
    // A chain of links that ends outside.
    symlink("a/b/up", fx.root.join("chain")).unwrap();
    assert_denied(fx.fs.read(&p("chain/secret.txt")).await, "chain");
    // A loop.
    symlink("loop2", fx.root.join("loop1")).unwrap();
    symlink("loop1", fx.root.join("loop2")).unwrap();
    assert_denied(fx.fs.read(&p("loop1")).await, "loop");
}

#[tokio::test]
async fn symlinks_that_stay_inside_work() {
    let fx = fixture();
    std::fs::create_dir_all(fx.root.join("real")).unwrap();
    std::fs::write(fx.root.join("real/file.txt"), "inside").unwrap();
    symlink("real/file.txt", fx.root.join("alias.txt")).unwrap();
    symlink(fx.root.join("real"), fx.root.join("abs-dir")).unwrap();
    symlink("real/new.txt", fx.root.join("dangling-inside")).unwrap();
    assert_eq!(fx.fs.read(&p("alias.txt")).await.unwrap(), b"inside");
    assert_eq!(fx.fs.read(&p("abs-dir/file.txt")).await.unwrap(), b"inside");
    // Writing through a link replaces the target's content and keeps the link.
    fx.fs
        .write(&p("alias.txt"), b"changed", WriteMode::Overwrite)
        .await
        .unwrap();
    assert_eq!(std::fs::read(fx.root.join("real/file.txt")).unwrap(), b"changed");
    assert!(
        std::fs::symlink_metadata(fx.root.join("alias.txt"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    fx.fs
        .write(&p("dangling-inside"), b"new", WriteMode::CreateNew)
        .await
        .unwrap();
    assert_eq!(std::fs::read(fx.root.join("real/new.txt")).unwrap(), b"new");
}

/// User A's view can never reach user B's files, whatever the path form.
async fn check_cross_namespace(base: Arc<dyn Filesystem>, attack_link: Option<&Path>) {
    let scope = |user: &str| {
        CallScope::new(
            IsolationScope::User,
            AgentId::from_static("main"),
            UserId::parse(user).unwrap(),
            SessionId::from_static("s1"),
        )
    };
    // The model's layered views: their own namespace over the read-only shared layer.
    let alice = CallWorkspace::new(&base, &scope("alice").unwrap(), None).layered;
    let bob = CallWorkspace::new(&base, &scope("bob").unwrap(), None).layered;
    bob.write(&p("secret.txt"), b"bob's secret", WriteMode::CreateNew)
        .await
        .unwrap();
    for form in [
        "/bob/secret.txt",
        "bob/secret.txt",
        "//bob/secret.txt",
        "./bob/secret.txt",
        "/secret.txt",
    ] {
        match alice.read(&p(form)).await {
            Err(FsError::NotFound { path }) => {
                assert!(
                    !path.as_str().contains("alice"),
                    "the namespace prefix leaked into {path}"
                )
            }
            other => panic!("alice read {form}: {other:?}"),
        }
    }
    for form in ["../bob/secret.txt", "/../bob/secret.txt", "x/../../bob/secret.txt"] {
        assert!(
            matches!(WsPath::parse(form), Err(FsError::InvalidPath { .. })),
            "{form}"
        );
    }
    // Writes land in alice's own namespace.
    alice
        .write(&p("/bob/secret.txt"), b"alice's copy", WriteMode::CreateNew)
        .await
        .unwrap();
    assert_eq!(bob.read(&p("secret.txt")).await.unwrap(), b"bob's secret");
    assert_eq!(base.read(&p("alice/bob/secret.txt")).await.unwrap(), b"alice's copy");
    assert_eq!(base.read(&p("bob/secret.txt")).await.unwrap(), b"bob's secret");
    // Searches see only alice's files.
    let found = alice.grep(&WsPath::root(), &GrepOptions::literal("'s")).await.unwrap();
    assert_eq!(
        found.iter().map(|m| m.path.as_str()).collect::<Vec<_>>(),
        ["bob/secret.txt"]
    );
    assert_eq!(found[0].text, "alice's copy");
    // A symlink planted in alice's directory pointing at bob's is refused.
    if let Some(alice_dir) = attack_link {
        symlink("../bob", alice_dir.join("to-bob")).unwrap();
        assert_denied(alice.read(&p("to-bob/secret.txt")).await, "link into another namespace");
        assert_denied(
            alice.write(&p("to-bob/secret.txt"), b"x", WriteMode::Overwrite).await,
            "write via link",
        );
        assert_eq!(bob.read(&p("secret.txt")).await.unwrap(), b"bob's secret");
    }
    // Reserved names cannot be used as a namespace.
    assert!(matches!(scope("memory"), Err(ScopeError::Reserved { .. })));
}

#[tokio::test]
async fn namespaces_cannot_reach_each_other() {
    let fx = fixture();
    let local: Arc<dyn Filesystem> = Arc::new(fx.fs.clone());
    std::fs::create_dir_all(fx.root.join("alice")).unwrap();
    check_cross_namespace(local, Some(&fx.root.join("alice"))).await;
    let kv: Arc<dyn Filesystem> = Arc::new(KvFs::new(Arc::new(InMemoryKv::default()), p("fs")));
    check_cross_namespace(kv, None).await;
    let dir = tempfile::tempdir().unwrap();
    let composite: Arc<dyn Filesystem> = Arc::new(CompositeFs::new(Arc::new(LocalFs::new(dir.path()).unwrap())).mount(
        p("memory"),
        Arc::new(KvFs::new(Arc::new(InMemoryKv::default()), p("mem"))),
    ));
    check_cross_namespace(composite, None).await;
}

#[tokio::test]
async fn a_namespace_root_that_is_a_symlink_is_refused() {
    let fx = fixture();
    std::fs::create_dir_all(fx.root.join("bob")).unwrap();
    std::fs::write(fx.root.join("bob/secret.txt"), "bob's").unwrap();
    symlink("bob", fx.root.join("mallory")).unwrap();
    let mallory = Namespaced::new(Arc::new(fx.fs.clone()), p("mallory"));
    assert_denied(mallory.read(&p("secret.txt")).await, "namespace root link");
}
