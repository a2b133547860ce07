//! The format's round trips: pack, unpack, and the restored tree's manifest is the original's.

use crate::support::{chmod, pack_delta, pack_full, plan_for, unpack_ok, view_of, write};
use harness_snapshot::{EntryKind, TreeView};
use proptest::prelude::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

fn sample_tree(root: &Path) {
    write(root, "src/main.rs", b"fn main() {}\n");
    write(root, "bin/run.sh", b"#!/bin/sh\necho hi\n");
    chmod(root, "bin/run.sh", 0o755);
    write(root, "readonly.txt", b"keep");
    chmod(root, "readonly.txt", 0o444);
    std::fs::create_dir_all(root.join("empty/nested")).unwrap_or_else(|e| panic!("{e}"));
    write(root, "ünïcødé/日本語.txt", "こんにちは".as_bytes());
    let long = "d".repeat(120);
    write(root, &format!("{long}/{long}/{}.txt", "f".repeat(200)), b"long names");
    std::os::unix::fs::symlink("python3", root.join("bin/python")).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink("../../outside/nowhere", root.join("dangling")).unwrap_or_else(|e| panic!("{e}"));
    let long_target = format!("{}/{}", "t".repeat(150), "u".repeat(150));
    std::os::unix::fs::symlink(&long_target, root.join("long-link")).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink("/.", root.join("odd-link")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::hard_link(root.join("src/main.rs"), root.join("src/alias.rs")).unwrap_or_else(|e| panic!("{e}"));
    write(root, "big.bin", &vec![7u8; 3 << 20]);
}

#[test]
fn round_trip_gives_an_identical_manifest() {
    let source = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    sample_tree(source.path());
    let (manifest, archive) = pack_full(source.path(), "one");
    assert_eq!(manifest.format, "harness-snapshot/1");
    assert_eq!(manifest.archive.bytes, archive.len() as u64);
    let target = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let report = unpack_ok(&archive, target.path(), &plan_for(&manifest));
    assert_eq!(report.refused, 0, "{report:?}");
    assert_eq!(report.entries, manifest.archive.entries);
    assert_eq!(
        view_of(target.path()).comparable(),
        TreeView::of(&manifest).comparable()
    );
    // Symlinks are kept verbatim, never resolved; hardlinks stay one file.
    assert_eq!(
        std::fs::read_link(target.path().join("dangling")).unwrap_or_else(|e| panic!("{e}")),
        Path::new("../../outside/nowhere")
    );
    assert_eq!(
        std::fs::read_link(target.path().join("long-link")).unwrap_or_else(|e| panic!("{e}")),
        Path::new(&format!("{}/{}", "t".repeat(150), "u".repeat(150)))
    );
    assert_eq!(
        std::fs::read_link(target.path().join("odd-link")).unwrap_or_else(|e| panic!("{e}")),
        Path::new("/.")
    );
    let a = std::fs::metadata(target.path().join("src/main.rs")).unwrap_or_else(|e| panic!("{e}"));
    let b = std::fs::metadata(target.path().join("src/alias.rs")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(a.ino(), b.ino());
    assert!(target.path().join("empty/nested").is_dir());
    let mode = std::fs::metadata(target.path().join("bin/run.sh")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(mode.permissions().mode() & 0o7777, 0o755);
}

#[test]
fn setuid_bits_devices_fifos_and_sockets_are_never_archived() {
    let source = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    write(source.path(), "suid", b"x");
    chmod(source.path(), "suid", 0o6755);
    rustix::fs::mknodat(
        rustix::fs::CWD,
        source.path().join("fifo").as_path(),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let _socket = std::os::unix::net::UnixListener::bind(source.path().join("sock")).unwrap_or_else(|e| panic!("{e}"));
    let (manifest, archive) = pack_full(source.path(), "one");
    let paths: Vec<&str> = manifest.entries.iter().map(|entry| entry.path.as_str()).collect();
    assert_eq!(paths, ["suid"]);
    assert_eq!(manifest.entries[0].mode, 0o755);
    let target = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    unpack_ok(&archive, target.path(), &plan_for(&manifest));
    let mode = std::fs::metadata(target.path().join("suid")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(mode.permissions().mode() & 0o7777, 0o755);
}

#[test]
fn default_excludes_skip_caches_and_temporary_files() {
    let source = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    write(source.path(), ".tmp/scratch", b"x");
    write(source.path(), ".cache/pip/wheel", b"x");
    write(source.path(), "app/node_modules/.cache/babel", b"x");
    write(source.path(), "app/node_modules/left-pad/index.js", b"x");
    write(source.path(), "pkg/__pycache__/mod.pyc", b"x");
    write(source.path(), "pkg/mod.py", b"x");
    write(source.path(), "deep/.tmp/kept", b"x");
    let (manifest, _) = pack_full(source.path(), "one");
    let files: Vec<&str> = manifest
        .entries
        .iter()
        .filter(|entry| entry.kind == EntryKind::File)
        .map(|entry| entry.path.as_str())
        .collect();
    assert_eq!(
        files,
        ["app/node_modules/left-pad/index.js", "deep/.tmp/kept", "pkg/mod.py"]
    );
}

#[test]
fn delta_then_full_equals_full() {
    let source = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    sample_tree(source.path());
    let (base, base_archive) = pack_full(source.path(), "base");
    let base_view = TreeView::of(&base);
    // Change one file, delete a tree, replace a file by a directory, add a symlink.
    std::thread::sleep(std::time::Duration::from_millis(20));
    write(source.path(), "src/main.rs", b"fn main() { println!(\"changed\"); }\n");
    std::fs::remove_dir_all(source.path().join("empty")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::remove_file(source.path().join("readonly.txt")).unwrap_or_else(|e| panic!("{e}"));
    write(source.path(), "readonly.txt/inner", b"now a dir");
    std::os::unix::fs::symlink("src", source.path().join("link")).unwrap_or_else(|e| panic!("{e}"));
    let (delta, delta_archive) = pack_delta(source.path(), "delta", &base, &base_view);
    assert_eq!(delta.base.as_deref(), Some("base"));
    assert!(delta.deleted.contains(&"empty".to_owned()), "{:?}", delta.deleted);
    assert!(
        !delta.entries.iter().any(|entry| entry.path == "big.bin"),
        "unchanged files stay out"
    );
    assert!(delta.archive.uncompressed < base.archive.uncompressed / 4);
    let (full, _) = pack_full(source.path(), "full");
    let mut chain = base_view.clone();
    chain.apply(&delta);
    assert_eq!(chain.comparable(), TreeView::of(&full).comparable());
    // And restoring base + delta on disk gives the same tree.
    let target = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    unpack_ok(&base_archive, target.path(), &plan_for(&base));
    unpack_ok(&delta_archive, target.path(), &plan_for(&delta));
    assert_eq!(view_of(target.path()).comparable(), TreeView::of(&full).comparable());
}

#[test]
fn a_delta_of_a_restored_unchanged_tree_is_empty() {
    let source = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    sample_tree(source.path());
    let (base, archive) = pack_full(source.path(), "base");
    // A restored tree has other inodes and whole-second mtimes: nothing is re-archived.
    let restored = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    unpack_ok(&archive, restored.path(), &plan_for(&base));
    let (delta, _) = pack_delta(restored.path(), "delta", &base, &TreeView::of(&base));
    assert!(delta.entries.is_empty() && delta.deleted.is_empty(), "{delta:?}");
}

#[derive(Debug, Clone)]
enum Node {
    File(Vec<u8>, bool),
    Dir,
    Link(String),
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,8}",
        "[a-zA-Z0-9 ._-]{1,30}".prop_filter("plain", |n| n != "." && n != ".."),
        "[αβγδ日本é]{1,6}",
        Just("x".repeat(200)),
    ]
}

fn tree() -> impl Strategy<Value = Vec<(Vec<String>, Node)>> {
    let node = prop_oneof![
        (proptest::collection::vec(any::<u8>(), 0..2000), any::<bool>())
            .prop_map(|(data, exec)| Node::File(data, exec)),
        Just(Node::Dir),
        "[a-z./]{1,20}".prop_map(Node::Link),
    ];
    proptest::collection::vec((proptest::collection::vec(name(), 1..4), node), 1..25)
}

fn materialise(root: &Path, nodes: &[(Vec<String>, Node)]) {
    for (parts, node) in nodes {
        let rel = parts.join("/");
        let path = root.join(&rel);
        // Skip a node whose parent is already a file or link.
        if path
            .ancestors()
            .skip(1)
            .take_while(|ancestor| *ancestor != root)
            .any(|ancestor| ancestor.symlink_metadata().is_ok_and(|meta| !meta.is_dir()))
            || path.symlink_metadata().is_ok()
        {
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{e}"));
        }
        match node {
            Node::File(data, exec) => {
                std::fs::write(&path, data).unwrap_or_else(|e| panic!("{e}"));
                if *exec {
                    chmod(root, &rel, 0o750);
                }
            }
            Node::Dir => std::fs::create_dir_all(&path).unwrap_or_else(|e| panic!("{e}")),
            Node::Link(target) => std::os::unix::fs::symlink(target, &path).unwrap_or_else(|e| panic!("{e}")),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn random_trees_round_trip(nodes in tree()) {
        let source = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        materialise(source.path(), &nodes);
        let (manifest, archive) = pack_full(source.path(), "p");
        let target = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let report = unpack_ok(&archive, target.path(), &plan_for(&manifest));
        prop_assert_eq!(report.refused, 0);
        prop_assert_eq!(view_of(target.path()).comparable(), TreeView::of(&manifest).comparable());
    }

    #[test]
    fn random_changes_as_a_delta_equal_a_full_snapshot(before in tree(), after in tree(), drop_first in any::<bool>()) {
        let source = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        materialise(source.path(), &before);
        let (base, base_archive) = pack_full(source.path(), "base");
        if drop_first
            && let Some((parts, _)) = before.first()
        {
            let top = source.path().join(&parts[0]);
            if top.symlink_metadata().is_ok_and(|meta| meta.is_dir()) {
                std::fs::remove_dir_all(&top).unwrap_or_else(|e| panic!("{e}"));
            } else {
                let _ = std::fs::remove_file(&top);
            }
        }
        materialise(source.path(), &after);
        let (delta, delta_archive) = pack_delta(source.path(), "delta", &base, &TreeView::of(&base));
        let (full, _) = pack_full(source.path(), "full");
        let mut chain = TreeView::of(&base);
        chain.apply(&delta);
        prop_assert_eq!(chain.comparable(), TreeView::of(&full).comparable());
        let target = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        unpack_ok(&base_archive, target.path(), &plan_for(&base));
        unpack_ok(&delta_archive, target.path(), &plan_for(&delta));
        prop_assert_eq!(view_of(target.path()).comparable(), TreeView::of(&full).comparable());
    }
}
