//! Persist, fetch, restore through [`Snapshots`]: heads, fences, chains, retention, crashes,
//! S3.

use crate::support::{local_snapshots, unpack_ok, view_of, write};
#[cfg(feature = "s3")]
use harness_snapshot::{BlobStore, Heads, StoreConfig};
use harness_snapshot::{Persisted, SnapshotOptions, Snapshots, TreeView, WriterFence, unpack};
use harness_store::{InMemoryKv, KvStore};
use std::path::Path;
use std::sync::Arc;

fn memory() -> Arc<dyn KvStore> {
    Arc::new(InMemoryKv::default())
}

fn written(persisted: Persisted) -> harness_snapshot::Manifest {
    match persisted {
        Persisted::Written { manifest, .. } => *manifest,
        Persisted::Unchanged => panic!("expected a new snapshot"),
    }
}

async fn restore_into(snapshots: &Snapshots, scope: &str, root: &Path) -> TreeView {
    let restore = snapshots
        .fetch(scope)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("no head"));
    for layer in &restore.layers {
        let archive = std::fs::read(&layer.archive).unwrap_or_else(|e| panic!("{e}"));
        unpack_ok(&archive, root, &layer.plan);
    }
    restore.view()
}

#[tokio::test]
async fn persist_destroy_restore_gives_the_same_tree_and_deltas_chain() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let tree = dir.path().join("tree");
    write(&tree, "venv/bin/tool", b"#!/bin/sh\necho installed\n");
    write(&tree, "data/big", &vec![3u8; 1 << 20]);
    std::os::unix::fs::symlink("tool", tree.join("venv/bin/tool2")).unwrap_or_else(|e| panic!("{e}"));
    let snapshots = local_snapshots(dir.path(), memory(), SnapshotOptions::default());
    let fence = WriterFence::token(1);
    let first = written(
        snapshots
            .persist("s", &tree, &fence)
            .await
            .unwrap_or_else(|e| panic!("{e}")),
    );
    assert_eq!(first.base, None);
    assert_eq!(
        snapshots
            .persist("s", &tree, &fence)
            .await
            .unwrap_or_else(|e| panic!("{e}")),
        Persisted::Unchanged
    );
    write(&tree, "venv/bin/tool", b"#!/bin/sh\necho upgraded\n");
    let second = written(
        snapshots
            .persist("s", &tree, &fence)
            .await
            .unwrap_or_else(|e| panic!("{e}")),
    );
    assert_eq!(second.base.as_deref(), Some(first.id.as_str()));
    assert_eq!(second.entries.len(), 1, "{:?}", second.entries);
    std::fs::remove_dir_all(&tree).unwrap_or_else(|e| panic!("{e}"));
    let restored = dir.path().join("restored");
    std::fs::create_dir_all(&restored).unwrap_or_else(|e| panic!("{e}"));
    let view = restore_into(&snapshots, "s", &restored).await;
    assert_eq!(view_of(&restored).comparable(), view.comparable());
    assert_eq!(
        std::fs::read(restored.join("venv/bin/tool")).unwrap_or_else(|e| panic!("{e}")),
        b"#!/bin/sh\necho upgraded\n"
    );
}

#[tokio::test]
async fn a_long_chain_is_closed_by_a_full_snapshot() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let tree = dir.path().join("tree");
    write(&tree, "base", &vec![1u8; 100_000]);
    let options = SnapshotOptions {
        max_chain: 3,
        ..SnapshotOptions::default()
    };
    let snapshots = local_snapshots(dir.path(), memory(), options);
    let fence = WriterFence::token(1);
    let mut bases = Vec::new();
    for round in 0..6 {
        write(&tree, "counter", format!("{round}").as_bytes());
        let manifest = written(
            snapshots
                .persist("s", &tree, &fence)
                .await
                .unwrap_or_else(|e| panic!("{e}")),
        );
        bases.push(manifest.base.is_some());
    }
    assert_eq!(bases, [false, true, true, true, false, true]);
    // A delta bigger than half the base also forces a full snapshot.
    write(&tree, "huge", &vec![2u8; 200_000]);
    let manifest = written(
        snapshots
            .persist("s", &tree, &fence)
            .await
            .unwrap_or_else(|e| panic!("{e}")),
    );
    assert!(manifest.base.is_some());
    write(&tree, "counter", b"again");
    let manifest = written(
        snapshots
            .persist("s", &tree, &fence)
            .await
            .unwrap_or_else(|e| panic!("{e}")),
    );
    assert_eq!(manifest.base, None, "deltas exceeded 50% of the base");
}

