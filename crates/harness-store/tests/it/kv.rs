//! One conformance suite for every [`KvStore`]: in memory always, Redis with `--features redis`.

use harness_store::{InMemoryKv, KvStore, StoreError};
use std::sync::Arc;

async fn run_all(kv: Arc<dyn KvStore>) {
    round_trip_and_versions(&*kv).await;
    create_only_and_cas(&*kv).await;
    binary_values(&*kv).await;
    append_is_atomic(Arc::clone(&kv)).await;
    listing_by_prefix_pages(&*kv).await;
    no_aba_after_delete(&*kv).await;
    concurrent_cas_increments(Arc::clone(&kv)).await;
    invalid_keys(&*kv).await;
}

async fn round_trip_and_versions(kv: &dyn KvStore) {
    assert_eq!(kv.get("rt/a").await.unwrap(), None);
    assert_eq!(kv.head("rt/a").await.unwrap(), None);
    let v1 = kv.put("rt/a", b"hello", None).await.unwrap();
    assert!(v1 > 0);
    let item = kv.get("rt/a").await.unwrap().unwrap();
    assert_eq!((item.value.as_slice(), item.version), (b"hello".as_slice(), v1));
    assert!(item.modified_ms > 0);
    let head = kv.head("rt/a").await.unwrap().unwrap();
    assert_eq!((head.key.as_str(), head.version, head.size), ("rt/a", v1, 5));
    let v2 = kv.put("rt/a", b"", None).await.unwrap();
    assert!(v2 > v1, "versions increase");
    assert_eq!(kv.get("rt/a").await.unwrap().unwrap().value, b"");
    assert!(kv.delete("rt/a").await.unwrap());
    assert!(!kv.delete("rt/a").await.unwrap());
    assert_eq!(kv.get("rt/a").await.unwrap(), None);
}

async fn create_only_and_cas(kv: &dyn KvStore) {
    let v1 = kv.put("cas/a", b"1", Some(0)).await.unwrap();
    match kv.put("cas/a", b"x", Some(0)).await {
        Err(StoreError::Conflict { expected: 0, found, .. }) => assert_eq!(found, Some(v1)),
        other => panic!("create-only over an existing key: {other:?}"),
    }
    let v2 = kv.put("cas/a", b"2", Some(v1)).await.unwrap();
    match kv.put("cas/a", b"3", Some(v1)).await {
        Err(err @ StoreError::Conflict { .. }) => {
            assert!(err.is_retryable());
            assert!(err.to_string().contains("version conflict"), "{err}");
        }
        other => panic!("stale CAS: {other:?}"),
    }
    match kv.put("cas/missing", b"3", Some(v2)).await {
        Err(StoreError::Conflict { found: None, .. }) => {}
        other => panic!("CAS on a missing key: {other:?}"),
    }
    assert_eq!(kv.get("cas/a").await.unwrap().unwrap().value, b"2");
    kv.delete("cas/a").await.unwrap();
}

async fn binary_values(kv: &dyn KvStore) {
    let all: Vec<u8> = (0..=255u8).collect();
    kv.put("bin/all", &all, None).await.unwrap();
    assert_eq!(kv.get("bin/all").await.unwrap().unwrap().value, all);
    let big: Vec<u8> = (0..6 * 1024 * 1024).map(|i: u32| (i % 251) as u8).collect();
    kv.put("bin/big", &big, None).await.unwrap();
    assert_eq!(kv.get("bin/big").await.unwrap().unwrap().value, big);
    assert_eq!(kv.head("bin/big").await.unwrap().unwrap().size, big.len() as u64);
    kv.put("bin/ünï 😀 key", b"\xff\x00\xfe", None).await.unwrap();
    assert_eq!(kv.get("bin/ünï 😀 key").await.unwrap().unwrap().value, b"\xff\x00\xfe");
    for key in ["bin/all", "bin/big", "bin/ünï 😀 key"] {
        kv.delete(key).await.unwrap();
    }
}

