//! Fenced writes: a filesystem view whose shared writes carry a session lease's fencing token.

use harness_core::{AgentId, SessionId, UserId};
use harness_fs::{CallScope, CallWorkspace, Filesystem, IsolationScope, LocalFs};
use std::sync::Arc;

fn scope() -> CallScope {
    CallScope::new(
        IsolationScope::User,
        AgentId::from_static("main"),
        UserId::from_static("alice"),
        SessionId::from_static("s1"),
    )
    .unwrap()
}

/// A backend that cannot check fences has no fenced view, and a fenced call workspace over
/// it is the plain one.
#[tokio::test]
async fn local_filesystems_have_no_fenced_view() {
    let dir = tempfile::tempdir().unwrap();
    let root: Arc<dyn Filesystem> = Arc::new(LocalFs::new(dir.path()).unwrap());
    let fence = harness_store::KvFence {
        counter: "c".to_owned(),
        token: harness_core::FencingToken::new(1),
    };
    assert!(root.fenced(&fence).is_none());
    let call = CallWorkspace::fenced(&root, &scope(), None, &fence);
    assert_eq!(call.user.describe(), call.unfenced.describe());
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_token_writes_nothing_through_any_view() {
    use super::p;
    use harness_core::{CancellationToken, LeaseKey, SessionLease};
    use harness_fs::{CompositeFs, FsError, KvFs, WriteMode};
    use harness_store::{KvStore, RedisKv, RedisKvConfig, RedisLease, StoreError};
    let url = harness_test_support::services::redis_url();
    let prefix = harness_test_support::services::redis_prefix("fs_fence");
    let config = RedisKvConfig {
        url: url.clone(),
        key_prefix: prefix.clone(),
        ..RedisKvConfig::default()
    };
    let store = RedisKv::connect(&config).await.unwrap();
    let lease = RedisLease::connect(&url, format!("{prefix}lease:"), std::time::Duration::from_secs(5))
        .await
        .unwrap();
    let kv: Arc<dyn KvStore> = Arc::new(store.clone());
    let suite = async {
        let dir = tempfile::tempdir().unwrap();
        let local: Arc<dyn Filesystem> = Arc::new(LocalFs::new(dir.path()).unwrap());
        let root: Arc<dyn Filesystem> =
            Arc::new(CompositeFs::new(local).mount(p("agents"), Arc::new(KvFs::new(Arc::clone(&kv), p("fs")))));
        let key = LeaseKey::new(&["main", "alice", "s1"]);
        let never = CancellationToken::new();
        let first = lease.acquire(&key, &never).await.unwrap();
        let stale = lease.kv_fence(&key, first.token().unwrap());
        first.release().await;
        let second = lease.acquire(&key, &never).await.unwrap();
        let current = lease.kv_fence(&key, second.token().unwrap());

        let transcript = p("agents/main/sessions/s1.jsonl");
        let fresh = CallWorkspace::fenced(&root, &scope(), None, &current);
        fresh.user.append(&transcript, b"one\n").await.unwrap();
        let old = CallWorkspace::fenced(&root, &scope(), None, &stale);
        for (view, name) in [(&old.user, "user"), (&old.layered, "layered")] {
            let refused = view.append(&transcript, b"stale\n").await;
            let fenced = |err: &FsError| {
                std::error::Error::source(err)
                    .and_then(|source| source.downcast_ref::<StoreError>())
                    .is_some_and(|source| matches!(source, StoreError::Fenced { .. }))
            };
            assert!(refused.as_ref().is_err_and(fenced), "{name}: {refused:?}");
            let refused = view.write(&transcript, b"stale\n", WriteMode::Overwrite).await;
            assert!(refused.as_ref().is_err_and(fenced), "{name}: {refused:?}");
        }
        // Nor can it delete shared data.
        let refused = old.user.delete(&transcript).await;
        assert!(
            refused.as_ref().is_err_and(|err| std::error::Error::source(err)
                .and_then(|source| source.downcast_ref::<StoreError>())
                .is_some_and(|source| matches!(source, StoreError::Fenced { .. }))),
            "delete: {refused:?}"
        );
        // Files outside the shared store are not fenced (one host's disk is under its OS lock).
        old.user
            .write(&p("notes.md"), b"local", WriteMode::Overwrite)
            .await
            .unwrap();
        // The unfenced layer still writes (the session index, merged by compare-and-set).
        old.unfenced.append(&p("agents/x.txt"), b"ok").await.unwrap();
        assert_eq!(fresh.user.read(&transcript).await.unwrap(), b"one\n");
        second.release().await;
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(suite)).await;
    store.purge().await.unwrap();
    lease.purge().await.unwrap();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