#[tokio::test]
async fn a_stale_fence_cannot_move_the_head_and_its_upload_is_discarded() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let tree = dir.path().join("tree");
    write(&tree, "a", b"from the new holder");
    let snapshots = local_snapshots(dir.path(), memory(), SnapshotOptions::default());
    let new_holder = written(
        snapshots
            .persist("s", &tree, &WriterFence::token(7))
            .await
            .unwrap_or_else(|e| panic!("{e}")),
    );
    write(&tree, "a", b"from the stale holder");
    let err = snapshots
        .persist("s", &tree, &WriterFence::token(6))
        .await
        .err()
        .unwrap_or_else(|| panic!("a stale fence moved the head"));
    assert!(err.is_fenced(), "{err}");
    let (head, _) = snapshots.heads().get("s").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(head.map(|head| head.chain), Some(vec![new_holder.id.clone()]));
    // Also when the stale writer raced past the first check: the head move itself refuses.
    let heads = snapshots.heads();
    let err = heads
        .advance("s", vec!["bogus".to_owned()], &WriterFence::token(6), 3, 0)
        .await
        .err()
        .unwrap_or_else(|| panic!("moved"));
    assert!(err.is_fenced());
    let objects = snapshots
        .blobs()
        .objects_of("s")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(objects.iter().all(|(id, _, _)| *id == new_holder.id), "{objects:?}");
}

