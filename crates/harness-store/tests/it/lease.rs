//! The session lease: a generic conformance suite every `SessionLease` backend passes
//! ([`lease_conformance`]), run here on `LocalLease` and `FileLease`, plus the properties of
//! the one-host backends (FIFO order, lock-file naming and clean-up).

use harness_core::{CancellationToken, LeaseError, LeaseKey, SessionLease};
use harness_store::{FileLease, LocalLease};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

fn key(parts: &[&str]) -> LeaseKey {
    LeaseKey::new(parts)
}

/// What every `SessionLease` must do. Uses no sleeps and no paused time, so it also runs
/// against leases in Redis or PostgreSQL.
pub(crate) async fn lease_conformance(lease: Arc<dyn SessionLease>) {
    let never = CancellationToken::new();

    // 1. One holder per key at a time: concurrent turns never overlap.
    let session = key(&["agent", "alice", "s1"]);
    let inside = Arc::new(AtomicUsize::new(0));
    let turns = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (lease, session, inside, turns) = (
            Arc::clone(&lease),
            session.clone(),
            Arc::clone(&inside),
            Arc::clone(&turns),
        );
        tasks.spawn(async move {
            let guard = lease.acquire(&session, &CancellationToken::new()).await.unwrap();
            assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders of one key");
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
            inside.fetch_sub(1, Ordering::SeqCst);
            turns.fetch_add(1, Ordering::SeqCst);
            guard.release().await;
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    assert_eq!(turns.load(Ordering::SeqCst), 8);

    // 2. Keys are independent, including keys a file extension would confuse.
    let similar = ["v1", "v1.2", "v1.3", "..hidden", "v1.2.lock"];
    let mut held = Vec::new();
    for id in similar {
        let guard = lease.acquire(&key(&["agent", "alice", id]), &never).await;
        held.push(guard.unwrap_or_else(|err| panic!("session {id:?}: {err}")));
    }
    drop(held);

    // 3. Waiting honours cancellation, and the abandoned waiter leaves nothing behind.
    let holder = lease.acquire(&session, &never).await.unwrap();
    let cancel = CancellationToken::new();
    let waiter = {
        let (lease, session, cancel) = (Arc::clone(&lease), session.clone(), cancel.clone());
        tokio::spawn(async move { lease.acquire(&session, &cancel).await })
    };
    cancel.cancel();
    assert!(matches!(waiter.await.unwrap(), Err(LeaseError::Cancelled)));
    // An already cancelled call does not get the lease even when it is free.
    drop(holder);
    assert!(matches!(
        lease.acquire(&session, &cancel).await,
        Err(LeaseError::Cancelled)
    ));

    // 4. Released by `release` or by drop, the lease can be taken again at once.
    let guard = lease.acquire(&session, &never).await.unwrap();
    guard.release().await;
    let guard = lease.acquire(&session, &never).await.unwrap();
    assert!(!guard.lost().is_cancelled(), "a fresh guard is not lost");
    drop(guard);
    lease.acquire(&session, &never).await.unwrap().release().await;
}

#[tokio::test]
async fn local_lease_conforms() {
    let lease = LocalLease::default();
    lease_conformance(Arc::new(lease.clone())).await;
    assert_eq!(lease.active_keys(), 0, "idle keys are not kept");
}

#[tokio::test]
async fn file_lease_conforms() {
    let dir = tempfile::tempdir().unwrap();
    lease_conformance(Arc::new(FileLease::new(dir.path()))).await;
}

/// Lock files do not pile up: idle ones are swept from a fan-out directory when a later
/// acquisition lands there, while held ones are never touched.
#[tokio::test]
async fn idle_lock_files_are_swept_and_held_ones_kept() {
    let dir = tempfile::tempdir().unwrap();
    let lease = FileLease::new(dir.path()).sweep_interval(std::time::Duration::ZERO);
    let never = CancellationToken::new();
    let held = lease.acquire(&key(&["a", "u", "held"]), &never).await.unwrap();
    for n in 0..2000 {
        lease
            .acquire(&key(&["a", "u", &format!("s{n}")]), &never)
            .await
            .unwrap()
            .release()
            .await;
    }
    let files = lock_files(dir.path());
    // At most the last-used file per directory, plus the held one.
    assert!(files.len() <= 257, "{} lock files", files.len());
    assert!(
        lease.lock_path(&key(&["a", "u", "held"])).exists(),
        "a held lock file is kept"
    );
    // The held lease still excludes others after the sweeps.
    let cancel = CancellationToken::new();
    cancel.cancel();
    let other = FileLease::new(dir.path());
    assert!(matches!(
        other.acquire(&key(&["a", "u", "held"]), &cancel).await,
        Err(LeaseError::Cancelled)
    ));
    drop(held);
    // With the default interval a process sweeps each directory at most once a minute.
    let lazy = FileLease::new(dir.path());
    assert_eq!(
        harness_store::DEFAULT_SWEEP_INTERVAL,
        std::time::Duration::from_secs(60)
    );
    lazy.acquire(&key(&["a", "u", "s0"]), &never)
        .await
        .unwrap()
        .release()
        .await;
}

fn lock_files(dir: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    for bucket in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        for file in std::fs::read_dir(bucket.path()).into_iter().flatten().flatten() {
            found.push(file.file_name().to_string_lossy().into_owned());
        }
    }
    found
}

/// Waiters are served in arrival order (paused time only orders the arrivals).
async fn check_fifo(lease: Arc<dyn SessionLease>) {
    let session = key(&["agent", "bob", "s"]);
    let never = CancellationToken::new();
    let first = lease.acquire(&session, &never).await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..5 {
        let (lease, session, order) = (Arc::clone(&lease), session.clone(), Arc::clone(&order));
        waiters.push(tokio::spawn(async move {
            let guard = lease.acquire(&session, &CancellationToken::new()).await.unwrap();
            order.lock().unwrap().push(i);
            guard.release().await;
        }));
        // Lets waiter `i` queue up before waiter `i + 1` is spawned.
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    first.release().await;
    for waiter in waiters {
        waiter.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3, 4]);
}

#[tokio::test(start_paused = true)]
async fn local_lease_is_fifo() {
    check_fifo(Arc::new(LocalLease::default())).await;
}

#[tokio::test(start_paused = true)]
async fn file_lease_is_fifo_in_process() {
    let dir = tempfile::tempdir().unwrap();
    check_fifo(Arc::new(FileLease::new(dir.path()))).await;
}

#[tokio::test]
async fn cancelled_waiters_leak_no_slots() {
    let lease = LocalLease::default();
    let session = key(&["a", "u", "s"]);
    let holder = lease.acquire(&session, &CancellationToken::new()).await.unwrap();
    for _ in 0..100 {
        let cancel = CancellationToken::new();
        let waiter = {
            let (lease, session, cancel) = (lease.clone(), session.clone(), cancel.clone());
            tokio::spawn(async move { lease.acquire(&session, &cancel).await })
        };
        tokio::task::yield_now().await;
        cancel.cancel();
        assert!(matches!(waiter.await.unwrap(), Err(LeaseError::Cancelled)));
    }
    // A dropped (not cancelled) acquire future also leaves.
    let never = CancellationToken::new();
    let mut dropped = Box::pin(lease.acquire(&session, &never));
    assert!(futures::poll!(dropped.as_mut()).is_pending());
    drop(dropped);
    assert_eq!(lease.active_keys(), 1, "only the holder's key");
    drop(holder);
    assert_eq!(lease.active_keys(), 0);
}

#[test]
fn lock_file_names_never_collide() {
    let lease = FileLease::new("/locks");
    let ids = ["v1", "v1.2", "v1.3", "..hidden", "v1.lock", "V1"];
    let mut paths: Vec<_> = ids
        .iter()
        .map(|id| lease.lock_path(&key(&["agent", "user", id])))
        .collect();
    for path in &paths {
        let relative = path.strip_prefix("/locks").unwrap();
        assert_eq!(relative.components().count(), 2, "one fan-out level: {path:?}");
        let bucket = relative.parent().unwrap().to_string_lossy().into_owned();
        assert_eq!(bucket.len(), 2, "256 buckets");
    }
    paths.sort();
    paths.dedup();
    assert_eq!(paths.len(), ids.len());
}

/// Two `FileLease`s on one directory stand for two processes: they exclude each other.
#[tokio::test]
async fn file_leases_on_one_directory_exclude_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = (FileLease::new(dir.path()), FileLease::new(dir.path()));
    let session = key(&["agent", "alice", "v1.2"]);
    let held = one.acquire(&session, &CancellationToken::new()).await.unwrap();
    let cancel = CancellationToken::new();
    let waiter = {
        let (two, session, cancel) = (two.clone(), session.clone(), cancel.clone());
        tokio::spawn(async move { two.acquire(&session, &cancel).await.map(drop) })
    };
    // The other "process" can take an unrelated session meanwhile.
    two.acquire(&key(&["agent", "alice", "v1.3"]), &CancellationToken::new())
        .await
        .unwrap()
        .release()
        .await;
    held.release().await;
    waiter.await.unwrap().unwrap();
    drop(cancel);
}
