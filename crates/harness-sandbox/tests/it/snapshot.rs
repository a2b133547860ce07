//! Snapshots through the sandbox: two managers on different replica directories sharing one
//! state store and one snapshot store; the four restore branches; hostile imports unpacked
//! inside the sandbox.

use crate::support::{Scratch, config};
use harness_core::{CancellationToken, SessionLease};
use harness_fs::{CallScope, IsolationScope, ShellRequest};
use harness_sandbox::{
    Acquired, NamespaceProvider, Network, PersistPolicy, Projection, RestoreBranch, SandboxManager, SandboxScope,
    ScopeKey, SnapshottingManager, restore_in_sandbox,
};
use harness_snapshot::{BlobStore, Heads, Layer, Persisted, Restore, SnapshotOptions, Snapshots, StoreConfig};
use harness_store::{InMemoryKv, KvStore, LocalLease};
use sha2::Digest;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

struct Replica {
    manager: SnapshottingManager,
    work: std::path::PathBuf,
}

fn replica(scratch: &Scratch, name: &str, lease: &Arc<dyn SessionLease>, states: &Arc<dyn KvStore>) -> Replica {
    replica_with(scratch, name, lease, states, PersistPolicy::default())
}

fn replica_with(
    scratch: &Scratch,
    name: &str,
    lease: &Arc<dyn SessionLease>,
    states: &Arc<dyn KvStore>,
    policy: PersistPolicy,
) -> Replica {
    replica_on(scratch, name, lease, states, states, policy)
}

/// A replica whose instance records (`instances`) may be its own while the snapshot heads
/// (`heads`) are shared, as in the binary (instances are process-local there).
fn replica_on(
    scratch: &Scratch,
    name: &str,
    lease: &Arc<dyn SessionLease>,
    instances: &Arc<dyn KvStore>,
    states: &Arc<dyn KvStore>,
    policy: PersistPolicy,
) -> Replica {
    let provider = Arc::new(NamespaceProvider::new(config(scratch)));
    let manager = SandboxManager::new(
        provider,
        lease.clone(),
        instances.clone(),
        format!("snapshot-test-{name}"),
    );
    let objects = StoreConfig::Local {
        dir: scratch.join("objects"),
    }
    .open()
    .unwrap();
    let snapshots = Snapshots::new(
        BlobStore::new(objects, "snapshots"),
        Heads::new(states.clone()),
        scratch.join(&format!("{name}-spool")),
        SnapshotOptions::default(),
    );
    let dir = scratch.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o711)).unwrap();
    Replica {
        manager: SnapshottingManager::new(manager, snapshots, policy),
        work: dir.join("alice"),
    }
}

