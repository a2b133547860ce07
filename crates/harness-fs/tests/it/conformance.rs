//! One generic suite, run against every backend: LocalFs, LocalFs with a shell, KvFs in memory
//! and on Redis (`--features redis`), CompositeFs, OverlayFs and Namespaced views.
//!
//! Everything happens below `ws/`, so a backend may keep other things elsewhere (the composite
//! mounts `ws/docs` and the file `ws/README.md` on other backends).

use super::p;
use futures::future::join_all;
use harness_fs::{
    CompositeFs, FileInfo, Filesystem, FsError, GrepOptions, KvFs, LocalFs, LocalShellConfig, Namespaced, OverlayFs,
    ShellRequest, WriteMode, WsPath,
};
use harness_store::InMemoryKv;
use std::sync::Arc;

pub async fn run_all(fs: Arc<dyn Filesystem>) {
    write_modes(&*fs).await;
    errors_for_wrong_kinds(&*fs).await;
    append(&*fs).await;
    list_and_stat(&*fs).await;
    glob(&*fs).await;
    grep(&*fs).await;
    delete_and_mkdir(&*fs).await;
    read_text(&*fs).await;
    edit(&*fs).await;
    binary_unicode_and_large(&*fs).await;
    path_forms_are_one_file(&*fs).await;
    concurrent_cas_writers(Arc::clone(&fs)).await;
    concurrent_edits(Arc::clone(&fs)).await;
    shell_sees_the_files(&*fs).await;
    fs.delete(&p("ws")).await.unwrap();
    assert!(!fs.exists(&p("ws/a.txt")).await.unwrap());
}

fn names(infos: &[FileInfo]) -> Vec<String> {
    infos
        .iter()
        .map(|info| format!("{}{}", info.path, if info.is_dir { "/" } else { "" }))
        .collect()
}

async fn write_modes(fs: &dyn Filesystem) {
    let path = p("ws/a.txt");
    assert!(!fs.exists(&path).await.unwrap());
    fs.write(&path, b"one", WriteMode::CreateNew).await.unwrap();
    assert_eq!(fs.read(&path).await.unwrap(), b"one");
    match fs.write(&path, b"two", WriteMode::CreateNew).await {
        Err(err @ FsError::AlreadyExists { .. }) => assert!(err.to_string().contains("ws/a.txt: already exists")),
        other => panic!("create-only over an existing file: {other:?}"),
    }
    fs.write(&path, b"two", WriteMode::Overwrite).await.unwrap();
    let (bytes, version) = fs.read_versioned(&path).await.unwrap();
    assert_eq!(bytes, b"two");
    fs.write(&path, b"three", WriteMode::IfMatch(version.clone()))
        .await
        .unwrap();
    assert!(matches!(
        fs.write(&path, b"four", WriteMode::IfMatch(version)).await,
        Err(FsError::Conflict { .. })
    ));
    assert_eq!(fs.read(&path).await.unwrap(), b"three");
    // Parents are created; empty files exist.
    fs.write(&p("ws/deep/er/still/e.txt"), b"", WriteMode::CreateNew)
        .await
        .unwrap();
    assert_eq!(fs.read(&p("ws/deep/er/still/e.txt")).await.unwrap(), b"");
    assert!(fs.exists(&p("ws/deep/er")).await.unwrap());
}

async fn errors_for_wrong_kinds(fs: &dyn Filesystem) {
    assert!(matches!(
        fs.read(&p("ws/missing.txt")).await,
        Err(FsError::NotFound { .. })
    ));
    assert!(matches!(
        fs.stat(&p("ws/missing.txt")).await,
        Err(FsError::NotFound { .. })
    ));
    assert!(matches!(fs.read(&p("ws/deep")).await, Err(FsError::IsDirectory { .. })));
    assert!(matches!(
        fs.write(&p("ws/deep"), b"x", WriteMode::Overwrite).await,
        Err(FsError::IsDirectory { .. })
    ));
    match fs.write(&p("ws/a.txt/below"), b"x", WriteMode::Overwrite).await {
        Err(FsError::NotDirectory { .. }) => {}
        other => panic!("a file below a file: {other:?}"),
    }
    assert!(matches!(
        fs.list(&p("ws/a.txt")).await,
        Err(FsError::NotDirectory { .. })
    ));
    let message = fs.read(&p("ws/missing.txt")).await.unwrap_err().to_string();
    assert_eq!(message, "ws/missing.txt: not found");
}