#[tokio::test]
async fn the_fence_is_checked_by_the_store_when_it_can() {
    let guard = harness_test_support::services::RedisPrefix::new("snapshot_fence");
    let kv = harness_store::RedisKv::connect(&harness_store::RedisKvConfig {
        url: guard.url().to_owned(),
        key_prefix: format!("{}kv:", guard.prefix()),
        ..harness_store::RedisKvConfig::default()
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let lease = harness_store::RedisLease::connect(
        guard.url(),
        format!("{}lease:", guard.prefix()),
        std::time::Duration::from_secs(30),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let key = harness_core::LeaseKey::new(&["sandbox", "user", "agent", "alice"]);
    let cancel = harness_core::CancellationToken::new();
    let first = harness_core::SessionLease::acquire(&lease, &key, &cancel)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let old_token = first.token().unwrap_or_else(|| panic!("redis leases carry tokens"));
    drop(first);
    let second = harness_core::SessionLease::acquire(&lease, &key, &cancel)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let new_token = second.token().unwrap_or_else(|| panic!("token"));
    assert!(new_token.get() > old_token.get());
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let tree = dir.path().join("tree");
    write(&tree, "a", b"a");
    let snapshots = local_snapshots(dir.path(), Arc::new(kv), SnapshotOptions::default());
    // The stale writer carries no token in the value (as a writer that never wrote before).
    let stale = WriterFence {
        token: None,
        kv: Some(lease.kv_fence(&key, old_token)),
    };
    let err = snapshots
        .persist("s", &tree, &stale)
        .await
        .err()
        .unwrap_or_else(|| panic!("moved"));
    assert!(err.is_fenced(), "{err}");
    let fresh = WriterFence {
        token: Some(new_token.get()),
        kv: Some(lease.kv_fence(&key, new_token)),
    };
    written(
        snapshots
            .persist("s", &tree, &fresh)
            .await
            .unwrap_or_else(|e| panic!("{e}")),
    );
    drop(second);
}

#[tokio::test]
async fn retention_keeps_n_heads_and_what_they_reach() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let tree = dir.path().join("tree");
    write(&tree, "base", &vec![1u8; 100_000]);
    let options = SnapshotOptions {
        max_chain: 2,
        keep: 2,
        gc_grace: std::time::Duration::ZERO,
        ..SnapshotOptions::default()
    };
    let snapshots = local_snapshots(dir.path(), memory(), options);
    let fence = WriterFence::token(1);
    let mut ids = Vec::new();
    for round in 0..7 {
        write(&tree, "counter", format!("{round}").as_bytes());
        ids.push(
            written(
                snapshots
                    .persist("s", &tree, &fence)
                    .await
                    .unwrap_or_else(|e| panic!("{e}")),
            )
            .id,
        );
    }
    // Chains: [0,1,2] [3,4,5] [6]; kept heads: [6] and [3,4,5].
    let deleted = snapshots.collect("s").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(deleted, 6, "three snapshots, two objects each");
    let mut left: Vec<String> = snapshots
        .blobs()
        .objects_of("s")
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|(id, _, _)| id)
        .collect();
    left.sort();
    left.dedup();
    assert_eq!(left, ids[3..].to_vec());
    let restored = dir.path().join("restored");
    std::fs::create_dir_all(&restored).unwrap_or_else(|e| panic!("{e}"));
    restore_into(&snapshots, "s", &restored).await;
    assert_eq!(
        std::fs::read(restored.join("counter")).unwrap_or_else(|e| panic!("{e}")),
        b"6"
    );
}

#[tokio::test]
async fn a_corrupt_archive_is_refused_before_unpacking() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let tree = dir.path().join("tree");
    write(&tree, "a", b"a");
    let snapshots = local_snapshots(dir.path(), memory(), SnapshotOptions::default());
    let manifest = written(
        snapshots
            .persist("s", &tree, &WriterFence::token(1))
            .await
            .unwrap_or_else(|e| panic!("{e}")),
    );
    let path = dir
        .path()
        .join("objects")
        .join(snapshots.blobs().archive_path("s", &manifest.id).to_string());
    let mut bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{e}"));
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{e}"));
    let err = snapshots.fetch("s").await.err().unwrap_or_else(|| panic!("accepted"));
    assert!(err.to_string().contains("corrupt"), "{err}");
}

/// The child of [`kill_9_mid_persist_leaves_the_last_complete_head`]: persists a big tree in
/// a loop until killed. Does nothing in a normal run.
#[tokio::test]
async fn kill_child() {
    let Ok(spec) = std::env::var("HARNESS_SNAPSHOT_KILL_CHILD") else {
        return;
    };
    let (dir, prefix) = spec.split_once('|').unwrap_or_else(|| panic!("spec"));
    let kv = harness_store::RedisKv::connect(&harness_store::RedisKvConfig {
        url: harness_test_support::services::redis_url(),
        key_prefix: prefix.to_owned(),
        ..harness_store::RedisKvConfig::default()
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let dir = Path::new(dir);
    let snapshots = local_snapshots(dir, Arc::new(kv), SnapshotOptions::default());
    let tree = dir.join("tree");
    for round in 0.. {
        write(&tree, "counter", format!("child {round}").as_bytes());
        write(&tree, "fresh", &pseudo_random(round, 24 << 20));
        let _ = snapshots.persist("s", &tree, &WriterFence::token(2)).await;
    }
}

fn pseudo_random(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) as u8
        })
        .collect()
}