async fn sh(acquired: &Acquired, command: &str) -> String {
    let out = acquired
        .bound
        .sandbox()
        .shell()
        .execute(ShellRequest::new(command).timeout(Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{command}: {} {}", out.stdout, out.stderr);
    out.stdout
}

fn key() -> ScopeKey {
    ScopeKey::for_call(
        SandboxScope::User,
        &CallScope::parse(IsolationScope::User, "agent", "alice", "s1").unwrap(),
    )
}

#[tokio::test]
async fn a_work_tree_follows_its_key_across_replicas() {
    let scratch = Scratch::new();
    let lease: Arc<dyn SessionLease> = Arc::new(LocalLease::default());
    let states: Arc<dyn KvStore> = Arc::new(InMemoryKv::default());
    let a = replica(&scratch, "replica-a", &lease, &states);
    let b = replica(&scratch, "replica-b", &lease, &states);
    assert_eq!(a.manager.start().await.unwrap(), 0);
    let cancel = CancellationToken::new();
    let key = key();

    let first = a
        .manager
        .acquire(&key, &a.work, Network::Offline, &cancel)
        .await
        .unwrap();
    assert_eq!(first.branch, RestoreBranch::Cold);
    sh(
        &first,
        "mkdir -p .local/bin empty/dir && printf '#!/bin/sh\\necho tool-ok\\n' > .local/bin/tool && chmod 755 .local/bin/tool && ln -s tool .local/bin/alias && echo 'héllo' > 'ünïcode name.txt'",
    )
    .await;
    let persisted = a.manager.release(first.bound).await.unwrap();
    assert!(matches!(persisted, Some(Persisted::Written { .. })), "{persisted:?}");
    a.manager.evict_idle().await.unwrap();

    // Replica B has never seen the key: the head is imported inside its new sandbox.
    let on_b = b
        .manager
        .acquire(&key, &b.work, Network::Offline, &cancel)
        .await
        .unwrap();
    assert_eq!(on_b.branch, RestoreBranch::Snapshot);
    assert_eq!(sh(&on_b, ".local/bin/alias").await, "tool-ok\n");
    assert_eq!(
        sh(&on_b, "cat 'ünïcode name.txt'; test -d empty/dir && echo dir").await,
        "héllo\ndir\n"
    );
    // Unpacked as the sandbox's uid (the files are its own).
    assert_eq!(sh(&on_b, "stat -c %u .local/bin/tool").await, sh(&on_b, "id -u").await);
    sh(&on_b, "echo from-b > b.txt && rm 'ünïcode name.txt'").await;
    b.manager.release(on_b.bound).await.unwrap();
    b.manager.evict_idle().await.unwrap();

    // Back on A: its own tree is stale (its marker is not the head): re-imported.
    let back = a
        .manager
        .acquire(&key, &a.work, Network::Offline, &cancel)
        .await
        .unwrap();
    assert_eq!(back.branch, RestoreBranch::Snapshot);
    assert_eq!(sh(&back, "cat b.txt; ls").await, "from-b\nb.txt\nempty\n");
    a.manager.release(back.bound).await.unwrap();

    // Released but warm: the live instance is reused.
    let warm = a
        .manager
        .acquire(&key, &a.work, Network::Offline, &cancel)
        .await
        .unwrap();
    assert_eq!(warm.branch, RestoreBranch::Warm);
    a.manager.release(warm.bound).await.unwrap();
    a.manager.evict_idle().await.unwrap();

    // Stopped: a new instance on the tree this host holds, which is current.
    let stopped = a
        .manager
        .acquire(&key, &a.work, Network::Offline, &cancel)
        .await
        .unwrap();
    assert_eq!(stopped.branch, RestoreBranch::Stopped);
    assert_eq!(sh(&stopped, "cat b.txt").await, "from-b\n");
    stopped.bound.sandbox().shutdown().await.unwrap();
    drop(stopped);
    a.manager.evict_idle().await.unwrap();
    b.manager.evict_idle().await.unwrap();
}

#[tokio::test]
async fn two_concurrent_acquires_across_replicas_give_one_holder() {
    let scratch = Scratch::new();
    let lease: Arc<dyn SessionLease> = Arc::new(LocalLease::default());
    let states: Arc<dyn KvStore> = Arc::new(InMemoryKv::default());
    let a = replica(&scratch, "replica-a", &lease, &states);
    let b = replica(&scratch, "replica-b", &lease, &states);
    let cancel = CancellationToken::new();
    let key = key();
    let holder = a
        .manager
        .acquire(&key, &a.work, Network::Offline, &cancel)
        .await
        .unwrap();
    let waiting = b.manager.acquire(&key, &b.work, Network::Offline, &cancel);
    tokio::pin!(waiting);
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut waiting)
            .await
            .is_err(),
        "a second replica got the key while the first holds it"
    );
    sh(&holder, "echo one > holder.txt").await;
    a.manager.release(holder.bound).await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(sh(&second, "cat holder.txt").await, "one\n");
    drop(second);
    a.manager.evict_idle().await.unwrap();
    b.manager.evict_idle().await.unwrap();
}