async fn append(fs: &dyn Filesystem) {
    let path = p("ws/log/today.md");
    fs.append(&path, b"- one\n").await.unwrap();
    fs.append(&path, b"- two\n").await.unwrap();
    assert_eq!(fs.read(&path).await.unwrap(), b"- one\n- two\n");
    assert!(matches!(
        fs.append(&p("ws/log"), b"x").await,
        Err(FsError::IsDirectory { .. })
    ));
}

async fn list_and_stat(fs: &dyn Filesystem) {
    fs.write(&p("ws/docs/guide.md"), b"# Guide\n", WriteMode::Overwrite)
        .await
        .unwrap();
    fs.write(&p("ws/docs/api/ref.md"), b"ref\n", WriteMode::Overwrite)
        .await
        .unwrap();
    fs.write(&p("ws/README.md"), b"readme\n", WriteMode::Overwrite)
        .await
        .unwrap();
    let listing = fs.list(&p("ws")).await.unwrap();
    assert_eq!(
        names(&listing),
        ["ws/README.md", "ws/a.txt", "ws/deep/", "ws/docs/", "ws/log/"],
        "{listing:?}"
    );
    let readme = listing.iter().find(|info| info.path == p("ws/README.md")).unwrap();
    assert_eq!((readme.size, readme.is_dir), (7, false));
    assert_eq!(
        names(&fs.list(&p("ws/docs")).await.unwrap()),
        ["ws/docs/api/", "ws/docs/guide.md"]
    );
    assert!(fs.list(&p("ws/nothing")).await.unwrap().is_empty());
    let file = fs.stat(&p("ws/docs/guide.md")).await.unwrap();
    assert_eq!(
        (file.path.as_str(), file.is_dir, file.size),
        ("ws/docs/guide.md", false, 8)
    );
    let dir = fs.stat(&p("ws/docs")).await.unwrap();
    assert_eq!((dir.path.as_str(), dir.is_dir), ("ws/docs", true));
    assert!(fs.exists(&p("ws/docs")).await.unwrap());
    assert!(fs.exists(&p("ws/docs/api/ref.md")).await.unwrap());
    assert!(!fs.exists(&p("ws/docs/api/nope.md")).await.unwrap());
}

async fn glob(fs: &dyn Filesystem) {
    let all_md = fs.glob(&p("ws"), "**/*.md", 100).await.unwrap();
    assert_eq!(
        names(&all_md),
        [
            "ws/README.md",
            "ws/docs/api/ref.md",
            "ws/docs/guide.md",
            "ws/log/today.md"
        ]
    );
    assert!(all_md.iter().all(|info| !info.is_dir && info.size > 0));
    assert_eq!(names(&fs.glob(&p("ws"), "*.md", 100).await.unwrap()), ["ws/README.md"]);
    assert_eq!(
        names(&fs.glob(&p("ws/docs"), "*.md", 100).await.unwrap()),
        ["ws/docs/guide.md"]
    );
    assert_eq!(
        names(&fs.glob(&p("ws"), "docs/**/{guide,ref}.md", 100).await.unwrap()),
        ["ws/docs/api/ref.md", "ws/docs/guide.md"]
    );
    assert_eq!(names(&fs.glob(&p("ws"), "/*.tx?", 100).await.unwrap()), ["ws/a.txt"]);
    assert_eq!(fs.glob(&p("ws"), "**/*.md", 2).await.unwrap().len(), 2);
    assert!(fs.glob(&p("ws/nothing"), "**", 10).await.unwrap().is_empty());
    assert!(matches!(
        fs.glob(&p("ws/a.txt"), "**", 10).await,
        Err(FsError::NotDirectory { .. })
    ));
    assert!(matches!(
        fs.glob(&p("ws"), "[", 10).await,
        Err(FsError::InvalidArgument { .. })
    ));
}

