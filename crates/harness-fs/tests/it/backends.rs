//! Behaviour specific to one backend: overlay layering (weak spot 30 of the reference),
//! composite routing, and the KV layout (weak spot 29).

use super::p;
use futures::future::join_all;
use harness_fs::{
    CompositeFs, FileInfo, Filesystem, FsError, GrepOptions, KvFs, LocalFs, LocalShellConfig, Namespaced, OverlayFs,
    ShellRequest, WriteMode, WsPath,
};
use harness_store::{InMemoryKv, KvStore};
use std::sync::Arc;

fn paths(infos: &[FileInfo]) -> Vec<&str> {
    infos.iter().map(|info| info.path.as_str()).collect()
}

fn kv(store: &InMemoryKv, namespace: &str) -> Arc<dyn Filesystem> {
    Arc::new(KvFs::new(Arc::new(store.clone()), p(namespace)))
}

async fn put(fs: &dyn Filesystem, path: &str, text: &str) {
    fs.write(&p(path), text.as_bytes(), WriteMode::Overwrite).await.unwrap();
}

async fn text(fs: &dyn Filesystem, path: &str) -> String {
    String::from_utf8(fs.read(&p(path)).await.unwrap()).unwrap()
}

struct Overlay {
    _dir: tempfile::TempDir,
    upper: Arc<dyn Filesystem>,
    lower: Arc<dyn Filesystem>,
    fs: OverlayFs,
}

async fn overlay() -> Overlay {
    let dir = tempfile::tempdir().unwrap();
    let upper: Arc<dyn Filesystem> = Arc::new(
        LocalFs::new(dir.path())
            .unwrap()
            .with_shell(LocalShellConfig::default()),
    );
    let lower = kv(&InMemoryKv::default(), "template");
    put(&*lower, "AGENTS.md", "be kind\n").await;
    put(&*lower, "docs/guide.md", "step one\nstep two\n").await;
    put(&*lower, "docs/both.md", "lower version\n").await;
    put(&*upper, "docs/both.md", "upper version\n").await;
    put(&*upper, "docs/mine.md", "mine\n").await;
    let fs = OverlayFs::new(Arc::clone(&upper), Arc::clone(&lower));
    Overlay {
        _dir: dir,
        upper,
        lower,
        fs,
    }
}

#[tokio::test]
async fn overlay_reads_upper_then_lower_and_merges_listings_once() {
    let o = overlay().await;
    assert_eq!(text(&o.fs, "AGENTS.md").await, "be kind\n");
    assert_eq!(text(&o.fs, "docs/both.md").await, "upper version\n");
    // One path format: a file in both layers is listed once, with the upper copy's size.
    let listing = o.fs.list(&p("docs")).await.unwrap();
    assert_eq!(paths(&listing), ["docs/both.md", "docs/guide.md", "docs/mine.md"]);
    assert_eq!(listing[0].size, "upper version\n".len() as u64);
    assert_eq!(
        paths(&o.fs.glob(&WsPath::root(), "**/*.md", 100).await.unwrap()),
        ["AGENTS.md", "docs/both.md", "docs/guide.md", "docs/mine.md"]
    );
    // Lower matches in a shadowed file are hidden.
    let found = o.fs.grep(&p("docs"), &GrepOptions::literal("version")).await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].text, "upper version");
}

#[tokio::test]
async fn overlay_writes_go_up_and_edits_copy_lower_files_up() {
    let o = overlay().await;
    assert!(matches!(
        o.fs.write(&p("AGENTS.md"), b"x", WriteMode::CreateNew).await,
        Err(FsError::AlreadyExists { .. })
    ));
    let outcome =
        o.fs.edit(&p("docs/guide.md"), "step two", "step 2", false)
            .await
            .unwrap();
    assert_eq!(outcome.replacements, 1);
    assert_eq!(text(&o.fs, "docs/guide.md").await, "step one\nstep 2\n");
    assert_eq!(text(&*o.upper, "docs/guide.md").await, "step one\nstep 2\n");
    assert_eq!(
        text(&*o.lower, "docs/guide.md").await,
        "step one\nstep two\n",
        "the lower layer is never written"
    );
    // The shell runs in the upper layer and sees the edited copy.
    let shell = o.fs.shell().unwrap();
    let output = shell.execute(ShellRequest::new("cat docs/guide.md")).await.unwrap();
    assert_eq!(output.stdout, "step one\nstep 2\n");
    // Appending to a lower-only file copies it up first.
    o.fs.append(&p("AGENTS.md"), b"be brief\n").await.unwrap();
    assert_eq!(text(&o.fs, "AGENTS.md").await, "be kind\nbe brief\n");
    assert_eq!(text(&*o.lower, "AGENTS.md").await, "be kind\n");
}