async fn append_is_atomic(kv: Arc<dyn KvStore>) {
    let mut tasks = Vec::new();
    for task in 0..8u8 {
        let kv = Arc::clone(&kv);
        tasks.push(tokio::spawn(async move {
            for _ in 0..20 {
                kv.append("app/log", &[task; 3]).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let value = kv.get("app/log").await.unwrap().unwrap().value;
    assert_eq!(value.len(), 8 * 20 * 3);
    for chunk in value.chunks(3) {
        assert!(
            chunk.iter().all(|byte| *byte == chunk[0]),
            "interleaved append: {chunk:?}"
        );
    }
    kv.delete("app/log").await.unwrap();
}

async fn listing_by_prefix_pages(kv: &dyn KvStore) {
    for i in 0..25 {
        kv.put(&format!("ls/dir/{i:02}"), &[i], None).await.unwrap();
    }
    kv.put("ls/dirx", b"x", None).await.unwrap();
    kv.put("ls/di", b"x", None).await.unwrap();
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = kv.list("ls/dir/", after.as_deref(), 10).await.unwrap();
        assert!(page.entries.len() <= 10);
        seen.extend(page.entries.iter().map(|entry| entry.key.clone()));
        match page.next_after {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    let expected: Vec<String> = (0..25).map(|i| format!("ls/dir/{i:02}")).collect();
    assert_eq!(seen, expected);
    let all = kv.list("ls/", None, 100).await.unwrap();
    assert_eq!(all.entries.len(), 27);
    assert_eq!(all.next_after, None);
    assert_eq!(all.entries[0].size, 1);
    assert!(kv.list("nothing/", None, 10).await.unwrap().entries.is_empty());
    for entry in all.entries {
        kv.delete(&entry.key).await.unwrap();
    }
    assert!(kv.list("ls/", None, 10).await.unwrap().entries.is_empty());
}

async fn no_aba_after_delete(kv: &dyn KvStore) {
    let v1 = kv.put("aba/k", b"1", Some(0)).await.unwrap();
    kv.delete("aba/k").await.unwrap();
    let v2 = kv.put("aba/k", b"2", Some(0)).await.unwrap();
    assert_ne!(v1, v2, "a recreated key must not reuse a version");
    assert!(matches!(
        kv.put("aba/k", b"3", Some(v1)).await,
        Err(StoreError::Conflict { .. })
    ));
    kv.delete("aba/k").await.unwrap();
}

async fn concurrent_cas_increments(kv: Arc<dyn KvStore>) {
    const TASKS: u64 = 8;
    const EACH: u64 = 15;
    kv.put("cnt/n", b"0", None).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let kv = Arc::clone(&kv);
        tasks.push(tokio::spawn(async move {
            let mut done = 0;
            while done < EACH {
                let item = kv.get("cnt/n").await.unwrap().unwrap();
                let n: u64 = std::str::from_utf8(&item.value).unwrap().parse().unwrap();
                match kv
                    .put("cnt/n", (n + 1).to_string().as_bytes(), Some(item.version))
                    .await
                {
                    Ok(_) => done += 1,
                    Err(StoreError::Conflict { .. }) => tokio::task::yield_now().await,
                    Err(other) => panic!("{other}"),
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let value = kv.get("cnt/n").await.unwrap().unwrap().value;
    assert_eq!(String::from_utf8(value).unwrap(), (TASKS * EACH).to_string());
    kv.delete("cnt/n").await.unwrap();
}

async fn invalid_keys(kv: &dyn KvStore) {
    for key in [String::new(), "a\0b".to_owned(), "k".repeat(9000)] {
        assert!(
            matches!(kv.put(&key, b"x", None).await, Err(StoreError::InvalidKey { .. })),
            "{key:?}"
        );
        assert!(matches!(kv.get(&key).await, Err(StoreError::InvalidKey { .. })));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_memory_kv_conforms() {
    run_all(Arc::new(InMemoryKv::default())).await;
}

#[tokio::test]
async fn in_memory_kv_ignores_fences() {
    // Writers in one process cannot go stale: the fence is documented as ignored.
    let kv = InMemoryKv::default();
    let fence = harness_store::KvFence {
        counter: "any".to_owned(),
        token: harness_core::FencingToken::new(1),
    };
    let v1 = kv.put_fenced("f/a", b"1", Some(0), &fence).await.unwrap();
    kv.append_fenced("f/a", b"2", &fence).await.unwrap();
    assert!(matches!(
        kv.put_fenced("f/a", b"x", Some(v1), &fence).await,
        Err(StoreError::Conflict { .. })
    ));
    assert_eq!(kv.get("f/a").await.unwrap().unwrap().value, b"12");
}

/// The KV-level fence of a turn's shared writes, for every store that has one: a write,
/// create, append or delete carrying `stale` (older than the lease's newest token, `current`)
/// is refused atomically and changes nothing; `current` writes.
#[cfg(any(feature = "redis", feature = "postgres"))]
async fn stale_fences_change_nothing(
    store: &dyn KvStore,
    stale: &harness_store::KvFence,
    current: &harness_store::KvFence,
) {
    let v1 = store
        .put_fenced("t/transcript", b"one\n", Some(0), current)
        .await
        .unwrap();
    match store.put_fenced("t/transcript", b"stale", None, stale).await {
        Err(StoreError::Fenced {
            token, current: newest, ..
        }) => assert_eq!((token, newest), (stale.token, current.token)),
        other => panic!("a stale put must be refused: {other:?}"),
    }
    assert!(matches!(
        store.put_fenced("t/new", b"stale", Some(0), stale).await,
        Err(StoreError::Fenced { .. })
    ));
    assert!(store.get("t/new").await.unwrap().is_none());
    assert!(matches!(
        store.append_fenced("t/transcript", b"stale\n", stale).await,
        Err(StoreError::Fenced { .. })
    ));
    let item = store.get("t/transcript").await.unwrap().unwrap();
    assert_eq!((item.value.as_slice(), item.version), (b"one\n".as_slice(), v1));
    store.append_fenced("t/transcript", b"two\n", current).await.unwrap();
    assert!(matches!(
        store.put_fenced("t/transcript", b"x", Some(v1), current).await,
        Err(StoreError::Conflict { .. })
    ));
    assert_eq!(store.get("t/transcript").await.unwrap().unwrap().value, b"one\ntwo\n");
    // Deletes are fenced too: the stale writer cannot remove shared data.
    match store.delete_fenced("t/transcript", stale).await {
        Err(StoreError::Fenced { token, .. }) => assert_eq!(token, stale.token),
        other => panic!("a stale delete must be refused: {other:?}"),
    }
    assert_eq!(store.get("t/transcript").await.unwrap().unwrap().value, b"one\ntwo\n");
    assert!(store.delete_fenced("t/transcript", current).await.unwrap());
    assert!(store.get("t/transcript").await.unwrap().is_none());
    assert!(!store.delete_fenced("t/transcript", current).await.unwrap());
}

#[cfg(feature = "redis")]
mod redis {
    use super::run_all;
    use harness_store::{KvStore, RedisKv, RedisKvConfig};
    use std::sync::Arc;

    /// A store on the test Redis under a fresh random prefix. Fails (never skips) when Redis is
    /// not reachable: CI starts one.
    pub(crate) async fn test_store() -> RedisKv {
        let url = harness_test_support::services::redis_url();
        let config = RedisKvConfig {
            url: url.clone(),
            key_prefix: harness_test_support::services::redis_prefix("kv"),
            ..RedisKvConfig::default()
        };
        match RedisKv::connect(&config).await {
            Ok(store) => store,
            Err(err) => panic!(
                "the Redis tests need a Redis server at {url} (set HARNESS_TEST_REDIS_URL); connecting failed: {}",
                harness_core::error_chain(&err)
            ),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn redis_kv_conforms() {
        let store = test_store().await;
        let suite = async {
            run_all(Arc::new(store.clone())).await;
            store.put("left/over", b"x", None).await.unwrap();
        };
        // Clean the server up whether the suite passes or not.
        let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(suite)).await;
        let removed = store.purge().await.unwrap();
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
        assert!(removed >= 1);
        assert!(store.list("", None, 10).await.unwrap().entries.is_empty());
    }

    #[tokio::test]
    async fn unreachable_redis_is_a_clear_unavailable_error() {
        let config = RedisKvConfig {
            url: "redis://127.0.0.1:1".to_owned(),
            connect_timeout: std::time::Duration::from_secs(1),
            ..RedisKvConfig::default()
        };
        match RedisKv::connect(&config).await {
            Err(err @ harness_store::StoreError::Unavailable { .. }) => assert!(err.is_retryable()),
            other => panic!("{other:?}"),
        }
    }

    /// The KV-level fence for a turn's shared writes: a write carrying a token older than
    /// the lease's newest one is refused atomically and changes nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fenced_writes_refuse_stale_tokens() {
        use harness_core::{CancellationToken, LeaseKey, SessionLease};
        use harness_store::RedisLease;
        let store = test_store().await;
        let url = harness_test_support::services::redis_url();
        let lease = RedisLease::connect(
            &url,
            format!("{}lease:", store.key_prefix()),
            std::time::Duration::from_secs(5),
        )
        .await
        .unwrap();
        let suite = async {
            let key = LeaseKey::new(&["agent", "user", "session"]);
            let never = CancellationToken::new();
            let first = lease.acquire(&key, &never).await.unwrap();
            let stale = lease.kv_fence(&key, first.token().unwrap());
            first.release().await;
            let second = lease.acquire(&key, &never).await.unwrap();
            let current = lease.kv_fence(&key, second.token().unwrap());
            super::stale_fences_change_nothing(&store, &stale, &current).await;
            second.release().await;
        };
        let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(suite)).await;
        store.purge().await.unwrap();
        lease.purge().await.unwrap();
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::run_all;
    use harness_core::{CancellationToken, LeaseKey, SessionLease};
    use harness_store::{KvStore, PostgresBackend, PostgresConfig, PostgresKv, PostgresLease, StoreError};
    use std::sync::Arc;
    use std::time::Duration;

    fn url() -> String {
        harness_test_support::services::postgres_url()
    }

    /// A backend with tables under a fresh random prefix. Fails (never skips) when
    /// PostgreSQL is not reachable.
    async fn backend() -> PostgresBackend {
        let config = PostgresConfig {
            url: url(),
            table_prefix: harness_test_support::services::pg_prefix("kv"),
            ..PostgresConfig::default()
        };
        PostgresBackend::connect(&config).await.unwrap_or_else(|err| {
            panic!(
                "the PostgreSQL tests need PostgreSQL at {}: {}",
                url(),
                harness_core::error_chain(&err)
            )
        })
    }

    async fn cleaned(backend: &PostgresBackend, suite: impl std::future::Future<Output = ()>) {
        let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(suite)).await;
        backend.drop_all().await.unwrap();
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn postgres_kv_conforms() {
        let backend = backend().await;
        let store = PostgresKv::new(backend.clone(), "conformance:");
        let neighbour = PostgresKv::new(backend.clone(), "other:");
        cleaned(&backend, async {
            neighbour.put("left/over", b"theirs", None).await.unwrap();
            run_all(Arc::new(store.clone())).await;
            // Namespaces are separate: the suite never saw the neighbour's key, and purging
            // one namespace leaves the other alone.
            store.put("left/over", b"x", None).await.unwrap();
            assert!(store.purge().await.unwrap() >= 1);
            assert!(store.list("", None, 10).await.unwrap().entries.is_empty());
            assert_eq!(neighbour.get("left/over").await.unwrap().unwrap().value, b"theirs");
        })
        .await;
    }

    #[tokio::test]
    async fn unreachable_postgres_is_a_clear_unavailable_error() {
        let config = PostgresConfig {
            url: "postgres://postgres@127.0.0.1:1/test".to_owned(),
            acquire_timeout: Duration::from_secs(1),
            ..PostgresConfig::default()
        };
        match PostgresKv::connect(&config, "x:").await {
            Err(err @ StoreError::Unavailable { .. }) => assert!(err.is_retryable()),
            other => panic!("{other:?}"),
        }
    }

    /// The KV-level fence checks the PostgreSQL lease row in the write's own transaction: a
    /// stale token can neither write, append nor delete, and changes nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fenced_writes_refuse_stale_tokens() {
        let backend = backend().await;
        let store = PostgresKv::new(backend.clone(), "fence:");
        let lease = PostgresLease::new(backend.clone(), Duration::from_secs(5));
        cleaned(&backend, async {
            let key = LeaseKey::new(&["agent", "user", "session"]);
            let never = CancellationToken::new();
            let first = lease.acquire(&key, &never).await.unwrap();
            let stale = lease.kv_fence(&key, first.token().unwrap());
            first.release().await;
            let second = lease.acquire(&key, &never).await.unwrap();
            let current = lease.kv_fence(&key, second.token().unwrap());
            super::stale_fences_change_nothing(&store, &stale, &current).await;
            second.release().await;
        })
        .await;
    }
}
