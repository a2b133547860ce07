//! The shared layer and a caller's layered view: shared files show through under the
//! caller's own, other namespaces never do, and the shared files are read-only to the model.

use super::p;
use harness_core::{AgentId, SessionId, UserId};
use harness_fs::{
    CallScope, CallWorkspace, Filesystem, FsError, GrepOptions, IsolationScope, KvFs, LocalFs, SharedLayer, WriteMode,
    WsPath,
};
use harness_store::InMemoryKv;
use std::sync::Arc;

async fn seed(root: &Arc<dyn Filesystem>) {
    for (path, text) in [
        ("AGENTS.md", "persona\n"),
        ("MEMORY.md", "- shared fact wifi\n"),
        ("knowledge/products.md", "router wifi\n"),
        ("knowledge/deep/spec.md", "wifi spec\n"),
        ("bob/secret.md", "bob's wifi\n"),
        ("notes.md", "root notes wifi\n"),
    ] {
        root.write(&p(path), text.as_bytes(), WriteMode::Overwrite)
            .await
            .unwrap();
    }
    // Many matches in another namespace must not crowd out the shared ones.
    let crowd: String = (0..500).map(|i| format!("wifi {i}\n")).collect();
    root.write(&p("bob/crowd.md"), crowd.as_bytes(), WriteMode::Overwrite)
        .await
        .unwrap();
}

fn paths<T>(items: &[T], path: impl Fn(&T) -> &WsPath) -> Vec<String> {
    let mut found: Vec<String> = items.iter().map(|item| path(item).as_str().to_owned()).collect();
    found.sort();
    found.dedup();
    found
}

async fn check_shared_layer(root: Arc<dyn Filesystem>) {
    seed(&root).await;
    let shared = SharedLayer::read_only(Arc::clone(&root));
    let listed = shared.list(&WsPath::root()).await.unwrap();
    assert_eq!(
        paths(&listed, |info| &info.path),
        ["AGENTS.md", "MEMORY.md", "knowledge"]
    );
    assert!(matches!(
        shared.read(&p("bob/secret.md")).await,
        Err(FsError::NotFound { .. })
    ));
    assert!(!shared.exists(&p("notes.md")).await.unwrap());
    assert!(shared.list(&p("bob")).await.unwrap().is_empty());
    let globbed = shared.glob(&WsPath::root(), "**/*.md", 100).await.unwrap();
    assert_eq!(
        paths(&globbed, |info| &info.path),
        [
            "AGENTS.md",
            "MEMORY.md",
            "knowledge/deep/spec.md",
            "knowledge/products.md"
        ]
    );
    let mut options = GrepOptions::literal("wifi");
    options.max_matches = 10;
    let found = shared.grep(&WsPath::root(), &options).await.unwrap();
    assert_eq!(
        paths(&found, |hit| &hit.path),
        ["MEMORY.md", "knowledge/deep/spec.md", "knowledge/products.md"]
    );
    for write in [
        shared.write(&p("knowledge/new.md"), b"x", WriteMode::CreateNew).await,
        shared.append(&p("MEMORY.md"), b"x").await,
        shared.delete(&p("AGENTS.md")).await,
        shared.write(&p("mine.md"), b"x", WriteMode::CreateNew).await,
    ] {
        assert!(matches!(write, Err(FsError::PermissionDenied { .. })), "{write:?}");
    }

    // Alice's layered view: her own files, the shared ones through, nothing of bob's.
    let scope = |kind| {
        CallScope::new(
            kind,
            AgentId::from_static("main"),
            UserId::from_static("alice"),
            SessionId::from_static("s"),
        )
        .unwrap()
    };
    let alice = CallWorkspace::new(&root, &scope(IsolationScope::User), None).layered;
    assert_eq!(alice.read(&p("knowledge/products.md")).await.unwrap(), b"router wifi\n");
    assert!(matches!(
        alice.read(&p("notes.md")).await,
        Err(FsError::NotFound { .. })
    ));
    alice
        .write(&p("knowledge/products.md"), b"alice's copy\n", WriteMode::Overwrite)
        .await
        .unwrap();
    assert_eq!(
        alice.read(&p("knowledge/products.md")).await.unwrap(),
        b"alice's copy\n"
    );
    assert_eq!(root.read(&p("knowledge/products.md")).await.unwrap(), b"router wifi\n");
    assert_eq!(
        root.read(&p("alice/knowledge/products.md")).await.unwrap(),
        b"alice's copy\n"
    );
    let found = alice.grep(&WsPath::root(), &options).await.unwrap();
    assert_eq!(
        paths(&found, |hit| &hit.path),
        ["MEMORY.md", "knowledge/deep/spec.md"],
        "alice's copy shadows the shared file and has no match"
    );

    // Under the global scope the caller's layer is the root: shared files are read-only.
    let global = CallWorkspace::new(&root, &scope(IsolationScope::Global), None).layered;
    assert!(matches!(
        global.write(&p("AGENTS.md"), b"x", WriteMode::Overwrite).await,
        Err(FsError::PermissionDenied { .. })
    ));
    global
        .write(&p("notes.md"), b"mine\n", WriteMode::Overwrite)
        .await
        .unwrap();
    assert_eq!(global.read(&p("bob/secret.md")).await.unwrap(), b"bob's wifi\n");
}

#[tokio::test]
async fn the_shared_layer_on_the_local_disk() {
    let dir = tempfile::tempdir().unwrap();
    check_shared_layer(Arc::new(LocalFs::new(dir.path()).unwrap())).await;
}

#[tokio::test]
async fn the_shared_layer_on_a_kv_store() {
    check_shared_layer(Arc::new(KvFs::new(Arc::new(InMemoryKv::default()), p("ws")))).await;
}

/// A view from inside a shared entry (the skills tool reads `skills/` so) sees all of it,
/// writes none of it, and on the local disk refuses a symlink leading out of the entry even
/// when it points inside the workspace.
#[tokio::test]
async fn a_view_from_inside_a_shared_entry_is_read_only_and_keeps_its_symlinks_in() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("skills/pdf")).unwrap();
    std::fs::write(dir.path().join("skills/pdf/SKILL.md"), "skill").unwrap();
    std::fs::write(dir.path().join("notes.md"), "outside the entry").unwrap();
    std::os::unix::fs::symlink(dir.path().join("notes.md"), dir.path().join("skills/pdf/link.md")).unwrap();
    let root: Arc<dyn Filesystem> = Arc::new(LocalFs::new(dir.path()).unwrap());
    for layer in [
        SharedLayer::read_only(Arc::clone(&root)),
        SharedLayer::protected(root.clone()),
    ] {
        let view = harness_fs::Namespaced::new(Arc::new(layer), p("skills"));
        assert_eq!(view.read(&p("pdf/SKILL.md")).await.unwrap(), b"skill");
        assert!(
            view.read(&p("pdf/link.md")).await.is_err(),
            "the symlink leaves skills/"
        );
        let write = view.write(&p("pdf/new.md"), b"x", WriteMode::CreateNew).await;
        assert!(matches!(write, Err(FsError::PermissionDenied { .. })), "{write:?}");
        assert!(view.shell().is_none());
    }
    // Outside a shared entry nothing changes: the generic prefix view.
    let layer: Arc<dyn Filesystem> = Arc::new(SharedLayer::protected(root));
    assert!(layer.scoped(&p("alice")).is_none());
}