fn layer(dir: &Path, tar: Vec<u8>) -> Layer {
    let archive = zstd::stream::encode_all(tar.as_slice(), 3).unwrap();
    let path = dir.join(format!("layer-{}.tar.zst", uuid::Uuid::new_v4()));
    std::fs::write(&path, &archive).unwrap();
    let manifest: harness_snapshot::Manifest = serde_json::from_value(serde_json::json!({
        "format": "harness-snapshot/1", "id": "hostile", "base": null, "created_ms": 0,
        "archive": { "sha256": "", "bytes": 0, "uncompressed": 0, "entries": 0 }, "entries": []
    }))
    .unwrap();
    Layer {
        manifest,
        plan: harness_snapshot::UnpackPlan {
            sha256: hex::encode(sha2::Sha256::digest(&archive)),
            deleted: Vec::new(),
            limits: harness_snapshot::UnpackLimits::default(),
        },
        archive: tempfile::TempPath::try_from_path(path).unwrap(),
    }
}

fn raw(builder: &mut tar::Builder<Vec<u8>>, kind: tar::EntryType, name: &str, link: &str, data: &[u8]) {
    let mut header = tar::Header::new_gnu();
    let gnu = header.as_gnu_mut().unwrap();
    gnu.name[..name.len()].copy_from_slice(name.as_bytes());
    gnu.linkname[..link.len()].copy_from_slice(link.as_bytes());
    header.set_entry_type(kind);
    header.set_mode(0o6755);
    header.set_size(data.len() as u64);
    header.set_cksum();
    builder.append(&header, data).unwrap();
}

#[tokio::test]
async fn a_hostile_import_runs_inside_the_sandbox_and_leaves_canaries_intact() {
    let scratch = Scratch::new();
    let canary_dir = scratch.join("canaries");
    std::fs::create_dir_all(&canary_dir).unwrap();
    let canary = canary_dir.join("canary");
    std::fs::write(&canary, "intact").unwrap();
    let provider = NamespaceProvider::new(config(&scratch));
    let sandbox = harness_sandbox::SandboxProvider::create(
        &provider,
        harness_sandbox::CreateRequest::new(scratch.join("work"), "tests", "snapshot/hostile"),
    )
    .await
    .unwrap();
    let host = canary.display().to_string();
    let mut builder = tar::Builder::new(Vec::new());
    raw(
        &mut builder,
        tar::EntryType::Regular,
        "../canaries/canary",
        "",
        b"owned",
    );
    raw(&mut builder, tar::EntryType::Regular, &host, "", b"owned");
    raw(
        &mut builder,
        tar::EntryType::Symlink,
        "esc",
        canary_dir.to_str().unwrap(),
        b"",
    );
    raw(&mut builder, tar::EntryType::Regular, "esc/canary", "", b"owned");
    raw(&mut builder, tar::EntryType::Link, "hard", &host, b"");
    raw(&mut builder, tar::EntryType::Char, "null", "", b"");
    raw(&mut builder, tar::EntryType::Regular, "suid", "", b"#!/bin/sh\n");
    let hostile = layer(scratch.path(), builder.into_inner().unwrap());
    let restore = Restore {
        layers: vec![hostile],
        head: harness_snapshot::Head::default(),
    };
    let reports = restore_in_sandbox(sandbox.as_ref(), &restore, Vec::new())
        .await
        .unwrap();
    assert_eq!(reports[0].refused, 5, "{:?}", reports[0]);
    assert_eq!(std::fs::read_to_string(&canary).unwrap(), "intact");
    assert_eq!(std::fs::read_dir(&canary_dir).unwrap().count(), 1);
    let work = sandbox.state().work_tree;
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(work.join("suid")).unwrap().permissions());
    assert_eq!(mode & 0o7777, 0o755);
    // A compression bomb stops at the ratio limit, inside the sandbox too.
    let mut bomb = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(0o644);
    header.set_size(512 << 20);
    header.set_path("bomb").unwrap();
    header.set_cksum();
    bomb.append(&header, std::io::Read::take(std::io::repeat(0), 512 << 20))
        .unwrap();
    let restore = Restore {
        layers: vec![layer(scratch.path(), bomb.into_inner().unwrap())],
        head: harness_snapshot::Head::default(),
    };
    let err = restore_in_sandbox(sandbox.as_ref(), &restore, Vec::new())
        .await
        .unwrap_err();
    assert!(format!("{err:?}").contains("expands more than 50:1"), "{err:?}");
    sandbox.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_warm_instance_whose_tree_another_replica_moved_on_is_restored_not_reused() {
    let scratch = Scratch::new();
    let lease: Arc<dyn SessionLease> = Arc::new(LocalLease::default());
    let states: Arc<dyn KvStore> = Arc::new(InMemoryKv::default());
    let own = |_: ()| -> Arc<dyn KvStore> { Arc::new(InMemoryKv::default()) };
    let a = replica_on(
        &scratch,
        "replica-a",
        &lease,
        &own(()),
        &states,
        PersistPolicy::default(),
    );
    let b = replica_on(
        &scratch,
        "replica-b",
        &lease,
        &own(()),
        &states,
        PersistPolicy::default(),
    );
    let cancel = CancellationToken::new();
    let key = key();
    let first = a
        .manager
        .acquire(&key, &a.work, Network::Offline, &cancel)
        .await
        .unwrap();
    sh(&first, "echo a1 > a.txt").await;
    a.manager.release(first.bound).await.unwrap();
    // A keeps its instance warm; B continues the key and moves the head.
    let on_b = b
        .manager
        .acquire(&key, &b.work, Network::Offline, &cancel)
        .await
        .unwrap();
    assert_eq!(on_b.branch, RestoreBranch::Snapshot);
    sh(&on_b, "echo b1 > b.txt && rm a.txt").await;
    b.manager.release(on_b.bound).await.unwrap();
    let back = a
        .manager
        .acquire(&key, &a.work, Network::Offline, &cancel)
        .await
        .unwrap();
    assert_eq!(back.branch, RestoreBranch::Snapshot, "a stale warm instance was reused");
    assert_eq!(sh(&back, "ls").await, "b.txt\n");
    drop(back);
    a.manager.evict_idle().await.unwrap();
    b.manager.evict_idle().await.unwrap();
}