#[tokio::test]
async fn overlay_copy_up_detects_a_changed_lower_file() {
    let o = overlay().await;
    let (_, version) = o.fs.read_versioned(&p("docs/guide.md")).await.unwrap();
    put(&*o.lower, "docs/guide.md", "changed by the operator\n").await;
    assert!(matches!(
        o.fs.write(&p("docs/guide.md"), b"stale edit", WriteMode::IfMatch(version))
            .await,
        Err(FsError::Conflict { .. })
    ));
}

#[tokio::test]
async fn overlay_deletes_only_upper_copies() {
    let o = overlay().await;
    o.fs.delete(&p("docs/mine.md")).await.unwrap();
    assert!(!o.fs.exists(&p("docs/mine.md")).await.unwrap());
    match o.fs.delete(&p("docs/both.md")).await {
        Err(err @ FsError::PermissionDenied { .. }) => assert!(err.to_string().contains("read-only base layer")),
        other => panic!("{other:?}"),
    }
    // The upper copy is gone; the base version shows through.
    assert_eq!(text(&o.fs, "docs/both.md").await, "lower version\n");
    assert!(matches!(
        o.fs.delete(&p("AGENTS.md")).await,
        Err(FsError::PermissionDenied { .. })
    ));
}

#[tokio::test]
async fn composite_routes_by_longest_prefix_on_segment_boundaries() {
    let store = InMemoryKv::default();
    let default = kv(&store, "default");
    let memory = kv(&store, "memory");
    let deep = kv(&store, "deep");
    let root_files = kv(&store, "root");
    let fs = CompositeFs::new(Arc::clone(&default))
        .mount(p("memory"), Arc::clone(&memory))
        .mount(p("memory/deep"), Arc::clone(&deep))
        .mount_file(p("MEMORY.md"), Arc::clone(&root_files));
    put(&fs, "memory/a.md", "a").await;
    put(&fs, "memory/deep/b.md", "b").await;
    put(&fs, "memoryx/c.md", "c").await;
    put(&fs, "MEMORY.md", "curated").await;
    assert_eq!(text(&*memory, "a.md").await, "a");
    assert_eq!(text(&*deep, "b.md").await, "b");
    assert_eq!(text(&*default, "memoryx/c.md").await, "c");
    assert_eq!(text(&*root_files, "MEMORY.md").await, "curated");
    // The same key layout in the store: one namespace per mount.
    let keys: Vec<String> = store
        .list("", None, 100)
        .await
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(
        keys,
        ["deep/b.md", "default/memoryx/c.md", "memory/a.md", "root/MEMORY.md"]
    );
    // Errors name the composite's paths.
    let err = fs.read(&p("memory/deep/none.md")).await.unwrap_err();
    assert_eq!(err.to_string(), "memory/deep/none.md: not found");
    // Listings above mounts merge them in.
    assert_eq!(
        paths(&fs.list(&WsPath::root()).await.unwrap()),
        ["MEMORY.md", "memory", "memoryx"]
    );
    assert_eq!(
        paths(&fs.list(&p("memory")).await.unwrap()),
        ["memory/a.md", "memory/deep"]
    );
    assert!(fs.stat(&p("memory")).await.unwrap().is_dir);
    assert_eq!(
        paths(&fs.glob(&WsPath::root(), "**/*.md", 100).await.unwrap()),
        ["MEMORY.md", "memory/a.md", "memory/deep/b.md", "memoryx/c.md"]
    );
    assert_eq!(
        paths(&fs.glob(&p("memory"), "*/*.md", 100).await.unwrap()),
        ["memory/deep/b.md"]
    );
    let found = fs.grep(&WsPath::root(), &GrepOptions::literal("b")).await.unwrap();
    assert_eq!(
        found.iter().map(|m| m.path.as_str()).collect::<Vec<_>>(),
        ["memory/deep/b.md"]
    );
    let by_path = GrepOptions {
        glob: Some("memory/**".to_owned()),
        ..GrepOptions::literal("a")
    };
    assert_eq!(fs.grep(&WsPath::root(), &by_path).await.unwrap().len(), 1);
}