async fn grep(fs: &dyn Filesystem) {
    fs.write(
        &p("ws/src/lib.rs"),
        b"fn a() {}\nlet x = a.b(1);\nfn b() {}\nA.B(2)\n",
        WriteMode::Overwrite,
    )
    .await
    .unwrap();
    fs.write(&p("ws/src/data.bin"), b"a.b(\0binary", WriteMode::Overwrite)
        .await
        .unwrap();
    // Literal by default: regex metacharacters are plain text.
    let found = fs.grep(&p("ws"), &GrepOptions::literal("a.b(")).await.unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        (found[0].path.as_str(), found[0].line, found[0].text.as_str()),
        ("ws/src/lib.rs", 2, "let x = a.b(1);")
    );
    let regex = GrepOptions {
        literal: false,
        ..GrepOptions::literal(r"^fn \w\(")
    };
    let lines: Vec<usize> = fs
        .grep(&p("ws"), &regex)
        .await
        .unwrap()
        .iter()
        .map(|m| m.line)
        .collect();
    assert_eq!(lines, [1, 3]);
    let insensitive = GrepOptions {
        case_insensitive: true,
        ..GrepOptions::literal("a.b(")
    };
    assert_eq!(fs.grep(&p("ws/src"), &insensitive).await.unwrap().len(), 2);
    // Context lines.
    let with_context = GrepOptions {
        context: 1,
        ..GrepOptions::literal("let x")
    };
    let found = fs.grep(&p("ws/src"), &with_context).await.unwrap();
    assert_eq!(
        (found[0].before.clone(), found[0].after.clone()),
        (vec!["fn a() {}".to_owned()], vec!["fn b() {}".to_owned()])
    );
    // Glob by file name, and by path relative to the base.
    let by_name = GrepOptions {
        glob: Some("*.md".to_owned()),
        ..GrepOptions::literal("e")
    };
    let paths: Vec<String> = fs
        .grep(&p("ws"), &by_name)
        .await
        .unwrap()
        .iter()
        .map(|m| m.path.to_string())
        .collect();
    assert_eq!(
        paths,
        [
            "ws/README.md",
            "ws/docs/api/ref.md",
            "ws/docs/guide.md",
            "ws/log/today.md"
        ]
    );
    let by_path = GrepOptions {
        glob: Some("docs/**".to_owned()),
        ..GrepOptions::literal("e")
    };
    assert_eq!(fs.grep(&p("ws"), &by_path).await.unwrap().len(), 2);
    // The cap.
    let capped = GrepOptions {
        max_matches: 3,
        ..GrepOptions::literal("e")
    };
    assert_eq!(fs.grep(&p("ws"), &capped).await.unwrap().len(), 3);
    // A file as the base.
    assert_eq!(
        fs.grep(&p("ws/src/lib.rs"), &GrepOptions::literal("fn"))
            .await
            .unwrap()
            .len(),
        2
    );
    assert!(
        fs.grep(&p("ws/none"), &GrepOptions::literal("x"))
            .await
            .unwrap()
            .is_empty()
    );
    let bad = GrepOptions {
        literal: false,
        ..GrepOptions::literal("(")
    };
    assert!(matches!(
        fs.grep(&p("ws"), &bad).await,
        Err(FsError::InvalidArgument { .. })
    ));
}