#[tokio::test]
async fn persist_on_eviction_saves_what_release_did_not() {
    let scratch = Scratch::new();
    let lease: Arc<dyn SessionLease> = Arc::new(LocalLease::default());
    let states: Arc<dyn KvStore> = Arc::new(InMemoryKv::default());
    let on_evict_only = PersistPolicy {
        on_release: false,
        on_evict: true,
        on_idle: None,
    };
    let a = replica_with(&scratch, "replica-a", &lease, &states, on_evict_only);
    let b = replica(&scratch, "replica-b", &lease, &states);
    let cancel = CancellationToken::new();
    let key = key();
    let scope = harness_snapshot::scope_name(key.as_str());
    let first = a
        .manager
        .acquire(&key, &a.work, Network::Offline, &cancel)
        .await
        .unwrap();
    sh(&first, "echo kept > evicted.txt").await;
    assert_eq!(a.manager.release(first.bound).await.unwrap(), None);
    assert!(
        a.manager.snapshots().heads().get(&scope).await.unwrap().0.is_none(),
        "release persisted"
    );
    a.manager.evict_idle().await.unwrap();
    assert!(
        a.manager.snapshots().heads().get(&scope).await.unwrap().0.is_some(),
        "eviction did not persist"
    );
    let on_b = b
        .manager
        .acquire(&key, &b.work, Network::Offline, &cancel)
        .await
        .unwrap();
    assert_eq!(on_b.branch, RestoreBranch::Snapshot);
    assert_eq!(sh(&on_b, "cat evicted.txt").await, "kept\n");
    drop(on_b);
    b.manager.evict_idle().await.unwrap();
}

#[tokio::test]
async fn eviction_skips_a_key_another_replica_holds() {
    let scratch = Scratch::new();
    let lease: Arc<dyn SessionLease> = Arc::new(LocalLease::default());
    let states: Arc<dyn KvStore> = Arc::new(InMemoryKv::default());
    let a = replica(&scratch, "replica-a", &lease, &states);
    let b = replica(&scratch, "replica-b", &lease, &states);
    let cancel = CancellationToken::new();
    let key = key();
    let first = a
        .manager
        .acquire(&key, &a.work, Network::Offline, &cancel)
        .await
        .unwrap();
    sh(&first, "echo one > one.txt").await;
    a.manager.release(first.bound).await.unwrap();
    let holder = b
        .manager
        .acquire(&key, &b.work, Network::Offline, &cancel)
        .await
        .unwrap();
    // A's idle instance cannot be persisted while B holds the key: eviction still ends.
    tokio::time::timeout(
        Duration::from_secs(60),
        a.manager.evict_idle_within(Duration::from_millis(200)),
    )
    .await
    .expect("eviction waited for a lease another replica holds")
    .unwrap();
    assert!(a.manager.manager().idle_keys().is_empty());
    drop(holder);
    b.manager.evict_idle().await.unwrap();
}