#[tokio::test]
async fn kill_9_mid_persist_leaves_the_last_complete_head() {
    let guard = harness_test_support::services::RedisPrefix::new("snapshot_kill");
    let prefix = format!("{}kv:", guard.prefix());
    let kv = harness_store::RedisKv::connect(&harness_store::RedisKvConfig {
        url: guard.url().to_owned(),
        key_prefix: prefix.clone(),
        ..harness_store::RedisKvConfig::default()
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let options = SnapshotOptions {
        gc_grace: std::time::Duration::ZERO,
        ..SnapshotOptions::default()
    };
    let snapshots = local_snapshots(dir.path(), Arc::new(kv), options);
    let tree = dir.path().join("tree");
    write(&tree, "counter", b"parent");
    written(
        snapshots
            .persist("s", &tree, &WriterFence::token(1))
            .await
            .unwrap_or_else(|e| panic!("{e}")),
    );
    for attempt in 0..3u64 {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap_or_else(|e| panic!("{e}")))
            .args(["--exact", "lifecycle::kill_child", "--nocapture", "--test-threads=1"])
            .env(
                "HARNESS_SNAPSHOT_KILL_CHILD",
                format!("{}|{prefix}", dir.path().display()),
            )
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{e}"));
        // Kill it while it uploads: an archive object or a spool file is being written.
        let started = std::time::Instant::now();
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(20 + attempt * 37)).await;
            let spooling =
                std::fs::read_dir(dir.path().join("spool")).is_ok_and(|mut entries| entries.next().is_some());
            if spooling || started.elapsed() > std::time::Duration::from_secs(20) {
                break;
            }
        }
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap_or_else(|e| panic!("{e}")))
                .unwrap_or_else(|| panic!("pid")),
            rustix::process::Signal::KILL,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let _ = child.wait();
        // Whatever the head is, it is complete: every layer is there and verifies.
        let restored = dir.path().join(format!("restored-{attempt}"));
        std::fs::create_dir_all(&restored).unwrap_or_else(|e| panic!("{e}"));
        let restore = snapshots
            .fetch("s")
            .await
            .unwrap_or_else(|e| panic!("the head references a partial object: {e}"))
            .unwrap_or_else(|| panic!("no head"));
        for layer in &restore.layers {
            let archive = std::fs::read(&layer.archive).unwrap_or_else(|e| panic!("{e}"));
            let report = unpack(archive.as_slice(), &restored, &layer.plan);
            assert_eq!(report.error, None);
        }
        let counter = std::fs::read_to_string(restored.join("counter")).unwrap_or_else(|e| panic!("{e}"));
        assert!(counter == "parent" || counter.starts_with("child "), "{counter}");
    }
    // Retention reclaims what the killed writer left unreferenced; the head still restores.
    snapshots.collect("s").await.unwrap_or_else(|e| panic!("{e}"));
    let (head, _) = snapshots.heads().get("s").await.unwrap_or_else(|e| panic!("{e}"));
    let reachable = head.unwrap_or_else(|| panic!("head")).reachable();
    for (id, _, _) in snapshots
        .blobs()
        .objects_of("s")
        .await
        .unwrap_or_else(|e| panic!("{e}"))
    {
        assert!(reachable.contains(&id), "unreferenced {id} survived retention");
    }
    assert!(snapshots.fetch("s").await.unwrap_or_else(|e| panic!("{e}")).is_some());
}

#[cfg(feature = "s3")]
fn moto_server() -> std::path::PathBuf {
    let path = std::env::var_os("HARNESS_TEST_MOTO").map_or_else(
        || std::path::PathBuf::from("/var/tmp/harness-moto/bin/moto_server"),
        Into::into,
    );
    assert!(path.exists(), "{} is missing: run scripts/moto.sh", path.display());
    path
}

#[cfg(feature = "s3")]
struct Moto(std::process::Child, u16);

#[cfg(feature = "s3")]
impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[cfg(feature = "s3")]
fn start_moto() -> Moto {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .unwrap_or_else(|e| panic!("{e}"));
    let child = std::process::Command::new(moto_server())
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let moto = Moto(child, port);
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return moto;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("moto did not start on port {port}");
}

#[cfg(feature = "s3")]
fn create_bucket(port: u16, bucket: &str) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap_or_else(|e| panic!("{e}"));
    write!(
        stream,
        "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap_or_else(|e| panic!("{e}"));
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
}

