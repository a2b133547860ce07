//! Issue 9, problem 6: "`LocalFs` compare-and-set (`IfMatch`) holds only inside one process,
//! yet `sessions.json` and MEMORY.md consolidation rely on it across processes."
//!
//! Several writers increment one counter file with read → `IfMatch` write → retry on
//! conflict. Every successful write must count: a lost update means two writers both won a
//! compare-and-set against the same version.

use crate::p;
use harness_fs::{Filesystem, FsError, LocalFs, WriteMode};
use std::path::Path;

/// Set (to the root directory) in the child processes the parent test spawns.
const CHILD_ROOT: &str = "HARNESS_FS_CAS_CHILD_ROOT";
const INCREMENTS: u64 = 150;

/// Increments the counter `INCREMENTS` times through its own `LocalFs` on `root`.
async fn increment(root: &Path) {
    let fs = LocalFs::new(root).unwrap().fsync(false);
    let path = p("counter.txt");
    for _ in 0..INCREMENTS {
        loop {
            let (bytes, version) = fs.read_versioned(&path).await.unwrap();
            let n: u64 = String::from_utf8(bytes).unwrap().trim().parse().unwrap();
            match fs
                .write(&path, (n + 1).to_string().as_bytes(), WriteMode::IfMatch(version))
                .await
            {
                Ok(()) => break,
                Err(FsError::Conflict { .. }) => continue,
                Err(other) => panic!("{other}"),
            }
        }
    }
}

/// The child side of `compare_and_set_holds_across_processes`: does nothing unless spawned
/// by it.
#[tokio::test]
async fn cas_child_process() {
    // Test-only configuration of the spawned child; the library reads no environment.
    if let Some(root) = std::env::var_os(CHILD_ROOT) {
        increment(Path::new(&root)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_and_set_holds_across_processes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("counter.txt"), "0").unwrap();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..2)
        .map(|_| {
            std::process::Command::new(&exe)
                .args(["--exact", "cross_process_cas::cas_child_process", "--test-threads=1"])
                .env(CHILD_ROOT, dir.path())
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    // And two more writers in this process, each with its own LocalFs (own in-process locks).
    let local: Vec<_> = (0..2)
        .map(|_| {
            let root = dir.path().to_path_buf();
            tokio::spawn(async move { increment(&root).await })
        })
        .collect();
    for task in local {
        task.await.unwrap();
    }
    for mut child in children {
        let status = tokio::task::spawn_blocking(move || child.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(status.success(), "a child writer failed: {status}");
    }
    let total: u64 = std::fs::read_to_string(dir.path().join("counter.txt"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(total, 4 * INCREMENTS, "every compare-and-set that succeeded must count");
    // No lock files were left beside the counter.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("counter.txt")]);
}