#[tokio::test]
async fn a_restore_larger_than_the_send_window_streams_through_the_init() {
    let scratch = Scratch::new();
    let lease: Arc<dyn SessionLease> = Arc::new(LocalLease::default());
    let states: Arc<dyn KvStore> = Arc::new(InMemoryKv::default());
    let a = replica(&scratch, "replica-a", &lease, &states);
    let b = replica(&scratch, "replica-b", &lease, &states);
    let cancel = CancellationToken::new();
    let key = key();
    let first = a
        .manager
        .acquire(&key, &a.work, Network::Offline, &cancel)
        .await
        .unwrap();
    // 40 MiB that zstd cannot shrink: the archive is well past the 16 MiB window.
    let digest = sh(
        &first,
        "head -c 41943040 /dev/urandom > big.bin && sha256sum big.bin | cut -d' ' -f1",
    )
    .await;
    let persisted = a.manager.release(first.bound).await.unwrap();
    let Some(Persisted::Written { manifest, .. }) = persisted else {
        panic!("not persisted: {persisted:?}");
    };
    assert!(manifest.archive.bytes > 32 << 20, "{}", manifest.archive.bytes);
    a.manager.evict_idle().await.unwrap();
    let on_b = b
        .manager
        .acquire(&key, &b.work, Network::Offline, &cancel)
        .await
        .unwrap();
    assert_eq!(on_b.branch, RestoreBranch::Snapshot);
    assert_eq!(sh(&on_b, "sha256sum big.bin | cut -d' ' -f1").await, digest);
    drop(on_b);
    b.manager.evict_idle().await.unwrap();
}

#[tokio::test]
async fn the_projection_is_applied_to_every_new_instance_and_only_to_new_ones() {
    let scratch = Scratch::new();
    let lease: Arc<dyn SessionLease> = Arc::new(LocalLease::default());
    let states: Arc<dyn KvStore> = Arc::new(InMemoryKv::default());
    let mut a = replica(&scratch, "replica-a", &lease, &states);
    let path = harness_fs::WsPath::parse("AGENTS.md").unwrap();
    a.manager = a.manager.with_projection(vec![(path, b"projected v1\n".to_vec())]);
    let cancel = CancellationToken::new();
    let key = key();
    let cold = a
        .manager
        .acquire(&key, &a.work, Network::Offline, &cancel)
        .await
        .unwrap();
    assert_eq!(cold.branch, RestoreBranch::Cold);
    assert_eq!(sh(&cold, "cat AGENTS.md").await, "projected v1\n");
    // The agent edits it; a warm reuse keeps the edit.
    sh(&cold, "echo edited > AGENTS.md").await;
    a.manager.release(cold.bound).await.unwrap();
    let warm = a
        .manager
        .acquire(&key, &a.work, Network::Offline, &cancel)
        .await
        .unwrap();
    assert_eq!(warm.branch, RestoreBranch::Warm);
    assert_eq!(sh(&warm, "cat AGENTS.md").await, "edited\n");
    a.manager.release(warm.bound).await.unwrap();
    a.manager.evict_idle().await.unwrap();
    // A new instance (here: restored from its snapshot on B) gets the projection again.
    let mut b = replica(&scratch, "replica-b", &lease, &states);
    let path = harness_fs::WsPath::parse("AGENTS.md").unwrap();
    b.manager = b.manager.with_projection(vec![(path, b"projected v2\n".to_vec())]);
    let fresh = b
        .manager
        .acquire(&key, &b.work, Network::Offline, &cancel)
        .await
        .unwrap();
    assert_eq!(fresh.branch, RestoreBranch::Snapshot);
    assert_eq!(sh(&fresh, "cat AGENTS.md").await, "projected v2\n");
    drop(fresh);
    b.manager.evict_idle().await.unwrap();
}