async fn delete_and_mkdir(fs: &dyn Filesystem) {
    fs.mkdir(&p("ws/empty/nested")).await.unwrap();
    assert!(fs.stat(&p("ws/empty/nested")).await.unwrap().is_dir);
    assert_eq!(names(&fs.list(&p("ws/empty")).await.unwrap()), ["ws/empty/nested/"]);
    fs.mkdir(&p("ws/empty/nested")).await.unwrap(); // again: fine
    assert!(matches!(
        fs.mkdir(&p("ws/a.txt")).await,
        Err(FsError::NotDirectory { .. })
    ));
    assert!(matches!(
        fs.mkdir(&p("ws/a.txt/sub")).await,
        Err(FsError::NotDirectory { .. })
    ));
    fs.delete(&p("ws/empty")).await.unwrap();
    assert!(!fs.exists(&p("ws/empty")).await.unwrap());
    fs.write(&p("ws/tmp/x/1"), b"1", WriteMode::Overwrite).await.unwrap();
    fs.write(&p("ws/tmp/2"), b"2", WriteMode::Overwrite).await.unwrap();
    fs.delete(&p("ws/tmp/2")).await.unwrap();
    assert!(!fs.exists(&p("ws/tmp/2")).await.unwrap());
    fs.delete(&p("ws/tmp")).await.unwrap();
    assert!(!fs.exists(&p("ws/tmp/x/1")).await.unwrap());
    fs.delete(&p("ws/tmp")).await.unwrap(); // nothing there: fine
    assert!(matches!(
        fs.delete(&WsPath::root()).await,
        Err(FsError::PermissionDenied { .. })
    ));
}

async fn read_text(fs: &dyn Filesystem) {
    let text: String = (1..=10).map(|i| format!("line {i}\r\n")).collect();
    fs.write(&p("ws/lines.txt"), text.as_bytes(), WriteMode::Overwrite)
        .await
        .unwrap();
    let page = fs.read_text(&p("ws/lines.txt"), 2, 3).await.unwrap();
    assert_eq!(
        (page.lines.clone(), page.offset, page.total_lines),
        (
            vec!["line 3".to_owned(), "line 4".to_owned(), "line 5".to_owned()],
            2,
            10
        )
    );
    assert!(page.has_more());
    let tail = fs.read_text(&p("ws/lines.txt"), 8, 100).await.unwrap();
    assert_eq!((tail.lines.len(), tail.has_more()), (2, false));
    assert!(fs.read_text(&p("ws/lines.txt"), 50, 10).await.unwrap().lines.is_empty());
    assert!(matches!(
        fs.read_text(&p("ws/src/data.bin"), 0, 10).await,
        Err(FsError::Binary { .. })
    ));
    assert!(matches!(
        fs.read_text(&p("ws/nope"), 0, 10).await,
        Err(FsError::NotFound { .. })
    ));
}

async fn edit(fs: &dyn Filesystem) {
    let path = p("ws/edit.py");
    fs.write(
        &path,
        b"def f():\n    return 1\n\ndef g():\n    return 1\n",
        WriteMode::Overwrite,
    )
    .await
    .unwrap();
    match fs.edit(&path, "return 1", "return 2", false).await {
        Err(err @ FsError::NotUnique { .. }) => {
            let FsError::NotUnique { count, ref lines, .. } = err else {
                unreachable!()
            };
            assert_eq!((count, lines.clone()), (2, vec![2, 5]));
            assert!(err.to_string().contains("replace_all"), "{err}");
        }
        other => panic!("{other:?}"),
    }
    let outcome = fs
        .edit(&path, "def g():\n    return 1", "def g():\n    return 3", false)
        .await
        .unwrap();
    assert_eq!(
        (outcome.replacements, outcome.line, outcome.fuzzy.clone()),
        (1, 4, None)
    );
    let outcome = fs.edit(&path, "return 1", "return 0", true).await.unwrap();
    assert_eq!(outcome.replacements, 1);
    // Indentation differs: a tolerant match that says what it did.
    let outcome = fs
        .edit(&path, "def f():\n  return 0", "def f():\n  return -1", false)
        .await
        .unwrap();
    assert!(outcome.fuzzy.is_some());
    assert_eq!(
        String::from_utf8(fs.read(&path).await.unwrap()).unwrap(),
        "def f():\n    return -1\n\ndef g():\n    return 3\n"
    );
    assert!(matches!(
        fs.edit(&path, "nothing like it", "x", false).await,
        Err(FsError::NoMatch { .. })
    ));
    assert!(matches!(
        fs.edit(&path, "", "x", false).await,
        Err(FsError::InvalidArgument { .. })
    ));
    assert!(matches!(
        fs.edit(&p("ws/none.py"), "a", "b", false).await,
        Err(FsError::NotFound { .. })
    ));
    assert!(matches!(
        fs.edit(&p("ws/src/data.bin"), "a", "b", false).await,
        Err(FsError::Binary { .. })
    ));
}

