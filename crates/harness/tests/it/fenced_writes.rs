//! A turn whose lease token is stale writes nothing to the shared store: not the transcript,
//! not the state (Redis state + composite filesystem, as `[state] kind = "redis"` sets up).

#![cfg(feature = "redis")]

use crate::support::*;
use async_trait::async_trait;
use harness::filesystem::{FilesystemConfig, FilesystemKind, open};
use harness_core::{
    CancellationToken, FencingToken, LeaseError, LeaseGuard, LeaseKey, LeaseRelease, SessionLease, StateStore,
};
use harness_models::ScriptedModel;
use harness_store::{KvStore, RedisKv, RedisKvConfig, RedisStateConfig, RedisStateStore};
use std::sync::Arc;

/// A lease that grants at once with a fixed token, as a replica paused past its expiry
/// would still believe it holds the lease.
struct StaleLease(FencingToken);

struct NoRelease;

#[async_trait]
impl LeaseRelease for NoRelease {
    async fn release(self: Box<Self>) {}
    fn release_now(self: Box<Self>) {}
}

#[async_trait]
impl SessionLease for StaleLease {
    async fn acquire(&self, _key: &LeaseKey, _cancel: &CancellationToken) -> Result<LeaseGuard, LeaseError> {
        Ok(LeaseGuard::new(
            Some(self.0),
            CancellationToken::new(),
            Box::new(NoRelease),
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_replica_appends_nothing_to_the_shared_transcript() {
    let url = harness_test_support::services::redis_url();
    // Everything the test writes (state, lease, shared files) is under this prefix, deleted
    // when the guard drops, passed or failed.
    let keys = harness_test_support::services::RedisPrefix::new("fence");
    let prefix = keys.prefix().to_owned();
    let fs_config = FilesystemConfig {
        kind: FilesystemKind::Composite,
        redis_url: url.clone(),
        key_prefix: format!("{prefix}kv:"),
        ..FilesystemConfig::default()
    };
    let store = RedisStateStore::connect(&RedisStateConfig {
        url: url.clone(),
        key_prefix: format!("{prefix}state:"),
        ..RedisStateConfig::default()
    })
    .await
    .expect("Redis must answer at HARNESS_TEST_REDIS_URL");
    let lease = store.lease(std::time::Duration::from_secs(30));
    let kv = RedisKv::connect(&RedisKvConfig {
        url: url.clone(),
        key_prefix: format!("{prefix}kv:"),
        ..RedisKvConfig::default()
    })
    .await
    .unwrap();
    let fencer = lease.clone();
    let fence: harness::state::WriteFence = Arc::new(move |key: &LeaseKey, token| fencer.kv_fence(key, token));
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let store: Arc<dyn StateStore> = Arc::new(store);

    let suite = async {
        // Replica B takes the session (token 1) and completes a turn.
        let model_b = ScriptedModel::new().reply_text("B's answer");
        let replica_b = builder()
            .workspace(dir_b.path())
            .filesystem(open(&fs_config, dir_b.path(), "harness").await.unwrap())
            .state_store(Arc::clone(&store))
            .session_lease(Arc::new(lease.clone()))
            .write_fence(Arc::clone(&fence))
            .model(model_b)
            .build()
            .unwrap();
        replica_b.call("from B", ctx("u", "s")).await.unwrap();
        let keys = kv.list("", None, 1000).await.unwrap().entries;
        let transcript_key = keys
            .iter()
            .map(|entry| entry.key.clone())
            .find(|key| key.ends_with("s.log.jsonl"))
            .expect("B's transcript in Redis");
        let transcript_key = transcript_key.as_str();
        let before = kv.get(transcript_key).await.unwrap().unwrap();
        // The index was written under B's lease (fenced), before the call returned: no
        // flush, no write-behind after the lease was released.
        let index_key = keys
            .iter()
            .map(|entry| entry.key.clone())
            .find(|key| key.ends_with("/sessions.json"))
            .unwrap_or_else(|| panic!("B's session index in Redis when its call returns: {keys:?}"));
        let index_before = kv.get(&index_key).await.unwrap().unwrap();
        assert!(String::from_utf8_lossy(&index_before.value).contains("\"s\""));
        // Replica A still believes it holds the lease with token 0, older than B's.
        let model_a = ScriptedModel::new().reply_text("A's late answer");
        let replica_a = builder()
            .workspace(dir_a.path())
            .filesystem(open(&fs_config, dir_a.path(), "harness").await.unwrap())
            .state_store(Arc::clone(&store))
            .session_lease(Arc::new(StaleLease(FencingToken::new(0))))
            .write_fence(Arc::clone(&fence))
            .model(model_a)
            .build()
            .unwrap();
        let err = replica_a.call("from A", ctx("u", "s")).await.unwrap_err();
        let chain = harness_core::error_chain(&err);
        assert!(chain.contains("session lease passed to another holder"), "{chain}");
        let after = kv.get(transcript_key).await.unwrap().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&after.value),
            String::from_utf8_lossy(&before.value),
            "nothing of A's turn was appended"
        );
        replica_a.shutdown(std::time::Duration::from_secs(5)).await;
        assert_eq!(
            kv.get(&index_key).await.unwrap().unwrap().version,
            index_before.version,
            "A wrote nothing to the index, not even at shutdown"
        );
        // B continues from its own state and transcript.
        let model_b2 = ScriptedModel::new().reply_text("B again");
        let replica_b2 = builder()
            .workspace(dir_b.path())
            .filesystem(open(&fs_config, dir_b.path(), "harness").await.unwrap())
            .state_store(Arc::clone(&store))
            .session_lease(Arc::new(lease.clone()))
            .write_fence(Arc::clone(&fence))
            .model(model_b2.clone())
            .build()
            .unwrap();
        replica_b2.call("B continues", ctx("u", "s")).await.unwrap();
        let texts: Vec<String> = model_b2.requests()[0].messages.iter().map(|m| m.text()).collect();
        assert_eq!(texts, ["from B", "B's answer", "B continues"]);
    };
    suite.await;
    drop(keys);
}