/// The projection of a host directory's roots, as `[sandbox] projection_roots` gives it.
fn roots(workspace: &Path) -> Projection {
    Projection::Roots {
        workspace: workspace.to_owned(),
        roots: vec!["AGENTS.md".to_owned(), "skills".to_owned(), "missing".to_owned()],
    }
}

async fn head_projection(replica: &Replica, key: &ScopeKey) -> String {
    let scope = harness_snapshot::scope_name(key.as_str());
    replica
        .manager
        .snapshots()
        .head_projection(&scope)
        .await
        .unwrap()
        .expect("a head")
        .1
}

/// The projection comes from the host workspace's roots and its hash goes into each
/// snapshot's manifest: a new instance restored from a snapshot whose projection is
/// unchanged is not re-projected (the agent's edit stays); once the host files change, the
/// next new instance gets them (stopped branch, the tree on disk being the head); and a new
/// instance on an empty tree is always projected, whatever an earlier instance held (the
/// original's hash reset on the wrong instance).
#[tokio::test]
async fn a_changed_projection_is_reapplied_on_a_new_instance_an_unchanged_one_is_not() {
    let scratch = Scratch::new();
    let lease: Arc<dyn SessionLease> = Arc::new(LocalLease::default());
    let states: Arc<dyn KvStore> = Arc::new(InMemoryKv::default());
    let host = scratch.join("host-workspace");
    std::fs::create_dir_all(host.join("skills/review")).unwrap();
    std::fs::write(host.join("AGENTS.md"), "agents v1\n").unwrap();
    std::fs::write(host.join("skills/review/SKILL.md"), "skill v1\n").unwrap();
    std::fs::write(host.join("not-projected.txt"), "host only\n").unwrap();
    let mut a = replica(&scratch, "replica-a", &lease, &states);
    a.manager = a.manager.with_projection_source(roots(&host));
    let mut b = replica(&scratch, "replica-b", &lease, &states);
    b.manager = b.manager.with_projection_source(roots(&host));
    let cancel = CancellationToken::new();
    let key = key();
    let v1 = roots(&host).collect().await.unwrap();
    assert_eq!(v1.files.len(), 2, "{v1:?}");

    let cold = a
        .manager
        .acquire(&key, &a.work, Network::Offline, &cancel)
        .await
        .unwrap();
    assert_eq!((cold.branch, cold.projected), (RestoreBranch::Cold, true));
    assert_eq!(
        sh(
            &cold,
            "cat AGENTS.md skills/review/SKILL.md; test ! -e not-projected.txt && echo only-roots"
        )
        .await,
        "agents v1\nskill v1\nonly-roots\n"
    );
    sh(&cold, "echo edited > AGENTS.md").await;
    a.manager.release(cold.bound).await.unwrap();
    a.manager.evict_idle().await.unwrap();
    assert_eq!(
        head_projection(&a, &key).await,
        v1.hash,
        "the manifest records the projection"
    );

    // Unchanged projection, new instance restored from the snapshot: not re-projected.
    let restored = b
        .manager
        .acquire(&key, &b.work, Network::Offline, &cancel)
        .await
        .unwrap();
    assert_eq!((restored.branch, restored.projected), (RestoreBranch::Snapshot, false));
    assert_eq!(sh(&restored, "cat AGENTS.md").await, "edited\n");
    b.manager.release(restored.bound).await.unwrap();
    b.manager.evict_idle().await.unwrap();
    assert_eq!(head_projection(&b, &key).await, v1.hash);

    // The host's files change: the next new instance (A's tree on disk is the head) gets them.
    std::fs::write(host.join("AGENTS.md"), "agents v2\n").unwrap();
    let v2 = roots(&host).collect().await.unwrap();
    assert_ne!(v1.hash, v2.hash);
    let stopped = a
        .manager
        .acquire(&key, &a.work, Network::Offline, &cancel)
        .await
        .unwrap();
    assert_eq!((stopped.branch, stopped.projected), (RestoreBranch::Stopped, true));
    assert_eq!(
        sh(&stopped, "cat AGENTS.md skills/review/SKILL.md").await,
        "agents v2\nskill v1\n"
    );
    a.manager.release(stopped.bound).await.unwrap();
    assert_eq!(
        head_projection(&a, &key).await,
        v2.hash,
        "the new projection is recorded"
    );
    a.manager.evict_idle().await.unwrap();

    // A replica that never persists: its fresh instance on an empty tree is projected even
    // though an instance of the same key held this projection before.
    let quiet = PersistPolicy {
        on_release: false,
        on_evict: false,
        on_idle: None,
    };
    let mut c = replica_on(
        &scratch,
        "replica-c",
        &lease,
        &states,
        &(Arc::new(InMemoryKv::default()) as Arc<dyn KvStore>),
        quiet,
    );
    c.manager = c.manager.with_projection_source(roots(&host));
    let other = ScopeKey::for_call(
        SandboxScope::User,
        &CallScope::parse(IsolationScope::User, "agent", "bob", "s1").unwrap(),
    );
    let first = c
        .manager
        .acquire(&other, &c.work, Network::Offline, &cancel)
        .await
        .unwrap();
    assert_eq!((first.branch, first.projected), (RestoreBranch::Cold, true));
    c.manager.release(first.bound).await.unwrap();
    c.manager.evict_idle().await.unwrap();
    std::fs::remove_dir_all(&c.work).unwrap();
    std::fs::create_dir_all(&c.work).unwrap();
    let fresh = c
        .manager
        .acquire(&other, &c.work, Network::Offline, &cancel)
        .await
        .unwrap();
    assert_eq!((fresh.branch, fresh.projected), (RestoreBranch::Cold, true));
    assert_eq!(sh(&fresh, "cat AGENTS.md").await, "agents v2\n");
    drop(fresh);
    c.manager.evict_idle().await.unwrap();
}