async fn binary_unicode_and_large(fs: &dyn Filesystem) {
    let all: Vec<u8> = (0..=255u8).collect();
    fs.write(&p("ws/bin/all.dat"), &all, WriteMode::CreateNew)
        .await
        .unwrap();
    assert_eq!(fs.read(&p("ws/bin/all.dat")).await.unwrap(), all);
    fs.append(&p("ws/bin/all.dat"), &all).await.unwrap();
    assert_eq!(
        fs.read(&p("ws/bin/all.dat")).await.unwrap(),
        [all.clone(), all.clone()].concat()
    );
    let unicode = p("ws/日本語/ファイル 😀 ñ.md");
    fs.write(&unicode, "内容 ✓".as_bytes(), WriteMode::CreateNew)
        .await
        .unwrap();
    assert_eq!(fs.read(&unicode).await.unwrap(), "内容 ✓".as_bytes());
    assert_eq!(
        names(&fs.list(&p("ws/日本語")).await.unwrap()),
        ["ws/日本語/ファイル 😀 ñ.md"]
    );
    assert_eq!(
        fs.grep(&p("ws/日本語"), &GrepOptions::literal("✓")).await.unwrap()[0].path,
        unicode
    );
    // 6 MiB of text: byte-exact round trip, paging from the end, grep at the end.
    let mut large = Vec::with_capacity(6 * 1024 * 1024 + 64);
    let mut line = 0;
    while large.len() < 6 * 1024 * 1024 {
        line += 1;
        large.extend_from_slice(format!("{line:08} the quick brown fox\n").as_bytes());
    }
    large.extend_from_slice(b"needle at the end\n");
    fs.write(&p("ws/large.txt"), &large, WriteMode::CreateNew)
        .await
        .unwrap();
    assert_eq!(fs.read(&p("ws/large.txt")).await.unwrap(), large);
    assert_eq!(fs.stat(&p("ws/large.txt")).await.unwrap().size, large.len() as u64);
    let last = fs.read_text(&p("ws/large.txt"), line, 10).await.unwrap();
    assert_eq!(
        (last.lines.clone(), last.total_lines),
        (vec!["needle at the end".to_owned()], line + 1)
    );
    let found = fs
        .grep(&p("ws/large.txt"), &GrepOptions::literal("needle"))
        .await
        .unwrap();
    assert_eq!(found[0].line, line + 1);
    fs.delete(&p("ws/large.txt")).await.unwrap();
}

async fn path_forms_are_one_file(fs: &dyn Filesystem) {
    fs.write(&p("/ws/forms//x.txt"), b"1", WriteMode::CreateNew)
        .await
        .unwrap();
    for form in [
        "ws/forms/x.txt",
        "/ws/forms/x.txt",
        "./ws/./forms/x.txt",
        "ws//forms///x.txt",
    ] {
        assert_eq!(fs.read(&p(form)).await.unwrap(), b"1", "{form}");
    }
    assert_eq!(names(&fs.list(&p("/ws/forms/")).await.unwrap()), ["ws/forms/x.txt"]);
    fs.delete(&p("/ws/forms/x.txt")).await.unwrap();
    assert!(!fs.exists(&p("ws/forms/x.txt")).await.unwrap());
}