#[cfg(feature = "s3")]
#[tokio::test]
async fn s3_store_round_trips_with_conditional_create() {
    let moto = start_moto();
    create_bucket(moto.1, "snapshots");
    let config = StoreConfig::S3(harness_snapshot::S3Config {
        bucket: "snapshots".to_owned(),
        region: "us-east-1".to_owned(),
        endpoint: Some(format!("http://127.0.0.1:{}", moto.1)),
        access_key_id: Some("test".to_owned()),
        secret_access_key: Some("test".to_owned()),
        session_token: None,
        allow_http: true,
    });
    let objects = config.open().unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let snapshots = Snapshots::new(
        BlobStore::new(objects, "snapshots"),
        Heads::new(memory()),
        dir.path().join("spool"),
        SnapshotOptions::default(),
    );
    let tree = dir.path().join("tree");
    write(&tree, "pkg/installed.txt", b"survives");
    write(&tree, "pkg/big", &pseudo_random(9, 12 << 20));
    let manifest = written(
        snapshots
            .persist("s", &tree, &WriterFence::token(1))
            .await
            .unwrap_or_else(|e| panic!("{e}")),
    );
    // Conditional create: a second manifest of the same id is refused, the first stays.
    let mut forged = manifest.clone();
    forged.entries.clear();
    let err = snapshots
        .blobs()
        .put_manifest("s", &forged)
        .await
        .err()
        .unwrap_or_else(|| panic!("the manifest was overwritten"));
    assert!(matches!(err, harness_snapshot::SnapshotError::Exists { .. }), "{err}");
    assert_eq!(
        snapshots
            .blobs()
            .manifest("s", &manifest.id)
            .await
            .unwrap_or_else(|e| panic!("{e}")),
        manifest
    );
    let restored = dir.path().join("restored");
    std::fs::create_dir_all(&restored).unwrap_or_else(|e| panic!("{e}"));
    let view = restore_into(&snapshots, "s", &restored).await;
    assert_eq!(view_of(&restored).comparable(), view.comparable());
}

/// Two scopes, each with 7 snapshots of which retention (keep 2, max chain 2) may delete 3
/// (6 objects): 12 deletable objects in all.
async fn store_with_garbage(dir: &Path, kv: Arc<dyn KvStore>) -> Snapshots {
    let options = SnapshotOptions {
        max_chain: 2,
        keep: 2,
        gc_grace: std::time::Duration::ZERO,
        ..SnapshotOptions::default()
    };
    let snapshots = local_snapshots(dir, kv, options);
    let fence = WriterFence::token(1);
    for scope in ["s1", "s2"] {
        let tree = dir.join(format!("tree-{scope}"));
        write(&tree, "base", &vec![1u8; 100_000]);
        for round in 0..7 {
            write(&tree, "counter", format!("{round}").as_bytes());
            written(
                snapshots
                    .persist(scope, &tree, &fence)
                    .await
                    .unwrap_or_else(|e| panic!("{e}")),
            );
        }
    }
    snapshots
}

async fn assert_reachable_intact(snapshots: &Snapshots, dir: &Path) {
    for scope in ["s1", "s2"] {
        let (head, _) = snapshots.heads().get(scope).await.unwrap_or_else(|e| panic!("{e}"));
        let head = head.unwrap_or_else(|| panic!("no head"));
        let objects = snapshots
            .blobs()
            .objects_of(scope)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        for id in head.reachable() {
            let count = objects.iter().filter(|(object, _, _)| *object == id).count();
            assert_eq!(count, 2, "reachable snapshot {id} of {scope} lost an object");
        }
        assert_eq!(objects.len(), 2 * head.reachable().len(), "{scope}: garbage left");
        let restored = dir.join(format!("restored-{scope}"));
        std::fs::create_dir_all(&restored).unwrap_or_else(|e| panic!("{e}"));
        restore_into(snapshots, scope, &restored).await;
        assert_eq!(
            std::fs::read(restored.join("counter")).unwrap_or_else(|e| panic!("{e}")),
            b"6"
        );
    }
}