/// `on_idle`: a key released without a persist and left unbound for the idle time is
/// persisted by the manager's idle task (under a fresh hold of its lease), with no eviction
/// and no shutdown; another replica then restores it.
#[tokio::test]
async fn a_sandbox_left_idle_is_persisted_without_waiting_for_shutdown() {
    let scratch = Scratch::new();
    let lease: Arc<dyn SessionLease> = Arc::new(LocalLease::default());
    let states: Arc<dyn KvStore> = Arc::new(InMemoryKv::default());
    let idle_only = PersistPolicy {
        on_release: false,
        on_evict: false,
        on_idle: Some(Duration::from_millis(300)),
    };
    let a = replica_with(&scratch, "replica-a", &lease, &states, idle_only);
    let a_work = a.work.clone();
    let a = Arc::new(a.manager);
    let task = SnapshottingManager::spawn_idle_persist(&a).expect("an idle task");
    let b = replica(&scratch, "replica-b", &lease, &states);
    let cancel = CancellationToken::new();
    let key = key();
    let scope = harness_snapshot::scope_name(key.as_str());

    let first = a.acquire(&key, &a_work, Network::Offline, &cancel).await.unwrap();
    sh(&first, "echo idle > idle.txt").await;
    assert_eq!(a.release(first.bound).await.unwrap(), None, "release persisted");
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while a.snapshots().heads().get(&scope).await.unwrap().0.is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the idle sandbox was never persisted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The task ends between two rounds when asked (the binder does so at shutdown).
    a.stop_idle_persist();
    tokio::time::timeout(Duration::from_secs(120), task)
        .await
        .expect("the idle task did not stop")
        .unwrap();

    let on_b = b
        .manager
        .acquire(&key, &b.work, Network::Offline, &cancel)
        .await
        .unwrap();
    assert_eq!(on_b.branch, RestoreBranch::Snapshot);
    assert_eq!(sh(&on_b, "cat idle.txt").await, "idle\n");
    drop(on_b);
    b.manager.evict_idle().await.unwrap();
    a.evict_idle().await.unwrap();
}