async fn concurrent_cas_writers(fs: Arc<dyn Filesystem>) {
    const TASKS: usize = 8;
    const EACH: usize = 10;
    let path = p("ws/counter");
    fs.write(&path, b"0", WriteMode::Overwrite).await.unwrap();
    let tasks = (0..TASKS).map(|_| {
        let fs = Arc::clone(&fs);
        let path = path.clone();
        tokio::spawn(async move {
            let mut done = 0;
            let mut conflicts = 0;
            while done < EACH {
                let (bytes, version) = fs.read_versioned(&path).await.unwrap();
                let n: usize = String::from_utf8(bytes).unwrap().parse().unwrap();
                match fs
                    .write(&path, (n + 1).to_string().as_bytes(), WriteMode::IfMatch(version))
                    .await
                {
                    Ok(()) => done += 1,
                    Err(FsError::Conflict { .. }) => conflicts += 1,
                    Err(other) => panic!("{other}"),
                }
                tokio::task::yield_now().await;
            }
            conflicts
        })
    });
    let _conflicts: usize = join_all(tasks).await.into_iter().map(Result::unwrap).sum();
    assert_eq!(fs.read(&path).await.unwrap(), (TASKS * EACH).to_string().as_bytes());
}

async fn concurrent_edits(fs: Arc<dyn Filesystem>) {
    const TASKS: usize = 4;
    let path = p("ws/slots.txt");
    let text: String = (0..TASKS).map(|i| format!("slot {i} open\n")).collect();
    fs.write(&path, text.as_bytes(), WriteMode::Overwrite).await.unwrap();
    let tasks = (0..TASKS).map(|i| {
        let fs = Arc::clone(&fs);
        let path = path.clone();
        tokio::spawn(async move {
            fs.edit(&path, &format!("slot {i} open"), &format!("slot {i} done"), false)
                .await
        })
    });
    for result in join_all(tasks).await {
        result.unwrap().unwrap();
    }
    let expected: String = (0..TASKS).map(|i| format!("slot {i} done\n")).collect();
    assert_eq!(String::from_utf8(fs.read(&path).await.unwrap()).unwrap(), expected);
}

async fn shell_sees_the_files(fs: &dyn Filesystem) {
    let Some(shell) = fs.shell() else { return };
    fs.write(&p("ws/sh/in.txt"), b"from fs\n", WriteMode::Overwrite)
        .await
        .unwrap();
    let output = shell
        .execute(ShellRequest::new("cat in.txt && printf 'from shell' > out.txt").cwd(p("ws/sh")))
        .await
        .unwrap();
    assert_eq!(
        (output.stdout.as_str(), output.exit_code),
        ("from fs\n", Some(0)),
        "{output:?}"
    );
    assert_eq!(fs.read(&p("ws/sh/out.txt")).await.unwrap(), b"from shell");
}

// ---- backends ----

fn local(dir: &tempfile::TempDir) -> Arc<dyn Filesystem> {
    Arc::new(LocalFs::new(dir.path().join("root")).unwrap())
}