/// Retention of a store runs in one process at a time (the store's retention lease, as
/// memory consolidation does): two concurrent runs of two processes sharing the store and
/// the lease backend delete each unreachable object once between them — one does the work,
/// the other finds nothing left or the lease busy — and nothing a kept head reaches goes.
#[tokio::test]
async fn two_concurrent_retention_runs_do_the_work_once_and_keep_what_is_reachable() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let kv = memory();
    let first = store_with_garbage(dir.path(), kv.clone()).await;
    let second = local_snapshots(dir.path(), kv, first.options().clone());
    let lease = harness_store::LocalLease::default();
    let wait = std::time::Duration::from_secs(60);
    let (a, b) = tokio::join!(first.collect_all(&lease, wait), second.collect_all(&lease, wait));
    let deleted = |outcome: &harness_snapshot::Retention| match outcome {
        harness_snapshot::Retention::Done { deleted, scopes } => {
            assert_eq!(*scopes, 2);
            *deleted
        }
        harness_snapshot::Retention::Busy => 0,
    };
    let (a, b) = (a.unwrap_or_else(|e| panic!("{e}")), b.unwrap_or_else(|e| panic!("{e}")));
    assert_eq!(deleted(&a) + deleted(&b), 12, "{a:?} {b:?}");
    assert_eq!(deleted(&a).max(deleted(&b)), 12, "the work was split: {a:?} {b:?}");
    assert_reachable_intact(&first, dir.path()).await;
}

/// While another process holds the store's retention lease, a run does nothing and says
/// so ([`Retention::Busy`]); once it is free, the run does the work.
#[tokio::test]
async fn a_retention_run_leaves_the_store_to_the_lease_holder() {
    use harness_core::SessionLease;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let snapshots = store_with_garbage(dir.path(), memory()).await;
    let lease = harness_store::LocalLease::default();
    let held = lease
        .acquire(&snapshots.retention_key(), &harness_core::CancellationToken::new())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let short = std::time::Duration::from_millis(100);
    assert_eq!(
        snapshots
            .collect_all(&lease, short)
            .await
            .unwrap_or_else(|e| panic!("{e}")),
        harness_snapshot::Retention::Busy
    );
    assert_eq!(
        snapshots
            .collect_exclusive("s1", &lease, short)
            .await
            .unwrap_or_else(|e| panic!("{e}")),
        harness_snapshot::Retention::Busy
    );
    let objects = snapshots
        .blobs()
        .objects_of("s1")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(objects.len(), 14, "a busy run deleted something");
    held.release().await;
    assert_eq!(
        snapshots
            .collect_all(&lease, std::time::Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("{e}")),
        harness_snapshot::Retention::Done { scopes: 2, deleted: 12 }
    );
    assert_reachable_intact(&snapshots, dir.path()).await;
}

/// The manifest records the projection hash it was persisted with; the head's is readable
/// without fetching the archives.
#[tokio::test]
async fn the_manifest_records_the_projection_hash() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let tree = dir.path().join("tree");
    write(&tree, "AGENTS.md", b"projected");
    let snapshots = local_snapshots(dir.path(), memory(), SnapshotOptions::default());
    assert_eq!(
        snapshots.head_projection("s").await.unwrap_or_else(|e| panic!("{e}")),
        None
    );
    let manifest = written(
        snapshots
            .persist_with_projection("s", &tree, &WriterFence::token(1), "abc123")
            .await
            .unwrap_or_else(|e| panic!("{e}")),
    );
    assert_eq!(manifest.projection_hash, "abc123");
    let (head, hash) = snapshots
        .head_projection("s")
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("no head"));
    assert_eq!((head.chain, hash.as_str()), (vec![manifest.id], "abc123"));
}