#[tokio::test]
async fn composite_mounts_shadow_the_default_backend() {
    let store = InMemoryKv::default();
    let default = kv(&store, "default");
    put(&*default, "memory/stale.md", "old local copy").await;
    let fs = CompositeFs::new(Arc::clone(&default)).mount(p("memory"), kv(&store, "shared"));
    assert!(matches!(
        fs.read(&p("memory/stale.md")).await,
        Err(FsError::NotFound { .. })
    ));
    assert!(fs.glob(&WsPath::root(), "**", 10).await.unwrap().is_empty());
    assert!(
        fs.grep(&WsPath::root(), &GrepOptions::literal("old"))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(paths(&fs.list(&WsPath::root()).await.unwrap()), ["memory"]);
}

#[tokio::test]
async fn a_namespaced_composite_namespaces_every_mount() {
    let store = InMemoryKv::default();
    let fs: Arc<dyn Filesystem> =
        Arc::new(CompositeFs::new(kv(&store, "local")).mount(p("memory"), kv(&store, "shared")));
    let alice = Namespaced::new(Arc::clone(&fs), p("alice"));
    put(&alice, "memory/fact.md", "alice's fact").await;
    put(&alice, "notes.md", "alice's notes").await;
    let keys: Vec<String> = store
        .list("", None, 100)
        .await
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(keys, ["local/alice/notes.md", "shared/alice/fact.md"]);
    assert_eq!(
        paths(&alice.list(&WsPath::root()).await.unwrap()),
        ["memory", "notes.md"]
    );
}

#[tokio::test]
async fn kv_fs_keys_are_normalised_and_values_binary_exact() {
    let store = InMemoryKv::default();
    let fs = KvFs::new(Arc::new(store.clone()), p("fs/ns"));
    let bytes: Vec<u8> = (0..=255u8).rev().collect();
    fs.write(&p("/a//b/./c.bin"), &bytes, WriteMode::CreateNew)
        .await
        .unwrap();
    let item = store.get("fs/ns/a/b/c.bin").await.unwrap().unwrap();
    assert_eq!(item.value, bytes, "stored as raw bytes, not text");
    for form in ["a/b/c.bin", "/a/b/c.bin", "a/b//c.bin"] {
        assert!(fs.exists(&p(form)).await.unwrap(), "{form}");
    }
    fs.mkdir(&p("empty")).await.unwrap();
    assert!(
        store.get("fs/ns/empty/").await.unwrap().is_some(),
        "an explicit directory marker"
    );
    assert!(fs.stat(&p("empty")).await.unwrap().is_dir);
    fs.delete(&p("a")).await.unwrap();
    assert!(store.get("fs/ns/a/b/c.bin").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn create_only_writes_are_atomic_on_every_backend() {
    let dir = tempfile::tempdir().unwrap();
    let backends: Vec<Arc<dyn Filesystem>> = vec![
        Arc::new(LocalFs::new(dir.path()).unwrap()),
        kv(&InMemoryKv::default(), "x"),
    ];
    for fs in backends {
        let attempts = (0..16).map(|i| {
            let fs = Arc::clone(&fs);
            tokio::spawn(async move {
                fs.write(&p("race/once.txt"), format!("{i}").as_bytes(), WriteMode::CreateNew)
                    .await
            })
        });
        let results: Vec<_> = join_all(attempts).await.into_iter().map(Result::unwrap).collect();
        let won = results.iter().filter(|result| result.is_ok()).count();
        assert_eq!(won, 1, "{}: {results:?}", fs.describe());
        assert!(
            results
                .iter()
                .all(|result| matches!(result, Ok(()) | Err(FsError::AlreadyExists { .. })))
        );
    }
}

#[tokio::test]
async fn local_writes_are_atomic_renames_that_keep_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let fs = LocalFs::new(dir.path()).unwrap();
    fs.write(&p("run.sh"), b"#!/bin/sh\necho 1\n", WriteMode::CreateNew)
        .await
        .unwrap();
    std::fs::set_permissions(dir.path().join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    fs.edit(&p("run.sh"), "echo 1", "echo 2", false).await.unwrap();
    let mode = std::fs::metadata(dir.path().join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    // No temporary files are left behind.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["run.sh"]);
}

#[tokio::test]
async fn local_glob_and_grep_can_respect_gitignore() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(".gitignore"), "target/\n").unwrap();
    std::fs::create_dir_all(dir.path().join("target")).unwrap();
    std::fs::write(dir.path().join("target/gen.rs"), "needle").unwrap();
    std::fs::write(dir.path().join("lib.rs"), "needle").unwrap();
    let plain = LocalFs::new(dir.path()).unwrap();
    assert_eq!(plain.glob(&WsPath::root(), "**/*.rs", 10).await.unwrap().len(), 2);
    let aware = LocalFs::new(dir.path()).unwrap().respect_gitignore(true);
    assert_eq!(
        paths(&aware.glob(&WsPath::root(), "**/*.rs", 10).await.unwrap()),
        ["lib.rs"]
    );
    assert_eq!(
        aware
            .grep(&WsPath::root(), &GrepOptions::literal("needle"))
            .await
            .unwrap()
            .len(),
        1
    );
}