fn memory_kv(namespace: &str) -> Arc<dyn Filesystem> {
    Arc::new(KvFs::new(Arc::new(InMemoryKv::default()), p(namespace)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_fs_conforms() {
    let dir = tempfile::tempdir().unwrap();
    run_all(local(&dir)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_fs_with_shell_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let fs = LocalFs::new(dir.path())
        .unwrap()
        .with_shell(LocalShellConfig::default());
    assert!(fs.shell().is_some());
    run_all(Arc::new(fs)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kv_fs_in_memory_conforms() {
    run_all(memory_kv("")).await;
    run_all(memory_kv("fs/agents/main")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn composite_fs_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let fs = CompositeFs::new(memory_kv("default"))
        .mount(p("ws/docs"), local(&dir))
        .mount(p("ws/log"), memory_kv("logs"))
        .mount_file(p("ws/README.md"), memory_kv("root"));
    run_all(Arc::new(fs)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlay_fs_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let lower = memory_kv("template");
    lower
        .write(&p("elsewhere/base.md"), b"from the lower layer", WriteMode::CreateNew)
        .await
        .unwrap();
    let fs = Arc::new(OverlayFs::new(local(&dir), lower));
    run_all(Arc::clone(&fs) as Arc<dyn Filesystem>).await;
    assert_eq!(fs.read(&p("elsewhere/base.md")).await.unwrap(), b"from the lower layer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn namespaced_views_conform() {
    let dir = tempfile::tempdir().unwrap();
    let local_with_shell: Arc<dyn Filesystem> = Arc::new(
        LocalFs::new(dir.path())
            .unwrap()
            .with_shell(LocalShellConfig::default()),
    );
    run_all(Arc::new(Namespaced::new(
        Arc::clone(&local_with_shell),
        p("users/alice"),
    )))
    .await;
    run_all(Arc::new(Namespaced::new(memory_kv("kv"), p("users/bob")))).await;
    let composite: Arc<dyn Filesystem> =
        Arc::new(CompositeFs::new(local(&dir)).mount(p("ws/docs"), memory_kv("shared-docs")));
    run_all(Arc::new(Namespaced::new(composite, p("carol")))).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kv_fs_on_redis_conforms() {
    use harness_store::{KvStore, RedisKv, RedisKvConfig};
    let url = harness_test_support::services::redis_url();
    let config = RedisKvConfig {
        url: url.clone(),
        key_prefix: harness_test_support::services::redis_prefix("fs"),
        ..RedisKvConfig::default()
    };
    let store = match RedisKv::connect(&config).await {
        Ok(store) => store,
        Err(err) => panic!(
            "the Redis conformance run needs a Redis server at {url} (set HARNESS_TEST_REDIS_URL); connecting failed: {}",
            harness_core::error_chain(&err)
        ),
    };
    let kv: Arc<dyn KvStore> = Arc::new(store.clone());
    let suite = async {
        run_all(Arc::new(KvFs::new(Arc::clone(&kv), p("fs/agents/main/users/alice")))).await;
        // A composite with Redis-backed shared prefixes, as in a multi-replica deployment.
        let dir = tempfile::tempdir().unwrap();
        let composite = CompositeFs::new(local(&dir))
            .mount(p("ws/log"), Arc::new(KvFs::new(Arc::clone(&kv), p("memory"))))
            .mount_file(p("ws/README.md"), Arc::new(KvFs::new(Arc::clone(&kv), p("root"))));
        run_all(Arc::new(composite)).await;
    };
    // Clean the server up whether the suite passes or not.
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(suite)).await;
    store.purge().await.unwrap();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kv_fs_on_postgres_conforms() {
    use harness_store::{KvStore, PostgresBackend, PostgresConfig, PostgresKv};
    let url = harness_test_support::services::postgres_url();
    let config = PostgresConfig {
        url: url.clone(),
        table_prefix: harness_test_support::services::pg_prefix("fs"),
        ..PostgresConfig::default()
    };
    let backend = match PostgresBackend::connect(&config).await {
        Ok(backend) => backend,
        Err(err) => panic!(
            "the PostgreSQL conformance run needs PostgreSQL at {url} (set HARNESS_TEST_POSTGRES_URL); connecting failed: {}",
            harness_core::error_chain(&err)
        ),
    };
    let kv: Arc<dyn KvStore> = Arc::new(PostgresKv::new(backend.clone(), "fs:"));
    let suite = async {
        run_all(Arc::new(KvFs::new(Arc::clone(&kv), p("fs/agents/main/users/alice")))).await;
        // A composite with PostgreSQL-backed shared prefixes, as in a multi-replica deployment.
        let dir = tempfile::tempdir().unwrap();
        let composite = CompositeFs::new(local(&dir))
            .mount(p("ws/log"), Arc::new(KvFs::new(Arc::clone(&kv), p("memory"))))
            .mount_file(p("ws/README.md"), Arc::new(KvFs::new(Arc::clone(&kv), p("root"))));
        run_all(Arc::new(composite)).await;
    };
    // Drop the tables whether the suite passes or not.
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(suite)).await;
    backend.drop_all().await.unwrap();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
